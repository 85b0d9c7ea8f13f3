//! Bedrock Runtime's errors: the exception's name in the `x-amzn-ErrorType` header (or
//! the body's `__type`), its words in the body's `message`.
//!
//! | exception | status | here |
//! |---|---|---|
//! | `AccessDeniedException`, and a signature, token or key refused | 403 | `auth_failed`: the provider stops, its verdict inconclusive, never the model's failure |
//! | `ThrottlingException` | 429 | `rate_limited`, waited out and retried (a per-day quota: `quota_exhausted`) |
//! | `ServiceQuotaExceededException` | 400/429 | `quota_exhausted` |
//! | `ServiceUnavailableException`, `ModelNotReadyException` | 503/429 | `overloaded`, retried |
//! | `ValidationException` of an input too long | 400 | `context_length_exceeded`: the model's |
//! | any other `ValidationException` | 400 | `bad_request`: the configuration's |
//! | `ResourceNotFoundException` | 404 | `not_found` |
//! | `ModelTimeoutException` | 408 | `timeout` |
//! | `InternalServerException`, `ModelErrorException` | 500/424 | `server_error`, retried |

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::provider::error::{
    self, CallError, ErrorKind, classify_status, mentions_context_length,
};

/// Classifies a non-2xx answer.
pub(super) fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let text = |name: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let message = text("message")
        .or_else(|| text("Message"))
        .unwrap_or_default();
    let exception = (headers.get("x-amzn-errortype"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| text("__type"))
        .map(|name| name_of(&name).to_string())
        .unwrap_or_default();
    let mut classified = classify_status(status, body, message);
    if let Some(kind) = kind_of(&exception, &classified.message) {
        classified.kind = kind;
    }
    if classified.message.is_empty() {
        classified.message = error::excerpt(body);
    }
    if !exception.is_empty() {
        classified.message = format!("{exception}: {}", classified.message);
    }
    classified.server_hints(headers)
}

/// `ThrottlingException` from `ThrottlingException:http://internal.amazon.com/…` or
/// `com.amazon.bedrock#ThrottlingException`.
fn name_of(raw: &str) -> &str {
    let name = raw.split(':').next().unwrap_or(raw);
    name.rsplit('#').next().unwrap_or(name).trim()
}

/// What an exception (by name, as a status or inside a stream, where its name starts in
/// lower case) means; `None` for a name that says nothing beyond the status.
pub(super) fn kind_of(exception: &str, message: &str) -> Option<ErrorKind> {
    let m = message.to_ascii_lowercase();
    let too_long = mentions_context_length(message)
        || m.contains("input is too long")
        || m.contains("too many input tokens");
    let mut name = exception.to_string();
    if let Some(first) = name.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    Some(match name.as_str() {
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException"
        | "ExpiredTokenException"
        | "InvalidClientTokenId" => ErrorKind::Auth,
        "ThrottlingException" | "TooManyRequestsException" if error::is_daily_quota(message) => {
            ErrorKind::QuotaExhausted
        }
        "ThrottlingException" | "TooManyRequestsException" => ErrorKind::RateLimited,
        "ServiceQuotaExceededException" => ErrorKind::QuotaExhausted,
        "ServiceUnavailableException" | "ModelNotReadyException" => ErrorKind::Overloaded,
        "ValidationException" if too_long => ErrorKind::ContextLength,
        "ValidationException" => ErrorKind::BadRequest,
        "ResourceNotFoundException" => ErrorKind::NotFound,
        "ModelTimeoutException" => ErrorKind::Timeout,
        "InternalServerException" | "ModelErrorException" | "ModelStreamErrorException" => {
            ErrorKind::ServerError
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn classified(status: u16, kind: &str, message: &str) -> CallError {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-amzn-errortype",
            HeaderValue::from_str(&format!(
                "{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
            ))
            .unwrap(),
        );
        classify(
            status,
            &headers,
            serde_json::json!({ "message": message })
                .to_string()
                .as_bytes(),
        )
    }

    #[test]
    fn each_exception_is_classified_as_the_table_says() {
        let cases = [
            (
                403,
                "AccessDeniedException",
                "You don't have access to the model with the specified model ID.",
                ErrorKind::Auth,
            ),
            (
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
                ErrorKind::Auth,
            ),
            (
                429,
                "ThrottlingException",
                "Too many requests, please wait before trying again.",
                ErrorKind::RateLimited,
            ),
            (
                429,
                "ThrottlingException",
                "Too many tokens per day, please wait before trying again.",
                ErrorKind::QuotaExhausted,
            ),
            (
                503,
                "ServiceUnavailableException",
                "Bedrock is unable to process your request.",
                ErrorKind::Overloaded,
            ),
            (
                429,
                "ModelNotReadyException",
                "The model is not ready to serve inference requests.",
                ErrorKind::Overloaded,
            ),
            (
                400,
                "ValidationException",
                "Input is too long for requested model.",
                ErrorKind::ContextLength,
            ),
            (
                400,
                "ValidationException",
                "Malformed input request: extraneous key [foo] is not permitted",
                ErrorKind::BadRequest,
            ),
            (
                404,
                "ResourceNotFoundException",
                "Could not resolve the foundation model",
                ErrorKind::NotFound,
            ),
            (
                424,
                "ModelErrorException",
                "The model failed",
                ErrorKind::ServerError,
            ),
        ];
        for (status, kind, message, expected) in cases {
            let error = classified(status, kind, message);
            assert_eq!(error.kind, expected, "{kind}: {message}");
            assert_eq!(error.status, Some(status));
            assert!(error.message.starts_with(kind), "{}", error.message);
        }
        // The name in the body when the header is gone.
        let body =
            br#"{"__type": "com.amazon.coral.service#ThrottlingException", "message": "slow"}"#;
        assert_eq!(
            classify(400, &HeaderMap::new(), body).kind,
            ErrorKind::RateLimited
        );
    }
}
