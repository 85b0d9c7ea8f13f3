//! Talking to the orchestrator under test: one [`Call`] in, one [`Exchange`] out, with
//! everything a person needs to see what was sent and what came back.

use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};
use serde::Serialize;
use serde_json::Value;

/// The owner header of the contract.
pub(crate) const OWNER: &str = "x-owner-id";
/// The idempotency key header.
pub(crate) const KEY: &str = "idempotency-key";
/// The replay marker.
pub(crate) const REPLAYED: &str = "idempotent-replayed";

/// How long the orchestrator may take to answer one call. Its answers never wait for a
/// provider, so anything slower is a failure in itself.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP call to the orchestrator.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: reqwest::Method,
    pub path: String,
    pub owner: Option<String>,
    /// Raw header values, each sent as its own `Idempotency-Key` header.
    pub keys: Vec<Vec<u8>>,
    pub body: Option<Vec<u8>>,
}

impl Call {
    pub fn get(path: impl Into<String>) -> Call {
        Call::new(reqwest::Method::GET, path)
    }

    pub fn post(path: impl Into<String>) -> Call {
        Call::new(reqwest::Method::POST, path)
    }

    fn new(method: reqwest::Method, path: impl Into<String>) -> Call {
        Call {
            method,
            path: path.into(),
            owner: None,
            keys: Vec::new(),
            body: None,
        }
    }

    pub fn owner(mut self, owner: &str) -> Call {
        self.owner = Some(owner.to_string());
        self
    }

    /// Adds one `Idempotency-Key` header with this exact value.
    pub fn key(mut self, raw: impl AsRef<[u8]>) -> Call {
        self.keys.push(raw.as_ref().to_vec());
        self
    }

    pub fn json(self, body: &Value) -> Call {
        self.raw(body.to_string())
    }

    /// A body sent byte for byte, for spellings serde would normalise away.
    pub fn raw(mut self, body: impl Into<Vec<u8>>) -> Call {
        self.body = Some(body.into());
        self
    }
}

/// A call and its answer, as the evidence shows them.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub idempotency_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The HTTP status, or 0 when no answer came.
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_replayed: Option<String>,
    /// The answer's body, as JSON when it parses.
    pub answer: Value,
    /// Why no answer came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub ms: u64,
}

impl Exchange {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// `Idempotent-Replayed: true`.
    pub fn replayed(&self) -> bool {
        self.idempotent_replayed
            .as_deref()
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// The problem's `code`, if the answer is a problem document.
    pub fn code(&self) -> Option<&str> {
        self.answer.get("code").and_then(Value::as_str)
    }

    /// A string member of the answer.
    pub fn text(&self, member: &str) -> Option<&str> {
        self.answer.get(member).and_then(Value::as_str)
    }

    /// One line: `POST /v1/jobs → 409 idempotency_key_reused`.
    pub fn summary(&self) -> String {
        let outcome = match (&self.error, self.code()) {
            (Some(e), _) => format!("no answer ({e})"),
            (None, Some(code)) => format!("{} {code}", self.status),
            (None, None) => self.status.to_string(),
        };
        format!("{} {} → {outcome}", self.method, self.path)
    }
}

/// The orchestrator's HTTP API.
#[derive(Clone)]
pub struct Api {
    base: String,
    http: reqwest::Client,
    /// The path that answers 200 once the service is up.
    health: String,
    /// What it answers then: 200 unless a service has no such route (TensorZero's
    /// embedded gateway serves only its OpenAI routes: a GET of one is 405).
    health_status: u16,
}

impl Api {
    /// `base` is `http://host:port`, without a trailing slash.
    pub fn new(base: &str) -> Result<Api, reqwest::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(CALL_TIMEOUT)
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            http,
            health: "/healthz".to_string(),
            health_status: 200,
        })
    }

    /// The URL that answers 200 once the service is up.
    pub fn health_url(&self) -> String {
        format!("{}{}", self.base, self.health)
    }

    /// Another path answers 200 once the service is up (a gateway's own health route).
    pub fn with_health(mut self, path: &str) -> Api {
        self.health = path.to_string();
        self
    }

    /// The health path answers `status`, not 200, once the service is up.
    pub fn with_health_status(mut self, status: u16) -> Api {
        self.health_status = status;
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The same client and health path, at another base.
    pub fn at(&self, base: &str) -> Api {
        Api {
            base: base.trim_end_matches('/').to_string(),
            ..self.clone()
        }
    }

    /// Sends one call; a transport failure is an exchange with status 0, not an error,
    /// since an orchestrator that drops a connection is itself evidence.
    pub async fn send(&self, call: &Call) -> Exchange {
        let started = Instant::now();
        let mut request = self
            .http
            .request(call.method.clone(), format!("{}{}", self.base, call.path));
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(owner) = &call.owner
            && let Ok(v) = HeaderValue::from_str(owner)
        {
            headers.insert(HeaderName::from_static(OWNER), v);
        }
        for raw in &call.keys {
            if let Ok(v) = HeaderValue::from_bytes(raw) {
                headers.append(HeaderName::from_static(KEY), v);
            }
        }
        if let Some(body) = &call.body {
            headers.insert(
                reqwest::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            request = request.body(body.clone());
        }
        let mut exchange = Exchange {
            method: call.method.to_string(),
            path: call.path.clone(),
            owner: call.owner.clone(),
            idempotency_keys: call
                .keys
                .iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect(),
            body: call.body.as_deref().map(as_json),
            status: 0,
            content_type: None,
            idempotent_replayed: None,
            answer: Value::Null,
            error: None,
            ms: 0,
        };
        match request.headers(headers).send().await {
            Ok(response) => {
                exchange.status = response.status().as_u16();
                let header = |name: &str| {
                    response
                        .headers()
                        .get(name)
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                };
                exchange.content_type = header("content-type");
                exchange.idempotent_replayed = header(REPLAYED);
                match response.bytes().await {
                    Ok(bytes) if bytes.is_empty() => {}
                    Ok(bytes) => exchange.answer = as_json(&bytes),
                    Err(e) => exchange.error = Some(format!("the answer's body broke off: {e}")),
                }
            }
            Err(e) => exchange.error = Some(describe(&e)),
        }
        exchange.ms = started.elapsed().as_millis() as u64;
        exchange
    }

    /// `GET /healthz` answers 200.
    pub async fn healthy(&self) -> bool {
        self.send(&Call::get(self.health.clone())).await.status == self.health_status
    }
}

fn as_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {} s", CALL_TIMEOUT.as_secs())
    } else if e.is_connect() {
        "connection refused: is the orchestrator running?".to_string()
    } else {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }
}
