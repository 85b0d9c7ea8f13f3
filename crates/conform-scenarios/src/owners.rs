//! Owner scoping: a key belongs to its owner, and another owner's job does not exist.

use serde_json::Value;

use super::Def;
use super::api::Call;
use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step};
use super::providers::{FALLBACK, PRIMARY};

pub(crate) fn owner_scoping() -> Def {
    Def {
        name: "owner-scoping",
        about: "one key under two owners makes two jobs; another owner's job and attempts \
                are a 404; a missing or empty owner is a 401",
        needs_restart: false,
        body: |ctx| Box::pin(owner_scoping_body(ctx)),
    }
}

async fn owner_scoping_body(ctx: &Ctx) -> Checked {
    let alice = ctx.intent(PRIMARY);
    let bob = Intent {
        owner: ctx.fresh("owner"),
        ..alice.clone()
    };
    let (a_id, settled) = two_owners_one_key(ctx, &alice, &bob).await?;
    let attempt_a = job::attempt_id(&settled, 0).unwrap_or_default().to_string();
    let a = (a_id.as_str(), attempt_a.as_str());
    foreign_calls_find_nothing(ctx, (&alice, &bob), a, &settled).await?;
    unowned_calls_are_refused(ctx, &alice, &a_id, &attempt_a).await
}

/// Two owners create with one key: two jobs, each naming its owner. Returns job A's id
/// and its settled state.
async fn two_owners_one_key(ctx: &Ctx, alice: &Intent, bob: &Intent) -> Checked<(String, Value)> {
    // Both jobs carry the same tag: the provider must see one request per job.
    ctx.script(
        alice,
        PRIMARY,
        vec![Step::now(Reply::Status { status: 502 })],
    );
    ctx.expect(alice, PRIMARY, 2);

    let a = ctx.create(alice).await;
    ctx.status(&a, &[201], "owner A creates a job with key K (201)")?;
    let b = ctx.create(bob).await;
    ctx.status(
        &b,
        &[201],
        "owner B creates its own job with the same key K (201)",
    )?;
    let (a_id, b_id) = (
        job::id(&a.answer).unwrap_or_default().to_string(),
        job::id(&b.answer).unwrap_or_default().to_string(),
    );
    ctx.check(a_id != b_id, "the two owners' jobs have different ids")?;
    ctx.check_eq(
        a.text("owner"),
        Some(alice.owner.as_str()),
        "job A names owner A",
    )?;
    ctx.check_eq(
        b.text("owner"),
        Some(bob.owner.as_str()),
        "job B names owner B",
    )?;
    ctx.arrivals(alice, PRIMARY, 2).await?;
    let settled = ctx
        .poll(
            &alice.owner,
            &a_id,
            "job A's attempt is unknown after a 502",
            ctx.timing().slack(),
            |j| job::attempt_state(j, 0) == Some("unknown"),
        )
        .await?;
    Ok((a_id, settled))
}

/// Another owner's job, and ids that do not exist, are a 404 for every call, and job A
/// is untouched by them.
async fn foreign_calls_find_nothing(
    ctx: &Ctx,
    (alice, bob): (&Intent, &Intent),
    (a_id, attempt_a): (&str, &str),
    settled: &Value,
) -> Checked {
    let (a_id, attempt_a) = (a_id.to_string(), attempt_a.to_string());
    let foreign = [
        ("B reads A's job", job::get(&bob.owner, &a_id)),
        (
            "B starts an attempt on A's job",
            job::attempt(&bob.owner, &a_id, FALLBACK),
        ),
        (
            "B cancels A's attempt",
            job::cancel_attempt(&bob.owner, &attempt_a),
        ),
        ("B cancels A's job", job::cancel_job(&bob.owner, &a_id)),
        (
            "A reads a job id that does not exist",
            job::get(&alice.owner, &format!("{a_id}-nope")),
        ),
        (
            "A cancels an attempt id that does not exist",
            job::cancel_attempt(&alice.owner, &format!("{attempt_a}-nope")),
        ),
    ];
    for (what, call) in foreign {
        let exchange = ctx.send(call).await;
        ctx.problem(
            &exchange,
            404,
            "not_found",
            &format!("{what}: 404 not_found"),
        )?;
    }
    let after = ctx.read(&alice.owner, &a_id).await?;
    ctx.check_eq(
        (
            job::state(&after),
            job::attempt_state(&after, 0),
            job::attempts(&after).len(),
            job::version(&after),
        ),
        (Some("unknown"), Some("unknown"), 1, job::version(settled)),
        "job A is untouched by B's calls",
    )
}

/// A call without an owner, or with an empty one, is a 401, and job A is untouched.
async fn unowned_calls_are_refused(
    ctx: &Ctx,
    alice: &Intent,
    a_id: &str,
    attempt_a: &str,
) -> Checked {
    let anonymous = |call: Call| Call {
        owner: None,
        ..call
    };
    let empty = |call: Call| Call {
        owner: Some(String::new()),
        ..call
    };
    let unowned = [
        ("a creation without X-Owner-Id", anonymous(alice.create())),
        ("a creation with an empty X-Owner-Id", empty(alice.create())),
        ("a read without X-Owner-Id", anonymous(job::get("", a_id))),
        ("a read with an empty X-Owner-Id", empty(job::get("", a_id))),
        (
            "an attempt without X-Owner-Id",
            anonymous(job::attempt("", a_id, PRIMARY)),
        ),
        (
            "an attempt cancel without X-Owner-Id",
            anonymous(job::cancel_attempt("", attempt_a)),
        ),
        (
            "a job cancel without X-Owner-Id",
            anonymous(job::cancel_job("", a_id)),
        ),
    ];
    for (what, call) in unowned {
        let exchange = ctx.send(call).await;
        ctx.problem(
            &exchange,
            401,
            "owner_required",
            &format!("{what}: 401 owner_required"),
        )?;
    }
    let after = ctx.read(&alice.owner, a_id).await?;
    ctx.check_eq(
        (job::state(&after), job::attempts(&after).len()),
        (Some("unknown"), 1),
        "job A is untouched by the anonymous calls",
    )
}
