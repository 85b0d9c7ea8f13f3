//! One job per (owner, key), bound to the exact intent: double clicks, replays in other
//! spellings, and mismatched payloads, sequential and concurrent.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::Def;
use super::api::{Call, Exchange};
use super::ctx::{Checked, Ctx, Intent};
use super::gatefile::OTHER_TASK;
use super::job;
use super::providers::{FALLBACK, PRIMARY};

pub(crate) fn double_click() -> Def {
    Def {
        name: "double-click",
        about: "2 and then 32 concurrent creations with one key, released together and repeated: \
                one job, one 201, the rest 200 with Idempotent-Replayed, one upstream request",
        needs_restart: false,
        body: |ctx| Box::pin(double_click_body(ctx)),
    }
}

async fn double_click_body(ctx: &Ctx) -> Checked {
    for (n, rounds) in [(2usize, 6usize), (32, 3)] {
        for round in 1..=rounds {
            let intent = ctx.intent(PRIMARY);
            ctx.expect(&intent, PRIMARY, 1);
            let answers = ctx.send_all(vec![intent.create(); n]).await;
            let label = format!("{n} concurrent creations (round {round})");
            let created = one_creation(ctx, &answers, &label)?;
            let id = job::id(&created.answer).unwrap_or_default();
            ctx.check(
                answers
                    .iter()
                    .filter(|e| e.status == 200)
                    .all(|e| e.replayed()),
                format!("{label}: every 200 says Idempotent-Replayed: true"),
            )?;
            ctx.check(
                !created.replayed(),
                format!("{label}: the 201 does not say Idempotent-Replayed: true"),
            )?;
            ctx.arrivals(&intent, PRIMARY, 1).await?;
            let read = ctx.read(&intent.owner, id).await?;
            ctx.check_eq(
                job::attempts(&read).len(),
                1,
                format!("{label}: the job has one attempt"),
            )?;
        }
    }
    Ok(())
}

/// Exactly one 201, every answer a 200 or that 201, all naming one job.
fn one_creation<'a>(ctx: &Ctx, answers: &'a [Exchange], label: &str) -> Checked<&'a Exchange> {
    let histogram = statuses(answers);
    ctx.check(
        answers.iter().all(|e| e.status == 200 || e.status == 201),
        format!("{label}: every answer is a 201 or a 200 ({histogram})"),
    )?;
    let created: Vec<&Exchange> = answers.iter().filter(|e| e.status == 201).collect();
    ctx.check_eq(
        created.len(),
        1,
        format!("{label}: exactly one 201 ({histogram})"),
    )?;
    let ids: BTreeSet<&str> = answers.iter().filter_map(|e| job::id(&e.answer)).collect();
    ctx.check_eq(
        ids.len(),
        1,
        format!(
            "{label}: every answer names the same job ({} ids)",
            ids.len()
        ),
    )?;
    Ok(created[0])
}

/// `201×1, 200×31`.
pub(crate) fn statuses(answers: &[Exchange]) -> String {
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for e in answers {
        *counts.entry(e.status).or_default() += 1;
    }
    counts
        .iter()
        .map(|(s, n)| format!("{s}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn key_reuse() -> Def {
    Def {
        name: "key-reuse",
        about: "same key, another payload: 409 (or 422), never a 2xx, nothing changes, no upstream \
                request; the same intent respelled (key order, white space, 1 vs 1.0) is a replay",
        needs_restart: false,
        body: |ctx| Box::pin(key_reuse_body(ctx)),
    }
}

/// An intent with numbers worth respelling.
fn numeric_intent(ctx: &Ctx) -> Intent {
    let mut intent = ctx.intent(PRIMARY);
    intent.body["input"]["temperature"] = json!(1);
    intent.body["input"]["max_tokens"] = json!(100);
    intent
}

async fn key_reuse_body(ctx: &Ctx) -> Checked {
    let intent = numeric_intent(ctx);
    ctx.expect(&intent, PRIMARY, 1);
    let created = ctx.create(&intent).await;
    ctx.status(&created, &[201], "the first request creates the job (201)")?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    let before = ctx
        .poll(
            &intent.owner,
            &id,
            "the job succeeds",
            ctx.timing().slack(),
            |j| job::state(j) == Some("succeeded"),
        )
        .await?;

    let respellings = [
        (
            "keys reversed, integers as 1.0",
            respell(&intent.body, Spelling::PointZero),
        ),
        (
            "keys reversed, white space, integers as 1e0 and 1.0000000000000001",
            respell(&intent.body, Spelling::Exponent),
        ),
    ];
    for (what, body) in respellings {
        let call = Call::post("/v1/jobs")
            .owner(&intent.owner)
            .key(&intent.key)
            .raw(body);
        let again = ctx.send(call).await;
        ctx.status(
            &again,
            &[200],
            &format!("the same intent respelled ({what}) is a replay (200)"),
        )?;
        ctx.check(
            again.replayed(),
            format!("{what}: Idempotent-Replayed: true"),
        )?;
        ctx.check_eq(
            job::id(&again.answer),
            Some(id.as_str()),
            format!("{what}: the same job"),
        )?;
    }

    let mut extra = intent.clone();
    extra.body["input"]["seed"] = json!(7);
    let changed = [
        (
            "temperature 1 → 0.5",
            intent.with("/input/temperature", json!(0.5)),
        ),
        (
            "max_tokens 100 → 100.5",
            intent.with("/input/max_tokens", json!(100.5)),
        ),
        (
            "another user message",
            intent.with(
                "/input/messages/1/content",
                json!(format!("Invoice INV-2042, total 99.00 EUR. {}", intent.tag)),
            ),
        ),
        (
            "another provider",
            intent.with("/provider", json!(FALLBACK)),
        ),
        ("another task", intent.with("/task", json!(OTHER_TASK))),
        ("an extra input member", extra),
    ];
    for (what, other) in changed {
        let exchange = ctx.create(&other).await;
        reused(ctx, &exchange, &format!("same key, {what}"))?;
    }
    let read = ctx.read(&intent.owner, &id).await?;
    ctx.check_eq(
        &read,
        &before,
        "the rejected payloads changed nothing in the job",
    )?;
    let again = ctx.create(&intent).await;
    ctx.status(
        &again,
        &[200],
        "the original intent is still a replay (200)",
    )?;
    ctx.check_eq(
        job::id(&again.answer),
        Some(id.as_str()),
        "and still the same job",
    )
}

/// 409 `idempotency_key_reused`, or a 422 (the IETF draft's answer); never a 2xx.
fn reused(ctx: &Ctx, exchange: &Exchange, what: &str) -> Checked {
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

#[derive(Clone, Copy)]
enum Spelling {
    /// Integers as `1.0`.
    PointZero,
    /// Integers as `1e0`, with 1 as `1.0000000000000001` (the same IEEE double), and
    /// lavish white space.
    Exponent,
}

/// The same JSON value in another spelling: object keys reversed, numbers respelled.
fn respell(value: &Value, spelling: Spelling) -> String {
    let space = match spelling {
        Spelling::PointZero => "",
        Spelling::Exponent => "\n\t ",
    };
    match value {
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{space}{}{space}:{space}{}", json!(k), respell(v, spelling)))
                .collect();
            format!("{{{}{space}}}", members.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| respell(v, spelling)).collect();
            format!("[{space}{}{space}]", items.join(&format!(",{space}")))
        }
        Value::Number(n) if n.is_i64() || n.is_u64() => match spelling {
            Spelling::PointZero => format!("{n}.0"),
            Spelling::Exponent if n.as_u64() == Some(1) => "1.0000000000000001".to_string(),
            Spelling::Exponent => format!("{n}e0"),
        },
        other => other.to_string(),
    }
}

pub(crate) fn concurrent_mismatch() -> Def {
    Def {
        name: "concurrent-mismatch",
        about: "two payloads raced under one key, repeated: one job, the other payload a 409 \
                (or 422), never two jobs, one upstream request",
        needs_restart: false,
        body: |ctx| Box::pin(concurrent_mismatch_body(ctx)),
    }
}

async fn concurrent_mismatch_body(ctx: &Ctx) -> Checked {
    for (n, rounds) in [(2usize, 8usize), (16, 3)] {
        for round in 1..=rounds {
            let a = ctx.intent(PRIMARY);
            let b = a.with("/input/temperature", json!(0.7));
            ctx.expect(&a, PRIMARY, 1);
            let calls: Vec<Call> = (0..n)
                .map(|i| if i % 2 == 0 { a.create() } else { b.create() })
                .collect();
            let answers = ctx.send_all(calls).await;
            let label = format!("{n} creations of two payloads under one key (round {round})");
            let histogram = statuses(&answers);
            let created: Vec<usize> = (0..n).filter(|&i| answers[i].status == 201).collect();
            ctx.check_eq(
                created.len(),
                1,
                format!("{label}: exactly one 201 ({histogram})"),
            )?;
            let winner = created[0] % 2;
            let ids: BTreeSet<&str> = answers
                .iter()
                .filter(|e| e.is_success())
                .filter_map(|e| job::id(&e.answer))
                .collect();
            ctx.check_eq(
                ids.len(),
                1,
                format!("{label}: every 2xx names the same job"),
            )?;
            for (i, answer) in answers.iter().enumerate() {
                if i % 2 == winner {
                    ctx.status(
                        answer,
                        &[200, 201],
                        &format!("{label}: the winning payload's request #{i} gets the job"),
                    )?;
                } else if answer.status == 422 {
                    ctx.pass(format!(
                        "{label}: the other payload's request #{i} is a 422"
                    ));
                } else {
                    ctx.problem(
                        answer,
                        409,
                        "idempotency_key_reused",
                        &format!("{label}: the other payload's request #{i} is a 409"),
                    )?;
                }
            }
            ctx.arrivals(&a, PRIMARY, 1).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respellings_parse_to_the_same_canonical_json() {
        let value = json!({"task": "t", "input": {"temperature": 1, "max_tokens": 100, "messages": [{"role": "user", "content": "a\"b"}]}});
        let canonical = conform_config::digest::canonical(&value);
        for spelling in [Spelling::PointZero, Spelling::Exponent] {
            let text = respell(&value, spelling);
            assert_ne!(text, value.to_string());
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                conform_config::digest::canonical(&back),
                canonical,
                "{text}"
            );
        }
        assert!(respell(&value, Spelling::PointZero).contains("100.0"));
        assert!(respell(&value, Spelling::Exponent).contains("1.0000000000000001"));
    }
}
