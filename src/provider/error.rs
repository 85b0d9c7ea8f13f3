//! Why a call produced no completion, classified once, with a stable code.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// The classification of a failed call. Each kind has a stable [`ErrorKind::code`]
/// that reports and CI can match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
    /// 429 that a wait can cure.
    RateLimited,
    /// 429 that needs a person (billing, a daily quota): never retried; stops the provider.
    QuotaExhausted,
    /// This request alone exceeds a size or token-per-minute limit: never retried.
    RequestTooLarge,
    /// 5xx.
    ServerError,
    /// 503/529: the provider is out of capacity.
    Overloaded,
    /// No complete answer within the provider's `timeout`.
    Timeout,
    /// The connection could not be made (refused, name or TLS failure).
    ConnectionRefused,
    /// The connection broke after the request was sent.
    ConnectionReset,
    /// The body ended before the JSON did.
    TruncatedBody,
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
    /// A transport failure: counts as a failed call, and toward the inconclusive share.
    Transport,
}

impl ErrorKind {
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth_failed",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::NotFound => "not_found",
            ErrorKind::ContextLength => "context_length_exceeded",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::QuotaExhausted => "quota_exhausted",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ConnectionRefused => "connection_refused",
            ErrorKind::ConnectionReset => "connection_reset",
            ErrorKind::TruncatedBody => "truncated_body",
            ErrorKind::NonJsonBody => "non_json_body",
            ErrorKind::HtmlErrorPage => "html_error_page",
            ErrorKind::InvalidResponse => "invalid_response",
            ErrorKind::UnexpectedStatus => "unexpected_status",
            ErrorKind::NotRecorded => "not_recorded",
        }
    }

    /// Whether waiting and sending the same request again can help. Replaying a
    /// conformance case has no side effects, so broken connections are retried too.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited
                | ErrorKind::ServerError
                | ErrorKind::Overloaded
                | ErrorKind::Timeout
                | ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::TruncatedBody
                | ErrorKind::NonJsonBody
                | ErrorKind::HtmlErrorPage
        )
    }

    pub fn effect(self) -> Effect {
        match self {
            ErrorKind::Auth | ErrorKind::QuotaExhausted | ErrorKind::ConnectionRefused => {
                Effect::HaltProvider
            }
            ErrorKind::BadRequest | ErrorKind::NotFound | ErrorKind::NotRecorded => {
                Effect::ConfigError
            }
            ErrorKind::ContextLength | ErrorKind::RequestTooLarge => Effect::ConformanceFailure,
            _ => Effect::Transport,
        }
    }
}

/// A failed call: its kind, the HTTP status if one came back, and the provider's own
/// message (never a secret: it comes from the response body, and keys are not echoed
/// there by any provider we know; [`CallError::scrub`] removes one all the same).
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
pub struct CallError {
    pub kind: ErrorKind,
    pub status: Option<u16>,
    pub message: String,
    /// How long the provider asked us to wait (`retry-after-ms`, `retry-after`).
    #[serde(skip)]
    pub retry_after: Option<Duration>,
    /// The provider's own word on retrying (`x-should-retry`), which overrides the kind.
    #[serde(skip)]
    pub should_retry: Option<bool>,
}

impl CallError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CallError {
            kind,
            status: None,
            message: message.into(),
            retry_after: None,
            should_retry: None,
        }
    }

    pub fn status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

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

    /// Whether sending the same request again can help: the provider's `x-should-retry`
    /// when it sent one (OpenAI and Anthropic do, and their SDKs obey it before anything
    /// else), otherwise what the kind says.
    pub fn retryable(&self) -> bool {
        self.should_retry.unwrap_or_else(|| self.kind.retryable())
    }

    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// Replaces every occurrence of `secret` in the message.
    pub fn scrub(mut self, secret: Option<&crate::secret::Secret>) -> Self {
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
        Ok(())
    }
}

/// The classification every vendor shares, from the status and body alone; each
/// [`crate::provider::WireFormat`] refines it with what its error bodies say.
pub fn classify_status(status: u16, body: &[u8], message: String) -> CallError {
    let kind = if looks_like_html(body) && !(status == 429 || status >= 500) {
        ErrorKind::HtmlErrorPage
    } else {
        match status {
            401 | 403 => ErrorKind::Auth,
            404 => ErrorKind::NotFound,
            408 => ErrorKind::Timeout,
            409 => ErrorKind::ServerError,
            413 => ErrorKind::RequestTooLarge,
            400 | 422 => ErrorKind::BadRequest,
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

/// Whether a body is an HTML page rather than JSON.
pub fn looks_like_html(body: &[u8]) -> bool {
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
pub fn mentions_context_length(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("maximum context length")
        || m.contains("context length")
        || m.contains("context_length_exceeded")
        || m.contains("exceed_context_size")
        || m.contains("prompt is too long")
        || m.contains("exceeds the maximum number of tokens")
        || m.contains("context window")
}

/// A short, printable excerpt of a body for an error message.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}
