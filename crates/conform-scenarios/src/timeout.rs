//! A timeout is not a failure: the work may still be happening.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Def;
use super::ctx::{Checked, Ctx};
use super::job;
use super::mock::{Reply, Step, answer_content};
use super::providers::{FALLBACK, PRIMARY};

pub(crate) fn timeout_is_unknown() -> Def {
    Def {
        name: "timeout-is-unknown",
        about: "a provider answering after the deadline leaves the attempt and the job unknown, \
                not failed; retry and failover get 409 attempt_in_progress, still after three \
                deadlines and after the late window; a late result inside the window still wins, \
                a late failure still fails; one upstream request each",
        needs_restart: false,
        body: |ctx| Box::pin(timeout_body(ctx)),
    }
}

async fn timeout_body(ctx: &Ctx) -> Checked {
    let (blocked, late_result, late_failure) =
        futures::join!(still_blocked(ctx), late_result(ctx), late_failure(ctx));
    blocked.and(late_result).and(late_failure)
}

/// The provider never answers in time: unknown, and blocked for good.
async fn still_blocked(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::after(t.never(), Reply::answer(PRIMARY, 1))],
    );
    ctx.expect(&intent, PRIMARY, 1);
    let created_at = Instant::now();
    let created = ctx.create(&intent).await;
    ctx.status(
        &created,
        &[201],
        "a job whose provider never answers in time: 201",
    )?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    ctx.arrivals(&intent, PRIMARY, 1).await?;
    let unknown = ctx
        .poll(
            &intent.owner,
            &id,
            "after the deadline the attempt leaves starting",
            t.attempt_timeout + t.slack(),
            |j| job::attempt_state(j, 0) != Some("starting"),
        )
        .await?;
    ctx.note(format!(
        "the attempt left starting {:.2} s after creation (deadline {:.2} s)",
        created_at.elapsed().as_secs_f64(),
        t.attempt_timeout.as_secs_f64()
    ));
    let attempt = job::attempt_id(&unknown, 0).unwrap_or_default().to_string();
    let blocked = Blocked {
        ctx,
        owner: &intent.owner,
        id: &id,
        attempt: &attempt,
    };
    blocked.check("after the deadline", &unknown).await?;
    ctx.sleep_until(created_at + t.attempt_timeout * 3 + Duration::from_millis(100))
        .await;
    let later = ctx.read(&intent.owner, &id).await?;
    blocked
        .check("after three times the deadline", &later)
        .await?;
    ctx.sleep_until(created_at + t.window_closed()).await;
    let closed = ctx.read(&intent.owner, &id).await?;
    blocked.check("after the late window closed", &closed).await
}

/// A job whose only attempt timed out.
struct Blocked<'a> {
    ctx: &'a Ctx,
    owner: &'a str,
    id: &'a str,
    attempt: &'a str,
}

impl Blocked<'_> {
    /// Unknown, not failed, nothing else started, and no new attempt may start.
    async fn check(&self, label: &str, job: &Value) -> Checked {
        let ctx = self.ctx;
        ctx.check_eq(
            (
                job::attempt_state(job, 0),
                job::attempt_error(job, 0),
                job::state(job),
            ),
            (Some("unknown"), Some("timeout"), Some("unknown")),
            format!(
                "{label}: the attempt is unknown (error timeout) and so is the job, not failed"
            ),
        )?;
        ctx.check_eq(
            job::attempts(job).len(),
            1,
            format!("{label}: nothing started another attempt"),
        )?;
        for (kind, provider) in [("a retry", PRIMARY), ("a failover", FALLBACK)] {
            let next = ctx.send(job::attempt(self.owner, self.id, provider)).await;
            ctx.problem(
                &next,
                409,
                "attempt_in_progress",
                &format!("{label}: {kind} gets 409 attempt_in_progress"),
            )?;
            ctx.check_eq(
                next.text("attempt_id"),
                Some(self.attempt),
                format!("{label}: the 409 names the open attempt"),
            )?;
        }
        Ok(())
    }
}

/// The provider answers inside the late window: the result still claims the slot.
async fn late_result(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    let late = t.attempt_timeout + t.late_window / 2;
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::after(late, Reply::answer(PRIMARY, 1))],
    );
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(
        &created,
        &[201],
        "a job whose result comes inside the late window: 201",
    )?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let done = ctx
        .poll(
            &intent.owner,
            &id,
            "a late result inside the window completes the job",
            late + t.slack(),
            |j| !job::is_open(job::attempt_state(j, 0)),
        )
        .await?;
    let want: Value = serde_json::from_str(&answer_content(PRIMARY, 1)).unwrap_or(Value::Null);
    ctx.check_eq(
        (
            job::state(&done),
            job::attempt_state(&done, 0),
            done.get("result"),
        ),
        (Some("succeeded"), Some("succeeded"), Some(&want)),
        "the late result won: job and attempt succeeded, with that result",
    )
}

/// The provider fails definitely inside the late window: the attempt ends failed.
async fn late_failure(ctx: &Ctx) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    let late = t.attempt_timeout + t.late_window / 2;
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::after(late, Reply::Status { status: 503 })],
    );
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(
        &created,
        &[201],
        "a job whose provider fails inside the late window: 201",
    )?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let done = ctx
        .poll(
            &intent.owner,
            &id,
            "a late definite failure inside the window ends the attempt",
            late + t.slack(),
            |j| !job::is_open(job::attempt_state(j, 0)),
        )
        .await?;
    ctx.check_eq(
        (
            job::state(&done),
            job::attempt_state(&done, 0),
            job::attempt_error(&done, 0),
        ),
        (Some("failed"), Some("failed"), Some("http_503")),
        "the late 503 ended the attempt failed (error http_503)",
    )
}
