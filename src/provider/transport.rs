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

    /// Calls the provider, retrying retryable failures within the configured bounds.
    /// `tokens` estimates the request's size for the tokens-per-minute limit.
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
            .notify(|_, _| {
                retries.fetch_add(1, Ordering::Relaxed);
            })
            .await;
        let retries = retries.load(Ordering::Relaxed);
        result
            .map(|(reply, latency)| Completion {
                reply,
                latency,
                retries,
            })
            .map_err(|e| e.scrub(self.key.as_ref()))
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
        let response = self
            .transport
            .client
            .post(&request.url)
            .headers(request.headers)
            .json(&request.body)
            .timeout(self.config.timeout)
            .send()
            .await
            .map_err(|e| from_reqwest(&e, false))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| from_reqwest(&e, true))?;
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
        if (200..300).contains(&status) {
            self.wire.decode(body).map(|reply| (reply, latency))
        } else {
            Err(self.wire.classify(status, headers, body))
        }
    }
}

/// Classifies a client error. The message is built from the error kind only: reqwest's
/// own text can carry the URL, and a URL can carry a key.
fn from_reqwest(e: &reqwest::Error, reading_body: bool) -> CallError {
    let (kind, message) = if e.is_timeout() {
        (ErrorKind::Timeout, "no complete answer before the timeout")
    } else if e.is_connect() {
        (
            ErrorKind::ConnectionRefused,
            "could not connect (refused, name or TLS failure)",
        )
    } else if reading_body {
        (
            ErrorKind::TruncatedBody,
            "the connection closed before the body was complete",
        )
    } else {
        (
            ErrorKind::ConnectionReset,
            "the connection broke after the request was sent",
        )
    };
    CallError::new(kind, message)
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
