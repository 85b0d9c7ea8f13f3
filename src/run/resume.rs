//! `--resume` and `--rerun-failed`: a run continued in the folder of an earlier one, from
//! its `results.jsonl`. Every call the earlier run recorded an answer for is kept and not
//! sent again; the rest of the schedule is sent. The verdicts are then made from the kept
//! records and the new ones together, as one run would have made them.
//!
//! Invariant: a call whose answer is in the earlier records is never sent again (a call
//! that was in flight when the earlier run was cut has no record, and is sent).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::results::{CallRecord, ReadError, Records};
use crate::run::shard::Shard;
use conform_wire::provider::Effect;

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
    /// What the run was asked beyond its files; `None` in the `run.json` of a conform
    /// before it, and in a `report.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<Asked>,
}

/// Every argument of `conform run` that shapes its evidence, as the run was asked it:
/// `run.json` keeps them, and `--resume DIR` continues with them, not with whatever its
/// own command line leaves out. Operational arguments are not among them:
/// `--no-progress`, and `--budget`, which caps what the continued run sends.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Asked {
    /// The providers tested: those named, or every one not simulated when none was. The
    /// live references are not among them: `reference` or the suites name those.
    pub providers: Vec<String>,
    /// The suites tested: those named, or every one.
    pub suites: Vec<String>,
    /// `--reference PRIMARY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// `--repeats`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<u32>,
    /// `--stream`.
    #[serde(default)]
    pub stream: bool,
    /// `--base-url`. Written with any user-info replaced by its digest: a credential is
    /// never written down, so such an address must be given again to continue.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "written_url"
    )]
    pub base_url: Option<String>,
    /// `--shard K/N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// `--every-call`.
    #[serde(default)]
    pub every_call: bool,
    /// `--valid-for`, written as `7days`.
    #[serde(with = "duration_text")]
    pub valid_for: Duration,
    /// `--max-transport-errors`.
    pub max_transport_errors: f64,
}

/// `--valid-for` when none is given.
pub const DEFAULT_VALID_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// `--max-transport-errors` when none is given.
pub const DEFAULT_MAX_TRANSPORT_ERRORS: f64 = 0.1;

/// What a `conform run` command line says of the arguments [`Asked`] holds: empty,
/// `false` or `None` where it says nothing.
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub providers: Vec<String>,
    pub suites: Vec<String>,
    pub reference: Option<String>,
    pub repeats: Option<u32>,
    pub stream: bool,
    pub base_url: Option<String>,
    pub shard: Option<Shard>,
    pub every_call: bool,
    pub valid_for: Option<Duration>,
    pub max_transport_errors: Option<f64>,
}

impl Given {
    /// What a run that continues none goes with: what is given, and the defaults for the
    /// rest (no providers or suites: every one, which the loader resolves).
    pub fn fresh(self) -> Asked {
        Asked {
            providers: self.providers,
            suites: self.suites,
            reference: self.reference,
            repeats: self.repeats,
            stream: self.stream,
            base_url: self.base_url,
            shard: self.shard,
            every_call: self.every_call,
            valid_for: self.valid_for.unwrap_or(DEFAULT_VALID_FOR),
            max_transport_errors: self
                .max_transport_errors
                .unwrap_or(DEFAULT_MAX_TRANSPORT_ERRORS),
        }
    }

    /// What a run continuing the one in `dir`, which was asked `pinned`, goes with:
    /// `pinned`. An argument given otherwise refuses, naming the flag and both values; one
    /// given the same is welcome.
    pub fn continuing(self, pinned: &Asked, dir: &Path) -> Result<Asked, ResumeError> {
        let conflict = |flag: &'static str, was: String, now: Option<String>| match now {
            Some(now) if now != was => Err(ResumeError::Conflict {
                flag,
                dir: dir.to_path_buf(),
                pinned: was,
                given: now,
            }),
            _ => Ok(()),
        };
        let set = |names: &[String]| {
            let mut names = names.to_vec();
            names.sort();
            names.dedup();
            names.join(" ")
        };
        let named = |names: &[String]| (!names.is_empty()).then(|| set(names));
        let flag = |on: bool| if on { "given" } else { "not given" }.to_string();
        let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
        let text = |d: Duration| humantime::format_duration(d).to_string();
        conflict("PROVIDERS", set(&pinned.providers), named(&self.providers))?;
        conflict("--suite", set(&pinned.suites), named(&self.suites))?;
        conflict(
            "--reference",
            or_none(pinned.reference.clone()),
            self.reference,
        )?;
        let repeats = pinned.repeats.map(|r| r.to_string());
        conflict(
            "--repeats",
            or_none(repeats),
            self.repeats.map(|r| r.to_string()),
        )?;
        conflict(
            "--stream",
            flag(pinned.stream),
            self.stream.then(|| flag(true)),
        )?;
        let url = pinned
            .base_url
            .as_deref()
            .map(|u| without_credentials(u).into_owned());
        let given_url = self
            .base_url
            .as_deref()
            .map(|u| without_credentials(u).into_owned());
        conflict("--base-url", or_none(url.clone()), given_url)?;
        let shard = pinned.shard.map(|s| s.to_string());
        conflict("--shard", or_none(shard), self.shard.map(|s| s.to_string()))?;
        let every = self.every_call.then(|| flag(true));
        conflict("--every-call", flag(pinned.every_call), every)?;
        conflict(
            "--valid-for",
            text(pinned.valid_for),
            self.valid_for.map(text),
        )?;
        let share = |s: f64| s.to_string();
        let now = self.max_transport_errors.map(share);
        conflict(
            "--max-transport-errors",
            share(pinned.max_transport_errors),
            now,
        )?;
        // A credential in the address was not written down: it must be given again.
        if self.base_url.is_none() && url.is_some_and(|u| has_credentials(&u)) {
            return Err(ResumeError::Credentials {
                dir: dir.to_path_buf(),
            });
        }
        Ok(Asked {
            base_url: self.base_url.or_else(|| pinned.base_url.clone()),
            ..pinned.clone()
        })
    }
}

/// `url` with the user-info of its address, if any, replaced by its digest:
/// `https://sha256:…@host/v1`.
fn without_credentials(url: &str) -> std::borrow::Cow<'_, str> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.into();
    };
    let authority = &url[start..];
    let authority = &authority[..authority.find(['/', '?', '#']).unwrap_or(authority.len())];
    match authority.rfind('@') {
        Some(at) if !authority[..at].starts_with("sha256:") => format!(
            "{}{}{}",
            &url[..start],
            conform_config::digest::bytes_hex(&authority.as_bytes()[..at]),
            &url[start + at..]
        )
        .into(),
        _ => url.into(),
    }
}

/// Whether the address of `url` carries user-info (a digest of it, once written).
fn has_credentials(url: &str) -> bool {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return false;
    };
    let authority = &url[start..];
    authority[..authority.find(['/', '?', '#']).unwrap_or(authority.len())].contains('@')
}

fn written_url<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    url.as_deref().map(without_credentials).serialize(s)
}

/// A duration as humantime writes and reads it (`7days`, `1h 30m`).
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
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
            asked: None,
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
    #[error(
        "{flag}: the run in {} was asked `{pinned}`, this command `{given}`; a continued run keeps \
         what its run was asked (its run.json): leave {flag} out, or start a new run",
        dir.display()
    )]
    Conflict {
        flag: &'static str,
        dir: PathBuf,
        pinned: String,
        given: String,
    },
    #[error(
        "--base-url: the run in {} was sent to an address with credentials, which its run.json \
         does not keep: give --base-url again",
        dir.display()
    )]
    Credentials { dir: PathBuf },
}

impl Resume {
    /// Reads `dir/results.jsonl` and keeps what `keep` says.
    pub fn read(dir: &Path, keep: Keep) -> Result<Resume, ResumeError> {
        // A line that is not a record is counted below; this is for the file itself.
        let unreadable = |e: ReadError| match e {
            ReadError::Io { path, source } => ResumeError::Read { path, source },
            ReadError::Record { path, source, .. } => ResumeError::Read {
                path,
                source: source.into(),
            },
        };
        let records = Records::open(dir).map_err(unreadable)?;
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
        for read in records {
            let record = match read {
                Ok((_, record)) => record,
                // A line cut short by a crash: its call is sent again.
                Err(ReadError::Record { .. }) => {
                    resume.unreadable += 1;
                    continue;
                }
                Err(e) => return Err(unreadable(e)),
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
    use conform_wire::provider::{CallError, ErrorKind};

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
            asked: None,
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

    fn asked() -> Asked {
        Given {
            providers: vec!["b".into(), "a".into()],
            suites: vec!["s".into()],
            reference: Some("primary".into()),
            repeats: Some(4),
            base_url: Some("http://user:secret@127.0.0.1:8080/v1".into()),
            ..Given::default()
        }
        .fresh()
    }

    #[test]
    fn a_continued_run_keeps_what_was_asked_and_refuses_what_differs() {
        let dir = Path::new("reports/r1");
        let pinned = asked();
        let text = serde_json::to_string(&pinned).unwrap();
        // The address's credential is never written down.
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("\"valid_for\":\"7days\""), "{text}");
        let read: Asked = serde_json::from_str(&text).unwrap();
        // Given the same arguments (the providers in any order) or none of them, the run
        // goes on with the pinned ones; the address with its credential must be given.
        let same = Given {
            providers: vec!["a".into(), "b".into()],
            repeats: Some(4),
            base_url: pinned.base_url.clone(),
            max_transport_errors: Some(0.1),
            ..Given::default()
        };
        assert_eq!(same.continuing(&read, dir).unwrap(), pinned);
        let err = Given::default().continuing(&read, dir).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "--base-url: the run in reports/r1 was sent to an address with credentials"
            ),
            "{err}"
        );
        let other_url = Given {
            base_url: Some("http://user:other@127.0.0.1:8080/v1".into()),
            ..Given::default()
        };
        assert!(matches!(
            other_url.continuing(&read, dir),
            Err(ResumeError::Conflict {
                flag: "--base-url",
                ..
            })
        ));
        let refused = |given: Given| given.continuing(&pinned, dir).unwrap_err().to_string();
        assert_eq!(
            refused(Given {
                repeats: Some(2),
                ..Given::default()
            }),
            "--repeats: the run in reports/r1 was asked `4`, this command `2`; a continued run \
             keeps what its run was asked (its run.json): leave --repeats out, or start a new run"
        );
        for (given, says) in [
            (
                Given {
                    providers: vec!["a".into()],
                    ..Given::default()
                },
                "PROVIDERS: the run in reports/r1 was asked `a b`, this command `a`",
            ),
            (
                Given {
                    suites: vec!["t".into()],
                    ..Given::default()
                },
                "--suite: the run in reports/r1 was asked `s`, this command `t`",
            ),
            (
                Given {
                    reference: Some("other".into()),
                    ..Given::default()
                },
                "--reference: the run in reports/r1 was asked `primary`, this command `other`",
            ),
            (
                Given {
                    stream: true,
                    ..Given::default()
                },
                "--stream: the run in reports/r1 was asked `not given`, this command `given`",
            ),
            (
                Given {
                    every_call: true,
                    ..Given::default()
                },
                "--every-call: the run in reports/r1 was asked `not given`",
            ),
            (
                Given {
                    shard: Some(Shard { k: 1, n: 2 }),
                    ..Given::default()
                },
                "--shard: the run in reports/r1 was asked `none`, this command `1/2`",
            ),
            (
                Given {
                    valid_for: Some(Duration::from_secs(3600)),
                    ..Given::default()
                },
                "--valid-for: the run in reports/r1 was asked `7days`, this command `1h`",
            ),
            (
                Given {
                    max_transport_errors: Some(0.2),
                    ..Given::default()
                },
                "--max-transport-errors: the run in reports/r1 was asked `0.1`, this command `0.2`",
            ),
        ] {
            let refusal = refused(given);
            assert!(refusal.starts_with(says), "{refusal}");
        }
    }

    #[test]
    fn a_run_json_before_the_arguments_were_pinned_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(Pins::FILE),
            r#"{"started_at": "2026-12-01T10:00:00Z", "suites": {"s": "sha256:1"}, "providers": {"p": "sha256:2"}}"#,
        )
        .unwrap();
        let pins = Pins::read(dir.path()).unwrap();
        assert_eq!(pins.asked, None);
        assert!(pins.holds("s", "sha256:1", "p", "sha256:2"));
    }
}
