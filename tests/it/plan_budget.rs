//! `conform plan`, `run --dry-run`, `run --budget` and the cost in the reports, with the
//! real binary against a wiremock server that bills as OpenAI does (prompt tokens of
//! gpt-4o-mini's encoding, per message).

use crate::common;

use std::collections::HashMap;

use common::{Mode, OpenAiMock, Project, answer_book};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const KEY: &str = "sk-test-plan-0123456789";
const INPUT: f64 = 0.15;
const OUTPUT: f64 = 0.60;
const CACHED: f64 = 0.075;

async fn project() -> (Project, MockServer) {
    let project = Project::new(&["openai"]);
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(OpenAiMock {
            book: answer_book(project.root()),
            mode: Mode::Faithful,
        })
        .mount(&server)
        .await;
    let base = std::fs::read_to_string(project.path("providers/openai.toml")).unwrap();
    project.write(
        "providers/openai.toml",
        &format!(
            "base_url = \"{}\"\n{base}\n[pricing]\ninput_per_mtok = {INPUT}\noutput_per_mtok = {OUTPUT}\ncached_input_per_mtok = {CACHED}\n",
            server.uri()
        ),
    );
    (project, server)
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run_dir(out: &std::process::Output) -> std::path::PathBuf {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report path in {stdout}"));
    std::path::PathBuf::from(line.split(" (for people").next().unwrap())
        .parent()
        .unwrap()
        .to_path_buf()
}

fn plan_json(project: &Project) -> Value {
    let out = project
        .cmd()
        .args([
            "plan",
            "openai",
            "--suite",
            "ticket-triage",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plan_holds_the_cost_of_every_replayed_call_and_the_reports_show_both() {
    let (project, server) = project().await;
    let plan = plan_json(&project);
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "the plan sent a request"
    );
    let pair = &plan["pairs"][0];
    assert_eq!(pair["calls"], 30);
    assert_eq!(
        pair["exact"], true,
        "o200k_base counts OpenAI prompts exactly"
    );
    assert_eq!(pair["max_output_tokens"], 1024);
    assert_eq!(pair["output_ceiling"], 30 * 1024);
    let ranges: HashMap<String, (u64, f64, f64)> = pair["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["case"].as_str().unwrap().to_string(),
                (
                    c["prompt_tokens"].as_u64().unwrap(),
                    c["cost"]["low"].as_f64().unwrap(),
                    c["cost"]["high"].as_f64().unwrap(),
                ),
            )
        })
        .collect();

    // The text form and `run --dry-run` say the same and send nothing either.
    let dry = project
        .cmd()
        .args(["run", "openai", "--suite", "ticket-triage", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    let dry_text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry_text.contains("ticket-triage  openai"), "{dry_text}");
    assert!(dry_text.contains("total: 30 calls"), "{dry_text}");
    assert!(server.received_requests().await.unwrap().is_empty());

    let recorded = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
        .args(["--record", "tapes"])
        .output()
        .unwrap();
    assert_eq!(recorded.status.code(), Some(0), "{}", text(&recorded));
    drop(server);
    let replayed = project
        .cmd()
        .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
        .args(["--replay", "tapes"])
        .output()
        .unwrap();
    assert_eq!(replayed.status.code(), Some(0), "{}", text(&replayed));
    let dir = run_dir(&replayed);
    let results = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let mut total = 0.0;
    let mut checked = 0;
    for line in results.lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        let case = record["case"].as_str().unwrap();
        let (tokens, low, high) = ranges[case];
        let prompt = record["usage"]["prompt_tokens"].as_u64().unwrap();
        let output = record["usage"]["output_tokens"].as_u64().unwrap();
        assert_eq!(
            prompt, tokens,
            "{case}: the plan counted what the provider billed"
        );
        let cost = (prompt as f64 * INPUT + output as f64 * OUTPUT) / 1e6;
        assert!(
            low <= cost && cost <= high,
            "{case}: {cost} outside {low}..{high}"
        );
        total += cost;
        checked += 1;
    }
    assert_eq!(checked, 30);

    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let cost = &report["verdicts"][0]["cost"];
    assert!(
        (cost["actual_usd"].as_f64().unwrap() - total).abs() < 1e-12,
        "{cost}"
    );
    assert_eq!(cost["estimate"], plan["pairs"][0]["cost"], "{cost}");
    assert_eq!(cost["calls_without_usage"], 0);
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(summary.contains("### Cost"), "{summary}");
    assert!(
        summary.contains(&format!("| ticket-triage | openai | ${total:.4} |")),
        "{summary}"
    );
    let stdout = String::from_utf8_lossy(&replayed.stdout);
    assert!(
        stdout.contains(&format!("ticket-triage × openai: ${total:.4} (estimate $")),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_below_the_plan_stops_within_a_wave_and_allowlists_nothing() {
    let (project, server) = project().await;
    let run = |extra: &[&str]| {
        project
            .cmd()
            .env("OPENAI_API_KEY", KEY)
            .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
            .args(extra)
            .output()
            .unwrap()
    };
    let full = run(&[]);
    assert_eq!(full.status.code(), Some(0), "{}", text(&full));
    let allowlist = std::fs::read(project.path("allowlist.json")).unwrap();
    let history = std::fs::read(project.path("reports/history.jsonl")).unwrap();
    let sent_before = server.received_requests().await.unwrap().len();
    assert_eq!(sent_before, 30);

    let plan = plan_json(&project);
    let highs: Vec<f64> = plan["pairs"][0]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cost"]["high"].as_f64().unwrap())
        .collect();
    let plan_high = plan["cost"]["high"].as_f64().unwrap();
    let budget = plan_high / 4.0;
    let out = run(&["--budget", &budget.to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("budget: stopped before a call could take the spend over"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(project.path("allowlist.json")).unwrap(),
        allowlist
    );
    assert_eq!(
        std::fs::read(project.path("reports/history.jsonl")).unwrap(),
        history,
        "an inconclusive run went into the history"
    );

    let sent = server.received_requests().await.unwrap().len() - sent_before;
    assert!(sent >= 1, "the budget allowed some calls");
    assert!(sent < 30);
    let report: Value =
        serde_json::from_slice(&std::fs::read(run_dir(&out).join("report.json")).unwrap()).unwrap();
    assert_eq!(report["run"]["complete"], false);
    assert_eq!(report["verdicts"][0]["verdict"], "inconclusive");
    // Said as what happened: the budget stopped it, after the calls that were sent.
    assert_eq!(
        report["verdicts"][0]["reasons"],
        serde_json::json!(["budget_reached"])
    );
    assert!(!stdout.contains("interrupted"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "the budget stopped the run after {sent} of 30 calls"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("stopped by the budget: {sent} requests were sent to the providers; {sent} of 30 planned calls completed")),
        "{stdout}"
    );
    let actual = report["verdicts"][0]["cost"]["actual_usd"]
        .as_f64()
        .unwrap();
    assert!(actual <= budget, "spent {actual} of {budget}");
    // It stopped when the next call's ceiling no longer fitted beside the calls in
    // flight (at most `concurrency` = 8 of them), not while a wave's worth of room was left.
    let max_high = highs.iter().copied().fold(0.0, f64::max);
    assert!(
        budget - actual < 9.0 * max_high,
        "stopped with {} of {budget} left",
        budget - actual
    );
    let not_sent = report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["not_run"].as_str().is_some_and(|w| w.contains("budget")))
        .count();
    assert_eq!(
        not_sent + sent,
        30,
        "every planned call is recorded, sent or not"
    );
}

#[test]
fn a_budget_needs_prices_and_prices_are_checked_with_their_line() {
    let project = Project::new(&["openai"]);
    let out = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "openai", "--suite", "ticket-triage", "--budget", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("add [pricing]"), "{}", text(&out));
    assert!(text(&out).contains("openai.toml"), "{}", text(&out));

    let base = std::fs::read_to_string(project.path("providers/openai.toml")).unwrap();
    project.write(
        "providers/openai.toml",
        &format!(
            "{base}\n[pricing]\ninput_per_mtok = 0.15\noutput_per_mtok = 0.6\ninput_per_token = 1\n"
        ),
    );
    let out = project.cmd().args(["plan", "openai"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let line = base.lines().count() + 5;
    assert!(
        text(&out).contains(&format!("openai.toml:{line}"))
            && text(&out).contains("input_per_token"),
        "{}",
        text(&out)
    );
}

/// A plan counts every case for each provider from the bytes its pre-flight held: the case
/// files are read once, however many providers are planned.
#[cfg(target_os = "linux")]
#[test]
fn a_plan_reads_each_case_once_for_all_its_providers() {
    use conform_config::{Paths, Selection, Workspace};
    use conform_wire::tokenize::Counter;
    use std::sync::Arc;

    let project = Project::new(&["openai"]);
    let openai = std::fs::read_to_string(project.path("providers/openai.toml")).unwrap();
    project.write("providers/second.toml", &openai);
    let selection = Selection {
        providers: vec!["openai".into(), "second".into()],
        suites: vec!["ticket-triage".into()],
    };
    let workspace = Workspace::load(&Paths::under(project.root()), &selection).unwrap();
    let case_bytes: u64 = std::fs::read_dir(project.path("fixtures/ticket-triage/cases"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let cases = workspace.suites[0].cases.len();
    let providers: Vec<_> = workspace
        .providers
        .iter()
        .map(|c| (Arc::new(c.clone()), Counter::for_provider(c).unwrap()))
        .collect();

    let (plan, read) = common::bytes_read_by(|| {
        let suites =
            conform::run::prepare(workspace.suites, conform::run::Keep::CaseBytes).unwrap();
        conform::plan::plan(&suites, &providers, None, None).unwrap()
    });

    assert_eq!(plan.pairs.len(), 2);
    assert!(plan.pairs.iter().all(|p| p.cases.len() == cases));
    assert!(
        read >= case_bytes && read < case_bytes + case_bytes / 2,
        "read {read} bytes for {case_bytes} bytes of cases"
    );
}
