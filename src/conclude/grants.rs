//! The changes a finished run makes to the allowlist: a grant for each conformant pair
//! whose run sent what the project's files say, a revocation for each nonconformant one,
//! nothing for an inconclusive one; the file itself is written by
//! [`conform_gate::allowlist::update`].

use std::sync::Arc;
use std::time::Duration;

use std::path::Path;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform_allowlist::{DifferentialEvidence, Entry, Evidence, Revocation, RulesOut};
use conform_check::verdict::Verdict;
use conform_config::{ProviderConfig, ProviderIdentity, Suite};
use conform_gate::allowlist::Change;

use crate::run::{PairVerdict, PreparedSuite, RunResult, Target};

/// Which allowlist a run writes, and so what it may put there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// The allowlist production reads: simulated providers never enter it, neither as
    /// grants nor as revocations.
    Real,
    /// `conform demo`'s own allowlist, beside its report: simulated providers are
    /// written, marked `simulated`, and permit nothing.
    Demo,
}

/// The changes a finished run implies: grants for conformant pairs, revocations for
/// nonconformant ones, nothing for inconclusive ones, and nothing at all when the run
/// was interrupted. Simulated providers change only a [`Destination::Demo`] allowlist.
/// A conformant pair whose run sent other than what the files say is withheld
/// ([`withheld`]). A grant is valid for `validity` from the run's first call.
pub fn changes_from_run(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    report: &Path,
    validity: Duration,
    destination: Destination,
) -> Vec<Change> {
    if !result.complete {
        return Vec::new();
    }
    let run = Concluded {
        result,
        targets,
        report: report.display().to_string(),
        validity,
    };
    (result.verdicts.iter())
        .filter_map(|v| {
            let suite = &suites[v.suite_index].suite;
            let config = &targets[v.provider_index].endpoint.config;
            if config.is_simulated() && destination == Destination::Real {
                return None;
            }
            match v.verdict {
                Verdict::Inconclusive => None,
                Verdict::Nonconformant => Some(Change::Revoke(run.revocation(v, suite, config))),
                Verdict::Conformant => Some(run.grant(v, suite, config)),
            }
        })
        .collect()
}

/// A run's time as the allowlist writes it.
fn stamp(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// A complete run, as its changes name it.
struct Concluded<'a> {
    result: &'a RunResult,
    targets: &'a [Arc<Target>],
    /// Its `report.json`, the evidence each change points to.
    report: String,
    validity: Duration,
}

impl Concluded<'_> {
    /// The revocation of a nonconformant pair, with its reasons.
    fn revocation(&self, v: &PairVerdict, suite: &Suite, config: &ProviderConfig) -> Revocation {
        let result = self.result;
        Revocation {
            suite: suite.name.clone(),
            provider: config.name.clone(),
            run_id: result.run_id.clone(),
            at: stamp(result.finished_at),
            reasons: conform_check::verdict::Reason::names(&v.reasons),
            report: self.report.clone(),
            suite_digest: Some(suite.digest().to_string()),
            provider_digest: Some(config.identity().digest()),
            attestation: None,
        }
    }

    /// The grant of a conformant pair, or why it is withheld.
    fn grant(&self, v: &PairVerdict, suite: &Suite, config: &ProviderConfig) -> Change {
        let (result, report, validity) = (self.result, &self.report, self.validity);
        let t = &v.tally;
        let simulated = config.is_simulated();
        let repeats = if suite.cases.is_empty() {
            0
        } else {
            (t.planned / suite.cases.len() as u64) as u32
        };
        let reference = reference_of(t, self.targets);
        let why =
            withheld(config, suite, repeats).or_else(|| reference.and_then(withheld_reference));
        if let Some(why) = why {
            return Change::Withhold {
                suite: suite.name.clone(),
                provider: config.name.clone(),
                why,
            };
        }
        let provider_identity = config.identity();
        Change::Grant(Box::new(Entry {
            suite: suite.name.clone(),
            provider: config.name.clone(),
            model: config.model.clone(),
            served_models: t.served_models.iter().cloned().collect(),
            system_fingerprints: t.system_fingerprints.iter().cloned().collect(),
            suite_digest: suite.digest().to_string(),
            provider_digest: provider_identity.digest(),
            suite_identity: Some(suite.identity().clone()),
            tokenizer: tokenizer_words(&provider_identity),
            provider_identity: Some(provider_identity),
            evidence: Evidence {
                run_id: result.run_id.clone(),
                report: report.clone(),
                conform_version: env!("CARGO_PKG_VERSION").to_string(),
                first_call_at: Some(stamp(result.started_at)),
                cases: suite.cases.len() as u64,
                repeats,
                calls: t.planned,
                passed: t.passed,
                pass_rate: t.pass_rate(),
                first_attempt_pass_rate: t.first_attempt_pass_rate(),
                checks: t.checks.clone(),
                rules_out: Some(RulesOut::of(t.planned, t.passed)),
                latency: t.latency.evidence(),
                tool_calls: t
                    .tool_calls
                    .as_ref()
                    .filter(|m| m.answers > 0)
                    .map(Into::into),
                differential: t
                    .differential
                    .as_ref()
                    .map(|d| pinned_comparison(d.into(), reference, &result.run_id)),
            },
            generated_at: stamp(result.finished_at),
            // Counted from the first call, not from when the evidence was
            // written down: a merge of old shards earns no more time.
            valid_until: stamp(result.started_at + validity),
            simulated,
            contract_only: false,
            attestation: None,
        }))
    }
}

/// The live reference a pair was judged against, when it was: a provider of the run.
fn reference_of<'a>(
    tally: &conform_check::verdict::Tally,
    targets: &'a [Arc<Target>],
) -> Option<&'a ProviderConfig> {
    let name = &tally.differential.as_ref()?.reference;
    (targets.iter())
        .map(|t| t.endpoint.config.as_ref())
        .find(|c| &c.name == name)
}

/// The comparison as an entry keeps it: the reference pinned as the candidate is, the
/// run its answers came from, and what the comparison rules out.
fn pinned_comparison(
    mut evidence: DifferentialEvidence,
    reference: Option<&ProviderConfig>,
    run_id: &str,
) -> DifferentialEvidence {
    if let Some(reference) = reference {
        let identity = reference.identity();
        evidence.reference_digest = Some(identity.digest());
        evidence.reference_identity = Some(identity);
        evidence.reference_run = Some(run_id.to_string());
    }
    evidence.drift_rules_out = evidence.drift_rules_out();
    evidence
}

/// Why a comparison with `reference` is not evidence about the project's files, when it
/// is not: the command line changed what the reference was sent.
fn withheld_reference(reference: &ProviderConfig) -> Option<String> {
    let overridden = reference.overridden();
    (!overridden.is_empty()).then(|| {
        format!(
            "not granted: judged against the reference `{}`, run with {}, which replaces what providers/{}.toml says",
            reference.name,
            overridden.join(" and "),
            reference.name
        )
    })
}

/// Why a conformant run of `config` on `suite`, `repeats` times per case, is not evidence
/// about the project's files, when it is not: the command line changed what was sent
/// (`--base-url`, `--stream`) or sent fewer repeats than the suite asks for.
pub fn withheld(config: &ProviderConfig, suite: &Suite, repeats: u32) -> Option<String> {
    let mut why = Vec::new();
    let overridden = config.overridden();
    if !overridden.is_empty() {
        why.push(format!(
            "run with {}, which {} what providers/{}.toml says",
            overridden.join(" and "),
            if overridden.len() == 1 {
                "replaces"
            } else {
                "replace"
            },
            config.name
        ));
    }
    if repeats < suite.repeats {
        why.push(format!(
            "{repeats} repeat{} of each case where the suite asks for {}",
            if repeats == 1 { "" } else { "s" },
            suite.repeats
        ));
    }
    (!why.is_empty()).then(|| format!("not granted: {}", why.join("; ")))
}

/// The tokenizer as the entry names it for people: `tiktoken:o200k_base`,
/// `huggingface:sha256:…`, `provider` or `none`.
fn tokenizer_words(identity: &ProviderIdentity) -> String {
    let Some(tokenizer) = identity.0.get("tokenizer") else {
        return "none".into();
    };
    let field = |name: &str| tokenizer.get(name).and_then(|v| v.as_str());
    match (field("kind"), field("encoding"), field("content")) {
        (Some(kind), Some(encoding), _) => format!("{kind}:{encoding}"),
        (Some(kind), None, Some(content)) => format!("{kind}:{content}"),
        (Some(kind), None, None) => kind.to_string(),
        _ => "none".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::tokenizer_words;
    use conform_config::ProviderConfig;

    fn provider(dir: &std::path::Path, tokenizer: &str) -> ProviderConfig {
        let path = dir.join("local.toml");
        let source = format!(
            "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n\n[tokenizer]\n{tokenizer}\n"
        );
        ProviderConfig::parse(&path, &source).unwrap()
    }

    #[test]
    fn the_tokenizer_is_named_by_its_encoding_or_its_content() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), br#"{"model": "a"}"#).unwrap();
        let hf = provider(
            dir.path(),
            "kind = \"huggingface\"\npath = \"tokenizer.json\"",
        );
        assert!(tokenizer_words(&hf.identity()).starts_with("huggingface:sha256:"));
        let tiktoken = provider(dir.path(), "kind = \"tiktoken\"\nencoding = \"o200k_base\"");
        assert_eq!(tokenizer_words(&tiktoken.identity()), "tiktoken:o200k_base");
        assert_eq!(
            tokenizer_words(&provider(dir.path(), "").identity()),
            "none"
        );
    }
}
