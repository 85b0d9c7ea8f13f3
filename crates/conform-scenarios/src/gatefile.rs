//! The allowlist the scenarios hand the orchestrator, in the real `conform.allowlist/v1`
//! shape, and the broken files the fail-closed checks rewrite it with.

use std::collections::BTreeMap;
use std::path::Path;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform_gate::allowlist::{Allowlist, Entry, Evidence};

/// The task every scenario job names; the allowlist permits failover to `fallback` for it.
pub(crate) const TASK: &str = "invoice-extraction";
/// A task the allowlist has no entry for.
pub(crate) const OTHER_TASK: &str = "ticket-triage";

/// An allowlist permitting failover to each `(provider, valid_until)` for `task`.
pub(crate) fn allowlist(task: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let now = rfc3339(OffsetDateTime::now_utc());
    let file = Allowlist {
        entries: entries
            .iter()
            .map(|(provider, valid_until)| Entry {
                suite: task.to_string(),
                provider: provider.to_string(),
                model: format!("{provider}-mock"),
                served_models: vec![format!("{provider}-mock")],
                system_fingerprints: Vec::new(),
                suite_digest: "sha256:scenario-suite".to_string(),
                provider_digest: format!("sha256:scenario-{provider}"),
                suite_identity: None,
                provider_identity: None,
                tokenizer: "none".to_string(),
                evidence: Evidence {
                    run_id: "conform-scenarios".to_string(),
                    report: "reports/conform-scenarios/report.json".to_string(),
                    conform_version: env!("CARGO_PKG_VERSION").to_string(),
                    first_call_at: Some(now.clone()),
                    cases: 1,
                    repeats: 1,
                    calls: 1,
                    passed: 1,
                    pass_rate: 1.0,
                    first_attempt_pass_rate: 1.0,
                    checks: BTreeMap::new(),
                    rules_out: None,
                    latency: None,
                    tool_calls: None,
                    differential: None,
                },
                generated_at: now.clone(),
                valid_until: valid_until.to_string(),
                simulated: false,
                contract_only: false,
                attestation: None,
            })
            .collect(),
        ..Allowlist::default()
    };
    let mut bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The allowlist of a run: failover to `fallback` for [`TASK`], valid for a day.
pub(crate) fn standard() -> Vec<u8> {
    allowlist(TASK, &[("fallback", &in_seconds(86_400))])
}

/// An RFC 3339 instant `seconds` from now (negative: in the past).
pub(crate) fn in_seconds(seconds: i64) -> String {
    rfc3339(OffsetDateTime::now_utc() + time::Duration::seconds(seconds))
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// Replaces the file atomically, so the orchestrator reads the old one or the new one.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    conform_gate::allowlist::writer::write_atomically(path, &dir, bytes)
}

/// Removes the file; a file already gone is fine.
pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conform_gate::allowlist::{Query, Reason, decide};

    #[test]
    fn the_standard_allowlist_permits_fallback_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowlist.json");
        write(&path, &standard()).unwrap();
        let now = OffsetDateTime::now_utc();
        // The orchestrator contract's reading, as the scenarios' orchestrator reads it.
        let reason = |task, provider| {
            decide(&path, &Query::new(task, provider, now))
                .err()
                .map(|d| d.reason)
        };
        assert_eq!(reason(TASK, "fallback"), None);
        assert_eq!(reason(TASK, "rogue"), Some(Reason::NoEntry));
        assert_eq!(reason(OTHER_TASK, "fallback"), Some(Reason::NoEntry));
        write(&path, &allowlist(TASK, &[("fallback", &in_seconds(-60))])).unwrap();
        assert_eq!(reason(TASK, "fallback"), Some(Reason::Expired));
        remove(&path).unwrap();
        remove(&path).unwrap();
    }
}
