//! What a run did to the allowlist, pair by pair: the terminal line, the job summary and
//! the report page all say it from this one value, so they cannot disagree.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::run::{RunResult, Target};
use conform_check::verdict::Verdict;
use conform_gate::allowlist::{Change, Updated};

/// The allowlist after a run: which file, whether the run touched it at all, and what
/// became of each (suite, provider) the run judged, in the run's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllowlistEffect {
    pub path: PathBuf,
    /// Set when the run left the whole file alone, saying why.
    pub untouched: Option<Untouched>,
    /// Set when the previous file could not be read and was replaced.
    pub replaced_unreadable: Option<String>,
    pub pairs: Vec<EntryEffect>,
    /// The file is `conform demo`'s own: its grants are simulated evidence and permit no
    /// real failover.
    pub simulated: bool,
}

/// What became of one (suite, provider).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryEffect {
    pub suite: String,
    pub provider: String,
    #[serde(flatten)]
    pub effect: PairEffect,
}

/// Granted, revoked, or left as it was.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum PairEffect {
    /// Failover is permitted until `valid_until` (RFC 3339, as the file holds it).
    Granted { valid_until: String },
    /// Failover is no longer permitted, because of these finding codes.
    Revoked { reasons: Vec<String> },
    /// The pair's entry, or its absence, is as it was before the run.
    Unchanged { why: Unchanged },
}

/// Why a pair's entry was left as it was.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Unchanged {
    /// The evidence was incomplete (these codes say how): nothing is concluded.
    Inconclusive { reasons: Vec<String> },
    /// The answers came from tapes, which prove nothing about the provider today.
    Replayed,
    /// The run was interrupted.
    Interrupted,
    /// `--budget` stopped the run.
    OverBudget,
    /// A simulated provider: its verdict is a demonstration, not evidence.
    Simulated,
    /// The run concluded, but no change was made for this pair.
    NoChange,
    /// The update failed, and the file was left as it was.
    UpdateFailed,
    /// Conformant, but the run sent other than what the project's files say, so its
    /// evidence grants nothing (`detail` names the flags).
    Withheld { detail: String },
}

/// Why a run left the whole allowlist alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Untouched {
    /// The answers were replayed from the tapes in this folder.
    Replayed { tapes: PathBuf },
    /// The run was interrupted and its report is marked incomplete.
    Interrupted,
    /// `--budget` stopped the run before every call was sent; its report is marked
    /// incomplete.
    OverBudget,
    /// The update failed (`error` says how); the file is replaced by rename or not at
    /// all, so it is as it was.
    Failed { error: String },
}

impl Untouched {
    /// One sentence for people.
    pub fn explain(&self) -> String {
        match self {
            Untouched::Replayed { tapes } => format!(
                "the answers were replayed from {}, which proves nothing about the providers today",
                tapes.display()
            ),
            Untouched::Interrupted => {
                "the run was interrupted and the report is marked incomplete".into()
            }
            Untouched::OverBudget => {
                "the budget stopped the run and the report is marked incomplete".into()
            }
            Untouched::Failed { error } => format!("the update failed: {error}"),
        }
    }
}

impl Unchanged {
    /// A few words for people.
    pub fn explain(&self) -> String {
        match self {
            Unchanged::Inconclusive { reasons } if reasons.is_empty() => "inconclusive".into(),
            Unchanged::Inconclusive { reasons } => format!("inconclusive: {}", reasons.join(", ")),
            Unchanged::Replayed => "replayed answers".into(),
            Unchanged::Interrupted => "interrupted".into(),
            Unchanged::OverBudget => "stopped by the budget".into(),
            Unchanged::Simulated => "simulated provider".into(),
            Unchanged::NoChange => "no change made".into(),
            Unchanged::UpdateFailed => "the update failed".into(),
            Unchanged::Withheld { detail } => detail.clone(),
        }
    }
}

impl AllowlistEffect {
    /// A run that did not touch the file: every pair is unchanged for the same reason.
    pub fn untouched(path: &Path, result: &RunResult, why: Untouched) -> AllowlistEffect {
        let each = match why {
            Untouched::Replayed { .. } => Unchanged::Replayed,
            Untouched::Interrupted => Unchanged::Interrupted,
            Untouched::OverBudget => Unchanged::OverBudget,
            Untouched::Failed { .. } => Unchanged::UpdateFailed,
        };
        AllowlistEffect {
            path: path.to_path_buf(),
            untouched: Some(why),
            replaced_unreadable: None,
            pairs: result
                .verdicts
                .iter()
                .map(|v| EntryEffect {
                    suite: v.tally.suite.clone(),
                    provider: v.tally.provider.clone(),
                    effect: PairEffect::Unchanged { why: each.clone() },
                })
                .collect(),
            simulated: false,
        }
    }

    /// A run whose `changes` were applied to the file at `path`, as `updated` reports.
    /// A pair with no change is unchanged because its verdict was inconclusive, because
    /// its provider is simulated, or, failing both, because no change was asked for.
    pub fn applied(
        path: &Path,
        result: &RunResult,
        targets: &[Arc<Target>],
        changes: &[Change],
        updated: &Updated,
    ) -> AllowlistEffect {
        let pairs = result
            .verdicts
            .iter()
            .map(|v| {
                let (suite, provider) = (&v.tally.suite, &v.tally.provider);
                let change = changes.iter().find(|c| match c {
                    Change::Grant(e) => (&e.suite, &e.provider) == (suite, provider),
                    Change::Revoke(r) => (&r.suite, &r.provider) == (suite, provider),
                    Change::Withhold {
                        suite: s,
                        provider: p,
                        ..
                    } => (s, p) == (suite, provider),
                });
                let simulated = targets
                    .get(v.provider_index)
                    .is_some_and(|t| t.endpoint.config.is_simulated());
                let effect = match change {
                    Some(Change::Grant(entry)) => PairEffect::Granted {
                        valid_until: entry.valid_until.clone(),
                    },
                    Some(Change::Revoke(revocation)) => PairEffect::Revoked {
                        reasons: revocation.reasons.clone(),
                    },
                    Some(Change::Withhold { why, .. }) => PairEffect::Unchanged {
                        why: Unchanged::Withheld {
                            detail: why.clone(),
                        },
                    },
                    None if v.verdict == Verdict::Inconclusive => PairEffect::Unchanged {
                        why: Unchanged::Inconclusive {
                            reasons: conform_check::verdict::Reason::names(&v.reasons),
                        },
                    },
                    None if simulated => PairEffect::Unchanged {
                        why: Unchanged::Simulated,
                    },
                    None => PairEffect::Unchanged {
                        why: Unchanged::NoChange,
                    },
                };
                EntryEffect {
                    suite: suite.clone(),
                    provider: provider.clone(),
                    effect,
                }
            })
            .collect();
        AllowlistEffect {
            path: path.to_path_buf(),
            untouched: None,
            replaced_unreadable: updated.replaced_unreadable.clone(),
            pairs,
            simulated: false,
        }
    }

    /// Pairs whose failover is now permitted.
    pub fn granted(&self) -> impl Iterator<Item = &EntryEffect> {
        self.pairs
            .iter()
            .filter(|p| matches!(p.effect, PairEffect::Granted { .. }))
    }

    /// Pairs whose failover is no longer permitted.
    pub fn revoked(&self) -> impl Iterator<Item = &EntryEffect> {
        self.pairs
            .iter()
            .filter(|p| matches!(p.effect, PairEffect::Revoked { .. }))
    }

    /// Pairs left as they were.
    pub fn unchanged(&self) -> impl Iterator<Item = &EntryEffect> {
        self.pairs
            .iter()
            .filter(|p| matches!(p.effect, PairEffect::Unchanged { .. }))
    }

    /// What happened to (`suite`, `provider`), if the run judged it.
    pub fn pair(&self, suite: &str, provider: &str) -> Option<&EntryEffect> {
        self.pairs
            .iter()
            .find(|p| p.suite == suite && p.provider == provider)
    }

    /// `granted N, revoked M, unchanged K`.
    pub fn counts(&self) -> String {
        format!(
            "granted {}, revoked {}, unchanged {}",
            self.granted().count(),
            self.revoked().count(),
            self.unchanged().count()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::run::PairVerdict;
    use conform_check::check::Code;
    use conform_check::verdict::Reason;
    use conform_check::verdict::Tally;
    use conform_config::ProviderConfig;
    use conform_gate::allowlist::{Entry, Evidence, Revocation};
    use conform_wire::provider::ErrorKind;
    use conform_wire::provider::transport::{Endpoint, Transport};

    fn target(dir: &Path, name: &str, kind: &str) -> Arc<Target> {
        let path = dir.join(format!("{name}.toml"));
        let sim = if kind == "sim" {
            "\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\n"
        } else {
            "base_url = \"http://127.0.0.1:9\"\n"
        };
        let config =
            ProviderConfig::parse(&path, &format!("kind = \"{kind}\"\nmodel = \"m\"\n{sim}"))
                .unwrap_or_else(|d| panic!("{d}"));
        let wire = conform_wire::provider::wire_format(config.wire_kind());
        let endpoint = Endpoint::new(Arc::new(config), wire, None, Transport::new().unwrap());
        Arc::new(Target::new(endpoint))
    }

    fn verdict(
        suite: &str,
        provider: &str,
        provider_index: usize,
        verdict: Verdict,
        reasons: &[Code],
    ) -> PairVerdict {
        PairVerdict {
            verdict,
            reasons: reasons.iter().map(|c| Reason::Found(*c)).collect(),
            tally: Tally::new(suite, provider, 1),
            suite_index: 0,
            provider_index,
        }
    }

    fn grant(suite: &str, provider: &str, valid_until: &str) -> Change {
        Change::Grant(Box::new(Entry {
            suite: suite.into(),
            provider: provider.into(),
            model: "m".into(),
            served_models: Vec::new(),
            system_fingerprints: Vec::new(),
            suite_digest: String::new(),
            provider_digest: String::new(),
            suite_identity: None,
            provider_identity: None,
            tokenizer: "none".into(),
            evidence: Evidence {
                run_id: "r".into(),
                report: "report.json".into(),
                conform_version: "0".into(),
                first_call_at: None,
                cases: 1,
                repeats: 1,
                calls: 1,
                passed: 1,
                pass_rate: 1.0,
                first_attempt_pass_rate: 1.0,
                checks: BTreeMap::new(),
                rules_out: None,
                latency: None,
                tool_calls: None,
                differential: None,
            },
            generated_at: String::new(),
            valid_until: valid_until.into(),
            simulated: false,
            contract_only: false,
            attestation: None,
        }))
    }

    #[test]
    fn each_pair_says_what_became_of_it_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let targets = [
            target(dir.path(), "real", "openai-compatible"),
            target(dir.path(), "sim-steady", "sim"),
        ];
        let result = RunResult {
            run_id: "r".into(),
            dir: dir.path().to_path_buf(),
            started_at: time::OffsetDateTime::UNIX_EPOCH,
            finished_at: time::OffsetDateTime::UNIX_EPOCH,
            complete: true,
            over_budget: false,
            verdicts: vec![
                verdict("a", "real", 0, Verdict::Conformant, &[]),
                verdict("b", "real", 0, Verdict::Nonconformant, &[Code::NotPureJson]),
                verdict(
                    "c",
                    "real",
                    0,
                    Verdict::Inconclusive,
                    &[Code::Call(ErrorKind::Auth)],
                ),
                verdict("d", "real", 0, Verdict::Conformant, &[]),
                verdict("a", "sim-steady", 1, Verdict::Conformant, &[]),
            ],
        };
        let changes = [
            grant("a", "real", "2026-03-08T09:12:44Z"),
            Change::Revoke(Revocation {
                suite: "b".into(),
                provider: "real".into(),
                run_id: "r".into(),
                at: String::new(),
                reasons: vec!["not_pure_json".into()],
                report: String::new(),
                suite_digest: None,
                provider_digest: None,
                attestation: None,
            }),
        ];
        let d = AllowlistEffect::applied(
            Path::new("al.json"),
            &result,
            &targets,
            &changes,
            &Updated::default(),
        );
        let effect = |s: &str, p: &str| d.pair(s, p).map(|p| p.effect.clone());
        assert_eq!(
            effect("a", "real"),
            Some(PairEffect::Granted {
                valid_until: "2026-03-08T09:12:44Z".into()
            })
        );
        assert_eq!(
            effect("b", "real"),
            Some(PairEffect::Revoked {
                reasons: vec!["not_pure_json".into()]
            })
        );
        assert_eq!(
            effect("c", "real"),
            Some(PairEffect::Unchanged {
                why: Unchanged::Inconclusive {
                    reasons: vec!["auth_failed".into()]
                }
            })
        );
        assert_eq!(
            effect("d", "real"),
            Some(PairEffect::Unchanged {
                why: Unchanged::NoChange
            })
        );
        assert_eq!(
            effect("a", "sim-steady"),
            Some(PairEffect::Unchanged {
                why: Unchanged::Simulated
            })
        );
        assert_eq!(d.counts(), "granted 1, revoked 1, unchanged 3");
        assert_eq!(d.untouched, None);

        let replay = AllowlistEffect::untouched(
            Path::new("al.json"),
            &result,
            Untouched::Replayed { tapes: "t".into() },
        );
        assert_eq!(replay.counts(), "granted 0, revoked 0, unchanged 5");
        assert!(replay.pairs.iter().all(|p| p.effect
            == PairEffect::Unchanged {
                why: Unchanged::Replayed
            }));
    }
}
