//! What a count of failures rules out.
//!
//! Every conformant verdict states the failure rate its calls exclude: with `f` failures
//! in `n` calls, the one-sided Clopper–Pearson upper bound at the given confidence (for
//! no failure, `1 − (1 − confidence)^(1/n)`, about `3/n` at 95 %). It is exact (never
//! below the nominal coverage), so a permit never claims more than its calls showed.

/// The confidence every permit's statement is made at.
pub const CONFIDENCE: f64 = 0.95;

/// The smallest failure rate `p` that `failures` in `calls` rule out at `confidence`: a
/// provider failing at least that often would have shown more failures than this, with
/// probability at least `confidence`. 1 when there are no calls.
pub fn failure_rate_upper_bound(failures: u64, calls: u64, confidence: f64) -> f64 {
    if calls == 0 || failures >= calls {
        return 1.0;
    }
    let alpha = 1.0 - confidence;
    if failures == 0 {
        return 1.0 - alpha.powf(1.0 / calls as f64);
    }
    // P(X ≤ failures | calls, p) falls as p grows: bisect for where it equals alpha.
    let (mut low, mut high) = (failures as f64 / calls as f64, 1.0);
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        if binomial_cdf(failures, calls, mid) > alpha {
            low = mid;
        } else {
            high = mid;
        }
    }
    high
}

/// P(X ≤ k) for X ~ Binomial(n, p), summed in log space so that large n stays finite.
fn binomial_cdf(k: u64, n: u64, p: f64) -> f64 {
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return if k >= n { 1.0 } else { 0.0 };
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    // log C(n, 0) p^0 q^n, then each term from the one before.
    let mut log_term = n as f64 * lq;
    let mut total = log_term.exp();
    for i in 1..=k {
        log_term += ((n - i + 1) as f64).ln() - (i as f64).ln() + lp - lq;
        total += log_term.exp();
    }
    total.min(1.0)
}

/// The standard normal quantile (Acklam's rational approximation, relative error
/// below 1.2e-9), for `p` in (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
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
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.024_25 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.024_25 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The largest excess disagreement of a candidate over the reference's own that a
/// comparison of `candidate` agreeing pairs (agreeing, pairs) with the reference's floor
/// (agreeing, pairs among its own answers) cannot rule out at `confidence`: the one-sided
/// upper confidence bound of `floor − candidate agreement`, each proportion estimated as
/// the comparison's test estimates it (one agreeing and one disagreeing pair added:
/// Agresti and Caffo), never below 0. A drift larger than this would have shown, with
/// probability `confidence`; `None` when either side has no pairs (nothing is ruled out).
///
/// ```
/// use conform_allowlist::stats::drift_upper_bound;
/// // 120 pairs, all agreeing, against a floor of 120 of 120: drifts above 1.9 % are ruled out.
/// let d = drift_upper_bound((120, 120), (120, 120), 0.95).unwrap();
/// assert!(d > 0.015 && d < 0.025, "{d}");
/// // A candidate agreeing on 92.5 % of pairs may drift by 12 %: not the 2.5 % its own checks rule out.
/// assert!(drift_upper_bound((111, 120), (120, 120), 0.95).unwrap() > 0.1);
/// ```
pub fn drift_upper_bound(candidate: (u64, u64), floor: (u64, u64), confidence: f64) -> Option<f64> {
    if candidate.1 == 0 || floor.1 == 0 {
        return None;
    }
    let adjusted = |(agreeing, pairs): (u64, u64)| {
        let n = pairs as f64 + 2.0;
        ((agreeing.min(pairs) as f64 + 1.0) / n, n)
    };
    let (pc, nc) = adjusted(candidate);
    let (pf, nf) = adjusted(floor);
    let se = (pc * (1.0 - pc) / nc + pf * (1.0 - pf) / nf).sqrt();
    Some(((pf - pc) + normal_quantile(confidence) * se).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_failure_rules_out_about_three_over_n() {
        let bound = failure_rate_upper_bound(0, 100, 0.95);
        assert!((bound - 0.029_513).abs() < 1e-5, "{bound}");
        assert!((failure_rate_upper_bound(0, 1000, 0.95) * 1000.0 - 3.0).abs() < 0.01);
        // One call rules out only a provider that always fails.
        assert!((failure_rate_upper_bound(0, 1, 0.95) - 0.95).abs() < 1e-12);
        assert_eq!(failure_rate_upper_bound(0, 0, 0.95), 1.0);
        assert_eq!(failure_rate_upper_bound(5, 5, 0.95), 1.0);
    }

    #[test]
    fn matches_published_clopper_pearson_bounds() {
        // One-sided 95 % upper limits (the beta quantiles): 1 of 20 → 0.2161,
        // 2 of 100 → 0.0616, 10 of 50 → 0.3157.
        for (f, n, want) in [(1, 20, 0.2161), (2, 100, 0.0616), (10, 50, 0.3157)] {
            let got = failure_rate_upper_bound(f, n, 0.95);
            assert!((got - want).abs() < 5e-4, "{f}/{n}: {got} against {want}");
        }
    }

    #[test]
    fn the_normal_quantile_knows_its_landmarks() {
        assert!(normal_quantile(0.5).abs() < 1e-9);
        assert!((normal_quantile(0.95) - 1.644_853_627).abs() < 1e-6);
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.01) + 2.326_347_874).abs() < 1e-6);
    }

    #[test]
    fn a_drift_bound_shrinks_with_pairs_and_grows_with_disagreement() {
        let d = |c, f| drift_upper_bound(c, f, 0.95).unwrap();
        assert!(d((1200, 1200), (1200, 1200)) < d((120, 120), (120, 120)));
        assert!(d((100, 120), (120, 120)) > d((110, 120), (120, 120)));
        // A candidate that agrees more than the floor: no drift, but its bound is not 0.
        assert!(d((120, 120), (100, 120)) < 0.05);
        assert_eq!(drift_upper_bound((0, 0), (5, 5), 0.95), None);
        assert!(d((111, 120), (120, 120)) > 0.075);
    }

    #[test]
    fn more_calls_and_fewer_failures_rule_out_more() {
        let b = |f, n| failure_rate_upper_bound(f, n, 0.95);
        assert!(b(0, 200) < b(0, 100));
        assert!(b(1, 100) > b(0, 100));
        assert!(failure_rate_upper_bound(0, 100, 0.99) > b(0, 100));
        // Large counts stay finite and ordered.
        let big = b(1_000, 1_000_000);
        assert!(big > 0.001 && big < 0.0011, "{big}");
    }
}
