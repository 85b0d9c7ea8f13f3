//! Gathers what differential conformance compares while the records stream in.
//!
//! A case is compared once every planned call of it has come back (the reference's and
//! every candidate's, or the candidates' with the recorded answers that rode on the
//! first repeat), then forgotten: memory holds the cases in flight, each a few digests
//! per answer, and one [`Differential`] per (suite, candidate).

use std::collections::HashMap;

use conform_check::check::differential::{self, Differential, Signature};
pub use conform_check::check::differential::{Observed, answer_usable, observe};
use conform_check::check::stability::DEFAULT_CONFIDENCE;
use conform_config::Suite;

use conform_check::check::record::CallRecord;

/// Where a suite's reference answers come from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// The target at this index answers live.
    Live(usize),
    /// `reference = "NAME"`, but no such provider is in the run.
    Missing(String),
    /// The cases' own `reference` blocks.
    Recorded,
}

/// How one suite's answers are compared with its reference's.
#[derive(Debug)]
struct SuiteComparison {
    source: Source,
    /// The targets that run the suite.
    providers: Vec<usize>,
    /// Records per case: every provider's repeats.
    per_case: u32,
    /// The reference's name in the report: the provider, or `recorded`.
    name: String,
    fields: Vec<String>,
    margin: f64,
    confidence: f64,
}

#[derive(Debug, Default)]
struct Pending {
    seen: u32,
    answers: HashMap<usize, Vec<Signature>>,
    recorded: Option<Vec<Signature>>,
}

/// The collector of one run.
#[derive(Debug)]
pub struct Collector {
    comparisons: Vec<SuiteComparison>,
    pending: HashMap<(usize, String), Pending>,
    results: HashMap<(usize, usize), Differential>,
    /// Cases the live reference gave no answer to, per suite.
    unanswered: HashMap<usize, u64>,
    /// Saved calls (their pair decided early) of a recorded-reference suite's cases that
    /// nothing had yet shown to carry a reference: they still count towards the case
    /// being complete if it does, or its other answers would never be compared.
    saved_before: HashMap<(usize, String), u32>,
}

impl Collector {
    /// `names[p]` is target `p`'s provider name, `runs[s]` the targets that run suite
    /// `s`, and `repeats[s]` its repeats.
    pub fn new(suites: &[&Suite], names: &[&str], runs: &[Vec<usize>], repeats: &[u32]) -> Self {
        let comparisons = suites
            .iter()
            .enumerate()
            .map(|(s, suite)| {
                let source = match &suite.reference {
                    Some(name) => match names.iter().position(|n| n == name) {
                        Some(p) => Source::Live(p),
                        None => Source::Missing(name.clone()),
                    },
                    None => Source::Recorded,
                };
                let providers = runs.get(s).cloned().unwrap_or_default();
                let r = repeats.get(s).copied().unwrap_or(1);
                let name = suite.reference.clone().unwrap_or_else(|| "recorded".into());
                SuiteComparison {
                    name,
                    source,
                    per_case: r.saturating_mul(providers.len() as u32),
                    providers,
                    fields: differential::fields(suite),
                    margin: suite.differential.margin(),
                    confidence: suite.stability.confidence.unwrap_or(DEFAULT_CONFIDENCE),
                }
            })
            .collect();
        Collector {
            comparisons,
            pending: HashMap::new(),
            results: HashMap::new(),
            unanswered: HashMap::new(),
            saved_before: HashMap::new(),
        }
    }

    /// Whether target `p` is the live reference of suite `s`: the candidates are judged
    /// against its answers, so its calls are never saved.
    pub fn is_live_reference(&self, p: usize, s: usize) -> bool {
        self.comparisons
            .get(s)
            .is_some_and(|comparison| comparison.source == Source::Live(p))
    }

    /// Counts one record of target `p` on suite `s`.
    pub fn add(&mut self, p: usize, s: usize, record: &mut CallRecord) {
        let Some(comparison) = self.comparisons.get(s) else {
            return;
        };
        let observed = record.differential.take();
        let key = (s, record.case.clone());
        // A recorded-reference suite compares only the cases that carry a reference; a
        // live one compares every case.
        if comparison.source == Source::Recorded
            && observed.is_none()
            && !self.pending.contains_key(&key)
        {
            if record.saved {
                *self.saved_before.entry(key).or_default() += 1;
            }
            return;
        }
        let saved_before = &mut self.saved_before;
        let pending = self.pending.entry(key).or_insert_with_key(|key| Pending {
            seen: saved_before.remove(key).unwrap_or(0),
            ..Pending::default()
        });
        pending.seen += 1;
        if let Some(o) = observed {
            if let Some(own) = o.own {
                pending.answers.entry(p).or_default().push(own);
            }
            if pending.recorded.is_none() {
                pending.recorded = o.recorded;
            }
        }
        if pending.seen >= comparison.per_case {
            let key = (s, record.case.clone());
            if let Some(done) = self.pending.remove(&key) {
                self.compare(s, &key.1, done);
            }
        }
    }

    fn compare(&mut self, s: usize, case: &str, done: Pending) {
        let comparison = &self.comparisons[s];
        let reference: &[Signature] = match &comparison.source {
            Source::Live(r) => done.answers.get(r).map(Vec::as_slice).unwrap_or(&[]),
            Source::Missing(_) => &[],
            Source::Recorded => done.recorded.as_deref().unwrap_or(&[]),
        };
        let name = &comparison.name;
        if reference.is_empty() && matches!(comparison.source, Source::Live(_)) {
            *self.unanswered.entry(s).or_default() += 1;
        }
        for &p in &comparison.providers {
            if comparison.source == Source::Live(p) {
                continue;
            }
            let candidate = done.answers.get(&p).map(Vec::as_slice).unwrap_or(&[]);
            self.results
                .entry((s, p))
                .or_insert_with(|| {
                    Differential::new(
                        name,
                        comparison.fields.clone(),
                        comparison.margin,
                        comparison.confidence,
                    )
                })
                .add_case(case, reference, candidate);
        }
    }

    /// The evidence of every (suite, candidate) with a reference, each field judged.
    pub fn finish(mut self) -> HashMap<(usize, usize), Differential> {
        for (s, comparison) in self.comparisons.iter().enumerate() {
            // A live or missing reference judges every candidate, answered or not.
            if comparison.source == Source::Recorded {
                continue;
            }
            for &p in &comparison.providers {
                if comparison.source == Source::Live(p) {
                    continue;
                }
                self.results.entry((s, p)).or_insert_with(|| {
                    Differential::new(
                        &comparison.name,
                        comparison.fields.clone(),
                        comparison.margin,
                        comparison.confidence,
                    )
                });
            }
        }
        for ((s, _), d) in self.results.iter_mut() {
            let comparison = &self.comparisons[*s];
            d.unavailable = match &comparison.source {
                Source::Missing(name) => Some(format!(
                    "the reference `{name}` was not run: add it to the providers of the run"
                )),
                // Cases the reference did not answer are left out; only a reference that
                // answered none leaves nothing to compare.
                Source::Live(_) if d.cases == 0 => Some(format!(
                    "the reference `{}` gave no usable answer to any case",
                    d.reference
                )),
                Source::Live(_) | Source::Recorded => None,
            };
            d.left_out = self.unanswered.get(s).copied().unwrap_or(0);
            d.finish();
        }
        self.results
    }
}
