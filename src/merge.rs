//! `conform merge`: shard reports in, one run's call records out, or a refusal that
//! names why the shards do not make one run.
//!
//! Invariants: nothing is merged unless shards 1..=N are each present exactly once,
//! every one complete, and all agree on conform's version, the plan digest (suites,
//! cases, repeats, provider digests, options) and whether they were replayed; every
//! record line is read back as a [`CallRecord`] (a line that is not one refuses the
//! merge), its answer judged again with today's checks ([`crate::run::judge::rejudge`]:
//! a recorded verdict is never trusted), and written into the merged `results.jsonl`; a
//! record answered from a tape makes its shard a replay whatever its manifest says; a
//! shard's record count must match its manifest (a truncated upload refuses) and the
//! calls the run's [`Schedule`] gives that shard (so the shards are every planned call,
//! each once, by the one split the runner used). The
//! merged run is named and timed by its shards (the first call, the last), so merging
//! the same shards again gives the same entry, and shards whose first call is older than
//! the validity asked for are refused. The verdicts are made by
//! [`crate::run::tallies::Tallies`], the path a run takes: this module decides nothing
//! about providers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::collections::HashMap;
use std::sync::Arc;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::results::{self, CallRecord, ReadError, Records};
use crate::run::judge::{CaseIndex, rejudge};
use crate::run::schedule::Schedule;
use crate::run::shard::{MANIFEST, Manifest, ManifestError, ShardedRun};
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
    /// Under a trust file: a shard unsigned, edited after signing, or signed by a key
    /// the file does not list.
    #[error(transparent)]
    Signature(crate::run::shard_signature::ShardSignatureError),
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
    /// Some shards replayed tapes and others called the providers: each side's shards, by
    /// K and folder.
    #[error(
        "{replayed} answered from tapes and {live} from the providers: merge shards of one kind (every shard run with --replay, or none)"
    )]
    MixedReplay { replayed: String, live: String },
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
    #[error(
        "shard {shard} ({dir}) recorded {found} calls, but the plan gives it {planned}: the shard report was changed or made by another split; run it again"
    )]
    Unplanned {
        shard: String,
        dir: PathBuf,
        found: u64,
        planned: u64,
    },
    /// A line of a shard's `results.jsonl` that is not a call record.
    #[error(transparent)]
    Record(ReadError),
    #[error(
        "{path}:{line}: this record was answered from a tape, but the shard's manifest says its answers came from the provider: the shard report was changed; run the shard again"
    )]
    Replayed { path: PathBuf, line: usize },
    #[error(
        "the shards' first call was at {first_call}, more than {valid_for} ago: an entry made from them would already have expired; run the shards again"
    )]
    Stale {
        first_call: String,
        valid_for: String,
    },
    #[error(
        "the shards say their calls were made until {at}, which is later than now: no call is made in the future; run the shards again"
    )]
    Future { at: String },
    #[error("{dir}: the manifest's started_at `{started_at}` is not an RFC 3339 time")]
    Time { dir: PathBuf, started_at: String },
    #[error("{path}:{line}: {message}")]
    Rejudge {
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

impl From<ReadError> for MergeError {
    /// A shard's records that cannot be read are refused as any file merge cannot read;
    /// a line that is not a record, naming its file and line.
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io { path, source } => MergeError::Io { path, source },
            e @ ReadError::Record { .. } => MergeError::Record(e),
        }
    }
}

/// The shard reports named on the command line: each path is a shard folder, or a
/// folder holding shard folders up to [`SEARCH_DEPTH`] levels down (how CI tools download
/// several artifacts, and the `--reports` folders shards were run with, whose shards sit
/// in `shards/shard-K-of-N`).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<ShardReport>, MergeError> {
    let mut reports = Vec::new();
    for path in paths {
        let mut found = Vec::new();
        find_shards(path, SEARCH_DEPTH, &mut found)?;
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

/// How far below a named folder shard folders are looked for: `REPORTS/shards/shard-K-of-N`
/// is two levels, and one more covers a folder of downloaded `--reports` folders.
const SEARCH_DEPTH: usize = 3;

/// Shard folders at or below `path`; a shard folder's own sub-folders are not searched.
fn find_shards(path: &Path, depth: usize, found: &mut Vec<PathBuf>) -> Result<(), MergeError> {
    if path.join(MANIFEST).is_file() {
        found.push(path.to_path_buf());
        return Ok(());
    }
    if depth == 0 {
        return Ok(());
    }
    let entries = std::fs::read_dir(path).map_err(|source| MergeError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    for entry in entries.filter_map(Result::ok) {
        let sub = entry.path();
        if sub.is_dir() {
            find_shards(&sub, depth - 1, found)?;
        }
    }
    Ok(())
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
            return Err(mixed_replay(reports));
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

/// The refusal of shards some of which replayed tapes: `shard 2/3 (DIR)` for each
/// replayed one, and `shards 1/3 (DIR), 3/3 (DIR)` for the live ones, in order of K.
fn mixed_replay(reports: &[ShardReport]) -> MergeError {
    let mut sorted: Vec<&ShardReport> = reports.iter().collect();
    sorted.sort_by_key(|r| r.manifest.shard.k);
    let named = |replayed: bool| {
        let side: Vec<String> = (sorted.iter())
            .filter(|r| r.manifest.replayed_from.is_some() == replayed)
            .map(|r| format!("{} ({})", r.manifest.shard, r.dir.display()))
            .collect();
        let plural = if side.len() == 1 { "" } else { "s" };
        format!("shard{plural} {}", side.join(", "))
    };
    MergeError::MixedReplay {
        replayed: named(true),
        live: named(false),
    }
}

/// Refuses when the workspace `conform merge` loaded plans another run than the shards:
/// the verdicts would be made with suites or providers the answers never met.
pub fn check_workspace(
    report: &ShardReport,
    plan: &ShardedRun,
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

/// When the shards' calls were made: the first shard's start and the last one's end.
fn span(reports: &[ShardReport]) -> Result<(OffsetDateTime, OffsetDateTime), MergeError> {
    let parse = |dir: &Path, t: &str| {
        OffsetDateTime::parse(t, &Rfc3339).map_err(|_| MergeError::Time {
            dir: dir.to_path_buf(),
            started_at: t.to_string(),
        })
    };
    let mut first: Option<OffsetDateTime> = None;
    let mut last: Option<OffsetDateTime> = None;
    for r in reports {
        let started = parse(&r.dir, &r.manifest.started_at)?;
        let finished = parse(&r.dir, &r.manifest.finished_at).unwrap_or(started);
        first = Some(first.map_or(started, |f| f.min(started)));
        last = Some(last.map_or(finished, |l| l.max(finished)));
    }
    match (first, last) {
        (Some(first), Some(last)) => Ok((first, last.max(first))),
        _ => Err(MergeError::NoShards("the arguments".into())),
    }
}

/// Refuses shards whose first call is more than `valid_for` before `now`: an entry is
/// valid for `valid_for` from its first call, so theirs would be expired already.
pub fn check_fresh(
    reports: &[ShardReport],
    valid_for: std::time::Duration,
    now: OffsetDateTime,
) -> Result<(), MergeError> {
    let (first, last) = span(reports)?;
    if last > now + conform_allowlist::CLOCK_SKEW {
        return Err(MergeError::Future {
            at: last.format(&Rfc3339).unwrap_or_default(),
        });
    }
    if first + valid_for <= now {
        return Err(MergeError::Stale {
            first_call: first.format(&Rfc3339).unwrap_or_default(),
            valid_for: conform_config::project::days(valid_for),
        });
    }
    Ok(())
}

/// The merged run's id: the first call's second (so ids sort by when the evidence was
/// made) and a digest of the shards' own run ids, so the same shards always merge into
/// the same run.
fn merged_run_id(reports: &[ShardReport], first: OffsetDateTime) -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let stamp = first.format(&format).unwrap_or_default();
    let mut ids: Vec<&str> = reports.iter().map(|r| r.manifest.run_id.as_str()).collect();
    ids.sort_unstable();
    let digest = conform_config::digest::canonical(&ids);
    let hex = digest.trim_start_matches("sha256:");
    format!("{stamp}-merge-{}", hex.get(..8).unwrap_or(hex))
}

/// The whole run the shards split, as the workspace plans it: their suites and providers
/// with the repeats they ran, unsharded. A merge's estimate and [`join`] both ask it.
pub fn schedule<'a>(
    reports: &[ShardReport],
    suites: &'a [Arc<PreparedSuite>],
    targets: &[Arc<Target>],
) -> Schedule<'a> {
    let repeats = reports
        .first()
        .and_then(|r| r.manifest.plan.options.repeats);
    Schedule::of_run(suites, targets, repeats, None)
}

/// Refuses a shard whose record count is not what `schedule` (the whole run's) gives its
/// share: the shards together must be every planned call, each once.
fn check_planned(reports: &[ShardReport], schedule: &Schedule<'_>) -> Result<(), MergeError> {
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let planned = schedule.calls_by_shard(first.manifest.shard.n);
    for r in reports {
        let shard = r.manifest.shard;
        let share = (shard.k as usize)
            .checked_sub(1)
            .and_then(|i| planned.get(i))
            .copied()
            .unwrap_or(0);
        if r.manifest.calls != share {
            return Err(MergeError::Unplanned {
                shard: shard.to_string(),
                dir: r.dir.clone(),
                found: r.manifest.calls,
                planned: share,
            });
        }
    }
    Ok(())
}

/// Joins validated shard reports into one complete run under `reports_dir`: each record
/// judged again with today's checks, written into its `results.jsonl` and counted
/// through the run's own tallies, so the verdicts are those an unsharded run of the same
/// answers would reach. `schedule` is the whole run's ([`schedule`]). A shard that does
/// not hold the calls the schedule gives it, a record for a pair the plan does not hold,
/// or for a case the suite no longer has, refuses the merge, and the half-made run
/// folder is removed.
pub fn join(
    reports: &[ShardReport],
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    schedule: &Schedule<'_>,
    reports_dir: &Path,
) -> Result<RunResult, MergeError> {
    let Some(first) = reports.first() else {
        return Err(MergeError::NoShards(reports_dir.display().to_string()));
    };
    check_planned(reports, schedule)?;
    let options = &first.manifest.plan.options;
    let suite_index: HashMap<&str, usize> = (suites.iter().enumerate())
        .map(|(i, s)| (s.suite.name.as_str(), i))
        .collect();
    let provider_index: HashMap<&str, usize> = (targets.iter().enumerate())
        .map(|(i, t)| (t.endpoint.config.name.as_str(), i))
        .collect();
    let cases: Vec<CaseIndex> = suites.iter().map(|s| CaseIndex::of(s)).collect();
    let (started_at, finished_at) = span(reports)?;
    let run_id = merged_run_id(reports, started_at);
    let dir = reports_dir.join(&run_id);
    // Made beside it and moved into place once every record is in: the same shards merged
    // again replace the earlier run, and a refused merge leaves it as it was.
    let making = reports_dir.join(format!(".{run_id}.merging"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Io { path, source }
    };
    let _ = std::fs::remove_dir_all(&making);
    std::fs::create_dir_all(&making).map_err(io(&making))?;
    let mut tallies = Tallies::new(suites, targets, schedule);
    let copied = copy_records(reports, &results::path(&making), |shard, record| {
        let p = provider_index.get(record.provider.as_str());
        let s = suite_index.get(record.suite.as_str());
        let (Some(&p), Some(&s)) = (p, s) else {
            return Ok(false);
        };
        let twin = schedule.twin(p, s);
        rejudge(&suites[s], &cases[s], &targets[p], twin, record, shard.now)?;
        tallies.add(p, s, record);
        Ok(true)
    });
    let placed = copied.and_then(|_| {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::rename(&making, &dir).map_err(io(&dir))
    });
    if let Err(e) = placed {
        // The half-made run folder would read as a run: it goes.
        let _ = std::fs::remove_dir_all(&making);
        return Err(e);
    }
    Ok(RunResult {
        run_id,
        dir,
        started_at,
        finished_at,
        complete: true,
        over_budget: false,
        verdicts: tallies.verdicts(suites, options.max_transport_error_share, true, false),
    })
}

/// The shard a record being copied comes from.
pub struct ShardOf {
    /// Its start, unix seconds: what its rules saw as `$now`.
    pub now: i64,
}

/// Copies every shard's records, in shard order, into `out` (the merged run's
/// `results.jsonl`), handing each to `each` as it goes and writing what `each` made of
/// it. Memory stays flat: one line at a time. `each` returns `Ok(false)` for a record the
/// plan does not hold, and `Err` for one it cannot judge; both refuse. A record answered
/// from a tape in a shard whose manifest says otherwise refuses too.
pub fn copy_records(
    reports: &[ShardReport],
    out: &Path,
    mut each: impl FnMut(&ShardOf, &mut CallRecord) -> Result<bool, String>,
) -> Result<u64, MergeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Io { path, source }
    };
    let mut writer = results::Writer::create(out).map_err(io(out))?;
    let mut total = 0;
    for report in reports {
        let path = results::path(&report.dir);
        let shard = ShardOf {
            now: OffsetDateTime::parse(&report.manifest.started_at, &Rfc3339)
                .map(OffsetDateTime::unix_timestamp)
                .map_err(|_| MergeError::Time {
                    dir: report.dir.clone(),
                    started_at: report.manifest.started_at.clone(),
                })?,
        };
        let live = report.manifest.replayed_from.is_none();
        let mut found = 0u64;
        for read in Records::open_file(&path)? {
            let (line, mut record) = read?;
            if live && record.replayed {
                return Err(MergeError::Replayed { path, line });
            }
            match each(&shard, &mut record) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(MergeError::Foreign {
                        path,
                        line,
                        suite: record.suite,
                        provider: record.provider,
                    });
                }
                Err(message) => {
                    return Err(MergeError::Rejudge {
                        path,
                        line,
                        message,
                    });
                }
            }
            writer.write(&record).map_err(io(out))?;
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
    writer.finish().map_err(io(out))?;
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
            plan: ShardedRun {
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
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:01:00Z".into(),
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
        // Which shards were replayed and which live, whichever is given first.
        let replayed = |m: &mut Manifest| m.replayed_from = Some("tapes".into());
        for reports in [
            vec![
                report(1, 3, |_| ()),
                report(2, 3, replayed),
                report(3, 3, |_| ()),
            ],
            vec![
                report(2, 3, replayed),
                report(1, 3, |_| ()),
                report(3, 3, |_| ()),
            ],
        ] {
            let mixed = refusal(reports);
            assert!(
                mixed.contains(
                    "shard 2/3 (shard-2) answered from tapes and shards 1/3 (shard-1), 3/3 (shard-3) from the providers"
                ),
                "{mixed}"
            );
        }
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
        let n = copy_records(std::slice::from_ref(&r), &out, |_, rec| {
            seen.push(rec.clone());
            rec.passed = true;
            Ok(true)
        })
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, [record.clone(), record.clone()]);
        // What is written is what the callback made of each record.
        let judged = serde_json::to_string(&CallRecord {
            passed: true,
            ..record.clone()
        })
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!("{judged}\n{judged}\n")
        );

        r.manifest.calls = 3;
        let err = copy_records(std::slice::from_ref(&r), &out, |_, _| Ok(true)).unwrap_err();
        assert!(
            err.to_string()
                .contains("2 call records, but the manifest says 3"),
            "{err}"
        );
        let err = copy_records(std::slice::from_ref(&r), &out, |_, _| Ok(false)).unwrap_err();
        assert!(err.to_string().contains("suite × p"), "{err}");
        let err = copy_records(std::slice::from_ref(&r), &out, |_, _| {
            Err("no such case".into())
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("results.jsonl:1: no such case"),
            "{err}"
        );
        let replayed = serde_json::to_string(&CallRecord {
            replayed: true,
            ..record.clone()
        })
        .unwrap();
        std::fs::write(shard.join("results.jsonl"), format!("{replayed}\n")).unwrap();
        r.manifest.calls = 1;
        let err = copy_records(std::slice::from_ref(&r), &out, |_, _| Ok(true)).unwrap_err();
        assert!(err.to_string().contains("answered from a tape"), "{err}");
        std::fs::write(shard.join("results.jsonl"), "{\"suite\": 1}\n").unwrap();
        let err = copy_records(std::slice::from_ref(&r), &out, |_, _| Ok(true)).unwrap_err();
        assert!(
            err.to_string()
                .contains("results.jsonl:1: not a call record"),
            "{err}"
        );
    }
}
