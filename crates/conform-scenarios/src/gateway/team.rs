//! The team's own gateway configuration (`--gateway-config FILE`), read and rewritten:
//! each of its models is pointed at a mock upstream speaking that model's wire, and every
//! other setting (retries, timeouts, cooldowns, fallback lists, routing) is kept.
//!
//! - LiteLLM YAML: `model_list` (a model's wire from its `openai/…` or `anthropic/…`
//!   prefix), fallbacks from `router_settings` or `litellm_settings` (`fallbacks`,
//!   `context_window_fallbacks`, `content_policy_fallbacks`). Only the `model_list` block
//!   is rewritten; every other byte of the file is kept.
//! - TensorZero TOML: `[models.M] routing` and `[models.M.providers.P]` (the wire from
//!   `type`); each provider's `api_base` and `api_key_location` are set, the rest of the
//!   file kept byte for byte.
//! - Portkey JSON: `strategy` and `targets` (the wire from a target's `provider`); each
//!   target's `custom_host` and `api_key` are set, every other key kept in its order.
//!
//! A model's name is the one its fallback lists use (LiteLLM's `model_name`, TensorZero's
//! provider name, a Portkey target's `@slug`, else its `override_params.model`, else its
//! `provider`): the allowlist is asked about that name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Kind;
use super::config::UPSTREAM_KEY;
use super::tensorzero::KEY_VARIABLE;

/// The wire a model's upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Openai,
    Anthropic,
}

/// One model of the team's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Model {
    /// The team's name for it: what its fallback lists say.
    pub name: String,
    pub wire: Wire,
    /// The model the gateway asks its upstream for.
    pub asks: String,
}

/// A fallback list of the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// Where it is set (`router_settings.fallbacks`, `models.M.routing`, `targets`).
    pub list: String,
    /// The model the client asks the gateway for.
    pub ask: String,
    /// The model requests go to first.
    pub primary: String,
    /// Where they go next, in order.
    pub fallbacks: Vec<String>,
    /// A list of where to go when a model fails (not only when a context is too long or
    /// a content filter refused): the scenarios' roles come from one of these.
    pub failover: bool,
}

/// The key the client presents to LiteLLM, as its `general_settings.master_key` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MasterKey {
    /// The key itself.
    Literal(String),
    /// The variable it is read from (`os.environ/VAR`).
    Variable(String),
}

/// What was parsed, kept for the rewrite.
#[derive(Debug, Clone)]
enum Parsed {
    Litellm(Vec<LitellmEntry>),
    Tensorzero,
    Portkey(Value),
}

/// The team's config, read.
#[derive(Debug, Clone)]
pub(crate) struct TeamConfig {
    pub kind: Kind,
    pub path: PathBuf,
    text: String,
    parsed: Parsed,
    /// Every model, in the file's order, each once.
    pub models: Vec<Model>,
    pub routes: Vec<Route>,
    pub master_key: Option<MasterKey>,
    /// How often the config lets the gateway retry one upstream for one client request.
    pub retries: usize,
}

/// LiteLLM's retries where its config states none: the OpenAI client it calls through
/// retries twice (three primary requests, as docs/gateways.md's table records).
const LITELLM_DEFAULT_RETRIES: usize = 2;

/// Why the team's config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    /// The file cannot be read.
    #[error("cannot read the gateway config {}: {source}", path.display())]
    Read {
        /// `--gateway-config`.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The file's problem, with its line and field where the format gives them.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// `--gateway-config`.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
}

fn invalid(path: &Path, message: impl std::fmt::Display) -> TeamError {
    TeamError::Invalid {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

impl TeamConfig {
    /// Reads `path` as `kind`'s config.
    pub(crate) fn read(kind: Kind, path: &Path) -> Result<TeamConfig, TeamError> {
        let text = std::fs::read_to_string(path).map_err(|source| TeamError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = TeamConfig {
            kind,
            path: path.to_path_buf(),
            text,
            parsed: Parsed::Tensorzero,
            models: Vec::new(),
            routes: Vec::new(),
            master_key: None,
            retries: 0,
        };
        match kind {
            Kind::Litellm => config.read_litellm()?,
            Kind::Tensorzero => config.read_tensorzero()?,
            Kind::Portkey => config.read_portkey()?,
        }
        if let Some(route) = (config.routes.iter()).find_map(|r| {
            (r.fallbacks.iter().chain([&r.primary])).find(|m| config.model(m).is_none())
        }) {
            return Err(invalid(
                path,
                format!("a fallback list names `{route}`, which is not a model of the config"),
            ));
        }
        Ok(config)
    }

    /// The model the config calls `name`.
    pub(crate) fn model(&self, name: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.name == name)
    }

    fn add(&mut self, model: Model) {
        if self.model(&model.name).is_none() {
            self.models.push(model);
        }
    }

    /// The config with each model's upstream at `base(name)` (ending in `/v1`) and
    /// conform's key, everything else kept.
    pub(crate) fn rewrite(&self, base: &dyn Fn(&str) -> String) -> String {
        match &self.parsed {
            Parsed::Litellm(entries) => self.rewrite_litellm(entries, base),
            Parsed::Tensorzero => self.rewrite_tensorzero(base),
            Parsed::Portkey(value) => {
                let mut value = value.clone();
                rewrite_targets(&mut value, base);
                serde_json::to_string_pretty(&value).unwrap_or_default()
            }
        }
    }
}

// LiteLLM.

#[derive(Debug, Deserialize)]
struct LitellmFile {
    model_list: Vec<LitellmEntry>,
    #[serde(default)]
    router_settings: Option<LitellmLists>,
    #[serde(default)]
    litellm_settings: Option<LitellmLists>,
    #[serde(default)]
    general_settings: Option<General>,
}

#[derive(Debug, Clone, Deserialize)]
struct LitellmEntry {
    model_name: String,
    litellm_params: LitellmParams,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
struct LitellmParams {
    model: String,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

type Lists = Option<Vec<BTreeMap<String, Vec<String>>>>;

#[derive(Debug, Default, Deserialize)]
struct LitellmLists {
    #[serde(default)]
    num_retries: Option<usize>,
    #[serde(default)]
    fallbacks: Lists,
    #[serde(default)]
    context_window_fallbacks: Lists,
    #[serde(default)]
    content_policy_fallbacks: Lists,
}

#[derive(Debug, Default, Deserialize)]
struct General {
    #[serde(default)]
    master_key: Option<String>,
}

/// A LiteLLM model's wire, its provider prefix, and the model it asks for.
fn litellm_wire(model: &str) -> Option<(Wire, &'static str, &str)> {
    match model.split_once('/') {
        Some(("openai", m)) => Some((Wire::Openai, "openai", m)),
        Some(("anthropic", m)) => Some((Wire::Anthropic, "anthropic", m)),
        Some(_) => None,
        // LiteLLM infers the provider from a bare name.
        None if model.starts_with("claude") => Some((Wire::Anthropic, "anthropic", model)),
        None => Some((Wire::Openai, "openai", model)),
    }
}

impl TeamConfig {
    fn read_litellm(&mut self) -> Result<(), TeamError> {
        let file: LitellmFile =
            serde_norway::from_str(&self.text).map_err(|e| invalid(&self.path, e))?;
        for (i, entry) in file.model_list.iter().enumerate() {
            let Some((wire, _, asks)) = litellm_wire(&entry.litellm_params.model) else {
                return Err(invalid(
                    &self.path,
                    format!(
                        "model_list[{i}].litellm_params.model: `{}` is on a wire conform cannot \
                         mock (openai/…, anthropic/…)",
                        entry.litellm_params.model
                    ),
                ));
            };
            self.add(Model {
                name: entry.model_name.clone(),
                wire,
                asks: asks.to_string(),
            });
        }
        let sections = [
            ("router_settings", &file.router_settings),
            ("litellm_settings", &file.litellm_settings),
        ];
        self.retries = (sections.iter())
            .find_map(|(_, lists)| lists.as_ref().and_then(|l| l.num_retries))
            .unwrap_or(LITELLM_DEFAULT_RETRIES);
        for (section, lists) in sections {
            let Some(lists) = lists else { continue };
            let named = [
                ("fallbacks", &lists.fallbacks, true),
                (
                    "context_window_fallbacks",
                    &lists.context_window_fallbacks,
                    false,
                ),
                (
                    "content_policy_fallbacks",
                    &lists.content_policy_fallbacks,
                    false,
                ),
            ];
            for (field, list, failover) in named {
                for (primary, fallbacks) in list.iter().flatten().flatten() {
                    self.routes.push(Route {
                        list: format!("{section}.{field}"),
                        ask: primary.clone(),
                        primary: primary.clone(),
                        fallbacks: fallbacks.clone(),
                        failover,
                    });
                }
            }
        }
        self.master_key = (file.general_settings.and_then(|g| g.master_key)).map(|key| {
            match key.strip_prefix("os.environ/") {
                Some(var) => MasterKey::Variable(var.to_string()),
                None => MasterKey::Literal(key),
            }
        });
        self.parsed = Parsed::Litellm(file.model_list);
        Ok(())
    }

    /// The file with its `model_list` block written anew, every other line as it was.
    fn rewrite_litellm(&self, entries: &[LitellmEntry], base: &dyn Fn(&str) -> String) -> String {
        let mut block = String::from("model_list:\n");
        for entry in entries {
            let mut params = Map::new();
            let (wire, prefix, asks) =
                litellm_wire(&entry.litellm_params.model).unwrap_or((Wire::Openai, "openai", ""));
            params.insert("model".into(), json!(format!("{prefix}/{asks}")));
            for (k, v) in &entry.litellm_params.rest {
                params.insert(k.clone(), v.clone());
            }
            let base = base(&entry.model_name);
            // LiteLLM's Anthropic client adds `/v1/messages` to its base itself.
            let base = match wire {
                Wire::Anthropic => base.trim_end_matches("/v1").to_string(),
                Wire::Openai => base,
            };
            params.insert("api_base".into(), json!(base));
            params.insert("api_key".into(), json!(UPSTREAM_KEY));
            block.push_str(&format!(
                "  - model_name: {}\n    litellm_params: {}\n",
                json!(entry.model_name),
                Value::Object(params)
            ));
            for (k, v) in &entry.rest {
                block.push_str(&format!("    {}: {v}\n", json!(k)));
            }
        }
        let (start, end) = top_level_block(&self.text, "model_list").unwrap_or((0, 0));
        format!("{}{block}{}", &self.text[..start], &self.text[end..])
    }
}

/// The bytes of the top-level YAML key `key`'s block: from its line to the next
/// top-level key, the comments and blank lines just before that key left out.
fn top_level_block(text: &str, key: &str) -> Option<(usize, usize)> {
    let mut offset = 0;
    let mut start = None;
    let mut end = text.len();
    let mut last_content = text.len();
    for line in text.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        let first = line.chars().next().unwrap_or('\n');
        match start {
            None => {
                let bare = line.strip_prefix(key).or_else(|| {
                    (line.strip_prefix('"').and_then(|l| l.strip_prefix(key)))
                        .and_then(|l| l.strip_prefix('"'))
                });
                if bare.is_some_and(|rest| rest.trim_start().starts_with(':')) {
                    start = Some(at);
                    last_content = offset;
                }
            }
            Some(_) if first == '#' || line.trim().is_empty() => {}
            Some(_) if matches!(first, ' ' | '\t' | '-') => last_content = offset,
            Some(_) => {
                end = last_content;
                break;
            }
        }
        if start.is_some() && offset == text.len() {
            end = text.len();
        }
    }
    start.map(|s| (s, end.max(s)))
}

// TensorZero.

#[derive(Debug, Deserialize)]
struct TzFile {
    #[serde(default)]
    models: BTreeMap<String, TzModel>,
}

#[derive(Debug, Deserialize)]
struct TzModel {
    routing: Vec<String>,
    providers: BTreeMap<String, TzProvider>,
}

#[derive(Debug, Deserialize)]
struct TzProvider {
    #[serde(rename = "type")]
    wire: TzWire,
    #[serde(default)]
    model_name: Option<String>,
}

/// The provider types conform has a mock for.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TzWire {
    Openai,
    Anthropic,
}

impl TeamConfig {
    fn read_tensorzero(&mut self) -> Result<(), TeamError> {
        // The typed read gives the errors their line and field; the document, the order.
        let file: TzFile = toml::from_str(&self.text).map_err(|e| invalid(&self.path, e))?;
        let doc: toml_edit::DocumentMut = self.text.parse().map_err(|e| invalid(&self.path, e))?;
        let order: Vec<String> = (doc.get("models").and_then(|m| m.as_table_like()))
            .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
            .unwrap_or_default();
        for name in order {
            let Some(model) = file.models.get(&name) else {
                continue;
            };
            for provider in &model.routing {
                if let Some(p) = model.providers.get(provider) {
                    self.add(Model {
                        name: provider.clone(),
                        wire: match p.wire {
                            TzWire::Openai => Wire::Openai,
                            TzWire::Anthropic => Wire::Anthropic,
                        },
                        asks: p.model_name.clone().unwrap_or_else(|| provider.clone()),
                    });
                }
            }
            if let [primary, fallbacks @ ..] = model.routing.as_slice() {
                self.routes.push(Route {
                    list: format!("models.{name}.routing"),
                    ask: name.clone(),
                    primary: primary.clone(),
                    fallbacks: fallbacks.to_vec(),
                    failover: true,
                });
            }
        }
        Ok(())
    }

    fn rewrite_tensorzero(&self, base: &dyn Fn(&str) -> String) -> String {
        let Ok(mut doc) = self.text.parse::<toml_edit::DocumentMut>() else {
            return self.text.clone();
        };
        let models = doc.get_mut("models").and_then(|m| m.as_table_like_mut());
        for (_, model) in models.into_iter().flat_map(|m| m.iter_mut()) {
            let providers = (model.as_table_like_mut())
                .and_then(|m| m.get_mut("providers"))
                .and_then(|p| p.as_table_like_mut());
            for (name, provider) in providers.into_iter().flat_map(|p| p.iter_mut()) {
                if let Some(provider) = provider.as_table_like_mut() {
                    provider.insert("api_base", toml_edit::value(base(name.get())));
                    let key = format!("env::{KEY_VARIABLE}");
                    provider.insert("api_key_location", toml_edit::value(key));
                }
            }
        }
        doc.to_string()
    }
}

// Portkey.

/// A Portkey target's name, wire and model, or what is wrong with it.
fn portkey_target(target: &Value, at: &str) -> Result<Model, String> {
    let provider = (target.get("provider").and_then(Value::as_str))
        .ok_or_else(|| format!("{at}.provider: missing (a target names its provider)"))?;
    let model = target
        .pointer("/override_params/model")
        .and_then(Value::as_str);
    let (name, wire) = match provider.strip_prefix('@') {
        Some(slug) if slug.starts_with("anthropic") => (slug, Wire::Anthropic),
        Some(slug) => (slug, Wire::Openai),
        None => {
            let wire = match provider {
                "openai" => Wire::Openai,
                "anthropic" => Wire::Anthropic,
                other => {
                    return Err(format!(
                        "{at}.provider: `{other}` is a wire conform cannot mock (openai, \
                         anthropic, or an @integration)"
                    ));
                }
            };
            (model.unwrap_or(provider), wire)
        }
    };
    Ok(Model {
        name: name.to_string(),
        wire,
        asks: model.unwrap_or(name).to_string(),
    })
}

impl TeamConfig {
    fn read_portkey(&mut self) -> Result<(), TeamError> {
        let value: Value = serde_json::from_str(&self.text).map_err(|e| invalid(&self.path, e))?;
        // Portkey retries only when the config asks: `retry.attempts`.
        self.retries =
            (value.pointer("/retry/attempts").and_then(Value::as_u64)).map_or(0, |n| n as usize);
        self.portkey_group(&value, "")
            .map_err(|message| invalid(&self.path, message))?;
        self.parsed = Parsed::Portkey(value);
        Ok(())
    }

    /// Reads the targets of the group at `at` (nested groups too); a group in fallback
    /// mode is a route over its targets.
    fn portkey_group(&mut self, group: &Value, at: &str) -> Result<(), String> {
        let Some(targets) = group.get("targets").and_then(Value::as_array) else {
            return Err(format!("{at}targets: missing (a config lists its targets)"));
        };
        let mut leaves = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            let here = format!("{at}targets[{i}]");
            if target.get("targets").is_some() {
                self.portkey_group(target, &format!("{here}."))?;
                continue;
            }
            let model = portkey_target(target, &here)?;
            leaves.push(model.clone());
            self.add(model);
        }
        let mode = group.pointer("/strategy/mode").and_then(Value::as_str);
        if let (Some("fallback"), [primary, fallbacks @ ..]) = (mode, leaves.as_slice()) {
            self.routes.push(Route {
                list: format!("{at}targets"),
                ask: primary.asks.clone(),
                primary: primary.name.clone(),
                fallbacks: fallbacks.iter().map(|m| m.name.clone()).collect(),
                failover: true,
            });
        }
        Ok(())
    }
}

/// Points every target at its mock upstream, in place.
fn rewrite_targets(group: &mut Value, base: &dyn Fn(&str) -> String) {
    let Some(targets) = group.get_mut("targets").and_then(Value::as_array_mut) else {
        return;
    };
    for target in targets {
        if target.get("targets").is_some() {
            rewrite_targets(target, base);
            continue;
        }
        let Ok(model) = portkey_target(target, "") else {
            continue;
        };
        let wire = match model.wire {
            Wire::Openai => "openai",
            Wire::Anthropic => "anthropic",
        };
        if let Some(target) = target.as_object_mut() {
            // The open-source gateway resolves no integration or virtual key: the wire
            // and the mock's address take their place.
            target.remove("virtual_key");
            target.insert("provider".into(), json!(wire));
            target.insert("custom_host".into(), json!(base(&model.name)));
            target.insert("api_key".into(), json!(UPSTREAM_KEY));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn base(name: &str) -> String {
        format!("http://127.0.0.1:4000/{name}/v1")
    }

    const LITELLM: &str = "\
# The team's proxy.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o-2024-08-06
      api_key: os.environ/OPENAI_API_KEY
      timeout: 30
    model_info: {id: one}
  # Anthropic as the second choice.
  - model_name: claude
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_key: os.environ/ANTHROPIC_API_KEY
      api_base: https://api.anthropic.com

# Kept as written.
router_settings:
  num_retries: 2   # the team's retries
  cooldown_time: 30
  fallbacks: [{\"gpt-4o\": [\"claude\"]}]
litellm_settings:
  context_window_fallbacks: [{\"gpt-4o\": [\"claude\"]}]
general_settings:
  master_key: sk-team-1234
";

    #[test]
    fn litellm_points_each_model_at_its_mock_and_keeps_every_other_byte() {
        let (_dir, path) = write(LITELLM, "config.yaml");
        let config = TeamConfig::read(Kind::Litellm, &path).unwrap();
        assert_eq!(
            config.models,
            [
                Model {
                    name: "gpt-4o".into(),
                    wire: Wire::Openai,
                    asks: "gpt-4o-2024-08-06".into()
                },
                Model {
                    name: "claude".into(),
                    wire: Wire::Anthropic,
                    asks: "claude-sonnet-4-5".into()
                },
            ]
        );
        // The scenarios hold its attempts per request to its own retries.
        assert_eq!(config.retries, 2);
        let unstated = LITELLM.replace("num_retries: 2", "timeout: 30");
        let (_dir2, path2) = write(&unstated, "unstated.yaml");
        let unstated = TeamConfig::read(Kind::Litellm, &path2).unwrap();
        assert_eq!(unstated.retries, LITELLM_DEFAULT_RETRIES);
        let lists: Vec<(&str, &str, bool)> = (config.routes.iter())
            .map(|r| (r.list.as_str(), r.primary.as_str(), r.failover))
            .collect();
        assert_eq!(
            lists,
            [
                ("router_settings.fallbacks", "gpt-4o", true),
                ("litellm_settings.context_window_fallbacks", "gpt-4o", false)
            ]
        );
        assert_eq!(config.routes[0].fallbacks, ["claude"]);
        assert_eq!(
            config.master_key,
            Some(MasterKey::Literal("sk-team-1234".into()))
        );

        let text = config.rewrite(&base);
        // Everything but the model list, byte for byte.
        let (before, after) = LITELLM.split_once("model_list:").unwrap();
        let after = &after[after.find("# Kept as written.").unwrap()..];
        assert!(text.starts_with(before), "{text}");
        assert!(text.ends_with(after), "{text}");
        let rewritten: Value = serde_norway::from_str(&text).unwrap();
        let params = |i: usize| rewritten["model_list"][i]["litellm_params"].clone();
        assert_eq!(params(0)["api_base"], "http://127.0.0.1:4000/gpt-4o/v1");
        assert_eq!(params(0)["api_key"], UPSTREAM_KEY);
        assert_eq!(params(0)["timeout"], 30);
        assert_eq!(params(0)["model"], "openai/gpt-4o-2024-08-06");
        assert_eq!(rewritten["model_list"][0]["model_info"]["id"], "one");
        // Anthropic's base without /v1, which LiteLLM adds.
        assert_eq!(params(1)["api_base"], "http://127.0.0.1:4000/claude");
        assert_eq!(rewritten["router_settings"]["num_retries"], 2);
        assert!(!text.contains("api.anthropic.com"), "{text}");
        assert!(!text.contains("os.environ/OPENAI_API_KEY"), "{text}");
    }

    #[test]
    fn a_bad_file_is_named_with_its_line_and_field() {
        let bad = LITELLM.replace("      model: anthropic/claude-sonnet-4-5\n", "");
        let (_dir, path) = write(&bad, "config.yaml");
        let e = TeamConfig::read(Kind::Litellm, &path)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        assert!(e.contains("model_list[1].litellm_params"), "{e}");
        assert!(e.contains("missing field `model`"), "{e}");
        assert!(e.contains("line 12 column 7"), "{e}");

        let unknown = LITELLM.replace("[\"claude\"]}]\nlitellm", "[\"gemini\"]}]\nlitellm");
        let (_dir, path) = write(&unknown, "config.yaml");
        let e = TeamConfig::read(Kind::Litellm, &path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`gemini`, which is not a model"), "{e}");

        let azure = LITELLM.replace("openai/gpt-4o-2024-08-06", "azure/gpt-4o");
        let (_dir, path) = write(&azure, "config.yaml");
        let e = TeamConfig::read(Kind::Litellm, &path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("model_list[0].litellm_params.model: `azure/gpt-4o`"),
            "{e}"
        );
    }

    const TENSORZERO: &str = "\
# The team's gateway.
[gateway]
debug = true

[models.\"chat\"]
routing = [\"openai-main\", \"claude\"]  # in order

[models.\"chat\".providers.\"openai-main\"]
type = \"openai\"
model_name = \"gpt-4o\"
api_key_location = \"env::OPENAI_API_KEY\"
timeouts = { non_streaming.total_ms = 15000, streaming.ttft_ms = 3000 }

[models.\"chat\".providers.claude]
type = \"anthropic\"
model_name = \"claude-sonnet-4-5\"

[functions.extract]
type = \"chat\"
";

    #[test]
    fn tensorzero_sets_each_providers_base_and_keeps_the_rest_byte_for_byte() {
        let (_dir, path) = write(TENSORZERO, "tensorzero.toml");
        let config = TeamConfig::read(Kind::Tensorzero, &path).unwrap();
        assert_eq!(config.routes.len(), 1);
        assert_eq!(config.retries, 0, "a model's routing retries nothing");
        let route = &config.routes[0];
        assert_eq!(
            (route.ask.as_str(), route.primary.as_str()),
            ("chat", "openai-main")
        );
        assert_eq!(route.fallbacks, ["claude"]);
        assert_eq!(config.model("claude").unwrap().wire, Wire::Anthropic);
        assert_eq!(config.model("openai-main").unwrap().asks, "gpt-4o");

        let text = config.rewrite(&base);
        let kept: Vec<&str> = TENSORZERO
            .lines()
            .filter(|l| !l.starts_with("api_key_location"))
            .collect();
        for line in kept {
            assert!(text.lines().any(|l| l == line), "{line:?} lost:\n{text}");
        }
        let doc: toml::Table = toml::from_str(&text).unwrap();
        let provider = |p: &str| doc["models"]["chat"]["providers"][p].clone();
        assert_eq!(
            provider("openai-main")["api_base"].as_str(),
            Some("http://127.0.0.1:4000/openai-main/v1")
        );
        assert_eq!(
            provider("claude")["api_key_location"].as_str(),
            Some("env::CONFORM_UPSTREAM_KEY")
        );
        assert!(!text.contains("OPENAI_API_KEY"), "{text}");
    }

    #[test]
    fn a_tensorzero_provider_conform_cannot_mock_is_named_with_its_line() {
        let bad = TENSORZERO.replace("type = \"anthropic\"", "type = \"aws_bedrock\"");
        let (_dir, path) = write(&bad, "tensorzero.toml");
        let e = TeamConfig::read(Kind::Tensorzero, &path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 15"), "{e}");
        assert!(e.contains("aws_bedrock"), "{e}");
    }

    const PORTKEY: &str = r#"{
  "strategy": {"mode": "fallback", "on_status_codes": [429, 500, 503]},
  "retry": {"attempts": 3},
  "request_timeout": 10000,
  "targets": [
    {"provider": "@openai-prod", "override_params": {"model": "gpt-4o"}},
    {"provider": "anthropic", "api_key": "sk-ant", "override_params": {"model": "claude-sonnet-4-5"}}
  ]
}"#;

    #[test]
    fn portkey_targets_reach_the_mocks_and_the_strategy_is_kept() {
        let (_dir, path) = write(PORTKEY, "portkey.json");
        let config = TeamConfig::read(Kind::Portkey, &path).unwrap();
        let route = &config.routes[0];
        assert_eq!(
            (route.ask.as_str(), route.primary.as_str()),
            ("gpt-4o", "openai-prod")
        );
        assert_eq!(route.fallbacks, ["claude-sonnet-4-5"]);
        assert_eq!(config.retries, 3, "retry.attempts");
        let text: Value = serde_json::from_str(&config.rewrite(&base)).unwrap();
        let original: Value = serde_json::from_str(PORTKEY).unwrap();
        for key in ["strategy", "retry", "request_timeout"] {
            assert_eq!(text[key], original[key], "{key}");
        }
        let keys: Vec<&String> = text.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["strategy", "retry", "request_timeout", "targets"]);
        let targets = text["targets"].as_array().unwrap();
        assert_eq!(targets[0]["provider"], "openai");
        assert_eq!(
            targets[0]["custom_host"],
            "http://127.0.0.1:4000/openai-prod/v1"
        );
        assert_eq!(targets[1]["provider"], "anthropic");
        assert_eq!(targets[1]["api_key"], UPSTREAM_KEY);
        assert_eq!(targets[1]["override_params"]["model"], "claude-sonnet-4-5");

        let bad = PORTKEY.replace("\"anthropic\"", "\"google\"");
        let (_dir, path) = write(&bad, "portkey.json");
        let e = TeamConfig::read(Kind::Portkey, &path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("targets[1].provider: `google`"), "{e}");
        let (_dir, path) = write("{\"targets\": [}", "portkey.json");
        let e = TeamConfig::read(Kind::Portkey, &path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1 column 14"), "{e}");
    }
}
