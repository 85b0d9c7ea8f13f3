//! Driving one attempt: one upstream request, the deadline, the late window, and the
//! ledger transitions that follow from the outcome.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::App;
use super::upstream::{Outcome, request_body};
use crate::ledger::{Attempt, LedgerError};

/// Sends the attempt upstream and records how it ended. Runs detached from the request
/// that started it, so a client that hangs up cannot cancel a call half-way.
pub(crate) async fn drive(app: Arc<App>, attempt: Attempt, input: Value) {
    let deadline = instant_of(attempt.deadline_ms);
    // An outcome is worth recording for as long as a late answer would be.
    let until = deadline + app.config.late_window;
    let Some(provider) = app.config.providers.get(&attempt.provider) else {
        // Only configured providers are accepted, so this is a restart with another
        // configuration: nothing can be sent.
        record(&attempt.id, until, || {
            app.store.record_failure(&attempt.id, "connection_refused")
        })
        .await;
        return;
    };
    // Serialized once; the input itself is not kept while the provider works.
    let body = request_body(&provider.name, input);
    let call = app.upstream.call(&provider.base_url, body);
    tokio::pin!(call);
    let outcome = match tokio::time::timeout_at(deadline, &mut call).await {
        Ok(outcome) => Some(outcome),
        Err(_) => {
            record(&attempt.id, until, || {
                app.store.record_unknown(&attempt.id, "timeout")
            })
            .await;
            tokio::time::timeout_at(deadline + app.config.late_window, call)
                .await
                .ok()
        }
    };
    let Some(outcome) = outcome else {
        tracing::debug!(target: "conform::orchestrator", attempt = %attempt.id,
            "no answer within the late window; the attempt stays unknown");
        return;
    };
    tracing::debug!(target: "conform::orchestrator", attempt = %attempt.id, ?outcome, "provider answered");
    match outcome {
        Outcome::Result(value) => {
            record(&attempt.id, until, || {
                app.store.record_result(&attempt.id, &value)
            })
            .await;
        }
        Outcome::Failed(code) => {
            record(&attempt.id, until, || {
                app.store.record_failure(&attempt.id, &code)
            })
            .await;
        }
        Outcome::Unknown(code) => {
            record(&attempt.id, until, || {
                app.store.record_unknown(&attempt.id, &code)
            })
            .await;
        }
    }
}

/// Retries a ledger write at least five times and until `until` (the end of the late
/// window), so an outcome that arrives while the database is down is recorded when it
/// comes back. Every write is guarded by the attempt's state, so a write that did commit
/// before an error is not applied twice.
async fn record<T, F, Fut>(attempt_id: &str, until: Instant, mut write: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LedgerError>>,
{
    let mut pause = Duration::from_millis(50);
    let mut tries = 0;
    loop {
        tries += 1;
        match write().await {
            Ok(_) => return,
            Err(e) if tries < 5 || Instant::now() + pause < until => {
                tracing::warn!(target: "conform::orchestrator", attempt = %attempt_id, error = %e,
                    "cannot record the attempt's outcome; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::error!(target: "conform::orchestrator", attempt = %attempt_id, error = %e,
                    "cannot record the attempt's outcome; past its deadline the sweeper makes it unknown");
                return;
            }
        }
    }
}

/// The monotonic instant of a wall-clock deadline in Unix milliseconds.
fn instant_of(deadline_ms: i64) -> Instant {
    let left = deadline_ms.saturating_sub(crate::ledger::now_ms()).max(0);
    Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(0))
}
