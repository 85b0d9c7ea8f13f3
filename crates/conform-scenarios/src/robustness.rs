//! Robustness: what a careless or hostile client sends. An oversized body, nesting deeper
//! than any parser should follow, invalid UTF-8, connections that stall mid-request, and
//! a burst of one creation over hundreds of connections at once. The contract's section
//! "Hostile and careless input" says what is held: an answer (a job or a problem), the
//! orchestrator up and serving others, one job per key, invalid UTF-8 in a body refused.
//! Where the contract leaves the choice open (a body's size, its nesting, the bytes of
//! `X-Owner-Id`), the scenario reports whether the orchestrator accepted or refused, and
//! fails neither.
//!
//! These scenarios speak raw HTTP/1.1 (`raw`), so `--target` must be an `http://` URL.
//! They run last: they stress the orchestrator, and no other scenario should run against
//! one they may have hurt.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Def;
use super::api::Exchange;
use super::ctx::{Checked, Ctx, Intent};
use super::job;
use super::mock::{Reply, Step};
use super::providers::PRIMARY;
use super::raw;

/// The family's scenario names, in the suite's order.
pub const FAMILY: [&str; 5] = [
    "oversized-body",
    "deep-nesting",
    "invalid-utf8",
    "stalled-connections",
    "creation-burst",
];

/// How long a raw exchange may wait for its answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `host:port` of the orchestrator.
fn addr(ctx: &Ctx) -> String {
    let base = ctx.env().api.base();
    let rest = base.split_once("://").map_or(base, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The headers of a creation for `intent`.
fn creation_headers(intent: &Intent) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("X-Owner-Id", intent.owner.clone().into_bytes()),
        ("Idempotency-Key", intent.key.clone().into_bytes()),
        ("Content-Type", b"application/json".to_vec()),
    ]
}

fn borrowed<'a>(headers: &'a [(&'static str, Vec<u8>)]) -> Vec<(&'static str, &'a [u8])> {
    headers.iter().map(|(k, v)| (*k, v.as_slice())).collect()
}

/// Sends `bytes` (a request whose method and path are those given) on a fresh
/// connection and records the exchange (`sent` describes the body).
async fn send_raw(
    ctx: &Ctx,
    owner: Option<&str>,
    (method, path): (&str, &str),
    bytes: Vec<u8>,
    sent: Value,
) -> Exchange {
    let answer = match raw::connect(&addr(ctx)).await {
        Ok(stream) => raw::exchange(stream, bytes, ANSWER_WITHIN).await,
        Err(e) => raw::Answer {
            error: Some(format!("cannot connect: {e}")),
            ..raw::Answer::default()
        },
    };
    let exchange = answer.exchange(method, path, owner, sent);
    ctx.keep(&exchange);
    exchange
}

/// A 4xx or a 503, as an RFC 9457 problem with a `code`: the contract's shape for a
/// refusal.
fn refused(ctx: &Ctx, exchange: &Exchange, what: &str) -> Checked {
    let status_ok = (400..500).contains(&exchange.status) || exchange.status == 503;
    if status_ok && problem_shaped(exchange) {
        ctx.pass(format!(
            "{what}: {} {}",
            exchange.status,
            exchange.code().unwrap_or("")
        ));
        return Ok(());
    }
    Err(ctx.fail(
        format!("{what}: a 4xx or 503 problem (application/problem+json with a code)"),
        Some(job::describe(exchange)),
    ))
}

/// After a refusal: the orchestrator still answers, and the key is still free (the
/// intent's own body creates its job: 201).
async fn still_serving_and_key_free(ctx: &Ctx, intent: &Intent, after: &str) -> Checked {
    ctx.check(
        ctx.env().api.healthy().await,
        format!("after {after}, /healthz still answers 200"),
    )?;
    let created = ctx.create(intent).await;
    ctx.status(
        &created,
        &[201],
        &format!("after {after}, the key is still free: the intended body creates the job (201)"),
    )
}

/// What an orchestrator chose for a request the contract leaves to it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    /// It took the request: the job's id (a 201, or a 200 replay of the job the key holds).
    Accepted(String),
    Refused,
}

/// An answer the contract allows for a request it sets no bound on: the job (201, or a
/// 200 replay) or a problem document. The choice is reported, never failed.
fn accepted_or_refused(ctx: &Ctx, exchange: &Exchange, what: &str) -> Checked<Choice> {
    if matches!(exchange.status, 200 | 201)
        && let Some(id) = job::id(&exchange.answer)
    {
        let choice = format!(
            "{what}: accepted ({} with job {id}); the contract leaves this to the orchestrator",
            exchange.status
        );
        ctx.note(choice.clone());
        ctx.pass(choice);
        return Ok(Choice::Accepted(id.to_string()));
    }
    if exchange.status >= 400 && problem_shaped(exchange) {
        let choice = format!(
            "{what}: refused ({} {}); the contract leaves this to the orchestrator",
            exchange.status,
            exchange.code().unwrap_or("")
        );
        ctx.note(choice.clone());
        ctx.pass(choice);
        return Ok(Choice::Refused);
    }
    Err(ctx.fail(
        format!("{what}: an answer, the job or a problem (application/problem+json with a code)"),
        Some(job::describe(exchange)),
    ))
}

fn problem_shaped(exchange: &Exchange) -> bool {
    exchange
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("application/problem+json"))
        && exchange.code().is_some_and(|c| !c.is_empty())
        && exchange.answer.get("status").and_then(Value::as_u64) == Some(u64::from(exchange.status))
}

/// After requests the orchestrator may have accepted or refused: it still answers, and
/// the key names at most one job. Refused every time, the key is free (the intended body
/// creates its job, 201); accepted, the key holds that job, and the intended body (another
/// fingerprint) is a 409/422 that changes nothing.
async fn still_serving_one_job_per_key(
    ctx: &Ctx,
    intent: &Intent,
    choices: &[Choice],
    after: &str,
) -> Checked {
    let accepted: BTreeSet<&str> = choices
        .iter()
        .filter_map(|c| match c {
            Choice::Accepted(id) => Some(id.as_str()),
            Choice::Refused => None,
        })
        .collect();
    ctx.check(
        accepted.len() <= 1,
        format!("after {after}, the key names at most one job (accepted as {accepted:?})"),
    )?;
    let Some(id) = accepted.into_iter().next() else {
        return still_serving_and_key_free(ctx, intent, after).await;
    };
    ctx.check(
        ctx.env().api.healthy().await,
        format!("after {after}, /healthz still answers 200"),
    )?;
    let read = ctx.read(&intent.owner, id).await?;
    ctx.check_eq(
        job::attempts(&read).len(),
        1,
        format!("after {after}, the accepted job has one attempt"),
    )?;
    // The attempt may still be sending a large body to the primary, which counts the
    // request once it has all of it: the count waits for the attempt to end.
    let timing = ctx.timing();
    ctx.poll(
        &intent.owner,
        id,
        &format!("after {after}, the accepted job's attempt ends (the orchestrator is done with the primary)"),
        timing.attempt_timeout + timing.slack(),
        |job| {
            job::attempts(job).iter().all(|a| {
                !matches!(
                    a.get("state").and_then(Value::as_str),
                    Some("starting" | "running")
                )
            })
        },
    )
    .await?;
    if ctx.count(intent, PRIMARY) == 0 {
        // Cut off by the attempt's own deadline before the primary had the whole body:
        // a request sent, never received; the contract's timeout rule, not a second job.
        ctx.note(format!(
            "after {after}, the attempt ended before the primary had received its whole request"
        ));
        ctx.expect(intent, PRIMARY, 0);
    }
    let created = ctx.create(intent).await;
    ctx.status(
        &created,
        &[409, 422],
        &format!(
            "after {after}, the key holds the accepted job: another body under it is a 409 (or 422)"
        ),
    )
}

pub(crate) fn oversized_body() -> Def {
    Def {
        name: "oversized-body",
        about: "a 32 MiB creation, announced and then chunked, is answered with the job or a \
                problem (the size is the orchestrator's choice, reported; conform serve refuses \
                with 413); the orchestrator stays up and the key names at most one job",
        needs_restart: false,
        body: |ctx| Box::pin(oversized_body_body(ctx)),
    }
}

const OVERSIZED: usize = 32 << 20;

/// The intent's body with its user message padded to `size` bytes.
fn padded_body(intent: &Intent, size: usize) -> Vec<u8> {
    let mut body = intent.body.clone();
    let filler = "Invoice line: 1 x widget at 12.50 EUR. ".repeat(size / 40 + 1);
    body["input"]["messages"][1]["content"] = json!(format!("{} {filler}", intent.tag));
    body.to_string().into_bytes()
}

async fn oversized_body_body(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    // One upstream request either way: the accepted job's attempt, or the intended body's
    // once the key is found free.
    ctx.expect(&intent, PRIMARY, 1);
    let body = padded_body(&intent, OVERSIZED);
    let sent = json!(format!("a job body of {} bytes", body.len()));
    let headers = creation_headers(&intent);
    let announced = raw::request("POST", "/v1/jobs", &borrowed(&headers), &body);
    let exchange = send_raw(
        ctx,
        Some(&intent.owner),
        ("POST", "/v1/jobs"),
        announced,
        sent.clone(),
    )
    .await;
    let first = accepted_or_refused(ctx, &exchange, "a 32 MiB body with its Content-Length")?;
    // The same body chunked: nothing announces its size, so an orchestrator with a limit
    // must cut it off while it arrives.
    let mut chunked = raw::head("POST", "/v1/jobs", &borrowed(&headers), None);
    chunked.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
    for piece in body.chunks(256 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    drop(body);
    let exchange = send_raw(
        ctx,
        Some(&intent.owner),
        ("POST", "/v1/jobs"),
        chunked,
        sent,
    )
    .await;
    let second = accepted_or_refused(ctx, &exchange, "a 32 MiB body, chunked")?;
    if matches!(first, Choice::Accepted(_)) && second != Choice::Refused {
        ctx.check(
            exchange.status == 200 && exchange.replayed(),
            "the same body again under the same key is a replay (200, Idempotent-Replayed)",
        )?;
    }
    still_serving_one_job_per_key(ctx, &intent, &[first, second], "two oversized bodies").await
}

pub(crate) fn deep_nesting() -> Def {
    Def {
        name: "deep-nesting",
        about: "a creation whose input nests 100,000 arrays deep is answered with the job or a \
                problem (nesting is the orchestrator's choice, reported; conform serve refuses); \
                the orchestrator stays up and the key names at most one job",
        needs_restart: false,
        body: |ctx| Box::pin(deep_nesting_body(ctx)),
    }
}

async fn deep_nesting_body(ctx: &Ctx) -> Checked {
    const DEPTH: usize = 100_000;
    let intent = ctx.intent(PRIMARY);
    ctx.expect(&intent, PRIMARY, 1);
    let mut text = intent.body.to_string();
    // `…"temperature":0}}` becomes `…"temperature":0,"deep":[[[…]]]}}`.
    let nested = format!(",\"deep\":{}{}}}}}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    text.truncate(text.len() - 2);
    text.push_str(&nested);
    let headers = creation_headers(&intent);
    let bytes = raw::request("POST", "/v1/jobs", &borrowed(&headers), text.as_bytes());
    let sent = json!(format!("a job body whose input nests {DEPTH} arrays deep"));
    let exchange = send_raw(ctx, Some(&intent.owner), ("POST", "/v1/jobs"), bytes, sent).await;
    let choice = accepted_or_refused(ctx, &exchange, "input nested 100,000 deep")?;
    still_serving_one_job_per_key(ctx, &intent, &[choice], "a deeply nested body").await
}

pub(crate) fn invalid_utf8() -> Def {
    Def {
        name: "invalid-utf8",
        about: "invalid UTF-8 in a job body is refused with a 4xx problem, never repaired into \
                a job (JSON is UTF-8); a non-ASCII X-Owner-Id is accepted or refused (the \
                orchestrator's choice, reported) and a percent-encoded path that is not UTF-8 \
                gets a 4xx problem; the intent's key stays free for its owner",
        needs_restart: false,
        body: |ctx| Box::pin(invalid_utf8_body(ctx)),
    }
}

async fn invalid_utf8_body(ctx: &Ctx) -> Checked {
    let intent = ctx.intent(PRIMARY);
    ctx.expect(&intent, PRIMARY, 1);
    let text = intent.body.to_string();
    let headers = creation_headers(&intent);
    // Inside the user message: a lone byte 0xFF, then a truncated two-byte sequence.
    for (what, bad) in [
        ("a byte 0xFF inside a string", &b"\xff"[..]),
        ("a cut-off UTF-8 sequence inside a string", &b"\xc3"[..]),
    ] {
        let at = text.find(&intent.tag).unwrap_or(0);
        let mut body = text.as_bytes()[..at].to_vec();
        body.extend_from_slice(bad);
        body.extend_from_slice(&text.as_bytes()[at..]);
        let bytes = raw::request("POST", "/v1/jobs", &borrowed(&headers), &body);
        let exchange = send_raw(
            ctx,
            Some(&intent.owner),
            ("POST", "/v1/jobs"),
            bytes,
            json!(what),
        )
        .await;
        refused(ctx, &exchange, &format!("a job body with {what}"))?;
    }
    let mut owner = intent.owner.clone().into_bytes();
    owner.extend_from_slice(b"\xff\xfe");
    let bytes = raw::request(
        "POST",
        "/v1/jobs",
        &[
            ("X-Owner-Id", owner.as_slice()),
            ("Idempotency-Key", intent.key.as_bytes()),
            ("Content-Type", b"application/json"),
        ],
        text.as_bytes(),
    );
    // No owner recorded: the job, if any, belongs to the owner those bytes name, which
    // the client library cannot spell to read it back.
    let exchange = send_raw(
        ctx,
        None,
        ("POST", "/v1/jobs"),
        bytes.clone(),
        json!("X-Owner-Id ending in the bytes 0xFF 0xFE"),
    )
    .await;
    let choice = accepted_or_refused(ctx, &exchange, "an X-Owner-Id that is not ASCII")?;
    if let Choice::Accepted(id) = &choice {
        // Its job is that owner's: one upstream request more for this tag, and the same
        // bytes again replay it.
        ctx.expect(&intent, PRIMARY, 2);
        let again = send_raw(
            ctx,
            None,
            ("POST", "/v1/jobs"),
            bytes,
            json!("the same X-Owner-Id bytes again"),
        )
        .await;
        ctx.check(
            again.status == 200 && again.replayed() && job::id(&again.answer) == Some(id),
            "the same non-ASCII owner and key again replay its job (200, Idempotent-Replayed)",
        )?;
    }
    let bytes = raw::request(
        "GET",
        "/v1/jobs/%ff%fe",
        &[("X-Owner-Id", intent.owner.as_bytes())],
        b"",
    );
    let exchange = send_raw(
        ctx,
        Some(&intent.owner),
        ("GET", "/v1/jobs/%ff%fe"),
        bytes,
        Value::Null,
    )
    .await;
    refused(
        ctx,
        &exchange,
        "GET /v1/jobs/%ff%fe (not UTF-8 once decoded)",
    )?;
    // Another owner's job never binds this owner's key.
    still_serving_and_key_free(ctx, &intent, "invalid UTF-8").await
}

pub(crate) fn stalled_connections() -> Def {
    Def {
        name: "stalled-connections",
        about: "while 64 connections stall (half inside their headers, half inside their body), \
                /healthz and a new job answer within a second; a request cut off binds nothing; \
                anything answered on a stalled connection is a 4xx or 503 problem",
        needs_restart: false,
        body: |ctx| Box::pin(stalled_body(ctx)),
    }
}

/// How fast the orchestrator must answer others while connections stall.
const PROMPT: Duration = Duration::from_secs(1);

/// How many connections stall.
const STALLED: usize = 64;

async fn stalled_body(ctx: &Ctx) -> Checked {
    let owner = ctx.fresh("owner");
    let (stalled, cut_keys) = stall(ctx, &owner).await?;
    others_served_promptly(ctx).await?;
    stalled_answers_are_refusals(ctx, stalled, &owner).await?;
    cut_keys_are_free(ctx, &owner, &cut_keys).await
}

/// Opens the stalled connections for `owner`: half cut inside their headers, half inside
/// their body. Returns the streams and the keys of the requests cut in their body.
async fn stall(ctx: &Ctx, owner: &str) -> Checked<(Vec<tokio::net::TcpStream>, Vec<String>)> {
    let addr = addr(ctx);
    let mut stalled = Vec::new();
    let mut cut_keys = Vec::new();
    for i in 0..STALLED {
        let key = ctx.fresh("key");
        let bytes = if i % 2 == 0 {
            // Cut off inside the headers.
            raw::head(
                "POST",
                "/v1/jobs",
                &[
                    ("X-Owner-Id", owner.as_bytes()),
                    ("Idempotency-Key", key.as_bytes()),
                ],
                None,
            )
        } else {
            // A complete head announcing 4096 bytes, then 100 of them.
            let mut bytes = raw::head(
                "POST",
                "/v1/jobs",
                &[
                    ("X-Owner-Id", owner.as_bytes()),
                    ("Idempotency-Key", key.as_bytes()),
                    ("Content-Type", b"application/json"),
                ],
                Some(4096),
            );
            bytes.extend_from_slice(b"\r\n{\"task\": \"");
            bytes.extend_from_slice(&[b'x'; 89]);
            cut_keys.push(key);
            bytes
        };
        let mut stream = match raw::connect(&addr).await {
            Ok(s) => s,
            Err(e) => return Err(ctx.fail("open the stalled connections", Some(e.to_string()))),
        };
        use tokio::io::AsyncWriteExt;
        if let Err(e) = stream.write_all(&bytes).await {
            return Err(ctx.fail("write the stalled requests", Some(e.to_string())));
        }
        stalled.push(stream);
    }
    ctx.pass(format!(
        "{STALLED} connections stall: {} inside their headers, {} inside their body",
        STALLED / 2,
        STALLED / 2
    ));
    Ok((stalled, cut_keys))
}

/// While connections stall, /healthz and a new job answer within [`PROMPT`].
async fn others_served_promptly(ctx: &Ctx) -> Checked {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let health = tokio::time::timeout(PROMPT * 3, ctx.env().api.healthy()).await;
    let took = started.elapsed();
    ctx.check(
        matches!(health, Ok(true)) && took <= PROMPT,
        format!(
            "while they stall, /healthz answers 200 within {} ms (took {} ms)",
            PROMPT.as_millis(),
            took.as_millis()
        ),
    )?;
    let intent = ctx.intent(PRIMARY);
    ctx.expect(&intent, PRIMARY, 1);
    let started = Instant::now();
    let created = tokio::time::timeout(PROMPT * 3, ctx.create(&intent)).await;
    let took = started.elapsed();
    let created = match created {
        Ok(exchange) => exchange,
        Err(_) => {
            return Err(ctx.fail(
                format!(
                    "while they stall, a new job is created within {} ms",
                    PROMPT.as_millis()
                ),
                Some(format!("no answer within {} ms", (PROMPT * 3).as_millis())),
            ));
        }
    };
    ctx.status(
        &created,
        &[201],
        "while they stall, a new job is created (201)",
    )?;
    ctx.check(
        took <= PROMPT,
        format!(
            "while they stall, the creation answers within {} ms (took {} ms)",
            PROMPT.as_millis(),
            took.as_millis()
        ),
    )?;
    let id = job::id(&created.answer).unwrap_or_default().to_string();
    ctx.read(&intent.owner, &id).await.map(|_| ())
}

/// Whatever was answered on a stalled connection so far must be a refusal of the
/// contract's shape; then the clients give up.
async fn stalled_answers_are_refusals(
    ctx: &Ctx,
    stalled: Vec<tokio::net::TcpStream>,
    owner: &str,
) -> Checked {
    let owner = owner.to_string();
    let mut answered = 0;
    for stream in stalled {
        let (read, _write) = stream.into_split();
        let answer = raw::read_answer(read, Duration::from_millis(5)).await;
        if answer.status != 0 {
            answered += 1;
            let exchange =
                answer.exchange("POST", "/v1/jobs", Some(&owner), json!("a stalled request"));
            ctx.keep(&exchange);
            refused(ctx, &exchange, "an answer on a stalled connection")?;
        }
    }
    ctx.note(format!(
        "{answered} of {STALLED} stalled connections had an answer when the clients gave up"
    ));
    Ok(())
}

/// A body that was cut off bound nothing: its key creates a job (a different body).
async fn cut_keys_are_free(ctx: &Ctx, owner: &str, cut_keys: &[String]) -> Checked {
    for key in cut_keys.iter().take(3) {
        let mut other = ctx.intent(PRIMARY);
        other.owner = owner.to_string();
        other.key = key.clone();
        ctx.expect(&other, PRIMARY, 1);
        let created = ctx.create(&other).await;
        ctx.status(
            &created,
            &[201],
            "the key of a request cut off in its body is free: a job is created under it (201)",
        )?;
    }
    Ok(())
}

pub(crate) fn creation_burst() -> Def {
    Def {
        name: "creation-burst",
        about: "one creation sent over 200 connections at once (and another body under the same \
                key over 10 more): every answer is the job (one 201, the rest 200 replays), a \
                409/422 for the other body, or a 503 problem that a retry resolves; one job, one \
                upstream request",
        needs_restart: false,
        body: |ctx| Box::pin(burst_body(ctx)),
    }
}

/// Connections that send the burst's body, and those that send another under its key.
const SAME: usize = 200;
const OTHER: usize = 10;

async fn burst_body(ctx: &Ctx) -> Checked {
    let a = ctx.intent(PRIMARY);
    let b = a.with("/input/temperature", json!(0.9));
    ctx.script(&a, PRIMARY, vec![Step::now(Reply::answer(PRIMARY, 1))]);
    ctx.expect(&a, PRIMARY, 1);
    let mut exchanges = release_burst(ctx, &a, &b).await?;
    // Every answer: a job, a key-reuse refusal, or a 503 problem.
    for (_, e) in &exchanges {
        if e.status == 503 {
            refused(ctx, e, "a burst request shed with 503")?;
        } else if !matches!(e.status, 200 | 201 | 409 | 422) {
            return Err(ctx.fail(
                "every burst request is answered 201, 200, 409/422 or 503",
                Some(job::describe(e)),
            ));
        }
    }
    retry_shed(ctx, &mut exchanges, &a, &b).await?;
    let (winner, id) = one_job(ctx, &exchanges)?;
    let winning = if winner { &a } else { &b };
    let read = ctx.read(&winning.owner, &id).await?;
    ctx.check_eq(job::attempts(&read).len(), 1, "the job has one attempt")?;
    ctx.arrivals(&a, PRIMARY, 1).await?;
    // The same burst again, now all replays, on fresh connections through the client.
    let again = ctx.send_all(vec![winning.create(); 32]).await;
    ctx.check(
        again
            .iter()
            .all(|e| e.status == 200 && e.replayed() && job::id(&e.answer) == Some(id.as_str())),
        "32 more creations afterwards are all 200 replays of the job",
    )?;
    Ok(())
}

/// Writes `a`'s creation on [`SAME`] connections and `b`'s on [`OTHER`] more, all but
/// their last byte, then releases the last bytes together: each answer, `true` for
/// `a`'s body.
async fn release_burst(ctx: &Ctx, a: &Intent, b: &Intent) -> Checked<Vec<(bool, Exchange)>> {
    let addr = addr(ctx);
    let body_a = a.body.to_string().into_bytes();
    let body_b = b.body.to_string().into_bytes();
    let headers = creation_headers(a);
    // Every request is written but its last byte, on its own connection; then the last
    // bytes go out together, so the orchestrator has them all at one instant.
    let mut pending = Vec::new();
    for i in 0..SAME + OTHER {
        let body = if i < SAME { &body_a } else { &body_b };
        let bytes = raw::request("POST", "/v1/jobs", &borrowed(&headers), body);
        let mut stream = match raw::connect(&addr).await {
            Ok(s) => s,
            Err(e) => return Err(ctx.fail("open the burst's connections", Some(e.to_string()))),
        };
        use tokio::io::AsyncWriteExt;
        if let Err(e) = stream.write_all(&bytes[..bytes.len() - 1]).await {
            return Err(ctx.fail("write the burst's requests", Some(e.to_string())));
        }
        pending.push((i < SAME, stream, bytes[bytes.len() - 1]));
    }
    let released = Instant::now();
    let tasks: Vec<_> = pending
        .into_iter()
        .map(|(same, stream, last)| {
            tokio::spawn(
                async move { (same, raw::exchange(stream, vec![last], ANSWER_WITHIN).await) },
            )
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        match t.await {
            Ok(answer) => answers.push(answer),
            Err(e) => ctx.note(format!("a burst task failed: {e}")),
        }
    }
    ctx.note(format!(
        "{} answers within {:.2} s of the release",
        answers.len(),
        released.elapsed().as_secs_f64()
    ));
    let exchanges: Vec<(bool, Exchange)> = answers
        .into_iter()
        .map(|(same, answer)| {
            let sent = if same {
                json!("the burst's body")
            } else {
                json!("another body, same key")
            };
            (
                same,
                answer.exchange("POST", "/v1/jobs", Some(&a.owner), sent),
            )
        })
        .collect();
    for (_, e) in &exchanges {
        ctx.keep(e);
    }
    Ok(exchanges)
}

/// A shed request is retried, as its Retry-After says, until it has a real answer.
async fn retry_shed(
    ctx: &Ctx,
    exchanges: &mut [(bool, Exchange)],
    a: &Intent,
    b: &Intent,
) -> Checked {
    for round in 0..5 {
        let shed: Vec<usize> = (0..exchanges.len())
            .filter(|&i| exchanges[i].1.status == 503)
            .collect();
        if shed.is_empty() {
            break;
        }
        ctx.note(format!(
            "round {round}: {} shed request(s) retried",
            shed.len()
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        for i in shed {
            let intent = if exchanges[i].0 { a } else { b };
            let again = ctx.send(intent.create()).await;
            if again.status == 503 {
                refused(ctx, &again, "a retried burst request shed again")?;
            }
            exchanges[i].1 = again;
        }
    }
    Ok(())
}

/// Exactly one 201, every 2xx naming the same job, the winning body answered with the
/// job everywhere and the other refused: which body won (`true` for the burst's) and the
/// job's id.
fn one_job(ctx: &Ctx, exchanges: &[(bool, Exchange)]) -> Checked<(bool, String)> {
    let created: Vec<&(bool, Exchange)> =
        exchanges.iter().filter(|(_, e)| e.status == 201).collect();
    let histogram =
        super::idempotency::statuses(&exchanges.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>());
    ctx.check_eq(created.len(), 1, format!("exactly one 201 ({histogram})"))?;
    let winner = created[0].0;
    let ids: BTreeSet<&str> = exchanges
        .iter()
        .filter(|(_, e)| e.is_success())
        .filter_map(|(_, e)| job::id(&e.answer))
        .collect();
    ctx.check_eq(ids.len(), 1, "every 2xx names the same job")?;
    for (same, e) in exchanges {
        if *same == winner {
            let ok = e.status == 201 || (e.status == 200 && e.replayed());
            if !ok {
                return Err(ctx.fail(
                    "every request with the winning body gets the job (201 once, else 200 with Idempotent-Replayed: true)",
                    Some(job::describe(e)),
                ));
            }
        } else if !matches!(e.status, 409 | 422) {
            return Err(ctx.fail(
                "every request with the other body is a 409 (or 422)",
                Some(job::describe(e)),
            ));
        }
    }
    ctx.pass("the winning body got the job on every connection, the other body a 409/422");
    let id = ids.into_iter().next().unwrap_or_default().to_string();
    Ok((winner, id))
}
