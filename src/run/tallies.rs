//! Call records → tallies → verdicts: the one path every run takes, whether its records
//! arrive from the providers (`conform run`) or from shard reports (`conform merge`).
//!
//! Invariant: a verdict depends on the records and the plan only, never on where the
//! records came from or in which order whole cases arrived.

use std::sync::Arc;

use super::differential::Collector;
use super::shard::Shard;
use super::{PairVerdict, PreparedSuite, Target};
use crate::check::record::CallRecord;
use crate::check::stability::Stability;
use crate::check::tool_metrics::ToolMetrics;
use crate::config::Suite;
use crate::config::pricing::PairCost;
use crate::verdict::{Policy, Tally};

/// One tally per (provider, suite), provider-major, for the pairs the plan holds.
pub struct Tallies {
    n_suites: usize,
    tallies: Vec<Tally>,
    /// The candidates against their reference, case by case.
    differential: Collector,
}

/// The calls of `suite` the plan holds: every case (or the shard's cases) × repeats.
pub fn planned_calls(suite: &Suite, repeats: u32, shard: Option<Shard>) -> u64 {
    let cases = match shard {
        None => suite.cases.len() as u64,
        Some(shard) => suite
            .cases
            .iter()
            .filter(|c| shard.owns(&suite.name, &c.id))
            .count() as u64,
    };
    cases * u64::from(repeats)
}

impl Tallies {
    pub fn new(
        suites: &[Arc<PreparedSuite>],
        targets: &[Arc<Target>],
        repeats: Option<u32>,
        shard: Option<Shard>,
    ) -> Tallies {
        let repeats = |s: &Suite| repeats.unwrap_or(s.repeats);
        let mut tallies = Vec::with_capacity(suites.len() * targets.len());
        for target in targets {
            for s in suites {
                let mut tally = Tally::new(
                    &s.suite.name,
                    &target.endpoint.config.name,
                    planned_calls(&s.suite, repeats(&s.suite), shard),
                );
                tally.slo = target.endpoint.config.slo.and(s.suite.slo);
                tally.cost = target.endpoint.config.pricing.map(PairCost::new);
                let spec = &s.suite.stability;
                if repeats(&s.suite) > 1
                    || spec.min_agreement.is_some()
                    || spec.min_case_pass_lower_bound.is_some()
                {
                    tally.stability = Some(Stability::new(repeats(&s.suite), spec));
                }
                if !s.suite.tool_thresholds.is_empty() {
                    tally.tool_calls = Some(ToolMetrics::new(
                        s.suite.tool_thresholds,
                        repeats(&s.suite),
                        spec.confidence,
                    ));
                }
                tallies.push(tally);
            }
        }
        let differential = {
            let plain: Vec<&Suite> = suites.iter().map(|s| &s.suite).collect();
            let names: Vec<&str> = (targets.iter())
                .map(|t| t.endpoint.config.name.as_str())
                .collect();
            let runs: Vec<Vec<usize>> = (plain.iter())
                .map(|s| {
                    (0..targets.len())
                        .filter(|p| targets[*p].endpoint.config.runs_suite(&s.name))
                        .collect()
                })
                .collect();
            let r: Vec<u32> = plain.iter().map(|s| repeats(s)).collect();
            Collector::new(&plain, &names, &runs, &r)
        };
        Tallies {
            n_suites: suites.len(),
            tallies,
            differential,
        }
    }

    /// Counts one record of `targets[provider]` on `suites[suite]`.
    /// Takes its differential observation, which the comparison with the reference keeps
    /// until the case is complete.
    pub fn add(&mut self, provider: usize, suite: usize, record: &mut CallRecord) {
        if let Some(tally) = self.tallies.get_mut(provider * self.n_suites + suite) {
            tally.add(record);
            self.differential.add(provider, suite, record);
        }
    }

    /// The verdict on every pair the plan holds (a simulation may skip some suites).
    pub fn verdicts(
        self,
        suites: &[Arc<PreparedSuite>],
        targets: &[Arc<Target>],
        max_transport_error_share: f64,
        complete: bool,
        over_budget: bool,
    ) -> Vec<PairVerdict> {
        let n_suites = self.n_suites;
        let mut tallies = self.tallies;
        for ((s, p), d) in self.differential.finish() {
            if let Some(tally) = tallies.get_mut(p * n_suites + s) {
                tally.attach_differential(d);
            }
        }
        tallies
            .into_iter()
            .enumerate()
            .filter(|(i, _)| {
                targets[i / n_suites]
                    .endpoint
                    .config
                    .runs_suite(&suites[i % n_suites].suite.name)
            })
            .map(|(i, tally)| {
                let (provider_index, suite_index) = (i / n_suites, i % n_suites);
                let policy = Policy {
                    pass_threshold: suites[suite_index].suite.pass_threshold,
                    max_transport_error_share,
                    // A pair whose every planned call came back is decided even when the
                    // run was cut short elsewhere; the run still grants nothing.
                    complete: complete || tally.ran_all(),
                    over_budget,
                    slo: tally.slo,
                    max_undetected_failure_rate: suites[suite_index]
                        .suite
                        .max_undetected_failure_rate,
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
