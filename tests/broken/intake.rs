//! Broken intake: how bodies are parsed and read, and how overload is answered.

use std::sync::Arc;

use axum::body::BodyDataStream;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use conform_serve::ledger::fingerprint::BodyError;
use conform_serve::orchestrator::intake::{BodyIntake, Received};
use conform_serve::orchestrator::overload::Overload;
use conform_serve::orchestrator::parser::BodyParser;
use conform_serve::orchestrator::problem::Problem;
use futures::future::BoxFuture;
use serde_json::Value;

/// A body nested deeper than the parser allows panics the handler: the connection is
/// dropped without an answer.
pub struct DeepNestingPanics {
    inner: Arc<dyn BodyParser>,
}

impl DeepNestingPanics {
    pub fn new(inner: Arc<dyn BodyParser>) -> DeepNestingPanics {
        DeepNestingPanics { inner }
    }
}

impl BodyParser for DeepNestingPanics {
    fn parse(&self, body: &[u8]) -> Result<Value, BodyError> {
        if nesting(body) > 128 {
            panic!("BROKEN VARIANT deep-nesting-panics: the body nests deeper than 128");
        }
        self.inner.parse(body)
    }
}

/// How deep brackets nest, strings ignored.
fn nesting(body: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in body {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Invalid UTF-8 in a body is replaced (U+FFFD) instead of refused.
pub struct LossyUtf8 {
    inner: Arc<dyn BodyParser>,
}

impl LossyUtf8 {
    pub fn new(inner: Arc<dyn BodyParser>) -> LossyUtf8 {
        LossyUtf8 { inner }
    }
}

impl BodyParser for LossyUtf8 {
    fn parse(&self, body: &[u8]) -> Result<Value, BodyError> {
        match std::str::from_utf8(body) {
            Ok(_) => self.inner.parse(body),
            Err(_) => self.inner.parse(String::from_utf8_lossy(body).as_bytes()),
        }
    }
}

/// Request bodies are read one at a time, so one client that stalls in its body holds
/// up every other creation.
pub struct SerializedBodyReads {
    inner: Arc<dyn BodyIntake>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl SerializedBodyReads {
    pub fn new(inner: Arc<dyn BodyIntake>) -> SerializedBodyReads {
        SerializedBodyReads {
            inner,
            one_at_a_time: tokio::sync::Mutex::new(()),
        }
    }
}

impl BodyIntake for SerializedBodyReads {
    fn read<'a>(
        &'a self,
        frames: &'a mut BodyDataStream,
        declared: Option<u64>,
        max: usize,
    ) -> BoxFuture<'a, Result<Received, Problem>> {
        Box::pin(async move {
            let _turn = self.one_at_a_time.lock().await;
            self.inner.read(frames, declared, max).await
        })
    }
}

/// The in-flight limit of the plain-overload variant: small enough for a burst to hit.
pub const PLAIN_OVERLOAD_SLOTS: usize = 40;

/// The overload answer is a bare 503, without the contract's problem document.
pub struct PlainOverload;

impl Overload for PlainOverload {
    fn answer(&self) -> Response {
        (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
    }
}

/// A body over the limit brings the whole process down instead of being refused: every
/// other client loses the service.
pub struct OversizedAborts {
    inner: Arc<dyn BodyIntake>,
}

impl OversizedAborts {
    pub fn new(inner: Arc<dyn BodyIntake>) -> OversizedAborts {
        OversizedAborts { inner }
    }
}

impl BodyIntake for OversizedAborts {
    fn read<'a>(
        &'a self,
        frames: &'a mut BodyDataStream,
        declared: Option<u64>,
        max: usize,
    ) -> BoxFuture<'a, Result<Received, Problem>> {
        Box::pin(async move {
            let received = self.inner.read(frames, declared, max).await;
            if let Err(problem) = &received
                && problem.status == StatusCode::PAYLOAD_TOO_LARGE
            {
                eprintln!("BROKEN VARIANT oversized-aborts: a body over the limit aborts");
                std::process::abort();
            }
            received
        })
    }
}
