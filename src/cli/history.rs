//! `conform history` and `conform diff`: a provider over time, and two runs side by side.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use conform::history::diff;
use conform::history::drift::{self, Flag, Policy, percent};
use conform::history::{self, Line};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this suite.
    #[arg(long, value_name = "SUITE")]
    pub suite: Option<String>,
    /// Only this provider.
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// How many of each pair's latest runs to list (the flags look at all of them).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub last: usize,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier run: its id (a folder in the reports directory) or its folder.
    pub run_a: String,
    /// The later run.
    pub run_b: String,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// The history file every conclusive run appends to.
pub fn history_path(global: &Global) -> PathBuf {
    global.reports_dir().join("history.jsonl")
}

pub fn history(global: &Global, args: HistoryArgs) -> anyhow::Result<Exit> {
    let path = history_path(global);
    let (lines, skipped) = history::read(&path, |l| {
        args.suite.as_deref().is_none_or(|s| s == l.suite)
            && args.provider.as_deref().is_none_or(|p| p == l.provider)
    })?;
    for s in &skipped {
        eprintln!("warning: {}:{}: skipped: {}", path.display(), s.line, s.why);
    }
    if lines.is_empty() {
        eprintln!(
            "error: no runs in {}{}: every conclusive `conform run` appends to it",
            path.display(),
            match (&args.suite, &args.provider) {
                (None, None) => String::new(),
                (s, p) => format!(
                    " for{}{}",
                    s.as_ref()
                        .map(|s| format!(" suite `{s}`"))
                        .unwrap_or_default(),
                    p.as_ref()
                        .map(|p| format!(" provider `{p}`"))
                        .unwrap_or_default()
                ),
            }
        );
        return Ok(Exit::Usage);
    }
    let mut pairs: BTreeMap<(String, String), Vec<Line>> = BTreeMap::new();
    for line in lines {
        pairs
            .entry((line.suite.clone(), line.provider.clone()))
            .or_default()
            .push(line);
    }
    let policy = Policy::default();
    let judged: Vec<_> = pairs
        .iter()
        .map(|(key, runs)| (key, runs, drift::flags(runs, &policy)))
        .collect();
    let warned = judged
        .iter()
        .any(|(_, _, flags)| flags.iter().any(Flag::is_warning));
    match args.format {
        Format::Json => {
            let out: Vec<_> = judged
                .iter()
                .map(|((suite, provider), runs, flags)| {
                    json!({"suite": suite, "provider": provider, "runs": runs, "flags": flags})
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"history": path, "pairs": out}))?
            );
        }
        Format::Text => {
            for ((suite, provider), runs, flags) in &judged {
                println!("{suite} × {provider} ({} runs)", runs.len());
                let shown = runs.len().saturating_sub(args.last);
                if shown > 0 {
                    println!("  … {shown} earlier runs");
                }
                for run in &runs[shown..] {
                    println!(
                        "  {}  {}  {:>13}  {:>6}  {:>9}  served {}",
                        run.run_id,
                        at_second(&run.at),
                        run.verdict.as_str(),
                        percent(run.passed, run.ran()),
                        format!("{}/{}", run.passed, run.planned),
                        if run.served_models.is_empty() {
                            "?".to_string()
                        } else {
                            run.served_models.join(", ")
                        }
                    );
                }
                for flag in flags {
                    println!("  {}", flag);
                }
                println!();
            }
        }
    }
    Ok(if warned { Exit::Failed } else { Exit::Ok })
}

fn at_second(rfc3339: &str) -> String {
    rfc3339.get(..19).unwrap_or(rfc3339).replace('T', " ")
}

/// A run named by its id (a folder in the reports directory) or by its folder.
fn run_dir(global: &Global, run: &str) -> PathBuf {
    let as_path = Path::new(run);
    if as_path.join("report.json").is_file() {
        as_path.to_path_buf()
    } else {
        global.reports_dir().join(run)
    }
}

pub fn diff(global: &Global, args: DiffArgs) -> anyhow::Result<Exit> {
    let (a, b) = (run_dir(global, &args.run_a), run_dir(global, &args.run_b));
    let diff = match diff::diff(&a, &b) {
        Ok(diff) => diff,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&diff)?),
        Format::Text => print!("{diff}"),
    }
    Ok(if diff.regressed() {
        Exit::Failed
    } else {
        Exit::Ok
    })
}
