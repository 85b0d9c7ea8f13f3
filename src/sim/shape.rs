//! Each vendor's wire, as a simulated provider speaks it: where the request keeps the
//! prompt and the output limit, and the exact shape of its answers and errors (those of
//! the recorded payloads in `tests/wire/`).

use serde_json::{Value, json};

use super::tools::{Choice, SimCall};
use crate::config::Kind;

/// Whether `path` is where a simulation of `wire` answers: `/v1/messages`,
/// `/v1(beta)?/models/MODEL:(generateContent|streamGenerateContent)`, `/api/chat` or
/// `/v1/chat/completions`.
pub(super) fn on_route(wire: Kind, path: &str) -> bool {
    match wire {
        Kind::Anthropic => path == "/v1/messages",
        Kind::Gemini => {
            let Some(rest) = path
                .strip_prefix("/v1beta/models/")
                .or_else(|| path.strip_prefix("/v1/models/"))
            else {
                return false;
            };
            match rest.split_once(':') {
                Some((model, method)) => {
                    !model.is_empty()
                        && !model.contains('/')
                        && matches!(method, "generateContent" | "streamGenerateContent")
                }
                None => false,
            }
        }
        Kind::Ollama => path == "/api/chat",
        // `openai-responses` is refused as a simulation wire when the config loads.
        Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses | Kind::Sim => {
            path == "/v1/chat/completions"
        }
    }
}

/// An HTTP answer of a simulation, before it is sent.
#[derive(Debug)]
pub(super) struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, &'static str)>,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: body.to_string().into_bytes(),
        }
    }

    pub fn raw(status: u16, body: String, content_type: &'static str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            content_type,
            body: body.into_bytes(),
        }
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Reply {
        self.headers.push((name, value));
        self
    }
}

/// What the simulation reads from a request.
#[derive(Debug, Default)]
pub(super) struct Asked<'a> {
    /// Characters of system and user text, for a plausible token count.
    pub prompt_chars: usize,
    pub output_limit: Option<u64>,
    /// The tool the request forces, if any.
    pub tool: Option<&'a str>,
    /// The schema the answer is held to, wherever the vendor's request carries it.
    pub schema: Option<&'a Value>,
    /// The text of every user message, in order: what identifies a case whichever wire
    /// carried it (tool results, which vendors put in user turns, are left out).
    pub user_texts: Vec<&'a str>,
    /// Whether, and how, tools may be called.
    pub choice: Choice,
}

pub(super) fn read(wire: Kind, body: &Value) -> Asked<'_> {
    let str_at = |pointer: &str| body.pointer(pointer).and_then(Value::as_str);
    match wire {
        Kind::Gemini => {
            let user_texts: Vec<&str> = body
                .get("contents")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|c| c["role"] == "user")
                .flat_map(|c| c["parts"].as_array().into_iter().flatten())
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            let system = str_at("/systemInstruction/parts/0/text").map_or(0, str::len);
            let choice = match str_at("/toolConfig/functionCallingConfig/mode") {
                Some("NONE") => Choice::None,
                Some("ANY")
                    if body
                        .pointer("/toolConfig/functionCallingConfig/allowedFunctionNames")
                        .is_some() =>
                {
                    Choice::Named
                }
                Some("ANY") => Choice::Required,
                _ => Choice::Auto,
            };
            Asked {
                prompt_chars: system + user_texts.iter().map(|t| t.len()).sum::<usize>(),
                output_limit: body
                    .pointer("/generationConfig/maxOutputTokens")
                    .and_then(Value::as_u64),
                tool: str_at("/toolConfig/functionCallingConfig/allowedFunctionNames/0"),
                schema: [
                    "/generationConfig/responseJsonSchema",
                    "/generationConfig/responseSchema",
                    "/tools/0/functionDeclarations/0/parametersJsonSchema",
                    "/tools/0/functionDeclarations/0/parameters",
                ]
                .iter()
                .find_map(|p| body.pointer(p)),
                user_texts,
                choice,
            }
        }
        _ => {
            let messages = body.get("messages").and_then(Value::as_array);
            // A user turn is a string, or (Anthropic) blocks of which the text ones count.
            let user_texts: Vec<&str> = messages
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .flat_map(|m| match &m["content"] {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(blocks) => blocks
                        .iter()
                        .filter(|b| b["type"] == "text")
                        .filter_map(|b| b["text"].as_str())
                        .collect(),
                    _ => Vec::new(),
                })
                .collect();
            let chars: usize = messages
                .map(|m| {
                    m.iter()
                        .filter_map(|m| m["content"].as_str())
                        .map(str::len)
                        .sum()
                })
                .unwrap_or(0);
            let system = str_at("/system").map_or(0, str::len);
            let output_limit = [
                "/max_tokens",
                "/max_completion_tokens",
                "/options/num_predict",
            ]
            .iter()
            .find_map(|p| body.pointer(p).and_then(Value::as_u64));
            let tool = match wire {
                Kind::Anthropic => str_at("/tool_choice/name"),
                Kind::Ollama => None,
                _ => str_at("/tool_choice/function/name"),
            };
            let schema = match wire {
                Kind::Anthropic => ["/output_config/format/schema", "/tools/0/input_schema"]
                    .iter()
                    .find_map(|p| body.pointer(p)),
                Kind::Ollama => body.get("format").filter(|f| f.is_object()),
                _ => [
                    "/response_format/json_schema/schema",
                    "/tools/0/function/parameters",
                ]
                .iter()
                .find_map(|p| body.pointer(p)),
            };
            let choice = match (wire, body.get("tool_choice")) {
                (Kind::Anthropic, Some(c)) => match c["type"].as_str() {
                    Some("none") => Choice::None,
                    Some("any") => Choice::Required,
                    Some("tool") => Choice::Named,
                    _ => Choice::Auto,
                },
                (_, Some(Value::String(s))) if s == "none" => Choice::None,
                (_, Some(Value::String(s))) if s == "required" => Choice::Required,
                (_, Some(Value::Object(_))) => Choice::Named,
                _ => Choice::Auto,
            };
            Asked {
                prompt_chars: chars + system,
                output_limit,
                tool,
                schema,
                user_texts,
                choice,
            }
        }
    }
}

/// One simulated answer, before it takes a vendor's shape.
#[derive(Debug)]
pub(super) struct Answer<'a> {
    pub content: String,
    /// Cut off at the output limit rather than finished.
    pub cut_off: bool,
    pub model: &'a str,
    /// The request's sequence number, for ids.
    pub n: u64,
    pub prompt_tokens: u64,
    /// The forced tool, when the content is its JSON input.
    pub tool: Option<&'a str>,
}

/// A 200 body in the vendor's shape, carrying `calls` (a request-shaped case's tool
/// calls) after the content; `named` says the request forced a tool by name (OpenAI
/// then finishes with `stop`).
pub(super) fn success_with_calls(
    wire: Kind,
    a: &Answer<'_>,
    calls: &[SimCall],
    named: bool,
) -> Value {
    let output_tokens = (a.content.len() + calls.iter().map(|c| c.raw.len()).sum::<usize>())
        .div_ceil(4)
        .max(1) as u64;
    // An object as Anthropic, Gemini and Ollama carry arguments; a drift that made them
    // something else (double-encoded, cut off) goes as the string it became.
    let object = |c: &SimCall| {
        serde_json::from_str::<Value>(&c.raw)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::String(c.raw.clone()))
    };
    match wire {
        Kind::Anthropic => {
            let mut blocks = Vec::new();
            if !a.content.is_empty() {
                blocks.push(json!({"type": "text", "text": a.content}));
            }
            for (i, c) in calls.iter().enumerate() {
                blocks.push(
                    json!({"type": "tool_use", "id": format!("toolu_sim{:016}{i:04}", a.n),
                    "name": c.name, "input": object(c), "caller": {"type": "direct"}}),
                );
            }
            let stop = match (a.cut_off, calls.is_empty()) {
                (true, _) => "max_tokens",
                (false, false) => "tool_use",
                (false, true) => "end_turn",
            };
            json!({
                "model": a.model, "id": format!("msg_sim{:020}", a.n), "type": "message",
                "role": "assistant", "content": blocks, "stop_reason": stop,
                "stop_sequence": null,
                "usage": {"input_tokens": a.prompt_tokens, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0, "output_tokens": output_tokens,
                    "service_tier": "standard"},
            })
        }
        Kind::Gemini => {
            let mut parts = Vec::new();
            if !a.content.is_empty() {
                parts.push(json!({"text": a.content}));
            }
            for c in calls {
                parts.push(json!({"functionCall": {"name": c.name, "args": object(c)}}));
            }
            json!({
                "candidates": [{"content": {"parts": parts, "role": "model"},
                    "finishReason": if a.cut_off { "MAX_TOKENS" } else { "STOP" }, "index": 0}],
                "usageMetadata": {"promptTokenCount": a.prompt_tokens,
                    "candidatesTokenCount": output_tokens,
                    "totalTokenCount": a.prompt_tokens + output_tokens},
                "modelVersion": a.model,
                "responseId": format!("sim{:020}", a.n),
            })
        }
        Kind::Ollama => {
            let mut message = json!({"role": "assistant", "content": a.content});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(
                    calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            json!({"id": format!("call_{:08}", a.n * 16 + i as u64),
                                "function": {"index": i, "name": c.name, "arguments": object(c)}})
                        })
                        .collect(),
                );
            }
            json!({
                "model": a.model, "created_at": "2026-06-01T00:00:00.000000Z",
                "message": message,
                "done_reason": if a.cut_off { "length" } else { "stop" }, "done": true,
                "prompt_eval_count": a.prompt_tokens, "eval_count": output_tokens,
            })
        }
        Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses | Kind::Sim => {
            let content = if a.content.is_empty() && !calls.is_empty() {
                Value::Null
            } else {
                json!(a.content)
            };
            let mut message = json!({"role": "assistant", "content": content, "refusal": null});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(
                    calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            json!({"id": format!("call_sim{}_{i}", a.n), "type": "function",
                                "function": {"name": c.name, "arguments": c.raw}})
                        })
                        .collect(),
                );
            }
            let finish = match (a.cut_off, calls.is_empty(), named) {
                (true, _, _) => "length",
                (false, false, false) => "tool_calls",
                _ => "stop",
            };
            json!({
                "id": format!("chatcmpl-sim-{}", a.n),
                "object": "chat.completion",
                "created": 1_780_000_000u64 + a.n,
                "model": a.model,
                "system_fingerprint": "fp_sim0001",
                "choices": [{"index": 0, "message": message, "logprobs": null,
                             "finish_reason": finish}],
                "usage": {"prompt_tokens": a.prompt_tokens, "completion_tokens": output_tokens,
                          "total_tokens": a.prompt_tokens + output_tokens},
            })
        }
    }
}

/// A 200 body in the vendor's shape.
pub(super) fn success(wire: Kind, a: &Answer<'_>) -> Value {
    let output_tokens = a.content.len().div_ceil(4) as u64;
    let input: Option<Value> = a
        .tool
        .and_then(|_| serde_json::from_str(&a.content).ok())
        .filter(Value::is_object);
    match wire {
        Kind::Anthropic => {
            let block = match (&input, a.tool) {
                (Some(input), Some(name)) => json!({"type": "tool_use",
                    "id": format!("toolu_sim{:020}", a.n), "name": name, "input": input,
                    "caller": {"type": "direct"}}),
                _ => json!({"type": "text", "text": a.content}),
            };
            let stop = match (a.cut_off, &input) {
                (true, _) => "max_tokens",
                (false, Some(_)) => "tool_use",
                (false, None) => "end_turn",
            };
            json!({
                "model": a.model, "id": format!("msg_sim{:020}", a.n), "type": "message",
                "role": "assistant", "content": [block], "stop_reason": stop,
                "stop_sequence": null,
                "usage": {"input_tokens": a.prompt_tokens, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                    "output_tokens": output_tokens, "service_tier": "standard",
                    "inference_geo": "not_available"},
            })
        }
        Kind::Gemini => {
            let part = match (&input, a.tool) {
                (Some(args), Some(name)) => json!({"functionCall": {"name": name, "args": args}}),
                _ => json!({"text": a.content}),
            };
            json!({
                "candidates": [{"content": {"parts": [part], "role": "model"},
                    "finishReason": if a.cut_off { "MAX_TOKENS" } else { "STOP" }, "index": 0}],
                "usageMetadata": {"promptTokenCount": a.prompt_tokens,
                    "candidatesTokenCount": output_tokens,
                    "totalTokenCount": a.prompt_tokens + output_tokens,
                    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": a.prompt_tokens}]},
                "modelVersion": a.model,
                "responseId": format!("sim{:020}", a.n),
            })
        }
        Kind::Ollama => json!({
            "model": a.model, "created_at": "2026-06-01T00:00:00.000000Z",
            "message": {"role": "assistant", "content": a.content},
            "done_reason": if a.cut_off { "length" } else { "stop" }, "done": true,
            "total_duration": 20_000_000u64, "load_duration": 1_000_000u64,
            "prompt_eval_count": a.prompt_tokens, "prompt_eval_duration": 5_000_000u64,
            "eval_count": output_tokens, "eval_duration": 14_000_000u64,
        }),
        // `openai-responses` is refused as a simulation wire when the config loads.
        Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses | Kind::Sim => {
            let message = match (&input, a.tool) {
                (Some(_), Some(name)) => json!({"role": "assistant", "content": null,
                    "tool_calls": [{"id": format!("call_sim{}", a.n), "type": "function",
                        "function": {"name": name, "arguments": a.content}}],
                    "refusal": null}),
                _ => json!({"role": "assistant", "content": a.content, "refusal": null}),
            };
            json!({
                "id": format!("chatcmpl-sim-{}", a.n),
                "object": "chat.completion",
                "created": 1_780_000_000u64 + a.n,
                "model": a.model,
                "system_fingerprint": "fp_sim0001",
                "choices": [{"index": 0, "message": message, "logprobs": null,
                             "finish_reason": if a.cut_off { "length" } else { "stop" }}],
                "usage": {"prompt_tokens": a.prompt_tokens, "completion_tokens": output_tokens,
                          "total_tokens": a.prompt_tokens + output_tokens},
            })
        }
    }
}

/// Whether the request asks for a stream: `stream: true`, or Gemini's streaming method.
pub(super) fn wants_stream(wire: Kind, path: &str, body: &Value) -> bool {
    match wire {
        Kind::Gemini => path.ends_with(":streamGenerateContent"),
        _ => body.get("stream").and_then(Value::as_bool) == Some(true),
    }
}

/// The answer as the vendor streams it (the shapes of the recorded transcripts in
/// `tests/wire/`): the text in pieces of a few characters, one event or line each, and the
/// vendor's terminal event. Returns the content type and the body.
pub(super) fn stream(wire: Kind, a: &Answer<'_>) -> (&'static str, String) {
    let whole = success(wire, a);
    let pieces = pieces(&a.content);
    let sse = |events: Vec<Value>| -> String {
        events.iter().map(|e| format!("data: {e}\n\n")).collect()
    };
    match wire {
        Kind::Anthropic => {
            let named = |e: Value| {
                let name = e["type"].as_str().unwrap_or("message").to_string();
                format!("event: {name}\ndata: {e}\n\n")
            };
            let mut skeleton = whole.clone();
            let block = whole["content"][0].clone();
            skeleton["content"] = json!([]);
            skeleton["stop_reason"] = Value::Null;
            skeleton["usage"]["output_tokens"] = json!(1);
            let tool = block["type"] == "tool_use";
            let mut start_block = block.clone();
            if tool {
                start_block["input"] = json!({});
            } else {
                start_block["text"] = json!("");
            }
            let mut out = named(json!({"type": "message_start", "message": skeleton}));
            out += &named(
                json!({"type": "content_block_start", "index": 0, "content_block": start_block}),
            );
            out += &named(json!({"type": "ping"}));
            for piece in &pieces {
                let delta = if tool {
                    json!({"type": "input_json_delta", "partial_json": piece})
                } else {
                    json!({"type": "text_delta", "text": piece})
                };
                out += &named(json!({"type": "content_block_delta", "index": 0, "delta": delta}));
            }
            out += &named(json!({"type": "content_block_stop", "index": 0}));
            out += &named(json!({"type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": null},
                "usage": whole["usage"]}));
            out += &named(json!({"type": "message_stop"}));
            ("text/event-stream", out)
        }
        Kind::Gemini => {
            let candidate = &whole["candidates"][0];
            let call = candidate["content"]["parts"][0]
                .get("functionCall")
                .is_some();
            let mut events = Vec::new();
            let texts: Vec<Value> = if call {
                vec![candidate["content"]["parts"][0].clone()]
            } else {
                pieces.iter().map(|p| json!({"text": p})).collect()
            };
            let n = texts.len();
            for (i, part) in texts.into_iter().enumerate() {
                let mut chunk = json!({"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
                    "usageMetadata": {"promptTokenCount": a.prompt_tokens, "totalTokenCount": a.prompt_tokens},
                    "modelVersion": a.model, "responseId": whole["responseId"]});
                if i + 1 == n {
                    chunk["candidates"][0]["finishReason"] = candidate["finishReason"].clone();
                    chunk["usageMetadata"] = whole["usageMetadata"].clone();
                }
                events.push(chunk);
            }
            ("text/event-stream", sse(events))
        }
        Kind::Ollama => {
            let mut out = String::new();
            for piece in &pieces {
                let line = json!({"model": a.model, "created_at": "2026-06-01T00:00:00.000000Z",
                    "message": {"role": "assistant", "content": piece}, "done": false});
                out += &format!("{line}\n");
            }
            let mut last = whole.clone();
            last["message"]["content"] = json!("");
            out += &format!("{last}\n");
            ("application/x-ndjson", out)
        }
        // `openai-responses` is refused as a simulation wire when the config loads.
        Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses | Kind::Sim => {
            let choice = &whole["choices"][0];
            let tool = choice["message"]
                .get("tool_calls")
                .and_then(|t| t.get(0))
                .cloned();
            let chunk = |delta: Value, finish: Value| {
                json!({"id": whole["id"], "object": "chat.completion.chunk", "created": whole["created"],
                    "model": a.model, "system_fingerprint": whole["system_fingerprint"],
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
                    "usage": null})
            };
            // As recorded: a tool call's stream opens with `content: null`.
            let opening = match &tool {
                Some(_) => json!({"role": "assistant", "content": null}),
                None => json!({"role": "assistant", "content": "", "refusal": null}),
            };
            let mut events = vec![chunk(opening, Value::Null)];
            for (i, piece) in pieces.iter().enumerate() {
                let delta = match &tool {
                    Some(call) if i == 0 => json!({"tool_calls": [{"index": 0, "id": call["id"],
                        "type": "function", "function": {"name": call["function"]["name"], "arguments": piece}}]}),
                    Some(_) => {
                        json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                    }
                    None => json!({"content": piece}),
                };
                events.push(chunk(delta, Value::Null));
            }
            events.push(chunk(json!({}), choice["finish_reason"].clone()));
            let mut usage = chunk(json!({}), Value::Null);
            usage["choices"] = json!([]);
            usage["usage"] = whole["usage"].clone();
            events.push(usage);
            let mut out = sse(events);
            out.push_str("data: [DONE]\n\n");
            ("text/event-stream", out)
        }
    }
}

/// The text in pieces of about four characters, as tokens come.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let pieces: Vec<String> = chars.chunks(4).map(|c| c.iter().collect()).collect();
    if pieces.is_empty() {
        vec![String::new()]
    } else {
        pieces
    }
}

/// A 429 a wait cures, the vendor's way: `retry-after` where the vendor sends it, a
/// `RetryInfo` for Gemini.
pub(super) fn rate_limited(wire: Kind) -> Reply {
    let json = |body: Value| Reply::json(429, &body);
    match wire {
        Kind::Anthropic => json(json!({"type": "error", "error": {"type": "rate_limit_error",
                "message": "This request would exceed your organization's rate limit of 3 requests per minute. Please try again later."},
                "request_id": "req_sim"}))
        .header("retry-after", "1")
        .header("x-should-retry", "true"),
        Kind::Gemini => json(json!({"error": {"code": 429,
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                     "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]}})),
        Kind::Ollama => json(json!({"error": "too many requests: try again in 1s"}))
            .header("retry-after", "1"),
        // `openai-responses` is refused as a simulation wire when the config loads.
        Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses | Kind::Sim => json(json!({"error": {
                "message": "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.",
                "type": "requests", "param": null, "code": "rate_limit_exceeded"}}))
        .header("retry-after", "1"),
    }
}

/// A 4xx in the vendor's error shape.
pub(super) fn error(wire: Kind, status: u16, message: &str) -> Reply {
    let body = match wire {
        Kind::Anthropic => json!({"type": "error",
            "error": {"type": "invalid_request_error", "message": message}, "request_id": "req_sim"}),
        Kind::Gemini => json!({"error": {"code": status, "message": message,
            "status": "INVALID_ARGUMENT"}}),
        Kind::Ollama => json!({"error": message}),
        // `openai-responses` is refused as a simulation wire when the config loads.
        Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses | Kind::Sim => {
            json!({"error": {
            "message": message, "type": "invalid_request_error", "param": null, "code": null}})
        }
    };
    Reply::json(status, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes the wiremock matchers of the simulations used to match, as regular
    /// expressions, now matched without one.
    #[test]
    fn each_wire_answers_on_its_vendor_path_only() {
        let gemini = [
            ("/v1beta/models/gemini-2.5-flash:generateContent", true),
            ("/v1/models/gemini-2.5-flash:streamGenerateContent", true),
            ("/v1beta/models/:generateContent", false),
            ("/v1beta/models/a/b:generateContent", false),
            ("/v1beta/models/m:countTokens", false),
            ("/v1beta/models/m", false),
            ("/v2/models/m:generateContent", false),
        ];
        for (path, answered) in gemini {
            assert_eq!(on_route(Kind::Gemini, path), answered, "{path}");
        }
        assert!(on_route(Kind::Anthropic, "/v1/messages"));
        assert!(!on_route(Kind::Anthropic, "/v1/messages/count_tokens"));
        assert!(on_route(Kind::Ollama, "/api/chat"));
        assert!(!on_route(Kind::Ollama, "/api/generate"));
        assert!(on_route(Kind::OpenaiCompatible, "/v1/chat/completions"));
        assert!(!on_route(Kind::OpenaiCompatible, "/v1/chat/completions/x"));
        assert!(!on_route(Kind::Openai, "/v1/responses"));
    }

    #[test]
    fn a_rate_limit_carries_the_vendor_headers() {
        let anthropic = rate_limited(Kind::Anthropic);
        assert_eq!(anthropic.status, 429);
        assert!(anthropic.headers.contains(&("x-should-retry", "true")));
        assert!(anthropic.headers.contains(&("retry-after", "1")));
        assert!(rate_limited(Kind::Gemini).headers.is_empty());
        let openai = error(Kind::OpenaiCompatible, 400, "bad");
        assert_eq!(openai.content_type, "application/json");
        let body: Value = serde_json::from_slice(&openai.body).unwrap_or_default();
        assert_eq!(body["error"]["message"], "bad");
    }
}
