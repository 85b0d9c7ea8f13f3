//! The differential table of each (suite, candidate): fields × (reference
//! self-agreement, candidate agreement, verdict), then the cases that disagree most.
//! The terminal summary and `summary.md` both print it from the tally; `report.json`
//! carries the same numbers in each verdict's `differential`.

use std::fmt::Write;

use crate::run::RunResult;
use conform_check::check::differential::{CaseRow, Differential, FieldVerdict};

fn percent(rate: Option<f64>) -> String {
    rate.map_or_else(|| "–".into(), |r| format!("{:.1}%", r * 100.0))
}

/// How a field's verdict reads.
pub fn verdict_word(v: FieldVerdict) -> &'static str {
    match v {
        FieldVerdict::Pass => "pass",
        FieldVerdict::Fail => "FAIL",
        FieldVerdict::NoFloor => "no floor",
        FieldVerdict::NotCompared => "not compared",
        FieldVerdict::Insufficient => "too few pairs",
        FieldVerdict::Uninformative => "uninformative",
    }
}

fn pairs(result: &RunResult) -> impl Iterator<Item = (&str, &str, &Differential)> {
    result.verdicts.iter().filter_map(|v| {
        v.tally
            .differential
            .as_ref()
            .map(|d| (v.tally.suite.as_str(), v.tally.provider.as_str(), d))
    })
}

fn compared(
    d: &Differential,
) -> impl Iterator<Item = &conform_check::check::differential::FieldRow> {
    d.fields
        .iter()
        .filter(|f| f.verdict != FieldVerdict::NotCompared)
}

/// For the terminal: one block per (suite, candidate).
pub fn text(result: &RunResult) -> String {
    let mut out = String::new();
    for (suite, provider, d) in pairs(result) {
        let _ = writeln!(
            out,
            "\nAgainst the reference `{}` ({suite} × {provider}, {} cases, margin {:.0} points, confidence {:.0}%):",
            d.reference,
            d.cases,
            d.margin * 100.0,
            d.confidence * 100.0
        );
        if let Some(why) = &d.unavailable {
            let _ = writeln!(out, "  inconclusive: {why}");
            continue;
        }
        let width = compared(d).map(|f| f.field.len()).max().unwrap_or(5).max(5);
        let _ = writeln!(
            out,
            "  {:width$}  {:>9}  {:>9}  verdict",
            "field", "reference", "candidate"
        );
        for f in compared(d) {
            let _ = writeln!(
                out,
                "  {:width$}  {:>9}  {:>9}  {}",
                f.field,
                percent(f.reference_agreement),
                percent(f.candidate_agreement),
                verdict_word(f.verdict)
            );
        }
        if !d.worst_cases.is_empty() {
            let _ = writeln!(out, "  most disagreeing:");
        }
        for c in d.worst_cases.iter().take(TERMINAL_CASES) {
            let _ = writeln!(out, "    {} ({})", c.case, field_pairs(c));
            for line in evidence(c, &d.reference, provider) {
                let _ = writeln!(out, "      {line}");
            }
        }
        if let Some(r) = &d.drift_rules_out {
            let _ = writeln!(out, "  rules out {}", r.words(&d.reference));
        }
    }
    out
}

/// The worst cases the terminal lists per (suite, candidate); the reports list them all.
const TERMINAL_CASES: usize = 5;

/// A case's disagreeing pairs, field by field: `answer 6/9 pairs, /priority 3/9 pairs`.
pub fn field_pairs(c: &CaseRow) -> String {
    if c.per_field.is_empty() {
        return format!("{}/{} pairs", c.disagreeing, c.pairs);
    }
    let each: Vec<String> = (c.per_field.iter())
        .map(|f| format!("{} {}/{} pairs", f.field, f.disagreeing, f.pairs))
        .collect();
    each.join(", ")
}

/// What the candidate answered beside the reference in case `c`, a line per disagreeing
/// field: `/priority: `claude` "p2", `local` "p3"`, and for the whole answer its
/// difference (`answer: added /confidence: 0.93`).
pub fn evidence(c: &CaseRow, reference: &str, candidate: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in &c.per_field {
        for line in &f.difference {
            out.push(format!("{}: {line}", f.field));
        }
        if !f.reference.is_empty() || !f.candidate.is_empty() {
            out.push(format!(
                "{}: `{reference}` {}, `{candidate}` {}",
                f.field,
                f.reference.join(" | "),
                f.candidate.join(" | ")
            ));
        }
    }
    out
}

/// For `summary.md`: one table per (suite, candidate).
pub fn markdown(result: &RunResult) -> String {
    let mut out = String::new();
    for (suite, provider, d) in pairs(result) {
        let _ = writeln!(
            out,
            "\n### {suite} × {provider} against the reference `{}`\n",
            d.reference
        );
        if let Some(why) = &d.unavailable {
            let _ = writeln!(out, "Inconclusive: {why}.");
            continue;
        }
        out.push_str("| field | reference self-agreement | candidate agreement | verdict |\n|---|---:|---:|---|\n");
        for f in compared(d) {
            let _ = writeln!(
                out,
                "| `{}` | {} ({}/{}) | {} ({}/{}) | {} |",
                f.field.replace('|', "\\|"),
                percent(f.reference_agreement),
                f.reference.agreeing,
                f.reference.pairs,
                percent(f.candidate_agreement),
                f.candidate.agreeing,
                f.candidate.pairs,
                verdict_word(f.verdict)
            );
        }
        if !d.worst_cases.is_empty() {
            out.push_str("\nMost disagreeing cases:\n\n");
        }
        for c in &d.worst_cases {
            let _ = writeln!(out, "- `{}` ({})", c.case, field_pairs(c));
            for line in evidence(c, &d.reference, provider) {
                let _ = writeln!(out, "  - `{}`", line.replace('`', "'"));
            }
        }
        if let Some(r) = &d.drift_rules_out {
            let _ = writeln!(out, "\nRules out {}.", r.words(&d.reference));
        }
    }
    out
}

/// Why a pair failed against its reference, one sentence per failed field, for the
/// "why" of the terminal summary and `summary.md`.
pub fn why(d: &Differential) -> Vec<String> {
    use conform_check::check::differential::Undecided;
    match d.judgement() {
        Err(why @ Undecided::Unavailable) => {
            let code = why.as_str();
            return vec![format!(
                "{code}: {}",
                d.unavailable.as_deref().unwrap_or("no reference answers")
            )];
        }
        Err(why @ Undecided::NoFloor) => {
            let code = why.as_str();
            return vec![format!(
                "{code}: `{}` gave at most one answer per case, so how much it varies is unknown and a disagreement cannot be told from its noise: run with --repeats 2 or more (or record more answers)",
                d.reference
            )];
        }
        _ => {}
    }
    d.failed()
        .map(|f| {
            format!(
                "{}: `{}` agrees with `{}` in {} of pairs, significantly below `{}`'s own {} (less the {:.0}-point margin)",
                conform_check::check::differential::CODE,
                f.field,
                d.reference,
                percent(f.candidate_agreement),
                d.reference,
                percent(f.reference_agreement),
                d.margin * 100.0
            )
        })
        .collect()
}
