//! `GET /v1/gate` (issue 45): the failover gate's decision asked over HTTP by a gateway at
//! call time. A real `conform run` grants a fallback and a second one, failing, revokes
//! it; the real `conform serve`, running all along, answers each time exactly what
//! `conform gate --format json` answers on the same file, from the very next request.

use crate::common;
use crate::serve_traffic::{SUITE, Serve, serve};

use common::{Mode, Project};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, ResponseTemplate};

const FALLBACK: &str = "fb-local";

/// `conform run FALLBACK --suite SUITE` in the project, as CI runs it: it writes the
/// allowlist (a grant when every call passes, a revocation when one fails).
async fn run(project: &Project) -> std::process::Output {
    let mut cmd = project.cmd();
    cmd.args(["run", FALLBACK, "--suite", SUITE, "--no-progress"]);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// What `conform gate --format json` prints for the fallback now.
fn gate_cli(project: &Project) -> Value {
    let out = (project.cmd())
        .args(["gate", "--suite", SUITE, "--provider", FALLBACK])
        .args(["--format", "json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", common::output_text(&out)))
}

async fn ask(serve: &Serve, query: &str) -> (u16, Value) {
    let answer = reqwest::get(format!("{}/v1/gate?{query}", serve.base))
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

fn question() -> String {
    format!("suite={SUITE}&provider={FALLBACK}")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gate_over_http_answers_as_conform_gate_and_sees_a_revocation_at_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let project = Project::new(&[]);
    let upstream = project.chat_mock(FALLBACK, Mode::Faithful).await;
    let granted = run(&project).await;
    assert_eq!(
        granted.status.code(),
        Some(0),
        "{}",
        common::output_text(&granted)
    );
    let granting_file = std::fs::read_to_string(project.path("allowlist.json")).unwrap();
    let serve = serve(&project, None).unwrap_or_else(|e| panic!("{e:?}"));

    let (status, permit) = ask(&serve, &question()).await;
    assert_eq!(status, 200, "{permit}");
    assert_eq!(permit["permitted"], true, "{permit}");
    assert_eq!(permit, gate_cli(&project), "one decision, the same answer");

    // The fallback now answers what the suite does not expect: the next run revokes it.
    upstream.reset().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": "{\"category\": \"drift\"}"},
            "finish_reason": "stop"}]})),
        )
        .mount(&upstream)
        .await;
    let revoked = run(&project).await;
    assert_ne!(
        revoked.status.code(),
        Some(0),
        "{}",
        common::output_text(&revoked)
    );
    assert!(
        project.allowlist()["revocations"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{}",
        project.allowlist()
    );

    // No restart: the very next question reads the file as it is now.
    let (status, denial) = ask(&serve, &question()).await;
    assert_eq!(status, 200, "{denial}");
    assert_eq!(
        (&denial["permitted"], &denial["reason"]),
        (&json!(false), &json!("revoked")),
        "{denial}"
    );
    assert!(
        denial["findings"].as_array().is_some_and(|f| !f.is_empty()),
        "a revocation's reasons are named: {denial}"
    );
    assert_eq!(denial, gate_cli(&project), "one decision, the same answer");

    // The granting file put back is older than the revocation serve has read.
    project.write("allowlist.json", &granting_file);
    let (status, put_back) = ask(&serve, &question()).await;
    assert_eq!(status, 200, "{put_back}");
    assert_eq!(put_back["reason"], "superseded", "{put_back}");
}

/// A question that cannot be asked names its parameter: 400 when it is missing or
/// malformed, 404 when the project has no such suite or provider; a denial is never
/// mistaken for a permit (`permitted: false` in every refusal).
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_unknown_suite_or_provider_is_refused_naming_the_parameter() {
    let project = Project::new(&[]);
    let _upstream = project.chat_mock(FALLBACK, Mode::Faithful).await;
    let serve = serve(&project, None).unwrap_or_else(|e| panic!("{e:?}"));
    let cases = [
        ("", 400, "invalid_request", "suite"),
        (
            &format!("suite={SUITE}") as &str,
            400,
            "invalid_request",
            "provider",
        ),
        (
            &format!("suite={SUITE}&provider={FALLBACK}&model=m"),
            400,
            "invalid_request",
            "model",
        ),
        (
            &format!("suite=nope&provider={FALLBACK}"),
            404,
            "unknown_suite",
            "suite",
        ),
        (
            &format!("suite={SUITE}&provider=nope"),
            404,
            "unknown_provider",
            "provider",
        ),
    ];
    for (query, status, code, parameter) in cases {
        let (got, body) = ask(&serve, query).await;
        assert_eq!(
            (got, body["code"].as_str(), body["parameter"].as_str()),
            (status, Some(code), Some(parameter)),
            "{query}: {body}"
        );
        assert_eq!(body["permitted"], false, "{query}: {body}");
    }
    // Asked, and no entry: a denial, answered.
    let (status, body) = ask(&serve, &question()).await;
    assert_eq!(
        (status, &body["reason"]),
        (200, &json!("missing")),
        "{body}"
    );
}
