//! `conform run` and `conform demo`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use conform::allowlist::Destination;
use conform::conclude::Conclude;
use conform::config::{Diagnostics, Selection, Workspace};
use conform::provider::tape::Recorder;
use conform::run::assemble::{AssembleError, Assembly, Setup, TapeMode, assemble};
use conform::run::budget::Budget;
use conform::run::shard::{Manifest, PlanOptions, Shard};
use conform::run::{self, PreparedSuite, RunOptions, RunResult, Target};
use conform::sign::SigningKey;

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
    /// How long an allowlist entry made by this run stays valid.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub valid_for: Duration,
    /// Above this share of calls failing on transport errors, a verdict is inconclusive.
    #[arg(long, value_name = "SHARE", default_value_t = 0.1)]
    pub max_transport_errors: f64,
    /// No progress display.
    #[arg(long)]
    pub no_progress: bool,
    /// Ask every provider for a stream and fold it, as if its file said `stream = true`
    /// (the evidence is still held to the file as written; the report says so).
    #[arg(long)]
    pub stream: bool,
}

pub async fn run(global: &Global, args: RunArgs) -> anyhow::Result<Exit> {
    if args.base_url.is_some() && args.providers.len() != 1 {
        eprintln!(
            "error: --base-url needs exactly one provider, e.g. `conform run openai --base-url URL`"
        );
        return Ok(Exit::Usage);
    }
    // A signing key that cannot be read is found before anything is paid for.
    if let Err(e) = SigningKey::from_env() {
        eprintln!("error: {e}");
        return Ok(Exit::Usage);
    }
    let Some(mut workspace) = load(global, &args.providers, &args.common.suites) else {
        return Ok(Exit::Usage);
    };
    if let Err(e) = workspace.settings.allow_valid_for(args.common.valid_for) {
        eprintln!("error: {e}");
        return Ok(Exit::Usage);
    }
    if args.providers.is_empty() {
        workspace.providers.retain(|p| !p.is_simulated());
        if workspace.providers.is_empty() {
            eprintln!(
                "error: no providers to run in {}: every one there is simulated; add providers/NAME.toml, or try `conform demo`",
                global.paths().providers.display()
            );
            return Ok(Exit::Usage);
        }
    }
    if let Err(problems) = conform::config::reference::add_live_references(
        &mut workspace,
        &global.paths(),
        args.reference.as_deref(),
    ) {
        print_problems(&problems);
        return Ok(Exit::Usage);
    }
    if let Some(url) = &args.base_url {
        for p in &mut workspace.providers {
            p.override_base_url(url);
        }
    }
    if args.dry_run {
        return Ok(super::plan::print(
            workspace,
            args.common.repeats,
            args.shard,
            super::plan::Format::Text,
        ));
    }
    if let Some(Err(e)) = args
        .budget
        .map(|limit| conform::run::budget::keepable(limit, &workspace.providers))
    {
        eprintln!("error: {e}");
        return Ok(Exit::Usage);
    }
    let tape = match (args.record, args.replay) {
        (Some(dir), _) => Some(TapeMode::Record(dir)),
        (None, Some(dir)) => Some(TapeMode::Replay(dir)),
        (None, None) => None,
    };
    let result = execute(
        global,
        workspace,
        &args.common,
        tape,
        Destination::Real,
        args.shard,
        args.budget,
    )
    .await?;
    Ok(result.map_or(Exit::Usage, |result| {
        result.overall(args.shard.is_some()).into()
    }))
}

pub async fn demo(global: &Global, args: DemoArgs) -> anyhow::Result<Exit> {
    let Some(mut workspace) = load(global, &[], &args.common.suites) else {
        return Ok(Exit::Usage);
    };
    workspace.providers.retain(|p| p.is_simulated());
    if let Some(path) = &global.allowlist {
        // Simulated evidence permits nothing, so the demo never writes the allowlist
        // production reads; saying so beats a flag that silently does nothing.
        eprintln!(
            "note: the demo does not write {} (--allowlist or CONFORM_ALLOWLIST): simulated \
             evidence goes only to the run's own reports/<run-id>/allowlist.json",
            path.display()
        );
    }
    if let Err(problems) =
        conform::config::reference::add_live_references(&mut workspace, &global.paths(), None)
    {
        print_problems(&problems);
        return Ok(Exit::Usage);
    }
    if workspace.providers.is_empty() {
        eprintln!(
            "error: no simulated providers (kind = \"sim\") in {}",
            global.paths().providers.display()
        );
        return Ok(Exit::Usage);
    }
    let Some(result) = execute(
        global,
        workspace.clone(),
        &args.common,
        None,
        Destination::Demo,
        None,
        None,
    )
    .await?
    else {
        return Ok(Exit::Usage);
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
    let selection = Selection {
        providers: providers.to_vec(),
        suites: suites.to_vec(),
    };
    match Workspace::load(&global.paths(), &selection) {
        Ok(ws) => Some(ws),
        Err(problems) => {
            print_problems(&problems);
            None
        }
    }
}

pub fn print_problems(problems: &Diagnostics) {
    eprintln!("{problems}");
    let n = problems.len();
    eprintln!("{n} problem{} found", if n == 1 { "" } else { "s" });
}

/// Runs a loaded workspace end to end: simulations, endpoints, the run, the reports and
/// the allowlist. `None` when the configuration cannot run (problems printed).
async fn execute(
    global: &Global,
    workspace: Workspace,
    common: &Common,
    tape: Option<TapeMode>,
    destination: Destination,
    shard: Option<Shard>,
    budget: Option<f64>,
) -> anyhow::Result<Option<RunResult>> {
    let setup = Setup {
        tape,
        stream: common.stream,
        offline: false,
    };
    let Assembly {
        suites,
        targets,
        recorders,
        sims,
    } = match assemble(workspace, &setup).await {
        Ok(assembly) => assembly,
        Err(AssembleError::Problems(problems)) => {
            print_problems(&problems);
            return Ok(None);
        }
        Err(e @ AssembleError::Tape(_)) if matches!(setup.tape, Some(TapeMode::Replay(_))) => {
            eprintln!("error: {e}");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };

    let schedule = run::schedule::Schedule::of_run(&suites, &targets, common.repeats, shard);
    let estimate = match conform::plan::estimate(&suites, &targets, &schedule) {
        Ok(estimate) => estimate,
        Err(problems) => {
            print_problems(&problems);
            return Ok(None);
        }
    };
    if let (Some(limit), Some(high)) = (budget, estimate.as_ref().and_then(|p| p.cost)) {
        println!(
            "budget: {} USD; the plan costs {} – {}{}",
            limit,
            conform::plan::usd(high.low),
            conform::plan::usd(high.high),
            if high.high > limit {
                ": the run stops before a call could take the spend over the budget"
            } else {
                ""
            }
        );
    }
    let budget = budget.map(|limit| Arc::new(Budget::new(limit)));

    let run_id = run::new_run_id();
    let dir = match shard {
        Some(shard) => shard_dir(global, shard),
        None => global.reports_dir().join(&run_id),
    };
    let options = RunOptions {
        dir,
        run_id,
        repeats: common.repeats,
        max_transport_error_share: common.max_transport_errors,
        progress: !common.no_progress,
        shard,
        budget: budget.clone(),
    };
    let plan_options = PlanOptions {
        repeats: common.repeats,
        max_transport_error_share: common.max_transport_errors,
        stream: common.stream,
        references: (suites.iter())
            .filter_map(|s| Some((s.suite.name.clone(), s.suite.reference.clone()?)))
            .collect(),
    };
    let mut result =
        run::execute_scheduled(&suites, &targets, &schedule, &options, interrupted()).await?;
    drop(sims);
    if let Some(plan) = &estimate {
        conform::plan::attach_estimates(&mut result.verdicts, plan);
    }
    let replayed = Assembly::replayed(&setup);
    if let Some(shard) = shard {
        write_shard(&result, &suites, &targets, shard, plan_options, replayed)?;
        for recorder in &recorders {
            println!("tape: {}", recorder.finish()?.display());
        }
        return Ok(Some(result));
    }
    conclude(
        global,
        &result,
        &suites,
        &targets,
        replayed,
        destination,
        common.valid_for,
        &recorders,
    )?;
    if let Some(budget) = budget.filter(|b| b.stopped()) {
        println!(
            "budget: stopped before a call could take the spend over {} USD ({} spent by the calls' usage); \
             the run is inconclusive and nothing was allowlisted",
            budget.limit(),
            conform::plan::usd(budget.spent())
        );
    }
    Ok(Some(result))
}

/// Where shard K of N writes its report: one folder per shard, named for it, so a CI
/// job uploads a known path and `conform merge REPORTS/shards` finds every one.
fn shard_dir(global: &Global, shard: Shard) -> PathBuf {
    global.reports_dir().join("shards").join(shard.folder())
}

/// A shard's report: its records are already in `results.jsonl`; the manifest says
/// which run they belong to. No verdict, no allowlist, no history: the merge decides.
fn write_shard(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    shard: Shard,
    options: PlanOptions,
    replayed: Option<PathBuf>,
) -> anyhow::Result<()> {
    let manifest = Manifest::of_run(result, suites, targets, shard, options, replayed);
    let calls = manifest.calls;
    let path = manifest.write(&result.dir).with_context(|| {
        format!(
            "cannot write the shard manifest in {}",
            result.dir.display()
        )
    })?;
    let planned: u64 = result.verdicts.iter().map(|v| v.tally.planned).sum();
    println!(
        "shard {shard}: {calls} of {planned} planned call{} recorded{}",
        if planned == 1 { "" } else { "s" },
        if result.complete {
            ""
        } else {
            " (interrupted: the merge will refuse this shard)"
        }
    );
    println!("shard report: {}", result.dir.display());
    println!("manifest: {}", path.display());
    println!(
        "no verdict and no allowlist change from a shard: run every shard, then `conform merge {}`",
        result.dir.parent().unwrap_or(&result.dir).display()
    );
    Ok(())
}

/// Concludes the run through the library (`conform::conclude`) and prints what it wrote.
#[allow(clippy::too_many_arguments)]
pub(super) fn conclude(
    global: &Global,
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    replayed: Option<PathBuf>,
    destination: Destination,
    valid_for: Duration,
    recorders: &[Arc<Recorder>],
) -> anyhow::Result<()> {
    let how = Conclude {
        allowlist: global.allowlist_path(),
        history: super::history::history_path(global),
        replayed,
        destination,
        valid_for,
        signing: SigningKey::from_env()?.map(Arc::new),
    };
    let done = conform::conclude::conclude(result, suites, targets, &how)?;
    let tapes = recorders
        .iter()
        .map(|r| r.finish())
        .collect::<Result<Vec<_>, _>>()?;
    print!("{}", done.text(result, targets, &tapes, global.verbose > 0));
    for warning in &done.warnings {
        eprintln!("warning: {warning}");
    }
    match done.update_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    eprintln!("\ninterrupted: stopping; the report will be marked incomplete");
}
