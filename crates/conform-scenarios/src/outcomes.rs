//! What the orchestrator sends upstream, how it classifies what comes back, and that it
//! sends exactly one request per attempt whatever comes back.

use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Def;
use super::api::Exchange;
use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step, answer_content};
use super::providers::{DEAD, FAULTY, PRIMARY};

pub(crate) fn provider_request() -> Def {
    Def {
        name: "provider-request",
        about: "the job's input goes upstream as the body of POST /v1/chat/completions, with the \
                provider's name as model when none is given; the result is the first choice's \
                content, parsed as JSON when it parses; the job resource has the contract's shape",
        needs_restart: false,
        body: |ctx| Box::pin(provider_request_body(ctx)),
    }
}

async fn provider_request_body(ctx: &Ctx) -> Checked {
    let json_answer = r#"{"invoice": "INV-2041", "total": 1250.0, "currency": "EUR"}"#;
    let plain_answer = "INV-2041 totals 1250.00 EUR.";
    let cases = [
        ("no model", None, json_answer),
        ("a null model", Some(Value::Null), plain_answer),
        ("its own model", Some(json!("custom-model-x")), json_answer),
    ];
    for (what, model, content) in cases {
        let mut intent = ctx.intent(PRIMARY);
        if let Some(model) = &model {
            intent.body["input"]["model"] = model.clone();
        }
        ctx.script(
            &intent,
            PRIMARY,
            vec![Step::after(
                Duration::from_millis(150),
                Reply::Result {
                    content: content.to_string(),
                },
            )],
        );
        ctx.expect(&intent, PRIMARY, 1);
        let created = ctx.create(&intent).await;
        ctx.status(&created, &[201], &format!("input with {what}: 201"))?;
        job_shape(ctx, &intent, &created.answer, what)?;
        ctx.arrivals(&intent, PRIMARY, 1).await?;
        upstream_request(ctx, &intent, what, model.as_ref())?;
        let done = succeeded_with(ctx, &intent, &created.answer, what, content).await?;
        finished_attempt(ctx, &done, &created.answer)?;
    }
    Ok(())
}

/// What the provider got for `intent`: POST /v1/chat/completions, the model asked (the
/// provider's name when none), the messages and temperature unchanged.
fn upstream_request(ctx: &Ctx, intent: &Intent, what: &str, model: Option<&Value>) -> Checked {
    let arrival = ctx
        .env()
        .providers
        .board()
        .arrivals(PRIMARY, &intent.tag)
        .remove(0);
    ctx.check_eq(
        (arrival.method.as_str(), arrival.path.as_str()),
        ("POST", "/v1/chat/completions"),
        format!("input with {what}: the provider got POST /v1/chat/completions"),
    )?;
    let want_model = match model {
        Some(Value::String(m)) => m.clone(),
        _ => PRIMARY.to_string(),
    };
    ctx.check_eq(
        arrival.body.get("model").and_then(Value::as_str),
        Some(want_model.as_str()),
        format!("input with {what}: the upstream model is {want_model:?}"),
    )?;
    ctx.check_eq(
        (
            arrival.body.get("messages"),
            arrival.body.get("temperature"),
        ),
        (
            intent.body["input"].get("messages"),
            intent.body["input"].get("temperature"),
        ),
        format!("input with {what}: messages and temperature passed through unchanged"),
    )
}

/// The job succeeds, its result the content (parsed when JSON); returns the job.
async fn succeeded_with(
    ctx: &Ctx,
    intent: &Intent,
    created: &Value,
    what: &str,
    content: &str,
) -> Checked<Value> {
    let id = job::id(created).unwrap_or_default();
    let done = ctx
        .poll(
            &intent.owner,
            id,
            &format!("input with {what}: the job succeeds"),
            ctx.timing().slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;
    let want_result =
        serde_json::from_str::<Value>(content).unwrap_or(Value::String(content.to_string()));
    ctx.check_eq(
        done.get("result"),
        Some(&want_result),
        format!("input with {what}: the result is the content, parsed when JSON"),
    )?;
    Ok(done)
}

/// The finished attempt completed the job, at an RFC 3339 time, incrementing the
/// version once.
fn finished_attempt(ctx: &Ctx, done: &Value, created: &Value) -> Checked {
    let winner = job::attempt_id(done, 0);
    ctx.check_eq(
        job::completed_by(done),
        winner,
        "completed_by is the winning attempt's id",
    )?;
    ctx.check_eq(
        job::attempt_state(done, 0),
        Some("succeeded"),
        "the attempt succeeded",
    )?;
    let ended = job::attempt_at(done, 0)
        .and_then(|a| a.get("ended_at"))
        .and_then(Value::as_str);
    ctx.check(
        ended.is_some_and(is_rfc3339),
        "the finished attempt has an RFC 3339 ended_at",
    )?;
    ctx.check_eq(
        job::version(done),
        job::version(created).map(|v| v + 1),
        "claiming the result incremented the version once",
    )
}

/// The 201's job has the contract's members.
fn job_shape(ctx: &Ctx, intent: &Intent, job: &Value, what: &str) -> Checked {
    let text = |m: &str| job.get(m).and_then(Value::as_str);
    let mut wrong = Vec::new();
    for (member, want) in [
        ("owner", intent.owner.as_str()),
        ("idempotency_key", intent.key.as_str()),
        ("task", intent.body["task"].as_str().unwrap_or_default()),
        ("provider", PRIMARY),
    ] {
        if text(member) != Some(want) {
            wrong.push(format!(
                "{member} is {:?}, expected {want:?}",
                job.get(member)
            ));
        }
    }
    if text("id").is_none_or(str::is_empty) {
        wrong.push("no id".into());
    }
    if job::version(job).is_none() {
        wrong.push("no integer version".into());
    }
    if !text("created_at").is_some_and(is_rfc3339) {
        wrong.push(format!(
            "created_at {:?} is not RFC 3339",
            job.get("created_at")
        ));
    }
    if !matches!(
        job::state(job),
        Some("running" | "unknown" | "succeeded" | "failed" | "pending")
    ) {
        wrong.push(format!("state {:?}", job.get("state")));
    }
    for member in ["completed_by", "result"] {
        if job.get(member).is_none() {
            wrong.push(format!("no member {member}"));
        }
    }
    let attempts = job::attempts(job);
    match attempts {
        [first] => {
            if first.get("provider").and_then(Value::as_str) != Some(PRIMARY) {
                wrong.push("the attempt is not on the job's provider".into());
            }
            if first.get("id").and_then(Value::as_str).is_none() {
                wrong.push("the attempt has no id".into());
            }
            if !first
                .get("started_at")
                .and_then(Value::as_str)
                .is_some_and(is_rfc3339)
            {
                wrong.push("the attempt's started_at is not RFC 3339".into());
            }
            for member in ["ended_at", "error", "state"] {
                if first.get(member).is_none() {
                    wrong.push(format!("the attempt has no member {member}"));
                }
            }
        }
        _ => wrong.push(format!("{} attempts, expected 1", attempts.len())),
    }
    if wrong.is_empty() {
        ctx.pass(format!(
            "input with {what}: the 201's job has the contract's members"
        ));
        Ok(())
    } else {
        Err(ctx.fail(
            format!("input with {what}: the 201's job has the contract's members"),
            Some(wrong.join("; ")),
        ))
    }
}

fn is_rfc3339(text: &str) -> bool {
    OffsetDateTime::parse(text, &Rfc3339).is_ok()
}

/// How one attempt must end, for a provider answer.
struct Expected {
    what: String,
    provider: &'static str,
    reply: Option<Reply>,
    /// `failed` or `unknown`.
    state: &'static str,
    error: String,
}

fn outcome_table() -> Vec<Expected> {
    let row = |what: &str, provider, reply: Option<Reply>, state, error: &str| Expected {
        what: what.to_string(),
        provider,
        reply,
        state,
        error: error.to_string(),
    };
    let mut rows = vec![row(
        "connection refused",
        DEAD,
        None,
        "failed",
        "connection_refused",
    )];
    for status in [400, 404, 429, 501, 503, 529] {
        rows.push(row(
            &format!("HTTP {status}"),
            PRIMARY,
            Some(Reply::Status { status }),
            "failed",
            &format!("http_{status}"),
        ));
    }
    rows.push(row(
        "a 200 without choices",
        PRIMARY,
        Some(Reply::NoChoice),
        "failed",
        "invalid_response",
    ));
    rows.push(row(
        "a reset after the request was sent",
        FAULTY,
        Some(Reply::Reset),
        "unknown",
        "connection_reset",
    ));
    rows.push(row(
        "a body cut off mid-way",
        FAULTY,
        Some(Reply::Truncated),
        "unknown",
        "truncated_body",
    ));
    for status in [500, 502, 504, 505, 307] {
        rows.push(row(
            &format!("HTTP {status}"),
            PRIMARY,
            Some(Reply::Status { status }),
            "unknown",
            &format!("http_{status}"),
        ));
    }
    rows
}

pub(crate) fn classification() -> Def {
    Def {
        name: "outcome-classification",
        about: "connection refused, 4xx (429 included), 501, 503, 529 and a 200 without a choice \
                give failed, and a new attempt may start; a reset after sending, a cut body, 500, \
                502, 504, other 5xx and 3xx give unknown, and block new attempts",
        needs_restart: false,
        body: |ctx| Box::pin(classification_body(ctx)),
    }
}

async fn classification_body(ctx: &Ctx) -> Checked {
    let rows = outcome_table();
    let results = join_all(rows.iter().map(|row| classify_one(ctx, row))).await;
    results.into_iter().collect()
}

async fn classify_one(ctx: &Ctx, row: &Expected) -> Checked {
    let what = &row.what;
    let intent = ctx.intent(row.provider);
    if let Some(reply) = &row.reply {
        // A second request (the new attempt) gets a result.
        ctx.script(
            &intent,
            row.provider,
            vec![
                Step::now(reply.clone()),
                Step::now(Reply::answer(row.provider, 2)),
            ],
        );
    }
    let retries_allowed = row.state == "failed";
    let upstream = if row.provider == DEAD {
        0
    } else if retries_allowed {
        2
    } else {
        1
    };
    ctx.expect(&intent, row.provider, upstream);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], &format!("{what}: 201"))?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let settled = ctx
        .poll(
            &intent.owner,
            &id,
            &format!("{what}: the attempt leaves starting"),
            ctx.timing().attempt_timeout + ctx.timing().slack(),
            |j| job::attempt_state(j, 0) != Some("starting"),
        )
        .await?;
    ctx.check_eq(
        (
            job::attempt_state(&settled, 0),
            job::attempt_error(&settled, 0),
        ),
        (Some(row.state), Some(row.error.as_str())),
        format!(
            "{what}: the attempt is {} with error {}",
            row.state, row.error
        ),
    )?;
    ctx.check_eq(
        job::state(&settled),
        Some(row.state),
        format!("{what}: the job is {}", row.state),
    )?;
    let first = job::attempt_id(&settled, 0).unwrap_or_default().to_string();
    let next = ctx
        .send(job::attempt(&intent.owner, &id, row.provider))
        .await;
    if retries_allowed {
        new_attempt_ends(ctx, row, &intent, &id, &next).await
    } else {
        ctx.problem(
            &next,
            409,
            "attempt_in_progress",
            &format!("{what}: a new attempt is refused 409 attempt_in_progress"),
        )?;
        ctx.check_eq(
            next.text("attempt_id"),
            Some(first.as_str()),
            format!("{what}: the 409 names the open attempt"),
        )
    }
}

/// After a failed attempt a new one starts (202) and ends, leaving the job's result.
async fn new_attempt_ends(
    ctx: &Ctx,
    row: &Expected,
    intent: &Intent,
    id: &str,
    next: &Exchange,
) -> Checked {
    let what = &row.what;
    {
        ctx.status(
            next,
            &[202],
            &format!("{what}: a new attempt may start (202)"),
        )?;
        let (state, result) = if row.provider == DEAD {
            ("failed", Value::Null)
        } else {
            (
                "succeeded",
                serde_json::from_str(&answer_content(row.provider, 2)).unwrap_or(Value::Null),
            )
        };
        let done = ctx
            .poll(
                &intent.owner,
                id,
                &format!("{what}: the new attempt ends and the job is {state}"),
                ctx.timing().attempt_timeout + ctx.timing().slack(),
                |j| {
                    job::state(j) == Some(state)
                        && job::attempts(j).len() == 2
                        && !job::is_open(job::attempt_state(j, 1))
                },
            )
            .await?;
        ctx.check_eq(
            done.get("result"),
            Some(&result),
            format!("{what}: the job's result"),
        )
    }
}

pub(crate) fn no_hidden_retries() -> Def {
    Def {
        name: "no-hidden-retries",
        about: "for every error status, a reset and a cut body: exactly one upstream request per \
                attempt, even well after a Retry-After would have allowed another",
        needs_restart: false,
        body: |ctx| Box::pin(no_hidden_retries_body(ctx)),
    }
}

async fn no_hidden_retries_body(ctx: &Ctx) -> Checked {
    let mut rows: Vec<(&'static str, Reply)> = [
        400, 401, 403, 404, 408, 409, 422, 429, 500, 501, 502, 503, 504, 529,
    ]
    .into_iter()
    .map(|status| (PRIMARY, Reply::Status { status }))
    .collect();
    rows.push((PRIMARY, Reply::NoChoice));
    rows.push((FAULTY, Reply::Reset));
    rows.push((FAULTY, Reply::Truncated));
    let settled = join_all(rows.iter().map(|(provider, reply)| async move {
        let intent = ctx.intent(provider);
        ctx.script(&intent, provider, vec![Step::now(reply.clone())]);
        ctx.expect(&intent, provider, 1);
        let created = ctx.create(&intent).await;
        ctx.status(&created, &[201], &format!("{reply:?}: 201"))?;
        let id = job::id(&created.answer).unwrap_or_default().to_string();
        ctx.poll(
            &intent.owner,
            &id,
            &format!("{provider} {reply:?}: the attempt ends or turns unknown"),
            ctx.timing().attempt_timeout + ctx.timing().slack(),
            |j| job::attempt_state(j, 0) != Some("starting"),
        )
        .await?;
        Ok::<_, super::Failed>((intent, id))
    }))
    .await
    .into_iter()
    .collect::<Checked<Vec<_>>>()?;
    // Long enough for a client honouring `Retry-After: 1`, or backing off, to try again.
    let quiet_until = Instant::now() + Duration::from_millis(1800);
    ctx.sleep_until(quiet_until).await;
    for ((provider, reply), (intent, id)) in rows.iter().zip(&settled) {
        ctx.check_eq(
            ctx.count(intent, provider),
            1,
            format!("{provider} {reply:?}: one upstream request, 1.8 s after the answer"),
        )?;
        let read = ctx.read(&intent.owner, id).await?;
        ctx.check_eq(
            job::attempts(&read).len(),
            1,
            format!("{provider} {reply:?}: no attempt started by itself"),
        )?;
    }
    Ok(())
}
