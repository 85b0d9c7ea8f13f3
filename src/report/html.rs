//! `report.html`: one self-contained page (no script, no fetched asset) a person would
//! rather look at than read: the verdicts, then for each pair its checks, finding codes
//! and failed calls with what came back.
//!
//! Written at the end by streaming `results.jsonl` back, keeping only the first
//! [`MAX_CALLS_SHOWN`] failed calls of each pair, so memory does not grow with the run.
//! Everything shown is escaped by the template engine: model output is untrusted.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::json::{VerdictView, rfc3339, verdict_views};
use crate::run::{RunResult, Target};

/// The failed calls a pair's section lists; the rest are counted.
pub const MAX_CALLS_SHOWN: usize = 50;

const TEMPLATE: &str = include_str!("report.html.j2");

#[derive(Serialize)]
struct Page<'a> {
    run: RunView<'a>,
    counts: Counts,
    pairs: Vec<Pair<'a>>,
}

#[derive(Serialize)]
struct RunView<'a> {
    id: &'a str,
    started_at: String,
    finished_at: String,
    complete: bool,
    version: &'static str,
}

#[derive(Serialize, Default)]
struct Counts {
    conformant: usize,
    nonconformant: usize,
    inconclusive: usize,
}

#[derive(Serialize)]
struct Pair<'a> {
    view: VerdictView<'a>,
    /// Failed calls as `results.jsonl` holds them, the first [`MAX_CALLS_SHOWN`].
    failed: Vec<Value>,
    /// Failed calls not listed.
    more: u64,
}

/// Renders the page from the verdicts and the `results.jsonl` in the run's folder.
pub fn render(result: &RunResult, views: Vec<VerdictView<'_>>) -> io::Result<String> {
    let mut counts = Counts::default();
    let mut pairs: Vec<Pair> = views
        .into_iter()
        .map(|view| {
            match view.verdict {
                "conformant" => counts.conformant += 1,
                "nonconformant" => counts.nonconformant += 1,
                _ => counts.inconclusive += 1,
            }
            Pair {
                view,
                failed: Vec::new(),
                more: 0,
            }
        })
        .collect();
    let index: HashMap<(String, String), usize> = pairs
        .iter()
        .enumerate()
        .map(|(i, p)| ((p.view.suite.to_string(), p.view.provider.to_string()), i))
        .collect();
    let results = result.dir.join("results.jsonl");
    for line in BufReader::new(File::open(&results)?).lines() {
        let line = line?;
        // A line cut short by a crash is skipped here; report.json keeps it verbatim.
        let Ok(call) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if call["passed"].as_bool() != Some(false) {
            continue;
        }
        let key = (
            call["suite"].as_str().unwrap_or_default().to_string(),
            call["provider"].as_str().unwrap_or_default().to_string(),
        );
        if let Some(&i) = index.get(&key) {
            let pair = &mut pairs[i];
            if pair.failed.len() < MAX_CALLS_SHOWN {
                pair.failed.push(call);
            } else {
                pair.more += 1;
            }
        }
    }
    let page = Page {
        run: RunView {
            id: &result.run_id,
            started_at: rfc3339(result.started_at),
            finished_at: rfc3339(result.finished_at),
            complete: result.complete,
            version: env!("CARGO_PKG_VERSION"),
        },
        counts,
        pairs,
    };
    let mut env = minijinja::Environment::new();
    // The name ends in `.html`, which turns HTML escaping on for everything rendered.
    env.add_template("report.html", TEMPLATE)
        .and_then(|()| env.get_template("report.html"))
        .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(&page))))
        .map_err(io::Error::other)
}

/// Writes `report.html` beside `results.jsonl` and returns its path.
pub fn write(
    result: &RunResult,
    targets: &[Arc<Target>],
    _decision: &crate::allowlist::Decision,
) -> io::Result<PathBuf> {
    let path = result.dir.join("report.html");
    std::fs::write(&path, render(result, verdict_views(result, targets))?)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::{Tally, Verdict};
    use serde_json::json;

    fn run_with(dir: &std::path::Path, failed_calls: usize) -> RunResult {
        let mut lines = String::new();
        for i in 0..failed_calls {
            let call = json!({"suite": "s", "case": format!("case-{i}"), "provider": "p",
                "repeat": 0, "passed": false,
                "checks": [{"check": "schema", "status": "fail", "findings": [
                    {"code": "schema_violation", "message": "<b>not bold</b>", "path": "/total"}]}],
                "output": "</pre><script>alert(1)</script>"});
            lines.push_str(&format!("{call}\n"));
        }
        lines.push_str("{\"suite\": \"s\", \"case\": \"cut");
        std::fs::write(dir.join("results.jsonl"), lines).unwrap();
        let now = time::OffsetDateTime::now_utc();
        RunResult {
            run_id: "run-1".into(),
            dir: dir.to_path_buf(),
            started_at: now,
            finished_at: now,
            complete: false,
            verdicts: Vec::new(),
        }
    }

    fn view(tally: &Tally) -> VerdictView<'_> {
        VerdictView {
            suite: "s",
            provider: "p",
            model: "m<1>",
            verdict: Verdict::Nonconformant.as_str(),
            reasons: &[],
            pass_rate: 0.0,
            first_attempt_pass_rate: 0.0,
            tally,
        }
    }

    #[test]
    fn model_output_is_escaped_and_the_page_fetches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_with(dir.path(), 2);
        let tally = Tally::default();
        let page = render(&result, vec![view(&tally)]).unwrap();
        assert!(!page.contains("<script"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{page}"
        );
        assert!(page.contains("&lt;b&gt;not bold&lt;&#x2f;b&gt;"), "{page}");
        assert!(page.contains("m&lt;1&gt;"), "{page}");
        assert!(!page.contains(" src="), "{page}");
        assert!(!page.contains("href=\"http"), "{page}");
        assert!(page.contains("Interrupted"), "{page}");
        assert_eq!(page.matches("<tr class=\"call\">").count(), 2);
    }

    #[test]
    fn a_pair_lists_its_first_failed_calls_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_with(dir.path(), MAX_CALLS_SHOWN + 7);
        let tally = Tally::default();
        let page = render(&result, vec![view(&tally)]).unwrap();
        assert_eq!(page.matches("<tr class=\"call\">").count(), MAX_CALLS_SHOWN);
        assert!(page.contains("case-0<"), "{page}");
        assert!(
            !page.contains(&format!("case-{MAX_CALLS_SHOWN}<")),
            "{page}"
        );
        assert!(page.contains("… and 7 more failed calls"), "{page}");
    }
}
