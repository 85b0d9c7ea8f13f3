//! Sending one call: rate limits, one HTTP request per attempt, bounded retries that
//! honour `Retry-After`, and the classification of whatever comes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use super::auth::{self, Authorize, Environment, Outgoing};
use super::encoded::BadUrl;
use super::error::{CallError, ErrorKind};
use super::limits::{CallSlot, Pace, Pacer, RateLimitInfo};
use super::tape::{Recorder, Replayer};
use super::template::Templates;
use super::{CallSpec, Completion, Encoded, Reply, WireFormat, WireRequest};
use conform_config::ProviderConfig;
use conform_config::secret::Secret;

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
    /// A client for any address, `https://` included: it loads the system's TLS roots.
    pub fn new() -> Result<Transport, SetupError> {
        Transport::build(true)
    }

    /// A client for these base URLs. The system's TLS roots are loaded only when one of
    /// them is `https://` (or is not a URL, or a proxy is configured): reading and parsing
    /// every certificate file was a quarter of the CPU of a one-call run against a
    /// loopback server, a simulation or a replay. Without them, a redirect to `https://`
    /// is refused with a message that names it, instead of failing on the certificate.
    pub fn for_addresses<'a>(
        addresses: impl IntoIterator<Item = &'a str>,
    ) -> Result<Transport, SetupError> {
        let plain =
            |address: &str| reqwest::Url::parse(address).is_ok_and(|url| url.scheme() == "http");
        let proxied = PROXY_VARIABLES
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        Transport::build(proxied || !addresses.into_iter().all(plain))
    }

    fn build(tls_roots: bool) -> Result<Transport, SetupError> {
        // Installing twice is harmless; the error only says a provider is already there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .pool_max_idle_per_host(256)
            .connect_timeout(Duration::from_secs(10));
        let builder = if tls_roots {
            builder
        } else {
            builder
                .tls_certs_only(std::iter::empty())
                .redirect(reqwest::redirect::Policy::custom(|attempt| {
                    if attempt.url().scheme() == "https" {
                        let to = printable_url(&Ok(attempt.url().clone()));
                        attempt.error(RedirectedToHttps(to))
                    } else if attempt.previous().len() >= MAX_REDIRECTS {
                        attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
                    } else {
                        attempt.follow()
                    }
                }))
        };
        Ok(Transport {
            client: builder.build()?,
        })
    }
}

/// The environment variables through which reqwest finds a proxy, which may itself be
/// reached over TLS.
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// reqwest's own limit, kept when its policy is replaced.
const MAX_REDIRECTS: usize = 10;

/// A plain-HTTP base URL redirected the call to an `https://` address (the client was
/// built for plain HTTP only, see [`Transport::for_addresses`]).
#[derive(Debug, thiserror::Error)]
#[error("it redirected to {0}")]
struct RedirectedToHttps(String);

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
    /// The provider's configuration as the run uses it.
    pub config: Arc<ProviderConfig>,
    /// The same provider asked for one document instead of a stream (`stream = false`):
    /// what a suite's `stream_agreement` compares the streamed answer with.
    unstreamed: Arc<ProviderConfig>,
    wire: Arc<dyn WireFormat>,
    key: Option<Secret>,
    /// How each attempt is authenticated, where the wire does not put `key` in the
    /// request itself; the error every call ends with when the credentials are unusable.
    auth: Result<auth::Credentials, auth::CredentialError>,
    pacer: Pacer,
    transport: Transport,
    tape: Option<Tape>,
    /// HTTP requests sent so far, retries included: what an interrupted run reports.
    sent: AtomicU64,
    /// The last URL parsed, and what it parsed to: nearly every call goes to the same one.
    last_url: std::sync::Mutex<Option<(String, reqwest::Url)>>,
    /// Each shape of prompt call's request, encoded once and filled in for every call.
    templates: Templates,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint that calls `config` through `wire` over `transport`, paced by its limits.
    pub fn new(
        config: Arc<ProviderConfig>,
        wire: Arc<dyn WireFormat>,
        key: Option<Secret>,
        transport: Transport,
    ) -> Self {
        let pacer = Pacer::new(&config.limits);
        let auth = wire.credentials(&config, key.as_ref(), &auth::ProcessEnvironment);
        let unstreamed = if config.stream {
            Arc::new(config.unstreamed())
        } else {
            Arc::clone(&config)
        };
        Endpoint {
            config,
            unstreamed,
            wire,
            key,
            auth,
            pacer,
            transport,
            tape: None,
            sent: AtomicU64::new(0),
            last_url: std::sync::Mutex::new(None),
            templates: Templates::default(),
        }
    }

    /// Whether answers come from a tape (`--replay`) rather than from the provider.
    pub fn replays(&self) -> bool {
        matches!(self.tape, Some(Tape::Replay(_)))
    }

    /// Authenticates with the credentials `env` holds instead of the process's own
    /// environment (a test's keys, a service account file of its own).
    pub fn with_environment(self, env: &dyn Environment) -> Self {
        let auth = self.wire.credentials(&self.config, self.key.as_ref(), env);
        Endpoint { auth, ..self }
    }

    /// Authenticates every attempt with `credentials`.
    pub fn with_credentials(self, credentials: Arc<dyn Authorize>) -> Self {
        Endpoint {
            auth: Ok(Some(credentials)),
            ..self
        }
    }

    /// `error` without any key, token or secret this endpoint holds.
    fn scrubbed(&self, error: CallError) -> CallError {
        let error = error.scrub(self.key.as_ref());
        match &self.auth {
            Ok(Some(credentials)) => auth::scrub(error, &credentials.secrets()),
            _ => error,
        }
    }

    /// The request's headers with this attempt's authentication, where the transport
    /// adds it ([`auth`]).
    async fn authorized(&self, request: &Encoded) -> Result<reqwest::header::HeaderMap, CallError> {
        let credentials = match &self.auth {
            Ok(Some(credentials)) => credentials,
            Ok(None) => return Ok(request.headers.clone()),
            Err(e) => return Err(e.call_error()),
        };
        // A URL that does not parse fails the call as it always has, unsigned.
        let Ok(url) = &request.url else {
            return Ok(request.headers.clone());
        };
        let outgoing = Outgoing {
            url,
            headers: &request.headers,
            body: &request.bytes,
        };
        let added = credentials
            .authorize(outgoing, &self.transport.client)
            .await?;
        let mut headers = request.headers.clone();
        headers.extend(added);
        Ok(headers)
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
        self.send(&self.encode(call), tokens).await
    }

    /// [`Endpoint::call`] with a request already encoded (by [`Endpoint::encode`]), whose
    /// digest the caller has read.
    pub async fn send(&self, request: &Encoded, tokens: u32) -> Result<Completion, CallError> {
        self.call_as(&self.config, request, tokens).await
    }

    /// Encodes `call` for this provider once: every attempt sends these bytes.
    pub fn encode(&self, call: &CallSpec<'_>) -> Encoded {
        self.templates.encode(
            call,
            |call| self.wire.encode(call, &self.config, self.key.as_ref()),
            |request| self.finish(request),
        )
    }

    fn encode_as(&self, config: &ProviderConfig, call: &CallSpec<'_>) -> Encoded {
        self.finish(self.wire.encode(call, config, self.key.as_ref()))
    }

    fn finish(&self, request: WireRequest) -> Encoded {
        let url = self.parse_url(&request.url);
        Encoded::of(request, url)
    }

    /// Parses `url`, or reuses the parse of the same URL the call before.
    fn parse_url(&self, url: &str) -> Result<reqwest::Url, BadUrl> {
        let mut last = self.last_url.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((text, parsed)) = last.as_ref()
            && text == url
        {
            return Ok(parsed.clone());
        }
        let parsed = reqwest::Url::parse(url).map_err(|_| BadUrl)?;
        *last = Some((url.to_string(), parsed.clone()));
        Ok(parsed)
    }

    /// [`Endpoint::call`], asking for one document even when the provider streams: the
    /// other half of a suite's `stream_agreement`.
    pub async fn call_unstreamed(
        &self,
        call: &CallSpec<'_>,
        tokens: u32,
    ) -> Result<Completion, CallError> {
        let request = self.encode_as(&self.unstreamed, call);
        self.call_as(&self.unstreamed, &request, tokens).await
    }

    async fn call_as(
        &self,
        config: &ProviderConfig,
        request: &Encoded,
        tokens: u32,
    ) -> Result<Completion, CallError> {
        let limits = &config.limits;
        let retries = AtomicU32::new(0);
        let policy = ExponentialBuilder::default()
            .with_min_delay(limits.retry_base_wait)
            .with_max_delay(limits.max_retry_wait)
            .with_max_times(limits.max_retries as usize)
            .with_jitter();
        let max_wait = limits.max_retry_wait;
        let result = (|| self.once(config, request, tokens))
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
                    error = %self.scrubbed(e.clone()),
                    "retrying"
                );
            })
            .await;
        let retries = retries.load(Ordering::Relaxed);
        match result {
            Ok((reply, timing)) => Ok(Completion {
                reply,
                latency: timing.total,
                first_byte: timing.first_byte,
                first_token: timing.first_token,
                retries,
            }),
            Err(e) => Err(CallError {
                retries,
                ..self.scrubbed(e)
            }),
        }
    }

    /// Exactly one HTTP request, or, replaying, the next recorded answer to it.
    async fn once(
        &self,
        config: &ProviderConfig,
        request: &Encoded,
        tokens: u32,
    ) -> Result<(Reply, Timing), CallError> {
        if let Some(Tape::Replay(tape)) = &self.tape {
            let Some((status, headers, body)) = tape.next(&request.digest) else {
                return Err(CallError::new(
                    ErrorKind::NotRecorded,
                    format!(
                        "{} holds no (further) answer to this request: record the tape again",
                        tape.path().display()
                    ),
                ));
            };
            return self
                .answer(config.stream, status, &headers, &body)
                .map(|reply| (reply, Timing::default()));
        }
        let ticket = self.pacer.acquire(tokens).await;
        let mut limits = RateLimitInfo::default();
        let result = self.exchange(config, request, &mut limits).await;
        let throttled = match &result {
            Err(e) if e.kind == ErrorKind::RateLimited => Some(e.retry_after),
            _ => None,
        };
        self.pacer.answered(&ticket, &limits, throttled);
        result
    }

    /// One HTTP request and what came back; `limits` gets what its headers said of the
    /// account's rate limits.
    async fn exchange(
        &self,
        config: &ProviderConfig,
        request: &Encoded,
        limits: &mut RateLimitInfo,
    ) -> Result<(Reply, Timing), CallError> {
        // Before the request counts as sent: credentials that cannot be had send nothing.
        let headers = self.authorized(request).await?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let url = &request.url;
        let Ok(address) = url else {
            return Err(CallError::new(
                ErrorKind::ConnectionRefused,
                "cannot send to the configured base_url: it is not a valid URL".to_string(),
            ));
        };
        let mut response = self
            .transport
            .client
            .post(address.clone())
            .headers(headers)
            .body(request.bytes.clone())
            .timeout(config.timeout)
            .send()
            .await
            .map_err(|e| from_reqwest(&e, url, None))?;
        let status = response.status().as_u16();
        let headers = std::mem::take(response.headers_mut());
        *limits = self.wire.rate_limits(&headers);
        // Read chunk by chunk, noting when each arrived: a stream's first token is timed
        // by the chunk that completed the event carrying it.
        let mut body = Vec::new();
        let mut arrivals = Arrivals::default();
        let broke = loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    arrivals.note(body.len(), started.elapsed());
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        if let Some(e) = broke {
            // Once a 2xx arrived the request was processed: the broken body is the call's
            // failure, never a reason to send it again.
            if is_success(status) {
                let broke = from_reqwest(&e, url, Some(status)).after_success();
                return match config.stream {
                    true => self.broken_stream(&body, broke, started.elapsed(), &arrivals),
                    false => Err(broke),
                };
            }
            // The status is the provider's answer even when its error body broke off.
            let mut classified = self.wire.classify(status, &headers, &[]);
            let broke = from_reqwest(&e, url, Some(status)).message;
            classified.message = if classified.message.is_empty() {
                broke
            } else {
                format!("{} ({broke})", classified.message)
            };
            return Err(classified.sent_to(&printable_url(url)));
        }
        let total = started.elapsed();
        if let Some(Tape::Record(tape)) = &self.tape {
            tape.record(&request.digest, &request.bytes, status, &headers, &body);
        }
        let streamed = config.stream.then_some(body.as_slice());
        let timing = self.timing(streamed, total, &arrivals);
        // A body that arrived whole and cannot be used still took its time.
        let reply = self
            .answer(config.stream, status, &headers, &body)
            .map_err(|e| match is_success(status) {
                true => e.timed(timing.measured()),
                // Which address refused is the first thing to check (a doubled `/v1`,
                // a wrong port): every HTTP error names it, as connection errors do.
                false => e.sent_to(&printable_url(url)),
            })?;
        Ok((reply, timing))
    }

    /// A streamed body whose connection broke after a 2xx: what the stream said up to
    /// there decides. Without its terminal event it was cut off (`stream_truncated`), an
    /// error event in it is that error, and a stream that had ended properly is the
    /// answer. A stall past the timeout stays a timeout.
    fn broken_stream(
        &self,
        body: &[u8],
        broke: CallError,
        total: Duration,
        arrivals: &Arrivals,
    ) -> Result<(Reply, Timing), CallError> {
        match self.wire.decode_stream(body) {
            Ok(reply) => Ok((reply, self.timing(Some(body), total, arrivals))),
            Err(decoded) if broke.kind == ErrorKind::Timeout => {
                let served = decoded.served.map(|s| *s).unwrap_or_default();
                Err(broke
                    .keep_served(served.usage, served.model, served.system_fingerprint)
                    .keep_text(served.text)
                    .timed(self.timing(Some(body), total, arrivals).measured()))
            }
            Err(mut decoded) => {
                if decoded.kind == ErrorKind::StreamTruncated {
                    decoded.message = format!(
                        "{} (the connection closed after {} bytes)",
                        decoded.message,
                        body.len()
                    );
                }
                let status = decoded.status.or(broke.status).unwrap_or(200);
                Err(decoded
                    .status(status)
                    .after_success()
                    .timed(self.timing(Some(body), total, arrivals).measured()))
            }
        }
    }

    /// What a request measured; `streamed` is the body of a call that asked for a stream.
    fn timing(&self, streamed: Option<&[u8]>, total: Duration, arrivals: &Arrivals) -> Timing {
        let first_token = streamed
            .and_then(|body| self.wire.first_token_end(body))
            .and_then(|end| arrivals.at(end));
        Timing {
            total,
            first_byte: arrivals.first().or(Some(total)),
            // An answer in one piece shows nothing before it is whole.
            first_token: first_token.or(Some(total)),
        }
    }

    fn answer(
        &self,
        stream: bool,
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) -> Result<Reply, CallError> {
        if is_success(status) {
            let decoded = if stream {
                self.wire.decode_stream(body)
            } else {
                self.wire.decode(body)
            };
            decoded.map_err(|e| {
                // An error object's own code (Gemini's 499 inside a 200) says more than
                // the 2xx it came in.
                let status = e.status.unwrap_or(status);
                e.status(status).after_success()
            })
        } else {
            Err(self.wire.classify(status, headers, body))
        }
    }
}

/// What one request measured.
#[derive(Debug, Clone, Copy, Default)]
struct Timing {
    total: Duration,
    first_byte: Option<Duration>,
    first_token: Option<Duration>,
}

impl Timing {
    fn measured(self) -> super::error::Measured {
        super::error::Measured {
            latency: self.total,
            first_byte: self.first_byte,
            first_token: self.first_token,
        }
    }
}

/// When the body had reached each length: one mark per chunk read.
#[derive(Debug, Default)]
struct Arrivals {
    marks: Vec<(usize, Duration)>,
}

impl Arrivals {
    fn note(&mut self, length: usize, at: Duration) {
        self.marks.push((length, at));
    }

    /// When the first byte of the body arrived.
    fn first(&self) -> Option<Duration> {
        self.marks.first().map(|(_, at)| *at)
    }

    /// When the body first held `length` bytes.
    fn at(&self, length: usize) -> Option<Duration> {
        let i = self.marks.partition_point(|(len, _)| *len < length);
        self.marks.get(i).map(|(_, at)| *at)
    }
}

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// The URL as an error may show it: `scheme://host:port/path`. No query, fragment or
/// user info: any of those could hold a key.
fn printable_url(url: &Result<reqwest::Url, BadUrl>) -> String {
    match url {
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
fn from_reqwest(
    e: &reqwest::Error,
    url: &Result<reqwest::Url, BadUrl>,
    status: Option<u16>,
) -> CallError {
    let url = printable_url(url);
    let (kind, message) = if e.is_redirect() {
        let to = std::error::Error::source(e)
            .and_then(|inner| inner.downcast_ref::<RedirectedToHttps>())
            .map(|r| format!(": {r}; put that address in the provider file's base_url"));
        (
            ErrorKind::ConnectionRefused,
            match to {
                Some(to) => format!("{url} was not followed{to}"),
                None => format!("{url} redirected too many times"),
            },
        )
    } else if e.is_timeout() {
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

    /// How this endpoint is paced now: the limits learnt from the provider's answers.
    pub fn pace(&self) -> Pace {
        self.pacer.pace()
    }

    /// Waits for room for one more call in flight (`Pacer::call`).
    pub async fn call_slot(&self) -> CallSlot<'_> {
        self.pacer.call().await
    }

    /// The most calls ever in flight at once to this endpoint.
    pub fn max_in_flight(&self) -> usize {
        self.pacer.max_in_flight()
    }
}
