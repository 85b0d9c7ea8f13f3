//! Google Gemini, Developer API (`POST /{v1beta|v1}/models/{model}:generateContent`,
//! key in `x-goog-api-key`).
//!
//! Structured output is `generationConfig.responseMimeType: application/json` with the
//! schema in `responseJsonSchema` (JSON Schema, a documented keyword subset) or
//! `responseSchema` (an OpenAPI 3.0 subset: upper-case types, `nullable`; it rejects
//! `additionalProperties`, `$ref`, `const` … with a 400 "Unknown name"). The text is
//! the concatenation of the first candidate's parts that are not `thought: true`.
//!
//! A blocked prompt is a 200 with no candidates and a `promptFeedback`: it decodes to a
//! [`Reply`] that finished with [`FinishKind::ContentFilter`] and no text, since the
//! provider answered and its answer is "no" — a conformance failure of this provider on
//! this case, not a transport error to retry.
//!
//! Errors are `{"error": {"code", "message", "status", "details"}}`. An invalid key is a
//! 400 `INVALID_ARGUMENT` with reason `API_KEY_INVALID` (an auth failure); a 429
//! `RESOURCE_EXHAUSTED` is a per-day quota (not worth waiting for) or a per-minute one,
//! which its `QuotaFailure.violations[].quotaId` says.
//!
//! With `stream = true` the call goes to `:streamGenerateContent?alt=sse` and the chunks
//! are folded by [`stream`].

pub(crate) mod dialect;
pub(crate) mod server;
pub(crate) mod stream;

use std::time::Duration;

use reqwest::header::HeaderName;
use serde_json::{Map, Value, json};

use super::count::{self, Count, CountRequest, Counted};
use super::error::is_daily_quota;
use super::error::{self, CallError, ErrorKind, mentions_context_length};
use super::wire_schema;
use super::{CallSpec, Finish, FinishKind, Reply, ToolCall, Usage, WireFormat, WireRequest};
use conform_config::conversation::{Conversation, Message, Role, ToolChoice};
use conform_config::provider::GeminiSchemaField;
use conform_config::secret::Secret;
use conform_config::{ProviderConfig, StructuredOutput};

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GeminiGenerateContent;

impl WireFormat for GeminiGenerateContent {
    /// `POST …/models/{model}:countTokens`, with `contents` alone, or the whole
    /// `generateContentRequest` when the request has a system instruction or tools
    /// (`{"totalTokens": N}`); a response schema is not counted, so a request holding one
    /// is counted as a lower bound.
    fn count_request(&self, sent: &WireRequest, config: &ProviderConfig) -> Option<CountRequest> {
        let only_contents = sent
            .body
            .as_object()
            .is_some_and(|b| b.keys().all(|k| k == "contents" || k == "generationConfig"));
        let body = if only_contents {
            Value::Object(count::keep(&sent.body, &["contents"]))
        } else {
            let mut inner = count::keep(
                &sent.body,
                &["contents", "systemInstruction", "tools", "toolConfig"],
            );
            let model = config.model.trim_start_matches("models/");
            inner.insert("model".into(), json!(format!("models/{model}")));
            json!({"generateContentRequest": inner})
        };
        Some(CountRequest {
            url: count_url(&sent.url),
            headers: sent.headers.clone(),
            body,
        })
    }

    fn count_answer(
        &self,
        _step: usize,
        answer: &Value,
        sent: &WireRequest,
        _config: &ProviderConfig,
    ) -> Result<Counted, count::CountError> {
        let schema_sent = sent.body.get("generationConfig").is_some_and(|g| {
            g.get("responseJsonSchema").is_some() || g.get("responseSchema").is_some()
        });
        Ok(Counted::Tokens(Count {
            tokens: count::integer(answer, "totalTokens")?,
            exact: !schema_sent,
        }))
    }

    fn conversation_problems(
        &self,
        messages: &[Message],
    ) -> Vec<conform_config::conversation::Problem> {
        crate::provider::conversation::system_kept_apart(messages, "Gemini")
    }

    fn answer_dialect(
        &self,
        config: &ProviderConfig,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        use conform_config::StructuredOutput::{JsonSchema, Tool};
        matches!(config.structured_output, JsonSchema | Tool).then(|| field_dialect(config))
    }

    fn tool_dialect(
        &self,
        config: &ProviderConfig,
        _strict: bool,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        Some(field_dialect(config))
    }

    fn server(&self) -> Option<&'static dyn crate::provider::server::WireServer> {
        Some(&server::GenerateServer)
    }

    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        let options = config.gemini_options();
        let schema = match options.schema_field {
            GeminiSchemaField::ResponseJsonSchema => wire_schema(call.schema),
            GeminiSchemaField::ResponseSchema => openapi_schema(&wire_schema(call.schema)),
        };
        let mut body = Map::new();
        let contents = match call.conversation {
            Some(c) => Value::Array(contents(c.turns())),
            None => json!([{"role": "user", "parts": [{"text": call.prompt.user}]}]),
        };
        body.insert("contents".into(), contents);
        if let Some(system) = call.system() {
            body.insert(
                "systemInstruction".into(),
                json!({"parts": [{"text": system}]}),
            );
        }
        if let Some(c) = call.conversation.filter(|c| !c.tools.is_empty()) {
            declare_tools(c, options.schema_field, &mut body);
        }
        let generation = generation_config(call, config, options.schema_field, schema, &mut body);
        body.insert("generationConfig".into(), Value::Object(generation));

        let headers = super::json_headers(key.map(|k| {
            (
                HeaderName::from_static("x-goog-api-key"),
                k.expose().to_string(),
            )
        }));
        let model = config
            .model
            .strip_prefix("models/")
            .unwrap_or(&config.model);
        // A stream is another method, and `alt=sse` makes it server-sent events (without
        // it the stream is one JSON array that only parses once it is whole).
        let method = if config.stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        WireRequest {
            url: config.url(&format!(
                "/{}/models/{model}:{method}",
                options.api_version.as_str()
            )),
            headers,
            body: Value::Object(body),
        }
    }

    fn reply(&self, document: &Value) -> Result<Reply, CallError> {
        decode_response(document)
    }

    fn error_event(&self, event: &Value) -> Option<CallError> {
        let (kind, message, code) = error_object(event)?;
        let mut e = CallError::new(kind.unwrap_or(ErrorKind::ServerError), message);
        e.status = code;
        Some(e)
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

    fn error_fields(&self, _status: u16, parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        match parsed.and_then(error_object) {
            Some((kind, message, _)) => (kind, message),
            None => (None, String::new()),
        }
    }

    fn advise(&self, classified: &mut CallError) {
        if classified.kind == ErrorKind::BadRequest
            && classified.message.contains("response_schema")
        {
            classified.message.push_str(
                " (responseSchema is an OpenAPI subset: `conform check` lists what it rejects; or set [gemini] schema_field = \"responseJsonSchema\")",
            );
        }
    }

    /// Google's own `RetryInfo`, where the headers say nothing.
    fn retry_hint(&self, parsed: Option<&Value>) -> Option<Duration> {
        parsed.and_then(retry_delay)
    }
}

/// `(kind, message, code)` of a Google RPC error object; the kind is `None` when the
/// canonical status says nothing the HTTP status does not.
pub(super) fn error_object(value: &Value) -> Option<(Option<ErrorKind>, String, Option<u16>)> {
    let err = value.get("error").filter(|e| e.is_object())?;
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let code = err
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let status = err
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let details = err.get("details").and_then(Value::as_array);
    let reason_is_key = details.into_iter().flatten().any(|d| {
        d.get("@type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with("google.rpc.ErrorInfo"))
            && d.get("reason")
                .and_then(Value::as_str)
                .is_some_and(|r| r.starts_with("API_KEY_"))
    });
    let kind = match status {
        _ if reason_is_key => Some(ErrorKind::Auth),
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => Some(ErrorKind::Auth),
        "NOT_FOUND" => Some(ErrorKind::NotFound),
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE"
            if mentions_context_length(&message) =>
        {
            Some(ErrorKind::ContextLength)
        }
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => Some(ErrorKind::BadRequest),
        "RESOURCE_EXHAUSTED" if error::exceeds_account_limit(&message) => {
            Some(ErrorKind::RequestTooLarge)
        }
        "RESOURCE_EXHAUSTED" if needs_a_person(err, &message) => Some(ErrorKind::QuotaExhausted),
        "RESOURCE_EXHAUSTED" => Some(ErrorKind::RateLimited),
        "UNAVAILABLE" => Some(ErrorKind::Overloaded),
        "DEADLINE_EXCEEDED" => Some(ErrorKind::Timeout),
        "INTERNAL" | "UNKNOWN" | "CANCELLED" | "ABORTED" => Some(ErrorKind::ServerError),
        _ => None,
    };
    Some((kind, message, code))
}

/// A quota that waiting cannot cure within a run: a per-day one, or a limit of zero
/// (the project has no quota for this model or region at all).
fn needs_a_person(err: &Value, message: &str) -> bool {
    let details = err.get("details").and_then(Value::as_array);
    let per_day = |id: &str| id.to_ascii_lowercase().contains("perday");
    let violations = details
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("violations").and_then(Value::as_array))
        .flatten();
    let daily_violation = violations
        .filter_map(|v| v.get("quotaId").and_then(Value::as_str))
        .any(per_day);
    let mut metadata = details
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("metadata"));
    let daily_or_zero_limit = metadata.any(|m| {
        m.get("quota_limit")
            .and_then(Value::as_str)
            .is_some_and(per_day)
            || m.get("quota_limit_value").and_then(Value::as_str) == Some("0")
    });
    daily_violation || daily_or_zero_limit || is_daily_quota(message)
}

/// `google.rpc.RetryInfo.retryDelay` ("27s", "0.5s").
fn retry_delay(value: &Value) -> Option<Duration> {
    let details = value.pointer("/error/details")?.as_array()?;
    details.iter().find_map(|d| {
        let delay = d.get("retryDelay")?.as_str()?.strip_suffix('s')?;
        let secs: f64 = delay.trim().parse().ok()?;
        (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
    })
}

pub(super) fn decode_response(value: &Value) -> Result<Reply, CallError> {
    let invalid = |what: &str| CallError::new(ErrorKind::InvalidResponse, what.to_string());
    if let Some((kind, message, _)) = error_object(value) {
        return Err(CallError::new(
            kind.unwrap_or(ErrorKind::ServerError),
            message,
        ));
    }
    let usage = usage_of(value);
    let served_model = model_of(value);
    let candidate = value
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let Some(candidate) = candidate else {
        let feedback = value
            .get("promptFeedback")
            .ok_or_else(|| invalid("the response has neither candidates nor promptFeedback"))?;
        let text = |name: &str| feedback.get(name).and_then(Value::as_str);
        let reason = text("blockReason").unwrap_or("no blockReason given");
        let detail = text("blockReasonMessage")
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        return Ok(Reply {
            text: String::new(),
            tool_calls: Vec::new(),
            finish: Finish {
                kind: FinishKind::ContentFilter,
                raw: Some(format!("prompt blocked ({reason}){detail}")),
            },
            refusal: None,
            usage,
            served_model,
            system_fingerprint: None,
        });
    };
    let parts = candidate
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for part in parts {
        if part.get("thought").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(t) = part.get("text").and_then(Value::as_str) {
            text.push_str(t);
        } else if let Some(call) = part.get("functionCall") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let id = call.get("id").and_then(Value::as_str).map(str::to_string);
            // A call without arguments may leave `args` out.
            let args = call.get("args").cloned().unwrap_or(json!({}));
            // A sibling of `functionCall` on the part, to be sent back with it.
            let signature = part
                .get("thoughtSignature")
                .and_then(Value::as_str)
                .map(str::to_string);
            tool_calls.push(ToolCall::from_value(id, name, &args).signed(signature));
        }
    }
    let text = Reply::text_or_first_arguments(text, &tool_calls);
    let raw = candidate.get("finishReason").and_then(Value::as_str);
    let kind = match raw {
        Some("STOP") => FinishKind::Stop,
        Some("MAX_TOKENS") => FinishKind::Length,
        Some(
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION",
        ) => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    };
    Ok(Reply {
        text,
        tool_calls,
        finish: Finish::new(kind, raw),
        refusal: None,
        usage,
        served_model,
        system_fingerprint: None,
    })
}

pub(super) fn usage_of(value: &Value) -> Usage {
    let meta = value.get("usageMetadata");
    let count = |name: &str| meta.and_then(|u| u.get(name)).and_then(Value::as_u64);
    // Thinking tokens are billed as output but left out of candidatesTokenCount.
    let output_tokens =
        count("candidatesTokenCount").map(|c| c + count("thoughtsTokenCount").unwrap_or(0));
    Usage {
        prompt_tokens: count("promptTokenCount"),
        output_tokens,
    }
}

pub(super) fn model_of(value: &Value) -> Option<String> {
    value
        .get("modelVersion")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The conversation after its system prompt, as `contents`: the assistant is `model`,
/// its calls `functionCall` parts (arguments an object) after its text; the results of
/// one turn's calls are `functionResponse` parts of one user content, named by their tool,
/// with `{"output": …}` or, for a failed tool, `{"error": …}` (a result that is JSON is
/// sent as that JSON, other text as a string); a user message that follows them is added
/// to that content as a text part.
fn contents(turns: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(turns.len());
    let mut responses: Vec<Value> = Vec::new();
    for m in turns {
        match m.role {
            Role::Tool => {
                let text = m.content_str();
                let value = serde_json::from_str::<Value>(text).unwrap_or(json!(text));
                let key = if m.is_error { "error" } else { "output" };
                responses.push(json!({"functionResponse": {
                    "name": m.name.clone().unwrap_or_default(), "response": {key: value}}}));
            }
            Role::User if !responses.is_empty() => {
                responses.push(json!({"text": m.content_str()}));
                out.push(json!({"role": "user", "parts": std::mem::take(&mut responses)}));
            }
            role => {
                if !responses.is_empty() {
                    out.push(json!({"role": "user", "parts": std::mem::take(&mut responses)}));
                }
                let role = if role == Role::Assistant {
                    "model"
                } else {
                    "user"
                };
                let mut parts = Vec::with_capacity(m.tool_calls.len() + 1);
                if !m.content_str().is_empty() || m.tool_calls.is_empty() {
                    parts.push(json!({"text": m.content_str()}));
                }
                for call in &m.tool_calls {
                    let mut part = json!({"functionCall": {"name": call.function.name,
                        "args": Value::Object(call.arguments_object().unwrap_or_default())}});
                    // Gemini 3 refuses a function-calling turn without its signature.
                    if let Some(signature) = call.thought_signature() {
                        part["thoughtSignature"] = json!(signature);
                    }
                    parts.push(part);
                }
                out.push(json!({"role": role, "parts": parts}));
            }
        }
    }
    if !responses.is_empty() {
        out.push(json!({"role": "user", "parts": responses}));
    }
    out
}

/// The `countTokens` URL beside a `generateContent` (or streaming) one.
fn count_url(generate: &str) -> String {
    let base = generate.split('?').next().unwrap_or(generate);
    match base.rsplit_once(':') {
        Some((model, _)) => format!("{model}:countTokens"),
        None => base.to_string(),
    }
}

/// The dialect of the `generationConfig` field the provider sends its schemas in.
fn field_dialect(config: &ProviderConfig) -> &'static dyn crate::provider::Dialect {
    match config.gemini_options().schema_field {
        GeminiSchemaField::ResponseSchema => &dialect::ResponseSchema,
        GeminiSchemaField::ResponseJsonSchema => &dialect::ResponseJsonSchema,
    }
}

/// JSON Schema to Gemini's OpenAPI `Schema`, translating only what translates
/// faithfully: lower-case types to upper-case, `["T", "null"]` to `nullable`, and the
/// properties' order to `propertyOrdering` (Gemini otherwise orders them alphabetically).
/// Every other keyword passes through unchanged, so what `responseSchema` rejects is
/// rejected loudly by the provider (and listed by `conform check` before any call).
pub(crate) fn openapi_schema(schema: &Value) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        match (key.as_str(), value) {
            ("type", Value::String(t)) => {
                out.insert(key.clone(), json!(t.to_ascii_uppercase()));
            }
            ("type", Value::Array(types)) => {
                let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                match non_null.as_slice() {
                    [Value::String(t)] if non_null.len() < types.len() => {
                        out.insert(key.clone(), json!(t.to_ascii_uppercase()));
                        out.insert("nullable".into(), json!(true));
                    }
                    _ => {
                        out.insert(key.clone(), value.clone());
                    }
                }
            }
            ("properties", Value::Object(props)) => {
                let translated: Map<String, Value> = props
                    .iter()
                    .map(|(name, s)| (name.clone(), openapi_schema(s)))
                    .collect();
                if !map.contains_key("propertyOrdering") {
                    out.insert(
                        "propertyOrdering".into(),
                        json!(props.keys().collect::<Vec<_>>()),
                    );
                }
                out.insert(key.clone(), Value::Object(translated));
            }
            ("items", Value::Object(_)) => {
                out.insert(key.clone(), openapi_schema(value));
            }
            ("anyOf", Value::Array(variants)) => {
                out.insert(
                    key.clone(),
                    Value::Array(variants.iter().map(openapi_schema).collect()),
                );
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// The field of a function declaration its parameters' schema goes in.
fn parameters_field(field: GeminiSchemaField) -> &'static str {
    match field {
        GeminiSchemaField::ResponseJsonSchema => "parametersJsonSchema",
        GeminiSchemaField::ResponseSchema => "parameters",
    }
}

/// The conversation's own tools, and how they may be called, in Gemini's words.
fn declare_tools(c: &Conversation, field: GeminiSchemaField, body: &mut Map<String, Value>) {
    let parameters = parameters_field(field);
    let declarations: Vec<Value> = c
        .tools
        .iter()
        .map(|t| {
            let schema = match field {
                GeminiSchemaField::ResponseJsonSchema => wire_schema(t.parameters()),
                GeminiSchemaField::ResponseSchema => openapi_schema(&wire_schema(t.parameters())),
            };
            json!({"name": t.name(), "description": t.description(), parameters: schema})
        })
        .collect();
    body.insert(
        "tools".into(),
        json!([{"functionDeclarations": declarations}]),
    );
    if let Some(choice) = &c.tool_choice {
        let config = match choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Tool(name) => {
                json!({"mode": "ANY", "allowedFunctionNames": [name]})
            }
        };
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": config}),
        );
    }
}

/// `generationConfig`: the sampling settings and the structured output asked for (a
/// forced tool call goes in `body`'s tools instead).
fn generation_config(
    call: &CallSpec<'_>,
    config: &ProviderConfig,
    schema_field: GeminiSchemaField,
    schema: Value,
    body: &mut Map<String, Value>,
) -> Map<String, Value> {
    let mut generation = Map::new();
    generation.insert("temperature".into(), json!(config.temperature));
    if let Some(seed) = config.seed {
        generation.insert("seed".into(), json!(seed));
    }
    generation.insert("maxOutputTokens".into(), json!(config.max_output_tokens));
    let field = match schema_field {
        GeminiSchemaField::ResponseJsonSchema => "responseJsonSchema",
        GeminiSchemaField::ResponseSchema => "responseSchema",
    };
    match config.structured_output {
        _ if !call.wants_json() => {}
        StructuredOutput::JsonSchema => {
            generation.insert("responseMimeType".into(), json!("application/json"));
            generation.insert(field.into(), schema);
        }
        // The request declares tools of its own: the answer cannot be one more forced
        // function, so it is asked for with the schema instead.
        StructuredOutput::Tool if !call.tools().is_empty() => {
            generation.insert("responseMimeType".into(), json!("application/json"));
            generation.insert(field.into(), schema);
        }
        StructuredOutput::JsonObject => {
            generation.insert("responseMimeType".into(), json!("application/json"));
        }
        StructuredOutput::Tool => {
            let parameters = parameters_field(schema_field);
            body.insert(
                "tools".into(),
                json!([{"functionDeclarations": [{"name": call.schema_name,
                    "description": "Return the answer", parameters: schema}]}]),
            );
            body.insert(
                "toolConfig".into(),
                json!({"functionCallingConfig": {"mode": "ANY",
                    "allowedFunctionNames": [call.schema_name]}}),
            );
        }
        StructuredOutput::Prompt => {}
    }
    generation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openapi_translation_is_faithful_or_absent() {
        let schema = json!({"type": "object", "properties": {
            "b": {"type": ["string", "null"]}, "a": {"type": "array", "items": {"type": "integer"}},
            "c": {"type": ["string", "number"]}}, "required": ["b"], "additionalProperties": false});
        let out = openapi_schema(&schema);
        assert_eq!(out["type"], "OBJECT");
        assert_eq!(out["propertyOrdering"], json!(["b", "a", "c"]));
        assert_eq!(
            out["properties"]["b"],
            json!({"type": "STRING", "nullable": true})
        );
        assert_eq!(out["properties"]["a"]["items"]["type"], "INTEGER");
        // Not translatable: passed through for the provider (and the pre-flight) to name.
        assert_eq!(out["properties"]["c"]["type"], json!(["string", "number"]));
        assert_eq!(out["additionalProperties"], false);
    }

    #[test]
    fn retry_delay_is_read_from_retry_info() {
        let v = json!({"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": "27s"}]}});
        assert_eq!(retry_delay(&v), Some(Duration::from_secs(27)));
    }
}
