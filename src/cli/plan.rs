//! `conform plan` (and `conform run --dry-run`): what a run would send and cost.

use clap::Args;

use conform::plan;
use conform::run::shard::Shard;
use conform_config::Workspace;

use super::gate::Format;
use super::run::{load, print_problems};
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Providers to plan, by file name in providers/ [default: every non-simulated one].
    pub providers: Vec<String>,
    /// Suites to plan, by folder name in fixtures/ [default: all].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// Plan every case this many times instead of the suite's `repeats`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeats: Option<u32>,
    /// Plan only shard K of N (`run --shard K/N`).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// `text` for people, `json` with every case's prompt tokens and cost range.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub fn plan(global: &Global, args: PlanArgs) -> anyhow::Result<Exit> {
    let Some(mut workspace) = load(global, &args.providers, &args.suites) else {
        return Ok(Exit::Usage);
    };
    if args.providers.is_empty() {
        workspace.providers.retain(|p| !p.is_simulated());
    }
    Ok(print(workspace, args.repeats, args.shard, args.format))
}

/// Prints the plan of `workspace`; the exit code says whether it could be made.
pub fn print(
    workspace: Workspace,
    repeats: Option<u32>,
    shard: Option<Shard>,
    format: Format,
) -> Exit {
    match plan::project::of_workspace(workspace, repeats, shard) {
        Ok(plan) => {
            match format {
                Format::Text => print!("{}", plan::render(&plan)),
                Format::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&plan).unwrap_or_default()
                ),
            }
            Exit::Ok
        }
        Err(problems) => {
            print_problems(&problems);
            Exit::Usage
        }
    }
}
