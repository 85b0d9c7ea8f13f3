//! `conform check`: static pre-flight, no network (`conform::run::preflight`).

use clap::Args;

use conform::config::{Selection, Workspace};
use conform::run::preflight::{Preflight, preflight};

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
    let (mut workspace, mut problems) = Workspace::load_partial(&global.paths(), &selection);
    // A suite's live reference must be a provider file; it is checked like the others.
    if let Err(d) =
        conform::config::reference::add_live_references(&mut workspace, &global.paths(), None)
    {
        problems.extend(d);
    }
    let cases: usize = workspace.suites.iter().map(|s| s.cases.len()).sum();
    let (n_providers, n_suites) = (workspace.providers.len(), workspace.suites.len());
    let probes = conform::probe::file::beside(&global.allowlist_path());
    let Preflight {
        problems: found,
        warnings,
    } = preflight(workspace, &probes, args.primary.as_deref());
    problems.extend(found);
    for w in warnings.iter() {
        eprintln!("warning: {w}");
    }
    if !problems.is_empty() {
        print_problems(&problems);
        return Ok(Exit::Usage);
    }
    println!(
        "ok: {n_providers} provider{}, {n_suites} suite{}, {cases} cases",
        plural(n_providers),
        plural(n_suites),
    );
    Ok(Exit::Ok)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
