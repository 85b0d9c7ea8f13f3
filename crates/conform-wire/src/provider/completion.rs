//! The one normalized answer every wire format decodes into.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why the model stopped, normalized, with the vendor's raw value kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishKind {
    /// A normal end of the answer (including a forced tool call that completed, where the
    /// vendor's word for it is its plain stop).
    Stop,
    /// The model stopped to call tools, in the vendor's own word for it (OpenAI Chat's
    /// `tool_calls`, Anthropic's `tool_use`): a normal end too.
    ToolUse,
    /// Cut off at the output token limit.
    Length,
    /// The model declined to answer.
    Refusal,
    /// A safety or content filter stopped the answer.
    ContentFilter,
    /// Anything else; see the raw value.
    Other,
}

/// Why the answer stopped: in common terms, and in the vendor's own word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finish {
    /// The vendor's reason mapped onto the kinds every check understands.
    pub kind: FinishKind,
    /// The vendor's own word (`stop`, `end_turn`, `MAX_TOKENS` …), when it sent one.
    pub raw: Option<String>,
}

impl Finish {
    /// A finish of `kind`, keeping the vendor's word when it sent one.
    pub fn new(kind: FinishKind, raw: Option<&str>) -> Self {
        Finish {
            kind,
            raw: raw.map(str::to_string),
        }
    }

    /// No finish reason at all: not a normal stop.
    pub fn missing() -> Self {
        Finish {
            kind: FinishKind::Other,
            raw: None,
        }
    }
}

/// Token usage as the provider reported it. A missing count is unknown, never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt, as the provider counted them.
    pub prompt_tokens: Option<u64>,
    /// Tokens of the answer, as the provider counted them.
    pub output_tokens: Option<u64>,
}

/// One tool call, decoded from whichever vendor made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The vendor's id for the call (`call_…`, `toolu_…`); Gemini and older Ollama
    /// servers may send none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name, as declared in the request.
    pub name: String,
    /// The arguments parsed as JSON; `None` when the text is not JSON at all.
    pub arguments: Option<Value>,
    /// The arguments as the vendor sent them: its string (OpenAI, vLLM, llama.cpp), or
    /// its object serialized (Anthropic, Gemini, Ollama).
    pub raw_arguments: String,
    /// The vendor's opaque signature of the call (Gemini's `thoughtSignature`), which a
    /// later turn must send back with it byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl ToolCall {
    /// A call whose arguments came as a string of JSON.
    pub fn from_text(id: Option<String>, name: impl Into<String>, raw: impl Into<String>) -> Self {
        let raw = raw.into();
        ToolCall {
            id,
            name: name.into(),
            arguments: serde_json::from_str(&raw).ok(),
            raw_arguments: raw,
            signature: None,
        }
    }

    /// The call with the vendor's signature of it.
    pub fn signed(mut self, signature: Option<String>) -> Self {
        self.signature = signature;
        self
    }

    /// A call whose arguments came as a JSON value: an object (as Anthropic, Gemini and
    /// Ollama send them), or a string, which is read as text of JSON.
    pub fn from_value(id: Option<String>, name: impl Into<String>, value: &Value) -> Self {
        match value {
            Value::String(raw) => ToolCall::from_text(id, name, raw.clone()),
            other => ToolCall {
                id,
                name: name.into(),
                arguments: Some(other.clone()),
                raw_arguments: other.to_string(),
                signature: None,
            },
        }
    }
}

/// What a wire format decodes from a successful response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reply {
    /// The answer text: what the checks parse as JSON. When the model wrote no text but
    /// called a tool, the first call's arguments (a forced tool call is the answer).
    pub text: String,
    /// Every tool call, in the order the vendor gave them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why the answer stopped.
    pub finish: Finish,
    /// The refusal text, when the model refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// What the call cost, as the provider reported it.
    pub usage: Usage,
    /// The model that actually answered (`gpt-4o-2024-08-06` for `gpt-4o`).
    pub served_model: Option<String>,
    /// The backend configuration that served the request (OpenAI's `system_fingerprint`), when sent.
    pub system_fingerprint: Option<String>,
}

impl Reply {
    /// What the model wrote as text: `text`, unless `text` only holds the first call's
    /// arguments (the model wrote nothing), when it is empty.
    pub fn content(&self) -> &str {
        match self.tool_calls.first() {
            Some(call) if call.raw_arguments == self.text => "",
            _ => &self.text,
        }
    }

    /// The text a reply carries when the model may have written none: its content, or
    /// the first call's arguments.
    pub fn text_or_first_arguments(content: String, calls: &[ToolCall]) -> String {
        match calls.first() {
            Some(call) if content.is_empty() => call.raw_arguments.clone(),
            _ => content,
        }
    }
}

/// A reply with what the transport measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    /// The decoded answer.
    #[serde(flatten)]
    pub reply: Reply,
    /// From the first byte sent to the last byte read, of the request that succeeded.
    #[serde(serialize_with = "millis")]
    pub latency: Duration,
    /// From the first byte sent to the first byte of the body; `None` when nothing was
    /// sent (a replayed answer).
    #[serde(serialize_with = "millis_opt", skip_serializing_if = "Option::is_none")]
    pub first_byte: Option<Duration>,
    /// From the first byte sent to the first piece of the answer: the event that carried
    /// it, for a stream; the whole body, for an answer that came in one piece (nothing of
    /// it could be shown before). `None` when nothing was sent.
    #[serde(serialize_with = "millis_opt", skip_serializing_if = "Option::is_none")]
    pub first_token: Option<Duration>,
    /// Requests sent after the first one.
    pub retries: u32,
}

pub(crate) fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0)
}

fn millis_opt<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => millis(d, s),
        None => s.serialize_none(),
    }
}
