//! The OpenAI Responses API (`POST /v1/responses`).
//!
//! The prompt goes in `input` (the user text) and `instructions` (the system text).
//! Structured output is `text.format`, and flat: `{"type": "json_schema", "name",
//! "strict": true, "schema"}`, not Chat Completions' nested `json_schema` object. The
//! answer is a list of `output[]` items: `message` items hold `output_text` and `refusal`
//! parts, a forced tool call is a `function_call` item. Why it stopped is `status` with
//! `incomplete_details.reason`; a failed response carries `error{code, message}` with a 200.
//! The API takes no `seed`, so a configured one is not sent. Requests set `store: false`:
//! replayed cases can hold real customer text, which need not be kept on the provider's side.
//!
//! Streams are typed events (`response.output_text.delta`, `response.refusal.done` …)
//! ending with `response.completed`, `response.failed`, `response.incomplete` or `error`;
//! there is no `[DONE]`, so a stream without one of those was cut off.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::error::{CallError, ErrorKind};
use super::openai::{OpenAiChat, error_in_body};
use super::{
    CallSpec, Finish, FinishKind, Reply, ToolCall, Usage, WireFormat, WireRequest, sse, stream,
};
use super::{bearer_headers as headers, parse_body, wire_schema};
use conform_config::conversation::{Message, Role, ToolChoice};
use conform_config::secret::Secret;
use conform_config::{ProviderConfig, StructuredOutput};

/// The OpenAI Responses API, as a [`WireFormat`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiResponses;

impl WireFormat for OpenAiResponses {
    fn rate_limits(
        &self,
        headers: &reqwest::header::HeaderMap,
    ) -> crate::provider::limits::RateLimitInfo {
        crate::provider::openai::limits::rate_limits(headers)
    }

    /// `POST /v1/responses/input_tokens` (`{"input_tokens": N}`).
    fn count_request(
        &self,
        sent: &WireRequest,
        config: &ProviderConfig,
    ) -> Option<crate::provider::count::CountRequest> {
        let body = crate::provider::count::keep(
            &sent.body,
            &[
                "model",
                "input",
                "instructions",
                "tools",
                "tool_choice",
                "parallel_tool_calls",
                "text",
            ],
        );
        Some(crate::provider::count::CountRequest {
            url: config.url("/v1/responses/input_tokens"),
            headers: sent.headers.clone(),
            body: Value::Object(body),
        })
    }

    fn count_answer(
        &self,
        _step: usize,
        answer: &Value,
        _sent: &WireRequest,
        _config: &ProviderConfig,
    ) -> Result<crate::provider::count::Counted, crate::provider::count::CountError> {
        Ok(crate::provider::count::Counted::Tokens(
            crate::provider::count::Count {
                tokens: crate::provider::count::integer(answer, "input_tokens")?,
                exact: true,
            },
        ))
    }

    fn answer_dialect(
        &self,
        config: &ProviderConfig,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        use conform_config::StructuredOutput::{JsonSchema, Tool};
        matches!(config.structured_output, JsonSchema | Tool)
            .then_some(&crate::provider::openai::dialect::Strict)
    }

    fn tool_dialect(
        &self,
        _config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        strict.then_some(&crate::provider::openai::dialect::Strict)
    }

    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        let mut body = prompt_body(call, config);
        body.insert("temperature".into(), json!(config.temperature));
        body.insert("max_output_tokens".into(), json!(config.max_output_tokens));
        body.insert("store".into(), json!(false));
        if let Some(c) = call.conversation.filter(|c| !c.tools.is_empty()) {
            // Flat, and `strict` always said: this API makes a function strict unless told
            // otherwise, which a schema written for the others would fail.
            let tools: Vec<Value> = c
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "name": t.name(), "description": t.description(),
                        "parameters": wire_schema(t.parameters()), "strict": t.strict()})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            if let Some(choice) = &c.tool_choice {
                let choice = match choice {
                    ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
                    other => Value::from(other.clone()),
                };
                body.insert("tool_choice".into(), choice);
            }
            if let Some(parallel) = c.parallel_tool_calls {
                body.insert("parallel_tool_calls".into(), json!(parallel));
            }
        }
        let schema = wire_schema(call.schema);
        let json_schema = json!({"format": {"type": "json_schema", "name": call.schema_name,
            "strict": true, "schema": schema}});
        match config.structured_output {
            _ if !call.wants_json() => {}
            StructuredOutput::JsonSchema => {
                body.insert("text".into(), json_schema);
            }
            // The request declares tools of its own: the answer cannot be one more forced
            // function, so it is asked for with the schema instead.
            StructuredOutput::Tool if !call.tools().is_empty() => {
                body.insert("text".into(), json_schema);
            }
            StructuredOutput::JsonObject => {
                body.insert("text".into(), json!({"format": {"type": "json_object"}}));
            }
            StructuredOutput::Tool => {
                body.insert(
                    "tools".into(),
                    json!([{"type": "function", "name": call.schema_name,
                        "strict": true, "parameters": schema}]),
                );
                body.insert(
                    "tool_choice".into(),
                    json!({"type": "function", "name": call.schema_name}),
                );
            }
            StructuredOutput::Prompt => {}
        }
        body.insert("stream".into(), json!(config.stream));
        WireRequest {
            url: config.url("/v1/responses"),
            headers: headers(key),
            body: Value::Object(body),
        }
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        let decoded = if sse::is_event_stream(body) {
            fold(body)
        } else {
            parse_body(body).and_then(|response| {
                reply(&response, Streamed::default()).map_err(|e| keep_served(e, &response))
            })
        };
        decoded.map_err(CallError::after_success)
    }

    fn carries_answer(&self, event: &str, data: &Value) -> bool {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event);
        matches!(
            kind,
            "response.output_text.delta"
                | "response.refusal.delta"
                | "response.function_call_arguments.delta"
        ) && stream::has_text(data.get("delta"))
    }

    /// Error bodies are Chat Completions' `{"error": {message, type, param, code}}`.
    fn error_fields(&self, status: u16, parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        OpenAiChat::official().error_fields(status, parsed)
    }
}

/// `model`, `input` and `instructions`: what a call and its token count share.
fn prompt_body(call: &CallSpec<'_>, config: &ProviderConfig) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    let input = match call.conversation {
        Some(c) => input(c.turns()),
        None => json!(call.prompt.user),
    };
    body.insert("input".into(), input);
    if let Some(system) = call.system() {
        body.insert("instructions".into(), json!(system));
    }
    body
}

/// The conversation after its system prompt as `input`: one user message is its text
/// alone; anything longer is a list of items, messages by role, an assistant's calls as
/// `function_call` items and tool results as `function_call_output` items paired by
/// `call_id` (this API has no way to say a tool failed but its output).
fn input(turns: &[Message]) -> Value {
    if let [only] = turns
        && only.role == Role::User
    {
        return json!(only.content_str());
    }
    let mut items = Vec::with_capacity(turns.len());
    for m in turns {
        match m.role {
            Role::Tool => items.push(json!({"type": "function_call_output",
                "call_id": m.tool_call_id.clone().unwrap_or_default(),
                "output": m.content_str()})),
            Role::Assistant => {
                if !m.content_str().is_empty() {
                    items.push(json!({"role": "assistant", "content": m.content_str()}));
                }
                for call in &m.tool_calls {
                    items.push(json!({"type": "function_call", "call_id": call.id,
                        "name": call.function.name, "arguments": call.arguments_text()}));
                }
            }
            role => items.push(json!({"role": role.as_str(), "content": m.content_str()})),
        }
    }
    Value::Array(items)
}

/// `POST /v1/responses/input_tokens`: the provider's own count of the prompt's input
/// tokens, to compare with a local tokenizer's.
pub fn input_tokens_request(
    call: &CallSpec<'_>,
    config: &ProviderConfig,
    key: Option<&Secret>,
) -> WireRequest {
    WireRequest {
        url: config.url("/v1/responses/input_tokens"),
        headers: headers(key),
        body: Value::Object(prompt_body(call, config)),
    }
}

/// Reads `{"object": "response.input_tokens", "input_tokens": N}`.
pub fn decode_input_tokens(body: &[u8]) -> Result<u64, CallError> {
    parse_body(body)?
        .get("input_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            CallError::new(
                ErrorKind::InvalidResponse,
                "the token count response has no integer `input_tokens`",
            )
        })
}

/// What the deltas of a stream said before its terminal event.
#[derive(Debug, Default)]
struct Streamed {
    text: Option<String>,
    refusal: Option<String>,
    /// Function calls by `output_index`: their deltas carry neither `call_id` nor `name`,
    /// which the `output_item` events give.
    calls: BTreeMap<u64, StreamedCall>,
}

#[derive(Debug, Default)]
struct StreamedCall {
    call_id: Option<String>,
    name: Option<String>,
    arguments: String,
    /// `function_call_arguments.done` or `output_item.done` gave the whole text.
    whole: bool,
}

/// The usage and model a response object reports.
fn served_of(response: &Value) -> (Usage, Option<String>) {
    let usage = response.get("usage");
    let count = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
    let usage = Usage {
        prompt_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
    };
    let model = response
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    (usage, model)
}

/// The `output_index` an event is about (0 when it names none).
fn output_index(data: &Value) -> u64 {
    data.get("output_index")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// A processed response that could not be used still says what it cost and who served it.
fn keep_served(error: CallError, response: &Value) -> CallError {
    let (usage, model) = served_of(response);
    error.keep_served(usage, model, None)
}

/// Folds a complete event-stream body into one reply. A stream that fails part-way keeps,
/// on its error, what the last response object it carried (`response.created` …) said.
fn fold(body: &[u8]) -> Result<Reply, CallError> {
    let mut last = None;
    let mut text = None;
    fold_events(body, &mut last, &mut text).map_err(|e| {
        let e = e.keep_text(text);
        match &last {
            Some(response) => keep_served(e, response),
            None => e,
        }
    })
}

fn fold_events(
    body: &[u8],
    last: &mut Option<Value>,
    said: &mut Option<String>,
) -> Result<Reply, CallError> {
    let events = sse::events(body)?;
    let mut streamed = Streamed::default();
    for event in &events {
        // Not part of this API, but servers that copy it from Chat Completions send it.
        if event.data.trim() == "[DONE]" {
            continue;
        }
        let data = sse::json(event)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(&event.name);
        if let Some(response) = data.get("response").filter(|r| r.is_object()) {
            *last = Some(response.clone());
        }
        let text = |name: &str| data.get(name).and_then(Value::as_str).unwrap_or_default();
        match kind {
            "response.output_text.delta" => {
                streamed
                    .text
                    .get_or_insert_default()
                    .push_str(text("delta"));
                said.clone_from(&streamed.text);
            }
            "response.refusal.delta" => {
                streamed
                    .refusal
                    .get_or_insert_default()
                    .push_str(text("delta"));
            }
            "response.refusal.done" => streamed.refusal = Some(text("refusal").to_string()),
            "response.function_call_arguments.delta" => {
                let call = streamed.calls.entry(output_index(&data)).or_default();
                if !call.whole {
                    call.arguments.push_str(text("delta"));
                }
            }
            "response.function_call_arguments.done" => {
                let call = streamed.calls.entry(output_index(&data)).or_default();
                call.arguments = text("arguments").to_string();
                call.whole = true;
            }
            "response.output_item.added" | "response.output_item.done" => {
                let Some(item) = data.get("item").filter(|i| i["type"] == "function_call") else {
                    continue;
                };
                let call = streamed.calls.entry(output_index(&data)).or_default();
                let field = |name: &str| item.get(name).and_then(Value::as_str);
                call.call_id = call.call_id.take().or(field("call_id").map(str::to_string));
                call.name = call.name.take().or(field("name").map(str::to_string));
                if kind == "response.output_item.done"
                    && let Some(arguments) = field("arguments")
                {
                    call.arguments = arguments.to_string();
                    call.whole = true;
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let response = data.get("response").ok_or_else(|| {
                    CallError::new(
                        ErrorKind::InvalidResponse,
                        format!("a `{kind}` event without its response object"),
                    )
                })?;
                return reply(response, streamed);
            }
            "error" => {
                let err = data.get("error").filter(|e| e.is_object()).unwrap_or(&data);
                return Err(error_in_body(err));
            }
            _ => {}
        }
    }
    Err(stream::truncated(
        "response.completed, .failed, .incomplete or error",
        events.len(),
    ))
}

/// Decodes a response object; what a stream's deltas said fills in what it lacks (a
/// terminal event may carry an empty `output`).
fn reply(response: &Value, streamed: Streamed) -> Result<Reply, CallError> {
    let status = response.get("status").and_then(Value::as_str);
    if let Some(err) = response.get("error").filter(|e| e.is_object()) {
        return Err(error_in_body(err));
    }
    if status == Some("failed") {
        return Err(CallError::new(
            ErrorKind::ServerError,
            "the response failed without an error object",
        ));
    }
    let (mut text, mut refusal) = (None::<String>, None::<String>);
    let mut tool_calls = Vec::new();
    for item in response
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let (into, field) = match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => (&mut text, "text"),
                        Some("refusal") => (&mut refusal, "refusal"),
                        _ => continue,
                    };
                    if let Some(s) = part.get(field).and_then(Value::as_str) {
                        into.get_or_insert_default().push_str(s);
                    }
                }
            }
            Some("function_call") => {
                let field = |name: &str| item.get(name).and_then(Value::as_str);
                // Only `call_id` pairs with the output sent back; `id` is the item's.
                tool_calls.push(ToolCall::from_text(
                    field("call_id").map(str::to_string),
                    field("name").unwrap_or_default(),
                    field("arguments").unwrap_or_default(),
                ));
            }
            _ => {}
        }
    }
    let text = text.or(streamed.text);
    let refusal = refusal.or(streamed.refusal).filter(|r| !r.is_empty());
    if tool_calls.is_empty() {
        tool_calls = streamed
            .calls
            .into_values()
            .map(|c| ToolCall::from_text(c.call_id, c.name.unwrap_or_default(), c.arguments))
            .collect();
    }
    let arguments = tool_calls.first().map(|c| c.raw_arguments.clone());

    let reason = response
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str);
    let mut kind = match (status, reason) {
        (Some("completed"), _) => FinishKind::Stop,
        // The API says `max_output_tokens`; its own spec example says `max_tokens`.
        (Some("incomplete"), Some("max_output_tokens" | "max_tokens")) => FinishKind::Length,
        (Some("incomplete"), Some("content_filter")) => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    };
    if refusal.is_some() {
        kind = FinishKind::Refusal;
    }
    let text = match (text, arguments) {
        (Some(text), _) => text,
        (None, Some(args)) => args,
        (None, None) if kind == FinishKind::Stop => {
            return Err(CallError::new(
                ErrorKind::InvalidResponse,
                "the response has neither output text nor a function call",
            ));
        }
        (None, None) => String::new(),
    };
    let (usage, served_model) = served_of(response);
    Ok(Reply {
        text,
        tool_calls,
        finish: Finish::new(kind, reason.or(status)),
        refusal,
        usage,
        served_model,
        system_fingerprint: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_part_is_a_refusal() {
        let body = br#"{"status":"completed","model":"m","output":[{"type":"message",
            "content":[{"type":"refusal","refusal":"No."}]}]}"#;
        let reply = OpenAiResponses.decode(body).unwrap();
        assert_eq!(reply.finish.kind, FinishKind::Refusal);
        assert_eq!(reply.refusal.as_deref(), Some("No."));
        assert_eq!(reply.text, "");
        assert_eq!(reply.usage, Usage::default());
    }

    #[test]
    fn a_forced_function_call_is_the_answer() {
        let body = br#"{"status":"completed","output":[{"type":"reasoning"},
            {"type":"function_call","name":"f","arguments":"{\"a\":1}"}]}"#;
        let reply = OpenAiResponses.decode(body).unwrap();
        assert_eq!(reply.text, "{\"a\":1}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
    }

    #[test]
    fn content_filter_and_failure_without_error_object() {
        let filtered = br#"{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[]}"#;
        let reply = OpenAiResponses.decode(filtered).unwrap();
        assert_eq!(reply.finish.kind, FinishKind::ContentFilter);
        assert_eq!(reply.finish.raw.as_deref(), Some("content_filter"));
        let failed = br#"{"status":"failed","error":null,"output":[]}"#;
        assert_eq!(
            OpenAiResponses.decode(failed).unwrap_err().kind,
            ErrorKind::ServerError
        );
    }

    #[test]
    fn a_completed_response_without_output_is_invalid() {
        let err = OpenAiResponses
            .decode(br#"{"status":"completed","output":[]}"#)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidResponse);
    }

    #[test]
    fn a_failed_response_is_classified_by_its_code() {
        let body =
            br#"{"status":"failed","error":{"code":"rate_limit_exceeded","message":"slow down"}}"#;
        let err = OpenAiResponses.decode(body).unwrap_err();
        assert_eq!(err.kind, ErrorKind::RateLimited);
        assert_eq!(err.message, "slow down");
    }
}
