//! Where a (suite, provider) stands, in words: for `conform allowlist show | explain`,
//! and for anyone who must tell a person why failover is off. The decision itself is
//! [`super::decide`]'s; this only names it.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::decision::{Denial, Permit, Reason};

/// The stable status of a decision: `permitted`, or the denial's reason code
/// (`no_entry`, `revoked`, `expired`, `suite_changed` …).
///
/// ```
/// use conform_allowlist::{Allowlist, Observed, Revocation, status};
/// let mut list = Allowlist::default();
/// list.revocations.push(Revocation {
///     suite: "invoice-extraction".into(),
///     provider: "mistral".into(),
///     run_id: "r7".into(),
///     at: "2026-01-01T00:00:00Z".into(),
///     reasons: vec!["schema_additional_property".into()],
///     report: "reports/r7/report.json".into(),
///     suite_digest: None,
///     provider_digest: None,
///     attestation: None,
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

/// The decision in a sentence for people, with what to do about it.
pub fn sentence(
    decision: &Result<Permit, Denial>,
    suite: &str,
    provider: &str,
    now: OffsetDateTime,
) -> String {
    match decision {
        Ok(permit) => {
            let entry = &permit.entry;
            let ev = &entry.evidence;
            format!(
                "failover is permitted until {} ({} left), on run {}: {}/{} calls passed \
({:.0}% after retries, {:.0}% first attempt), which rule out {}; served {}; report {}",
                entry.valid_until,
                time_left(&entry.valid_until, now),
                ev.run_id,
                ev.passed,
                ev.calls,
                ev.pass_rate * 100.0,
                ev.first_attempt_pass_rate * 100.0,
                permit.rules_out_words(),
                list_or_none(&entry.served_models),
                ev.report
            )
        }
        Err(denial) if denial.reason == Reason::NoEntry => format!(
            "never run: no conclusive run of {provider} on {suite} is recorded; run `conform run {provider} --suite {suite}`"
        ),
        Err(denial) if denial.reason.lifted_by_rerun() => format!(
            "{}; rerun `conform run {provider} --suite {suite}`",
            denial.detail
        ),
        Err(denial) => denial.detail.clone(),
    }
}

/// How long until `until` (RFC 3339), to the minute; "none" once it has passed.
pub fn time_left(until: &str, now: OffsetDateTime) -> String {
    match OffsetDateTime::parse(until, &Rfc3339) {
        Ok(t) if t > now => {
            let secs = (t - now).whole_seconds().max(0) as u64;
            // Minutes are precise enough for a lifetime counted in days.
            let rounded = std::time::Duration::from_secs(secs - secs % 60);
            humantime::format_duration(rounded).to_string()
        }
        _ => "none".into(),
    }
}

/// The items joined by commas, or "none".
pub fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}
