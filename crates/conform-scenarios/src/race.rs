//! Finishing races: the first result to arrive wins, whichever provider sent it, and a
//! winning result is never overwritten.

use std::time::{Duration, SystemTime};

use futures::future::join_all;
use serde_json::Value;

use super::Def;
use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step, answer_content};
use super::providers::{FALLBACK, PRIMARY};

pub(crate) fn reverse_order() -> Def {
    Def {
        name: "reverse-order-finish",
        about: "primary slow and cancelled, fallback fast: the fallback's result wins, the \
                primary's late result is discarded and its attempt superseded, the version \
                incremented once",
        needs_restart: false,
        body: |ctx| Box::pin(reverse_order_body(ctx)),
    }
}

pub(crate) fn forward_order() -> Def {
    Def {
        name: "forward-order-finish",
        about: "primary cancelled but quick, fallback slow: the first result to arrive (the \
                cancelled primary's) wins, the fallback's is discarded and its attempt superseded",
        needs_restart: false,
        body: |ctx| Box::pin(forward_order_body(ctx)),
    }
}

async fn reverse_order_body(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    finish_in_order(ctx, t.late(), Duration::from_millis(100), FALLBACK).await
}

async fn forward_order_body(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    finish_in_order(
        ctx,
        t.attempt_timeout * 6 / 10,
        t.attempt_timeout + t.late_window / 2,
        PRIMARY,
    )
    .await
}

/// Primary answers after `primary`, is cancelled as soon as its request arrives, and
/// the failover to fallback answers after `fallback`: `winner` must win.
async fn finish_in_order(
    ctx: &Ctx,
    primary: Duration,
    fallback: Duration,
    winner: &str,
) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::after(primary, Reply::answer(PRIMARY, 1))],
    );
    ctx.script(
        &intent,
        FALLBACK,
        vec![Step::after(fallback, Reply::answer(FALLBACK, 1))],
    );
    ctx.expect(&intent, PRIMARY, 1);
    ctx.expect(&intent, FALLBACK, 1);
    ctx.note(format!(
        "primary answers {} ms after its request, fallback {} ms after its own",
        primary.as_millis(),
        fallback.as_millis()
    ));
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "the job starts on primary (201)")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let v0 = job::version(&created.answer).unwrap_or_default();
    let first = job::attempt_id(&created.answer, 0)
        .unwrap_or_default()
        .to_string();
    ctx.arrivals(&intent, PRIMARY, 1).await?;
    let cancel = ctx.send(job::cancel_attempt(&intent.owner, &first)).await;
    ctx.status(
        &cancel,
        &[200],
        "the primary attempt is cancelled while in flight (200)",
    )?;
    let failover = ctx.send(job::attempt(&intent.owner, &id, FALLBACK)).await;
    ctx.status(&failover, &[202], "the failover to fallback starts (202)")?;
    let second = job::id(&failover.answer).unwrap_or_default().to_string();
    let (winning, losing) = if winner == PRIMARY {
        (&first, &second)
    } else {
        (&second, &first)
    };
    let loser = if winner == PRIMARY { FALLBACK } else { PRIMARY };
    let want: Value = serde_json::from_str(&answer_content(winner, 1)).unwrap_or(Value::Null);
    let won = ctx
        .poll(
            &intent.owner,
            &id,
            &format!("the job succeeds ({winner} answers first)"),
            primary.max(fallback) + t.slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    ctx.check_eq(
        (job::completed_by(&won), won.get("result")),
        (Some(winning.as_str()), Some(&want)),
        format!("the first result to arrive ({winner}'s) won the slot"),
    )?;
    ctx.check_eq(
        job::version(&won),
        Some(v0 + 1),
        "the version was incremented once",
    )?;
    let after = ctx
        .poll(
            &intent.owner,
            &id,
            &format!("{loser}'s later result is discarded and its attempt superseded"),
            primary.max(fallback) + t.slack(),
            |j| job::attempt_by_id(j, losing).and_then(job::state) == Some("superseded"),
        )
        .await?;
    ctx.check_eq(
        (
            job::state(&after),
            job::completed_by(&after),
            after.get("result"),
            job::version(&after),
        ),
        (
            Some("succeeded"),
            Some(winning.as_str()),
            Some(&want),
            Some(v0 + 1),
        ),
        format!("{loser}'s late result changed nothing: same winner, result and version"),
    )?;
    ctx.check_eq(
        job::attempt_by_id(&after, winning).and_then(job::state),
        Some("succeeded"),
        format!("{winner}'s attempt succeeded"),
    )
}

pub(crate) fn three_way() -> Def {
    Def {
        name: "three-way-race",
        about: "three attempts (primary cancelled, fallback cancelled, primary again) answering \
                at the same instant, on three jobs at once: exactly one winner per job, the other \
                two superseded, the version incremented once",
        needs_restart: false,
        body: |ctx| Box::pin(three_way_body(ctx)),
    }
}

async fn three_way_body(ctx: &Ctx) -> Checked {
    join_all((0..3).map(|n| three_way_one(ctx, n)))
        .await
        .into_iter()
        .collect()
}

async fn three_way_one(ctx: &Ctx, n: usize) -> Checked {
    let t = ctx.timing();
    let intent: Intent = ctx.intent(PRIMARY);
    let at = SystemTime::now() + t.late();
    ctx.script(
        &intent,
        PRIMARY,
        vec![
            Step::at(at, Reply::answer(PRIMARY, 1)),
            Step::at(at, Reply::answer(PRIMARY, 2)),
        ],
    );
    ctx.script(
        &intent,
        FALLBACK,
        vec![Step::at(at, Reply::answer(FALLBACK, 1))],
    );
    ctx.expect(&intent, PRIMARY, 2);
    ctx.expect(&intent, FALLBACK, 1);
    let label = format!("job {n}");
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], &format!("{label}: 201"))?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let v0 = job::version(&created.answer).unwrap_or_default();
    let mut attempts = vec![(
        job::attempt_id(&created.answer, 0)
            .unwrap_or_default()
            .to_string(),
        answer_content(PRIMARY, 1),
    )];
    ctx.arrivals(&intent, PRIMARY, 1).await?;
    for (provider, arrival) in [(FALLBACK, 1), (PRIMARY, 2)] {
        let (previous, _) = attempts.last().cloned().unwrap_or_default();
        let cancel = ctx
            .send(job::cancel_attempt(&intent.owner, &previous))
            .await;
        ctx.status(
            &cancel,
            &[200],
            &format!("{label}: the open attempt is cancelled (200)"),
        )?;
        let next = ctx.send(job::attempt(&intent.owner, &id, provider)).await;
        ctx.status(
            &next,
            &[202],
            &format!("{label}: a new attempt on {provider} starts (202)"),
        )?;
        attempts.push((
            job::id(&next.answer).unwrap_or_default().to_string(),
            answer_content(provider, arrival),
        ));
        ctx.arrivals(&intent, provider, arrival).await?;
    }
    let wait = at.duration_since(SystemTime::now()).unwrap_or_default() + t.slack();
    let done = ctx
        .poll(
            &intent.owner,
            &id,
            &format!("{label}: all three results arrived"),
            wait,
            |j| {
                job::attempts(j).len() == 3
                    && job::attempts(j)
                        .iter()
                        .all(|a| matches!(job::state(a), Some("succeeded" | "superseded")))
            },
        )
        .await?;
    one_winner(ctx, &label, &done, &attempts, v0)
}

/// Of `attempts` (each id and the content its result carries), exactly one won `done`,
/// which holds its result at version `v0 + 1`.
fn one_winner(
    ctx: &Ctx,
    label: &str,
    done: &Value,
    attempts: &[(String, String)],
    v0: i64,
) -> Checked {
    let winners: Vec<&(String, String)> = attempts
        .iter()
        .filter(|(attempt, _)| {
            job::attempt_by_id(done, attempt).and_then(job::state) == Some("succeeded")
        })
        .collect();
    ctx.check_eq(
        winners.len(),
        1,
        format!("{label}: exactly one attempt succeeded, the other two superseded"),
    )?;
    let (winner, content) = winners[0];
    let want: Value = serde_json::from_str(content).unwrap_or(Value::Null);
    ctx.check_eq(
        (
            job::state(done),
            job::completed_by(done),
            done.get("result"),
            job::version(done),
        ),
        (
            Some("succeeded"),
            Some(winner.as_str()),
            Some(&want),
            Some(v0 + 1),
        ),
        format!("{label}: the job holds the winner's result, version incremented once"),
    )?;
    ctx.note(format!(
        "{label}: attempt {} of 3 won",
        attempts.iter().position(|(a, _)| a == winner).unwrap_or(0) + 1
    ));
    Ok(())
}
