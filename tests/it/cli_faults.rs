//! The runner's fault handling end to end: the real binary against wiremock OpenAI
//! servers (or nothing at all), read back from `results.jsonl`, `report.json`, the
//! terminal and the allowlist's bytes.

use crate::common;

use common::{Mode, OpenAiMock, Project, answer_book, body_of, refused_address, wire};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

const KEY: &str = "sk-test-FAULTS-canary-41c7d0";
const SUITE: &str = "ticket-triage";

/// The shipped OpenAI provider with tiny retry waits: two retries, 5 ms apart.
fn provider(concurrency: u32) -> String {
    format!(
        "kind = \"openai\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"OPENAI_API_KEY\"\ntemperature = 0\n\
         max_output_tokens = 1024\ntimeout = \"5s\"\nstructured_output = \"json_schema\"\n\n\
         [limits]\nconcurrency = {concurrency}\nmax_retries = 2\nretry_base_wait = \"5ms\"\nmax_retry_wait = \"1s\"\n\n\
         [tokenizer]\nkind = \"tiktoken\"\nencoding = \"o200k_base\"\ncontext_window = 128000\n"
    )
}

fn project(concurrency: u32) -> Project {
    let project = Project::new(&["openai"]);
    project.write("providers/openai.toml", &provider(concurrency));
    project
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(project: &Project, base_url: &str, verbose: bool) -> Run {
    project.point("openai", base_url);
    let mut cmd = project.cmd();
    cmd.env("OPENAI_API_KEY", KEY);
    if verbose {
        cmd.arg("-v");
    }
    // Every call is sent: these tests count what each fault does to every one of them,
    // and a provider failing its first calls would otherwise be decided early.
    let out = cmd
        .args([
            "run",
            "openai",
            "--suite",
            SUITE,
            "--no-progress",
            "--every-call",
        ])
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stdout.contains(KEY) && !run.stderr.contains(KEY),
        "the key leaked:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    run
}

fn records(project: &Project) -> Vec<Value> {
    std::fs::read_to_string(project.last_run().join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The records of calls that ended in an error.
fn failed(records: &[Value]) -> Vec<&Value> {
    records.iter().filter(|r| r["error"].is_object()).collect()
}

fn report(project: &Project) -> Value {
    serde_json::from_slice(&std::fs::read(project.last_run().join("report.json")).unwrap()).unwrap()
}

fn cases() -> usize {
    std::fs::read_dir(format!("{}/fixtures/{SUITE}/cases", common::REPO))
        .unwrap()
        .count()
}

async fn answering(template: impl Respond + 'static) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

/// A conformant run first, so that there is an entry an account limit must not revoke.
async fn allowlisted(project: &Project) -> Vec<u8> {
    let good = answering(OpenAiMock {
        book: answer_book(project.root()),
        mode: Mode::Faithful,
    })
    .await;
    let first = run(project, &good.uri(), false);
    assert_eq!(first.code, Some(0), "{}\n{}", first.stdout, first.stderr);
    let bytes = std::fs::read(project.path("allowlist.json")).unwrap();
    let allowlist: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(allowlist["entries"][0]["provider"], "openai");
    bytes
}

/// Item 8: "Request too large for … on tokens per min (TPM)" is the organisation's limit,
/// not the model's behaviour: inconclusive (exit 3), the entry kept byte for byte, the
/// provider stopped after the first such answer, nothing retried.
#[tokio::test(flavor = "multi_thread")]
async fn a_tpm_request_too_large_is_inconclusive_and_leaves_the_allowlist_alone() {
    let project = project(1);
    let before = allowlisted(&project).await;
    let tpm = wire("openai_error_429_request_too_large_tpm.json");
    let server = answering(ResponseTemplate::new(429).set_body_json(body_of(&tpm))).await;
    let out = run(&project, &server.uri(), false);
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        std::fs::read(project.path("allowlist.json")).unwrap(),
        before,
        "an account limit changed the allowlist"
    );
    assert!(out.stdout.contains("request_too_large"), "{}", out.stdout);

    let records = records(&project);
    assert_eq!(records.len(), cases());
    let failed = failed(&records);
    assert_eq!(failed.len(), 1, "one call, then the provider is stopped");
    assert_eq!(failed[0]["error"]["kind"], "request_too_large");
    assert_eq!(failed[0]["error"]["status"], 429);
    assert_eq!(failed[0]["retries"], 0);
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    for r in records.iter().filter(|r| r["error"].is_null()) {
        let why = r["not_run"].as_str().unwrap();
        assert!(
            why.starts_with(
                "not sent: openai was stopped after an earlier call failed with request_too_large (HTTP 429): Request too large"
            ),
            "{why}"
        );
    }
    let verdict = &report(&project)["verdicts"][0];
    assert_eq!(verdict["verdict"], "inconclusive");
    assert_eq!(verdict["reasons"], json!(["request_too_large"]));
}

/// Item 8, the other account limit: a 413 (here a gateway's HTML page) is not the
/// model's fault either.
#[tokio::test(flavor = "multi_thread")]
async fn a_413_is_inconclusive_and_leaves_the_allowlist_alone() {
    let project = project(1);
    let before = allowlisted(&project).await;
    let server = answering(ResponseTemplate::new(413).set_body_raw(
        "<html><body><h1>413 Request Entity Too Large</h1></body></html>",
        "text/html",
    ))
    .await;
    let out = run(&project, &server.uri(), false);
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        std::fs::read(project.path("allowlist.json")).unwrap(),
        before
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

/// Item 5: a call that fails after its retries says how many it made, in results.jsonl,
/// in report.json's calls, and in the verdict's tally.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_fails_after_retries_records_them() {
    let project = project(4);
    let server = answering(
        ResponseTemplate::new(500)
            .set_body_json(body_of(&wire("openai_error_500_server_error.json"))),
    )
    .await;
    let out = run(&project, &server.uri(), false);
    // A 5xx that outlasts its retries is the provider's own failure: nonconformant.
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let n = cases();
    assert_eq!(server.received_requests().await.unwrap().len(), 3 * n);
    let records = records(&project);
    assert_eq!(records.len(), n);
    for r in &records {
        assert_eq!(r["error"]["kind"], "server_error", "{r}");
        assert_eq!(r["retries"], 2, "{r}");
    }
    let report = report(&project);
    let calls = report["calls"].as_array().unwrap();
    assert_eq!(calls.len(), n);
    assert!(calls.iter().all(|c| c["retries"] == 2), "{calls:?}");
    let verdict = &report["verdicts"][0];
    assert_eq!(verdict["retries"], 2 * n as u64);
    assert_eq!(verdict["transport_errors"], 0);
    assert_eq!(verdict["verdict"], "nonconformant");
    assert_eq!(verdict["reasons"], json!(["server_error"]));
}

/// A 200 whose body is broken a different way each time, in turn: a wrong shape (with
/// usage and the served model), an error object (inviting a retry), HTML, a JSON document
/// cut off inside a complete body.
#[derive(Default)]
struct BrokenSuccess {
    served: AtomicUsize,
}

impl Respond for BrokenSuccess {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        match self.served.fetch_add(1, Ordering::SeqCst) % 4 {
            0 => ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-x", "object": "chat.completion", "created": 1,
                "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_broken01",
                "choices": [],
                "usage": {"prompt_tokens": 321, "completion_tokens": 0, "total_tokens": 321}})),
            1 => ResponseTemplate::new(200)
                .insert_header("x-should-retry", "true")
                .set_body_json(
                    json!({"error": {"message": "upstream failed", "type": "server_error"}}),
                ),
            2 => ResponseTemplate::new(200)
                .set_body_raw("<!DOCTYPE html><html>502</html>", "text/html"),
            _ => ResponseTemplate::new(200).set_body_raw(
                "{\"id\": \"chatcmpl-x\", \"choices\": [{\"index\"",
                "application/json",
            ),
        }
    }
}

/// Items 6 and 7: a broken 2xx is sent once, whatever is wrong with it, counts as the
/// provider's own failure, and keeps what it said about usage and the served model.
#[tokio::test(flavor = "multi_thread")]
async fn broken_2xx_answers_are_sent_once_and_keep_what_they_said() {
    let project = project(4);
    let server = answering(BrokenSuccess::default()).await;
    let out = run(&project, &server.uri(), false);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let n = cases();
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        n,
        "a 2xx was sent again"
    );
    let records = records(&project);
    assert!(
        records
            .iter()
            .all(|r| r["retries"] == 0 && r["error"]["status"] == 200)
    );
    let shapes: Vec<&Value> = records
        .iter()
        .filter(|r| r["error"]["kind"] == "invalid_response")
        .collect();
    assert_eq!(shapes.len(), n.div_ceil(4));
    for r in shapes {
        assert_eq!(r["usage"]["prompt_tokens"], 321, "{r}");
        assert_eq!(r["usage"]["output_tokens"], 0, "{r}");
        assert_eq!(r["served_model"], "gpt-4o-mini-2024-07-18", "{r}");
        assert_eq!(r["system_fingerprint"], "fp_broken01", "{r}");
    }
    let verdict = &report(&project)["verdicts"][0];
    assert_eq!(verdict["transport_errors"], 0);
    assert_eq!(verdict["verdict"], "nonconformant");
    let reasons: Vec<&str> = verdict["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for kind in ["invalid_response", "html_error_page", "truncated_body"] {
        assert!(reasons.contains(&kind), "{kind} in {reasons:?}");
    }
    assert_eq!(verdict["served_models"], json!(["gpt-4o-mini-2024-07-18"]));
}

/// Item 9: nothing listens. The error names the URL it tried, the stop reads as what
/// happened, and the records count the retries `-v` shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_connection_names_its_url_and_counts_its_retries() {
    let project = project(1);
    let address = refused_address().await;
    let out = run(&project, &address, true);
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    let url = format!("{address}/v1/chat/completions");
    let records = records(&project);
    let failed = failed(&records);
    assert_eq!(failed.len(), 1);
    let message = failed[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains(&url), "{message}");
    assert_eq!(failed[0]["error"]["kind"], "connection_refused");
    assert_eq!(failed[0]["retries"], 2);
    for r in records.iter().filter(|r| r["error"].is_null()) {
        let why = r["not_run"].as_str().unwrap();
        assert!(
            why.starts_with(
                "not sent: openai was stopped after an earlier call failed with connection_refused: could not connect to "
            ) && why.contains(&url),
            "{why}"
        );
    }
    assert!(
        out.stdout
            .contains("conform stopped calling openai after a call failed with connection_refused"),
        "{}",
        out.stdout
    );
    let shown = out
        .stderr
        .lines()
        .filter(|l| l.contains("conform_wire::provider::transport") && l.contains("retrying"))
        .count();
    let recorded: u64 = records.iter().map(|r| r["retries"].as_u64().unwrap()).sum();
    assert_eq!(shown as u64, recorded, "{}", out.stderr);
    assert_eq!(report(&project)["verdicts"][0]["retries"], recorded);
}

/// A plain-HTTP base URL needs no TLS roots, so the client for it has none and refuses a
/// redirect to `https://`: the error names where it was sent (without the query, which
/// may carry a token) and what to change, instead of a certificate failure.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_from_http_to_https_is_refused_and_names_the_address() {
    let project = project(1);
    let server = answering(ResponseTemplate::new(307).insert_header(
        "location",
        "https://127.0.0.1:9/v1/chat/completions?token=t0k",
    ))
    .await;
    let out = run(&project, &server.uri(), false);
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    let records = records(&project);
    let failed = failed(&records);
    assert_eq!(failed.len(), 1, "the provider is stopped after the first");
    assert_eq!(failed[0]["error"]["kind"], "connection_refused");
    let message = failed[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("it redirected to https://127.0.0.1:9/v1/chat/completions; put that address in the provider file's base_url"),
        "{message}"
    );
    assert!(!message.contains("t0k"), "{message}");
}

/// The OpenAI SDK's and vLLM's spelling of an address (`http://host:8000/v1`) is the
/// same server as conform's (`http://host:8000`): both post to `/v1/chat/completions`,
/// and an HTTP error names the address it came from.
#[tokio::test(flavor = "multi_thread")]
async fn a_base_url_ending_in_v1_reaches_the_server_and_a_404_names_the_address() {
    let project = project(1);
    let good = answering(OpenAiMock {
        book: answer_book(project.root()),
        mode: Mode::Faithful,
    })
    .await;
    let sdk_spelling = run(&project, &format!("{}/v1/", good.uri()), false);
    assert_eq!(
        sdk_spelling.code,
        Some(0),
        "{}\n{}",
        sdk_spelling.stdout,
        sdk_spelling.stderr
    );
    let paths: Vec<String> = (good.received_requests().await.unwrap().iter())
        .map(|r| r.url.path().to_string())
        .collect();
    assert!(!paths.is_empty());
    assert!(
        paths.iter().all(|p| p == "/v1/chat/completions"),
        "{paths:?}"
    );

    // Nothing mounted: every path is a 404.
    let nowhere = MockServer::start().await;
    let out = run(&project, &format!("{}/v2", nowhere.uri()), false);
    let url = format!("POST {}/v2/v1/chat/completions", nowhere.uri());
    assert!(
        out.stdout.contains(&url),
        "{url} not in:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    let record = records(&project)
        .into_iter()
        .find(|r| r["error"].is_object());
    // The record keeps the vendor's words and, beside them, where the request went.
    let sent_to = record.as_ref().map(|r| r["error"]["sent_to"].clone());
    assert_eq!(sent_to, Some(serde_json::Value::String(url.clone())));
}
