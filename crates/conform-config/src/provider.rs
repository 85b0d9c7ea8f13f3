//! `providers/NAME.toml`: how to reach one model, and how hard to push it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::cloud::{CloudApi, CloudSettings};
use super::diagnostic::{self, Diagnostic, Diagnostics};
use super::identity::ProviderIdentity;
use super::kind::Kind;
use super::pricing::Pricing;
use super::slo::{Slo, optional_duration};
use crate::secret::Secret;

/// How JSON output is requested from the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// The suite's schema, enforced by the provider (OpenAI strict mode, grammar decoding).
    JsonSchema,
    /// "Some JSON object": the legacy JSON mode.
    JsonObject,
    /// A forced tool call whose arguments are the object.
    Tool,
    /// Nothing on the wire: the prompt alone asks for JSON.
    Prompt,
}

/// `[limits]`: how hard a run may press the provider, and how often it retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Calls in flight at once, when the file says: then an upper bound. Unstated, a run
    /// starts at [`DEFAULT_CONCURRENCY`] and goes as far as the account's stated limits
    /// let it ([`conform_wire::provider::limits::Pacer`]); read it with [`Limits::concurrency`].
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// The account's request rate limit, when the file states it: the pacer keeps under it.
    pub requests_per_minute: Option<u32>,
    /// The account's token rate limit, when the file states it: the pacer keeps under it.
    pub tokens_per_minute: Option<u32>,
    /// Retries after the first request, for retryable failures only.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// The longest single wait between two requests, `Retry-After` included: a provider
    /// that asks for more is given up on.
    #[serde(default = "default_max_retry_wait", with = "humantime_serde_compat")]
    pub max_retry_wait: Duration,
    /// The first backoff wait when the provider gives no `Retry-After`; it doubles per
    /// retry, with jitter.
    #[serde(default = "default_retry_base_wait", with = "humantime_serde_compat")]
    pub retry_base_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            concurrency: None,
            requests_per_minute: None,
            tokens_per_minute: None,
            max_retries: default_max_retries(),
            max_retry_wait: default_max_retry_wait(),
            retry_base_wait: default_retry_base_wait(),
        }
    }
}

/// Calls in flight at once when the provider file states no `concurrency`, until the
/// account's limits say more would fit.
pub const DEFAULT_CONCURRENCY: usize = 4;

impl Limits {
    /// Calls in flight at once to start with: the stated concurrency, else the default.
    pub fn concurrency(&self) -> usize {
        self.concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1)
    }
}
fn default_max_retries() -> u32 {
    4
}
fn default_max_retry_wait() -> Duration {
    Duration::from_secs(60)
}
fn default_retry_base_wait() -> Duration {
    Duration::from_millis(500)
}

/// Which tokenizer counts this provider's prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    /// Which counter [default: none, no prompt is counted].
    #[serde(default)]
    pub kind: TokenizerKind,
    /// `o200k_base` or `cl100k_base`, for `tiktoken`.
    pub encoding: Option<String>,
    /// A `tokenizer.json` or the directory holding it (with `tokenizer_config.json` and
    /// its chat template), for `huggingface`; relative to the provider file.
    pub path: Option<PathBuf>,
    /// The model's context window in tokens.
    pub context_window: Option<u32>,
    /// How many tokens the provider-reported prompt count may differ from the local
    /// count [default: 0, exact].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<u32>,
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig {
            kind: TokenizerKind::None,
            encoding: None,
            path: None,
            context_window: None,
            tolerance: None,
        }
    }
}

/// What counts a provider's prompt tokens locally, if anything does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenizerKind {
    /// An OpenAI encoding (`encoding`).
    Tiktoken,
    /// A `tokenizer.json` and the model's chat template (`path`).
    Huggingface,
    /// The provider's own endpoints (llama.cpp `/apply-template` + `/tokenize`).
    Provider,
    /// Nothing: token counts are not checked.
    #[default]
    None,
}

/// How a simulated provider misbehaves, and what `conform demo` expects of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// What the simulation gets wrong, or nothing.
    pub behaviour: super::simulation::Behaviour,
    /// The verdict the demo expects; a different one makes `conform demo` fail.
    pub expect: super::simulation::ExpectedVerdict,
    /// Fixed latency of every answer.
    #[serde(default = "default_sim_latency", with = "humantime_serde_compat")]
    pub latency: Duration,
    /// The vendor wire format the simulation speaks (default: OpenAI-compatible Chat
    /// Completions). The runner talks to it with that vendor's adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<Kind>,
    /// With `latency_p95`: each answer's latency is drawn from a log-normal distribution
    /// with this median and that 95th percentile, instead of the fixed `latency`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub latency_p50: Option<Duration>,
    /// With `latency_p50`: the 95th percentile of the drawn latencies.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub latency_p95: Option<Duration>,
    /// Runs the simulation's clock faster (0.01: a 20 s answer takes 200 ms): it sleeps
    /// its latency × `time_scale`, and the run records what it measured ÷ `time_scale`,
    /// so percentiles and latency objectives see the latency the simulation stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// How the simulation treats each JSON Schema keyword of a request's schema (for
    /// `conform probe`): `enforce`, `reject`, `strip` or `ignore`, by keyword, with `"*"`
    /// for every other constraint keyword [default: enforce every keyword].
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub schema_keywords: std::collections::BTreeMap<String, super::simulation::Handling>,
    /// The share of answers in which the behaviour's drift shows [default: 1, every
    /// answer it can]; the others are faithful. Which ones is decided by `seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Picks the answers that drift when `rate` is below 1 [default: 0].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The suites the simulation is run on [default: every suite]: a tool-call drift
    /// shows only in suites whose requests declare tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suites: Option<Vec<String>>,
    /// The finding code that must be among a nonconformant verdict's reasons: the drift
    /// is caught for what it is, not for something else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caught_by: Option<String>,
}

fn default_sim_latency() -> Duration {
    Duration::from_millis(20)
}

/// `[anthropic]`: Messages API settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnthropicOptions {
    /// Newer Claude models reject `temperature` with a 400 ("deprecated for this
    /// model"); `false` leaves it out, and the report records that the temperature was
    /// not settable.
    #[serde(default = "default_true")]
    pub send_temperature: bool,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        AnthropicOptions {
            send_temperature: true,
        }
    }
}

fn default_true() -> bool {
    true
}

/// `[gemini]`: Developer API settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeminiOptions {
    /// The API version in the path; pinned, since the SDKs disagree on the default.
    #[serde(default)]
    pub api_version: GeminiApiVersion,
    /// Which `generationConfig` field carries the schema.
    #[serde(default)]
    pub schema_field: GeminiSchemaField,
}

/// The Gemini API version in the request path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GeminiApiVersion {
    /// `v1beta`, where new features arrive first.
    #[default]
    #[serde(rename = "v1beta")]
    V1beta,
    /// `v1`, the stable version.
    #[serde(rename = "v1")]
    V1,
}

impl GeminiApiVersion {
    /// The version as the path writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            GeminiApiVersion::V1beta => "v1beta",
            GeminiApiVersion::V1 => "v1",
        }
    }
}

/// How Gemini receives the schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GeminiSchemaField {
    /// `responseJsonSchema`: JSON Schema (a documented subset of keywords).
    #[default]
    #[serde(rename = "responseJsonSchema")]
    ResponseJsonSchema,
    /// `responseSchema`: an OpenAPI 3.0 subset that rejects `additionalProperties`,
    /// `$ref`, `const` … with a 400.
    #[serde(rename = "responseSchema")]
    ResponseSchema,
}

/// Something a reader of a run's report must know about a provider: not an error, a
/// property of how it was tested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunProperty {
    /// A stable code a report can be searched for.
    pub code: &'static str,
    /// What it means for the evidence, in a sentence.
    pub message: String,
}

/// The file as written: every field a user may set, and nothing else.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderFile {
    kind: Kind,
    model: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
    #[serde(default)]
    temperature: Option<f64>,
    seed: Option<i64>,
    #[serde(default = "default_max_output_tokens")]
    max_output_tokens: u32,
    #[serde(default = "default_timeout", with = "humantime_serde_compat")]
    timeout: Duration,
    structured_output: Option<StructuredOutput>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    tokenizer: TokenizerConfig,
    sim: Option<SimConfig>,
    #[serde(default)]
    stream: bool,
    #[serde(default, with = "optional_duration")]
    max_p95_latency: Option<Duration>,
    #[serde(default, with = "optional_duration")]
    max_p95_ttft: Option<Duration>,
    anthropic: Option<AnthropicOptions>,
    gemini: Option<GeminiOptions>,
    pricing: Option<Pricing>,
    // A cloud's own fields (`super::cloud`), each taken only by the kinds that name it.
    deployment: Option<String>,
    api_version: Option<String>,
    token_env: Option<String>,
    region: Option<String>,
    api: Option<CloudApi>,
    project: Option<String>,
}

fn default_max_output_tokens() -> u32 {
    1024
}
fn default_timeout() -> Duration {
    Duration::from_secs(60)
}

/// A validated provider configuration. It holds no secret: the key is read from
/// `api_key_env` at run time by [`ProviderConfig::api_key`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderConfig {
    /// The file stem: `providers/openai.toml` is `openai`.
    pub name: String,
    /// The file it was read from.
    #[serde(skip)]
    pub file: PathBuf,
    /// The wire it speaks.
    pub kind: Kind,
    /// The model asked for.
    pub model: String,
    /// Empty for a simulated provider until its server starts.
    pub base_url: String,
    /// The environment variable holding the API key; `None` where the wire needs no key or the cloud has its own credentials.
    pub api_key_env: Option<String>,
    /// Sampling temperature sent with every request.
    pub temperature: f64,
    /// Sampling seed, where the provider takes one.
    pub seed: Option<i64>,
    /// The most tokens an answer may have.
    pub max_output_tokens: u32,
    /// How long one attempt may take before it counts as timed out.
    #[serde(with = "humantime_serde_compat")]
    pub timeout: Duration,
    /// How the suite's JSON answer is asked for.
    pub structured_output: StructuredOutput,
    /// Concurrency, rate limits and retries.
    pub limits: Limits,
    /// Which tokenizer counts prompts, if any.
    pub tokenizer: TokenizerConfig,
    /// `[sim]`: the simulation this provider is, when it is one.
    pub sim: Option<SimConfig>,
    /// Ask for a server-sent-event stream and fold it into one reply. Streams are where
    /// some servers differ (mid-stream errors, missing usage); the answer is the same.
    pub stream: bool,
    /// The settings the command line changed for this run (`--base-url`, `--stream`):
    /// the identity is then what was sent, not what the file says, so a run with any of
    /// them grants nothing ([`ProviderConfig::overridden`]).
    #[serde(skip)]
    overrides: Vec<Override>,
    /// Latency objectives this provider's verdicts are held to (with the suite's).
    #[serde(flatten)]
    pub slo: Slo,
    /// `[anthropic]`, when the file has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic: Option<AnthropicOptions>,
    /// `[gemini]`, when the file has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gemini: Option<GeminiOptions>,
    /// A cloud's deployment, region, project, API and token variable, where given.
    #[serde(flatten)]
    pub cloud: CloudSettings,
    /// USD per million tokens (`[pricing]`); left out of the digest: a price does not
    /// shape an answer.
    #[serde(skip)]
    pub pricing: Option<Pricing>,
}

/// Why an API key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The variable that should hold the key is not set.
    #[error(
        "provider `{provider}` reads its API key from ${var}, which is not set: export {var}=… (the key is never read from a file)"
    )]
    Missing {
        /// The provider, by name.
        provider: String,
        /// The variable its file names.
        var: String,
    },
    /// A cloud's credentials are in none of the variables it reads.
    #[error(
        "provider `{provider}` finds its credentials in the environment, and none is set: export {wanted} (credentials are never read from a provider file)"
    )]
    Environment {
        /// The provider, by name.
        provider: String,
        /// The variables that would do, as a sentence.
        wanted: String,
    },
}

impl ProviderConfig {
    /// Reads and validates `path`, reporting every problem with its line and field.
    pub fn load(path: &Path) -> Result<ProviderConfig, Diagnostics> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| Diagnostics(vec![Diagnostic::new(path, format!("cannot read: {e}"))]))?;
        Self::parse(path, &source)
    }

    /// Validates `source`, the text of `path`, reporting every problem with its line and field.
    pub fn parse(path: &Path, source: &str) -> Result<ProviderConfig, Diagnostics> {
        let file: ProviderFile = toml::from_str(source)
            .map_err(|e| Diagnostics(vec![diagnostic::from_toml(path, source, &e)]))?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let mut problems = Diagnostics::default();
        let mut problem = |field: &str, needle: &str, message: String| {
            problems.push(
                Diagnostic::new(path, message)
                    .field(field)
                    .near(source, needle),
            );
        };
        let cloud = file.cloud().completed(file.kind.describe());
        for (field, near, message) in
            super::cloud::problems(file.kind.describe(), &cloud, file.api_key_env.as_deref())
        {
            problem(&field, &near, message);
        }
        let base_url = file.base_url(&cloud, &mut problem);
        let temperature = file.check_numbers(&mut problem);
        file.check_wire(&mut problem);
        let slo = Slo {
            max_p95_latency: file.max_p95_latency,
            max_p95_ttft: file.max_p95_ttft,
        };
        for (field, message) in slo.problems() {
            problem(field, field, message);
        }
        file.check_sim(&mut problem);
        for (field, message) in file.pricing.iter().flat_map(Pricing::problems) {
            let key = field.rsplit('.').next().unwrap_or(field);
            problem(field, key, message);
        }
        file.check_tokenizer(&mut problem);
        if !problems.is_empty() {
            return Err(problems);
        }
        let structured_output = file
            .structured_output
            .unwrap_or(StructuredOutput::JsonSchema);
        Ok(ProviderConfig {
            name,
            file: path.to_path_buf(),
            kind: file.kind,
            model: file.model,
            base_url,
            api_key_env: file.api_key_env,
            temperature,
            seed: file.seed,
            max_output_tokens: file.max_output_tokens,
            timeout: file.timeout,
            structured_output,
            limits: file.limits,
            tokenizer: file.tokenizer,
            sim: file.sim,
            stream: file.stream,
            overrides: Vec::new(),
            slo,
            anthropic: file.anthropic,
            gemini: file.gemini,
            cloud,
            pricing: file.pricing,
        })
    }

    /// The API key from `api_key_env`, or the token from `token_env`, or `None` when the
    /// provider needs none or its credentials are a cloud's own variables (which must
    /// then be set: the provider reads them when it sends).
    pub fn api_key(&self) -> Result<Option<Secret>, KeyError> {
        let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
        match (self.cloud).missing_credentials(self.kind.describe(), set) {
            Err(wanted) if self.cloud.token_env.is_some() => {
                return Err(KeyError::Missing {
                    provider: self.name.clone(),
                    var: wanted.join(""),
                });
            }
            Err(wanted) => {
                return Err(KeyError::Environment {
                    provider: self.name.clone(),
                    wanted: wanted.join(", or "),
                });
            }
            Ok(()) => {}
        }
        let Some(var) = self.api_key_env.as_ref().or(self.cloud.token_env.as_ref()) else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Some(Secret::new(v))),
            _ => Err(KeyError::Missing {
                provider: self.name.clone(),
                var: var.clone(),
            }),
        }
    }

    /// The address of the wire's `path` (`/v1/chat/completions`, or one with its own
    /// query, `…:streamGenerateContent?alt=sse`) on this provider: the path after
    /// `base_url`'s own, then the path's query and `base_url`'s, if any.
    pub fn url(&self, path: &str) -> String {
        let split = |s: &str| -> (String, Option<String>) {
            match s.split_once('?') {
                Some((head, query)) => (head.to_string(), Some(query.to_string())),
                None => (s.to_string(), None),
            }
        };
        let (base, base_query) = split(&self.base_url);
        let (path, path_query) = split(path);
        let query: Vec<String> = [path_query, base_query].into_iter().flatten().collect();
        match query.is_empty() {
            true => format!("{base}{path}"),
            false => format!("{base}{path}?{}", query.join("&")),
        }
    }

    /// Whether this is a simulated provider (`kind = "sim"`): it speaks a vendor's wire
    /// on loopback, and its evidence never permits a real failover.
    pub fn is_simulated(&self) -> bool {
        self.kind == Kind::Sim
    }

    /// The wire format this provider speaks: its kind, or for a simulation the vendor
    /// it imitates.
    pub fn wire_kind(&self) -> Kind {
        match (self.kind, self.sim.as_ref().and_then(|s| s.wire)) {
            (Kind::Sim, Some(wire)) if wire.describe().simulable => wire,
            (Kind::Sim, _) => Kind::SIMULATED_BY_DEFAULT,
            (kind, _) => kind,
        }
    }

    /// Whether this provider is run on `suite`: every provider is, except a simulation
    /// whose `[sim] suites` leaves the suite out.
    pub fn runs_suite(&self, suite: &str) -> bool {
        self.sim
            .as_ref()
            .and_then(|s| s.suites.as_ref())
            .is_none_or(|suites| suites.iter().any(|s| s == suite))
    }

    /// The `[anthropic]` settings, defaults filled in.
    pub fn anthropic_options(&self) -> AnthropicOptions {
        self.anthropic.unwrap_or_default()
    }

    /// The `[gemini]` settings, defaults filled in.
    pub fn gemini_options(&self) -> GeminiOptions {
        self.gemini.unwrap_or_default()
    }

    /// Whether requests carry `temperature`.
    pub fn sends_temperature(&self) -> bool {
        // Only a provider that speaks Anthropic's wire takes the section that turns it off.
        self.anthropic_options().send_temperature
    }

    /// How much faster than real time a simulated provider's clock runs (1 for every
    /// real provider): a measured duration ÷ this is the duration it stands for.
    pub fn time_scale(&self) -> f64 {
        self.sim
            .as_ref()
            .and_then(|s| s.time_scale)
            .filter(|t| t.is_finite() && *t > 0.0)
            .unwrap_or(1.0)
    }

    /// What the report must say about how this provider was tested.
    pub fn run_properties(&self) -> Vec<RunProperty> {
        let mut properties = Vec::new();
        if self.overrides.contains(&Override::Stream) {
            properties.push(RunProperty {
                code: "streamed_by_command_line",
                message: "streamed (--stream): every answer was asked for as a stream and folded, although the provider file does not set `stream = true`".into(),
            });
        }
        if !self.sends_temperature() {
            properties.push(RunProperty {
                code: "temperature_not_settable",
                message: format!(
                    "temperature not settable: requests carry no `temperature` (the model rejects it), so answers come at the provider's default instead of {}",
                    self.temperature
                ),
            });
        }
        properties
    }

    /// The fields that shape what is sent and how the answers are read
    /// ([`super::identity`]): every field of the file but the operational ones
    /// ([`super::identity::OPERATIONAL`]), the address as its [`super::identity::endpoint`]
    /// (a simulation's loopback port is chosen at run time and left out), and the
    /// tokenizer by what is in its files rather than where they are. The key's variable
    /// name is part of it; the key never is.
    pub fn identity(&self) -> ProviderIdentity {
        let mut fields: BTreeMap<String, serde_json::Value> = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        for operational in super::identity::OPERATIONAL {
            fields.remove(*operational);
        }
        fields.remove("base_url");
        if !self.is_simulated() {
            fields.insert(
                "endpoint".into(),
                super::identity::endpoint(&self.base_url).into(),
            );
        }
        fields.insert("tokenizer".into(), self.tokenizer.identity(&self.file));
        if let Some(auth) = self.cloud.auth(self.kind.describe()) {
            fields.insert("auth".into(), auth.into());
        }
        ProviderIdentity(fields)
    }

    /// The digest of [`ProviderConfig::identity`]: what an allowlist entry's
    /// `provider_digest` pins.
    pub fn digest(&self) -> String {
        self.identity().digest()
    }

    /// The same provider asked for answers in one piece (a streaming suite's twin call).
    pub fn unstreamed(&self) -> ProviderConfig {
        ProviderConfig {
            stream: false,
            ..self.clone()
        }
    }

    /// Sends to `url` instead of the file's `base_url` (`--base-url`).
    pub fn override_base_url(&mut self, url: &str) {
        self.base_url = self.wire_kind().describe().base_url(url);
        if !self.overrides.contains(&Override::BaseUrl) {
            self.overrides.push(Override::BaseUrl);
        }
    }

    /// Asks for a stream although the file does not (`--stream`); nothing when it does.
    pub fn force_stream(&mut self) {
        if !self.stream {
            self.stream = true;
            self.overrides.push(Override::Stream);
        }
    }

    /// The command-line settings this run sends with instead of the file's, as flags
    /// (`--base-url`, `--stream`); empty when the run sends what the file says.
    pub fn overridden(&self) -> Vec<&'static str> {
        self.overrides.iter().map(|o| o.flag()).collect()
    }
}

/// A setting of the provider file that the command line replaced for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Override {
    BaseUrl,
    Stream,
}

impl Override {
    fn flag(self) -> &'static str {
        match self {
            Override::BaseUrl => "--base-url",
            Override::Stream => "--stream",
        }
    }
}

impl TokenizerConfig {
    /// What counts the prompts, as identity compares it: the kind and encoding, the
    /// context window and tolerance, and a Hugging Face tokenizer by the digest of its
    /// `tokenizer.json` (and `tokenizer_config.json`, which holds the chat template, when
    /// `path` is a folder), since a path says nothing about what is in the files.
    pub fn identity(&self, provider_file: &Path) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.remove("path");
            if self.kind == TokenizerKind::Huggingface {
                map.insert("content".into(), self.content_digest(provider_file).into());
            }
        }
        value
    }

    /// `sha256:` of the tokenizer's files, or `unreadable`.
    fn content_digest(&self, provider_file: &Path) -> String {
        let Some(path) = self.path.as_deref() else {
            return "unreadable".into();
        };
        let path = match provider_file.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        };
        let files = if path.is_dir() {
            vec![
                path.join("tokenizer.json"),
                path.join("tokenizer_config.json"),
            ]
        } else {
            vec![path]
        };
        let mut parts = crate::digest::Parts::default();
        for (i, file) in files.iter().enumerate() {
            match std::fs::read(file) {
                Ok(bytes) => {
                    parts.add(&i.to_string(), &bytes);
                }
                // The chat template's file is optional; the tokenizer itself is not.
                Err(_) if i > 0 => {}
                Err(_) => return "unreadable".into(),
            }
        }
        parts.finish()
    }
}

/// Durations written as "30s", "1m 30s", "250ms".
mod humantime_serde_compat {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{text}` is not a duration ({e}); write e.g. \"30s\" or \"250ms\""
            ))
        })
    }
}

/// Reports one problem of a provider file: its field, the text to place it near, and
/// what to do.
type Problem<'a> = dyn FnMut(&str, &str, String) + 'a;

impl ProviderFile {
    /// The cloud fields as given.
    fn cloud(&self) -> CloudSettings {
        CloudSettings {
            deployment: self.deployment.clone(),
            api_version: self.api_version.clone(),
            token_env: self.token_env.clone(),
            region: self.region.clone(),
            api: self.api,
            project: self.project.clone(),
        }
    }

    /// `base_url` as the wire extends it (its own API path stripped), or the vendor's
    /// (a cloud's in the file's region).
    fn base_url(&self, cloud: &CloudSettings, problem: &mut Problem<'_>) -> String {
        let file = self;
        let default = (file.kind.describe().default_base_url).map(|d| cloud.address(d));
        let base_url = match (&file.base_url, default, file.kind) {
            (Some(url), _, _) => file.kind.describe().base_url(url),
            (None, Some(Some(default)), _) => default,
            // A placeholder without its value (no region) is already a problem of its own.
            (None, Some(None), _) => String::new(),
            // A simulation's address is its loopback server's, known when it starts.
            (None, None, Kind::Sim) => String::new(),
            (None, None, _) => {
                problem(
                    "base_url",
                    "kind",
                    format!(
                        "kind `{}` has no default address: set base_url, e.g. \"http://127.0.0.1:8000\"",
                        file.kind.as_str()
                    ),
                );
                String::new()
            }
        };
        if !base_url.is_empty() && url::Url::parse(&base_url).is_err() {
            problem("base_url", "base_url", format!("`{base_url}` is not a URL"));
        }
        base_url
    }

    /// The key's variable, the temperature (returned), limits and the output ceiling.
    fn check_numbers(&self, problem: &mut Problem<'_>) -> f64 {
        let file = self;
        if let Some(var) = &file.api_key_env
            && (var.is_empty() || var.starts_with("sk-") || var.contains(char::is_whitespace))
        {
            problem(
                "api_key_env",
                "api_key_env",
                "must name an environment variable (such as OPENAI_API_KEY), never hold the key itself"
                    .into(),
            );
        }
        let temperature = file.temperature.unwrap_or(0.0);
        if !(0.0..=2.0).contains(&temperature) {
            problem(
                "temperature",
                "temperature",
                format!("{temperature} is outside 0..=2"),
            );
        }
        if file.limits.concurrency == Some(0) {
            problem(
                "limits.concurrency",
                "concurrency",
                "must be at least 1".into(),
            );
        }
        if file.limits.requests_per_minute == Some(0) || file.limits.tokens_per_minute == Some(0) {
            problem(
                "limits",
                "per_minute",
                "a per-minute limit must be at least 1 (leave it out for no limit)".into(),
            );
        }
        if file.max_output_tokens == 0 {
            problem(
                "max_output_tokens",
                "max_output_tokens",
                "must be at least 1".into(),
            );
        }
        temperature
    }

    /// The `[sim]` table belongs to simulations only; the wire spoken (a simulation's
    /// `[sim] wire`) decides which vendor sections and structured-output modes apply.
    fn check_wire(&self, problem: &mut Problem<'_>) {
        let file = self;
        match (file.kind, &file.sim) {
            (Kind::Sim, None) => problem(
                "sim",
                "kind",
                "a `sim` provider needs a [sim] section with `behaviour` and `expect`".into(),
            ),
            (kind, Some(_)) if kind != Kind::Sim => problem(
                "sim",
                "[sim]",
                "only `kind = \"sim\"` providers take a [sim] section".into(),
            ),
            _ => {}
        }
        if let Some(rate) = file.sim.as_ref().and_then(|s| s.rate)
            && !(0.0..=1.0).contains(&rate)
        {
            problem(
                "sim.rate",
                "rate",
                format!("{rate} is not a share in [0, 1]"),
            );
        }
        let wire = match (file.kind, file.sim.as_ref().and_then(|s| s.wire)) {
            (Kind::Sim, Some(wire)) if !wire.describe().simulable => {
                problem(
                    "sim.wire",
                    "wire",
                    format!(
                        "a simulation speaks a vendor's wire format: {}",
                        Kind::simulable_names().join(", ")
                    ),
                );
                Kind::SIMULATED_BY_DEFAULT
            }
            (Kind::Sim, Some(wire)) => wire,
            (Kind::Sim, None) => Kind::SIMULATED_BY_DEFAULT,
            (kind, _) => kind,
        };
        let described = wire.describe();
        for (section, present) in [
            ("anthropic", file.anthropic.is_some()),
            ("gemini", file.gemini.is_some()),
        ] {
            let served = described
                .cloud
                .is_some_and(|c| c.sections.contains(&section));
            if present && described.section != Some(section) && !served {
                problem(
                    section,
                    &format!("[{section}]"),
                    format!(
                        "only providers that speak the {section} wire take a [{section}] section"
                    ),
                );
            }
        }
        if let Some((_, instead)) =
            (described.lacks.iter()).find(|(mode, _)| Some(*mode) == file.structured_output)
        {
            problem(
                "structured_output",
                "structured_output",
                instead.to_string(),
            );
        }
    }

    /// A simulation's latency distribution and clock.
    fn check_sim(&self, problem: &mut Problem<'_>) {
        let file = self;
        if let Some(sim) = &file.sim {
            if sim.latency_p50.is_some() != sim.latency_p95.is_some() {
                problem(
                    "sim.latency_p95",
                    "latency_p",
                    "a latency distribution needs both `latency_p50` and `latency_p95`".into(),
                );
            }
            if let (Some(p50), Some(p95)) = (sim.latency_p50, sim.latency_p95)
                && (p50.is_zero() || p95 < p50)
            {
                problem(
                    "sim.latency_p95",
                    "latency_p95",
                    "needs 0 < latency_p50 <= latency_p95".into(),
                );
            }
            if sim
                .time_scale
                .is_some_and(|t| !(t.is_finite() && t > 0.0 && t <= 1.0))
            {
                problem(
                    "sim.time_scale",
                    "time_scale",
                    "must be in (0, 1]: 0.01 runs the simulated clock 100 times faster".into(),
                );
            }
        }
    }

    /// The tokenizer named can count for this wire.
    fn check_tokenizer(&self, problem: &mut Problem<'_>) {
        let file = self;
        let tok = &file.tokenizer;
        match tok.kind {
            TokenizerKind::Tiktoken => match tok.encoding.as_deref() {
                Some("o200k_base" | "cl100k_base") => {}
                Some(other) => problem(
                    "tokenizer.encoding",
                    "encoding",
                    format!("unknown encoding `{other}`: use o200k_base or cl100k_base"),
                ),
                None => problem(
                    "tokenizer.encoding",
                    "[tokenizer]",
                    "a tiktoken tokenizer needs `encoding` (o200k_base or cl100k_base)".into(),
                ),
            },
            TokenizerKind::Huggingface if tok.path.is_none() => problem(
                "tokenizer.path",
                "[tokenizer]",
                "a huggingface tokenizer needs `path` to a tokenizer.json or its directory".into(),
            ),
            TokenizerKind::Provider if file.kind.describe().count_endpoint.is_none() => problem(
                "tokenizer.kind",
                "[tokenizer]",
                format!(
                    "tokenizer kind `provider` counts through the provider's own count endpoint \
                         (llama.cpp /apply-template + /tokenize, Anthropic count_tokens, Gemini countTokens, \
                         OpenAI Responses input_tokens), which kind `{}` does not have: use tiktoken or huggingface",
                    file.kind.as_str()
                ),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<ProviderConfig, Diagnostics> {
        ProviderConfig::parse(Path::new("providers/p.toml"), src)
    }

    #[test]
    fn a_typo_names_the_field_and_its_line() {
        let err = parse("kind = \"openai\"\nmodle = \"gpt-4o\"\n").unwrap_err();
        let d = &err.0[0];
        assert_eq!(d.line, Some(2));
        assert_eq!(d.field.as_deref(), Some("modle"));
        assert!(d.message.contains("unknown field"), "{d}");
    }

    #[test]
    fn nested_typo_is_caught() {
        let err =
            parse("kind = \"openai\"\nmodel = \"m\"\n[limits]\nconcurency = 3\n").unwrap_err();
        assert_eq!(err.0[0].line, Some(4));
        assert_eq!(err.0[0].field.as_deref(), Some("concurency"));
    }

    #[test]
    fn all_semantic_problems_are_listed() {
        let err = parse(
            "kind = \"openai-compatible\"\nmodel = \"m\"\ntemperature = 7.0\n[limits]\nconcurrency = 0\n",
        )
        .unwrap_err();
        let fields: Vec<_> = err.0.iter().filter_map(|d| d.field.clone()).collect();
        assert_eq!(fields, ["base_url", "temperature", "limits.concurrency"]);
    }

    #[test]
    fn defaults_apply() {
        let p = parse("kind = \"openai\"\nmodel = \"gpt-4o\"\napi_key_env = \"OPENAI_API_KEY\"\n")
            .unwrap();
        assert_eq!(p.base_url, "https://api.openai.com");
        assert_eq!(p.temperature, 0.0);
        assert_eq!(p.timeout, Duration::from_secs(60));
        assert_eq!(p.structured_output, StructuredOutput::JsonSchema);
        assert_eq!(p.limits.concurrency(), 4);
        assert_eq!(p.limits.concurrency, None, "unstated, it may grow");
    }

    #[test]
    fn a_key_in_the_env_field_is_refused() {
        let err =
            parse("kind = \"openai\"\nmodel = \"m\"\napi_key_env = \"sk-abc\"\n").unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("api_key_env"));
    }

    #[test]
    fn identity_holds_the_endpoint_and_leaves_out_operational_settings() {
        let a = parse("kind = \"openai\"\nmodel = \"m\"\n").unwrap();
        let operational = parse(
            "kind = \"openai\"\nmodel = \"m\"\nbase_url = \"https://api.openai.com/\"\ntimeout = \"5s\"\n[limits]\nconcurrency = 9\nrequests_per_minute = 60\nmax_retries = 1\n[pricing]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n",
        )
        .unwrap();
        assert_eq!(a.digest(), operational.digest());
        let elsewhere =
            parse("kind = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n").unwrap();
        assert_ne!(a.digest(), elsewhere.digest());
        assert_eq!(
            elsewhere.identity().changes_since(&a.identity()),
            [
                "endpoint: https://api.openai.com:443 then, http://127.0.0.1:9 now (the scheme, the host and the port differ)"
            ]
        );
        let c = parse("kind = \"openai\"\nmodel = \"m2\"\n").unwrap();
        assert_ne!(a.digest(), c.digest());
    }

    #[test]
    fn stream_is_off_by_default_and_part_of_the_identity() {
        let off = parse("kind = \"openai\"\nmodel = \"m\"\n").unwrap();
        let on = parse("kind = \"openai\"\nmodel = \"m\"\nstream = true\n").unwrap();
        assert!(!off.stream && on.stream);
        assert_ne!(off.digest(), on.digest());
        let responses = parse("kind = \"openai-responses\"\nmodel = \"m\"\n").unwrap();
        assert_eq!(responses.base_url, "https://api.openai.com");
    }

    #[test]
    fn latency_objectives_and_simulated_distributions_are_checked() {
        let p = parse("kind = \"openai\"\nmodel = \"m\"\nmax_p95_latency = \"5s\"\n").unwrap();
        assert_eq!(p.slo.max_p95_latency, Some(Duration::from_secs(5)));
        // An objective is part of what the evidence was judged by.
        let none = parse("kind = \"openai\"\nmodel = \"m\"\n").unwrap();
        assert_ne!(p.digest(), none.digest());
        let err = parse("kind = \"openai\"\nmodel = \"m\"\nmax_p95_ttft = \"0s\"\n").unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("max_p95_ttft"));
        assert_eq!(err.0[0].line, Some(3));
        let err =
            parse("kind = \"openai\"\nmodel = \"m\"\nmax_p95_latency = \"soon\"\n").unwrap_err();
        assert!(err.0[0].message.contains("not a duration"), "{err}");
        let sim = |extra: &str| {
            parse(&format!(
                "kind = \"sim\"\nmodel = \"m\"\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\n{extra}"
            ))
        };
        let ok = sim("latency_p50 = \"2s\"\nlatency_p95 = \"20s\"\ntime_scale = 0.01\n").unwrap();
        assert_eq!(ok.time_scale(), 0.01);
        assert_eq!(none.time_scale(), 1.0);
        let fields = |extra: &str| -> Vec<String> {
            sim(extra)
                .unwrap_err()
                .0
                .iter()
                .filter_map(|d| d.field.clone())
                .collect()
        };
        assert_eq!(fields("latency_p95 = \"20s\"\n"), ["sim.latency_p95"]);
        assert_eq!(
            fields("latency_p50 = \"30s\"\nlatency_p95 = \"20s\"\n"),
            ["sim.latency_p95"]
        );
        assert_eq!(fields("time_scale = 0\n"), ["sim.time_scale"]);
    }

    #[test]
    fn command_line_overrides_are_what_was_sent_and_are_named() {
        let file = parse("kind = \"openai\"\nmodel = \"m\"\n").unwrap();
        assert!(file.overridden().is_empty());
        let mut forced = file.clone();
        forced.force_stream();
        assert_ne!(forced.digest(), file.digest());
        assert_eq!(forced.overridden(), ["--stream"]);
        assert_eq!(forced.run_properties()[0].code, "streamed_by_command_line");
        // A file that streams already is not overridden by --stream.
        let mut written = parse("kind = \"openai\"\nmodel = \"m\"\nstream = true\n").unwrap();
        written.force_stream();
        assert!(written.overridden().is_empty());
        assert_eq!(written.digest(), forced.digest());
        let mut moved = file.clone();
        moved.override_base_url("http://127.0.0.1:8080/");
        assert_eq!(moved.base_url, "http://127.0.0.1:8080");
        assert_eq!(moved.overridden(), ["--base-url"]);
        assert_ne!(moved.digest(), file.digest());
    }

    #[test]
    fn a_query_stays_with_the_address_and_follows_the_wires_path() {
        let at = |url: &str| {
            parse(&format!(
                "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"{url}\"\n"
            ))
            .unwrap()
        };
        let queried = at("http://h:8000/v1/?x=1");
        assert_eq!(queried.base_url, "http://h:8000?x=1");
        assert_eq!(
            queried.url("/v1/chat/completions"),
            "http://h:8000/v1/chat/completions?x=1"
        );
        assert_eq!(
            queried.url("/m:stream?alt=sse"),
            "http://h:8000/m:stream?alt=sse&x=1"
        );
        assert_ne!(queried.digest(), at("http://h:8000/v1").digest());
        // The SDKs' `/v1` is the wire's own path: one endpoint with or without it.
        assert_eq!(
            at("http://h:8000/v1").digest(),
            at("http://h:8000").digest()
        );
        let account = at("http://acct2:secret@h:8000/v1");
        assert_ne!(account.digest(), at("http://h:8000").digest());
        let shown = serde_json::to_string(&account.identity()).unwrap();
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn a_huggingface_tokenizer_is_identified_by_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("local.toml");
        let source = "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n[tokenizer]\nkind = \"huggingface\"\npath = \"tok\"\n";
        std::fs::create_dir(dir.path().join("tok")).unwrap();
        std::fs::write(dir.path().join("tok/tokenizer.json"), br#"{"model": "a"}"#).unwrap();
        let config = ProviderConfig::parse(&file, source).unwrap();
        let first = config.digest();
        // Same path, another chat template: another identity.
        std::fs::write(dir.path().join("tok/tokenizer_config.json"), b"{}").unwrap();
        let second = config.digest();
        assert_ne!(first, second);
        std::fs::write(dir.path().join("tok/tokenizer.json"), br#"{"model": "b"}"#).unwrap();
        assert_ne!(config.digest(), second);
        std::fs::remove_file(dir.path().join("tok/tokenizer.json")).unwrap();
        assert_eq!(
            config.identity().0["tokenizer"]["content"],
            serde_json::json!("unreadable")
        );
    }

    #[test]
    fn vendor_sections_belong_to_their_wire() {
        let err = parse("kind = \"openai\"\nmodel = \"m\"\n[gemini]\napi_version = \"v1\"\n")
            .unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("gemini"));
        let err =
            parse("kind = \"gemini\"\nmodel = \"m\"\n[anthropic]\nsend_temperature = false\n")
                .unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("anthropic"));
        let err = parse("kind = \"gemini\"\nmodel = \"m\"\n[gemini]\napi_version = \"v2\"\n")
            .unwrap_err();
        assert_eq!(err.0[0].line, Some(4), "{err}");
        let sim = parse(
            "kind = \"sim\"\nmodel = \"m\"\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nwire = \"anthropic\"\n[anthropic]\nsend_temperature = false\n",
        )
        .unwrap();
        assert_eq!(sim.wire_kind().as_str(), "anthropic");
        assert!(!sim.sends_temperature());
        assert_eq!(sim.run_properties()[0].code, "temperature_not_settable");
    }

    #[test]
    fn modes_a_vendor_lacks_are_refused() {
        let err =
            parse("kind = \"anthropic\"\nmodel = \"m\"\nstructured_output = \"json_object\"\n")
                .unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("structured_output"));
        assert_eq!(err.0[0].line, Some(3));
        let err =
            parse("kind = \"ollama\"\nmodel = \"m\"\nstructured_output = \"tool\"\n").unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("structured_output"));
        let err = parse(
            "kind = \"sim\"\nmodel = \"m\"\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nwire = \"sim\"\n",
        )
        .unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("sim.wire"));
    }

    #[test]
    fn a_cloud_names_its_missing_fields_at_the_kind_line() {
        let fields = |src: &str| -> Vec<(String, Option<usize>, Option<usize>)> {
            parse(src)
                .unwrap_err()
                .0
                .iter()
                .map(|d| (d.field.clone().unwrap_or_default(), d.line, d.column))
                .collect()
        };
        assert_eq!(
            fields("model = \"m\"\nkind = \"bedrock\"\n"),
            [("region".to_string(), Some(2), Some(1))]
        );
        assert_eq!(
            fields("model = \"m\"\nkind = \"vertex\"\n"),
            [
                ("region".to_string(), Some(2), Some(1)),
                ("project".to_string(), Some(2), Some(1))
            ]
        );
        let azure = fields(
            "kind = \"azure-openai\"\nmodel = \"m\"\nbase_url = \"https://r.openai.azure.com\"\n",
        );
        assert_eq!(
            azure.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
            ["deployment", "api_key_env"]
        );
        // A field another kind takes, at its own line.
        assert_eq!(
            fields("kind = \"openai\"\nmodel = \"m\"\nregion = \"us-east-1\"\n"),
            [("region".to_string(), Some(3), Some(1))]
        );
        // A region that would change the host, and a key where a variable goes.
        let err =
            parse("kind = \"bedrock\"\nmodel = \"m\"\nregion = \"x.evil.example/\"\n").unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("region"));
        let err = parse("kind = \"vertex\"\nmodel = \"m\"\nproject = \"p\"\nregion = \"r\"\ntoken_env = \"ya29.a0AfB\"\n")
            .unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("token_env"));
        // Azure: a key or a token, not both; Bedrock: no api_key_env at all.
        let both = "kind = \"azure-openai\"\nmodel = \"m\"\nbase_url = \"https://r.openai.azure.com\"\ndeployment = \"d\"\napi_key_env = \"K\"\ntoken_env = \"T\"\n";
        assert_eq!(
            parse(both).unwrap_err().0[0].field.as_deref(),
            Some("token_env")
        );
        let keyed =
            "kind = \"bedrock\"\nmodel = \"m\"\nregion = \"us-east-1\"\napi_key_env = \"K\"\n";
        assert_eq!(
            parse(keyed).unwrap_err().0[0].field.as_deref(),
            Some("api_key_env")
        );
    }

    #[test]
    fn a_clouds_fields_and_scheme_are_its_identity_and_its_region_its_address() {
        let bedrock = |extra: &str| {
            parse(&format!(
                "kind = \"bedrock\"\nmodel = \"anthropic.claude-3-5-haiku-20241022-v1:0\"\n{extra}"
            ))
            .unwrap()
        };
        let east = bedrock("region = \"us-east-1\"\n");
        assert_eq!(
            east.base_url,
            "https://bedrock-runtime.us-east-1.amazonaws.com"
        );
        assert_eq!(east.cloud.api, Some(CloudApi::Converse));
        assert_eq!(east.identity().0["auth"], "aws");
        assert_eq!(east.identity().0["region"], "us-east-1");
        // The default API written out is the same evidence.
        assert_eq!(
            east.digest(),
            bedrock("region = \"us-east-1\"\napi = \"converse\"\n").digest()
        );
        let west = bedrock("region = \"us-west-2\"\n");
        assert_ne!(east.digest(), west.digest());
        let changes = west.identity().changes_since(&east.identity());
        assert!(
            changes.iter().any(|c| c.starts_with("region")),
            "{changes:?}"
        );
        assert_ne!(
            east.digest(),
            bedrock("region = \"us-east-1\"\napi = \"invoke\"\n").digest()
        );
        let vertex = |extra: &str| {
            parse(&format!(
                "kind = \"vertex\"\nmodel = \"gemini-2.0-flash-001\"\nproject = \"p\"\n{extra}"
            ))
            .unwrap()
        };
        let central = vertex("region = \"us-central1\"\n");
        assert_eq!(
            central.base_url,
            "https://us-central1-aiplatform.googleapis.com"
        );
        assert_eq!(
            vertex("region = \"global\"\n").base_url,
            "https://aiplatform.googleapis.com"
        );
        assert_eq!(central.identity().0["auth"], "google-service-account");
        let token = vertex("region = \"us-central1\"\ntoken_env = \"GCP_TOKEN\"\n");
        assert_eq!(token.identity().0["auth"], "bearer");
        assert_ne!(token.digest(), central.digest());
        let azure = |extra: &str| {
            parse(&format!("kind = \"azure-openai\"\nmodel = \"gpt-4o-mini\"\nbase_url = \"https://r.openai.azure.com/openai\"\napi_key_env = \"AZ\"\n{extra}")).unwrap()
        };
        let prod = azure("deployment = \"prod\"\n");
        assert_eq!(prod.base_url, "https://r.openai.azure.com");
        assert_eq!(prod.identity().0["auth"], "api-key");
        assert_ne!(prod.digest(), azure("deployment = \"canary\"\n").digest());
        assert_ne!(
            prod.digest(),
            azure("deployment = \"prod\"\napi_version = \"2024-10-21\"\n").digest()
        );
        // A kind that is no cloud's keeps its identity as it was.
        let openai = parse("kind = \"openai\"\nmodel = \"m\"\n").unwrap();
        assert!(!openai.identity().0.contains_key("auth"));
        // Claude's section on the clouds that serve Claude.
        assert!(
            !bedrock("region = \"us-east-1\"\n[anthropic]\nsend_temperature = false\n")
                .sends_temperature()
        );
        assert!(
            vertex("region = \"r\"\n[gemini]\nschema_field = \"responseSchema\"\n")
                .gemini
                .is_some()
        );
    }

    #[test]
    fn vendor_defaults_and_unchanged_digests() {
        let g = parse("kind = \"gemini\"\nmodel = \"m\"\n").unwrap();
        assert_eq!(g.gemini_options().api_version, GeminiApiVersion::V1beta);
        assert_eq!(
            g.gemini_options().schema_field,
            GeminiSchemaField::ResponseJsonSchema
        );
        let a = parse("kind = \"anthropic\"\nmodel = \"m\"\n").unwrap();
        assert!(a.sends_temperature());
        assert!(a.run_properties().is_empty());
        // Absent sections are not part of the identity.
        let identity = a.identity();
        assert!(!identity.0.contains_key("anthropic") && !identity.0.contains_key("gemini"));
    }
}
