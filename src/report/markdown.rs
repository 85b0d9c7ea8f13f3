//! `summary.md`: the verdicts as a Markdown table and what became of the allowlist, fit
//! for a CI job summary.

use std::fmt::Write;
use std::io;
use std::path::{Path, PathBuf};

use super::json::to_second_text;
use crate::outcome::{AllowlistEffect, PairEffect};
use crate::run::RunResult;
use conform_check::verdict::{Reason, Verdict};

pub fn render(result: &RunResult, decision: &AllowlistEffect) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## conform run `{}`\n", result.run_id);
    if !result.complete {
        out.push_str(match result.over_budget {
            true => "**Stopped by the budget**: nothing is concluded and the allowlist was not touched.\n\n",
            false => "**Interrupted**: nothing is concluded and the allowlist was not touched.\n\n",
        });
    }
    out.push_str("| suite | provider | verdict | passed | reasons |\n|---|---|---|---:|---|\n");
    for v in &result.verdicts {
        let t = &v.tally;
        let mark = match v.verdict {
            Verdict::Conformant => "✅ conformant",
            Verdict::Nonconformant => "❌ nonconformant",
            Verdict::Inconclusive => "⚠️ inconclusive",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {mark} | {}/{} | {} |",
            t.suite,
            t.provider,
            t.passed,
            t.planned,
            Reason::names(&v.reasons).join(", ")
        );
    }
    let saved = super::terminal::saved_calls(result);
    if !saved.is_empty() {
        let _ = write!(out, "\n{saved}");
    }
    for v in result.verdicts.iter() {
        if let Some(decided) = super::terminal::decision_text(&v.tally) {
            let _ = writeln!(out, "- {} × {}: {decided}", v.tally.suite, v.tally.provider);
        }
    }
    let _ = write!(
        out,
        "\n**Allowlist** `{}`: {}",
        decision.path.display(),
        decision.counts()
    );
    if let Some(why) = &decision.untouched {
        let _ = write!(out, " (untouched: {})", why.explain());
    }
    out.push_str(".\n\n");
    for p in &decision.pairs {
        let what = match &p.effect {
            PairEffect::Granted { valid_until } => {
                format!("granted until {}", to_second_text(valid_until))
            }
            PairEffect::Revoked { reasons } => format!("revoked: {}", reasons.join(", ")),
            // Every pair of an untouched file is unchanged: the sentence above says why.
            PairEffect::Unchanged { .. } if decision.untouched.is_some() => continue,
            PairEffect::Unchanged { why } => format!("unchanged: {}", why.explain()),
        };
        let _ = writeln!(out, "- {} × {}: {what}", p.suite, p.provider);
    }
    out.push_str(&super::cost::markdown(result));
    out.push_str(&super::differential::markdown(result));
    if result.not_conformant().next().is_some() {
        out.push_str("\n### First failures\n\n");
    }
    for v in result.not_conformant() {
        for line in v
            .tally
            .differential
            .as_ref()
            .map(super::differential::why)
            .unwrap_or_default()
        {
            let _ = writeln!(
                out,
                "- **{} × {}**: {}",
                v.tally.suite,
                v.tally.provider,
                line.replace('|', "\\|")
            );
        }
        for e in &v.tally.examples {
            let at = e
                .path
                .as_deref()
                .map(|p| format!(" at `{p}`"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "- **{} × {}**, case `{}`: {} `{}`{at}: {}",
                v.tally.suite,
                v.tally.provider,
                e.case,
                e.check,
                e.code,
                e.message.replace('|', "\\|")
            );
        }
    }
    out
}

pub fn write(dir: &Path, result: &RunResult, decision: &AllowlistEffect) -> io::Result<PathBuf> {
    let path = dir.join("summary.md");
    std::fs::write(&path, render(result, decision))?;
    Ok(path)
}
