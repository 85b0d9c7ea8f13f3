//! The ledger under concurrency, on a real SQLite file and the real PostgreSQL, through
//! the same test bodies.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use conform_serve::ledger::{
    AttemptCancel, AttemptState, Created, Finished, JobCancel, JobState, Ledger, LossReason,
    NewJob, Started,
};
use serde_json::{Value, json};
use support::{TestDb, unique};

const TIMEOUT: Duration = Duration::from_secs(60);

fn new_job<'a>(owner: &'a str, key: &'a str, fingerprint: &'a str, input: &'a Value) -> NewJob<'a> {
    NewJob {
        owner,
        idempotency_key: key,
        fingerprint,
        task: "invoice-extraction",
        provider: "primary",
        input,
        attempt_timeout: TIMEOUT,
    }
}

async fn create(ledger: &Ledger, owner: &str, key: &str) -> conform_serve::ledger::Job {
    let input = json!({"messages": []});
    match ledger
        .create_job(&new_job(owner, key, "sha256:a", &input))
        .await
        .unwrap()
    {
        Created::New(job) => job,
        other => panic!("expected a new job, got {other:?}"),
    }
}

/// 256 concurrent creations with one key: one job row, one `New`, 255 `Replayed` with
/// the same id.
async fn one_key_256_creations_make_one_job(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let input = Arc::new(json!({"messages": [{"role": "user", "content": "hi"}]}));
    let tasks: Vec<_> = (0..256)
        .map(|_| {
            let (ledger, owner, input) = (ledger.clone(), owner.clone(), input.clone());
            tokio::spawn(async move {
                ledger
                    .create_job(&new_job(&owner, "double-click", "sha256:same", &input))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut new = Vec::new();
    let mut replayed = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Created::New(job) => new.push(job.id),
            Created::Replayed(job) => replayed.push(job.id),
            Created::KeyReused { .. } => panic!("same fingerprint answered as reused"),
        }
    }
    assert_eq!(new.len(), 1);
    assert_eq!(replayed.len(), 255);
    assert!(replayed.iter().all(|id| *id == new[0]));
    assert_eq!(db.jobs_of(&owner).await, 1);
    assert_eq!(db.attempts_of(&new[0]).await, 1);
    ledger.close().await;
    db.cleanup().await;
}

/// Creations of many keys in flight together (SQLite commits them as one batch), some
/// keys taken before and some raced for now, with two payloads per key: every caller
/// gets its own answer, naming the one job that holds its key.
async fn creations_in_flight_together_each_get_their_own_answer(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let input = json!({"messages": []});
    let mut earlier = std::collections::HashMap::new();
    for k in 0..8 {
        let key = format!("key-{k}");
        earlier.insert(key.clone(), create(&ledger, &owner, &key).await.id);
    }
    // key-0 … key-15, each asked for three times with "sha256:a" and once with "sha256:b".
    let tasks: Vec<_> = (0..16)
        .flat_map(|k| ["sha256:a", "sha256:a", "sha256:b", "sha256:a"].map(move |f| (k, f)))
        .map(|(k, fingerprint)| {
            let (ledger, owner, input) = (ledger.clone(), owner.clone(), input.clone());
            tokio::spawn(async move {
                let key = format!("key-{k}");
                let created = ledger
                    .create_job(&new_job(&owner, &key, fingerprint, &input))
                    .await
                    .unwrap();
                (key, fingerprint, created)
            })
        })
        .collect();
    let mut holders: std::collections::HashMap<String, Vec<(String, &str, &str)>> =
        std::collections::HashMap::new();
    for task in tasks {
        let (key, asked, created) = task.await.unwrap();
        let (id, answer, held) = match created {
            Created::New(job) => (job.id, "new", job.fingerprint),
            Created::Replayed(job) => (job.id, "replayed", job.fingerprint),
            Created::KeyReused { job_id } => (job_id, "reused", String::new()),
        };
        if answer == "replayed" {
            assert_eq!(held, asked, "{key}: replayed a job of another payload");
        }
        let entry = holders.entry(key).or_default();
        entry.push((id, answer, asked));
    }
    for (key, answers) in &holders {
        let id = &answers[0].0;
        assert!(
            answers.iter().all(|(other, ..)| other == id),
            "{key}: {answers:?}"
        );
        let new = answers.iter().filter(|(_, a, _)| *a == "new").count();
        match earlier.get(key) {
            Some(first) => {
                assert_eq!(id, first, "{key}");
                assert_eq!(new, 0, "{key}: created twice");
                for (_, answer, asked) in answers {
                    let expected = if *asked == "sha256:a" {
                        "replayed"
                    } else {
                        "reused"
                    };
                    assert_eq!(answer, &expected, "{key}: {answers:?}");
                }
            }
            None => assert_eq!(new, 1, "{key}: {answers:?}"),
        }
        assert_eq!(db.attempts_of(id).await, 1, "{key}");
    }
    assert_eq!(holders.len(), 16);
    assert_eq!(db.jobs_of(&owner).await, 16);
    ledger.close().await;
    db.cleanup().await;
}

/// Same key, another fingerprint: reused, nothing changes; another owner may use the key.
async fn a_key_is_bound_to_its_fingerprint_and_owner(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let input = json!({"x": 1});
    let job = create(&ledger, &owner, "k").await;
    let other = json!({"x": 2});
    let reused = ledger
        .create_job(&new_job(&owner, "k", "sha256:b", &other))
        .await
        .unwrap();
    assert_eq!(
        reused,
        Created::KeyReused {
            job_id: job.id.clone()
        }
    );
    let again = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(again.input, json!({"messages": []}));
    assert_eq!(again.version, 1);
    assert_eq!(again.attempts.len(), 1);
    let stranger = format!("stranger-{}", unique());
    assert!(matches!(
        ledger
            .create_job(&new_job(&stranger, "k", "sha256:a", &input))
            .await
            .unwrap(),
        Created::New(_)
    ));
    // Existence does not leak across owners.
    assert_eq!(ledger.job(&stranger, &job.id).await.unwrap(), None);
    assert_eq!(
        ledger.cancel_job(&stranger, &job.id).await.unwrap(),
        JobCancel::NotFound
    );
    assert_eq!(
        ledger
            .cancel_attempt(&stranger, &job.attempts[0].id)
            .await
            .unwrap(),
        AttemptCancel::NotFound
    );
    ledger.close().await;
    db.cleanup().await;
}

/// 16 concurrent attempt starts on an idle job: exactly one starts.
async fn sixteen_starts_on_an_idle_job_start_one(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let job = create(&ledger, &owner, "k").await;
    ledger
        .record_failure(&job.attempts[0].id, "http_400")
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (ledger, owner, id) = (ledger.clone(), owner.clone(), job.id.clone());
            let provider = if i % 2 == 0 { "primary" } else { "fallback" };
            tokio::spawn(async move {
                ledger
                    .start_attempt(&owner, &id, provider, TIMEOUT)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut started = Vec::new();
    let mut blocked = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Started::Started { attempt, .. } => started.push(attempt.id),
            Started::InProgress { attempt_id } => blocked.push(attempt_id),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(started.len(), 1);
    assert_eq!(blocked.len(), 15);
    assert!(
        blocked.iter().all(|id| *id == started[0]),
        "409s name the open attempt"
    );
    assert_eq!(db.attempts_of(&job.id).await, 2);
    ledger.close().await;
    db.cleanup().await;
}

/// 16 attempts in flight together (each earlier one released by a cancel), 16
/// concurrent results: one winner, 15 superseded, the result never overwritten, the
/// version incremented exactly once, 15 races logged.
async fn sixteen_finishers_one_winner(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let job = create(&ledger, &owner, "k").await;
    let mut attempts = vec![job.attempts[0].id.clone()];
    for _ in 1..16 {
        let open = attempts.last().unwrap().clone();
        assert!(matches!(
            ledger.cancel_attempt(&owner, &open).await.unwrap(),
            AttemptCancel::Cancelled { .. }
        ));
        match ledger
            .start_attempt(&owner, &job.id, "primary", TIMEOUT)
            .await
            .unwrap()
        {
            Started::Started { attempt, .. } => attempts.push(attempt.id),
            other => panic!("unexpected {other:?}"),
        }
    }
    let tasks: Vec<_> = attempts
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (ledger, id) = (ledger.clone(), id.clone());
            tokio::spawn(async move {
                let finished = ledger.record_result(&id, &json!({"by": i})).await.unwrap();
                (id, i, finished)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = 0;
    for task in tasks {
        match task.await.unwrap() {
            (id, i, Finished::Won { version, .. }) => {
                assert_eq!(version, 2);
                winners.push((id, i));
            }
            (_, _, Finished::Lost { reason, winner, .. }) => {
                assert_eq!(reason, LossReason::Completed);
                assert!(winner.is_some());
                losers += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1);
    assert_eq!(losers, 15);
    let (winner, i) = &winners[0];
    let done = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(done.version, 2, "incremented exactly once");
    assert_eq!(done.completed_by.as_deref(), Some(winner.as_str()));
    assert_eq!(done.result, Some(json!({"by": i})));
    assert_eq!(done.state(), JobState::Succeeded);
    let states: Vec<_> = done.attempts.iter().map(|a| a.state).collect();
    assert_eq!(
        states
            .iter()
            .filter(|s| **s == AttemptState::Succeeded)
            .count(),
        1
    );
    assert_eq!(
        states
            .iter()
            .filter(|s| **s == AttemptState::Superseded)
            .count(),
        15
    );
    let races = ledger.races(&job.id).await.unwrap();
    assert_eq!(races.len(), 15);
    assert!(
        races
            .iter()
            .all(|r| r.winner_attempt.as_deref() == Some(winner.as_str()))
    );
    // A result arriving again for any attempt changes nothing.
    for id in &attempts {
        assert!(matches!(
            ledger.record_result(id, &json!("late")).await.unwrap(),
            Finished::Ignored { .. }
        ));
    }
    let after = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(after.result, done.result);
    assert_eq!(after.version, 2);
    ledger.close().await;
    db.cleanup().await;
}

/// The contract's reverse-order finish: A times out into `unknown`, is released by a
/// cancel; B starts; B returns first and wins; A returns later and loses.
async fn reverse_order_finish_the_second_to_return_loses(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let job = create(&ledger, &owner, "k").await;
    let a = job.attempts[0].id.clone();
    ledger.record_unknown(&a, "timeout").await.unwrap();
    assert_eq!(
        ledger.job(&owner, &job.id).await.unwrap().unwrap().state(),
        JobState::Unknown
    );
    // `unknown` blocks.
    assert_eq!(
        ledger
            .start_attempt(&owner, &job.id, "fallback", TIMEOUT)
            .await
            .unwrap(),
        Started::InProgress {
            attempt_id: a.clone()
        }
    );
    ledger.cancel_attempt(&owner, &a).await.unwrap();
    let Started::Started { attempt: b, .. } = ledger
        .start_attempt(&owner, &job.id, "fallback", TIMEOUT)
        .await
        .unwrap()
    else {
        panic!("B should start")
    };
    assert!(matches!(
        ledger.record_result(&b.id, &json!("from B")).await.unwrap(),
        Finished::Won { .. }
    ));
    assert!(matches!(
        ledger.record_result(&a, &json!("from A")).await.unwrap(),
        Finished::Lost {
            reason: LossReason::Completed,
            ..
        }
    ));
    let done = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(done.result, Some(json!("from B")));
    assert_eq!(done.attempts[0].state, AttemptState::Superseded);
    assert_eq!(done.attempts[1].state, AttemptState::Succeeded);
    let races = ledger.races(&job.id).await.unwrap();
    assert_eq!(races.len(), 1);
    assert_eq!(races[0].loser_attempt, a);
    assert_eq!(races[0].winner_attempt.as_deref(), Some(b.id.as_str()));
    ledger.close().await;
    db.cleanup().await;
}

/// A job cancel releases the open attempt and discards every later result.
async fn a_cancelled_job_discards_late_results(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let job = create(&ledger, &owner, "k").await;
    let a = job.attempts[0].id.clone();
    let JobCancel::Cancelled {
        job: cancelled,
        released,
    } = ledger.cancel_job(&owner, &job.id).await.unwrap()
    else {
        panic!("should cancel")
    };
    assert_eq!(released, vec![(a.clone(), AttemptState::Starting)]);
    assert_eq!(cancelled.version, 2);
    assert_eq!(cancelled.state(), JobState::Cancelled);
    assert!(matches!(
        ledger.cancel_job(&owner, &job.id).await.unwrap(),
        JobCancel::AlreadyCancelled(j) if j.version == 2
    ));
    assert_eq!(
        ledger
            .start_attempt(&owner, &job.id, "primary", TIMEOUT)
            .await
            .unwrap(),
        Started::JobCancelled
    );
    assert!(matches!(
        ledger.record_result(&a, &json!("late")).await.unwrap(),
        Finished::Lost {
            reason: LossReason::JobCancelled,
            winner: None,
            ..
        }
    ));
    let after = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(after.result, None);
    assert_eq!(after.version, 2);
    assert_eq!(after.attempts[0].state, AttemptState::Superseded);
    ledger.close().await;
    db.cleanup().await;
}

/// Only an event ends `unknown`: a definite failure that arrives late makes it `failed`,
/// a second "unknown" changes nothing, and nothing turns a cancelled attempt `failed`.
async fn unknown_ends_only_on_an_event(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let job = create(&ledger, &owner, "k").await;
    let a = job.attempts[0].id.clone();
    ledger.record_unknown(&a, "http_502").await.unwrap();
    assert_eq!(ledger.expire_overdue().await.unwrap(), 0);
    ledger.record_unknown(&a, "timeout").await.unwrap();
    let still = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(still.attempts[0].state, AttemptState::Unknown);
    assert_eq!(still.attempts[0].error.as_deref(), Some("http_502"));
    ledger.record_failure(&a, "http_503").await.unwrap();
    let failed = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(failed.attempts[0].state, AttemptState::Failed);
    assert_eq!(failed.state(), JobState::Failed);
    assert!(matches!(
        ledger.cancel_attempt(&owner, &a).await.unwrap(),
        AttemptCancel::Terminal(_)
    ));
    let Started::Started { attempt: b, .. } = ledger
        .start_attempt(&owner, &job.id, "primary", TIMEOUT)
        .await
        .unwrap()
    else {
        panic!("a failed attempt does not block")
    };
    ledger.cancel_attempt(&owner, &b.id).await.unwrap();
    ledger.record_failure(&b.id, "http_400").await.unwrap();
    let pending = ledger.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(pending.attempts[1].state, AttemptState::Cancelled);
    assert_eq!(pending.state(), JobState::Pending);
    ledger.close().await;
    db.cleanup().await;
}

/// A `starting` attempt left behind by a dead process (a deadline in the past, nobody
/// driving it) becomes `unknown` with error `timeout` when a new ledger sweeps, and keeps
/// blocking.
async fn overdue_attempts_become_unknown_and_keep_blocking(db: TestDb) {
    let ledger = db.ledger().await;
    let owner = format!("owner-{}", unique());
    let input = json!({});
    let new = NewJob {
        attempt_timeout: Duration::ZERO,
        ..new_job(&owner, "k", "sha256:a", &input)
    };
    let Created::New(job) = ledger.create_job(&new).await.unwrap() else {
        panic!("new")
    };
    ledger.close().await;
    let restarted = db.ledger().await;
    assert!(restarted.expire_overdue().await.unwrap() >= 1);
    let after = restarted.job(&owner, &job.id).await.unwrap().unwrap();
    assert_eq!(after.attempts[0].state, AttemptState::Unknown);
    assert_eq!(after.attempts[0].error.as_deref(), Some("timeout"));
    assert_eq!(
        restarted
            .start_attempt(&owner, &job.id, "primary", TIMEOUT)
            .await
            .unwrap(),
        Started::InProgress {
            attempt_id: job.attempts[0].id.clone()
        }
    );
    restarted.close().await;
    db.cleanup().await;
}

/// Several processes opening one database together: the migrations apply once.
async fn concurrent_opens_migrate_once(db: TestDb) {
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move {
                Ledger::connect(&url, &Default::default())
                    .await
                    .map(|l| l.backend())
            })
        })
        .collect();
    for open in opens {
        open.await.unwrap().unwrap();
    }
    // Each shipped migration once: jobs, attempts and races; what serve read in the
    // allowlist.
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM conform_migrations WHERE name <> $1",
            ""
        )
        .await,
        2
    );
    db.cleanup().await;
}

/// What `conform serve` read in the allowlist only moves forward: statements remembered
/// out of order by several processes at once keep the newest, to the nanosecond, and a
/// restarted process reads it back.
async fn the_newest_allowlist_statement_only_moves_forward(db: TestDb) {
    use conform_allowlist::Stated;
    use time::macros::datetime;
    let stated = |provider: &str, at| Stated {
        suite: "ticket-triage".into(),
        provider: provider.into(),
        at,
    };
    let newest = datetime!(2026-03-01 09:12:44.123456789 UTC);
    let writers: Vec<_> = (0..8i64)
        .map(|i| {
            let url = db.url.clone();
            let at = newest - time::Duration::minutes(i);
            tokio::spawn(async move {
                let ledger = Ledger::connect(&url, &Default::default()).await.unwrap();
                ledger
                    .remember_statements(&[stated("fallback", at)])
                    .await
                    .unwrap();
                ledger.close().await;
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let ledger = db.ledger().await;
    let older = newest - time::Duration::days(1);
    ledger
        .remember_statements(&[stated("fallback", older), stated("other", older)])
        .await
        .unwrap();
    assert_eq!(
        ledger
            .newest_statement("ticket-triage", "fallback")
            .await
            .unwrap(),
        Some(newest)
    );
    assert_eq!(
        ledger
            .newest_statement("ticket-triage", "other")
            .await
            .unwrap(),
        Some(older)
    );
    assert_eq!(
        ledger
            .newest_statement("ticket-triage", "none")
            .await
            .unwrap(),
        None
    );
    ledger.close().await;
    let restarted = db.ledger().await;
    assert_eq!(
        restarted
            .newest_statement("ticket-triage", "fallback")
            .await
            .unwrap(),
        Some(newest)
    );
    restarted.close().await;
    db.cleanup().await;
}

on_both_backends!(
    one_key_256_creations_make_one_job,
    creations_in_flight_together_each_get_their_own_answer,
    a_key_is_bound_to_its_fingerprint_and_owner,
    sixteen_starts_on_an_idle_job_start_one,
    sixteen_finishers_one_winner,
    reverse_order_finish_the_second_to_return_loses,
    a_cancelled_job_discards_late_results,
    unknown_ends_only_on_an_event,
    overdue_attempts_become_unknown_and_keep_blocking,
    concurrent_opens_migrate_once,
    the_newest_allowlist_statement_only_moves_forward,
);
