//! Failover traffic is the proven request (issue 42, item 1). A user's fallback was
//! proven at one server (model `qwen2.5-7b`, temperature 0), and `conform serve`, given
//! a URL map that pointed it at another, said "verified", accepted the failover and sent
//! the job's own temperature with the provider's name as the model to a server nothing
//! proved. Here a project proves two fallbacks with a real `conform run` against
//! loopback servers (one speaking Chat Completions, one Anthropic Messages), and the
//! real `conform serve` is tried from outside: every path away from the proven request
//! ends in a refused start or a 403, and a job that changes nothing keeps its permit.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{Mode, OpenAiMock, Project, answer_book};
use conform_config::{Prompt, Suite};
use conform_wire::sim::AnswerBook;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub(crate) const SUITE: &str = "ticket-triage";

/// Answers Anthropic Messages with the suite's expected answer, as a forced tool call
/// (`structured_output = "tool"`), looked up by the last user message.
struct AnthropicMock {
    book: Arc<AnswerBook>,
}

impl Respond for AnthropicMock {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let user = (body["messages"].as_array().into_iter().flatten())
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string();
        let answer = self.book.answer(&user).cloned().unwrap_or(Value::Null);
        let name = body["tool_choice"]["name"].as_str().unwrap_or("answer");
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_test", "type": "message", "role": "assistant",
            "model": "claude-test-20260101",
            "content": [{"type": "tool_use", "id": "toolu_test", "name": name, "input": answer}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 50}}))
    }
}

/// The project of the issue: `claude` (the primary, whose server refuses every request,
/// so its jobs fail and may fail over), `fb-good` proven at its server, `fb-claude`
/// (Anthropic) proven at its own, and a drifting server nobody proved.
struct Proven {
    project: Project,
    primary: MockServer,
    good: MockServer,
    anthropic: MockServer,
    drifting: MockServer,
}

async fn proven() -> Proven {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let project = Project::new(&[]);
    let book = answer_book(project.root());
    let primary = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "no"}})))
        .mount(&primary)
        .await;
    let good = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(OpenAiMock {
            book: Arc::clone(&book),
            mode: Mode::Faithful,
        })
        .mount(&good)
        .await;
    let anthropic = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(AnthropicMock { book })
        .mount(&anthropic)
        .await;
    // Answers anything, and what it answers is not what was proven.
    let drifting = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": "{\"category\": \"drift\"}"},
            "finish_reason": "stop"}]})),
        )
        .mount(&drifting)
        .await;
    let compatible = |model: &str, url: &str| {
        format!(
            "kind = \"openai-compatible\"\nmodel = \"{model}\"\nbase_url = \"{url}\"\ntemperature = 0\n\n[tokenizer]\nkind = \"none\"\n"
        )
    };
    project.write(
        "providers/claude.toml",
        &compatible("primary-model", &primary.uri()),
    );
    project.write(
        "providers/fb-good.toml",
        &compatible("qwen2.5-7b", &good.uri()),
    );
    project.write(
        "providers/fb-claude.toml",
        &format!(
            "kind = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{}\"\ntemperature = 0\nstructured_output = \"tool\"\n\n[tokenizer]\nkind = \"none\"\n",
            anthropic.uri()
        ),
    );
    let root = project.root().to_path_buf();
    let ran = tokio::task::spawn_blocking(move || {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(&root)
            .arg("--root")
            .arg(&root)
            .env_remove("CONFORM_ALLOWLIST")
            .args([
                "run",
                "fb-good",
                "fb-claude",
                "--suite",
                SUITE,
                "--no-progress",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", common::output_text(&ran));
    let granted: Vec<String> = (project.allowlist()["entries"].as_array().unwrap().iter())
        .map(|e| e["provider"].as_str().unwrap().to_string())
        .collect();
    assert!(granted.contains(&"fb-good".to_string()), "{granted:?}");
    assert!(granted.contains(&"fb-claude".to_string()), "{granted:?}");
    Proven {
        project,
        primary,
        good,
        anthropic,
        drifting,
    }
}

/// `conform serve` as a user starts it in the project, on SQLite.
pub(crate) struct Serve {
    child: Child,
    pub(crate) base: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the real binary with the URL map `map` (none: the provider files alone):
/// serving, or how it refused (its exit code and what it said).
pub(crate) fn serve(project: &Project, map: Option<&str>) -> Result<Serve, (Option<i32>, String)> {
    serve_with(project, map, &[])
}

/// [`serve`], with these variables set (a cloud's credentials).
fn serve_with(
    project: &Project,
    map: Option<&str>,
    vars: &[(&str, &str)],
) -> Result<Serve, (Option<i32>, String)> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_conform"));
    command.envs(vars.iter().copied());
    command
        .arg("serve")
        .current_dir(project.root())
        .env("CONFORM_ROOT", project.root())
        .env("CONFORM_LISTEN", "127.0.0.1:0")
        .env("CONFORM_ALLOWLIST", project.path("allowlist.json"))
        .env("CONFORM_ATTEMPT_TIMEOUT_MS", "10000")
        .env(
            "CONFORM_DATABASE_URL",
            format!("sqlite://{}", project.path("ledger.db").display()),
        )
        .env_remove("CONFORM_PROVIDERS")
        .env_remove("CONFORM_UNVERIFIED_ALLOWLIST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(map) = map {
        command.env("CONFORM_PROVIDERS", map);
    }
    // Held from the start, so that every path waits for the process.
    let mut serve = Serve {
        child: command.spawn().unwrap(),
        base: String::new(),
    };
    let mut stderr = BufReader::new(serve.child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let code = serve.child.wait().unwrap().code();
            return Err((code, said));
        }
        if let Some(addr) = line.trim_end().strip_prefix("conform serve: listening on ") {
            serve.base = addr.to_string();
            std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = stderr.read_to_string(&mut rest);
            });
            return Ok(serve);
        }
        said.push_str(&line);
    }
}

/// The first ticket-triage case as `conform run` rendered it, and its expected answer.
fn first_case(project: &Project) -> (Prompt, Value) {
    let suite = Suite::load(&project.path(&format!("fixtures/{SUITE}"))).unwrap();
    let case_ref = &suite.cases[0];
    let case = case_ref.load().unwrap();
    let prompt = suite.render(&case, &case_ref.path()).unwrap();
    (prompt, case.expected.unwrap())
}

/// The application's request for that case, with `extra` members.
fn input(prompt: &Prompt, extra: Value) -> Value {
    let mut input = json!({"messages": [
        {"role": "system", "content": prompt.system},
        {"role": "user", "content": prompt.user}]});
    for (k, v) in extra.as_object().unwrap() {
        input[k] = v.clone();
    }
    input
}

async fn call(req: reqwest::RequestBuilder) -> (u16, Value) {
    let answer = req.header("x-owner-id", "owner").send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// Creates a job on `claude` with `input` and waits for its first attempt to fail.
async fn failed_job(serve: &Serve, key: &str, input: Value) -> String {
    failed_job_on(serve, "claude", key, input).await
}

/// Creates a job on `provider` (whose server refuses it) and waits for its first
/// attempt to fail.
async fn failed_job_on(serve: &Serve, provider: &str, key: &str, input: Value) -> String {
    let http = reqwest::Client::new();
    let (status, job) = call(
        http.post(format!("{}/v1/jobs", serve.base))
            .header("idempotency-key", key)
            .json(&json!({"task": SUITE, "provider": provider, "input": input})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let job = settled(serve, &id).await;
    assert_eq!(job["state"], "failed", "{job}");
    id
}

/// The job once no attempt is starting.
async fn settled(serve: &Serve, id: &str) -> Value {
    let http = reqwest::Client::new();
    for _ in 0..500 {
        let (_, job) = call(http.get(format!("{}/v1/jobs/{id}", serve.base))).await;
        if job["state"] != "running" && job["state"] != "pending" {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("job {id} did not settle");
}

async fn fail_over(serve: &Serve, id: &str, provider: &str) -> (u16, Value) {
    let http = reqwest::Client::new();
    call(
        http.post(format!("{}/v1/jobs/{id}/attempts", serve.base))
            .json(&json!({"provider": provider})),
    )
    .await
}

async fn bodies(server: &MockServer) -> Vec<(String, Value)> {
    (server.received_requests().await.unwrap_or_default().iter())
        .map(|r| {
            let body = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            (r.url.path().to_string(), body)
        })
        .collect()
}

/// (a) The case: the URL map sends the proven fallback to another server.
#[tokio::test(flavor = "multi_thread")]
async fn a_map_pointing_the_fallback_at_another_server_refuses_to_start() {
    let p = proven().await;
    let map = format!("claude={},fb-good={}", p.primary.uri(), p.drifting.uri());
    let refused = serve(&p.project, Some(&map));
    let Err((code, said)) = refused else {
        panic!("conform serve started with fb-good pointed at an unproven server");
    };
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("`fb-good`"), "{said}");
    assert!(
        said.contains(&p.drifting.uri()),
        "the map's address: {said}"
    );
    assert!(said.contains(&p.good.uri()), "the file's address: {said}");
    assert!(said.contains("providers/fb-good.toml"), "{said}");
    assert!(bodies(&p.drifting).await.is_empty());
}

/// (b) With a matching map, or none, a failover reaches the proven server with the
/// proven request, byte for byte the one `conform run` sent for that case, in each
/// provider's own wire; the drifting server receives nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_failover_sends_the_proven_request_in_the_providers_own_wire() {
    let p = proven().await;
    let (prompt, expected) = first_case(&p.project);
    let ran = |sent: &[(String, Value)], user: &str| -> Value {
        let bodies: Vec<&Value> = (sent.iter().map(|(_, b)| b))
            .filter(|b| {
                b.to_string()
                    .contains(&serde_json::to_string(user).unwrap())
            })
            .collect();
        assert_eq!(bodies.len(), 1, "the run sent the case once");
        bodies[0].clone()
    };
    let run_good = ran(&bodies(&p.good).await, &prompt.user);
    let run_anthropic = ran(&bodies(&p.anthropic).await, &prompt.user);
    let map = format!("claude={},fb-good={}/v1", p.primary.uri(), p.good.uri());
    for (round, map) in [Some(map.as_str()), None].into_iter().enumerate() {
        let serve = serve(&p.project, map).unwrap_or_else(|e| panic!("{e:?}"));
        for (fallback, server, proven) in [
            ("fb-good", &p.good, &run_good),
            ("fb-claude", &p.anthropic, &run_anthropic),
        ] {
            let before = bodies(server).await.len();
            let id = failed_job(
                &serve,
                &format!("{fallback}-{round}"),
                input(&prompt, json!({})),
            )
            .await;
            let (status, attempt) = fail_over(&serve, &id, fallback).await;
            assert_eq!(status, 202, "{attempt}");
            let job = settled(&serve, &id).await;
            assert_eq!(job["state"], "succeeded", "{job}");
            assert_eq!(job["result"], expected);
            let sent = bodies(server).await;
            assert_eq!(sent.len(), before + 1, "one request per attempt");
            let (url, body) = sent.last().unwrap();
            assert_eq!(
                body, proven,
                "{fallback}: the failover is the proven request"
            );
            match fallback {
                "fb-good" => {
                    assert_eq!(url, "/v1/chat/completions");
                    assert_eq!(body["model"], "qwen2.5-7b");
                    assert_eq!(body["temperature"], 0.0);
                }
                _ => {
                    // Translated: the system message is Anthropic's `system`, the answer a
                    // forced tool call.
                    assert_eq!(url, "/v1/messages");
                    assert_eq!(body["model"], "claude-test");
                    assert_eq!(body["system"], json!(prompt.system));
                    assert_eq!(
                        body["messages"],
                        json!([{"role": "user", "content": prompt.user}])
                    );
                    assert_eq!(body["tool_choice"]["type"], "tool");
                }
            }
        }
    }
    assert!(bodies(&p.drifting).await.is_empty());
}

/// (c) A job's parameters are the user's intent on its own provider, and not proven on
/// the fallback: refused there, naming the parameter, before anything changes; the same
/// job without them, or with the file's values, fails over. `legacy`, a primary known
/// only by its address, passes any member through; `claude`, called through its file,
/// takes the members a provider file holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_parameter_the_evidence_was_not_made_with_is_refused_on_failover() {
    let p = proven().await;
    let (prompt, expected) = first_case(&p.project);
    let map = format!("legacy={}", p.primary.uri());
    let serve = serve(&p.project, Some(&map)).unwrap_or_else(|e| panic!("{e:?}"));
    let before = bodies(&p.good).await.len();
    for (primary, key, extra, parameter) in [
        ("claude", "hot", json!({"temperature": 1.5}), "temperature"),
        (
            "legacy",
            "hot-legacy",
            json!({"temperature": 1.5}),
            "temperature",
        ),
        ("legacy", "renamed", json!({"model": "fb-good"}), "model"),
        ("legacy", "nucleus", json!({"top_p": 0.5}), "top_p"),
    ] {
        let id = failed_job_on(&serve, primary, key, input(&prompt, extra)).await;
        let (status, denial) = fail_over(&serve, &id, "fb-good").await;
        assert_eq!(status, 403, "{key}: {denial}");
        assert_eq!(denial["code"], "failover_not_allowed", "{denial}");
        assert_eq!(denial["reason"], "parameter_not_proven", "{denial}");
        assert_eq!(denial["parameter"], parameter, "{denial}");
        let detail = denial["detail"].as_str().unwrap();
        assert!(detail.contains("providers/fb-good.toml"), "{detail}");
        if parameter == "temperature" {
            assert!(
                detail.contains("1.5") && detail.contains("temperature = 0.0"),
                "{detail}"
            );
        }
        let job = settled(&serve, &id).await;
        assert_eq!(
            job["attempts"].as_array().unwrap().len(),
            1,
            "nothing changed: {job}"
        );
    }
    // Its own provider was asked with the job's temperature: the user's intent.
    let primary = bodies(&p.primary).await;
    assert!(
        primary
            .iter()
            .any(|(_, b)| b["temperature"] == 1.5 && b["model"] == "primary-model")
    );
    assert_eq!(
        bodies(&p.good).await.len(),
        before,
        "a refused failover sends nothing"
    );
    // A member no provider file holds cannot be sent through `claude`'s file at all.
    let http = reqwest::Client::new();
    let (status, refused) = call(
        http.post(format!("{}/v1/jobs", serve.base))
            .header("idempotency-key", "nucleus-claude")
            .json(&json!({"task": SUITE, "provider": "claude",
                "input": input(&prompt, json!({"top_p": 0.5}))})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["parameter"], "top_p", "{refused}");
    for (primary, key, extra) in [
        ("claude", "plain", json!({})),
        ("legacy", "plain-legacy", json!({})),
        (
            "claude",
            "as-filed",
            json!({"temperature": 0, "model": "qwen2.5-7b", "max_tokens": 1024}),
        ),
    ] {
        let id = failed_job_on(&serve, primary, key, input(&prompt, extra)).await;
        let (status, attempt) = fail_over(&serve, &id, "fb-good").await;
        assert_eq!(status, 202, "{key}: {attempt}");
        let job = settled(&serve, &id).await;
        assert_eq!(job["result"], expected, "{key}: {job}");
    }
}

/// (d) `/readyz` says which providers are verified against which files.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_names_the_file_each_provider_is_verified_against() {
    let p = proven().await;
    let legacy = MockServer::start().await;
    let map = format!(
        "claude={},fb-good={},legacy={}",
        p.primary.uri(),
        p.good.uri(),
        legacy.uri()
    );
    let serve = serve(&p.project, Some(&map)).unwrap_or_else(|e| panic!("{e:?}"));
    let ready: Value = reqwest::get(format!("{}/readyz", serve.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["evidence"], "verified", "{ready}");
    let providers = &ready["providers"];
    assert_eq!(
        providers["fb-good"],
        json!({"file": "providers/fb-good.toml", "endpoint": p.good.uri(),
            "kind": "openai-compatible", "model": "qwen2.5-7b", "verified": true})
    );
    assert_eq!(
        providers["fb-claude"],
        json!({"file": "providers/fb-claude.toml", "endpoint": p.anthropic.uri(),
            "kind": "anthropic", "model": "claude-test", "verified": true}),
        "a file the map does not name is served from its own address"
    );
    assert_eq!(
        providers["legacy"],
        json!({"file": null, "endpoint": legacy.uri(), "verified": false})
    );
    // A provider only in the map is passed through, and never a failover's target.
    let (prompt, _) = first_case(&p.project);
    let id = failed_job(&serve, "to-legacy", input(&prompt, json!({}))).await;
    let (status, denial) = fail_over(&serve, &id, "legacy").await;
    assert_eq!(status, 403, "{denial}");
    assert_eq!(denial["reason"], "unknown_provider", "{denial}");
}

/// Issue 44 in `conform serve`: a failover to a cloud is authenticated as `conform run`
/// authenticates it. Bedrock's mock verifies every request's SigV4 signature (with the
/// session token) as the service does, and the failover's one request passes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_failover_to_a_cloud_carries_the_credentials_the_service_checks() {
    use crate::clouds::{AWS, Gate, aws_signature, fixed};
    let project = Project::new(&["bedrock-claude"]);
    let refusing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&refusing)
        .await;
    let answer = json!({
        "output": {"message": {"role": "assistant", "content": [{"text": "{\"ok\": true}"}]}},
        "stopReason": "end_turn", "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8},
        "metrics": {"latencyMs": 5}});
    let gate = Gate::new(
        aws_signature(AWS),
        fixed(ResponseTemplate::new(200).set_body_json(answer)),
    );
    let bedrock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(gate.clone())
        .mount(&bedrock)
        .await;
    project.point("bedrock-claude", &bedrock.uri());
    let entry = granted(&project, "bedrock-claude");
    std::fs::write(
        project.path("allowlist.json"),
        json!({"format": "conform.allowlist/v1", "entries": [entry]}).to_string(),
    )
    .unwrap();
    let vars = [
        ("AWS_ACCESS_KEY_ID", AWS.access_key_id),
        ("AWS_SECRET_ACCESS_KEY", AWS.secret_access_key),
        ("AWS_SESSION_TOKEN", AWS.session_token.unwrap()),
    ];
    let map = format!("primary={}", refusing.uri());
    let serve = serve_with(&project, Some(&map), &vars).unwrap_or_else(|e| panic!("{e:?}"));
    let (prompt, _) = first_case(&project);
    let id = failed_job_on(&serve, "primary", "to-bedrock", input(&prompt, json!({}))).await;
    let (status, attempt) = fail_over(&serve, &id, "bedrock-claude").await;
    assert_eq!(status, 202, "{attempt}");
    let job = settled(&serve, &id).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["result"], json!({"ok": true}));
    assert_eq!(
        (gate.passed(), gate.refused()),
        (1, 0),
        "signed once, as the service checks"
    );
}

/// An entry a conformant run of `provider` on the suite would write now: the project's
/// pins, 30 of 30 calls passed.
fn granted(project: &Project, provider: &str) -> Value {
    let paths = conform_config::Paths::under(project.root());
    let local = conform_gate::allowlist::Local::observe(&paths, SUITE, provider).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let stamp = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    json!({
        "suite": SUITE, "provider": provider, "model": "m", "served_models": [],
        "system_fingerprints": [], "suite_digest": local.suite_digest,
        "provider_digest": local.provider_digest, "suite_identity": local.suite_identity,
        "provider_identity": local.provider_identity, "tokenizer": "none",
        "evidence": {"run_id": "r1", "report": "reports/r1/report.json", "conform_version": "0.1.0",
            "first_call_at": stamp(now - time::Duration::hours(1)), "cases": 30, "repeats": 1,
            "calls": 30, "passed": 30, "pass_rate": 1.0, "first_attempt_pass_rate": 1.0, "checks": {}},
        "generated_at": stamp(now), "valid_until": stamp(now + time::Duration::days(1))
    })
}
