//! Stability at low temperature: do the repeats of a case agree?
//!
//! Each case's repeats are grouped while they are in flight (only those: a group is
//! folded into the totals and dropped the moment its last repeat arrives, so memory is
//! bounded by the calls in flight, not by the number of cases). A case's agreement is
//! the share of its answered repeats whose output equals the most common one
//! (canonical JSON equality, [`conform_config::digest::canonical`]). A suite may demand a
//! minimum agreement, and may judge each case by the Wilson lower bound of its pass
//! rate over the repeats instead of the plain share of passed calls.
//!
//! A case can fall short before its last repeat: once the best its repeats still to come
//! could do (all answering the most common output, all passing) leaves it under the
//! suite's bar, no answer can lift it. That is a deterministic curtailment of the fixed
//! design, not a statistical guess: the pair it decides gets the verdict it would have
//! got with every repeat sent, so the false-alarm and miss rates are the fixed design's.

use std::collections::HashMap;

use serde::Serialize;

use crate::check::record::CallRecord;
use conform_config::StabilitySpec;

// One normal quantile for every bound: the reader crate states what a permit rules out with it.
pub use conform_allowlist::stats::normal_quantile;

/// The confidence of the Wilson bound when the suite names none.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// The least stable case seen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseAgreement {
    /// The case, by id.
    pub case: String,
    /// Share of answered repeats that gave the most common output.
    pub agreement: f64,
    /// How many different outputs its repeats gave.
    pub distinct_outputs: u32,
}

/// Stability of one (suite, provider).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stability {
    /// How many times each case is sent.
    pub repeats: u32,
    /// The least share of a case's answers that must agree, when the suite sets it.
    pub min_agreement: Option<f64>,
    /// The least lower bound on a case's pass rate, when the suite sets it.
    pub min_case_pass_lower_bound: Option<f64>,
    /// The confidence of each bound.
    pub confidence: f64,
    /// Cases whose repeats have all arrived.
    pub cases: u64,
    /// Cases whose answered repeats all gave the same output.
    pub cases_unanimous: u64,
    /// Mean over cases of their agreement.
    pub mean_agreement: f64,
    /// The case whose answers agreed least.
    pub least_stable: Option<CaseAgreement>,
    /// Cases under `min_agreement`.
    pub cases_below_agreement: u64,
    /// The lowest Wilson lower bound of a case's pass rate.
    pub lowest_pass_lower_bound: Option<f64>,
    /// Cases whose pass-rate lower bound is under `min_case_pass_lower_bound`.
    pub cases_below_pass_bound: u64,
    /// The first case found short while repeats were still to come, and of what.
    #[serde(skip)]
    pub short: Option<(String, Shortfall)>,
    #[serde(skip)]
    sum_agreement: f64,
    #[serde(skip)]
    in_flight: HashMap<String, CaseRepeats>,
}

/// The bar a case stays under whatever its repeats still to come answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    /// Its repeats cannot agree as often as `min_agreement` asks.
    Agreement,
    /// Its pass-rate bound stays under `min_case_pass_lower_bound`.
    PassBound,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct CaseRepeats {
    arrived: u32,
    passed: u32,
    /// Output digest and how many repeats gave it; a handful of entries at most.
    outputs: Vec<(String, u32)>,
}

impl CaseRepeats {
    fn answered(&self) -> u32 {
        self.outputs.iter().map(|(_, n)| n).sum()
    }

    fn modal(&self) -> u32 {
        self.outputs.iter().map(|(_, n)| *n).max().unwrap_or(0)
    }
}

impl Stability {
    /// An empty tally for `repeats` sends of each case, held to `spec`.
    pub fn new(repeats: u32, spec: &StabilitySpec) -> Self {
        Stability {
            repeats: repeats.max(1),
            min_agreement: spec.min_agreement,
            min_case_pass_lower_bound: spec.min_case_pass_lower_bound,
            confidence: spec.confidence.unwrap_or(DEFAULT_CONFIDENCE),
            cases: 0,
            cases_unanimous: 0,
            mean_agreement: 0.0,
            least_stable: None,
            cases_below_agreement: 0,
            lowest_pass_lower_bound: None,
            cases_below_pass_bound: 0,
            short: None,
            sum_agreement: 0.0,
            in_flight: HashMap::new(),
        }
    }

    /// Adds one repeat; folds its case into the totals when it is the case's last.
    pub fn add(&mut self, record: &CallRecord) {
        let group = self.in_flight.entry(record.case.clone()).or_default();
        group.arrived += 1;
        group.passed += u32::from(record.passed);
        if let Some(digest) = &record.output_digest {
            match group.outputs.iter_mut().find(|(d, _)| d == digest) {
                Some((_, n)) => *n += 1,
                None => group.outputs.push((digest.clone(), 1)),
            }
        }
        if group.arrived >= self.repeats {
            if let Some(done) = self.in_flight.remove(&record.case) {
                self.fold(&record.case, &done);
            }
        } else if self.short.is_none() {
            let short = (self.in_flight.get(&record.case)).and_then(|g| self.shortfall(g));
            self.short = short.map(|s| (record.case.clone(), s));
        }
    }

    /// Folds the cases left short before their last repeat (the rest were saved because
    /// they decided the pair), as measured so far. A case still in flight that was not
    /// short was saved because something else decided the pair: it is not counted.
    pub fn finish(&mut self) {
        let mut left: Vec<(String, CaseRepeats)> = std::mem::take(&mut self.in_flight)
            .into_iter()
            .filter(|(_, g)| self.shortfall(g).is_some())
            .collect();
        // Case order, as the report's ties are broken: the fold must not depend on
        // the order a map keeps.
        left.sort_by(|a, b| a.0.cmp(&b.0));
        for (case, group) in left {
            self.fold(&case, &group);
        }
    }

    /// The best `group`'s agreement and pass-rate bound can still become, whatever its
    /// repeats still to come answer (all giving its most common output, all passing):
    /// once every repeat has arrived, what they are.
    fn best(&self, group: &CaseRepeats) -> (f64, f64) {
        let to_come = self.repeats.saturating_sub(group.arrived);
        let answered = group.answered() + to_come;
        let agreement = match answered {
            0 => 0.0,
            n => f64::from(group.modal() + to_come) / f64::from(n),
        };
        let bound = wilson_lower_bound(
            group.passed + to_come,
            group.arrived + to_come,
            self.confidence,
        );
        (agreement, bound)
    }

    /// The bar `group` stays under whatever its repeats still to come answer.
    fn shortfall(&self, group: &CaseRepeats) -> Option<Shortfall> {
        let (agreement, bound) = self.best(group);
        if self.min_agreement.is_some_and(|min| agreement < min) {
            Some(Shortfall::Agreement)
        } else if (self.min_case_pass_lower_bound).is_some_and(|min| bound < min) {
            Some(Shortfall::PassBound)
        } else {
            None
        }
    }

    /// Cases whose repeats are still arriving.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn fold(&mut self, case: &str, group: &CaseRepeats) {
        self.cases += 1;
        let answered = group.answered();
        let agreement = if answered == 0 {
            0.0
        } else {
            f64::from(group.modal()) / f64::from(answered)
        };
        if group.outputs.len() <= 1 && answered > 0 {
            self.cases_unanimous += 1;
        }
        self.sum_agreement += agreement;
        self.mean_agreement = self.sum_agreement / self.cases as f64;
        // Ties go to the first case id, not the first to arrive: a run's cases finish in
        // any order, and a sharded run merged must read as the unsharded one.
        if self.least_stable.as_ref().is_none_or(|l| {
            agreement < l.agreement || (agreement == l.agreement && case < l.case.as_str())
        }) {
            self.least_stable = Some(CaseAgreement {
                case: case.to_string(),
                agreement,
                distinct_outputs: group.outputs.len() as u32,
            });
        }
        // Judged by the best the case could still do: for a case whose every repeat
        // arrived, what it did.
        let (best_agreement, best_bound) = self.best(group);
        if self.min_agreement.is_some_and(|min| best_agreement < min) {
            self.cases_below_agreement += 1;
        }
        let bound = wilson_lower_bound(group.passed, group.arrived, self.confidence);
        if self.lowest_pass_lower_bound.is_none_or(|l| bound < l) {
            self.lowest_pass_lower_bound = Some(bound);
        }
        if (self.min_case_pass_lower_bound).is_some_and(|min| best_bound < min) {
            self.cases_below_pass_bound += 1;
        }
    }
}

/// The lower bound of the Wilson score interval for `passed` of `n` at two-sided
/// `confidence`: the pass rate one can claim with that confidence. 0 for no trials.
pub fn wilson_lower_bound(passed: u32, n: u32, confidence: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let n = f64::from(n);
    let p = f64::from(passed) / n;
    let z = normal_quantile(1.0 - (1.0 - confidence) / 2.0);
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let margin = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - margin) / (1.0 + z2 / n)).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(case: &str, passed: bool, digest: Option<&str>) -> CallRecord {
        let mut r = CallRecord::new("s", case, "p", 0);
        r.passed = passed;
        r.output_digest = digest.map(str::to_string);
        r
    }

    #[test]
    fn quantiles_and_bounds_match_the_tables() {
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.995) - 2.575_829).abs() < 1e-5);
        assert!((normal_quantile(0.01) + 2.326_348).abs() < 1e-5);
        // 10/10 at 95%: n / (n + z²) = 10 / 13.8415 = 0.7225.
        assert!((wilson_lower_bound(10, 10, 0.95) - 0.722_46).abs() < 1e-4);
        // 8/10 at 95%: 0.4902 (Wilson's interval, e.g. R's prop.test without correction).
        assert!((wilson_lower_bound(8, 10, 0.95) - 0.490_16).abs() < 1e-4);
        assert_eq!(wilson_lower_bound(0, 0, 0.95), 0.0);
    }

    #[test]
    fn agreement_per_case_and_bounded_memory() {
        let spec = StabilitySpec {
            min_agreement: Some(0.8),
            min_case_pass_lower_bound: Some(0.5),
            confidence: None,
        };
        let mut s = Stability::new(5, &spec);
        for d in ["a", "a", "a", "a", "a"] {
            s.add(&record("one", true, Some(d)));
        }
        assert_eq!(s.in_flight(), 0, "a finished case is dropped");
        for d in ["a", "b", "a", "c", "a"] {
            s.add(&record("two", true, Some(d)));
            assert!(s.in_flight() <= 1);
        }
        assert_eq!(s.cases, 2);
        assert_eq!(s.cases_unanimous, 1);
        assert_eq!(s.cases_below_agreement, 1);
        let least = s.least_stable.clone().unwrap();
        assert_eq!(least.case, "two");
        assert!((least.agreement - 0.6).abs() < 1e-12);
        assert_eq!(least.distinct_outputs, 3);
        assert!((s.mean_agreement - 0.8).abs() < 1e-12);
        // 5/5 passes: lower bound 5 / (5 + 3.84) = 0.566 ≥ 0.5.
        assert_eq!(s.cases_below_pass_bound, 0);
        // Case two fell short at its fourth repeat: a, b, a, c leave at most 3 of 5.
        assert_eq!(s.short, Some(("two".to_string(), Shortfall::Agreement)));
    }

    /// Every way the first repeats of a case can go, against the fixed design: a case is
    /// found short before its last repeat only if every way its remaining repeats could
    /// go leaves it under the bar, and a case not found short could still pass.
    #[test]
    fn a_case_is_short_early_exactly_when_no_repeat_to_come_can_lift_it() {
        let spec = StabilitySpec {
            min_agreement: Some(0.8),
            min_case_pass_lower_bound: Some(0.45),
            confidence: None,
        };
        const R: u32 = 5;
        // An outcome: the output ("a", "b" or none, a transport failure) and whether it passed.
        let outcomes = [
            (Some("a"), true),
            (Some("b"), true),
            (Some("a"), false),
            (None, false),
        ];
        let sequences = |n: u32| -> Vec<Vec<usize>> {
            (0..4usize.pow(n))
                .map(|mut k| {
                    (0..n)
                        .map(|_| {
                            let o = k % 4;
                            k /= 4;
                            o
                        })
                        .collect()
                })
                .collect()
        };
        let fixed = |seq: &[usize]| {
            let mut s = Stability::new(R, &spec);
            for &o in seq {
                s.add(&record("c", outcomes[o].1, outcomes[o].0));
            }
            s.cases_below_agreement > 0 || s.cases_below_pass_bound > 0
        };
        for first in 1..R {
            for head in sequences(first) {
                let mut s = Stability::new(R, &spec);
                for &o in &head {
                    s.add(&record("c", outcomes[o].1, outcomes[o].0));
                }
                let all_fail = sequences(R - first)
                    .iter()
                    .all(|tail| fixed(&[head.clone(), tail.clone()].concat()));
                assert_eq!(s.short.is_some(), all_fail, "after {head:?}");
                if s.short.is_some() {
                    // Saved from here on: the case still counts, as short.
                    s.finish();
                    assert_eq!(s.cases, 1);
                    assert!(s.cases_below_agreement + s.cases_below_pass_bound > 0);
                }
            }
        }
    }

    #[test]
    fn a_case_saved_because_another_decided_the_pair_is_not_counted() {
        let spec = StabilitySpec {
            min_agreement: Some(0.8),
            min_case_pass_lower_bound: None,
            confidence: None,
        };
        let mut s = Stability::new(5, &spec);
        for d in ["a", "b", "c"] {
            s.add(&record("short", true, Some(d)));
        }
        s.add(&record("fine", true, Some("a")));
        assert_eq!(s.short, Some(("short".to_string(), Shortfall::Agreement)));
        s.finish();
        assert_eq!((s.cases, s.cases_below_agreement, s.in_flight()), (1, 1, 0));
        assert_eq!(s.least_stable.unwrap().case, "short");
    }
}
