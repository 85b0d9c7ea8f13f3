//! The failover decision: may an orchestrator fail over to provider P for suite S, now?
//!
//! It is made here and nowhere else. `conform gate`, `conform export`, `conform allowlist
//! show | explain`, `conform serve`'s gate and Rust orchestrators all call [`decide`] (or,
//! holding a parsed file, [`Allowlist::decide`]), so none of them can answer differently
//! for the same file, suite, provider and instant.

use std::path::Path;

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::format::{Allowlist, Entry, LatencyEvidence, Revocation};
use super::local::Local;
use crate::config::Paths;

/// Why failover is not permitted. The codes are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// There is no allowlist file.
    Missing,
    /// The file is not JSON, or has no `entries` list.
    Unreadable,
    /// Not an object, or another `format`.
    UnknownFormat,
    /// No entry for this (suite, provider), and no run revoked one.
    NoEntry,
    /// The last conclusive run found the provider nonconformant for the suite.
    Revoked,
    /// The evidence came from a simulated provider, which never stands for a real one.
    Simulated,
    /// The entry's `valid_until` has passed or does not parse.
    Expired,
    /// The suite is not the one the evidence was made with (or the entry records none).
    SuiteChanged,
    /// The provider's configuration is not the one the evidence was made with.
    ProviderChanged,
    /// The caller saw a served model or fingerprint that the evidence never saw.
    ModelDrift,
    /// The caller asked for a latency bound (`conform gate --max-p95`) that the
    /// evidence's 95th percentile may exceed, or that the evidence has no percentiles for.
    LatencyBound,
    /// The suite is not in the project's `fixtures/`: nothing can be decided for it.
    UnknownSuite,
    /// The provider is not in the project's `providers/`.
    UnknownProvider,
    /// The suite or provider files of the project do not load.
    InvalidConfig,
}

impl Reason {
    /// Whether a new run of the provider on the suite is what lifts this denial.
    pub fn lifted_by_rerun(self) -> bool {
        matches!(
            self,
            Reason::NoEntry
                | Reason::Revoked
                | Reason::Expired
                | Reason::SuiteChanged
                | Reason::ProviderChanged
                | Reason::ModelDrift
        )
    }

    /// The stable, machine-readable code, e.g. `no_entry` or `suite_changed`.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Missing => "missing",
            Reason::Unreadable => "unreadable",
            Reason::UnknownFormat => "unknown_format",
            Reason::NoEntry => "no_entry",
            Reason::Revoked => "revoked",
            Reason::Simulated => "simulated",
            Reason::Expired => "expired",
            Reason::SuiteChanged => "suite_changed",
            Reason::ProviderChanged => "provider_changed",
            Reason::ModelDrift => "model_drift",
            Reason::LatencyBound => "latency_bound",
            Reason::UnknownSuite => "unknown_suite",
            Reason::UnknownProvider => "unknown_provider",
            Reason::InvalidConfig => "invalid_config",
        }
    }

    /// The question itself was wrong (a suite or provider the project does not have, or
    /// files that do not load): a usage error for a command line, still a denial for an
    /// orchestrator.
    pub fn is_usage_error(self) -> bool {
        matches!(
            self,
            Reason::UnknownSuite | Reason::UnknownProvider | Reason::InvalidConfig
        )
    }
}

/// Failover is not permitted, and why: a stable [`Reason`], a sentence for people, and
/// the record the decision rests on, when there is one.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("failover not allowed ({}): {detail}", reason.code())]
pub struct Denial {
    pub reason: Reason,
    pub detail: String,
    /// The entry that was held against the query and failed it (expired, changed …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<Box<Entry>>,
    /// The revocation, for [`Reason::Revoked`]: which run, which finding codes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation: Option<Box<Revocation>>,
}

impl Denial {
    pub(crate) fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Denial {
            reason,
            detail: detail.into(),
            entry: None,
            revocation: None,
        }
    }

    fn about(mut self, entry: &Entry) -> Self {
        self.entry = Some(Box::new(entry.clone()));
        self
    }
}

/// Failover is permitted, on this entry's evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Permit {
    pub entry: Entry,
}

/// What the caller has observed, to be held against the evidence. Every field is
/// optional: a field left out is not checked.
///
/// Pass what you know: the digest of the suite your application runs and of the provider
/// configuration (so that a changed prompt, schema or model setting invalidates old
/// evidence), whether the provider is simulated, and the `model` and `system_fingerprint`
/// the provider's last response reported (so that a silently swapped model does).
/// [`decide`] with [`Query::project`] fills the first three from the project's files.
///
/// ```
/// use conform::allowlist::{Allowlist, Observed, Reason};
/// use time::macros::datetime;
/// # let json = r#"{"format": "conform.allowlist/v1", "entries": [{
/// #   "suite": "invoice-extraction", "provider": "mistral", "model": "mistral-small-latest",
/// #   "served_models": ["mistral-small-2503"], "system_fingerprints": [],
/// #   "suite_digest": "sha256:5e1f", "provider_digest": "sha256:9c0d", "tokenizer": "none",
/// #   "evidence": {"run_id": "r1", "report": "reports/r1/report.json", "conform_version": "0.1.0",
/// #     "cases": 25, "repeats": 3, "calls": 75, "passed": 75, "pass_rate": 1.0,
/// #     "first_attempt_pass_rate": 0.96, "checks": {}},
/// #   "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}]}"#;
/// let list = Allowlist::parse(json.as_bytes()).unwrap();
/// let at = datetime!(2026-01-02 12:00 UTC);
///
/// let same = Observed { served_model: Some("mistral-small-2503"), ..Observed::default() };
/// assert!(list.permits("invoice-extraction", "mistral", at, &same).is_ok());
///
/// let swapped = Observed { served_model: Some("mistral-small-2509"), ..Observed::default() };
/// let denial = list.permits("invoice-extraction", "mistral", at, &swapped).unwrap_err();
/// assert_eq!(denial.reason, Reason::ModelDrift);
///
/// let edited = Observed { suite_digest: Some("sha256:77aa"), ..Observed::default() };
/// let denial = list.permits("invoice-extraction", "mistral", at, &edited).unwrap_err();
/// assert_eq!(denial.reason, Reason::SuiteChanged);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    /// The digest of the suite as it is now.
    pub suite_digest: Option<&'a str>,
    /// The digest of the provider configuration as it is now.
    pub provider_digest: Option<&'a str>,
    /// The provider is a simulation (`kind = "sim"`): never a real failover target.
    pub simulated: bool,
    /// The model the provider reported serving.
    pub served_model: Option<&'a str>,
    /// The system fingerprint the provider reported.
    pub system_fingerprint: Option<&'a str>,
}

/// One failover question: to `provider`, for `suite`, at `at`.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    pub suite: &'a str,
    pub provider: &'a str,
    pub at: OffsetDateTime,
    /// The project whose `fixtures/SUITE` and `providers/PROVIDER.toml` the evidence must
    /// still match. `None` holds the entry to nothing but its time (the orchestrator
    /// contract's reading).
    pub project: Option<&'a Paths>,
    /// What the provider reported of itself (only the served model and fingerprint are
    /// read; the rest comes from `project`).
    pub reported: Observed<'a>,
    /// What the caller needs of the provider now, beyond conformance.
    pub required: Required,
}

/// Bounds a caller holds the evidence to at decision time: an orchestrator whose users
/// cannot wait 20 s asks for a fallback proven faster than that. Unset bounds are not
/// checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Required {
    /// The evidence's 95th percentile of whole-call latency must be under this.
    pub max_p95_latency: Option<std::time::Duration>,
    /// The evidence's 95th percentile of time to first token must be under this.
    pub max_p95_ttft: Option<std::time::Duration>,
}

impl<'a> Query<'a> {
    /// A question about `suite` and `provider` at `at`, checked against nothing but time.
    pub fn new(suite: &'a str, provider: &'a str, at: OffsetDateTime) -> Self {
        Query {
            suite,
            provider,
            at,
            project: None,
            reported: Observed::default(),
            required: Required::default(),
        }
    }

    /// Holds the evidence's latency percentiles to `required`.
    pub fn required(mut self, required: Required) -> Self {
        self.required = required;
        self
    }

    /// Holds the evidence to the project's suite and provider files as they are now.
    pub fn project(mut self, paths: &'a Paths) -> Self {
        self.project = Some(paths);
        self
    }

    /// Holds the evidence to what the provider reported of itself.
    pub fn reported(mut self, served_model: Option<&'a str>, fingerprint: Option<&'a str>) -> Self {
        self.reported.served_model = served_model;
        self.reported.system_fingerprint = fingerprint;
        self
    }
}

/// The failover decision for one [`Query`] against the allowlist file at `path`.
///
/// The project's files are read first (an unknown suite or provider is a question that
/// cannot be answered, whatever the file says), then the allowlist, at the moment of
/// deciding: it is replaced atomically, so a read sees the old version or the new one.
/// Everything unexpected is a [`Denial`].
///
/// ```
/// use conform::allowlist::{Query, Reason, decide};
/// let dir = tempfile::tempdir().unwrap();
/// let now = time::OffsetDateTime::now_utc();
/// let query = Query::new("invoice-extraction", "fallback", now);
/// let denial = decide(&dir.path().join("allowlist.json"), &query).unwrap_err();
/// assert_eq!(denial.reason, Reason::Missing);
/// ```
pub fn decide(path: &Path, query: &Query<'_>) -> Result<Permit, Denial> {
    let local = observe(query)?;
    Allowlist::load(path)?.answer(query, local.as_ref())
}

fn observe(query: &Query<'_>) -> Result<Option<Local>, Denial> {
    query
        .project
        .map(|paths| Local::observe(paths, query.suite, query.provider))
        .transpose()
}

impl Allowlist {
    /// [`decide`] for a file already read (to answer many questions from one read):
    /// the same question, against the same project, gets the same answer.
    pub fn decide_query(&self, query: &Query<'_>) -> Result<Permit, Denial> {
        let local = observe(query)?;
        self.answer(query, local.as_ref())
    }

    fn answer(&self, query: &Query<'_>, local: Option<&Local>) -> Result<Permit, Denial> {
        let observed = match local {
            Some(local) => local.observed(query.reported),
            None => query.reported,
        };
        let permit = self.decide(query.suite, query.provider, query.at, &observed)?;
        check_required(&permit.entry, &query.required)?;
        Ok(permit)
    }

    /// The decision for one (suite, provider) at one instant, holding the evidence to
    /// `observed`. Checked in this order: an entry exists (else `revoked` when a run
    /// revoked it, `no_entry` otherwise); no later revocation; not simulated; not expired;
    /// the suite and provider digests; the served model and fingerprint.
    pub fn decide(
        &self,
        suite: &str,
        provider: &str,
        at: OffsetDateTime,
        observed: &Observed<'_>,
    ) -> Result<Permit, Denial> {
        let revocation = self.revocation(suite, provider);
        let mut candidates = self
            .entries
            .iter()
            .filter(|e| e.suite == suite && e.provider == provider)
            .peekable();
        if candidates.peek().is_none() {
            return Err(match revocation {
                Some(r) => revoked(r),
                None => Denial::new(
                    Reason::NoEntry,
                    format!("no entry for provider `{provider}` and suite `{suite}`"),
                ),
            });
        }
        let mut first = None;
        for entry in candidates {
            let checked = match revocation {
                Some(r) if !newer(&entry.generated_at, &r.at) => Err(revoked(r).about(entry)),
                _ => check_entry(entry, at, observed),
            };
            match checked {
                Ok(()) => {
                    return Ok(Permit {
                        entry: entry.clone(),
                    });
                }
                Err(denial) => {
                    first.get_or_insert(denial);
                }
            }
        }
        Err(first.unwrap_or_else(|| Denial::new(Reason::NoEntry, "no usable entry")))
    }

    /// [`Allowlist::decide`] by its older name.
    pub fn permits(
        &self,
        suite: &str,
        provider: &str,
        at: OffsetDateTime,
        observed: &Observed<'_>,
    ) -> Result<Permit, Denial> {
        self.decide(suite, provider, at, observed)
    }
}

fn revoked(r: &Revocation) -> Denial {
    let codes = if r.reasons.is_empty() {
        "(no finding recorded)".to_string()
    } else {
        r.reasons.join(", ")
    };
    Denial {
        revocation: Some(Box::new(r.clone())),
        ..Denial::new(
            Reason::Revoked,
            format!(
                "revoked by run {} at {} because of: {codes}; report {}",
                r.run_id, r.at, r.report
            ),
        )
    }
}

/// Whether an entry made at `made` is strictly newer than a revocation at `revoked`. A
/// time that does not parse is never newer: the revocation stands.
fn newer(made: &str, revoked: &str) -> bool {
    match (
        OffsetDateTime::parse(made, &Rfc3339),
        OffsetDateTime::parse(revoked, &Rfc3339),
    ) {
        (Ok(made), Ok(revoked)) => made > revoked,
        _ => false,
    }
}

/// The caller's latency bounds against the evidence's percentiles (each within the
/// recorded relative error: a percentile within it of the bound counts as above it).
fn check_required(entry: &Entry, required: &Required) -> Result<(), Denial> {
    let total: fn(&LatencyEvidence) -> f64 = |l| l.total_ms.p95;
    let first_token: fn(&LatencyEvidence) -> f64 = |l| l.first_token_ms.p95;
    let bounds = [
        ("latency", required.max_p95_latency, total),
        ("time to first token", required.max_p95_ttft, first_token),
    ];
    for (what, bound, p95_of) in bounds {
        let Some(bound) = bound else { continue };
        let bound_ms = bound.as_secs_f64() * 1000.0;
        let Some(latency) = &entry.evidence.latency else {
            return Err(Denial::new(
                Reason::LatencyBound,
                format!(
                    "a p95 {what} under {} was asked for, and the evidence (run {}) records no latency percentiles: run again",
                    crate::latency::words(bound_ms),
                    entry.evidence.run_id
                ),
            )
            .about(entry));
        };
        let p95 = p95_of(latency);
        if crate::latency::may_exceed(p95, latency.relative_error, bound_ms) {
            return Err(Denial::new(
                Reason::LatencyBound,
                format!(
                    "the evidence's p95 {what} is {} (±{:.0}%), not under the {} asked for (run {}, {} calls)",
                    crate::latency::words(p95),
                    latency.relative_error * 100.0,
                    crate::latency::words(bound_ms),
                    entry.evidence.run_id,
                    latency.calls
                ),
            )
            .about(entry));
        }
    }
    Ok(())
}

fn check_entry(entry: &Entry, at: OffsetDateTime, observed: &Observed<'_>) -> Result<(), Denial> {
    let deny = |reason, detail: String| Err(Denial::new(reason, detail).about(entry));
    if entry.simulated || observed.simulated {
        return deny(
            Reason::Simulated,
            format!(
                "`{}` is a simulated provider: evidence from `conform demo` never permits a real failover",
                entry.provider
            ),
        );
    }
    match OffsetDateTime::parse(&entry.valid_until, &Rfc3339) {
        Ok(until) if at < until => {}
        Ok(_) => {
            return deny(
                Reason::Expired,
                format!("the entry expired at {}", entry.valid_until),
            );
        }
        Err(_) => {
            return deny(
                Reason::Expired,
                format!(
                    "valid_until `{}` is not an RFC 3339 time",
                    entry.valid_until
                ),
            );
        }
    }
    if let Some(digest) = observed.suite_digest
        && digest != entry.suite_digest
    {
        let detail = if entry.contract_only {
            format!(
                "the entry records no suite digest, so it cannot be shown to be for the suite as it is now ({digest})"
            )
        } else {
            format!(
                "the suite is now {digest}; the evidence was made with {}",
                entry.suite_digest
            )
        };
        return deny(Reason::SuiteChanged, detail);
    }
    if let Some(digest) = observed.provider_digest
        && digest != entry.provider_digest
    {
        let detail = if entry.contract_only {
            "the entry records no provider digest, so it cannot be shown to be for the provider configuration as it is now".to_string()
        } else {
            format!(
                "the provider configuration is now {digest}; the evidence was made with {}",
                entry.provider_digest
            )
        };
        return deny(Reason::ProviderChanged, detail);
    }
    if let Some(model) = observed.served_model
        && !entry.served_models.iter().any(|m| m == model)
    {
        return deny(
            Reason::ModelDrift,
            format!(
                "served model `{model}` was never seen in the evidence (seen: {})",
                if entry.served_models.is_empty() {
                    "none".to_string()
                } else {
                    entry.served_models.join(", ")
                }
            ),
        );
    }
    if let Some(fp) = observed.system_fingerprint
        && !entry.system_fingerprints.iter().any(|f| f == fp)
    {
        return deny(
            Reason::ModelDrift,
            format!("system fingerprint `{fp}` was never seen in the evidence"),
        );
    }
    Ok(())
}
