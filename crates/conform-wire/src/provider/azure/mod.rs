//! Azure OpenAI: OpenAI Chat Completions ([`super::openai`]'s codec) on a resource's
//! deployment, with Azure's address, authentication, content filter and errors.
//!
//! - Address: with `api_version`, `POST {base_url}/openai/deployments/{deployment}/chat/
//!   completions?api-version=…` and no `model` in the body (the deployment is the model);
//!   without, the v1 API, `POST {base_url}/openai/v1/chat/completions` with the deployment
//!   as `model`. Versions before 2024-09-01 know `max_tokens` and no `stream_options`;
//!   later ones and v1 take `max_completion_tokens` and usage in streams, as OpenAI does.
//! - Authentication ([`super::auth`]): the key as `api-key`, or with `token_env` a
//!   Microsoft Entra ID token as `Authorization: Bearer`.
//! - The content filter ([`filter`]): `finish_reason: "content_filter"`, and what
//!   `content_filter_results` (per choice) and `prompt_filter_results` mark `filtered`, is a
//!   content-filter finish naming the categories (`content_filter`, never `refusal`); a
//!   prompt the filter stops is a 400 `content_filter` error, [`ErrorKind::PromptFiltered`]:
//!   the provider's answer on this case, not a configuration error. Streams carry the
//!   same results in their chunks, a first chunk with no choices and the prompt's.
//! - Limits: `x-ratelimit-*` as OpenAI's reader reads them (Azure states the remaining
//!   requests and tokens; a 429's `retry-after-ms` or `retry-after` says how long to wait).

pub(crate) mod filter;

use std::sync::Arc;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::auth::{self, CredentialError, InHeader};
use super::error::{CallError, ErrorKind};
use super::openai::{self, OpenAiChat};
use super::{CallSpec, Reply, WireFormat, WireRequest};
use conform_config::ProviderConfig;
use conform_config::secret::Secret;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AzureOpenAi;

/// The first API version that takes `max_completion_tokens` and `stream_options`.
const MODERN: &str = "2024-09-01";

/// Whether `config` speaks the API as OpenAI's own is spoken now: the v1 API, or a
/// dated version from [`MODERN`] on (dates compare as text, `-preview` after its date).
fn modern(config: &ProviderConfig) -> bool {
    config
        .cloud
        .api_version
        .as_deref()
        .is_none_or(|v| v >= MODERN)
}

/// The deployment the calls go to.
fn deployment(config: &ProviderConfig) -> &str {
    config.cloud.deployment.as_deref().unwrap_or(&config.model)
}

impl WireFormat for AzureOpenAi {
    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        _key: Option<&Secret>,
    ) -> WireRequest {
        let modern = modern(config);
        let limit = match modern {
            true => "max_completion_tokens",
            false => "max_tokens",
        };
        let mut request = openai::encode_chat(call, config, None, limit);
        let deployment = deployment(config);
        if let Some(body) = request.body.as_object_mut() {
            match &config.cloud.api_version {
                Some(_) => {
                    body.shift_remove("model");
                }
                None => {
                    body.insert("model".into(), json!(deployment));
                }
            }
            if !modern {
                body.shift_remove("stream_options");
            }
        }
        let deployment = percent_encode(deployment);
        request.url = match &config.cloud.api_version {
            Some(version) => config.url(&format!(
                "/openai/deployments/{deployment}/chat/completions?api-version={version}"
            )),
            None => config.url("/openai/v1/chat/completions"),
        };
        request.headers = super::json_headers(None);
        request
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        OpenAiChat::official()
            .decode(body)
            .map(|reply| filter::apply(reply, body))
    }

    fn carries_answer(&self, event: &str, data: &Value) -> bool {
        OpenAiChat::official().carries_answer(event, data)
    }

    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error"));
        if let Some(filtered) = error.and_then(filter::prompt_refused) {
            return CallError::new(ErrorKind::PromptFiltered, filtered)
                .status(status)
                .server_hints(headers);
        }
        let mut classified = OpenAiChat::official().classify(status, headers, body);
        let m = classified.message.to_ascii_lowercase();
        if classified.kind == ErrorKind::BadRequest
            && m.contains("json_schema")
            && m.contains("api version")
        {
            classified.message.push_str(
                " (structured_output = \"json_schema\" needs api_version 2024-08-01-preview or later, or the v1 API without api_version; or use \"json_object\" or \"tool\")",
            );
        }
        classified
    }

    fn rate_limits(&self, headers: &HeaderMap) -> super::limits::RateLimitInfo {
        openai::limits::rate_limits(headers)
    }

    fn bills_schema_unpublished(&self, config: &ProviderConfig) -> bool {
        OpenAiChat::official().bills_schema_unpublished(config)
    }

    fn tool_use_finish(&self, forced_by_name: bool) -> Option<&'static str> {
        OpenAiChat::official().tool_use_finish(forced_by_name)
    }

    fn answer_dialect(&self, config: &ProviderConfig) -> Option<&'static dyn super::Dialect> {
        OpenAiChat::official().answer_dialect(config)
    }

    fn tool_dialect(
        &self,
        config: &ProviderConfig,
        strict: bool,
    ) -> Option<&'static dyn super::Dialect> {
        OpenAiChat::official().tool_dialect(config, strict)
    }

    /// The key as `api-key`, or the `token_env` token as a bearer (both read by
    /// `ProviderConfig::api_key`, which refuses a run without them).
    fn credentials(
        &self,
        config: &ProviderConfig,
        key: Option<&Secret>,
        _env: &dyn auth::Environment,
    ) -> Result<auth::Credentials, CredentialError> {
        let key = key.cloned().ok_or_else(|| {
            CredentialError(format!(
                "provider `{}` has no credential: set the variable its api_key_env or token_env names",
                config.name
            ))
        })?;
        let scheme = match config.cloud.token_env {
            Some(_) => InHeader::bearer(key),
            None => InHeader::key("api-key", key),
        };
        Ok(Some(Arc::new(scheme)))
    }
}

/// A path segment as a URL carries it: everything but unreserved characters escaped.
pub(crate) fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte))
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> ProviderConfig {
        ProviderConfig::parse(
            std::path::Path::new("providers/az.toml"),
            &format!(
                "kind = \"azure-openai\"\nbase_url = \"https://r.openai.azure.com/\"\ndeployment = \"prod-4o\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"AZ\"\n{extra}"
            ),
        )
        .unwrap()
    }

    #[test]
    fn both_api_styles_have_their_address_and_body() {
        let prompt = conform_config::Prompt {
            system: None,
            user: "hi".into(),
        };
        let schema = json!({"type": "object"});
        let call = CallSpec {
            prompt: &prompt,
            schema: &schema,
            schema_name: "x",
            conversation: None,
        };
        let dated = AzureOpenAi.encode(&call, &config("api_version = \"2024-10-21\"\n"), None);
        assert_eq!(
            dated.url,
            "https://r.openai.azure.com/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"
        );
        assert!(dated.body.get("model").is_none());
        assert!(dated.body.get("max_completion_tokens").is_some());
        let v1 = AzureOpenAi.encode(&call, &config(""), None);
        assert_eq!(
            v1.url,
            "https://r.openai.azure.com/openai/v1/chat/completions"
        );
        assert_eq!(v1.body["model"], "prod-4o");
        assert_eq!(percent_encode("arn:aws/x y"), "arn%3Aaws%2Fx%20y");
        let old = AzureOpenAi.encode(&call, &config("api_version = \"2024-06-01\"\n"), None);
        assert!(old.body.get("max_tokens").is_some());
        assert!(old.body.get("max_completion_tokens").is_none());
        // No key in the encoded request: the transport adds it per attempt.
        assert!(dated.headers.get("api-key").is_none());
    }

    #[test]
    fn azures_limit_headers_pace_only_where_they_state_the_bucket() {
        use reqwest::header::HeaderValue;
        let mut headers = HeaderMap::new();
        // What Azure sends: what is left, not how big the bucket is.
        headers.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("9"),
        );
        headers.insert(
            "x-ratelimit-remaining-tokens",
            HeaderValue::from_static("0"),
        );
        assert!(AzureOpenAi.rate_limits(&headers).is_empty());
        headers.insert(
            "x-ratelimit-limit-tokens",
            HeaderValue::from_static("30000"),
        );
        let tokens = AzureOpenAi.rate_limits(&headers).tokens.unwrap();
        assert_eq!((tokens.limit, tokens.remaining), (30000, 0));
    }
}
