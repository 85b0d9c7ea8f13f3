//! `conform check`: static pre-flight, no network (`conform::run::preflight`).

use clap::Args;

use conform::execute;
use conform_config::Selection;

use super::run::print_problems;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Providers to check [default: all].
    pub providers: Vec<String>,
    /// Suites to check [default: all].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// Warn only about keywords this provider enforces and another ignores or strips, by
    /// the last probes (probes.json beside the allowlist) [default: any provider].
    #[arg(long, value_name = "PROVIDER")]
    pub primary: Option<String>,
}

pub fn check(global: &Global, args: CheckArgs) -> anyhow::Result<Exit> {
    let selection = Selection {
        providers: args.providers,
        suites: args.suites,
    };
    let probes = conform_wire::probe::file::beside(&global.allowlist_path());
    let checked = execute::check(
        &global.paths(),
        &selection,
        &probes,
        args.primary.as_deref(),
    );
    for w in checked.warnings.iter() {
        eprintln!("warning: {w}");
    }
    if !checked.problems.is_empty() {
        print_problems(&checked.problems);
        return Ok(Exit::Usage);
    }
    println!("{checked}");
    Ok(Exit::Ok)
}
