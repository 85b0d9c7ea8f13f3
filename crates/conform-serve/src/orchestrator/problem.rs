//! RFC 9457 problem details with the contract's stable `code`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// An error answer: `application/problem+json` with `type`, `title`, `status`,
/// `detail`, `code` and any extra members (`attempt_id`, `reason`).
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status; 503 also sends `Retry-After`.
    pub status: StatusCode,
    /// The contract's stable code, which clients match on (`type` is made from it).
    pub code: &'static str,
    /// What happened and what to do, for a person.
    pub detail: String,
    /// Members beyond RFC 9457's that a code carries.
    pub extra: Map<String, Value>,
    /// The connection is closed after this answer (the request was not read to its
    /// end, so nothing else can follow on it).
    pub close: bool,
}

impl Problem {
    /// A problem with no extra members, keeping the connection open.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
            extra: Map::new(),
            close: false,
        }
    }

    /// Closes the connection after the answer.
    pub fn closing(mut self) -> Problem {
        self.close = true;
        self
    }

    /// Adds the member `name` to the body.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Problem {
        self.extra.insert(name.to_string(), value.into());
        self
    }

    /// 401: no usable `X-Owner-Id` (missing, empty, repeated or not visible ASCII).
    pub fn owner_required() -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "owner_required",
            "send the owner's id in exactly one non-empty X-Owner-Id header",
        )
    }

    /// 404 for a `what` (`job`, `attempt`) this owner does not have, whether or not
    /// another owner does.
    pub fn not_found(what: &str) -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such {what} for this owner"),
        )
    }

    /// 400: the request breaks the contract's rules, as `detail` says.
    pub fn invalid_request(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, "invalid_request", detail)
    }

    /// 409: the job already has a result; nothing more may start or be cancelled.
    pub fn job_completed() -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "job_completed",
            "the job already has a result",
        )
    }

    /// 409: the job was cancelled, so no attempt may start.
    pub fn job_cancelled() -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "job_cancelled",
            "the job was cancelled",
        )
    }

    /// 409 with `attempt_id`: an open attempt blocks a new one.
    pub fn attempt_in_progress(attempt_id: &str) -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "attempt_in_progress",
            format!(
                "attempt {attempt_id} is starting or unknown: wait for it to end, or cancel it \
                 with POST /v1/attempts/{attempt_id}/cancel"
            ),
        )
        .with("attempt_id", attempt_id)
    }

    /// The ledger could not be reached or failed; the request may be retried with the
    /// same key.
    pub fn unavailable(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ledger_unavailable",
            detail,
        )
    }

    /// Too many requests in flight, or too many request bodies in memory: retry later.
    pub fn overloaded(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", detail)
    }

    /// The request did not arrive in time.
    pub fn request_timeout(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", detail).closing()
    }

    /// The body, as JSON text.
    pub fn body(&self) -> String {
        let mut body = Map::new();
        body.insert(
            "type".into(),
            json!(format!("urn:conform:problem:{}", self.code)),
        );
        body.insert("title".into(), json!(self.title()));
        body.insert("status".into(), json!(self.status.as_u16()));
        body.insert("detail".into(), json!(self.detail));
        body.insert("code".into(), json!(self.code));
        body.extend(self.extra.clone());
        Value::Object(body).to_string()
    }

    /// The whole HTTP/1.1 answer, for where the HTTP layer answers before the
    /// application has a request (a head that does not arrive in time).
    pub fn http1_bytes(&self) -> Vec<u8> {
        let body = self.body();
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes()
    }

    fn title(&self) -> &'static str {
        match self.code {
            "owner_required" => "Owner required",
            "not_found" => "Not found",
            "idempotency_key_required" => "Idempotency key required",
            "invalid_request" => "Invalid request",
            "idempotency_key_reused" => "Idempotency key reused with another request",
            "job_completed" => "Job completed",
            "job_cancelled" => "Job cancelled",
            "attempt_in_progress" => "Attempt in progress",
            "failover_not_allowed" => "Failover not allowed",
            "attempt_terminal" => "Attempt already ended",
            "ledger_unavailable" => "Ledger unavailable",
            "method_not_allowed" => "Method not allowed",
            "overloaded" => "Overloaded",
            "body_too_large" => "Request body too large",
            "headers_too_large" => "Request headers too large",
            "request_timeout" => "Request timeout",
            "shutting_down" => "Shutting down",
            _ => "Error",
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.close {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
