//! Calling a provider: exactly one `POST {base}/v1/chat/completions` per attempt, and
//! the contract's reading of whatever comes back.

use std::time::Duration;

use axum::body::Bytes;
use futures::future::BoxFuture;
use serde_json::Value;

/// How one provider call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A complete HTTP 200 with a first choice whose content is not null: the content,
    /// parsed as JSON when it parses.
    Result(Value),
    /// A definite answer without a usable result; a new attempt may start.
    Failed(String),
    /// No definite answer: the work may be happening or done.
    Unknown(String),
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct SetupError(#[from] reqwest::Error);

/// The upstream seam: how an attempt's one request reaches its provider. [`HttpUpstream`]
/// is the real one. Any other must also send exactly one request per call: the
/// scenarios count what each provider received, so one that retries is caught.
pub trait Upstream: Send + Sync + 'static {
    /// Sends `body` (see [`request_body`]) to the provider at `base_url` and classifies
    /// the answer.
    fn call<'a>(&'a self, base_url: &'a str, body: Bytes) -> BoxFuture<'a, Outcome>;
}

/// The HTTP client for providers. It never retries and never follows redirects: either
/// would send a second request behind the orchestrator's back.
#[derive(Debug, Clone)]
pub struct HttpUpstream {
    client: reqwest::Client,
}

impl Upstream for HttpUpstream {
    /// One request, whatever happens.
    fn call<'a>(&'a self, base_url: &'a str, body: Bytes) -> BoxFuture<'a, Outcome> {
        Box::pin(self.call_once(base_url, body))
    }
}

impl HttpUpstream {
    pub fn new() -> Result<HttpUpstream, SetupError> {
        // Installing twice is harmless; the error only says a provider is already there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(HttpUpstream { client })
    }

    async fn call_once(&self, base_url: &str, body: Bytes) -> Outcome {
        let url = format!("{}/v1/chat/completions", base_url.trim_end_matches('/'));
        let length = body.len();
        // A one-chunk stream rather than a reusable body: the client then keeps no copy
        // for a redirect it will never follow, and the bytes are freed once sent
        // instead of when the provider answers, which may be minutes later.
        let body = reqwest::Body::wrap_stream(futures::stream::once(async move {
            Ok::<_, std::convert::Infallible>(body)
        }));
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::CONTENT_LENGTH, length)
            .body(body);
        let response = match request.send().await {
            Ok(response) => response,
            // Connection refused, name or TLS failure: the request never left.
            Err(e) if e.is_connect() => return Outcome::Failed("connection_refused".into()),
            Err(_) => return Outcome::Unknown("connection_reset".into()),
        };
        let status = response.status().as_u16();
        match response.bytes().await {
            Ok(bytes) => classify(status, &bytes),
            Err(_) => Outcome::Unknown("truncated_body".into()),
        }
    }
}

/// The provider request's body: the job's input with `model` set to the provider's name
/// when it is absent or null, serialized once.
pub fn request_body(provider: &str, mut input: Value) -> Bytes {
    if let Value::Object(members) = &mut input
        && members.get("model").is_none_or(Value::is_null)
    {
        members.insert("model".into(), Value::String(provider.to_string()));
    }
    Bytes::from(crate::ledger::json_text(&input))
}

/// The contract's reading of a complete response.
pub fn classify(status: u16, body: &[u8]) -> Outcome {
    match status {
        200 => match first_content(body) {
            Some(content) => Outcome::Result(content),
            None => Outcome::Failed("invalid_response".into()),
        },
        // A 2xx other than 200 is a definite answer, and not the result the contract names.
        201..=299 | 400..=499 | 501 | 503 | 529 => Outcome::Failed(format!("http_{status}")),
        // 500, 502, 504, any other 5xx, 3xx, anything else: the work may have happened.
        _ => Outcome::Unknown(format!("http_{status}")),
    }
}

fn first_content(body: &[u8]) -> Option<Value> {
    let reply: Value = serde_json::from_slice(body).ok()?;
    let content = reply
        .get("choices")?
        .get(0)?
        .get("message")?
        .get("content")?;
    match content {
        Value::Null => None,
        Value::String(text) => {
            Some(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())))
        }
        other => Some(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(content: Value) -> Vec<u8> {
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn the_model_is_the_providers_name_unless_the_input_names_one() {
        let body = |input: Value| -> Value {
            serde_json::from_slice(&request_body("primary", input)).unwrap()
        };
        assert_eq!(body(json!({"messages": []}))["model"], "primary");
        assert_eq!(body(json!({"model": null}))["model"], "primary");
        assert_eq!(body(json!({"model": "gpt-x"}))["model"], "gpt-x");
    }

    /// The request announces its length (providers may refuse chunked uploads) and is
    /// sent once.
    #[tokio::test]
    async fn one_request_with_its_content_length() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains("\"model\":\"primary\"}") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0);
                seen.extend_from_slice(&buf[..n]);
            }
            let reply = reply(json!("fine"));
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                reply.len()
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(&reply).await.unwrap();
            String::from_utf8_lossy(&seen).to_ascii_lowercase()
        });
        let upstream = HttpUpstream::new().unwrap();
        let body = request_body("primary", json!({"messages": []}));
        let length = body.len();
        let outcome = upstream.call(&base, body).await;
        assert_eq!(outcome, Outcome::Result(json!("fine")));
        let request = server.await.unwrap();
        assert!(
            request.starts_with("post /v1/chat/completions "),
            "{request}"
        );
        assert!(
            request.contains(&format!("content-length: {length}\r\n")),
            "{request}"
        );
        assert!(!request.contains("transfer-encoding"), "{request}");
    }

    #[test]
    fn a_result_is_the_first_choice_content_parsed_when_it_parses() {
        assert_eq!(
            classify(200, &reply(json!("{\"total\": 3}"))),
            Outcome::Result(json!({"total": 3}))
        );
        assert_eq!(
            classify(200, &reply(json!("plain words"))),
            Outcome::Result(json!("plain words"))
        );
    }

    #[test]
    fn a_200_without_usable_first_choice_failed() {
        let failed = Outcome::Failed("invalid_response".into());
        assert_eq!(classify(200, &reply(Value::Null)), failed);
        assert_eq!(classify(200, br#"{"choices": []}"#), failed);
        assert_eq!(classify(200, b"<html>oops</html>"), failed);
    }

    #[test]
    fn statuses_split_into_failed_and_unknown_as_the_contract_says() {
        for s in [201, 204, 400, 401, 404, 409, 422, 429, 501, 503, 529] {
            assert_eq!(
                classify(s, b""),
                Outcome::Failed(format!("http_{s}")),
                "{s}"
            );
        }
        for s in [500, 502, 504, 505, 520, 599, 301, 302, 307, 308, 600] {
            assert_eq!(
                classify(s, b""),
                Outcome::Unknown(format!("http_{s}")),
                "{s}"
            );
        }
    }
}
