//! `conform check`: static pre-flight, no network.

use std::sync::Arc;

use clap::Args;

use conform::check::portability::{self, Severity};
use conform::config::{Diagnostic, Diagnostics, Selection, Workspace};
use conform::run::PreparedSuite;

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
    let workspace = match Workspace::load(&global.paths(), &selection) {
        Ok(ws) => ws,
        Err(problems) => {
            print_problems(&problems);
            return Ok(EXIT_CONFIG);
        }
    };
    let mut problems = Diagnostics::default();
    let mut cases = 0usize;
    let mut prepared = Vec::new();
    for suite in &workspace.suites {
        for case_ref in &suite.cases {
            cases += 1;
            match case_ref.load() {
                Ok(case) => {
                    if let Err(d) = suite.render(&case, &case_ref.path) {
                        problems.extend(d);
                    }
                }
                Err(d) => problems.push(d),
            }
        }
        match PreparedSuite::new(suite.clone()) {
            Ok(p) => prepared.push(Arc::new(p)),
            Err(d) => problems.extend(d),
        }
    }
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
    for w in warnings.iter() {
        eprintln!("warning: {w}");
    }
    if !problems.is_empty() {
        print_problems(&problems);
        return Ok(EXIT_CONFIG);
    }
    println!(
        "ok: {} provider{}, {} suite{}, {cases} cases",
        workspace.providers.len(),
        plural(workspace.providers.len()),
        workspace.suites.len(),
        plural(workspace.suites.len()),
    );
    Ok(EXIT_OK)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
