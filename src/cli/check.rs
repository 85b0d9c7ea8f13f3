//! `conform check`: static pre-flight, no network.

use clap::Args;

use conform::check::portability::{self, Severity};
use conform::config::{Diagnostic, Diagnostics, Selection, Workspace};

use super::run::print_problems;
use super::{EXIT_CONFIG, EXIT_OK, Global};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Providers to check [default: all].
    pub providers: Vec<String>,
    /// Suites to check [default: all].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
}

pub fn check(global: &Global, args: CheckArgs) -> anyhow::Result<u8> {
    let selection = Selection {
        providers: args.providers,
        suites: args.suites,
    };
    let (workspace, mut problems) = Workspace::load_partial(&global.paths(), &selection);
    let cases: usize = workspace.suites.iter().map(|s| s.cases.len()).sum();
    let (n_providers, n_suites) = (workspace.providers.len(), workspace.suites.len());
    // What each provider's structured-output mode would reject, before a token is spent.
    let mut warnings = Diagnostics::default();
    for provider in &workspace.providers {
        for suite in &workspace.suites {
            for found in portability::lint(&suite.schema, provider) {
                let d = Diagnostic::new(
                    &suite.schema_file,
                    format!("provider `{}`: {}", provider.name, found.message),
                )
                .field(found.path);
                match found.severity {
                    Severity::Rejected => problems.push(d),
                    Severity::Ignored => warnings.push(d),
                }
            }
        }
    }
    if let Err(more) = conform::run::prepare(workspace.suites) {
        problems.extend(more);
    }
    for w in warnings.iter() {
        eprintln!("warning: {w}");
    }
    if !problems.is_empty() {
        print_problems(&problems);
        return Ok(EXIT_CONFIG);
    }
    println!(
        "ok: {n_providers} provider{}, {n_suites} suite{}, {cases} cases",
        plural(n_providers),
        plural(n_suites),
    );
    Ok(EXIT_OK)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
