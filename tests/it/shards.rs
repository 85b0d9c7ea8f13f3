//! `conform run --shard K/N` and `conform merge`, end to end with the real binary: for
//! N = 1, 2, 4 and 7 the merged run's verdicts and the allowlist its evidence writes are
//! those of an unsharded run of the same recorded tapes (apart from run ids, times and
//! report paths); a missing, duplicated or foreign shard is refused with exit 3 and the
//! allowlist left byte-identical; live shards merge into one allowlist update and one
//! history entry.
//!
//! How replays are compared: a replay never touches the allowlist (an invariant of
//! `run --replay`, kept by a merge of replayed shards), so both an unsharded replay and a
//! merge of replayed shards write the allowlist their evidence would produce from the
//! current one to REPORT_DIR/allowlist.replayed.json, by the same code path that updates
//! the real one. Those two files are what is compared.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Mode, OpenAiMock, Project, answer_book};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// Cases in fixtures/ticket-triage.
const TICKETS: u64 = 30;
const KEY: &str = "sk-test-shards-0123456789";
const SUITES: [&str; 4] = ["--suite", "invoice-extraction", "--suite", "ticket-triage"];

async fn mock(project: &Project, mode: Mode) -> MockServer {
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

/// Two OpenAI providers, one faithful and one that fences its JSON, each at its mock.
async fn project() -> (Project, MockServer, MockServer) {
    let project = Project::new(&["openai"]);
    let faithful = mock(&project, Mode::Faithful).await;
    let fenced = mock(&project, Mode::Fenced).await;
    let base = std::fs::read_to_string(project.path("providers/openai.toml")).unwrap();
    project.write(
        "providers/openai.toml",
        &format!("base_url = \"{}\"\n{base}", faithful.uri()),
    );
    project.write(
        "providers/fenced.toml",
        &format!("base_url = \"{}\"\n{base}", fenced.uri()),
    );
    (project, faithful, fenced)
}

fn run(project: &Project, extra: &[&str]) -> std::process::Output {
    project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "openai", "fenced", "--no-progress", "--repeats", "2"])
        .args(SUITES)
        .args(extra)
        .output()
        .unwrap()
}

fn merge(project: &Project, dirs: &[&Path]) -> std::process::Output {
    project.cmd().arg("merge").args(dirs).output().unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The run folder a run or merge printed (`report: DIR/report.json (…)`).
fn run_dir(out: &std::process::Output) -> PathBuf {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report path in {stdout}"));
    let report = PathBuf::from(line.split(" (for people").next().unwrap());
    report.parent().unwrap().to_path_buf()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// `value` with what may differ between two runs of the same evidence blanked: run ids,
/// times, report paths, and the latencies measured (a live run times its calls; a
/// replayed one has nothing to time).
fn normalized(mut value: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("latency");
                for (k, child) in map.iter_mut() {
                    if [
                        "run_id",
                        "at",
                        "generated_at",
                        "valid_until",
                        "first_call_at",
                        "timestamp",
                        "report",
                    ]
                    .contains(&k.as_str())
                    {
                        *child = Value::String("…".into());
                    } else {
                        walk(child);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

/// The verdicts of a report, without the examples (a run keeps the first failures to
/// arrive, and arrival order is the scheduler's) and the measured latencies.
fn verdicts(report: &Value) -> Value {
    let mut verdicts = report["verdicts"].clone();
    for v in verdicts.as_array_mut().unwrap() {
        let v = v.as_object_mut().unwrap();
        v.remove("examples");
        v.remove("latency");
    }
    verdicts
}

fn shard_dirs(root: &Path, n: u32) -> Vec<PathBuf> {
    (1..=n)
        .map(|k| root.join(format!("shard-{k}-of-{n}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn sharded_replays_merge_into_the_unsharded_verdicts_and_allowlist() {
    let (project, faithful, fenced) = project().await;
    let recorded = run(&project, &["--record", "tapes"]);
    assert_eq!(recorded.status.code(), Some(1), "{}", text(&recorded));
    drop((faithful, fenced));
    let allowlist = std::fs::read(project.path("allowlist.json")).unwrap();
    let granted = read_json(&project.path("allowlist.json"));
    assert_eq!(granted["entries"].as_array().unwrap().len(), 2, "{granted}");

    let whole = run(&project, &["--replay", "tapes"]);
    assert_eq!(whole.status.code(), Some(1), "{}", text(&whole));
    let whole_dir = run_dir(&whole);
    let whole_report = read_json(&whole_dir.join("report.json"));
    let whole_allowlist = read_json(&whole_dir.join("allowlist.replayed.json"));
    let calls = whole_report["calls"].as_array().unwrap().len();
    assert_eq!(
        calls,
        (30 + TICKETS as usize) * 2 * 2,
        "two suites, two providers, two repeats"
    );
    // What the replay's evidence would write is what the live run wrote.
    assert_eq!(
        normalized(whole_allowlist.clone()),
        normalized(granted.clone())
    );
    assert_ne!(
        whole_allowlist["entries"][0]["evidence"]["run_id"],
        granted["entries"][0]["evidence"]["run_id"]
    );

    for n in [1u32, 2, 4, 7] {
        // N = 2 runs each shard with its own `--reports` folder, as separate CI jobs
        // do, and merge is given those folders: it finds the shards below them.
        let own = |k: u32| project.path(&format!("rep-{k}-of-{n}"));
        let shards = project.path(&format!("reports-{n}"));
        let mut sizes = Vec::new();
        for k in 1..=n {
            let reports = if n == 2 { own(k) } else { shards.clone() };
            let out = project
                .cmd()
                .arg("--reports")
                .arg(&reports)
                .args(["run", "openai", "fenced", "--no-progress", "--repeats", "2"])
                .args(SUITES)
                .args(["--replay", "tapes", "--shard", &format!("{k}/{n}")])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            let manifest = read_json(&reports.join(format!("shards/shard-{k}-of-{n}/shard.json")));
            sizes.push(manifest["calls"].as_u64().unwrap());
        }
        assert_eq!(
            sizes.iter().sum::<u64>(),
            calls as u64,
            "N = {n}: {sizes:?}"
        );
        if n > 1 {
            assert!(
                sizes.iter().filter(|&&s| s > 0).count() > 1,
                "N = {n}: {sizes:?}"
            );
        }
        assert_eq!(
            std::fs::read(project.path("allowlist.json")).unwrap(),
            allowlist
        );

        let merged = match n {
            2 => merge(&project, &[&own(1), &own(2)]),
            _ => merge(&project, &[&shards.join("shards")]),
        };
        assert_eq!(merged.status.code(), Some(1), "N = {n}: {}", text(&merged));
        let dir = run_dir(&merged);
        let report = read_json(&dir.join("report.json"));
        assert_eq!(verdicts(&report), verdicts(&whole_report), "N = {n}");
        assert_eq!(report["calls"].as_array().unwrap().len(), calls, "N = {n}");
        for file in ["junit.xml", "summary.md", "report.html"] {
            assert!(dir.join(file).is_file(), "N = {n}: no {file}");
        }
        assert_eq!(
            normalized(read_json(&dir.join("allowlist.replayed.json"))),
            normalized(whole_allowlist.clone()),
            "N = {n}"
        );
        assert_eq!(
            std::fs::read(project.path("allowlist.json")).unwrap(),
            allowlist,
            "N = {n}: a merge of replays touched the allowlist"
        );
    }

    // Refusals, over the four shards of N = 4: exit 3, the reason named, nothing written.
    let four = shard_dirs(&project.path("reports-4/shards"), 4);
    let runs_before = std::fs::read_dir(project.path("reports")).unwrap().count();
    let refused = |dirs: &[&Path], reason: &str| {
        let out = merge(&project, dirs);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert!(text(&out).contains(reason), "{reason}: {}", text(&out));
        assert_eq!(
            std::fs::read(project.path("allowlist.json")).unwrap(),
            allowlist
        );
        assert_eq!(
            std::fs::read_dir(project.path("reports")).unwrap().count(),
            runs_before,
            "a refused merge left a run folder"
        );
    };
    refused(&[&four[0], &four[1], &four[3]], "shard 3 of 4 missing");
    let copy = project.path("copy-of-shard-2");
    common::copy_dir(&four[1], &copy);
    refused(
        &[&four[0], &four[1], &copy, &four[2], &four[3]],
        "shard 2/4 given twice",
    );
    // A shard of another run: the same calls, judged with another transport-error share.
    let other = project.path("reports-other");
    let out = project
        .cmd()
        .arg("--reports")
        .arg(&other)
        .args(["run", "openai", "fenced", "--no-progress", "--repeats", "2"])
        .args(SUITES)
        .args([
            "--replay",
            "tapes",
            "--shard",
            "3/4",
            "--max-transport-errors",
            "0.2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let foreign = other.join("shards/shard-3-of-4");
    refused(
        &[&four[0], &four[1], &foreign, &four[3]],
        "shards planned different runs",
    );
    // Another conform version.
    let old = project.path("old-shard-4");
    common::copy_dir(&four[3], &old);
    let mut manifest = read_json(&old.join("shard.json"));
    manifest["conform_version"] = Value::String("0.0.1".into());
    std::fs::write(old.join("shard.json"), manifest.to_string()).unwrap();
    refused(&[&four[0], &four[1], &four[2], &old], "ran 0.0.1");
    // A shard whose records were cut short in transit.
    let cut = project.path("cut-shard-1");
    common::copy_dir(&four[0], &cut);
    let records = std::fs::read_to_string(cut.join("results.jsonl")).unwrap();
    let first_line = records.lines().next().unwrap_or_default().to_string();
    std::fs::write(cut.join("results.jsonl"), format!("{first_line}\n")).unwrap();
    let expected = read_json(&cut.join("shard.json"))["calls"]
        .as_u64()
        .unwrap();
    if expected > 1 {
        refused(&[&cut, &four[1], &four[2], &four[3]], "truncated");
    }
    // The workspace changed under the shards: a suite's rule is not the one they ran.
    let suite = project.path("fixtures/ticket-triage/suite.toml");
    let original = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(
        &suite,
        original.replace("pass_threshold = 1.0", "pass_threshold = 0.9"),
    )
    .unwrap();
    refused(
        &[&four[0], &four[1], &four[2], &four[3]],
        "the workspace here plans a different run",
    );
}

/// Live shards (not replays) merge into one allowlist update and one history entry, as
/// an unsharded live run would; a refused merge of live shards writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn live_shards_update_the_allowlist_and_history_once() {
    let (project, _faithful, _fenced) = project().await;
    for k in 1..=2 {
        let out = run(&project, &["--shard", &format!("{k}/2")]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("no verdict and no allowlist change"),
            "{}",
            text(&out)
        );
    }
    assert!(
        !project.path("allowlist.json").exists(),
        "a shard wrote the allowlist"
    );
    assert!(
        !project.path("reports/history.jsonl").exists(),
        "a shard wrote history"
    );
    let shards = shard_dirs(&project.path("reports/shards"), 2);

    let out = merge(&project, &[&shards[0]]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("shard 2 of 2 missing"),
        "{}",
        text(&out)
    );
    assert!(!project.path("allowlist.json").exists());

    let merged = merge(&project, &[&shards[0], &shards[1]]);
    assert_eq!(merged.status.code(), Some(1), "{}", text(&merged));
    let dir = run_dir(&merged);
    let run_id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let allowlist = project.allowlist();
    let entries = allowlist["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{allowlist}");
    for entry in entries {
        assert_eq!(entry["provider"], "openai");
        assert_eq!(entry["evidence"]["run_id"], run_id.as_str());
        // Both shipped suites hold 30 cases.
        let cases = if entry["suite"] == "invoice-extraction" {
            30
        } else {
            TICKETS
        };
        assert_eq!(
            entry["evidence"]["calls"],
            cases * 2,
            "every call of both shards"
        );
    }
    let history = std::fs::read_to_string(project.path("reports/history.jsonl")).unwrap();
    let lines: Vec<Value> = history
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "one line per (suite, provider): {history}");
    assert!(
        lines.iter().all(|l| l.to_string().contains(&run_id)),
        "{history}"
    );

    // The same evidence unsharded: the same verdicts. A shard sends every call, so the
    // whole run does too, or its decided pairs would save calls the shards made.
    let whole = run(&project, &["--every-call"]);
    assert_eq!(whole.status.code(), Some(1), "{}", text(&whole));
    assert_eq!(
        verdicts(&read_json(&run_dir(&whole).join("report.json"))),
        verdicts(&read_json(&dir.join("report.json")))
    );
}
