//! The stream fault classes of issue 45: a slow first token, a stall after the stream
//! started, a malformed event in a stream that otherwise completes, a stream that ends
//! cleanly without its terminator, and a fallback that refuses what a gateway sends it
//! after a failure part way through a stream (an assistant prefill).
//!
//! The silences last three gateway timeouts, well past any timeout the gateway was
//! configured with; an upstream stops waiting as soon as the gateway closes its
//! connection, or once the client's call and the probe are over (a gateway that keeps
//! the upstream's connection open after giving up would otherwise hold the run for the
//! whole silence): a gateway that gives up early costs the run no more time than it took.
//! After a slow or stalled stream, and a malformed one, a probe (an ordinary request with
//! its own tag) shows the gateway still answers.
//!
//! The prefill's wire: the fallback refuses a prefill on whichever wire the gateway
//! calls it with (`WireServer::prefill_rejected`: on Anthropic's Messages wire the
//! recorded 400 byte for byte, on OpenAI Chat the same words in OpenAI's error shape, as
//! an OpenAI-compatible endpoint in front of such a model answers). The generated
//! configs reach the fallback on OpenAI Chat, where a continuation is exactly a request
//! whose last message is the assistant's: what a gateway that resumes a failed stream
//! sends (LiteLLM's mid-stream fallback on its Responses path adds the partial answer as
//! an assistant message; its chat path, in 1.108.7, does not fail over once content was
//! streamed).

use std::time::Duration;

use serde_json::json;

use conform_wire::provider::server::PREFILL_UNSUPPORTED;

use super::client::Received;
use super::config::{FALLBACK, PRIMARY};
use super::ctx::Ctx;
use super::upstream::Behaviour;
use crate::ctx::Checked;
use crate::mock::unix_ms;

/// How long a scripted silence lasts: three gateway timeouts.
fn silence(ctx: &Ctx) -> Duration {
    ctx.env().timeout * 3
}

/// The bound on a call whose upstream stalls: the gateway's timeout twice (once for the
/// answer to start, once for the stall to be noticed) plus a second of slack. A gateway
/// without a stall timeout holds the client for the whole stall, three timeouts.
pub(crate) fn stall_bound(timeout: Duration) -> Duration {
    timeout * 2 + Duration::from_secs(1)
}

/// How soon after its upstream's stream ended a stream without a terminator must reach
/// its end at the client: a second, plus half a second of the gateway's own latency on
/// a loaded machine; far below any timeout a gateway would wait instead.
pub(crate) const FINALISED_WITHIN: Duration = Duration::from_millis(1500);

/// Notes when the client's call got its first byte and ended, and whether the fallback
/// was called.
fn report_timing(ctx: &Ctx, received: &Received) {
    ctx.note(format!(
        "the client's call: first byte {}, ended after {} ms; the fallback was {}",
        received
            .first_byte_ms
            .map_or("never".to_string(), |ms| format!("after {ms} ms")),
        received.ms,
        match ctx.count(FALLBACK) {
            0 => "not called".to_string(),
            n => format!("called ({n} request(s))"),
        }
    ));
    ctx.note(super::scenarios::choice(received));
}

/// One more ordinary request, with a tag of its own, after the fault: the gateway is
/// still alive and answers it.
async fn probe(ctx: &Ctx) -> Checked {
    let tag = format!("{}probe", ctx.tag);
    ctx.note(format!("the probe ({tag}), an ordinary request, follows"));
    let received = ctx.ask_tagged(PRIMARY, &tag, false, &[]).await;
    ctx.check(
        received.complete && received.served().is_some_and(|(_, t)| t == tag),
        "the gateway is still alive: the probe (an ordinary request of its own) is answered",
        || format!("the probe got: {}", received.summary()),
    )
}

/// The first of `checks` that failed, every one of them having been recorded.
fn all(checks: impl IntoIterator<Item = Checked>) -> Checked {
    checks.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

/// Headers at once, the first event after three timeouts, then the whole stream.
pub(crate) async fn slow_first_token(ctx: &Ctx) -> Checked {
    let ms = silence(ctx).as_millis() as u64;
    ctx.script(PRIMARY, Behaviour::SlowFirstToken { ms });
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(true).await;
    report_timing(ctx, &received);
    if received.complete && received.served().is_some_and(|(m, _)| m == PRIMARY) {
        ctx.note(format!(
            "the gateway waited out the primary's {ms} ms silence before the first token"
        ));
    }
    let genuine = ctx.complete_only_if_genuine(&received);
    let alive = probe(ctx).await;
    ctx.env().board.release(&ctx.tag);
    all([genuine, alive])
}

/// Part of the stream, three timeouts of silence, then the connection closed unfinished.
pub(crate) async fn stall_mid_stream(ctx: &Ctx) -> Checked {
    let stall = silence(ctx);
    ctx.script(
        PRIMARY,
        Behaviour::Stall {
            ms: stall.as_millis() as u64,
        },
    );
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(true).await;
    report_timing(ctx, &received);
    let genuine = ctx.complete_only_if_genuine(&received);
    let bound = stall_bound(ctx.env().timeout);
    let prompt = ctx.check(
        u128::from(received.ms) <= bound.as_millis(),
        format!(
            "the client's call ends within {} ms (twice the gateway's timeout, plus 1 s): a \
             stalled stream is given up on",
            bound.as_millis()
        ),
        || {
            let held = if u128::from(received.ms) >= stall.as_millis() {
                "the gateway has no stall (inter-chunk) timeout: it held the client for the \
                 whole stall"
            } else {
                "the gateway gave up on the stall too late"
            };
            format!(
                "{held} ({} ms; the upstream was silent for {} ms): {}",
                received.ms,
                stall.as_millis(),
                received.summary()
            )
        },
    );
    let alive = probe(ctx).await;
    ctx.env().board.release(&ctx.tag);
    all([genuine, prompt, alive])
}

/// The whole stream with one torn event in its middle: the whole genuine answer, or no
/// complete answer; never altered content presented as complete.
pub(crate) async fn malformed_event_mid_stream(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::MalformedEvent);
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(true).await;
    report_timing(ctx, &received);
    let genuine = ctx.complete_only_if_genuine(&received);
    all([genuine, probe(ctx).await])
}

/// The whole stream, finish reason and usage included, ended cleanly without `[DONE]`:
/// finalised promptly, with its usage.
pub(crate) async fn stream_without_done(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::NoTerminator);
    ctx.expect(PRIMARY, 1);
    // As a client that wants the usage of a stream asks for it.
    let usage = [("stream_options", json!({"include_usage": true}))];
    let received = ctx.ask_tagged(PRIMARY, &ctx.tag, true, &usage).await;
    let ended = unix_ms();
    report_timing(ctx, &received);
    ctx.note(format!(
        "the stream the client got {} with [DONE]; usage {}",
        if received.done {
            "ended"
        } else {
            "did not end"
        },
        received
            .usage
            .as_ref()
            .map_or("none".to_string(), |u| serde_json::to_string(u)
                .unwrap_or_default())
    ));
    let genuine = ctx.complete_only_if_genuine(&received);
    let whole = ctx.check(
        received.status == 200
            && received.transfer_error.is_none()
            && received.finish_reason.is_some()
            && received.served().is_some_and(|(_, t)| t == ctx.tag),
        "the client gets the whole answer with its finish reason",
        || received.summary(),
    );
    let carried = ctx.check(
        received.usage.is_some(),
        "the answer carries its usage",
        || format!("no usage reached the client: {}", received.summary()),
    );
    let upstream_end = (ctx.env().board.arrivals(&ctx.tag).iter())
        .filter_map(|a| a.done_unix_ms)
        .max()
        .unwrap_or(ended);
    let lag = ended.saturating_sub(upstream_end);
    let prompt = ctx.check(
        u128::from(lag) <= FINALISED_WITHIN.as_millis(),
        format!(
            "the stream is finalised promptly: the client's call ends within {} ms of the \
             upstream's stream ending",
            FINALISED_WITHIN.as_millis()
        ),
        || {
            format!(
                "the client's call ended {lag} ms after the upstream's stream did (waiting for \
                 a [DONE] that never comes, or for a timeout)"
            )
        },
    );
    all([genuine, whole, carried, prompt])
}

/// The primary fails part way through its stream; the fallback refuses a prefill and
/// answers anything else. The caller must not end with that refusal.
pub(crate) async fn fallback_rejects_prefill(ctx: &Ctx) -> Checked {
    ctx.script(PRIMARY, Behaviour::ErrorEvent);
    ctx.script(FALLBACK, Behaviour::RejectsPrefill);
    ctx.expect(PRIMARY, 1);
    let received = ctx.ask(true).await;
    report_timing(ctx, &received);
    let refused = ctx.env().board.refused_prefills(FALLBACK, &ctx.tag);
    if refused > 0 {
        ctx.note(format!(
            "the gateway sent the fallback a prefill (the partial answer as the assistant's \
             turn) {refused} time(s), and the fallback refused it with a 400"
        ));
    }
    let shown = (received.exchange.as_ref())
        .map(|x| x.answer.to_string())
        .unwrap_or_default();
    let ended_with_refusal = !received.complete
        && (shown.contains(PREFILL_UNSUPPORTED) || (refused > 0 && received.status == 400));
    let genuine = ctx.complete_only_if_genuine(&received);
    let not_refusal = ctx.check(
        !ended_with_refusal,
        "the caller does not receive the fallback's refusal of a prefill as the final error",
        || {
            format!(
                "the client's final error is the fallback's 400 refusing the gateway's \
                 assistant prefill (\"{PREFILL_UNSUPPORTED}\"): {}",
                received.summary()
            )
        },
    );
    all([genuine, not_refusal])
}
