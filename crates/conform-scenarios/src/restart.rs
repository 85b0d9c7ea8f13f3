//! A crash while a provider call is in flight: nothing is retried, nothing is failed,
//! nothing is forgotten.

use std::time::Instant;

use super::Def;
use serde_json::Value;

use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step};
use super::providers::{FALLBACK, PRIMARY};

pub(crate) fn crash_restart() -> Def {
    Def {
        name: "crash-restart",
        about: "SIGKILL while a provider call is in flight, then restart: the attempt still \
                blocks (starting, then unknown with error timeout after its deadline), the key \
                still replays, a finished job keeps its result, and the provider saw one request",
        needs_restart: true,
        body: |ctx| Box::pin(crash_restart_body(ctx)),
    }
}

async fn crash_restart_body(ctx: &Ctx) -> Checked {
    let (finished, finished_id, before) = finished_before_the_crash(ctx).await?;
    let inflight = ctx.intent(PRIMARY);
    let (id, attempt, created_at) = in_flight_at_the_crash(ctx, &inflight).await?;
    ctx.restart().await?;
    ctx.note(format!(
        "restarted {:.2} s after the job was created",
        created_at.elapsed().as_secs_f64()
    ));
    still_blocks_after_the_restart(ctx, &inflight, &id, &attempt).await?;
    unknown_past_its_deadline(ctx, &inflight, &id, created_at).await?;
    let kept = ctx.read(&finished.owner, &finished_id).await?;
    ctx.check_eq(
        &kept,
        &before,
        "the job finished before the crash is unchanged, result included",
    )
}

/// A job that succeeds before the crash: its intent, id and state.
async fn finished_before_the_crash(ctx: &Ctx) -> Checked<(Intent, String, Value)> {
    let t = ctx.timing();
    let finished = ctx.intent(PRIMARY);
    ctx.expect(&finished, PRIMARY, 1);
    let created = ctx.create(&finished).await;
    ctx.status(
        &created,
        &[201],
        "a job that finishes before the crash: 201",
    )?;
    let finished_id = job::id(&created.answer).unwrap_or_default().to_string();
    let before = ctx
        .poll(
            &finished.owner,
            &finished_id,
            "it succeeds before the crash",
            t.slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    Ok((finished, finished_id, before))
}

/// A job whose provider call hangs, created and arrived: its id, its attempt's id, and
/// when it was created.
async fn in_flight_at_the_crash(
    ctx: &Ctx,
    inflight: &Intent,
) -> Checked<(String, String, Instant)> {
    let t = ctx.timing();
    ctx.script(
        inflight,
        PRIMARY,
        vec![Step::after(t.never(), Reply::answer(PRIMARY, 1))],
    );
    ctx.expect(inflight, PRIMARY, 1);
    let created_at = Instant::now();
    let created = ctx.create(inflight).await;
    ctx.status(
        &created,
        &[201],
        "a job whose provider call is in flight at the crash: 201",
    )?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let attempt = job::attempt_id(&created.answer, 0)
        .unwrap_or_default()
        .to_string();
    ctx.arrivals(inflight, PRIMARY, 1).await?;
    Ok((id, attempt, created_at))
}

/// After the restart the attempt is open and alone, and blocks a retry and a failover.
async fn still_blocks_after_the_restart(
    ctx: &Ctx,
    inflight: &Intent,
    id: &str,
    attempt: &str,
) -> Checked {
    let after = ctx.read(&inflight.owner, id).await?;
    ctx.check(
        job::is_open(job::attempt_state(&after, 0)) && job::attempts(&after).len() == 1,
        format!(
            "after the restart the attempt is still open (starting or unknown), and alone: {}",
            job::summary(&after)
        ),
    )?;
    for (kind, provider) in [("a retry", PRIMARY), ("a failover", FALLBACK)] {
        let next = ctx.send(job::attempt(&inflight.owner, id, provider)).await;
        ctx.problem(
            &next,
            409,
            "attempt_in_progress",
            &format!("after the restart {kind} gets 409 attempt_in_progress"),
        )?;
        ctx.check_eq(
            next.text("attempt_id"),
            Some(attempt),
            "the 409 names the attempt from before the crash",
        )?;
    }
    Ok(())
}

/// Past its deadline the attempt is unknown, stays so past the late window, still
/// blocks, and the key replays.
async fn unknown_past_its_deadline(
    ctx: &Ctx,
    inflight: &Intent,
    id: &str,
    created_at: Instant,
) -> Checked {
    let t = ctx.timing();
    let unknown = ctx
        .poll(
            &inflight.owner,
            id,
            "past its original deadline the attempt turns unknown",
            t.attempt_timeout + t.slack(),
            |j| job::attempt_state(j, 0) != Some("starting"),
        )
        .await?;
    ctx.check_eq(
        (
            job::attempt_state(&unknown, 0),
            job::attempt_error(&unknown, 0),
            job::state(&unknown),
        ),
        (Some("unknown"), Some("timeout"), Some("unknown")),
        "the attempt and the job are unknown (error timeout), not failed, not retried",
    )?;
    ctx.sleep_until(created_at + t.window_closed()).await;
    let later = ctx.read(&inflight.owner, id).await?;
    ctx.check_eq(
        (job::attempt_state(&later, 0), job::attempts(&later).len()),
        (Some("unknown"), 1),
        "after the late window it is still unknown and alone",
    )?;
    let blocked = ctx.send(job::attempt(&inflight.owner, id, PRIMARY)).await;
    ctx.problem(
        &blocked,
        409,
        "attempt_in_progress",
        "and still blocks a retry",
    )?;
    let replay = ctx.create(inflight).await;
    ctx.status(
        &replay,
        &[200],
        "the key survived the crash: the creation replays (200)",
    )?;
    ctx.check_eq(
        job::id(&replay.answer),
        Some(id),
        "the replay names the same job",
    )
}
