//! `conform run` and `conform demo` end to end: the real binary against wiremock servers
//! speaking OpenAI's wire format.

use crate::common;

use std::collections::BTreeSet;

use common::{Mode, OpenAiMock, Project, answer_book};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const KEY: &str = "sk-test-CONFORM-canary-7f3a9c2e";

fn read_json(p: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn entries(allowlist: &Value) -> BTreeSet<(String, String)> {
    allowlist["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["suite"].as_str().unwrap().to_string(),
                e["provider"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn openai_mock(project: &Project, mode: Mode) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(OpenAiMock {
            book: answer_book(project.root()),
            mode,
        })
        .mount(&server)
        .await;
    server
}

#[test]
fn demo_allowlists_exactly_the_simulated_providers_that_behaved() {
    let sims: Vec<String> = std::fs::read_dir(format!("{}/providers", common::REPO))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("sim-"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    let names: Vec<&str> = sims.iter().map(String::as_str).collect();
    let project = Project::new(&names);
    let out = project
        .cmd()
        .args(["demo", "--no-progress"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The project's own simulations, and it says so.
    assert!(
        stdout.contains("demo: this project's own simulated providers in ")
            && stdout.contains("sim-steady"),
        "{stdout}"
    );
    // A screen a person reads: the latency in the table's columns, not a line per pair,
    // and each example of a failure with how often its code occurred.
    assert!(!stdout.contains("Latency p50 / p95 / p99"), "{stdout}");
    assert!(
        stdout.contains("[schema_violation in 30 of 30 calls]"),
        "{stdout}"
    );
    // Which fields of `expected` count is said where people look, not left to guess.
    assert!(
        stdout.contains("compared with each case's `expected`:\n")
            && stdout.contains(
                "\n  ticket-triage: /category, /priority, /sentiment, /language, /needs_human\n"
            ),
        "{stdout}"
    );

    // Exactly the providers that are built to behave, for every suite.
    let mut expected = BTreeSet::new();
    for sim in &sims {
        let text = std::fs::read_to_string(project.path(&format!("providers/{sim}.toml"))).unwrap();
        if text.contains("expect = \"conformant\"") {
            for suite in std::fs::read_dir(project.path("fixtures")).unwrap() {
                let suite = suite.unwrap().file_name().to_str().unwrap().to_string();
                expected.insert((suite, sim.clone()));
            }
        }
    }
    assert!(expected.iter().any(|(_, p)| p == "sim-steady"));
    assert!(expected.iter().any(|(_, p)| p == "sim-rate-limited"));
    // The demo's evidence stays beside its report, marked simulated; the allowlist
    // production reads is never written.
    let run = project.last_run();
    let demo_list = read_json(&run.join("allowlist.json"));
    assert_eq!(entries(&demo_list), expected);
    assert!(
        demo_list["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["simulated"] == true),
        "{demo_list}"
    );
    assert!(!project.path("allowlist.json").exists());

    // Every other provider is explained by its verdict codes.
    let report = read_json(&run.join("report.json"));
    assert_eq!(report["run"]["complete"], true);
    let triage = (report["suites"].as_array().unwrap().iter())
        .find(|s| s["name"] == "ticket-triage")
        .unwrap();
    assert_eq!(
        triage["compared"],
        serde_json::json!([
            "/category",
            "/priority",
            "/sentiment",
            "/language",
            "/needs_human"
        ])
    );
    for v in report["verdicts"].as_array().unwrap() {
        let key = (
            v["suite"].as_str().unwrap().to_string(),
            v["provider"].as_str().unwrap().to_string(),
        );
        if expected.contains(&key) {
            assert_eq!(v["verdict"], "conformant", "{v}");
        } else {
            assert_eq!(v["verdict"], "nonconformant", "{v}");
            assert!(!v["reasons"].as_array().unwrap().is_empty(), "{v}");
        }
    }
    let codes = |p: &str| -> Vec<String> {
        report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["provider"] == p)
            .flat_map(|v| {
                v["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap().to_string())
            })
            .collect()
    };
    assert!(codes("sim-extra-key").contains(&"schema_violation".to_string()));
    assert!(codes("sim-fenced").contains(&"not_pure_json".to_string()));
    assert!(codes("sim-prose").contains(&"structured_output_ignored".to_string()));
    assert!(codes("sim-truncated").contains(&"finish_length".to_string()));
    // The rate-limited one needed retries and still passed every call.
    let rl = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["provider"] == "sim-rate-limited" && v["suite"] == "invoice-extraction")
        .unwrap();
    assert_eq!(rl["passed"], rl["planned"]);

    // One results line per planned call.
    let lines = std::fs::read_to_string(run.join("results.jsonl")).unwrap();
    let planned: u64 = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["planned"].as_u64().unwrap())
        .sum();
    assert_eq!(lines.lines().count() as u64, planned);
    assert_eq!(report["calls"].as_array().unwrap().len() as u64, planned);
    assert!(stdout.contains("sim-steady"), "{stdout}");

    // CI artefacts: JUnit with one failure per failed call, and a Markdown summary.
    let junit = std::fs::read_to_string(run.join("junit.xml")).unwrap();
    let failed: u64 = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["failed"].as_u64().unwrap())
        .sum();
    assert_eq!(junit.matches("<failure").count() as u64, failed);
    assert!(junit.contains("type=\"not_pure_json\""), "{junit}");
    let summary = std::fs::read_to_string(run.join("summary.md")).unwrap();
    assert!(
        summary.contains("| invoice-extraction | sim-steady | ✅ conformant | 30/30 |"),
        "{summary}"
    );

    // The page for people: a matrix cell and a section per verdict, failures grouped by
    // finding code, the allowlist's changes, and nothing fetched from anywhere.
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    let verdicts = report["verdicts"].as_array().unwrap();
    assert_eq!(page.matches("<td class=\"cell ").count(), verdicts.len());
    assert_eq!(
        page.matches("<section class=\"pair ").count(),
        verdicts.len()
    );
    assert!(
        page.contains("<code>structured_output_ignored</code><span class=\"count\">"),
        "no group for a finding code in the page"
    );
    let conformant = verdicts
        .iter()
        .filter(|v| v["verdict"] == "conformant")
        .count();
    let counts = format!(
        "granted {conformant}, revoked {}, unchanged 0",
        verdicts.len() - conformant
    );
    assert!(
        page.contains(&format!("<span class=\"counts\">{counts}</span>")),
        "{counts}"
    );
    assert!(!page.contains("<script") && !page.contains(" src="));
    assert!(stdout.contains("report.html"), "{stdout}");
    // The job summary says the same, pair by pair.
    assert!(summary.contains(&format!("`: {counts}.\n")), "{summary}");
    assert!(
        summary.contains("- invoice-extraction × sim-fenced: revoked: not_pure_json\n"),
        "{summary}"
    );

    // The terminal gives the allowlist as one short line; the pairs are in the report.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("allowlist: "))
        .unwrap();
    assert!(line.ends_with(&format!(": {counts}")), "{line}");
    assert!(!stdout.contains("  granted  "), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_openai_against_a_mock_sends_the_key_only_in_the_header() {
    let project = Project::new(&["openai"]);
    let server = openai_mock(&project, Mode::Faithful).await;
    project.point("openai", &server.uri());
    let out = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args([
            "-vv",
            "run",
            "openai",
            "--suite",
            "ticket-triage",
            "--no-progress",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    let requests = server.received_requests().await.unwrap();
    let cases = std::fs::read_dir(project.path("fixtures/ticket-triage/cases"))
        .unwrap()
        .count();
    assert_eq!(
        requests.len(),
        cases,
        "one request per case, no hidden retries"
    );
    for r in &requests {
        assert_eq!(
            r.headers.get("authorization").unwrap().to_str().unwrap(),
            format!("Bearer {KEY}")
        );
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["model"], "gpt-4o-mini");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(
            body["response_format"]["json_schema"]["schema"]["additionalProperties"],
            false
        );
    }

    let allowlist = project.allowlist();
    let entry = &allowlist["entries"][0];
    assert_eq!(entry["provider"], "openai");
    assert_eq!(entry["suite"], "ticket-triage");
    assert_eq!(entry["served_models"][0], "gpt-4o-mini-2024-07-18");
    assert_eq!(entry["system_fingerprints"][0], "fp_test0001");

    // The key is nowhere but in the requests' headers.
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
    for (file, text) in project.all_text() {
        assert!(
            !text.contains(KEY),
            "the key leaked into {}",
            file.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_auth_failure_is_inconclusive_leaves_the_allowlist_alone_and_leaks_nothing() {
    let project = Project::new(&["openai"]);
    let before = r#"{"format": "conform.allowlist/v1", "entries": [], "revocations": []}"#;
    project.write("allowlist.json", before);
    let server = openai_mock(&project, Mode::EchoKey401).await;
    let out = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args([
            "-vv",
            "run",
            "openai",
            "--suite",
            "invoice-extraction",
            "--no-progress",
            "--base-url",
        ])
        .arg(server.uri())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("auth_failed"), "{stdout}");
    // -v lists the pairs under the allowlist line, each with why it is as it was.
    assert!(
        stdout.contains(": granted 0, revoked 0, unchanged 1\n  unchanged  invoice-extraction × openai: inconclusive: auth_failed\n"),
        "{stdout}"
    );
    // The provider is stopped after the first refusal: no hammering with a bad key.
    let sent = server.received_requests().await.unwrap().len();
    let in_flight = conform_config::provider::DEFAULT_CONCURRENCY;
    assert!(sent <= in_flight, "{sent} requests after an auth failure");
    assert_eq!(
        std::fs::read_to_string(project.path("allowlist.json")).unwrap(),
        before
    );
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}\n{stderr}"
    );
    for (file, text) in project.all_text() {
        assert!(
            !text.contains(KEY),
            "the key leaked into {}",
            file.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drifting_provider_is_revoked_and_exits_1() {
    let project = Project::new(&["openai"]);
    let good = openai_mock(&project, Mode::Faithful).await;
    let run = |uri: String| {
        project.point("openai", &uri);
        project
            .cmd()
            .env("OPENAI_API_KEY", KEY)
            .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
            .output()
            .unwrap()
    };
    let first = run(good.uri());
    assert_eq!(first.status.code(), Some(0));
    assert_eq!(entries(&project.allowlist()).len(), 1);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.contains("allowlist: ") && stdout.contains(": granted 1, revoked 0, unchanged 0\n"),
        "{stdout}"
    );

    let fenced = openai_mock(&project, Mode::Fenced).await;
    let out = run(fenced.uri());
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let allowlist = project.allowlist();
    assert!(entries(&allowlist).is_empty());
    assert_eq!(allowlist["revocations"][0]["provider"], "openai");
    assert_eq!(allowlist["revocations"][0]["reasons"][0], "not_pure_json");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(": granted 0, revoked 1, unchanged 0\n"),
        "{stdout}"
    );
    // The page says the same, and names the revoked pair with its codes.
    let page = std::fs::read_to_string(project.last_run().join("report.html")).unwrap();
    assert!(
        page.contains("<span class=\"counts\">granted 0, revoked 1, unchanged 0</span>"),
        "{page}"
    );
    assert!(page.contains("allowlist entry revoked"), "{page}");
}

#[test]
fn every_missing_key_is_reported_at_once_with_its_file_and_variable() {
    let project = Project::new(&["openai", "anthropic", "gemini"]);
    let out = project
        .cmd()
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .args(["run", "openai", "anthropic", "gemini", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (file, var) in [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
    ] {
        let source =
            std::fs::read_to_string(project.path(&format!("providers/{file}.toml"))).unwrap();
        let line = source
            .lines()
            .position(|l| l.starts_with("api_key_env"))
            .unwrap()
            + 1;
        let at = format!("providers/{file}.toml:{line}:1: api_key_env: ");
        let problem = stderr
            .lines()
            .find(|l| l.contains(&at))
            .unwrap_or_else(|| panic!("no problem at {at}:\n{stderr}"));
        assert!(problem.contains(&format!("${var}")), "{problem}");
    }
    assert!(stderr.contains("3 problems found"), "{stderr}");
    assert!(!project.path("reports").exists(), "nothing may run");
}

#[test]
fn a_missing_key_is_a_configuration_error_naming_the_variable() {
    let project = Project::new(&["openai"]);
    let out = project
        .cmd()
        .args(["run", "openai", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_marks_the_report_incomplete_and_leaves_the_allowlist_alone() {
    let project = Project::new(&["openai"]);
    let before = r#"{"format": "conform.allowlist/v1", "entries": []}"#;
    project.write("allowlist.json", before);
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(30)),
        )
        .mount(&server)
        .await;
    let bin = assert_cmd::cargo::cargo_bin("conform");
    let child = std::process::Command::new(bin)
        .current_dir(project.root())
        .args([
            "--root",
            ".",
            "run",
            "openai",
            "--no-progress",
            "--base-url",
            &server.uri(),
        ])
        .env("OPENAI_API_KEY", KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the run is under way: every call in flight (openai.toml states no
    // `concurrency`, and this server no limit, so the default) holds a request the server
    // will not answer for 30 s, so no further request can be sent.
    let in_flight = conform_config::provider::DEFAULT_CONCURRENCY;
    let mut sent = 0;
    for _ in 0..400 {
        sent = server.received_requests().await.unwrap().len();
        if sent == in_flight {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(sent, in_flight);
    let out = interrupt(child).await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = read_json(&project.last_run().join("report.json"));
    assert_eq!(report["run"]["complete"], false);
    assert!(
        report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["verdict"] == "inconclusive")
    );
    assert_eq!(
        std::fs::read_to_string(project.path("allowlist.json")).unwrap(),
        before
    );
    // It says how far it got: the requests sent, and the calls completed of those planned.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let planned: u64 = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["planned"].as_u64().unwrap())
        .sum();
    let expected = format!(
        "interrupted: {sent} requests were sent to the providers; 0 of {planned} planned calls completed and recorded"
    );
    assert!(stdout.contains(&expected), "no `{expected}` in:\n{stdout}");
    assert!(
        stdout.contains("the run was interrupted after 0 of "),
        "{stdout}"
    );
    let pairs = report["verdicts"].as_array().unwrap().len();
    assert!(
        stdout.contains(&format!(
            "granted 0, revoked 0, unchanged {pairs} (untouched: the run was interrupted"
        )),
        "{stdout}"
    );
    let page = std::fs::read_to_string(project.last_run().join("report.html")).unwrap();
    assert!(
        page.contains("untouched: the run was interrupted"),
        "{page}"
    );
}

/// Sends Ctrl-C (SIGINT) to a running `conform` and waits for what it printed.
async fn interrupt(mut child: std::process::Child) -> std::process::Output {
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::task::spawn_blocking(move || {
        let _ = child.wait();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// An interrupted run decides the pairs whose calls all came back: a primary that
/// answered everything is not "inconclusive" because another provider hung. It still
/// grants nothing.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_run_still_decides_a_pair_whose_calls_all_came_back() {
    let project = Project::new(&[]);
    let fast = project.chat_mock("local", Mode::Faithful).await;
    let hanging = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(30)),
        )
        .mount(&hanging)
        .await;
    project.chat_provider("slow", &hanging.uri());
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("conform"))
        .current_dir(project.root())
        .args(["--root", ".", "run", "local", "slow", "--no-progress"])
        .args(["--suite", "ticket-triage", "--repeats", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The fast provider is done once its count of requests stops growing while the
    // hanging one holds its calls.
    let (mut last, mut steady) = (0, 0);
    for _ in 0..400 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = fast.received_requests().await.unwrap().len();
        let held = hanging.received_requests().await.unwrap().len();
        steady = if now == last && now > 0 && held > 0 {
            steady + 1
        } else {
            0
        };
        last = now;
        if steady == 10 {
            break;
        }
    }
    assert_eq!(
        steady, 10,
        "the fast provider never settled ({last} requests)"
    );
    let out = interrupt(child).await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = read_json(&project.last_run().join("report.json"));
    assert_eq!(report["run"]["complete"], false);
    let verdict = |p: &str| {
        report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["provider"] == p)
            .unwrap()["verdict"]
            .clone()
    };
    assert_eq!(verdict("local"), "conformant", "{report}");
    assert_eq!(verdict("slow"), "inconclusive", "{report}");
    assert!(!project.path("allowlist.json").exists());
}

/// The `report.json` a run printed the path of (two runs can start in the same second,
/// so the newest folder is not necessarily this run's).
fn report_of(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report path in {stdout}"));
    let path = line.split(" (for people").next().unwrap();
    read_json(std::path::Path::new(path))
}

/// A run recorded against the mock replays with the mock gone and no key: the same
/// verdicts, a re-check under a changed rule, and never a change to the allowlist.
#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_run_replays_without_the_network_or_the_key() {
    let project = Project::new(&["openai"]);
    let server = openai_mock(&project, Mode::Faithful).await;
    let uri = server.uri();
    project.point("openai", &uri);
    let run = |extra: &[&str], key: bool| {
        let mut cmd = project.cmd();
        if key {
            cmd.env("OPENAI_API_KEY", KEY);
        }
        cmd.args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
            .args(extra)
            .output()
            .unwrap()
    };
    let recorded = run(&["--record", "tapes"], true);
    assert_eq!(recorded.status.code(), Some(0), "{recorded:?}");
    let tape = std::fs::read_to_string(project.path("tapes/openai.jsonl")).unwrap();
    let requests = server.received_requests().await.unwrap().len();
    assert_eq!(tape.lines().count(), requests);
    assert!(!tape.contains(KEY), "the key reached the tape");
    let first = report_of(&recorded);
    drop(server);
    let allowlist = std::fs::read(project.path("allowlist.json")).unwrap();

    let replayed = run(&["--replay", "tapes"], false);
    let stdout = String::from_utf8_lossy(&replayed.stdout);
    assert_eq!(replayed.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            ": granted 0, revoked 0, unchanged 1 (untouched: the answers were replayed from tapes"
        ),
        "{stdout}"
    );
    let again = report_of(&replayed);
    for field in ["verdict", "passed", "failed", "codes"] {
        assert_eq!(
            again["verdicts"][0][field], first["verdicts"][0][field],
            "{field}"
        );
    }

    // A stricter rule, checked against the recorded answers.
    let suite = project.path("fixtures/ticket-triage/suite.toml");
    let text = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(
        &suite,
        format!("{text}\n[[rules]]\nname = \"one_tag\"\nexpr = '.tags | length <= 1'\nmessage = \"one tag at most\"\n"),
    )
    .unwrap();
    let stricter = run(&["--replay", "tapes"], false);
    assert_eq!(stricter.status.code(), Some(1), "{stricter:?}");
    let report = report_of(&stricter);
    assert!(
        report["verdicts"][0]["codes"]["rule_failed"]
            .as_u64()
            .unwrap()
            > 0,
        "{report}"
    );
    assert_eq!(
        std::fs::read(project.path("allowlist.json")).unwrap(),
        allowlist
    );

    // A request the tape does not hold: a configuration error, not a verdict.
    let elsewhere = project
        .cmd()
        .args([
            "run",
            "openai",
            "--suite",
            "invoice-extraction",
            "--no-progress",
        ])
        .args(["--base-url", &uri, "--replay", "tapes"])
        .output()
        .unwrap();
    assert_eq!(elsewhere.status.code(), Some(2), "{elsewhere:?}");
    let report = report_of(&elsewhere);
    assert!(
        report["verdicts"][0]["codes"]["not_recorded"]
            .as_u64()
            .unwrap()
            > 0,
        "{report}"
    );
    assert_eq!(
        std::fs::read(project.path("allowlist.json")).unwrap(),
        allowlist
    );
}

/// What came back is printed as it came: a person reads the fenced JSON the application
/// would have received, quotes and line breaks included, not a Rust string literal.
#[tokio::test(flavor = "multi_thread")]
async fn came_back_shows_the_output_as_it_came() {
    let project = Project::new(&["openai"]);
    let fenced = openai_mock(&project, Mode::Fenced).await;
    let out = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
        .args(["--base-url", &fenced.uri()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("came back: "))
        .unwrap_or_else(|| panic!("nothing came back in:\n{stdout}"));
    let indent = lines[at].find("came back: ").unwrap() + "came back: ".len();
    assert!(lines[at].ends_with("came back: ```json"), "{}", lines[at]);
    // The JSON on the next line, aligned under the first, with its quotes as they are.
    let json = lines[at + 1];
    assert_eq!(json.len() - json.trim_start().len(), indent, "{stdout}");
    assert!(json.trim_start().starts_with("{\""), "{json}");
    assert!(!json.contains("\\\""), "escaped quotes: {json}");
    assert!(!stdout.contains("```json\\n"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_replaces_an_unreadable_allowlist_names_the_file() {
    let project = Project::new(&["openai"]);
    project.write(
        "allowlist.json",
        "{\n  \"format\": \"conform.allowlist/v1\",\n",
    );
    let good = openai_mock(&project, Mode::Faithful).await;
    project.point("openai", &good.uri());
    let out = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: the previous allowlist"))
        .unwrap_or_else(|| panic!("no warning in:\n{stderr}"));
    let path = project.path("allowlist.json").display().to_string();
    assert!(warning.contains(&path), "{warning}");
    assert!(warning.contains("line 2, column 36"), "{warning}");
    assert_eq!(entries(&project.allowlist()).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_that_cannot_be_written_is_its_own_exit_and_names_the_path_once() {
    let project = Project::new(&["openai"]);
    let good = openai_mock(&project, Mode::Faithful).await;
    project.point("openai", &good.uri());
    project.write("not-a-folder", "");
    let blocked = project.path("not-a-folder");
    let attempt = |flag: &str, path: std::path::PathBuf| {
        project
            .cmd()
            .env("OPENAI_API_KEY", KEY)
            .args(["run", "openai", "--suite", "ticket-triage", "--no-progress"])
            .arg(flag)
            .arg(path)
            .output()
            .unwrap()
    };
    // Where the records go, and where the allowlist goes once the reports are written.
    for (flag, path) in [
        ("--reports", blocked.join("reports")),
        ("--allowlist", blocked.join("allowlist.json")),
    ] {
        let out = attempt(flag, path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{flag}: {stderr}");
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{flag}: no error in {stderr}"));
        assert!(error.contains(&blocked.display().to_string()), "{error}");
        assert_eq!(error.matches("(os error").count(), 1, "{error}");
    }
}

/// `conform demo` from any folder: the binary carries the simulated providers and the
/// demo's suites, so an empty folder and a project `conform init` made (no simulations of
/// its own) both get every simulated provider's verdict, and no allowlist is written.
#[test]
fn the_demo_runs_from_an_empty_folder_and_from_a_new_project() {
    let sims = std::fs::read_dir(format!("{}/providers", common::REPO))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .filter(|name| name.starts_with("sim-"))
        .map(|name| name.trim_end_matches(".toml").to_string())
        .collect::<Vec<_>>();
    let conform = |dir: &std::path::Path, args: &[&str]| {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(dir).args(args);
        for var in [
            "CONFORM_ROOT",
            "CONFORM_ALLOWLIST",
            "CONFORM_TRUST",
            "RUST_LOG",
        ] {
            cmd.env_remove(var);
        }
        cmd.output().unwrap()
    };
    let empty = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let init = conform(project.path(), &["init", "--fallback", "anthropic"]);
    assert_eq!(init.status.code(), Some(0), "{init:?}");
    for dir in [empty.path(), project.path()] {
        let out = conform(dir, &["demo", "--no-progress"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("running the ones built into conform")
                && stdout.contains("every simulated provider earned the verdict"),
            "{stdout}"
        );
        let run = (std::fs::read_dir(dir.join("reports")).unwrap())
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        let report = read_json(&run.join("report.json"));
        let ran = report.to_string();
        for sim in &sims {
            assert!(ran.contains(&format!("\"{sim}\"")), "{sim} did not run");
        }
        assert!(!dir.join("allowlist.json").exists());
    }
}

/// `demo --allowlist F` is not silently ignored: the demo says it never writes F, and
/// does not.
#[test]
fn the_demo_says_it_leaves_a_given_allowlist_alone() {
    let project = Project::new(&["sim-steady"]);
    let out = project
        .cmd()
        .args(["demo", "--no-progress", "--suite", "ticket-triage"])
        .arg("--allowlist")
        .arg(project.path("mine.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the demo does not write") && stderr.contains("mine.json"),
        "{stderr}"
    );
    assert!(!project.path("mine.json").exists());
    assert!(project.last_run().join("allowlist.json").is_file());
}

/// A suite that compares `/label` (`agree`) in cases with neither `expected` nor a
/// recorded reference, and `providers/NAME.toml` for each name, answering
/// `{"label": "a"}` from `server`, faithfully.
async fn labels_project(names: &[&str]) -> (Project, MockServer) {
    let project = Project::new(&[]);
    project.write(
        "fixtures/labels/suite.toml",
        "user = \"Label {{ text }}\"\nschema = \"schema.json\"\nagree = [\"/label\"]\n",
    );
    project.write(
        "fixtures/labels/schema.json",
        r#"{"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}"#,
    );
    for n in 0..36 {
        project.write(
            &format!("fixtures/labels/cases/c{n:02}.json"),
            &format!(r#"{{"vars": {{"text": "{n}"}}}}"#),
        );
    }
    let server = common::answering(
        "/v1/chat/completions",
        wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "{\"label\": \"a\"}"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        })),
    )
    .await;
    for name in names {
        project.chat_provider(name, &server.uri());
    }
    (project, server)
}

/// Issue 42: `agree` with neither `expected` nor a reference revoked a faithful provider
/// after one call, with no finding recorded anywhere. The run now refuses the suite
/// before sending anything, naming the suite, a case file and the pointer, and says what
/// to do; given a reference, it runs.
#[tokio::test(flavor = "multi_thread")]
async fn agree_with_nothing_to_compare_with_is_refused_before_anything_is_sent() {
    let (project, server) = labels_project(&["local", "primary"]).await;
    let out = project
        .cmd()
        .args(["run", "local", "--suite", "labels", "--no-progress"])
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "{text}"
    );
    assert!(!project.path("allowlist.json").exists(), "{text}");
    for needle in [
        "fixtures/labels/suite.toml:3:1: agree: suite `labels`: agree compares /label",
        "36 cases (cases/c00.json, cases/c01.json, cases/c02.json and 33 more)",
        "neither `expected` nor a recorded `reference`",
        "nothing was sent",
        "add `expected` holding /label to each",
        "or run with --reference PRIMARY",
    ] {
        assert!(text.contains(needle), "no `{needle}` in:\n{text}");
    }
    // With a reference to compare with, the same suite runs.
    let out = project
        .cmd()
        .args(["run", "local", "--suite", "labels", "--no-progress"])
        .args(["--reference", "primary", "--repeats", "2"])
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert_ne!(out.status.code(), Some(2), "{text}");
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        144,
        "{text}"
    );
    let report = report_of(&out);
    let local = (report["verdicts"].as_array().unwrap().iter())
        .find(|v| v["provider"] == "local")
        .unwrap();
    assert_ne!(local["verdict"], "nonconformant", "{local}");
    // No case has `expected`: nothing is said to be compared with it.
    assert!(
        !text.contains("compared with each case's `expected`"),
        "{text}"
    );
}

/// With `--reference`, `--base-url` replaces the candidate's address, says so, and
/// leaves the reference as its file says: the comparison is not withheld for it.
#[tokio::test(flavor = "multi_thread")]
async fn base_url_beside_a_reference_says_which_provider_it_replaced() {
    let (project, server) = labels_project(&["local", "primary"]).await;
    let out = project
        .cmd()
        .args(["run", "local", "--suite", "labels", "--no-progress"])
        .args(["--reference", "primary", "--repeats", "2"])
        .args(["--base-url", &server.uri()])
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert_ne!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!(
            "--base-url {} replaces the address of `local` only; the reference `primary` is sent where providers/primary.toml says",
            server.uri()
        )),
        "{text}"
    );
    assert!(
        !text.contains("judged against the reference `primary`, run with"),
        "{text}"
    );
    assert!(text.contains("run with --base-url"), "{text}");
}

/// Issue 42: a pair decided early said `36 failed` on its progress line though one call
/// was sent. Calls saved (or not sent) are counted apart from those that failed, on the
/// progress line, in the terminal's summary and in `report.json`.
#[tokio::test(flavor = "multi_thread")]
async fn a_pair_decided_early_counts_only_the_calls_that_failed_as_failed() {
    let project = Project::new(&[]);
    let _server = project.chat_mock("local", Mode::Fenced).await;
    // In a pipe, the progress line is printed as the run ends.
    let out = project
        .cmd()
        .args(["run", "local", "--suite", "ticket-triage"])
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let report = report_of(&out);
    let pair = &report["verdicts"][0];
    let (failed, saved) = (
        pair["failed"].as_u64().unwrap(),
        pair["saved"].as_u64().unwrap(),
    );
    assert!(failed >= 1 && saved >= 1, "{pair}");
    assert_eq!(
        (pair["sent"].as_u64(), pair["planned"].as_u64()),
        (Some(failed), Some(30))
    );
    assert_eq!(failed + saved, 30, "{pair}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = (stderr.lines())
        .rfind(|l| l.starts_with("conform: "))
        .unwrap_or_else(|| panic!("no progress line in {stderr}"));
    assert!(
        last.starts_with(&format!(
            "conform: 30/30 calls, {failed} failed, {saved} saved, "
        )),
        "{last}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("calls: 30 planned, {failed} sent, {saved} saved")),
        "{stdout}"
    );
    // The first failure decided it; the calls already in flight then came back failed.
    assert!(
        stdout.contains("decided after 1 of 30 calls: 1 failures of its own"),
        "{stdout}"
    );
}
