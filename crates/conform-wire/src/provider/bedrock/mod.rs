//! AWS Bedrock Runtime: the Converse API ([`converse`], a codec of its own), or
//! InvokeModel with the model's own body, which for Claude is Anthropic's Messages as the
//! Anthropic module speaks it.
//!
//! - Converse (`api = "converse"`, the default): `POST {base_url}/model/{modelId}/converse`
//!   and `/converse-stream`.
//! - Invoke (`api = "invoke"`): `POST …/model/{modelId}/invoke` and
//!   `/invoke-with-response-stream`, Anthropic's body with `"anthropic_version":
//!   "bedrock-2023-05-31"` and neither `model` (the address names it) nor `stream` (the
//!   operation says it).
//! - The model id (an id, an inference profile or an ARN) is percent-encoded in the path;
//!   SigV4 encodes the path again in what it signs ([`super::auth::sigv4`]).
//! - Streams of either API come in AWS event-stream frames ([`eventstream`], [`stream`]).
//! - Errors ([`errors`]): the exception's name decides, `AccessDeniedException` an
//!   authentication failure (inconclusive), never the model's.
//! - Authentication ([`super::auth`]): a Bedrock API key from `AWS_BEARER_TOKEN_BEDROCK`
//!   as a bearer when it is set (as AWS's SDKs prefer it), else SigV4 (service `bedrock`,
//!   the file's region) with `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and, when set,
//!   `AWS_SESSION_TOKEN`.
//!
//! A wire format decodes a body without its request, so an answer is read by its shape:
//! Converse's has `output` and `stopReason`, Anthropic's says its `type`; a stream's
//! frames say their `:event-type`. Bedrock states no rate limits in its headers.

pub mod converse;
pub mod errors;
pub mod eventstream;
pub(crate) mod stream;

use std::sync::Arc;

use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use super::anthropic::AnthropicMessages;
use super::auth::sigv4::SigV4;
use super::auth::{self, CredentialError, InHeader};
use super::error::CallError;
use super::{CallSpec, Reply, WireFormat, WireRequest, parse_body};
use conform_config::ProviderConfig;
use conform_config::cloud::CloudApi;
use conform_config::conversation::{Message, Problem};
use conform_config::secret::Secret;

/// The Messages version Bedrock takes in the body.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The name SigV4 signs Bedrock Runtime's requests for.
pub const SERVICE: &str = "bedrock";

/// The environment variables credentials are read from, as AWS's SDKs read them.
pub const BEARER_TOKEN: &str = "AWS_BEARER_TOKEN_BEDROCK";
/// The access key's id, for SigV4.
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// The access key's secret.
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The session token that temporary credentials come with.
pub const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// The media type of an event stream.
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// AWS Bedrock Runtime, Converse or InvokeModel as the provider's `api` says.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bedrock;

fn api(config: &ProviderConfig) -> CloudApi {
    config.cloud.api.unwrap_or(CloudApi::Converse)
}

impl WireFormat for Bedrock {
    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        _key: Option<&Secret>,
    ) -> WireRequest {
        let (body, operation) = match (api(config), config.stream) {
            (CloudApi::Converse, false) => (converse::body(call, config), "converse"),
            (CloudApi::Converse, true) => (converse::body(call, config), "converse-stream"),
            (CloudApi::Invoke, stream) => (
                invoke_body(AnthropicMessages.encode(call, config, None).body),
                if stream {
                    "invoke-with-response-stream"
                } else {
                    "invoke"
                },
            ),
        };
        let mut headers = super::json_headers(None);
        let accept = if config.stream {
            EVENT_STREAM
        } else {
            "application/json"
        };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        let model = super::azure::percent_encode(&config.model);
        WireRequest {
            url: config.url(&format!("/model/{model}/{operation}")),
            headers,
            body,
        }
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        let value = parse_body(body).map_err(CallError::after_success)?;
        match converse::is_converse(&value) || value.get("type").is_none() {
            true => converse::decode(&value).map_err(|e| {
                e.keep_served(converse::usage(value.get("usage")), None, None)
                    .after_success()
            }),
            false => AnthropicMessages.decode(body),
        }
    }

    fn decode_stream(&self, body: &[u8]) -> Result<Reply, CallError> {
        let start = body.iter().position(|b| !b.is_ascii_whitespace());
        match start.map(|at| body[at]) {
            // One document: a server that answered the stream with a whole answer.
            Some(b'{') => self.decode(body),
            _ => stream::fold(body).map_err(CallError::after_success),
        }
    }

    fn first_token_end(&self, body: &[u8]) -> Option<usize> {
        stream::first_answer_end(body)
    }

    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        errors::classify(status, headers, body)
    }

    fn tool_use_finish(&self, _forced_by_name: bool) -> Option<&'static str> {
        // Converse's stopReason and Anthropic's stop_reason alike.
        Some("tool_use")
    }

    fn conversation_problems(&self, messages: &[Message]) -> Vec<Problem> {
        super::conversation::system_kept_apart(messages, "Bedrock")
    }

    fn answer_dialect(&self, config: &ProviderConfig) -> Option<&'static dyn super::Dialect> {
        match api(config) {
            CloudApi::Invoke => AnthropicMessages.answer_dialect(config),
            // Converse's own subset is not published per model.
            CloudApi::Converse => None,
        }
    }

    fn tool_dialect(
        &self,
        config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn super::Dialect> {
        match api(config) {
            CloudApi::Invoke => AnthropicMessages.tool_dialect(config, strict),
            CloudApi::Converse => None,
        }
    }

    /// A Bedrock API key when `AWS_BEARER_TOKEN_BEDROCK` is set, else SigV4 with the
    /// access key (and session token) the environment holds.
    fn credentials(
        &self,
        config: &ProviderConfig,
        _key: Option<&Secret>,
        env: &dyn auth::Environment,
    ) -> Result<auth::Credentials, CredentialError> {
        if let Some(token) = env.var(BEARER_TOKEN) {
            return Ok(Some(Arc::new(InHeader::bearer(Secret::new(token)))));
        }
        let (Some(id), Some(secret)) = (env.var(ACCESS_KEY_ID), env.var(SECRET_ACCESS_KEY)) else {
            return Err(CredentialError(format!(
                "provider `{}` signs with AWS credentials, and none are set: export {ACCESS_KEY_ID} and {SECRET_ACCESS_KEY} (and {SESSION_TOKEN} for temporary ones), or {BEARER_TOKEN}",
                config.name
            )));
        };
        let region = config.cloud.region.as_deref().unwrap_or_default();
        let token = env.var(SESSION_TOKEN).map(Secret::new);
        let signer = SigV4::new(id, Secret::new(secret), token, region, SERVICE);
        Ok(Some(Arc::new(signer)))
    }
}

/// Anthropic's body as InvokeModel takes it.
fn invoke_body(body: Value) -> Value {
    let Value::Object(fields) = body else {
        return body;
    };
    let mut out = Map::with_capacity(fields.len());
    out.insert("anthropic_version".into(), json!(ANTHROPIC_VERSION));
    out.extend(
        fields
            .into_iter()
            .filter(|(name, _)| name != "model" && name != "stream"),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_variables_are_the_ones_a_file_is_checked_for() {
        let described = conform_config::Kind::Bedrock.describe();
        let environment = described.cloud.unwrap().environment;
        assert_eq!(
            environment,
            [&[BEARER_TOKEN][..], &[ACCESS_KEY_ID, SECRET_ACCESS_KEY]]
        );
    }

    #[test]
    fn invoke_sends_anthropics_body_as_bedrock_takes_it() {
        let body = invoke_body(json!({"model": "m", "max_tokens": 5, "stream": true,
            "messages": []}));
        assert_eq!(
            body,
            json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": []})
        );
    }
}
