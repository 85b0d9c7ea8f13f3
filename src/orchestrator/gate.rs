//! The failover decision, reading the allowlist as the contract says an orchestrator
//! reads it: at decision time, failing closed, and looking only at `format`, `entries`
//! and each entry's `suite`, `provider` and `valid_until`.
//!
//! [`crate::allowlist::permits`] is stricter: it drops entries that lack the other v1
//! members (digests, evidence), which the contract leaves to "tools that can check
//! them". An allowlist written by another tool with only the three members must still
//! permit failover here, so this reader follows the contract, with the same reason codes.

use std::path::Path;

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::allowlist::{FORMAT, Reason};

/// Why failover is denied: the contract's `reason` and a sentence for `detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub reason: Reason,
    pub detail: String,
}

fn denied(reason: Reason, detail: impl Into<String>) -> Denied {
    Denied {
        reason,
        detail: detail.into(),
    }
}

/// Whether the allowlist at `path` permits failover to `provider` for `task` at `now`.
pub fn permits(path: &Path, task: &str, provider: &str, now: OffsetDateTime) -> Result<(), Denied> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(denied(
                Reason::Missing,
                format!("{} does not exist", path.display()),
            ));
        }
        Err(e) => {
            return Err(denied(
                Reason::Unreadable,
                format!("cannot read {}: {e}", path.display()),
            ));
        }
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        denied(
            Reason::Unreadable,
            format!("the allowlist is not JSON: {e}"),
        )
    })?;
    let Value::Object(file) = value else {
        return Err(denied(
            Reason::UnknownFormat,
            "the allowlist is not a JSON object",
        ));
    };
    if file.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(denied(
            Reason::UnknownFormat,
            format!("the allowlist's format is not `{FORMAT}`"),
        ));
    }
    let Some(Value::Array(entries)) = file.get("entries") else {
        return Err(denied(
            Reason::Unreadable,
            "the allowlist has no `entries` list",
        ));
    };
    let mut found = false;
    for entry in entries {
        if entry.get("suite").and_then(Value::as_str) != Some(task)
            || entry.get("provider").and_then(Value::as_str) != Some(provider)
        {
            continue;
        }
        found = true;
        let until = entry
            .get("valid_until")
            .and_then(Value::as_str)
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok());
        if until.is_some_and(|until| now < until) {
            return Ok(());
        }
    }
    if found {
        Err(denied(
            Reason::Expired,
            format!(
                "the entry for provider `{provider}` and task `{task}` has expired or has no valid `valid_until`"
            ),
        ))
    } else {
        Err(denied(
            Reason::NoEntry,
            format!("no entry for provider `{provider}` and task `{task}`"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(content: Option<&str>) -> Result<(), Reason> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowlist.json");
        if let Some(content) = content {
            std::fs::write(&path, content).unwrap();
        }
        let now = OffsetDateTime::parse("2026-06-01T00:00:00Z", &Rfc3339).unwrap();
        permits(&path, "invoice-extraction", "fallback", now).map_err(|d| d.reason)
    }

    #[test]
    fn a_minimal_fresh_entry_permits() {
        let file = r#"{"format":"conform.allowlist/v1","entries":[
            {"suite":"invoice-extraction","provider":"fallback","valid_until":"2026-07-01T00:00:00Z"}]}"#;
        assert_eq!(decide(Some(file)), Ok(()));
    }

    #[test]
    fn every_other_case_fails_closed_with_the_contract_reason() {
        let entry = |until: &str| {
            format!(
                r#"{{"format":"conform.allowlist/v1","entries":[{{"suite":"invoice-extraction","provider":"fallback","valid_until":"{until}"}}]}}"#
            )
        };
        assert_eq!(decide(None), Err(Reason::Missing));
        assert_eq!(decide(Some("{not json")), Err(Reason::Unreadable));
        assert_eq!(
            decide(Some(r#"{"format":"conform.allowlist/v1"}"#)),
            Err(Reason::Unreadable)
        );
        assert_eq!(
            decide(Some(r#"{"format":"conform.allowlist/v1","entries":{}}"#)),
            Err(Reason::Unreadable)
        );
        assert_eq!(decide(Some("[]")), Err(Reason::UnknownFormat));
        assert_eq!(
            decide(Some(r#"{"format":"conform.allowlist/v2","entries":[]}"#)),
            Err(Reason::UnknownFormat)
        );
        assert_eq!(
            decide(Some(r#"{"entries":[]}"#)),
            Err(Reason::UnknownFormat)
        );
        assert_eq!(
            decide(Some(r#"{"format":"conform.allowlist/v1","entries":[]}"#)),
            Err(Reason::NoEntry)
        );
        assert_eq!(
            decide(Some(&entry("2026-05-01T00:00:00Z"))),
            Err(Reason::Expired)
        );
        assert_eq!(decide(Some(&entry("next tuesday"))), Err(Reason::Expired));
    }
}
