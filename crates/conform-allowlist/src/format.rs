//! `conform.allowlist/v1`: the file's shape, and its published JSON Schema ([`SCHEMA`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::identity::{ProviderIdentity, SuiteIdentity};
use crate::latency::Percentiles;

/// The value of the file's `format` field. A reader that sees another value denies everything.
pub const FORMAT: &str = "conform.allowlist/v1";

/// The JSON Schema (draft 2020-12) of [`FORMAT`], as shipped in
/// `schemas/allowlist.v1.schema.json` and printed by `conform allowlist schema`.
pub const SCHEMA: &str = include_str!("../../../schemas/allowlist.v1.schema.json");

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allowlist {
    /// Always [`FORMAT`]: any other value denies everything.
    pub format: String,
    /// Kept sorted by (suite, provider), so the file diffs cleanly.
    pub entries: Vec<Entry>,
    /// Why entries were removed, for `conform allowlist explain`.
    #[serde(default)]
    pub revocations: Vec<Revocation>,
    /// Entries in the file that did not have the v1 shape: they permit nothing, and the
    /// next update drops them. Never written.
    #[serde(skip)]
    pub malformed: usize,
}

impl Default for Allowlist {
    fn default() -> Self {
        Allowlist {
            format: FORMAT.to_string(),
            entries: Vec::new(),
            revocations: Vec::new(),
            malformed: 0,
        }
    }
}

impl Allowlist {
    /// The entry for (`suite`, `provider`), valid or not.
    pub fn entry(&self, suite: &str, provider: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.suite == suite && e.provider == provider)
    }

    /// The revocation recorded for (`suite`, `provider`), if any.
    pub fn revocation(&self, suite: &str, provider: &str) -> Option<&Revocation> {
        self.revocations
            .iter()
            .find(|r| r.suite == suite && r.provider == provider)
    }
}

/// Failover to `provider` for `suite` is permitted until `valid_until`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The suite the evidence was made with, by name.
    pub suite: String,
    /// The fallback provider, by its file's name.
    pub provider: String,
    /// The model the provider file names.
    pub model: String,
    /// Every model name the responses reported.
    pub served_models: Vec<String>,
    /// Every `system_fingerprint` the responses reported, where the provider gives one.
    pub system_fingerprints: Vec<String>,
    /// Templates, schema, rules and cases: the digest of `suite_identity`.
    pub suite_digest: String,
    /// The provider configuration, never a secret: the digest of `provider_identity`.
    pub provider_digest: String,
    /// The suite as its files when the evidence was made, so that a reader names the
    /// file that changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite_identity: Option<SuiteIdentity>,
    /// The provider's identity when the evidence was made: every field that shapes what
    /// is sent and how the answers are read, the endpoint included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_identity: Option<ProviderIdentity>,
    /// `tiktoken:o200k_base`, `huggingface:sha256:<digest of tokenizer.json>`, or `none`.
    pub tokenizer: String,
    /// The run the entry rests on and what it showed.
    pub evidence: Evidence,
    /// RFC 3339, UTC.
    pub generated_at: String,
    /// RFC 3339, UTC. After this instant the entry permits nothing.
    pub valid_until: String,
    /// The evidence came from a simulated provider (`conform demo`): it demonstrates the
    /// pipeline and never permits a real failover. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
    /// The file held only the members the orchestrator contract requires (`suite`,
    /// `provider`, `valid_until`): no digests and no evidence to hold against what a
    /// caller observes. Never written: the next update drops such entries.
    #[serde(skip)]
    pub contract_only: bool,
    /// The entry signed by the CI that made it: a DSSE envelope whose in-toto Statement
    /// has the suite and provider digests as subjects and every other member of the entry
    /// as its predicate (docs/signing.md). Where the project has a `trust.toml`, an entry
    /// without a valid signature by a listed key permits nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::sign::Envelope>,
}

/// What the entry rests on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The run that made the evidence.
    pub run_id: String,
    /// The run's `report.json`.
    pub report: String,
    /// The conform that made the run.
    pub conform_version: String,
    /// RFC 3339, UTC: when the first call of the evidence was made. An entry is valid
    /// for at most the project's `max_valid_for` after it, however it was merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_call_at: Option<String>,
    /// Cases sent.
    pub cases: u64,
    /// How many times each case was sent.
    pub repeats: u32,
    /// `cases × repeats`.
    pub calls: u64,
    /// Calls that passed every check.
    pub passed: u64,
    /// `passed / calls`, counting calls that passed after transport retries.
    pub pass_rate: f64,
    /// Calls that passed on their first request, over `calls`.
    pub first_attempt_pass_rate: f64,
    /// Passes and failures per check.
    pub checks: BTreeMap<String, CheckCount>,
    /// What the calls rule out, for people: readers recompute it from `calls` and
    /// `passed` ([`RulesOut::of`]) rather than trust it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_out: Option<RulesOut>,
    /// The calls' latency percentiles; absent in entries written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyEvidence>,
    /// Tool-calling measures, when the suite's requests declare tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolEvidence>,
    /// The candidate against the primary, when the suite has a reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differential: Option<DifferentialEvidence>,
}

/// The failure rate the evidence excludes: with `failures` of `calls` failing, a provider
/// that fails more often than `failure_rate_above` would have shown more failures, with
/// probability `confidence` ([`crate::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RulesOut {
    /// The probability the bound holds.
    pub confidence: f64,
    /// The failure rate ruled out, from 0 to 1.
    pub failure_rate_above: f64,
}

impl RulesOut {
    /// What `passed` of `calls` rule out at [`crate::stats::CONFIDENCE`].
    pub fn of(calls: u64, passed: u64) -> RulesOut {
        let confidence = crate::stats::CONFIDENCE;
        let bound =
            crate::stats::failure_rate_upper_bound(calls.saturating_sub(passed), calls, confidence);
        RulesOut {
            confidence,
            // Rounded up, so the file never claims more than the calls showed.
            failure_rate_above: (bound * 10_000.0).ceil() / 10_000.0,
        }
    }

    /// `a failure rate above 3.0 % (95 % confidence)`.
    pub fn words(&self) -> String {
        format!(
            "a failure rate above {:.1} % ({:.0} % confidence)",
            self.failure_rate_above * 100.0,
            self.confidence * 100.0
        )
    }
}

/// Latency percentiles of the calls behind an entry, in milliseconds, each within
/// `relative_error` of the exact value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyEvidence {
    /// Calls that got an answer, and were timed.
    pub calls: u64,
    /// How far from the exact percentile each may be, as a share of it.
    pub relative_error: f64,
    /// First byte sent to last byte read.
    pub total_ms: Percentiles,
    /// First byte sent to the first piece of the answer.
    pub first_token_ms: Percentiles,
}

impl LatencyEvidence {
    /// `p50 / p95 / p99` in words, e.g. `0.81 s / 2.10 s / 3.02 s`.
    pub fn words(p: &Percentiles) -> String {
        use crate::latency::words;
        format!("{} / {} / {}", words(p.p50), words(p.p95), words(p.p99))
    }
}

/// K2 Vendor Verifier's measures of the run, as the entry keeps them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolEvidence {
    /// Answers to requests that declare tools.
    pub answers: u64,
    /// Tool calls made.
    pub calls: u64,
    /// Turns that should have called a tool and did, over turns that called one.
    pub trigger_precision: Option<f64>,
    /// Turns that called a tool, over turns that should have.
    pub trigger_recall: Option<f64>,
    /// The harmonic mean of `trigger_precision` and `trigger_recall`.
    pub trigger_f1: Option<f64>,
    /// Tool calls whose arguments are valid against the tool's schema, over tool calls made.
    pub schema_accuracy: Option<f64>,
    /// With repeats: the Wilson lower bounds the thresholds were held to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bounds: Option<Bounds>,
}

/// The tool measures' Wilson lower bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// The probability each lower bound holds.
    pub confidence: f64,
    /// The lower bound of [`ToolEvidence::trigger_precision`].
    pub trigger_precision: Option<f64>,
    /// The lower bound of [`ToolEvidence::trigger_recall`].
    pub trigger_recall: Option<f64>,
    /// The lower bound of [`ToolEvidence::trigger_f1`].
    pub trigger_f1: Option<f64>,
    /// The lower bound of [`ToolEvidence::schema_accuracy`].
    pub schema_accuracy: Option<f64>,
}

/// Differential conformance as the entry keeps it: per compared field, the reference's
/// agreement with itself and the candidate's with the reference, and the reference the
/// candidate was judged against, pinned as the candidate is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DifferentialEvidence {
    /// The reference provider, or `recorded`.
    pub reference: String,
    /// The reference provider's identity when it answered (a live reference): a reader
    /// holds it to the reference's file as it is now, as it holds the candidate
    /// (`reference_changed`). A recorded reference is in the cases, pinned with the suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_identity: Option<ProviderIdentity>,
    /// The digest of `reference_identity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_digest: Option<String>,
    /// The run whose answers of the reference the candidate was compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_run: Option<String>,
    /// How much less the candidate may agree with the reference than the reference with itself.
    pub margin: f64,
    /// The confidence the comparison was held to.
    pub confidence: f64,
    /// Cases compared.
    pub cases: u64,
    /// Each compared field, in the suite's order.
    pub fields: Vec<FieldEvidence>,
    /// What the comparison rules out, for people: readers recompute it from the fields
    /// ([`DifferentialEvidence::drift_rules_out`]) rather than trust it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_rules_out: Option<DriftRulesOut>,
}

/// One compared field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FieldEvidence {
    /// The JSON pointer of the field in the answer.
    pub field: String,
    /// How often the reference agreed with itself on this field.
    pub reference_agreement: Option<f64>,
    /// How often the candidate agreed with the reference on this field.
    pub candidate_agreement: Option<f64>,
    /// The reference's pairs of answers compared with each other.
    pub reference_pairs: u64,
    /// The candidate's answers paired with the reference's.
    pub candidate_pairs: u64,
    /// `pass`, `fail`, `no_floor`, `not_compared`, `insufficient` or `uninformative`.
    pub verdict: String,
}

impl FieldEvidence {
    /// The largest excess disagreement over the reference's floor this field's pairs
    /// cannot rule out ([`crate::stats::drift_upper_bound`]), recomputed from its counts.
    pub fn drift_upper_bound(&self, confidence: f64) -> Option<f64> {
        let agreeing = |rate: Option<f64>, pairs: u64| {
            // The rates are agreeing / pairs, as written: the count comes back exact.
            (rate.unwrap_or(0.0) * pairs as f64)
                .round()
                .clamp(0.0, pairs as f64) as u64
        };
        crate::stats::drift_upper_bound(
            (
                agreeing(self.candidate_agreement, self.candidate_pairs),
                self.candidate_pairs,
            ),
            (
                agreeing(self.reference_agreement, self.reference_pairs),
                self.reference_pairs,
            ),
            confidence,
        )
    }
}

/// The power of a comparison with a reference: the largest excess disagreement with the
/// reference, over the reference's disagreement with itself, that it cannot rule out at
/// `confidence`, and on which field. A candidate drifting further would have been found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftRulesOut {
    /// The probability the bound holds.
    pub confidence: f64,
    /// The field whose pairs rule out least.
    pub field: String,
    /// The excess disagreement ruled out, from 0 to 1.
    pub drift_above: f64,
}

impl DriftRulesOut {
    /// `a drift above 11.7 % from claude on /label (95 % confidence)`.
    pub fn words(&self, reference: &str) -> String {
        format!(
            "a drift above {:.1} % from {reference} on {} ({:.0} % confidence)",
            self.drift_above * 100.0,
            self.field,
            self.confidence * 100.0
        )
    }
}

impl DifferentialEvidence {
    /// What the comparison rules out, recomputed from its fields: the weakest bound of
    /// the fields that decided it (`pass`), rounded up so the file never claims more than
    /// the pairs showed. `None` when no field passed.
    pub fn drift_rules_out(&self) -> Option<DriftRulesOut> {
        self.fields
            .iter()
            .filter(|f| f.verdict == "pass")
            .filter_map(|f| Some((f, f.drift_upper_bound(self.confidence)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(f, bound)| DriftRulesOut {
                confidence: self.confidence,
                field: f.field.clone(),
                drift_above: (bound * 10_000.0).ceil() / 10_000.0,
            })
    }
}

/// Pass and fail counts of one check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckCount {
    /// Calls this check passed.
    pub passed: u64,
    /// Calls this check failed.
    pub failed: u64,
}

/// A removed (or never granted) entry and why: the last conclusive run failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revocation {
    /// The suite the revoked entry was for.
    pub suite: String,
    /// The provider the revoked entry was for.
    pub provider: String,
    /// The run that failed.
    pub run_id: String,
    /// RFC 3339, UTC: when the run that revoked it finished. An entry made before it
    /// permits nothing.
    pub at: String,
    /// The finding codes that failed the run.
    pub reasons: Vec<String>,
    /// The failing run's `report.json`.
    pub report: String,
    /// The suite the failing run was made with: the digest of its `suite_identity`.
    /// Absent in revocations written before they were signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite_digest: Option<String>,
    /// The provider configuration the failing run was made with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_digest: Option<String>,
    /// The revocation signed by the CI that made it, as an entry is (docs/signing.md).
    /// A revocation denies whether signed or not; only a signed one (where the reader
    /// trusts keys) tells a reader that every older statement about the pair is
    /// superseded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::sign::Envelope>,
}
