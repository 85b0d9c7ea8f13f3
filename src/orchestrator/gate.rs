//! The failover gate of `conform serve`: [`crate::allowlist::decide`], read at decision
//! time and failing closed, exactly as `conform gate` decides.
//!
//! By default each entry must still match the project's `fixtures/TASK`,
//! `providers/PROVIDER.toml` and `conform.toml`, as `conform gate` requires: a task or
//! provider the project does not have is denied. Without a project (`conform serve
//! --unverified-allowlist`) the evidence is held to nothing but its time, as the contract
//! reads the file (`format`, `entries`, and each entry's `suite`, `provider` and
//! `valid_until`).

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use crate::allowlist::{Denial, Query, decide};
use crate::config::Paths;

/// The failover gate seam: whether an attempt may go to a provider other than the job's
/// own. [`AllowlistGate`] is the real one.
pub trait FailoverGate: Send + Sync + 'static {
    /// Whether failover to `provider` for `task` is permitted at `now`; a denial says why.
    fn permits(&self, task: &str, provider: &str, now: OffsetDateTime) -> Result<(), Denial>;
}

/// The allowlist file, read at every decision (an edit takes effect at once, with no
/// restart), held to the project when there is one.
#[derive(Debug, Clone)]
pub struct AllowlistGate {
    pub allowlist: PathBuf,
    /// `None` reads the file as the contract does (`--unverified-allowlist`).
    pub project: Option<Paths>,
}

impl FailoverGate for AllowlistGate {
    fn permits(&self, task: &str, provider: &str, now: OffsetDateTime) -> Result<(), Denial> {
        permits(&self.allowlist, task, provider, now, self.project.as_ref())
    }
}

/// Whether the allowlist at `path` permits failover to `provider` for `task` at `now`.
pub fn permits(
    path: &Path,
    task: &str,
    provider: &str,
    now: OffsetDateTime,
    project: Option<&Paths>,
) -> Result<(), Denial> {
    let mut query = Query::new(task, provider, now);
    query.project = project;
    decide(path, &query).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::Reason;
    use time::format_description::well_known::Rfc3339;

    fn decide(content: Option<&str>) -> Result<(), Reason> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowlist.json");
        if let Some(content) = content {
            std::fs::write(&path, content).unwrap();
        }
        let now = OffsetDateTime::parse("2026-06-01T00:00:00Z", &Rfc3339).unwrap();
        permits(&path, "invoice-extraction", "fallback", now, None).map_err(|d| d.reason)
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
