//! Why a call produced no completion, classified once, with a stable code.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::completion::Usage;
use super::policy::{self, Stage};

/// The classification of a failed call. Each kind has a stable [`ErrorKind::code`]
/// that reports and CI can match on.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 401/403, or a vendor's "invalid key": the provider is stopped, the run inconclusive.
    Auth,
    /// The provider rejected the request as malformed: our configuration is wrong for it.
    BadRequest,
    /// The model or endpoint does not exist: a configuration error.
    NotFound,
    /// The prompt does not fit the model's context: a conformance failure.
    ContextLength,
    /// The provider's content filter refused the prompt (Azure's 400 `content_filter`):
    /// its answer on this case, a conformance failure like a filtered completion.
    PromptFiltered,
    /// 429 that a wait can cure.
    RateLimited,
    /// 429 that needs a person (billing, a daily quota): never retried; stops the provider.
    QuotaExhausted,
    /// An account limit rather than the model's behaviour: this request alone exceeds the
    /// organisation's tokens-per-minute limit, or its size is refused (413). Never
    /// retried; stops the provider, like an exhausted quota.
    RequestTooLarge,
    /// 5xx.
    ServerError,
    /// 503/529: the provider is out of capacity.
    Overloaded,
    /// No complete answer within the provider's `timeout`.
    Timeout,
    /// The connection could not be made (refused, name or TLS failure), or a plain-HTTP
    /// base URL redirected to `https://`.
    ConnectionRefused,
    /// The connection broke after the request was sent.
    ConnectionReset,
    /// The body ended before the JSON did.
    TruncatedBody,
    /// A streamed answer ended without the vendor's terminal event (OpenAI `[DONE]` and a
    /// `finish_reason`, Anthropic `message_stop`, Gemini's final `finishReason`, Ollama's
    /// `done: true`, a Responses `response.completed`): however plausible its text, the
    /// answer was cut off.
    StreamTruncated,
    /// A success status whose body is not JSON.
    NonJsonBody,
    /// An HTML page where JSON was expected (a proxy or gateway error page).
    HtmlErrorPage,
    /// JSON of the wrong shape: no choices, no content.
    InvalidResponse,
    /// Any other status.
    UnexpectedStatus,
    /// Replaying: the tape holds no answer to this request.
    NotRecorded,
}

/// What a final (not retried, or out of retries) error means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The provider cannot be tested: stop calling it; its verdict is inconclusive.
    HaltProvider,
    /// Our configuration is wrong for this provider: stop calling it; exit code 2.
    ConfigError,
    /// The model failed the contract on this case.
    ConformanceFailure,
    /// The provider's own failure to answer, though it was reached: a stream it cut, an
    /// error event it sent, a 2xx it made unreadable, a 5xx that outlasted its retries.
    /// It counts against the provider exactly as the model's failures do: more of them
    /// never make a verdict weaker.
    ProviderFailure,
    /// A failure that says nothing about the provider's answers (our network, a 429 past
    /// its retries): a failed call, never the provider's; too many make the verdict
    /// inconclusive, and a pass short only because of them is inconclusive too.
    Transport,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [ErrorKind] = &[
        ErrorKind::Auth,
        ErrorKind::BadRequest,
        ErrorKind::NotFound,
        ErrorKind::ContextLength,
        ErrorKind::PromptFiltered,
        ErrorKind::RateLimited,
        ErrorKind::QuotaExhausted,
        ErrorKind::RequestTooLarge,
        ErrorKind::ServerError,
        ErrorKind::Overloaded,
        ErrorKind::Timeout,
        ErrorKind::ConnectionRefused,
        ErrorKind::ConnectionReset,
        ErrorKind::TruncatedBody,
        ErrorKind::StreamTruncated,
        ErrorKind::NonJsonBody,
        ErrorKind::HtmlErrorPage,
        ErrorKind::InvalidResponse,
        ErrorKind::UnexpectedStatus,
        ErrorKind::NotRecorded,
    ];

    /// The stable snake-case name records, reports and the README use.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth_failed",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::NotFound => "not_found",
            ErrorKind::ContextLength => "context_length_exceeded",
            ErrorKind::PromptFiltered => "prompt_filtered",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::QuotaExhausted => "quota_exhausted",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ConnectionRefused => "connection_refused",
            ErrorKind::ConnectionReset => "connection_reset",
            ErrorKind::TruncatedBody => "truncated_body",
            ErrorKind::StreamTruncated => "stream_truncated",
            ErrorKind::NonJsonBody => "non_json_body",
            ErrorKind::HtmlErrorPage => "html_error_page",
            ErrorKind::InvalidResponse => "invalid_response",
            ErrorKind::UnexpectedStatus => "unexpected_status",
            ErrorKind::NotRecorded => "not_recorded",
        }
    }

    /// Whether a failure of this kind is sent again when no 2xx status arrived (see
    /// [`policy::TABLE`]); a [`CallError`] knows its stage: use [`CallError::retryable`].
    pub fn retryable(self) -> bool {
        policy::rule(self, Stage::BeforeSuccess).retried
    }

    /// What a final failure of this kind means when no 2xx status arrived; a
    /// [`CallError`] knows its stage: use [`CallError::effect`].
    pub fn effect(self) -> Effect {
        policy::rule(self, Stage::BeforeSuccess).effect
    }
}

/// A failed call: its kind, the HTTP status if one came back, and the provider's own
/// message (never a secret: it comes from the response body, and keys are not echoed
/// there by any provider we know; [`CallError::scrub`] removes one all the same).
///
/// A failure after a 2xx also keeps what the body did say (usage, the served model), and
/// a failure after retries says how many were made: the run's record carries both.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, thiserror::Error)]
pub struct CallError {
    /// What went wrong, as the retry and verdict policy classifies it.
    pub kind: ErrorKind,
    /// The HTTP status, when a response came back.
    pub status: Option<u16>,
    /// The provider's own message, or what conform saw.
    pub message: String,
    /// Whether a 2xx status had arrived: after one, nothing is retried. Written only
    /// when one had (`"stage": "after_success"`), so `conform merge` reads the same
    /// effect back from a record.
    #[serde(default, skip_serializing_if = "Stage::is_before_success")]
    pub stage: Stage,
    /// Requests sent after the first one, when this is the call's final error.
    #[serde(skip)]
    pub retries: u32,
    /// What a processed (2xx) but unusable body said about itself, when it said anything
    /// (boxed: most errors carry none, and every `Result` carries the error's size).
    #[serde(skip)]
    pub served: Option<Box<Served>>,
    /// How long the provider asked us to wait (`retry-after-ms`, `retry-after`).
    #[serde(skip)]
    pub retry_after: Option<Duration>,
    /// The provider's own word on retrying (`x-should-retry`), which overrides the kind.
    #[serde(skip)]
    pub should_retry: Option<bool>,
    /// How long the call took, for a failure after its response began.
    #[serde(skip)]
    pub measured: Option<Measured>,
    /// Where the request went (`POST scheme://host:port/path`, never a query), for an
    /// HTTP error: the vendor's words stay in `message` as the vendor wrote them.
    /// (Boxed: every `Result` of a call carries the error's size.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_to: Option<Box<String>>,
}

impl CallError {
    /// An error of `kind`, before any 2xx, with nothing yet known of retries or timing.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CallError {
            kind,
            status: None,
            message: message.into(),
            stage: Stage::BeforeSuccess,
            retries: 0,
            served: None,
            retry_after: None,
            should_retry: None,
            measured: None,
            sent_to: None,
        }
    }

    /// Keeps what a stream had said of the answer before it failed.
    pub fn keep_text(mut self, text: Option<String>) -> Self {
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            self.served.get_or_insert_with(Default::default).text = Some(text);
        }
        self
    }

    /// The answer's text a broken stream had delivered.
    pub fn partial_text(&self) -> Option<&str> {
        self.served.as_ref().and_then(|s| s.text.as_deref())
    }

    /// Keeps how long the call took; the first measure stands.
    pub fn timed(mut self, measured: Measured) -> Self {
        self.measured.get_or_insert(measured);
        self
    }

    /// Marks the error as one that happened after a 2xx status arrived.
    pub fn after_success(mut self) -> Self {
        self.stage = Stage::AfterSuccess;
        self
    }

    /// Keeps what a processed body said about itself, where the error has not already
    /// learnt it (a count or a name the error knows wins).
    pub fn keep_served(
        mut self,
        usage: Usage,
        model: Option<String>,
        fingerprint: Option<String>,
    ) -> Self {
        let known = self.served.take().map(|s| *s).unwrap_or_default();
        let merged = Served {
            usage: Usage {
                prompt_tokens: known.usage.prompt_tokens.or(usage.prompt_tokens),
                output_tokens: known.usage.output_tokens.or(usage.output_tokens),
            },
            model: known.model.or(model),
            system_fingerprint: known.system_fingerprint.or(fingerprint),
            text: known.text,
        };
        if merged != Served::default() {
            self.served = Some(Box::new(merged));
        }
        self
    }

    /// The token usage a processed body reported; unknown counts are `None`.
    pub fn usage(&self) -> Usage {
        self.served.as_ref().map(|s| s.usage).unwrap_or_default()
    }

    /// The model a processed body named.
    pub fn served_model(&self) -> Option<&str> {
        self.served.as_ref().and_then(|s| s.model.as_deref())
    }

    /// The system fingerprint a processed body carried.
    pub fn system_fingerprint(&self) -> Option<&str> {
        self.served
            .as_ref()
            .and_then(|s| s.system_fingerprint.as_deref())
    }

    /// Sets the HTTP status that came back.
    pub fn status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets how long the provider asked to wait before a retry.
    pub fn retry_after(mut self, wait: Option<Duration>) -> Self {
        self.retry_after = wait;
        self
    }

    /// What the response's headers say about retrying: `retry-after-ms` or
    /// `retry-after`, and `x-should-retry`.
    pub fn server_hints(self, headers: &reqwest::header::HeaderMap) -> Self {
        CallError {
            should_retry: super::should_retry(headers),
            ..self.retry_after(super::retry_after(headers))
        }
    }

    /// Whether to send the same request again: never once a 2xx arrived (the provider
    /// processed it); before that, the provider's `x-should-retry` when it sent one
    /// (OpenAI and Anthropic do, and their SDKs obey it before anything else), otherwise
    /// the [`policy::TABLE`].
    pub fn retryable(&self) -> bool {
        match self.stage {
            Stage::AfterSuccess => false,
            Stage::BeforeSuccess => self.should_retry.unwrap_or_else(|| self.kind.retryable()),
        }
    }

    /// What this failure means for the run, from the [`policy::TABLE`] at its stage.
    pub fn effect(&self) -> Effect {
        policy::rule(self.kind, self.stage).effect
    }

    /// The kind's stable code.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// Names the address the request went to, unless the message already does (a
    /// connection error names it in its own words).
    pub fn sent_to(mut self, url: &str) -> CallError {
        if !self.message.contains(url) {
            self.sent_to = Some(Box::new(format!("POST {url}")));
        }
        self
    }

    /// Replaces every occurrence of `secret` in the message.
    pub fn scrub(mut self, secret: Option<&conform_config::secret::Secret>) -> Self {
        if let Some(secret) = secret
            && !secret.expose().is_empty()
        {
            self.message = self.message.replace(secret.expose(), "***");
        }
        self
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.code())?;
        if let Some(status) = self.status {
            write!(f, " (HTTP {status})")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(to) = &self.sent_to {
            write!(f, " ({to})")?;
        }
        Ok(())
    }
}

/// What a processed (2xx) body said about itself although it could not be used: what the
/// call cost and who served it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    /// The tokens the call cost.
    pub usage: Usage,
    /// The model that served it.
    pub model: Option<String>,
    /// The backend configuration that served it (OpenAI's `system_fingerprint`).
    pub system_fingerprint: Option<String>,
    /// The answer's text as far as a stream had delivered it before it broke off or
    /// failed: the whole valid JSON may have arrived before a cut.
    pub text: Option<String>,
}

/// What the transport measured of a call that failed after its response began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measured {
    /// First byte sent to the last byte read.
    pub latency: Duration,
    /// First byte sent to the first byte of the body.
    pub first_byte: Option<Duration>,
    /// When the first piece of the answer arrived.
    pub first_token: Option<Duration>,
}

/// The classification every vendor shares, from the status and body alone; each
/// [`crate::provider::WireFormat`] refines it with what its error bodies say.
pub(crate) fn classify_status(status: u16, body: &[u8], message: String) -> CallError {
    // An HTML page is a proxy's or gateway's answer; a 413, 429 or 5xx still means what
    // its status says, whatever page it came with.
    let kind = if looks_like_html(body) && !(status == 413 || status == 429 || status >= 500) {
        ErrorKind::HtmlErrorPage
    } else {
        match status {
            401 | 403 => ErrorKind::Auth,
            404 => ErrorKind::NotFound,
            408 => ErrorKind::Timeout,
            409 => ErrorKind::ServerError,
            413 => ErrorKind::RequestTooLarge,
            400 | 422 => ErrorKind::BadRequest,
            429 if exceeds_account_limit(&message) => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimited,
            503 | 529 => ErrorKind::Overloaded,
            500..=599 => ErrorKind::ServerError,
            _ => ErrorKind::UnexpectedStatus,
        }
    };
    let message = if message.is_empty() && looks_like_html(body) {
        "an HTML page instead of a JSON error body (a proxy or gateway answered)".to_string()
    } else {
        message
    };
    CallError::new(kind, message).status(status)
}

/// A rate limit that resets tomorrow is not worth waiting for.
pub(crate) fn is_daily_quota(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("per day") || m.contains("requests per day") || m.contains("(rpd)")
}

/// Whether a body is an HTML page rather than JSON.
pub(crate) fn looks_like_html(body: &[u8]) -> bool {
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    let head = &body[start..body.len().min(start + 64)];
    let head = String::from_utf8_lossy(head).to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html") || head.starts_with("<head")
}

/// Whether a provider's message says the prompt does not fit the context window.
/// Several servers say so only in prose (vLLM, Anthropic, Ollama, Gemini).
pub(crate) fn mentions_context_length(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("maximum context length")
        || m.contains("context length")
        || m.contains("context_length_exceeded")
        || m.contains("exceed_context_size")
        || m.contains("prompt is too long")
        || m.contains("exceeds the maximum number of tokens")
        || m.contains("context window")
}

/// Whether a limit message says this request alone is over an account's limit, so that
/// no wait can cure it: OpenAI's "Request too large for gpt-4o in organization … on tokens
/// per min (TPM): Limit 30000, Requested 30601" (and the hosts that copy it), or any
/// message whose `Requested` count is above its `Limit`. A plain "Rate limit reached …
/// Limit 30000, Used 29000, Requested 1500" is a wait, not this.
pub(crate) fn exceeds_account_limit(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    if m.contains("request too large") || m.contains("request is too large") {
        return true;
    }
    match (number_after(&m, "limit"), number_after(&m, "requested")) {
        (Some(limit), Some(requested)) => requested > limit,
        _ => false,
    }
}

/// The first number that follows `word` (and a colon or spaces) somewhere in `text`;
/// thousands separators are allowed.
fn number_after(text: &str, word: &str) -> Option<u64> {
    text.match_indices(word).find_map(|(at, _)| {
        let rest = text[at + word.len()..].trim_start_matches([' ', ':']);
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// A short, printable excerpt of a body for an error message.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_over_the_limit_by_itself_is_an_account_limit() {
        assert!(exceeds_account_limit(
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 30601."
        ));
        // Another host's wording, told by the numbers alone.
        assert!(exceeds_account_limit(
            "Rate limit exceeded on tokens per minute (TPM): Limit 6,000, Requested 7,042"
        ));
        // Busy, not too large: a wait cures it.
        assert!(!exceeds_account_limit(
            "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 1s."
        ));
        assert!(!exceeds_account_limit("too many requests"));
    }

    #[test]
    fn after_a_2xx_nothing_is_retried_whatever_the_headers_say() {
        for kind in ErrorKind::ALL {
            let mut e = CallError::new(*kind, "x").after_success();
            e.should_retry = Some(true);
            assert!(!e.retryable(), "{kind:?}");
            assert_eq!(e.effect(), Effect::ProviderFailure, "{kind:?}");
        }
        let mut before = CallError::new(ErrorKind::BadRequest, "x");
        before.should_retry = Some(true);
        assert!(before.retryable());
    }
}
