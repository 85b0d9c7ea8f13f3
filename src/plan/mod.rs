//! `conform plan` and `run --dry-run`: per provider and suite, the calls a run would make,
//! their exact prompt tokens (the provider's local tokenizer), the output-token ceiling
//! (max_tokens) and, with `[pricing]`, the cost range; and the estimate each run's
//! reports set beside the actual cost.
//!
//! Invariants: nothing here sends a request; every case is rendered exactly as the
//! runner renders it and counted as the runner counts it, so the plan's per-call range
//! holds the cost of each call the provider bills within max_tokens; a prompt that no
//! local tokenizer counts exactly is estimated (bytes / 4, as the runner reserves rate
//! limits) and marked inexact, and its range widened.

pub mod project;

use std::sync::Arc;

use serde::Serialize;

use crate::run::schedule::Schedule;
use crate::run::shard::Shard;
use crate::run::{PairVerdict, PreparedSuite, Target};
use conform_config::pricing::CostRange;
use conform_config::{Diagnostics, ProviderConfig};
use conform_wire::tokenize::Counter;

/// One case's call to one provider, as planned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallPlan {
    pub case: String,
    pub prompt_tokens: u64,
    /// Counted by a local tokenizer that renders the prompt as the provider does.
    pub exact: bool,
    /// The range of one such call (each repeat costs the same), with `[pricing]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostRange>,
}

/// One (suite, provider) of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairPlan {
    pub suite: String,
    pub provider: String,
    pub tokenizer: String,
    /// Requests the run sends: cases × repeats, twice where a streamed answer is
    /// checked against an unstreamed one.
    pub calls: u64,
    /// Prompt tokens over every call.
    pub prompt_tokens: u64,
    /// Whether every prompt was counted exactly.
    pub exact: bool,
    /// max_tokens of one call.
    pub max_output_tokens: u32,
    /// Output tokens the calls may use at most.
    pub output_ceiling: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostRange>,
    pub cases: Vec<CallPlan>,
}

/// The plan of a run: every pair, and the total cost range when every provider is priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPlan {
    pub pairs: Vec<PairPlan>,
    /// Over every pair; `None` when some provider has no `[pricing]`.
    pub cost: Option<CostRange>,
    /// Providers without `[pricing]`.
    pub unpriced: Vec<String>,
}

/// The plan of these suites and providers, each counted by its own tokenizer.
pub fn for_providers(
    suites: &[Arc<PreparedSuite>],
    providers: &[Arc<ProviderConfig>],
    repeats: Option<u32>,
    shard: Option<Shard>,
) -> Result<RunPlan, Diagnostics> {
    let mut problems = Diagnostics::default();
    let mut counted = Vec::new();
    for config in providers {
        match Counter::for_provider(config) {
            Ok(counter) => counted.push((Arc::clone(config), counter)),
            Err(d) => problems.extend(d),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    plan(suites, &counted, repeats, shard)
}

/// The estimate a run's reports set beside each pair's actual cost: the plan of these
/// targets, as `schedule` (the run's own) makes its calls, when one of them is priced
/// (else there is nothing to estimate).
pub fn estimate(
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    schedule: &Schedule<'_>,
) -> Result<Option<RunPlan>, Diagnostics> {
    if !targets.iter().any(|t| t.endpoint.config.pricing.is_some()) {
        return Ok(None);
    }
    let counted: Vec<_> = targets
        .iter()
        .map(|t| (Arc::clone(&t.endpoint.config), t.counter.clone()))
        .collect();
    scheduled(suites, &counted, schedule).map(Some)
}

/// Plans `suites` × `providers` (each with the counter built for it). A case that does not
/// render is a problem returned with every other.
pub fn plan(
    suites: &[Arc<PreparedSuite>],
    providers: &[(Arc<ProviderConfig>, Counter)],
    repeats: Option<u32>,
    shard: Option<Shard>,
) -> Result<RunPlan, Diagnostics> {
    let schedule = Schedule::new(
        suites.iter().map(|s| &s.suite),
        providers.iter().map(|(c, _)| c.as_ref()),
        repeats,
        shard,
    );
    scheduled(suites, providers, &schedule)
}

/// [`plan`], of the calls `schedule` makes: `providers[p]` is its provider `p`.
fn scheduled(
    suites: &[Arc<PreparedSuite>],
    providers: &[(Arc<ProviderConfig>, Counter)],
    schedule: &Schedule<'_>,
) -> Result<RunPlan, Diagnostics> {
    let mut problems = Diagnostics::default();
    let mut pairs = Vec::new();
    for (p, (config, counter)) in providers.iter().enumerate() {
        for (s, prepared) in suites.iter().enumerate() {
            if !schedule.runs(p, s) {
                continue;
            }
            let suite = &prepared.suite;
            // Every repeat of a case, and its stream twin, costs what its first request does.
            let calls = schedule.case_requests(p, s);
            let max_output = u64::from(config.max_output_tokens);
            let mut pair = PairPlan {
                suite: suite.name.clone(),
                provider: config.name.clone(),
                tokenizer: counter.describe().to_string(),
                calls: 0,
                prompt_tokens: 0,
                exact: true,
                max_output_tokens: config.max_output_tokens,
                output_ceiling: 0,
                cost: config.pricing.map(|_| CostRange::default()),
                cases: Vec::new(),
            };
            for index in schedule.cases(s) {
                let (case, rendered) = match prepared.load_request(index) {
                    Ok(loaded) => loaded,
                    Err(d) => {
                        problems.extend(d);
                        continue;
                    }
                };
                let prompt = &rendered.prompt;
                let (tokens, exact) = match counter
                    .count_call_local(prompt, rendered.conversation.as_ref())
                {
                    Some(Ok(count)) => (count.tokens, count.exact),
                    // The runner's own fallback when nothing counts the prompt locally.
                    _ => (
                        (prompt.user.len() + prompt.system.as_ref().map_or(0, String::len)) as u64
                            / 4,
                        false,
                    ),
                };
                let cost = config
                    .pricing
                    .map(|p| p.call_range(tokens, exact, max_output));
                pair.calls += calls;
                pair.prompt_tokens += tokens * calls;
                pair.exact &= exact;
                pair.output_ceiling += max_output * calls;
                if let (Some(total), Some(one)) = (&mut pair.cost, cost) {
                    total.add(CostRange {
                        low: one.low * calls as f64,
                        high: one.high * calls as f64,
                    });
                }
                pair.cases.push(CallPlan {
                    case: case.id.clone(),
                    prompt_tokens: tokens,
                    exact,
                    cost,
                });
            }
            pairs.push(pair);
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let unpriced: Vec<String> = providers
        .iter()
        .filter(|(c, _)| c.pricing.is_none())
        .map(|(c, _)| c.name.clone())
        .collect();
    let cost = unpriced.is_empty().then(|| {
        let mut total = CostRange::default();
        for p in &pairs {
            total.add(p.cost.unwrap_or_default());
        }
        total
    });
    Ok(RunPlan {
        pairs,
        cost,
        unpriced,
    })
}

/// Sets each verdict's cost estimate from the plan, so the reports show it beside the
/// actual cost.
pub fn attach_estimates(verdicts: &mut [PairVerdict], plan: &RunPlan) {
    for v in verdicts {
        let estimate = plan
            .pairs
            .iter()
            .find(|p| p.suite == v.tally.suite && p.provider == v.tally.provider)
            .and_then(|p| p.cost);
        if let Some(cost) = &mut v.tally.cost {
            cost.estimate = estimate;
        }
    }
}

/// The plan as a table for a terminal or a CI log.
pub fn render(plan: &RunPlan) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let ws = plan
        .pairs
        .iter()
        .map(|p| p.suite.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let wp = plan
        .pairs
        .iter()
        .map(|p| p.provider.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        out,
        "{:ws$}  {:wp$}  {:>6}  {:>14}  {:>14}  cost (USD)",
        "suite", "provider", "calls", "prompt tokens", "output ceiling"
    );
    for p in &plan.pairs {
        let tokens = format!("{}{}", if p.exact { "" } else { "≈" }, p.prompt_tokens);
        let cost = p.cost.map_or_else(
            || "no [pricing]".to_string(),
            |c| format!("{} – {}", usd(c.low), usd(c.high)),
        );
        let _ = writeln!(
            out,
            "{:ws$}  {:wp$}  {:>6}  {:>14}  {:>14}  {cost}",
            p.suite, p.provider, p.calls, tokens, p.output_ceiling
        );
    }
    let calls: u64 = plan.pairs.iter().map(|p| p.calls).sum();
    match plan.cost {
        Some(c) => {
            let _ = writeln!(
                out,
                "\ntotal: {calls} calls, {} – {} (the low end: every prompt token at the \
                 cheapest input price and no output; the high end: the full input price and \
                 max_tokens of output on every call)",
                usd(c.low),
                usd(c.high)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "\ntotal: {calls} calls; no cost for {}: add [pricing] (input_per_mtok, \
                 output_per_mtok, cached_input_per_mtok: USD per million tokens) to the provider file",
                plan.unpriced.join(", ")
            );
        }
    }
    if plan.pairs.iter().any(|p| !p.exact) {
        out.push_str(
            "≈: no local tokenizer renders these prompts exactly; the count is estimated and \
             its cost range widened\n",
        );
    }
    out
}

/// Dollars with enough places for fractions of a cent.
pub fn usd(v: f64) -> String {
    if v >= 100.0 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conform_check::verdict::{Tally, Verdict};
    use conform_config::pricing::{PairCost, Pricing};

    const PRICE: Pricing = Pricing {
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
        cached_input_per_mtok: None,
    };

    fn pair(provider: &str, cost: Option<CostRange>, exact: bool) -> PairPlan {
        PairPlan {
            suite: "s".into(),
            provider: provider.into(),
            tokenizer: "tiktoken:o200k_base".into(),
            calls: 2,
            prompt_tokens: 200,
            exact,
            max_output_tokens: 10,
            output_ceiling: 20,
            cost,
            cases: Vec::new(),
        }
    }

    #[test]
    fn the_table_names_the_range_or_the_missing_prices() {
        let range = CostRange {
            low: 0.0002,
            high: 0.00024,
        };
        let priced = RunPlan {
            pairs: vec![pair("a", Some(range), true)],
            cost: Some(range),
            unpriced: Vec::new(),
        };
        let text = render(&priced);
        assert!(
            text.contains(
                "s      a              2             200              20  $0.0002 – $0.0002"
            ),
            "{text}"
        );
        assert!(text.contains("total: 2 calls, $0.0002 – $0.0002"), "{text}");
        assert!(!text.contains('≈'), "{text}");
        let unpriced = RunPlan {
            pairs: vec![pair("b", None, false)],
            cost: None,
            unpriced: vec!["b".into()],
        };
        let text = render(&unpriced);
        assert!(
            text.contains("no [pricing]") && text.contains("no cost for b"),
            "{text}"
        );
        assert!(text.contains("≈200"), "{text}");
        assert_eq!(usd(1234.5), "$1234.50");
    }

    #[test]
    fn estimates_go_to_the_pairs_they_were_made_for() {
        let range = CostRange {
            low: 1.0,
            high: 2.0,
        };
        let plan = RunPlan {
            pairs: vec![pair("a", Some(range), true)],
            cost: Some(range),
            unpriced: Vec::new(),
        };
        let verdict = |provider: &str| PairVerdict {
            verdict: Verdict::Conformant,
            reasons: Vec::new(),
            tally: Tally {
                cost: Some(PairCost::new(PRICE)),
                ..Tally::new("s", provider, 2)
            },
            suite_index: 0,
            provider_index: 0,
        };
        let mut verdicts = vec![verdict("a"), verdict("other")];
        attach_estimates(&mut verdicts, &plan);
        assert_eq!(verdicts[0].tally.cost.unwrap().estimate, Some(range));
        assert_eq!(verdicts[1].tally.cost.unwrap().estimate, None);
    }
}
