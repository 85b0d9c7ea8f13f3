//! Calling a provider: exactly one HTTP request per attempt, and the contract's reading
//! of whatever comes back. The request is the contract's (`POST
//! {base}/v1/chat/completions` with the job's input) or, for a provider served through
//! its provider file, the one its wire adapter encodes; either way it is built before
//! the call and sent once.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use conform_wire::provider::auth::{Credentials, Outgoing};
use futures::future::BoxFuture;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

use conform_wire::provider::{ErrorKind, WireFormat, WireRequest};

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

/// One attempt's request, ready to send, and how its answer is read. Cloning it is
/// cheap (the body and the headers are shared or small).
#[derive(Clone)]
pub struct Request {
    /// Where it is sent: the provider's endpoint for this request.
    pub url: String,
    /// The content type and, for a provider file with a key, the key in a header
    /// marked sensitive.
    pub headers: HeaderMap,
    /// The encoded request: the job's input, or its wire adapter's form of it.
    pub body: Bytes,
    /// How to find the result in a 200's body.
    pub reading: Reading,
    /// What authenticates the attempt once encoded (a cloud's SigV4, a service account's
    /// token), as `conform run`'s transport asks it: `None` when the headers already do.
    pub credentials: Credentials,
}

/// How a 200's body is read.
#[derive(Clone)]
pub enum Reading {
    /// The contract's: the first choice's message content.
    Contract,
    /// A provider file's wire adapter: the decoded reply's text; `stream` when the
    /// request asked for a stream.
    Wire {
        /// The adapter that decodes the reply.
        wire: Arc<dyn WireFormat>,
        /// The reply is a stream of events, not one body.
        stream: bool,
    },
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reading = match &self.reading {
            Reading::Contract => "contract",
            Reading::Wire { stream: false, .. } => "wire",
            Reading::Wire { stream: true, .. } => "wire, streamed",
        };
        f.debug_struct("Request")
            .field("url", &self.url)
            .field("bytes", &self.body.len())
            .field("reading", &reading)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// The contract's request to the provider `provider` at `base_url`: the job's input
    /// with `model` set to the provider's name when it is absent or null, serialized once.
    pub fn contract(provider: &str, base_url: &str, input: Value) -> Request {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Request {
            url: format!("{}/v1/chat/completions", base_url.trim_end_matches('/')),
            headers,
            body: request_body(provider, input),
            reading: Reading::Contract,
            credentials: None,
        }
    }

    /// What a wire adapter encoded (`WireFormat::encode`), serialized once.
    pub fn wire(encoded: WireRequest, wire: Arc<dyn WireFormat>, stream: bool) -> Request {
        let WireRequest { url, headers, body } = encoded;
        Request {
            url,
            headers,
            // Serializing our own Value cannot fail.
            body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            reading: Reading::Wire { wire, stream },
            credentials: None,
        }
    }

    /// This request, authenticated by `credentials` when it is sent.
    pub fn authorized_by(self, credentials: Credentials) -> Request {
        Request {
            credentials,
            ..self
        }
    }

    /// The headers that authenticate this attempt, added to the encoded ones: none to
    /// add without credentials. A refusal (a token the service would not issue) is an
    /// answer without a result: the request was never sent.
    async fn authenticated(&self, client: &reqwest::Client) -> Result<HeaderMap, Outcome> {
        let mut headers = self.headers.clone();
        let Some(credentials) = &self.credentials else {
            return Ok(headers);
        };
        let url = reqwest::Url::parse(&self.url)
            .map_err(|_| Outcome::Failed("connection_refused".into()))?;
        let outgoing = Outgoing {
            url: &url,
            headers: &self.headers,
            body: &self.body,
        };
        let added = credentials
            .authorize(outgoing, client)
            .await
            .map_err(|_| Outcome::Failed("auth_failed".into()))?;
        headers.extend(added);
        Ok(headers)
    }
}

/// The upstream seam: how an attempt's one request reaches its provider. [`HttpUpstream`]
/// is the real one. Any other must also send exactly one request per call: the
/// scenarios count what each provider received, so one that retries is caught.
pub trait Upstream: Send + Sync + 'static {
    /// Sends `request` and classifies the answer.
    fn call(&self, request: Request) -> BoxFuture<'_, Outcome>;
}

/// The HTTP client for providers. It never retries and never follows redirects: either
/// would send a second request behind the orchestrator's back.
#[derive(Debug, Clone)]
pub struct HttpUpstream {
    client: reqwest::Client,
}

impl Upstream for HttpUpstream {
    /// One request, whatever happens.
    fn call(&self, request: Request) -> BoxFuture<'_, Outcome> {
        Box::pin(self.call_once(request))
    }
}

impl HttpUpstream {
    /// The client a server's attempts share, so connections to a provider are reused.
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

    async fn call_once(&self, request: Request) -> Outcome {
        let headers = match request.authenticated(&self.client).await {
            Ok(headers) => headers,
            Err(outcome) => return outcome,
        };
        let Request {
            url, body, reading, ..
        } = request;
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
            .headers(headers)
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
            Ok(bytes) => read(&reading, status, &bytes),
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

/// A complete response, read as `reading` says: the statuses always as the contract
/// says ([`classify`]); a 200 through a wire adapter is its decoded reply.
pub fn read(reading: &Reading, status: u16, body: &[u8]) -> Outcome {
    match reading {
        Reading::Wire { wire, stream } if status == 200 => {
            let decoded = match stream {
                true => wire.decode_stream(body),
                false => wire.decode(body),
            };
            match decoded {
                // The text, or a forced tool call's arguments: the answer `conform run`
                // judged.
                Ok(reply) if !reply.text.is_empty() => Outcome::Result(parsed(reply.text)),
                Ok(_) => Outcome::Failed("invalid_response".into()),
                // Cut off: the work may be done.
                Err(e)
                    if matches!(
                        e.kind,
                        ErrorKind::StreamTruncated | ErrorKind::TruncatedBody
                    ) =>
                {
                    Outcome::Unknown("truncated_body".into())
                }
                // An error inside a 200 (a stream's error event) counts as its status would.
                Err(e) => match e.status.filter(|s| *s != 200) {
                    Some(status) => classify(status, b""),
                    None => Outcome::Failed("invalid_response".into()),
                },
            }
        }
        _ => classify(status, body),
    }
}

/// A text answer, parsed as JSON when it parses.
fn parsed(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
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
        Value::String(text) => Some(parsed(text.clone())),
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
        let request = Request::contract("primary", &base, json!({"messages": []}));
        let length = request.body.len();
        let outcome = upstream.call(request).await;
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

    /// A provider file's wire, read as the contract reads an answer.
    #[test]
    fn a_wire_answer_is_its_decoded_text_and_a_cut_off_one_unknown() {
        let config = conform_config::ProviderConfig::parse(
            std::path::Path::new("providers/fb.toml"),
            "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:1\"\n",
        )
        .unwrap();
        let wire = conform_wire::provider::wire_format(config.wire_kind());
        let plain = Reading::Wire {
            wire: wire.clone(),
            stream: false,
        };
        let answer = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "{\"total\": 3}"}}]});
        assert_eq!(
            read(&plain, 200, answer.to_string().as_bytes()),
            Outcome::Result(json!({"total": 3}))
        );
        let cut = answer.to_string();
        assert_eq!(
            read(&plain, 200, &cut.as_bytes()[..cut.len() / 2]),
            Outcome::Unknown("truncated_body".into())
        );
        assert_eq!(
            read(&plain, 200, &reply(json!(""))),
            Outcome::Failed("invalid_response".into())
        );
        let streamed = Reading::Wire { wire, stream: true };
        let unfinished = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"{\"}}]}\n\n";
        assert_eq!(
            read(&streamed, 200, unfinished.as_bytes()),
            Outcome::Unknown("truncated_body".into())
        );
        for s in [429, 500, 503] {
            assert_eq!(read(&plain, s, b""), classify(s, b""), "{s}");
        }
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
