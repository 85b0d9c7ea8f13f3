//! OpenAI Chat Completions (`POST /v1/chat/completions`).
//!
//! Structured output is `response_format: {"type": "json_schema", "json_schema": {"name",
//! "strict": true, "schema"}}` (strict mode), the legacy `{"type": "json_object"}`, or a
//! forced function call. A refusal arrives as `message.refusal` with `content: null` and
//! `finish_reason: "stop"`; it is normalized to [`FinishKind::Refusal`]. With `stream = true`
//! the answer is an event stream of chunks, folded by [`stream`].

pub(crate) mod compatible;
pub(crate) mod dialect;
pub(crate) mod limits;
pub(crate) mod server;
pub(crate) mod stream;

use reqwest::header::HeaderMap;

use crate::provider::error::is_daily_quota;
use crate::provider::{bearer_headers as headers, parse_body, wire_schema};
use serde_json::{Map, Value, json};

use super::error::{self, CallError, ErrorKind};
use super::{CallSpec, Finish, FinishKind, Reply, ToolCall, Usage, WireFormat, WireRequest};
use conform_config::secret::Secret;
use conform_config::{ProviderConfig, StructuredOutput};

/// The official API: `max_completion_tokens`, strict schemas.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenAiChat {
    /// The official API names the output limit `max_completion_tokens`; servers that
    /// copy the older API (llama.cpp) only read `max_tokens`.
    pub(crate) max_tokens_field: &'static str,
}

impl OpenAiChat {
    pub(crate) fn official() -> Self {
        OpenAiChat {
            max_tokens_field: "max_completion_tokens",
        }
    }
}

impl WireFormat for OpenAiChat {
    fn rate_limits(&self, headers: &HeaderMap) -> crate::provider::limits::RateLimitInfo {
        limits::rate_limits(headers)
    }

    fn bills_schema_unpublished(&self, config: &ProviderConfig) -> bool {
        use conform_config::StructuredOutput::{JsonSchema, Tool};
        matches!(config.structured_output, JsonSchema | Tool)
    }

    fn tool_use_finish(&self, forced_by_name: bool) -> Option<&'static str> {
        // A call forced by name may finish with `stop`.
        (!forced_by_name).then_some("tool_calls")
    }

    fn answer_dialect(
        &self,
        config: &ProviderConfig,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        use conform_config::StructuredOutput::{JsonSchema, Tool};
        matches!(config.structured_output, JsonSchema | Tool).then_some(&dialect::Strict)
    }

    fn tool_dialect(
        &self,
        _config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        strict.then_some(&dialect::Strict)
    }

    fn server(&self) -> Option<&'static dyn crate::provider::server::WireServer> {
        Some(&server::ChatServer)
    }

    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        encode_chat(call, config, key, self.max_tokens_field)
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        decode_chat(body).map_err(CallError::after_success)
    }

    fn carries_answer(&self, event: &str, data: &Value) -> bool {
        stream::carries_answer(event, data)
    }

    fn error_fields(&self, status: u16, parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        let fields = ErrorFields::of(parsed.and_then(|v| v.get("error")));
        (fields.refine(Some(status)), fields.message)
    }
}

/// The `message`, `code` and `type` of an OpenAI error object (`code` may be null).
#[derive(Debug, Default)]
pub(crate) struct ErrorFields {
    pub message: String,
    pub code: String,
    pub kind: String,
}

impl ErrorFields {
    pub(crate) fn of(err: Option<&Value>) -> Self {
        let field = |name: &str| {
            err.and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        ErrorFields {
            message: field("message"),
            code: field("code"),
            kind: field("type"),
        }
    }

    /// What the body says beyond the status; `None` for an error that arrived inside a
    /// 200 (mid-stream, or a failed Responses object).
    fn refine(&self, status: Option<u16>) -> Option<ErrorKind> {
        let (message, code) = (self.message.as_str(), self.code.as_str());
        let rate_limited = status == Some(429) || code == "rate_limit_exceeded";
        Some(match (code, self.kind.as_str()) {
            ("context_length_exceeded", _) => ErrorKind::ContextLength,
            ("insufficient_quota", _) | (_, "insufficient_quota") => ErrorKind::QuotaExhausted,
            ("invalid_api_key", _) => ErrorKind::Auth,
            // Too large to accept at all (hosts that copy this API send their TPM limit as a
            // 413 with `rate_limit_exceeded`): an account limit, never a wait.
            _ if status == Some(413) => ErrorKind::RequestTooLarge,
            // This request alone exceeds the organisation's tokens-per-minute limit: an
            // account limit that no wait cures, not something the model did.
            _ if rate_limited && error::exceeds_account_limit(message) => {
                ErrorKind::RequestTooLarge
            }
            _ if rate_limited && is_daily_quota(message) => ErrorKind::QuotaExhausted,
            _ if rate_limited => ErrorKind::RateLimited,
            _ if matches!(status, Some(400) | None) && error::mentions_context_length(message) => {
                ErrorKind::ContextLength
            }
            _ if status == Some(404) => ErrorKind::NotFound,
            _ => return None,
        })
    }
}

/// An error object that arrived with a success status: `data: {"error": …}` mid-stream,
/// a proxy's error in a 200, or a Responses `error` event. Without a status, the code and
/// type decide; anything unrecognised is the server's failure, and may be retried.
pub(crate) fn error_in_body(err: &Value) -> CallError {
    let fields = ErrorFields::of(Some(err));
    let kind = fields.refine(None).unwrap_or(match fields.kind.as_str() {
        // vLLM names the type after its exception class.
        "invalid_request_error" | "BadRequestError" => ErrorKind::BadRequest,
        _ => ErrorKind::ServerError,
    });
    let message = if fields.message.is_empty() {
        format!(
            "an error object in a success response: {}",
            error::excerpt(err.to_string().as_bytes())
        )
    } else {
        fields.message
    };
    CallError::new(kind, message)
}

pub(crate) fn encode_chat(
    call: &CallSpec<'_>,
    config: &ProviderConfig,
    key: Option<&Secret>,
    max_tokens_field: &str,
) -> WireRequest {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), super::call_messages(call));
    body.insert("temperature".into(), json!(config.temperature));
    body.insert(max_tokens_field.into(), json!(config.max_output_tokens));
    if let Some(seed) = config.seed {
        body.insert("seed".into(), json!(seed));
    }
    if let Some(c) = call.conversation.filter(|c| !c.tools.is_empty()) {
        body.insert("tools".into(), Value::Array(c.openai_tools()));
        if let Some(choice) = &c.tool_choice {
            body.insert("tool_choice".into(), Value::from(choice.clone()));
        }
        if let Some(parallel) = c.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
    }
    // Built only where sent, and moved in: the schema is the largest part of most
    // requests, and `json!` would copy it once more.
    let json_schema = || {
        let mut inner = Map::new();
        inner.insert("name".into(), Value::from(call.schema_name));
        inner.insert("strict".into(), Value::Bool(true));
        inner.insert("schema".into(), wire_schema(call.schema));
        let mut format = Map::new();
        format.insert("type".into(), Value::from("json_schema"));
        format.insert("json_schema".into(), Value::Object(inner));
        Value::Object(format)
    };
    match config.structured_output {
        _ if !call.wants_json() => {}
        StructuredOutput::JsonSchema => {
            // Always the nested shape: llama.cpp silently ignores a flat `schema`.
            body.insert("response_format".into(), json_schema());
        }
        StructuredOutput::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        // The request declares tools of its own: the answer cannot be one more forced
        // tool, so it is asked for with the schema instead.
        StructuredOutput::Tool if !call.tools().is_empty() => {
            body.insert("response_format".into(), json_schema());
        }
        StructuredOutput::Tool => {
            let schema = wire_schema(call.schema);
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
    body.insert("stream".into(), json!(config.stream));
    if config.stream {
        // Without it a stream carries no token counts at all.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }

    WireRequest {
        url: config.url("/v1/chat/completions"),
        headers: headers(key),
        body: Value::Object(body),
    }
}

/// A JSON body, and the key as a bearer token marked sensitive.
/// Decodes a Chat Completions body: one JSON document, or an event stream of chunks.
pub(crate) fn decode_chat(body: &[u8]) -> Result<Reply, CallError> {
    if super::sse::is_event_stream(body) {
        return stream::fold(body);
    }
    if let Some(parts) = PlainChat::parts(body) {
        return parts.into_reply();
    }
    decode_chat_by_value(body)
}

/// Every body the typed fast path does not take: read as a `Value`, which tolerates
/// odd types, repeated keys, errors in a 200 and tool calls.
fn decode_chat_by_value(body: &[u8]) -> Result<Reply, CallError> {
    let value = parse_body(body)?;
    // A body of the wrong shape was still processed: keep what it said it cost and who
    // served it.
    let text = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_string);
    decode_chat_value(&value).map_err(|e| {
        e.keep_served(
            usage(value.get("usage")),
            text("model"),
            text("system_fingerprint"),
        )
    })
}

fn decode_chat_value(value: &Value) -> Result<Reply, CallError> {
    let invalid = |what: &str| CallError::new(ErrorKind::InvalidResponse, what.to_string());
    if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
        return Err(error_in_body(err));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| invalid("the response has no choices"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| invalid("the first choice has no message"))?;
    let text = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).map(str::to_string);
    ChatParts {
        content: text(message, "content"),
        refusal: text(message, "refusal"),
        tool_calls: message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| calls.iter().filter_map(tool_call).collect())
            .unwrap_or_default(),
        finish_reason: text(choice, "finish_reason"),
        usage: usage(value.get("usage")),
        served_model: text(value, "model"),
        system_fingerprint: text(value, "system_fingerprint"),
    }
    .into_reply()
}

/// The common Chat Completions answer, decoded straight into its fields: no `Value` with
/// a hashed map per object, which was 7 % of a call's CPU. It takes only what it
/// reads exactly as [`decode_chat_by_value`] would: a body with an `error`, tool calls,
/// no choice, a field of another type than these (a number for `content`, a negative or
/// fractional count, an array for an object) or a field given twice fails here, and is
/// then read as a `Value`. One difference is kept: a number too large for a double in a
/// field neither reads (`1e400`) is skipped here, where the `Value` refused the body.
#[derive(serde::Deserialize)]
struct PlainChat {
    error: Option<serde::de::IgnoredAny>,
    choices: Vec<Object<PlainChoice>>,
    usage: Option<Object<PlainUsage>>,
    model: Option<String>,
    system_fingerprint: Option<String>,
}

#[derive(serde::Deserialize)]
struct PlainChoice {
    message: Object<PlainMessage>,
    finish_reason: Option<String>,
}

#[derive(serde::Deserialize)]
struct PlainMessage {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct PlainUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl PlainChat {
    /// What `body` says, when it is the common answer; `None` sends it the long way.
    fn parts(body: &[u8]) -> Option<ChatParts> {
        let Object(chat) = serde_json::from_slice::<Object<PlainChat>>(body).ok()?;
        if chat.error.is_some() {
            return None;
        }
        let Object(choice) = chat.choices.into_iter().next()?;
        let Object(message) = choice.message;
        if message.tool_calls.is_some() {
            return None;
        }
        Some(ChatParts {
            content: message.content,
            refusal: message.refusal,
            tool_calls: Vec::new(),
            finish_reason: choice.finish_reason,
            usage: chat.usage.map_or_else(Usage::default, |Object(u)| Usage {
                prompt_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
            }),
            served_model: chat.model,
            system_fingerprint: chat.system_fingerprint,
        })
    }
}

/// A struct read from a JSON object only. serde's derived structs also accept an array of
/// their fields in order, which a `Value` lookup by name would not find.
struct Object<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// One entry of `message.tool_calls`: `{id, type, function: {name, arguments}}`, or the
/// flat `{name, arguments}` of llama.cpp's older servers; arguments a string of JSON or,
/// from some servers, the object itself. An entry without a name is no call.
fn tool_call(entry: &Value) -> Option<ToolCall> {
    let function = entry.get("function").unwrap_or(entry);
    let name = function.get("name").and_then(Value::as_str)?;
    let id = entry
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_string);
    let arguments = function.get("arguments").cloned().unwrap_or(json!(""));
    // Gemini's OpenAI-compatible API signs a call here.
    let signature = entry
        .pointer("/extra_content/google/thought_signature")
        .and_then(Value::as_str)
        .map(str::to_string);
    Some(ToolCall::from_value(id, name, &arguments).signed(signature))
}

/// Prompt and output token counts from a Chat Completions `usage` object.
pub(crate) fn usage(usage: Option<&Value>) -> Usage {
    let count = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
    Usage {
        prompt_tokens: count("prompt_tokens"),
        output_tokens: count("completion_tokens"),
    }
}

/// What a choice said, gathered from one message or folded from stream chunks.
#[derive(Debug, Default)]
pub(crate) struct ChatParts {
    pub content: Option<String>,
    pub refusal: Option<String>,
    /// Every tool call; the first one's arguments are the answer when output is a forced
    /// tool call.
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Usage,
    pub served_model: Option<String>,
    pub system_fingerprint: Option<String>,
}

impl ChatParts {
    pub(crate) fn into_reply(self) -> Result<Reply, CallError> {
        let raw_finish = self.finish_reason.as_deref();
        let mut kind = match raw_finish {
            Some("stop") => FinishKind::Stop,
            // `tool` is what llama.cpp's older servers said.
            Some("tool_calls" | "function_call" | "tool") => FinishKind::ToolUse,
            Some("length") => FinishKind::Length,
            Some("content_filter") => FinishKind::ContentFilter,
            _ => FinishKind::Other,
        };
        // A refusal keeps `finish_reason: "stop"`; only the missing content tells.
        if self.refusal.is_some() && self.content.is_none() {
            kind = FinishKind::Refusal;
        }
        let first_arguments = self.tool_calls.first().map(|c| c.raw_arguments.clone());
        // vLLM and llama.cpp say `content: ""` beside their calls.
        let content = self
            .content
            .filter(|c| !c.is_empty() || first_arguments.is_none());
        let text = match (content, first_arguments) {
            (Some(text), _) => text,
            (None, Some(args)) => args,
            (None, None) if matches!(kind, FinishKind::Stop | FinishKind::ToolUse) => {
                // A body of the wrong shape was still processed: it keeps what it cost.
                return Err(CallError::new(
                    ErrorKind::InvalidResponse,
                    "the first choice has neither content nor a tool call",
                )
                .keep_served(
                    self.usage,
                    self.served_model,
                    self.system_fingerprint,
                ));
            }
            (None, None) => String::new(),
        };
        Ok(Reply {
            text,
            tool_calls: self.tool_calls,
            finish: Finish::new(kind, raw_finish),
            refusal: self.refusal,
            usage: self.usage,
            served_model: self.served_model,
            system_fingerprint: self.system_fingerprint,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one_of(options: &'static [&'static str]) -> BoxedStrategy<String> {
        proptest::sample::select(options)
            .prop_map(str::to_string)
            .boxed()
    }

    /// Mostly `usual` values, which the typed path takes, sometimes `odd` ones.
    fn mostly(
        usual: &'static [&'static str],
        odd: &'static [&'static str],
    ) -> BoxedStrategy<String> {
        prop_oneof![15 => one_of(usual), 1 => one_of(odd)].boxed()
    }

    /// A JSON object of some of `fields`, in any order, one of them perhaps twice; or
    /// the values of the fields the decoder reads, in its order, as an array: the other
    /// form serde's derived structs accept. The fields the decoder does not read start
    /// with `_`, which is not part of their name.
    fn object(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
        let n = fields.len();
        let names: Vec<&'static str> = fields.iter().map(|f| f.0).collect();
        let members: Vec<_> = fields
            .into_iter()
            .enumerate()
            .map(|(i, (name, value))| {
                proptest::option::weighted(0.9, value.prop_map(move |v| (i, name, v)))
            })
            .collect();
        (
            members.prop_shuffle(),
            any::<proptest::sample::Index>(),
            0..16u8,
        )
            .prop_map(move |(members, pick, form)| {
                let mut present: Vec<_> = members.into_iter().flatten().collect();
                if form == 0 {
                    let read = |i: usize| {
                        present
                            .iter()
                            .find(|m| m.0 == i)
                            .map_or("null", |m| m.2.as_str())
                    };
                    let values: Vec<&str> = (0..n)
                        .filter(|&i| !names[i].starts_with('_'))
                        .map(read)
                        .collect();
                    return format!("[{}]", values.join(","));
                }
                if form == 1 && !present.is_empty() {
                    let again = present[pick.index(present.len())].clone();
                    present.push(again);
                }
                let members: Vec<String> = present
                    .into_iter()
                    .map(|(_, name, value)| format!("\"{}\":{value}", name.trim_start_matches('_')))
                    .collect();
                format!("{{{}}}", members.join(","))
            })
            .boxed()
    }

    fn text() -> BoxedStrategy<String> {
        mostly(
            &[r#""{\"label\":\"ok\"}""#, r#""""#, r#""caf\u00e9""#, "null"],
            &["5", "true", r#"["a"]"#, r#"{"x":1}"#],
        )
    }

    fn body() -> BoxedStrategy<String> {
        let tool_calls = mostly(
            &["null"],
            &[
                "[]",
                r#"[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]"#,
                r#"[{"name":"f","arguments":{"a":1}}]"#,
                "7",
            ],
        );
        let message = object(vec![
            ("_role", mostly(&[r#""assistant""#], &["null"])),
            ("content", text()),
            ("refusal", text()),
            ("tool_calls", tool_calls),
        ]);
        let message = prop_oneof![9 => message, 1 => one_of(&["null", r#""hi""#, "[]"])];
        let finish = mostly(
            &[
                r#""stop""#,
                r#""length""#,
                r#""tool_calls""#,
                r#""content_filter""#,
                "null",
            ],
            &["3"],
        );
        let choice = object(vec![
            ("_index", mostly(&["0"], &["null"])),
            ("message", message.boxed()),
            ("finish_reason", finish),
        ]);
        let choices = proptest::collection::vec(choice, 1..3)
            .prop_map(|c| format!("[{}]", c.join(",")))
            .boxed();
        let choices = prop_oneof![9 => choices, 1 => one_of(&["[]", "null", "{}", "1"])].boxed();
        let count = mostly(
            &["40", "0", "null"],
            &["-1", "4.5", "1e3", r#""40""#, "18446744073709551616"],
        );
        let usage = object(vec![
            ("prompt_tokens", count.clone()),
            ("completion_tokens", count.clone()),
            ("_total_tokens", count),
        ]);
        let usage = prop_oneof![9 => usage, 1 => one_of(&["null", "[]", "2"])].boxed();
        let name = mostly(&[r#""gpt-4o-mini""#, "null"], &["5", r#"["m"]"#]);
        let error = mostly(
            &["null"],
            &[
                r#"{"message":"boom","type":"server_error","code":null}"#,
                r#""overloaded""#,
            ],
        );
        object(vec![
            ("error", error),
            ("choices", choices),
            ("usage", usage),
            ("model", name.clone()),
            ("system_fingerprint", name),
            ("_id", mostly(&[r#""chatcmpl-1""#], &["[1,{\"y\":2.5}]"])),
        ])
    }

    #[test]
    fn the_common_answer_takes_the_typed_path() {
        let body = br#"{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"{\"label\":\"ok\"}"}}],"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}}"#;
        let parts = PlainChat::parts(body).expect("the typed path takes it");
        assert_eq!(parts.content.as_deref(), Some(r#"{"label":"ok"}"#));
        assert_eq!(parts.usage.prompt_tokens, Some(40));
        assert_eq!(decode_chat(body), decode_chat_by_value(body));
    }

    #[test]
    fn an_answer_without_content_keeps_what_it_cost_on_either_path() {
        let body = br#"{"choices":[{"message":{"role":"assistant"},"finish_reason":"stop"}],"model":"m","usage":{"prompt_tokens":7}}"#;
        assert!(PlainChat::parts(body).is_some());
        let error = decode_chat(body).expect_err("no content");
        let served = error.served.as_deref().expect("what it cost");
        assert_eq!(
            (served.model.as_deref(), served.usage.prompt_tokens),
            (Some("m"), Some(7))
        );
        assert_eq!(decode_chat(body), decode_chat_by_value(body));
    }

    #[test]
    fn a_number_out_of_a_doubles_range_in_a_field_not_read_is_skipped() {
        let body =
            br#"{"x":1e400,"choices":[{"finish_reason":"stop","message":{"content":"ok"}}]}"#;
        assert!(decode_chat_by_value(body).is_err());
        assert_eq!(decode_chat(body).map(|r| r.text).as_deref(), Ok("ok"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The typed path decides nothing the `Value` path would decide otherwise.
        #[test]
        fn the_typed_path_agrees_with_the_value_path(body in body()) {
            prop_assert_eq!(decode_chat(body.as_bytes()), decode_chat_by_value(body.as_bytes()), "{}", body);
        }
    }
}
