//! Shared by the integration tests: a throwaway project directory and a wiremock
//! responder speaking OpenAI with the fixtures' answers (for the CLI tests); the recorded
//! payloads, provider configs with tiny retry waits, endpoints built straight from the
//! library, and raw TCP servers for the faults wiremock cannot produce (for the wire and
//! fault tests).

#![allow(dead_code)]

use conform_config::Suite;
use conform_config::secret::Secret;
use conform_config::{Prompt, ProviderConfig};
use conform_wire::provider::transport::{Endpoint, Transport};
use conform_wire::provider::{CallError, CallSpec, Completion, wire_format};
use conform_wire::sim::AnswerBook;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wiremock::{Request, Respond, ResponseTemplate};

pub mod rate_limited;

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A temporary project: the shipped fixtures and the named provider files.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new(providers: &[&str]) -> Project {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &Path::new(REPO).join("fixtures"),
            &dir.path().join("fixtures"),
        );
        std::fs::create_dir_all(dir.path().join("providers")).unwrap();
        for p in providers {
            let name = format!("{p}.toml");
            std::fs::copy(
                Path::new(REPO).join("providers").join(&name),
                dir.path().join("providers").join(&name),
            )
            .unwrap();
        }
        Project { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Points `providers/NAME.toml` at `url` (its `base_url`), as a user does to run a
    /// provider somewhere else: unlike `--base-url`, the evidence is then about the file.
    pub fn point(&self, provider: &str, url: &str) {
        let rel = format!("providers/{provider}.toml");
        let text = std::fs::read_to_string(self.path(&rel)).unwrap();
        let mut out = String::new();
        for line in text.lines().filter(|l| !l.starts_with("base_url")) {
            out.push_str(line);
            out.push('\n');
            if line.starts_with("model") {
                out.push_str(&format!("base_url = \"{url}\"\n"));
            }
        }
        self.write(&rel, &out);
    }

    /// Writes `providers/NAME.toml`: a server speaking Chat Completions at `url`, with no
    /// key and no tokenizer (what a self-hosted fallback's file holds).
    pub fn chat_provider(&self, name: &str, url: &str) {
        self.write(
            &format!("providers/{name}.toml"),
            &format!(
                "kind = \"openai-compatible\"\nmodel = \"{name}-model\"\nbase_url = \"{url}\"\n\n[tokenizer]\nkind = \"none\"\n"
            ),
        );
    }

    /// A Chat Completions mock answering the shipped suites from their expected answers
    /// (`mode` says how), and `providers/NAME.toml` pointing at it.
    pub async fn chat_mock(&self, name: &str, mode: Mode) -> wiremock::MockServer {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .and(wiremock::matchers::path("/v1/chat/completions"))
            .respond_with(OpenAiMock {
                book: answer_book(self.root()),
                mode,
            })
            .mount(&server)
            .await;
        self.chat_provider(name, &server.uri());
        server
    }

    pub fn cmd(&self) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(self.root()).arg("--root").arg(self.root());
        cmd.env_remove("OPENAI_API_KEY")
            .env_remove("CONFORM_ALLOWLIST")
            .env_remove("RUST_LOG");
        cmd
    }

    pub fn allowlist(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path("allowlist.json")).unwrap()).unwrap()
    }

    /// The newest run directory under reports/.
    pub fn last_run(&self) -> PathBuf {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(self.path("reports"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        runs.pop().expect("a run directory")
    }

    /// Every file under the project, as text (lossy), with its path.
    pub fn all_text(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        walk(self.root(), &mut out);
        out
    }
}

/// A JSON file the binary wrote.
pub fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a command printed, stdout then stderr, for an assertion's message.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The expected answers of the shipped suites.
pub fn answer_book(root: &Path) -> Arc<AnswerBook> {
    let suites: Vec<Suite> = ["invoice-extraction", "ticket-triage"]
        .iter()
        .map(|s| Suite::load(&root.join("fixtures").join(s)).unwrap())
        .collect();
    let refs: Vec<&Suite> = suites.iter().collect();
    Arc::new(AnswerBook::from_suites(&refs).unwrap())
}

/// How the mock OpenAI answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// The expected answer, as a recorded gpt-4o response would carry it.
    Faithful,
    /// The expected answer in markdown fences.
    Fenced,
    /// 401 with a body that echoes the bearer token back.
    EchoKey401,
}

/// Answers Chat Completions with the fixtures' expected answers; checks nothing itself,
/// so the tests can inspect the received requests.
pub struct OpenAiMock {
    pub book: Arc<AnswerBook>,
    pub mode: Mode,
}

impl Respond for OpenAiMock {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if self.mode == Mode::EchoKey401 {
            let auth = request
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            return ResponseTemplate::new(401).set_body_json(json!({"error": {
                "message": format!("Incorrect API key provided: {auth}."),
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}));
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let user = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string();
        let expected = self.book.answer(&user).cloned().unwrap_or(Value::Null);
        let content = match self.mode {
            Mode::Fenced => format!("```json\n{expected}\n```"),
            _ => expected.to_string(),
        };
        // As OpenAI does: the prompt tokens of gpt-4o-mini's encoding, billed per message.
        let prompt_tokens = prompt_tokens_o200k(&body);
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-test", "object": "chat.completion", "created": 1727346143,
            "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_test0001",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 60, "total_tokens": prompt_tokens + 60}
        }))
    }
}

/// The text of `tests/wire/NAME`.
pub fn wire_text(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/wire")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `tests/wire/NAME` as JSON.
pub fn wire(name: &str) -> Value {
    serde_json::from_str(&wire_text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The HTTP body of a payload file: the `body` of a `{"status_code", "body"}` record,
/// or the file itself when it is a bare body.
pub fn body_of(file: &Value) -> Value {
    match (file.get("status_code"), file.get("body")) {
        (Some(_), Some(body)) => body.clone(),
        _ => file.clone(),
    }
}

/// The recorded status of a `{"status_code", …}` payload file.
pub fn status_of(file: &Value) -> u16 {
    file["status_code"].as_u64().expect("status_code") as u16
}

/// A provider config from TOML, as `providers/NAME.toml` would hold it.
pub fn config(name: &str, toml: &str) -> Arc<ProviderConfig> {
    let path = format!("providers/{name}.toml");
    Arc::new(
        ProviderConfig::parse(Path::new(&path), toml)
            .unwrap_or_else(|d| panic!("config {name}: {d}")),
    )
}

/// Tiny retry waits: two retries, 5 ms apart, so retried faults are counted quickly.
pub const FAST_LIMITS: &str =
    "[limits]\nmax_retries = 2\nretry_base_wait = \"5ms\"\nmax_retry_wait = \"1s\"\n";

pub const TEST_KEY: &str = "test-key-0123456789";

/// An endpoint for `config`, with [`TEST_KEY`] and the adapter its wire needs.
pub fn endpoint(config: Arc<ProviderConfig>) -> Endpoint {
    let wire = wire_format(config.wire_kind());
    Endpoint::new(
        config,
        wire,
        Some(Secret::new(TEST_KEY.into())),
        Transport::new().expect("transport"),
    )
}

/// One call of `user` (and `system`) with `schema`, named `schema_name`.
pub async fn call(
    endpoint: &Endpoint,
    system: Option<&str>,
    user: &str,
    schema: &Value,
    schema_name: &str,
) -> Result<Completion, CallError> {
    let prompt = Prompt {
        system: system.map(str::to_string),
        user: user.to_string(),
    };
    let spec = CallSpec {
        prompt: &prompt,
        schema,
        schema_name,
        conversation: None,
    };
    endpoint.call(&spec, 100).await
}

/// One call of a whole request (a conversation with its tools); the answer schema is
/// [`small_schema`], asked for only when the conversation expects a JSON answer.
pub async fn call_conversation(
    endpoint: &Endpoint,
    conversation: &conform_config::Conversation,
) -> Result<Completion, CallError> {
    let prompt = Prompt {
        system: None,
        user: String::new(),
    };
    let schema = small_schema();
    let spec = CallSpec {
        prompt: &prompt,
        schema: &schema,
        schema_name: "answer",
        conversation: Some(conversation),
    };
    endpoint.call(&spec, 100).await
}

/// A small strict-mode schema for calls whose request shape does not matter.
pub fn small_schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": false})
}

/// Numbers compared by value (`0` equals `0.0`), objects by key.
pub fn normalized(value: &Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalized(v))).collect())
        }
        other => other.clone(),
    }
}

/// Every field of `recorded` is in `ours` with the same value; returns the JSON
/// pointers of the fields only `ours` has.
pub fn assert_covers(ours: &Value, recorded: &Value) -> Vec<String> {
    fn walk(ours: &Value, recorded: &Value, at: &str, extra: &mut Vec<String>) {
        match (ours, recorded) {
            (Value::Object(o), Value::Object(r)) => {
                for (k, rv) in r {
                    let ov = o
                        .get(k)
                        .unwrap_or_else(|| panic!("our request lacks {at}/{k}"));
                    walk(ov, rv, &format!("{at}/{k}"), extra);
                }
                for k in o.keys().filter(|k| !r.contains_key(*k)) {
                    extra.push(format!("{at}/{k}"));
                }
            }
            (o, r) => assert_eq!(normalized(o), normalized(r), "our request differs at {at}"),
        }
    }
    let mut extra = Vec::new();
    walk(ours, recorded, "", &mut extra);
    extra
}

/// A server that reads each request's head, then drops the connection without an
/// answer, leaving the body unread (so the peer sees a reset). Returns its address and
/// the number of requests it took.
pub async fn resetting_server() -> (String, Arc<AtomicUsize>) {
    raw_server(|_| None).await
}

/// A server that answers `200` with a `content-length` of `declared` but sends only
/// `partial`, then closes.
pub async fn short_body_server(
    partial: &'static str,
    declared: usize,
) -> (String, Arc<AtomicUsize>) {
    raw_server(move |_| {
        Some(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n{partial}"
        ))
    })
    .await
}

/// A server that answers every request with these raw bytes (a status line, headers and
/// whatever part of a body), then closes. Returns its address and the number of
/// requests it took.
pub async fn raw_answer_server(raw: &'static str) -> (String, Arc<AtomicUsize>) {
    raw_server_holding(move |_| Some(raw.to_string()), false).await
}

/// Like [`raw_answer_server`], but it then holds the connection open without a word more
/// until the client gives up.
pub async fn stalling_server(raw: &'static str) -> (String, Arc<AtomicUsize>) {
    raw_server_holding(move |_| Some(raw.to_string()), true).await
}

async fn raw_server(
    answer: impl Fn(usize) -> Option<String> + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    raw_server_holding(answer, false).await
}

async fn raw_server_holding(
    answer: impl Fn(usize) -> Option<String> + Send + Sync + 'static,
    hold: bool,
) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("addr"));
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                // Byte by byte up to the end of the head: the body stays unread.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let n = seen.fetch_add(1, Ordering::SeqCst);
                if let Some(reply) = answer(n) {
                    let _ = stream.write_all(reply.as_bytes()).await;
                    let _ = stream.flush().await;
                }
                if hold {
                    // Until the client closes: a read of 0 bytes, or an error.
                    let mut sink = [0u8; 1024];
                    while let Ok(read) = stream.read(&mut sink).await {
                        if read == 0 {
                            break;
                        }
                    }
                }
            });
        }
    });
    (address, count)
}

/// An address where nothing listens.
pub async fn refused_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    address
}

/// The request's prompt tokens as OpenAI counts them for an o200k_base model.
pub fn prompt_tokens_o200k(body: &Value) -> u64 {
    use conform_wire::tokenize::{Tokenizer, chat_messages, tiktoken::Tiktoken};
    let messages = chat_messages(body);
    Tiktoken::shared("o200k_base")
        .unwrap()
        .count_messages(&messages)
        .unwrap()
}

/// A mock that answers every POST whose path matches `route` (a regular expression)
/// with `template`, recording the requests.
pub async fn answering(route: &str, template: ResponseTemplate) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path_regex(route))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

/// A 200 carrying the body of `tests/wire/NAME`.
pub fn ok(file: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body_of(&wire(file)))
}

/// What the mock received.
pub async fn requests(server: &wiremock::MockServer) -> Vec<Request> {
    server.received_requests().await.expect("recording on")
}

/// A request's JSON body.
pub fn body(request: &Request) -> Value {
    serde_json::from_slice(&request.body).expect("our request is JSON")
}

/// One call through `config` that must fail, and how many requests the mock received
/// for it (retries included).
pub async fn failed_call(
    server: &wiremock::MockServer,
    config: Arc<ProviderConfig>,
) -> (CallError, usize) {
    let err = call(&endpoint(config), None, "x", &small_schema(), "x")
        .await
        .expect_err("the call must fail");
    (err, requests(server).await.len())
}

/// How a [`streaming_server`] ends its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The last chunk of the chunked encoding: the body ended cleanly.
    Complete,
    /// The connection closes without it: the body broke off.
    Drop,
}

/// A server that answers every request with `200`, `content-type`, and a chunked body:
/// `head` (one HTTP chunk per item), then after `pause` the `tail`, then `end`. It reads
/// each request whole first, so closing never resets the connection. Returns its
/// address and the number of requests it took.
pub async fn streaming_server(
    content_type: &'static str,
    head: Vec<String>,
    pause: std::time::Duration,
    tail: Vec<String>,
    end: StreamEnd,
) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("addr"));
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let parts = Arc::new((head, tail));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            let parts = Arc::clone(&parts);
            tokio::spawn(async move {
                if read_request(&mut stream).await.is_none() {
                    return;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                );
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
                for part in &parts.0 {
                    let _ = stream.write_all(chunk(part).as_bytes()).await;
                }
                let _ = stream.flush().await;
                tokio::time::sleep(pause).await;
                for part in &parts.1 {
                    let _ = stream.write_all(chunk(part).as_bytes()).await;
                }
                if end == StreamEnd::Complete {
                    let _ = stream.write_all(b"0\r\n\r\n").await;
                }
                let _ = stream.flush().await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (address, count)
}

/// Reads one request: its head, then as many body bytes as `content-length` says.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(body)
}

/// What `f` returns, and the bytes this thread read from files and sockets while it ran
/// (`rchar` of `/proc/thread-self/io`), for `f` that does its reading on the caller's thread.
#[cfg(target_os = "linux")]
#[allow(dead_code)]
pub fn bytes_read_by<T>(f: impl FnOnce() -> T) -> (T, u64) {
    fn so_far() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .unwrap()
            .parse()
            .unwrap()
    }
    let before = so_far();
    let out = f();
    (out, so_far() - before)
}

/// A simulated provider's file that answers at once, `concurrency` calls at a time:
/// `behaviour`, with `extra` lines for its `[sim]` table (`rate`, `seed`, …).
pub fn sim_config(name: &str, behaviour: &str, extra: &str, concurrency: usize) -> ProviderConfig {
    let toml = format!(
        "kind = \"sim\"\nmodel = \"{name}\"\ntimeout = \"10s\"\n[limits]\nconcurrency = {concurrency}\n\
         [sim]\nbehaviour = \"{behaviour}\"\nexpect = \"conformant\"\nlatency = \"0ms\"\n{extra}\n"
    );
    ProviderConfig::parse(Path::new(&format!("providers/{name}.toml")), &toml).unwrap()
}

/// Runs `suite` in the library against `configs`: each simulation gets a server of its
/// own, answering from `book` (a real kind is already somewhere); the servers stop once
/// the run returns.
pub async fn run_in_library(
    suite: &Arc<conform::run::PreparedSuite>,
    book: &Arc<AnswerBook>,
    mut configs: Vec<ProviderConfig>,
    options: &conform::run::RunOptions,
) -> conform::run::RunResult {
    use conform::run::Target;
    let mut servers = Vec::new();
    for c in configs
        .iter_mut()
        .filter(|c| c.kind == conform_config::Kind::Sim)
    {
        let server = conform_wire::sim::SimServer::start(c, Arc::clone(book))
            .await
            .expect("a simulation");
        c.base_url = server.uri();
        servers.push(server);
    }
    let transport = Transport::new().unwrap();
    let targets: Vec<Arc<Target>> = configs
        .into_iter()
        .map(|c| {
            let wire = wire_format(c.wire_kind());
            let counter = conform_wire::tokenize::Counter::for_provider(&c).unwrap();
            Arc::new(
                Target::new(Endpoint::new(Arc::new(c), wire, None, transport.clone()))
                    .with_counter(counter),
            )
        })
        .collect();
    conform::run::execute(
        std::slice::from_ref(suite),
        &targets,
        options,
        std::future::pending(),
    )
    .await
    .unwrap()
}
