//! `conform serve` as real processes: three of them on one PostgreSQL, a SIGKILL in the
//! middle of a provider call, and a SIGTERM under load.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use serde_json::json;
use support::{TestDb, completion, job_body, reply, unique};
use wiremock::matchers::{body_string_contains, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// One `conform serve` process, killed when dropped.
struct Serve {
    child: Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

struct Env {
    providers: String,
    database_url: String,
    attempt_timeout_ms: u64,
    late_window_ms: u64,
    dir: std::path::PathBuf,
}

impl Serve {
    fn start(env: &Env) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_conform"))
            .args(["serve", "--unverified-allowlist"])
            .env("CONFORM_LISTEN", "127.0.0.1:0")
            .env("CONFORM_PROVIDERS", &env.providers)
            .env("CONFORM_DATABASE_URL", &env.database_url)
            .env(
                "CONFORM_ATTEMPT_TIMEOUT_MS",
                env.attempt_timeout_ms.to_string(),
            )
            .env("CONFORM_LATE_WINDOW_MS", env.late_window_ms.to_string())
            .env("CONFORM_ALLOWLIST", env.dir.join("allowlist.json"))
            .env("CONFORM_ROOT", &env.dir)
            .env("CONFORM_SHUTDOWN_TIMEOUT_MS", "3000")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        // Drains stderr for the process's whole life, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("conform serve: listening on ") {
                    let _ = tx.send(addr.to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("conform serve did not start: {:?}", log.lock().unwrap()));
        Serve { child, base, log }
    }

    fn logged(&self, needle: &[&str]) -> bool {
        self.log
            .lock()
            .unwrap()
            .iter()
            .any(|line| needle.iter().all(|n| line.contains(n)))
    }

    fn kill(&mut self) {
        // SIGKILL: no shutdown path runs.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM: the graceful shutdown.
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-s", "TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The exit code, once the process has exited (at most `limit`).
    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn create(http: &reqwest::Client, base: &str, owner: &str, key: &str) -> support::Reply {
    create_with(http, base, owner, key, "hello").await
}

async fn create_with(
    http: &reqwest::Client,
    base: &str,
    owner: &str,
    key: &str,
    prompt: &str,
) -> support::Reply {
    let r = http
        .post(format!("{base}/v1/jobs"))
        .header("x-owner-id", owner)
        .header("idempotency-key", key)
        .json(&job_body("invoice-extraction", "primary", prompt))
        .send()
        .await
        .unwrap();
    reply(r).await
}

async fn get(http: &reqwest::Client, base: &str, owner: &str, path: &str) -> support::Reply {
    let r = http
        .get(format!("{base}{path}"))
        .header("x-owner-id", owner)
        .send()
        .await
        .unwrap();
    reply(r).await
}

async fn post(
    http: &reqwest::Client,
    base: &str,
    owner: &str,
    path: &str,
    body: serde_json::Value,
) -> support::Reply {
    let r = http
        .post(format!("{base}{path}"))
        .header("x-owner-id", owner)
        .json(&body)
        .send()
        .await
        .unwrap();
    reply(r).await
}

async fn requests(provider: &MockServer) -> usize {
    provider.received_requests().await.unwrap_or_default().len()
}

/// Double clicks sent to different processes sharing one PostgreSQL: still one job and
/// one upstream request per key; concurrent attempt starts across processes: one 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_one_postgres() {
    let db = TestDb::postgres().await;
    let provider = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_string_contains("fail-first"))
        .respond_with(ResponseTemplate::new(400))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&provider)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion("done"))
                .set_delay(Duration::from_millis(200)),
        )
        .with_priority(2)
        .mount(&provider)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let env = Env {
        providers: format!("primary={}", provider.uri()),
        database_url: db.url.clone(),
        attempt_timeout_ms: 60_000,
        late_window_ms: 1_000,
        dir: dir.path().to_path_buf(),
    };
    let serves: Vec<Serve> = (0..3).map(|_| Serve::start(&env)).collect();
    let http = support::client();
    let owner = format!("owner-{}", unique());
    let keys: Vec<String> = (0..24).map(|i| format!("click-{i}")).collect();
    // Every key is sent twice to each process, all at once.
    let clicks = keys.iter().flat_map(|key| {
        serves
            .iter()
            .flat_map(move |s| [0, 1].map(|_| (key.clone(), s.base.clone())))
    });
    let replies = join_all(clicks.map(|(key, base)| {
        let (http, owner) = (&http, &owner);
        async move { (key.clone(), create(http, &base, owner, &key).await) }
    }))
    .await;
    for key in &keys {
        let answers: Vec<_> = replies
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, r)| r)
            .collect();
        assert_eq!(answers.len(), 6);
        assert_eq!(
            answers.iter().filter(|r| r.status == 201).count(),
            1,
            "{key}"
        );
        assert_eq!(
            answers
                .iter()
                .filter(|r| r.status == 200 && r.replayed)
                .count(),
            5,
            "{key}"
        );
        assert!(
            answers.iter().all(|r| r.id() == answers[0].id()),
            "{key}: two ids"
        );
    }
    assert_eq!(db.jobs_of(&owner).await, keys.len() as i64);
    // Every job completes, each after exactly one upstream request.
    for (_, r) in replies.iter().filter(|(_, r)| r.status == 201) {
        let path = format!("/v1/jobs/{}", r.id());
        for _ in 0..400 {
            if get(&http, &serves[0].base, &owner, &path).await.body["state"] == "succeeded" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(
            get(&http, &serves[2].base, &owner, &path).await.body["state"],
            "succeeded"
        );
    }
    assert_eq!(requests(&provider).await, keys.len());
    // Concurrent attempt starts on one idle job (its first attempt failed), spread over
    // the processes: exactly one 202.
    let idle = create_with(&http, &serves[0].base, &owner, "idle", "fail-first").await;
    let path = format!("/v1/jobs/{}", idle.id());
    for _ in 0..400 {
        if get(&http, &serves[1].base, &owner, &path).await.body["state"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        get(&http, &serves[1].base, &owner, &path).await.body["state"],
        "failed"
    );
    let attempts = format!("{path}/attempts");
    let starts = join_all((0..12).map(|i| {
        let base = &serves[i % 3].base;
        post(
            &http,
            base,
            &owner,
            &attempts,
            json!({"provider": "primary"}),
        )
    }))
    .await;
    let accepted: Vec<_> = starts.iter().filter(|r| r.status == 202).collect();
    assert_eq!(
        accepted.len(),
        1,
        "{:?}",
        starts.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for r in starts.iter().filter(|r| r.status != 202) {
        assert_eq!((r.status, r.code()), (409, "attempt_in_progress"));
        assert_eq!(r.body["attempt_id"], accepted[0].body["id"]);
    }
    assert_eq!(db.attempts_of(idle.id()).await, 2);
    for _ in 0..400 {
        if get(&http, &serves[2].base, &owner, &path).await.body["state"] == "succeeded" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        get(&http, &serves[2].base, &owner, &path).await.body["state"],
        "succeeded"
    );
    assert_eq!(requests(&provider).await, keys.len() + 2);
    drop(serves);
    db.cleanup().await;
}

/// SIGKILL while a provider call is in flight, then a restart on the same database: the
/// attempt keeps blocking (`starting`, then `unknown` at its original deadline) and is
/// never sent again.
async fn sigkill_during_a_provider_call(db: TestDb) {
    let provider = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion("too late"))
                .set_delay(Duration::from_secs(20)),
        )
        .mount(&provider)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let env = Env {
        providers: format!("primary={}", provider.uri()),
        database_url: db.url.clone(),
        attempt_timeout_ms: 1_500,
        late_window_ms: 30_000,
        dir: dir.path().to_path_buf(),
    };
    let http = support::client();
    let owner = format!("owner-{}", unique());
    let mut first = Serve::start(&env);
    let created = create(&http, &first.base, &owner, "k").await;
    assert_eq!(created.status, 201);
    let id = created.id().to_string();
    let attempt = created.body["attempts"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..400 {
        if requests(&provider).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(requests(&provider).await, 1, "the call is in flight");
    first.kill();
    let second = Serve::start(&env);
    let path = format!("/v1/jobs/{id}");
    let job = get(&http, &second.base, &owner, &path).await;
    let state = job.body["attempts"][0]["state"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(state == "starting" || state == "unknown", "{state}");
    let blocked = post(
        &http,
        &second.base,
        &owner,
        &format!("{path}/attempts"),
        json!({"provider": "primary"}),
    )
    .await;
    assert_eq!(
        (blocked.status, blocked.code()),
        (409, "attempt_in_progress")
    );
    assert_eq!(blocked.body["attempt_id"], attempt.as_str());
    // At the original deadline the restarted process turns it `unknown` (error timeout).
    let mut job = job;
    for _ in 0..400 {
        job = get(&http, &second.base, &owner, &path).await;
        if job.body["state"] == "unknown" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(job.body["state"], "unknown");
    assert_eq!(job.body["attempts"][0]["error"], "timeout");
    assert_eq!(job.body["attempts"].as_array().unwrap().len(), 1);
    let blocked = post(
        &http,
        &second.base,
        &owner,
        &format!("{path}/attempts"),
        json!({"provider": "primary"}),
    )
    .await;
    assert_eq!(
        (blocked.status, blocked.code()),
        (409, "attempt_in_progress")
    );
    assert!(second.logged(&[&attempt, "from=starting", "to=unknown", "reason=timeout"]));
    // Nothing was sent again.
    assert_eq!(requests(&provider).await, 1);
    drop(second);
    db.cleanup().await;
}

/// SIGTERM while creations pour in: the process stops accepting, answers what it has
/// begun, and exits 0 within its shutdown timeout. Every 201 it answered has its job;
/// after a restart on the same database, no attempt was sent twice (the ones it
/// abandoned in flight follow the restart rules).
async fn sigterm_under_load(db: TestDb) {
    let provider = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion("done"))
                .set_delay(Duration::from_millis(300)),
        )
        .mount(&provider)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let env = Env {
        providers: format!("primary={}", provider.uri()),
        database_url: db.url.clone(),
        attempt_timeout_ms: 1_500,
        late_window_ms: 1_000,
        dir: dir.path().to_path_buf(),
    };
    let mut first = Serve::start(&env);
    let owner = format!("owner-{}", unique());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // 16 clients, each creating job after job until the server is gone.
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let (base, owner, stop) = (first.base.clone(), owner.clone(), stop.clone());
            tokio::spawn(async move {
                let http = support::client();
                let mut seen = Vec::new();
                for n in 0.. {
                    let tag = format!("sigtag-{c}-{n}-end");
                    let sent = http
                        .post(format!("{base}/v1/jobs"))
                        .header("x-owner-id", &owner)
                        .header("idempotency-key", &tag)
                        .json(&job_body("invoice-extraction", "primary", &tag))
                        .send()
                        .await;
                    let answer = match sent {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            match r.json::<serde_json::Value>().await {
                                Ok(body) => {
                                    Ok((status, body["id"].as_str().unwrap_or("").to_string()))
                                }
                                Err(e) => Err(format!("the answer broke off: {e}")),
                            }
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    let stopping = stop.load(std::sync::atomic::Ordering::Relaxed);
                    let failed = answer.is_err();
                    assert!(
                        !failed || stopping,
                        "{tag}: no answer before the SIGTERM: {answer:?}"
                    );
                    seen.push((tag, answer));
                    if failed {
                        break;
                    }
                }
                seen
            })
        })
        .collect();
    // A client stalled in its body: its request is in progress when the signal comes,
    // and the drain must not wait for it beyond the shutdown timeout (3 s here).
    let mut stalled = tokio::net::TcpStream::connect(first.base.trim_start_matches("http://"))
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut stalled,
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: {owner}\r\nIdempotency-Key: stalled\r\n\
             Content-Length: 1000\r\n\r\n{{\"task\""
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let signalled = std::time::Instant::now();
    first.terminate();
    let code = tokio::task::block_in_place(|| first.wait_exit(Duration::from_secs(15)));
    assert_eq!(code, Some(0), "exits 0: {:?}", first.log.lock().unwrap());
    assert!(
        signalled.elapsed() < Duration::from_secs(8),
        "within the shutdown timeout, stalled client or not: {:?}",
        signalled.elapsed()
    );
    assert!(first.logged(&["shutting down"]));
    drop(stalled);
    let mut answered = Vec::new();
    let mut failures = 0;
    for c in clients {
        for (tag, answer) in c.await.unwrap() {
            match answer {
                Ok((status, id)) => {
                    assert_eq!(status, 201, "{tag}: only creations were sent");
                    answered.push((tag, id));
                }
                Err(_) => failures += 1,
            }
        }
    }
    assert!(
        answered.len() >= 16,
        "the load ran: {} answered",
        answered.len()
    );
    eprintln!(
        "{} creations answered 201, {failures} requests without an answer",
        answered.len()
    );
    // Every 201 has its job, in the database itself.
    for (tag, id) in &answered {
        assert_eq!(
            db.scalar("SELECT COUNT(*) FROM jobs WHERE id = $1", id)
                .await,
            1,
            "{tag}: answered 201 as {id}, and the job is there"
        );
    }
    // A restart on the same database: every job is served, each with one attempt, and
    // no request was sent twice, before or after.
    let second = Serve::start(&env);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let http = support::client();
    for (tag, id) in &answered {
        let job = get(&http, &second.base, &owner, &format!("/v1/jobs/{id}")).await;
        assert_eq!(job.status, 200, "{tag}");
        assert_eq!(
            job.body["attempts"].as_array().unwrap().len(),
            1,
            "{tag}: {:?}",
            job.body
        );
        let state = job.body["state"].as_str().unwrap();
        assert!(state == "succeeded" || state == "unknown", "{tag}: {state}");
    }
    let sent = provider.received_requests().await.unwrap_or_default();
    let mut per_tag: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for request in &sent {
        let body = String::from_utf8_lossy(&request.body);
        if let Some(at) = body.find("sigtag-") {
            let tag: String = body[at..].split("-end").next().unwrap().to_string();
            *per_tag.entry(tag).or_default() += 1;
        }
    }
    assert!(
        per_tag.values().all(|n| *n == 1),
        "no request sent twice: {per_tag:?}"
    );
    drop(second);
    db.cleanup().await;
}

on_both_backends!(sigkill_during_a_provider_call, sigterm_under_load);
