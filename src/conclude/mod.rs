//! What a finished run leaves behind, in the order that keeps every promise: `report.json`
//! (the evidence allowlist entries point to) and `junit.xml` first, from one pass over
//! `results.jsonl` that also gathers `report.html`'s failures; then the allowlist
//! update under its lock (for a replay, only the allowlist it would have written, beside
//! its report); then `summary.md` and `report.html`, which say what it now grants; last,
//! for a conclusive run of real answers, the history line. `conform run` and `conform
//! merge` both end here, so a merged run concludes exactly as an unsharded one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub mod grants;

pub use grants::{Destination, changes_from_run, withheld};

use crate::outcome::{AllowlistEffect, Untouched};

use crate::report;
use crate::run::{PreparedSuite, RunResult, Target};
use conform_gate::allowlist::{self, UpdateError};

/// Where a run's conclusions go, and what kind of run it was.
#[derive(Debug, Clone)]
pub struct Conclude {
    /// The allowlist production reads (a demo writes its own beside its report instead).
    pub allowlist: PathBuf,
    /// `reports/history.jsonl`.
    pub history: PathBuf,
    /// The tapes the answers were replayed from: the allowlist is then never touched.
    pub replayed: Option<PathBuf>,
    pub destination: Destination,
    /// How long a grant is valid.
    pub valid_for: Duration,
    /// The CI's key (`CONFORM_SIGNING_KEY`): every entry granted, and every revocation,
    /// is signed with it.
    pub signing: Option<std::sync::Arc<conform_allowlist::sign::SigningKey>>,
    /// The project's trust file, if it has one: production's allowlist then keeps its
    /// signed statements from unsigned grants ([`allowlist::Overwrite`]).
    pub trust: Option<PathBuf>,
    /// `--allow-unsigned`: replace signed statements with unsigned grants anyway.
    pub allow_unsigned: bool,
}

impl Conclude {
    /// The conclusions of a run that is not replayed: to `allowlist` (or the demo's own)
    /// and the history of `reports`.
    pub fn to(
        allowlist: PathBuf,
        reports: &Path,
        destination: Destination,
        valid_for: Duration,
        trust: Option<PathBuf>,
    ) -> Conclude {
        Conclude {
            allowlist,
            history: crate::history::file_in(reports),
            replayed: None,
            destination,
            valid_for,
            signing: None,
            trust,
            allow_unsigned: false,
        }
    }
}

/// What concluding wrote, and what it could not.
#[derive(Debug)]
pub struct Conclusion {
    pub report: PathBuf,
    /// `report.html`.
    pub page: PathBuf,
    /// What the run did to each pair's allowlist entry.
    pub outcome: AllowlistEffect,
    /// What went wrong that did not stop anything (an unreadable allowlist replaced,
    /// entries without evidence dropped, the history not appended).
    pub warnings: Vec<String>,
    /// The allowlist update failed: the file is as it was, and the reports say so.
    pub update_error: Option<UpdateError>,
    /// Production's allowlist, or the demo's own.
    pub destination: Destination,
    /// Per suite that ran, the fields of `expected` an answer is compared on (`agree`):
    /// the rest of `expected` is documentation, which nobody guesses.
    pub compared: Vec<(String, Vec<String>)>,
}

impl Conclusion {
    /// What a person at the terminal reads: the verdicts and why, what was written
    /// where (`tapes` recorded beside), and what the allowlist now grants.
    pub fn text(
        &self,
        result: &RunResult,
        targets: &[Arc<Target>],
        tapes: &[PathBuf],
        verbose: bool,
    ) -> String {
        use std::fmt::Write as _;
        let mut out = report::terminal::summary(result);
        if !self.compared.is_empty() {
            out.push_str("\ncompared with each case's `expected`:\n");
            for (suite, fields) in &self.compared {
                let fields = match fields.is_empty() {
                    true => "nothing (no `agree` pointers: only the schema and the rules hold)"
                        .to_string(),
                    false => fields.join(", "),
                };
                let _ = writeln!(out, "  {suite}: {fields}");
            }
        }
        if !result.complete {
            let _ = writeln!(out, "\n{}", interrupted_counts(result, targets));
        }
        let _ = writeln!(
            out,
            "\nreport: {} (for people: {})",
            self.report.display(),
            self.page.display()
        );
        let _ = writeln!(
            out,
            "results: {}",
            crate::results::path(&result.dir).display()
        );
        for tape in tapes {
            let _ = writeln!(out, "tape: {}", tape.display());
        }
        let simulated: Vec<&str> = targets
            .iter()
            .map(|t| t.endpoint.config.as_ref())
            .filter(|c| c.is_simulated())
            .map(|c| c.name.as_str())
            .collect();
        let demo = self.destination == Destination::Demo;
        if !demo && !simulated.is_empty() {
            let _ = writeln!(
                out,
                "note: simulated providers never enter the allowlist a real run writes: {} left out (`conform demo` keeps its own)",
                simulated.join(", ")
            );
        }
        out.push_str(&report::terminal::allowlist(&self.outcome, verbose));
        if demo {
            out.push_str("(the demo's own allowlist: its entries are marked simulated and permit no real failover)\n");
        }
        out
    }
}

/// What an interrupted run got through: the calls it recorded, of how many, and the
/// requests already sent (some of which the providers may still process and bill).
fn interrupted_counts(result: &RunResult, targets: &[Arc<Target>]) -> String {
    let planned: u64 = result.verdicts.iter().map(|v| v.tally.planned).sum();
    let ran: u64 = (result.verdicts.iter())
        .map(|v| v.tally.passed + v.tally.failed)
        .sum();
    let sent: u64 = targets.iter().map(|t| t.endpoint.requests_sent()).sum();
    let stopped = match result.over_budget {
        true => "stopped by the budget",
        false => "interrupted",
    };
    format!(
        "{stopped}: {sent} request{} sent to the providers; {ran} of {planned} planned \
         calls completed and recorded; the report is marked incomplete",
        if sent == 1 { " was" } else { "s were" }
    )
}

/// A report or the replayed allowlist could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ConcludeError {
    #[error("cannot write {what} in {dir}: {source}")]
    Write {
        what: &'static str,
        dir: PathBuf,
        source: io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Allowlist(#[from] UpdateError),
    #[error(transparent)]
    Trust(#[from] conform_allowlist::sign::SignError),
}

/// Writes everything `result` concludes, in the order the module's documentation gives.
pub fn conclude(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    how: &Conclude,
) -> Result<Conclusion, ConcludeError> {
    let (report_path, examples) = read_results(result, suites, targets)?;
    // The demo's evidence is about simulations: it goes beside its report, never into the
    // allowlist production reads.
    let allowlist_path = match how.destination {
        Destination::Real => how.allowlist.clone(),
        Destination::Demo => result.dir.join("allowlist.json"),
    };
    let changes = || signed_changes(result, suites, targets, &report_path, how);
    let mut warnings = Vec::new();
    let (outcome, update_error) = apply(
        result,
        targets,
        &allowlist_path,
        changes,
        how,
        &mut warnings,
    )?;
    let outcome = AllowlistEffect {
        simulated: how.destination == Destination::Demo,
        ..outcome
    };
    let write = |what| write_error(result, what);
    report::markdown::write(&result.dir, result, &outcome).map_err(write("summary.md"))?;
    let page =
        report::html::write(result, targets, &outcome, examples).map_err(write("report.html"))?;

    // A conclusive run of real answers goes into the history; a replay or an interrupted
    // run says nothing new about the providers.
    if result.complete && how.replayed.is_none() {
        let lines = crate::history::lines_from_run(result, suites, targets, &report_path);
        if let Err(e) = crate::history::append(&how.history, &lines) {
            warnings.push(e.to_string());
        }
    }
    Ok(Conclusion {
        report: report_path,
        page,
        outcome,
        warnings,
        update_error,
        destination: how.destination,
        compared: compared(result, suites),
    })
}

/// The error of a report of `result` that cannot be written.
fn write_error(result: &RunResult, what: &'static str) -> impl FnOnce(io::Error) -> ConcludeError {
    let dir = result.dir.clone();
    move |source| ConcludeError::Write { what, dir, source }
}

/// One pass over `results.jsonl` feeds the three reports that read it: `report.json` and
/// `junit.xml` are written, and `report.html`'s failures gathered (the page needs the
/// allowlist's outcome, so it is written later). Returns `report.json`'s path.
fn read_results(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
) -> Result<(PathBuf, report::html::Examples), ConcludeError> {
    let write = |what| write_error(result, what);
    let mut json =
        report::json::JsonReport::start(result, suites, targets).map_err(write("report.json"))?;
    let mut junit = report::junit::JunitReport::start(&result.dir);
    let mut examples = report::html::Examples::new(&report::json::verdict_views(result, targets));
    let results = crate::results::path(&result.dir);
    let read = |source| ConcludeError::Read {
        path: results.clone(),
        source,
    };
    let mut lines = crate::results::Lines::open(&result.dir).map_err(read)?;
    while let Some(line) = lines.next_line().map_err(read)? {
        json.call(line).map_err(write("report.json"))?;
        // A call junit.xml read as passed has no failure to show.
        if junit.call(line).map_err(write("junit.xml"))? != Some(true) {
            examples.call(line);
        }
    }
    let report_path = json.finish().map_err(write("report.json"))?;
    junit.finish(&result.run_id).map_err(write("junit.xml"))?;
    Ok((report_path, examples))
}

/// The changes the run implies, each signed with the CI's key when there is one.
fn signed_changes(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    report_path: &Path,
    how: &Conclude,
) -> Vec<allowlist::Change> {
    let mut changes = grants::changes_from_run(
        result,
        suites,
        targets,
        report_path,
        how.valid_for,
        how.destination,
    );
    if let Some(key) = &how.signing {
        for change in &mut changes {
            match change {
                allowlist::Change::Grant(entry) => allowlist::attest::sign(&mut **entry, key),
                allowlist::Change::Revoke(r) => allowlist::attest::sign(r, key),
                allowlist::Change::Withhold { .. } => {}
            }
        }
    }
    changes
}

/// What the run does to the allowlist at `path`: a replay writes only the allowlist it
/// would have written, beside its report; a complete run applies its `changes`; an
/// interrupted one touches nothing. The error beside it is the update's, which left the
/// file as it was: the reports still say so before the error ends the command.
fn apply(
    result: &RunResult,
    targets: &[Arc<Target>],
    path: &Path,
    changes: impl FnOnce() -> Vec<allowlist::Change>,
    how: &Conclude,
    warnings: &mut Vec<String>,
) -> Result<(AllowlistEffect, Option<UpdateError>), ConcludeError> {
    if let Some(tapes) = &how.replayed {
        write_replayed_allowlist(path, &result.dir, &changes())?;
        let why = Untouched::Replayed {
            tapes: tapes.clone(),
        };
        return Ok((AllowlistEffect::untouched(path, result, why), None));
    }
    if !result.complete {
        let why = match result.over_budget {
            true => Untouched::OverBudget,
            false => Untouched::Interrupted,
        };
        return Ok((AllowlistEffect::untouched(path, result, why), None));
    }
    let changes = changes();
    Ok(match update(path, &changes, how, warnings)? {
        Ok(updated) => (
            AllowlistEffect::applied(path, result, targets, &changes, &updated),
            None,
        ),
        // The file is replaced by rename or not at all: a failed update left it as it was.
        Err(e) => {
            let why = Untouched::Failed {
                error: e.to_string(),
            };
            (AllowlistEffect::untouched(path, result, why), Some(e))
        }
    })
}

/// Per suite that ran and has cases with `expected`, the fields compared with it.
fn compared(result: &RunResult, suites: &[Arc<PreparedSuite>]) -> Vec<(String, Vec<String>)> {
    (suites.iter())
        .filter(|s| (result.verdicts.iter()).any(|v| v.tally.suite == s.suite.name))
        // Cases without `expected` are compared with a reference, if anything: a suite
        // none of whose cases has one has nothing to list here.
        .filter(|s| s.has_expected)
        .map(|s| (s.suite.name.clone(), s.suite.agree.clone()))
        .collect()
}

/// Applies a conclusive run's `changes` to the allowlist at `path`, guarding production's
/// signed statements under the project's trust file, and says what went wrong that did
/// not stop anything in `warnings`. The inner error is the update's: the file is as it was.
fn update(
    path: &Path,
    changes: &[allowlist::Change],
    how: &Conclude,
    warnings: &mut Vec<String>,
) -> Result<Result<allowlist::Updated, UpdateError>, ConcludeError> {
    // Production's allowlist keeps its signed statements; the demo's holds simulations.
    let trust = match (&how.trust, how.destination) {
        (Some(trust), Destination::Real) => conform_allowlist::sign::Trust::load(trust)?,
        _ => None,
    };
    let overwrite = allowlist::Overwrite {
        trust: trust.as_ref(),
        allow_unsigned: how.allow_unsigned,
    };
    let updated = match allowlist::update_with(path, changes, overwrite) {
        Ok(updated) => updated,
        Err(e) => return Ok(Err(e)),
    };
    warnings.extend(updated.unsigned.iter().cloned());
    if let Some(why) = &updated.replaced_unreadable {
        warnings.push(format!(
            "the previous allowlist {} was unreadable ({why}) and was replaced",
            path.display()
        ));
    }
    if updated.dropped > 0 {
        warnings.push(format!(
            "{} entr{} without conform's evidence (not the v1 shape) were dropped from {}",
            updated.dropped,
            if updated.dropped == 1 { "y" } else { "ies" },
            path.display()
        ));
    }
    Ok(Ok(updated))
}

/// The allowlist a replayed run's evidence would have written, from the current one, as
/// `REPORT_DIR/allowlist.replayed.json`. The allowlist itself is never touched by a replay.
fn write_replayed_allowlist(
    allowlist: &Path,
    dir: &Path,
    changes: &[allowlist::Change],
) -> Result<(), ConcludeError> {
    let would = dir.join("allowlist.replayed.json");
    match std::fs::read(allowlist) {
        Ok(bytes) => std::fs::write(&would, bytes).map_err(|source| ConcludeError::Write {
            what: "allowlist.replayed.json",
            dir: dir.to_path_buf(),
            source,
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(ConcludeError::Read {
                path: allowlist.to_path_buf(),
                source,
            });
        }
    }
    allowlist::update(&would, changes)?;
    Ok(())
}
