//! Digests over canonical JSON (RFC 8785) and raw bytes, printed as `sha256:<hex>`.

use serde::Serialize;
use sha2::{Digest, Sha256};

// What evidence is pinned by is the reader crate's, so a reader computes it as conform does.
pub use conform_allowlist::digest::{bytes_hex, canonical, hex};

/// [`canonical`] of a JSON value, the same digest, written straight into the hash.
///
/// Every call's request and answer are digested, so this is on the runner's hot path:
/// the library behind [`canonical`] buffers every key and value of every object and parses
/// each key again to sort it, which cost more than encoding the request. Here an object's
/// keys are sorted in place by their UTF-16 code units (RFC 8785 §3.2.3), strings are
/// escaped as serde_json escapes them (the same escapes RFC 8785 asks), and numbers are
/// written as ECMAScript writes a double (as the library does). A property test
/// holds the two equal on arbitrary values.
///
/// ```
/// use serde_json::json;
/// let v = json!({"b": [1.0, "x\u{1f600}"], "a": {"é": null, "z": 1e21}});
/// assert_eq!(conform_config::digest::canonical_json(&v), conform_config::digest::canonical(&v));
/// ```
pub fn canonical_json(value: &serde_json::Value) -> String {
    // Written to memory, then hashed once: hashing each key, comma and quote as it is
    // written cost more than the copy (a request is a few kilobytes).
    let mut canonical = Vec::with_capacity(256);
    // A serde_json value holds no NaN or infinity, and a Vec never refuses a write; were
    // either to fail, the digest is of what was written, as `canonical` falls back too.
    let _ = write_canonical(value, &mut canonical);
    bytes_hex(&canonical)
}

/// Writes the RFC 8785 canonical form of `value` to `out`, streamed: strings escaped by
/// serde_json (the escapes RFC 8785 asks), numbers as ECMAScript writes them (integers up
/// to 2^53 as their digits, the rest formatted by serde_json_canonicalizer), object
/// members sorted by their UTF-16 code units.
pub fn write_canonical(
    value: &serde_json::Value,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    use serde_json::Value;
    match value {
        Value::Null => out.write_all(b"null"),
        Value::Bool(true) => out.write_all(b"true"),
        Value::Bool(false) => out.write_all(b"false"),
        // ECMAScript writes an integer of magnitude up to 2^53 (exact as a double) as its
        // digits; anything else takes the library's formatting of a double.
        Value::Number(n) => match n.as_i64() {
            Some(i) if i.unsigned_abs() <= SAFE_INTEGER => write!(out, "{i}"),
            _ => {
                out.write_all(&serde_json_canonicalizer::to_vec(n).map_err(std::io::Error::other)?)
            }
        },
        Value::String(s) => serde_json::to_writer(&mut *out, s).map_err(std::io::Error::other),
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(item, out)?;
            }
            out.write_all(b"]")
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| utf16_order(a.0, b.0));
            out.write_all(b"{")?;
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, key).map_err(std::io::Error::other)?;
                out.write_all(b":")?;
                write_canonical(item, out)?;
            }
            out.write_all(b"}")
        }
    }
}

/// 2^53: the integers up to this magnitude are exact as doubles.
const SAFE_INTEGER: u64 = 1 << 53;

/// The order of `a` and `b` by their UTF-16 code units (RFC 8785 §3.2.3). It is the order
/// of their UTF-8 bytes unless one holds a character from U+E000 on (UTF-8 lead byte 0xEE
/// or above), where UTF-16's surrogates sort astral characters before U+E000–U+FFFF.
fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    let plain = |s: &str| s.bytes().all(|byte| byte < 0xEE);
    if plain(a) && plain(b) {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// The SHA-256 of the RFC 8785 canonical form of `value`, as 32 bytes: what
/// [`canonical`] prints, for sets of many fingerprints (`conform import`'s dedup).
pub fn canonical_raw<T: Serialize>(value: &T) -> [u8; 32] {
    let bytes = serde_json_canonicalizer::to_vec(value).unwrap_or_default();
    Sha256::digest(&bytes).into()
}

/// A running digest over several named parts (each part is length-prefixed, so
/// moving bytes from one part to the next changes the digest). A clone carries on from
/// the same parts.
#[derive(Default, Clone)]
pub struct Parts(Sha256);

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parts(..)")
    }
}

impl Parts {
    /// One more part, named, so that the same bytes under another name digest differently.
    pub fn add(&mut self, name: &str, bytes: &[u8]) -> &mut Self {
        for piece in [name.as_bytes(), bytes] {
            self.0.update((piece.len() as u64).to_be_bytes());
            self.0.update(piece);
        }
        self
    }

    /// `sha256:` and the hex digest of every part added.
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    /// Any JSON value: keys and strings with escapes, non-ASCII and astral characters
    /// (where UTF-16 order differs from code point order), integers and doubles of every
    /// size.
    fn json() -> impl Strategy<Value = Value> {
        let text = r#"[a-c\\"/\x00-\x1f\x7fé\x{e000}-\x{e002}\x{1f600}-\x{1f602}]{0,6}"#;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            // Around zero and around 2^53, where integers stop being written as digits.
            (-1000i64..1000).prop_map(Value::from),
            ((1i64 << 53) - 3..(1i64 << 53) + 3).prop_map(Value::from),
            ((1i64 << 53) - 3..(1i64 << 53) + 3).prop_map(|i| Value::from(-i)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((text, inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_json_is_the_library_canonical_form(value in json()) {
            prop_assert_eq!(super::canonical_json(&value), super::canonical(&value));
        }
    }

    #[test]
    fn keys_sort_by_utf16_code_units_not_code_points() {
        // U+E000 sorts after U+1F600 in UTF-16 (0xE000 > 0xD83D), before it by code point.
        let v = serde_json::json!({"\u{e000}": 1, "\u{1f600}": 2});
        let mut hash = super::Stream::default();
        std::io::Write::write_all(&mut hash, "{\"\u{1f600}\":2,\"\u{e000}\":1}".as_bytes())
            .unwrap();
        assert_eq!(super::canonical_json(&v), hash.finish());
    }
}
