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
