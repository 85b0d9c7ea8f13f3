//! `fixtures/SUITE/`: prompt templates, the output schema, rules and real cases.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use minijinja::{Environment, UndefinedBehavior};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::diagnostic::{self, Diagnostic, Diagnostics};
use super::schema_file;

/// A business rule as written in `suite.toml`; [`crate::check::rules`] compiles it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    /// A jq expression that must yield `true`.
    pub expr: String,
    pub message: String,
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
    user: String,
    #[serde(default = "default_schema")]
    schema: String,
    #[serde(default = "default_repeats")]
    repeats: u32,
    #[serde(default = "default_threshold")]
    pass_threshold: f64,
    #[serde(default)]
    agree: Vec<String>,
    #[serde(default)]
    rules: Vec<RuleSpec>,
    #[serde(default)]
    stability: StabilitySpec,
    #[serde(default)]
    stream_agreement: bool,
    #[serde(default, with = "super::slo::optional_duration")]
    max_p95_latency: Option<std::time::Duration>,
    #[serde(default, with = "super::slo::optional_duration")]
    max_p95_ttft: Option<std::time::Duration>,
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
    pub name: String,
    pub dir: PathBuf,
    pub file: PathBuf,
    /// The text of `suite.toml`, kept to place later diagnostics on their line.
    pub source: String,
    pub description: String,
    pub schema: Arc<Value>,
    pub schema_file: PathBuf,
    pub repeats: u32,
    pub pass_threshold: f64,
    pub agree: Vec<String>,
    pub rules: Vec<RuleSpec>,
    pub stability: StabilitySpec,
    /// With a provider that streams, every case is also sent unstreamed, and the two
    /// answers must be the same (canonical JSON).
    pub stream_agreement: bool,
    /// Latency objectives every provider's verdict on this suite is held to.
    pub slo: super::Slo,
    pub cases: Vec<CaseRef>,
    /// Digest of `suite.toml`, the schema and every case file.
    pub digest: String,
    templates: Arc<Environment<'static>>,
    has_system: bool,
}

/// Where a case lives; [`CaseRef::load`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseRef {
    /// The file stem: `cases/007-net-30.json` is `007-net-30`.
    pub id: String,
    /// The suite's `cases/` folder, shared by all its cases: a suite of 100,000 cases
    /// holds 100,000 names, not 100,000 paths.
    dir: Arc<Path>,
}

/// One real input: the template variables and, optionally, the expected answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    #[serde(skip)]
    pub id: String,
    #[serde(default)]
    pub description: String,
    pub vars: Map<String, Value>,
    /// The correct answer; the suite's `agree` pointers must match it.
    #[serde(default)]
    pub expected: Option<Value>,
}

/// The prompt of one case, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: Option<String>,
    pub user: String,
}

impl CaseRef {
    /// `cases/<id>.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.id))
    }

    pub fn load(&self) -> Result<Case, Diagnostic> {
        let path = self.path();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Diagnostic::new(&path, format!("cannot read: {e}")))?;
        let mut case: Case =
            serde_json::from_str(&text).map_err(|e| diagnostic::from_json(&path, &text, &e))?;
        case.id = self.id.clone();
        Ok(case)
    }
}

impl Suite {
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
        let mut problems = Diagnostics::default();
        let at = |field: &str, needle: &str, message: String| {
            Diagnostic::new(&file, message)
                .field(field)
                .near(&source, needle)
        };

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
        if !spec.stability.confidence.is_none_or(|c| c > 0.0 && c < 1.0) {
            problems.push(at(
                "stability.confidence",
                "confidence",
                "must be in (0, 1), e.g. 0.95".into(),
            ));
        }
        let slo = super::Slo {
            max_p95_latency: spec.max_p95_latency,
            max_p95_ttft: spec.max_p95_ttft,
        };
        for (field, message) in slo.problems() {
            problems.push(at(field, field, message));
        }
        for pointer in &spec.agree {
            if !pointer.is_empty() && !pointer.starts_with('/') {
                problems.push(at(
                    "agree",
                    pointer,
                    format!("`{pointer}` is not a JSON pointer: write it as \"/field\""),
                ));
            }
        }

        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let mut add = |name: &'static str, text: &str, env: &mut Environment<'static>| {
            if let Err(e) = env.add_template_owned(name, text.to_string()) {
                problems.push(at(name, name, format!("template does not parse: {e}")));
            }
        };
        add("user", &spec.user, &mut env);
        if let Some(system) = &spec.system {
            add("system", system, &mut env);
        }

        let schema_file = dir.join(&spec.schema);
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
                    v
                }
            },
        };

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

        let mut digest = crate::digest::Parts::default();
        digest.add("suite.toml", source.as_bytes());
        digest.add("schema", schema.to_string().as_bytes());
        for case in &cases {
            let bytes = std::fs::read(case.path()).unwrap_or_default();
            digest.add(&case.id, &bytes);
        }
        let has_system = spec.system.is_some();
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
            rules: spec.rules,
            stability: spec.stability,
            stream_agreement: spec.stream_agreement,
            slo,
            cases,
            digest: digest.finish(),
            templates: Arc::new(env),
            has_system,
        })
    }

    /// Template variables that the prompts use, sorted.
    pub fn variables(&self) -> Vec<String> {
        let mut vars: Vec<String> = ["system", "user"]
            .into_iter()
            .filter_map(|t| self.templates.get_template(t).ok())
            .flat_map(|t| t.undeclared_variables(false))
            .collect();
        vars.sort();
        vars.dedup();
        vars
    }

    /// Renders the case's prompt. A variable the case does not define is an error
    /// naming the case file and the variable, never an empty string.
    pub fn render(&self, case: &Case, path: &Path) -> Result<Prompt, Diagnostics> {
        let mut problems = Diagnostics::default();
        for var in self.variables() {
            if !case.vars.contains_key(&var) {
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
        let render = |name: &str| -> Result<String, Diagnostic> {
            let template = self
                .templates
                .get_template(name)
                .map_err(|e| Diagnostic::new(&self.file, e.to_string()).field(name))?;
            template
                .render(minijinja::value::Serde(&case.vars))
                .map_err(|e| {
                    Diagnostic::new(path, format!("rendering the {name} template failed: {e}"))
                        .field(name)
                })
        };
        let system = if self.has_system {
            Some(render("system").map_err(|d| Diagnostics(vec![d]))?)
        } else {
            None
        };
        let user = render("user").map_err(|d| Diagnostics(vec![d]))?;
        Ok(Prompt { system, user })
    }
}

fn list_cases(dir: &Path, problems: &mut Diagnostics) -> Vec<CaseRef> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            problems.push(Diagnostic::new(dir, format!("cannot list cases: {e}")));
            return Vec::new();
        }
    };
    let shared: Arc<Path> = Arc::from(dir);
    let mut cases: Vec<CaseRef> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|path| {
            let id = path.file_stem()?.to_str()?.to_string();
            Some(CaseRef {
                id,
                dir: Arc::clone(&shared),
            })
        })
        .collect();
    cases.sort_by(|a, b| a.id.cmp(&b.id));
    cases
}
