//! Counting through the provider's own endpoints, where the tokenizer is not shipped.
//!
//! - llama.cpp `llama-server` (`openai-compatible`): `POST /apply-template` renders the
//!   messages, with the tools, through the model's chat template (`{"prompt": …}`), and
//!   `POST /tokenize` tokenizes that text with special tokens parsed (`{"tokens": […]}`):
//!   the count its chat endpoint reports as `usage.prompt_tokens` for the same request.
//! - Anthropic: `POST /v1/messages/count_tokens` with the request's `model`, `system`,
//!   `messages`, `tools` and `tool_choice` (`{"input_tokens": N}`).
//! - Gemini: `POST …/models/{model}:countTokens`, with `contents` alone, or the whole
//!   `generateContentRequest` when the request has a system instruction or tools
//!   (`{"totalTokens": N}`).
//! - OpenAI Responses: `POST /v1/responses/input_tokens` (`{"input_tokens": N}`).
//!
//! Each body is made by the provider's own wire format from the call, so what is counted
//! is what is sent. Where the count endpoint cannot take part of the request (Anthropic's
//! `output_config`, Gemini's response schema), the count is a lower bound.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::{Count, Message, TokenizeError};
use crate::config::{Kind, ProviderConfig};
use crate::provider::{CallSpec, WireFormat, wire_format};
use crate::secret::Secret;

/// Counts prompts through a provider's count endpoint.
pub struct ProviderCounter {
    client: reqwest::Client,
    config: Arc<ProviderConfig>,
    wire: Arc<dyn WireFormat>,
    key: Option<Secret>,
    describe: String,
}

impl ProviderCounter {
    /// A counter for `config`: llama.cpp servers (`openai-compatible`), Anthropic,
    /// Gemini and the OpenAI Responses API have count endpoints.
    pub fn new(config: &ProviderConfig) -> Result<ProviderCounter, String> {
        let describe = match config.kind {
            Kind::OpenaiCompatible => "provider (llama.cpp /apply-template + /tokenize)",
            Kind::Anthropic => "provider (Anthropic /v1/messages/count_tokens)",
            Kind::Gemini => "provider (Gemini countTokens)",
            Kind::OpenaiResponses => "provider (OpenAI /v1/responses/input_tokens)",
            other => {
                return Err(format!(
                    "tokenizer kind `provider` counts through the provider's count endpoint; \
                     kind `{}` has none: use tiktoken or huggingface",
                    other.as_str()
                ));
            }
        };
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
            wire: wire_format(config.kind),
            config: Arc::new(config.clone()),
            key,
            describe: describe.into(),
        })
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The prompt tokens the server will see for these messages (llama.cpp only: the
    /// other vendors count a whole call, [`ProviderCounter::count_call`]).
    pub async fn count(&self, messages: &[Message<'_>]) -> Result<u64, TokenizeError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        self.llama_cpp(json!({"messages": messages})).await
    }

    /// The prompt tokens the provider bills for this call.
    pub async fn count_call(&self, call: &CallSpec<'_>) -> Result<Count, TokenizeError> {
        let request = self.wire.encode(call, &self.config, self.key.as_ref());
        let sent = request.body.as_object().cloned().unwrap_or_default();
        let keep = |keys: &[&str]| -> Map<String, Value> {
            keys.iter()
                .filter_map(|k| sent.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect()
        };
        let base = &self.config.base_url;
        match self.config.kind {
            Kind::OpenaiCompatible => {
                let body = keep(&["messages", "tools", "tool_choice", "parallel_tool_calls"]);
                let tokens = self.llama_cpp(Value::Object(body)).await?;
                Ok(Count {
                    tokens,
                    exact: true,
                })
            }
            Kind::Anthropic => {
                let body = keep(&["model", "system", "messages", "tools", "tool_choice"]);
                let answer = self
                    .post(
                        &format!("{base}/v1/messages/count_tokens"),
                        request.headers,
                        &Value::Object(body),
                    )
                    .await?;
                Ok(Count {
                    tokens: integer(&answer, "input_tokens")?,
                    exact: !sent.contains_key("output_config"),
                })
            }
            Kind::Gemini => {
                let schema_sent = sent.get("generationConfig").is_some_and(|g| {
                    g.get("responseJsonSchema").is_some() || g.get("responseSchema").is_some()
                });
                let only_contents = sent
                    .keys()
                    .all(|k| k == "contents" || k == "generationConfig");
                let body = if only_contents {
                    Value::Object(keep(&["contents"]))
                } else {
                    let mut inner = keep(&["contents", "systemInstruction", "tools", "toolConfig"]);
                    let model = self.config.model.trim_start_matches("models/");
                    inner.insert("model".into(), json!(format!("models/{model}")));
                    json!({"generateContentRequest": inner})
                };
                let url = count_url(&request.url);
                let answer = self.post(&url, request.headers, &body).await?;
                Ok(Count {
                    tokens: integer(&answer, "totalTokens")?,
                    exact: !schema_sent,
                })
            }
            Kind::OpenaiResponses => {
                let body = keep(&[
                    "model",
                    "input",
                    "instructions",
                    "tools",
                    "tool_choice",
                    "parallel_tool_calls",
                    "text",
                ]);
                let answer = self
                    .post(
                        &format!("{base}/v1/responses/input_tokens"),
                        request.headers,
                        &Value::Object(body),
                    )
                    .await?;
                Ok(Count {
                    tokens: integer(&answer, "input_tokens")?,
                    exact: true,
                })
            }
            other => Err(TokenizeError::Provider(format!(
                "kind `{}` has no count endpoint",
                other.as_str()
            ))),
        }
    }

    /// llama.cpp: the request rendered by `/apply-template`, then `/tokenize`d.
    async fn llama_cpp(&self, request: Value) -> Result<u64, TokenizeError> {
        let base = &self.config.base_url;
        let headers = crate::provider::bearer_headers(self.key.as_ref());
        let rendered = self
            .post(&format!("{base}/apply-template"), headers.clone(), &request)
            .await?;
        let prompt = rendered
            .get("prompt")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                TokenizeError::Provider("/apply-template returned no `prompt`".into())
            })?;
        let tokens = self
            .post(
                &format!("{base}/tokenize"),
                headers,
                &json!({"content": prompt, "add_special": true, "parse_special": true}),
            )
            .await?;
        tokens
            .get("tokens")
            .and_then(Value::as_array)
            .map(|t| t.len() as u64)
            .ok_or_else(|| TokenizeError::Provider("/tokenize returned no `tokens`".into()))
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

/// The `countTokens` URL beside a `generateContent` (or streaming) one.
fn count_url(generate: &str) -> String {
    let base = generate.split('?').next().unwrap_or(generate);
    match base.rsplit_once(':') {
        Some((model, _)) => format!("{model}:countTokens"),
        None => base.to_string(),
    }
}

fn integer(answer: &Value, field: &str) -> Result<u64, TokenizeError> {
    answer
        .get(field)
        .and_then(Value::as_u64)
        .ok_or_else(|| TokenizeError::Provider(format!("the count has no integer `{field}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_url_sits_beside_generate_content() {
        assert_eq!(
            count_url("https://g/v1beta/models/gemini-2.5-flash:generateContent"),
            "https://g/v1beta/models/gemini-2.5-flash:countTokens"
        );
        assert_eq!(
            count_url("http://127.0.0.1:1/v1/models/m:streamGenerateContent?alt=sse"),
            "http://127.0.0.1:1/v1/models/m:countTokens"
        );
    }
}
