//! The endpoints of `conform.orchestrator/v1`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value};

use super::identity::{idempotency_key, owner};
use super::problem::Problem;
use super::{App, attempt, gate, view};
use crate::broken::{self, Broken};
use crate::ledger::fingerprint::{fingerprint, parse_strict};
use crate::ledger::{AttemptCancel, Created, JobCancel, LedgerError, NewJob, Started};

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/jobs", post(create_job))
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/jobs/{id}/attempts", post(start_attempt))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/attempts/{id}/cancel", post(cancel_attempt))
        .fallback(|| async { Problem::not_found("resource") })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this method is not allowed here",
            )
        })
        .with_state(app)
}

type Answer = Result<Response, Problem>;

async fn healthz() -> Response {
    json(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

fn json(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

fn unavailable(e: LedgerError) -> Problem {
    tracing::error!(target: "conform::orchestrator", error = %e, "ledger error");
    Problem::unavailable(format!("the ledger failed: {e}; retry with the same key"))
}

/// The body of `POST /v1/jobs`, validated.
struct JobRequest {
    task: String,
    provider: String,
    input: Value,
}

fn parse(body: &[u8]) -> Result<Value, Problem> {
    parse_strict(body).map_err(|e| Problem::invalid_request(e.to_string()))
}

fn into_object(value: Value) -> Result<Map<String, Value>, Problem> {
    match value {
        Value::Object(members) => Ok(members),
        _ => Err(Problem::invalid_request("the body must be a JSON object")),
    }
}

fn only_members(members: &Map<String, Value>, allowed: &[&str]) -> Result<(), Problem> {
    match members.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(extra) => Err(Problem::invalid_request(format!(
            "unknown member `{extra}`; the body has only {}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

fn non_empty_string(members: &Map<String, Value>, name: &str) -> Result<String, Problem> {
    match members.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(Problem::invalid_request(format!(
            "`{name}` must be a non-empty string"
        ))),
    }
}

impl App {
    fn configured(&self, provider: &str) -> Result<(), Problem> {
        match self.config.providers.get(provider) {
            Some(_) => Ok(()),
            None => Err(Problem::invalid_request(format!(
                "provider `{provider}` is not configured; configured: {}",
                self.config.providers.names().join(", ")
            ))),
        }
    }
}

async fn create_job(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Answer {
    let owner = owner(&headers)?;
    let key = idempotency_key(&headers)?;
    let value = parse(&body)?;
    let fingerprint = fingerprint(&value).map_err(|e| Problem::invalid_request(e.to_string()))?;
    let members = into_object(value)?;
    only_members(&members, &["task", "provider", "input"])?;
    let request = JobRequest {
        task: non_empty_string(&members, "task")?,
        provider: non_empty_string(&members, "provider")?,
        input: match members.get("input") {
            Some(input @ Value::Object(_)) => input.clone(),
            _ => return Err(Problem::invalid_request("`input` must be a JSON object")),
        },
    };
    app.configured(&request.provider)?;
    // Detached: once the job is in the ledger, its first attempt must be sent even if
    // the client hangs up now.
    let task_app = app.clone();
    let created = tokio::spawn(async move {
        let new = NewJob {
            owner: &owner,
            idempotency_key: &key,
            fingerprint: &fingerprint,
            task: &request.task,
            provider: &request.provider,
            input: &request.input,
            attempt_timeout: task_app.config.attempt_timeout,
        };
        let created = task_app.ledger.create_job(&new).await?;
        if let Created::New(job) = &created
            && let Some(first) = job.attempts.first()
        {
            tokio::spawn(attempt::drive(
                task_app.clone(),
                first.clone(),
                job.input.clone(),
            ));
        }
        Ok::<_, LedgerError>(created)
    })
    .await
    .map_err(|e| Problem::unavailable(format!("job creation was interrupted: {e}")))?
    .map_err(unavailable)?;
    match created {
        Created::New(job) => {
            let mut response = json(StatusCode::CREATED, &view::job(&job));
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/jobs/{}", job.id)) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        Created::Replayed(job) => {
            let mut response = json(StatusCode::OK, &view::job(&job));
            response
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(response)
        }
        Created::KeyReused { job_id } => Err(Problem::new(
            StatusCode::CONFLICT,
            "idempotency_key_reused",
            format!(
                "this Idempotency-Key is bound to job {job_id}, created by a different request; \
                 use a new key for a new request"
            ),
        )),
    }
}

async fn get_job(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Answer {
    let owner = owner(&headers)?;
    match app.ledger.job(&owner, &id).await.map_err(unavailable)? {
        Some(job) => Ok(json(StatusCode::OK, &view::job(&job))),
        None => Err(Problem::not_found("job")),
    }
}

async fn start_attempt(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Answer {
    let owner = owner(&headers)?;
    let Some(job) = app.ledger.job(&owner, &id).await.map_err(unavailable)? else {
        return Err(Problem::not_found("job"));
    };
    let members = into_object(parse(&body)?)?;
    only_members(&members, &["provider"])?;
    let provider = non_empty_string(&members, "provider")?;
    app.configured(&provider)?;
    if job.completed_by.is_some() {
        return Err(Problem::job_completed());
    }
    if job.cancelled_ms.is_some() {
        return Err(Problem::job_cancelled());
    }
    if let Some(open) = job.open_attempt()
        // BROKEN VARIANT (tests only): no open-attempt guard.
        && !broken::is(Broken::NoOpenAttemptGuard)
    {
        return Err(Problem::attempt_in_progress(&open.id));
    }
    // BROKEN VARIANT (tests only): failover without the allowlist.
    if provider != job.provider && !broken::is(Broken::AllowlistIgnored) {
        // Read at decision time, failing closed.
        if let Err(denial) = gate::permits(
            &app.config.allowlist,
            &job.task,
            &provider,
            time::OffsetDateTime::now_utc(),
            app.config.project.as_ref(),
        ) {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "failover_not_allowed",
                format!(
                    "failover to `{provider}` for task `{}`: {}",
                    job.task, denial.detail
                ),
            )
            .with("reason", denial.reason.code()));
        }
    }
    // The checks above read a snapshot; the ledger checks again atomically.
    let task_app = app.clone();
    let started = tokio::spawn(async move {
        let started = task_app
            .ledger
            .start_attempt(&owner, &id, &provider, task_app.config.attempt_timeout)
            .await?;
        if let Started::Started { attempt, input } = &started {
            tokio::spawn(attempt::drive(
                task_app.clone(),
                attempt.clone(),
                input.clone(),
            ));
        }
        Ok::<_, LedgerError>(started)
    })
    .await
    .map_err(|e| Problem::unavailable(format!("the attempt was interrupted: {e}")))?
    .map_err(unavailable)?;
    match started {
        Started::Started { attempt, .. } => {
            Ok(json(StatusCode::ACCEPTED, &view::attempt(&attempt)))
        }
        Started::NotFound => Err(Problem::not_found("job")),
        Started::JobCompleted => Err(Problem::job_completed()),
        Started::JobCancelled => Err(Problem::job_cancelled()),
        Started::InProgress { attempt_id } => Err(Problem::attempt_in_progress(&attempt_id)),
    }
}

async fn cancel_attempt(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Answer {
    let owner = owner(&headers)?;
    match app
        .ledger
        .cancel_attempt(&owner, &id)
        .await
        .map_err(unavailable)?
    {
        AttemptCancel::Cancelled { attempt, .. } | AttemptCancel::AlreadyCancelled(attempt) => {
            Ok(json(StatusCode::OK, &view::attempt(&attempt)))
        }
        AttemptCancel::Terminal(attempt) => Err(Problem::new(
            StatusCode::CONFLICT,
            "attempt_terminal",
            format!(
                "the attempt is {}: only a starting or unknown attempt can be cancelled",
                attempt.state
            ),
        )),
        AttemptCancel::NotFound => Err(Problem::not_found("attempt")),
    }
}

async fn cancel_job(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Answer {
    let owner = owner(&headers)?;
    match app
        .ledger
        .cancel_job(&owner, &id)
        .await
        .map_err(unavailable)?
    {
        JobCancel::Cancelled { job, .. } | JobCancel::AlreadyCancelled(job) => {
            Ok(json(StatusCode::OK, &view::job(&job)))
        }
        JobCancel::Completed => Err(Problem::job_completed()),
        JobCancel::NotFound => Err(Problem::not_found("job")),
    }
}
