//! How long a simulated provider takes: a fixed latency, or a log-normal distribution
//! given by its median and 95th percentile (the long right tail real providers have),
//! sampled deterministically so that a run's percentiles are the configured ones.

use std::time::Duration;

use crate::config::provider::SimConfig;

/// The latency of a simulation's answers, in the simulated (virtual) time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    Fixed(Duration),
    /// `ln(latency)` is normal with median `p50` and 95th percentile `p95`.
    LogNormal {
        p50: Duration,
        p95: Duration,
    },
}

/// The standard normal's 95th percentile.
const Z95: f64 = 1.644_853_626_951_472_2;

impl Latency {
    pub fn of(sim: &SimConfig) -> Latency {
        match (sim.latency_p50, sim.latency_p95) {
            (Some(p50), Some(p95)) => Latency::LogNormal { p50, p95 },
            _ => Latency::Fixed(sim.latency),
        }
    }

    /// The latency of the `n`-th answer. The quantiles are taken in the golden-ratio
    /// sequence, which spreads any run of consecutive answers evenly over the
    /// distribution: 100 answers have close to the configured percentiles.
    pub fn nth(&self, n: u64) -> Duration {
        match *self {
            Latency::Fixed(d) => d,
            Latency::LogNormal { p50, p95 } => {
                let u = ((n as f64 + 1.0) * 0.618_033_988_749_894_9).fract();
                let u = u.clamp(1e-9, 1.0 - 1e-9);
                let (m, s) = (p50.as_secs_f64(), p95.as_secs_f64());
                let sigma = (s / m).ln() / Z95;
                Duration::from_secs_f64(m * (sigma * inverse_normal(u)).exp())
            }
        }
    }
}

/// The standard normal quantile function (Acklam's rational approximation; relative
/// error below 1.2e-9).
fn inverse_normal(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inverse_normal_knows_its_landmarks() {
        assert!(inverse_normal(0.5).abs() < 1e-9);
        assert!((inverse_normal(0.95) - Z95).abs() < 1e-6);
        assert!((inverse_normal(0.01) + 2.326_347_874).abs() < 1e-6);
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
