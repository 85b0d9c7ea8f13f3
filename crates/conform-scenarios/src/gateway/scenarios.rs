//! The gateway scenarios. Each scripts the upstreams for its own tag, sends one client
//! request through the gateway, and holds the gateway to the rules of failover through
//! an allowlist: it fails over only to a permitted fallback (the revoked candidate gets
//! nothing, in every scenario), it never hands the client a broken answer as complete,
//! the answer's `model` names the model that served it, and each upstream gets the
//! requests the scenario calls for (one per attempt: `conform export` writes
//! `num_retries: 0`).
//!
//! Where the seed's own rule and a gateway's documented choice differ (failing over
//! while a timed-out primary may still be working, which the seed calls `unknown`), the
//! scenario reports the gateway's behaviour and its consequence as a passing check
//! marked `documented`, not as a failure of the test.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::client::Received;
use super::config::{ANTHROPIC_PRIMARY, FALLBACK, PRIMARY, UNREACHABLE};
use super::ctx::Ctx;
use super::stream_faults;
use super::upstream::{Behaviour, Unreadable, prompt_tokens};
use crate::ctx::Checked;
use crate::mock::unix_ms;

/// One gateway scenario.
#[derive(Clone, Copy)]
pub(crate) struct Def {
    pub name: &'static str,
    pub about: &'static str,
    pub body: for<'a> fn(&'a Ctx) -> BoxFuture<'a, Checked>,
}

macro_rules! def {
    ($name:expr, $about:expr, $body:expr) => {
        Def {
            name: $name,
            about: $about,
            body: |ctx| Box::pin($body(ctx)),
        }
    };
}

/// Every gateway scenario, in the order they run.
pub(crate) fn all() -> Vec<Def> {
    ALL.to_vec()
}

/// The scenarios, in the order they run: a table.
static ALL: &[Def] = &[
    def!(
        "primary-answers",
        "the primary answers: the client gets its answer, one request, nothing else called",
        |ctx| primary_answers(ctx, false)
    ),
    def!(
        "primary-answers-streamed",
        "the primary streams its answer: the client gets the whole stream, one request",
        |ctx| primary_answers(ctx, true)
    ),
    def!(
        "failover-on-500",
        "the primary answers 500: the allowlisted fallback answers, one request each",
        |ctx| failover_on(ctx, 500)
    ),
    def!(
        "failover-on-503",
        "the primary answers 503: the allowlisted fallback answers, one request each",
        |ctx| failover_on(ctx, 503)
    ),
    def!(
        "failover-on-529",
        "the primary answers 529 (overloaded): the allowlisted fallback answers",
        |ctx| failover_on(ctx, 529)
    ),
    def!(
        "rate-limited-429",
        "the primary answers 429 with Retry-After: the client gets the fallback's answer \
             or an error, never a broken answer; the primary gets one request",
        rate_limited
    ),
    def!(
        "connection-refused",
        "a primary whose upstream refuses the connection (the request never sent): the \
             allowlisted fallback answers, one request",
        connection_refused
    ),
    def!(
        "connection-reset",
        "the primary resets the connection after reading the request: the client gets the \
             fallback's answer or an error; the duplicate work this may be is reported",
        connection_reset
    ),
    def!(
        "hang-past-timeout",
        "the primary answers only after three gateway timeouts: what the client gets, and \
             whether the fallback ran while the primary was still working, is reported",
        hang_past_timeout
    ),
    def!(
        "cut-stream-closed",
        "the primary's stream stops before its finish reason and [DONE], ended by closing \
             the connection: the client must not receive it as a complete stream",
        |ctx| broken_stream(ctx, Behaviour::CutByClose)
    ),
    def!(
        "cut-stream-chunked",
        "the same cut inside a chunked body (no last chunk): the client must not receive it \
             as a complete stream",
        |ctx| broken_stream(ctx, Behaviour::CutInChunked)
    ),
    def!(
        "error-event-mid-stream",
        "the primary's stream carries an error event after part of the answer: the client \
             must not receive it as a complete stream",
        |ctx| broken_stream(ctx, Behaviour::ErrorEvent)
    ),
    def!(
        "unreadable-2xx-broken-json",
        "the primary answers 200 with JSON cut short: the client must not receive a complete \
             answer that no upstream finished",
        |ctx| unreadable(ctx, Unreadable::BrokenJson, false)
    ),
    def!(
        "unreadable-2xx-html",
        "the primary answers 200 with an HTML page: no complete answer from it",
        |ctx| unreadable(ctx, Unreadable::Html, false)
    ),
    def!(
        "unreadable-2xx-empty",
        "the primary answers 200 with an empty body: no complete answer from it",
        |ctx| unreadable(ctx, Unreadable::Empty, false)
    ),
    def!(
        "unreadable-2xx-broken-json-streamed",
        "a streamed request answered 200 with JSON cut short: no complete stream from it",
        |ctx| unreadable(ctx, Unreadable::BrokenJson, true)
    ),
    def!(
        "unreadable-2xx-html-streamed",
        "a streamed request answered 200 with an HTML page: no complete stream from it",
        |ctx| unreadable(ctx, Unreadable::Html, true)
    ),
    def!(
        "unreadable-2xx-empty-streamed",
        "a streamed request answered 200 with an empty body: no complete stream from it",
        |ctx| unreadable(ctx, Unreadable::Empty, true)
    ),
    def!(
        "context-length",
        "the primary answers 400 context_length_exceeded: the client gets the fallback's \
             answer or the error, the primary one request",
        context_length
    ),
    def!(
        "anthropic-primary-answers",
        "the primary answers on Anthropic's Messages wire (the gateway translating): the \
             client gets its answer, one request",
        |ctx| anthropic(ctx, Behaviour::Answer, false)
    ),
    def!(
        "anthropic-primary-streams",
        "the primary streams its answer as Anthropic does (message_stop last): the client \
             gets the whole stream",
        |ctx| anthropic(ctx, Behaviour::Answer, true)
    ),
    def!(
        "anthropic-failover-on-529",
        "the Anthropic primary answers 529 (overloaded): the allowlisted fallback answers",
        |ctx| anthropic(ctx, Behaviour::failing(529), false)
    ),
    def!(
        "anthropic-cut-stream-chunked",
        "the Anthropic primary's stream stops before message_delta and message_stop: the \
             client must not receive it as a complete stream",
        |ctx| anthropic(ctx, Behaviour::CutInChunked, true)
    ),
    def!(
        "anthropic-overloaded-mid-stream",
        "the Anthropic primary sends an error event (overloaded) after part of the answer: \
             the client must not receive it as a complete stream",
        |ctx| anthropic(ctx, Behaviour::ErrorEvent, true)
    ),
    def!(
        "every-fallback-fails",
        "the primary and the fallback both answer 503: the client gets an error, one \
             request each, and the revoked candidate still nothing",
        every_fallback_fails
    ),
    // The stream fault classes (issue 45), in stream_faults.rs.
    def!(
        "slow-first-token",
        "the primary sends its stream's headers at once and its first event only after three \
             gateway timeouts: never a broken answer as complete, what the client got and when, \
             and a probe afterwards is answered",
        stream_faults::slow_first_token
    ),
    def!(
        "stall-mid-stream",
        "the primary's stream stops part way, stays open and silent for three gateway timeouts, \
             then closes unfinished: not presented as complete, the client's call ends within \
             twice the timeout plus 1 s, and a probe afterwards is answered",
        stream_faults::stall_mid_stream
    ),
    def!(
        "malformed-event-mid-stream",
        "the primary's stream carries one event whose data is not JSON and otherwise completes: \
             the client gets the whole genuine answer or no complete answer, and a probe \
             afterwards is answered",
        stream_faults::malformed_event_mid_stream
    ),
    def!(
        "stream-without-done",
        "the primary's stream ends cleanly after its finish reason and usage, without [DONE]: \
             finalised within 1.5 s of the upstream's end, with its usage",
        stream_faults::stream_without_done
    ),
    def!(
        "fallback-rejects-prefill",
        "the primary fails part way through its stream and the fallback refuses an assistant \
             prefill with a 400: the caller must not end with that 400",
        stream_faults::fallback_rejects_prefill
    ),
    // Request-level fault classes (issue 45). Those that fail the primary again and again
    // come last, so that a gateway's cooldown of it reaches no other scenario.
    def!(
        "accounting",
        "the primary answers 500: the fallback's answer names the fallback's model and \
             carries the fallback's usage",
        accounting
    ),
    def!(
        "content-filter-400",
        "the primary's content filter refuses the request (400): the primary is not \
             retried; failing over is reported as the gateway's policy choice",
        content_filter
    ),
    def!(
        "wall-clock-budget",
        "the primary and the fallback both hang past the timeout: the client's whole call \
             ends within the attempts the config allows times the timeout, plus slack",
        wall_clock_budget
    ),
    def!(
        "retry-after-honoured",
        "the primary and the fallback both answer 429 with Retry-After: 2: no upstream is \
             attempted again sooner than the header says",
        retry_after_honoured
    ),
    def!(
        "flapping-primary",
        "the primary answers 503 for a while, then recovers, the client asking at a steady \
             pace: served by the fallback (or an error) while it is down, back on the primary \
             within a bound, the probes in between counted",
        flapping_primary
    ),
    def!(
        "no-hammering",
        "the primary keeps answering 503 to requests at a steady pace: the attempts on one \
             upstream per client request, and in the whole window, stay within the config's \
             retries",
        no_hammering
    ),
];

async fn primary_answers(ctx: &Ctx, stream: bool) -> Checked {
    ctx.expect(PRIMARY, 1);
    ctx.expect(FALLBACK, 0);
    let received = ctx.ask(stream).await;
    ctx.served_by(&received, PRIMARY)
}

async fn failover_on(ctx: &Ctx, status: u16) -> Checked {
    ctx.script(PRIMARY, Behaviour::failing(status));
    ctx.expect(PRIMARY, 1);
    ctx.expect(FALLBACK, 1);
    let received = ctx.ask(false).await;
    ctx.served_by(&received, FALLBACK)
}

async fn rate_limited(ctx: &Ctx) -> Checked {
    ctx.script(
        PRIMARY,
        Behaviour::Status {
            status: 429,
            retry_after: Some(1),
        },
    );
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    ctx.complete_only_if_genuine(&received)
}

async fn connection_refused(ctx: &Ctx) -> Checked {
    ctx.expect(PRIMARY, 0);
    ctx.expect(FALLBACK, 1);
    let received = ctx.ask_model(UNREACHABLE, false).await;
    ctx.served_by(&received, FALLBACK)
}

async fn connection_reset(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::Reset);
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    if ctx.count(FALLBACK) > 0 {
        ctx.note(
            "the primary read the request before the reset: under the seed's rule its outcome \
             is unknown (the work may have happened), so the fallback's answer may be a second \
             execution of one intent",
        );
    }
    ctx.complete_only_if_genuine(&received)
}

async fn hang_past_timeout(ctx: &Ctx) -> Checked {
    let hang = ctx.env().timeout * 3;
    ctx.script(
        PRIMARY,
        Behaviour::Hang {
            ms: hang.as_millis() as u64,
        },
    );
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    ctx.settle().await;
    let arrivals = ctx.env().board.arrivals(&ctx.tag);
    let primary_done = arrivals
        .iter()
        .find(|a| a.model == PRIMARY)
        .and_then(|a| a.done_unix_ms);
    let overlapping = arrivals
        .iter()
        .filter(|a| a.model == FALLBACK)
        .any(|a| primary_done.is_none_or(|done| a.at_unix_ms < done));
    if overlapping {
        ctx.pass(
            "documented: the gateway fails over on its timeout while the primary call is still \
             running; consequence: two upstream calls for one intent (the seed calls a timed-out \
             attempt unknown, not failed)",
        );
        ctx.note("duplicate work: the fallback started while the primary was still working");
    } else {
        ctx.pass("no fallback ran while the primary was still working");
    }
    ctx.complete_only_if_genuine(&received)
}

async fn broken_stream(ctx: &Ctx, behaviour: Behaviour) -> Checked {
    ctx.script(PRIMARY, behaviour);
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(true).await;
    report_choice(ctx, &received);
    ctx.complete_only_if_genuine(&received)
}

async fn unreadable(ctx: &Ctx, body: Unreadable, stream: bool) -> Checked {
    ctx.script(PRIMARY, Behaviour::Unreadable { body });
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(stream).await;
    report_choice(ctx, &received);
    ctx.complete_only_if_genuine(&received)
}

async fn context_length(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::ContextLength);
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    ctx.complete_only_if_genuine(&received)
}

/// The primary on Anthropic's wire, behaving as `behaviour`: a complete answer is the
/// primary's when it answered, the fallback's when it failed plainly, and never a broken
/// stream presented as complete.
async fn anthropic(ctx: &Ctx, behaviour: Behaviour, stream: bool) -> Checked {
    let answers = behaviour == Behaviour::Answer;
    let fails_plainly = matches!(behaviour, Behaviour::Status { .. });
    ctx.script(PRIMARY, behaviour);
    ctx.expect(PRIMARY, 1);
    if answers {
        ctx.expect(FALLBACK, 0);
    }
    if fails_plainly {
        ctx.expect(FALLBACK, 1);
    }
    let received = ctx.ask_model(ANTHROPIC_PRIMARY, stream).await;
    report_choice(ctx, &received);
    match (answers, fails_plainly) {
        (true, _) => ctx.served_by(&received, PRIMARY),
        (_, true) => ctx.served_by(&received, FALLBACK),
        _ => ctx.complete_only_if_genuine(&received),
    }
}

async fn every_fallback_fails(ctx: &Ctx) -> Checked {
    for model in [PRIMARY, FALLBACK] {
        ctx.script(model, Behaviour::failing(503));
    }
    ctx.expect(PRIMARY, 1);
    ctx.expect(FALLBACK, 1);
    let received = ctx.ask(false).await;
    ctx.complete_only_if_genuine(&received)?;
    ctx.check(
        !(200..300).contains(&received.status),
        "the client gets an error status when every permitted model failed",
        || received.summary(),
    )
}

async fn accounting(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::failing(500));
    ctx.expect(PRIMARY, 1);
    ctx.expect(FALLBACK, 1);
    let received = ctx.ask(false).await;
    let (want, primary) = (prompt_tokens(FALLBACK), prompt_tokens(PRIMARY));
    let got = received.usage.and_then(|u| u.prompt_tokens);
    let usage = ctx.check(
        got == Some(want),
        format!(
            "the answer carries the fallback's usage ({want} prompt tokens; the primary's \
             upstream reports {primary})"
        ),
        || match got {
            None => format!("the answer carries no usage: {}", received.summary()),
            Some(n) if n == primary => format!("the usage is the primary's ({n} prompt tokens)"),
            Some(n) => format!("the usage says {n} prompt tokens, no upstream's count"),
        },
    );
    // Both are checked, so the evidence says which of the two the gateway gets wrong.
    let named = ctx.served_by(&received, FALLBACK);
    usage.and(named)
}

async fn content_filter(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::ContentFilter);
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    ctx.check(
        ctx.count(PRIMARY) == 1,
        "the primary's content-filter rejection is not retried (exactly 1 request)",
        || format!("the primary received {} requests", ctx.count(PRIMARY)),
    )?;
    if ctx.count(FALLBACK) > 0 {
        ctx.pass(
            "documented: the gateway fails over on the primary's content-filter rejection \
             (400); consequence: a request one provider's policy refused is sent to another, \
             whose policy may let it through",
        );
    } else {
        ctx.pass(format!(
            "documented: the gateway passes the content-filter rejection on (HTTP {}) without \
             failing over",
            received.status
        ));
    }
    ctx.complete_only_if_genuine(&received)
}

/// Slack on top of the attempts' timeouts: the gateway's own work and a loaded machine.
const BUDGET_SLACK: Duration = Duration::from_secs(2);

async fn wall_clock_budget(ctx: &Ctx) -> Checked {
    let timeout = ctx.env().timeout;
    let hang = (timeout * 4).as_millis() as u64;
    for model in [PRIMARY, FALLBACK] {
        ctx.script(model, Behaviour::HangUntilClosed { ms: hang });
    }
    // The primary and the fallback, each once and retried as often as the config says.
    let attempts = 2 * (1 + ctx.env().retries) as u32;
    let budget = timeout * attempts + BUDGET_SLACK;
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    ctx.check(
        u128::from(received.ms) <= budget.as_millis(),
        format!(
            "the client's whole call ends within {} ms ({attempts} attempts the config allows \
             x the {} ms timeout + {} ms); it took {} ms",
            budget.as_millis(),
            timeout.as_millis(),
            BUDGET_SLACK.as_millis(),
            received.ms
        ),
        || format!("it took {} ms: {}", received.ms, received.summary()),
    )?;
    ctx.complete_only_if_genuine(&received)
}

/// The `Retry-After` the rate-limited upstreams send, in seconds.
const RETRY_AFTER_S: u32 = 2;

async fn retry_after_honoured(ctx: &Ctx) -> Checked {
    // Both rate-limited: retrying one of them is the only way to an answer, so a gateway
    // that retries at all shows here whether it waits.
    for model in [PRIMARY, FALLBACK] {
        ctx.script(
            model,
            Behaviour::Status {
                status: 429,
                retry_after: Some(RETRY_AFTER_S),
            },
        );
    }
    let received = ctx.ask(false).await;
    report_choice(ctx, &received);
    ctx.settle().await;
    let wait = u64::from(RETRY_AFTER_S) * 1000;
    let gaps: Vec<(String, u64)> = (ctx.client_requests().iter())
        .flat_map(|r| r.gaps_by_upstream_ms.clone())
        .flat_map(|(m, gaps)| gaps.into_iter().map(move |g| (m.clone(), g)))
        .collect();
    let measured = if gaps.is_empty() {
        "no upstream was attempted twice".to_string()
    } else {
        let each: Vec<String> = (gaps.iter())
            .map(|(m, g)| format!("{m} after {g} ms"))
            .collect();
        format!("attempted again: {}", each.join(", "))
    };
    let early: Vec<String> = (gaps.iter())
        .filter(|(_, g)| *g < wait)
        .map(|(m, g)| format!("{m} was attempted again {g} ms after its 429 said Retry-After: {RETRY_AFTER_S} ({wait} ms)"))
        .collect();
    ctx.check(
        early.is_empty(),
        format!(
            "no upstream is attempted again sooner than its Retry-After ({wait} ms) says \
             ({measured})"
        ),
        || early.join("; "),
    )?;
    ctx.complete_only_if_genuine(&received)
}

/// How often the client asks in the scenarios that send a sequence.
const PACE: Duration = Duration::from_millis(200);
/// How long the flapping primary is down.
const FLAP_DOWN: Duration = Duration::from_millis(1_200);
/// How soon after it recovers the gateway must be back on the primary.
const RECOVERY_BOUND: Duration = Duration::from_secs(2);

/// Asks the primary every [`PACE`] (at once after a slower answer) until `deadline`, or
/// until `enough` says so of an answer and when it was sent.
async fn paced(
    ctx: &Ctx,
    deadline: Instant,
    mut enough: impl FnMut(u64, &Received) -> bool,
) -> Vec<(u64, Received)> {
    let mut sent = Vec::new();
    loop {
        let next = Instant::now() + PACE;
        let at = unix_ms();
        let received = ctx.ask(false).await;
        let stop = enough(at, &received);
        sent.push((at, received));
        if stop || Instant::now() >= deadline {
            return sent;
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
}

fn served_by_model(received: &Received, model: &str) -> bool {
    received.complete && received.served().is_some_and(|(m, _)| m == model)
}

async fn flapping_primary(ctx: &Ctx) -> Checked {
    let up_at = unix_ms() + FLAP_DOWN.as_millis() as u64;
    ctx.script(
        PRIMARY,
        Behaviour::Flapping {
            status: 503,
            up_at_unix_ms: up_at,
        },
    );
    let deadline = Instant::now() + FLAP_DOWN + RECOVERY_BOUND;
    let sent = paced(ctx, deadline, |at, r| {
        at >= up_at && served_by_model(r, PRIMARY)
    })
    .await;
    // A probe: an attempt on the primary for a request sent while it was down.
    let probes: usize = (ctx.client_requests().iter())
        .filter(|r| r.sent_unix_ms < up_at)
        .map(|r| r.attempts.get(PRIMARY).copied().unwrap_or(0))
        .sum();
    let (down, after): (Vec<_>, Vec<_>) = sent.iter().partition(|(at, _)| *at < up_at);
    let by_fallback = (down.iter())
        .filter(|(_, r)| served_by_model(r, FALLBACK))
        .count();
    ctx.pass(format!(
        "reported: while the primary was down ({} ms, {} requests every {} ms) {by_fallback} \
         were served by the fallback and {} were not; the primary was probed {probes} times",
        FLAP_DOWN.as_millis(),
        down.len(),
        PACE.as_millis(),
        down.len() - by_fallback,
    ));
    let back = (after.iter()).position(|(_, r)| served_by_model(r, PRIMARY));
    let bound = RECOVERY_BOUND.as_millis() as u64;
    let since = |i: usize| after[i].0.saturating_sub(up_at);
    ctx.check(
        back.is_some_and(|i| since(i) <= bound),
        format!(
            "back on the primary within {bound} ms of its recovery{}",
            back.map_or(String::new(), |i| format!(
                " (the request sent {} ms after it; {i} served elsewhere before)",
                since(i)
            ))
        ),
        || {
            let fallback = (after.iter())
                .filter(|(_, r)| served_by_model(r, FALLBACK))
                .count();
            format!(
                "none of the {} requests sent in the {bound} ms after it recovered was served \
                 by it ({fallback} by the fallback)",
                after.len()
            )
        },
    )?;
    for (_, received) in &sent {
        ctx.complete_only_if_genuine(received)?;
    }
    Ok(())
}

/// How many requests the client sends to the failing primary.
const HAMMER_REQUESTS: usize = 4;

async fn no_hammering(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::failing(503));
    let started = Instant::now();
    let mut count = 0;
    let sent = paced(ctx, started + PACE * 60, |_, _| {
        count += 1;
        count == HAMMER_REQUESTS
    })
    .await;
    ctx.settle().await;
    let window = started.elapsed().as_millis();
    let retries = ctx.env().retries;
    let per_request = 1 + retries;
    let requests = ctx.client_requests();
    let over: Vec<String> = (requests.iter().enumerate())
        .flat_map(|(i, r)| {
            (r.attempts.iter())
                .filter(|(_, n)| **n > per_request)
                .map(move |(m, n)| format!("request {}: {m} attempted {n} times", i + 1))
        })
        .collect();
    ctx.check(
        over.is_empty(),
        format!(
            "at most {per_request} attempt(s) on one upstream per client request (1 + the \
             config's {retries} retries)"
        ),
        || over.join("; "),
    )?;
    let bound = HAMMER_REQUESTS * per_request;
    let primary = ctx.count(PRIMARY);
    ctx.check(
        primary <= bound,
        format!(
            "at most {bound} attempts on the failing primary in the {window} ms window of \
             {HAMMER_REQUESTS} requests {} ms apart ({primary} came)",
            PACE.as_millis()
        ),
        || format!("the primary received {primary} requests"),
    )?;
    for (_, received) in &sent {
        ctx.complete_only_if_genuine(received)?;
    }
    Ok(())
}

/// Says what the gateway did: failed over, passed an error on, or handed over as
/// complete something no upstream finished (what `complete_only_if_genuine` fails).
fn report_choice(ctx: &Ctx, received: &super::client::Received) {
    ctx.note(choice(received));
}

/// What the gateway did, in a line.
pub(super) fn choice(received: &super::client::Received) -> String {
    match (received.complete, received.served()) {
        (true, Some((m, _))) => format!("the client got {m}'s complete answer"),
        (true, None) => format!(
            "the client got a broken answer presented as complete: {}",
            received.summary()
        ),
        (false, _) => format!("the client got no complete answer: {}", received.summary()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::client::Received;

    fn received(complete: bool, content: &str) -> Received {
        Received {
            status: 200,
            content: Some(content.to_string()),
            model: Some("primary-mock".into()),
            complete,
            done: complete,
            ms: 5,
            ..Received::unsent()
        }
    }

    /// The note says what the check found: a broken answer presented as complete is not
    /// "no complete answer".
    #[test]
    fn the_note_says_a_broken_answer_was_presented_as_complete() {
        let broken = super::choice(&received(true, "{\"id\": \"x\", \"cho"));
        assert!(
            broken.starts_with("the client got a broken answer presented as complete"),
            "{broken}"
        );
        let genuine = super::super::upstream::content("primary", "ctagabc");
        assert_eq!(
            super::choice(&received(true, &genuine)),
            "the client got primary's complete answer"
        );
        let none = super::choice(&received(false, ""));
        assert!(
            none.starts_with("the client got no complete answer"),
            "{none}"
        );
    }

    #[test]
    fn names_are_unique_kebab_case_and_not_the_orchestrator_scenarios() {
        let all = super::all();
        let names: BTreeSet<&str> = all.iter().map(|d| d.name).collect();
        assert_eq!(names.len(), all.len());
        let orchestrator: BTreeSet<&str> = crate::all().iter().map(|s| s.name()).collect();
        for name in names {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!orchestrator.contains(name), "{name}");
        }
    }
}
