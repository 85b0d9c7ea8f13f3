//! `conform check`: static pre-flight, no network.

use clap::Args;

use conform::check::portability::{self, Severity};
use conform::config::{
    CaseRef, Diagnostic, Diagnostics, Prompt, ProviderConfig, Selection, Workspace,
};
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
    /// Warn only about keywords this provider enforces and another ignores or strips, by
    /// the last probes (probes.json beside the allowlist) [default: any provider].
    #[arg(long, value_name = "PROVIDER")]
    pub primary: Option<String>,
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
    // What the last probes say a failover would lose (schema_keyword_ignored).
    let probes_path = conform::probe::file::beside(&global.allowlist_path());
    match conform::probe::file::load(&probes_path) {
        Ok(probes) => {
            let providers: Vec<&ProviderConfig> = workspace.providers.iter().collect();
            for suite in &workspace.suites {
                for f in conform::probe::findings::ignored(
                    &probes,
                    &suite.schema,
                    &providers,
                    args.primary.as_deref(),
                ) {
                    warnings.push(Diagnostic::new(&suite.schema_file, f.message()).field(f.path));
                }
            }
        }
        Err(e) => warnings.push(Diagnostic::new(
            &probes_path,
            format!("the last probes cannot be read, so schema keywords are not compared: {e}"),
        )),
    }
    problems.extend(budget_problems(&workspace));
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

/// Every provider's tokenizer loads, and every prompt fits every provider's context
/// window with `max_output_tokens` to spare (counted offline: local tokenizers only).
fn budget_problems(workspace: &Workspace) -> Diagnostics {
    let mut problems = Diagnostics::default();
    let mut counters = Vec::new();
    for provider in &workspace.providers {
        match Counter::for_provider(provider) {
            Ok(counter) if provider.tokenizer.context_window.is_some() => {
                counters.push((provider, counter))
            }
            Ok(_) => {}
            Err(d) => problems.extend(d),
        }
    }
    if counters.is_empty() {
        return problems;
    }
    for suite in &workspace.suites {
        for case_ref in &suite.cases {
            // A case that does not load or render is reported by the suite's preparation.
            let Ok(case) = case_ref.load() else { continue };
            let Ok(prompt) = suite.render(&case, &case_ref.path()) else {
                continue;
            };
            for (provider, counter) in &counters {
                if let Some(d) = budget_problem(provider, counter, &prompt, case_ref) {
                    problems.push(d);
                }
            }
        }
    }
    problems
}

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
    Some(Diagnostic::new(&case.path(), message).field("vars"))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
