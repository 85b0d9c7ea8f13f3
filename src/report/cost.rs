//! The cost section of the terminal summary and summary.md: per pair, what the calls
//! cost by their usage beside the plan's estimate. Empty when no provider is priced.

use std::fmt::Write;

use crate::plan::usd;
use crate::run::RunResult;

fn rows(result: &RunResult) -> Vec<(String, String, String, String)> {
    result
        .verdicts
        .iter()
        .filter_map(|v| {
            let c = v.tally.cost.as_ref()?;
            let estimate = c.estimate.map_or_else(
                || "—".into(),
                |e| format!("{} – {}", usd(e.low), usd(e.high)),
            );
            let mut actual = usd(c.actual_usd);
            if c.calls_without_usage > 0 {
                let _ = write!(
                    actual,
                    " (+{} call{} without usage)",
                    c.calls_without_usage,
                    if c.calls_without_usage == 1 { "" } else { "s" }
                );
            }
            Some((
                v.tally.suite.clone(),
                v.tally.provider.clone(),
                actual,
                estimate,
            ))
        })
        .collect()
}

/// Plain lines for the terminal.
pub fn text(result: &RunResult) -> String {
    let rows = rows(result);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nCost (USD, by reported usage; estimate from the plan):\n");
    let total: f64 = result
        .verdicts
        .iter()
        .filter_map(|v| v.tally.cost.as_ref().map(|c| c.actual_usd))
        .sum();
    for (suite, provider, actual, estimate) in rows {
        let _ = writeln!(
            out,
            "  {suite} × {provider}: {actual} (estimate {estimate})"
        );
    }
    let _ = writeln!(out, "  total: {}", usd(total));
    out
}

/// A Markdown table for summary.md.
pub fn markdown(result: &RunResult) -> String {
    let rows = rows(result);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n### Cost\n\n| suite | provider | actual (usage) | estimate (plan) |\n|---|---|---:|---:|\n",
    );
    for (suite, provider, actual, estimate) in rows {
        let _ = writeln!(out, "| {suite} | {provider} | {actual} | {estimate} |");
    }
    out
}
