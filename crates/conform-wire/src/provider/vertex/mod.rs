//! Google Vertex AI: Gemini as the Gemini module speaks it, and Claude as the Anthropic
//! module speaks it, on Vertex's address with a Google access token. One wire each, two
//! addresses and two authentication schemes: nothing of either codec is copied here.
//!
//! - The publisher follows from the model: a `claude-…` model (`claude-3-5-haiku@20241022`)
//!   is Anthropic's, any other Google's.
//! - Gemini: `POST {base_url}/v1/projects/{project}/locations/{region}/publishers/google/
//!   models/{model}:generateContent` (`:streamGenerateContent?alt=sse`), the Developer
//!   API's body, `[gemini]`'s schema field; its finish reasons (`SAFETY`, `RECITATION`: a
//!   content filter; `MAX_TOKENS`: a length cut-off), errors (`RESOURCE_EXHAUSTED` 429 is
//!   waited out unless the quota is a day's) and streams are the Gemini module's.
//! - Claude: `…/publishers/anthropic/models/{model}:rawPredict` (`:streamRawPredict`),
//!   Anthropic's Messages body with `"anthropic_version": "vertex-2023-10-16"` and no
//!   `model`; its answers, errors and event streams are the Anthropic module's, and an
//!   error Vertex itself sends (a quota, a token refused) is read as Google's.
//! - Authentication ([`super::auth`]): the service account whose key file
//!   `GOOGLE_APPLICATION_CREDENTIALS` names ([`super::auth::google`]), or with `token_env`
//!   a ready access token, either as `Authorization: Bearer`.
//!
//! A wire format decodes a body without its request, so an answer is read by its shape:
//! Anthropic's messages, errors and events say their `type`, Gemini's never do. And the
//! finish word a tool call must end with differs between the two publishers, so Vertex
//! names none ([`WireFormat::tool_use_finish`]): the tool checks read the calls themselves.

use std::path::Path;
use std::sync::Arc;

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::anthropic::AnthropicMessages;
use super::auth::google::ServiceAccount;
use super::auth::{self, CredentialError, InHeader};
use super::error::CallError;
use super::gemini::GeminiGenerateContent;
use super::{CallSpec, Reply, WireFormat, WireRequest};
use conform_config::ProviderConfig;
use conform_config::conversation::{Message, Problem};
use conform_config::secret::Secret;

/// The Messages version Vertex takes in the body.
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// The variable naming a service account's key file, as Google's libraries read it.
pub(crate) const CREDENTIALS_FILE: &str = "GOOGLE_APPLICATION_CREDENTIALS";

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Vertex;

/// Whose model a provider file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publisher {
    Google,
    Anthropic,
}

impl Publisher {
    pub(crate) fn of(model: &str) -> Publisher {
        match model.starts_with("claude") {
            true => Publisher::Anthropic,
            false => Publisher::Google,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Publisher::Google => "google",
            Publisher::Anthropic => "anthropic",
        }
    }
}

/// `…/publishers/{publisher}/models/{model}:{method}` on the provider's project and region.
fn url(config: &ProviderConfig, publisher: Publisher, method: &str) -> String {
    let segment = |s: Option<&str>| encoded(s.unwrap_or_default());
    config.url(&format!(
        "/v1/projects/{}/locations/{}/publishers/{}/models/{}:{method}",
        segment(config.cloud.project.as_deref()),
        segment(config.cloud.region.as_deref()),
        publisher.name(),
        encoded(&config.model),
    ))
}

/// A path segment: unreserved characters and a model version's `@` as they are.
fn encoded(segment: &str) -> String {
    super::azure::percent_encode(segment).replace("%40", "@")
}

impl WireFormat for Vertex {
    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        _key: Option<&Secret>,
    ) -> WireRequest {
        let publisher = Publisher::of(&config.model);
        let (mut request, method) = match (publisher, config.stream) {
            (Publisher::Google, stream) => (
                GeminiGenerateContent.encode(call, config, None),
                match stream {
                    true => "streamGenerateContent?alt=sse",
                    false => "generateContent",
                },
            ),
            (Publisher::Anthropic, stream) => {
                let mut request = AnthropicMessages.encode(call, config, None);
                request.body = vertex_body(request.body);
                (
                    request,
                    if stream {
                        "streamRawPredict"
                    } else {
                        "rawPredict"
                    },
                )
            }
        };
        request.url = url(config, publisher, method);
        request.headers = super::json_headers(None);
        request
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        match anthropic_shaped(body) {
            true => AnthropicMessages.decode(body),
            false => GeminiGenerateContent.decode(body),
        }
    }

    fn decode_stream(&self, body: &[u8]) -> Result<Reply, CallError> {
        match anthropic_shaped(body) {
            true => AnthropicMessages.decode_stream(body),
            false => GeminiGenerateContent.decode_stream(body),
        }
    }

    fn first_token_end(&self, body: &[u8]) -> Option<usize> {
        (AnthropicMessages.first_token_end(body))
            .or_else(|| GeminiGenerateContent.first_token_end(body))
    }

    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        match anthropic_shaped(body) {
            true => AnthropicMessages.classify(status, headers, body),
            false => GeminiGenerateContent.classify(status, headers, body),
        }
    }

    fn conversation_problems(&self, messages: &[Message]) -> Vec<Problem> {
        super::conversation::system_kept_apart(messages, "Vertex AI")
    }

    fn answer_dialect(&self, config: &ProviderConfig) -> Option<&'static dyn super::Dialect> {
        match Publisher::of(&config.model) {
            Publisher::Google => GeminiGenerateContent.answer_dialect(config),
            Publisher::Anthropic => AnthropicMessages.answer_dialect(config),
        }
    }

    fn tool_dialect(
        &self,
        config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn super::Dialect> {
        match Publisher::of(&config.model) {
            Publisher::Google => GeminiGenerateContent.tool_dialect(config, strict),
            Publisher::Anthropic => AnthropicMessages.tool_dialect(config, strict),
        }
    }

    /// A ready token from `token_env`, else the service account whose key file
    /// `GOOGLE_APPLICATION_CREDENTIALS` names.
    fn credentials(
        &self,
        config: &ProviderConfig,
        key: Option<&Secret>,
        env: &dyn auth::Environment,
    ) -> Result<auth::Credentials, CredentialError> {
        if let Some(var) = &config.cloud.token_env {
            let token = key.cloned().ok_or_else(|| {
                CredentialError(format!(
                    "provider `{}` reads its access token from ${var}, which is not set",
                    config.name
                ))
            })?;
            return Ok(Some(Arc::new(InHeader::bearer(token))));
        }
        let file = env.var(CREDENTIALS_FILE).ok_or_else(|| {
            CredentialError(format!(
                "provider `{}` finds its service account in the key file ${CREDENTIALS_FILE} names, and it is not set (or set token_env to a variable holding an access token)",
                config.name
            ))
        })?;
        Ok(Some(Arc::new(ServiceAccount::from_file(Path::new(&file))?)))
    }
}

/// Anthropic's body as Vertex takes it: `anthropic_version` first, and no `model` (the
/// address names it).
fn vertex_body(body: Value) -> Value {
    let Value::Object(fields) = body else {
        return body;
    };
    let mut out = Map::with_capacity(fields.len());
    out.insert("anthropic_version".into(), json!(ANTHROPIC_VERSION));
    out.extend(fields.into_iter().filter(|(name, _)| name != "model"));
    Value::Object(out)
}

/// Whether a body is Anthropic's: an event stream of named events, or a document that
/// says its `type` (`message`, `error`); Gemini's documents never do.
fn anthropic_shaped(body: &[u8]) -> bool {
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    let head = &body[start..];
    if head.starts_with(b"event:") {
        return true;
    }
    serde_json::from_slice::<Value>(body)
        .ok()
        .is_some_and(|v| v.get("type").is_some_and(Value::is_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publisher_follows_from_the_model() {
        assert_eq!(
            Publisher::of("claude-3-5-haiku@20241022"),
            Publisher::Anthropic
        );
        assert_eq!(Publisher::of("gemini-2.0-flash-001"), Publisher::Google);
        assert_eq!(
            encoded("claude-3-5-haiku@20241022"),
            "claude-3-5-haiku@20241022"
        );
    }

    #[test]
    fn an_answer_is_read_by_its_shape() {
        assert!(anthropic_shaped(br#"{"type": "message", "content": []}"#));
        assert!(anthropic_shaped(
            br#"{"type": "error", "error": {"type": "overloaded_error"}}"#
        ));
        assert!(anthropic_shaped(b"event: message_start\ndata: {}\n\n"));
        assert!(!anthropic_shaped(br#"{"candidates": []}"#));
        assert!(!anthropic_shaped(
            br#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}}"#
        ));
        assert!(!anthropic_shaped(b"data: {\"candidates\": []}\n\n"));
    }
}
