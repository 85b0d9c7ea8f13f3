//! Driving one attempt: what it sends (decided before it is created), one upstream
//! request, the deadline, the late window, and the ledger transitions that follow from
//! the outcome.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;
use tokio::time::Instant;

use super::App;
use super::config::Provider;
use super::filed::Filed;
use super::problem::Problem;
use super::request::{self, Refusal};
use super::upstream::{Outcome, Request};
use crate::ledger::{Attempt, LedgerError};
use conform_config::Suite;

/// What an attempt sends, decided before it is created: a refusal then changes nothing.
pub(crate) enum Sending {
    /// The contract's pass-through: the job's input, serialized when the attempt starts.
    Contract,
    /// A provider file's request, built already.
    Ready(Request),
    /// Nothing can be sent (the provider file's key is not set): the attempt fails at
    /// once, as a request that never left does.
    Unsendable(&'static str),
}

impl App {
    /// What an attempt on `provider` sends for a job of `task` with `input`; `failover`
    /// when `provider` is not the job's own. A provider file's request is its adapter's
    /// with the file's settings ([`request`]); an input it cannot send is refused: 400
    /// `invalid_request` on the job's own provider, 403 `failover_not_allowed`
    /// (`parameter_not_proven`, naming the `parameter`) on a failover. A provider file
    /// edited since the process started is not sent on a failover (`provider_changed`).
    pub(crate) fn sending(
        &self,
        task: &str,
        provider: &Provider,
        input: &Value,
        failover: bool,
    ) -> Result<Sending, Problem> {
        let Some(filed) = &provider.filed else {
            return Ok(Sending::Contract);
        };
        let refused = |r: Refusal| refusal(&provider.name, task, r, failover);
        if failover {
            unchanged(filed, &provider.name, task)?;
        }
        let read = request::read(input).map_err(refused)?;
        let config = read.settings(filed, failover).map_err(refused)?;
        let suite = self.suite(task);
        if failover && suite.is_none() {
            return Err(denied(
                &provider.name,
                task,
                "unknown_suite",
                format!("the suite `{task}` does not load, so its evidence cannot be sent"),
            ));
        }
        let request = request::encode(filed, &config, &read, suite.as_ref()).map_err(refused)?;
        Ok(match (filed.key(), filed.credentials()) {
            (Err(_), _) => Sending::Unsendable("missing_api_key"),
            (_, Err(_)) => Sending::Unsendable("missing_credentials"),
            (Ok(_), Ok(_)) => Sending::Ready(request),
        })
    }

    /// The project's suite `task`, when it has one that loads.
    fn suite(&self, task: &str) -> Option<Suite> {
        let paths = self.config.project.as_ref()?;
        if conform_gate::allowlist::local::unknown_suite(paths, task).is_some() {
            return None;
        }
        match Suite::load(&paths.fixtures.join(task)) {
            Ok(suite) => Some(suite),
            Err(problems) => {
                tracing::warn!(target: "conform_serve::orchestrator", %task, %problems,
                    "the suite does not load: its schema is not asked for on a job's own provider, and no failover is sent");
                None
            }
        }
    }
}

/// 403 `provider_changed` when `providers/NAME.toml` no longer says what was loaded at
/// start: what would be sent is then not what the evidence, held to the file now, proves.
fn unchanged(filed: &Filed, provider: &str, task: &str) -> Result<(), Problem> {
    let changes = filed.changes_since_start();
    if changes.is_empty() {
        return Ok(());
    }
    Err(denied(
        provider,
        task,
        "provider_changed",
        format!(
            "{} changed since conform serve started ({}): restart conform serve to send what the file says now",
            filed.shown_file(),
            changes.join("; ")
        ),
    ))
}

fn denied(provider: &str, task: &str, reason: &'static str, detail: String) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "failover_not_allowed",
        format!("failover to `{provider}` for task `{task}`: {detail}"),
    )
    .with("reason", reason)
}

fn refusal(provider: &str, task: &str, refused: Refusal, failover: bool) -> Problem {
    let problem = match failover {
        true => denied(provider, task, "parameter_not_proven", refused.detail),
        false => Problem::invalid_request(format!(
            "the input cannot be sent to `{provider}` through its provider file: {}",
            refused.detail
        )),
    };
    problem.with("parameter", refused.member)
}

/// Sends the attempt upstream and records how it ended. Runs detached from the request
/// that started it, so a client that hangs up cannot cancel a call half-way.
pub(crate) async fn drive(app: Arc<App>, attempt: Attempt, input: Value, sending: Sending) {
    let deadline = instant_of(attempt.deadline_ms);
    // An outcome is worth recording for as long as a late answer would be.
    let until = deadline + app.config.late_window;
    let request = match (sending, app.config.providers.get(&attempt.provider)) {
        (Sending::Ready(request), _) => {
            drop(input);
            request
        }
        // Serialized once; the input itself is not kept while the provider works.
        (Sending::Contract, Some(provider)) => {
            Request::contract(&provider.name, &provider.base_url, input)
        }
        (Sending::Unsendable(code), _) => {
            record(&attempt.id, until, || {
                app.store.record_failure(&attempt.id, code)
            })
            .await;
            return;
        }
        // Only configured providers are accepted, so this is a restart with another
        // configuration: nothing can be sent.
        (Sending::Contract, None) => {
            record(&attempt.id, until, || {
                app.store.record_failure(&attempt.id, "connection_refused")
            })
            .await;
            return;
        }
    };
    let call = app.upstream.call(request);
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
        tracing::debug!(target: "conform_serve::orchestrator", attempt = %attempt.id,
            "no answer within the late window; the attempt stays unknown");
        return;
    };
    tracing::debug!(target: "conform_serve::orchestrator", attempt = %attempt.id, ?outcome, "provider answered");
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
                tracing::warn!(target: "conform_serve::orchestrator", attempt = %attempt_id, error = %e,
                    "cannot record the attempt's outcome; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::error!(target: "conform_serve::orchestrator", attempt = %attempt_id, error = %e,
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
