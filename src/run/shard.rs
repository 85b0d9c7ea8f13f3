//! `--shard K/N`: which planned calls one CI job runs, and the manifest its shard report
//! carries so that `conform merge` can prove the shards belong to one run.
//!
//! Invariants: which calls a shard runs is the schedule's to say ([`super::schedule`]: a
//! case belongs to exactly one shard for a given N, decided by a digest of (suite, case
//! id) alone, so every machine splits the same work the same way whatever order it lists
//! files in; all repeats of a case and every provider's calls for it go to the same
//! shard); the plan digest covers everything that shapes the verdicts
//! (suites, cases, repeats, provider configurations, the transport-error share), so two
//! shards with equal plan digests planned the same run.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::PreparedSuite;
use conform_config::ProviderConfig;

/// The name of a shard report's manifest, beside its `results.jsonl`.
pub const MANIFEST: &str = "shard.json";
/// The manifest's format tag.
pub const FORMAT: &str = "conform.shard/v1";

/// Shard K of N, 1 ≤ K ≤ N (CI matrices count from 1 in their job names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Shard {
    pub k: u32,
    pub n: u32,
}

/// `--shard` text that is not `K/N` with 1 ≤ K ≤ N.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a shard: write K/N with 1 ≤ K ≤ N, e.g. --shard 2/4")]
pub struct ShardParseError(String);

impl FromStr for Shard {
    type Err = ShardParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ShardParseError(s.to_string());
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let k: u32 = k.trim().parse().map_err(|_| bad())?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 || k == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

impl Shard {
    /// The folder name of this shard's report: `shard-2-of-4`.
    pub fn folder(self) -> String {
        format!("shard-{}-of-{}", self.k, self.n)
    }
}

/// What shapes a run's verdicts besides the answers: shards of one run agree on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOptions {
    /// `--repeats`, when it overrides the suites'.
    pub repeats: Option<u32>,
    /// `--max-transport-errors`.
    pub max_transport_error_share: f64,
    /// `--stream`.
    pub stream: bool,
    /// The live reference each suite is judged against (`--reference`, or the suite's
    /// own `reference`), by suite: a merge judges against the same ones.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub references: std::collections::BTreeMap<String, String>,
}

/// A suite as the plan saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSuite {
    pub name: String,
    pub digest: String,
    pub cases: u64,
    pub repeats: u32,
}

/// A provider as the plan saw it (the digest never holds a secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedProvider {
    pub name: String,
    pub digest: String,
}

/// The run a shard belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardedRun {
    pub suites: Vec<PlannedSuite>,
    pub providers: Vec<PlannedProvider>,
    pub options: PlanOptions,
}

impl ShardedRun {
    pub fn new(
        suites: &[Arc<PreparedSuite>],
        providers: &[&ProviderConfig],
        options: PlanOptions,
    ) -> ShardedRun {
        ShardedRun {
            suites: suites
                .iter()
                .map(|s| PlannedSuite {
                    name: s.suite.name.clone(),
                    digest: s.suite.digest().to_string(),
                    cases: s.suite.cases.len() as u64,
                    repeats: super::schedule::repeats(&s.suite, options.repeats),
                })
                .collect(),
            providers: providers
                .iter()
                .map(|p| PlannedProvider {
                    name: p.name.clone(),
                    digest: p.digest(),
                })
                .collect(),
            options,
        }
    }

    /// `sha256:…` over the plan and every case id in order: a case added, removed or
    /// renamed changes it even where the suite digest would not say how.
    pub fn digest(&self, suites: &[Arc<PreparedSuite>]) -> String {
        let cases: Vec<Vec<&str>> = suites
            .iter()
            .map(|s| s.suite.cases.iter().map(|c| c.id.as_str()).collect())
            .collect();
        conform_config::digest::canonical_json(&serde_json::json!({"plan": self, "cases": cases}))
    }

    /// What differs between two plans, in words, for a refusal to say: the first
    /// suite or provider whose digest, cases or repeats differ, or the options.
    pub fn difference(&self, other: &ShardedRun) -> String {
        let names = |p: &ShardedRun| -> Vec<String> {
            p.suites
                .iter()
                .map(|s| format!("suite {}", s.name))
                .chain(p.providers.iter().map(|p| format!("provider {}", p.name)))
                .collect()
        };
        if names(self) != names(other) {
            return format!(
                "they select different suites and providers ({} against {})",
                names(self).join(", "),
                names(other).join(", ")
            );
        }
        for (a, b) in self.suites.iter().zip(&other.suites) {
            if a.digest != b.digest {
                return format!(
                    "suite {} has digest {} against {}",
                    a.name, a.digest, b.digest
                );
            }
            if a != b {
                return format!(
                    "suite {} plans {} cases × {} repeats against {} × {}",
                    a.name, a.cases, a.repeats, b.cases, b.repeats
                );
            }
        }
        for (a, b) in self.providers.iter().zip(&other.providers) {
            if a.digest != b.digest {
                return format!(
                    "provider {} has digest {} against {}",
                    a.name, a.digest, b.digest
                );
            }
        }
        if self.options != other.options {
            return format!(
                "the run options differ (--repeats, --max-transport-errors, --stream): {:?} against {:?}",
                self.options, other.options
            );
        }
        "the case ids differ (a case was added, removed or renamed)".into()
    }
}

/// The manifest of one shard report (`shard.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub shard: Shard,
    pub conform_version: String,
    pub plan_digest: String,
    pub plan: ShardedRun,
    pub run_id: String,
    pub started_at: String,
    pub finished_at: String,
    /// False when the shard was interrupted.
    pub complete: bool,
    /// The tapes the answers came from, for a replayed shard.
    pub replayed_from: Option<PathBuf>,
    /// Call records in this shard's `results.jsonl`.
    pub calls: u64,
}

/// A manifest that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(
        "cannot read {path}: {source}; is this a shard report folder (`conform run --shard K/N` writes one)?"
    )]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: not a shard manifest: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: format `{found}` is not {FORMAT}; merge shards made by this conform version")]
    Format { path: PathBuf, found: String },
}

impl Manifest {
    /// The manifest of shard `shard` of a run that produced `result`, planned with
    /// `options` (and replayed from `replayed`, when it was).
    pub fn of_run(
        result: &super::RunResult,
        suites: &[Arc<PreparedSuite>],
        targets: &[Arc<super::Target>],
        shard: Shard,
        options: PlanOptions,
        replayed: Option<PathBuf>,
    ) -> Manifest {
        let configs: Vec<_> = targets.iter().map(|t| t.endpoint.config.as_ref()).collect();
        let plan = ShardedRun::new(suites, &configs, options);
        let calls: u64 = (result.verdicts.iter())
            .map(|v| v.tally.passed + v.tally.failed + v.tally.not_run)
            .sum();
        let rfc3339 = |t: time::OffsetDateTime| {
            t.format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default()
        };
        Manifest {
            format: FORMAT.into(),
            shard,
            conform_version: env!("CARGO_PKG_VERSION").into(),
            plan_digest: plan.digest(suites),
            plan,
            run_id: result.run_id.clone(),
            started_at: rfc3339(result.started_at),
            finished_at: rfc3339(result.finished_at),
            complete: result.complete,
            replayed_from: replayed,
            calls,
        }
    }

    /// Reads `DIR/shard.json`.
    pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Io {
            path: path.clone(),
            source,
        })?;
        let manifest: Manifest = serde_json::from_str(&text).map_err(|e| ManifestError::Parse {
            path: path.clone(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if manifest.format != FORMAT {
            return Err(ManifestError::Format {
                path,
                found: manifest.format,
            });
        }
        Ok(manifest)
    }

    /// Writes `DIR/shard.json` (pretty, fsync'd: CI uploads it as soon as the job ends).
    pub fn write(&self, dir: &Path) -> std::io::Result<PathBuf> {
        use std::io::Write as _;
        let path = dir.join(MANIFEST);
        let mut file = std::fs::File::create(&path)?;
        serde_json::to_writer_pretty(&mut file, self)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_k_of_n_and_refuses_the_rest() {
        assert_eq!("2/4".parse(), Ok(Shard { k: 2, n: 4 }));
        assert_eq!("1/1".parse(), Ok(Shard { k: 1, n: 1 }));
        for bad in ["0/4", "5/4", "1/0", "2", "a/4", "2/b", "", "-1/4"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert_eq!(Shard { k: 3, n: 7 }.to_string(), "3/7");
    }
}
