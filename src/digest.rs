//! Digests over canonical JSON (RFC 8785) and raw bytes, printed as `sha256:<hex>`.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// `sha256:<hex>` of the RFC 8785 canonical form of `value`.
///
/// Key order, white space and number spelling do not change the digest.
///
/// ```
/// use serde_json::json;
/// let a = conform::digest::canonical(&json!({"a": 1, "b": [1.0, "x"]}));
/// let b = conform::digest::canonical(&json!({"b": [1, "x"], "a": 1.0}));
/// assert_eq!(a, b);
/// ```
pub fn canonical<T: Serialize>(value: &T) -> String {
    // Serialising our own in-memory values cannot fail; the fallback keeps the function total.
    let bytes = serde_json_canonicalizer::to_vec(value).unwrap_or_default();
    bytes_hex(&bytes)
}

/// The SHA-256 of the RFC 8785 canonical form of `value`, as 32 bytes: what
/// [`canonical`] prints, for sets of many fingerprints (`conform import`'s dedup).
pub fn canonical_raw<T: Serialize>(value: &T) -> [u8; 32] {
    let bytes = serde_json_canonicalizer::to_vec(value).unwrap_or_default();
    Sha256::digest(&bytes).into()
}

/// `sha256:<hex>` of raw bytes.
pub fn bytes_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// A running digest over several named parts (each part is length-prefixed, so
/// moving bytes from one part to the next changes the digest).
#[derive(Default)]
pub struct Parts(Sha256);

impl Parts {
    pub fn add(&mut self, name: &str, bytes: &[u8]) -> &mut Self {
        for piece in [name.as_bytes(), bytes] {
            self.0.update((piece.len() as u64).to_be_bytes());
            self.0.update(piece);
        }
        self
    }

    pub fn finish(self) -> String {
        format!("sha256:{}", hex(&self.0.finalize()))
    }
}

/// A digest written to as a stream (`io::Write`), for text too large to copy first.
#[derive(Default)]
pub struct Stream(Sha256);

impl Stream {
    /// `sha256:<hex>` of everything written, as [`bytes_hex`] would give for it.
    pub fn finish(self) -> String {
        format!("sha256:{}", hex(&self.0.finalize()))
    }
}

impl std::io::Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
