//! `report.json`: the run, the verdicts, and every call record. The call records are
//! copied from `results.jsonl` line by line, so writing the report takes constant memory.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use crate::run::{PairVerdict, PreparedSuite, RunResult, Target};
use conform_check::verdict::{Reason, Tally};

pub const FORMAT: &str = "conform.report/v1";

/// One verdict as the report shows it.
#[derive(Debug, Serialize)]
pub struct VerdictView<'a> {
    pub suite: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub verdict: &'static str,
    pub reasons: &'a [Reason],
    pub pass_rate: f64,
    pub first_attempt_pass_rate: f64,
    /// The failure rate the calls rule out (95 % confidence).
    pub rules_out: conform_gate::allowlist::RulesOut,
    /// Calls sent and recorded: `planned` less the `saved` and the `not_run`.
    pub sent: u64,
    #[serde(flatten)]
    pub tally: &'a Tally,
}

pub fn verdict_views<'a>(
    result: &'a RunResult,
    targets: &'a [std::sync::Arc<Target>],
) -> Vec<VerdictView<'a>> {
    result
        .verdicts
        .iter()
        .map(|v: &PairVerdict| VerdictView {
            suite: &v.tally.suite,
            provider: &v.tally.provider,
            model: &targets[v.provider_index].endpoint.config.model,
            verdict: v.verdict.as_str(),
            reasons: &v.reasons,
            pass_rate: v.tally.pass_rate(),
            first_attempt_pass_rate: v.tally.first_attempt_pass_rate(),
            rules_out: conform_gate::allowlist::RulesOut::of(v.tally.planned, v.tally.passed),
            sent: v.tally.sent(),
            tally: &v.tally,
        })
        .collect()
}

/// Writes `report.json` beside `results.jsonl` and returns its path.
pub fn write(
    result: &RunResult,
    suites: &[std::sync::Arc<PreparedSuite>],
    targets: &[std::sync::Arc<Target>],
) -> io::Result<PathBuf> {
    let mut report = JsonReport::start(result, suites, targets)?;
    crate::results::Lines::each(&result.dir, |line| report.call(line))?;
    report.finish()
}

/// `report.json` as it is written: its head (the run, suites, providers and verdicts)
/// first, then each call copied from its `results.jsonl` line as the lines are read.
pub struct JsonReport {
    path: PathBuf,
    out: BufWriter<File>,
    first: bool,
}

impl JsonReport {
    /// Creates `report.json` beside `results.jsonl` and writes everything but the calls.
    pub fn start(
        result: &RunResult,
        suites: &[std::sync::Arc<PreparedSuite>],
        targets: &[std::sync::Arc<Target>],
    ) -> io::Result<Self> {
        let path = result.dir.join("report.json");
        let mut out = BufWriter::new(File::create(&path)?);
        let head = json!({
            "format": FORMAT,
            "run": {
                "id": result.run_id,
                "started_at": rfc3339(result.started_at),
                "finished_at": rfc3339(result.finished_at),
                "complete": result.complete,
                "conform_version": env!("CARGO_PKG_VERSION"),
            },
            "suites": suites.iter().map(|s| json!({
                "name": s.suite.name,
                "digest": s.suite.digest(),
                "cases": s.suite.cases.len(),
                "pass_threshold": s.suite.pass_threshold,
                // Only these fields of a case's `expected` are compared with an answer.
                "compared": s.suite.agree,
            })).collect::<Vec<_>>(),
            "providers": targets.iter().map(|t| {
                let c = &t.endpoint.config;
                json!({"name": c.name, "kind": c.kind, "model": c.model, "digest": c.digest(),
                       "temperature": c.temperature, "structured_output": c.structured_output,
                       "wire": c.wire_kind(), "temperature_sent": c.sends_temperature(),
                       "properties": c.run_properties(),
                       "requests_sent": t.endpoint.requests_sent(),
                       "pacing": t.endpoint.pace()})
            }).collect::<Vec<_>>(),
            "verdicts": verdict_views(result, targets),
        });
        // Write the head without its closing brace, then stream the calls into it.
        let head = serde_json::to_string_pretty(&head)?;
        let head = head.trim_end().trim_end_matches('}').trim_end();
        out.write_all(head.as_bytes())?;
        out.write_all(b",\n  \"calls\": [")?;
        Ok(JsonReport {
            path,
            out,
            first: true,
        })
    }

    /// Copies one `results.jsonl` line into the calls, verbatim (a line cut short by a
    /// crash too: the file keeps what the run wrote); blank lines are skipped.
    pub fn call(&mut self, line: &str) -> io::Result<()> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let separator: &[u8] = if self.first { b"\n    " } else { b",\n    " };
        self.out.write_all(separator)?;
        self.out.write_all(line.as_bytes())?;
        self.first = false;
        Ok(())
    }

    /// Closes the calls and the document, and makes the file durable: an allowlist entry
    /// names it as its evidence. Returns its path.
    pub fn finish(mut self) -> io::Result<PathBuf> {
        self.out.write_all(b"\n  ]\n}\n")?;
        self.out
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()?;
        Ok(self.path)
    }
}

/// A run's time as the reports show it.
pub(crate) fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A time as people read it: UTC, to the second, e.g. `2026-03-01 09:12:44 UTC`.
pub(crate) fn to_second(t: time::OffsetDateTime) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    t.to_offset(time::UtcOffset::UTC)
        .format(&format)
        .unwrap_or_default()
}

/// An RFC 3339 time from a file, as [`to_second`] shows it; text that is not RFC 3339 is
/// shown as it is rather than hidden.
pub(crate) fn to_second_text(text: &str) -> String {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_or_else(|_| text.to_string(), to_second)
}

/// A duration as people read it, to the second: `48 s`, `3 min 05 s`, `2 h 01 min`.
pub(crate) fn seconds_text(d: time::Duration) -> String {
    let s = d.whole_seconds().max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}
