//! Anthropic Messages as a server speaks it (`POST /v1/messages`): what simulated
//! Anthropic providers answer, in the recorded payloads' shapes.

use serde_json::{Value, json};

use crate::provider::server::{
    Answer, Asked, Call, Choice, Response, WireServer, first_at, output_tokens, pieces,
};

/// The server side of Anthropic Messages.
pub(crate) struct MessagesServer;

impl WireServer for MessagesServer {
    fn on_route(&self, path: &str) -> bool {
        path == "/v1/messages"
    }

    fn read<'a>(&self, body: &'a Value) -> Asked<'a> {
        let tool = body.pointer("/tool_choice/name").and_then(Value::as_str);
        let schema = first_at(
            body,
            &["/output_config/format/schema", "/tools/0/input_schema"],
        );
        let choice = match body.pointer("/tool_choice/type").and_then(Value::as_str) {
            Some("none") => Choice::None,
            Some("any") => Choice::Required,
            Some("tool") => Choice::Named,
            _ => Choice::Auto,
        };
        crate::provider::server::read_messages(body, tool, schema, choice)
    }

    fn success(&self, a: &Answer<'_>) -> Value {
        let output_tokens = a.content.len().div_ceil(4) as u64;
        let input: Option<Value> = a
            .tool
            .and_then(|_| serde_json::from_str(&a.content).ok())
            .filter(Value::is_object);
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

    fn success_with_calls(&self, a: &Answer<'_>, calls: &[Call<'_>], _named: bool) -> Value {
        let output_tokens = output_tokens(&a.content, calls);
        let mut blocks = Vec::new();
        if !a.content.is_empty() {
            blocks.push(json!({"type": "text", "text": a.content}));
        }
        for (i, c) in calls.iter().enumerate() {
            blocks.push(
                json!({"type": "tool_use", "id": format!("toolu_sim{:016}{i:04}", a.n),
                "name": c.name, "input": c.object(), "caller": {"type": "direct"}}),
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

    fn stream(&self, a: &Answer<'_>) -> (&'static str, String) {
        let whole = self.success(a);
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
        for piece in &pieces(&a.content) {
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

    fn rate_limited(&self) -> Response {
        Response::json(
            429,
            &json!({"type": "error", "error": {"type": "rate_limit_error",
                "message": "This request would exceed your organization's rate limit of 3 requests per minute. Please try again later."},
                "request_id": "req_sim"}),
        )
        .header("retry-after", "1")
        .header("x-should-retry", "true")
    }

    fn error(&self, status: u16, message: &str) -> Response {
        Response::json(
            status,
            &json!({"type": "error",
                "error": {"type": "invalid_request_error", "message": message}, "request_id": "req_sim"}),
        )
    }

    fn failure(&self, status: u16, message: &str) -> Response {
        let kind = match status {
            529 => "overloaded_error",
            429 => "rate_limit_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        let failed = Response::json(
            status,
            &json!({"type": "error", "error": {"type": kind, "message": message},
                "request_id": "req_sim"}),
        );
        // As recorded: a 429 and a 529 say the request may be retried.
        match status {
            429 | 529 => failed.header("x-should-retry", "true"),
            _ => failed,
        }
    }

    fn context_exceeded(&self) -> Response {
        self.error(400, "prompt is too long: 9000 tokens > 8192 maximum")
    }

    /// The stream opens with `message_start`, the block's start and a ping.
    fn stream_cut(&self, answer: &Answer<'_>) -> (&'static str, String) {
        crate::provider::server::cut_stream(self, answer, 3)
    }

    /// What Anthropic sends when it is overloaded in the middle of an answer.
    fn stream_failure(&self) -> String {
        let event = json!({"type": "error", "error": {"details": null, "type": "overloaded_error", "message": "Overloaded"}});
        format!("event: error\ndata: {event}\n\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_answers_on_its_path_and_limits_with_its_headers() {
        assert!(MessagesServer.on_route("/v1/messages"));
        assert!(!MessagesServer.on_route("/v1/messages/count_tokens"));
        let limited = MessagesServer.rate_limited();
        assert_eq!(limited.status, 429);
        assert!(limited.headers.contains(&("x-should-retry", "true")));
        assert!(limited.headers.contains(&("retry-after", "1")));
    }

    /// The refusal of a prefill is the recorded one, byte for byte but its request id.
    #[test]
    fn a_prefill_is_refused_as_recorded() {
        let recorded: Value = serde_json::from_str(include_str!(
            "../../../../../tests/wire/anthropic_error_400_prefill_not_supported.json"
        ))
        .unwrap();
        let refused = MessagesServer.prefill_rejected();
        assert_eq!(
            refused.status as u64,
            recorded["status_code"].as_u64().unwrap()
        );
        let mut body: Value = serde_json::from_slice(&refused.body).unwrap();
        let mut want = recorded["body"].clone();
        body["request_id"] = Value::Null;
        want["request_id"] = Value::Null;
        assert_eq!(body, want);
        let prefilled = json!({"model": "m", "max_tokens": 9,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "{"}]});
        assert!(MessagesServer.is_prefill(&prefilled));
        let (_, open) = MessagesServer.stream_unterminated(&Answer {
            content: "abcdefgh".into(),
            cut_off: false,
            model: "m",
            n: 1,
            prompt_tokens: 3,
            tool: None,
        });
        assert!(
            open.trim_end().ends_with('}') && open.contains("\"output_tokens\""),
            "{open}"
        );
    }

    /// What a mock upstream behind a gateway sends: the vendor's own client reads a cut
    /// stream as truncated, a stream ending in the failure event as failed, the whole
    /// stream as the answer, and each failure status as the error it is.
    #[test]
    fn a_cut_or_failed_stream_reads_as_the_vendors_client_reads_it() {
        let wire = crate::provider::anthropic::AnthropicMessages;
        crate::provider::server::testing::read_as_its_client_reads_them(&MessagesServer, &wire);
    }
}
