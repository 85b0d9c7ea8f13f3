//! An open model's own tokenizer: `tokenizer.json`, and the chat template and special
//! tokens from `tokenizer_config.json` beside it (or `chat_template.jinja`).
//!
//! A prompt is counted as the model's server counts it: the messages rendered through
//! the chat template with `add_generation_prompt`, and the text encoded with special
//! tokens parsed and none added (the template writes them).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use super::chat_template::ChatTemplate;
use super::{Count, Message, TokenizeError, Tokenizer};
use conform_config::{Conversation, Role};

/// Why a Hugging Face tokenizer could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `tokenizer.json` could not be loaded.
    #[error("cannot load the tokenizer {}: {reason}", file.display())]
    Tokenizer {
        /// The file.
        file: PathBuf,
        /// What the tokenizers library said.
        reason: String,
    },
    /// `tokenizer_config.json` is not JSON.
    #[error("{} is not JSON: {source}", file.display())]
    Config {
        /// The file.
        file: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// Neither the config nor the folder holds a chat template.
    #[error(
        "no chat template: put `chat_template` in {} or a chat_template.jinja beside {}",
        config.display(),
        file.display()
    )]
    NoTemplate {
        /// `tokenizer_config.json`.
        config: PathBuf,
        /// `tokenizer.json`, beside which a `chat_template.jinja` would be.
        file: PathBuf,
    },
    /// The chat template does not compile.
    #[error("the chat template of {} does not compile: {reason}", dir.display())]
    Template {
        /// The tokenizer's folder.
        dir: PathBuf,
        /// What minijinja said.
        reason: String,
    },
}

/// A Hugging Face tokenizer with its chat template.
pub struct HuggingFace {
    tokenizer: tokenizers::Tokenizer,
    template: ChatTemplate,
    describe: String,
    control: Vec<String>,
}

impl HuggingFace {
    /// Loads `path` (a `tokenizer.json`, or the directory holding it) once per process
    /// and shares it.
    pub fn shared(path: &Path) -> Result<Arc<HuggingFace>, LoadError> {
        static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<HuggingFace>>>> = OnceLock::new();
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let cache = LOADED.get_or_init(Default::default);
        if let Some(found) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(found);
        }
        let loaded = Arc::new(HuggingFace::load(path)?);
        if let Ok(mut c) = cache.lock() {
            c.insert(key, Arc::clone(&loaded));
        }
        Ok(loaded)
    }

    /// Loads `path` (a `tokenizer.json`, or the directory holding it).
    pub fn load(path: &Path) -> Result<HuggingFace, LoadError> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("tokenizer.json"))
        } else {
            (
                path.parent().map(Path::to_path_buf).unwrap_or_default(),
                path.to_path_buf(),
            )
        };
        let tokenizer =
            tokenizers::Tokenizer::from_file(&file).map_err(|e| LoadError::Tokenizer {
                file: file.clone(),
                reason: e.to_string(),
            })?;
        let config_file = dir.join("tokenizer_config.json");
        let config: Value = match std::fs::read_to_string(&config_file) {
            Ok(text) => serde_json::from_str(&text).map_err(|source| LoadError::Config {
                file: config_file.clone(),
                source,
            })?,
            Err(_) => Value::Null,
        };
        let source = chat_template_source(&dir, &config).ok_or_else(|| LoadError::NoTemplate {
            config: config_file.clone(),
            file: file.clone(),
        })?;
        let template = ChatTemplate::new(&source, special_tokens(&config)).map_err(|e| {
            LoadError::Template {
                dir: dir.clone(),
                reason: e.to_string(),
            }
        })?;
        let mut control: Vec<(u32, String)> = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, t)| (id, t.content))
            .collect();
        control.sort();
        Ok(HuggingFace {
            tokenizer,
            template,
            describe: format!("huggingface {}", dir.display()),
            control: control.into_iter().map(|(_, c)| c).collect(),
        })
    }

    /// The prompt as the model sees it: the chat template rendered with
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message<'_>]) -> Result<String, TokenizeError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                let mut v = json!({"role": m.role, "content": m.content});
                if let (Some(name), Some(map)) = (m.name, v.as_object_mut()) {
                    map.insert("name".into(), json!(name));
                }
                v
            })
            .collect();
        self.template
            .render(&Value::Array(messages), None, true)
            .map_err(|e| TokenizeError::Template(e.to_string()))
    }

    /// A whole conversation as the model sees it: its messages as transformers takes them
    /// (an assistant's calls with their arguments as an object, a tool result with its
    /// `tool_call_id` and tool `name`, a missing content as ""), and the declared tools
    /// passed as the template's `tools`.
    pub fn render_conversation(
        &self,
        conversation: &Conversation,
    ) -> Result<String, TokenizeError> {
        let tools = (!conversation.tools.is_empty()).then(|| transformers_tools(conversation));
        self.template
            .render(&transformers_messages(conversation), tools.as_ref(), true)
            .map_err(|e| TokenizeError::Template(e.to_string()))
    }

    /// The template itself, for rendering with tools.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Tokens of `text`, special tokens parsed, none added.
    pub fn count_text(&self, text: &str) -> Result<u64, TokenizeError> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.len() as u64)
            .map_err(|e| TokenizeError::Encode(e.to_string()))
    }
}

impl Tokenizer for HuggingFace {
    fn describe(&self) -> &str {
        &self.describe
    }

    fn count_messages(&self, messages: &[Message<'_>]) -> Result<u64, TokenizeError> {
        self.count_text(&self.render(messages)?)
    }

    fn control_tokens(&self) -> &[String] {
        &self.control
    }

    fn count_conversation(&self, conversation: &Conversation) -> Result<Count, TokenizeError> {
        Ok(Count {
            tokens: self.count_text(&self.render_conversation(conversation)?)?,
            exact: true,
        })
    }
}

/// The messages as `apply_chat_template` takes them, in the shape Hugging Face documents
/// for tool use.
pub fn transformers_messages(conversation: &Conversation) -> Value {
    let messages: Vec<Value> = conversation
        .messages
        .iter()
        .map(|m| {
            let mut v = json!({"role": m.role.as_str(), "content": m.content_str()});
            let Some(map) = v.as_object_mut() else {
                return v;
            };
            if let Some(name) = &m.name {
                map.insert("name".into(), json!(name));
            }
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.function.name,
                            "arguments": Value::Object(c.arguments_object().unwrap_or_default())}})
                    })
                    .collect();
                map.insert("tool_calls".into(), Value::Array(calls));
            }
            if m.role == Role::Tool
                && let Some(id) = &m.tool_call_id
            {
                map.insert("tool_call_id".into(), json!(id));
            }
            v
        })
        .collect();
    Value::Array(messages)
}

/// The tools as `apply_chat_template(tools=…)` takes JSON-schema tools: OpenAI Chat's
/// `{"type": "function", "function": {…}}`.
pub fn transformers_tools(conversation: &Conversation) -> Value {
    Value::Array(conversation.openai_tools())
}

/// `chat_template` from the config (a string, or a list of named templates, of which
/// `default` is used), else `chat_template.jinja`.
fn chat_template_source(dir: &Path, config: &Value) -> Option<String> {
    match config.get("chat_template") {
        Some(Value::String(s)) => return Some(s.clone()),
        Some(Value::Array(named)) => {
            let default = named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .or_else(|| named.first());
            if let Some(s) = default
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
            {
                return Some(s.to_string());
            }
        }
        _ => {}
    }
    std::fs::read_to_string(dir.join("chat_template.jinja")).ok()
}

/// The special tokens transformers passes to the template: each `*_token` of the
/// config, written as a string or as an added-token object with `content`.
fn special_tokens(config: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for name in [
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
        "sep_token",
        "cls_token",
        "mask_token",
    ] {
        let text = match config.get(name) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        if let Some(text) = text {
            out.insert(name.to_string(), text);
        }
    }
    out
}
