//! The idempotency key's forms and the request's validation.

use serde_json::json;

use super::Def;
use super::api::Call;
use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step};
use super::providers::PRIMARY;

pub(crate) fn key_forms() -> Def {
    Def {
        name: "key-forms",
        about: "a missing, empty, too long, non-ASCII or doubled key is a 400 and binds nothing; \
                bare and quoted forms name one key; a malformed body is a 400 that leaves the key free",
        needs_restart: false,
        body: |ctx| Box::pin(key_forms_body(ctx)),
    }
}

async fn key_forms_body(ctx: &Ctx) -> Checked {
    rejected_keys(ctx).await?;
    accepted_forms(ctx).await?;
    rejected_bodies_bind_nothing(ctx).await
}

async fn rejected_keys(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    let fresh = ctx.fresh("k");
    let bad: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("no Idempotency-Key header", vec![]),
        ("an empty key", vec![b"".to_vec()]),
        (
            "a key of 256 characters",
            vec![padded(&fresh, 256).into_bytes()],
        ),
        ("a non-ASCII key", vec![format!("{fresh}-clé").into_bytes()]),
        (
            "a key with a space",
            vec![format!("{fresh} x").into_bytes()],
        ),
        ("a key with a tab", vec![format!("{fresh}\tx").into_bytes()]),
        (
            "two Idempotency-Key headers",
            vec![
                format!("{fresh}-a").into_bytes(),
                format!("{fresh}-b").into_bytes(),
            ],
        ),
        (
            "the same key sent twice",
            vec![fresh.clone().into_bytes(), fresh.clone().into_bytes()],
        ),
        (
            "a quoted key with a parameter",
            vec![format!("\"{fresh}\";p=1").into_bytes()],
        ),
        (
            "an unterminated quoted key",
            vec![format!("\"{fresh}").into_bytes()],
        ),
        ("an empty quoted key", vec![b"\"\"".to_vec()]),
        (
            "a quoted key with a space",
            vec![format!("\"{fresh} x\"").into_bytes()],
        ),
        (
            "two quoted strings",
            vec![format!("\"{fresh}\", \"{fresh}-2\"").into_bytes()],
        ),
    ];
    for (what, keys) in bad {
        let mut call = Call::post("/v1/jobs")
            .owner(&intent.owner)
            .json(&intent.body);
        for key in keys {
            call = call.key(key);
        }
        let exchange = ctx.send(call).await;
        ctx.problem(
            &exchange,
            400,
            "idempotency_key_required",
            &format!("{what} is answered 400 idempotency_key_required"),
        )?;
    }
    // None of them bound anything: the plain key is still free.
    let key = Intent {
        key: fresh.clone(),
        ..intent.clone()
    };
    ctx.script(&key, PRIMARY, vec![Step::now(Reply::answer(PRIMARY, 1))]);
    ctx.expect(&key, PRIMARY, 1);
    let exchange = ctx.create(&key).await;
    ctx.status(
        &exchange,
        &[201],
        "after the rejected requests the key is still free (201)",
    )?;
    ctx.arrivals(&key, PRIMARY, 1).await
}

async fn accepted_forms(ctx: &Ctx) -> Checked {
    let longest = ctx.intent(PRIMARY);
    let longest = Intent {
        key: padded(&longest.key, 255),
        ..longest
    };
    ctx.expect(&longest, PRIMARY, 1);
    let exchange = ctx.create(&longest).await;
    ctx.status(
        &exchange,
        &[201],
        "a key of 255 characters is accepted (201)",
    )?;
    ctx.check_eq(
        exchange.text("idempotency_key"),
        Some(longest.key.as_str()),
        "the job holds the 255-character key",
    )?;

    let plain = ctx.fresh("key");
    let escaped = format!("{}\"q\\z", ctx.fresh("key"));
    let pairs = [
        (
            "bare, then quoted",
            plain.clone(),
            plain.clone(),
            format!("\"{plain}\""),
        ),
        (
            "quoted, then bare",
            format!("{plain}-2"),
            format!("\"{plain}-2\""),
            format!("{plain}-2"),
        ),
        (
            "with escapes: bare, then quoted",
            escaped.clone(),
            escaped.clone(),
            format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\"")),
        ),
    ];
    for (what, key, first, second) in pairs {
        let intent = Intent {
            key: key.clone(),
            ..ctx.intent(PRIMARY)
        };
        ctx.expect(&intent, PRIMARY, 1);
        let call = |raw: &str| {
            Call::post("/v1/jobs")
                .owner(&intent.owner)
                .key(raw)
                .json(&intent.body)
        };
        let created = ctx.send(call(&first)).await;
        ctx.status(
            &created,
            &[201],
            &format!("{what}: the first form creates the job (201)"),
        )?;
        ctx.check_eq(
            created.text("idempotency_key"),
            Some(key.as_str()),
            format!("{what}: the job's idempotency_key is the key itself, unquoted"),
        )?;
        let again = ctx.send(call(&second)).await;
        ctx.status(
            &again,
            &[200],
            &format!("{what}: the second form is a replay (200)"),
        )?;
        ctx.check(
            again.replayed(),
            format!("{what}: the replay says Idempotent-Replayed: true"),
        )?;
        ctx.check_eq(
            job::id(&again.answer),
            job::id(&created.answer),
            format!("{what}: both forms name the same job"),
        )?;
        ctx.arrivals(&intent, PRIMARY, 1).await?;
    }
    Ok(())
}

async fn rejected_bodies_bind_nothing(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    let tag = intent.tag.clone();
    let mut no_task = intent.body.clone();
    no_task.as_object_mut().map(|o| o.remove("task"));
    let mut no_provider = intent.body.clone();
    no_provider.as_object_mut().map(|o| o.remove("provider"));
    let bodies: Vec<(&str, String)> = vec![
        (
            "a body that is not JSON",
            format!("{{\"task\": \"{tag}\", "),
        ),
        (
            "a body that is a JSON array",
            json!([intent.body]).to_string(),
        ),
        ("a body without task", no_task.to_string()),
        ("a body without provider", no_provider.to_string()),
        (
            "an input that is not an object",
            intent
                .with("/input", json!(format!("extract {tag}")))
                .body
                .to_string(),
        ),
        (
            "duplicate member names",
            format!(
                r#"{{"task": "invoice-extraction", "task": "invoice-extraction", "provider": "primary", "input": {}}}"#,
                intent.body["input"]
            ),
        ),
        (
            "a number out of range",
            format!(
                r#"{{"task": "invoice-extraction", "provider": "primary", "input": {{"messages": [{{"role": "user", "content": "{tag}"}}], "temperature": 1e400}}}}"#
            ),
        ),
        (
            "a lone surrogate",
            format!(
                r#"{{"task": "invoice-extraction", "provider": "primary", "input": {{"messages": [{{"role": "user", "content": "{tag} \ud800"}}]}}}}"#
            ),
        ),
    ];
    for (what, body) in bodies {
        let call = Call::post("/v1/jobs")
            .owner(&intent.owner)
            .key(&intent.key)
            .raw(body);
        let exchange = ctx.send(call).await;
        ctx.problem(
            &exchange,
            400,
            "invalid_request",
            &format!("{what} is answered 400 invalid_request"),
        )?;
    }
    for (what, owner) in [
        ("without X-Owner-Id", None),
        ("with an empty X-Owner-Id", Some("")),
    ] {
        let mut call = Call::post("/v1/jobs").key(&intent.key).json(&intent.body);
        call.owner = owner.map(str::to_string);
        let exchange = ctx.send(call).await;
        ctx.problem(
            &exchange,
            401,
            "owner_required",
            &format!("a creation {what} is answered 401 owner_required"),
        )?;
    }
    ctx.expect(&intent, PRIMARY, 1);
    let exchange = ctx.create(&intent).await;
    ctx.status(
        &exchange,
        &[201],
        "after the rejected bodies and owners the key is still free: the valid request creates the job (201)",
    )?;
    ctx.arrivals(&intent, PRIMARY, 1).await
}

/// `prefix` padded with `k` (or cut) to exactly `len` characters.
fn padded(prefix: &str, len: usize) -> String {
    let mut key: String = prefix.chars().take(len).collect();
    while key.len() < len {
        key.push('k');
    }
    key
}
