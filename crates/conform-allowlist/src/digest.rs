//! The digests evidence is pinned by, printed as `sha256:<hex>`.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// `sha256:<hex>` of the RFC 8785 canonical form of `value`: key order, white space and
/// number spelling do not change it.
///
/// ```
/// use serde_json::json;
/// let a = conform_allowlist::digest::canonical(&json!({"a": 1, "b": [1.0, "x"]}));
/// let b = conform_allowlist::digest::canonical(&json!({"b": [1, "x"], "a": 1.0}));
/// assert_eq!(a, b);
/// ```
pub fn canonical<T: Serialize>(value: &T) -> String {
    // Serialising our own in-memory values cannot fail; the fallback keeps the function total.
    let bytes = serde_json_canonicalizer::to_vec(value).unwrap_or_default();
    bytes_hex(&bytes)
}

/// `sha256:<hex>` of raw bytes.
pub fn bytes_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}
