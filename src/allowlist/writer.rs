//! Updating the allowlist: an advisory lock around read-modify-write, so concurrent
//! runs never lose each other's entries, and a temporary file, fsync and rename, so a
//! reader never sees half a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::format::{Allowlist, DifferentialEvidence, Entry, Evidence, Revocation, RulesOut};
use crate::config::{ProviderConfig, ProviderIdentity, Suite};
use crate::run::{PreparedSuite, RunResult, Target};
use crate::verdict::Verdict;
use conform_allowlist::attest::verify;
use conform_allowlist::sign::Trust;

/// One change to the allowlist.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Add or refresh the (suite, provider) entry.
    Grant(Box<Entry>),
    /// Remove the (suite, provider) entry, recording why.
    Revoke(Revocation),
    /// A conformant verdict that grants nothing, and why: the run sent something other
    /// than what the project's files say (`--base-url`, `--stream`, fewer `--repeats`
    /// than the suite's), so its evidence is not about them. The file is not touched.
    Withhold {
        suite: String,
        provider: String,
        why: String,
    },
}

/// What an update did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Updated {
    pub granted: Vec<(String, String)>,
    pub revoked: Vec<(String, String)>,
    /// Set when the previous file could not be read and was replaced.
    pub replaced_unreadable: Option<String>,
    /// Entries of the previous file that had no v1 evidence (contract-only or malformed):
    /// they are not carried into the new file.
    pub dropped: usize,
    /// Under a trust file: what was written unsigned, and what that means, one sentence
    /// each.
    pub unsigned: Vec<String>,
}

/// What an update may replace where the project trusts signing keys.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overwrite<'a> {
    /// The project's trust file. An unsigned grant never replaces a statement (an entry
    /// or a revocation) signed by a key it lists: every reader under it would deny the
    /// grant (`unsigned`), and the signed permit would be lost without a word. An unsigned
    /// revocation still replaces anything (failing closed needs no proof), and says so.
    pub trust: Option<&'a Trust>,
    /// Replace signed statements with unsigned grants anyway (`--allow-unsigned`).
    pub allow_unsigned: bool,
}

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

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("cannot update the allowlist {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An unsigned grant would replace signed statements: nothing was written.
    #[error(
        "refused to replace signed evidence in {} with unsigned: {} signed by a key {} lists, \
         and this run has no signing key, so every reader under that trust file would deny what \
         it grants (unsigned). Set CONFORM_SIGNING_KEY to the CI's key (docs/signing.md), or pass \
         --allow-unsigned to replace {} anyway; the allowlist was not written",
        path.display(),
        pairs.join(", "),
        trust.display(),
        if pairs.len() == 1 { "it" } else { "them" }
    )]
    UnsignedOverSigned {
        path: PathBuf,
        /// `suite × provider (entry)`, one per statement that would be replaced.
        pairs: Vec<String>,
        trust: PathBuf,
    },
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
    let stamp = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
    let report = report.display().to_string();
    result
        .verdicts
        .iter()
        .filter_map(|v| {
            let suite = &suites[v.suite_index].suite;
            let config = &targets[v.provider_index].endpoint.config;
            let t = &v.tally;
            let simulated = config.is_simulated();
            if simulated && destination == Destination::Real {
                return None;
            }
            let repeats = if suite.cases.is_empty() {
                0
            } else {
                (t.planned / suite.cases.len() as u64) as u32
            };
            match v.verdict {
                Verdict::Inconclusive => None,
                Verdict::Nonconformant => Some(Change::Revoke(Revocation {
                    suite: suite.name.clone(),
                    provider: config.name.clone(),
                    run_id: result.run_id.clone(),
                    at: stamp(result.finished_at),
                    reasons: crate::verdict::Reason::names(&v.reasons),
                    report: report.clone(),
                    suite_digest: Some(suite.digest().to_string()),
                    provider_digest: Some(config.identity().digest()),
                    attestation: None,
                })),
                Verdict::Conformant => {
                    let reference = reference_of(t, targets);
                    let why = withheld(config, suite, repeats)
                        .or_else(|| reference.and_then(withheld_reference));
                    if let Some(why) = why {
                        return Some(Change::Withhold {
                            suite: suite.name.clone(),
                            provider: config.name.clone(),
                            why,
                        });
                    }
                    let provider_identity = config.identity();
                    Some(Change::Grant(Box::new(Entry {
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
                    })))
                }
            }
        })
        .collect()
}

/// The live reference a pair was judged against, when it was: a provider of the run.
fn reference_of<'a>(
    tally: &crate::verdict::Tally,
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

/// Applies `changes` to the allowlist at `path` under an exclusive advisory lock.
pub fn update(path: &Path, changes: &[Change]) -> Result<Updated, UpdateError> {
    update_with(path, changes, Overwrite::default())
}

/// [`update`], refusing what `overwrite` does not allow (nothing is then written).
pub fn update_with(
    path: &Path,
    changes: &[Change],
    overwrite: Overwrite<'_>,
) -> Result<Updated, UpdateError> {
    let io = |source| UpdateError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !changes
        .iter()
        .any(|c| !matches!(c, Change::Withhold { .. }))
    {
        return Ok(Updated::default());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let lock_path = dir.join(format!(
        ".{}.lock",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("allowlist.json")
    ));
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io)?;
    let mut lock = fd_lock::RwLock::new(lock_file);
    let _guard = lock.write().map_err(io)?;
    // Every writer holds the lock while its temporary file exists, so any temporary file
    // seen now was left by a writer that died mid-write.
    remove_stale_temporaries(path, &dir);

    let mut updated = Updated::default();
    let mut list = match std::fs::read(path) {
        Ok(bytes) => match Allowlist::parse(&bytes) {
            Ok(mut list) => {
                let before = list.entries.len();
                list.entries.retain(|e| !e.contract_only);
                updated.dropped = list.malformed + before - list.entries.len();
                list
            }
            Err(denial) => {
                updated.replaced_unreadable = Some(denial.to_string());
                Allowlist::default()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Allowlist::default(),
        Err(e) => return Err(io(e)),
    };
    if let Some(trust) = overwrite.trust {
        updated.unsigned = guard(path, &list, changes, trust, overwrite.allow_unsigned)?;
    }
    for change in changes {
        match change {
            Change::Grant(entry) => {
                let key = (entry.suite.clone(), entry.provider.clone());
                list.entries
                    .retain(|e| (&e.suite, &e.provider) != (&key.0, &key.1));
                list.revocations
                    .retain(|r| (&r.suite, &r.provider) != (&key.0, &key.1));
                list.entries.push((**entry).clone());
                updated.granted.push(key);
            }
            Change::Revoke(revocation) => {
                let key = (revocation.suite.clone(), revocation.provider.clone());
                list.entries
                    .retain(|e| (&e.suite, &e.provider) != (&key.0, &key.1));
                list.revocations
                    .retain(|r| (&r.suite, &r.provider) != (&key.0, &key.1));
                list.revocations.push(revocation.clone());
                updated.revoked.push(key);
            }
            Change::Withhold { .. } => {}
        }
    }
    list.entries
        .sort_by(|a, b| (&a.suite, &a.provider).cmp(&(&b.suite, &b.provider)));
    list.revocations
        .sort_by(|a, b| (&a.suite, &a.provider).cmp(&(&b.suite, &b.provider)));
    let mut bytes = serde_json::to_vec_pretty(&list).map_err(|e| io(e.into()))?;
    bytes.push(b'\n');
    write_atomically(path, &dir, &bytes).map_err(io)?;
    Ok(updated)
}

/// Under `trust`: refuses unsigned grants that would replace signed statements of `list`
/// (unless `allow_unsigned`), and says what each unsigned change written means.
fn guard(
    path: &Path,
    list: &Allowlist,
    changes: &[Change],
    trust: &Trust,
    allow_unsigned: bool,
) -> Result<Vec<String>, UpdateError> {
    let signed = |suite: &str, provider: &str| -> Option<&'static str> {
        let entry = (list.entries.iter())
            .any(|e| (e.suite == suite && e.provider == provider) && verify(e, trust).is_ok());
        let revocation = (list.revocations.iter())
            .any(|r| (r.suite == suite && r.provider == provider) && verify(r, trust).is_ok());
        (entry.then_some("entry")).or(revocation.then_some("revocation"))
    };
    let (mut refused, mut said) = (Vec::new(), Vec::new());
    for change in changes {
        match change {
            Change::Grant(e) if e.attestation.is_none() => {
                if let Some(kind) = signed(&e.suite, &e.provider) {
                    refused.push(format!("{} × {} ({kind})", e.suite, e.provider));
                }
                said.push(format!(
                    "{} × {} was granted unsigned: every reader under {} denies it (unsigned); \
                     set CONFORM_SIGNING_KEY to sign what a run grants (docs/signing.md)",
                    e.suite,
                    e.provider,
                    trust.path.display()
                ));
            }
            Change::Revoke(r) if r.attestation.is_none() => said.push(format!(
                "{} × {} was revoked unsigned{}: it denies, but no reader that keeps state \
                 remembers it, so an older signed allowlist put back would permit until it \
                 expires; set CONFORM_SIGNING_KEY (docs/signing.md)",
                r.suite,
                r.provider,
                match signed(&r.suite, &r.provider) {
                    Some(kind) => format!(", replacing a signed {kind}"),
                    None => String::new(),
                }
            )),
            _ => {}
        }
    }
    if !refused.is_empty() && !allow_unsigned {
        return Err(UpdateError::UnsignedOverSigned {
            path: path.to_path_buf(),
            pairs: refused,
            trust: trust.path.clone(),
        });
    }
    Ok(said)
}

fn temporary_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("allowlist.json");
    format!(".{name}.")
}

fn remove_stale_temporaries(path: &Path, dir: &Path) {
    let prefix = temporary_prefix(path);
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for item in listing.flatten() {
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            let _ = std::fs::remove_file(item.path());
        }
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over `path`,
/// and syncs the directory so the rename itself survives a crash. Callers outside
/// [`update`] must not share the file with a concurrent `update`, whose clean-up of
/// stale temporary files assumes it holds the lock.
pub(crate) fn write_atomically(path: &Path, dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(
        "{}{}.tmp",
        temporary_prefix(path),
        std::process::id()
    ));
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Why [`regrant`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum RegrantError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not an allowlist entry: {source}", path.display())]
    Entry {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Update(#[from] UpdateError),
    /// The caller could not say a generation was written.
    #[error("{0}")]
    Said(#[source] std::io::Error),
}

/// Grants the entry in the file `entry` again and again in the allowlist at `path`, as
/// run `gen-N` for each N of `generations`, telling `written` each N once that version is
/// in place: the crash tests hold the file to "this generation or the next".
pub fn regrant(
    path: &Path,
    entry: &Path,
    generations: std::ops::Range<u64>,
    mut written: impl FnMut(u64) -> std::io::Result<()>,
) -> Result<(), RegrantError> {
    let text = std::fs::read(entry).map_err(|source| RegrantError::Read {
        path: entry.to_path_buf(),
        source,
    })?;
    let mut granted: Entry =
        serde_json::from_slice(&text).map_err(|source| RegrantError::Entry {
            path: entry.to_path_buf(),
            source,
        })?;
    for n in generations {
        granted.evidence.run_id = format!("gen-{n}");
        update(path, &[Change::Grant(Box::new(granted.clone()))])?;
        written(n).map_err(RegrantError::Said)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tokenizer_words;
    use crate::config::ProviderConfig;

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
