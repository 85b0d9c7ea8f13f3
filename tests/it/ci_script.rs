//! scripts/ci.sh end to end, as a CI system runs it: four shard jobs, then the merge job
//! that publishes the summary and writes the pull-request comment, against wiremock
//! servers speaking OpenAI's wire format (one faithful, one that starts fencing its JSON).

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Mode, OpenAiMock, Project, REPO, answer_book};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const KEY: &str = "sk-test-ci-0123456789";

async fn mock(project: &Project, mode: Mode) -> MockServer {
    let server = MockServer::start().await;
    answer(project, &server, mode).await;
    server
}

/// Makes `server` answer as `mode` says, from now on.
async fn answer(project: &Project, server: &MockServer, mode: Mode) {
    server.reset().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(OpenAiMock {
            book: answer_book(project.root()),
            mode,
        })
        .mount(server)
        .await;
}

fn point(project: &Project, provider: &str, server: &MockServer) {
    let base = std::fs::read_to_string(Path::new(REPO).join("providers/openai.toml")).unwrap();
    project.write(
        &format!("providers/{provider}.toml"),
        &format!("base_url = \"{}\"\n{base}", server.uri()),
    );
}

fn script(project: &Project, args: &[&str], summary: &Path) -> Output {
    Command::new("bash")
        .arg(Path::new(REPO).join("scripts/ci.sh"))
        .args(args)
        .current_dir(project.root())
        .env("CONFORM", assert_cmd::cargo::cargo_bin("conform"))
        .env("CONFORM_ROOT", project.root())
        .env("CONFORM_OUT", project.path("out"))
        .env("CONFORM_EXPIRING", "8d")
        .env("GITHUB_STEP_SUMMARY", summary)
        .env("OPENAI_API_KEY", KEY)
        .env_remove("CONFORM_ALLOWLIST")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ci_script_shards_merges_summarises_and_comments() {
    let project = Project::new(&[]);
    let faithful = mock(&project, Mode::Faithful).await;
    let backup = mock(&project, Mode::Faithful).await;
    // Yesterday both providers behaved: both are allowlisted.
    point(&project, "openai", &faithful);
    point(&project, "backup", &backup);
    let first = project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args([
            "run",
            "openai",
            "backup",
            "--suite",
            "ticket-triage",
            "--no-progress",
        ])
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let before = std::fs::read(project.path("allowlist.json")).unwrap();

    // Today `backup` fences its JSON, at the same address.
    answer(&project, &backup, Mode::Fenced).await;
    let summary = project.path("step-summary.md");
    let run_args = ["openai", "backup", "--suite", "ticket-triage"];
    let mut recorded = 0;
    for k in 1..=4 {
        let k_text = k.to_string();
        let mut args = vec!["shard", k_text.as_str(), "4"];
        args.extend(run_args);
        let out = script(&project, &args, &summary);
        assert_eq!(out.status.code(), Some(0), "shard {k}: {}", text(&out));
        let manifest: Value = serde_json::from_slice(
            &std::fs::read(project.path(&format!("reports/shards/shard-{k}-of-4/shard.json")))
                .unwrap(),
        )
        .unwrap();
        recorded += manifest["calls"].as_u64().unwrap();
        assert_eq!(
            std::fs::read(project.path("allowlist.json")).unwrap(),
            before
        );
    }
    assert_eq!(recorded, 2 * 30, "the four shards hold every call once");

    let merged = script(
        &project,
        &["merge", "reports/shards", "--primary", "openai"],
        &summary,
    );
    assert_eq!(merged.status.code(), Some(1), "{}", text(&merged));
    assert!(
        text(&merged).contains("merged 4 shards of 4"),
        "{}",
        text(&merged)
    );

    let allowlist = project.allowlist();
    let providers: Vec<&str> = allowlist["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["openai"], "{allowlist}");
    assert_eq!(allowlist["revocations"][0]["provider"], "backup");
    assert_eq!(allowlist["revocations"][0]["reasons"][0], "not_pure_json");

    let published = std::fs::read_to_string(&summary).unwrap();
    assert!(
        published.contains("| ticket-triage | backup | ❌ nonconformant | 0/30 | not_pure_json |"),
        "{published}"
    );
    assert_eq!(
        published,
        std::fs::read_to_string(project.path("out/summary.md")).unwrap()
    );

    let comment = std::fs::read_to_string(project.path("out/comment.md")).unwrap();
    assert!(
        comment.starts_with("## conform: fallback changes"),
        "{comment}"
    );
    assert!(
        comment.contains("- `ticket-triage` × `backup` (revoked): `not_pure_json`"),
        "{comment}"
    );
    assert!(!comment.contains("**Added**"), "{comment}");
    assert!(
        comment.contains("**Expiring within 8 days** (1)")
            && comment.contains("- `ticket-triage` × `openai` until"),
        "{comment}"
    );
    assert!(comment.contains("```diff"), "{comment}");
    assert!(
        comment.contains("-   fallbacks: [{\"openai\": [\"backup\"]}]")
            && comment.contains("+   fallbacks: [{\"openai\": []}]"),
        "the LiteLLM fallback to backup is removed: {comment}"
    );
    assert!(
        comment.contains("+ # openai -/-> backup: revoked"),
        "{comment}"
    );

    // The same shards merged again: nothing new is added or revoked; the entries about
    // to expire are still listed.
    let again = script(
        &project,
        &["merge", "reports/shards", "--primary", "openai"],
        &summary,
    );
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    let quiet = std::fs::read_to_string(project.path("out/comment.md")).unwrap();
    assert!(quiet.contains("**Expiring within 8 days**"), "{quiet}");
    assert!(
        !quiet.contains("**Revoked**") && !quiet.contains("**Added**"),
        "{quiet}"
    );
}
