//! The fractures of the contract over HTTP, on a SQLite file and on PostgreSQL through the
//! same test bodies: double clicks, a key reused with another payload, concurrent
//! attempt starts. Wiremock counts what reached the provider.

use crate::support;

use std::time::Duration;

use futures::future::join_all;
use serde_json::json;
use support::{Orchestrator, Settings, TestDb, completion, job_body, unique};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn settings(provider: &MockServer) -> Settings {
    Settings {
        providers: format!("primary={},fallback={}", provider.uri(), provider.uri()),
        allowlist: std::env::temp_dir().join(format!("no-allowlist-{}.json", unique())),
        attempt_timeout: Duration::from_secs(60),
        late_window: Duration::from_secs(1),
        limits: Default::default(),
    }
}

async fn answering(template: ResponseTemplate) -> MockServer {
    let provider = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(template)
        .mount(&provider)
        .await;
    provider
}

async fn upstream_requests(provider: &MockServer) -> usize {
    provider.received_requests().await.unwrap_or_default().len()
}

/// 256 concurrent creations with one key: one job row, one 201, 255 × 200 with the same
/// id and `Idempotent-Replayed: true`, and exactly one upstream request.
async fn double_click_256(db: TestDb) {
    let provider =
        answering(ResponseTemplate::new(200).set_body_json(completion(r#"{"total": 42}"#))).await;
    let orch = Orchestrator::start(&db, settings(&provider)).await;
    let owner = format!("owner-{}", unique());
    let body = job_body("invoice-extraction", "primary", "extract this");
    let replies = join_all((0..256).map(|_| orch.create(&owner, "double-click", &body))).await;
    let created: Vec<_> = replies.iter().filter(|r| r.status == 201).collect();
    let replayed: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        created.len(),
        1,
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(replayed.len(), 255);
    let id = created[0].id().to_string();
    assert!(!created[0].replayed);
    assert!(replayed.iter().all(|r| r.id() == id && r.replayed));
    assert_eq!(db.jobs_of(&owner).await, 1);
    let job = orch
        .wait_for(&owner, &id, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["result"], json!({"total": 42}));
    assert_eq!(upstream_requests(&provider).await, 1);
    let sent = &provider.received_requests().await.unwrap()[0];
    let sent: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(
        sent["model"], "primary",
        "model defaults to the provider's name"
    );
    assert_eq!(sent["messages"], body["input"]["messages"]);
    // Replays after completion still start nothing.
    let again = orch.create(&owner, "\"double-click\"", &body).await;
    assert_eq!((again.status, again.id()), (200, id.as_str()));
    assert_eq!(upstream_requests(&provider).await, 1);
    orch.stop().await;
    db.cleanup().await;
}

/// 64 concurrent creations, half of them with another payload under the same key: one
/// job; every other answer a 200 with the same id (same payload) or a 409 (the other);
/// never two jobs, never a 5xx.
async fn same_key_two_payloads_64(db: TestDb) {
    let provider = answering(ResponseTemplate::new(200).set_body_json(completion("ok"))).await;
    let orch = Orchestrator::start(&db, settings(&provider)).await;
    let owner = format!("owner-{}", unique());
    let bodies = [
        job_body("invoice-extraction", "primary", "payload A"),
        job_body("invoice-extraction", "primary", "payload B"),
    ];
    let replies = join_all((0..64).map(|i| orch.create(&owner, "k", &bodies[i % 2]))).await;
    assert!(replies.iter().all(|r| r.status < 500), "a 5xx");
    let winner = replies
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status == 201)
        .map(|(i, r)| (i % 2, r.id().to_string()))
        .collect::<Vec<_>>();
    assert_eq!(winner.len(), 1);
    let (group, id) = &winner[0];
    for (i, r) in replies.iter().enumerate() {
        match r.status {
            201 => {}
            200 => {
                assert_eq!(i % 2, *group, "a 200 for the other payload");
                assert_eq!(r.id(), id);
                assert!(r.replayed);
            }
            409 => {
                assert_ne!(i % 2, *group, "a 409 for the same payload");
                assert_eq!(r.code(), "idempotency_key_reused");
            }
            other => panic!("unexpected status {other}: {}", r.body),
        }
    }
    assert_eq!(db.jobs_of(&owner).await, 1);
    let job = orch
        .wait_for(&owner, id, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(upstream_requests(&provider).await, 1);
    orch.stop().await;
    db.cleanup().await;
}

/// 16 concurrent attempt starts on an idle job: exactly one 202; the others 409
/// `attempt_in_progress` naming it.
async fn sixteen_attempt_starts(db: TestDb) {
    let provider = MockServer::start().await;
    // The first attempt fails at once, leaving the job idle; the next one hangs, so it
    // stays open while the other requests arrive.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&provider)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion("late"))
                .set_delay(Duration::from_secs(30)),
        )
        .with_priority(2)
        .mount(&provider)
        .await;
    let orch = Orchestrator::start(&db, settings(&provider)).await;
    let owner = format!("owner-{}", unique());
    let created = orch
        .create(&owner, "k", &job_body("invoice-extraction", "primary", "x"))
        .await;
    assert_eq!(created.status, 201);
    let id = created.id().to_string();
    let job = orch.wait_for(&owner, &id, |j| j["state"] == "failed").await;
    assert_eq!(job["attempts"][0]["error"], "http_400");
    let path = format!("/v1/jobs/{id}/attempts");
    let body = json!({"provider": "primary"});
    let replies = join_all((0..16).map(|_| orch.post(&owner, &path, &body))).await;
    let accepted: Vec<_> = replies.iter().filter(|r| r.status == 202).collect();
    assert_eq!(
        accepted.len(),
        1,
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let attempt = accepted[0].id().to_string();
    assert_eq!(accepted[0].body["state"], "starting");
    for r in replies.iter().filter(|r| r.status != 202) {
        assert_eq!((r.status, r.code()), (409, "attempt_in_progress"));
        assert_eq!(r.body["attempt_id"], attempt.as_str());
    }
    assert_eq!(db.attempts_of(&id).await, 2);
    let job = orch.job(&owner, &id).await;
    assert_eq!(job["state"], "running");
    // Wait for the second request to reach the provider: two in all.
    for _ in 0..200 {
        if upstream_requests(&provider).await == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(upstream_requests(&provider).await, 2);
    orch.stop().await;
    db.cleanup().await;
}

on_both_backends!(
    double_click_256,
    same_key_two_payloads_64,
    sixteen_attempt_starts
);
