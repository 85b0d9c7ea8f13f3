//! Signed evidence: Ed25519 keys, DSSE envelopes carrying in-toto Statements (v1), and
//! the project's list of trusted keys (`trust.toml`). What is signed, and why these
//! formats, is in docs/signing.md.
//!
//! Verifying is all a reader needs. Signing (a private key read only from
//! `CONFORM_SIGNING_KEY`, never printed) is the writer's, behind the `sign` feature, so
//! an orchestrator that only reads builds no key generation.

mod envelope;
#[cfg(feature = "sign")]
mod key;
mod trust;

pub use envelope::{Envelope, Signature, Statement, Subject, pae};
#[cfg(feature = "sign")]
pub use key::{NewPair, SigningKey};
pub use trust::{Trust, TrustedKey, Unverified};

use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

/// The environment variable that holds the signing key, or the path of its file.
pub const KEY_VARIABLE: &str = "CONFORM_SIGNING_KEY";

/// How a private key starts in its file: the scheme, then 32 bytes in base64.
pub(crate) const SECRET_PREFIX: &str = "conform-ed25519-secret:";
/// How a public key is written (`.pub` files, `trust.toml`).
const PUBLIC_PREFIX: &str = "conform-ed25519:";

/// Why a key or a trust file could not be read, written or made.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// `CONFORM_SIGNING_KEY` holds neither a key nor the path of one.
    #[error(
        "{KEY_VARIABLE} holds neither a signing key nor the path of a readable key file \
         (write one with `conform keys new --out DIR`)"
    )]
    NotAKey,
    /// The file named as a signing key does not hold one.
    #[error("{path} is not a conform signing key (it must start with `{SECRET_PREFIX}`)")]
    NotAKeyFile {
        /// The file.
        path: PathBuf,
    },
    /// Text that should be a public key is not one.
    #[error("`{text}` is not a conform public key (it must start with `{PUBLIC_PREFIX}`)")]
    NotAPublicKey {
        /// Its first 80 characters.
        text: String,
    },
    /// A key or trust file could not be read or written.
    #[error("cannot read or write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The trust file is not valid, at this line.
    #[error("{path}:{line}: {message}")]
    Trust {
        /// The trust file.
        path: PathBuf,
        /// The line of the problem, from 1.
        line: usize,
        /// What is wrong there.
        message: String,
    },
    /// The system gave no randomness to make a key with.
    #[error("the system gave no randomness for a new key: {0}")]
    Random(String),
}

/// A public key: what `trust.toml` lists and an envelope's `keyid` names.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// The public half of a key pair.
    #[cfg(feature = "sign")]
    pub(crate) fn of(key: ed25519_dalek::VerifyingKey) -> PublicKey {
        PublicKey(key)
    }

    /// `sha256:` and the first 16 hex digits of the key's SHA-256: short enough to read,
    /// long enough that two keys of one project never share it.
    pub fn id(&self) -> String {
        let mut id = crate::digest::bytes_hex(self.0.as_bytes());
        id.truncate("sha256:".len() + 16);
        id
    }

    /// A key from its text: `conform-ed25519:`, then 32 bytes in base64, as `trust.toml` lists it.
    pub fn parse(text: &str) -> Result<PublicKey, SignError> {
        let bad = || SignError::NotAPublicKey {
            text: text.chars().take(80).collect(),
        };
        let bytes = B64
            .decode(text.trim().strip_prefix(PUBLIC_PREFIX).ok_or_else(bad)?)
            .map_err(|_| bad())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|_| bad())
    }

    pub(crate) fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Ok(bytes) = B64.decode(signature) else {
            return false;
        };
        let Ok(signature) = ed25519_dalek::Signature::from_slice(&bytes) else {
            return false;
        };
        self.0.verify_strict(message, &signature).is_ok()
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PUBLIC_PREFIX}{}", B64.encode(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.id())
    }
}
