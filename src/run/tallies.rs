//! Call records → tallies → verdicts: the one path every run takes, whether its records
//! arrive from the providers (`conform run`) or from shard reports (`conform merge`).
//!
//! Invariant: a verdict depends on the records and the plan only, never on where the
//! records came from or in which order whole cases arrived.

use std::sync::Arc;

use super::differential::Collector;
use super::schedule::Schedule;
use super::{PairVerdict, PreparedSuite, Target};
use conform_check::check::record::CallRecord;
use conform_check::check::stability::Stability;
use conform_check::check::tool_metrics::ToolMetrics;
use conform_check::verdict::{Policy, Tally};
use conform_config::Suite;
use conform_config::pricing::PairCost;

/// One tally per (provider, suite), provider-major, for the pairs the schedule runs.
pub struct Tallies {
    n_suites: usize,
    /// `None` for a pair the schedule does not run.
    tallies: Vec<Option<Tally>>,
    /// The candidates against their reference, case by case.
    differential: Collector,
    /// Each suite's pass threshold, which decides a pair before its last call.
    thresholds: Vec<f64>,
}

impl Tallies {
    /// A tally for every pair `schedule` runs, each planned with the calls it gives the
    /// pair.
    pub fn new(
        suites: &[Arc<PreparedSuite>],
        targets: &[Arc<Target>],
        schedule: &Schedule<'_>,
    ) -> Tallies {
        let mut tallies = Vec::with_capacity(suites.len() * targets.len());
        for (p, target) in targets.iter().enumerate() {
            for (s, prepared) in suites.iter().enumerate() {
                if !schedule.runs(p, s) {
                    tallies.push(None);
                    continue;
                }
                let suite = &prepared.suite;
                let repeats = schedule.repeats(s);
                let mut tally = Tally::new(
                    &suite.name,
                    &target.endpoint.config.name,
                    schedule.planned_calls(p, s),
                );
                tally.slo = target.endpoint.config.slo.and(suite.slo);
                tally.cost = target.endpoint.config.pricing.map(PairCost::new);
                let spec = &suite.stability;
                if repeats > 1
                    || spec.min_agreement.is_some()
                    || spec.min_case_pass_lower_bound.is_some()
                {
                    tally.stability = Some(Stability::new(repeats, spec));
                }
                if !suite.tool_thresholds.is_empty() {
                    tally.tool_calls = Some(ToolMetrics::new(
                        suite.tool_thresholds,
                        repeats,
                        spec.confidence,
                    ));
                }
                tallies.push(Some(tally));
            }
        }
        let differential = {
            let plain: Vec<&Suite> = suites.iter().map(|s| &s.suite).collect();
            let names: Vec<&str> = (targets.iter())
                .map(|t| t.endpoint.config.name.as_str())
                .collect();
            let runs: Vec<Vec<usize>> = (0..suites.len())
                .map(|s| schedule.providers_of(s).collect())
                .collect();
            let r: Vec<u32> = (0..suites.len()).map(|s| schedule.repeats(s)).collect();
            Collector::new(&plain, &names, &runs, &r)
        };
        Tallies {
            n_suites: suites.len(),
            tallies,
            differential,
            thresholds: suites.iter().map(|s| s.suite.pass_threshold).collect(),
        }
    }

    /// Counts one record of `targets[provider]` on `suites[suite]`.
    /// Takes its differential observation, which the comparison with the reference keeps
    /// until the case is complete. Returns true when this record decided the pair's
    /// verdict ([`conform_check::verdict::Tally::decide_early`]): its later calls can be saved.
    pub fn add(&mut self, provider: usize, suite: usize, record: &mut CallRecord) -> bool {
        let threshold = self.thresholds.get(suite).copied().unwrap_or(1.0);
        if let Some(Some(tally)) = self.tallies.get_mut(provider * self.n_suites + suite) {
            tally.add(record);
            self.differential.add(provider, suite, record);
            let reference = self.differential.is_live_reference(provider, suite);
            return !reference && tally.decide_early(threshold).is_some();
        }
        false
    }

    /// The verdict on every pair the schedule runs (a simulation may skip some suites).
    pub fn verdicts(
        self,
        suites: &[Arc<PreparedSuite>],
        max_transport_error_share: f64,
        complete: bool,
        over_budget: bool,
    ) -> Vec<PairVerdict> {
        let n_suites = self.n_suites;
        let mut tallies = self.tallies;
        for ((s, p), d) in self.differential.finish() {
            if let Some(Some(tally)) = tallies.get_mut(p * n_suites + s) {
                tally.attach_differential(d);
            }
        }
        tallies
            .into_iter()
            .enumerate()
            // A pair the schedule does not run has no verdict.
            .filter_map(|(i, tally)| Some((i, tally?)))
            .map(|(i, mut tally)| {
                tally.finish();
                let (provider_index, suite_index) = (i / n_suites, i % n_suites);
                let policy = Policy {
                    pass_threshold: suites[suite_index].suite.pass_threshold,
                    max_transport_error_share,
                    // A pair whose every planned call came back is decided even when the
                    // run was cut short elsewhere; the run still grants nothing.
                    complete: complete || tally.ran_all(),
                    over_budget,
                    slo: tally.slo,
                    max_undetected_failure_rate: Some(
                        suites[suite_index].suite.required_failure_rate,
                    ),
                };
                let (verdict, reasons) = tally.verdict(&policy);
                PairVerdict {
                    verdict,
                    reasons,
                    tally,
                    suite_index,
                    provider_index,
                }
            })
            .collect()
    }
}
