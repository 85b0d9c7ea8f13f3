//! A replay has no side effect, whatever state the job is in.

use serde_json::{Value, json};

use super::Def;
use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step};
use super::providers::PRIMARY;

pub(crate) fn replay_in_every_state() -> Def {
    Def {
        name: "replay-in-every-state",
        about: "the same key and body sent again while the job is running, unknown, pending (its \
                attempt cancelled), failed, cancelled and succeeded: 200 with the job and \
                Idempotent-Replayed, and nothing starts (no attempt, no upstream request, no \
                version change); another body under the key is a 409 (or 422) in every state",
        needs_restart: false,
        body: |ctx| Box::pin(replay_body(ctx)),
    }
}

async fn replay_body(ctx: &Ctx) -> Checked {
    let (running, unknown, pending, failed, cancelled, succeeded) = futures::join!(
        in_state(ctx, State::Running),
        in_state(ctx, State::Unknown),
        in_state(ctx, State::Pending),
        in_state(ctx, State::Failed),
        in_state(ctx, State::Cancelled),
        in_state(ctx, State::Succeeded),
    );
    running
        .and(unknown)
        .and(pending)
        .and(failed)
        .and(cancelled)
        .and(succeeded)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Unknown,
    Pending,
    Failed,
    Cancelled,
    Succeeded,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Unknown => "unknown",
            State::Pending => "pending",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Succeeded => "succeeded",
        }
    }
}

/// What a replay must leave exactly as it was.
fn footprint(job: &Value) -> Value {
    let attempts: Vec<Value> = job::attempts(job)
        .iter()
        .map(|a| json!([a.get("id"), a.get("provider"), a.get("state")]))
        .collect();
    json!({"id": job.get("id"), "state": job.get("state"), "version": job.get("version"),
        "completed_by": job.get("completed_by"), "attempts": attempts})
}

/// Brings a job to `state`, then replays it twice and sends another body under its key.
async fn in_state(ctx: &Ctx, state: State) -> Checked {
    let t = ctx.timing();
    let intent = ctx.intent(PRIMARY);
    let reply = match state {
        State::Running | State::Pending | State::Cancelled => {
            Step::after(t.never(), Reply::answer(PRIMARY, 1))
        }
        // 502: no definite answer, so the attempt is unknown at once.
        State::Unknown => Step::now(Reply::Status { status: 502 }),
        State::Failed => Step::now(Reply::Status { status: 400 }),
        State::Succeeded => Step::now(Reply::answer(PRIMARY, 1)),
    };
    ctx.script(&intent, PRIMARY, vec![reply]);
    ctx.expect(&intent, PRIMARY, 1);
    let name = state.name();
    let created = ctx.create(&intent).await;
    ctx.status(
        &created,
        &[201],
        &format!("{name}: the job is created (201)"),
    )?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    ctx.arrivals(&intent, PRIMARY, 1).await?;
    match state {
        State::Pending => {
            let attempt = job::attempt_id(&created.answer, 0).unwrap_or_default();
            let cancel = ctx.send(job::cancel_attempt(&intent.owner, attempt)).await;
            ctx.status(&cancel, &[200], "pending: its attempt is cancelled (200)")?;
        }
        State::Cancelled => {
            let cancel = ctx.send(job::cancel_job(&intent.owner, &id)).await;
            ctx.status(&cancel, &[200], "cancelled: the job is cancelled (200)")?;
        }
        _ => {}
    }
    let before = ctx
        .poll(
            &intent.owner,
            &id,
            &format!("{name}: the job reads {name}"),
            t.slack(),
            |j| job::state(j) == Some(name),
        )
        .await?;
    for round in ["a replay", "a second replay"] {
        let again = ctx.create(&intent).await;
        ctx.status(&again, &[200], &format!("{name}: {round} is a 200"))?;
        ctx.check(
            again.replayed(),
            format!("{name}: {round} says Idempotent-Replayed: true"),
        )?;
        ctx.check_eq(
            footprint(&again.answer),
            footprint(&before),
            format!("{name}: {round} answers the job as it was"),
        )?;
    }
    let other = intent.with("/input/temperature", json!(0.25));
    reused(
        ctx,
        &ctx.create(&other).await,
        &format!("{name}: another body under the key"),
    )?;
    // A running job reaches its deadline soon; the provider counts at the end of the
    // scenario still see anything a replay started.
    let settle = state != State::Running;
    after(ctx, &intent, &id, &before, name, settle).await
}

/// Nothing changed: the same attempts, version and state, and no new provider request.
async fn after(
    ctx: &Ctx,
    intent: &Intent,
    id: &str,
    before: &Value,
    name: &str,
    settle: bool,
) -> Checked {
    if settle {
        // Long enough for an attempt a replay started to reach the provider.
        tokio::time::sleep(ctx.timing().settle()).await;
    }
    let read = ctx.read(&intent.owner, id).await?;
    ctx.check_eq(
        footprint(&read),
        footprint(before),
        format!("{name}: afterwards the job is as it was (attempts, version, state)"),
    )?;
    ctx.check_eq(
        ctx.count(intent, PRIMARY),
        1,
        format!("{name}: the provider still received one request"),
    )
}

fn reused(ctx: &Ctx, exchange: &super::api::Exchange, what: &str) -> Checked {
    if exchange.status == 422 {
        return ctx.status(exchange, &[422], &format!("{what}: 422"));
    }
    ctx.problem(
        exchange,
        409,
        "idempotency_key_reused",
        &format!("{what}: 409 idempotency_key_reused"),
    )
}
