//! One call's request, encoded once for every attempt.

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};

use super::WireRequest;

/// A `base_url` that does not parse into a URL. It keeps no text: a URL can carry a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the configured base_url is not a URL")]
pub(super) struct BadUrl;

/// One call's request, encoded once for every attempt: the bytes sent, and the digest of
/// the body (RFC 8785 canonical JSON; the key travels in a header and is not part of it),
/// which the call's record and a tape key it by.
pub struct Encoded {
    /// Parsed once: a malformed `base_url` fails the call, as the client would.
    pub(super) url: Result<reqwest::Url, BadUrl>,
    pub(super) headers: HeaderMap,
    pub(super) bytes: Vec<u8>,
    pub(super) digest: String,
}

impl Encoded {
    /// The request a wire format built, serialised and digested; `url` is its URL parsed.
    pub(super) fn of(request: WireRequest, url: Result<reqwest::Url, BadUrl>) -> Encoded {
        let WireRequest {
            mut headers, body, ..
        } = request;
        headers
            .entry(CONTENT_TYPE)
            .or_insert(HeaderValue::from_static("application/json"));
        Encoded {
            url,
            headers,
            // Serialising our own Value cannot fail.
            bytes: serde_json::to_vec(&body).unwrap_or_default(),
            digest: conform_config::digest::canonical_json(&body),
        }
    }

    /// `sha256:<hex>` of the request body.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}
