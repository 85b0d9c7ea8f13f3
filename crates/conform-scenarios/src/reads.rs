//! Reading changes nothing, and a result once won never changes.

use futures::StreamExt;
use serde_json::Value;

use super::Def;
use super::ctx::{Checked, Ctx};
use super::job;
use super::mock::{Reply, Step, answer_content};
use super::providers::{FALLBACK, PRIMARY, ROGUE};

/// How many times the unknown job is read.
const READS: usize = 1000;

pub(crate) fn read_only_polling() -> Def {
    Def {
        name: "read-only-polling",
        about: "1,000 reads of an unknown job all answer the same job and start nothing: no \
                attempt, no upstream request, still blocked",
        needs_restart: false,
        body: |ctx| Box::pin(read_only_polling_body(ctx)),
    }
}

async fn read_only_polling_body(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::now(Reply::Status { status: 504 })],
    );
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "a job whose provider answers 504: 201")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let snapshot = ctx
        .poll(
            &intent.owner,
            &id,
            "the attempt is unknown",
            ctx.timing().slack(),
            |j| job::state(j) == Some("unknown"),
        )
        .await?;
    let call = job::get(&intent.owner, &id);
    let api = &ctx.env().api;
    let reads: Vec<_> = futures::stream::iter(0..READS)
        .map(|_| api.send(&call))
        .buffer_unordered(16)
        .collect()
        .await;
    let differing: Vec<_> = reads
        .iter()
        .filter(|r| r.status != 200 || r.answer != snapshot)
        .collect();
    ctx.note(format!(
        "{READS} reads, {} differing from the first",
        differing.len()
    ));
    if let Some(first) = differing.first() {
        ctx.keep(first);
    }
    ctx.check_eq(
        differing.len(),
        0,
        format!("all {READS} reads answer 200 with the same job"),
    )?;
    tokio::time::sleep(ctx.timing().settle()).await;
    ctx.check_eq(
        ctx.count(&intent, PRIMARY),
        1,
        format!("after {READS} reads the provider still saw one request"),
    )?;
    let after = ctx.read(&intent.owner, &id).await?;
    ctx.check_eq(&after, &snapshot, "the job is unchanged after the reads")?;
    let next = ctx.send(job::attempt(&intent.owner, &id, PRIMARY)).await;
    ctx.problem(
        &next,
        409,
        "attempt_in_progress",
        "and a retry is still blocked (409)",
    )
}

pub(crate) fn immutable_result() -> Def {
    Def {
        name: "immutable-result",
        about: "a completed job keeps its result: replays return it, retry, failover and cancel \
                are 409 job_completed, cancelling the winner is 409 attempt_terminal, 100 reads \
                see the same job",
        needs_restart: false,
        body: |ctx| Box::pin(immutable_result_body(ctx)),
    }
}

async fn immutable_result_body(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "the job starts (201)")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let done = ctx
        .poll(
            &intent.owner,
            &id,
            "the job succeeds",
            ctx.timing().slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    let want: Value = serde_json::from_str(&answer_content(PRIMARY, 1)).unwrap_or(Value::Null);
    ctx.check_eq(
        done.get("result"),
        Some(&want),
        "the result is the provider's",
    )?;
    let winner = job::completed_by(&done).unwrap_or_default().to_string();

    let replay = ctx.create(&intent).await;
    ctx.status(&replay, &[200], "a replay of the creation: 200")?;
    ctx.check_eq(
        &replay.answer,
        &done,
        "the replay answers the completed job, result included",
    )?;
    for (what, provider) in [
        ("a retry", PRIMARY),
        ("a failover to fallback", FALLBACK),
        ("a failover to rogue", ROGUE),
    ] {
        let next = ctx.send(job::attempt(&intent.owner, &id, provider)).await;
        ctx.problem(
            &next,
            409,
            "job_completed",
            &format!("{what} on the completed job: 409 job_completed"),
        )?;
    }
    let cancel = ctx.send(job::cancel_job(&intent.owner, &id)).await;
    ctx.problem(
        &cancel,
        409,
        "job_completed",
        "cancelling the completed job: 409 job_completed",
    )?;
    let cancel = ctx.send(job::cancel_attempt(&intent.owner, &winner)).await;
    ctx.problem(
        &cancel,
        409,
        "attempt_terminal",
        "cancelling the winning attempt: 409 attempt_terminal",
    )?;
    for n in 0..100 {
        let read = ctx.env().api.send(&job::get(&intent.owner, &id)).await;
        if read.answer != done {
            ctx.keep(&read);
            return ctx.check(
                false,
                format!("read #{n} answers the same job, result and version"),
            );
        }
    }
    ctx.pass("100 reads answer the same job, result and version");
    Ok(())
}
