//! The call-time gate through the real LiteLLM proxy (issue 45): `integrations/litellm/`'s
//! callback asks `conform serve`'s `GET /v1/gate` about each fallback of every request.
//!
//! A project proves `fb-good` with a real `conform run`; `fb-unproven` has no evidence.
//! The proxy routes `primary` (its upstream answers 500) to `["fb-unproven", "fb-good"]`,
//! in that order. With the callback the request reaches `fb-good` and never
//! `fb-unproven`; with `conform serve` down it fails over to nothing (fail closed); a
//! second run that fails revokes `fb-good` in the allowlist, and the very next request
//! does not fail over to it, the proxy still running with the config it started with.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::Failed;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{Mode, Project, output_text};
use crate::{REPO, free_port};

const SUITE: &str = "ticket-triage";
const KEY: &str = "sk-conform-gate-test-0123456789abcdef";

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `conform serve` in the project on `port`, once it listens.
fn serve(project: &Project, port: u16) -> Running {
    // Held from the start, so that every path waits for the process.
    let mut serving = Running(
        Command::new(env!("CARGO_BIN_EXE_conform"))
            .arg("serve")
            .current_dir(project.root())
            .env("CONFORM_ROOT", project.root())
            .env("CONFORM_LISTEN", format!("127.0.0.1:{port}"))
            .env("CONFORM_ALLOWLIST", project.path("allowlist.json"))
            .env(
                "CONFORM_DATABASE_URL",
                format!("sqlite://{}", project.path("ledger.db").display()),
            )
            .env_remove("CONFORM_PROVIDERS")
            .env_remove("CONFORM_UNVERIFIED_ALLOWLIST")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = BufReader::new(serving.0.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("conform serve did not start:\n{said}");
        }
        if line.contains("conform serve: listening on ") {
            std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = stderr.read_to_string(&mut rest);
            });
            return serving;
        }
        said.push_str(&line);
    }
}

/// LiteLLM's proxy on `port` with `config`, the callback on its path, asking the gate at
/// `gate`; its log goes to `log`.
fn proxy(litellm: &Path, config: &Path, port: u16, gate: &str, log: &Path) -> Running {
    let log = std::fs::File::create(log).unwrap();
    Running(
        Command::new(litellm)
            .args(["--config"])
            .arg(config)
            .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
            .env("LITELLM_MASTER_KEY", KEY)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("PYTHONPATH", Path::new(REPO).join("integrations/litellm"))
            // The callback is imported from the repository: no bytecode cache left in it.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("CONFORM_GATE_URL", gate)
            .env("CONFORM_GATE_SUITE", SUITE)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// A chat completion naming `model`, as an upstream answers.
fn completion(model: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": format!("from {model}")}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
}

async fn upstream(answer: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(answer)
        .mount(&server)
        .await;
    server
}

/// The completions `server` was asked for (the proxy also lists models at startup).
async fn received(server: &MockServer) -> usize {
    (server.received_requests().await.unwrap_or_default().iter())
        .filter(|r| r.url.path().ends_with("/chat/completions"))
        .count()
}

/// `conform run fb-good --suite SUITE`, as CI runs it: it rewrites the allowlist.
fn run(project: &Project) -> std::process::Output {
    (project.cmd())
        .args(["run", "fb-good", "--suite", SUITE, "--no-progress"])
        .output()
        .unwrap()
}

struct Upstreams {
    primary: MockServer,
    good: MockServer,
    unproven: MockServer,
}

impl Upstreams {
    async fn counts(&self) -> [usize; 3] {
        [
            received(&self.primary).await,
            received(&self.good).await,
            received(&self.unproven).await,
        ]
    }
}

fn config(u: &Upstreams) -> String {
    let model = |name: &str, server: &MockServer| {
        format!(
            "  - model_name: {name}\n    litellm_params: {{model: openai/{name}-upstream, api_base: \"{}/v1\", api_key: none}}\n",
            server.uri()
        )
    };
    format!(
        "model_list:\n{}{}{}router_settings:\n  fallbacks: [{{\"primary\": [\"fb-unproven\", \"fb-good\"]}}]\n  num_retries: 0\n\
         litellm_settings:\n  callbacks: conform_gate.proxy_handler_instance\n",
        model("primary", &u.primary),
        model("fb-good", &u.good),
        model("fb-unproven", &u.unproven),
    )
}

/// One request for `primary` through the proxy: its status and body.
async fn ask(http: &reqwest::Client, proxy: &str) -> (u16, Value) {
    let answer = (http.post(format!("{proxy}/v1/chat/completions")))
        .bearer_auth(KEY)
        .json(&json!({"model": "primary", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

async fn wait_up(http: &reqwest::Client, proxy: &str, log: &Path) -> Result<(), Failed> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        let up = http.get(format!("{proxy}/health/liveliness")).send().await;
        if up.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Failed::from(format!(
        "the LiteLLM proxy did not start:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    )))
}

pub fn a_revocation_reaches_the_running_proxys_next_request(litellm: &Path) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    runtime.block_on(steps(litellm))
}

async fn steps(litellm: &Path) -> Result<(), Failed> {
    let project = Project::new(&[]);
    let evidence = project.chat_mock("fb-good", Mode::Faithful).await;
    let granted = run(&project);
    assert_eq!(granted.status.code(), Some(0), "{}", output_text(&granted));
    let u = Upstreams {
        primary: upstream(
            ResponseTemplate::new(500).set_body_json(json!({"error": {"message": "down"}})),
        )
        .await,
        good: upstream(completion("fb-good-upstream")).await,
        unproven: upstream(completion("fb-unproven-upstream")).await,
    };
    project.write("litellm.yaml", &config(&u));
    let gate_port = free_port();
    let gate = format!("http://127.0.0.1:{gate_port}");
    let mut serving = Some(serve(&project, gate_port));
    let (proxy_port, log) = (free_port(), project.path("litellm.log"));
    let _proxy = proxy(
        litellm,
        &project.path("litellm.yaml"),
        proxy_port,
        &gate,
        &log,
    );
    let proxy = format!("http://127.0.0.1:{proxy_port}");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    wait_up(&http, &proxy, &log).await?;
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();

    // Proven: the primary fails over to fb-good; the unproven one, listed first, is dropped.
    let (status, body) = ask(&http, &proxy).await;
    assert_eq!(status, 200, "{body}\n{}", logged());
    assert_eq!(
        body["choices"][0]["message"]["content"], "from fb-good-upstream",
        "{body}"
    );
    assert_eq!(
        u.counts().await,
        [1, 1, 0],
        "primary, fb-good, fb-unproven\n{}",
        logged()
    );

    // The gate down: no fallback at all.
    drop(serving.take());
    let (status, body) = ask(&http, &proxy).await;
    assert_ne!(status, 200, "{body}");
    assert_eq!(u.counts().await, [2, 1, 0], "fail closed: {body}");
    serving = Some(serve(&project, gate_port));
    let (status, body) = ask(&http, &proxy).await;
    assert_eq!(status, 200, "{body}\n{}", logged());
    assert_eq!(u.counts().await, [3, 2, 0]);

    // fb-good now answers what the suite does not expect: the next run revokes it.
    evidence.reset().await;
    Mock::given(method("POST"))
        .respond_with(completion("drifted"))
        .mount(&evidence)
        .await;
    let revoked = run(&project);
    assert_ne!(revoked.status.code(), Some(0), "{}", output_text(&revoked));
    assert!(
        project.allowlist()["revocations"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{}",
        project.allowlist()
    );
    let (status, body) = ask(&http, &proxy).await;
    assert_ne!(status, 200, "the revoked fallback answered: {body}");
    assert_eq!(u.counts().await, [4, 2, 0], "the very next request: {body}");
    drop(serving);
    Ok(())
}
