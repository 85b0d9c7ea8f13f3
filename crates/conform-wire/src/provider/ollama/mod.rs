//! Ollama's native chat (`POST /api/chat`).
//!
//! Streaming is Ollama's default, so every request says `stream` explicitly: `false`,
//! or with `stream = true` `true`, and the NDJSON lines are folded by
//! [`stream`]. Structured
//! output is `format`: the JSON Schema itself, or `"json"`. Sampling goes in `options`:
//! `temperature`, `seed`, `num_predict` (the output limit) and `num_ctx`, set from the
//! tokenizer's `context_window` because Ollama otherwise cuts the history from the front
//! to fit its small default window, silently.
//!
//! Usage is `prompt_eval_count` / `eval_count`; a missing `prompt_eval_count` (it
//! disappears on prompt-cache hits) is unknown, never 0. `model` echoes the tag that was
//! asked for. Errors are `{"error": "…"}` with the HTTP status.

pub(crate) mod server;
pub(crate) mod stream;

use serde_json::{Map, Value, json};

use super::error::is_daily_quota;
use super::error::{CallError, ErrorKind, mentions_context_length};
use super::wire_schema;
use super::{CallSpec, Finish, FinishKind, Reply, ToolCall, Usage, WireFormat, WireRequest};
use conform_config::conversation::{Message, Role};
use conform_config::secret::Secret;
use conform_config::{ProviderConfig, StructuredOutput};

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OllamaChat;

impl WireFormat for OllamaChat {
    fn server(&self) -> Option<&'static dyn crate::provider::server::WireServer> {
        Some(&server::ChatServer)
    }

    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model));
        let messages = match call.conversation {
            Some(c) => Value::Array(c.messages.iter().map(message).collect()),
            None => super::chat_messages(call.prompt),
        };
        body.insert("messages".into(), messages);
        body.insert("stream".into(), json!(config.stream));
        // Ollama has no tool_choice and no parallel_tool_calls: the tools are declared
        // and the model decides, as a gateway that drops those fields would have it.
        if let Some(c) = call.conversation.filter(|c| !c.tools.is_empty()) {
            body.insert("tools".into(), Value::Array(c.openai_tools()));
        }
        match config.structured_output {
            _ if !call.wants_json() => {}
            StructuredOutput::JsonSchema => {
                body.insert("format".into(), wire_schema(call.schema));
            }
            StructuredOutput::JsonObject => {
                body.insert("format".into(), json!("json"));
            }
            // Refused at configuration time: Ollama cannot force a tool call.
            StructuredOutput::Tool | StructuredOutput::Prompt => {}
        }
        let mut options = Map::new();
        options.insert("temperature".into(), json!(config.temperature));
        if let Some(seed) = config.seed {
            options.insert("seed".into(), json!(seed));
        }
        options.insert("num_predict".into(), json!(config.max_output_tokens));
        if let Some(window) = config.tokenizer.context_window {
            options.insert("num_ctx".into(), json!(window));
        }
        body.insert("options".into(), Value::Object(options));

        WireRequest {
            url: config.url("/api/chat"),
            // Local Ollama needs no key; Ollama's cloud takes a bearer token.
            headers: super::bearer_headers(key),
            body: Value::Object(body),
        }
    }

    fn reply(&self, document: &Value) -> Result<Reply, CallError> {
        decode_chat(document)
    }

    fn error_event(&self, event: &Value) -> Option<CallError> {
        let message = error_message(event)?;
        Some(CallError::new(kind_of_message(None, &message), message))
    }

    fn served(&self, document: &Value) -> (Usage, Option<String>) {
        (usage_of(document), model_of(document))
    }

    fn carries_answer(&self, event: &str, data: &Value) -> bool {
        stream::carries_answer(event, data)
    }

    fn error_fields(&self, status: u16, parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        let message = parsed.and_then(error_message).unwrap_or_default();
        let kind = parsed
            .map(|_| kind_of_message(Some(status), &message))
            .filter(|refined| *refined != ErrorKind::ServerError);
        (kind, message)
    }

    fn decode_stream(&self, body: &[u8]) -> Result<Reply, CallError> {
        // A server that answers in one object sends a one-line stream: it too must say
        // `done: true`.
        stream::fold(body).map_err(CallError::after_success)
    }
}

/// `{"error": "…"}`, or the OpenAI-style `{"error": {"message": …}}` of its compat layer.
pub(super) fn error_message(value: &Value) -> Option<String> {
    let err = value.get("error")?;
    err.as_str()
        .or_else(|| err.get("message").and_then(Value::as_str))
        .map(str::to_string)
}

/// What a message adds to the status; `ServerError` when it adds nothing.
pub(super) fn kind_of_message(status: Option<u16>, message: &str) -> ErrorKind {
    match status {
        Some(400 | 413 | 500) | None if mentions_context_length(message) => {
            ErrorKind::ContextLength
        }
        // Ollama's cloud: "you've reached your weekly (session, hourly) usage limit, please
        // wait or upgrade" — hours away at best.
        Some(429) if is_daily_quota(message) || message.contains("usage limit") => {
            ErrorKind::QuotaExhausted
        }
        _ => ErrorKind::ServerError,
    }
}

pub(super) fn decode_chat(value: &Value) -> Result<Reply, CallError> {
    let invalid = |what: &str| CallError::new(ErrorKind::InvalidResponse, what.to_string());
    if let Some(message) = error_message(value) {
        return Err(CallError::new(kind_of_message(None, &message), message));
    }
    let text = value
        .pointer("/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("the response has no message.content"))?;
    // `{function: {name, arguments}}`, with `id` and `function.index` on newer servers;
    // the arguments an object (a string from some proxies).
    let tool_calls: Vec<ToolCall> = value
        .pointer("/message/tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|call| {
            let function = call.get("function")?;
            let name = function.get("name").and_then(Value::as_str)?;
            let id = call.get("id").and_then(Value::as_str).map(str::to_string);
            let args = function.get("arguments").cloned().unwrap_or(json!({}));
            Some(ToolCall::from_value(id, name, &args))
        })
        .collect();
    let raw = value.get("done_reason").and_then(Value::as_str);
    let done = value.get("done").and_then(Value::as_bool);
    let kind = match (raw, done) {
        (Some("stop"), _) => FinishKind::Stop,
        (Some("length"), _) => FinishKind::Length,
        // Servers before `done_reason` existed said only `done: true`.
        (None, Some(true)) => FinishKind::Stop,
        _ => FinishKind::Other,
    };
    Ok(Reply {
        text: Reply::text_or_first_arguments(text.to_string(), &tool_calls),
        tool_calls,
        finish: Finish::new(kind, raw),
        refusal: None,
        usage: usage_of(value),
        served_model: model_of(value),
        system_fingerprint: None,
    })
}

/// One message as Ollama's chat takes it: an assistant's calls with their arguments as
/// an object, a tool result with the tool's name (`tool_name`), and no ids.
fn message(m: &Message) -> Value {
    let mut out = json!({"role": m.role.as_str(), "content": m.content_str()});
    if !m.tool_calls.is_empty() {
        out["tool_calls"] = Value::Array(
            m.tool_calls
                .iter()
                .map(|c| {
                    json!({"function": {"name": c.function.name,
                        "arguments": Value::Object(c.arguments_object().unwrap_or_default())}})
                })
                .collect(),
        );
    }
    if m.role == Role::Tool
        && let Some(name) = &m.name
    {
        out["tool_name"] = json!(name);
    }
    out
}

pub(super) fn usage_of(value: &Value) -> Usage {
    let count = |name: &str| value.get(name).and_then(Value::as_u64);
    Usage {
        prompt_tokens: count("prompt_eval_count"),
        output_tokens: count("eval_count"),
    }
}

pub(super) fn model_of(value: &Value) -> Option<String> {
    value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string)
}
