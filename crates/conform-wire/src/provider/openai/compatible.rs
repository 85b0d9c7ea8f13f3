//! OpenAI-compatible servers: vLLM, llama.cpp `llama-server`, and the like.
//!
//! They accept the Chat Completions request, but differ where failover breaks:
//! structured output must use the nested `response_format.json_schema.schema` (llama.cpp
//! silently ignores the flat `schema`; vLLM ≥ 0.12 silently ignores `guided_json`), the
//! output limit is `max_tokens`, and error bodies come in several shapes: vLLM's nested
//! `{"error": {…, "code": 400}}` with an integer code, its older flat
//! `{"object": "error", "message", "type": "BadRequestError", "code": 400}`, and
//! llama.cpp's `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`.

use serde_json::Value;

use super::OpenAiChat;
use super::error::{CallError, ErrorKind, mentions_context_length};
use super::{CallSpec, Reply, WireFormat, WireRequest};
use crate::provider::count::{self, Count, CountError, CountRequest, Counted};
use crate::provider::error::is_daily_quota;
use conform_config::ProviderConfig;
use conform_config::secret::Secret;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OpenAiCompatible;

const CHAT: OpenAiChat = OpenAiChat {
    max_tokens_field: "max_tokens",
};

impl WireFormat for OpenAiCompatible {
    fn rate_limits(
        &self,
        headers: &reqwest::header::HeaderMap,
    ) -> crate::provider::limits::RateLimitInfo {
        super::limits::rate_limits(headers)
    }

    fn tool_use_finish(&self, forced_by_name: bool) -> Option<&'static str> {
        OpenAiChat::official().tool_use_finish(forced_by_name)
    }

    /// llama.cpp's `llama-server`: `POST /apply-template` renders the messages, with the
    /// tools, through the model's chat template (`{"prompt": …}`), then `POST /tokenize`
    /// tokenizes that text with special tokens parsed (`{"tokens": […]}`): the count its
    /// chat endpoint reports as `usage.prompt_tokens` for the same request.
    fn count_request(&self, sent: &WireRequest, config: &ProviderConfig) -> Option<CountRequest> {
        let body = count::keep(
            &sent.body,
            &["messages", "tools", "tool_choice", "parallel_tool_calls"],
        );
        Some(CountRequest {
            url: config.url("/apply-template"),
            headers: sent.headers.clone(),
            body: Value::Object(body),
        })
    }

    fn count_answer(
        &self,
        step: usize,
        answer: &Value,
        sent: &WireRequest,
        config: &ProviderConfig,
    ) -> Result<Counted, CountError> {
        if step == 0 {
            let prompt =
                answer
                    .get("prompt")
                    .and_then(Value::as_str)
                    .ok_or(CountError::Missing {
                        endpoint: "/apply-template",
                        field: "prompt",
                    })?;
            return Ok(Counted::Then(CountRequest {
                url: config.url("/tokenize"),
                headers: sent.headers.clone(),
                body: serde_json::json!({"content": prompt, "add_special": true, "parse_special": true}),
            }));
        }
        let tokens = answer
            .get("tokens")
            .and_then(Value::as_array)
            .ok_or(CountError::Missing {
                endpoint: "/tokenize",
                field: "tokens",
            })?;
        Ok(Counted::Tokens(Count {
            tokens: tokens.len() as u64,
            exact: true,
        }))
    }

    fn answer_dialect(
        &self,
        config: &ProviderConfig,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        use conform_config::StructuredOutput::{JsonSchema, Tool};
        matches!(config.structured_output, JsonSchema | Tool).then_some(&super::dialect::Strict)
    }

    fn tool_dialect(
        &self,
        _config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn crate::provider::Dialect> {
        strict.then_some(&super::dialect::Strict)
    }

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

    fn carries_answer(&self, event: &str, data: &Value) -> bool {
        CHAT.carries_answer(event, data)
    }

    fn error_fields(&self, status: u16, parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        // Nested `{"error": {...}}` or flat `{"object": "error", ...}`, or `{"error": "..."}`.
        let err = parsed.map(|v| match v.get("error") {
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
                .and_then(|v| v.get("error"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        let (kind, code) = (text("type"), text("code"));
        let refined = match status {
            _ if kind == "exceed_context_size_error" || code == "context_length_exceeded" => {
                Some(ErrorKind::ContextLength)
            }
            400 | 413 if mentions_context_length(&message) => Some(ErrorKind::ContextLength),
            _ if code == "insufficient_quota" || kind == "insufficient_quota" => {
                Some(ErrorKind::QuotaExhausted)
            }
            429 if is_daily_quota(&message) => Some(ErrorKind::QuotaExhausted),
            503 if kind == "unavailable_error" => Some(ErrorKind::Overloaded),
            _ => None,
        };
        (refined, message)
    }
}
