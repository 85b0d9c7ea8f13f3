//! Counting through the provider's own endpoints, where the tokenizer is not shipped.
//!
//! llama.cpp `llama-server`: `POST /apply-template` renders the messages with the
//! model's chat template (`{"prompt": …}`), `POST /tokenize` tokenizes that text with
//! special tokens parsed (`{"tokens": […]}`). That is the count its chat endpoint
//! reports as `usage.prompt_tokens` for the same messages.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Message, TokenizeError};
use crate::config::{Kind, ProviderConfig};
use crate::secret::Secret;

/// Counts prompts through a llama.cpp server.
pub struct ProviderCounter {
    client: reqwest::Client,
    base_url: String,
    key: Option<Secret>,
    timeout: Duration,
    describe: String,
}

impl ProviderCounter {
    /// A counter for `config`; only llama.cpp servers (`openai-compatible`) have the
    /// endpoints for now.
    pub fn new(config: &ProviderConfig) -> Result<ProviderCounter, String> {
        if config.kind != Kind::OpenaiCompatible {
            return Err(format!(
                "tokenizer kind `provider` counts through llama.cpp's /apply-template and /tokenize; \
                 kind `{}` has no such endpoint here: use tiktoken or huggingface",
                config.kind.as_str()
            ));
        }
        // Installing twice is harmless; the error only says a provider is already there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        // A missing key is the run's to report (it stops before any call); `conform check`
        // builds counters offline and must not fail on it.
        let key = config.api_key().ok().flatten();
        Ok(ProviderCounter {
            client,
            base_url: config.base_url.clone(),
            key,
            timeout: config.timeout,
            describe: "provider (llama.cpp /apply-template + /tokenize)".into(),
        })
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The prompt tokens the server will see for these messages.
    pub async fn count(&self, messages: &[Message<'_>]) -> Result<u64, TokenizeError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        let rendered = self
            .post("/apply-template", &json!({"messages": messages}))
            .await?;
        let prompt = rendered
            .get("prompt")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                TokenizeError::Provider("/apply-template returned no `prompt`".into())
            })?;
        let tokens = self
            .post(
                "/tokenize",
                &json!({"content": prompt, "add_special": true, "parse_special": true}),
            )
            .await?;
        tokens
            .get("tokens")
            .and_then(Value::as_array)
            .map(|t| t.len() as u64)
            .ok_or_else(|| TokenizeError::Provider("/tokenize returned no `tokens`".into()))
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value, TokenizeError> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base_url))
            .json(body)
            .timeout(self.timeout);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        // The error text is built from the status and path only: a URL can carry a key.
        let response = request
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
