//! `fixtures/SUITE/`: prompt templates, the output schema, rules and real cases.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use minijinja::{Environment, UndefinedBehavior};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::conversation::{self, Conversation, Message, Role, Tool, ToolChoice};
use super::diagnostic::{self, Diagnostic, Diagnostics};
use super::expect::{self, Answer, Expect, ExpectedCalls};
use super::held_cases::HeldCases;
use super::identity::{CasesIdentity, SuiteIdentity};
use super::quick_template::{QuickTemplates, is_template};
use super::reference::{DifferentialSpec, Reference, ReferenceKind};
use super::schema_file;
use crate::digest::bytes_hex;

/// A business rule as written in `suite.toml`; [`conform_check::check::rules`] compiles it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// What reports call the rule.
    pub name: String,
    /// A jq expression that must yield `true`.
    pub expr: String,
    /// What a failing answer is told.
    pub message: String,
}

/// A business rule over every tool call (`[[tool_rules]]` in `suite.toml`): a jq
/// expression with the call bound as `$call` (`{"id", "name", "arguments"}`), the case's
/// variables as `$input` and the run's start as `$now`; `.` is the call's arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRuleSpec {
    /// What reports call the rule.
    pub name: String,
    /// Only calls to this tool are held to the rule [default: every call].
    #[serde(default)]
    pub tool: Option<String>,
    /// A jq expression that must yield `true`.
    pub expr: String,
    /// What a failing call is told.
    pub message: String,
}

/// What a suite demands of tool calling as a whole (`[tool_calls]` in `suite.toml`),
/// K2 Vendor Verifier's two measures: whether the model calls a tool when it should
/// (trigger precision, recall, F1 against the cases' expectations) and whether the
/// arguments validate against the tool's `parameters` (schema accuracy). With repeats,
/// each is judged by the lower bound of its Wilson interval at the suite's confidence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolThresholds {
    /// The least trigger precision: of the calls made, the share that should have been.
    pub min_trigger_precision: Option<f64>,
    /// The least trigger recall: of the calls that should have been made, the share that were.
    pub min_trigger_recall: Option<f64>,
    /// The least harmonic mean of trigger precision and recall.
    pub min_trigger_f1: Option<f64>,
    /// The least share of calls whose arguments validate against the tool's `parameters`.
    pub min_schema_accuracy: Option<f64>,
}

impl ToolThresholds {
    /// The suite demands nothing of tool calling as a whole.
    pub fn is_empty(&self) -> bool {
        self.min_trigger_precision.is_none()
            && self.min_trigger_recall.is_none()
            && self.min_trigger_f1.is_none()
            && self.min_schema_accuracy.is_none()
    }
}

/// What a suite demands of its repeats (`[stability]` in `suite.toml`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StabilitySpec {
    /// Every case's repeats must agree at least this much: the share of repeats whose
    /// output equals (canonical JSON) the case's most common output.
    pub min_agreement: Option<f64>,
    /// Instead of the plain pass share: every case's pass rate over its repeats must
    /// have a Wilson lower bound of at least this.
    pub min_case_pass_lower_bound: Option<f64>,
    /// The confidence of that bound [default: 0.95].
    pub confidence: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    #[serde(default)]
    description: String,
    system: Option<String>,
    /// Needed by template cases (those without `messages`).
    user: Option<String>,
    #[serde(default = "default_schema")]
    schema: String,
    /// A JSON file holding the tools every case may call (OpenAI Chat's `tools` array).
    tools: Option<String>,
    #[serde(default = "default_repeats")]
    repeats: u32,
    #[serde(default = "default_threshold")]
    pass_threshold: f64,
    #[serde(default)]
    agree: Vec<String>,
    /// Fields of `expected` that are there to show the whole answer (free text, say)
    /// and are knowingly not compared: `conform check` warns of any other.
    #[serde(default)]
    not_compared: Vec<String>,
    #[serde(default)]
    rules: Vec<RuleSpec>,
    #[serde(default)]
    stability: StabilitySpec,
    #[serde(default)]
    stream_agreement: bool,
    /// A conformant verdict must rule out a failure rate above this at 95 % confidence;
    /// with too few calls to, it is inconclusive (`insufficient_evidence`).
    max_undetected_failure_rate: Option<f64>,
    #[serde(default, with = "super::slo::optional_duration")]
    max_p95_latency: Option<std::time::Duration>,
    #[serde(default, with = "super::slo::optional_duration")]
    max_p95_ttft: Option<std::time::Duration>,
    #[serde(default)]
    tool_rules: Vec<ToolRuleSpec>,
    #[serde(default)]
    tool_calls: ToolThresholds,
    /// A provider every case is also sent to: the candidates are judged against it.
    reference: Option<String>,
    #[serde(default)]
    differential: DifferentialSpec,
}

fn default_schema() -> String {
    "schema.json".into()
}
fn default_repeats() -> u32 {
    1
}
fn default_threshold() -> f64 {
    1.0
}

/// A loaded suite. Cases stay on disk until the runner reaches them, so memory does not
/// grow with their number.
#[derive(Debug, Clone)]
pub struct Suite {
    /// The folder name under `fixtures/`.
    pub name: String,
    /// The suite's folder.
    pub dir: PathBuf,
    /// Its `suite.toml`.
    pub file: PathBuf,
    /// The text of `suite.toml`, kept to place later diagnostics on their line.
    pub source: String,
    /// What the suite tests, for people.
    pub description: String,
    /// The JSON Schema every answer must validate against.
    pub schema: Arc<Value>,
    /// Where the schema was read from.
    pub schema_file: PathBuf,
    /// How many times each case is sent.
    pub repeats: u32,
    /// The share of a case's calls that must pass for the case to pass.
    pub pass_threshold: f64,
    /// JSON pointers whose values must equal the case's `expected` ones.
    pub agree: Vec<String>,
    /// Fields of `expected` knowingly not compared (`not_compared`).
    pub not_compared: Vec<String>,
    /// The business rules every answer is held to.
    pub rules: Vec<RuleSpec>,
    /// How alike a case's repeated answers must be.
    pub stability: StabilitySpec,
    /// With a provider that streams, every case is also sent unstreamed, and the two
    /// answers must be the same (canonical JSON).
    pub stream_agreement: bool,
    /// The failure rate a conformant verdict must rule out (`max_undetected_failure_rate`).
    pub max_undetected_failure_rate: Option<f64>,
    /// What a conformant verdict is held to: the stricter of the suite's bound and the
    /// one every reader of the project holds a permit to (its `conform.toml`, else the
    /// reader crate's default), so a run grants only what the project's readers permit.
    /// [`super::Workspace::load`] sets it from the project's settings.
    pub required_failure_rate: f64,
    /// Latency objectives every provider's verdict on this suite is held to.
    pub slo: super::Slo,
    /// The tools every case may call (`tools` in `suite.toml`); a case's own `tools`
    /// replace them.
    pub tools: Arc<[Tool]>,
    /// Where the suite's tools were read from, when they have their own file.
    pub tools_file: Option<PathBuf>,
    /// The business rules every tool call is held to.
    pub tool_rules: Vec<ToolRuleSpec>,
    /// What tool calling as a whole must reach.
    pub tool_thresholds: ToolThresholds,
    /// The live reference provider (`reference = "…"`), which `--reference` overrides.
    pub reference: Option<String>,
    /// How candidates are held to the reference (`[differential]`).
    pub differential: DifferentialSpec,
    /// Every case, by file, in name order.
    pub cases: Vec<CaseRef>,
    /// `suite.toml`, the schema and the tools by file name, each `sha256:` of its bytes:
    /// [`Suite::identity`] adds the case files.
    files: BTreeMap<String, String>,
    /// [`Suite::identity`] and its digest, once the cases have been read for it.
    identity: std::sync::OnceLock<(SuiteIdentity, String)>,
    templates: Arc<Environment<'static>>,
    /// What [`Suite::variables`] returns, worked out once: every case's render checks it.
    variables: Arc<[String]>,
    has_system: bool,
    has_user: bool,
    /// The `system` and `user` templates that need no minijinja for a case: text alone,
    /// or text and `{{ name }}` of string variables (see [`super::quick_template`]).
    quick: QuickTemplates,
}

/// The digest over a suite's case files as [`CasesIdentity`] holds it: each case's name
/// and the digest of its bytes, in the suite's order (by name).
#[derive(Default)]
struct CasesDigest {
    parts: crate::digest::Parts,
    count: u64,
}

impl CasesDigest {
    fn add(&mut self, id: &str, bytes: &[u8]) {
        self.parts.add(id, bytes_hex(bytes).as_bytes());
        self.count += 1;
    }

    fn finish(self) -> CasesIdentity {
        CasesIdentity {
            count: self.count,
            digest: self.parts.finish(),
        }
    }
}

/// Where a case lives; [`CaseRef::load`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseRef {
    /// The file stem: `cases/007-net-30.json` is `007-net-30` (up to 24 bytes are held
    /// inline, without an allocation of their own).
    pub id: compact_str::CompactString,
    /// The suite's `cases/` folder, shared by all its cases: a suite of 100,000 cases
    /// holds 100,000 names, not 100,000 paths. A thin pointer: 32 bytes a case, not 40.
    pub(super) dir: Arc<PathBuf>,
}

/// One real input: the template variables and, optionally, the expected answer; or a
/// whole request (`messages`, `tools`, `tool_choice`, `parallel_tool_calls`, see
/// [`conversation`]) with what its answer must be (`expected` JSON, or `expect`: tool
/// calls or none).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The case file's name without `.json`.
    #[serde(skip)]
    pub id: String,
    /// What the case is about, for people.
    #[serde(default)]
    pub description: String,
    /// Template variables: of the suite's templates, and of the messages' contents.
    #[serde(default)]
    pub vars: Map<String, Value>,
    /// The correct answer; the suite's `agree` pointers must match it.
    #[serde(default)]
    pub expected: Option<Value>,
    /// The conversation, instead of the suite's `user` template.
    #[serde(default)]
    pub messages: Option<Vec<Message>>,
    /// The tools this request declares, instead of the suite's.
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// Which tool the model must call, may call or must not, for this request.
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn, for this request.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// The tool calls the answer must hold, or none.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// The primary's answers, recorded earlier: the case is judged against them.
    #[serde(default)]
    pub reference: Option<Reference>,
}

impl Case {
    /// What the answer must be: tool calls when `expect` lists them; text when `expect`
    /// forbids calls and nothing is `expected`; JSON otherwise, as for template cases.
    /// With neither, a recorded `reference` decides: calls if any recorded answer holds
    /// calls (none pinned), JSON if every recorded text is JSON, else text.
    pub fn answer(&self) -> Answer<'_> {
        match self.expect.as_ref().map(|e| &e.tool_calls) {
            Some(ExpectedCalls::Calls(calls)) if !calls.is_empty() => Answer::ToolCalls(calls),
            Some(_) if self.expected.is_none() => Answer::Text,
            None if self.expected.is_none() && self.reference.is_some() => {
                match self.reference.as_ref().map(Reference::kind) {
                    Some(ReferenceKind::ToolCalls) => Answer::ToolCalls(&[]),
                    Some(ReferenceKind::Text) => Answer::Text,
                    _ => Answer::Json,
                }
            }
            _ => Answer::Json,
        }
    }

    /// Whether the case says anything a template case cannot: its own messages or tools,
    /// how tools may be called, or which calls it expects.
    fn has_request_fields(&self) -> bool {
        self.messages.is_some()
            || self.tools.is_some()
            || self.tool_choice.is_some()
            || self.parallel_tool_calls.is_some()
            || self.expect.is_some()
    }
}

/// The prompt of one case, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The system prompt, when the suite has one.
    pub system: Option<String>,
    /// The user message.
    pub user: String,
}

/// One case, rendered: the prompt, and for a request-shaped case the whole conversation
/// (then `prompt` is its summary: the leading system text and the last user message).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// What the summary of the request is.
    pub prompt: Prompt,
    /// The whole request, for a case that gives one.
    pub conversation: Option<Conversation>,
}

impl CaseRef {
    /// `cases/<id>.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.id))
    }

    /// Reads and validates the case file.
    pub fn load(&self) -> Result<Case, Diagnostic> {
        self.load_from(None)
    }

    /// The case from `held` (its bytes as the pre-flight read them), or else from its file.
    pub fn load_from(&self, held: Option<&[u8]>) -> Result<Case, Diagnostic> {
        let read;
        let bytes = match held {
            Some(bytes) => bytes,
            None => {
                let path = self.path();
                read = std::fs::read(&path)
                    .map_err(|e| Diagnostic::new(&path, format!("cannot read: {e}")))?;
                &read
            }
        };
        self.parse(bytes)
    }

    /// The case in `bytes`, read from its file. The path is made only for an error: a run
    /// parses every call's case, most of them from the bytes the pre-flight held.
    fn parse(&self, bytes: &[u8]) -> Result<Case, Diagnostic> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Diagnostic::new(&self.path(), format!("cannot read: not UTF-8 ({e})")))?;
        let mut case: Case = serde_json::from_str(text)
            .map_err(|e| diagnostic::from_json(&self.path(), text, &e))?;
        case.id = self.id.to_string();
        Ok(case)
    }
}

impl Suite {
    /// The suite as its files: `suite.toml`, the schema, the tools and every case file,
    /// what an allowlist entry pins. Reads every case unless [`Suite::each_case`] has gone
    /// through them already.
    pub fn identity(&self) -> &SuiteIdentity {
        &self.identified().0
    }

    /// The digest of [`Suite::identity`]: what an allowlist entry's `suite_digest` holds.
    pub fn digest(&self) -> &str {
        &self.identified().1
    }

    fn identified(&self) -> &(SuiteIdentity, String) {
        self.identity.get_or_init(|| {
            let mut cases = CasesDigest::default();
            for case in &self.cases {
                let bytes = std::fs::read(case.path()).unwrap_or_default();
                cases.add(&case.id, &bytes);
            }
            self.identify(cases)
        })
    }

    fn identify(&self, cases: CasesDigest) -> (SuiteIdentity, String) {
        let identity = SuiteIdentity {
            files: self.files.clone(),
            cases: cases.finish(),
        };
        let digest = identity.digest();
        (identity, digest)
    }

    /// Reads every case once, in order, and hands each to `each` with its reference (the
    /// pre-flight of a run); the bytes read make [`Suite::digest`] on the way, so the
    /// cases are not read again for it. With `keep`, returns the bytes read
    /// ([`HeldCases`]): the run sends those without reading the files again.
    pub fn each_case(
        &self,
        keep: bool,
        mut each: impl FnMut(&CaseRef, Result<Case, Diagnostic>),
    ) -> HeldCases {
        let mut digest = CasesDigest::default();
        let mut held = HeldCases::default();
        if keep {
            held.expect(self.cases.len());
        }
        let mut reader = super::case_reader::CaseReader::default();
        for case_ref in &self.cases {
            match reader.read(case_ref) {
                Ok(bytes) => {
                    digest.add(&case_ref.id, bytes);
                    if keep {
                        held.hold(bytes);
                    }
                    each(case_ref, case_ref.parse(bytes));
                }
                Err(e) => {
                    held.skip();
                    digest.add(&case_ref.id, &[]);
                    each(
                        case_ref,
                        Err(Diagnostic::new(
                            &case_ref.path(),
                            format!("cannot read: {e}"),
                        )),
                    );
                }
            }
        }
        // A digest made by another caller meanwhile is of the same bytes, unless a case
        // changed between the two reads; the first one stays.
        let _ = self.identity.set(self.identify(digest));
        held.finish();
        held
    }

    /// Loads `dir/suite.toml`, its schema and its case list, reporting every problem.
    pub fn load(dir: &Path) -> Result<Suite, Diagnostics> {
        let file = dir.join("suite.toml");
        let source = std::fs::read_to_string(&file)
            .map_err(|e| Diagnostics(vec![Diagnostic::new(&file, format!("cannot read: {e}"))]))?;
        let spec: SuiteFile = toml::from_str(&source)
            .map_err(|e| Diagnostics(vec![diagnostic::from_toml(&file, &source, &e)]))?;
        let name = dir
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let place = Place {
            file: &file,
            source: &source,
        };
        let mut problems = Diagnostics::default();
        spec.check_settings(&place, &mut problems);
        let env = spec.templates(&place, &mut problems);
        let (tools, tools_file, tools_bytes) = spec.read_tools(dir, &place, &mut problems);
        let (schema, schema_file, schema_bytes) = spec.read_schema(dir, &place, &mut problems);
        let cases = list_cases(&dir.join("cases"), &mut problems);
        if cases.is_empty() && problems.is_empty() {
            problems.push(Diagnostic::new(
                &dir.join("cases"),
                "no cases: add real inputs as cases/NAME.json",
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }

        let mut files = BTreeMap::new();
        files.insert("suite.toml".to_string(), bytes_hex(source.as_bytes()));
        files.insert(spec.schema.clone(), bytes_hex(&schema_bytes));
        if let Some(name) = &spec.tools {
            files.insert(name.clone(), bytes_hex(&tools_bytes));
        }
        let has_system = spec.system.is_some();
        let has_user = spec.user.is_some();
        let variables = template_variables(&env).into();
        let quick = QuickTemplates::of(&env, spec.system.as_deref(), spec.user.as_deref());
        let slo = spec.slo();
        Ok(Suite {
            name,
            dir: dir.to_path_buf(),
            file,
            source,
            description: spec.description,
            schema: Arc::new(schema),
            schema_file,
            repeats: spec.repeats,
            pass_threshold: spec.pass_threshold,
            agree: spec.agree,
            not_compared: spec.not_compared,
            rules: spec.rules,
            stability: spec.stability,
            stream_agreement: spec.stream_agreement,
            max_undetected_failure_rate: spec.max_undetected_failure_rate,
            required_failure_rate: required_failure_rate(
                spec.max_undetected_failure_rate,
                crate::Settings::default().failure_rate_bound(),
            ),
            slo,
            tools: tools.into(),
            tools_file,
            tool_rules: spec.tool_rules,
            tool_thresholds: spec.tool_calls,
            reference: spec.reference,
            differential: spec.differential,
            cases,
            files,
            identity: std::sync::OnceLock::new(),
            templates: Arc::new(env),
            variables,
            has_system,
            has_user,
            quick,
        })
    }

    /// Whether `case` leaves the suite's `agree` pointers nothing to compare with: its
    /// answer is JSON, it has neither `expected` nor a recorded `reference`, and the suite
    /// has no live reference (its own `reference`, or the run's `--reference`, once
    /// [`super::reference::add_live_references`] has set it). Its calls would be judged on
    /// the schema and rules alone while the suite says it compares fields.
    pub fn uncomparable(&self, case: &Case) -> bool {
        !self.agree.is_empty()
            && case.expected.is_none()
            && case.reference.is_none()
            && self.reference.is_none()
            && matches!(case.answer(), Answer::Json)
    }

    /// The top-level fields of `expected` that neither an `agree` pointer compares nor
    /// `not_compared` lists: what a reader of the case may believe is checked and is not.
    pub fn uncompared<'a>(&self, expected: &'a Value) -> Vec<&'a str> {
        let head = |pointer: &str| {
            (pointer.split('/').nth(1)).map(|s| s.replace("~1", "/").replace("~0", "~"))
        };
        let covered = |field: &str| {
            (self.agree.iter().chain(&self.not_compared)).any(|p| head(p).as_deref() == Some(field))
        };
        match expected {
            Value::Object(fields) => fields
                .keys()
                .map(String::as_str)
                .filter(|f| !covered(f))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Template variables that the prompts use, sorted.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Whether the case is sent as a whole request (a conversation, tools) rather than
    /// the suite's two templates alone. A suite that declares tools makes every case one.
    pub fn is_request(&self, case: &Case) -> bool {
        case.has_request_fields() || !self.tools.is_empty()
    }

    /// The tools a case declares: its own, else the suite's.
    pub fn tools_for<'a>(&'a self, case: &'a Case) -> &'a [Tool] {
        case.tools.as_deref().unwrap_or(&self.tools)
    }

    /// Renders the case's prompt. A variable the case does not define is an error
    /// naming the case file and the variable, never an empty string. For a case with its
    /// own messages, the prompt summarizes them (see [`Rendered`]).
    pub fn render(&self, case: &Case, path: &Path) -> Result<Prompt, Diagnostics> {
        if case.messages.is_some() {
            return self.request(case, path).map(|r| r.prompt);
        }
        self.render_templates(case, path, true)
    }

    /// Renders what is sent for the case: the prompt, and for a request-shaped case the
    /// whole conversation with every message's content rendered as a template, after
    /// the suite's `system` template when the suite has one (the agent's instructions,
    /// shared by every case; a case's own system messages follow it).
    pub fn request(&self, case: &Case, path: &Path) -> Result<Rendered, Diagnostics> {
        if !self.is_request(case) {
            let prompt = self.render_templates(case, path, true)?;
            return Ok(Rendered {
                prompt,
                conversation: None,
            });
        }
        let messages = match &case.messages {
            None => {
                let prompt = self.render_templates(case, path, true)?;
                let mut m = Vec::with_capacity(2);
                if let Some(system) = prompt.system {
                    m.push(Message::text(Role::System, system));
                }
                m.push(Message::text(Role::User, prompt.user));
                m
            }
            Some(messages) => self.render_messages(case, messages, path)?,
        };
        let tools: Arc<[Tool]> = match &case.tools {
            Some(own) => own.clone().into(),
            None => Arc::clone(&self.tools),
        };
        let conversation = Conversation {
            messages,
            tools,
            tool_choice: case.tool_choice.clone(),
            parallel_tool_calls: case.parallel_tool_calls,
            json_answer: matches!(case.answer(), Answer::Json),
        };
        let user = conversation
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content_str().to_string())
            .unwrap_or_default();
        Ok(Rendered {
            prompt: Prompt {
                system: conversation.system(),
                user,
            },
            conversation: Some(conversation),
        })
    }

    /// Reads `case_ref` (from `held`, its bytes as a pre-flight read them, when given) and
    /// renders what is sent for it: the case and its request, or the problems of either.
    pub fn load_request(
        &self,
        case_ref: &CaseRef,
        held: Option<&[u8]>,
    ) -> Result<(Case, Rendered), Diagnostics> {
        let case = case_ref.load_from(held).map_err(|d| Diagnostics(vec![d]))?;
        let rendered = self.request(&case, &case_ref.path())?;
        Ok((case, rendered))
    }

    /// What is wrong with a request-shaped case before anything is sent: its tools, the
    /// order of its messages, its tool results, its expectation. Every problem is placed
    /// in the case file. Empty for a template case.
    pub fn case_problems(&self, case: &Case, path: &Path) -> Diagnostics {
        let mut out = Diagnostics::default();
        // Every field the suite compares must be there to compare with: one missing would
        // make the comparison of this case pass silently.
        if let Some(expected) = &case.expected {
            // A pointer no answer can hold is reported once, in suite.toml.
            let reachable = |p: &&String| {
                !matches!(
                    super::reach::pointer(&self.schema, p),
                    super::reach::Reach::Impossible(_) | super::reach::Reach::Undeclared { .. }
                )
            };
            let missing: Vec<&str> = (self.agree.iter())
                .filter(reachable)
                .filter(|p| expected.pointer(p).is_none())
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                let source = std::fs::read_to_string(path).unwrap_or_default();
                out.push(
                    Diagnostic::new(
                        path,
                        format!(
                            "expected has no {}, which suite.toml's agree compares: add {} (what the answer must hold), or leave `expected` out to judge the case against a reference",
                            missing.join(", "),
                            if missing.len() == 1 { "it" } else { "them" }
                        ),
                    )
                    .at_pointer(&source, "/expected"),
                );
            }
        }
        if let Some(reference) = &case.reference {
            let found = reference.problems();
            if !found.is_empty() {
                let source = std::fs::read_to_string(path).unwrap_or_default();
                for p in found {
                    out.push(Diagnostic::new(path, p.message).at_pointer(&source, &p.pointer));
                }
            }
        }
        if !self.is_request(case) {
            return out;
        }
        let source = std::fs::read_to_string(path).unwrap_or_default();
        let mut place = |p: conversation::Problem| {
            out.push(Diagnostic::new(path, p.message).at_pointer(&source, &p.pointer));
        };
        let tools = self.tools_for(case);
        if let Some(own) = &case.tools {
            conversation::tool_problems(own, "/tools")
                .into_iter()
                .for_each(&mut place);
        }
        let template = [Message::text(Role::User, "")];
        let messages = case.messages.as_deref().unwrap_or(&template);
        conversation::problems(messages, tools, case.tool_choice.as_ref())
            .into_iter()
            .for_each(&mut place);
        if let Some(e) = &case.expect {
            expect::problems(
                e,
                tools,
                case.tool_choice.as_ref(),
                case.parallel_tool_calls,
            )
            .into_iter()
            .for_each(&mut place);
        }
        if case.expect.is_none()
            && let Some(choice) = case.tool_choice.as_ref().filter(|c| c.forces_a_call())
        {
            place(conversation::Problem {
                pointer: "/tool_choice".into(),
                message: format!(
                    "tool_choice is {} but the case expects a JSON answer: say which calls it expects in `expect`",
                    choice.describe()
                ),
            });
        }
        out
    }

    /// The case's messages with every content rendered; a variable the case does not
    /// define is an error at that message.
    fn render_messages(
        &self,
        case: &Case,
        messages: &[Message],
        path: &Path,
    ) -> Result<Vec<Message>, Diagnostics> {
        let mut out = Vec::with_capacity(messages.len() + 1);
        if self.has_system {
            let system = self.render_one("system", case, path)?;
            out.push(Message::text(Role::System, system));
        }
        let mut problems = Diagnostics::default();
        let mut source = None;
        let mut names: Vec<(String, String)> = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            let mut m = message.clone();
            if let Some(content) = m.content.as_deref().filter(|c| is_template(c)) {
                match self.render_str(content, &case.vars) {
                    Ok(text) => m.content = Some(text),
                    Err(why) => {
                        let source = source.get_or_insert_with(|| {
                            std::fs::read_to_string(path).unwrap_or_default()
                        });
                        problems.push(
                            Diagnostic::new(path, why.to_string())
                                .at_pointer(source, &format!("/messages/{i}/content")),
                        );
                    }
                }
            }
            for call in &m.tool_calls {
                names.push((call.id.clone(), call.function.name.clone()));
            }
            // A tool result names its tool: Gemini and Ollama send the name, not the id.
            if m.role == Role::Tool
                && m.name.is_none()
                && let Some(id) = &m.tool_call_id
            {
                m.name = names
                    .iter()
                    .rev()
                    .find(|(call, _)| call == id)
                    .map(|(_, name)| name.clone());
            }
            out.push(m);
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    /// Renders one message's content with the case's variables; an undefined variable
    /// or a syntax error is the message.
    fn render_str(&self, text: &str, vars: &Map<String, Value>) -> Result<String, RenderError> {
        let template = self
            .templates
            .template_from_str(text)
            .map_err(RenderError::Syntax)?;
        let mut missing: Vec<String> = template
            .undeclared_variables(false)
            .into_iter()
            .filter(|v| !vars.contains_key(v))
            .collect();
        if !missing.is_empty() {
            missing.sort();
            return Err(RenderError::Undefined(missing));
        }
        template
            .render(minijinja::value::Serde(vars))
            .map_err(RenderError::Render)
    }

    /// Renders the suite's templates for a case: the system template, and the user
    /// template when `with_user`.
    fn render_templates(
        &self,
        case: &Case,
        path: &Path,
        with_user: bool,
    ) -> Result<Prompt, Diagnostics> {
        if with_user && !self.has_user {
            let source = std::fs::read_to_string(path).unwrap_or_default();
            return Err(Diagnostics(vec![
                Diagnostic::new(
                    path,
                    format!(
                        "this case has no `messages` and {} has no `user` template: give the case its messages, or the suite a user template",
                        self.file.display()
                    ),
                )
                .near(&source, "{"),
            ]));
        }
        let mut problems = Diagnostics::default();
        for var in self.variables() {
            if !case.vars.contains_key(var) {
                problems.push(
                    Diagnostic::new(
                        path,
                        format!("the prompt uses {{{{ {var} }}}} but this case does not define it"),
                    )
                    .field(format!("vars.{var}"))
                    .near(
                        &std::fs::read_to_string(path).unwrap_or_default(),
                        "\"vars\"",
                    ),
                );
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let system = if self.has_system {
            Some(self.render_one("system", case, path)?)
        } else {
            None
        };
        let user = if with_user {
            self.render_one("user", case, path)?
        } else {
            String::new()
        };
        Ok(Prompt { system, user })
    }

    /// Renders the suite's `name` template with the case's variables.
    fn render_one(&self, name: &str, case: &Case, path: &Path) -> Result<String, Diagnostics> {
        if let Some(text) = self.quick.render(name, &case.vars) {
            return Ok(text);
        }
        let template = self.templates.get_template(name).map_err(|e| {
            Diagnostics(vec![Diagnostic::new(&self.file, e.to_string()).field(name)])
        })?;
        template
            .render(minijinja::value::Serde(&case.vars))
            .map_err(|e| {
                Diagnostics(vec![
                    Diagnostic::new(path, format!("rendering the {name} template failed: {e}"))
                        .field(name),
                ])
            })
    }
}

/// Template variables that the suite's `system` and `user` templates use, sorted.
fn template_variables(templates: &Environment<'_>) -> Vec<String> {
    let mut vars: Vec<String> = ["system", "user"]
        .into_iter()
        .filter_map(|t| templates.get_template(t).ok())
        .flat_map(|t| t.undeclared_variables(false))
        .collect();
    vars.sort();
    vars.dedup();
    vars
}

fn list_cases(dir: &Path, problems: &mut Diagnostics) -> Vec<CaseRef> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            problems.push(Diagnostic::new(dir, format!("cannot list cases: {e}")));
            return Vec::new();
        }
    };
    let shared = Arc::new(dir.to_path_buf());
    let mut cases: Vec<CaseRef> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|path| {
            let id = path.file_stem()?.to_str()?.to_string();
            Some(CaseRef {
                id: id.into(),
                dir: Arc::clone(&shared),
            })
        })
        .collect();
    // Names in one folder are unique, so an unstable sort orders them the same, in place:
    // a stable one takes a buffer as large as the list (4 MB for 100,000 cases).
    cases.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    // The list lives as long as the run: not a slot more than the cases.
    cases.shrink_to_fit();
    cases
}

/// Why a message's template did not render with a case's variables.
#[derive(Debug, thiserror::Error)]
enum RenderError {
    #[error("the message is not a valid template: {0}")]
    Syntax(minijinja::Error),
    /// The variables it uses that the case does not define, sorted.
    #[error(
        "the message uses {} but this case does not define {} in `vars`",
        placeholders(.0),
        if_one(.0, "it", "them")
    )]
    Undefined(Vec<String>),
    #[error("rendering the message failed: {0}")]
    Render(minijinja::Error),
}

/// `{{ a }}, {{ b }}`: the variables as the message writes them.
fn placeholders(names: &[String]) -> String {
    let list: Vec<String> = names.iter().map(|v| format!("{{{{ {v} }}}}")).collect();
    list.join(", ")
}

/// `one` for a single name, else `many`.
fn if_one(names: &[String], one: &'static str, many: &'static str) -> &'static str {
    if names.len() == 1 { one } else { many }
}

/// Where a problem of `suite.toml` is: the file, and its text to place a field in.
struct Place<'a> {
    file: &'a Path,
    source: &'a str,
}

impl Place<'_> {
    fn at(&self, field: &str, needle: &str, message: String) -> Diagnostic {
        Diagnostic::new(self.file, message)
            .field(field)
            .near(self.source, needle)
    }
}

impl SuiteFile {
    fn slo(&self) -> super::Slo {
        super::Slo {
            max_p95_latency: self.max_p95_latency,
            max_p95_ttft: self.max_p95_ttft,
        }
    }

    /// The numbers and pointers of `suite.toml` that parse but mean nothing.
    fn check_settings(&self, place: &Place<'_>, problems: &mut Diagnostics) {
        let spec = self;
        let at = |field: &str, needle: &str, message: String| place.at(field, needle, message);
        if spec.repeats == 0 {
            problems.push(at("repeats", "repeats", "must be at least 1".into()));
        }
        if !(spec.pass_threshold > 0.0 && spec.pass_threshold <= 1.0) {
            problems.push(at(
                "pass_threshold",
                "pass_threshold",
                format!(
                    "{} is not a share in (0, 1]: 1.0 means every call must pass",
                    spec.pass_threshold
                ),
            ));
        }
        let share = |v: Option<f64>| v.is_none_or(|v| v > 0.0 && v <= 1.0);
        if !share(spec.stability.min_agreement) {
            problems.push(at(
                "stability.min_agreement",
                "min_agreement",
                "must be a share in (0, 1]: 1.0 means every repeat agrees".into(),
            ));
        }
        if !share(spec.stability.min_case_pass_lower_bound) {
            problems.push(at(
                "stability.min_case_pass_lower_bound",
                "min_case_pass_lower_bound",
                "must be a share in (0, 1]".into(),
            ));
        }
        if !spec
            .max_undetected_failure_rate
            .is_none_or(|r| r > 0.0 && r < 1.0)
        {
            problems.push(at(
                "max_undetected_failure_rate",
                "max_undetected_failure_rate",
                "must be a share in (0, 1), e.g. 0.05: 0 failures in 60 calls rule out 5 %".into(),
            ));
        }
        if !spec.stability.confidence.is_none_or(|c| c > 0.0 && c < 1.0) {
            problems.push(at(
                "stability.confidence",
                "confidence",
                "must be in (0, 1), e.g. 0.95".into(),
            ));
        }
        if !spec
            .differential
            .margin
            .is_none_or(|m| (0.0..1.0).contains(&m))
        {
            problems.push(at(
                "differential.margin",
                "margin",
                "must be a share in [0, 1), e.g. 0.05: how far below the reference's own agreement a candidate may fall".into(),
            ));
        }
        spec.check_comparisons(place, problems);
    }

    /// The reference, the SLO, the pointers compared and the tool-call thresholds.
    fn check_comparisons(&self, place: &Place<'_>, problems: &mut Diagnostics) {
        let spec = self;
        let at = |field: &str, needle: &str, message: String| place.at(field, needle, message);
        let share = |v: Option<f64>| v.is_none_or(|v| v > 0.0 && v <= 1.0);
        if spec
            .reference
            .as_deref()
            .is_some_and(|r| r.trim().is_empty())
        {
            problems.push(at(
                "reference",
                "reference",
                "is empty: name a provider file (providers/NAME.toml), or remove the line".into(),
            ));
        }
        for (field, message) in spec.slo().problems() {
            problems.push(at(field, field, message));
        }
        for (field, pointers) in [("agree", &spec.agree), ("not_compared", &spec.not_compared)] {
            for pointer in pointers {
                if !pointer.is_empty() && !pointer.starts_with('/') {
                    problems.push(at(
                        field,
                        pointer,
                        format!("`{pointer}` is not a JSON pointer: write it as \"/field\""),
                    ));
                }
            }
        }
        for (field, value) in [
            (
                "tool_calls.min_trigger_precision",
                spec.tool_calls.min_trigger_precision,
            ),
            (
                "tool_calls.min_trigger_recall",
                spec.tool_calls.min_trigger_recall,
            ),
            ("tool_calls.min_trigger_f1", spec.tool_calls.min_trigger_f1),
            (
                "tool_calls.min_schema_accuracy",
                spec.tool_calls.min_schema_accuracy,
            ),
        ] {
            if !share(value) {
                let key = field.rsplit('.').next().unwrap_or(field);
                problems.push(at(field, key, "must be a share in (0, 1]".into()));
            }
        }
    }

    /// The `system` and `user` templates, compiled; a template that does not parse is a
    /// problem at its field.
    fn templates(&self, place: &Place<'_>, problems: &mut Diagnostics) -> Environment<'static> {
        let spec = self;
        let at = |field: &str, needle: &str, message: String| place.at(field, needle, message);
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let mut add = |name: &'static str, text: &str, env: &mut Environment<'static>| {
            if let Err(e) = env.add_template_owned(name, text.to_string()) {
                problems.push(at(name, name, format!("template does not parse: {e}")));
            }
        };
        if let Some(user) = &spec.user {
            add("user", user, &mut env);
        }
        if let Some(system) = &spec.system {
            add("system", system, &mut env);
        }
        env
    }

    /// `tools.json`, when the suite names one: the tools, the file, and its bytes for the
    /// suite's identity; the rules for a tool it does not declare are problems.
    fn read_tools(
        &self,
        dir: &Path,
        place: &Place<'_>,
        problems: &mut Diagnostics,
    ) -> (Vec<Tool>, Option<PathBuf>, Vec<u8>) {
        let spec = self;
        let at = |field: &str, needle: &str, message: String| place.at(field, needle, message);
        let mut tools_bytes = Vec::new();
        let tools_file = spec.tools.as_ref().map(|name| dir.join(name));
        let tools: Vec<Tool> = match &tools_file {
            None => Vec::new(),
            Some(path) => match std::fs::read_to_string(path) {
                Err(e) => {
                    problems.push(at(
                        "tools",
                        "tools",
                        format!("cannot read {}: {e}", path.display()),
                    ));
                    Vec::new()
                }
                Ok(text) => {
                    tools_bytes = text.clone().into_bytes();
                    match serde_json::from_str::<Vec<Tool>>(&text) {
                        Err(e) => {
                            problems.push(diagnostic::from_json(path, &text, &e));
                            Vec::new()
                        }
                        Ok(tools) => {
                            for p in conversation::tool_problems(&tools, "") {
                                problems.push(
                                    Diagnostic::new(path, p.message).at_pointer(&text, &p.pointer),
                                );
                            }
                            tools
                        }
                    }
                }
            },
        };
        for rule in &spec.tool_rules {
            if let Some(tool) = &rule.tool
                && !tools.iter().any(|t| t.name() == tool)
                && spec.tools.is_some()
            {
                problems.push(at(
                    &format!("tool_rules.{}", rule.name),
                    tool,
                    format!(
                        "rule `{}` is for tool `{tool}`, which {} does not declare",
                        rule.name,
                        spec.tools.as_deref().unwrap_or("tools.json")
                    ),
                ));
            }
        }
        (tools, tools_file, tools_bytes)
    }

    /// The answer's schema: its value, its file, and its bytes for the suite's identity.
    fn read_schema(
        &self,
        dir: &Path,
        place: &Place<'_>,
        problems: &mut Diagnostics,
    ) -> (Value, PathBuf, Vec<u8>) {
        let spec = self;
        let at = |field: &str, needle: &str, message: String| place.at(field, needle, message);
        let schema_file = dir.join(&spec.schema);
        let mut schema_bytes = Vec::new();
        let schema = match std::fs::read_to_string(&schema_file) {
            Err(e) => {
                problems.push(at(
                    "schema",
                    "schema",
                    format!("cannot read {}: {e}", spec.schema),
                ));
                Value::Null
            }
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Err(e) => {
                    problems.push(diagnostic::from_json(&schema_file, &text, &e));
                    Value::Null
                }
                Ok(v) => {
                    problems.extend(schema_file::problems(&schema_file, &text, &v));
                    schema_bytes = text.into_bytes();
                    v
                }
            },
        };

        (schema, schema_file, schema_bytes)
    }
}

/// The name a suite's answer schema is sent under, as OpenAI accepts one:
/// `[a-zA-Z0-9_-]{1,64}`.
pub fn schema_name(suite: &str) -> String {
    let name: String = suite
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "output".into()
    } else {
        name
    }
}

/// The stricter of a suite's own bound and the project's.
pub fn required_failure_rate(suite: Option<f64>, project: f64) -> f64 {
    suite.map_or(project, |own| own.min(project))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A suite of `n` cases in a temporary folder; `bad` gets bytes that are not UTF-8.
    fn suite_of(n: usize, bad: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("cases")).expect("cases dir");
        std::fs::write(
            dir.path().join("suite.toml"),
            "system = \"Label it.\"\nuser = \"Text: {{ text }}\"\n",
        )
        .expect("suite.toml");
        std::fs::write(dir.path().join("schema.json"), r#"{"type":"object"}"#).expect("schema");
        for i in 0..n {
            let bytes = if i == bad {
                vec![b'{', 0xff, b'}']
            } else {
                format!(r#"{{"vars":{{"text":"case {i}"}}}}"#).into_bytes()
            };
            std::fs::write(dir.path().join(format!("cases/{i:03}.json")), bytes).expect("case");
        }
        dir
    }

    #[test]
    fn a_case_that_cannot_be_read_is_named_with_the_reason_and_none_after_it_is_held() {
        let dir = suite_of(4, usize::MAX);
        let suite = Suite::load(dir.path()).expect("suite");
        // A case that became a folder, and then the whole folder gone: the first is read
        // through the folder's descriptor, the rest by path once the folder cannot be opened.
        let second = dir.path().join("cases/001.json");
        std::fs::remove_file(&second).expect("remove");
        std::fs::create_dir(&second).expect("a folder in its place");
        let mut seen = Vec::new();
        let held = suite.each_case(true, |case_ref, loaded| {
            seen.push((
                case_ref.id.to_string(),
                loaded.map(|_| ()).map_err(|d| d.to_string()),
            ));
        });
        assert_eq!(seen[0], ("000".to_string(), Ok(())));
        let error = seen[1].1.as_ref().expect_err("a folder is not a case");
        assert!(
            error.contains("001.json") && error.contains("cannot read"),
            "{error}"
        );
        assert!(error.contains("Is a directory"), "{error}");
        assert_eq!(seen[2].1, Ok(()));
        assert!(
            held.get(0).is_some() && held.get(2).is_none(),
            "nothing after it is held"
        );

        std::fs::remove_dir_all(dir.path().join("cases")).expect("remove the cases");
        let mut errors = Vec::new();
        suite.each_case(false, |_, loaded| {
            errors.push(loaded.map(|_| ()).map_err(|d| d.to_string()))
        });
        assert_eq!(errors.len(), 4);
        for (i, error) in errors.iter().enumerate() {
            let error = error.as_ref().expect_err("gone");
            assert!(
                error.contains(&format!("00{i}.json")) && error.contains("No such file"),
                "{error}"
            );
        }
    }

    #[test]
    fn cases_past_the_memory_limit_are_sent_as_the_pre_flight_read_them() {
        let n = 6;
        let dir = suite_of(n, usize::MAX);
        let big = |i: usize, fill: char| {
            let text: String = std::iter::repeat_n(fill, HeldCases::LIMIT / 4).collect();
            format!(r#"{{"vars":{{"text":"{i} {text}"}}}}"#)
        };
        let path = |i: usize| dir.path().join(format!("cases/{i:03}.json"));
        for i in 0..n {
            std::fs::write(path(i), big(i, 'a')).expect("case");
        }
        let suite = Suite::load(dir.path()).expect("suite");
        let held = suite.each_case(true, |_, loaded| assert!(loaded.is_ok()));
        for i in 0..n {
            std::fs::write(path(i), big(i, 'b')).expect("a case changed after the pre-flight");
        }
        for i in 0..n {
            let case = suite.cases[i]
                .load_from(held.get(i).as_deref())
                .expect("case");
            let text = case.vars["text"].as_str().unwrap_or_default();
            assert!(
                text.starts_with(&format!("{i} a")),
                "case {i}: {}",
                &text[..8]
            );
        }
    }

    #[test]
    fn each_case_hands_every_case_in_order_and_makes_the_same_digest_as_a_plain_read() {
        let n = 203;
        let dir = suite_of(n, 101);
        let suite = Suite::load(dir.path()).expect("suite");
        let mut seen = Vec::new();
        let held = suite.each_case(true, |case_ref, loaded| {
            let loaded = loaded
                .map(|case| case.vars["text"].as_str().unwrap_or_default().to_string())
                .map_err(|d| d.to_string());
            seen.push((case_ref.id.to_string(), loaded));
        });
        assert_eq!(seen.len(), n, "every case handed over once");
        for i in 0..n {
            let file = std::fs::read(dir.path().join(format!("cases/{i:03}.json"))).expect("case");
            assert_eq!(
                held.get(i).as_deref(),
                Some(&file[..]),
                "case {i} held as read"
            );
        }
        assert_eq!(held.get(n), None);
        for (i, (id, loaded)) in seen.iter().enumerate() {
            assert_eq!(id, &format!("{i:03}"), "in the cases' order");
            match loaded {
                Ok(text) => assert_eq!(text, &format!("case {i}"), "each with its own bytes"),
                Err(message) => {
                    assert_eq!(i, 101, "only the bad case fails: {message}");
                    assert!(message.contains("101.json"), "{message}");
                }
            }
        }
        let plain = Suite::load(dir.path()).expect("suite again");
        assert_eq!(
            suite.digest(),
            plain.digest(),
            "through each_case or read afresh, one digest"
        );
        std::fs::write(
            dir.path().join("cases/200.json"),
            r#"{"vars":{"text":"x"}}"#,
        )
        .expect("a case changed");
        let changed = Suite::load(dir.path()).expect("suite changed");
        assert_ne!(
            suite.digest(),
            changed.digest(),
            "the digest sees the cases"
        );
    }

    #[test]
    fn a_template_without_syntax_renders_as_minijinja_renders_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("cases")).expect("cases dir");
        // A trailing newline, which minijinja drops, and text that only looks like syntax.
        let system = "Label it: { \"label\": ... }\n";
        std::fs::write(
            dir.path().join("suite.toml"),
            format!("system = {system:?}\nuser = \"Text: {{{{ text }}}}\"\n"),
        )
        .expect("suite.toml");
        std::fs::write(dir.path().join("schema.json"), r#"{"type":"object"}"#).expect("schema");
        let case_path = dir.path().join("cases/a.json");
        std::fs::write(&case_path, r#"{"vars":{"text":"hi"}}"#).expect("case");
        let suite = Suite::load(dir.path()).expect("suite");
        assert!(suite.quick.is_fixed("system"), "held once, at load");
        assert!(
            !suite.quick.is_fixed("user"),
            "the user template has a variable"
        );
        let case = suite.cases[0].load().expect("case");
        let prompt = suite
            .render_templates(&case, &case_path, true)
            .expect("rendered");
        let by_minijinja = Environment::new()
            .render_str(system, ())
            .expect("minijinja renders it");
        assert_eq!(prompt.system.as_deref(), Some(by_minijinja.as_str()));
        assert_eq!(prompt.user, "Text: hi");
    }
}
