//! `conform serve` as real processes: three of them on one PostgreSQL, and a SIGKILL in
//! the middle of a provider call.

mod support;

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
            .arg("serve")
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

on_both_backends!(sigkill_during_a_provider_call);
