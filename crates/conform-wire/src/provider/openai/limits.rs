//! OpenAI's rate-limit headers, which compatible servers (vLLM behind a gateway, Azure,
//! Groq, Together…) copy: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the
//! limit per minute and the reset as a duration (`12ms`, `6m0s`).

use std::time::Duration;

use reqwest::header::HeaderMap;

use crate::provider::limits::{RateLimitInfo, Window, parse_go_duration};

/// What an answer's `x-ratelimit-*` headers say.
pub(crate) fn rate_limits(headers: &HeaderMap) -> RateLimitInfo {
    RateLimitInfo {
        requests: window(headers, "requests"),
        tokens: window(headers, "tokens"),
    }
}

fn window(headers: &HeaderMap, what: &str) -> Option<Window> {
    let get = |field: &str| {
        headers
            .get(format!("x-ratelimit-{field}-{what}"))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    Some(Window {
        limit: get("limit")?.parse().ok()?,
        remaining: get("remaining")?.parse().ok()?,
        reset: get("reset").and_then(parse_go_duration),
        period: Duration::from_secs(60),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn reads_both_dimensions_with_go_durations() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "499"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "29000"),
            ("x-ratelimit-reset-tokens", "2s"),
        ] {
            h.insert(k, HeaderValue::from_static(v));
        }
        let info = rate_limits(&h);
        let requests = info.requests.unwrap();
        assert_eq!((requests.limit, requests.remaining), (500, 499));
        assert_eq!(requests.reset, Some(Duration::from_millis(120)));
        assert_eq!(info.tokens.unwrap().reset, Some(Duration::from_secs(2)));
    }

    #[test]
    fn a_dimension_without_its_limit_is_not_stated() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("3"),
        );
        h.insert("x-ratelimit-limit-tokens", HeaderValue::from_static("lots"));
        h.insert(
            "x-ratelimit-remaining-tokens",
            HeaderValue::from_static("1"),
        );
        assert!(rate_limits(&h).is_empty());
    }
}
