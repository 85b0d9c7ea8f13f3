//! `conform serve` against `docs/contract/ORCHESTRATOR.md`: identity, keys, bodies, every
//! endpoint's codes in the contract's order, the outcome of each kind of provider answer,
//! the late window, cancels and the allowlist gate. Same bodies on SQLite and PostgreSQL.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Orchestrator, Settings, TestDb, allowlist, completion, job_body, reply, unique};
use wiremock::matchers::{body_string_contains, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

const TIMEOUT: Duration = Duration::from_millis(400);
const LATE_WINDOW: Duration = Duration::from_millis(3000);
/// How long after the deadline a late answer arrives.
const LATE: Duration = Duration::from_millis(900);
/// Later still, leaving a wide margin for a failover to overtake it (reverse-order finish).
const LATER: Duration = Duration::from_millis(2000);

/// The fallback provider: answers everything, quickly.
async fn fallback() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion("from fallback"))
                .set_delay(Duration::from_millis(100)),
        )
        .mount(&server)
        .await;
    server
}

/// A provider whose answer depends on a marker in the prompt.
async fn provider() -> MockServer {
    let server = MockServer::start().await;
    let answers = [
        (
            "say-ok",
            ResponseTemplate::new(200).set_body_json(completion(r#"{"ok": true}"#)),
        ),
        (
            "say-text",
            ResponseTemplate::new(200).set_body_json(completion("just words")),
        ),
        (
            "say-null",
            ResponseTemplate::new(200).set_body_json(completion_null()),
        ),
        (
            "say-400",
            ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
        ),
        (
            "say-429",
            ResponseTemplate::new(429).insert_header("retry-after", "1"),
        ),
        ("say-503", ResponseTemplate::new(503)),
        ("say-529", ResponseTemplate::new(529)),
        ("say-500", ResponseTemplate::new(500)),
        ("say-502", ResponseTemplate::new(502)),
        (
            "say-302",
            ResponseTemplate::new(302).insert_header("location", "/v1/chat/completions"),
        ),
        (
            "say-html",
            ResponseTemplate::new(200).set_body_string("<html>busy</html>"),
        ),
        // Past the deadline, within the late window.
        (
            "say-late-ok",
            ResponseTemplate::new(200)
                .set_body_json(completion("late but fine"))
                .set_delay(TIMEOUT + LATE),
        ),
        (
            "say-later-ok",
            ResponseTemplate::new(200)
                .set_body_json(completion("from primary, later"))
                .set_delay(TIMEOUT + LATER),
        ),
        // Past the deadline, a late definite failure.
        (
            "say-late-400",
            ResponseTemplate::new(400).set_delay(TIMEOUT + LATE),
        ),
        // Past the late window.
        (
            "say-never",
            ResponseTemplate::new(200)
                .set_body_json(completion("too late"))
                .set_delay(TIMEOUT + LATE_WINDOW + Duration::from_secs(2)),
        ),
    ];
    for (marker, template) in answers {
        Mock::given(method("POST"))
            .and(body_string_contains(marker))
            .respond_with(template)
            .mount(&server)
            .await;
    }
    server
}

fn completion_null() -> Value {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null}, "finish_reason": "stop"}]})
}

struct World {
    db: TestDb,
    provider: MockServer,
    fallback: MockServer,
    orch: Orchestrator,
    allowlist: PathBuf,
    _dir: tempfile::TempDir,
    owner: String,
}

impl World {
    async fn new(db: TestDb) -> World {
        let provider = provider().await;
        let fallback = fallback().await;
        let dir = tempfile::tempdir().unwrap();
        let allowlist = dir.path().join("allowlist.json");
        let orch = Orchestrator::start(
            &db,
            Settings {
                providers: format!(
                    "primary={},fallback={},dead=http://127.0.0.1:1",
                    provider.uri(),
                    fallback.uri()
                ),
                allowlist: allowlist.clone(),
                attempt_timeout: TIMEOUT,
                late_window: LATE_WINDOW,
                limits: Default::default(),
            },
        )
        .await;
        World {
            db,
            provider,
            fallback,
            orch,
            allowlist,
            _dir: dir,
            owner: format!("owner-{}", unique()),
        }
    }

    /// A new job whose first attempt goes to `provider` with `marker` in its prompt.
    async fn job(&self, provider: &str, marker: &str) -> String {
        let r = self
            .orch
            .create(
                &self.owner,
                &unique(),
                &job_body("invoice-extraction", provider, marker),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.id().to_string()
    }

    async fn wait(&self, id: &str, state: &str) -> Value {
        self.orch
            .wait_for(&self.owner, id, |j| j["state"] == state)
            .await
    }

    async fn upstream(&self) -> usize {
        self.provider
            .received_requests()
            .await
            .unwrap_or_default()
            .len()
    }

    async fn attempt(&self, id: &str, provider: &str) -> support::Reply {
        self.orch
            .post(
                &self.owner,
                &format!("/v1/jobs/{id}/attempts"),
                &json!({"provider": provider}),
            )
            .await
    }

    async fn done(self) {
        self.orch.stop().await;
        self.db.cleanup().await;
    }
}

async fn raw_create(orch: &Orchestrator, headers: &[(&str, &str)], body: &str) -> support::Reply {
    let mut request = orch
        .http
        .post(format!("{}/v1/jobs", orch.base))
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    reply(request.send().await.unwrap()).await
}

async fn identity_keys_and_bodies(db: TestDb) {
    let w = World::new(db).await;
    let o = &w.orch;
    let good = job_body("invoice-extraction", "primary", "say-ok").to_string();
    let owner = w.owner.as_str();
    // Owner first.
    for headers in [
        vec![("idempotency-key", "k")],
        vec![("x-owner-id", ""), ("idempotency-key", "k")],
    ] {
        let r = raw_create(o, &headers, &good).await;
        assert_eq!((r.status, r.code()), (401, "owner_required"));
    }
    assert_eq!(o.get("", "/v1/jobs/x").await.status, 401);
    // Then the key.
    let long = "k".repeat(256);
    for key in [
        None,
        Some("a b"),
        Some("\"k\";p=1"),
        Some("\"unterminated"),
        Some(long.as_str()),
        Some(""),
    ] {
        let mut headers = vec![("x-owner-id", owner)];
        if let Some(key) = key {
            headers.push(("idempotency-key", key));
        }
        let r = raw_create(o, &headers, &good).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "idempotency_key_required"),
            "{key:?}"
        );
    }
    let twice = raw_create(
        o,
        &[
            ("x-owner-id", owner),
            ("idempotency-key", "k1"),
            ("idempotency-key", "k1"),
        ],
        &good,
    )
    .await;
    assert_eq!(
        (twice.status, twice.code()),
        (400, "idempotency_key_required")
    );
    // Then the body: malformed, or not canonicalizable by RFC 8785.
    for body in [
        "not json",
        "[]",
        r#"{"task": "t", "provider": "primary", "input": {}, "task": "t"}"#,
        r#"{"task": "t", "provider": "primary", "input": {"s": "\ud800"}}"#,
        r#"{"task": "t", "provider": "primary", "input": {"n": 1e400}}"#,
        r#"{"task": "t", "provider": "primary", "input": {}, "extra": 1}"#,
        r#"{"provider": "primary", "input": {}}"#,
        r#"{"task": "t", "provider": "primary", "input": []}"#,
        r#"{"task": "t", "provider": "nobody", "input": {}}"#,
    ] {
        let r = raw_create(
            o,
            &[("x-owner-id", owner), ("idempotency-key", "bound-later")],
            body,
        )
        .await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{body}");
    }
    // A rejected request does not bind the key.
    let first = raw_create(
        o,
        &[("x-owner-id", owner), ("idempotency-key", "bound-later")],
        &good,
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let id = first.id().to_string();
    // The quoted form names the same key; order, white space and number spelling do not
    // change the fingerprint.
    let respelled = r#"{ "input": {"temperature": 0.0, "messages": [{"content": "say-ok", "role": "user"}]},
                        "provider": "primary", "task": "invoice-extraction" }"#;
    let again = raw_create(
        o,
        &[
            ("x-owner-id", owner),
            ("idempotency-key", "\"bound-later\""),
        ],
        respelled,
    )
    .await;
    assert_eq!(
        (again.status, again.id(), again.replayed),
        (200, id.as_str(), true)
    );
    let changed = respelled.replace("0.0", "0.5");
    let reused = raw_create(
        o,
        &[("x-owner-id", owner), ("idempotency-key", "bound-later")],
        &changed,
    )
    .await;
    assert_eq!(
        (reused.status, reused.code()),
        (409, "idempotency_key_reused")
    );
    // Existence does not leak across owners.
    let stranger = format!("stranger-{}", unique());
    assert_eq!(
        o.get(&stranger, &format!("/v1/jobs/{id}")).await.code(),
        "not_found"
    );
    assert_eq!(o.get(owner, "/v1/jobs/job_nope").await.status, 404);
    let job = w.wait(&id, "succeeded").await;
    assert_eq!(job["result"], json!({"ok": true}));
    assert_eq!(job["version"], 2);
    assert_eq!(job["completed_by"], job["attempts"][0]["id"]);
    // Polling starts nothing.
    for _ in 0..50 {
        o.job(owner, &id).await;
    }
    assert_eq!(w.upstream().await, 1);
    assert_eq!(w.db.jobs_of(owner).await, 1);
    w.done().await;
}

/// Each kind of answer ends the attempt as the contract says.
async fn outcomes(db: TestDb) {
    let w = World::new(db).await;
    let cases = [
        ("say-text", "succeeded", "succeeded", None),
        ("say-null", "failed", "failed", Some("invalid_response")),
        ("say-html", "failed", "failed", Some("invalid_response")),
        ("say-400", "failed", "failed", Some("http_400")),
        ("say-429", "failed", "failed", Some("http_429")),
        ("say-503", "failed", "failed", Some("http_503")),
        ("say-529", "failed", "failed", Some("http_529")),
        ("say-500", "unknown", "unknown", Some("http_500")),
        ("say-502", "unknown", "unknown", Some("http_502")),
        ("say-302", "unknown", "unknown", Some("http_302")),
    ];
    let mut jobs = Vec::new();
    for (marker, ..) in &cases {
        jobs.push(w.job("primary", marker).await);
    }
    let refused = w.job("dead", "say-ok").await;
    for (id, (marker, job_state, attempt_state, error)) in jobs.iter().zip(&cases) {
        let job = w.wait(id, job_state).await;
        let attempt = &job["attempts"][0];
        assert_eq!(attempt["state"], *attempt_state, "{marker}");
        assert_eq!(attempt["error"].as_str(), *error, "{marker}");
        if *attempt_state == "unknown" {
            // `unknown` blocks new attempts; nothing retries it.
            let r = w.attempt(id, "primary").await;
            assert_eq!(
                (r.status, r.code()),
                (409, "attempt_in_progress"),
                "{marker}"
            );
            assert_eq!(r.body["attempt_id"], attempt["id"]);
        }
    }
    let job = w.wait(&refused, "failed").await;
    assert_eq!(job["attempts"][0]["error"], "connection_refused");
    assert_eq!(job["result"], Value::Null);
    let succeeded = w.orch.job(&w.owner, &jobs[0]).await;
    assert_eq!(succeeded["result"], "just words");
    // One request per attempt: no retry, no redirect followed.
    assert_eq!(w.upstream().await, cases.len());
    w.done().await;
}

/// The deadline makes an attempt `unknown`; the late window still accepts an answer.
async fn deadline_and_late_window(db: TestDb) {
    let w = World::new(db).await;
    let late = w.job("primary", "say-late-ok").await;
    let late_failure = w.job("primary", "say-late-400").await;
    let never = w.job("primary", "say-never").await;
    for id in [&late, &late_failure, &never] {
        let job = w.wait(id, "unknown").await;
        assert_eq!(job["attempts"][0]["error"], "timeout");
    }
    let job = w.wait(&late, "succeeded").await;
    assert_eq!(job["result"], "late but fine");
    assert_eq!(job["attempts"][0]["error"], Value::Null);
    let job = w.wait(&late_failure, "failed").await;
    assert_eq!(job["attempts"][0]["state"], "failed");
    // Past the late window, `unknown` stays `unknown`: nothing fails it, nothing retries it.
    tokio::time::sleep(LATE_WINDOW + Duration::from_millis(300)).await;
    let job = w.orch.job(&w.owner, &never).await;
    assert_eq!(job["state"], "unknown");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(w.upstream().await, 3);
    w.done().await;
}

/// `POST /v1/jobs/{id}/attempts` checks in the contract's order, and the allowlist gates
/// failover only, read at decision time and failing closed.
async fn attempts_in_order_and_failover_gate(db: TestDb) {
    let w = World::new(db).await;
    // 404 before 400.
    let r = w
        .orch
        .post(&w.owner, "/v1/jobs/job_nope/attempts", &json!({"wrong": 1}))
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let failed = w.job("primary", "say-400").await;
    w.wait(&failed, "failed").await;
    for body in [
        json!({}),
        json!({"provider": 7}),
        json!({"provider": "nobody"}),
        json!({"provider": "primary", "x": 1}),
    ] {
        let r = w
            .orch
            .post(&w.owner, &format!("/v1/jobs/{failed}/attempts"), &body)
            .await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{body}");
    }
    let stranger = format!("stranger-{}", unique());
    let r = w
        .orch
        .post(
            &stranger,
            &format!("/v1/jobs/{failed}/attempts"),
            &json!({"provider": "primary"}),
        )
        .await;
    assert_eq!(r.status, 404);
    // Failover denied, with each reason.
    let expiry = |days: i64| {
        (time::OffsetDateTime::now_utc() + time::Duration::days(days))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let past = expiry(-1);
    let future = expiry(1);
    let files: [(Option<String>, &str); 6] = [
        (None, "missing"),
        (Some("{broken".into()), "unreadable"),
        (
            Some(json!({"format": "conform.allowlist/v1"}).to_string()),
            "unreadable",
        ),
        (
            Some(json!({"format": "other/v9", "entries": []}).to_string()),
            "unknown_format",
        ),
        (
            Some(allowlist(&[("ticket-triage", "fallback", &future)]).to_string()),
            "no_entry",
        ),
        (
            Some(allowlist(&[("invoice-extraction", "fallback", &past)]).to_string()),
            "expired",
        ),
    ];
    for (content, reason) in files {
        match content {
            Some(content) => std::fs::write(&w.allowlist, content).unwrap(),
            None => {
                let _ = std::fs::remove_file(&w.allowlist);
            }
        }
        let r = w.attempt(&failed, "fallback").await;
        assert_eq!(
            (r.status, r.code()),
            (403, "failover_not_allowed"),
            "{reason}"
        );
        assert_eq!(r.body["reason"], reason);
    }
    assert_eq!(
        w.db.attempts_of(&failed).await,
        1,
        "a denied failover starts nothing"
    );
    // A retry on the job's own provider needs no allowlist; it fails again here.
    let _ = std::fs::remove_file(&w.allowlist);
    let retry = w.attempt(&failed, "primary").await;
    assert_eq!(
        (retry.status, retry.body["state"].as_str()),
        (202, Some("starting"))
    );
    w.wait(&failed, "failed").await;
    // Rewritten at run time: the next decision reads the new file.
    std::fs::write(
        &w.allowlist,
        allowlist(&[("invoice-extraction", "fallback", &future)]).to_string(),
    )
    .unwrap();
    let failover = w.attempt(&failed, "fallback").await;
    assert_eq!(failover.status, 202, "{}", failover.body);
    assert_eq!(failover.body["provider"], "fallback");
    let job = w.wait(&failed, "succeeded").await;
    assert_eq!(job["result"], "from fallback");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 3);
    assert_eq!(w.fallback.received_requests().await.unwrap().len(), 1);
    // A completed job refuses attempts before anything else.
    let done = w.job("primary", "say-ok").await;
    w.wait(&done, "succeeded").await;
    let r = w.attempt(&done, "fallback").await;
    assert_eq!((r.status, r.code()), (409, "job_completed"));
    w.done().await;
}

/// Cancels: an attempt cancel releases the job for a new attempt; a job cancel ends it,
/// and a result that arrives afterwards is discarded.
async fn cancels(db: TestDb) {
    let w = World::new(db).await;
    let o = &w.orch;
    let owner = w.owner.as_str();
    let job = w.job("primary", "say-never").await;
    let view = o.job(owner, &job).await;
    let first = view["attempts"][0]["id"].as_str().unwrap().to_string();
    let stranger = format!("stranger-{}", unique());
    assert_eq!(
        o.post(
            &stranger,
            &format!("/v1/attempts/{first}/cancel"),
            &json!({})
        )
        .await
        .status,
        404
    );
    assert_eq!(
        o.post(owner, "/v1/attempts/att_nope/cancel", &json!({}))
            .await
            .status,
        404
    );
    let r = o
        .post(owner, &format!("/v1/attempts/{first}/cancel"), &json!({}))
        .await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (200, Some("cancelled"))
    );
    let again = o
        .post(owner, &format!("/v1/attempts/{first}/cancel"), &json!({}))
        .await;
    assert_eq!((again.status, again.body.clone()), (200, r.body.clone()));
    assert_eq!(o.job(owner, &job).await["state"], "pending");
    // Released: a new attempt may start (same input, so it hangs too).
    let second = w.attempt(&job, "primary").await;
    assert_eq!(second.status, 202);
    let second_id = second.id().to_string();
    // The user gives up: the job cancel releases the open attempt and bumps the version.
    let r = o
        .post(owner, &format!("/v1/jobs/{job}/cancel"), &json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["state"], "cancelled");
    assert_eq!(r.body["version"], 2);
    assert!(
        r.body["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["state"] == "cancelled")
    );
    let again = o
        .post(owner, &format!("/v1/jobs/{job}/cancel"), &json!({}))
        .await;
    assert_eq!(
        (again.status, again.body["version"].as_i64()),
        (200, Some(2))
    );
    let r = w.attempt(&job, "primary").await;
    assert_eq!((r.status, r.code()), (409, "job_cancelled"));
    let r = o
        .post(
            owner,
            &format!("/v1/attempts/{second_id}/cancel"),
            &json!({}),
        )
        .await;
    assert_eq!(
        r.status, 200,
        "a cancelled attempt cancels again idempotently"
    );
    // A late result after the job cancel is discarded.
    let late = w.job("primary", "say-late-ok").await;
    let r = o
        .post(owner, &format!("/v1/jobs/{late}/cancel"), &json!({}))
        .await;
    assert_eq!(r.status, 200);
    let job_view = w
        .orch
        .wait_for(owner, &late, |j| j["attempts"][0]["state"] == "superseded")
        .await;
    assert_eq!(job_view["result"], Value::Null);
    assert_eq!(job_view["state"], "cancelled");
    // Terminal attempts and completed jobs refuse cancels.
    let ok = w.job("primary", "say-ok").await;
    let view = w.wait(&ok, "succeeded").await;
    let attempt = view["attempts"][0]["id"].as_str().unwrap();
    let r = o
        .post(owner, &format!("/v1/attempts/{attempt}/cancel"), &json!({}))
        .await;
    assert_eq!((r.status, r.code()), (409, "attempt_terminal"));
    let r = o
        .post(owner, &format!("/v1/jobs/{ok}/cancel"), &json!({}))
        .await;
    assert_eq!((r.status, r.code()), (409, "job_completed"));
    w.done().await;
}

/// The contract's reverse-order finish: A leaves first, times out into `unknown` and is
/// released by a cancel; B fails over and returns first; A's late result loses, even
/// though A went to the job's own provider.
async fn reverse_order_finish(db: TestDb) {
    let w = World::new(db).await;
    let future = (time::OffsetDateTime::now_utc() + time::Duration::days(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    std::fs::write(
        &w.allowlist,
        allowlist(&[("invoice-extraction", "fallback", &future)]).to_string(),
    )
    .unwrap();
    let id = w.job("primary", "say-later-ok").await;
    let job = w.wait(&id, "unknown").await;
    let a = job["attempts"][0]["id"].as_str().unwrap().to_string();
    let r = w
        .orch
        .post(&w.owner, &format!("/v1/attempts/{a}/cancel"), &json!({}))
        .await;
    assert_eq!(r.status, 200);
    let b = w.attempt(&id, "fallback").await;
    assert_eq!(b.status, 202, "{}", b.body);
    let job = w.wait(&id, "succeeded").await;
    assert_eq!(
        job["completed_by"], b.body["id"],
        "B returned first and won"
    );
    assert_eq!(job["result"], "from fallback");
    let job = w
        .orch
        .wait_for(&w.owner, &id, |j| j["attempts"][0]["state"] == "superseded")
        .await;
    assert_eq!(
        job["result"], "from fallback",
        "A's late result is discarded"
    );
    assert_eq!(job["version"], 2);
    assert_eq!(job["attempts"][1]["state"], "succeeded");
    assert_eq!(w.upstream().await, 1);
    assert_eq!(w.fallback.received_requests().await.unwrap().len(), 1);
    w.done().await;
}

on_both_backends!(
    identity_keys_and_bodies,
    outcomes,
    deadline_and_late_window,
    attempts_in_order_and_failover_gate,
    cancels,
    reverse_order_finish,
);
