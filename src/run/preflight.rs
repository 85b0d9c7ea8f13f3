//! What `conform check` finds before a single call is sent: what each provider's
//! structured-output mode and tool declarations would refuse or ignore, the message orders
//! a vendor refuses, prompts that do not fit a context window, what the last probes say a
//! failover would lose, and everything `prepare` rejects. Offline: local tokenizers only.

use std::path::Path;

use crate::check::portability::{self, Severity};
use crate::config::{CaseRef, Diagnostic, Diagnostics, ProviderConfig, Rendered, Tool, Workspace};
use crate::probe::findings::ignored;
use crate::probe::inventory::suite_schemas;
use crate::tokenize::Counter;

/// The problems (the run would fail or be refused) and the warnings (it would run, but a
/// failover could lose something) of a workspace.
#[derive(Debug, Default)]
pub struct Preflight {
    pub problems: Diagnostics,
    pub warnings: Diagnostics,
}

/// Checks `workspace` offline. `probes` is the probes file beside the allowlist;
/// `primary` narrows its warnings to keywords this provider enforces.
pub fn preflight(workspace: Workspace, probes_path: &Path, primary: Option<&str>) -> Preflight {
    let mut found = Preflight::default();
    // What each provider's structured-output mode would reject, before a token is spent.
    for provider in &workspace.providers {
        for suite in &workspace.suites {
            for lint in portability::lint(&suite.schema, provider) {
                let d = Diagnostic::new(
                    &suite.schema_file,
                    format!("provider `{}`: {}", provider.name, lint.message),
                )
                .field(lint.path);
                found.add(lint.severity, d);
            }
            // The suite's tools, as this provider declares them.
            if let Some(file) = &suite.tools_file {
                let source = std::fs::read_to_string(file).unwrap_or_default();
                for (i, tool) in suite.tools.iter().enumerate() {
                    let base = format!("/{i}/function/parameters");
                    for (severity, message, pointer) in tool_lint(tool, provider) {
                        let d = Diagnostic::new(file, message)
                            .at_pointer(&source, &format!("{base}{pointer}"));
                        found.add(severity, d);
                    }
                }
            }
        }
    }
    request_problems(&workspace, &mut found);
    // What the last probes say a failover would lose (schema_keyword_ignored).
    match crate::probe::file::load(probes_path) {
        Ok(probes) => {
            let providers: Vec<&ProviderConfig> = workspace.providers.iter().collect();
            for schema in workspace.suites.iter().flat_map(suite_schemas) {
                let source = (!schema.pointer.is_empty())
                    .then(|| std::fs::read_to_string(&schema.file).unwrap_or_default());
                for f in ignored(&probes, &schema.schema, &providers, primary) {
                    let d = Diagnostic::new(&schema.file, f.message());
                    found.warnings.push(match &source {
                        Some(text) => d.at_pointer(text, &format!("{}{}", schema.pointer, f.path)),
                        None => d.field(f.path),
                    });
                }
            }
        }
        Err(e) => found.warnings.push(Diagnostic::new(
            probes_path,
            format!("the last probes cannot be read, so schema keywords are not compared: {e}"),
        )),
    }
    found.problems.extend(budget_problems(&workspace));
    if let Err(more) = super::prepare(workspace.suites, super::Keep::Nothing) {
        found.problems.extend(more);
    }
    found
}

impl Preflight {
    fn add(&mut self, severity: Severity, d: Diagnostic) {
        match severity {
            Severity::Rejected => self.problems.push(d),
            Severity::Ignored => self.warnings.push(d),
        }
    }
}

/// A tool's parameter schema against how `provider` declares tools: `(severity,
/// message naming the provider and tool, pointer into the parameters)`.
fn tool_lint(tool: &Tool, provider: &ProviderConfig) -> Vec<(Severity, String, String)> {
    portability::lint_tool(tool.parameters(), tool.strict(), provider)
        .into_iter()
        .map(|f| {
            let path = if f.path == "/" { String::new() } else { f.path };
            (
                f.severity,
                format!(
                    "provider `{}`, tool `{}`: {}",
                    provider.name,
                    tool.name(),
                    f.message
                ),
                path,
            )
        })
        .collect()
}

/// What each provider refuses in the request-shaped cases: the order of their messages
/// (Anthropic and Gemini keep the system prompt apart, begin with the user …) and the
/// parameter schemas of the tools the cases declare themselves; as problems and warnings.
fn request_problems(workspace: &Workspace, found: &mut Preflight) {
    for suite in &workspace.suites {
        for case_ref in &suite.cases {
            // A case that does not load is reported by the suite's preparation.
            let Ok(case) = case_ref.load() else { continue };
            if !suite.is_request(&case) {
                continue;
            }
            let path = case_ref.path();
            let source = case
                .tools
                .as_ref()
                .map(|_| std::fs::read_to_string(&path).unwrap_or_default());
            for provider in &workspace.providers {
                found.problems.extend(suite.vendor_problems(
                    &case,
                    &path,
                    provider.wire_kind(),
                    &provider.name,
                ));
                let (Some(tools), Some(source)) = (&case.tools, &source) else {
                    continue;
                };
                for (i, tool) in tools.iter().enumerate() {
                    let base = format!("/tools/{i}/function/parameters");
                    for (severity, message, pointer) in tool_lint(tool, provider) {
                        let d = Diagnostic::new(&path, message)
                            .at_pointer(source, &format!("{base}{pointer}"));
                        found.add(severity, d);
                    }
                }
            }
        }
    }
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
            let Ok(rendered) = suite.request(&case, &case_ref.path()) else {
                continue;
            };
            for (provider, counter) in &counters {
                if let Some(d) = budget_problem(provider, counter, &rendered, case_ref) {
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
    rendered: &Rendered,
    case: &CaseRef,
) -> Option<Diagnostic> {
    let window = provider.tokenizer.context_window?;
    let counted = counter.count_call_local(&rendered.prompt, rendered.conversation.as_ref())?;
    let message = match counted.map(|c| c.tokens) {
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
