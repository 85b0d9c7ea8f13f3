//! Failover is gated on the allowlist, read at decision time, failing closed.

use std::time::Instant;

use futures::future::join_all;
use serde_json::json;

use super::Def;
use super::ctx::{Checked, Ctx, Intent};
use super::gatefile::{self, OTHER_TASK, TASK};
use super::job;
use super::mock::{Reply, Step, answer_content};
use super::providers::{FALLBACK, PRIMARY, ROGUE};

pub(crate) fn failover_gate() -> Def {
    Def {
        name: "failover-gate",
        about: "failover to an allowlisted provider: 202; to one without an entry, or for a task \
                without one: 403 failover_not_allowed (no_entry) and no upstream request; a retry \
                on the job's own provider is not gated; an open attempt is refused before the gate",
        needs_restart: false,
        body: |ctx| Box::pin(failover_gate_body(ctx)),
    }
}

/// A job on primary whose first attempt failed (503), so a new attempt may start.
async fn failed_job(ctx: &Ctx, intent: &Intent, label: &str) -> Checked<String> {
    let created = ctx.create(intent).await;
    ctx.status(&created, &[201], &format!("{label}: 201"))?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    ctx.poll(
        &intent.owner,
        &id,
        &format!("{label}: the first attempt failed"),
        ctx.timing().slack(),
        |j| job::state(j) == Some("failed"),
    )
    .await?;
    Ok(id)
}

fn failing_primary(ctx: &Ctx, task: &str) -> Intent {
    let mut intent = ctx.intent(PRIMARY);
    intent.body["task"] = json!(task);
    ctx.script(
        &intent,
        PRIMARY,
        vec![
            Step::now(Reply::Status { status: 503 }),
            Step::now(Reply::answer(PRIMARY, 2)),
        ],
    );
    ctx.expect(&intent, PRIMARY, 1);
    intent
}

async fn failover_gate_body(ctx: &Ctx) -> Checked {
    failover_allowed(ctx).await?;
    failover_denied(ctx).await?;
    open_attempt_refused_first(ctx).await
}

/// Allowed: failover to fallback for the task.
async fn failover_allowed(ctx: &Ctx) -> Checked {
    let allowed = failing_primary(ctx, TASK);
    ctx.expect(&allowed, FALLBACK, 1);
    let id = failed_job(ctx, &allowed, "a job for the allowlisted task").await?;
    let failover = ctx.send(job::attempt(&allowed.owner, &id, FALLBACK)).await;
    ctx.status(
        &failover,
        &[202],
        "failover to the allowlisted fallback: 202",
    )?;
    ctx.check_eq(
        failover.text("provider"),
        Some(FALLBACK),
        "the new attempt is on fallback",
    )?;
    let done = ctx
        .poll(
            &allowed.owner,
            &id,
            "the fallback's result completes the job",
            ctx.timing().slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    let want: serde_json::Value =
        serde_json::from_str(&answer_content(FALLBACK, 1)).unwrap_or_default();
    ctx.check_eq(
        done.get("result"),
        Some(&want),
        "the result is the fallback's",
    )
}

/// Denied: no entry for the provider, or for the task.
async fn failover_denied(ctx: &Ctx) -> Checked {
    for (what, task, provider) in [
        ("to rogue (no entry)", TASK, ROGUE),
        (
            "to fallback for a task without an entry",
            OTHER_TASK,
            FALLBACK,
        ),
    ] {
        let intent = failing_primary(ctx, task);
        let id = failed_job(ctx, &intent, &format!("failover {what}")).await?;
        let denied = ctx.send(job::attempt(&intent.owner, &id, provider)).await;
        ctx.problem(
            &denied,
            403,
            "failover_not_allowed",
            &format!("failover {what}: 403 failover_not_allowed"),
        )?;
        ctx.check_eq(
            denied.text("reason"),
            Some("no_entry"),
            format!("failover {what}: reason no_entry"),
        )?;
        let read = ctx.read(&intent.owner, &id).await?;
        ctx.check_eq(
            job::attempts(&read).len(),
            1,
            format!("failover {what}: no attempt was added"),
        )?;
        if provider == ROGUE {
            // The allowlist gates only failover: a retry on the job's own provider starts.
            ctx.expect(&intent, PRIMARY, 2);
            let retry = ctx.send(job::attempt(&intent.owner, &id, PRIMARY)).await;
            ctx.status(
                &retry,
                &[202],
                "a retry on the job's own provider is not gated: 202",
            )?;
            ctx.poll(
                &intent.owner,
                &id,
                "the retry completes the job",
                ctx.timing().slack(),
                |j| job::state(j) == Some("succeeded"),
            )
            .await?;
        }
    }
    Ok(())
}

/// An open attempt is refused before the allowlist is consulted.
async fn open_attempt_refused_first(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    ctx.script(
        &intent,
        PRIMARY,
        vec![Step::now(Reply::Status { status: 502 })],
    );
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "a job left unknown by a 502: 201")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    ctx.poll(
        &intent.owner,
        &id,
        "its attempt is unknown",
        ctx.timing().slack(),
        |j| job::state(j) == Some("unknown"),
    )
    .await?;
    let blocked = ctx.send(job::attempt(&intent.owner, &id, ROGUE)).await;
    ctx.problem(
        &blocked,
        409,
        "attempt_in_progress",
        "failover to rogue while an attempt is open: 409 attempt_in_progress, before the gate",
    )
}

pub(crate) fn fail_closed() -> Def {
    Def {
        name: "allowlist-fail-closed",
        about: "the allowlist rewritten (then a wait of more than one second) as missing, not \
                JSON, without entries, not an object, of another format, expired, with an \
                unparseable or just-passed valid_until: each a 403 with its reason and no upstream \
                request; restored, failover works again",
        needs_restart: false,
        body: |ctx| {
            Box::pin(async move {
                let result = fail_closed_body(ctx).await;
                // Whatever happened, leave the standard allowlist for the scenarios after this one.
                let restored = gatefile::write(&ctx.env().allowlist, &gatefile::standard());
                result.and(ctx.check(restored.is_ok(), "the standard allowlist is restored"))
            })
        },
    }
}

/// Makes one allowlist file's bytes when it is written (`None`: the file is removed).
type Make<'a> = Box<dyn Fn() -> Option<Vec<u8>> + Send + Sync + 'a>;

/// Each broken allowlist: what it is, how it is made, and the reason a denial gives.
fn broken_files() -> Vec<(&'static str, Make<'static>, &'static str)> {
    let entry = |valid_until: &str| gatefile::allowlist(TASK, &[(FALLBACK, valid_until)]);
    let v1 = "conform.allowlist/v1";
    // Each file is made when it is written, so that "expires during the wait" does.
    vec![
        ("missing", Box::new(move || None), "missing"),
        (
            "not JSON",
            Box::new(move || Some(format!("{{\"format\": \"{v1}\", \"entries\": [").into_bytes())),
            "unreadable",
        ),
        (
            "without an entries list",
            Box::new(move || Some(json!({"format": v1}).to_string().into_bytes())),
            "unreadable",
        ),
        (
            "not an object",
            Box::new(move || Some(json!([v1]).to_string().into_bytes())),
            "unknown_format",
        ),
        (
            "of another format",
            Box::new(move || {
                let valid = entry(&gatefile::in_seconds(86_400));
                Some(
                    String::from_utf8_lossy(&valid)
                        .replace(v1, "conform.allowlist/v2")
                        .into_bytes(),
                )
            }),
            "unknown_format",
        ),
        (
            "with an expired entry",
            Box::new(move || Some(entry(&gatefile::in_seconds(-60)))),
            "expired",
        ),
        (
            "with an unparseable valid_until",
            Box::new(move || Some(entry("next tuesday"))),
            "expired",
        ),
        (
            "with an entry that expires during the wait",
            Box::new(move || Some(entry(&gatefile::in_seconds(1)))),
            "expired",
        ),
    ]
}

async fn fail_closed_body(ctx: &Ctx) -> Checked {
    let path = ctx.env().allowlist.clone();
    let files = broken_files();
    let labels: Vec<String> = files
        .iter()
        .map(|(what, _, _)| format!("an allowlist {what}"))
        .collect();
    let jobs = join_all(labels.iter().map(|label| async move {
        let intent = failing_primary(ctx, TASK);
        let id = failed_job(ctx, &intent, label).await?;
        Ok::<_, super::Failed>((intent, id))
    }))
    .await
    .into_iter()
    .collect::<Checked<Vec<_>>>()?;
    for (file, job) in files.iter().zip(&jobs) {
        denied_with(ctx, &path, file, job).await?;
    }
    failover_after_restore(ctx, &path).await
}

/// With `file` written in place of the allowlist, `job`'s failover is a 403 naming its
/// reason.
async fn denied_with(
    ctx: &Ctx,
    path: &std::path::Path,
    (what, make, reason): &(&'static str, Make<'static>, &'static str),
    (intent, id): &(Intent, String),
) -> Checked {
    {
        let written = match make() {
            Some(bytes) => gatefile::write(path, &bytes),
            None => gatefile::remove(path),
        };
        ctx.check(
            written.is_ok(),
            format!("the allowlist is rewritten {what}"),
        )?;
        let at = Instant::now() + ctx.timing().allowlist_refresh();
        ctx.sleep_until(at).await;
        let denied = ctx.send(job::attempt(&intent.owner, id, FALLBACK)).await;
        ctx.problem(
            &denied,
            403,
            "failover_not_allowed",
            &format!("with the allowlist {what}, failover: 403 failover_not_allowed"),
        )?;
        ctx.check_eq(
            denied.text("reason"),
            Some(*reason),
            format!("with the allowlist {what}: reason {reason}"),
        )?;
    }
    Ok(())
}

/// The valid allowlist written back, failover works again.
async fn failover_after_restore(ctx: &Ctx, path: &std::path::Path) -> Checked {
    let restored = gatefile::write(path, &gatefile::standard());
    ctx.check(restored.is_ok(), "the valid allowlist is written back")?;
    ctx.sleep_until(Instant::now() + ctx.timing().allowlist_refresh())
        .await;
    let intent = failing_primary(ctx, TASK);
    ctx.expect(&intent, FALLBACK, 1);
    let id = failed_job(ctx, &intent, "after the restore").await?;
    let failover = ctx.send(job::attempt(&intent.owner, &id, FALLBACK)).await;
    ctx.status(
        &failover,
        &[202],
        "with the valid allowlist back, failover: 202",
    )?;
    ctx.poll(
        &intent.owner,
        &id,
        "the fallback completes the job",
        ctx.timing().slack(),
        |j| job::state(j) == Some("succeeded"),
    )
    .await?;
    Ok(())
}
