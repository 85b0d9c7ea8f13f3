//! Anthropic Messages (`POST /v1/messages`, `x-api-key`, `anthropic-version: 2023-06-01`).
//!
//! Structured output is `output_config.format` (`{"type": "json_schema", "schema"}`, no
//! name, no strict flag) or a forced `tool_use` whose `input` is the object. There is no
//! JSON mode, and no assistant prefill: Claude 4.6+ rejects a conversation that ends
//! with an assistant turn. `temperature` is optional per model (newer ones answer 400
//! "deprecated for this model"), so `[anthropic] send_temperature` decides.
//!
//! Usage: `input_tokens` excludes cached tokens, so the prompt is `input_tokens +
//! cache_creation_input_tokens + cache_read_input_tokens`; a part that is missing makes
//! the total unknown, never smaller. Errors are `{"type": "error", "error": {"type",
//! "message"}}`; context overflow has no code, only the message "prompt is too long".
//! With `stream = true` the request says `stream: true` and the events are folded by
//! [`super::anthropic_stream`].

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::error::{self, CallError, ErrorKind, classify_status, mentions_context_length};
use super::openai::{parse_body, wire_schema};
use super::{CallSpec, Finish, FinishKind, Reply, Usage, WireFormat, WireRequest, sse, streamed};
use crate::config::{ProviderConfig, StructuredOutput};
use crate::secret::Secret;

/// The API version this adapter speaks (the one the recorded payloads were made with).
pub const API_VERSION: &str = "2023-06-01";

#[derive(Debug, Clone, Copy, Default)]
pub struct AnthropicMessages;

impl WireFormat for AnthropicMessages {
    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model));
        body.insert("max_tokens".into(), json!(config.max_output_tokens));
        if let Some(system) = &call.prompt.system {
            body.insert("system".into(), json!(system));
        }
        // The conversation ends with the user: prefill is rejected by newer models.
        body.insert(
            "messages".into(),
            json!([{"role": "user", "content": call.prompt.user}]),
        );
        if config.sends_temperature() {
            body.insert("temperature".into(), json!(config.temperature));
        }
        if config.stream {
            body.insert("stream".into(), json!(true));
        }
        let schema = wire_schema(call.schema);
        match config.structured_output {
            StructuredOutput::JsonSchema => {
                body.insert(
                    "output_config".into(),
                    json!({"format": {"type": "json_schema", "schema": schema}}),
                );
            }
            StructuredOutput::Tool => {
                body.insert(
                    "tools".into(),
                    json!([{"name": call.schema_name, "description": "Return the answer",
                            "input_schema": schema}]),
                );
                body.insert(
                    "tool_choice".into(),
                    json!({"type": "tool", "name": call.schema_name}),
                );
            }
            // Refused at configuration time: Anthropic has no JSON mode.
            StructuredOutput::JsonObject | StructuredOutput::Prompt => {}
        }

        let mut headers = super::json_headers(
            key.map(|k| (HeaderName::from_static("x-api-key"), k.expose().to_string())),
        );
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        WireRequest {
            url: format!("{}/v1/messages", config.base_url),
            headers,
            body: Value::Object(body),
        }
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        parse_body(body)
            .map_err(|e| {
                streamed::reject(body, |event| {
                    error_object(event).map(|(kind, message)| CallError::new(kind, message))
                })
                .unwrap_or(e)
            })
            .and_then(|value| {
                // A processed message of the wrong shape still says its cost and model.
                decode_message(&value)
                    .map_err(|e| e.keep_served(usage_of(&value), model_of(&value), None))
            })
            .map_err(CallError::after_success)
    }

    fn decode_stream(&self, body: &[u8]) -> Result<Reply, CallError> {
        if sse::is_event_stream(body) {
            super::anthropic_stream::fold(body).map_err(CallError::after_success)
        } else {
            self.decode(body)
        }
    }

    fn first_token_end(&self, body: &[u8]) -> Option<usize> {
        super::stream::first_answer_end(body, super::anthropic_stream::carries_answer)
    }

    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let (kind, message) = parsed
            .as_ref()
            .and_then(error_object)
            .map_or((None, String::new()), |(k, m)| (Some(k), m));
        let mut classified = classify_status(status, body, message);
        if let Some(kind) = kind {
            classified.kind = kind;
        }
        // Cloudflare answers oversize bodies itself, often with an HTML page.
        if status == 413 {
            classified.kind = ErrorKind::RequestTooLarge;
        }
        if classified.kind == ErrorKind::BadRequest && rejects_temperature(&classified.message) {
            classified.message.push_str(
                " (set `send_temperature = false` in the provider's [anthropic] section)",
            );
        }
        if classified.message.is_empty() {
            classified.message = error::excerpt(body);
        }
        classified.server_hints(headers)
    }
}

fn rejects_temperature(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("temperature") && (m.contains("deprecated") || m.contains("not supported"))
}

/// The kind and message of an Anthropic error object (`{"type": "error", "error": …}`).
pub(super) fn error_object(value: &Value) -> Option<(ErrorKind, String)> {
    let err = value.get("error").filter(|e| e.is_object())?;
    let text = |name: &str| err.get(name).and_then(Value::as_str).unwrap_or_default();
    let message = text("message").to_string();
    let m = message.to_ascii_lowercase();
    let kind = match text("type") {
        "invalid_request_error" if mentions_context_length(&message) => ErrorKind::ContextLength,
        "invalid_request_error" if m.contains("credit balance") => ErrorKind::QuotaExhausted,
        "invalid_request_error" => ErrorKind::BadRequest,
        "authentication_error" | "permission_error" => ErrorKind::Auth,
        "billing_error" => ErrorKind::QuotaExhausted,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error" if error::exceeds_account_limit(&message) => ErrorKind::RequestTooLarge,
        "rate_limit_error" => ErrorKind::RateLimited,
        "api_error" => ErrorKind::ServerError,
        "timeout_error" => ErrorKind::Timeout,
        "overloaded_error" => ErrorKind::Overloaded,
        _ => return None,
    };
    Some((kind, message))
}

pub(super) fn decode_message(value: &Value) -> Result<Reply, CallError> {
    let invalid = |what: &str| CallError::new(ErrorKind::InvalidResponse, what.to_string());
    if let Some((kind, message)) = error_object(value) {
        // A 200 that carries an error object (a proxy, or a stream's error event).
        return Err(CallError::new(kind, message));
    }
    let content = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("the response has no content array"))?;
    let mut text = String::new();
    let mut tool_input = None;
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") if tool_input.is_none() => tool_input = block.get("input"),
            _ => {}
        }
    }
    let raw_stop = value.get("stop_reason").and_then(Value::as_str);
    let kind = match raw_stop {
        Some("end_turn" | "stop_sequence" | "tool_use") => FinishKind::Stop,
        // Both cut the answer short: the output limit, or the context window filling up.
        Some("max_tokens" | "model_context_window_exceeded") => FinishKind::Length,
        Some("refusal") => FinishKind::Refusal,
        _ => FinishKind::Other,
    };
    let refusal = (kind == FinishKind::Refusal).then(|| {
        value
            .pointer("/stop_details/explanation")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| text.clone())
    });
    // A forced tool call carries the object itself, already parsed: serialize it so the
    // checks read it like every other provider's text.
    if let Some(input) = tool_input {
        text = serde_json::to_string(input)
            .map_err(|e| invalid(&format!("the tool input cannot be serialized: {e}")))?;
    }
    Ok(Reply {
        text,
        finish: Finish::new(kind, raw_stop),
        refusal,
        usage: usage_of(value),
        served_model: model_of(value),
        system_fingerprint: None,
    })
}

/// The prompt is `input_tokens` plus both cache counts; a missing part makes it unknown.
pub(super) fn usage_of(value: &Value) -> Usage {
    let usage = value.get("usage");
    let count = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
    let prompt_tokens = match (
        count("input_tokens"),
        count("cache_creation_input_tokens"),
        count("cache_read_input_tokens"),
    ) {
        (Some(input), Some(created), Some(read)) => Some(input + created + read),
        _ => None,
    };
    Usage {
        prompt_tokens,
        output_tokens: count("output_tokens"),
    }
}

pub(super) fn model_of(value: &Value) -> Option<String> {
    value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string)
}
