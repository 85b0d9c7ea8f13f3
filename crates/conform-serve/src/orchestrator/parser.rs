//! The body parser seam: how a request body's bytes become JSON. [`StrictJson`] is the
//! real one; whatever replaces it must refuse what the contract refuses (invalid UTF-8,
//! duplicate members, nesting deeper than it can follow) with an error, never a panic.

use serde_json::Value;

use crate::ledger::fingerprint::{BodyError, parse_strict};

/// Reads a request body as JSON.
pub trait BodyParser: Send + Sync + 'static {
    /// The body as JSON, or why it is refused (a 400 `invalid_request`).
    fn parse(&self, body: &[u8]) -> Result<Value, BodyError>;
}

/// [`parse_strict`]: the parse the ledger's fingerprint is defined on.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrictJson;

impl BodyParser for StrictJson {
    fn parse(&self, body: &[u8]) -> Result<Value, BodyError> {
        parse_strict(body)
    }
}
