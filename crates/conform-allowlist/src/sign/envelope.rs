//! DSSE envelopes (github.com/secure-systems-lab/dsse, v1.0) around in-toto Statements
//! (github.com/in-toto/attestation, Statement v1).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The payload type of an in-toto Statement.
pub(crate) const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto's Statement, version 1.
pub(crate) const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// DSSE's pre-authentication encoding: what is signed, so that a signature over one
/// payload type can never be read as one over another.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// A DSSE envelope: a payload and the signatures over its [`pae`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always the in-toto Statement's media type.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The Statement's JSON, in base64.
    pub payload: String,
    /// One for each key that signed; conform writes one.
    pub signatures: Vec<Signature>,
}

/// One key's signature over the envelope's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    /// The signing key's id ([`super::PublicKey::id`]).
    pub keyid: String,
    /// The Ed25519 signature over [`pae`], in base64.
    pub sig: String,
}

/// An in-toto Statement: what the evidence is about (its subjects, by digest), and what
/// conform says of it (the predicate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// Always `https://in-toto.io/Statement/v1`.
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// What the statement is about, by digest: a suite and a provider, or a shard's files.
    pub subject: Vec<Subject>,
    /// What kind of claim the predicate is: an entry, a revocation, a shard.
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The claim itself: the record without its signature.
    pub predicate: Value,
}

/// A thing the statement is about, named and pinned by its digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    /// What it is called: a suite, a provider, a file.
    pub name: String,
    /// Algorithm → lowercase hex digest.
    pub digest: std::collections::BTreeMap<String, String>,
}

impl Statement {
    /// A Statement of the current version about `subject`.
    pub fn new(subject: Vec<Subject>, predicate_type: &str, predicate: Value) -> Statement {
        Statement {
            statement_type: STATEMENT_TYPE.to_string(),
            subject,
            predicate_type: predicate_type.to_string(),
            predicate,
        }
    }
}

impl Subject {
    /// A subject named `name` whose digest is `sha256:HEX` (conform's own digests).
    pub fn sha256(name: impl Into<String>, digest: &str) -> Subject {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        Subject {
            name: name.into(),
            digest: [("sha256".to_string(), hex.to_string())].into(),
        }
    }
}

/// Why an envelope holds no Statement this crate reads.
#[derive(Debug, thiserror::Error)]
pub(super) enum EnvelopeError {
    #[error("the payload type is `{0}`, not `{expected}`", expected = PAYLOAD_TYPE)]
    PayloadType(String),
    #[error("the payload is not base64: {0}")]
    Base64(base64::DecodeError),
    #[error("the payload is not an in-toto Statement: {0}")]
    Statement(serde_json::Error),
    #[error("the Statement's _type is `{0}`, not `{expected}`", expected = STATEMENT_TYPE)]
    StatementType(String),
}

impl Envelope {
    /// The signed payload's bytes, and the Statement they hold.
    pub(super) fn statement(&self) -> Result<(Vec<u8>, Statement), EnvelopeError> {
        if self.payload_type != PAYLOAD_TYPE {
            return Err(EnvelopeError::PayloadType(self.payload_type.clone()));
        }
        let bytes = B64.decode(&self.payload).map_err(EnvelopeError::Base64)?;
        let statement: Statement =
            serde_json::from_slice(&bytes).map_err(EnvelopeError::Statement)?;
        if statement.statement_type != STATEMENT_TYPE {
            return Err(EnvelopeError::StatementType(statement.statement_type));
        }
        Ok((bytes, statement))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding DSSE's specification gives for its example.
    #[test]
    fn pae_is_the_specifications() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }
}
