//! Chat Completions as a server speaks it (`POST /v1/chat/completions`): what simulated
//! OpenAI-compatible providers answer, in the recorded payloads' shapes.

use serde_json::{Value, json};

use crate::provider::server::{
    Answer, Asked, Call, Response, WireServer, chat_choice, first_at, output_tokens, pieces, sse,
};

/// The server side of Chat Completions.
pub(crate) struct ChatServer;

impl WireServer for ChatServer {
    fn on_route(&self, path: &str) -> bool {
        path == "/v1/chat/completions"
    }

    fn read<'a>(&self, body: &'a Value) -> Asked<'a> {
        let tool = body
            .pointer("/tool_choice/function/name")
            .and_then(Value::as_str);
        let schema = first_at(
            body,
            &[
                "/response_format/json_schema/schema",
                "/tools/0/function/parameters",
            ],
        );
        crate::provider::server::read_messages(body, tool, schema, chat_choice(body))
    }

    fn success(&self, a: &Answer<'_>) -> Value {
        let output_tokens = a.content.len().div_ceil(4) as u64;
        let input: Option<Value> = a
            .tool
            .and_then(|_| serde_json::from_str(&a.content).ok())
            .filter(Value::is_object);
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

    fn success_with_calls(&self, a: &Answer<'_>, calls: &[Call<'_>], named: bool) -> Value {
        let output_tokens = output_tokens(&a.content, calls);
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
        // A call forced by name finishes with `stop`, as OpenAI's own API does.
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

    fn stream(&self, a: &Answer<'_>) -> (&'static str, String) {
        let whole = self.success(a);
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
        for (i, piece) in pieces(&a.content).iter().enumerate() {
            let delta = match &tool {
                Some(call) if i == 0 => json!({"tool_calls": [{"index": 0, "id": call["id"],
                    "type": "function", "function": {"name": call["function"]["name"], "arguments": piece}}]}),
                Some(_) => json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                None => json!({"content": piece}),
            };
            events.push(chunk(delta, Value::Null));
        }
        events.push(chunk(json!({}), choice["finish_reason"].clone()));
        let mut usage = chunk(json!({}), Value::Null);
        usage["choices"] = json!([]);
        usage["usage"] = whole["usage"].clone();
        events.push(usage);
        let mut out = sse(&events);
        out.push_str("data: [DONE]\n\n");
        ("text/event-stream", out)
    }

    fn rate_limited(&self) -> Response {
        Response::json(
            429,
            &json!({"error": {
                "message": "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.",
                "type": "requests", "param": null, "code": "rate_limit_exceeded"}}),
        )
        .header("retry-after", "1")
    }

    fn error(&self, status: u16, message: &str) -> Response {
        Response::json(
            status,
            &json!({"error": {
                "message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        )
    }

    fn failure(&self, status: u16, message: &str) -> Response {
        let (kind, code) = match status {
            429 => ("requests", json!("rate_limit_exceeded")),
            s if s >= 500 => ("server_error", Value::Null),
            _ => ("invalid_request_error", Value::Null),
        };
        Response::json(
            status,
            &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        )
    }

    fn context_exceeded(&self) -> Response {
        Response::json(
            400,
            &json!({"error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}),
        )
    }

    /// OpenAI's documented rejection by its safety system: `invalid_request_error` with
    /// the code `content_policy_violation`.
    fn content_filtered(&self) -> Response {
        Response::json(
            400,
            &json!({"error": {
                "message": "Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system.",
                "type": "invalid_request_error", "param": null,
                "code": "content_policy_violation"}}),
        )
    }

    /// The stream opens with the role, then the content.
    fn stream_cut(&self, answer: &Answer<'_>) -> (&'static str, String) {
        crate::provider::server::cut_stream(self, answer, 1)
    }

    fn stream_failure(&self) -> String {
        sse(&[
            json!({"error": {"message": "The server had an error while processing your request.",
            "type": "server_error", "param": null, "code": null}}),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_answers_on_its_path_only_and_errors_in_its_shape() {
        assert!(ChatServer.on_route("/v1/chat/completions"));
        assert!(!ChatServer.on_route("/v1/chat/completions/x"));
        assert!(!ChatServer.on_route("/v1/responses"));
        let bad = ChatServer.error(400, "bad");
        assert_eq!(bad.content_type, "application/json");
        let body: Value = serde_json::from_slice(&bad.body).unwrap_or_default();
        assert_eq!(body["error"]["message"], "bad");
    }

    /// A stream with a torn event in its middle still holds every genuine event, in order,
    /// and one event whose data is not JSON; a stream without its terminator ends after
    /// the usage chunk, with no `[DONE]`.
    #[test]
    fn a_malformed_event_is_added_and_an_unterminated_stream_keeps_its_usage() {
        let answer = crate::provider::server::testing::answer();
        let (content_type, whole) = ChatServer.stream(&answer);
        let (_, malformed) = ChatServer.stream_malformed(&answer);
        let events = crate::provider::server::stream_events(content_type, &whole);
        let torn = crate::provider::server::stream_events(content_type, &malformed);
        assert_eq!(torn.len(), events.len() + 1);
        let bad: Vec<&String> = (torn.iter())
            .filter(|e| {
                let data = e.trim().trim_start_matches("data:").trim();
                data != "[DONE]" && serde_json::from_str::<Value>(data).is_err()
            })
            .collect();
        assert_eq!(bad.len(), 1, "{malformed}");
        let good: Vec<&String> = torn.iter().filter(|e| !bad.contains(e)).collect();
        assert_eq!(good, events.iter().collect::<Vec<_>>());
        assert!(malformed.ends_with("data: [DONE]\n\n"));

        let (_, open) = ChatServer.stream_unterminated(&answer);
        assert!(!open.contains("[DONE]"), "{open}");
        assert!(whole.starts_with(&open));
        let last: Value =
            serde_json::from_str(open.trim_end().rsplit("data: ").next().unwrap_or_default())
                .unwrap();
        assert_eq!(last["choices"], serde_json::json!([]));
        assert_eq!(last["usage"]["prompt_tokens"], 24);
        assert!(open.contains("\"finish_reason\":\"stop\""), "{open}");
    }

    /// A request ending with the assistant's turn is a prefill; the refusal is a 400.
    #[test]
    fn a_prefill_is_the_assistants_turn_last() {
        let asked = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
        assert!(!ChatServer.is_prefill(&asked));
        let prefilled = serde_json::json!({"messages": [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "{\"a\""}]});
        assert!(ChatServer.is_prefill(&prefilled));
        let refused = ChatServer.prefill_rejected();
        assert_eq!(refused.status, 400);
        let body: Value = serde_json::from_slice(&refused.body).unwrap();
        assert!(
            (body["error"]["message"].as_str().unwrap())
                .contains("does not support assistant message prefill")
        );
    }

    /// What a mock upstream behind a gateway sends: the vendor's own client reads a cut
    /// stream as truncated, a stream ending in the failure event as failed, the whole
    /// stream as the answer, and each failure status as the error it is.
    #[test]
    fn a_cut_or_failed_stream_reads_as_the_vendors_client_reads_it() {
        use crate::provider::WireFormat;
        let wire = crate::provider::openai::OpenAiChat::official();
        crate::provider::server::testing::read_as_its_client_reads_them(&ChatServer, &wire);
        let refused = ChatServer.content_filtered();
        assert_eq!(refused.status, 400);
        let body: Value = serde_json::from_slice(&refused.body).unwrap_or_default();
        assert_eq!(body["error"]["code"], "content_policy_violation");
        let error = wire.classify(400, &reqwest::header::HeaderMap::new(), &refused.body);
        assert!(!error.kind.retryable(), "{:?}", error.kind);
    }
}
