//! Where a (suite, provider) stands in the allowlist, and why: for `conform allowlist
//! show` and `explain`, and for anyone who must tell a person why failover is off.

use serde::Serialize;
use time::OffsetDateTime;

use super::format::{Allowlist, Entry, Revocation};
use super::reader::{Observed, Reason};

/// The standing of one (suite, provider) at one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Standing {
    /// A valid entry permits failover.
    Permitted { entry: Box<Entry> },
    /// The entry's `valid_until` has passed (or does not parse).
    Expired { entry: Box<Entry> },
    /// The last conclusive run found the provider nonconformant.
    Revoked { revocation: Revocation },
    /// No entry and no revocation: no conclusive run has been recorded.
    NeverRun,
}

impl Standing {
    /// The stable code: `permitted`, `expired`, `revoked` or `never_run`.
    pub fn code(&self) -> &'static str {
        match self {
            Standing::Permitted { .. } => "permitted",
            Standing::Expired { .. } => "expired",
            Standing::Revoked { .. } => "revoked",
            Standing::NeverRun => "never_run",
        }
    }
}

/// The standing of (`suite`, `provider`) in `list` at `at`, decided by the same rules as
/// [`Allowlist::permits`] with nothing observed.
///
/// ```
/// use conform::allowlist::{Allowlist, Revocation, Standing, standing};
/// let mut list = Allowlist::default();
/// list.revocations.push(Revocation {
///     suite: "invoice-extraction".into(),
///     provider: "mistral".into(),
///     run_id: "r7".into(),
///     at: "2026-01-01T00:00:00Z".into(),
///     reasons: vec!["schema_additional_property".into()],
///     report: "reports/r7/report.json".into(),
/// });
/// let now = time::OffsetDateTime::now_utc();
/// assert_eq!(standing(&list, "invoice-extraction", "mistral", now).code(), "revoked");
/// assert_eq!(standing(&list, "ticket-triage", "mistral", now), Standing::NeverRun);
/// ```
pub fn standing(list: &Allowlist, suite: &str, provider: &str, at: OffsetDateTime) -> Standing {
    match list.permits(suite, provider, at, &Observed::default()) {
        Ok(permit) => Standing::Permitted {
            entry: Box::new(permit.entry),
        },
        Err(denial) if denial.reason == Reason::Expired => match list.entry(suite, provider) {
            Some(entry) => Standing::Expired {
                entry: Box::new(entry.clone()),
            },
            None => Standing::NeverRun,
        },
        Err(_) => match list.revocation(suite, provider) {
            Some(revocation) => Standing::Revoked {
                revocation: revocation.clone(),
            },
            None => Standing::NeverRun,
        },
    }
}
