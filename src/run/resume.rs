//! `--resume` and `--rerun-failed`: a run continued in the folder of an earlier one, from
//! its `results.jsonl`. Every call the earlier run recorded an answer for is kept and not
//! sent again; the rest of the schedule is sent. The verdicts are then made from the kept
//! records and the new ones together, as one run would have made them.
//!
//! Invariant: a call whose answer is in the earlier records is never sent again (a call
//! that was in flight when the earlier run was cut has no record, and is sent).

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::check::record::CallRecord;
use crate::provider::Effect;

/// Which earlier records a continued run keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every call that came back, passed or failed (`--resume`): only the calls never
    /// sent, not sent because a provider was stopped, or cut off are sent.
    Answered,
    /// As [`Keep::Answered`], less the calls that failed for the transport's reasons
    /// after their retries (`--rerun-failed`): those are sent again. A conformance
    /// failure is the provider's answer and is kept.
    AllButTransportFailures,
}

impl Keep {
    /// What `--resume DIR` or `--rerun-failed DIR` asks for, if either.
    pub fn from_flags(
        resume: Option<PathBuf>,
        rerun_failed: Option<PathBuf>,
    ) -> Option<(PathBuf, Keep)> {
        match (resume, rerun_failed) {
            (Some(dir), _) => Some((dir, Keep::Answered)),
            (None, Some(dir)) => Some((dir, Keep::AllButTransportFailures)),
            (None, None) => None,
        }
    }
}

/// A call as its record names it.
pub type CallKey = (String, String, String, u32);

fn key_of(record: &CallRecord) -> CallKey {
    (
        record.suite.clone(),
        record.case.clone(),
        record.provider.clone(),
        record.repeat,
    )
}

/// The earlier run's records that stand, and the calls they answer.
#[derive(Debug)]
pub struct Resume {
    records: Vec<CallRecord>,
    /// Lines that could not be read (a line cut short by a crash): their calls are sent.
    pub unreadable: usize,
    /// Records dropped for [`Keep`]: their calls are sent.
    pub dropped: usize,
    /// What the earlier run tested: a record counts again only for a suite and a
    /// provider whose digests are still these, and the run keeps its start.
    pub pins: Pins,
}

/// The earlier run's start and the digests of the suites and providers it tested, from
/// its `run.json` (written as a run starts) or its `report.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pins {
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Suite name → digest.
    pub suites: BTreeMap<String, String>,
    /// Provider name → digest.
    pub providers: BTreeMap<String, String>,
}

impl Pins {
    /// The file a run writes as it starts.
    pub const FILE: &str = "run.json";

    /// Writes `dir/run.json`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(Self::FILE), text)
    }

    /// The pins of the run in `dir`, if it says what it tested.
    pub fn read(dir: &Path) -> Option<Pins> {
        if let Ok(bytes) = std::fs::read(dir.join(Self::FILE)) {
            return serde_json::from_slice(&bytes).ok();
        }
        // A run of a conform before `run.json`: its report, when it wrote one.
        let bytes = std::fs::read(dir.join("report.json")).ok()?;
        let report: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let started = report["run"]["started_at"].as_str()?;
        let digests = |list: &str| -> BTreeMap<String, String> {
            let items = report[list].as_array().map(Vec::as_slice).unwrap_or(&[]);
            (items.iter())
                .filter_map(|i| Some((i["name"].as_str()?.into(), i["digest"].as_str()?.into())))
                .collect()
        };
        Some(Pins {
            started_at: OffsetDateTime::parse(started, &Rfc3339).ok()?,
            suites: digests("suites"),
            providers: digests("providers"),
        })
    }

    /// Whether the earlier run tested this suite and this provider as they are now.
    pub fn holds(
        &self,
        suite: &str,
        suite_digest: &str,
        provider: &str,
        provider_digest: &str,
    ) -> bool {
        self.suites.get(suite).is_some_and(|d| d == suite_digest)
            && self
                .providers
                .get(provider)
                .is_some_and(|d| d == provider_digest)
    }
}

/// Why an earlier run cannot be continued.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(
        "cannot resume from {path}: {source} (give the folder of an earlier run, reports/RUN-ID)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot resume from {}: it does not say what it tested (no run.json, no report.json); \
         start a new run instead",
        dir.display()
    )]
    Unpinned { dir: PathBuf },
}

impl Resume {
    /// Reads `dir/results.jsonl` and keeps what `keep` says.
    pub fn read(dir: &Path, keep: Keep) -> Result<Resume, ResumeError> {
        let path = dir.join("results.jsonl");
        let file = std::fs::File::open(&path).map_err(|source| ResumeError::Read {
            path: path.clone(),
            source,
        })?;
        let pins = Pins::read(dir).ok_or_else(|| ResumeError::Unpinned {
            dir: dir.to_path_buf(),
        })?;
        let mut resume = Resume {
            records: Vec::new(),
            unreadable: 0,
            dropped: 0,
            pins,
        };
        let mut seen = HashSet::new();
        for line in std::io::BufReader::new(file).lines() {
            let line = line.map_err(|source| ResumeError::Read {
                path: path.clone(),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            let Ok(record) = serde_json::from_str::<CallRecord>(&line) else {
                resume.unreadable += 1;
                continue;
            };
            if !keeps(&record, keep) || !seen.insert(key_of(&record)) {
                resume.dropped += 1;
                continue;
            }
            resume.records.push(record);
        }
        Ok(resume)
    }

    /// How many earlier records stand.
    pub fn kept(&self) -> usize {
        self.records.len()
    }

    /// The calls answered already.
    pub fn keys(&self) -> HashSet<CallKey> {
        self.records.iter().map(key_of).collect()
    }

    /// The records that stand, each once, for the calls in `planned` (the rest belong to
    /// no call of this run and are left out).
    pub fn records<'a>(
        &'a self,
        planned: &'a HashSet<CallKey>,
    ) -> impl Iterator<Item = CallRecord> + 'a {
        self.records
            .iter()
            .filter(move |r| planned.contains(&key_of(r)))
            .cloned()
    }
}

/// The providers and suites of the run in `dir`: from its `report.json` (written when
/// it was interrupted or stopped), else from the records of its `results.jsonl` (a run
/// killed outright).
pub fn selection(dir: &Path) -> Result<(Vec<String>, Vec<String>), ResumeError> {
    let names = |value: &serde_json::Value, list: &str| -> Vec<String> {
        let items = value[list].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let names = items.iter().filter_map(|i| i["name"].as_str());
        names.map(str::to_string).collect()
    };
    if let Ok(bytes) = std::fs::read(dir.join("report.json"))
        && let Ok(report) = serde_json::from_slice::<serde_json::Value>(&bytes)
    {
        let selection = (names(&report, "providers"), names(&report, "suites"));
        if !selection.0.is_empty() && !selection.1.is_empty() {
            return Ok(selection);
        }
    }
    let read = Resume::read(dir, Keep::Answered)?;
    let mut providers: Vec<String> = read.records.iter().map(|r| r.provider.clone()).collect();
    let mut suites: Vec<String> = read.records.iter().map(|r| r.suite.clone()).collect();
    for list in [&mut providers, &mut suites] {
        list.sort();
        list.dedup();
    }
    Ok((providers, suites))
}

/// Whether a record answers its call for good under `keep`.
fn keeps(record: &CallRecord, keep: Keep) -> bool {
    // A call not sent (its provider stopped, its pair decided, the budget) has no answer.
    if record.not_run.is_some() || record.saved {
        return false;
    }
    match keep {
        Keep::Answered => true,
        Keep::AllButTransportFailures => record
            .error
            .as_ref()
            .is_none_or(|e| e.effect() != Effect::Transport),
    }
}

/// The key of the call at `case` of `suite`, repeat `repeat`, for `provider`.
pub fn key(suite: &str, case: &str, provider: &str, repeat: u32) -> CallKey {
    (
        suite.to_string(),
        case.to_string(),
        provider.to_string(),
        repeat,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{CallError, ErrorKind};

    fn record(case: &str, error: Option<ErrorKind>) -> String {
        let mut r = CallRecord::new("s", case, "p", 0);
        r.passed = error.is_none();
        r.error = error.map(|kind| CallError::new(kind, "x"));
        serde_json::to_string(&r).unwrap()
    }

    #[test]
    fn resume_keeps_answers_and_rerun_failed_drops_transport_failures_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = [
            record("ok", None),
            record("reset", Some(ErrorKind::ConnectionReset)),
            record("long", Some(ErrorKind::ContextLength)),
            serde_json::to_string(&CallRecord::not_run("s", "halted", "p", 0, "x".into())).unwrap(),
        ]
        .join("\n");
        text.push_str("\n{\"suite\": \"s\", \"case\": \"cut");
        std::fs::write(dir.path().join("results.jsonl"), text).unwrap();
        // Without what the run tested, nothing can be resumed.
        assert!(matches!(
            Resume::read(dir.path(), Keep::Answered),
            Err(ResumeError::Unpinned { .. })
        ));
        let pins = Pins {
            started_at: time::macros::datetime!(2026-12-01 10:00 UTC),
            suites: [("s".to_string(), "sha256:1".to_string())].into(),
            providers: [("p".to_string(), "sha256:2".to_string())].into(),
        };
        pins.write(dir.path()).unwrap();
        let cases = |r: &Resume| {
            let mut c: Vec<String> = r.keys().into_iter().map(|k| k.1).collect();
            c.sort();
            c
        };
        let resumed = Resume::read(dir.path(), Keep::Answered).unwrap();
        assert_eq!(resumed.pins, pins);
        assert!(resumed.pins.holds("s", "sha256:1", "p", "sha256:2"));
        assert!(!resumed.pins.holds("s", "sha256:9", "p", "sha256:2"));
        assert!(!resumed.pins.holds("s", "sha256:1", "q", "sha256:2"));
        assert_eq!(cases(&resumed), ["long", "ok", "reset"]);
        assert_eq!((resumed.unreadable, resumed.dropped), (1, 1));
        let rerun = Resume::read(dir.path(), Keep::AllButTransportFailures).unwrap();
        assert_eq!(cases(&rerun), ["long", "ok"]);
        // A run killed outright wrote no report: its records name what it ran.
        let (providers, suites) = selection(dir.path()).unwrap();
        assert_eq!(
            (providers, suites),
            (vec!["p".to_string()], vec!["s".to_string()])
        );
    }
}
