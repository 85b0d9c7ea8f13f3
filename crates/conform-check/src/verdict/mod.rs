//! Verdicts per (suite, provider), tallied from the streamed call records.
//!
//! Invariants: a call that failed after its retries counts as a failure, never as a
//! skipped case; a provider that could not be reached, authenticated or configured, or
//! that hit an account limit (a quota, a request over the organisation's tokens per
//! minute), an interrupted run, or too many transport errors make the verdict
//! inconclusive, and an inconclusive verdict never touches the allowlist.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::check::differential::Differential;
use crate::check::record::CallRecord;
use crate::check::stability::{Shortfall, Stability};
use crate::check::tool_metrics::ToolMetrics;
use crate::check::{Code, Status};
use crate::latency::{self, Histogram};
use conform_config::Slo;
use conform_config::pricing::PairCost;
use conform_config::simulation::ExpectedVerdict;
use conform_wire::provider::{CallError, Effect};

mod reason;

pub use reason::Reason;

/// The verdict on one provider for one suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It kept the contract: failover to it may be allowlisted.
    Conformant,
    /// It broke the contract: its allowlist entry is revoked.
    Nonconformant,
    /// The evidence is incomplete: the allowlist is left as it was.
    Inconclusive,
}

impl From<ExpectedVerdict> for Verdict {
    fn from(expected: ExpectedVerdict) -> Verdict {
        match expected {
            ExpectedVerdict::Conformant => Verdict::Conformant,
            ExpectedVerdict::Nonconformant => Verdict::Nonconformant,
            ExpectedVerdict::Inconclusive => Verdict::Inconclusive,
        }
    }
}

impl Verdict {
    /// The verdict as reports and the allowlist write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Conformant => "conformant",
            Verdict::Nonconformant => "nonconformant",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// Pass and fail counts of one check, as an allowlist entry keeps them.
pub use conform_allowlist::CheckCount;

/// A failure kept to explain the verdict in plain words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Example {
    /// The case, by id.
    pub case: String,
    /// Which send of the case, from 0.
    pub repeat: u32,
    /// The check that failed.
    pub check: String,
    /// The finding's code.
    pub code: Code,
    /// The finding, for people.
    pub message: String,
    /// Where in the answer, as a JSON pointer, when the finding has a place.
    pub path: Option<String>,
    /// The start of what came back.
    pub output: Option<String>,
}

const MAX_EXAMPLES: usize = 3;
const MAX_SEEN: usize = 32;

/// Everything counted for one (suite, provider). Its size does not depend on the
/// number of calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    /// The suite, by name.
    pub suite: String,
    /// The provider, by name.
    pub provider: String,
    /// Calls the plan holds for this pair.
    pub planned: u64,
    /// Calls that passed every check.
    pub passed: u64,
    /// Calls that failed a check or got no answer.
    pub failed: u64,
    /// Calls not sent because the provider had been stopped.
    pub not_run: u64,
    /// Calls not sent because the verdict was decided before them ([`Tally::decided`]).
    pub saved: u64,
    /// What decided the verdict before every planned call was sent, when something did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided: Option<Decision>,
    /// Failed calls whose failure says nothing about the provider's answers, after
    /// retries ([`Effect::Transport`]): the rest of the failed calls are its own.
    pub transport_errors: u64,
    /// The kinds of those failures, for the reasons of a verdict they leave open.
    #[serde(skip)]
    pub transport_kinds: BTreeSet<conform_wire::provider::ErrorKind>,
    /// Failed calls that are the provider's own ([`Tally::own_failures`]).
    #[serde(skip)]
    pub own_failed: u64,
    /// Of those, the calls still answered 429 after their retries: never the provider's
    /// conformance failure.
    #[serde(skip_serializing_if = "is_zero")]
    pub rate_limited: u64,
    /// Calls that passed on their first request.
    pub passed_first_attempt: u64,
    /// Transport retries, over every call.
    pub retries: u64,
    /// Passes and failures per check.
    pub checks: BTreeMap<String, CheckCount>,
    /// How often each finding code occurred.
    pub codes: BTreeMap<Code, u64>,
    /// Every model name the answers reported: more than one is a model swapped mid-run.
    pub served_models: BTreeSet<String>,
    /// Every `system_fingerprint` the answers reported.
    pub system_fingerprints: BTreeSet<String>,
    /// Set when a call's error stopped the provider: `(code, message)`.
    pub halted: Option<(Code, String)>,
    /// A call failed because of the configuration, not the provider: the verdict says nothing of it.
    pub config_error: bool,
    /// A few failures, to explain the verdict in plain words.
    pub examples: Vec<Example>,
    /// How the repeats of each case agree, when the suite repeats or demands it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stability: Option<Stability>,
    /// The latencies of the calls that got an answer.
    pub latency: Latencies,
    /// The latency objectives of the provider and the suite together, which the verdict
    /// holds the latencies to.
    #[serde(skip_serializing_if = "Slo::is_empty")]
    pub slo: Slo,
    /// Tool-calling measures, when the suite's requests declare tools or it sets
    /// `[tool_calls]` thresholds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolMetrics>,
    /// What the calls cost by their usage, beside the plan's estimate, when the provider
    /// file has `[pricing]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<PairCost>,
    /// The candidate against the reference, when the suite has one (live or recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differential: Option<Differential>,
}

/// Latency percentiles of one (suite, provider), from histograms of bounded size.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latencies {
    /// First byte sent to last byte read.
    pub total: Histogram,
    /// First byte sent to the first piece of the answer.
    pub first_token: Histogram,
}

impl Latencies {
    /// What an allowlist entry keeps of them; `None` when no call was timed.
    pub fn evidence(&self) -> Option<conform_allowlist::LatencyEvidence> {
        let round = |p: latency::Percentiles| {
            let r = |v: f64| (v * 10.0).round() / 10.0;
            latency::Percentiles {
                p50: r(p.p50),
                p95: r(p.p95),
                p99: r(p.p99),
            }
        };
        Some(conform_allowlist::LatencyEvidence {
            calls: self.total.count(),
            relative_error: latency::RELATIVE_ERROR,
            total_ms: round(self.total.percentiles()?),
            first_token_ms: round(self.first_token.percentiles()?),
        })
    }
}

impl Tally {
    /// An empty tally for a pair that plans `planned` calls.
    pub fn new(suite: &str, provider: &str, planned: u64) -> Self {
        Tally {
            suite: suite.to_string(),
            provider: provider.to_string(),
            planned,
            ..Tally::default()
        }
    }

    /// Counts one call's record.
    pub fn add(&mut self, record: &CallRecord) {
        if record.saved {
            self.saved += 1;
            return;
        }
        if let Some(stability) = &mut self.stability {
            stability.add(record);
        }
        if record.not_run.is_some() {
            self.not_run += 1;
            return;
        }
        if let Some(cost) = &mut self.cost {
            cost.add(record.usage.prompt_tokens, record.usage.output_tokens);
        }
        self.retries += u64::from(record.retries);
        // A call was timed when its first byte was: a replayed answer was not sent at all.
        // The percentiles are of answers: a failed call's time (a cut stream's, say) stays
        // in its record.
        if record.ttfb_ms.is_some() && record.error.is_none() {
            if let Some(ms) = record.latency_ms {
                self.latency.total.record(ms);
            }
            if let Some(ms) = record.ttft_ms {
                self.latency.first_token.record(ms);
            }
        }
        if record.passed {
            self.passed += 1;
            if record.retries == 0 {
                self.passed_first_attempt += 1;
            }
        } else {
            self.failed += 1;
            let effect = record.error.as_ref().map(|e| e.effect());
            if matches!(
                effect,
                None | Some(Effect::ConformanceFailure | Effect::ProviderFailure)
            ) {
                self.own_failed += 1;
            }
        }
        if let Some(model) = &record.served_model
            && self.served_models.len() < MAX_SEEN
        {
            self.served_models.insert(model.clone());
        }
        if let Some(fp) = &record.system_fingerprint
            && self.system_fingerprints.len() < MAX_SEEN
        {
            self.system_fingerprints.insert(fp.clone());
        }
        if let Some(error) = &record.error {
            self.add_error(error);
        }
        self.add_checks(record);
    }

    /// What a call's error counts towards.
    fn add_error(&mut self, error: &CallError) {
        if error.kind == conform_wire::provider::ErrorKind::RateLimited {
            self.rate_limited += 1;
        }
        match error.effect() {
            Effect::Transport => {
                self.transport_errors += 1;
                self.transport_kinds.insert(error.kind);
            }
            Effect::HaltProvider | Effect::ConfigError => {
                self.config_error |= error.effect() == Effect::ConfigError;
                self.halted
                    .get_or_insert_with(|| (Code::Call(error.kind), error.message.clone()));
            }
            Effect::ConformanceFailure | Effect::ProviderFailure => {}
        }
    }

    /// The outcomes of a call's checks: pass and fail counts, finding codes, examples.
    fn add_checks(&mut self, record: &CallRecord) {
        for outcome in &record.checks {
            if let Some(summary) = &outcome.tool_calls {
                self.tool_calls
                    .get_or_insert_with(ToolMetrics::default)
                    .add(summary);
            }
            let count = self.checks.entry(outcome.check.to_string()).or_default();
            match outcome.status {
                Status::Pass => count.passed += 1,
                Status::Fail => count.failed += 1,
                Status::Skip => {}
            }
            for finding in &outcome.findings {
                *self.codes.entry(finding.code).or_default() += 1;
                if self.examples.len() < MAX_EXAMPLES
                    && !self.examples.iter().any(|e| e.code == finding.code)
                {
                    self.examples.push(Example {
                        case: record.case.clone(),
                        repeat: record.repeat,
                        check: outcome.check.to_string(),
                        code: finding.code,
                        message: finding.message.clone(),
                        path: finding.path.clone(),
                        output: record
                            .output
                            .as_ref()
                            .map(|o| o.chars().take(160).collect()),
                    });
                }
            }
        }
    }

    /// Sets the comparison with the reference, counting each failed field under
    /// `reference_disagreement` with the calls' finding codes.
    pub fn attach_differential(&mut self, d: Differential) {
        let failed = d.failed().count() as u64;
        if failed > 0 {
            *self.codes.entry(Code::ReferenceDisagreement).or_default() += failed;
        }
        self.differential = Some(d);
    }

    /// Every planned call was sent and came back (passed or failed), or was saved
    /// because the verdict was decided without it.
    pub fn ran_all(&self) -> bool {
        self.planned > 0
            && self.not_run == 0
            && self.passed + self.failed + self.saved >= self.planned
    }

    /// Ends the counting: the stability of the cases left short before their last
    /// repeat is folded in ([`Stability::finish`]).
    pub fn finish(&mut self) {
        if let Some(s) = &mut self.stability {
            s.finish();
        }
    }

    /// Calls sent (and recorded): the planned ones less the saved and the not sent.
    pub fn sent(&self) -> u64 {
        self.passed + self.failed
    }

    /// Whether no call still to come can make this pair conformant, and by which rule:
    /// the model's own failures already exceed what `pass_threshold` allows (even if
    /// every call still to come passed and every transport failure had been a pass), or
    /// one case's repeats can no longer meet the suite's stability bar
    /// ([`Stability::short`]). The decision is then kept in [`Tally::decided`] (once),
    /// and returned the first time. Each rule is a curtailment of the fixed design: the
    /// verdict is the one every planned call would have given. A halted pair is
    /// inconclusive whatever comes.
    pub fn decide_early(&mut self, pass_threshold: f64) -> Option<&Decision> {
        if self.decided.is_some() || self.halted.is_some() || self.planned == 0 {
            return None;
        }
        let model_failures = self.own_failures();
        // The most failures the threshold allows, stated for the evidence.
        let allowed = allowed_failures(self.planned, pass_threshold);
        let decision = |rule, case| Decision {
            rule,
            pass_threshold,
            model_failures,
            allowed_failures: allowed,
            after_calls: self.sent(),
            case,
        };
        // With a per-case bound, the share of passed calls does not decide the pair.
        let by_share = self
            .stability
            .as_ref()
            .is_none_or(|s| s.min_case_pass_lower_bound.is_none());
        let short = self.stability.as_ref().and_then(|s| s.short.as_ref());
        self.decided = if by_share && model_failures > allowed {
            Some(decision(DecisionRule::PassThreshold, None))
        } else if let Some((case, why)) = short {
            let rule = match why {
                Shortfall::Agreement => DecisionRule::MinAgreement,
                Shortfall::PassBound => DecisionRule::MinCasePassLowerBound,
            };
            Some(decision(rule, Some(case.clone())))
        } else {
            None
        };
        self.decided.as_ref()
    }

    /// Passed calls over planned calls: a call that never ran is not a pass.
    pub fn pass_rate(&self) -> f64 {
        ratio(self.passed, self.planned)
    }

    /// Calls that passed on their first request over planned calls.
    pub fn first_attempt_pass_rate(&self) -> f64 {
        ratio(self.passed_first_attempt, self.planned)
    }

    /// The verdict, with the reasons that decided it (finding or error codes). A field
    /// significantly below the reference's own agreement fails it
    /// (`reference_disagreement`); a reference that gives no floor leaves a verdict that
    /// would pass inconclusive, never conformant.
    pub fn verdict(&self, policy: &Policy) -> (Verdict, Vec<Reason>) {
        let (verdict, reasons) = self.verdict_with_reference(policy);
        // A pass must rule out what the suite asks it to: else the test could not tell.
        if let (Verdict::Conformant, Some(bound)) = (verdict, policy.max_undetected_failure_rate)
            && self.rules_out() > bound
        {
            return (Verdict::Inconclusive, vec![Reason::InsufficientEvidence]);
        }
        (verdict, reasons)
    }

    /// The failure rate the calls rule out at [`conform_allowlist::stats::CONFIDENCE`]: a provider
    /// failing more often would have shown more failures than these.
    pub fn rules_out(&self) -> f64 {
        conform_allowlist::stats::failure_rate_upper_bound(
            self.planned.saturating_sub(self.passed),
            self.planned,
            conform_allowlist::stats::CONFIDENCE,
        )
    }

    fn verdict_with_reference(&self, policy: &Policy) -> (Verdict, Vec<Reason>) {
        let (verdict, mut reasons) = self.verdict_alone(policy);
        let Some(d) = &self.differential else {
            return (verdict, reasons);
        };
        match (verdict, d.judgement()) {
            (Verdict::Inconclusive, _) | (_, Ok(false)) => (verdict, reasons),
            (_, Ok(true)) => {
                let disagreement = Reason::Found(Code::ReferenceDisagreement);
                if !reasons.contains(&disagreement) {
                    reasons.push(disagreement);
                }
                (Verdict::Nonconformant, reasons)
            }
            (Verdict::Nonconformant, Err(_)) => (verdict, reasons),
            (Verdict::Conformant, Err(why)) => (Verdict::Inconclusive, vec![why.into()]),
        }
    }

    /// The verdict on the calls' own checks, before any reference is consulted. What the
    /// answers that came back show against the provider decides first, whatever is
    /// missing: an interruption, a halt or failures that say nothing about its answers
    /// never turn a failure found into an open verdict, so more failures never make a
    /// verdict weaker (`tests::verdicts_are_monotone_in_failures`).
    fn verdict_alone(&self, policy: &Policy) -> (Verdict, Vec<Reason>) {
        if let Some(found) = self.nonconformance(policy) {
            return (Verdict::Nonconformant, found);
        }
        match self.left_open(policy) {
            Some(why) => (Verdict::Inconclusive, why),
            None => (Verdict::Conformant, Vec::new()),
        }
    }

    /// Failed calls that are the provider's own: its model's, and its own failures to
    /// answer once reached ([`Effect::ProviderFailure`]).
    pub fn own_failures(&self) -> u64 {
        self.own_failed
    }

    /// Why the answers that came back fail the provider, whatever the calls not made or
    /// not answered would have said: its own failures beyond what `pass_threshold`
    /// allows over the planned calls (or a case under the per-case bound), unstable
    /// repeats, latency objectives, tool-calling thresholds. `None` when nothing does.
    fn nonconformance(&self, policy: &Policy) -> Option<Vec<Reason>> {
        let stability = self.stability.as_ref();
        // With a per-case bound, each case is judged by the confidence its repeats give,
        // instead of the plain share of passed calls.
        let short = match stability.filter(|s| s.min_case_pass_lower_bound.is_some()) {
            Some(s) => s.cases_below_pass_bound > 0,
            None => {
                self.planned > 0
                    && ratio(self.planned - self.own_failures(), self.planned)
                        < policy.pass_threshold
            }
        };
        let unstable = stability.is_some_and(|s| s.cases_below_agreement > 0);
        let slow = self.slo_breaches(&policy.slo);
        let tools_short = self
            .tool_calls
            .as_ref()
            .map(ToolMetrics::failures)
            .unwrap_or_default();
        if !short && !unstable && slow.is_empty() && tools_short.is_empty() {
            return None;
        }
        let mut codes: Vec<(&Code, &u64)> = self.codes.iter().collect();
        codes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.as_str().cmp(b.0.as_str())));
        let mut reasons: Vec<Reason> = Vec::new();
        if unstable {
            reasons.push(Reason::UnstableRepeats);
        }
        reasons.extend(tools_short.into_iter().map(Reason::ToolBelowThreshold));
        reasons.extend(codes.into_iter().map(|(c, _)| Reason::Found(*c)));
        if stability.is_some_and(|s| s.cases_below_pass_bound > 0) {
            reasons.push(Reason::CasePassRateBelowBound);
        }
        reasons.extend(slow);
        Some(reasons)
    }

    /// Why nothing failed the provider and it still has not shown enough to pass: a halt
    /// (authentication, a quota, our configuration), an interruption or the budget,
    /// calls never sent, too many failures that say nothing about its answers, or a pass
    /// short only because of them. `None` when it passes.
    fn left_open(&self, policy: &Policy) -> Option<Vec<Reason>> {
        if let Some((code, _)) = &self.halted {
            return Some(vec![Reason::Found(*code)]);
        }
        if !policy.complete {
            let why = match policy.over_budget {
                true => Reason::BudgetReached,
                false => Reason::Interrupted,
            };
            return Some(vec![why]);
        }
        // A planned call that was never sent (its provider was stopped by an error in
        // another suite) is missing evidence: neither a pass nor the model's failure.
        if self.not_run > 0 {
            return Some(vec![Reason::CallsNotSent]);
        }
        let ran = self.passed + self.failed;
        if ran > 0 && ratio(self.transport_errors, ran) > policy.max_transport_error_share {
            return Some(vec![Reason::TooManyTransportErrors]);
        }
        // With a per-case bound, the cases passed it (else it failed above).
        let by_share = self
            .stability
            .as_ref()
            .is_none_or(|s| s.min_case_pass_lower_bound.is_none());
        if by_share && (self.planned == 0 || self.pass_rate() < policy.pass_threshold) {
            // Short only by failures that are not the provider's (a 429 past its retries
            // is the account's limit, a broken connection may be ours): the evidence is
            // incomplete, never a failure.
            let reasons = self
                .transport_kinds
                .iter()
                .map(|kind| Reason::Found(Code::Call(*kind)))
                .collect::<Vec<_>>();
            return Some(match reasons.is_empty() {
                true => vec![Reason::CallsNotSent],
                false => reasons,
            });
        }
        None
    }

    /// The latency objectives this pair's 95th percentiles may exceed. A percentile within the histogram's error of its bound counts as
    /// above it; with no answered call there is nothing to measure (the failures say why).
    pub fn slo_breaches(&self, slo: &Slo) -> Vec<Reason> {
        let breached =
            |h: &Histogram, bound: Option<std::time::Duration>| match (h.quantile(0.95), bound) {
                (Some(p95), Some(bound)) => {
                    latency::may_exceed(p95, latency::RELATIVE_ERROR, bound.as_secs_f64() * 1000.0)
                }
                _ => false,
            };
        let mut codes = Vec::new();
        if breached(&self.latency.total, slo.max_p95_latency) {
            codes.push(Reason::SloLatency);
        }
        if breached(&self.latency.first_token, slo.max_p95_ttft) {
            codes.push(Reason::SloTtft);
        }
        codes
    }
}

/// What decided a pair's verdict before all its planned calls were sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The test that decided.
    pub rule: DecisionRule,
    /// The suite's `pass_threshold` when it was decided.
    pub pass_threshold: f64,
    /// Its own failures (the model's, and the provider's own failures to answer) when it was decided.
    pub model_failures: u64,
    /// The most failures `pass_threshold` allows over the planned calls.
    pub allowed_failures: u64,
    /// Calls recorded when it was decided.
    pub after_calls: u64,
    /// The case whose repeats decided it, for a stability rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
}

/// The test that decided a verdict early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionRule {
    /// More model failures than `pass_threshold` allows: no call to come could pass it.
    PassThreshold,
    /// A case whose repeats can no longer agree as often as `min_agreement` asks, even
    /// if every repeat to come gave its most common output.
    MinAgreement,
    /// A case whose pass-rate bound stays under `min_case_pass_lower_bound` even if
    /// every repeat to come passed.
    MinCasePassLowerBound,
}

/// What decides a verdict beyond the counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The suite's pass threshold, a share in (0, 1].
    pub pass_threshold: f64,
    /// Above this share of transport errors among the calls that ran, the evidence is
    /// too thin to judge.
    pub max_transport_error_share: f64,
    /// False when the run was interrupted or stopped by its budget.
    pub complete: bool,
    /// The budget stopped the run (`complete` is then false).
    pub over_budget: bool,
    /// The latency objectives of the provider and the suite together.
    pub slo: Slo,
    /// The failure rate a conformant verdict must rule out (the suite's
    /// `max_undetected_failure_rate`): with too few calls to, it is inconclusive.
    pub max_undetected_failure_rate: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The most failures of `planned` calls that `pass_threshold` allows: the largest `f`
/// whose `(planned - f) / planned` still meets it, 0 when none does.
///
/// The share only falls as `f` grows, so this is a binary search. It runs after every
/// record: walking every count from `planned` down cost 20,000 steps a call at 20,000
/// planned calls, and doubled a call's CPU (issue 46).
fn allowed_failures(planned: u64, pass_threshold: f64) -> u64 {
    let meets = |f: u64| ratio(planned - f, planned) >= pass_threshold;
    // The first count that does not meet it, in 0..=planned + 1.
    let (mut low, mut high) = (0, planned + 1);
    while low < high {
        let mid = low + (high - low) / 2;
        if meets(mid) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    low.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_failures_allowed_are_the_largest_count_the_threshold_meets() {
        // The definition, walked count by count.
        let walked = |planned: u64, t: f64| {
            (0..=planned)
                .rev()
                .find(|f| ratio(planned - f, planned) >= t)
                .unwrap_or(0)
        };
        for planned in (0..=120).chain([999, 1000, 1001, 20_000]) {
            for t in [0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0, 1.01] {
                assert_eq!(
                    allowed_failures(planned, t),
                    walked(planned, t),
                    "{planned} calls at {t}"
                );
            }
        }
    }

    fn timed(latency_ms: f64, ttft_ms: f64) -> CallRecord {
        let mut r = CallRecord::new("s", "c", "p", 0);
        r.passed = true;
        r.latency_ms = Some(latency_ms);
        r.ttfb_ms = Some(ttft_ms / 2.0);
        r.ttft_ms = Some(ttft_ms);
        r
    }

    fn policy(slo: Slo) -> Policy {
        Policy {
            pass_threshold: 1.0,
            max_transport_error_share: 0.1,
            complete: true,
            over_budget: false,
            slo,
            max_undetected_failure_rate: None,
        }
    }

    fn answered(passed: bool, error: Option<conform_wire::provider::ErrorKind>) -> CallRecord {
        let mut r = CallRecord::new("s", "c", "p", 0);
        r.passed = passed;
        r.error = error.map(|kind| conform_wire::provider::CallError::new(kind, "x"));
        r
    }

    #[test]
    fn a_429_past_its_retries_is_never_the_providers_failure() {
        use conform_wire::provider::ErrorKind::{ContextLength, RateLimited};
        let mut tally = Tally::new("s", "p", 20);
        for _ in 0..19 {
            tally.add(&answered(true, None));
        }
        tally.add(&answered(false, Some(RateLimited)));
        let (verdict, reasons) = tally.verdict(&policy(Slo::default()));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert_eq!(reasons, [Reason::Found(Code::Call(RateLimited))]);
        // A failure of the model's own still fails it, 429 or not.
        let mut tally = Tally::new("s", "p", 20);
        for _ in 0..18 {
            tally.add(&answered(true, None));
        }
        tally.add(&answered(false, Some(RateLimited)));
        tally.add(&answered(false, Some(ContextLength)));
        assert_eq!(
            tally.verdict(&policy(Slo::default())).0,
            Verdict::Nonconformant
        );
    }

    #[test]
    fn objectives_fail_a_pair_whose_answers_were_all_right() {
        let mut tally = Tally::new("s", "p", 100);
        for i in 0..100 {
            // p95: 20 s; first token p95: 950 ms.
            let ms = if i < 90 { 1_000.0 } else { 20_000.0 };
            tally.add(&timed(ms, 10.0 * f64::from(i)));
        }
        let bound = |latency: u64, ttft: u64| Slo {
            max_p95_latency: Some(Duration::from_secs(latency)),
            max_p95_ttft: Some(Duration::from_millis(ttft)),
        };
        assert_eq!(
            tally.verdict(&policy(bound(5, 2_000))),
            (Verdict::Nonconformant, vec![Reason::SloLatency])
        );
        assert_eq!(
            tally.verdict(&policy(bound(30, 500))),
            (Verdict::Nonconformant, vec![Reason::SloTtft])
        );
        assert_eq!(
            tally.verdict(&policy(bound(30, 2_000))).0,
            Verdict::Conformant
        );
        assert_eq!(
            tally.verdict(&policy(Slo::default())).0,
            Verdict::Conformant
        );
    }

    #[test]
    fn a_pass_on_too_few_calls_for_the_suites_bound_is_inconclusive() {
        let mut tally = Tally::new("s", "p", 20);
        for _ in 0..20 {
            tally.add(&timed(10.0, 5.0));
        }
        let with = |bound| Policy {
            max_undetected_failure_rate: Some(bound),
            ..policy(Slo::default())
        };
        // 0 failures in 20 calls rule out 13.9 %, not 5 %.
        assert!((tally.rules_out() - 0.139).abs() < 0.001);
        assert_eq!(
            tally.verdict(&with(0.05)),
            (Verdict::Inconclusive, vec![Reason::InsufficientEvidence])
        );
        assert_eq!(tally.verdict(&with(0.2)).0, Verdict::Conformant);
    }

    /// How one planned call ended, for the monotonicity property.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Ended {
        Passed,
        /// The model's own failure (a check failed, or a context overflow).
        Model,
        /// A stream cut after its 2xx: the provider's own failure.
        Cut,
        /// A 5xx past its retries: the provider's own failure.
        ServerError,
        /// A connection broken before any status: says nothing about its answers.
        Reset,
        RateLimited,
        /// Authentication failed: the provider is stopped.
        Auth,
        NotSent,
    }

    fn ended(how: Ended, i: usize) -> CallRecord {
        use conform_wire::provider::{CallError, ErrorKind};
        let case = format!("c{i}");
        if how == Ended::NotSent {
            return CallRecord::not_run("s", &case, "p", 0, "stopped".into());
        }
        let mut r = CallRecord::new("s", &case, "p", 0);
        r.passed = how == Ended::Passed;
        r.error = match how {
            Ended::Passed => None,
            Ended::Model => Some(CallError::new(ErrorKind::ContextLength, "x")),
            Ended::Cut => Some(CallError::new(ErrorKind::StreamTruncated, "x").after_success()),
            Ended::ServerError => Some(CallError::new(ErrorKind::ServerError, "x")),
            Ended::Reset => Some(CallError::new(ErrorKind::ConnectionReset, "x")),
            Ended::RateLimited => Some(CallError::new(ErrorKind::RateLimited, "x")),
            Ended::Auth => Some(CallError::new(ErrorKind::Auth, "x")),
            Ended::NotSent => None,
        };
        r
    }

    fn judged(calls: &[Ended], threshold: f64, complete: bool) -> Verdict {
        let mut tally = Tally::new("s", "p", calls.len() as u64);
        for (i, how) in calls.iter().enumerate() {
            tally.add(&ended(*how, i));
        }
        tally.finish();
        let policy = Policy {
            pass_threshold: threshold,
            complete,
            ..policy(Slo::default())
        };
        tally.verdict(&policy).0
    }

    /// What a verdict lets a fallback do: a revocation, nothing, a grant.
    fn standing(v: Verdict) -> u8 {
        match v {
            Verdict::Nonconformant => 0,
            Verdict::Inconclusive => 1,
            Verdict::Conformant => 2,
        }
    }

    proptest::proptest! {
        /// Turning passed calls into failed ones, of any kind, never gives the provider
        /// a stronger verdict; and a call never sent that comes back failed never lifts
        /// a nonconformant verdict (which would leave an earlier permit standing).
        #[test]
        fn verdicts_are_monotone_in_failures(
            calls in proptest::collection::vec(
                proptest::sample::select(vec![
                    Ended::Passed, Ended::Passed, Ended::Passed, Ended::Passed, Ended::Model,
                    Ended::Cut, Ended::ServerError, Ended::Reset, Ended::RateLimited,
                    Ended::Auth, Ended::NotSent,
                ]),
                1..40,
            ),
            failures in proptest::collection::vec(
                (0usize..40, proptest::sample::select(vec![
                    Ended::Model, Ended::Cut, Ended::ServerError, Ended::Reset,
                    Ended::RateLimited, Ended::Auth,
                ])),
                1..8,
            ),
            threshold in proptest::sample::select(vec![1.0, 0.95, 0.9, 0.75]),
            complete in proptest::bool::ANY,
        ) {
            let before = judged(&calls, threshold, complete);
            let mut worse = calls.clone();
            let mut filled = calls.clone();
            for (at, how) in failures {
                let at = at % calls.len();
                if worse[at] == Ended::Passed {
                    worse[at] = how;
                }
                if filled[at] == Ended::NotSent || filled[at] == Ended::Passed {
                    filled[at] = how;
                }
            }
            let after = judged(&worse, threshold, complete);
            proptest::prop_assert!(
                standing(after) <= standing(before),
                "{before:?} became {after:?}: {calls:?} then {worse:?}"
            );
            if before == Verdict::Nonconformant {
                let after = judged(&filled, threshold, complete);
                proptest::prop_assert_eq!(after, Verdict::Nonconformant, "{:?} then {:?}", calls, filled);
            }
        }
    }

    #[test]
    fn the_providers_own_failures_revoke_where_failures_that_say_nothing_leave_it_open() {
        // The case: a granted fallback then cut 28 of its 120 streams.
        let mut calls = vec![Ended::Passed; 120];
        calls[..28].fill(Ended::Cut);
        assert_eq!(judged(&calls, 1.0, true), Verdict::Nonconformant);
        calls[..3].fill(Ended::Cut);
        calls[3..28].fill(Ended::Passed);
        assert_eq!(judged(&calls, 1.0, true), Verdict::Nonconformant);
        // A connection broken before any status may be ours: short only by those, open.
        calls[..3].fill(Ended::Reset);
        assert_eq!(judged(&calls, 1.0, true), Verdict::Inconclusive);
        calls[..28].fill(Ended::Reset);
        assert_eq!(judged(&calls, 1.0, true), Verdict::Inconclusive);
        // And a failure of its own among them still fails it.
        calls[40] = Ended::ServerError;
        assert_eq!(judged(&calls, 1.0, true), Verdict::Nonconformant);
    }

    #[test]
    fn a_replayed_answer_is_not_timed() {
        let mut tally = Tally::new("s", "p", 2);
        let mut replayed = timed(0.0, 0.0);
        replayed.ttfb_ms = None;
        tally.add(&replayed);
        tally.add(&timed(300.0, 300.0));
        assert_eq!(tally.latency.total.count(), 1);
        assert_eq!(tally.latency.total.quantile(0.5), Some(300.0));
    }
}
