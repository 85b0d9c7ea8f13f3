//! `conform allowlist schema | show | explain` and `conform gate`, as a person or a
//! script in another language sees them.

use conform_gate::allowlist::{Change, update};
use serde_json::Value;
use time::OffsetDateTime;

use super::support::{conform, conform_at, current_entry, project, revocation};

/// A project whose allowlist has one valid entry, one expired one and one revocation.
fn mixed() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = project();
    let path = dir.path().join("allowlist.json");
    let now = OffsetDateTime::now_utc();
    let mut valid = current_entry(
        dir.path(),
        "invoice-extraction",
        "mistral",
        now + time::Duration::days(3),
    );
    valid.evidence.run_id = "run-valid".into();
    let mut old = current_entry(
        dir.path(),
        "ticket-triage",
        "mistral",
        now - time::Duration::hours(1),
    );
    old.evidence.run_id = "run-old".into();
    update(
        &path,
        &[
            Change::Grant(Box::new(valid)),
            Change::Grant(Box::new(old)),
            Change::Revoke(revocation("invoice-extraction", "fenced", "run-bad")),
        ],
    )
    .unwrap();
    (dir, path)
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn schema_prints_the_published_schema() {
    let out = conform().args(["allowlist", "schema"]).output().unwrap();
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["properties"]["format"]["const"],
        "conform.allowlist/v1"
    );
    assert_eq!(stdout(&out), conform_gate::allowlist::SCHEMA);
}

#[test]
fn show_without_a_file_says_nothing_is_permitted() {
    let dir = tempfile::tempdir().unwrap();
    let out = conform()
        .arg("--allowlist")
        .arg(dir.path().join("none.json"))
        .args(["allowlist", "show"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("nothing is permitted (missing)"));
}

#[test]
fn show_tells_what_is_allowed_until_when_and_on_what_evidence() {
    let (dir, path) = mixed();
    let out = conform_at(dir.path())
        .arg("--allowlist")
        .arg(&path)
        .args(["allowlist", "show"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    let permitted = text.find("permitted now (1):").unwrap();
    let expired = text.find("expired (1):").unwrap();
    let revoked = text.find("revoked (1):").unwrap();
    assert!(permitted < expired && expired < revoked, "{text}");
    assert!(text[permitted..expired].contains("invoice-extraction × mistral"));
    assert!(text[permitted..expired].contains("run run-valid"));
    assert!(text[permitted..expired].contains("100% after retries, 96% first attempt"));
    assert!(text[expired..revoked].contains("ticket-triage × mistral"));
    assert!(text[revoked..].contains("by run run-bad"));
    assert!(text[revoked..].contains("schema_additional_property, not_pure_json"));

    let out = conform_at(dir.path())
        .arg("--allowlist")
        .arg(&path)
        .args(["allowlist", "show", "--format", "json"])
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let statuses: Vec<(&str, &str)> = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["suite"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("invoice-extraction", "permitted"),
            ("ticket-triage", "expired")
        ]
    );
    assert_eq!(json["revocations"][0]["run_id"], "run-bad");
    assert_eq!(
        json["entries"][0]["evidence"]["first_attempt_pass_rate"],
        0.96
    );
}

fn explain(path: &std::path::Path, args: &[&str]) -> (Option<i32>, Value) {
    let root = path.parent().unwrap();
    let out = conform_at(root)
        .arg("--allowlist")
        .arg(path)
        .args(["allowlist", "explain"])
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

fn status<'a>(json: &'a Value, suite: &str) -> &'a Value {
    json["suites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["suite"] == suite)
        .unwrap_or_else(|| panic!("no {suite} in {json}"))
}

#[test]
fn explain_says_why_a_provider_is_absent() {
    let (_dir, path) = mixed();

    // Revoked: by which run, because of what.
    let (code, json) = explain(&path, &["fenced", "--suite", "invoice-extraction"]);
    assert_eq!(code, Some(1));
    let s = status(&json, "invoice-extraction");
    assert_eq!(s["status"], "revoked");
    assert_eq!(s["revocation"]["run_id"], "run-bad");
    assert!(
        s["detail"]
            .as_str()
            .unwrap()
            .contains("revoked by run run-bad")
    );
    assert!(s["detail"].as_str().unwrap().contains("not_pure_json"));

    // Never run.
    let (code, json) = explain(&path, &["openai"]);
    assert_eq!(code, Some(1));
    assert_eq!(status(&json, "invoice-extraction")["status"], "no_entry");
    assert_eq!(status(&json, "ticket-triage")["status"], "no_entry");
    assert!(
        status(&json, "ticket-triage")["detail"]
            .as_str()
            .unwrap()
            .starts_with("never run")
    );

    // One suite permitted, one expired: not permitted overall.
    let (code, json) = explain(&path, &["mistral"]);
    assert_eq!(code, Some(1));
    let ok = status(&json, "invoice-extraction");
    assert_eq!(ok["status"], "permitted");
    assert_eq!(ok["entry"]["evidence"]["run_id"], "run-valid");
    let old = status(&json, "ticket-triage");
    assert_eq!(old["status"], "expired");
    assert!(
        old["detail"]
            .as_str()
            .unwrap()
            .starts_with("the entry expired at "),
        "{old}"
    );

    let (code, json) = explain(&path, &["mistral", "--suite", "invoice-extraction"]);
    assert_eq!(code, Some(0));
    assert_eq!(json["permitted"], true);
}

#[test]
fn explain_text_names_the_run_and_the_fix() {
    let (dir, path) = mixed();
    let out = conform_at(dir.path())
        .arg("--allowlist")
        .arg(&path)
        .args(["allowlist", "explain", "openai", "--suite", "ticket-triage"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("ticket-triage: no_entry: never run"),
        "{text}"
    );
    assert!(
        text.contains("conform run openai --suite ticket-triage"),
        "{text}"
    );
}

#[test]
fn explain_without_a_file_denies_every_suite_with_the_reason() {
    let dir = project();
    let (code, json) = explain(&dir.path().join("none.json"), &["mistral"]);
    assert_eq!(code, Some(1));
    for s in json["suites"].as_array().unwrap() {
        assert_eq!(s["status"], "missing");
    }
    assert!(!json["suites"].as_array().unwrap().is_empty());
}

#[test]
fn gate_exits_by_the_decision() {
    let (dir, path) = mixed();
    let gate = |args: &[&str]| {
        let out = conform_at(dir.path())
            .arg("--allowlist")
            .arg(&path)
            .arg("gate")
            .args(args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), json)
    };
    let (code, json) = gate(&["--suite", "invoice-extraction", "--provider", "mistral"]);
    assert_eq!((code, &json["permitted"]), (Some(0), &Value::Bool(true)));
    let (code, json) = gate(&["--suite", "ticket-triage", "--provider", "mistral"]);
    assert_eq!((code, &json["reason"]), (Some(1), &Value::from("expired")));
    let (code, json) = gate(&[
        "--suite",
        "invoice-extraction",
        "--provider",
        "mistral",
        "--served-model",
        "mistral-large",
    ]);
    assert_eq!(
        (code, &json["reason"]),
        (Some(1), &Value::from("model_drift"))
    );
}
