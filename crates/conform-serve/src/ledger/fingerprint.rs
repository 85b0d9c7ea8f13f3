//! Request fingerprints: SHA-256 over the RFC 8785 (JCS) canonical form of a JSON body.
//!
//! Key order, white space and number spelling do not change a fingerprint; any changed
//! value does. A body that RFC 8785 cannot canonicalize is refused: duplicate member
//! names (a plain parse would silently keep one of them, so two different bodies would
//! share a fingerprint), numbers outside the IEEE double range, lone surrogates.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use conform_config::digest::Stream;

/// Why a body has no fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(String);

/// Parses JSON, refusing duplicate member names at any depth, numbers out of range and
/// lone surrogates (serde_json already refuses the last two).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, BodyError> {
    let strict: Strict = serde_json::from_slice(bytes)
        .map_err(|e| BodyError(format!("the body is not valid JSON for RFC 8785: {e}")))?;
    Ok(strict.0)
}

/// `sha256:<hex>` of the RFC 8785 canonical form of `value`.
///
/// The canonical text is streamed into the hash rather than built first: a general JCS
/// serializer buffers every object's members to sort them, and copies a large string
/// once per level of nesting above it (three times the body at its peak, for a 2 MB
/// prompt). Strings are escaped by serde_json, exactly as RFC 8785 asks; numbers are
/// formatted by `serde_json_canonicalizer` (ECMAScript's rules); members are sorted by
/// their UTF-16 code units.
pub fn fingerprint(value: &Value) -> Result<String, BodyError> {
    let mut digest = Stream::default();
    conform_config::digest::write_canonical(value, &mut digest)
        .map_err(|e| BodyError(format!("the body cannot be canonicalized: {e}")))?;
    Ok(digest.finish())
}

/// A `Value` whose objects had no duplicate member names.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Strict, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Strict, E> {
        Ok(Strict(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Strict, E> {
        Ok(Strict(Value::Number(v.into())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Strict, E> {
        Ok(Strict(Value::Number(v.into())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Strict, E> {
        Number::from_f64(v)
            .map(|n| Strict(Value::Number(n)))
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Strict, E> {
        Ok(Strict(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Strict, E> {
        Ok(Strict(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Strict(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Strict, A::Error> {
        let mut map = Map::new();
        while let Some(name) = access.next_key::<String>()? {
            let Strict(value) = access.next_value()?;
            if map.contains_key(&name) {
                return Err(de::Error::custom(format!("duplicate member name `{name}`")));
            }
            map.insert(name, value);
        }
        Ok(Strict(Value::Object(map)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &str) -> Result<String, BodyError> {
        fingerprint(&parse_strict(body.as_bytes())?)
    }

    #[test]
    fn order_space_and_number_spelling_do_not_matter() {
        let a = fp(r#"{"task":"t","input":{"x":1,"y":[1.0,"a"]}}"#).unwrap();
        let b = fp(r#"{ "input" : { "y" : [ 1 , "a" ] , "x" : 1.0e0 } , "task" : "t" }"#).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn a_changed_value_changes_the_fingerprint() {
        let a = fp(r#"{"input":{"x":1}}"#).unwrap();
        assert_ne!(a, fp(r#"{"input":{"x":2}}"#).unwrap());
        assert_ne!(a, fp(r#"{"input":{"x":"1"}}"#).unwrap());
    }

    #[test]
    fn numbers_compare_as_ieee_doubles() {
        // 2^53 + 1 is not a double: it rounds to 2^53, as RFC 8785 says.
        assert_eq!(
            fp(r#"{"n":9007199254740993}"#).unwrap(),
            fp(r#"{"n":9007199254740992}"#).unwrap()
        );
    }

    #[test]
    fn duplicate_member_names_are_refused_at_any_depth() {
        let e = parse_strict(br#"{"a":1,"a":2}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate member name `a`"), "{e}");
        assert!(parse_strict(br#"{"x":[{"b":1,"c":{"d":1,"d":1}}]}"#).is_err());
        // The same name at different depths is fine.
        assert!(parse_strict(br#"{"a":{"a":1}}"#).is_ok());
    }

    /// Arbitrary JSON: strings with escapes, controls and characters beyond the BMP
    /// (whose UTF-16 order differs from their UTF-8 order), every kind of number.
    fn json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let text = r#"[a-zA-Z0-9 \\"/\x00-\x1fé€\x{10000}-\x{10010}\x{ff61}-\x{ff70}]{0,12}"#;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            any::<u64>().prop_map(|n| Value::Number(n.into())),
            any::<f64>()
                .prop_filter_map("finite", Number::from_f64)
                .prop_map(Value::Number),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(text, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The streamed fingerprint is the SHA-256 of what the reference JCS
        /// implementation writes.
        #[test]
        fn streaming_matches_the_reference_canonicalizer(value in json()) {
            let reference = conform_config::digest::bytes_hex(&serde_json_canonicalizer::to_vec(&value).unwrap());
            proptest::prop_assert_eq!(fingerprint(&value).unwrap(), reference);
        }
    }

    #[test]
    fn members_sort_by_utf16_code_units() {
        // U+FF61 sorts after U+10000 in UTF-8 and code points, before it in UTF-16.
        let value = serde_json::json!({"\u{10000}": 1, "\u{ff61}": 2, "a": [1.0, 1e21, -0.0]});
        let reference =
            conform_config::digest::bytes_hex(&serde_json_canonicalizer::to_vec(&value).unwrap());
        assert_eq!(fingerprint(&value).unwrap(), reference);
    }

    #[test]
    fn lone_surrogates_and_out_of_range_numbers_are_refused() {
        assert!(parse_strict(br#"{"s":"\ud800"}"#).is_err());
        assert!(parse_strict(br#"{"s":"\udc00x"}"#).is_err());
        assert!(parse_strict(br#"{"n":1e400}"#).is_err());
        assert!(parse_strict(format!(r#"{{"n":{}}}"#, "9".repeat(400)).as_bytes()).is_err());
        // A proper pair is fine.
        assert!(parse_strict(br#"{"s":"\ud83d\ude00"}"#).is_ok());
    }
}
