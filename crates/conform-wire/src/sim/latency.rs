//! How long a simulated provider takes: a fixed latency, or a log-normal distribution
//! given by its median and 95th percentile (the long right tail real providers have),
//! sampled deterministically so that a run's percentiles are the configured ones.

use std::time::Duration;

use conform_config::provider::SimConfig;

/// The latency of a simulation's answers, in the simulated (virtual) time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Latency {
    Fixed(Duration),
    /// `ln(latency)` is normal with median `p50` and 95th percentile `p95`.
    LogNormal {
        p50: Duration,
        p95: Duration,
    },
}

use conform_allowlist::stats::normal_quantile;

/// The standard normal's 95th percentile.
const Z95: f64 = 1.644_853_626_951_472_2;

impl Latency {
    pub(crate) fn of(sim: &SimConfig) -> Latency {
        match (sim.latency_p50, sim.latency_p95) {
            (Some(p50), Some(p95)) => Latency::LogNormal { p50, p95 },
            _ => Latency::Fixed(sim.latency),
        }
    }

    /// The latency of the `n`-th answer. The quantiles are taken in the golden-ratio
    /// sequence, which spreads any run of consecutive answers evenly over the
    /// distribution: 100 answers have close to the configured percentiles.
    pub(crate) fn nth(&self, n: u64) -> Duration {
        match *self {
            Latency::Fixed(d) => d,
            Latency::LogNormal { p50, p95 } => {
                let u = ((n as f64 + 1.0) * 0.618_033_988_749_894_9).fract();
                let u = u.clamp(1e-9, 1.0 - 1e-9);
                let (m, s) = (p50.as_secs_f64(), p95.as_secs_f64());
                let sigma = (s / m).ln() / Z95;
                Duration::from_secs_f64(m * (sigma * normal_quantile(u)).exp())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inverse_normal_knows_its_landmarks() {
        assert!(normal_quantile(0.5).abs() < 1e-9);
        assert!((normal_quantile(0.95) - Z95).abs() < 1e-6);
        assert!((normal_quantile(0.01) + 2.326_347_874).abs() < 1e-6);
    }

    #[test]
    fn a_thousand_answers_have_the_configured_percentiles() {
        let l = Latency::LogNormal {
            p50: Duration::from_secs(2),
            p95: Duration::from_secs(20),
        };
        let mut all: Vec<f64> = (0..1000).map(|n| l.nth(n).as_secs_f64()).collect();
        all.sort_by(f64::total_cmp);
        let p50 = all[499];
        let p95 = all[949];
        assert!((p50 / 2.0 - 1.0).abs() < 0.05, "{p50}");
        assert!((p95 / 20.0 - 1.0).abs() < 0.05, "{p95}");
    }
}
