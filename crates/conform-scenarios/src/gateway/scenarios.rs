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

use futures::future::BoxFuture;

use super::config::{ANTHROPIC_PRIMARY, FALLBACK, PRIMARY, UNREACHABLE};
use super::ctx::Ctx;
use super::stream_faults;
use super::upstream::{Behaviour, Unreadable};
use crate::ctx::Checked;

/// One gateway scenario.
#[derive(Clone, Copy)]
pub struct Def {
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
pub fn all() -> Vec<Def> {
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
        |ctx| anthropic(
            ctx,
            Behaviour::Status {
                status: 529,
                retry_after: None
            },
            false
        )
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
];

async fn primary_answers(ctx: &Ctx, stream: bool) -> Checked {
    ctx.expect(PRIMARY, 1);
    ctx.expect(FALLBACK, 0);
    let received = ctx.ask(stream).await;
    ctx.served_by(&received, PRIMARY)
}

async fn failover_on(ctx: &Ctx, status: u16) -> Checked {
    ctx.script(
        PRIMARY,
        Behaviour::Status {
            status,
            retry_after: None,
        },
    );
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
        ctx.script(
            model,
            Behaviour::Status {
                status: 503,
                retry_after: None,
            },
        );
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
            finish_reason: None,
            done: complete,
            error_event: false,
            transfer_error: None,
            ms: 5,
            first_byte_ms: None,
            usage: None,
            exchange: None,
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
