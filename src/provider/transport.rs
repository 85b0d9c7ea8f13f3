//! Sending one call: rate limits, one HTTP request per attempt, bounded retries that
//! honour `Retry-After`, and the classification of whatever comes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use super::error::{CallError, ErrorKind};
use super::limits::Limiter;
use super::tape::{Recorder, Replayer};
use super::{CallSpec, Completion, Reply, WireFormat};
use crate::config::ProviderConfig;
use crate::secret::Secret;

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct SetupError(#[from] reqwest::Error);

/// The shared HTTP client. It never retries by itself: every retry is ours, counted
/// and bounded.
#[derive(Debug, Clone)]
pub struct Transport {
    client: reqwest::Client,
}

impl Transport {
    pub fn new() -> Result<Transport, SetupError> {
        // Installing twice is harmless; the error only says a provider is already there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .pool_max_idle_per_host(256)
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Transport { client })
    }
}

/// Where an endpoint's answers come from besides the network: see [`super::tape`].
#[derive(Debug, Clone)]
pub enum Tape {
    /// Every response is also written to the tape.
    Record(Arc<Recorder>),
    /// Every answer comes from the tape; nothing is sent.
    Replay(Arc<Replayer>),
}

/// One provider, ready to call: its configuration, wire format, key and rate limits.
pub struct Endpoint {
    pub config: Arc<ProviderConfig>,
    wire: Arc<dyn WireFormat>,
    key: Option<Secret>,
    limiter: Limiter,
    transport: Transport,
    tape: Option<Tape>,
    /// HTTP requests sent so far, retries included: what an interrupted run reports.
    sent: AtomicU64,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    pub fn new(
        config: Arc<ProviderConfig>,
        wire: Arc<dyn WireFormat>,
        key: Option<Secret>,
        transport: Transport,
    ) -> Self {
        let limiter = Limiter::new(&config.limits);
        Endpoint {
            config,
            wire,
            key,
            limiter,
            transport,
            tape: None,
            sent: AtomicU64::new(0),
        }
    }

    /// Records every response to `tape`, or answers from it without the network.
    pub fn with_tape(self, tape: Tape) -> Self {
        Endpoint {
            tape: Some(tape),
            ..self
        }
    }

    /// Calls the provider, retrying what [`super::policy::TABLE`] retries, within the
    /// configured bounds. `tokens` estimates the request's size for the tokens-per-minute
    /// limit. A final error carries the number of retries made before it.
    pub async fn call(&self, call: &CallSpec<'_>, tokens: u32) -> Result<Completion, CallError> {
        let limits = &self.config.limits;
        let retries = AtomicU32::new(0);
        let policy = ExponentialBuilder::default()
            .with_min_delay(limits.retry_base_wait)
            .with_max_delay(limits.max_retry_wait)
            .with_max_times(limits.max_retries as usize)
            .with_jitter();
        let max_wait = limits.max_retry_wait;
        let result = (|| self.once(call, tokens))
            .retry(policy)
            .sleep(tokio::time::sleep)
            .when(|e: &CallError| e.retryable() && e.retry_after.is_none_or(|w| w <= max_wait))
            .adjust(|e, backoff| backoff.map(|d| e.retry_after.unwrap_or(d)))
            .notify(|e, wait| {
                let retry = retries.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::debug!(
                    provider = %self.config.name,
                    retry,
                    wait_ms = wait.as_millis() as u64,
                    error = %e.clone().scrub(self.key.as_ref()),
                    "retrying"
                );
            })
            .await;
        let retries = retries.load(Ordering::Relaxed);
        match result {
            Ok((reply, latency)) => Ok(Completion {
                reply,
                latency,
                retries,
            }),
            Err(e) => Err(CallError {
                retries,
                ..e.scrub(self.key.as_ref())
            }),
        }
    }

    /// Exactly one HTTP request, or, replaying, the next recorded answer to it.
    async fn once(&self, call: &CallSpec<'_>, tokens: u32) -> Result<(Reply, Duration), CallError> {
        let request = self.wire.encode(call, &self.config, self.key.as_ref());
        if let Some(Tape::Replay(tape)) = &self.tape {
            let digest = crate::digest::canonical(&request.body);
            let Some((status, headers, body)) = tape.next(&digest) else {
                return Err(CallError::new(
                    ErrorKind::NotRecorded,
                    format!(
                        "{} holds no (further) answer to this request: record the tape again",
                        tape.path().display()
                    ),
                ));
            };
            return self.answer(status, &headers, &body, Duration::ZERO);
        }
        self.limiter.acquire(tokens).await;
        self.sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let url = printable_url(&request.url);
        let response = self
            .transport
            .client
            .post(&request.url)
            .headers(request.headers)
            .json(&request.body)
            .timeout(self.config.timeout)
            .send()
            .await
            .map_err(|e| from_reqwest(&e, &url, None))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = match response.bytes().await {
            Ok(body) => body,
            // Once a 2xx arrived the request was processed: the broken body is the call's
            // failure, never a reason to send it again.
            Err(e) if is_success(status) => {
                return Err(from_reqwest(&e, &url, Some(status)).after_success());
            }
            // The status is the provider's answer even when its error body broke off.
            Err(e) => {
                let mut classified = self.wire.classify(status, &headers, &[]);
                let broke = from_reqwest(&e, &url, Some(status)).message;
                classified.message = if classified.message.is_empty() {
                    broke
                } else {
                    format!("{} ({broke})", classified.message)
                };
                return Err(classified);
            }
        };
        let latency = started.elapsed();
        if let Some(Tape::Record(tape)) = &self.tape {
            let digest = crate::digest::canonical(&request.body);
            tape.record(&digest, &request.body, status, &headers, &body);
        }
        self.answer(status, &headers, &body, latency)
    }

    fn answer(
        &self,
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
        latency: Duration,
    ) -> Result<(Reply, Duration), CallError> {
        if is_success(status) {
            self.wire
                .decode_for(body, &self.config)
                .map(|reply| (reply, latency))
                .map_err(|e| {
                    // An error object's own code (Gemini's 499 inside a 200) says more
                    // than the 2xx it came in.
                    let status = e.status.unwrap_or(status);
                    e.status(status).after_success()
                })
        } else {
            Err(self.wire.classify(status, headers, body))
        }
    }
}

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// The URL as an error may show it: `scheme://host:port/path`. No query, fragment or
/// user info: any of those could hold a key.
fn printable_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let host = u.host().map(|h| h.to_string()).unwrap_or_default();
            let port = u
                .port_or_known_default()
                .map(|p| format!(":{p}"))
                .unwrap_or_default();
            format!("{}://{host}{port}{}", u.scheme(), u.path())
        }
        Err(_) => "the configured base_url".to_string(),
    }
}

/// Classifies a client error, naming the URL it tried (`printable_url`). The message is
/// built from the error's kind, never from reqwest's own text, which can carry the whole
/// URL, query and all.
fn from_reqwest(e: &reqwest::Error, url: &str, status: Option<u16>) -> CallError {
    let (kind, message) = if e.is_timeout() {
        let when = if status.is_some() {
            "while reading the body"
        } else {
            "before a status arrived"
        };
        (
            ErrorKind::Timeout,
            format!("no complete answer from {url} before the timeout ({when})"),
        )
    } else if e.is_connect() {
        (
            ErrorKind::ConnectionRefused,
            format!("could not connect to {url}: {}", connect_failure(e)),
        )
    } else if status.is_some() {
        (
            ErrorKind::TruncatedBody,
            format!("the connection to {url} closed before the body was complete"),
        )
    } else {
        (
            ErrorKind::ConnectionReset,
            format!("the connection to {url} broke after the request was sent, before a status"),
        )
    };
    let error = CallError::new(kind, message);
    match status {
        Some(status) => error.status(status),
        None => error,
    }
}

/// Why a connection could not be made, in words, from the errors underneath (only
/// matched against, never printed: their text is not ours to vouch for).
fn connect_failure(e: &reqwest::Error) -> &'static str {
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        if inner.to_string().starts_with("dns error") {
            return "the host name did not resolve";
        }
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            return match io.kind() {
                Io::ConnectionRefused => "the connection was refused (is the server running?)",
                Io::TimedOut => "the connection attempt timed out",
                Io::NetworkUnreachable | Io::HostUnreachable => "the host is unreachable",
                _ => "the connection failed (name, network or TLS)",
            };
        }
        source = inner.source();
    }
    "the connection failed (name, network or TLS)"
}

impl Endpoint {
    /// How many HTTP requests this endpoint has sent (replayed answers are not sent).
    pub fn requests_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// The digest of the request body this call sends (the key travels in a header and
    /// is not part of it).
    pub fn request_digest(&self, call: &CallSpec<'_>) -> String {
        crate::digest::canonical(&self.wire.encode(call, &self.config, None).body)
    }
}
