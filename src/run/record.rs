//! One line of `results.jsonl`: one call of one case to one provider.

use serde::Serialize;

use crate::check::Outcome;
use crate::provider::{CallError, Finish, Usage};

/// Longest answer text kept in a record.
pub const MAX_OUTPUT: usize = 4096;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub suite: String,
    pub case: String,
    pub provider: String,
    pub repeat: u32,
    /// Digest of the request body (canonical JSON; the key is in a header, never here).
    pub request_digest: Option<String>,
    pub passed: bool,
    /// Why the call was not sent (the provider had been stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    pub latency_ms: Option<f64>,
    pub retries: u32,
    pub usage: Usage,
    pub served_model: Option<String>,
    pub system_fingerprint: Option<String>,
    pub finish: Option<Finish>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    pub checks: Vec<Outcome>,
    /// The answer text, cut at [`MAX_OUTPUT`] bytes.
    pub output: Option<String>,
}

impl CallRecord {
    pub fn not_run(suite: &str, case: &str, provider: &str, repeat: u32, why: String) -> Self {
        CallRecord {
            suite: suite.into(),
            case: case.into(),
            provider: provider.into(),
            repeat,
            request_digest: None,
            passed: false,
            not_run: Some(why),
            latency_ms: None,
            retries: 0,
            usage: Usage::default(),
            served_model: None,
            system_fingerprint: None,
            finish: None,
            error: None,
            checks: Vec::new(),
            output: None,
        }
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
