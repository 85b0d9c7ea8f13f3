//! The schedule of a run: which calls it makes, in which order, which requests each
//! sends, and how many of them there are, for the whole run or for one shard.
//!
//! Before this module, five places worked the schedule out each for itself and agreed
//! by convention only:
//!
//! - the runner (`run::execute`) summed `cases of the shard × repeats` over the pairs a
//!   provider runs for the progress line, iterated suites (skipping those a simulation's
//!   `[sim] suites` leaves out) × cases (filtered with `Shard::owns`) × repeats per
//!   provider, and decided in `call_one` whether a call has a stream twin
//!   (`stream_agreement && config.stream`);
//! - `plan::plan` (`conform plan`, `run --dry-run`, and `plan::estimate` for the reports
//!   and the budget line) walked the same suites and the shard's cases again, with its
//!   own repeats override and its own twin rule doubling each case's requests;
//! - the budget's ceiling in `call_one` multiplied one request's price by the twin rule
//!   a third time, and shared the settled usage by it;
//! - the tallies (`tallies::planned_calls`, called once more by the runner) counted each
//!   pair's planned calls by hashing every case id again per pair, and the differential
//!   collector was given each suite's providers (`runs_suite`) and repeats separately,
//!   and `Tallies::verdicts` filtered the pairs by `runs_suite` once more;
//! - shards and merge: `Shard::owns` was the filter the three above each applied,
//!   `shard::ShardedRun::new` applied the repeats override once more, `merge::join` planned
//!   the whole run's tallies with its own call, `rejudge` had its own twin rule, and
//!   nothing checked a shard's record count against the calls the plan gives it.
//!
//! Now each of them asks a [`Schedule`], built once from the suites, the providers, the
//! repeats override and the shard.
//!
//! Invariants: the calls come in the runner's order, provider by provider, then suite,
//! case and repeat, each once; the planned counts (calls and requests, overall, per
//! (suite, provider) and per shard) are the number of calls (and their requests) the
//! iteration yields; a case belongs to exactly one shard of N, decided by the SHA-256 of
//! (suite, case id) alone ([`bucket`], the only implementation of the split), with all its
//! repeats and every provider's calls for it, so shards 1..=N together are the whole
//! schedule with no call twice. The iteration allocates nothing per call: memory stays
//! flat in the number of cases (a count of the shard's cases per suite is all it keeps).

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::shard::Shard;
use super::{PreparedSuite, Target};
use conform_config::{ProviderConfig, Suite};

/// One planned call: a case of a suite, sent to a provider, one of its repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    pub provider: usize,
    pub suite: usize,
    pub case: usize,
    pub repeat: u32,
    /// The call's request is a stream whose answer must agree with the same case sent
    /// unstreamed (the suite's `stream_agreement` with a provider that streams): once the
    /// streamed request has answered, the call sends that unstreamed twin too.
    pub twin: bool,
}

impl Call {
    /// The requests this call may send: its own, and its twin when it has one.
    pub fn requests(self) -> u64 {
        1 + u64::from(self.twin)
    }
}

/// Every suite's repeats in a run: `--repeats` overrides the suite's own.
pub fn repeats(suite: &Suite, over: Option<u32>) -> u32 {
    over.unwrap_or(suite.repeats)
}

/// The 0-based shard of (suite, case) among `n`: the first 8 bytes of SHA-256 over the
/// length-prefixed names, modulo n. Length prefixes keep (`a/b`, `c`) and (`a`, `b/c`)
/// apart.
fn bucket(suite: &str, case: &str, n: u32) -> u32 {
    let mut hash = Sha256::new();
    for part in [suite, case] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(n.max(1))) as u32
}

/// The shard filter: whether `shard` (every case, when none) runs `case` of `suite`.
fn owns(shard: Option<Shard>, suite: &str, case: &str) -> bool {
    shard.is_none_or(|shard| bucket(suite, case, shard.n) == shard.k.wrapping_sub(1))
}

/// A suite as the schedule runs it.
#[derive(Debug)]
struct Planned<'a> {
    suite: &'a Suite,
    repeats: u32,
    /// Its cases in the shard (all of them without one).
    cases: u64,
}

/// What one provider does with one suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    /// Not run: a simulation's `[sim] suites` leaves the suite out.
    Skipped,
    Runs {
        twin: bool,
    },
}

/// The calls of a run (or of one shard of it), built once from its suites, providers,
/// repeats override and shard. Cheap to build: one pass over the case ids when sharded,
/// none otherwise.
#[derive(Debug)]
pub struct Schedule<'a> {
    suites: Vec<Planned<'a>>,
    /// Provider-major: `pairs[p * suites + s]`.
    pairs: Vec<Pair>,
    shard: Option<Shard>,
}

impl<'a> Schedule<'a> {
    /// The schedule of `suites` × `providers`, each suite `repeats` times (its own when
    /// `None`), of `shard`'s cases only when there is one.
    pub fn new<'p>(
        suites: impl IntoIterator<Item = &'a Suite>,
        providers: impl IntoIterator<Item = &'p ProviderConfig>,
        repeats: Option<u32>,
        shard: Option<Shard>,
    ) -> Schedule<'a> {
        let suites: Vec<Planned<'a>> = suites
            .into_iter()
            .map(|suite| Planned {
                suite,
                repeats: self::repeats(suite, repeats),
                cases: match shard {
                    None => suite.cases.len() as u64,
                    Some(_) => (suite.cases.iter())
                        .filter(|c| owns(shard, &suite.name, &c.id))
                        .count() as u64,
                },
            })
            .collect();
        let pairs = providers
            .into_iter()
            .flat_map(|config| {
                suites.iter().map(move |planned| {
                    if config.runs_suite(&planned.suite.name) {
                        Pair::Runs {
                            twin: planned.suite.stream_agreement && config.stream,
                        }
                    } else {
                        Pair::Skipped
                    }
                })
            })
            .collect();
        Schedule {
            suites,
            pairs,
            shard,
        }
    }

    /// The schedule of a run's prepared suites and targets.
    pub fn of_run(
        suites: &'a [Arc<PreparedSuite>],
        targets: &[Arc<Target>],
        repeats: Option<u32>,
        shard: Option<Shard>,
    ) -> Schedule<'a> {
        Schedule::new(
            suites.iter().map(|s| &s.suite),
            targets.iter().map(|t| t.endpoint.config.as_ref()),
            repeats,
            shard,
        )
    }

    /// The shard this schedule is of; `None` for a whole run.
    pub fn shard(&self) -> Option<Shard> {
        self.shard
    }

    pub fn n_suites(&self) -> usize {
        self.suites.len()
    }

    pub fn n_providers(&self) -> usize {
        self.pairs.len().checked_div(self.suites.len()).unwrap_or(0)
    }

    fn pair(&self, provider: usize, suite: usize) -> Pair {
        let at = provider * self.suites.len() + suite;
        self.pairs.get(at).copied().unwrap_or(Pair::Skipped)
    }

    /// Whether provider `provider` runs suite `suite` at all.
    pub fn runs(&self, provider: usize, suite: usize) -> bool {
        self.pair(provider, suite) != Pair::Skipped
    }

    /// Whether the calls of `provider` on `suite` each have a stream twin ([`Call::twin`]).
    pub fn twin(&self, provider: usize, suite: usize) -> bool {
        self.pair(provider, suite) == Pair::Runs { twin: true }
    }

    /// How many times each case of `suite` is sent to every provider that runs it.
    pub fn repeats(&self, suite: usize) -> u32 {
        self.suites.get(suite).map_or(0, |s| s.repeats)
    }

    /// The providers that run `suite`, in order.
    pub fn providers_of(&self, suite: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.n_providers()).filter(move |&p| self.runs(p, suite))
    }

    /// The indices of `suite`'s cases this schedule runs, in order: the shard's share is
    /// filtered as it goes, so no list of cases is made.
    pub fn cases(&self, suite: usize) -> impl Iterator<Item = usize> + Send + '_ {
        let (name, cases): (&str, &[conform_config::CaseRef]) = match self.suites.get(suite) {
            Some(p) => (&p.suite.name, &p.suite.cases),
            None => ("", &[]),
        };
        let shard = self.shard;
        (cases.iter().enumerate())
            .filter(move |(_, c)| owns(shard, name, &c.id))
            .map(|(i, _)| i)
    }

    /// Every call of `provider`, in order: suite by suite, then case, then repeat.
    pub fn calls_of(&self, provider: usize) -> impl Iterator<Item = Call> + Send + '_ {
        (0..self.suites.len())
            .filter_map(move |suite| match self.pair(provider, suite) {
                Pair::Skipped => None,
                Pair::Runs { twin } => Some((suite, twin)),
            })
            .flat_map(move |(suite, twin)| {
                let repeats = self.repeats(suite);
                self.cases(suite).flat_map(move |case| {
                    (0..repeats).map(move |repeat| Call {
                        provider,
                        suite,
                        case,
                        repeat,
                        twin,
                    })
                })
            })
    }

    /// Every call of the schedule, provider by provider.
    pub fn calls(&self) -> impl Iterator<Item = Call> + Send + '_ {
        (0..self.n_providers()).flat_map(move |p| self.calls_of(p))
    }

    /// The calls of `provider` on `suite` (0 for a pair not run).
    pub fn planned_calls(&self, provider: usize, suite: usize) -> u64 {
        match (self.pair(provider, suite), self.suites.get(suite)) {
            (Pair::Runs { .. }, Some(s)) => s.cases * u64::from(s.repeats),
            _ => 0,
        }
    }

    /// The requests one case of `suite` sends to `provider` over its repeats: twice as
    /// many with a stream twin.
    pub fn case_requests(&self, provider: usize, suite: usize) -> u64 {
        match self.pair(provider, suite) {
            Pair::Skipped => 0,
            Pair::Runs { twin } => u64::from(self.repeats(suite)) * (1 + u64::from(twin)),
        }
    }

    /// The requests the calls of `provider` on `suite` may send, twins included.
    pub fn planned_requests(&self, provider: usize, suite: usize) -> u64 {
        match (self.pair(provider, suite), self.suites.get(suite)) {
            (Pair::Runs { twin }, Some(s)) => {
                s.cases * u64::from(s.repeats) * (1 + u64::from(twin))
            }
            _ => 0,
        }
    }

    fn each_pair(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.n_providers()).flat_map(move |p| (0..self.suites.len()).map(move |s| (p, s)))
    }

    /// Every call of the schedule.
    pub fn total_calls(&self) -> u64 {
        (self.each_pair())
            .map(|(p, s)| self.planned_calls(p, s))
            .sum()
    }

    /// Every request the schedule's calls may send.
    pub fn total_requests(&self) -> u64 {
        (self.each_pair())
            .map(|(p, s)| self.planned_requests(p, s))
            .sum()
    }

    /// The calls of this schedule that each shard of `n` holds: `[k - 1]` is shard k's,
    /// from one digest per case (what the schedule of `--shard k/n` plans, without
    /// building n schedules).
    pub fn calls_by_shard(&self, n: u32) -> Vec<u64> {
        let mut calls = vec![0u64; n.max(1) as usize];
        for (s, planned) in self.suites.iter().enumerate() {
            let per_case: u64 = (0..self.n_providers())
                .filter(|&p| self.runs(p, s))
                .map(|_| u64::from(planned.repeats))
                .sum();
            for case in self.cases(s) {
                let id = &planned.suite.cases[case].id;
                calls[bucket(&planned.suite.name, id, n) as usize] += per_case;
            }
        }
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_belongs_to_exactly_one_shard() {
        for n in [1, 2, 4, 7] {
            for i in 0..200 {
                let case = format!("{i:03}-case");
                let owners = (1..=n)
                    .filter(|&k| owns(Some(Shard { k, n }), "invoice-extraction", &case))
                    .count();
                assert_eq!(owners, 1, "{case} in {n} shards");
                assert!(owns(None, "invoice-extraction", &case));
            }
        }
    }

    #[test]
    fn the_split_is_fixed_and_spreads_the_work() {
        // A fixed value: a change of hash or of byte order would split differently on
        // machines running different versions, and merges would refuse.
        assert_eq!(bucket("invoice-extraction", "001-us-freelance", 7), {
            let d = Sha256::new()
                .chain_update(18u64.to_be_bytes())
                .chain_update(b"invoice-extraction")
                .chain_update(16u64.to_be_bytes())
                .chain_update(b"001-us-freelance")
                .finalize();
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[..8]);
            (u64::from_be_bytes(b) % 7) as u32
        });
        let mut counts = [0u32; 4];
        for i in 0..400 {
            counts[bucket("s", &format!("case-{i}"), 4) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (60..=140).contains(&c)),
            "{counts:?}"
        );
        // The suite is part of the key: the same case id in two suites may split apart.
        assert!((0..50).any(|i| {
            let case = format!("c{i}");
            bucket("a", &case, 7) != bucket("b", &case, 7)
        }));
        assert_ne!(bucket("a/b", "c", 1000), bucket("a", "b/c", 1000));
    }
}
