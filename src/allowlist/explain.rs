//! Where a (suite, provider) stands, in words: for `conform allowlist show | explain`,
//! and for anyone who must tell a person why failover is off. The decision itself is
//! [`super::decide`]'s; this only names it.

use super::decision::{Denial, Permit};

/// The stable status of a decision: `permitted`, or the denial's reason code
/// (`no_entry`, `revoked`, `expired`, `suite_changed` …).
///
/// ```
/// use conform::allowlist::{Allowlist, Observed, Revocation, status};
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
/// let decision = list.decide("invoice-extraction", "mistral", now, &Observed::default());
/// assert_eq!(status(&decision), "revoked");
/// let decision = list.decide("ticket-triage", "mistral", now, &Observed::default());
/// assert_eq!(status(&decision), "no_entry");
/// ```
pub fn status(decision: &Result<Permit, Denial>) -> &'static str {
    match decision {
        Ok(_) => "permitted",
        Err(denial) => denial.reason.code(),
    }
}
