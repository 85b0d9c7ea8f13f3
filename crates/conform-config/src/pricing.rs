//! `[pricing]` in a provider file: USD per million tokens, for `conform plan`, `--budget`
//! and the cost the reports show. Prices never shape answers: they stay out of the
//! provider digest, so changing one keeps the allowlist entries valid.

use serde::{Deserialize, Serialize};

/// USD per million tokens, as the vendor's price list gives them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pricing {
    /// USD per million prompt tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
    /// Cached prompt tokens, where the vendor bills them apart (cheaper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
}

/// A cost interval in USD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CostRange {
    /// The least it may cost.
    pub low: f64,
    /// The most it may cost.
    pub high: f64,
}

impl CostRange {
    /// Adds `other` to this range, bound by bound.
    pub fn add(&mut self, other: CostRange) {
        self.low += other.low;
        self.high += other.high;
    }

    /// `usd` is within the range, allowing for rounding in the last bits.
    pub fn contains(&self, usd: f64) -> bool {
        // Sums of products of decimal prices: allow for the rounding of the last bits.
        let slack = 1e-9 * self.high.abs().max(1.0);
        usd >= self.low - slack && usd <= self.high + slack
    }
}

/// How far a prompt count that is not exact (a chat template applied by the server, tool
/// declarations rendered by the vendor) may be from what the vendor bills.
pub const INEXACT_PROMPT_MARGIN: f64 = 0.25;

impl Pricing {
    /// The field problems: every price a finite, non-negative number.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let mut check = |field: &'static str, value: f64| {
            if !(value.is_finite() && value >= 0.0) {
                problems.push((
                    field,
                    format!("{value} is not a price: USD per million tokens, 0 or more"),
                ));
            }
        };
        check("pricing.input_per_mtok", self.input_per_mtok);
        check("pricing.output_per_mtok", self.output_per_mtok);
        if let Some(cached) = self.cached_input_per_mtok {
            check("pricing.cached_input_per_mtok", cached);
        }
        problems
    }

    /// What one call may cost: at least every prompt token at the cheapest input price
    /// (all of it cached) and no output; at most every prompt token at the full input
    /// price and `max_output` output tokens (the ceiling sent as max_tokens). A prompt
    /// count that is not exact is widened by [`INEXACT_PROMPT_MARGIN`] both ways.
    pub fn call_range(&self, prompt_tokens: u64, exact: bool, max_output: u64) -> CostRange {
        let margin = if exact { 0.0 } else { INEXACT_PROMPT_MARGIN };
        let prompt = prompt_tokens as f64;
        let cheapest = self
            .cached_input_per_mtok
            .map_or(self.input_per_mtok, |c| c.min(self.input_per_mtok));
        CostRange {
            low: prompt * (1.0 - margin) * cheapest / 1e6,
            high: (prompt * (1.0 + margin) * self.input_per_mtok
                + max_output as f64 * self.output_per_mtok)
                / 1e6,
        }
    }

    /// What tokens the provider reported as used cost, every prompt token at the full
    /// input price (usage does not say which were cached, so this is the most they cost).
    pub fn cost(&self, prompt_tokens: u64, output_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input_per_mtok + output_tokens as f64 * self.output_per_mtok)
            / 1e6
    }
}

/// What one (suite, provider) cost, beside what the plan said it would: the run's
/// reports show both.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairCost {
    /// The provider's prices the cost was counted at.
    pub pricing: Pricing,
    /// The plan's range for the pair's planned calls, when it was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<CostRange>,
    /// USD by the usage the calls reported (prompt tokens at the full input price).
    pub actual_usd: f64,
    /// Prompt tokens the calls reported.
    pub prompt_tokens: u64,
    /// Output tokens the calls reported.
    pub output_tokens: u64,
    /// Calls that came back without a usage count: their cost is not in `actual_usd`.
    pub calls_without_usage: u64,
}

impl PairCost {
    /// Nothing spent yet, at `pricing`.
    pub fn new(pricing: Pricing) -> PairCost {
        PairCost {
            pricing,
            estimate: None,
            actual_usd: 0.0,
            prompt_tokens: 0,
            output_tokens: 0,
            calls_without_usage: 0,
        }
    }

    /// Adds one call's reported usage; a call not sent is no call.
    pub fn add(&mut self, prompt_tokens: Option<u64>, output_tokens: Option<u64>) {
        match (prompt_tokens, output_tokens) {
            (Some(p), Some(o)) => {
                self.prompt_tokens += p;
                self.output_tokens += o;
                self.actual_usd += self.pricing.cost(p, o);
            }
            _ => self.calls_without_usage += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPT_4O_MINI: Pricing = Pricing {
        input_per_mtok: 0.15,
        output_per_mtok: 0.60,
        cached_input_per_mtok: Some(0.075),
    };

    #[test]
    fn a_call_costs_between_its_cached_prompt_and_its_full_ceiling() {
        let r = GPT_4O_MINI.call_range(1000, true, 1024);
        assert!((r.low - 1000.0 * 0.075 / 1e6).abs() < 1e-15);
        assert!((r.high - (1000.0 * 0.15 + 1024.0 * 0.60) / 1e6).abs() < 1e-15);
        let cost = GPT_4O_MINI.cost(1000, 60);
        assert!((cost - (1000.0 * 0.15 + 60.0 * 0.6) / 1e6).abs() < 1e-15);
        assert!(r.contains(cost));
        assert!(!r.contains(r.high * 1.01));
        let loose = GPT_4O_MINI.call_range(1000, false, 1024);
        assert!(loose.low < r.low && loose.high > r.high);
    }

    #[test]
    fn prices_must_be_numbers_of_dollars() {
        let bad = Pricing {
            input_per_mtok: -1.0,
            output_per_mtok: f64::NAN,
            cached_input_per_mtok: Some(0.1),
        };
        let fields: Vec<_> = bad.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            ["pricing.input_per_mtok", "pricing.output_per_mtok"]
        );
        assert!(GPT_4O_MINI.problems().is_empty());
    }
}
