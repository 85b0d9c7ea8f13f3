//! What `conform check` finds before a single call is sent: what each provider's
//! structured-output mode and tool declarations would refuse or ignore, the message orders
//! a vendor refuses, prompts that do not fit a context window, what the last probes say a
//! failover would lose, and everything `prepare` rejects. Offline: local tokenizers only.

use std::path::Path;

use super::Visit;
use conform_check::check::portability::{self, Severity};
use conform_config::{CaseRef, Diagnostic, Diagnostics, ProviderConfig, Rendered, Tool, Workspace};
use conform_wire::probe::file::Probes;
use conform_wire::probe::findings::ignored;
use conform_wire::probe::inventory::{SchemaSource, case_schemas, own_schemas};
use conform_wire::provider::wire_format;
use conform_wire::tokenize::Counter;

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
    lint_providers(&workspace, &mut found);
    // What the last probes say a failover would lose (schema_keyword_ignored): of the
    // suites' own schemas here, of the tools a case declares as the pre-flight reads it.
    let probes = load_probes(probes_path, &mut found);
    let all: Vec<&ProviderConfig> = workspace.providers.iter().collect();
    let warn_ignored = |schemas: Vec<SchemaSource>, found: &mut Preflight| {
        let Some(probes) = &probes else { return };
        for schema in schemas {
            found
                .warnings
                .extend(keywords_ignored(probes, &schema, &all, primary));
        }
    };
    for suite in &workspace.suites {
        warn_ignored(own_schemas(suite), &mut found);
    }
    // Each case is read once, by the pre-flight a run makes, and looked into here.
    let (counters, unloaded) = counters(&workspace.providers);
    found.problems.extend(unloaded);
    let providers = &workspace.providers;
    let mut uncompared = Uncompared::default();
    let mut uncomparable = Uncomparable::default();
    let prepared = super::prepare_visiting(workspace.suites, super::Keep::Nothing, |visit| {
        uncomparable.visit(&visit);
        uncompared.visit(&visit);
        request_problems(&visit, providers, &mut found);
        warn_ignored(case_schemas(visit.case_ref, visit.case), &mut found);
        let Some(rendered) = visit.rendered else {
            return;
        };
        for (provider, counter) in &counters {
            if let Some(d) = budget_problem(provider, counter, rendered, visit.case_ref) {
                found.problems.push(d);
            }
        }
    });
    if let Err(more) = prepared {
        found.problems.extend(more);
    }
    // A run may still be given `--reference`: here, a warning; in the run, a refusal.
    found
        .warnings
        .extend(uncomparable.diagnostics(Stage::Check));
    found.warnings.extend(uncompared.diagnostics());
    found
}

/// What each provider's structured-output mode would reject in each suite's schema and
/// tools, before a token is spent.
fn lint_providers(workspace: &Workspace, found: &mut Preflight) {
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
}

/// The last probes, or a warning that keywords are not compared without them.
fn load_probes(path: &Path, found: &mut Preflight) -> Option<Probes> {
    match conform_wire::probe::file::load(path) {
        Ok(probes) => Some(probes),
        Err(e) => {
            found.warnings.push(Diagnostic::new(
                path,
                format!("the last probes cannot be read, so schema keywords are not compared: {e}"),
            ));
            None
        }
    }
}

/// Per suite: each field of `expected` no `agree` pointer compares, and in how many
/// cases: a case expecting `"fr"` there passes with `"en"`. Gathered as the pre-flight
/// reads the cases, suite after suite.
#[derive(Debug, Default)]
struct Uncompared(
    Vec<(
        std::path::PathBuf,
        String,
        std::collections::BTreeMap<String, u64>,
    )>,
);

impl Uncompared {
    fn visit(&mut self, visit: &Visit<'_>) {
        let Some(expected) = &visit.case.expected else {
            return;
        };
        let fields = visit.suite.uncompared(expected);
        if fields.is_empty() {
            return;
        }
        if (self.0.last()).is_none_or(|(file, _, _)| *file != visit.suite.file) {
            let source = visit.suite.source.clone();
            (self.0).push((visit.suite.file.clone(), source, Default::default()));
        }
        if let Some((_, _, counts)) = self.0.last_mut() {
            for field in fields {
                *counts.entry(field.to_string()).or_default() += 1;
            }
        }
    }

    /// One warning a field, at its suite's `agree` line.
    fn diagnostics(self) -> Diagnostics {
        let mut out = Diagnostics::default();
        for (file, source, counts) in self.0 {
            for (field, cases) in counts {
                out.push(
                    Diagnostic::new(
                        &file,
                        format!(
                            "`expected` holds {field} in {cases} case{}, and no agree pointer compares it: it is not checked; add \"/{field}\" to agree, or to not_compared if it only shows the whole answer",
                            if cases == 1 { "" } else { "s" }
                        ),
                    )
                    .field("agree")
                    .near(&source, "agree"),
                );
            }
        }
        out
    }
}

/// Where [`Uncomparable`] is reported: `conform check`, which cannot know whether the
/// run will be given `--reference`, or `conform run`, which knows it was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Check,
    Run,
}

/// The cases of each suite that leave its `agree` pointers nothing to compare with
/// ([`conform_config::Suite::uncomparable`]), gathered as a pre-flight reads them: one
/// diagnostic a suite, at its `agree` line, naming the first cases and how many there are.
#[derive(Debug, Default)]
pub struct Uncomparable(Vec<Unmatched>);

#[derive(Debug)]
struct Unmatched {
    file: std::path::PathBuf,
    source: String,
    suite: String,
    pointers: String,
    /// The first [`Uncomparable::NAMED`] case files, relative to the suite's folder.
    named: Vec<String>,
    cases: usize,
}

impl Uncomparable {
    /// How many case files a diagnostic names.
    const NAMED: usize = 3;

    /// Notes `visit`'s case when it leaves `agree` nothing to compare with.
    pub fn visit(&mut self, visit: &Visit<'_>) {
        let suite = visit.suite;
        if !suite.uncomparable(visit.case) {
            return;
        }
        if self.0.last().is_none_or(|u| u.file != suite.file) {
            self.0.push(Unmatched {
                file: suite.file.clone(),
                source: suite.source.clone(),
                suite: suite.name.clone(),
                pointers: suite.agree.join(", "),
                named: Vec::new(),
                cases: 0,
            });
        }
        if let Some(u) = self.0.last_mut() {
            u.cases += 1;
            if u.named.len() < Self::NAMED {
                let path = visit.case_ref.path();
                let shown = path.strip_prefix(&suite.dir).unwrap_or(&path);
                u.named.push(shown.display().to_string());
            }
        }
    }

    /// One diagnostic a suite, worded for `stage`: in `conform run`, a refusal; in
    /// `conform check`, a warning that the run will need a reference.
    pub fn diagnostics(self, stage: Stage) -> Diagnostics {
        let mut out = Diagnostics::default();
        for u in self.0 {
            let more = match u.cases - u.named.len() {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let which = format!(
                "{} case{} ({}{more})",
                u.cases,
                if u.cases == 1 { "" } else { "s" },
                u.named.join(", ")
            );
            let fix = format!(
                "add `expected` holding {} to each, name a reference in suite.toml (reference = \"PRIMARY\"), or run with --reference PRIMARY",
                u.pointers
            );
            let message = match stage {
                Stage::Run => format!(
                    "suite `{}`: agree compares {}, but {which} have neither `expected` nor a recorded `reference`, and this run has no reference to compare with: nothing was sent; {fix}",
                    u.suite, u.pointers
                ),
                Stage::Check => format!(
                    "suite `{}`: agree compares {}, but {which} have neither `expected` nor a recorded `reference`: `conform run` refuses the suite unless it is given --reference PRIMARY; {fix}",
                    u.suite, u.pointers
                ),
            };
            out.push(
                Diagnostic::new(&u.file, message)
                    .field("agree")
                    .near(&u.source, "agree"),
            );
        }
        out
    }
}

impl Preflight {
    fn add(&mut self, severity: Severity, d: Diagnostic) {
        match severity {
            Severity::Rejected => self.problems.push(d),
            Severity::Ignored => self.warnings.push(d),
        }
    }
}

/// What the last probes say a failover would lose of `schema`: each keyword some
/// provider ignores, at its place in the schema's file.
fn keywords_ignored(
    probes: &Probes,
    schema: &SchemaSource,
    providers: &[&ProviderConfig],
    primary: Option<&str>,
) -> Diagnostics {
    let mut found = Diagnostics::default();
    // The file is read again only to place a warning, never for a schema without one.
    let mut source = None;
    for f in ignored(probes, &schema.schema, providers, primary) {
        let d = Diagnostic::new(&schema.file, f.message());
        found.push(if schema.pointer.is_empty() {
            d.field(f.path)
        } else {
            let text = source
                .get_or_insert_with(|| std::fs::read_to_string(&schema.file).unwrap_or_default());
            d.at_pointer(text, &format!("{}{}", schema.pointer, f.path))
        });
    }
    found
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

/// What each provider refuses in a request-shaped case: the order of its messages
/// (Anthropic and Gemini keep the system prompt apart, begin with the user …) and the
/// parameter schemas of the tools it declares itself; as problems and warnings.
fn request_problems(visit: &Visit<'_>, providers: &[ProviderConfig], found: &mut Preflight) {
    let (suite, case) = (visit.suite, visit.case);
    if !suite.is_request(case) {
        return;
    }
    let path = visit.case_ref.path();
    // The file is read again only to place a finding in a tool the case declares.
    let mut source = None;
    for provider in providers {
        // What the vendor's API refuses in the conversation, placed in the case file.
        let refused = (case.messages.as_deref())
            .map(|messages| wire_format(provider.wire_kind()).conversation_problems(messages))
            .unwrap_or_default();
        for p in refused {
            let text =
                source.get_or_insert_with(|| std::fs::read_to_string(&path).unwrap_or_default());
            found.problems.push(
                Diagnostic::new(
                    &path,
                    format!("provider `{}`: {}", provider.name, p.message),
                )
                .at_pointer(text, &p.pointer),
            );
        }
        for (i, tool) in case.tools.iter().flatten().enumerate() {
            let base = format!("/tools/{i}/function/parameters");
            for (severity, message, pointer) in tool_lint(tool, provider) {
                let text = source
                    .get_or_insert_with(|| std::fs::read_to_string(&path).unwrap_or_default());
                let d =
                    Diagnostic::new(&path, message).at_pointer(text, &format!("{base}{pointer}"));
                found.add(severity, d);
            }
        }
    }
}

/// The tokenizer of every provider with a context window, to hold every prompt to it
/// with `max_output_tokens` to spare (offline: local tokenizers only), and the problems of
/// those that do not load.
fn counters(providers: &[ProviderConfig]) -> (Vec<(&ProviderConfig, Counter)>, Diagnostics) {
    let mut problems = Diagnostics::default();
    let mut counters = Vec::new();
    for provider in providers {
        match Counter::for_provider(provider) {
            Ok(counter) if provider.tokenizer.context_window.is_some() => {
                counters.push((provider, counter))
            }
            Ok(_) => {}
            Err(d) => problems.extend(d),
        }
    }
    (counters, problems)
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
