//! The failover gate of `conform serve`: [`conform_gate::allowlist::decide`], read at decision
//! time and failing closed, exactly as `conform gate` decides.
//!
//! By default each entry must still match the project's `fixtures/TASK`,
//! `providers/PROVIDER.toml` and `conform.toml`, as `conform gate` requires: a task or
//! provider the project does not have is denied. Without a project (`conform serve
//! --unverified-allowlist`) the evidence is held to nothing but its time, as the contract
//! reads the file (`format`, `entries`, and each entry's `suite`, `provider` and
//! `valid_until`).
//!
//! With the ledger, the gate also remembers the newest statement it read per (task,
//! provider), and denies an entry made before it (`superseded`): the file alone cannot
//! show that it is not an older copy put back.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::future::BoxFuture;
use time::OffsetDateTime;

use crate::ledger::Ledger;
use conform_allowlist::sign::Trust;
use conform_allowlist::statements;
use conform_config::Paths;
use conform_gate::allowlist::{
    Allowlist, Denial, Permit, Query, Reason, Seen, decide, decide_query,
};

/// The failover gate seam: whether an attempt may go to a provider other than the job's
/// own. [`AllowlistGate`] is the real one.
pub trait FailoverGate: Send + Sync + 'static {
    /// Whether failover to `provider` for `task` is permitted at `now`; a denial says why.
    fn permits<'a>(
        &'a self,
        task: &'a str,
        provider: &'a str,
        now: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), Denial>>;
}

/// The allowlist file, read at every decision (an edit takes effect at once, with no
/// restart), held to the project when there is one and to what the ledger remembers of
/// the files read before.
#[derive(Debug)]
pub struct AllowlistGate {
    /// The allowlist file (`CONFORM_ALLOWLIST`).
    pub allowlist: PathBuf,
    /// `None` reads the file as the contract does (`--unverified-allowlist`).
    pub project: Option<Paths>,
    /// Remembers, per (suite, provider), the newest statement read in the file (under
    /// the project's trust file, only signed ones), across restarts and every process
    /// sharing it: an older allowlist put back is then `superseded`. `None` remembers
    /// nothing.
    pub ledger: Option<Ledger>,
    /// What this process has written to the ledger already: only newer is written again.
    written: Mutex<Seen>,
}

impl AllowlistGate {
    /// A gate that has read nothing yet: the file is first read at the first decision.
    pub fn new(allowlist: PathBuf, project: Option<Paths>, ledger: Option<Ledger>) -> Self {
        AllowlistGate {
            allowlist,
            project,
            ledger,
            written: Mutex::new(Seen::default()),
        }
    }

    /// Remembers what `list` states in the ledger, and answers when the newest statement
    /// about (`task`, `provider`) it remembers was made.
    async fn newest(
        &self,
        ledger: &Ledger,
        list: &Allowlist,
        (task, provider): (&str, &str),
        now: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, crate::ledger::LedgerError> {
        // A trust file that does not load advances nothing; the decision denies.
        let trust = match &self.project {
            Some(paths) => Trust::load(&paths.trust).ok().flatten(),
            None => None,
        };
        let mut fresh = statements(list, trust.as_ref(), now);
        {
            let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            fresh.retain(|s| written.get(&s.suite, &s.provider) < Some(s.at));
        }
        ledger.remember_statements(&fresh).await?;
        {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            for s in &fresh {
                written.record(&s.suite, &s.provider, s.at);
            }
        }
        ledger.newest_statement(task, provider).await
    }
}

impl AllowlistGate {
    /// The whole decision, the permit's evidence included: what failover asks
    /// ([`FailoverGate::permits`]) and what `GET /v1/gate` answers, so both give the same
    /// answer for the same file, project, ledger and time.
    pub async fn decide(
        &self,
        task: &str,
        provider: &str,
        now: OffsetDateTime,
    ) -> Result<Permit, Denial> {
        let Some(ledger) = &self.ledger else {
            return decision(&self.allowlist, task, provider, now, self.project.as_ref());
        };
        let mut query = Query::new(task, provider, now);
        query.project = self.project.as_ref();
        // Read once: what is remembered and what is decided are the same file.
        let Ok(list) = Allowlist::load(&self.allowlist) else {
            return decide(&self.allowlist, &query);
        };
        let newest = (self.newest(ledger, &list, (task, provider), now).await).map_err(|e| {
            Denial::new(
                Reason::Unreadable,
                format!(
                    "the ledger's record of the allowlist statements already read cannot be used: {e}"
                ),
            )
        })?;
        let mut seen = Seen::default();
        if let Some(at) = newest {
            seen.record(task, provider, at);
        }
        decide_query(&list, &query.seen(Some(&seen)))
    }
}

impl FailoverGate for AllowlistGate {
    fn permits<'a>(
        &'a self,
        task: &'a str,
        provider: &'a str,
        now: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), Denial>> {
        Box::pin(async move { self.decide(task, provider, now).await.map(|_| ()) })
    }
}

/// Whether the allowlist at `path` permits failover to `provider` for `task` at `now`,
/// remembering nothing.
pub fn permits(
    path: &Path,
    task: &str,
    provider: &str,
    now: OffsetDateTime,
    project: Option<&Paths>,
) -> Result<(), Denial> {
    decision(path, task, provider, now, project).map(|_| ())
}

/// [`permits`], with the permit's evidence.
fn decision(
    path: &Path,
    task: &str,
    provider: &str,
    now: OffsetDateTime,
    project: Option<&Paths>,
) -> Result<Permit, Denial> {
    let mut query = Query::new(task, provider, now);
    query.project = project;
    decide(path, &query)
}

#[cfg(test)]
mod tests {
    use super::*;
    use conform_gate::allowlist::Reason;
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
