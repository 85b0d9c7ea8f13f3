//! Who is asking (`X-Owner-Id`) and under which key (`Idempotency-Key`).

use axum::http::{HeaderMap, StatusCode};

use super::problem::Problem;

/// Percent-encodes an `X-Owner-Id` that holds bytes outside visible ASCII, for an
/// orchestrator configured with `OwnerIds::PercentEncoded`: every later reader then sees
/// visible ASCII, and the map is one to one (`%` itself is encoded too when anything is).
pub(crate) fn percent_encode_owner(headers: &mut axum::http::HeaderMap) {
    let Some(value) = headers.get("x-owner-id") else {
        return;
    };
    let bytes = value.as_bytes();
    if bytes
        .iter()
        .all(|b| (0x21..=0x7e).contains(b) || *b == b' ')
    {
        return;
    }
    let mut encoded = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if (0x21..=0x7e).contains(&b) && b != b'%' {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    if let Ok(value) = axum::http::HeaderValue::from_str(&encoded) {
        headers.insert("x-owner-id", value);
    }
}

/// The longest owner id, in characters: ids are stored and compared, so an unbounded one
/// would let any client make every row and index entry as large as it likes.
pub(crate) const MAX_OWNER_LEN: usize = 255;

/// The one non-empty `X-Owner-Id` of at most [`MAX_OWNER_LEN`] characters. Missing,
/// empty, repeated, too long or not visible ASCII: 401.
pub(crate) fn owner(headers: &HeaderMap) -> Result<String, Problem> {
    let mut values = headers.get_all("x-owner-id").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Problem::owner_required());
    };
    match value.to_str().map(str::trim) {
        Ok(owner) if owner.len() > MAX_OWNER_LEN => Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "owner_required",
            format!("the X-Owner-Id is at most {MAX_OWNER_LEN} characters long"),
        )),
        Ok(owner) if !owner.is_empty() => Ok(owner.to_string()),
        _ => Err(Problem::owner_required()),
    }
}

/// The longest key, in characters.
pub(crate) const MAX_KEY_LEN: usize = 255;

/// The idempotency key: 1 to 255 characters from 0x21 to 0x7E, sent bare (`abc`) or as
/// exactly one structured-field string without parameters (`"abc"`), which name the
/// same key. Anything else, or the header twice: 400 `idempotency_key_required`.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    let value = match (values.next(), values.next()) {
        (Some(value), None) => value,
        (None, _) => return Err(key_problem("send an Idempotency-Key header")),
        (Some(_), Some(_)) => {
            return Err(key_problem(
                "send the Idempotency-Key header once, not twice",
            ));
        }
    };
    let raw = trim_ows(value.as_bytes());
    let key = if raw.first() == Some(&b'"') {
        sf_string(raw).ok_or_else(|| {
            key_problem(
                "a quoted Idempotency-Key must be exactly one structured-field string, \
                 without parameters, e.g. \"abc\"",
            )
        })?
    } else {
        raw.to_vec()
    };
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(key_problem(format!(
            "the Idempotency-Key must be 1 to {MAX_KEY_LEN} characters long"
        )));
    }
    if !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(key_problem(
            "the Idempotency-Key may only hold visible ASCII characters (0x21 to 0x7E)",
        ));
    }
    // Every byte is visible ASCII, hence valid UTF-8.
    String::from_utf8(key).map_err(|_| key_problem("the Idempotency-Key is not ASCII"))
}

fn key_problem(detail: impl Into<String>) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "idempotency_key_required", detail)
}

fn trim_ows(mut raw: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = raw {
        raw = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = raw {
        raw = rest;
    }
    raw
}

/// RFC 8941 §4.2.5: a string is `"`, characters 0x20 to 0x7E with `\"` and `\\` as the
/// only escapes, then `"`; here nothing may follow it (no parameters).
fn sf_string(raw: &[u8]) -> Option<Vec<u8>> {
    let (b'"', mut rest) = raw.split_first()? else {
        return None;
    };
    let mut out = Vec::with_capacity(raw.len());
    loop {
        match rest {
            [b'\\', c @ (b'"' | b'\\'), tail @ ..] => {
                out.push(*c);
                rest = tail;
            }
            [b'"'] => return Some(out),
            [c @ 0x20..=0x7e, tail @ ..] if *c != b'"' && *c != b'\\' => {
                out.push(*c);
                rest = tail;
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn key(values: &[&[u8]]) -> Result<String, &'static str> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("idempotency-key", HeaderValue::from_bytes(v).unwrap());
        }
        idempotency_key(&headers).map_err(|p| p.code)
    }

    #[test]
    fn bare_and_quoted_name_the_same_key() {
        assert_eq!(key(&[b"abc"]), Ok("abc".into()));
        assert_eq!(key(&[b"\"abc\""]), Ok("abc".into()));
        assert_eq!(key(&[br#""a\"b\\c""#]), Ok(r#"a"b\c"#.into()));
        assert_eq!(key(&[b"ab\"c"]), Ok("ab\"c".into()));
    }

    #[test]
    fn length_is_one_to_255() {
        assert_eq!(key(&["k".repeat(255).as_bytes()]).map(|k| k.len()), Ok(255));
        assert_eq!(
            key(&["k".repeat(256).as_bytes()]),
            Err("idempotency_key_required")
        );
        assert_eq!(key(&[b""]), Err("idempotency_key_required"));
        assert_eq!(key(&[b"\"\""]), Err("idempotency_key_required"));
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            &b"a b"[..],
            b"\"a b\"",
            b"\"abc\";p=1",
            b"\"abc\" \"def\"",
            b"\"abc",
            b"\"a\\bc\"",
            b"\"abc\"x",
            "é".as_bytes(),
            b"a\tb",
        ] {
            assert_eq!(
                key(&[bad]),
                Err("idempotency_key_required"),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(key(&[]), Err("idempotency_key_required"));
        assert_eq!(key(&[b"abc", b"abc"]), Err("idempotency_key_required"));
    }

    #[test]
    fn percent_encoding_keeps_ascii_owners_and_maps_others_one_to_one() {
        let encode = |raw: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.insert("x-owner-id", HeaderValue::from_bytes(raw).unwrap());
            percent_encode_owner(&mut headers);
            owner(&headers).unwrap()
        };
        assert_eq!(encode(b"alice%41"), "alice%41");
        assert_eq!(encode(b"alice\xff\xfe"), "alice%FF%FE");
        assert_eq!(encode(b"a%FF\xff"), "a%25FF%FF");
        assert_ne!(encode(b"a%FF\xff"), encode(b"a\xff\xff"));
    }

    #[test]
    fn owner_must_be_one_non_empty_header() {
        let mut headers = HeaderMap::new();
        assert!(owner(&headers).is_err());
        headers.insert("x-owner-id", HeaderValue::from_static(""));
        assert!(owner(&headers).is_err());
        headers.insert("x-owner-id", HeaderValue::from_static("alice"));
        assert_eq!(owner(&headers).unwrap(), "alice");
        headers.append("x-owner-id", HeaderValue::from_static("bob"));
        assert!(owner(&headers).is_err());
    }

    #[test]
    fn owner_is_at_most_255_characters() {
        let mut headers = HeaderMap::new();
        let longest = "o".repeat(MAX_OWNER_LEN);
        headers.insert("x-owner-id", HeaderValue::from_str(&longest).unwrap());
        assert_eq!(owner(&headers).unwrap(), longest);
        let longer = "o".repeat(MAX_OWNER_LEN + 1);
        headers.insert("x-owner-id", HeaderValue::from_str(&longer).unwrap());
        let problem = owner(&headers).unwrap_err();
        assert_eq!(
            (problem.status.as_u16(), problem.code),
            (401, "owner_required")
        );
        assert!(problem.detail.contains("255"), "{}", problem.detail);
    }
}
