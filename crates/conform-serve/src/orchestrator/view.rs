//! Jobs and attempts as the contract shows them, and the providers as `/readyz` does.

use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Providers;
use super::filed::shown_endpoint;
use crate::ledger::{Attempt, Job};

/// Each provider: the file it is called through and verified against (`null` for the
/// contract's pass-through), its endpoint without secrets, and for a file its kind and
/// model.
pub(crate) fn providers(providers: &Providers) -> Value {
    let mut out = Map::new();
    for p in providers.iter() {
        let shown = match &p.filed {
            Some(filed) => json!({"file": filed.shown_file(),
                "endpoint": shown_endpoint(&filed.config.base_url),
                "kind": filed.config.kind.as_str(), "model": filed.config.model,
                "verified": true}),
            None => json!({"file": null, "endpoint": shown_endpoint(&p.base_url),
                "verified": false}),
        };
        out.insert(p.name.clone(), shown);
    }
    Value::Object(out)
}

/// RFC 3339, UTC.
pub(crate) fn timestamp(ms: i64) -> Value {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .map_or(Value::Null, Value::String)
}

pub(crate) fn attempt(a: &Attempt) -> Value {
    json!({
        "id": a.id,
        "provider": a.provider,
        "state": a.state.as_str(),
        "started_at": timestamp(a.started_ms),
        "ended_at": a.ended_ms.map_or(Value::Null, timestamp),
        "error": a.error,
    })
}

pub(crate) fn job(j: &Job) -> Value {
    json!({
        "id": j.id,
        "owner": j.owner,
        "idempotency_key": j.idempotency_key,
        "task": j.task,
        "provider": j.provider,
        "state": j.state().as_str(),
        "version": j.version,
        "completed_by": j.completed_by,
        "result": j.result,
        "attempts": j.attempts.iter().map(attempt).collect::<Vec<_>>(),
        "created_at": timestamp(j.created_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(0), json!("1970-01-01T00:00:00Z"));
        assert_eq!(
            timestamp(1_700_000_000_123),
            json!("2023-11-14T22:13:20.123Z")
        );
    }
}
