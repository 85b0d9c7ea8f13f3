//! Latency percentiles from a streaming histogram: bounded memory whatever the number of
//! calls, and a stated relative error.
//!
//! Values are counted in logarithmic buckets of microseconds: bucket `i` holds the values
//! in `(γ^(i-1), γ^i]` with `γ = (1 + α) / (1 - α)`, and answers with `2γ^i / (γ + 1)`,
//! which is within `α` ([`RELATIVE_ERROR`], 1 %) of every value in the bucket. A
//! percentile is the nearest-rank value (the `⌈q·n⌉`-th smallest), so the histogram's
//! answer is within 1 % of the exact one. There are at most [`MAX_BUCKETS`] buckets
//! (1 µs to 11 days; a value below 1 µs counts as 0, one above as the last bucket), so
//! one histogram never holds more than 11 KB of counts. A hand-written histogram rather
//! than a crate: this is 100 lines with the error bound proven by its tests, and the
//! bucket layout is what `report.json` and the allowlist describe.

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

// Percentiles and the words for them are what an allowlist entry holds and a reader prints.
pub use conform_allowlist::latency::{Percentiles, may_exceed, words};

/// The largest relative error of any percentile.
pub const RELATIVE_ERROR: f64 = 0.01;

/// `(1 + α) / (1 - α)`.
const GAMMA: f64 = (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR);

/// Buckets up to `γ^MAX_BUCKETS` µs, about 11 days.
pub const MAX_BUCKETS: usize = 1400;

/// Counts of latencies, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `counts[i]`: values in bucket `i`; grown to the highest bucket used.
    counts: Vec<u64>,
    /// Values below 1 µs.
    zeros: u64,
    total: u64,
    /// The exact extremes: a percentile never answers outside them.
    min: f64,
    max: f64,
}

impl Histogram {
    /// Counts one latency in milliseconds; a negative or non-finite one is not a latency.
    pub fn record(&mut self, millis: f64) {
        if !millis.is_finite() || millis < 0.0 {
            return;
        }
        if self.total == 0 {
            (self.min, self.max) = (millis, millis);
        } else {
            self.min = self.min.min(millis);
            self.max = self.max.max(millis);
        }
        self.total += 1;
        let micros = millis * 1000.0;
        if micros < 1.0 {
            self.zeros += 1;
            return;
        }
        let i = ((micros.ln() / GAMMA.ln()).ceil() as usize).min(MAX_BUCKETS - 1);
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
    }

    /// How many latencies were counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile (`0 < q <= 1`) in milliseconds, within [`RELATIVE_ERROR`] of the
    /// exact nearest-rank value; `None` when nothing was counted.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        if rank >= self.total {
            return Some(self.max);
        }
        if rank <= self.zeros {
            return Some(self.min.max(0.0));
        }
        let mut seen = self.zeros;
        for (i, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let estimate = 2.0 * GAMMA.powi(i as i32) / (GAMMA + 1.0) / 1000.0;
                return Some(estimate.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// p50, p95 and p99; `None` when nothing was counted.
    pub fn percentiles(&self) -> Option<Percentiles> {
        Some(Percentiles {
            p50: self.quantile(0.50)?,
            p95: self.quantile(0.95)?,
            p99: self.quantile(0.99)?,
        })
    }

    /// The largest latency counted, exactly.
    pub fn max(&self) -> Option<f64> {
        (self.total > 0).then_some(self.max)
    }

    /// Bytes of counts held: bounded by [`MAX_BUCKETS`], whatever the number of values.
    pub fn footprint(&self) -> usize {
        self.counts.capacity() * std::mem::size_of::<u64>()
    }
}

impl Serialize for Histogram {
    /// What the reports show: the count, the percentiles, the exact maximum and the error.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("Histogram", 6)?;
        let round = |v: Option<f64>| v.map(|v| (v * 10.0).round() / 10.0);
        out.serialize_field("count", &self.total)?;
        out.serialize_field("p50_ms", &round(self.quantile(0.50)))?;
        out.serialize_field("p95_ms", &round(self.quantile(0.95)))?;
        out.serialize_field("p99_ms", &round(self.quantile(0.99)))?;
        out.serialize_field("max_ms", &round(self.max()))?;
        out.serialize_field("relative_error", &RELATIVE_ERROR)?;
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reproducible source of log-normal latencies (xorshift and Box-Muller), so the
    /// test needs no random crate.
    struct Latencies(u64);

    impl Latencies {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        /// Milliseconds: median 800, a long tail.
        fn next(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            800.0 * (1.2 * z).exp()
        }
    }

    fn exact(sorted: &[f64], q: f64) -> f64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    #[test]
    fn a_hundred_thousand_latencies_agree_with_the_exact_percentiles_in_bounded_memory() {
        let mut source = Latencies(0x9e37_79b9_7f4a_7c15);
        let mut h = Histogram::default();
        let mut all = Vec::with_capacity(100_000);
        let mut footprint_at_1000 = 0;
        for i in 0..100_000 {
            let v = source.next();
            h.record(v);
            all.push(v);
            if i == 999 {
                footprint_at_1000 = h.footprint();
            }
        }
        all.sort_by(f64::total_cmp);
        for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0] {
            let (got, want) = (h.quantile(q).unwrap(), exact(&all, q));
            let error = (got - want).abs() / want;
            assert!(
                error <= RELATIVE_ERROR,
                "q {q}: {got} vs exact {want}: {error}"
            );
        }
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.max(), all.last().copied());
        // Bounded: never more than MAX_BUCKETS counts, and a hundred times the values
        // did not grow it beyond that bound.
        assert!(h.footprint() <= MAX_BUCKETS * 8, "{}", h.footprint());
        assert!(footprint_at_1000 <= MAX_BUCKETS * 8);
    }

    #[test]
    fn extremes_and_nothing() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.percentiles(), None);
        h.record(f64::NAN);
        h.record(-1.0);
        assert_eq!(h.count(), 0);
        h.record(0.0);
        h.record(1e12);
        assert_eq!(h.quantile(0.5), Some(0.0));
        assert_eq!(h.quantile(1.0), Some(1e12));
        assert!(h.footprint() <= MAX_BUCKETS * 8);
    }

    #[test]
    fn a_percentile_within_the_error_of_the_bound_may_exceed_it() {
        assert!(may_exceed(20_000.0, RELATIVE_ERROR, 5_000.0));
        assert!(may_exceed(4_980.0, RELATIVE_ERROR, 5_000.0));
        assert!(!may_exceed(4_900.0, RELATIVE_ERROR, 5_000.0));
    }

    mod property {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn any_quantile_of_any_latencies_is_within_the_stated_error(
                values in proptest::collection::vec(0.001f64..3_600_000.0, 1..400),
                q in 0.001f64..=1.0,
            ) {
                let mut h = Histogram::default();
                for v in &values {
                    h.record(*v);
                }
                let mut sorted = values.clone();
                sorted.sort_by(f64::total_cmp);
                let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
                let want = sorted[rank - 1];
                let got = h.quantile(q).unwrap();
                prop_assert!((got - want).abs() <= RELATIVE_ERROR * want + 1e-9,
                    "q {} got {} want {}", q, got, want);
            }
        }
    }
}
