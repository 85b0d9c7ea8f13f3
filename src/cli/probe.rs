//! `conform probe PROVIDER`: which JSON Schema keywords the suites use, and whether the
//! provider enforces, rejects, strips or ignores each; the cost first, then the matrix,
//! the findings, `reports/<run-id>/probe.json` and `probes.json` beside the allowlist.

use clap::Args;

use conform::execute::{self, ReachError};
use conform_config::{Selection, Workspace};
use conform_wire::probe::session::{Done, Keep, Plan};

use super::run::load;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The provider to probe: a file stem in providers/.
    pub provider: String,
    /// Probe the keywords these suites' schemas use [default: every suite].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// How many times each of a keyword's two prompts is sent (the pushed one stops at
    /// the first answer that breaks the keyword).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeats: u32,
    /// The output limit of each probe request (never above the provider's own).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(16..))]
    pub max_output_tokens: u32,
    /// Print what probing would cost, and send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Report only keywords this provider enforces and the probed one ignores or strips
    /// (or the other way round) [default: every provider on file].
    #[arg(long, value_name = "PROVIDER")]
    pub primary: Option<String>,
}

pub async fn probe(global: &Global, args: ProbeArgs) -> anyhow::Result<Exit> {
    let Some(workspace) = load(global, std::slice::from_ref(&args.provider), &args.suites) else {
        return Ok(Exit::Usage);
    };
    let Some(mut config) = workspace.providers.first().cloned() else {
        return Ok(Exit::Usage);
    };
    let as_written = config.clone();
    config.max_output_tokens = config.max_output_tokens.min(args.max_output_tokens);
    let plan = Plan::new(&workspace, &config, args.repeats);
    print!("{plan}");
    if plan.probes.is_empty() {
        return Ok(Exit::Ok);
    }
    if args.dry_run {
        println!("dry run: nothing sent");
        return Ok(Exit::Ok);
    }
    let reached = match execute::reach(config).await {
        Ok(reached) => reached,
        Err(e @ ReachError::Key { .. }) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
        Err(e) => return Err(e.into()),
    };
    let (endpoint, config) = (&reached.endpoint, &reached.config);
    let outcomes = conform_wire::probe::run(endpoint, &plan.probes, args.repeats).await;
    // The findings are among every provider of the project.
    let everyone = Selection {
        providers: Vec::new(),
        suites: args.suites.clone(),
    };
    let keep = Keep {
        as_written: &as_written,
        probed: config,
        repeats: args.repeats,
        requests_sent: endpoint.requests_sent(),
        run_id: &conform::run::new_run_id(),
        reports: &global.reports_dir(),
        allowlist: &global.allowlist_path(),
        project: &Workspace::load_partial(&global.paths(), &everyone).0,
        primary: args.primary.as_deref(),
    };
    let done = Done::keep(&plan, outcomes, &keep)?;
    print!("{done}");
    Ok(if !done.findings.is_empty() {
        Exit::Failed
    } else if done.inconclusive() {
        Exit::Inconclusive
    } else {
        Exit::Ok
    })
}
