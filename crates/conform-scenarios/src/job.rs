//! Reading the contract's job and attempt resources out of answers, and the calls that
//! act on them.

use serde_json::{Value, json};

use super::api::{Call, Exchange};

/// `GET /v1/jobs/{id}` as `owner`.
pub(crate) fn get(owner: &str, id: &str) -> Call {
    Call::get(format!("/v1/jobs/{id}")).owner(owner)
}

/// `POST /v1/jobs/{id}/attempts` on `provider`, as `owner`.
pub(crate) fn attempt(owner: &str, id: &str, provider: &str) -> Call {
    Call::post(format!("/v1/jobs/{id}/attempts"))
        .owner(owner)
        .json(&json!({"provider": provider}))
}

/// `POST /v1/attempts/{id}/cancel` as `owner`.
pub(crate) fn cancel_attempt(owner: &str, attempt_id: &str) -> Call {
    Call::post(format!("/v1/attempts/{attempt_id}/cancel")).owner(owner)
}

/// `POST /v1/jobs/{id}/cancel` as `owner`.
pub(crate) fn cancel_job(owner: &str, id: &str) -> Call {
    Call::post(format!("/v1/jobs/{id}/cancel")).owner(owner)
}

pub(crate) fn id(job: &Value) -> Option<&str> {
    job.get("id").and_then(Value::as_str)
}

pub(crate) fn state(job: &Value) -> Option<&str> {
    job.get("state").and_then(Value::as_str)
}

pub(crate) fn version(job: &Value) -> Option<i64> {
    job.get("version").and_then(Value::as_i64)
}

pub(crate) fn completed_by(job: &Value) -> Option<&str> {
    job.get("completed_by").and_then(Value::as_str)
}

pub(crate) fn attempts(job: &Value) -> &[Value] {
    job.get("attempts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The `n`-th attempt (0-based), in the order the job lists them.
pub(crate) fn attempt_at(job: &Value, n: usize) -> Option<&Value> {
    attempts(job).get(n)
}

/// The attempt with this id.
pub(crate) fn attempt_by_id<'a>(job: &'a Value, attempt_id: &str) -> Option<&'a Value> {
    attempts(job).iter().find(|a| id(a) == Some(attempt_id))
}

/// The state of the `n`-th attempt.
pub(crate) fn attempt_state(job: &Value, n: usize) -> Option<&str> {
    attempt_at(job, n).and_then(state)
}

/// The id of the `n`-th attempt.
pub(crate) fn attempt_id(job: &Value, n: usize) -> Option<&str> {
    attempt_at(job, n).and_then(id)
}

/// The `error` code of the `n`-th attempt.
pub(crate) fn attempt_error(job: &Value, n: usize) -> Option<&str> {
    attempt_at(job, n)
        .and_then(|a| a.get("error"))
        .and_then(Value::as_str)
}

/// Whether the attempt is open (`starting` or `unknown`).
pub(crate) fn is_open(attempt_state: Option<&str>) -> bool {
    matches!(attempt_state, Some("starting" | "unknown"))
}

/// `state v3 [primary:succeeded, fallback:superseded]`, for evidence lines.
pub(crate) fn summary(job: &Value) -> String {
    let attempts: Vec<String> = attempts(job)
        .iter()
        .map(|a| {
            let error = a
                .get("error")
                .and_then(Value::as_str)
                .map(|e| format!("({e})"))
                .unwrap_or_default();
            format!(
                "{}:{}{error}",
                a.get("provider").and_then(Value::as_str).unwrap_or("?"),
                state(a).unwrap_or("?")
            )
        })
        .collect();
    format!(
        "{} v{} [{}]",
        state(job).unwrap_or("?"),
        version(job).map_or("?".to_string(), |v| v.to_string()),
        attempts.join(", ")
    )
}

/// What an answer was, in one line: the status, the problem code, or the job.
pub(crate) fn describe(exchange: &Exchange) -> String {
    if let Some(error) = &exchange.error {
        return format!("{} {}: no answer ({error})", exchange.method, exchange.path);
    }
    if let Some(code) = exchange.code() {
        return format!(
            "{} {} answered {} {code}",
            exchange.method, exchange.path, exchange.status
        );
    }
    if id(&exchange.answer).is_some() && exchange.answer.get("attempts").is_some() {
        return format!(
            "{} {} answered {} with job {}",
            exchange.method,
            exchange.path,
            exchange.status,
            summary(&exchange.answer)
        );
    }
    let mut body = exchange.answer.to_string();
    if body.len() > 300 {
        body.truncate(body.floor_char_boundary(300));
        body.push('…');
    }
    format!(
        "{} {} answered {}: {body}",
        exchange.method, exchange.path, exchange.status
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_job() {
        let job = json!({"id": "j1", "state": "succeeded", "version": 2, "attempts": [
            {"id": "a1", "provider": "primary", "state": "superseded", "error": null},
            {"id": "a2", "provider": "fallback", "state": "succeeded", "error": null},
            {"id": "a3", "provider": "primary", "state": "failed", "error": "http_503"},
        ]});
        assert_eq!(
            summary(&job),
            "succeeded v2 [primary:superseded, fallback:succeeded, primary:failed(http_503)]"
        );
        assert_eq!(attempt_id(&job, 1), Some("a2"));
        assert_eq!(attempt_error(&job, 2), Some("http_503"));
        assert!(attempt_by_id(&job, "a3").is_some());
        assert!(!is_open(attempt_state(&job, 0)));
    }
}
