//! `conform merge`: shard reports joined into one run, judged and reported as a run is.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use conform::allowlist::Destination;
use conform::merge::{self, MergeError, ShardReport};
use conform::run::assemble::{AssembleError, Assembly, Setup, assemble};
use conform::run::shard::Plan;

use super::run::{conclude, load, print_problems};
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard report folders (REPORTS/shards/shard-K-of-N), or folders holding them.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// How long an allowlist entry made by the merged run stays valid.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub valid_for: Duration,
}

pub async fn merge(global: &Global, args: MergeArgs) -> anyhow::Result<Exit> {
    let refuse = |e: MergeError| {
        eprintln!("refused: {e}");
        eprintln!("nothing was merged and the allowlist was not touched");
        Ok(Exit::Inconclusive)
    };
    if let Err(e) = conform::sign::SigningKey::from_env() {
        eprintln!("error: {e}");
        return Ok(Exit::Usage);
    }
    let mut reports = match merge::collect(&args.dirs) {
        Ok(reports) => reports,
        Err(e) => return refuse(e),
    };
    if let Err(e) = merge::validate(&mut reports) {
        return refuse(e);
    }
    let first: &ShardReport = &reports[0];
    let plan = &first.manifest.plan;

    // The suites and providers the shards ran, as this workspace has them now.
    let providers: Vec<String> = plan.providers.iter().map(|p| p.name.clone()).collect();
    let suite_names: Vec<String> = plan.suites.iter().map(|s| s.name.clone()).collect();
    let Some(mut workspace) = load(global, &providers, &suite_names) else {
        return Ok(Exit::Usage);
    };
    if let Err(e) = workspace.settings.allow_valid_for(args.valid_for) {
        eprintln!("error: {e}");
        return Ok(Exit::Usage);
    }
    // Judged against the live references the shards ran with.
    for suite in &mut workspace.suites {
        suite.reference = plan.options.references.get(&suite.name).cloned();
    }
    // Each provider's endpoint for what the records say of it, and its tokenizer to count
    // the prompts again as the records are judged: nothing is sent.
    let setup = Setup {
        stream: plan.options.stream,
        offline: true,
        ..Setup::default()
    };
    let Assembly {
        suites, targets, ..
    } = match assemble(workspace, &setup).await {
        Ok(assembly) => assembly,
        Err(AssembleError::Problems(problems)) => {
            print_problems(&problems);
            return Ok(Exit::Usage);
        }
        Err(e) => return Err(e.into()),
    };
    let configs: Vec<_> = targets.iter().map(|t| t.endpoint.config.as_ref()).collect();
    let here = Plan::new(&suites, &configs, plan.options.clone());
    if let Err(e) = merge::check_workspace(first, &here, &here.digest(&suites)) {
        return refuse(e);
    }
    if let Err(e) = merge::check_fresh(&reports, args.valid_for, time::OffsetDateTime::now_utc()) {
        return refuse(e);
    }
    let schedule = merge::schedule(&reports, &suites, &targets);
    let estimate = match conform::plan::estimate(&suites, &targets, &schedule) {
        Ok(estimate) => estimate,
        Err(problems) => {
            print_problems(&problems);
            return Ok(Exit::Usage);
        }
    };
    let mut result = match merge::join(
        &reports,
        &suites,
        &targets,
        &schedule,
        &global.reports_dir(),
    ) {
        Ok(result) => result,
        Err(e) => return refuse(e),
    };
    if let Some(estimate) = &estimate {
        conform::plan::attach_estimates(&mut result.verdicts, estimate);
    }
    println!(
        "merged {} shard{} of {} into run {}",
        reports.len(),
        if reports.len() == 1 { "" } else { "s" },
        first.manifest.shard.n,
        result.run_id
    );
    conclude(
        global,
        &result,
        &suites,
        &targets,
        first.manifest.replayed_from.clone(),
        Destination::Real,
        args.valid_for,
        &[],
    )?;
    Ok(result.overall(false).into())
}
