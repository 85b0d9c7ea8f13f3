//! OpenAI Chat Completions (`POST /v1/chat/completions`).
//!
//! Structured output is `response_format: {"type": "json_schema", "json_schema": {"name",
//! "strict": true, "schema"}}` (strict mode), the legacy `{"type": "json_object"}`, or a
//! forced function call. A refusal arrives as `message.refusal` with `content: null` and
//! `finish_reason: "stop"`; it is normalized to [`FinishKind::Refusal`].

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use super::error::{self, CallError, ErrorKind, classify_status};
use super::{CallSpec, Finish, FinishKind, Reply, Usage, WireFormat, WireRequest};
use crate::config::{ProviderConfig, StructuredOutput};
use crate::secret::Secret;

/// The official API: `max_completion_tokens`, strict schemas.
#[derive(Debug, Clone, Copy)]
pub struct OpenAiChat {
    /// The official API names the output limit `max_completion_tokens`; servers that
    /// copy the older API (llama.cpp) only read `max_tokens`.
    pub(crate) max_tokens_field: &'static str,
}

impl OpenAiChat {
    pub fn official() -> Self {
        OpenAiChat {
            max_tokens_field: "max_completion_tokens",
        }
    }
}

impl WireFormat for OpenAiChat {
    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        encode_chat(call, config, key, self.max_tokens_field)
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        decode_chat(body)
    }

    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let err = parsed.as_ref().and_then(|v| v.get("error"));
        let field = |name: &str| {
            err.and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (message, code, kind) = (field("message"), field("code"), field("type"));
        let mut classified = classify_status(status, body, message.clone());
        classified.kind = match (status, code.as_str(), kind.as_str()) {
            (_, "context_length_exceeded", _) => ErrorKind::ContextLength,
            (_, "insufficient_quota", _) | (_, _, "insufficient_quota") => {
                ErrorKind::QuotaExhausted
            }
            (_, "invalid_api_key", _) => ErrorKind::Auth,
            (429, _, _) if message.starts_with("Request too large") => ErrorKind::RequestTooLarge,
            (429, _, _) if is_daily_quota(&message) => ErrorKind::QuotaExhausted,
            (400, _, _) if error::mentions_context_length(&message) => ErrorKind::ContextLength,
            (404, _, _) => ErrorKind::NotFound,
            _ => classified.kind,
        };
        if classified.message.is_empty() {
            classified.message = error::excerpt(body);
        }
        classified.retry_after(super::retry_after(headers))
    }
}

/// A rate limit that resets tomorrow is not worth waiting for.
pub(crate) fn is_daily_quota(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("per day") || m.contains("requests per day") || m.contains("(rpd)")
}

pub(crate) fn encode_chat(
    call: &CallSpec<'_>,
    config: &ProviderConfig,
    key: Option<&Secret>,
    max_tokens_field: &str,
) -> WireRequest {
    let mut messages = Vec::with_capacity(2);
    if let Some(system) = &call.prompt.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": call.prompt.user}));

    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("temperature".into(), json!(config.temperature));
    body.insert(max_tokens_field.into(), json!(config.max_output_tokens));
    if let Some(seed) = config.seed {
        body.insert("seed".into(), json!(seed));
    }
    let schema = wire_schema(call.schema);
    match config.structured_output {
        StructuredOutput::JsonSchema => {
            // Always the nested shape: llama.cpp silently ignores a flat `schema`.
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {
                    "name": call.schema_name, "strict": true, "schema": schema}}),
            );
        }
        StructuredOutput::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        StructuredOutput::Tool => {
            body.insert(
                "tools".into(),
                json!([{"type": "function", "function": {
                    "name": call.schema_name, "strict": true, "parameters": schema}}]),
            );
            body.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": call.schema_name}}),
            );
        }
        StructuredOutput::Prompt => {}
    }
    body.insert("stream".into(), json!(false));

    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = key
        && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
    {
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    WireRequest {
        url: format!("{}/v1/chat/completions", config.base_url),
        headers,
        body: Value::Object(body),
    }
}

/// The schema as providers accept it: without the `$schema` dialect marker, which
/// strict mode does not list among its keywords.
pub(crate) fn wire_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
    }
    schema
}

/// Parses a success body as JSON, telling a cut-off body from one that never was JSON.
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, CallError> {
    serde_json::from_slice(body).map_err(|e| {
        if error::looks_like_html(body) {
            CallError::new(
                ErrorKind::HtmlErrorPage,
                "an HTML page instead of JSON (a proxy or gateway answered)",
            )
        } else if e.is_eof() {
            CallError::new(
                ErrorKind::TruncatedBody,
                format!("the body ended mid-JSON after {} bytes", body.len()),
            )
        } else {
            CallError::new(
                ErrorKind::NonJsonBody,
                format!("the body is not JSON ({e}): {}", error::excerpt(body)),
            )
        }
    })
}

pub(crate) fn decode_chat(body: &[u8]) -> Result<Reply, CallError> {
    let value = parse_body(body)?;
    let invalid = |what: &str| CallError::new(ErrorKind::InvalidResponse, what.to_string());
    if let Some(err) = value.get("error") {
        // A 200 that carries an error object (some proxies, mid-stream errors).
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("an error object in a success response");
        return Err(CallError::new(ErrorKind::ServerError, message));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| invalid("the response has no choices"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| invalid("the first choice has no message"))?;
    let raw_finish = choice.get("finish_reason").and_then(Value::as_str);
    let content = message.get("content").and_then(Value::as_str);
    let refusal = message
        .get("refusal")
        .and_then(Value::as_str)
        .map(str::to_string);
    let tool_arguments = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .and_then(|calls| calls.first())
        .and_then(|call| call.pointer("/function/arguments"))
        .and_then(Value::as_str);

    let mut kind = match raw_finish {
        Some("stop" | "tool_calls" | "function_call") => FinishKind::Stop,
        Some("length") => FinishKind::Length,
        Some("content_filter") => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    };
    if refusal.is_some() && content.is_none() {
        kind = FinishKind::Refusal;
    }
    let text = match (content, tool_arguments) {
        (Some(text), _) => text.to_string(),
        (None, Some(args)) => args.to_string(),
        (None, None) if kind == FinishKind::Stop => {
            return Err(invalid(
                "the first choice has neither content nor a tool call",
            ));
        }
        (None, None) => String::new(),
    };
    let usage = value.get("usage");
    let count = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
    Ok(Reply {
        text,
        finish: Finish::new(kind, raw_finish),
        refusal,
        usage: Usage {
            prompt_tokens: count("prompt_tokens"),
            output_tokens: count("completion_tokens"),
        },
        served_model: value
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        system_fingerprint: value
            .get("system_fingerprint")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}
