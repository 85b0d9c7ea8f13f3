//! One line of `results.jsonl`: one call of one case to one provider.

use serde::{Deserialize, Serialize};

use crate::check::Outcome;
use conform_wire::provider::{CallError, Finish, ToolCall, Usage};

/// Longest excerpt of an answer shown in a finding's message.
pub const MAX_OUTPUT: usize = 4096;

/// Everything one call left: who was asked what, what came back, and what the checks said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The suite, by name.
    pub suite: String,
    /// The case, by id.
    pub case: String,
    /// The provider, by name.
    pub provider: String,
    /// Which send of the case this was, from 0.
    pub repeat: u32,
    /// Digest of the request body (canonical JSON; the key is in a header, never here).
    pub request_digest: Option<String>,
    /// Every check passed.
    pub passed: bool,
    /// Why the call was not sent (the provider had been stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    /// Milliseconds from the first byte sent to the last byte read; `None` when the call failed.
    pub latency_ms: Option<f64>,
    /// Time to the first byte of the body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfb_ms: Option<f64>,
    /// Time to the first piece of the answer: the first event carrying it, for a stream;
    /// the whole body, for an answer in one piece.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Transport retries before the last attempt.
    pub retries: u32,
    /// The token counts the provider reported.
    pub usage: Usage,
    /// The prompt tokens counted before the call with the provider's tokenizer, to set
    /// beside `usage.prompt_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_counted: Option<u64>,
    /// The provider's own count endpoint said its count is not all it bills (a
    /// `provider` tokenizer only; a local count is made again when the record is judged
    /// again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompt_count_inexact: bool,
    /// The model name the answer reported.
    pub served_model: Option<String>,
    /// The `system_fingerprint` the answer reported, where the provider gives one.
    pub system_fingerprint: Option<String>,
    /// Why the model stopped, when it answered.
    pub finish: Option<Finish>,
    /// The refusal text, when the model refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Why the call failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// Every check's outcome.
    pub checks: Vec<Outcome>,
    /// The whole answer text, so that `conform merge` can judge it again.
    pub output: Option<String>,
    /// The tool calls the answer made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Digest of the whole answer: canonical JSON when it parses, its bytes otherwise.
    /// Repeats agree when their digests are equal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_digest: Option<String>,
    /// What differential conformance compares, when the suite has a reference: written,
    /// so that `conform merge` compares shards exactly as the run would have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differential: Option<Box<crate::check::differential::Observed>>,
    /// The same case unstreamed, when the suite asks a streamed answer to agree with it:
    /// what that answer said, or how it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstreamed: Option<Box<Unstreamed>>,
    /// The answer came from a tape (`--replay`), not from the provider: never evidence
    /// about the provider today, whatever a shard's manifest says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Not sent because the pair's verdict was already decided: a saved call, neither
    /// evidence nor missing evidence (`not_run` says why).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub saved: bool,
}

/// The unstreamed twin of a streamed call, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unstreamed {
    /// The unstreamed call was answered.
    Answer {
        /// The answer's text.
        text: String,
        /// The tool calls it made.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The call failed: no answer to check.
    Failed(CallError),
}

impl CallRecord {
    /// A call that was not sent: `why` says why.
    pub fn not_run(suite: &str, case: &str, provider: &str, repeat: u32, why: String) -> Self {
        CallRecord {
            not_run: Some(why),
            ..CallRecord::new(suite, case, provider, repeat)
        }
    }

    /// A call about to be made: not passed, nothing measured yet.
    pub fn new(suite: &str, case: &str, provider: &str, repeat: u32) -> Self {
        CallRecord {
            suite: suite.into(),
            case: case.into(),
            provider: provider.into(),
            repeat,
            request_digest: None,
            passed: false,
            not_run: None,
            saved: false,
            latency_ms: None,
            ttfb_ms: None,
            ttft_ms: None,
            retries: 0,
            usage: Usage::default(),
            prompt_tokens_counted: None,
            prompt_count_inexact: false,
            served_model: None,
            system_fingerprint: None,
            finish: None,
            refusal: None,
            error: None,
            checks: Vec::new(),
            output: None,
            tool_calls: Vec::new(),
            output_digest: None,
            differential: None,
            unstreamed: None,
            replayed: false,
        }
    }
}

/// The digest repeats are compared by: canonical JSON when the answer parses (so key
/// order and spacing do not count as disagreement), the raw bytes otherwise.
pub fn output_digest(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => conform_config::digest::canonical_json(&value),
        Err(_) => conform_config::digest::bytes_hex(text.as_bytes()),
    }
}

/// [`reply_digest`] when the reply's text has been parsed already: `text_json` is that
/// text as JSON (`None` when it was not parsed, or did not parse).
pub fn reply_digest_parsed(
    text: &str,
    calls: &[ToolCall],
    text_json: Option<&serde_json::Value>,
) -> String {
    match text_json {
        Some(value) if calls.is_empty() => conform_config::digest::canonical_json(value),
        _ => reply_digest(text, calls),
    }
}

/// The digest repeats are compared by when the answer may hold tool calls: the text's
/// digest when it made none; else the canonical JSON of its text and of every call's name
/// and (parsed) arguments, so that argument spacing does not count as disagreement.
pub fn reply_digest(text: &str, calls: &[ToolCall]) -> String {
    if calls.is_empty() {
        return output_digest(text);
    }
    let content = calls
        .first()
        .filter(|c| c.raw_arguments == text)
        .map_or(text, |_| "");
    let calls: Vec<serde_json::Value> = calls
        .iter()
        .map(|c| {
            serde_json::json!({"name": c.name, "arguments": c.arguments.clone()
                .unwrap_or_else(|| serde_json::Value::String(c.raw_arguments.clone()))})
        })
        .collect();
    conform_config::digest::canonical_json(
        &serde_json::json!({"content": content, "tool_calls": calls}),
    )
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
