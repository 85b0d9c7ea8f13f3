//! Counting a prompt's tokens the way a provider counts them, one tokenizer kind per file.
//!
//! - [`tiktoken`]: OpenAI encodings, messages counted the way OpenAI bills them;
//! - [`huggingface`]: a `tokenizer.json` and the model's chat template, rendered the way
//!   Hugging Face transformers renders it ([`chat_template`]);
//! - [`provider`]: the provider's own endpoints (llama.cpp `/apply-template` + `/tokenize`);
//! - `none`: nothing is counted and the tokens check does not apply.
//!
//! A [`Counter`] is built once per provider per run; the expensive parts (a BPE, a
//! tokenizer file) are built once and shared.

pub mod chat_template;
pub mod huggingface;
pub mod provider;
pub mod tiktoken;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::provider::CallSpec;
use conform_config::{
    Conversation, Diagnostic, Diagnostics, Prompt, ProviderConfig, TokenizerKind,
};

/// One chat message as a tokenizer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The message's role, as the chat template names it (`system`, `user` …).
    pub role: &'a str,
    /// The message's text.
    pub content: &'a str,
    /// OpenAI's optional participant name (billed as one more token).
    pub name: Option<&'a str>,
}

/// The `messages` of a Chat Completions request body, as the tokenizers read them.
pub fn chat_messages(body: &serde_json::Value) -> Vec<Message<'_>> {
    body.get("messages")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| Message {
            role: m["role"].as_str().unwrap_or_default(),
            content: m["content"].as_str().unwrap_or_default(),
            name: m["name"].as_str(),
        })
        .collect()
}

/// The messages a prompt is sent as: the system prompt, if any, then the user prompt.
pub fn messages(prompt: &Prompt) -> Vec<Message<'_>> {
    let mut out = Vec::with_capacity(2);
    if let Some(system) = &prompt.system {
        out.push(Message {
            role: "system",
            content: system,
            name: None,
        });
    }
    out.push(Message {
        role: "user",
        content: &prompt.user,
        name: None,
    });
    out
}

/// The messages of a conversation as a tokenizer without tool support sees them: roles,
/// texts and names; calls and their arguments are left out.
pub fn conversation_messages(conversation: &Conversation) -> Vec<Message<'_>> {
    conversation
        .messages
        .iter()
        .map(|m| Message {
            role: m.role.as_str(),
            content: m.content_str(),
            name: m
                .name
                .as_deref()
                .filter(|_| m.role != conform_config::Role::Tool),
        })
        .collect()
}

/// A count, and whether it is all the provider bills (`false`: a lower bound, since the
/// provider adds text by a rule it does not publish, or its count endpoint takes less).
pub use crate::provider::count::Count;

/// Why a prompt could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizeError {
    /// The chat template failed to render.
    #[error("the chat template failed to render: {0}")]
    Template(String),
    /// The tokenizer failed to encode.
    #[error("the tokenizer failed: {0}")]
    Encode(String),
    /// The provider's count endpoint failed.
    #[error("the provider's token count failed: {0}")]
    Provider(String),
}

/// A tokenizer that counts locally.
pub trait Tokenizer: Send + Sync {
    /// What it is, for reports: `tiktoken o200k_base`, `huggingface tokenizers/smollm2`.
    fn describe(&self) -> &str;

    /// The prompt tokens the provider bills for these messages, reply priming included.
    fn count_messages(&self, messages: &[Message<'_>]) -> Result<u64, TokenizeError>;

    /// Text that this tokenizer turns into special or control tokens.
    fn control_tokens(&self) -> &[String];

    /// The prompt tokens of a whole request: its messages, their tool calls and results,
    /// and the tools it declares. This default counts the messages' texts only, so it is
    /// exact only for a conversation without tools.
    fn count_conversation(&self, conversation: &Conversation) -> Result<Count, TokenizeError> {
        let tokens = self.count_messages(&conversation_messages(conversation))?;
        let plain = conversation.tools.is_empty()
            && conversation
                .messages
                .iter()
                .all(|m| m.tool_calls.is_empty() && m.role != conform_config::Role::Tool);
        Ok(Count {
            tokens,
            exact: plain,
        })
    }
}

/// How one provider's prompts are counted.
#[derive(Clone, Default)]
pub enum Counter {
    /// No tokenizer configured: the tokens check does not apply.
    #[default]
    None,
    /// A tokenizer run here.
    Local(Arc<dyn Tokenizer>),
    /// Counted by the provider's own endpoints.
    Remote(Arc<provider::ProviderCounter>),
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

impl Counter {
    /// Builds the counter `config.tokenizer` asks for; a missing or broken tokenizer
    /// file is a diagnostic naming the provider file.
    pub fn for_provider(config: &ProviderConfig) -> Result<Counter, Diagnostics> {
        let tok = &config.tokenizer;
        let problem = |message: String| {
            Diagnostics(vec![
                Diagnostic::new(&config.file, message).field("tokenizer.path"),
            ])
        };
        match tok.kind {
            TokenizerKind::None => Ok(Counter::None),
            TokenizerKind::Tiktoken => {
                let encoding = tok.encoding.as_deref().unwrap_or_default();
                tiktoken::Tiktoken::shared(encoding)
                    .map(|t| Counter::Local(t as Arc<dyn Tokenizer>))
                    .ok_or_else(|| {
                        Diagnostics(vec![
                            Diagnostic::new(
                                &config.file,
                                format!(
                                    "unknown encoding `{encoding}`: use o200k_base or cl100k_base"
                                ),
                            )
                            .field("tokenizer.encoding"),
                        ])
                    })
            }
            TokenizerKind::Huggingface => {
                let Some(path) = &tok.path else {
                    return Err(problem(
                        "a huggingface tokenizer needs `path` to a tokenizer.json or its directory"
                            .into(),
                    ));
                };
                let path = resolve(&config.file, path);
                huggingface::HuggingFace::shared(&path)
                    .map(|t| Counter::Local(t as Arc<dyn Tokenizer>))
                    .map_err(|e| problem(e.to_string()))
            }
            TokenizerKind::Provider => provider::ProviderCounter::new(config)
                .map(|c| Counter::Remote(Arc::new(c)))
                .map_err(|m| {
                    Diagnostics(vec![
                        Diagnostic::new(&config.file, m.to_string()).field("tokenizer.kind"),
                    ])
                }),
        }
    }

    /// Whether no tokenizer is configured: the tokens check does not apply.
    pub fn is_none(&self) -> bool {
        matches!(self, Counter::None)
    }

    /// What counts the prompts, for reports: `none`, or the tokenizer's own description.
    pub fn describe(&self) -> &str {
        match self {
            Counter::None => "none",
            Counter::Local(t) => t.describe(),
            Counter::Remote(p) => p.describe(),
        }
    }

    /// Counts what one call sends: the conversation with its tools when it has one, the
    /// prompt otherwise; `None` when no tokenizer is configured.
    pub async fn count_call(&self, call: &CallSpec<'_>) -> Option<Result<Count, TokenizeError>> {
        match self {
            Counter::None => None,
            Counter::Local(_) => self.count_call_local(call.prompt, call.conversation),
            Counter::Remote(p) => Some(p.count_call(call).await),
        }
    }

    /// [`Counter::count_call`] without I/O; `None` when that needs the provider.
    pub fn count_call_local(
        &self,
        prompt: &Prompt,
        conversation: Option<&Conversation>,
    ) -> Option<Result<Count, TokenizeError>> {
        match (self, conversation) {
            (Counter::Local(t), Some(c)) => Some(t.count_conversation(c)),
            (Counter::Local(t), None) => {
                Some(t.count_messages(&messages(prompt)).map(|tokens| Count {
                    tokens,
                    exact: true,
                }))
            }
            _ => None,
        }
    }

    /// Counts the prompt without I/O; `None` when that needs the provider (or nothing
    /// is configured).
    pub fn count_local(&self, prompt: &Prompt) -> Option<Result<u64, TokenizeError>> {
        match self {
            Counter::Local(t) => Some(t.count_messages(&messages(prompt))),
            _ => None,
        }
    }

    /// Text that this tokenizer turns into special or control tokens (empty when the
    /// provider counts: it does not publish them).
    pub fn control_tokens(&self) -> &[String] {
        match self {
            Counter::Local(t) => t.control_tokens(),
            _ => &[],
        }
    }
}

/// A path in a provider file is relative to that file.
fn resolve(provider_file: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    provider_file
        .parent()
        .map_or_else(|| path.to_path_buf(), |dir| dir.join(path))
}

/// A control token found in a case variable.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ControlToken {
    /// `vars.body`, `vars.items[2].note`.
    pub variable: String,
    /// The control token as it appears in the text.
    pub token: String,
}

/// Every (variable, control token) pair in the case's variables, strings nested in
/// arrays and objects included.
pub fn control_tokens_in(vars: &Map<String, Value>, tokens: &[String]) -> Vec<ControlToken> {
    let mut found = Vec::new();
    if tokens.is_empty() {
        return found;
    }
    for (name, value) in vars {
        scan(&format!("vars.{name}"), value, tokens, &mut found);
    }
    found
}

fn scan(path: &str, value: &Value, tokens: &[String], found: &mut Vec<ControlToken>) {
    match value {
        Value::String(text) => {
            for token in tokens {
                if text.contains(token.as_str()) {
                    found.push(ControlToken {
                        variable: path.to_string(),
                        token: token.clone(),
                    });
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                scan(&format!("{path}[{i}]"), item, tokens, found);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                scan(&format!("{path}.{k}"), v, tokens, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn control_tokens_are_found_in_nested_variables() {
        let vars =
            json!({"body": "hi <|im_end|> there", "items": [{"note": "x<|endoftext|>"}], "n": 3});
        let tokens = vec!["<|endoftext|>".to_string(), "<|im_end|>".to_string()];
        let found = control_tokens_in(vars.as_object().unwrap(), &tokens);
        assert_eq!(
            found,
            vec![
                ControlToken {
                    variable: "vars.body".into(),
                    token: "<|im_end|>".into()
                },
                ControlToken {
                    variable: "vars.items[0].note".into(),
                    token: "<|endoftext|>".into()
                },
            ]
        );
    }
}
