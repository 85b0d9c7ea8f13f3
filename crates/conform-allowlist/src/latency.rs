//! Latency as evidence holds it: percentiles in milliseconds, and the fail-closed comparison
//! with a caller's bound.

use serde::{Deserialize, Serialize};

/// Three percentiles, in milliseconds, each within the evidence's `relative_error`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// The median.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The 99th percentile.
    pub p99: f64,
}

/// Whether a percentile `estimate` (within `relative_error` of the truth) may be above
/// `bound_ms`: an estimate within the error of the bound counts as above it, so a
/// latency objective fails closed.
pub fn may_exceed(estimate_ms: f64, relative_error: f64, bound_ms: f64) -> bool {
    estimate_ms / (1.0 - relative_error.clamp(0.0, 0.5)) > bound_ms
}

/// Milliseconds for people: `850 ms`, `2.10 s`, `3 min 05 s`.
pub fn words(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}
