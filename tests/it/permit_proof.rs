//! A permit implies proof (issue 32): each path that once ended in a permit for a
//! provider or suite never proven as it is now, run as a user would run it, and closed.
//! The property test that hunts for others is `tests/false_permits.rs`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Mode, OpenAiMock, Project, answer_book};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-test-permit-0123456789";
const SUITE: &str = "ticket-triage";

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

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(project: &Project, extra: &[&str]) -> Output {
    project
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "openai", "--suite", SUITE, "--no-progress"])
        .args(extra)
        .output()
        .unwrap()
}

fn gate(project: &Project) -> Output {
    project
        .cmd()
        .args(["gate", "--suite", SUITE, "--provider", "openai"])
        .output()
        .unwrap()
}

fn allowlist_bytes(project: &Project) -> Option<Vec<u8>> {
    std::fs::read(project.path("allowlist.json")).ok()
}

/// A project whose `openai` provider is proven at `good`: the gate permits.
async fn proven() -> (Project, MockServer) {
    let project = Project::new(&["openai"]);
    let good = mock(&project, Mode::Faithful).await;
    project.point("openai", &good.uri());
    let out = run(&project, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = gate(&project);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    (project, good)
}

#[tokio::test(flavor = "multi_thread")]
async fn path_1_an_endpoint_swapped_in_the_file_or_on_the_command_line_is_not_proven() {
    let (project, good) = proven().await;
    let drifting = mock(&project, Mode::Fenced).await;

    // Only base_url changes, to a server that answers differently.
    project.point("openai", &drifting.uri());
    let out = gate(&project);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("denied (provider_changed)"), "{said}");
    let port = |s: &MockServer| s.address().port().to_string();
    assert!(
        said.contains(&format!("endpoint: http://127.0.0.1:{} then", port(&good)))
            && said.contains(&format!("http://127.0.0.1:{} now", port(&drifting))),
        "the denial names the field and both values: {said}"
    );

    // A run sent elsewhere with --base-url records nothing about the file.
    project.point("openai", &good.uri());
    let before = allowlist_bytes(&project);
    let elsewhere = mock(&project, Mode::Faithful).await;
    let out = run(&project, &["--base-url", &elsewhere.uri()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("not granted: run with --base-url"),
        "{}",
        text(&out)
    );
    assert_eq!(
        allowlist_bytes(&project),
        before,
        "the allowlist was touched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn path_2_a_pointer_the_schema_cannot_produce_stops_check_and_run() {
    let project = Project::new(&["openai"]);
    let server = mock(&project, Mode::Faithful).await;
    project.point("openai", &server.uri());
    let suite = project.path(&format!("fixtures/{SUITE}/suite.toml"));
    let original = std::fs::read_to_string(&suite).unwrap();
    let agree = original
        .lines()
        .find(|l| l.starts_with("agree"))
        .unwrap()
        .to_string();
    std::fs::write(
        &suite,
        original.replace(&agree, "agree = [\"/category\", \"/lable\"]"),
    )
    .unwrap();

    let check = project.cmd().arg("check").output().unwrap();
    assert_eq!(check.status.code(), Some(2), "{}", text(&check));
    let line = format!("fixtures/{SUITE}/suite.toml:");
    let said = text(&check);
    let problem = said
        .lines()
        .find(|l| !l.starts_with("warning") && l.contains(&line) && l.contains("agree:"))
        .unwrap_or_else(|| panic!("no problem at suite.toml's agree: {said}"));
    assert!(
        problem.contains("`/lable` compares nothing") && problem.contains("it declares: category"),
        "{problem}"
    );
    // file:line:column
    let place = problem.split(": ").next().unwrap();
    assert_eq!(place.rsplit(':').count(), 3, "{place}");

    let out = run(&project, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "nothing is sent before every check's input resolves"
    );
    assert_eq!(allowlist_bytes(&project), None);
}

fn shard_manifest(project: &Project) -> std::path::PathBuf {
    project.path("reports/shards/shard-1-of-1/shard.json")
}

fn merge(project: &Project) -> Output {
    project
        .cmd()
        .args(["merge", "reports/shards"])
        .output()
        .unwrap()
}

fn entry(project: &Project) -> Value {
    let list: Value = serde_json::from_slice(&allowlist_bytes(project).unwrap()).unwrap();
    list["entries"][0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn path_3_evidence_is_not_renewed_without_calls() {
    let project = Project::new(&["openai"]);
    let good = mock(&project, Mode::Faithful).await;
    project.point("openai", &good.uri());
    let out = run(&project, &["--shard", "1/1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let first = merge(&project);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let granted = entry(&project);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(shard_manifest(&project)).unwrap()).unwrap();
    assert_eq!(granted["evidence"]["first_call_at"], manifest["started_at"]);
    let parse = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert_eq!(
        parse(&granted["valid_until"]) - parse(&manifest["started_at"]),
        time::Duration::days(7),
        "valid_until is counted from the first call"
    );

    // The same shards again: the same entry, not a later one.
    std::thread::sleep(Duration::from_millis(1100));
    let again = merge(&project);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(entry(&project), granted);

    // Shards that ran 30 days ago are older than the week an entry lasts: refused.
    let mut old = manifest.clone();
    let month_ago = time::OffsetDateTime::now_utc() - time::Duration::days(30);
    let stamp = month_ago
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    old["started_at"] = json!(stamp);
    old["finished_at"] = json!(stamp);
    std::fs::write(shard_manifest(&project), old.to_string()).unwrap();
    let before = allowlist_bytes(&project);
    let stale = merge(&project);
    assert_eq!(stale.status.code(), Some(3), "{}", text(&stale));
    assert!(
        text(&stale).contains("would already have expired"),
        "{}",
        text(&stale)
    );
    assert_eq!(allowlist_bytes(&project), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn path_6_lowered_effort_grants_nothing_and_validity_is_capped() {
    let project = Project::new(&["openai"]);
    let good = mock(&project, Mode::Faithful).await;
    project.point("openai", &good.uri());
    let suite = project.path(&format!("fixtures/{SUITE}/suite.toml"));
    let original = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(&suite, original.replace("repeats = 1", "repeats = 3")).unwrap();

    let out = run(&project, &["--repeats", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("1 repeat of each case where the suite asks for 3"),
        "{}",
        text(&out)
    );
    assert_eq!(allowlist_bytes(&project), None, "lowered effort granted");

    let century = run(&project, &["--valid-for", "36500d"]);
    assert_eq!(century.status.code(), Some(2), "{}", text(&century));
    assert!(
        text(&century).contains("max_valid_for")
            && text(&century)
                .contains("--valid-for 36500d is longer than the project allows (30d)"),
        "{}",
        text(&century)
    );
    assert!(good.received_requests().await.unwrap().len() <= 26 * 3 + 26);

    // A project may allow longer, never without saying so.
    project.write("conform.toml", "[evidence]\nmax_valid_for = \"60d\"\n");
    let out = run(&project, &["--valid-for", "45d"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = gate(&project);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Lowering the setting again: the entry is now valid for too long after its calls.
    project.write("conform.toml", "[evidence]\nmax_valid_for = \"30d\"\n");
    let out = gate(&project);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("validity_too_long"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn path_7_forged_or_relabelled_shard_records_grant_nothing() {
    let project = Project::new(&["openai"]);
    let fenced = mock(&project, Mode::Fenced).await;
    project.point("openai", &fenced.uri());
    let out = run(&project, &["--shard", "1/1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Every record edited to say it passed.
    let records = project.path("reports/shards/shard-1-of-1/results.jsonl");
    let forged: String = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).unwrap();
            r["passed"] = json!(true);
            for o in r["checks"].as_array_mut().unwrap() {
                o["status"] = json!("pass");
                o.as_object_mut().unwrap().remove("findings");
            }
            format!("{r}\n")
        })
        .collect();
    std::fs::write(&records, forged).unwrap();
    let merged = merge(&project);
    assert_eq!(merged.status.code(), Some(1), "{}", text(&merged));
    let list: Value = serde_json::from_slice(&allowlist_bytes(&project).unwrap()).unwrap();
    assert_eq!(list["entries"], json!([]));
    assert_eq!(list["revocations"][0]["reasons"][0], "not_pure_json");

    // Replayed answers relabelled as live.
    let good = mock(&project, Mode::Faithful).await;
    project.point("openai", &good.uri());
    let out = run(&project, &["--record", "tapes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    std::fs::remove_dir_all(project.path("reports/shards")).unwrap();
    let out = run(&project, &["--replay", "tapes", "--shard", "1/1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(shard_manifest(&project)).unwrap()).unwrap();
    assert!(manifest["replayed_from"].is_string());
    manifest["replayed_from"] = Value::Null;
    std::fs::write(shard_manifest(&project), manifest.to_string()).unwrap();
    let before = allowlist_bytes(&project);
    let relabelled = merge(&project);
    assert_eq!(relabelled.status.code(), Some(3), "{}", text(&relabelled));
    assert!(
        text(&relabelled).contains("answered from a tape"),
        "{}",
        text(&relabelled)
    );
    assert_eq!(allowlist_bytes(&project), before);
}

/// `conform serve` as the README starts it, in a project, on SQLite.
struct Serve {
    child: std::process::Child,
    base: String,
}

impl Serve {
    fn start(project: &Project, providers: &str, extra: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_conform"))
            .arg("serve")
            .args(extra)
            .current_dir(project.root())
            .env("CONFORM_ROOT", project.root())
            .env("CONFORM_LISTEN", "127.0.0.1:0")
            .env("CONFORM_PROVIDERS", providers)
            .env("CONFORM_ALLOWLIST", project.path("allowlist.json"))
            .env(
                "CONFORM_DATABASE_URL",
                format!("sqlite://{}", project.path("ledger.db").display()),
            )
            .env_remove("CONFORM_UNVERIFIED_ALLOWLIST")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("conform serve exited").unwrap();
            if let Some(addr) = line.strip_prefix("conform serve: listening on ") {
                break addr.to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Serve { child, base }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates a job on `primary` (which answers 400: the attempt fails at once), then asks
/// to fail over to `fallback`: the status and the denial's reason.
async fn failover(serve: &Serve, key: &str) -> (u16, Value) {
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{}/v1/jobs", serve.base))
        .header("x-owner-id", "owner")
        .header("idempotency-key", key)
        .json(&json!({"task": SUITE, "provider": "primary",
            "input": {"messages": [{"role": "user", "content": key}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    for _ in 0..200 {
        let job: Value = http
            .get(format!("{}/v1/jobs/{id}", serve.base))
            .header("x-owner-id", "owner")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if job["state"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answer = http
        .post(format!("{}/v1/jobs/{id}/attempts", serve.base))
        .header("x-owner-id", "owner")
        .json(&json!({"provider": "fallback"}))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn path_5_conform_serve_verifies_evidence_by_default() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let project = Project::new(&[]);
    let refusing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "no"}})))
        .mount(&refusing)
        .await;
    let compatible = |model: &str| {
        format!(
            "kind = \"openai-compatible\"\nmodel = \"{model}\"\nbase_url = \"{}\"\n",
            refusing.uri()
        )
    };
    project.write("providers/primary.toml", &compatible("p"));
    project.write("providers/fallback.toml", &compatible("f"));
    // A hand-written entry: the contract's three members, valid for the century.
    project.write(
        "allowlist.json",
        &json!({"format": "conform.allowlist/v1", "entries": [
            {"suite": SUITE, "provider": "fallback", "valid_until": "2099-01-01T00:00:00Z"}]})
        .to_string(),
    );
    let providers = format!("primary={0},fallback={0}", refusing.uri());

    let serve = Serve::start(&project, &providers, &[]);
    let ready: Value = reqwest::get(format!("{}/readyz", serve.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["evidence"], "verified");
    let (status, denial) = failover(&serve, "bare-entry").await;
    assert_eq!(status, 403, "{denial}");
    assert_eq!(denial["reason"], "suite_changed", "{denial}");
    drop(serve);

    // Only an explicit opt-out reads the file as the contract's minimum, and says so.
    project.write(
        "allowlist.json",
        &json!({"format": "conform.allowlist/v1", "entries": [
            {"suite": SUITE, "provider": "fallback", "valid_until": "2099-01-01T00:00:00Z"}]})
        .to_string(),
    );
    let serve = Serve::start(&project, &providers, &["--unverified-allowlist"]);
    let ready: Value = reqwest::get(format!("{}/readyz", serve.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["evidence"], "unverified");
    let (status, attempt) = failover(&serve, "opted-out").await;
    assert_eq!(status, 202, "{attempt}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_copied_to_another_provider_is_not_its_proof() {
    let (project, good) = proven().await;
    // `backup` is configured exactly as `openai`, at the same address, and never ran.
    let config = std::fs::read_to_string(project.path("providers/openai.toml")).unwrap();
    project.write("providers/backup.toml", &config);
    let mut list: Value = serde_json::from_slice(&allowlist_bytes(&project).unwrap()).unwrap();
    let mut copied = list["entries"][0].clone();
    copied["provider"] = json!("backup");
    list["entries"].as_array_mut().unwrap().push(copied);
    project.write("allowlist.json", &list.to_string());
    let out = project
        .cmd()
        .args(["gate", "--suite", SUITE, "--provider", "backup"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("name: openai then, backup now"),
        "{}",
        text(&out)
    );
    drop(good);
}
