//! `conform check`: static pre-flight, no network.

use std::sync::Arc;

use clap::Args;

use conform::config::{
    CaseRef, Diagnostic, Diagnostics, Prompt, ProviderConfig, Selection, Workspace,
};
use conform::run::PreparedSuite;
use conform::tokenize::Counter;

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
    let mut counters = Vec::new();
    for provider in &workspace.providers {
        match Counter::for_provider(provider) {
            Ok(counter) => counters.push((provider, counter)),
            Err(d) => problems.extend(d),
        }
    }
    let mut cases = 0usize;
    let mut prepared = Vec::new();
    for suite in &workspace.suites {
        for case_ref in &suite.cases {
            cases += 1;
            let case = match case_ref.load() {
                Ok(case) => case,
                Err(d) => {
                    problems.push(d);
                    continue;
                }
            };
            match suite.render(&case, &case_ref.path) {
                Ok(prompt) => {
                    for (provider, counter) in &counters {
                        if let Some(d) = budget_problem(provider, counter, &prompt, case_ref) {
                            problems.push(d);
                        }
                    }
                }
                Err(d) => problems.extend(d),
            }
        }
        match PreparedSuite::new(suite.clone()) {
            Ok(p) => prepared.push(Arc::new(p)),
            Err(d) => problems.extend(d),
        }
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

/// The prompt must fit the provider's context window with `max_output_tokens` to
/// spare; counted offline, so only local tokenizers are asked.
fn budget_problem(
    provider: &ProviderConfig,
    counter: &Counter,
    prompt: &Prompt,
    case: &CaseRef,
) -> Option<Diagnostic> {
    let window = provider.tokenizer.context_window?;
    let message = match counter.count_local(prompt)? {
        Err(e) => format!("provider `{}` cannot count this prompt: {e}", provider.name),
        Ok(n) if n + u64::from(provider.max_output_tokens) > u64::from(window) => format!(
            "the prompt is {n} tokens ({}); with max_output_tokens {} it does not fit provider `{}`'s context window of {window}",
            counter.describe(),
            provider.max_output_tokens,
            provider.name
        ),
        Ok(_) => return None,
    };
    Some(Diagnostic::new(&case.path, message).field("vars"))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
