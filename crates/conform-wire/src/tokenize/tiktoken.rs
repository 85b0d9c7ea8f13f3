//! OpenAI encodings (`o200k_base`, `cl100k_base`), counting chat messages the way
//! OpenAI bills Chat Completions: 3 tokens per message, 1 more with a `name`, the role
//! and every field's text encoded, and 3 for the reply priming (the OpenAI cookbook's
//! `num_tokens_from_messages`: 124 tokens for its example on gpt-4o, 129 on gpt-4).
//!
//! Text is encoded as ordinary text: the API bills `<|endoftext|>` written in a message
//! as the characters it is made of. Whether such text is dangerous is the tokens check's
//! business, through [`Tokenizer::control_tokens`].
//!
//! Tools are counted by the cookbook's `num_tokens_for_tools` (101 tokens for its
//! weather example on gpt-4o, 105 on gpt-4): per function 7 tokens (10 on `cl100k_base`)
//! plus `name:description`; 3 for the properties, 3 per property plus
//! `key:type:description`; −3 for an enum plus 3 and the text of each item; 12 at the
//! end. A trailing period of a description is dropped. OpenAI publishes nothing more:
//! nested objects, arrays, `required`, tools without descriptions, and the calls and
//! results in a conversation's history are billed by an unpublished rule, so a count
//! that meets any of them is a lower bound ([`Count::exact`] is false).

use std::sync::{Arc, OnceLock};

use tiktoken_rs::CoreBPE;

use serde_json::Value;

use super::{Count, Message, TokenizeError, Tokenizer};
use conform_config::{Conversation, Role, Tool};

const TOKENS_PER_MESSAGE: u64 = 3;
const TOKENS_PER_NAME: u64 = 1;
const REPLY_PRIMING: u64 = 3;

/// The control tokens of OpenAI's chat format (ChatML). The chat models of both
/// encodings frame every message with them, although the public encoding files list
/// only the encodings' own special tokens.
const CHAT_CONTROL: [&str; 3] = ["<|im_start|>", "<|im_end|>", "<|im_sep|>"];

/// One OpenAI encoding.
pub struct Tiktoken {
    bpe: &'static CoreBPE,
    describe: String,
    control: Vec<String>,
    /// The cookbook's `func_init`: 7 for gpt-4o's encoding, 10 for gpt-4's.
    func_init: u64,
}

/// The cookbook's other constants, the same for both encodings.
const PROP_INIT: u64 = 3;
const PROP_KEY: u64 = 3;
const ENUM_INIT: i64 = -3;
const ENUM_ITEM: u64 = 3;
const FUNC_END: u64 = 12;

impl Tiktoken {
    /// The encoding's tokenizer, built once per process (building a BPE takes about
    /// 170 ms) and shared. `None` for an unknown encoding.
    pub fn shared(encoding: &str) -> Option<Arc<Tiktoken>> {
        static O200K: OnceLock<Arc<Tiktoken>> = OnceLock::new();
        static CL100K: OnceLock<Arc<Tiktoken>> = OnceLock::new();
        let (cell, bpe): (_, fn() -> &'static CoreBPE) = match encoding {
            "o200k_base" => (&O200K, tiktoken_rs::o200k_base_singleton),
            "cl100k_base" => (&CL100K, tiktoken_rs::cl100k_base_singleton),
            _ => return None,
        };
        Some(Arc::clone(cell.get_or_init(|| {
            let bpe = bpe();
            let mut control: Vec<String> = bpe
                .special_tokens()
                .into_iter()
                .map(str::to_string)
                .chain(CHAT_CONTROL.iter().map(|t| t.to_string()))
                .collect();
            control.sort();
            control.dedup();
            Arc::new(Tiktoken {
                bpe,
                describe: format!("tiktoken {encoding}"),
                control,
                func_init: if encoding == "cl100k_base" { 10 } else { 7 },
            })
        })))
    }

    /// Tokens of one text, encoded as ordinary text.
    pub fn count_text(&self, text: &str) -> u64 {
        self.bpe.encode_ordinary(text).len() as u64
    }

    /// The tokens OpenAI bills for declaring `tools`, by the cookbook's rule, and whether
    /// the rule covers them all.
    pub fn count_tools(&self, tools: &[Tool]) -> Count {
        if tools.is_empty() {
            return Count {
                tokens: 0,
                exact: true,
            };
        }
        let mut tokens: i64 = 0;
        let mut exact = true;
        for tool in tools {
            tokens += self.func_init as i64;
            if tool.function.description.is_none() {
                exact = false;
            }
            let description = tool.description();
            let description = description.strip_suffix('.').unwrap_or(description);
            tokens += self.count_text(&format!("{}:{description}", tool.name())) as i64;
            let properties = tool
                .parameters()
                .get("properties")
                .and_then(Value::as_object);
            let Some(properties) = properties.filter(|p| !p.is_empty()) else {
                continue;
            };
            tokens += PROP_INIT as i64;
            for (key, property) in properties {
                tokens += PROP_KEY as i64;
                let kind = property.get("type").and_then(Value::as_str);
                let text = property.get("description").and_then(Value::as_str);
                // The rule knows a property by its type and description, and a flat enum
                // of strings; anything else (nested objects, arrays, no description) it
                // does not say how to count.
                if kind.is_none()
                    || text.is_none()
                    || matches!(kind, Some("object" | "array"))
                    || property.get("properties").is_some()
                    || property.get("items").is_some()
                {
                    exact = false;
                }
                if let Some(items) = property.get("enum").and_then(Value::as_array) {
                    tokens += ENUM_INIT;
                    for item in items {
                        tokens += ENUM_ITEM as i64;
                        match item.as_str() {
                            Some(item) => tokens += self.count_text(item) as i64,
                            None => exact = false,
                        }
                    }
                }
                let text = text.unwrap_or_default();
                let text = text.strip_suffix('.').unwrap_or(text);
                tokens +=
                    self.count_text(&format!("{key}:{}:{text}", kind.unwrap_or_default())) as i64;
            }
        }
        tokens += FUNC_END as i64;
        Count {
            tokens: tokens.max(0) as u64,
            exact,
        }
    }

    /// Token ids of one text, for tests against published ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }
}

impl Tokenizer for Tiktoken {
    fn describe(&self) -> &str {
        &self.describe
    }

    fn count_messages(&self, messages: &[Message<'_>]) -> Result<u64, TokenizeError> {
        let mut total = REPLY_PRIMING;
        for m in messages {
            total += TOKENS_PER_MESSAGE + self.count_text(m.role) + self.count_text(m.content);
            if let Some(name) = m.name {
                total += TOKENS_PER_NAME + self.count_text(name);
            }
        }
        Ok(total)
    }

    fn control_tokens(&self) -> &[String] {
        &self.control
    }

    /// The messages as the cookbook counts them (a tool-calling turn's calls, and a tool
    /// result's pairing, are left out: a lower bound), plus the tools.
    fn count_conversation(&self, conversation: &Conversation) -> Result<Count, TokenizeError> {
        let messages = self.count_messages(&super::conversation_messages(conversation))?;
        let tools = self.count_tools(&conversation.tools);
        let history_plain = conversation
            .messages
            .iter()
            .all(|m| m.tool_calls.is_empty() && m.role != Role::Tool);
        Ok(Count {
            tokens: messages + tools.tokens,
            exact: tools.exact && history_plain,
        })
    }
}
