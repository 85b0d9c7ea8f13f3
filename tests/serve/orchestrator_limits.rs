//! `conform serve` under hostile input and load (issue 12): every refusal in the
//! contract's shape, the in-flight limit and the body budget answered 503 at once,
//! stalled connections closed on their own clocks while others are served, and a
//! database that is down answered 503 fast, with `/readyz` saying so while `/healthz`
//! stays a liveness check, and nothing lost when it comes back.

use crate::support;

use std::time::{Duration, Instant};

use conform_serve::orchestrator::Limits;
use serde_json::{Value, json};
use support::proxy::{Proxy, host_port};
use support::{Orchestrator, Settings, TestDb, completion, job_body, reply, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wiremock::matchers::{body_string_contains, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn provider() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_string_contains("slow-answer"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion("slow but fine"))
                .set_delay(Duration::from_millis(1500)),
        )
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion("fine")))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

fn settings(provider: &MockServer, limits: Limits) -> Settings {
    Settings {
        providers: format!("primary={}", provider.uri()),
        allowlist: std::env::temp_dir().join(format!("no-allowlist-{}.json", unique())),
        attempt_timeout: Duration::from_secs(10),
        late_window: Duration::from_secs(10),
        limits,
    }
}

/// Writes `bytes` on a fresh connection and reads until the server closes it or
/// `limit` passes; answers what arrived and when the connection ended (`None`: still
/// open at `limit`).
async fn raw(addr: &str, bytes: &[u8], limit: Duration) -> (String, Option<Duration>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    stream.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout_at((started + limit).into(), stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), None),
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            Ok(_) => {
                return (
                    String::from_utf8_lossy(&got).into_owned(),
                    Some(started.elapsed()),
                );
            }
        }
    }
}

/// The status, content type and JSON body of a raw answer.
fn parse(answer: &str) -> (u16, String, Value) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (
        status,
        content_type,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn assert_problem(answer: &str, status: u16, code: &str) {
    let (got, content_type, body) = parse(answer);
    assert_eq!(got, status, "{answer}");
    assert_eq!(content_type, "application/problem+json", "{answer}");
    assert_eq!(body["code"], code, "{answer}");
    assert_eq!(body["status"], status, "{answer}");
}

async fn post_raw_body(
    orch: &Orchestrator,
    headers: &[(&str, String)],
    body: reqwest::Body,
) -> support::Reply {
    let mut request = orch
        .http
        .post(format!("{}/v1/jobs", orch.base))
        .header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, v);
    }
    reply(request.body(body).send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_a_problem_with_a_code() {
    let db = TestDb::sqlite().await;
    let provider = provider().await;
    let limits = Limits {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let orch = Orchestrator::start(&db, settings(&provider, limits)).await;
    let owner = format!("owner-{}", unique());
    let key = || ("idempotency-key", format!("key-{}", unique()));
    let big = vec![b'x'; 3 << 20];

    // 413, announced and chunked; and the key it named stays free.
    let (k, key_413) = key();
    let r = post_raw_body(
        &orch,
        &[("x-owner-id", owner.clone()), (k, key_413.clone())],
        big.clone().into(),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (413, "body_too_large"),
        "{:?}",
        r.body
    );
    assert!(
        r.body["detail"].as_str().unwrap().contains("2097152"),
        "{:?}",
        r.body
    );
    let chunks = futures::stream::iter(
        big.chunks(64 * 1024)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let r = post_raw_body(
        &orch,
        &[("x-owner-id", owner.clone()), key()],
        reqwest::Body::wrap_stream(chunks),
    )
    .await;
    assert_eq!((r.status, r.code()), (413, "body_too_large"), "chunked");
    let r = orch
        .create(
            &owner,
            &key_413,
            &job_body("invoice-extraction", "primary", "hi"),
        )
        .await;
    assert_eq!(r.status, 201, "a refused body binds nothing: {:?}", r.body);

    // The owner and the key are checked before the body is read.
    let r = post_raw_body(&orch, &[key()], big.clone().into()).await;
    assert_eq!((r.status, r.code()), (401, "owner_required"));
    let r = post_raw_body(&orch, &[("x-owner-id", owner.clone())], big.clone().into()).await;
    assert_eq!((r.status, r.code()), (400, "idempotency_key_required"));

    // Paths that do not decode, unknown paths, wrong methods.
    for (verb, path) in [
        ("GET", "/v1/jobs/%ff%fe"),
        ("POST", "/v1/jobs/%ff%fe/attempts"),
        ("POST", "/v1/jobs/%ff%fe/cancel"),
        ("POST", "/v1/attempts/%c3/cancel"),
    ] {
        let request = match verb {
            "GET" => orch.http.get(format!("{}{path}", orch.base)),
            _ => orch
                .http
                .post(format!("{}{path}", orch.base))
                .json(&json!({"provider": "primary"})),
        };
        let r = reply(request.header("x-owner-id", &owner).send().await.unwrap()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_request"),
            "{verb} {path}"
        );
    }
    let r = orch.get(&owner, "/nope").await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let r = reply(
        orch.http
            .delete(format!("{}/v1/jobs", orch.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((r.status, r.code()), (405, "method_not_allowed"));

    // Lengths: headers, owner, task, ids.
    let r = orch.get(&"o".repeat(20_000), "/v1/jobs/x").await;
    assert_eq!((r.status, r.code()), (431, "headers_too_large"));
    let r = orch.get(&"o".repeat(256), "/v1/jobs/x").await;
    assert_eq!((r.status, r.code()), (401, "owner_required"));
    assert!(r.body["detail"].as_str().unwrap().contains("255"));
    let longest = "o".repeat(255);
    let r = orch
        .create(
            &longest,
            "k",
            &job_body("invoice-extraction", "primary", "hi"),
        )
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let r = orch
        .create(
            &owner,
            "k-task",
            &job_body(&"t".repeat(256), "primary", "hi"),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = orch
        .get(&owner, &format!("/v1/jobs/{}", "j".repeat(256)))
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = orch
        .get(&owner, &format!("/v1/jobs/{}", "j".repeat(255)))
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));

    // A head that does not arrive in time is answered 408 by the connection's clock; a
    // body that does not, by the application. Both close the connection.
    let (answer, closed) = raw(
        &orch.addr,
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: a\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_problem(&answer, 408, "request_timeout");
    assert!(
        closed.is_some_and(|d| d >= Duration::from_millis(250)),
        "{closed:?}"
    );
    let (answer, closed) = raw(
        &orch.addr,
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: {owner}\r\nIdempotency-Key: slow\r\n\
             Content-Length: 100\r\n\r\n{{\"task\""
        )
        .as_bytes(),
        Duration::from_secs(5),
    )
    .await;
    assert_problem(&answer, 408, "request_timeout");
    assert!(closed.is_some(), "the connection is closed after the 408");
    // The HTTP layer refuses a head larger than its buffer before the application sees
    // it: a bare 431, as docs/orchestrator.md says.
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
        "f".repeat(70 * 1024)
    );
    let (answer, _) = raw(&orch.addr, huge.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(parse(&answer).0, 431, "{answer}");
    orch.stop().await;
    db.cleanup().await;
}

/// In-flight slots: all taken means 503 `overloaded` at once (never a queue), while
/// `/healthz` still answers. Body budget: a body that does not fit next to those being
/// received is 503 at once, and fits once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_and_the_body_budget_are_503_at_once() {
    let db = TestDb::sqlite().await;
    let provider = provider().await;
    let limits = Limits {
        max_in_flight: 2,
        max_body_bytes: 48 * 1024,
        body_memory_bytes: 64 * 1024,
        ..Limits::default()
    };
    let orch = std::sync::Arc::new(Orchestrator::start(&db, settings(&provider, limits)).await);
    let owner = format!("owner-{}", unique());
    // Two creations hold both slots: the database is locked, so they wait for it.
    let lock = db.lock_sqlite().await;
    let holders: Vec<_> = (0..2)
        .map(|i| {
            let (orch, owner) = (orch.clone(), owner.clone());
            tokio::spawn(async move {
                orch.create(
                    &owner,
                    &format!("held-{i}"),
                    &job_body("invoice-extraction", "primary", "x"),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let response = orch
        .http
        .post(format!("{}/v1/jobs", orch.base))
        .header("x-owner-id", &owner)
        .header("idempotency-key", "third")
        .json(&job_body("invoice-extraction", "primary", "x"))
        .send()
        .await
        .unwrap();
    let retry_after = response.headers().get("retry-after").cloned();
    let r = reply(response).await;
    let took = started.elapsed();
    assert_eq!((r.status, r.code()), (503, "overloaded"), "{:?}", r.body);
    assert_eq!(retry_after.as_ref().map(|v| v.to_str().unwrap()), Some("1"));
    assert!(
        took < Duration::from_millis(500),
        "answered at once, not queued: {took:?}"
    );
    let r = orch.get(&owner, "/v1/jobs/anything").await;
    assert_eq!(
        (r.status, r.code()),
        (503, "overloaded"),
        "reads take a slot too"
    );
    let health = orch
        .http
        .get(format!("{}/healthz", orch.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "liveness takes no slot");
    drop(lock);
    for h in holders {
        let r = h.await.unwrap();
        assert!(
            r.status == 201 || (r.status, r.code()) == (503, "ledger_unavailable"),
            "{} {:?}",
            r.status,
            r.body
        );
    }
    let r = orch
        .create(
            &owner,
            "third",
            &job_body("invoice-extraction", "primary", "x"),
        )
        .await;
    assert_eq!(
        r.status, 201,
        "the shed request bound nothing: {:?}",
        r.body
    );

    // One body of 40,000 bytes is arriving slowly: another of 40,000 does not fit in
    // 64 KiB next to it.
    let mut slow = TcpStream::connect(&orch.addr).await.unwrap();
    slow.write_all(
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: {owner}\r\nIdempotency-Key: slow\r\n\
             Content-Length: 40000\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    slow.write_all(&[b' '; 39_000]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = format!("{:<39800}", "padded");
    let body = job_body("invoice-extraction", "primary", &text);
    let started = Instant::now();
    let r = orch.create(&owner, "big", &body).await;
    assert_eq!((r.status, r.code()), (503, "overloaded"), "{:?}", r.body);
    assert!(started.elapsed() < Duration::from_millis(500));
    drop(slow);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = orch.create(&owner, "big", &body).await;
    assert_eq!(
        r.status, 201,
        "it fits once the slow body is gone: {:?}",
        r.body
    );
    if let Ok(orch) = std::sync::Arc::try_unwrap(orch) {
        orch.stop().await;
    }
    db.cleanup().await;
}

/// 1,000 connections stall (inside their headers, inside their body, or before their
/// first byte): `/healthz` and a new job still answer within 100 ms, and each stalled
/// connection is closed on its own clock, with a 408 problem when a request had begun.
async fn stalled_connections_are_closed_while_others_are_served(db: TestDb) {
    let provider = provider().await;
    let limits = Limits {
        header_timeout: Duration::from_millis(600),
        body_timeout: Duration::from_millis(900),
        idle_timeout: Duration::from_millis(1200),
        ..Limits::default()
    };
    let orch = Orchestrator::start(&db, settings(&provider, limits)).await;
    let owner = format!("owner-{}", unique());
    let kinds: [&[u8]; 3] = [
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: a\r\n",
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: a\r\nIdempotency-Key: s\r\nContent-Length: 1000\r\n\r\n",
        b"",
    ];
    let stalled: Vec<_> = (0..1000)
        .map(|i| {
            let addr = orch.addr.clone();
            let bytes = kinds[i % 3];
            tokio::spawn(async move { (i % 3, raw(&addr, bytes, Duration::from_secs(6)).await) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Fresh connections each time: no pooled connection hides a slow accept.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .retry(reqwest::retry::never())
        .build()
        .unwrap();
    let mut health = Vec::new();
    let mut creations = Vec::new();
    for i in 0..5 {
        let started = Instant::now();
        let r = fresh
            .get(format!("{}/healthz", orch.base))
            .send()
            .await
            .unwrap();
        health.push(started.elapsed());
        assert_eq!(r.status(), 200);
        let started = Instant::now();
        let r = fresh
            .post(format!("{}/v1/jobs", orch.base))
            .header("x-owner-id", &owner)
            .header("idempotency-key", format!("fresh-{i}"))
            .json(&job_body("invoice-extraction", "primary", "x"))
            .send()
            .await
            .unwrap();
        creations.push(started.elapsed());
        assert_eq!(r.status(), 201);
    }
    health.sort();
    creations.sort();
    eprintln!("while 1,000 connections stall: /healthz {health:?}, creations {creations:?}");
    assert!(
        health[2] < Duration::from_millis(100),
        "median /healthz {health:?}"
    );
    assert!(
        creations[2] < Duration::from_millis(100),
        "median creation {creations:?}"
    );
    assert!(health[4] < Duration::from_secs(1) && creations[4] < Duration::from_secs(1));
    let mut ended = [0usize; 3];
    for task in stalled {
        let (kind, (answer, closed)) = task.await.unwrap();
        let closed = closed
            .unwrap_or_else(|| panic!("a stalled connection ({kind}) is still open after 6 s"));
        match kind {
            0 => {
                assert_problem(&answer, 408, "request_timeout");
                assert!(closed < Duration::from_millis(600 + 2500), "{closed:?}");
            }
            1 => {
                assert_problem(&answer, 408, "request_timeout");
                assert!(closed < Duration::from_millis(900 + 2500), "{closed:?}");
            }
            _ => {
                assert_eq!(answer, "", "an idle connection is closed without an answer");
                // The server's clock starts at its accept, a little before the client's
                // (by more on a loaded machine): the client may measure a little less than
                // the idle timeout, never much less.
                assert!(
                    closed >= Duration::from_millis(900)
                        && closed < Duration::from_millis(1200 + 2500),
                    "{closed:?}"
                );
            }
        }
        ended[kind] += 1;
    }
    assert_eq!(ended, [334, 333, 333]);
    orch.stop().await;
    db.cleanup().await;
}

/// The database goes away: creations fail within about the database timeout (2 s) with
/// 503 and `Retry-After`, `/readyz` says so while `/healthz` stays 200; when it comes
/// back, a result that arrived meanwhile is recorded, the refused creation's key is free,
/// and no attempt was sent twice.
async fn the_database_down_and_back(db: TestDb) {
    let provider = provider().await;
    let proxy = if db.is_postgres() {
        Some(Proxy::start(&host_port(&db.url)).await)
    } else {
        None
    };
    let url = proxy.as_ref().map_or(db.url.clone(), |p| p.url(&db.url));
    let orch = Orchestrator::start_on(&url, settings(&provider, Limits::default())).await;
    let owner = format!("owner-{}", unique());
    let ready = orch
        .http
        .get(format!("{}/readyz", orch.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    // A job whose provider answers while the database is down.
    let early = orch
        .create(
            &owner,
            "early",
            &job_body("invoice-extraction", "primary", "slow-answer early"),
        )
        .await;
    assert_eq!(early.status, 201);

    // Down.
    let lock = match &proxy {
        Some(p) => {
            p.down().await;
            None
        }
        None => Some(db.lock_sqlite().await),
    };
    let body = job_body("invoice-extraction", "primary", "during the outage");
    let started = Instant::now();
    let response = orch
        .http
        .post(format!("{}/v1/jobs", orch.base))
        .header("x-owner-id", &owner)
        .header("idempotency-key", "during")
        .json(&body)
        .send()
        .await
        .unwrap();
    let retry_after = response.headers().get("retry-after").cloned();
    let r = reply(response).await;
    let took = started.elapsed();
    assert_eq!(
        (r.status, r.code()),
        (503, "ledger_unavailable"),
        "{:?}",
        r.body
    );
    assert!(retry_after.is_some(), "503 carries Retry-After");
    assert!(took < Duration::from_millis(3500), "failed fast: {took:?}");
    let started = Instant::now();
    let health = orch
        .http
        .get(format!("{}/healthz", orch.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.status(),
        200,
        "/healthz is liveness: the database is not its business"
    );
    // Well inside the database timeout (2 s) it would wait for if it asked the database.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    // A readiness answer is reused for 250 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = reply(
        orch.http
            .get(format!("{}/readyz", orch.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "ledger_unavailable"),
        "{:?}",
        r.body
    );
    // The early job's provider answers now, into the outage.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Back.
    match &proxy {
        Some(p) => p.up().await,
        None => drop(lock),
    }
    let mut ready = 0;
    for _ in 0..100 {
        ready = orch
            .http
            .get(format!("{}/readyz", orch.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if ready == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready, 200, "/readyz says ready again");
    let mut again = orch.create(&owner, "during", &body).await;
    for _ in 0..10 {
        if again.status != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        again = orch.create(&owner, "during", &body).await;
    }
    assert_eq!(
        again.status, 201,
        "the refused creation bound nothing: {:?}",
        again.body
    );
    let done = succeeded(&orch, &owner, again.id()).await;
    assert_eq!(done["attempts"].as_array().unwrap().len(), 1);
    let early = succeeded(&orch, &owner, early.id()).await;
    assert_eq!(
        early["result"], "slow but fine",
        "the answer that came during the outage was kept"
    );
    let sent = provider.received_requests().await.unwrap_or_default();
    let count = |needle: &str| {
        sent.iter()
            .filter(|r| String::from_utf8_lossy(&r.body).contains(needle))
            .count()
    };
    assert_eq!(
        count("slow-answer early"),
        1,
        "the early attempt was sent once"
    );
    assert_eq!(
        count("during the outage"),
        1,
        "the refused creation sent nothing"
    );
    orch.stop().await;
    db.cleanup().await;
}

/// Polls until the job succeeded. Right after an outage a pooled connection that broke
/// may fail one request with a 503, which a client retries.
async fn succeeded(orch: &Orchestrator, owner: &str, id: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let r = orch.get(owner, &format!("/v1/jobs/{id}")).await;
        if r.status == 200 && r.body["state"] == "succeeded" {
            return r.body;
        }
        assert!(
            r.status == 200 || r.status == 503,
            "{} {:?}",
            r.status,
            r.body
        );
        last = r.body;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {id} did not succeed: {last}");
}

on_both_backends!(
    stalled_connections_are_closed_while_others_are_served,
    the_database_down_and_back
);
