//! The failover decision: may an orchestrator fail over to provider P for suite S, now?
//!
//! It is made here and nowhere else. `conform gate`, `conform export`, `conform allowlist
//! show | explain`, `conform serve`'s gate and Rust orchestrators all call [`decide`] (or,
//! holding a parsed file, [`Allowlist::decide`]), so none of them can answer differently
//! for the same file, suite, provider and instant.

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::format::{Allowlist, Entry, LatencyEvidence, Revocation, RulesOut};
use crate::identity::{ProviderIdentity, SuiteIdentity};
use crate::sign::Unverified;

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
    /// The reader has seen a statement about this (suite, provider) made after the
    /// entry: an older allowlist was put back in place of a newer one.
    Superseded,
    /// The evidence came from a simulated provider, which never stands for a real one.
    Simulated,
    /// The project trusts signing keys (`trust.toml`) and the entry carries no signature.
    Unsigned,
    /// The entry's signature does not verify, or the entry was edited after signing.
    SignatureInvalid,
    /// The entry is signed by a key the project's `trust.toml` does not list.
    UntrustedKey,
    /// The entry's `valid_until` has passed or does not parse.
    Expired,
    /// The suite is not the one the evidence was made with (or the entry records none).
    SuiteChanged,
    /// The provider's configuration is not the one the evidence was made with.
    ProviderChanged,
    /// The evidence judged the provider against a reference (`--reference PRIMARY`) whose
    /// configuration is not the one the comparison was made with, or that the project no
    /// longer has: the comparison is about another primary.
    ReferenceChanged,
    /// The caller saw a served model or fingerprint that the evidence never saw.
    ModelDrift,
    /// The caller asked for a latency bound (`conform gate --max-p95`) that the
    /// evidence's 95th percentile may exceed, or that the evidence has no percentiles for.
    LatencyBound,
    /// The suite is not in the project's `fixtures/`: nothing can be decided for it.
    UnknownSuite,
    /// The provider is not in the project's `providers/`.
    UnknownProvider,
    /// The evidence is too thin for what is asked: fewer repeats than the suite asks
    /// for, or a failure rate the calls do not rule out (`conform gate
    /// --max-undetected-failure-rate`, or `conform.toml`).
    InsufficientEvidence,
    /// The entry claims to be valid for longer after its first call than the project
    /// allows (`max_valid_for`, 30 days by default), or does not say when that call was.
    ValidityTooLong,
    /// The suite or provider files of the project do not load.
    InvalidConfig,
}

impl Reason {
    /// Every reason, in the order the decision checks them.
    pub const ALL: [Reason; 21] = [
        Reason::UnknownSuite,
        Reason::UnknownProvider,
        Reason::InvalidConfig,
        Reason::Missing,
        Reason::Unreadable,
        Reason::UnknownFormat,
        Reason::NoEntry,
        Reason::Revoked,
        Reason::Superseded,
        Reason::Unsigned,
        Reason::SignatureInvalid,
        Reason::UntrustedKey,
        Reason::Simulated,
        Reason::Expired,
        Reason::SuiteChanged,
        Reason::ProviderChanged,
        Reason::ReferenceChanged,
        Reason::ValidityTooLong,
        Reason::ModelDrift,
        Reason::InsufficientEvidence,
        Reason::LatencyBound,
    ];

    /// Whether a new run of the provider on the suite is what lifts this denial.
    pub fn lifted_by_rerun(self) -> bool {
        matches!(
            self,
            Reason::NoEntry
                | Reason::Revoked
                | Reason::Superseded
                | Reason::Unsigned
                | Reason::SignatureInvalid
                | Reason::UntrustedKey
                | Reason::Expired
                | Reason::SuiteChanged
                | Reason::ProviderChanged
                | Reason::ReferenceChanged
                | Reason::ModelDrift
                | Reason::InsufficientEvidence
                | Reason::ValidityTooLong
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
            Reason::Superseded => "superseded",
            Reason::Simulated => "simulated",
            Reason::Unsigned => "unsigned",
            Reason::SignatureInvalid => "signature_invalid",
            Reason::UntrustedKey => "untrusted_key",
            Reason::Expired => "expired",
            Reason::SuiteChanged => "suite_changed",
            Reason::ProviderChanged => "provider_changed",
            Reason::ReferenceChanged => "reference_changed",
            Reason::ModelDrift => "model_drift",
            Reason::LatencyBound => "latency_bound",
            Reason::UnknownSuite => "unknown_suite",
            Reason::UnknownProvider => "unknown_provider",
            Reason::InsufficientEvidence => "insufficient_evidence",
            Reason::ValidityTooLong => "validity_too_long",
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
    /// The stable code a caller branches on.
    pub reason: Reason,
    /// The sentence for people: what failed and what to do about it.
    pub detail: String,
    /// The entry that was held against the query and failed it (expired, changed …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<Box<Entry>>,
    /// The revocation, for [`Reason::Revoked`]: which run, which finding codes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation: Option<Box<Revocation>>,
}

impl Denial {
    /// A denial for `reason`, about no record.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Denial {
            reason,
            detail: detail.into(),
            entry: None,
            revocation: None,
        }
    }

    /// This denial, about `entry`.
    pub fn about(mut self, entry: &Entry) -> Self {
        self.entry = Some(Box::new(entry.clone()));
        self
    }
}

/// Failover is permitted, on this entry's evidence, which met these bounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Permit {
    /// The entry whose evidence permits it.
    pub entry: Entry,
    /// The failure rate the evidence had to rule out, and who asked for it; `None` for
    /// the orchestrator contract's reading, which holds an entry to its time alone.
    pub failure_bound: Option<Bound>,
    /// The drift from the reference the comparison had to rule out, when one was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_bound: Option<Bound>,
}

impl Permit {
    /// What the evidence rules out and what it was held to, for people: `a failure rate
    /// above 2.5 % (95 % confidence), within the 10.0 % required (the default: …); a drift
    /// above 4.1 % from claude on /label (95 % confidence)`.
    pub fn rules_out_words(&self) -> String {
        let ev = &self.entry.evidence;
        let mut words = RulesOut::of(ev.calls, ev.passed).words();
        if let Some(bound) = &self.failure_bound {
            words.push_str(&format!(", within the {} required", bound.words()));
        }
        if let Some(d) = &ev.differential {
            let drift = match d.drift_rules_out() {
                Some(r) => r.words(&d.reference),
                None => format!("no drift from {} (no compared field passed)", d.reference),
            };
            words.push_str("; ");
            words.push_str(&drift);
            if let Some(bound) = &self.drift_bound {
                words.push_str(&format!(", within the {} required", bound.words()));
            }
        }
        words
    }
}

/// The failure rate a permit must rule out when nobody asks for another: 29 calls
/// without a failure meet it, one call never does. A project or a caller may set
/// another, stricter or not (`[evidence] max_undetected_failure_rate`,
/// `conform gate --max-undetected-failure-rate`).
pub const DEFAULT_MAX_UNDETECTED_FAILURE_RATE: f64 = 0.10;

/// Who set a bound the evidence was held to: what `conform allowlist explain` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundFrom {
    /// The caller asked for it (`conform gate --max-…`, a Rust reader's [`Required`]).
    #[default]
    Caller,
    /// The project's `conform.toml`, under `[evidence]`.
    Project,
    /// Nobody: [`DEFAULT_MAX_UNDETECTED_FAILURE_RATE`].
    Default,
    /// The orchestrator contract's reading of the file (no project to hold it to): an
    /// entry is held to its time alone, and no failure rate is required unless asked.
    Contract,
}

impl BoundFrom {
    /// Where the bound came from, in words.
    pub fn words(self) -> &'static str {
        match self {
            BoundFrom::Caller => "asked for by the caller",
            BoundFrom::Project => "the project's conform.toml [evidence]",
            BoundFrom::Default => {
                "the default: [evidence] in conform.toml or the reader's --max-… flag sets another"
            }
            BoundFrom::Contract => "none: the orchestrator contract's reading, by time alone",
        }
    }
}

/// A share the evidence must rule out anything above, and who set it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bound {
    /// The share, from 0 to 1.
    pub rate: f64,
    /// Who asked for it.
    pub from: BoundFrom,
}

impl Bound {
    /// `10.0 % (the default: …)`.
    pub fn words(&self) -> String {
        format!("{:.1} % ({})", self.rate * 100.0, self.from.words())
    }
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
/// use conform_allowlist::{Allowlist, Observed, Reason};
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
/// assert!(list.decide("invoice-extraction", "mistral", at, &same).is_ok());
///
/// let swapped = Observed { served_model: Some("mistral-small-2509"), ..Observed::default() };
/// let denial = list.decide("invoice-extraction", "mistral", at, &swapped).unwrap_err();
/// assert_eq!(denial.reason, Reason::ModelDrift);
///
/// let edited = Observed { suite_digest: Some("sha256:77aa"), ..Observed::default() };
/// let denial = list.decide("invoice-extraction", "mistral", at, &edited).unwrap_err();
/// assert_eq!(denial.reason, Reason::SuiteChanged);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    /// The digest of the suite as it is now.
    pub suite_digest: Option<&'a str>,
    /// The digest of the provider configuration as it is now.
    pub provider_digest: Option<&'a str>,
    /// The suite's files as they are now: a mismatch names the file that changed.
    pub suite_identity: Option<&'a SuiteIdentity>,
    /// The provider's identity as it is now: a mismatch names the field that changed.
    pub provider_identity: Option<&'a ProviderIdentity>,
    /// The repeats the suite asks for now: evidence made with fewer is not enough.
    pub suite_repeats: Option<u32>,
    /// The provider is a simulation (`kind = "sim"`): never a real failover target.
    pub simulated: bool,
    /// The keys the project trusts to sign evidence: when given, only an entry signed by
    /// one of them, as it is now, permits anything.
    pub trust: Option<&'a crate::sign::Trust>,
    /// The model the provider reported serving.
    pub served_model: Option<&'a str>,
    /// The system fingerprint the provider reported.
    pub system_fingerprint: Option<&'a str>,
    /// The project's providers as they are now, for an entry judged against a live
    /// reference: the reference is held to its file as the provider is to its own.
    pub references: Option<&'a dyn References>,
    /// When the newest statement about this (suite, provider) the caller has seen was
    /// made ([`crate::seen::Seen`]): an entry made before it is superseded.
    pub seen: Option<OffsetDateTime>,
}

/// The project's providers as they are now, looked up by name: an entry that names a
/// reference is held to that reference's file.
pub trait References: std::fmt::Debug + Sync {
    /// The identity of provider `name` as its file says now; `Err` says why there is
    /// none (no such file, a file that does not load).
    fn identity(&self, name: &str) -> Result<ProviderIdentity, ReferenceError>;
}

/// Why a reference provider has no identity now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// The project has no provider of that name: the detail names what it has.
    #[error("the project has no such provider any more: {0}")]
    Gone(String),
    /// Its file does not load: the detail says why.
    #[error("{0}")]
    Unreadable(String),
}

/// Bounds a caller holds the evidence to at decision time: an orchestrator whose users
/// cannot wait 20 s asks for a fallback proven faster than that. Unset bounds are not
/// checked; against a project, the validity window is the project's `max_valid_for` (30
/// days by default) when unset.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Required {
    /// The evidence's 95th percentile of whole-call latency must be under this.
    pub max_p95_latency: Option<std::time::Duration>,
    /// The evidence's 95th percentile of time to first token must be under this.
    pub max_p95_ttft: Option<std::time::Duration>,
    /// The evidence must rule out failure rates above this at 95 % confidence
    /// ([`crate::stats`]): 0 failures in 100 calls rule out 3 %, in 20 calls 14 %.
    /// Unset, [`DEFAULT_MAX_UNDETECTED_FAILURE_RATE`] holds.
    pub max_undetected_failure_rate: Option<f64>,
    /// Who set `max_undetected_failure_rate`.
    pub failure_rate_from: BoundFrom,
    /// An entry judged against a reference must rule out a drift from it above this
    /// ([`crate::stats::drift_upper_bound`]); unset, none is required.
    pub max_undetected_drift: Option<f64>,
    /// Who set `max_undetected_drift`.
    pub drift_from: BoundFrom,
    /// An entry may be valid for at most this long after its first call.
    pub max_valid_for: Option<std::time::Duration>,
}

/// A failure-rate bound that is not a share in (0, 1), as the caller wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a share in (0, 1), e.g. 0.05")]
pub struct NotARate(pub String);

impl Required {
    /// A failure-rate bound as a caller writes it: a share in (0, 1), e.g. `0.05`.
    pub fn parse_rate(text: &str) -> Result<f64, NotARate> {
        match text.parse::<f64>() {
            Ok(r) if r > 0.0 && r < 1.0 => Ok(r),
            _ => Err(NotARate(text.to_string())),
        }
    }

    /// These bounds, a project's settings filling those left unset.
    pub fn or_defaults(self, project: ProjectBounds) -> Required {
        let from = |mine: Option<f64>, mine_from, theirs: Option<f64>| match (mine, theirs) {
            (Some(_), _) => mine_from,
            (None, Some(_)) => BoundFrom::Project,
            (None, None) => mine_from,
        };
        Required {
            max_undetected_failure_rate: self
                .max_undetected_failure_rate
                .or(project.max_undetected_failure_rate),
            failure_rate_from: from(
                self.max_undetected_failure_rate,
                self.failure_rate_from,
                project.max_undetected_failure_rate,
            ),
            max_undetected_drift: self.max_undetected_drift.or(project.max_undetected_drift),
            drift_from: from(
                self.max_undetected_drift,
                self.drift_from,
                project.max_undetected_drift,
            ),
            max_valid_for: self.max_valid_for.or(Some(project.max_valid_for)),
            ..self
        }
    }

    /// The failure rate the evidence must rule out: the one asked for, else the default;
    /// none for the contract's reading when nothing was asked.
    pub fn failure_bound(&self) -> Option<Bound> {
        match (self.max_undetected_failure_rate, self.failure_rate_from) {
            (Some(rate), from) => Some(Bound { rate, from }),
            (None, BoundFrom::Contract) => None,
            (None, _) => Some(Bound {
                rate: DEFAULT_MAX_UNDETECTED_FAILURE_RATE,
                from: BoundFrom::Default,
            }),
        }
    }

    /// The orchestrator contract's reading: these bounds, and no failure rate required
    /// unless one was asked.
    pub fn contract(self) -> Required {
        Required {
            failure_rate_from: match self.max_undetected_failure_rate {
                Some(_) => self.failure_rate_from,
                None => BoundFrom::Contract,
            },
            ..self
        }
    }

    /// The drift from a reference the evidence must rule out, when one is asked for.
    pub fn drift_bound(&self) -> Option<Bound> {
        self.max_undetected_drift.map(|rate| Bound {
            rate,
            from: self.drift_from,
        })
    }
}

/// What a project's settings (`conform.toml`) require of every permit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProjectBounds {
    /// `[evidence] max_undetected_failure_rate`, when the project sets one.
    pub max_undetected_failure_rate: Option<f64>,
    /// `[evidence] max_undetected_drift`, when the project sets one.
    pub max_undetected_drift: Option<f64>,
    /// How long after its first call evidence may permit (30 days unless the project says otherwise).
    pub max_valid_for: std::time::Duration,
}

impl Allowlist {
    /// The decision for one (suite, provider) at one instant, holding the evidence to
    /// `observed`. Checked in this order: an entry exists (else `revoked` when a run
    /// revoked it, `no_entry` otherwise); no later revocation; no later statement seen;
    /// the signature; not simulated; not expired; the suite and provider digests; the
    /// served model and fingerprint.
    pub fn decide(
        &self,
        suite: &str,
        provider: &str,
        at: OffsetDateTime,
        observed: &Observed<'_>,
    ) -> Result<Permit, Denial> {
        self.decide_with(suite, provider, at, observed, &Required::default())
    }

    /// [`Allowlist::decide`], also holding the evidence to `required`.
    pub fn decide_with(
        &self,
        suite: &str,
        provider: &str,
        at: OffsetDateTime,
        observed: &Observed<'_>,
        required: &Required,
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
                _ => not_superseded(entry, observed.seen)
                    .and_then(|()| check_entry(entry, at, observed, required))
                    .and_then(|()| check_required(entry, observed, required)),
            };
            match checked {
                Ok(()) => {
                    return Ok(Permit {
                        entry: entry.clone(),
                        failure_bound: required.failure_bound(),
                        drift_bound: required.drift_bound(),
                    });
                }
                Err(denial) => {
                    first.get_or_insert(denial);
                }
            }
        }
        Err(first.unwrap_or_else(|| Denial::new(Reason::NoEntry, "no usable entry")))
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

/// An entry made before the newest statement the caller has seen about its pair is
/// superseded; one whose time does not parse is, once anything was seen.
pub(crate) fn not_superseded(entry: &Entry, seen: Option<OffsetDateTime>) -> Result<(), Denial> {
    let Some(seen) = seen else { return Ok(()) };
    let made = OffsetDateTime::parse(&entry.generated_at, &Rfc3339);
    if made.is_ok_and(|made| made >= seen) {
        return Ok(());
    }
    let seen = seen.format(&Rfc3339).unwrap_or_default();
    Err(Denial::new(
        Reason::Superseded,
        format!(
            "the entry was made at {} (run {}), before a statement about this provider and suite \
             already seen, made at {seen}: an older allowlist was put back in place of a newer one",
            entry.generated_at, entry.evidence.run_id
        ),
    )
    .about(entry))
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

/// The caller's bounds against the evidence: enough repeats and calls for the failure rate
/// asked to be ruled out, and the latency percentiles (each within the recorded relative
/// error: a percentile within it of the bound counts as above it).
fn check_required(
    entry: &Entry,
    observed: &Observed<'_>,
    required: &Required,
) -> Result<(), Denial> {
    // The contract's reading of a bare entry holds it to nothing but its time.
    if entry.contract_only {
        return Ok(());
    }
    check_evidence(entry, observed, required)?;
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

/// The evidence is enough for what is asked: the suite's repeats, and the failure rate the
/// caller needs ruled out, recomputed from the counts rather than read from the file.
fn check_evidence(
    entry: &Entry,
    observed: &Observed<'_>,
    required: &Required,
) -> Result<(), Denial> {
    let deny = |detail: String| Err(Denial::new(Reason::InsufficientEvidence, detail).about(entry));
    let evidence = &entry.evidence;
    if let Some(repeats) = observed.suite_repeats
        && evidence.repeats < repeats
    {
        return deny(format!(
            "the suite asks for {repeats} repeats of each case; the evidence (run {}) made {}",
            evidence.run_id, evidence.repeats
        ));
    }
    let rules_out = RulesOut::of(evidence.calls, evidence.passed);
    if let Some(bound) = required.failure_bound()
        && rules_out.failure_rate_above > bound.rate
    {
        return deny(format!(
            "{} passed of {} calls rule out only {}; a permit must rule out a failure rate above {}: add cases or repeats and run again",
            evidence.passed,
            evidence.calls,
            rules_out.words(),
            bound.words()
        ));
    }
    if let (Some(bound), Some(d)) = (required.drift_bound(), &evidence.differential) {
        let shown = d.drift_rules_out();
        let short = shown.as_ref().is_none_or(|r| r.drift_above > bound.rate);
        if short {
            return deny(format!(
                "the comparison with {} rules out only {}; a permit must rule out a drift above {}: add cases or repeats and run again",
                d.reference,
                match &shown {
                    Some(r) => r.words(&d.reference),
                    None => "no drift (no field passed)".to_string(),
                },
                bound.words()
            ));
        }
    }
    Ok(())
}

/// How far a time written by another machine may run ahead of this one's clock.
pub const CLOCK_SKEW: time::Duration = time::Duration::minutes(5);

/// When a window is asked for (always, against a project), the entry says when its first
/// call was and is valid for at most `max_valid_for` after it. The contract's reading of
/// the file (no project) holds an entry to its `valid_until` alone.
fn check_window(
    entry: &Entry,
    at: OffsetDateTime,
    until: OffsetDateTime,
    required: &Required,
) -> Result<(), Denial> {
    let Some(max) = required.max_valid_for else {
        return Ok(());
    };
    let deny = |detail: String| Err(Denial::new(Reason::ValidityTooLong, detail).about(entry));
    let first = entry
        .evidence
        .first_call_at
        .as_deref()
        .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok());
    let Some(first) = first else {
        return deny(
            "the entry does not say when the first call of its evidence was made (evidence.first_call_at): run again".into(),
        );
    };
    if first > at + CLOCK_SKEW {
        return deny(format!(
            "the evidence's first call is dated {}, later than now: no call is made in the future",
            entry.evidence.first_call_at.as_deref().unwrap_or_default()
        ));
    }
    if until - first > max {
        return deny(format!(
            "valid_until {} is {} after the evidence's first call ({}); at most {} is allowed (conform.toml [evidence] max_valid_for)",
            entry.valid_until,
            humantime::format_duration(std::time::Duration::from_secs(
                (until - first).whole_seconds().max(0) as u64
            )),
            entry.evidence.first_call_at.as_deref().unwrap_or_default(),
            humantime::format_duration(max)
        ));
    }
    Ok(())
}

/// How the evidence is not for the suite, provider or reference as they are now: the
/// detail of a denial.
#[derive(Debug, thiserror::Error)]
enum Mismatch {
    /// The entry records no `what` to compare with.
    #[error(
        "the entry records no {what}, so it cannot be shown to be for the {called} as it is now"
    )]
    NotPinned { what: String, called: &'static str },
    #[error("the {name} changed since the evidence was made: {}", .changes.join("; "))]
    Changed {
        name: &'static str,
        changes: Vec<String>,
    },
    #[error("the {called} is now {now}; the evidence was made with {then}")]
    Digest {
        called: &'static str,
        now: String,
        then: String,
    },
    #[error(
        "the entry's {name}_digest is not the digest of its {name}_identity: the entry was edited"
    )]
    Edited { name: &'static str },
    #[error("the evidence judged the provider against `{reference}`, and {source}")]
    ReferenceGone {
        reference: String,
        source: ReferenceError,
    },
    #[error(
        "the entry records no identity of its reference `{0}`, so it cannot be shown to be judged against the reference as it is now: run again"
    )]
    ReferenceUnpinned(String),
    #[error("judged against `{reference}`: {detail}")]
    Reference {
        reference: String,
        detail: Box<Mismatch>,
    },
}

/// What an entry pins, for [`same_pinned`]: a suite's files or a provider's settings.
trait Pinned: PartialEq {
    fn digest(&self) -> String;
    fn changes_since(&self, then: &Self) -> Vec<String>;
}

impl Pinned for SuiteIdentity {
    fn digest(&self) -> String {
        SuiteIdentity::digest(self)
    }
    fn changes_since(&self, then: &Self) -> Vec<String> {
        SuiteIdentity::changes_since(self, then)
    }
}

impl Pinned for ProviderIdentity {
    fn digest(&self) -> String {
        ProviderIdentity::digest(self)
    }
    fn changes_since(&self, then: &Self) -> Vec<String> {
        ProviderIdentity::changes_since(self, then)
    }
}

/// One side of the evidence, as the entry pinned it and as it is observed now.
struct Pin<'a, I> {
    /// `suite` or `provider`: the entry's members are `{name}_digest`, `{name}_identity`.
    name: &'static str,
    /// What it is called in a sentence: `suite`, `provider configuration`.
    called: &'static str,
    /// What its identity is made of, for an entry that records none.
    made_of: &'static str,
    then_digest: &'a str,
    then: Option<&'a I>,
    now_digest: Option<&'a str>,
    now: Option<&'a I>,
}

/// The suite the evidence was made with is the suite as it is now, and likewise the
/// provider: the detail names what changed when the entry records it (files, settings
/// with both values), the two digests otherwise.
fn same_suite(entry: &Entry, observed: &Observed<'_>) -> Result<(), Mismatch> {
    let pin = Pin {
        name: "suite",
        called: "suite",
        made_of: "the suite's files",
        then_digest: &entry.suite_digest,
        then: entry.suite_identity.as_ref(),
        now_digest: observed.suite_digest,
        now: observed.suite_identity,
    };
    same_pinned(&pin, entry.contract_only)
}

fn same_provider(entry: &Entry, observed: &Observed<'_>) -> Result<(), Mismatch> {
    let pin = Pin {
        name: "provider",
        called: "provider configuration",
        made_of: "its settings",
        then_digest: &entry.provider_digest,
        then: entry.provider_identity.as_ref(),
        now_digest: observed.provider_digest,
        now: observed.provider_identity,
    };
    same_pinned(&pin, entry.contract_only)
}

/// An entry judged against a live reference holds that reference to its file as it is
/// now, as the provider is held to its own: another primary makes it another comparison.
fn same_reference(entry: &Entry, observed: &Observed<'_>) -> Result<(), Mismatch> {
    let (Some(references), Some(d)) = (observed.references, &entry.evidence.differential) else {
        return Ok(());
    };
    // Recorded answers live in the cases, which the suite's digest pins.
    if d.reference == RECORDED_REFERENCE {
        return Ok(());
    }
    let now = references
        .identity(&d.reference)
        .map_err(|source| Mismatch::ReferenceGone {
            reference: d.reference.clone(),
            source,
        })?;
    if d.reference_digest.is_none() {
        return Err(Mismatch::ReferenceUnpinned(d.reference.clone()));
    }
    let now_digest = now.digest();
    let pin = Pin {
        name: "reference",
        called: "reference's configuration",
        made_of: "the reference's settings",
        then_digest: d.reference_digest.as_deref().unwrap_or_default(),
        then: d.reference_identity.as_ref(),
        now_digest: Some(&now_digest),
        now: Some(&now),
    };
    same_pinned(&pin, entry.contract_only).map_err(|detail| Mismatch::Reference {
        reference: d.reference.clone(),
        detail: Box::new(detail),
    })
}

/// What [`crate::format::DifferentialEvidence::reference`] says for answers recorded in
/// the cases instead of a live reference provider.
pub const RECORDED_REFERENCE: &str = "recorded";

fn same_pinned<I: Pinned>(pin: &Pin<'_, I>, contract_only: bool) -> Result<(), Mismatch> {
    let pinned = |what: String| Mismatch::NotPinned {
        what,
        called: pin.called,
    };
    let changed = |now: &I, then: &I| Mismatch::Changed {
        name: pin.name,
        changes: now.changes_since(then),
    };
    if let Some(digest) = pin.now_digest
        && digest != pin.then_digest
    {
        if contract_only {
            return Err(pinned(format!("{} digest ({digest})", pin.name)));
        }
        if let (Some(then), Some(now)) = (pin.then, pin.now)
            && then != now
        {
            return Err(changed(now, then));
        }
        return Err(Mismatch::Digest {
            called: pin.called,
            now: digest.to_string(),
            then: pin.then_digest.to_string(),
        });
    }
    if let (Some(now), false) = (pin.now, contract_only) {
        match pin.then {
            // The digest compared above pins it already.
            None if pin.now_digest.is_some() => {}
            None => {
                return Err(pinned(format!("{} identity ({})", pin.name, pin.made_of)));
            }
            Some(then) if then != now => return Err(changed(now, then)),
            Some(then) if then.digest() != pin.then_digest => {
                return Err(Mismatch::Edited { name: pin.name });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn check_entry(
    entry: &Entry,
    at: OffsetDateTime,
    observed: &Observed<'_>,
    required: &Required,
) -> Result<(), Denial> {
    let deny = |reason, detail: String| Err(Denial::new(reason, detail).about(entry));
    if let Some(trust) = observed.trust {
        let listed = trust.path.display();
        match crate::attest::verify(entry, trust) {
            Ok(_) => {}
            Err(Unverified::Unsigned) => {
                return deny(
                    Reason::Unsigned,
                    format!(
                        "the entry is not signed, and {listed} requires a signature by a key it lists"
                    ),
                );
            }
            Err(Unverified::SignatureInvalid(why)) => {
                return deny(
                    Reason::SignatureInvalid,
                    format!("the entry's signature does not hold: {why}"),
                );
            }
            Err(Unverified::UntrustedKey(id)) => {
                return deny(
                    Reason::UntrustedKey,
                    format!("the entry is signed by key {id}, which {listed} does not list"),
                );
            }
        }
    }
    if entry.simulated || observed.simulated {
        return deny(
            Reason::Simulated,
            format!(
                "`{}` is a simulated provider: evidence from `conform demo` never permits a real failover",
                entry.provider
            ),
        );
    }
    let until = match OffsetDateTime::parse(&entry.valid_until, &Rfc3339) {
        Ok(until) if at < until => until,
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
    };
    if let Err(detail) = same_suite(entry, observed) {
        return deny(Reason::SuiteChanged, detail.to_string());
    }
    if let Err(detail) = same_provider(entry, observed) {
        return deny(Reason::ProviderChanged, detail.to_string());
    }
    if let Err(detail) = same_reference(entry, observed) {
        return deny(Reason::ReferenceChanged, detail.to_string());
    }
    if !entry.contract_only {
        check_window(entry, at, until, required)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{DifferentialEvidence, FieldEvidence};
    use time::macros::datetime;

    const AT: OffsetDateTime = datetime!(2026-01-02 12:00 UTC);

    fn list(calls: u64, differential: Option<DifferentialEvidence>) -> Allowlist {
        let text = format!(
            r#"{{"format": "conform.allowlist/v1", "entries": [{{"suite": "s", "provider": "p",
            "model": "m", "served_models": [], "system_fingerprints": [],
            "suite_digest": "sha256:aa", "provider_digest": "sha256:bb", "tokenizer": "none",
            "evidence": {{"run_id": "r1", "report": "x", "conform_version": "0", "cases": {calls},
            "repeats": 1, "calls": {calls}, "passed": {calls}, "pass_rate": 1.0,
            "first_attempt_pass_rate": 1.0, "checks": {{}}}},
            "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}}]}}"#
        );
        let mut list = Allowlist::parse(text.as_bytes()).unwrap();
        list.entries[0].evidence.differential = differential;
        list
    }

    fn decide(
        list: &Allowlist,
        observed: &Observed<'_>,
        required: &Required,
    ) -> Result<(), Reason> {
        list.decide_with("s", "p", AT, observed, required)
            .map(|_| ())
            .map_err(|d| d.reason)
    }

    #[test]
    fn a_permit_rules_out_ten_percent_unless_someone_says_otherwise() {
        let none = Observed::default();
        let asked = |rate| Required {
            max_undetected_failure_rate: Some(rate),
            ..Required::default()
        };
        // 28 calls rule out 10.1 %, 29 calls 9.8 %.
        assert_eq!(
            decide(&list(28, None), &none, &Required::default()),
            Err(Reason::InsufficientEvidence)
        );
        assert_eq!(decide(&list(29, None), &none, &Required::default()), Ok(()));
        // An explicit bound applies, stricter or not.
        assert_eq!(decide(&list(28, None), &none, &asked(0.2)), Ok(()));
        assert_eq!(
            decide(&list(29, None), &none, &asked(0.05)),
            Err(Reason::InsufficientEvidence)
        );
        // The contract's reading holds an entry to its time alone.
        assert_eq!(
            decide(&list(1, None), &none, &Required::default().contract()),
            Ok(())
        );
        // Who set the bound is what the permit says.
        let project = Required::default().or_defaults(ProjectBounds {
            max_undetected_failure_rate: Some(0.2),
            max_undetected_drift: None,
            max_valid_for: std::time::Duration::from_secs(30 * 86_400),
        });
        assert_eq!(
            project.failure_bound().map(|b| b.from),
            Some(BoundFrom::Project)
        );
        assert_eq!(
            Required::default()
                .failure_bound()
                .map(|b| (b.rate, b.from)),
            Some((DEFAULT_MAX_UNDETECTED_FAILURE_RATE, BoundFrom::Default))
        );
        assert_eq!(
            asked(0.3)
                .or_defaults(ProjectBounds {
                    max_undetected_failure_rate: Some(0.2),
                    max_undetected_drift: None,
                    max_valid_for: std::time::Duration::from_secs(86_400),
                })
                .failure_bound()
                .map(|b| b.from),
            Some(BoundFrom::Caller)
        );
    }

    fn compared(agreeing: u64) -> DifferentialEvidence {
        DifferentialEvidence {
            reference: "claude".into(),
            margin: 0.1,
            confidence: 0.95,
            cases: 60,
            fields: vec![FieldEvidence {
                field: "answer".into(),
                reference_agreement: Some(1.0),
                candidate_agreement: Some(agreeing as f64 / 120.0),
                reference_pairs: 120,
                candidate_pairs: 120,
                verdict: "pass".into(),
            }],
            ..DifferentialEvidence::default()
        }
    }

    #[test]
    fn a_comparison_is_held_to_the_drift_asked_for() {
        let drift = |rate| Required {
            max_undetected_drift: Some(rate),
            ..Required::default()
        };
        let none = Observed::default();
        // 111 of 120 pairs rule out a drift above 11.7 % only.
        let loose = list(60, Some(compared(111)));
        assert_eq!(decide(&loose, &none, &Required::default()), Ok(()));
        assert_eq!(decide(&loose, &none, &drift(0.12)), Ok(()));
        assert_eq!(
            decide(&loose, &none, &drift(0.05)),
            Err(Reason::InsufficientEvidence)
        );
        // 120 of 120 rule out 1.9 %.
        assert_eq!(
            decide(&list(60, Some(compared(120))), &none, &drift(0.05)),
            Ok(())
        );
        let shown = loose.entries[0]
            .evidence
            .differential
            .as_ref()
            .unwrap()
            .drift_rules_out();
        assert_eq!(shown.map(|r| r.drift_above), Some(0.1168));
    }

    #[derive(Debug)]
    struct Project(ProviderIdentity);

    impl References for Project {
        fn identity(&self, name: &str) -> Result<ProviderIdentity, ReferenceError> {
            match name {
                "claude" => Ok(self.0.clone()),
                _ => Err(ReferenceError::Unreadable(format!("no provider `{name}`"))),
            }
        }
    }

    #[test]
    fn a_changed_reference_denies_the_candidate_naming_the_field() {
        let then = ProviderIdentity([("model".to_string(), serde_json::json!("c-1"))].into());
        let mut pinned = compared(120);
        pinned.reference_digest = Some(then.digest());
        pinned.reference_identity = Some(then.clone());
        let entry = list(60, Some(pinned));
        let same = Project(then.clone());
        let looking_at = |refs: &Project| {
            decide(
                &entry,
                &Observed {
                    references: Some(refs),
                    ..Observed::default()
                },
                &Required::default(),
            )
        };
        assert_eq!(looking_at(&same), Ok(()));
        let now = ProviderIdentity([("model".to_string(), serde_json::json!("c-2"))].into());
        let changed = Project(now);
        assert_eq!(looking_at(&changed), Err(Reason::ReferenceChanged));
        let denial = entry
            .decide_with(
                "s",
                "p",
                AT,
                &Observed {
                    references: Some(&changed),
                    ..Observed::default()
                },
                &Required::default(),
            )
            .unwrap_err();
        assert!(
            denial.detail.contains("model: c-1 then, c-2 now"),
            "{}",
            denial.detail
        );
        // An entry that pinned no reference cannot be shown to be about this one.
        let unpinned = list(60, Some(compared(120)));
        assert_eq!(
            decide(
                &unpinned,
                &Observed {
                    references: Some(&same),
                    ..Observed::default()
                },
                &Required::default()
            ),
            Err(Reason::ReferenceChanged)
        );
        // Without the project's providers to look at, nothing is held to them.
        assert_eq!(
            decide(&unpinned, &Observed::default(), &Required::default()),
            Ok(())
        );
    }
}
