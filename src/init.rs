//! `conform init`: a project scaffolded in an empty folder from what a user has, a primary
//! and the fallbacks to prove, and either the starter suite or traffic they already log.
//!
//! Each vendor's provider file is the one the repository ships (`providers/*.toml`), with
//! the model and address given; the starter suite is a slice of the shipped
//! `ticket-triage`. Nothing is ever overwritten: a folder that already holds any file
//! init would write is refused, naming the files.

use std::path::{Path, PathBuf};

use conform_config::Kind;
use conform_import::{Options, Redaction, Summary};

/// The name of the starter suite and of an imported one.
pub const STARTER_SUITE: &str = "ticket-triage";
pub const TRAFFIC_SUITE: &str = "traffic";

/// The shipped provider file each kind starts from.
fn template(kind: Kind) -> Option<&'static str> {
    kind.describe().example
}

/// Servers speaking Chat Completions whose name says which one they are, with the shipped
/// file for each (its comment, a model that server serves): a `llamacpp` fallback is not
/// "a vLLM server" serving Qwen. Names compare without case, `-`, `_` or `.`.
const SERVERS: [(&str, &str); 1] = [("llamacpp", include_str!("../providers/llamacpp.toml"))];

/// The shipped file for a server called `name`, when its name says which one it is.
fn server_template(name: &str) -> Option<&'static str> {
    let plain: String = (name.chars())
        .filter(|c| !matches!(c, '-' | '_' | '.'))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    SERVERS.iter().find(|(n, _)| *n == plain).map(|(_, t)| *t)
}

/// How often the starter suite sends each case.
const STARTER_REPEATS: u32 = 2;

/// A new project's `conform.toml`: every permit must rule out a failure rate above 5 %.
const STARTER_SETTINGS: &str = "\
# What every reader of this project's allowlist holds a permit to (docs/evidence.md).
[evidence]
# A permit must rule out a failure rate above 5 % at 95 % confidence: 59 calls without a
# failure meet it. Without this line, the default is 10 % (29 calls).
max_undetected_failure_rate = 0.05
# The longest a grant lasts after its first call.
max_valid_for = \"30d\"
";

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(
        "`{0}` is not a fallback: write NAME:URL (an OpenAI-compatible server, e.g. \
         vllm:http://host:8000/v1), KIND:URL (ollama:http://host:11434, \
         azure-openai:https://RESOURCE.openai.azure.com) or a vendor's KIND (anthropic, gemini, \
         openai, bedrock, vertex)"
    )]
    Fallback(String),
    #[error(
        "init cannot scaffold kind `{0}`: use openai, openai-compatible, anthropic, gemini, \
         ollama, azure-openai, bedrock or vertex, or write providers/NAME.toml by hand \
         (docs/providers.md)"
    )]
    Kind(String),
    #[error("two providers would be called `{0}`: name one fallback differently (NAME:URL)")]
    Duplicate(String),
    #[error(
        "{root} already holds what init would write ({files}): init only fills a new project, \
         and never overwrites"
    )]
    NotEmpty { root: PathBuf, files: String },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Import(#[from] conform_import::ImportError),
}

/// One provider to write: `providers/NAME.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: String,
    pub kind: Kind,
    /// The model, or the shipped file's when none is given.
    pub model: Option<String>,
    pub base_url: Option<String>,
}

impl ProviderSpec {
    /// The primary: `--provider KIND --model M`.
    pub fn primary(kind: &str, model: Option<String>) -> Result<ProviderSpec, InitError> {
        let kind = kind_named(kind).ok_or_else(|| InitError::Kind(kind.to_string()))?;
        template(kind).ok_or_else(|| InitError::Kind(kind.as_str().to_string()))?;
        Ok(ProviderSpec {
            name: kind.as_str().to_string(),
            kind,
            model,
            base_url: None,
        })
    }

    /// A fallback: `NAME:URL`, `KIND:URL`, a bare URL or a vendor's `KIND`. A name that is
    /// no kind is a server speaking Chat Completions (vLLM, llama.cpp, LiteLLM …), the
    /// usual self-hosted fallback.
    pub fn fallback(spec: &str, model: Option<String>) -> Result<ProviderSpec, InitError> {
        let bad = || InitError::Fallback(spec.to_string());
        let is_url = |s: &str| s.starts_with("http://") || s.starts_with("https://");
        let (name, base_url) = if is_url(spec) {
            ("fallback", Some(spec))
        } else {
            match spec.split_once(':') {
                Some((name, url)) if is_url(url) => (name, Some(url)),
                Some(_) => return Err(bad()),
                None => (spec, None),
            }
        };
        let named = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if name.is_empty() || !name.chars().all(named) {
            return Err(bad());
        }
        let kind = match (kind_named(name), base_url) {
            (Some(kind), _) => kind,
            (None, Some(_)) => Kind::ADDRESSED_BY_DEFAULT,
            (None, None) => return Err(bad()),
        };
        template(kind).ok_or_else(|| InitError::Kind(kind.as_str().to_string()))?;
        if base_url.is_none() && kind.describe().default_base_url.is_none() {
            return Err(bad());
        }
        Ok(ProviderSpec {
            name: name.to_string(),
            kind,
            model,
            base_url: base_url.map(str::to_string),
        })
    }

    /// The provider file: the shipped one for its kind, with this model and address.
    /// `free_text`: the suite's answers are not a JSON object (imported traffic that
    /// asked for no schema), so nothing is asked of the wire but the prompt.
    pub fn file(&self, free_text: bool) -> String {
        let server = (self.kind == Kind::ADDRESSED_BY_DEFAULT)
            .then(|| server_template(&self.name))
            .flatten();
        let template = server.or(template(self.kind)).unwrap_or_default();
        let mut out = String::with_capacity(template.len() + 64);
        let mut wrote_url = false;
        // A cloud's resource has no default address either, but always its credentials.
        let described = self.kind.describe();
        let self_hosted = described.default_base_url.is_none() && described.cloud.is_none();
        for line in template.lines() {
            if let (Some(model), true) = (&self.model, line.starts_with("model = ")) {
                out.push_str(&format!("model = {}\n", toml_string(model)));
            } else if let Some(shipped) = line.strip_prefix("base_url = ") {
                let url = (self.base_url.as_deref()).map_or(shipped.to_string(), toml_string);
                out.push_str(&format!("base_url = {url}\n"));
                wrote_url = true;
            } else if free_text && line.starts_with("structured_output = ") {
                out.push_str(
                    "structured_output = \"prompt\"   # the imported traffic asked for no JSON schema\n",
                );
            } else if line.starts_with("api_key_env = ") && self_hosted {
                // A self-hosted server usually has no key; a missing variable would stop
                // the run, so the line waits for the server that needs it.
                out.push_str(&format!(
                    "# {line}    # when the server was started with --api-key\n"
                ));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        if let (Some(url), false) = (&self.base_url, wrote_url) {
            let at = out.find("\n[").map_or(out.len(), |i| i + 1);
            out.insert_str(at, &format!("base_url = {}\n", toml_string(url)));
        }
        out
    }
}

fn kind_named(name: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| k.as_str() == name)
}

fn toml_string(s: &str) -> String {
    // A JSON string is a valid TOML basic string: the same escapes.
    serde_json::Value::String(s.to_string()).to_string()
}

/// What to scaffold.
#[derive(Debug)]
pub struct Plan {
    pub primary: ProviderSpec,
    pub fallbacks: Vec<ProviderSpec>,
    /// Logged traffic to import as the suite instead of the starter suite (JSONL of chat
    /// requests or request/response pairs; promptfoo YAML or CSV).
    pub traffic: Option<PathBuf>,
}

/// What was written, and the commands that come next, in order.
#[derive(Debug)]
pub struct Scaffolded {
    pub files: Vec<PathBuf>,
    pub suite: String,
    pub imported: Option<Summary>,
    pub next: Vec<String>,
}

/// What `conform init` says it wrote under `root`: each file (the suite's in one line)
/// and the commands that take the project to a decision.
pub struct Written<'a> {
    pub root: &'a Path,
    pub done: &'a Scaffolded,
}

impl std::fmt::Display for Written<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (root, done) = (self.root, self.done);
        let suite_dir = root.join("fixtures").join(&done.suite);
        for file in done.files.iter().filter(|f| !f.starts_with(&suite_dir)) {
            let shown = file.strip_prefix(root).unwrap_or(file);
            writeln!(f, "wrote {}", shown.display())?;
        }
        match &done.imported {
            Some(s) => writeln!(
                f,
                "wrote fixtures/{}/: {} cases from {} requests ({} with recorded answers); what was not carried over is in IMPORT_NOTES.md",
                done.suite, s.written, s.read, s.with_reference
            )?,
            None => writeln!(
                f,
                "wrote fixtures/{}/: a starter suite of 30 cases, each sent twice; replace them with your own (`conform import`)",
                done.suite
            )?,
        }
        writeln!(f, "\nnext:")?;
        if root != Path::new(".") {
            writeln!(f, "  cd {}", root.display())?;
        }
        for command in &done.next {
            writeln!(f, "  {command}")?;
        }
        Ok(())
    }
}

/// Writes the project under `root`: the provider files, the suite, a README and a CI
/// workflow. Refuses, writing nothing, when any of them is there already.
pub fn scaffold(root: &Path, plan: &Plan) -> Result<Scaffolded, InitError> {
    let providers: Vec<&ProviderSpec> = std::iter::once(&plan.primary)
        .chain(&plan.fallbacks)
        .collect();
    for (i, p) in providers.iter().enumerate() {
        if providers[..i].iter().any(|q| q.name == p.name) {
            return Err(InitError::Duplicate(p.name.clone()));
        }
    }
    let suite = match plan.traffic {
        Some(_) => TRAFFIC_SUITE,
        None => STARTER_SUITE,
    };
    let fallbacks: Vec<&str> = plan.fallbacks.iter().map(|f| f.name.as_str()).collect();
    let next = next_commands(&plan.primary, &fallbacks, suite);
    let provider_path = |p: &ProviderSpec| root.join("providers").join(format!("{}.toml", p.name));
    let readme_path = root.join("README.md");
    let workflow_path = root.join(".github/workflows/conform.yml");
    let suite_dir = root.join("fixtures").join(suite);
    let settings_path = root.join(conform_config::project::FILE);
    let mut taken: Vec<String> = (providers.iter().map(|p| provider_path(p)))
        .chain([
            readme_path.clone(),
            workflow_path.clone(),
            suite_dir.clone(),
            settings_path.clone(),
        ])
        .filter(|path| path.exists())
        .map(|path| {
            path.strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string()
        })
        .collect();
    if !taken.is_empty() {
        let more = taken.len().saturating_sub(4);
        taken.truncate(4);
        if more > 0 {
            taken.push(format!("and {more} more"));
        }
        return Err(InitError::NotEmpty {
            root: root.to_path_buf(),
            files: taken.join(", "),
        });
    }
    // The import validates the traffic before anything else is written, so a file it
    // cannot read leaves the folder as it was.
    let imported = match &plan.traffic {
        Some(input) => Some(import_traffic(root, input)?),
        None => None,
    };
    let free_text = imported.is_some() && !object_schema(&suite_dir.join("schema.json"));
    let mut files: Vec<(PathBuf, String)> = providers
        .iter()
        .map(|p| (provider_path(p), p.file(free_text)))
        .collect();
    files.push((readme_path, readme(&plan.primary, &next, suite)));
    files.push((workflow_path, workflow(&providers, free_text, &next)));
    files.push((settings_path, STARTER_SETTINGS.to_string()));
    if plan.traffic.is_none() {
        // The shipped `ticket-triage`, whole: its 30 cases sent twice (the starter's
        // `suite.toml` asks for [`STARTER_REPEATS`]) are 60 calls, what a pass needs to rule
        // out the 5 % failure rate `conform.toml` asks for ([`STARTER_SETTINGS`]).
        for (rel, text) in crate::embedded::suite(STARTER_SUITE) {
            let text = match rel {
                "suite.toml" => starter_suite_toml(text),
                _ => text.to_string(),
            };
            files.push((suite_dir.join(rel), text));
        }
    }
    for (path, text) in &files {
        let io = |source| InitError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        std::fs::write(path, text).map_err(io)?;
    }
    let mut written: Vec<PathBuf> = files.into_iter().map(|(path, _)| path).collect();
    if let Some(summary) = &imported {
        written.push(summary.dir.clone());
    }
    Ok(Scaffolded {
        files: written,
        suite: suite.to_string(),
        imported,
        next,
    })
}

/// The shipped suite's `suite.toml` with the starter's repeats.
fn starter_suite_toml(shipped: &str) -> String {
    shipped
        .lines()
        .map(|line| match line.starts_with("repeats = ") {
            true => format!("repeats = {STARTER_REPEATS}"),
            false => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn import_traffic(root: &Path, input: &Path) -> Result<Summary, InitError> {
    let opts = Options {
        suite: TRAFFIC_SUITE.to_string(),
        fixtures: root.join("fixtures"),
        force: false,
        sample: None,
        max_cases: conform_import::DEFAULT_MAX_CASES,
        max_line_bytes: conform_import::DEFAULT_MAX_LINE_BYTES,
        redaction: Redaction::new(true, &[], &[])?,
    };
    let promptfoo = input
        .extension()
        .is_some_and(|e| e == "yaml" || e == "yml" || e == "csv");
    Ok(match promptfoo {
        true => conform_import::promptfoo::import(input, &opts)?,
        false => conform_import::jsonl::import(input, &opts)?,
    })
}

/// The commands that take the new project to a decision, each one that works as printed.
fn next_commands(primary: &ProviderSpec, fallbacks: &[&str], suite: &str) -> Vec<String> {
    let proven = match fallbacks.is_empty() {
        true => primary.name.clone(),
        false => fallbacks.join(" "),
    };
    let gated = fallbacks.first().copied().unwrap_or(&primary.name);
    vec![
        "conform check".to_string(),
        format!("conform run {proven}"),
        format!("conform gate --suite {suite} --provider {gated}"),
    ]
}

/// Whether the schema at `path` asks for a JSON object (what every structured-output mode
/// needs at its root).
fn object_schema(path: &Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .is_some_and(|schema| schema["type"] == "object")
}

fn readme(primary: &ProviderSpec, next: &[String], suite: &str) -> String {
    let next = next.join("\n");
    let primary = &primary.name;
    format!(
        "# Failover evidence for `{primary}`\n\n\
         This project holds what conform needs to \
         decide whether a fallback may take over from `{primary}` automatically:\n\n\
         - `providers/`: one file per provider (the model, the address, the key's variable; \
         never the key itself);\n\
         - `fixtures/{suite}/`: the suite: a system prompt, a user template, `schema.json` and \
         one JSON file per case with the answer the business expects (`agree` in `suite.toml` \
         lists the fields compared). Replace the cases with your own traffic (`conform import`);\n\
         - `.github/workflows/conform.yml`: the same commands in CI.\n\n\
         ```sh\n{next}\n```\n\n\
         `conform run` writes `reports/<run-id>/` (report.html, report.json, junit.xml, \
         summary.md) and updates `allowlist.json`, which `conform gate` and your orchestrator \
         read: no valid, fresh entry means no failover. Add `--reference {primary}` to judge \
         a fallback against the primary's own run-to-run agreement (the primary is called \
         too).\n"
    )
}

fn workflow(providers: &[&ProviderSpec], free_text: bool, next: &[String]) -> String {
    let mut out = String::from(
        "# conform: prove the fallbacks before failover reaches them.\n\
         # Set the repository variable CONFORM_GIT to where you get conform from, and a secret\n\
         # for each key below.\n\
         name: conform\n\
         on: [pull_request]\n\
         jobs:\n  conform:\n    runs-on: ubuntu-latest\n",
    );
    let files: Vec<String> = providers.iter().map(|p| p.file(free_text)).collect();
    let keys: Vec<&str> = files
        .iter()
        .flat_map(|f| f.lines().filter_map(|l| l.strip_prefix("api_key_env = ")))
        .map(|env| env.trim_matches('"'))
        .collect();
    if !keys.is_empty() {
        out.push_str("    env:\n");
        for env in keys {
            out.push_str(&format!("      {env}: ${{{{ secrets.{env} }}}}\n"));
        }
    }
    out.push_str("    steps:\n      - uses: actions/checkout@v4\n");
    out.push_str("      - run: cargo install --locked --git \"${{ vars.CONFORM_GIT }}\" conform\n");
    for command in next {
        out.push_str(&format!("      - run: {command}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use conform_config::ProviderConfig;

    /// Every file init writes is a provider file conform reads, with the model and the
    /// address asked for.
    #[test]
    fn every_scaffolded_provider_file_parses_with_what_was_asked() {
        let specs = [
            ProviderSpec::primary("openai", Some("gpt-4.1-mini".into())).unwrap(),
            ProviderSpec::primary("gemini", None).unwrap(),
            ProviderSpec::fallback("vllm:http://h:8000/v1", Some("Qwen/Q".into())).unwrap(),
            ProviderSpec::fallback("anthropic:http://proxy:9000", None).unwrap(),
            ProviderSpec::fallback("ollama", None).unwrap(),
            ProviderSpec::fallback("https://h.example/v1", None).unwrap(),
        ];
        for spec in &specs {
            for free_text in [false, true] {
                let text = spec.file(free_text);
                let path = PathBuf::from(format!("providers/{}.toml", spec.name));
                let config = ProviderConfig::parse(&path, &text)
                    .unwrap_or_else(|e| panic!("{}: {e:?}\n{text}", spec.name));
                assert_eq!(config.kind, spec.kind, "{text}");
                if let Some(model) = &spec.model {
                    assert_eq!(&config.model, model);
                }
                if let Some(url) = &spec.base_url {
                    assert!(text.contains(&format!("base_url = \"{url}\"")), "{text}");
                }
                assert_eq!(text.contains("\"prompt\""), free_text, "{text}");
            }
        }
        assert_eq!(specs[5].name, "fallback");
        assert_eq!(specs[2].kind, Kind::ADDRESSED_BY_DEFAULT);
    }
}
