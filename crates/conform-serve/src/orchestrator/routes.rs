//! The endpoints of `conform.orchestrator/v1`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::error_handling::HandleErrorLayer;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::handler::Handler;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

use super::identity::{MAX_OWNER_LEN, idempotency_key, owner};
use super::intake;
use super::problem::Problem;
use super::question;
use super::{App, attempt, view};
use crate::ledger::fingerprint::fingerprint;
use crate::ledger::{AttemptCancel, Created, JobCancel, LedgerError, NewJob, Started};

/// The longest job or attempt id, task name or provider name accepted, in characters.
pub(crate) const MAX_NAME_LEN: usize = MAX_OWNER_LEN;

/// Every route. The work routes take an in-flight slot (tower's concurrency limit, with
/// load shedding: no slot free is 503 `overloaded` at once, never a queue); the two
/// with a body read it first (`intake`), so a body that is slow to arrive holds no
/// slot. `/healthz` and `/readyz` take no slot: a process that is busy is still alive.
pub(crate) fn router(app: Arc<App>) -> Router {
    let overload = Arc::clone(&app.overload);
    let admit = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(move |_: tower::BoxError| {
            let overload = Arc::clone(&overload);
            async move { overload.answer() }
        }))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::clone(
            &app.slots,
        )));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route(
            "/v1/jobs",
            post(create_job.layer(admit.clone()))
                .route_layer(from_fn_with_state(Arc::clone(&app), intake::job_body)),
        )
        .route("/v1/jobs/{id}", get(get_job.layer(admit.clone())))
        .route(
            "/v1/jobs/{id}/attempts",
            post(start_attempt.layer(admit.clone()))
                .route_layer(from_fn_with_state(Arc::clone(&app), intake::attempt_body)),
        )
        .route(
            "/v1/jobs/{id}/cancel",
            post(cancel_job.layer(admit.clone())),
        )
        .route(
            "/v1/attempts/{id}/cancel",
            post(cancel_attempt.layer(admit.clone())),
        )
        // Not in the contract: the failover gate's decision, for gateways to ask.
        .route("/v1/gate", get(question::gate.layer(admit)))
        .fallback(|| async { Problem::not_found("resource") })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this method is not allowed here",
            )
        })
        // `intake` bounds bodies; axum's own limit would answer in plain text.
        .layer(DefaultBodyLimit::disable())
        .layer(from_fn(intake::head_limit))
        .layer(from_fn_with_state(Arc::clone(&app), owner_ids))
        .with_state(app)
}

/// Before anything reads the owner: the configured choice of which bytes it may hold.
async fn owner_ids(
    State(app): State<Arc<App>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if app.config.limits.owner_ids == super::OwnerIds::PercentEncoded {
        super::identity::percent_encode_owner(request.headers_mut());
    }
    next.run(request).await
}

type Answer = Result<Response, Problem>;

/// Liveness: the process serves requests. It does not look at the database.
async fn healthz() -> Response {
    json(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

/// Readiness: the database takes writes, and the process is not shutting down.
async fn readyz(State(app): State<Arc<App>>) -> Answer {
    if app.draining.load(Ordering::Relaxed) {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the orchestrator is shutting down and takes no new work",
        ));
    }
    app.ready().await.map_err(unavailable)?;
    // Whether a failover's evidence is held to a project, or the file alone decides.
    let evidence = match &app.config.project {
        Some(_) => "verified",
        None => "unverified",
    };
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({"status": "ready", "database": "ok", "evidence": evidence,
            "providers": view::providers(&app.config.providers)}),
    ))
}

/// A job or attempt id from the path: percent-decoded UTF-8 of at most
/// [`MAX_NAME_LEN`] characters, else 400.
fn path_id(id: Result<Path<String>, PathRejection>) -> Result<String, Problem> {
    match id {
        Ok(Path(id)) if id.len() <= MAX_NAME_LEN => Ok(id),
        Ok(Path(_)) => Err(Problem::invalid_request(format!(
            "an id is at most {MAX_NAME_LEN} characters long"
        ))),
        Err(e) => Err(Problem::invalid_request(format!(
            "the id in the path cannot be read: {}",
            e.body_text()
        ))),
    }
}

pub(super) fn json(status: StatusCode, body: &Value) -> Response {
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
    tracing::error!(target: "conform_serve::orchestrator", error = %e, "ledger error");
    Problem::unavailable(format!("the ledger failed: {e}; retry with the same key"))
}

/// The body of `POST /v1/jobs`, validated.
struct JobRequest {
    task: String,
    provider: String,
    input: Value,
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
        Some(Value::String(s)) if s.len() > MAX_NAME_LEN => Err(Problem::invalid_request(format!(
            "`{name}` is at most {MAX_NAME_LEN} characters long"
        ))),
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(Problem::invalid_request(format!(
            "`{name}` must be a non-empty string"
        ))),
    }
}

impl App {
    /// The body as JSON, through the parser seam; what it refuses is 400.
    fn parse(&self, body: &[u8]) -> Result<Value, Problem> {
        self.parser
            .parse(body)
            .map_err(|e| Problem::invalid_request(e.to_string()))
    }

    fn configured(&self, provider: &str) -> Result<&super::Provider, Problem> {
        match self.config.providers.get(provider) {
            Some(configured) => Ok(configured),
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
    let value = app.parse(&body)?;
    // The bytes are not needed once parsed: only one copy of the request lives on.
    drop(body);
    let fingerprint = fingerprint(&value).map_err(|e| Problem::invalid_request(e.to_string()))?;
    let mut members = into_object(value)?;
    only_members(&members, &["task", "provider", "input"])?;
    let request = JobRequest {
        task: non_empty_string(&members, "task")?,
        provider: non_empty_string(&members, "provider")?,
        input: match members.remove("input") {
            Some(input @ Value::Object(_)) => input,
            _ => return Err(Problem::invalid_request("`input` must be a JSON object")),
        },
    };
    drop(members);
    let sending = app.sending(
        &request.task,
        app.configured(&request.provider)?,
        &request.input,
        false,
    )?;
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
        let mut created = task_app.store.create_job(&new).await?;
        drop(request);
        if let Created::New(job) = &mut created
            && let Some(first) = job.attempts.first()
        {
            // The answer does not show the input: the attempt takes it, no copy made.
            let input = std::mem::take(&mut job.input);
            tokio::spawn(attempt::drive(
                task_app.clone(),
                first.clone(),
                input,
                sending,
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
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let owner = owner(&headers)?;
    let id = path_id(id)?;
    match app.store.job(&owner, &id).await.map_err(unavailable)? {
        Some(job) => Ok(json(StatusCode::OK, &view::job(&job))),
        None => Err(Problem::not_found("job")),
    }
}

async fn start_attempt(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Answer {
    let owner = owner(&headers)?;
    let id = path_id(id)?;
    let Some(job) = app.store.job(&owner, &id).await.map_err(unavailable)? else {
        return Err(Problem::not_found("job"));
    };
    let members = into_object(app.parse(&body)?)?;
    only_members(&members, &["provider"])?;
    let provider = non_empty_string(&members, "provider")?;
    let configured = app.configured(&provider)?;
    if job.completed_by.is_some() {
        return Err(Problem::job_completed());
    }
    if job.cancelled_ms.is_some() {
        return Err(Problem::job_cancelled());
    }
    if let Some(open) = app.store.blocking_attempt(&job) {
        return Err(Problem::attempt_in_progress(&open.id));
    }
    if provider != job.provider {
        // Read at decision time, failing closed.
        if let Err(denial) = app
            .gate
            .permits(&job.task, &provider, time::OffsetDateTime::now_utc())
            .await
        {
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
    // What is sent is decided before the attempt exists: a refusal changes nothing.
    let sending = app.sending(&job.task, configured, &job.input, provider != job.provider)?;
    drop(job);
    // The checks above read a snapshot; the ledger checks again atomically.
    let task_app = app.clone();
    let started = tokio::spawn(async move {
        let started = task_app
            .store
            .start_attempt(&owner, &id, &provider, task_app.config.attempt_timeout)
            .await?;
        if let Started::Started { attempt, input } = &started {
            tokio::spawn(attempt::drive(
                task_app.clone(),
                attempt.clone(),
                input.clone(),
                sending,
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
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let owner = owner(&headers)?;
    let id = path_id(id)?;
    match app
        .store
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
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let owner = owner(&headers)?;
    let id = path_id(id)?;
    match app
        .store
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
