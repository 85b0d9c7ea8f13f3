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
//! [`stream`].

pub(crate) mod dialect;
pub(crate) mod limits;
pub(crate) mod server;
pub(crate) mod stream;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::count::{self, Count, CountRequest, Counted};
use super::error::{self, CallError, ErrorKind, mentions_context_length};
use super::wire_schema;
use super::{CallSpec, Finish, FinishKind, Reply, ToolCall, Usage, WireFormat, WireRequest};
use conform_config::conversation::{Message, Role, Tool, ToolChoice};
use conform_config::secret::Secret;
use conform_config::{ProviderConfig, StructuredOutput};

/// The API version this adapter speaks (the one the recorded payloads were made with).
pub(crate) const API_VERSION: &str = "2023-06-01";

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AnthropicMessages;

impl WireFormat for AnthropicMessages {
    fn rate_limits(&self, headers: &HeaderMap) -> crate::provider::limits::RateLimitInfo {
        limits::rate_limits(headers)
    }

    fn tool_use_finish(&self, _forced_by_name: bool) -> Option<&'static str> {
        Some("tool_use")
    }

    /// `POST /v1/messages/count_tokens` with the request's `model`, `system`, `messages`,
    /// `tools` and `tool_choice` (`{"input_tokens": N}`); it cannot take `output_config`,
    /// so a request holding one is counted as a lower bound.
    fn count_request(&self, sent: &WireRequest, config: &ProviderConfig) -> Option<CountRequest> {
        let body = count::keep(
            &sent.body,
            &["model", "system", "messages", "tools", "tool_choice"],
        );
        Some(CountRequest {
            url: config.url("/v1/messages/count_tokens"),
            headers: sent.headers.clone(),
            body: Value::Object(body),
        })
    }

    fn count_answer(
        &self,
        _step: usize,
        answer: &Value,
        sent: &WireRequest,
        _config: &ProviderConfig,
    ) -> Result<Counted, count::CountError> {
        Ok(Counted::Tokens(Count {
            tokens: count::integer(answer, "input_tokens")?,
            exact: sent.body.get("output_config").is_none(),
        }))
    }

    fn conversation_problems(
        &self,
        messages: &[Message],
    ) -> Vec<conform_config::conversation::Problem> {
        let mut found = crate::provider::conversation::system_kept_apart(messages, "Anthropic");
        if messages.last().is_some_and(|m| m.role == Role::Assistant) {
            found.push(conform_config::conversation::Problem::new(
                format!("/messages/{}", messages.len() - 1),
                "Anthropic rejects a conversation that ends with an assistant turn (prefill is gone since Claude 4.6): end with the user or a tool result",
            ));
        }
        found
    }

    fn answer_dialect(
        &self,
        config: &ProviderConfig,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        (config.structured_output == StructuredOutput::JsonSchema).then_some(&dialect::OutputConfig)
    }

    fn tool_dialect(
        &self,
        _config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        strict.then_some(&dialect::OutputConfig)
    }

    fn server(&self) -> Option<&'static dyn crate::provider::server::WireServer> {
        Some(&server::MessagesServer)
    }

    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model));
        body.insert("max_tokens".into(), json!(config.max_output_tokens));
        if let Some(system) = call.system() {
            body.insert("system".into(), json!(system));
        }
        // The conversation ends with the user: prefill is rejected by newer models.
        let messages = match call.conversation {
            Some(c) => Value::Array(messages(c.turns())),
            None => json!([{"role": "user", "content": call.prompt.user}]),
        };
        body.insert("messages".into(), messages);
        if config.sends_temperature() {
            body.insert("temperature".into(), json!(config.temperature));
        }
        if config.stream {
            body.insert("stream".into(), json!(true));
        }
        if let Some(c) = call.conversation.filter(|c| !c.tools.is_empty()) {
            body.insert("tools".into(), Value::Array(tools(&c.tools)));
            if let Some(choice) = tool_choice(c.tool_choice.as_ref(), c.parallel_tool_calls) {
                body.insert("tool_choice".into(), choice);
            }
        }
        let schema = wire_schema(call.schema);
        let output_config = json!({"format": {"type": "json_schema", "schema": schema}});
        match config.structured_output {
            _ if !call.wants_json() => {}
            StructuredOutput::JsonSchema => {
                body.insert("output_config".into(), output_config);
            }
            // The request declares tools of its own: the answer cannot be one more forced
            // tool, so it is asked for with the native schema instead.
            StructuredOutput::Tool if !call.tools().is_empty() => {
                body.insert("output_config".into(), output_config);
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
        if config.stream {
            body.insert("stream".into(), json!(true));
        }

        let mut headers = super::json_headers(
            key.map(|k| (HeaderName::from_static("x-api-key"), k.expose().to_string())),
        );
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        WireRequest {
            url: config.url("/v1/messages"),
            headers,
            body: Value::Object(body),
        }
    }

    fn reply(&self, document: &Value) -> Result<Reply, CallError> {
        decode_message(document)
    }

    fn error_event(&self, event: &Value) -> Option<CallError> {
        error_object(event).map(|(kind, message)| CallError::new(kind, message))
    }

    fn served(&self, document: &Value) -> (Usage, Option<String>) {
        (usage_of(document), model_of(document))
    }

    fn fold(&self, body: &[u8]) -> Option<Result<Reply, CallError>> {
        Some(stream::fold(body))
    }

    fn carries_answer(&self, event: &str, data: &Value) -> bool {
        stream::carries_answer(event, data)
    }

    fn error_fields(&self, status: u16, parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        let (kind, message) = parsed
            .and_then(error_object)
            .map_or((None, String::new()), |(k, m)| (Some(k), m));
        // Cloudflare answers oversize bodies itself, often with an HTML page.
        match status {
            413 => (Some(ErrorKind::RequestTooLarge), message),
            _ => (kind, message),
        }
    }

    fn advise(&self, classified: &mut CallError) {
        if classified.kind == ErrorKind::BadRequest && rejects_temperature(&classified.message) {
            classified.message.push_str(
                " (set `send_temperature = false` in the provider's [anthropic] section)",
            );
        }
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
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let id = block.get("id").and_then(Value::as_str).map(str::to_string);
                let input = block.get("input").cloned().unwrap_or(json!({}));
                tool_calls.push(ToolCall::from_value(id, name, &input));
            }
            _ => {}
        }
    }
    let raw_stop = value.get("stop_reason").and_then(Value::as_str);
    let kind = match raw_stop {
        Some("end_turn" | "stop_sequence") => FinishKind::Stop,
        Some("tool_use") => FinishKind::ToolUse,
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
    // A forced tool call carries the object itself, already parsed: serialized, it is the
    // text the checks read, like every other provider's, when the model wrote none.
    let text = Reply::text_or_first_arguments(text, &tool_calls);
    Ok(Reply {
        text,
        tool_calls,
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

/// The conversation after its system prompt, as Messages takes it: an assistant's calls
/// as `tool_use` blocks (their input an object) after its text; the results of one
/// turn's calls as `tool_result` blocks (with `is_error`) in one user message, to which a
/// user message that follows them is added as a text block.
fn messages(turns: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(turns.len());
    let mut results: Vec<Value> = Vec::new();
    for m in turns {
        match m.role {
            Role::Tool => {
                let mut block = json!({"type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content_str()});
                if m.is_error {
                    block["is_error"] = json!(true);
                }
                results.push(block);
            }
            Role::User if !results.is_empty() => {
                results.push(json!({"type": "text", "text": m.content_str()}));
                out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
            }
            role => {
                if !results.is_empty() {
                    out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
                }
                let role = if role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                if m.tool_calls.is_empty() {
                    out.push(json!({"role": role, "content": m.content_str()}));
                    continue;
                }
                let mut blocks = Vec::with_capacity(m.tool_calls.len() + 1);
                if !m.content_str().is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content_str()}));
                }
                for call in &m.tool_calls {
                    blocks.push(json!({"type": "tool_use", "id": call.id,
                        "name": call.function.name,
                        "input": Value::Object(call.arguments_object().unwrap_or_default())}));
                }
                out.push(json!({"role": role, "content": blocks}));
            }
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "content": results}));
    }
    out
}

/// Tools as Messages declares them: `input_schema`, and `strict` only where asked for.
fn tools(tools: &[Tool]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            let mut tool = json!({"name": t.name(), "description": t.description(),
                "input_schema": wire_schema(t.parameters())});
            if t.strict() {
                tool["strict"] = json!(true);
            }
            tool
        })
        .collect()
}

/// `auto`, `none`, `any` (OpenAI's `required`), or `tool` with its name; parallel calls
/// are switched off with `disable_parallel_tool_use`.
fn tool_choice(choice: Option<&ToolChoice>, parallel: Option<bool>) -> Option<Value> {
    let mut out = match choice {
        None if parallel == Some(false) => json!({"type": "auto"}),
        None => return None,
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::None) => json!({"type": "none"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Tool(name)) => json!({"type": "tool", "name": name}),
    };
    if parallel == Some(false) && choice != Some(&ToolChoice::None) {
        out["disable_parallel_tool_use"] = json!(true);
    }
    Some(out)
}

#[cfg(test)]
mod conversation_tests {
    use super::*;

    #[test]
    fn a_conversation_must_not_end_with_the_assistant() {
        let m: Vec<Message> = serde_json::from_value(json!([{"role": "system", "content": "s"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "prefill"}]))
        .unwrap();
        let pointers: Vec<String> = AnthropicMessages
            .conversation_problems(&m)
            .into_iter()
            .map(|p| p.pointer)
            .collect();
        assert_eq!(pointers, ["/messages/1", "/messages/3"]);
        // Other wires take it.
        assert!(
            crate::provider::openai::OpenAiChat::official()
                .conversation_problems(&m)
                .is_empty()
        );
    }
}
