//! Anthropic's rate-limit headers: `anthropic-ratelimit-{requests,tokens}-{limit,remaining,
//! reset}`, the limit per minute, the reset an RFC 3339 time at which the bucket is full
//! again (Anthropic refills continuously). `tokens` is the most restrictive of the input
//! and output token limits, which is the one to pace to.

use std::time::Duration;

use reqwest::header::HeaderMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::provider::limits::{RateLimitInfo, Window};

/// What an answer's `anthropic-ratelimit-*` headers say, as of `now`.
pub(crate) fn rate_limits(headers: &HeaderMap) -> RateLimitInfo {
    rate_limits_at(headers, OffsetDateTime::now_utc())
}

fn rate_limits_at(headers: &HeaderMap, now: OffsetDateTime) -> RateLimitInfo {
    RateLimitInfo {
        requests: window(headers, "requests", now),
        tokens: window(headers, "tokens", now),
    }
}

fn window(headers: &HeaderMap, what: &str, now: OffsetDateTime) -> Option<Window> {
    let get = |field: &str| {
        headers
            .get(format!("anthropic-ratelimit-{what}-{field}"))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let reset = get("reset")
        .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
        .map(|at| at - now)
        .filter(|d| d.is_positive())
        .and_then(|d| Duration::try_from(d).ok());
    Some(Window {
        limit: get("limit")?.parse().ok()?,
        remaining: get("remaining")?.parse().ok()?,
        reset,
        period: Duration::from_secs(60),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    #[test]
    fn reads_the_recorded_headers() {
        let recorded: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../../tests/wire/anthropic_response_headers_ratelimit_example.json"
        ))
        .unwrap();
        let mut h = HeaderMap::new();
        for (k, v) in recorded.as_object().unwrap() {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v.as_str().unwrap()).unwrap(),
            );
        }
        let now = OffsetDateTime::parse("2026-02-25T20:02:31Z", &Rfc3339).unwrap();
        let info = rate_limits_at(&h, now);
        let requests = info.requests.unwrap();
        assert_eq!((requests.limit, requests.remaining), (50, 49));
        assert_eq!(requests.reset, Some(Duration::from_secs(1)));
        let tokens = info.tokens.unwrap();
        assert_eq!((tokens.limit, tokens.remaining), (38000, 36000));
        assert_eq!(tokens.reset, Some(Duration::from_secs(5)));
    }
}
