//! Ollama's chat as a server speaks it (`POST /api/chat`): what simulated Ollama providers
//! answer, in the recorded payloads' shapes, streams as NDJSON.

use serde_json::{Value, json};

use crate::provider::server::{
    Answer, Asked, Call, Response, WireServer, chat_choice, output_tokens, pieces,
};

/// The server side of Ollama's chat.
pub(crate) struct ChatServer;

impl WireServer for ChatServer {
    fn on_route(&self, path: &str) -> bool {
        path == "/api/chat"
    }

    fn read<'a>(&self, body: &'a Value) -> Asked<'a> {
        let schema = body.get("format").filter(|f| f.is_object());
        crate::provider::server::read_messages(body, None, schema, chat_choice(body))
    }

    fn success(&self, a: &Answer<'_>) -> Value {
        let output_tokens = a.content.len().div_ceil(4) as u64;
        json!({
            "model": a.model, "created_at": "2026-06-01T00:00:00.000000Z",
            "message": {"role": "assistant", "content": a.content},
            "done_reason": if a.cut_off { "length" } else { "stop" }, "done": true,
            "total_duration": 20_000_000u64, "load_duration": 1_000_000u64,
            "prompt_eval_count": a.prompt_tokens, "prompt_eval_duration": 5_000_000u64,
            "eval_count": output_tokens, "eval_duration": 14_000_000u64,
        })
    }

    fn success_with_calls(&self, a: &Answer<'_>, calls: &[Call<'_>], _named: bool) -> Value {
        let output_tokens = output_tokens(&a.content, calls);
        let mut message = json!({"role": "assistant", "content": a.content});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        json!({"id": format!("call_{:08}", a.n * 16 + i as u64),
                            "function": {"index": i, "name": c.name, "arguments": c.object()}})
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

    fn stream(&self, a: &Answer<'_>) -> (&'static str, String) {
        let whole = self.success(a);
        let mut out = String::new();
        for piece in &pieces(&a.content) {
            let line = json!({"model": a.model, "created_at": "2026-06-01T00:00:00.000000Z",
                "message": {"role": "assistant", "content": piece}, "done": false});
            out += &format!("{line}\n");
        }
        let mut last = whole.clone();
        last["message"]["content"] = json!("");
        out += &format!("{last}\n");
        ("application/x-ndjson", out)
    }

    fn rate_limited(&self) -> Response {
        Response::json(429, &json!({"error": "too many requests: try again in 1s"}))
            .header("retry-after", "1")
    }

    fn error(&self, status: u16, message: &str) -> Response {
        Response::json(status, &json!({"error": message}))
    }

    /// As recorded: a line that is only an error, after part of the answer.
    fn stream_failure(&self) -> String {
        format!(
            "{}\n",
            json!({"error": "an error was encountered while running the model"})
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_answers_on_its_path_only() {
        assert!(ChatServer.on_route("/api/chat"));
        assert!(!ChatServer.on_route("/api/generate"));
    }
}
