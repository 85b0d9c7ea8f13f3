//! Cancels: an external process releases an open attempt; a user abandons a job.

use serde_json::Value;

use super::Def;
use super::api::Exchange;
use super::ctx::{Checked, Ctx};
use super::job;
use super::mock::{Reply, Step, answer_content};
use super::providers::{FALLBACK, PRIMARY};

pub(crate) fn cancel_releases() -> Def {
    Def {
        name: "cancel-releases",
        about: "cancelling an unknown or starting attempt answers it cancelled and really lets a \
                new attempt start; cancelling again changes nothing; a finished attempt is a 409 \
                attempt_terminal",
        needs_restart: false,
        body: |ctx| Box::pin(cancel_releases_body(ctx)),
    }
}

async fn cancel_releases_body(ctx: &Ctx) -> Checked {
    let (unknown, starting, terminal) = futures::join!(
        release_unknown(ctx),
        release_starting(ctx),
        terminal_attempts(ctx)
    );
    unknown.and(starting).and(terminal)
}

/// The attempt answered in a cancel must be that attempt, now `cancelled`.
fn cancelled(ctx: &Ctx, exchange: &Exchange, attempt: &str, what: &str) -> Checked {
    ctx.status(exchange, &[200], &format!("{what}: 200"))?;
    ctx.check_eq(
        (job::id(&exchange.answer), job::state(&exchange.answer)),
        (Some(attempt), Some("cancelled")),
        format!("{what}: the answer is the attempt, now cancelled"),
    )
}

async fn release_unknown(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![
            Step::now(Reply::Status { status: 502 }),
            Step::now(Reply::answer(PRIMARY, 2)),
        ],
    );
    ctx.expect(&intent, PRIMARY, 2);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "a job whose provider answers 502: 201")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let unknown = ctx
        .poll(
            &intent.owner,
            &id,
            "the 502 leaves the attempt unknown",
            t.slack(),
            |j| job::attempt_state(j, 0) == Some("unknown"),
        )
        .await?;
    let first = job::attempt_id(&unknown, 0).unwrap_or_default().to_string();
    let blocked = ctx.send(job::attempt(&intent.owner, &id, PRIMARY)).await;
    ctx.problem(
        &blocked,
        409,
        "attempt_in_progress",
        "before the cancel, a retry is blocked (409)",
    )?;
    let cancel = ctx.send(job::cancel_attempt(&intent.owner, &first)).await;
    cancelled(ctx, &cancel, &first, "cancelling the unknown attempt")?;
    let read = ctx.read(&intent.owner, &id).await?;
    ctx.check_eq(
        (job::attempt_state(&read, 0), job::state(&read)),
        (Some("cancelled"), Some("pending")),
        "the attempt reads cancelled and the job pending (nothing open, no result)",
    )?;
    let again = ctx.send(job::cancel_attempt(&intent.owner, &first)).await;
    cancelled(ctx, &again, &first, "cancelling it again")?;
    let retry = ctx.send(job::attempt(&intent.owner, &id, PRIMARY)).await;
    ctx.status(
        &retry,
        &[202],
        "after the cancel a retry starts (202): the cancel released the attempt",
    )?;
    let second = job::id(&retry.answer).unwrap_or_default().to_string();
    ctx.check(
        retry.text("provider") == Some(PRIMARY) && !second.is_empty() && second != first,
        "the 202 answers the new attempt, on primary",
    )?;
    let done = ctx
        .poll(
            &intent.owner,
            &id,
            "the retry's result completes the job",
            t.slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    let want: Value = serde_json::from_str(&answer_content(PRIMARY, 2)).unwrap_or(Value::Null);
    ctx.check_eq(
        (
            job::completed_by(&done),
            done.get("result"),
            job::attempt_state(&done, 0),
        ),
        (Some(second.as_str()), Some(&want), Some("cancelled")),
        "the retry won; the cancelled attempt (which never returned a result) stays cancelled",
    )?;
    ctx.check_eq(
        job::version(&done),
        job::version(&created.answer).map(|v| v + 1),
        "the version was incremented once",
    )
}

async fn release_starting(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::after(t.never(), Reply::answer(PRIMARY, 1))],
    );
    ctx.script(
        &intent,
        FALLBACK,
        vec![Step::now(Reply::answer(FALLBACK, 1))],
    );
    ctx.expect(&intent, PRIMARY, 1);
    ctx.expect(&intent, FALLBACK, 1);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "a job whose provider hangs: 201")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let first = job::attempt_id(&created.answer, 0)
        .unwrap_or_default()
        .to_string();
    ctx.arrivals(&intent, PRIMARY, 1).await?;
    let cancel = ctx.send(job::cancel_attempt(&intent.owner, &first)).await;
    cancelled(ctx, &cancel, &first, "cancelling the starting attempt")?;
    let failover = ctx.send(job::attempt(&intent.owner, &id, FALLBACK)).await;
    ctx.status(
        &failover,
        &[202],
        "after the cancel a failover to the allowlisted fallback starts (202)",
    )?;
    let done = ctx
        .poll(
            &intent.owner,
            &id,
            "the fallback's result completes the job",
            t.slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    ctx.check_eq(
        (job::completed_by(&done), job::attempt_state(&done, 0)),
        (job::id(&failover.answer), Some("cancelled")),
        "the fallback won; the hanging attempt stays cancelled",
    )
}

async fn terminal_attempts(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    for (what, reply, state) in [
        ("a failed attempt", Reply::Status { status: 503 }, "failed"),
        (
            "a succeeded attempt",
            Reply::answer(PRIMARY, 1),
            "succeeded",
        ),
    ] {
        let intent = ctx.intent(PRIMARY);
        ctx.script(&intent, PRIMARY, vec![Step::now(reply)]);
        ctx.expect(&intent, PRIMARY, 1);
        let created = ctx.create(&intent).await;
        ctx.status(&created, &[201], &format!("{what}: 201"))?;
        let id = job::id(&created.answer).unwrap_or_default().to_string();
        let ended = ctx
            .poll(
                &intent.owner,
                &id,
                &format!("{what}: the attempt is {state}"),
                t.slack(),
                |j| job::attempt_state(j, 0) == Some(state),
            )
            .await?;
        let attempt = job::attempt_id(&ended, 0).unwrap_or_default();
        let cancel = ctx.send(job::cancel_attempt(&intent.owner, attempt)).await;
        ctx.problem(
            &cancel,
            409,
            "attempt_terminal",
            &format!("cancelling {what}: 409 attempt_terminal"),
        )?;
        let read = ctx.read(&intent.owner, &id).await?;
        ctx.check_eq(
            job::attempt_state(&read, 0),
            Some(state),
            format!("{what} is still {state}"),
        )?;
    }
    Ok(())
}

/// How long a late result may take to be written once its attempt is marked.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) fn late_after_job_cancel() -> Def {
    Def {
        name: "late-result-after-job-cancel",
        about: "a job cancelled while its provider works: the cancel increments the version and \
                cancels the attempt; the late result is discarded (attempt superseded, no result); \
                cancelling again changes nothing; no new attempt may start",
        needs_restart: false,
        body: |ctx| Box::pin(late_after_job_cancel_body(ctx)),
    }
}

async fn late_after_job_cancel_body(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::after(t.late(), Reply::answer(PRIMARY, 1))],
    );
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "a job whose result comes late: 201")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let v0 = job::version(&created.answer).unwrap_or_default();
    ctx.arrivals(&intent, PRIMARY, 1).await?;
    let cancel = ctx.send(job::cancel_job(&intent.owner, &id)).await;
    ctx.status(&cancel, &[200], "cancelling the job: 200")?;
    ctx.check_eq(
        (
            job::state(&cancel.answer),
            job::version(&cancel.answer),
            job::attempt_state(&cancel.answer, 0),
        ),
        (Some("cancelled"), Some(v0 + 1), Some("cancelled")),
        "the answer is the job, cancelled, version incremented, its open attempt cancelled",
    )?;
    let again = ctx.send(job::cancel_job(&intent.owner, &id)).await;
    ctx.status(&again, &[200], "cancelling it again: 200")?;
    ctx.check_eq(
        (job::state(&again.answer), job::version(&again.answer)),
        (Some("cancelled"), Some(v0 + 1)),
        "cancelling again changed nothing",
    )?;
    for provider in [PRIMARY, FALLBACK] {
        let next = ctx.send(job::attempt(&intent.owner, &id, provider)).await;
        ctx.problem(
            &next,
            409,
            "job_cancelled",
            &format!("a new attempt on {provider}: 409 job_cancelled"),
        )?;
    }
    ctx.poll(
        &intent.owner,
        &id,
        "the late result arrives and its attempt is superseded",
        t.late() + t.slack(),
        |j| job::attempt_state(j, 0) == Some("superseded"),
    )
    .await?;
    // The attempt is marked before the result is settled: an orchestrator that then
    // writes the late result anyway does so a moment later, so the job is read again
    // once that moment is surely past, not in the same breath as the attempt's state.
    tokio::time::sleep(SETTLE).await;
    let after = ctx.read(&intent.owner, &id).await?;
    ctx.check_eq(
        (job::state(&after), job::version(&after), job::completed_by(&after), after.get("result")),
        (Some("cancelled"), Some(v0 + 1), None, Some(&Value::Null)),
        "the late result was discarded: the job is still cancelled, with no result, version unchanged",
    )
}
