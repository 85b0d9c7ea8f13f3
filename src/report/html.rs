//! `report.html`: one self-contained page (no script, no fetched asset) for a person
//! deciding whether to let an application fail over: a suites × providers matrix of
//! verdicts and their reason codes, what the allowlist now grants, revokes or leaves and
//! until when, then for each pair its failures grouped by finding code, with counts and
//! a few examples each.
//!
//! Written at the end by streaming `results.jsonl` back. Each pair keeps at most
//! [`MAX_GROUPS`] finding codes and [`MAX_EXAMPLES`] examples of each (the first in
//! case order), so memory grows with the number of pairs, never with the number of
//! calls. Everything shown is escaped by the template engine: model output is
//! untrusted.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::json::{VerdictView, seconds_text, to_second, to_second_text, verdict_views};
use crate::outcome::{AllowlistEffect, PairEffect, Unchanged};
use crate::run::{RunResult, Target};

/// Examples kept for each finding code of a pair: the first ones in case order.
pub const MAX_EXAMPLES: usize = 3;
/// Finding codes a pair's section breaks its failures down by; calls failing only with
/// codes beyond these are counted together.
pub const MAX_GROUPS: usize = 32;
/// Findings of one code shown for one example call; the rest are counted.
const MAX_FINDINGS_SHOWN: usize = 5;
/// The group of calls that were not sent because their provider had been stopped.
const NOT_SENT: &str = "not_sent";

const TEMPLATE: &str = include_str!("report.html.j2");

/// Whether a `results.jsonl` line passed.
#[derive(Deserialize)]
struct Passed {
    passed: bool,
}

/// The part of a `results.jsonl` line the page reads.
#[derive(Deserialize)]
struct Line {
    suite: String,
    case: String,
    provider: String,
    #[serde(default)]
    repeat: u32,
    passed: bool,
    #[serde(default)]
    not_run: Option<String>,
    /// Not sent because the verdict was decided without it: no failure.
    #[serde(default)]
    saved: bool,
    #[serde(default)]
    checks: Vec<LineCheck>,
    #[serde(default)]
    output: Option<String>,
}

#[derive(Deserialize)]
struct LineCheck {
    check: String,
    status: String,
    #[serde(default)]
    findings: Vec<Finding>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
struct Finding {
    code: String,
    message: String,
    #[serde(default)]
    path: Option<String>,
}

/// The failed calls of one pair that share a finding code.
#[derive(Debug, Serialize)]
struct Group {
    code: String,
    check: String,
    /// Calls with at least one finding of this code.
    calls: u64,
    /// The first calls in case order, then repeat.
    examples: Vec<Shown>,
}

/// One example call of a group.
#[derive(Debug, Serialize)]
struct Shown {
    case: String,
    repeat: u32,
    findings: Vec<Finding>,
    more_findings: usize,
    /// What came back: pretty-printed when it parses as JSON, as it came otherwise.
    output: Option<String>,
    json: bool,
}

impl Group {
    fn offer(&mut self, line: &Line, findings: &[&Finding]) {
        let key = (line.case.as_str(), line.repeat);
        let at = self
            .examples
            .partition_point(|e| (e.case.as_str(), e.repeat) <= key);
        if at >= MAX_EXAMPLES {
            return;
        }
        self.examples.insert(
            at,
            Shown {
                case: line.case.clone(),
                repeat: line.repeat,
                findings: findings
                    .iter()
                    .take(MAX_FINDINGS_SHOWN)
                    .map(|f| (*f).clone())
                    .collect(),
                more_findings: findings.len().saturating_sub(MAX_FINDINGS_SHOWN),
                output: line.output.clone(),
                json: false,
            },
        );
        self.examples.truncate(MAX_EXAMPLES);
    }
}

/// Everything gathered for one pair while streaming the results.
#[derive(Debug, Default)]
struct Failures {
    groups: Vec<Group>,
    /// Failed calls whose every code came after [`MAX_GROUPS`] others.
    ungrouped: u64,
}

impl Failures {
    fn add(&mut self, line: &Line) {
        let not_sent;
        let mut codes: Vec<(&str, &str, Vec<&Finding>)> = Vec::new();
        if let Some(why) = &line.not_run {
            not_sent = Finding {
                code: NOT_SENT.into(),
                message: match why.starts_with("not sent") {
                    true => why.clone(),
                    false => format!("not sent: {why}"),
                },
                path: None,
            };
            codes.push((NOT_SENT, "run", vec![&not_sent]));
        }
        for check in line.checks.iter().filter(|c| c.status == "fail") {
            for f in &check.findings {
                match codes.iter_mut().find(|(code, _, _)| *code == f.code) {
                    Some((_, _, fs)) => fs.push(f),
                    None => codes.push((&f.code, &check.check, vec![f])),
                }
            }
        }
        let unexplained;
        if codes.is_empty() {
            unexplained = Finding {
                code: "no_finding".into(),
                message: "the call failed without a finding".into(),
                path: None,
            };
            codes.push(("no_finding", "run", vec![&unexplained]));
        }
        let mut grouped = false;
        for (code, check, findings) in codes {
            let i = match self.groups.iter().position(|g| g.code == code) {
                Some(i) => i,
                None if self.groups.len() < MAX_GROUPS => {
                    self.groups.push(Group {
                        code: code.to_string(),
                        check: check.to_string(),
                        calls: 0,
                        examples: Vec::new(),
                    });
                    self.groups.len() - 1
                }
                None => continue,
            };
            grouped = true;
            let group = &mut self.groups[i];
            group.calls += 1;
            group.offer(line, &findings);
        }
        if !grouped {
            self.ungrouped += 1;
        }
    }

    /// The groups as shown: most calls first, except the calls not sent, which only
    /// follow from another failure; outputs pretty-printed.
    fn finish(mut self) -> Self {
        self.groups.sort_by(|a, b| {
            (a.code == NOT_SENT)
                .cmp(&(b.code == NOT_SENT))
                .then(b.calls.cmp(&a.calls))
                .then_with(|| a.code.cmp(&b.code))
        });
        for example in self.groups.iter_mut().flat_map(|g| g.examples.iter_mut()) {
            if let Some(pretty) = example
                .output
                .as_deref()
                .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
            {
                example.output = Some(pretty);
                example.json = true;
            }
        }
        self
    }
}

#[derive(Serialize)]
struct Page<'a> {
    run: RunView<'a>,
    counts: Counts,
    matrix: Matrix,
    allowlist: AllowlistView,
    pairs: Vec<PairView<'a>>,
}

#[derive(Serialize)]
struct RunView<'a> {
    id: &'a str,
    started_at: String,
    finished_at: String,
    took: String,
    complete: bool,
    over_budget: bool,
    version: &'static str,
}

#[derive(Serialize, Default)]
struct Counts {
    conformant: usize,
    nonconformant: usize,
    inconclusive: usize,
}

/// Suites × providers. The longer list goes down the side, so the matrix stays readable
/// at a laptop's width.
#[derive(Serialize)]
struct Matrix {
    /// `suite` or `provider`: what the rows are.
    rows_are: &'static str,
    columns_are: &'static str,
    columns: Vec<String>,
    rows: Vec<MatrixRow>,
}

#[derive(Serialize)]
struct MatrixRow {
    head: String,
    /// `None` where the run judged no such pair.
    cells: Vec<Option<Cell>>,
}

#[derive(Serialize, Clone)]
struct Cell {
    suite: String,
    provider: String,
    verdict: &'static str,
    reasons: Vec<String>,
    passed: u64,
    planned: u64,
    /// Calls not sent because the verdict was decided without them.
    saved: u64,
    anchor: String,
    fate: Option<Fate>,
}

/// What became of a pair in the allowlist, as the page says it.
#[derive(Serialize, Clone)]
struct Fate {
    /// `granted`, `revoked` or `unchanged`.
    effect: &'static str,
    /// A few words: `allowlisted until …`, `revoked`, `unchanged: inconclusive`.
    text: String,
}

#[derive(Serialize)]
struct AllowlistView {
    path: String,
    counts: String,
    untouched: Option<String>,
    replaced_unreadable: Option<String>,
    /// Every grant's end, when all of the run's grants end at once (they do, unless the
    /// value was built elsewhere).
    until: Option<String>,
    /// The demo's own allowlist: its grants permit no real failover.
    simulated: bool,
    /// Granted, revoked, unchanged: each with its pairs, by provider.
    cards: Vec<Card>,
}

#[derive(Serialize)]
struct Card {
    effect: &'static str,
    title: &'static str,
    pairs: usize,
    providers: Vec<ProviderLine>,
}

/// One provider's pairs in a card: a person decides per provider.
#[derive(Serialize)]
struct ProviderLine {
    provider: String,
    suites: Vec<SuiteRef>,
    /// The codes behind the provider's revocations, each once, in order of appearance.
    codes: Vec<String>,
}

#[derive(Serialize)]
struct SuiteRef {
    suite: String,
    anchor: String,
    /// Said only where it differs from what the card already says.
    detail: Option<String>,
}

#[derive(Serialize)]
struct PairView<'a> {
    anchor: String,
    view: VerdictView<'a>,
    fate: Option<Fate>,
    /// What decided the pair before its last call, in words, when something did.
    decided: Option<String>,
    groups: Vec<Group>,
    ungrouped: u64,
}

fn fate(effect: &PairEffect, simulated: bool) -> Fate {
    match effect {
        PairEffect::Granted { valid_until } if simulated => Fate {
            effect: "granted",
            text: format!(
                "simulated grant until {}: no real failover",
                to_second_text(valid_until)
            ),
        },
        PairEffect::Granted { valid_until } => Fate {
            effect: "granted",
            text: format!("allowlisted until {}", to_second_text(valid_until)),
        },
        PairEffect::Revoked { .. } => Fate {
            effect: "revoked",
            text: "allowlist entry revoked".into(),
        },
        // The verdict's codes already say why an inconclusive pair is left alone.
        PairEffect::Unchanged {
            why: Unchanged::Inconclusive { .. },
        } => Fate {
            effect: "unchanged",
            text: "allowlist unchanged".into(),
        },
        PairEffect::Unchanged { why } => Fate {
            effect: "unchanged",
            text: format!("allowlist unchanged: {}", why.explain()),
        },
    }
}

/// The id of the `i`-th pair's section.
fn anchor(i: usize) -> String {
    format!("pair-{}", i + 1)
}

fn allowlist_view(
    decision: &AllowlistEffect,
    index: &HashMap<(String, String), usize>,
) -> AllowlistView {
    let mut ends = decision.pairs.iter().filter_map(|p| match &p.effect {
        PairEffect::Granted { valid_until } => Some(valid_until),
        _ => None,
    });
    let until = ends
        .next()
        .and_then(|first| ends.all(|e| e == first).then(|| to_second_text(first)));
    let granted = if decision.simulated {
        "Granted, simulated: no real failover"
    } else {
        "Granted: failover permitted"
    };
    let mut cards = [
        ("granted", granted),
        ("revoked", "Revoked: no failover"),
        ("unchanged", "Unchanged"),
    ]
    .map(|(effect, title)| Card {
        effect,
        title,
        pairs: 0,
        providers: Vec::new(),
    });
    for p in &decision.pairs {
        let (card, detail, codes) = match &p.effect {
            PairEffect::Granted { valid_until } => (
                0,
                until
                    .is_none()
                    .then(|| format!("until {}", to_second_text(valid_until))),
                &[][..],
            ),
            PairEffect::Revoked { reasons } => (1, None, &reasons[..]),
            // An untouched file's pairs are all unchanged for the reason the line gives.
            PairEffect::Unchanged { why } => (
                2,
                decision.untouched.is_none().then(|| why.explain()),
                &[][..],
            ),
        };
        let card = &mut cards[card];
        card.pairs += 1;
        let line = match card.providers.iter().position(|l| l.provider == p.provider) {
            Some(i) => &mut card.providers[i],
            None => {
                card.providers.push(ProviderLine {
                    provider: p.provider.clone(),
                    suites: Vec::new(),
                    codes: Vec::new(),
                });
                let last = card.providers.len() - 1;
                &mut card.providers[last]
            }
        };
        line.suites.push(SuiteRef {
            suite: p.suite.clone(),
            anchor: index
                .get(&(p.suite.clone(), p.provider.clone()))
                .map(|&i| anchor(i))
                .unwrap_or_default(),
            detail,
        });
        for code in codes {
            if !line.codes.contains(code) {
                line.codes.push(code.clone());
            }
        }
    }
    AllowlistView {
        path: decision.path.display().to_string(),
        counts: decision.counts(),
        untouched: decision.untouched.as_ref().map(|u| u.explain()),
        replaced_unreadable: decision.replaced_unreadable.clone(),
        until,
        simulated: decision.simulated,
        cards: cards.into(),
    }
}

/// The failures of each pair, gathered from the `results.jsonl` lines as they are read.
pub struct Examples {
    index: HashMap<(String, String), usize>,
    failures: Vec<Failures>,
}

impl Examples {
    /// Nothing gathered yet, for the pairs of `views` (in their order).
    pub fn new(views: &[VerdictView<'_>]) -> Self {
        Examples {
            index: views
                .iter()
                .enumerate()
                .map(|(i, v)| ((v.suite.to_string(), v.provider.to_string()), i))
                .collect(),
            failures: views.iter().map(|_| Failures::default()).collect(),
        }
    }

    /// Gathers one `results.jsonl` line, if its call failed.
    pub fn call(&mut self, line: &str) {
        // Most calls pass: those are told by one field, nothing of the line copied.
        if serde_json::from_str::<Passed>(line).is_ok_and(|p| p.passed) {
            return;
        }
        // A line cut short by a crash is skipped here; report.json keeps it verbatim.
        let Ok(call) = serde_json::from_str::<Line>(line) else {
            return;
        };
        // A saved call is no failure: the pair's section says what decided it.
        if call.passed || call.saved {
            return;
        }
        if let Some(&i) = self.index.get(&(call.suite.clone(), call.provider.clone())) {
            self.failures[i].add(&call);
        }
    }
}

/// Renders the page from the verdicts, what became of the allowlist, and the failures
/// gathered from the run's `results.jsonl` (`examples`, made for the same `views`).
pub fn render(
    result: &RunResult,
    views: Vec<VerdictView<'_>>,
    decision: &AllowlistEffect,
    examples: Examples,
) -> io::Result<String> {
    let Examples { index, failures } = examples;
    let mut counts = Counts::default();
    let mut cells: HashMap<(String, String), Cell> = HashMap::new();
    // The views come in the run's order, so first appearances keep the suites' and the
    // providers' own order.
    let mut suites: Vec<String> = Vec::new();
    let mut providers: Vec<String> = Vec::new();
    let mut pairs = Vec::with_capacity(views.len());
    for (i, (view, failed)) in views.into_iter().zip(failures).enumerate() {
        match view.verdict {
            "conformant" => counts.conformant += 1,
            "nonconformant" => counts.nonconformant += 1,
            _ => counts.inconclusive += 1,
        }
        if !suites.iter().any(|n| n == view.suite) {
            suites.push(view.suite.to_string());
        }
        if !providers.iter().any(|n| n == view.provider) {
            providers.push(view.provider.to_string());
        }
        let fate = decision
            .pair(view.suite, view.provider)
            .map(|p| fate(&p.effect, decision.simulated));
        let anchor = anchor(i);
        cells.insert(
            (view.suite.to_string(), view.provider.to_string()),
            Cell {
                suite: view.suite.to_string(),
                provider: view.provider.to_string(),
                verdict: view.verdict,
                reasons: conform_check::verdict::Reason::names(view.reasons),
                passed: view.tally.passed,
                planned: view.tally.planned,
                saved: view.tally.saved,
                anchor: anchor.clone(),
                fate: fate.clone(),
            },
        );
        let failed = failed.finish();
        pairs.push(PairView {
            anchor,
            decided: super::terminal::decision_text(view.tally),
            view,
            fate,
            groups: failed.groups,
            ungrouped: failed.ungrouped,
        });
    }
    let matrix = matrix(&suites, &providers, &cells);
    let page = Page {
        run: RunView {
            id: &result.run_id,
            started_at: to_second(result.started_at),
            finished_at: to_second(result.finished_at),
            took: seconds_text(result.finished_at - result.started_at),
            complete: result.complete,
            over_budget: result.over_budget,
            version: env!("CARGO_PKG_VERSION"),
        },
        counts,
        matrix,
        allowlist: allowlist_view(decision, &index),
        pairs,
    };
    let mut env = minijinja::Environment::new();
    // The name ends in `.html`, which turns HTML escaping on for everything rendered.
    env.add_template("report.html", TEMPLATE)
        .and_then(|()| env.get_template("report.html"))
        .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(&page))))
        .map_err(io::Error::other)
}

/// The verdicts as a grid: the longer list (suites or providers) down the side.
fn matrix(
    suites: &[String],
    providers: &[String],
    cells: &HashMap<(String, String), Cell>,
) -> Matrix {
    let by_provider = providers.len() > suites.len();
    let (row_names, column_names) = if by_provider {
        (providers, suites)
    } else {
        (suites, providers)
    };
    Matrix {
        rows_are: if by_provider { "provider" } else { "suite" },
        columns_are: if by_provider { "suite" } else { "provider" },
        columns: column_names.to_vec(),
        rows: row_names
            .iter()
            .map(|row| MatrixRow {
                head: row.clone(),
                cells: column_names
                    .iter()
                    .map(|column| {
                        let key = if by_provider {
                            (column.clone(), row.clone())
                        } else {
                            (row.clone(), column.clone())
                        };
                        cells.get(&key).cloned()
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Writes `report.html` beside `results.jsonl`, with the failures `examples` gathered
/// from it, and returns its path.
pub fn write(
    result: &RunResult,
    targets: &[Arc<Target>],
    decision: &AllowlistEffect,
    examples: Examples,
) -> io::Result<PathBuf> {
    let path = result.dir.join("report.html");
    std::fs::write(
        &path,
        render(result, verdict_views(result, targets), decision, examples)?,
    )?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::EntryEffect;
    use conform_check::check::Code;
    use conform_check::verdict::{Reason, Tally, Verdict};
    use serde_json::json;

    /// The page for `result`, its failures gathered from its `results.jsonl`.
    fn rendered(
        result: &RunResult,
        views: Vec<VerdictView<'_>>,
        decision: &AllowlistEffect,
    ) -> io::Result<String> {
        let mut examples = Examples::new(&views);
        crate::results::Lines::each(&result.dir, |line| {
            examples.call(line);
            Ok(())
        })?;
        render(result, views, decision, examples)
    }

    /// A run folder whose `results.jsonl` holds `lines`, then a line cut short.
    fn run_with(dir: &std::path::Path, lines: &[serde_json::Value], complete: bool) -> RunResult {
        let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        text.push_str("{\"suite\": \"s\", \"case\": \"cut");
        std::fs::write(dir.join("results.jsonl"), text).unwrap();
        let start = time::macros::datetime!(2026-03-01 09:12:44.987654 UTC);
        RunResult {
            run_id: "run-1".into(),
            dir: dir.to_path_buf(),
            started_at: start,
            finished_at: start + time::Duration::milliseconds(65_400),
            complete,
            over_budget: false,
            verdicts: Vec::new(),
        }
    }

    fn failed(
        suite: &str,
        provider: &str,
        case: &str,
        codes: &[&str],
        output: &str,
    ) -> serde_json::Value {
        let findings: Vec<_> = codes
            .iter()
            .map(|c| json!({"code": c, "message": format!("<b>{c}</b> in {case}"), "path": "/total"}))
            .collect();
        json!({"suite": suite, "case": case, "provider": provider, "repeat": 0, "passed": false,
            "checks": [{"check": "schema", "status": "fail", "findings": findings}],
            "output": output})
    }

    fn view<'a>(tally: &'a Tally, verdict: Verdict, reasons: &'a [Reason]) -> VerdictView<'a> {
        VerdictView {
            suite: &tally.suite,
            provider: &tally.provider,
            model: "m<1>",
            verdict: verdict.as_str(),
            reasons,
            pass_rate: 0.0,
            first_attempt_pass_rate: 0.0,
            rules_out: conform_gate::allowlist::RulesOut::of(tally.planned, tally.passed),
            sent: tally.sent(),
            tally,
        }
    }

    fn decision(pairs: Vec<EntryEffect>) -> AllowlistEffect {
        AllowlistEffect {
            path: "allow<list>.json".into(),
            untouched: None,
            replaced_unreadable: None,
            pairs,
            simulated: false,
        }
    }

    fn pair(suite: &str, provider: &str, effect: PairEffect) -> EntryEffect {
        EntryEffect {
            suite: suite.into(),
            provider: provider.into(),
            effect,
        }
    }

    /// The text of the matrix cell of (`suite`, `provider`).
    fn cell<'a>(page: &'a str, suite: &str, provider: &str) -> &'a str {
        let open = format!("data-suite=\"{suite}\" data-provider=\"{provider}\">");
        let start = page
            .find(&open)
            .unwrap_or_else(|| panic!("no cell {open} in {page}"));
        let rest = &page[start..];
        &rest[..rest.find("</td>").unwrap()]
    }

    #[test]
    fn model_output_is_escaped_and_the_page_fetches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_with(
            dir.path(),
            &[failed(
                "s",
                "p",
                "c1",
                &["schema_violation"],
                "</pre><script>alert(1)</script>",
            )],
            false,
        );
        let tally = Tally::new("s", "p", 1);
        let page = rendered(
            &result,
            vec![view(&tally, Verdict::Nonconformant, &[])],
            &decision(vec![]),
        )
        .unwrap();
        assert!(!page.contains("<script"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{page}"
        );
        assert!(
            page.contains("&lt;b&gt;schema_violation&lt;&#x2f;b&gt;"),
            "{page}"
        );
        assert!(page.contains("m&lt;1&gt;"), "{page}");
        assert!(page.contains("allow&lt;list&gt;.json"), "{page}");
        assert!(!page.contains(" src="), "{page}");
        assert!(!page.contains("href=\"http"), "{page}");
        assert!(!page.contains("url("), "{page}");
        assert!(page.contains("Interrupted"), "{page}");
    }

    #[test]
    fn times_are_shown_to_the_second() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_with(dir.path(), &[], true);
        let until = "2026-03-08T09:13:50.387654Z";
        let page = rendered(
            &result,
            vec![],
            &decision(vec![pair(
                "s",
                "p",
                PairEffect::Granted {
                    valid_until: until.into(),
                },
            )]),
        )
        .unwrap();
        assert!(
            page.contains("2026-03-01 09:12:44 UTC → 2026-03-01 09:13:50 UTC (took 1 min 05 s)"),
            "{page}"
        );
        assert!(
            page.contains("until <strong>2026-03-08 09:13:50 UTC</strong>"),
            "{page}"
        );
        assert!(!page.contains(".987") && !page.contains(".387"), "{page}");
    }

    #[test]
    fn the_matrix_has_one_coloured_cell_per_pair_with_its_reasons_and_its_allowlist_fate() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_with(dir.path(), &[], true);
        let tallies = [
            Tally::new("invoices", "good", 5),
            Tally::new("tickets", "good", 5),
            Tally::new("invoices", "fenced", 5),
            Tally::new("tickets", "fenced", 5),
        ];
        let fenced = vec![
            Reason::Found(Code::NotPureJson),
            Reason::Found(Code::SchemaViolation),
        ];
        let none: Vec<Reason> = Vec::new();
        let views = vec![
            view(&tallies[0], Verdict::Conformant, &none),
            view(&tallies[1], Verdict::Conformant, &none),
            view(&tallies[2], Verdict::Nonconformant, &fenced),
            view(&tallies[3], Verdict::Inconclusive, &none),
        ];
        let until = "2026-03-08T09:12:44Z".to_string();
        let d = decision(vec![
            pair(
                "invoices",
                "good",
                PairEffect::Granted {
                    valid_until: until.clone(),
                },
            ),
            pair(
                "tickets",
                "good",
                PairEffect::Granted { valid_until: until },
            ),
            pair(
                "invoices",
                "fenced",
                PairEffect::Revoked {
                    reasons: Reason::names(&fenced),
                },
            ),
            pair(
                "tickets",
                "fenced",
                PairEffect::Unchanged {
                    why: Unchanged::Inconclusive {
                        reasons: vec!["auth_failed".into()],
                    },
                },
            ),
        ]);
        let page = rendered(&result, views, &d).unwrap();
        assert_eq!(page.matches("<td class=\"cell ").count(), 4, "{page}");
        let bad = cell(&page, "invoices", "fenced");
        assert!(bad.starts_with("data-suite") && page.contains("<td class=\"cell nonconformant\" data-suite=\"invoices\" data-provider=\"fenced\">"), "{page}");
        assert!(bad.contains("<code class=\"reason\">not_pure_json</code><code class=\"reason\">schema_violation</code>"), "{bad}");
        assert!(bad.contains("allowlist entry revoked"), "{bad}");
        let good = cell(&page, "tickets", "good");
        assert!(!good.contains("class=\"reason\""), "{good}");
        assert!(
            good.contains("allowlisted until 2026-03-08 09:12:44 UTC"),
            "{good}"
        );
        let down = cell(&page, "tickets", "fenced");
        assert!(down.contains("allowlist unchanged<"), "{down}");
        assert!(page.contains("(inconclusive: auth_failed)"), "{page}");
        assert!(
            page.contains("<span class=\"counts\">granted 2, revoked 1, unchanged 1</span>"),
            "{page}"
        );
    }

    #[test]
    fn failures_are_grouped_by_code_with_counts_and_the_first_examples_in_case_order() {
        let dir = tempfile::tempdir().unwrap();
        // Completion order is not case order: the cases arrive backwards.
        let mut lines: Vec<_> = (0..7)
            .rev()
            .map(|i| {
                failed(
                    "s",
                    "p",
                    &format!("case-{i}"),
                    &["schema_violation"],
                    "{\"total\": 1, \"currency\": \"EUR\"}",
                )
            })
            .collect();
        lines.push(failed(
            "s",
            "p",
            "case-9",
            &["not_pure_json", "not_pure_json"],
            "```json\n{}\n```",
        ));
        let result = run_with(dir.path(), &lines, true);
        let tally = Tally::new("s", "p", 10);
        let page = rendered(
            &result,
            vec![view(&tally, Verdict::Nonconformant, &[])],
            &decision(vec![]),
        )
        .unwrap();

        let schema = page
            .find("<code>schema_violation</code><span class=\"count\">7 of 10 calls</span>")
            .unwrap_or_else(|| panic!("{page}"));
        let fence = page
            .find("<code>not_pure_json</code><span class=\"count\">1 of 10 calls</span>")
            .unwrap_or_else(|| panic!("{page}"));
        assert!(schema < fence, "the most frequent code comes first");
        let shown: Vec<usize> = (0..7)
            .filter_map(|i| page.find(&format!("case <code>case-{i}</code>")))
            .collect();
        assert_eq!(shown.len(), MAX_EXAMPLES, "{page}");
        assert!(
            shown.windows(2).all(|w| w[0] < w[1]),
            "examples in case order"
        );
        assert!(
            page.contains("case <code>case-0</code>") && page.contains("case <code>case-2</code>")
        );
        assert!(
            page.contains("… and 4 more calls with <code>schema_violation</code>"),
            "{page}"
        );
        // JSON comes back pretty-printed and escaped; anything else as it came.
        assert!(
            page.contains("{\n  &quot;total&quot;: 1,\n  &quot;currency&quot;: &quot;EUR&quot;\n}"),
            "{page}"
        );
        assert!(page.contains("```json\n{}\n```"), "{page}");
        // Two findings of one code in one call count the call once.
        assert_eq!(
            page.matches("&lt;b&gt;not_pure_json&lt;&#x2f;b&gt; in case-9")
                .count(),
            2
        );
    }

    #[test]
    fn a_pair_keeps_a_bounded_number_of_codes_and_examples() {
        let mut failures = Failures::default();
        for i in 0..(MAX_GROUPS + 5) {
            for case in 0..(MAX_EXAMPLES + 4) {
                let line: Line = serde_json::from_value(failed(
                    "s",
                    "p",
                    &format!("c{case}"),
                    &[&format!("code_{i:02}")],
                    "x",
                ))
                .unwrap();
                failures.add(&line);
            }
        }
        assert_eq!(failures.groups.len(), MAX_GROUPS);
        assert!(
            failures
                .groups
                .iter()
                .all(|g| g.examples.len() == MAX_EXAMPLES)
        );
        assert!(
            failures
                .groups
                .iter()
                .all(|g| g.calls == (MAX_EXAMPLES + 4) as u64)
        );
        assert_eq!(failures.ungrouped, 5 * (MAX_EXAMPLES + 4) as u64);
    }

    #[test]
    fn a_pair_decided_early_says_so_and_its_saved_calls_are_no_failures() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = vec![failed("s", "p", "c0", &["schema_violation"], "{}")];
        for case in ["c1", "c2", "c3"] {
            lines.push(
                json!({"suite": "s", "case": case, "provider": "p", "repeat": 0,
                "passed": false, "saved": true, "checks": [],
                "not_run": "not sent: the verdict on s × p was already decided (see `decided`)"}),
            );
        }
        let result = run_with(dir.path(), &lines, true);
        let mut tally = Tally::new("s", "p", 4);
        tally.failed = 1;
        tally.own_failed = 1;
        tally.saved = 3;
        tally.decide_early(1.0);
        let reasons = vec![Reason::Found(Code::SchemaViolation)];
        let views = vec![view(&tally, Verdict::Nonconformant, &reasons)];
        let page = rendered(&result, views, &decision(Vec::new())).unwrap();
        assert!(page.contains("1 sent, 3 saved"), "{page}");
        assert!(page.contains("0/4 calls passed, 3 saved"), "{page}");
        assert!(
            page.contains("decided after 1 of 4 calls: 1 failures of its own"),
            "{page}"
        );
        assert!(
            !page.contains("not_sent"),
            "saved calls shown as failures: {page}"
        );
    }

    #[test]
    fn calls_not_sent_are_grouped_after_the_failure_that_stopped_the_provider() {
        let mut failures = Failures::default();
        let refused: Line =
            serde_json::from_value(failed("s", "p", "c0", &["connection_refused"], "")).unwrap();
        failures.add(&refused);
        for case in ["c1", "c2"] {
            let line: Line = serde_json::from_value(json!({"suite": "s", "case": case, "provider": "p",
                "repeat": 0, "passed": false, "not_run": "stopped after auth_failed", "checks": []})).unwrap();
            failures.add(&line);
        }
        let failures = failures.finish();
        let codes: Vec<(&str, u64)> = failures
            .groups
            .iter()
            .map(|g| (g.code.as_str(), g.calls))
            .collect();
        assert_eq!(codes, [("connection_refused", 1), ("not_sent", 2)]);
        assert!(
            failures.groups[1].examples[0].findings[0]
                .message
                .contains("auth_failed")
        );
    }
}
