//! OpenAI-compatible servers: vLLM, llama.cpp `llama-server`, and the like.
//!
//! They accept the Chat Completions request, but differ where failover breaks:
//! structured output must use the nested `response_format.json_schema.schema` (llama.cpp
//! silently ignores the flat `schema`; vLLM ≥ 0.12 silently ignores `guided_json`), the
//! output limit is `max_tokens`, and error bodies come in several shapes: vLLM's nested
//! `{"error": {…, "code": 400}}` with an integer code, its older flat
//! `{"object": "error", "message", "type": "BadRequestError", "code": 400}`, and
//! llama.cpp's `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`.

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::error::{self, CallError, ErrorKind, classify_status, mentions_context_length};
use super::OpenAiChat;
use crate::provider::error::is_daily_quota;
use super::{CallSpec, Reply, WireFormat, WireRequest};
use crate::config::ProviderConfig;
use crate::secret::Secret;

#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiCompatible;

const CHAT: OpenAiChat = OpenAiChat {
    max_tokens_field: "max_tokens",
};

impl WireFormat for OpenAiCompatible {
    fn server(&self) -> Option<&'static dyn crate::provider::server::WireServer> {
        Some(&super::server::ChatServer)
    }

    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest {
        CHAT.encode(call, config, key)
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        CHAT.decode(body)
    }

    fn first_token_end(&self, body: &[u8]) -> Option<usize> {
        CHAT.first_token_end(body)
    }

    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        // Nested `{"error": {...}}` or flat `{"object": "error", ...}`, or `{"error": "..."}`.
        let err = parsed.as_ref().map(|v| match v.get("error") {
            Some(e) if e.is_object() => e,
            _ => v,
        });
        let text = |name: &str| {
            err.and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let message = match text("message") {
            m if !m.is_empty() => m,
            _ => parsed
                .as_ref()
                .and_then(|v| v.get("error"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        let (kind, code) = (text("type"), text("code"));
        let mut classified = classify_status(status, body, message.clone());
        classified.kind = match status {
            _ if kind == "exceed_context_size_error" || code == "context_length_exceeded" => {
                ErrorKind::ContextLength
            }
            400 | 413 if mentions_context_length(&message) => ErrorKind::ContextLength,
            _ if code == "insufficient_quota" || kind == "insufficient_quota" => {
                ErrorKind::QuotaExhausted
            }
            429 if is_daily_quota(&message) => ErrorKind::QuotaExhausted,
            503 if kind == "unavailable_error" => ErrorKind::Overloaded,
            _ => classified.kind,
        };
        if classified.message.is_empty() {
            classified.message = error::excerpt(body);
        }
        classified.server_hints(headers)
    }
}
