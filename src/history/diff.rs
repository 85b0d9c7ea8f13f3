//! `conform diff RUN_A RUN_B`: what changed between two runs. The cases whose outcome
//! flipped, the finding codes that are new (or gone), and the allowlist entries whose fate
//! differs (a pair that B would grant or revoke where A did not).
//!
//! Both runs are read from their folders: the verdicts from `report.json` (its calls are
//! skipped as they stream past, not held), every call from `results.jsonl`. Memory is
//! one small record per call of run A.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::results::{self, CallRecord, ReadError, Records};
use conform_check::verdict::Verdict;
use conform_wire::provider::ErrorKind;

/// How many flipped calls a pair lists; the rest are counted.
pub const MAX_LISTED: usize = 20;

/// Why a run could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a conform report: {message}")]
    Report { path: PathBuf, message: String },
}

/// A call that passed in one run and failed in the other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flip {
    pub case: String,
    pub repeat: u32,
    /// The finding codes of the run where it failed.
    pub codes: Vec<String>,
}

/// What the two runs' verdicts mean for the pair's allowlist entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryChange {
    /// B is conformant where A was not: B grants what A did not.
    WouldGrant,
    /// B is nonconformant where A was not: B revokes.
    WouldRevoke,
    /// The same fate (or B is inconclusive, which changes nothing).
    Same,
}

/// One (suite, provider) in both runs, or in one of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairDiff {
    pub suite: String,
    pub provider: String,
    pub verdict_a: Option<Verdict>,
    pub verdict_b: Option<Verdict>,
    pub entry: EntryChange,
    /// Passed in A, failed in B (the first [`MAX_LISTED`], in case order).
    pub now_failing: Vec<Flip>,
    pub now_failing_total: u64,
    /// Failed in A, passed in B.
    pub now_passing: Vec<Flip>,
    pub now_passing_total: u64,
    /// Finding codes B has and A had not.
    pub new_codes: Vec<String>,
    /// Finding codes A had and B has not.
    pub gone_codes: Vec<String>,
}

impl PairDiff {
    /// Whether B is worse than A for this pair.
    pub fn regressed(&self) -> bool {
        self.now_failing_total > 0
            || !self.new_codes.is_empty()
            || self.entry == EntryChange::WouldRevoke
    }

    fn changed(&self) -> bool {
        self.regressed()
            || self.now_passing_total > 0
            || !self.gone_codes.is_empty()
            || self.entry != EntryChange::Same
            || self.verdict_a != self.verdict_b
    }
}

/// What changed from run A to run B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDiff {
    pub run_a: String,
    pub run_b: String,
    /// Only the pairs where something changed.
    pub pairs: Vec<PairDiff>,
}

impl RunDiff {
    pub fn regressed(&self) -> bool {
        self.pairs.iter().any(PairDiff::regressed)
    }
}

#[derive(Deserialize)]
struct ReportHead {
    run: RunHead,
    verdicts: Vec<VerdictHead>,
}

#[derive(Deserialize)]
struct RunHead {
    id: String,
}

#[derive(Deserialize)]
struct VerdictHead {
    suite: String,
    provider: String,
    verdict: Verdict,
}

/// A call's finding codes, as `conform diff` lists them: every check's findings, the
/// error's kind as the record writes it, and `not_sent` for a call not sent.
fn codes_of(call: &CallRecord) -> Vec<String> {
    let mut codes: Vec<String> = (call.checks.iter())
        .flat_map(|c| c.findings.iter().map(|f| f.code.as_str().to_string()))
        .chain(call.error.iter().map(|e| kind_name(e.kind)))
        .chain(call.not_run.iter().map(|_| "not_sent".to_string()))
        .collect();
    codes.sort();
    codes.dedup();
    codes
}

/// The error kind's name in `results.jsonl` (`auth`, not the finding code `auth_failed`).
fn kind_name(kind: ErrorKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        _ => kind.code().to_string(),
    }
}

type PairKey = (String, String);

/// A run named by its id (a folder in `reports`) or by its folder.
pub fn run_dir(reports: &Path, run: &str) -> std::path::PathBuf {
    let as_path = Path::new(run);
    if as_path.join("report.json").is_file() {
        as_path.to_path_buf()
    } else {
        reports.join(run)
    }
}

/// Compares the runs in the folders `a` and `b`.
pub fn diff(a: &Path, b: &Path) -> Result<RunDiff, DiffError> {
    let head_a = head(a)?;
    let head_b = head(b)?;
    let mut pairs = verdict_pairs(&head_a, &head_b);
    let mut calls = compare_calls(a, b)?;
    for (key, pair) in &mut pairs {
        calls.settle(key, pair);
    }
    Ok(RunDiff {
        run_a: head_a.run.id,
        run_b: head_b.run.id,
        pairs: pairs.into_values().filter(PairDiff::changed).collect(),
    })
}

/// Every pair either run decided, with its two verdicts and nothing else yet.
fn verdict_pairs(head_a: &ReportHead, head_b: &ReportHead) -> BTreeMap<PairKey, PairDiff> {
    let mut pairs: BTreeMap<PairKey, PairDiff> = BTreeMap::new();
    let blank = |suite: &str, provider: &str| PairDiff {
        suite: suite.to_string(),
        provider: provider.to_string(),
        verdict_a: None,
        verdict_b: None,
        entry: EntryChange::Same,
        now_failing: Vec::new(),
        now_failing_total: 0,
        now_passing: Vec::new(),
        now_passing_total: 0,
        new_codes: Vec::new(),
        gone_codes: Vec::new(),
    };
    for (heads, in_b) in [(&head_a.verdicts, false), (&head_b.verdicts, true)] {
        for v in heads {
            let pair = pairs
                .entry((v.suite.clone(), v.provider.clone()))
                .or_insert_with(|| blank(&v.suite, &v.provider));
            match in_b {
                false => pair.verdict_a = Some(v.verdict),
                true => pair.verdict_b = Some(v.verdict),
            }
        }
    }
    pairs
}

/// What the two runs' calls say, per pair: the codes each run found, and the calls that
/// flipped (`(now failing, now passing)`).
#[derive(Default)]
struct Calls {
    codes_a: BTreeMap<PairKey, BTreeSet<String>>,
    codes_b: BTreeMap<PairKey, BTreeSet<String>>,
    flips: BTreeMap<PairKey, (Vec<Flip>, Vec<Flip>)>,
}

/// Run A's outcome of every call, then B's streamed against it.
fn compare_calls(a: &Path, b: &Path) -> Result<Calls, DiffError> {
    let mut calls = Calls::default();
    let mut outcome_a: HashMap<(PairKey, String, u32), (bool, Vec<String>)> = HashMap::new();
    each_call(&results::path(a), |call| {
        let codes = codes_of(&call);
        let key = (call.suite.clone(), call.provider.clone());
        (calls.codes_a.entry(key.clone()).or_default()).extend(codes.iter().cloned());
        outcome_a.insert((key, call.case, call.repeat), (call.passed, codes));
    })?;
    each_call(&results::path(b), |call| {
        let codes = codes_of(&call);
        let key = (call.suite.clone(), call.provider.clone());
        (calls.codes_b.entry(key.clone()).or_default()).extend(codes.iter().cloned());
        let Some((passed_a, codes_then)) =
            outcome_a.get(&(key.clone(), call.case.clone(), call.repeat))
        else {
            return;
        };
        let (failing, passing) = calls.flips.entry(key).or_default();
        if *passed_a && !call.passed {
            failing.push(Flip {
                case: call.case,
                repeat: call.repeat,
                codes,
            });
        } else if !*passed_a && call.passed {
            passing.push(Flip {
                case: call.case,
                repeat: call.repeat,
                codes: codes_then.clone(),
            });
        }
    })?;
    Ok(calls)
}

impl Calls {
    /// Fills in `pair`'s codes, entry change and flipped calls.
    fn settle(&mut self, key: &PairKey, pair: &mut PairDiff) {
        let none = BTreeSet::new();
        let (was, now) = (
            self.codes_a.get(key).unwrap_or(&none),
            self.codes_b.get(key).unwrap_or(&none),
        );
        pair.new_codes = now.difference(was).cloned().collect();
        pair.gone_codes = was.difference(now).cloned().collect();
        pair.entry = match (pair.verdict_a, pair.verdict_b) {
            (a, Some(Verdict::Conformant)) if a != Some(Verdict::Conformant) => {
                EntryChange::WouldGrant
            }
            (a, Some(Verdict::Nonconformant)) if a != Some(Verdict::Nonconformant) => {
                EntryChange::WouldRevoke
            }
            _ => EntryChange::Same,
        };
        if let Some((mut failing, mut passing)) = self.flips.remove(key) {
            for list in [&mut failing, &mut passing] {
                list.sort_by(|x, y| (&x.case, x.repeat).cmp(&(&y.case, y.repeat)));
            }
            pair.now_failing_total = failing.len() as u64;
            pair.now_passing_total = passing.len() as u64;
            failing.truncate(MAX_LISTED);
            passing.truncate(MAX_LISTED);
            pair.now_failing = failing;
            pair.now_passing = passing;
        }
    }
}

fn head(dir: &Path) -> Result<ReportHead, DiffError> {
    let path = dir.join("report.json");
    let file = File::open(&path).map_err(|source| DiffError::Read {
        path: path.clone(),
        source,
    })?;
    // The calls are skipped as they stream past: the head is all that is kept.
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| DiffError::Report {
        path,
        message: e.to_string(),
    })
}

fn each_call(path: &Path, mut f: impl FnMut(CallRecord)) -> Result<(), DiffError> {
    let unreadable = |e: ReadError| match e {
        ReadError::Io { path, source } => DiffError::Read { path, source },
        ReadError::Record { path, line, source } => DiffError::Report {
            path,
            message: format!("line {line}: {source}"),
        },
    };
    for read in Records::open_file(path).map_err(unreadable)? {
        let (_, call) = read.map_err(unreadable)?;
        f(call);
    }
    Ok(())
}

/// The diff for people: each pair whose verdict or outcomes changed, its new and gone
/// finding codes, and the calls that flipped.
impl std::fmt::Display for RunDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        let mut out = format!("{} → {}\n", self.run_a, self.run_b);
        if self.pairs.is_empty() {
            out.push_str("  nothing changed: the same verdicts, the same outcome for every call\n");
            return f.write_str(&out);
        }
        let verdict =
            |v: Option<conform_check::verdict::Verdict>| v.map_or("absent", |v| v.as_str());
        for p in &self.pairs {
            let _ = writeln!(
                out,
                "\n{} × {}: {} → {}{}",
                p.suite,
                p.provider,
                verdict(p.verdict_a),
                verdict(p.verdict_b),
                match p.entry {
                    EntryChange::WouldGrant => "; the allowlist entry would be granted",
                    EntryChange::WouldRevoke => "; the allowlist entry would be revoked",
                    EntryChange::Same => "",
                }
            );
            if !p.new_codes.is_empty() {
                let _ = writeln!(out, "  new finding codes: {}", p.new_codes.join(", "));
            }
            if !p.gone_codes.is_empty() {
                let _ = writeln!(out, "  codes gone: {}", p.gone_codes.join(", "));
            }
            let list = |out: &mut String, what: &str, flips: &[Flip], total: u64| {
                if total == 0 {
                    return;
                }
                let _ = writeln!(out, "  {what} ({total}):");
                for f in flips {
                    let _ = writeln!(
                        out,
                        "    {} (repeat {}){}",
                        f.case,
                        f.repeat,
                        if f.codes.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", f.codes.join(", "))
                        }
                    );
                }
                if total > flips.len() as u64 {
                    let _ = writeln!(out, "    … and {} more", total - flips.len() as u64);
                }
            };
            list(&mut out, "now failing", &p.now_failing, p.now_failing_total);
            list(&mut out, "now passing", &p.now_passing, p.now_passing_total);
        }
        f.write_str(&out)
    }
}
