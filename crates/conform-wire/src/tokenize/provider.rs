//! Counting through the provider's own endpoints, where the tokenizer is not shipped:
//! llama.cpp servers (`openai-compatible`), Anthropic, Gemini and the OpenAI Responses
//! API. What each vendor's endpoint takes and answers is the vendor's own
//! (`WireFormat::count_request`, `count_answer`, in its folder); this sends it. Where the
//! count endpoint cannot take part of the request (Anthropic's `output_config`, Gemini's
//! response schema), the count is a lower bound.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{Count, TokenizeError};
use crate::provider::count::Counted;
use crate::provider::{CallSpec, WireFormat, wire_format};
use conform_config::ProviderConfig;
use conform_config::secret::Secret;

/// A count takes at most this many requests (llama.cpp's takes two).
const MAX_STEPS: usize = 4;

/// Counts prompts through a provider's count endpoint.
pub struct ProviderCounter {
    client: reqwest::Client,
    config: Arc<ProviderConfig>,
    wire: Arc<dyn WireFormat>,
    key: Option<Secret>,
    describe: String,
}

/// Why a provider's count endpoint cannot count.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// The provider's kind has no count endpoint.
    #[error(
        "tokenizer kind `provider` counts through the provider's count endpoint; kind `{0}` has none: use tiktoken or huggingface"
    )]
    NoEndpoint(&'static str),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

impl ProviderCounter {
    /// A counter for `config`, whose vendor must have a count endpoint.
    pub fn new(config: &ProviderConfig) -> Result<ProviderCounter, CounterError> {
        let Some(endpoint) = config.kind.describe().count_endpoint else {
            return Err(CounterError::NoEndpoint(config.kind.as_str()));
        };
        // Installing twice is harmless; the error only says a provider is already there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(CounterError::Client)?;
        // A missing key is the run's to report (it stops before any call); `conform check`
        // builds counters offline and must not fail on it.
        let key = config.api_key().ok().flatten();
        Ok(ProviderCounter {
            client,
            wire: wire_format(config.kind),
            config: Arc::new(config.clone()),
            key,
            describe: format!("provider ({endpoint})"),
        })
    }

    /// `provider (<endpoint>)`, for reports.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The prompt tokens the provider bills for this call.
    pub async fn count_call(&self, call: &CallSpec<'_>) -> Result<Count, TokenizeError> {
        let sent = self.wire.encode(call, &self.config, self.key.as_ref());
        let mut next = self
            .wire
            .count_request(&sent, &self.config)
            .ok_or_else(|| TokenizeError::Provider("this provider has no count endpoint".into()))?;
        for step in 0..MAX_STEPS {
            let answer = self.post(&next.url, next.headers, &next.body).await?;
            match self
                .wire
                .count_answer(step, &answer, &sent, &self.config)
                .map_err(|e| TokenizeError::Provider(e.to_string()))?
            {
                Counted::Tokens(count) => return Ok(count),
                Counted::Then(request) => next = request,
            }
        }
        Err(TokenizeError::Provider(
            "the count endpoint never gave a count".into(),
        ))
    }

    async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
    ) -> Result<Value, TokenizeError> {
        // The error text names the path only: a URL can carry a key.
        let path = reqwest::Url::parse(url)
            .map(|u| u.path().to_string())
            .unwrap_or_else(|_| "the count endpoint".into());
        let response = self
            .client
            .post(url)
            .headers(headers)
            .json(body)
            .timeout(self.config.timeout)
            .send()
            .await
            .map_err(|_| TokenizeError::Provider(format!("{path}: no answer")))?;
        let status = response.status();
        if !status.is_success() {
            return Err(TokenizeError::Provider(format!("{path}: HTTP {status}")));
        }
        response
            .json::<Value>()
            .await
            .map_err(|_| TokenizeError::Provider(format!("{path}: the answer is not JSON")))
    }
}
