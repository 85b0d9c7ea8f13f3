//! The one normalized answer every wire format decodes into.

use std::time::Duration;

use serde::Serialize;

/// Why the model stopped, normalized, with the vendor's raw value kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishKind {
    /// A normal end of the answer (including a forced tool call that completed).
    Stop,
    /// Cut off at the output token limit.
    Length,
    /// The model declined to answer.
    Refusal,
    /// A safety or content filter stopped the answer.
    ContentFilter,
    /// Anything else; see the raw value.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finish {
    pub kind: FinishKind,
    /// The vendor's own word (`stop`, `end_turn`, `MAX_TOKENS` …), when it sent one.
    pub raw: Option<String>,
}

impl Finish {
    pub fn new(kind: FinishKind, raw: Option<&str>) -> Self {
        Finish {
            kind,
            raw: raw.map(str::to_string),
        }
    }
}

/// Token usage as the provider reported it. A missing count is unknown, never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// What a wire format decodes from a successful response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reply {
    /// The answer text: what the checks parse as JSON.
    pub text: String,
    pub finish: Finish,
    /// The refusal text, when the model refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    pub usage: Usage,
    /// The model that actually answered (`gpt-4o-2024-08-06` for `gpt-4o`).
    pub served_model: Option<String>,
    pub system_fingerprint: Option<String>,
}

/// A reply with what the transport measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    #[serde(flatten)]
    pub reply: Reply,
    /// From the first byte sent to the last byte read, of the request that succeeded.
    #[serde(serialize_with = "millis")]
    pub latency: Duration,
    /// From the first byte sent to the first byte of the body; `None` when nothing was
    /// sent (a replayed answer).
    #[serde(serialize_with = "millis_opt", skip_serializing_if = "Option::is_none")]
    pub first_byte: Option<Duration>,
    /// From the first byte sent to the first piece of the answer: the event that carried
    /// it, for a stream; the whole body, for an answer that came in one piece (nothing of
    /// it could be shown before). `None` when nothing was sent.
    #[serde(serialize_with = "millis_opt", skip_serializing_if = "Option::is_none")]
    pub first_token: Option<Duration>,
    /// Requests sent after the first one.
    pub retries: u32,
}

pub(crate) fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0)
}

fn millis_opt<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => millis(d, s),
        None => s.serialize_none(),
    }
}
