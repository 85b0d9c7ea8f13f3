//! One `conform scenarios` from its options to how it ended, for an orchestrator or a
//! gateway: selection, `--list`, the working folder, the run, JUnit, the report. What a
//! person reads goes through the caller's `out` (stdout) and `err` (stderr), so the
//! binary stays a parser and an exit code.

use std::path::PathBuf;

use super::gateway::{self, GatewayError};
use super::runner::{self, SuiteReport};
use super::session::{self, JunitError, Listing, Progress, Session, SetupError};
use super::workdir::WorkDir;

/// What is tested.
pub enum Target {
    /// An orchestrator speaking the contract, spawned or already running.
    Orchestrator(session::Request),
    /// A real gateway, through its own configuration.
    Gateway(gateway::Request),
}

/// The options every `conform scenarios` has.
pub struct Options {
    /// `--only`: run just these scenarios, by name.
    pub only: Vec<String>,
    /// `--skip`: leave these out, by name.
    pub skip: Vec<String>,
    /// `--list`: name the selected scenarios instead of running them.
    pub list: bool,
    /// `--format json`: the whole report on stdout, no progress lines.
    pub json: bool,
    /// `--junit PATH`: also write the run as JUnit XML.
    pub junit: Option<PathBuf>,
    /// `--fail-fast`: stop at the first failure (the rest are reported skipped).
    pub fail_fast: bool,
    /// Where the working folder is made (the temporary directory by default).
    pub work_dir: Option<PathBuf>,
    /// Keep the working folder even when every scenario passed (it is kept on failure).
    pub keep: bool,
}

/// How it ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Listed, or every selected scenario passed.
    Passed,
    /// A scenario failed: the orchestrator or gateway broke a rule.
    Failed,
    /// The options cannot make a run.
    Usage,
    /// The orchestrator or gateway could not be started or reached, or the run was
    /// interrupted.
    Inconclusive,
}

/// What stopped the command itself.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// The working folder could not be created.
    #[error("{0}")]
    Work(#[source] std::io::Error),
    /// The run could not be set up: the allowlist not written, no free port, no HTTP
    /// client.
    #[error(transparent)]
    Setup(SetupError),
    /// The gateway run could not be set up.
    #[error(transparent)]
    Gateway(GatewayError),
    /// The JUnit report could not be written.
    #[error(transparent)]
    Junit(#[from] JunitError),
    /// The report or the list could not be written as JSON.
    #[error("cannot write the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Runs `target` as `options` say.
pub async fn invoke(
    target: Target,
    options: Options,
    out: &mut dyn FnMut(&str),
    err: &mut dyn FnMut(&str),
) -> Result<Ended, InvokeError> {
    match target {
        Target::Orchestrator(request) => orchestrator(request, options, out, err).await,
        Target::Gateway(request) => gateways(request, options, out, err).await,
    }
}

async fn orchestrator(
    request: session::Request,
    options: Options,
    out: &mut dyn FnMut(&str),
    err: &mut dyn FnMut(&str),
) -> Result<Ended, InvokeError> {
    let selected = match runner::select(super::all(), &options.only, &options.skip) {
        Ok(s) => s,
        Err(e) => {
            err(&format!("error: {e}"));
            return Ok(Ended::Usage);
        }
    };
    if options.list {
        let listing = Listing::of(&selected);
        match options.json {
            true => out(&format!("{}\n", serde_json::to_string(&listing)?)),
            false => out(&listing.to_string()),
        }
        return Ok(Ended::Passed);
    }
    if let Err(problem) = request.check() {
        err(&format!("error: {problem}"));
        return Ok(Ended::Usage);
    }
    let mut work =
        WorkDir::create(options.work_dir.as_deref(), options.keep).map_err(InvokeError::Work)?;
    let session = match Session::start(&request, work.path()).await {
        Ok(session) => session,
        Err(e @ SetupError::Providers(_)) => {
            err(&format!("error: {e}"));
            return Ok(Ended::Usage);
        }
        Err(e) if e.inconclusive() => {
            err(&format!("error: {e}"));
            if e.keeps_work() {
                err(&format!(
                    "(working directory kept: {})",
                    work.keep().display()
                ));
            }
            return Ok(Ended::Inconclusive);
        }
        Err(e) => return Err(InvokeError::Setup(e)),
    };
    if !options.json {
        out(&format!("{}\n", session.header(selected.len())));
    }
    let json = options.json;
    let progress = |e: &_| {
        if !json {
            out(&Progress(e).to_string());
        }
    };
    let Some(report) = session.run(&selected, options.fail_fast, progress).await else {
        err(&format!(
            "interrupted; working directory kept: {}",
            work.keep().display()
        ));
        return Ok(Ended::Inconclusive);
    };
    let summary = session.summary(&report).to_string();
    finish(&report, &options, &summary, &mut work, out, err)
}

async fn gateways(
    request: gateway::Request,
    options: Options,
    out: &mut dyn FnMut(&str),
    err: &mut dyn FnMut(&str),
) -> Result<Ended, InvokeError> {
    let selected = match gateway::select(&options.only, &options.skip) {
        Ok(s) => s,
        Err(e) => {
            err(&format!("error: {e}"));
            return Ok(Ended::Usage);
        }
    };
    if options.list {
        for def in &selected {
            out(&format!("{}\n    {}\n", def.name, def.about));
        }
        return Ok(Ended::Passed);
    }
    if let Err(problem) = request.check() {
        err(&format!("error: {problem}"));
        return Ok(Ended::Usage);
    }
    let mut work =
        WorkDir::create(options.work_dir.as_deref(), options.keep).map_err(InvokeError::Work)?;
    let session = match gateway::Session::start(&request, work.path()).await {
        Ok(session) => session,
        Err(e) if e.inconclusive() => {
            err(&format!("error: {e}"));
            err(&format!(
                "(working directory kept: {})",
                work.keep().display()
            ));
            return Ok(Ended::Inconclusive);
        }
        Err(e) if e.usage() => {
            err(&format!("error: {e}"));
            return Ok(Ended::Usage);
        }
        Err(e) => return Err(InvokeError::Gateway(e)),
    };
    if !options.json {
        out(&format!("{}\n", session.header(selected.len())));
    }
    let json = options.json;
    let progress = |e: &_| {
        if !json {
            out(&Progress(e).to_string());
        }
    };
    let Some(report) = session.run(&selected, options.fail_fast, progress).await else {
        err(&format!(
            "interrupted; working directory kept: {}",
            work.keep().display()
        ));
        return Ok(Ended::Inconclusive);
    };
    let summary = format!(
        "{} passed, {} failed, {} skipped in {:.1} s\n",
        report.passed, report.failed, report.skipped, report.seconds
    );
    finish(&report, &options, &summary, &mut work, out, err)
}

/// JUnit, the report, the working folder kept when something failed, the verdict.
fn finish(
    report: &SuiteReport,
    options: &Options,
    summary: &str,
    work: &mut WorkDir,
    out: &mut dyn FnMut(&str),
    err: &mut dyn FnMut(&str),
) -> Result<Ended, InvokeError> {
    if let Some(path) = &options.junit {
        session::write_junit(path, report)?;
    }
    match options.json {
        true => out(&format!("{}\n", serde_json::to_string_pretty(report)?)),
        false => out(summary),
    }
    let passed = report.all_passed();
    if !passed || options.keep {
        err(&format!(
            "working directory kept: {}",
            work.keep().display()
        ));
    }
    Ok(if passed { Ended::Passed } else { Ended::Failed })
}
