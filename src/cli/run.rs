//! `conform run` and `conform demo`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use conform::conclude::Conclude;
use conform::conclude::Destination;
use conform::execute::{self, Concluded, Execute, ExecuteError, Ran, Ready};
use conform::run::RunResult;
use conform::run::assemble::TapeMode;
use conform::run::resume::{Asked, Given, Keep};
use conform::run::shard::Shard;
use conform_config::{Diagnostics, Selection, Workspace};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Providers to run, by file name in providers/ [default: every non-simulated one].
    pub providers: Vec<String>,
    #[command(flatten)]
    pub common: Common,
    /// Send requests to this address instead of the provider file's `base_url`
    /// (one provider only).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Also write every response to DIR/<provider>.jsonl, sanitized (no key, no
    /// credential header), for `--replay`.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Answer every call from the tapes in DIR instead of the network (no key needed).
    /// A replay re-checks recorded answers, e.g. after a rule changed; it proves nothing
    /// about the provider today, so it never touches the allowlist.
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Run only shard K of N: the cases whose digest of (suite, case id) falls in K, the
    /// same split on every machine. Writes REPORTS/shards/shard-K-of-N/ (records and a
    /// manifest) and never the allowlist or history: `conform merge` joins the shards
    /// into one run and decides. Exits 0 when the share is recorded whole, 3 when
    /// interrupted, 2 on a configuration error.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// Send nothing: print the plan (as `conform plan` does) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop before the spend can exceed USD: no call starts whose ceiling (prompt tokens at
    /// the full input price plus max_tokens of output) could take it over; the calls in
    /// flight finish and the run ends inconclusive (exit 3), nothing allowlisted. Every
    /// provider needs [pricing].
    #[arg(long, value_name = "USD")]
    pub budget: Option<f64>,
    /// Judge every provider against PRIMARY: every case also goes to PRIMARY, both with
    /// the suite's repeats, and a provider fails a field (`reference_disagreement`) when
    /// it agrees with PRIMARY significantly less than PRIMARY agrees with itself.
    /// Overrides the suites' `reference`. Needs repeats >= 2 (a floor); else the verdict
    /// is inconclusive.
    #[arg(long, value_name = "PRIMARY")]
    pub reference: Option<String>,
    /// Continue the interrupted or budget-stopped run in REPORT_DIR, with the arguments it
    /// was run with (its run.json): no answered call is resent.
    #[arg(long, value_name = "REPORT_DIR", conflicts_with_all = ["rerun_failed", "shard", "record", "replay"])]
    pub resume: Option<PathBuf>,
    /// As --resume, and resend its transport failures (a conformance failure is kept).
    #[arg(long, value_name = "REPORT_DIR", conflicts_with_all = ["shard", "record", "replay"])]
    pub rerun_failed: Option<PathBuf>,
    /// Under a trust file, replace signed entries with this run's unsigned grants anyway.
    #[arg(long)]
    pub allow_unsigned: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct Common {
    /// Suites to run, by folder name in fixtures/ [default: all].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// Run every case this many times instead of the suite's `repeats`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeats: Option<u32>,
    /// How long an allowlist entry made by this run stays valid [default: 7d].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub valid_for: Option<Duration>,
    /// Above this share of calls failing on transport errors, a verdict is inconclusive
    /// [default: 0.1].
    #[arg(long, value_name = "SHARE")]
    pub max_transport_errors: Option<f64>,
    /// No progress display.
    #[arg(long)]
    pub no_progress: bool,
    /// Ask every provider for a stream and fold it, as if its file said `stream = true`
    /// (the evidence is still held to the file as written; the report says so).
    #[arg(long)]
    pub stream: bool,
    /// Send every planned call even once a provider fails a suite beyond its pass_threshold
    /// (else the rest are saved); simulations, shards and tapes always do.
    #[arg(long)]
    pub every_call: bool,
}

pub async fn run(global: &Global, args: RunArgs) -> anyhow::Result<Exit> {
    let given = Given {
        providers: args.providers,
        reference: args.reference,
        base_url: args.base_url,
        shard: args.shard,
        ..given(&args.common)
    };
    let resume = Keep::from_flags(args.resume, args.rerun_failed);
    let dir = resume.as_ref().map(|(dir, _)| dir.as_path());
    let (workspace, asked) = match execute::for_run(&global.paths(), given, dir) {
        Ok(ready) => ready,
        Err(e) => return failed(e),
    };
    (execute::base_url_note(&asked).iter()).for_each(|note| println!("{note}"));
    if args.dry_run {
        return Ok(super::plan::print(
            workspace,
            asked.repeats,
            asked.shard,
            Format::Text,
        ));
    }
    if let Err(e) = execute::keepable(args.budget, &workspace) {
        return failed(e);
    }
    let tape = (args.record.map(TapeMode::Record)).or(args.replay.map(TapeMode::Replay));
    let how = Execute {
        resume,
        ..how(global, asked, args.common.no_progress, tape, args.budget)
    };
    let mut to = conclude_to(global, Destination::Real, &how);
    to.allow_unsigned = args.allow_unsigned;
    match run_and_conclude(global, workspace, &how, to).await {
        Ok(result) => Ok(result.overall(how.asked.shard.is_some()).into()),
        Err(e) => failed(e),
    }
}

/// What the arguments run and demo share say of the evidence.
fn given(common: &Common) -> Given {
    Given {
        suites: common.suites.clone(),
        repeats: common.repeats,
        stream: common.stream,
        every_call: common.every_call,
        valid_for: common.valid_for,
        max_transport_errors: common.max_transport_errors,
        ..Given::default()
    }
}

pub async fn demo(global: &Global, args: DemoArgs) -> anyhow::Result<Exit> {
    let project = global.paths();
    let (workspace, asked, source) = match execute::for_demo(&project, given(&args.common)) {
        Ok(demo) => demo,
        Err(e) => return failed(e),
    };
    println!("{}", source.describe(&project));
    if let Some(note) = execute::demo_note(global.allowlist.as_deref()) {
        eprintln!("{note}");
    }
    let how = how(global, asked, args.common.no_progress, None, None);
    let to = conclude_to(global, Destination::Demo, &how);
    let result = match run_and_conclude(global, workspace.clone(), &how, to).await {
        Ok(result) => result,
        Err(e) => return failed(e),
    };
    if !result.complete {
        return Ok(Exit::Inconclusive);
    }
    let surprises = result.surprises(&workspace.providers);
    if surprises.is_empty() {
        println!("\ndemo: every simulated provider earned the verdict it was built to earn.");
        Ok(Exit::Ok)
    } else {
        println!("\ndemo: unexpected verdicts:\n  {}", surprises.join("\n  "));
        Ok(Exit::Failed)
    }
}

pub(super) fn load(global: &Global, providers: &[String], suites: &[String]) -> Option<Workspace> {
    let (providers, suites) = (providers.to_vec(), suites.to_vec());
    (execute::load(&global.paths(), Selection { providers, suites }).map_err(failed)).ok()
}

pub fn print_problems(problems: &Diagnostics) {
    eprintln!("{problems}");
    let n = problems.len();
    eprintln!("{n} problem{} found", if n == 1 { "" } else { "s" });
}

/// How a run or a merge that could not be carried out ends: a configuration or usage
/// error printed and exit 2, a refused merge exit 3, anything else the error itself.
pub(super) fn failed(e: ExecuteError) -> anyhow::Result<Exit> {
    match e {
        ExecuteError::Problems(problems) => print_problems(&problems),
        ExecuteError::Refused(e) => {
            eprintln!("refused: {e}");
            eprintln!("nothing was merged and the allowlist was not touched");
            return Ok(Exit::Inconclusive);
        }
        e if e.is_usage() => eprintln!("error: {e}"),
        e => return Err(e.into()),
    }
    Ok(Exit::Usage)
}

/// Where a run's conclusions go, production's allowlist held to the trust file.
fn conclude_to(global: &Global, to: Destination, how: &Execute) -> Conclude {
    let trust = Some(global.paths().trust);
    let reports = global.reports_dir();
    Conclude::to(
        global.allowlist_path(),
        &reports,
        to,
        how.asked.valid_for,
        trust,
    )
}

fn how(
    global: &Global,
    asked: Asked,
    no_progress: bool,
    tape: Option<TapeMode>,
    budget: Option<f64>,
) -> Execute {
    Execute {
        asked,
        tape,
        progress: !no_progress,
        resume: None,
        budget,
        reports: global.reports_dir(),
    }
}

/// Runs a loaded workspace end to end: simulations, endpoints, the run, then the shard's
/// manifest or the reports and the allowlist.
async fn run_and_conclude(
    global: &Global,
    workspace: Workspace,
    how: &Execute,
    mut to: Conclude,
) -> Result<RunResult, ExecuteError> {
    let ready = Ready::assemble(workspace, how).await?;
    let ran = (ready.run(how, |line| println!("{line}"), interrupted())).await?;
    if let Some(shard) = how.asked.shard {
        print!("{}", ran.write_shard(shard, how)?);
        for recorder in &ran.recorders {
            println!("tape: {}", Ran::finish_tape(recorder)?.display());
        }
        return Ok(ran.result);
    }
    to.replayed = ran.replayed.clone();
    print_conclusion(ran.conclude(&to, global.verbose > 0)?)?;
    Ok(ran.result)
}

/// Prints what concluding wrote; a failed allowlist update is the command's error.
pub(super) fn print_conclusion(done: Concluded) -> Result<(), ExecuteError> {
    print!("{}", done.text);
    for warning in &done.warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(e) = done.update_error {
        return Err(ExecuteError::Conclude(e.into()));
    }
    if let Some(line) = done.budget {
        println!("{line}");
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM, and says what happens next.
async fn interrupted() {
    execute::signalled().await;
    eprintln!("\ninterrupted: stopping; the report will be marked incomplete");
}
