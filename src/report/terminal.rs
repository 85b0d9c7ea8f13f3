//! The summary a person reads at the end of a run: suite × provider with pass counts,
//! then the first failures explained in plain words, and what became of the allowlist.

use std::fmt::Write;

use super::json::to_second_text;
use crate::outcome::{AllowlistEffect, PairEffect};
use crate::run::RunResult;
use conform_check::verdict::Reason;

/// The allowlist in one line, `allowlist: PATH: granted N, revoked M, unchanged K`, and
/// one more line per pair saying what became of it and why: with `verbose` for every
/// pair, else for the conformant pairs the run withheld.
pub fn allowlist(decision: &AllowlistEffect, verbose: bool) -> String {
    let mut out = format!(
        "allowlist: {}: {}",
        decision.path.display(),
        decision.counts()
    );
    if let Some(why) = &decision.untouched {
        let _ = write!(out, " (untouched: {})", why.explain());
    }
    out.push('\n');
    // A conformant pair that grants nothing surprises whoever reads only the verdicts:
    // it is always said why.
    let shown = |p: &&crate::outcome::EntryEffect| {
        verbose
            || matches!(
                p.effect,
                PairEffect::Unchanged {
                    why: crate::outcome::Unchanged::Withheld { .. }
                }
            )
    };
    for p in decision.pairs.iter().filter(shown) {
        let (what, detail) = match &p.effect {
            PairEffect::Granted { valid_until } => {
                ("granted", format!(" until {}", to_second_text(valid_until)))
            }
            PairEffect::Revoked { reasons } => ("revoked", format!(": {}", reasons.join(", "))),
            PairEffect::Unchanged { why } => ("unchanged", format!(": {}", why.explain())),
        };
        let _ = writeln!(out, "  {what:9}  {} × {}{detail}", p.suite, p.provider);
    }
    out
}

/// `calls: 2,000 planned, 1,055 sent, 945 saved (verdicts decided early)`, when a
/// verdict was decided before its last call; nothing otherwise.
pub fn saved_calls(result: &RunResult) -> String {
    let sum = |f: fn(&conform_check::verdict::Tally) -> u64| -> u64 {
        result.verdicts.iter().map(|v| f(&v.tally)).sum()
    };
    let saved = sum(|t| t.saved);
    if saved == 0 {
        return String::new();
    }
    format!(
        "calls: {} planned, {} sent, {saved} saved (verdicts decided before their last call)\n",
        sum(|t| t.planned),
        sum(conform_check::verdict::Tally::sent),
    )
}

/// What decided a pair before its last call, in words.
pub fn decision_text(t: &conform_check::verdict::Tally) -> Option<String> {
    use conform_check::verdict::DecisionRule;
    let d = t.decided.as_ref().filter(|_| t.saved > 0)?;
    let case = d.case.as_deref().unwrap_or("?");
    let why = match d.rule {
        DecisionRule::PassThreshold => format!(
            "{} failures of its own (the model's, or the provider's own failures to answer), more than the {} that pass_threshold = {} allows over {} calls",
            d.model_failures, d.allowed_failures, d.pass_threshold, t.planned
        ),
        DecisionRule::MinAgreement => format!(
            "the repeats of case {case} can no longer agree as often as min_agreement asks, whatever the rest answer"
        ),
        DecisionRule::MinCasePassLowerBound => format!(
            "the pass-rate bound of case {case} stays under min_case_pass_lower_bound even if its other repeats pass"
        ),
    };
    Some(format!(
        "decided after {} of {} calls: {why}; {} calls saved",
        d.after_calls, t.planned, t.saved
    ))
}

/// Renders the summary table and the first failures.
pub fn summary(result: &RunResult) -> String {
    let mut out = String::new();
    let width = |f: fn(&conform_check::verdict::Tally) -> usize, min: usize| {
        result
            .verdicts
            .iter()
            .map(|v| f(&v.tally))
            .max()
            .unwrap_or(0)
            .max(min)
    };
    let ws = width(|t| t.suite.len(), 5);
    let wp = width(|t| t.provider.len(), 8);
    // The latency of the answered calls in two columns; p99 and the first token are in
    // the reports, where there is room.
    let _ = writeln!(
        out,
        "{:ws$}  {:wp$}  {:13}  {:>9}  {:>8}  {:>8}  reasons",
        "suite", "provider", "verdict", "passed", "p50", "p95"
    );
    for v in &result.verdicts {
        let t = &v.tally;
        let percentile = |q| {
            t.latency
                .total
                .quantile(q)
                .map_or_else(|| "—".to_string(), conform_check::latency::words)
        };
        let _ = writeln!(
            out,
            "{:ws$}  {:wp$}  {:13}  {:>9}  {:>8}  {:>8}  {}",
            t.suite,
            t.provider,
            v.verdict.as_str(),
            format!("{}/{}", t.passed, t.planned),
            percentile(0.5),
            percentile(0.95),
            Reason::names(&v.reasons).join(", ")
        );
    }
    out.push_str(&saved_calls(result));
    out.push_str(&stability(result));
    out.push_str(&super::cost::text(result));
    out.push_str(&super::differential::text(result));
    out.push_str(&why(result));
    out
}

/// How often each pair's repeats agreed, for the suites that ask.
fn stability(result: &RunResult) -> String {
    let mut out = String::new();
    let stable: Vec<_> = result
        .verdicts
        .iter()
        .filter_map(|v| v.tally.stability.as_ref().map(|s| (&v.tally, s)))
        .collect();
    if !stable.is_empty() {
        out.push_str("\nStability of repeats (canonical JSON equality):\n");
    }
    for (t, s) in stable {
        let _ = write!(
            out,
            "  {} × {}: {}/{} cases unanimous over {} repeats, mean agreement {:.0}%",
            t.suite,
            t.provider,
            s.cases_unanimous,
            s.cases,
            s.repeats,
            s.mean_agreement * 100.0
        );
        if let Some(least) = s.least_stable.as_ref().filter(|l| l.agreement < 1.0) {
            let _ = write!(
                out,
                "; least stable: {} ({:.0}%, {} different outputs)",
                least.case,
                least.agreement * 100.0,
                least.distinct_outputs
            );
        }
        if let Some(min) = s.min_agreement {
            let _ = write!(out, "; required {:.0}%", min * 100.0);
        }
        if let (Some(min), Some(low)) = (s.min_case_pass_lower_bound, s.lowest_pass_lower_bound) {
            let _ = write!(
                out,
                "; lowest case pass-rate bound {:.2} (Wilson, {:.0}%), required {min:.2}",
                low,
                s.confidence * 100.0
            );
        }
        out.push('\n');
    }
    out
}

/// Why each pair that is not conformant is not, with the first failures' examples.
fn why(result: &RunResult) -> String {
    let mut out = String::new();
    if result.not_conformant().next().is_some() {
        out.push_str("\nWhy:\n");
    }
    for v in result.not_conformant() {
        let t = &v.tally;
        let _ = writeln!(out, "  {} × {}:", t.suite, t.provider);
        if let Some(decided) = decision_text(t) {
            let _ = writeln!(out, "    {decided}");
        }
        if let Some((code, message)) = &t.halted {
            let _ = writeln!(
                out,
                "    conform stopped calling {} after a call failed with {code}: {message} ({} later calls not sent)",
                t.provider, t.not_run
            );
        }
        if !result.complete {
            let stopped = match result.over_budget {
                true => "the budget stopped the run",
                false => "the run was interrupted",
            };
            let _ = writeln!(
                out,
                "    {stopped} after {} of {} calls: nothing is concluded",
                t.passed + t.failed,
                t.planned
            );
        }
        if v.reasons.contains(&Reason::InsufficientEvidence) && t.differential.is_none() {
            let _ = writeln!(
                out,
                "    insufficient_evidence: {} of {} calls passed, which rules out a failure rate above {:.1} % only, more than the bound a permit must rule out (`max_undetected_failure_rate` in conform.toml, {:.0} % by default): add cases or repeats",
                t.passed,
                t.planned,
                t.rules_out() * 100.0,
                conform_allowlist::DEFAULT_MAX_UNDETECTED_FAILURE_RATE * 100.0
            );
        }
        for code in &v.reasons {
            let (what, field, h, bound) = match code {
                Reason::SloTtft => (
                    "time to first token",
                    "max_p95_ttft",
                    &t.latency.first_token,
                    t.slo.max_p95_ttft,
                ),
                Reason::SloLatency => (
                    "latency",
                    "max_p95_latency",
                    &t.latency.total,
                    t.slo.max_p95_latency,
                ),
                _ => continue,
            };
            if let (Some(p95), Some(bound)) = (h.quantile(0.95), bound) {
                let _ = writeln!(
                    out,
                    "    {code}: the p95 {what} is {}, not under {field} = {}",
                    conform_check::latency::words(p95),
                    conform_check::latency::words(bound.as_secs_f64() * 1000.0)
                );
            }
        }
        for line in t
            .differential
            .as_ref()
            .map(super::differential::why)
            .unwrap_or_default()
        {
            let _ = writeln!(out, "    {line}");
        }
        for e in &t.examples {
            let at = e
                .path
                .as_deref()
                .map(|p| format!(" at {p}"))
                .unwrap_or_default();
            let of = t.codes.get(&e.code).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "    case {} (repeat {}): {} check, {}{at}: {} [{} in {of} of {} calls]",
                e.case, e.repeat, e.check, e.code, e.message, e.code, t.planned
            );
            if let Some(output) = &e.output {
                // The first lines tell fences and prose from JSON; the reports keep the rest.
                let mut lines = output.split('\n');
                let head: Vec<&str> = lines.by_ref().take(CAME_BACK_LINES).collect();
                let more = if lines.next().is_some() { " …" } else { "" };
                let _ = writeln!(
                    out,
                    "      came back: {}{more}",
                    as_it_came(&head.join("\n"), CAME_BACK_INDENT)
                );
            }
        }
    }
    out
}

/// How many lines of an answer the terminal shows.
const CAME_BACK_LINES: usize = 4;

/// Where the text after `      came back: ` starts, so that later lines align under it.
const CAME_BACK_INDENT: usize = "      came back: ".len();

/// Model output as it came, quotes and line breaks included, so a person reads the JSON
/// the application would have parsed. Only what could act on the terminal instead of
/// being shown (escape sequences, carriage returns, bidirectional overrides) is written
/// as an escape; later lines are indented by `indent`.
fn as_it_came(text: &str, indent: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent));
        }
        for c in line.strip_suffix('\r').unwrap_or(line).chars() {
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if (c.is_control() && c != '\t') || bidi {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{allowlist, as_it_came};
    use crate::outcome::{AllowlistEffect, EntryEffect, PairEffect, Unchanged, Untouched};

    fn decision() -> AllowlistEffect {
        let pair = |suite: &str, provider: &str, effect| EntryEffect {
            suite: suite.into(),
            provider: provider.into(),
            effect,
        };
        AllowlistEffect {
            path: "allowlist.json".into(),
            untouched: None,
            replaced_unreadable: None,
            simulated: false,
            pairs: vec![
                pair(
                    "invoices",
                    "good",
                    PairEffect::Granted {
                        valid_until: "2026-03-08T09:12:44.123Z".into(),
                    },
                ),
                pair(
                    "invoices",
                    "fenced",
                    PairEffect::Revoked {
                        reasons: vec!["not_pure_json".into(), "schema_violation".into()],
                    },
                ),
                pair(
                    "tickets",
                    "fenced",
                    PairEffect::Revoked {
                        reasons: vec!["not_pure_json".into()],
                    },
                ),
                pair(
                    "tickets",
                    "down",
                    PairEffect::Unchanged {
                        why: Unchanged::Inconclusive {
                            reasons: vec!["auth_failed".into()],
                        },
                    },
                ),
            ],
        }
    }

    #[test]
    fn the_allowlist_line_is_a_short_summary() {
        assert_eq!(
            allowlist(&decision(), false),
            "allowlist: allowlist.json: granted 1, revoked 2, unchanged 1\n"
        );
    }

    #[test]
    fn verbose_lists_every_pair_with_its_end_or_its_reasons() {
        let text = allowlist(&decision(), true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "allowlist: allowlist.json: granted 1, revoked 2, unchanged 1",
                "  granted    invoices × good until 2026-03-08 09:12:44 UTC",
                "  revoked    invoices × fenced: not_pure_json, schema_violation",
                "  revoked    tickets × fenced: not_pure_json",
                "  unchanged  tickets × down: inconclusive: auth_failed",
            ]
        );
    }

    #[test]
    fn an_untouched_allowlist_says_why() {
        let mut d = decision();
        d.pairs
            .retain(|p| matches!(p.effect, PairEffect::Unchanged { .. }));
        d.untouched = Some(Untouched::Replayed {
            tapes: "tapes".into(),
        });
        assert_eq!(
            allowlist(&d, false),
            "allowlist: allowlist.json: granted 0, revoked 0, unchanged 1 (untouched: the \
             answers were replayed from tapes, which proves nothing about the providers today)\n"
        );
    }

    #[test]
    fn output_is_shown_as_it_came_with_only_terminal_controls_escaped() {
        assert_eq!(
            as_it_came("{\"total\": \"12,50 €\"}", 4),
            "{\"total\": \"12,50 €\"}"
        );
        assert_eq!(
            as_it_came("```json\r\n{\"a\":\t1}\n```", 2),
            "```json\n  {\"a\":\t1}\n  ```"
        );
        assert_eq!(
            as_it_came("ok\u{1b}[2Jgone\rx\u{202e}", 0),
            "ok\\u{1b}[2Jgone\\rx\\u{202e}"
        );
    }
}
