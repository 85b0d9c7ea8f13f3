//! `conform merge`: shard reports in, one run's call records out, or a refusal that
//! names why the shards do not make one run.
//!
//! Invariants: nothing is merged unless shards 1..=N are each present exactly once,
//! every one complete, and all agree on conform's version, the plan digest (suites,
//! cases, repeats, provider digests, options) and whether they were replayed; every
//! record line is read back as a [`CallRecord`] (a line that is not one refuses the
//! merge) and copied byte for byte into the merged `results.jsonl`; a shard's record
//! count must match its manifest (a truncated upload refuses). The verdicts are then
//! made by [`crate::run::tallies::Tallies`], the path a run takes: this module decides
//! nothing about providers.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use std::collections::HashMap;
use std::sync::Arc;

use crate::check::record::CallRecord;
use crate::run::shard::{MANIFEST, Manifest, ManifestError, Plan};
use crate::run::tallies::Tallies;
use crate::run::{PreparedSuite, RunResult, Target};

/// One shard report folder and its manifest.
#[derive(Debug, Clone)]
pub struct ShardReport {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// Why shard reports do not make one run. Every variant names the folders concerned.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(
        "no shard reports in {0}: pass the folders `conform run --shard K/N` wrote (each holds {MANIFEST})"
    )]
    NoShards(String),
    #[error("shards disagree on N: {a} says {a_n}, {b} says {b_n}")]
    CountDiffers {
        a: PathBuf,
        a_n: u32,
        b: PathBuf,
        b_n: u32,
    },
    #[error(
        "shard {missing} of {n} missing: got {have}; run `conform run --shard K/{n}` for each missing K and pass every folder"
    )]
    Missing {
        missing: String,
        n: u32,
        have: String,
    },
    #[error("shard {shard} given twice: {first} and {second}; pass each shard once")]
    Duplicated {
        shard: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "shards disagree on the conform version: {a} ran {a_version}, {b} ran {b_version}; run every shard with one conform build"
    )]
    Version {
        a: PathBuf,
        a_version: String,
        b: PathBuf,
        b_version: String,
    },
    #[error("shards planned different runs: {a} against {b}: {why}")]
    Plan { a: PathBuf, b: PathBuf, why: String },
    #[error("shard {shard} ({dir}) was interrupted: its evidence is incomplete; run it again")]
    Incomplete { shard: String, dir: PathBuf },
    #[error("{a} answered from tapes and {b} from the providers: merge shards of one kind")]
    MixedReplay { a: PathBuf, b: PathBuf },
    #[error(
        "the workspace here plans a different run than the shards ({dir}): {why}; merge with the same fixtures/ and providers/ the shards ran with"
    )]
    Workspace { dir: PathBuf, why: String },
    #[error(
        "{path}: {found} call records, but the manifest says {expected}: the shard report is truncated or was changed; copy it again"
    )]
    Count {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("{path}:{line}: not a call record: {message}")]
    Record {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}:{line}: a record of {suite} × {provider}, which the plan does not hold")]
    Foreign {
        path: PathBuf,
        line: usize,
        suite: String,
        provider: String,
    },
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The shard reports named on the command line: each path is a shard folder, or a
/// folder whose sub-folders are (how CI tools download several artifacts).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<ShardReport>, MergeError> {
    let mut reports = Vec::new();
    for path in paths {
        if path.join(MANIFEST).is_file() {
            reports.push(ShardReport {
                manifest: Manifest::read(path)?,
                dir: path.clone(),
            });
            continue;
        }
        let entries = std::fs::read_dir(path).map_err(|source| MergeError::Io {
            path: path.clone(),
            source,
        })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join(MANIFEST).is_file())
            .collect();
        if found.is_empty() {
            return Err(MergeError::NoShards(path.display().to_string()));
        }
        found.sort();
        for dir in found {
            reports.push(ShardReport {
                manifest: Manifest::read(&dir)?,
                dir,
            });
        }
    }
    if reports.is_empty() {
        return Err(MergeError::NoShards("the arguments".into()));
    }
    Ok(reports)
}

/// Checks that the reports are shards 1..=N of one run, and sorts them by K.
pub fn validate(reports: &mut [ShardReport]) -> Result<(), MergeError> {
    let Some(first) = reports.first().cloned() else {
        return Err(MergeError::NoShards("the arguments".into()));
    };
    let m0 = &first.manifest;
    for r in reports.iter() {
        let m = &r.manifest;
        if m.shard.n != m0.shard.n {
            return Err(MergeError::CountDiffers {
                a: first.dir.clone(),
                a_n: m0.shard.n,
                b: r.dir.clone(),
                b_n: m.shard.n,
            });
        }
    }
    let mut by_k: BTreeMap<u32, &ShardReport> = BTreeMap::new();
    for r in reports.iter() {
        if let Some(earlier) = by_k.insert(r.manifest.shard.k, r) {
            return Err(MergeError::Duplicated {
                shard: r.manifest.shard.to_string(),
                first: earlier.dir.clone(),
                second: r.dir.clone(),
            });
        }
    }
    let n = m0.shard.n;
    let missing: Vec<String> = (1..=n)
        .filter(|k| !by_k.contains_key(k))
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing {
            missing: missing.join(", "),
            n,
            have: by_k
                .keys()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    for r in reports.iter() {
        let m = &r.manifest;
        if m.conform_version != m0.conform_version {
            return Err(MergeError::Version {
                a: first.dir.clone(),
                a_version: m0.conform_version.clone(),
                b: r.dir.clone(),
                b_version: m.conform_version.clone(),
            });
        }
        if m.plan_digest != m0.plan_digest {
            return Err(MergeError::Plan {
                a: first.dir.clone(),
                b: r.dir.clone(),
                why: m0.plan.difference(&m.plan),
            });
        }
        if m.replayed_from.is_some() != m0.replayed_from.is_some() {
            return Err(MergeError::MixedReplay {
                a: first.dir.clone(),
                b: r.dir.clone(),
            });
        }
        if !m.complete {
            return Err(MergeError::Incomplete {
                shard: m.shard.to_string(),
                dir: r.dir.clone(),
            });
        }
    }
    reports.sort_by_key(|r| r.manifest.shard.k);
    Ok(())
}

/// Refuses when the workspace `conform merge` loaded plans another run than the shards:
/// the verdicts would be made with suites or providers the answers never met.
pub fn check_workspace(
    report: &ShardReport,
    plan: &Plan,
    plan_digest: &str,
) -> Result<(), MergeError> {
    if report.manifest.plan_digest == plan_digest {
        return Ok(());
    }
    Err(MergeError::Workspace {
        dir: report.dir.clone(),
        why: report.manifest.plan.difference(plan),
    })
}

/// Joins validated shard reports into one complete run under `reports_dir`: their records
/// copied into its `results.jsonl` and counted through the run's own tallies, so the
/// verdicts are those an unsharded run of the same calls would reach. A record for a pair
/// the plan does not hold refuses the merge, and the half-made run folder is removed.
pub fn join(
    reports: &[ShardReport],
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    reports_dir: &Path,
) -> Result<RunResult, MergeError> {
    let Some(first) = reports.first() else {
        return Err(MergeError::NoShards(reports_dir.display().to_string()));
    };
    let options = &first.manifest.plan.options;
    let suite_index: HashMap<&str, usize> = (suites.iter().enumerate())
        .map(|(i, s)| (s.suite.name.as_str(), i))
        .collect();
    let provider_index: HashMap<&str, usize> = (targets.iter().enumerate())
        .map(|(i, t)| (t.endpoint.config.name.as_str(), i))
        .collect();
    let run_id = crate::run::new_run_id();
    let dir = reports_dir.join(&run_id);
    std::fs::create_dir_all(&dir).map_err(|source| MergeError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut tallies = Tallies::new(suites, targets, options.repeats, None);
    let copied = copy_records(reports, &dir.join("results.jsonl"), |record| {
        let p = provider_index.get(record.provider.as_str());
        let s = suite_index.get(record.suite.as_str());
        match (p, s) {
            (Some(&p), Some(&s)) => {
                tallies.add(p, s, record);
                true
            }
            _ => false,
        }
    });
    if let Err(e) = copied {
        // The half-made run folder would read as a run: it goes.
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    let parse = |t: &str| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    };
    let started_at = (reports.iter())
        .filter_map(|r| parse(&r.manifest.started_at))
        .min()
        .unwrap_or_else(time::OffsetDateTime::now_utc);
    Ok(RunResult {
        run_id,
        dir,
        started_at,
        finished_at: time::OffsetDateTime::now_utc(),
        complete: true,
        verdicts: tallies.verdicts(suites, targets, options.max_transport_error_share, true),
    })
}

/// Copies every shard's records, in shard order, into `out` (the merged run's
/// `results.jsonl`), handing each to `each` as it goes. Memory stays flat: one line at a
/// time. `each` returns false for a record the plan does not hold, which refuses.
pub fn copy_records(
    reports: &[ShardReport],
    out: &Path,
    mut each: impl FnMut(&mut CallRecord) -> bool,
) -> Result<u64, MergeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Io { path, source }
    };
    let mut writer = BufWriter::new(File::create(out).map_err(io(out))?);
    let mut total = 0;
    for report in reports {
        let path = report.dir.join("results.jsonl");
        let reader = BufReader::new(File::open(&path).map_err(io(&path))?);
        let mut found = 0u64;
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(io(&path))?;
            if line.trim().is_empty() {
                continue;
            }
            let mut record: CallRecord =
                serde_json::from_str(&line).map_err(|e| MergeError::Record {
                    path: path.clone(),
                    line: i + 1,
                    message: e.to_string(),
                })?;
            if !each(&mut record) {
                return Err(MergeError::Foreign {
                    path: path.clone(),
                    line: i + 1,
                    suite: record.suite,
                    provider: record.provider,
                });
            }
            writer.write_all(line.as_bytes()).map_err(io(out))?;
            writer.write_all(b"\n").map_err(io(out))?;
            found += 1;
        }
        if found != report.manifest.calls {
            return Err(MergeError::Count {
                path,
                found,
                expected: report.manifest.calls,
            });
        }
        total += found;
    }
    writer.flush().map_err(io(out))?;
    writer.get_ref().sync_all().map_err(io(out))?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::shard::{FORMAT, PlanOptions, Shard};

    fn report(k: u32, n: u32, tweak: impl FnOnce(&mut Manifest)) -> ShardReport {
        let mut manifest = Manifest {
            format: FORMAT.into(),
            shard: Shard { k, n },
            conform_version: "1.0.0".into(),
            plan_digest: "sha256:plan".into(),
            plan: Plan {
                suites: Vec::new(),
                providers: Vec::new(),
                options: PlanOptions {
                    repeats: None,
                    max_transport_error_share: 0.1,
                    stream: false,
                    references: Default::default(),
                },
            },
            run_id: format!("run-{k}"),
            started_at: String::new(),
            finished_at: String::new(),
            complete: true,
            replayed_from: None,
            calls: 0,
        };
        tweak(&mut manifest);
        ShardReport {
            dir: PathBuf::from(format!("shard-{k}")),
            manifest,
        }
    }

    #[test]
    fn whole_sets_pass_and_come_out_in_order() {
        let mut reports = vec![
            report(3, 3, |_| ()),
            report(1, 3, |_| ()),
            report(2, 3, |_| ()),
        ];
        validate(&mut reports).unwrap();
        let ks: Vec<u32> = reports.iter().map(|r| r.manifest.shard.k).collect();
        assert_eq!(ks, [1, 2, 3]);
    }

    #[test]
    fn every_refusal_names_what_is_wrong() {
        let refusal =
            |mut reports: Vec<ShardReport>| validate(&mut reports).unwrap_err().to_string();
        let missing = refusal(vec![report(1, 4, |_| ()), report(3, 4, |_| ())]);
        assert!(
            missing.contains("shard 2, 4 of 4 missing: got 1, 3"),
            "{missing}"
        );
        let twice = refusal(vec![
            report(1, 2, |_| ()),
            report(1, 2, |_| ()),
            report(2, 2, |_| ()),
        ]);
        assert!(twice.contains("shard 1/2 given twice"), "{twice}");
        let n = refusal(vec![report(1, 2, |_| ()), report(2, 3, |_| ())]);
        assert!(n.contains("disagree on N"), "{n}");
        let version = refusal(vec![
            report(1, 2, |_| ()),
            report(2, 2, |m| m.conform_version = "0.9.0".into()),
        ]);
        assert!(
            version.contains("ran 1.0.0") && version.contains("ran 0.9.0"),
            "{version}"
        );
        let plan = refusal(vec![
            report(1, 2, |_| ()),
            report(2, 2, |m| {
                m.plan_digest = "sha256:other".into();
                m.plan.options.repeats = Some(3);
            }),
        ]);
        assert!(
            plan.contains("planned different runs") && plan.contains("options"),
            "{plan}"
        );
        let mixed = refusal(vec![
            report(1, 2, |_| ()),
            report(2, 2, |m| m.replayed_from = Some("tapes".into())),
        ]);
        assert!(mixed.contains("from tapes"), "{mixed}");
        let cut = refusal(vec![
            report(1, 2, |_| ()),
            report(2, 2, |m| m.complete = false),
        ]);
        assert!(
            cut.contains("shard 2/2") && cut.contains("interrupted"),
            "{cut}"
        );
    }

    #[test]
    fn records_are_copied_counted_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let shard = dir.path().join("s1");
        std::fs::create_dir_all(&shard).unwrap();
        let record = CallRecord::new("suite", "case-1", "p", 0);
        let line = serde_json::to_string(&record).unwrap();
        std::fs::write(shard.join("results.jsonl"), format!("{line}\n{line}\n")).unwrap();
        let mut r = report(1, 1, |m| m.calls = 2);
        r.dir = shard.clone();
        let out = dir.path().join("merged.jsonl");
        let mut seen = Vec::new();
        let n = copy_records(std::slice::from_ref(&r), &out, |rec| {
            seen.push(rec.clone());
            true
        })
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, [record.clone(), record.clone()]);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!("{line}\n{line}\n")
        );

        r.manifest.calls = 3;
        let err = copy_records(std::slice::from_ref(&r), &out, |_| true).unwrap_err();
        assert!(
            err.to_string()
                .contains("2 call records, but the manifest says 3"),
            "{err}"
        );
        let err = copy_records(std::slice::from_ref(&r), &out, |_| false).unwrap_err();
        assert!(err.to_string().contains("suite × p"), "{err}");
        std::fs::write(shard.join("results.jsonl"), "{\"suite\": 1}\n").unwrap();
        let err = copy_records(std::slice::from_ref(&r), &out, |_| true).unwrap_err();
        assert!(
            err.to_string()
                .contains("results.jsonl:1: not a call record"),
            "{err}"
        );
    }
}
