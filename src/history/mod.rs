//! A provider's record over time: `reports/history.jsonl` gets one line per (suite,
//! provider) of every conclusive run, appended under a lock and synced once per run, so
//! that `conform history` can show pass rates with the served models and flag a provider
//! that starts to slip ([`drift`]), and `conform diff` can say what changed between two
//! runs ([`diff`]).
//!
//! The file is append-only. A line that does not parse (a crash mid-append leaves at most
//! the last one cut short) is reported with its line number and skipped, never guessed at.

pub mod diff;
pub mod drift;
pub mod listing;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::run::{PreparedSuite, RunResult, Target};
use conform_check::verdict::Verdict;

/// The value of every line's `format`.
pub const FORMAT: &str = "conform.history/v1";

/// One (suite, provider) of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub format: String,
    pub run_id: String,
    /// When the run finished, RFC 3339 UTC.
    pub at: String,
    pub conform_version: String,
    pub suite: String,
    pub provider: String,
    /// The model the provider file configured.
    pub model: String,
    /// Every model name the responses reported.
    pub served_models: Vec<String>,
    pub suite_digest: String,
    pub provider_digest: String,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    pub planned: u64,
    pub passed: u64,
    pub failed: u64,
    pub not_run: u64,
    /// How often each finding code occurred.
    pub codes: BTreeMap<String, u64>,
    /// The run's `report.json`.
    pub report: String,
}

impl Line {
    /// Calls that were sent and judged: passed or failed.
    pub fn ran(&self) -> u64 {
        self.passed + self.failed
    }
}

/// Why the history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("cannot write the history {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the history {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A line of the file that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// 1-based.
    pub line: usize,
    pub why: String,
}

/// The history lines of a finished run: one per (suite, provider) whose verdict is
/// conclusive, in the run's order. A pair the run could not decide (unreachable, refused
/// keys, too little evidence) measured nothing about drift, so it leaves no line.
pub fn lines_from_run(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    report: &Path,
) -> Vec<Line> {
    let at = result
        .finished_at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    result
        .verdicts
        .iter()
        .filter(|v| v.verdict != conform_check::verdict::Verdict::Inconclusive)
        .map(|v| {
            let suite = &suites[v.suite_index].suite;
            let config = &targets[v.provider_index].endpoint.config;
            let t = &v.tally;
            Line {
                format: FORMAT.to_string(),
                run_id: result.run_id.clone(),
                at: at.clone(),
                conform_version: env!("CARGO_PKG_VERSION").to_string(),
                suite: suite.name.clone(),
                provider: config.name.clone(),
                model: config.model.clone(),
                served_models: t.served_models.iter().cloned().collect(),
                suite_digest: suite.digest().to_string(),
                provider_digest: config.digest(),
                verdict: v.verdict,
                reasons: conform_check::verdict::Reason::names(&v.reasons),
                planned: t.planned,
                passed: t.passed,
                failed: t.failed,
                not_run: t.not_run,
                codes: t.codes.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
                report: report.display().to_string(),
            }
        })
        .collect()
}

/// Appends `lines` to the history at `path` in one write, under an exclusive advisory
/// lock (concurrent runs never interleave), and syncs it: a run's lines are all there or,
/// after a crash, at most the last one is cut short.
pub fn append(path: &Path, lines: &[Line]) -> Result<(), HistoryError> {
    let io = |source| HistoryError::Write {
        path: path.to_path_buf(),
        source,
    };
    if lines.is_empty() {
        return Ok(());
    }
    let mut text = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut text, line).map_err(|e| io(e.into()))?;
        text.push(b'\n');
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    let mut lock = fd_lock::RwLock::new(file);
    let mut file = lock.write().map_err(io)?;
    file.write_all(&text).map_err(io)?;
    file.sync_data().map_err(io)
}

/// The history file of a reports folder, which every conclusive run appends to.
pub fn file_in(reports: &Path) -> PathBuf {
    reports.join("history.jsonl")
}

/// Reads the history at `path`, keeping the lines `keep` accepts (so memory is bounded
/// by what is asked for, not by the file). A missing file is an empty history.
pub fn read(
    path: &Path,
    keep: impl Fn(&Line) -> bool,
) -> Result<(Vec<Line>, Vec<Skipped>), HistoryError> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Vec::new(), Vec::new()));
        }
        Err(source) => {
            return Err(HistoryError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut lines = Vec::new();
    let mut skipped = Vec::new();
    for (i, text) in BufReader::new(file).lines().enumerate() {
        let text = text.map_err(|source| HistoryError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if text.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&text) {
            Ok(line) if line.format == FORMAT => {
                if keep(&line) {
                    lines.push(line);
                }
            }
            Ok(line) => skipped.push(Skipped {
                line: i + 1,
                why: format!("format `{}`, expected `{FORMAT}`", line.format),
            }),
            Err(e) => skipped.push(Skipped {
                line: i + 1,
                why: e.to_string(),
            }),
        }
    }
    Ok((lines, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(run: &str, passed: u64, failed: u64) -> Line {
        Line {
            format: FORMAT.into(),
            run_id: run.into(),
            at: "2026-01-01T00:00:00Z".into(),
            conform_version: "0.1.0".into(),
            suite: "s".into(),
            provider: "p".into(),
            model: "m".into(),
            served_models: vec!["m-1".into()],
            suite_digest: "sha256:1".into(),
            provider_digest: "sha256:2".into(),
            verdict: Verdict::Conformant,
            reasons: Vec::new(),
            planned: passed + failed,
            passed,
            failed,
            not_run: 0,
            codes: BTreeMap::new(),
            report: "reports/r/report.json".into(),
        }
    }

    #[test]
    fn appended_runs_read_back_and_a_cut_line_is_skipped_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reports/history.jsonl");
        append(&path, &[line("r1", 10, 0), line("r1", 9, 1)]).unwrap();
        append(&path, &[line("r2", 8, 2)]).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"format\": \"conform.history/v1\", \"run_id\": \"r3\"");
        std::fs::write(&path, text).unwrap();
        let (lines, skipped) = read(&path, |_| true).unwrap();
        assert_eq!(
            lines.iter().map(|l| l.run_id.as_str()).collect::<Vec<_>>(),
            ["r1", "r1", "r2"]
        );
        assert_eq!(lines[2], line("r2", 8, 2));
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].line, 4);
        let (only, _) = read(&path, |l| l.failed > 0).unwrap();
        assert_eq!(only.len(), 2);
    }

    #[test]
    fn no_file_is_an_empty_history() {
        let dir = tempfile::tempdir().unwrap();
        let (lines, skipped) = read(&dir.path().join("none.jsonl"), |_| true).unwrap();
        assert!(lines.is_empty() && skipped.is_empty());
    }
}
