//! `conform history` and `conform diff` on real runs against a provider speaking OpenAI's
//! wire format whose failure rate the test sets run by run.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{Mode, OpenAiMock, Project, answer_book};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers faithfully, except a share (per mille, set between runs) of the requests,
/// which get the answer in markdown fences. Which requests fail depends only on their
/// order of arrival, so every run fails the same number of calls on every machine.
struct Flaky {
    faithful: OpenAiMock,
    fenced: OpenAiMock,
    per_mille: Arc<AtomicU64>,
    seen: AtomicU64,
}

impl Respond for Flaky {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        // splitmix64 of the arrival number: a fixed, well-mixed draw per request.
        let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if z % 1000 < self.per_mille.load(Ordering::SeqCst) {
            self.fenced.respond(request)
        } else {
            self.faithful.respond(request)
        }
    }
}

/// The runs in the order they ran: as `history.jsonl` appended them (two runs in the same
/// second have ids that do not sort by time).
fn run_ids(project: &Project) -> Vec<String> {
    let text = std::fs::read_to_string(project.path("reports/history.jsonl")).unwrap();
    let mut ids: Vec<String> = Vec::new();
    for line in text.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let id = line["run_id"].as_str().unwrap().to_string();
        if ids.last() != Some(&id) {
            ids.push(id);
        }
    }
    for id in &ids {
        assert!(project.path(&format!("reports/{id}/report.json")).is_file());
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_slips_is_flagged_and_the_diff_names_the_flipped_cases() {
    let project = Project::new(&[]);
    let book = answer_book(project.root());
    let per_mille = Arc::new(AtomicU64::new(20));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Flaky {
            faithful: OpenAiMock {
                book: book.clone(),
                mode: Mode::Faithful,
            },
            fenced: OpenAiMock {
                book,
                mode: Mode::Fenced,
            },
            per_mille: per_mille.clone(),
            seen: AtomicU64::new(0),
        })
        .mount(&server)
        .await;
    project.write(
        "providers/local.toml",
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"local-model\"\nbase_url = \"{}\"\n\n[limits]\nconcurrency = 16\n\n[tokenizer]\nkind = \"none\"\n",
            server.uri()
        ),
    );
    let root = project.root().to_path_buf();
    let conform = move |args: Vec<&'static str>| {
        let root = root.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
            cmd.current_dir(&root)
                .arg("--root")
                .arg(&root)
                .env_remove("CONFORM_ALLOWLIST")
                .args(&args)
                .output()
                .unwrap()
        })
    };
    let history = |out: &std::process::Output| -> Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let run = [
        "run",
        "local",
        "--suite",
        "ticket-triage",
        "--repeats",
        "4",
        "--no-progress",
    ];

    // Five runs at 2 %: a stable provider, nothing flagged.
    for _ in 0..5 {
        let out = conform(run.to_vec()).await.unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    }
    let out = conform(vec!["history", "--format", "json"]).await.unwrap();
    let json = history(&out);
    assert_eq!(out.status.code(), Some(0), "{json}");
    let runs = json["pairs"][0]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 5, "{json}");
    assert!(runs.iter().all(|r| r["planned"] == 120), "{json}");

    // Then 10 %: flagged by the second such run at the latest.
    per_mille.store(100, Ordering::SeqCst);
    for _ in 0..2 {
        let out = conform(run.to_vec()).await.unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    }
    let ids = run_ids(&project);
    assert_eq!(ids.len(), 7);
    let out = conform(vec!["history", "--format", "json"]).await.unwrap();
    let json = history(&out);
    assert_eq!(out.status.code(), Some(1), "{json}");
    let slipped: Vec<&Value> = json["pairs"][0]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["flag"] == "slipped")
        .collect();
    assert_eq!(slipped.len(), 1, "{json}");
    let at = slipped[0]["at_run"].as_str().unwrap();
    assert!(
        at == ids[5] || at == ids[6],
        "flagged at {at}, runs {ids:?}"
    );
    assert!(
        slipped[0]["window"]["failed"].as_u64().unwrap()
            > slipped[0]["baseline"]["failed"].as_u64().unwrap() / 5,
        "{json}"
    );
    let out = conform(vec!["history"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("slipped at {at}")), "{text}");

    // The diff of a stable run and a slipping one names the calls that now fail.
    let (a, b) = (ids[4].clone(), ids[6].clone());
    let root = project.root().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(&root)
            .arg("--root")
            .arg(&root)
            .args(["diff", &a, &b, "--format", "json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{diff}");
    let pair = &diff["pairs"][0];
    let failing = pair["now_failing_total"].as_u64().unwrap();
    assert!(failing >= 1, "{diff}");
    assert!(
        pair["now_failing"][0]["codes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "not_pure_json"),
        "{diff}"
    );
    // Against itself, a run has no difference.
    let root = project.root().to_path_buf();
    let same = ids[6].clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(&root)
            .arg("--root")
            .arg(&root)
            .args(["diff", &same, &same])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing changed"));
}

#[test]
fn no_history_is_a_usage_error_naming_the_file() {
    let project = Project::new(&[]);
    let out = project.cmd().arg("history").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("history.jsonl"), "{stderr}");
}

/// The history holds conclusive verdicts only: a pair the run could not decide (here a
/// provider nobody answers for) says nothing about drift, and README promises as much.
#[test]
fn a_pair_the_run_could_not_decide_leaves_no_line_in_the_history() {
    let project = Project::new(&["sim-steady"]);
    project.write(
        "providers/dead.toml",
        "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n\n[tokenizer]\nkind = \"none\"\n",
    );
    let out = project
        .cmd()
        .args(["run", "dead", "sim-steady", "--suite", "ticket-triage"])
        .args(["--repeats", "1", "--no-progress"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let text = std::fs::read_to_string(project.path("reports/history.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["provider"], "sim-steady");
    assert_eq!(lines[0]["verdict"], "conformant");
}
