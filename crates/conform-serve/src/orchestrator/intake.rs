//! Taking a request in: the size of its headers, then its body, read once into a single
//! buffer within the body timeout, the size limit and the process-wide budget of bodies
//! in memory.
//!
//! The body is read before the request takes one of the in-flight slots (see
//! `routes`), so a client that stalls in its body holds a connection and a few bytes,
//! never a slot. Its bytes are charged to the budget as they arrive, not as the
//! `Content-Length` announces them, so announcing a large body and sending nothing costs
//! nothing; the charge is kept until the answer is ready, which covers what the body
//! becomes while it is handled (its parsed JSON, the stored input).
//!
//! A request refused before its body is read (401, 400, 413, or 503 over the budget) is
//! answered at once, and the rest of its body is then read and thrown away in the
//! background, up to twice the body limit and within the body timeout: a client still
//! sending would otherwise have its connection reset under it and might never see the
//! answer (the "lingering close" of HTTP servers). The bytes thrown away are not kept.

use std::sync::Arc;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::App;
use super::config::Limits;
use super::identity::{idempotency_key, owner};
use super::problem::Problem;

/// Request headers beyond this many bytes (names, values and their separators) are
/// answered 431 `headers_too_large`. hyper refuses a head over [`HEAD_BUFFER_BYTES`]
/// itself, before the application sees it, with an empty 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// hyper's read buffer per connection: the largest head it parses, and how much of a
/// body it holds before the application takes it.
pub const HEAD_BUFFER_BYTES: usize = 64 * 1024;

/// The first allocation for a body whose length is not announced.
const FIRST_CHUNK: usize = 16 * 1024;

/// The budget of request bodies in memory, in bytes, shared by every connection.
pub(crate) struct Budget(Arc<Semaphore>);

impl Budget {
    pub(crate) fn new(bytes: usize) -> Budget {
        Budget(Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))))
    }

    /// Bytes still free.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.0.available_permits()
    }

    fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(bytes).ok()?;
        Arc::clone(&self.0).try_acquire_many_owned(n).ok()
    }
}

/// The body intake seam: reading one request body into memory. [`BudgetedIntake`] is
/// the real one. Any other must still keep memory within the limits and never let a
/// client that stalls in its body hold up the others: the robustness scenarios fail an
/// orchestrator that does either.
pub trait BodyIntake: Send + Sync + 'static {
    /// The body's bytes and their charge against the memory budget, or the refusal: 413
    /// over `max` bytes, 503 over the budget, 408 past the body timeout, 400 when the
    /// body breaks off. `declared` is its `Content-Length`, when it has one.
    fn read<'a>(
        &'a self,
        frames: &'a mut BodyDataStream,
        declared: Option<u64>,
        max: usize,
    ) -> BoxFuture<'a, Result<Received, Problem>>;
}

/// A body read whole, and its charge against the budget, held until it is dropped.
pub struct Received {
    /// The whole body.
    pub bytes: Bytes,
    charge: Option<OwnedSemaphorePermit>,
}

/// Reads each body on its own, charging the process-wide budget of bodies in memory as
/// its bytes arrive.
pub struct BudgetedIntake {
    limits: Limits,
    budget: Budget,
}

impl BudgetedIntake {
    /// The budget is `limits.body_memory_bytes`.
    pub fn new(limits: Limits) -> BudgetedIntake {
        BudgetedIntake {
            limits,
            budget: Budget::new(limits.body_memory_bytes),
        }
    }
}

impl BodyIntake for BudgetedIntake {
    fn read<'a>(
        &'a self,
        frames: &'a mut BodyDataStream,
        declared: Option<u64>,
        max: usize,
    ) -> BoxFuture<'a, Result<Received, Problem>> {
        Box::pin(async move {
            let (bytes, charge) = read(frames, declared, max, &self.limits, &self.budget).await?;
            Ok(Received { bytes, charge })
        })
    }
}

/// 431 for headers over [`MAX_HEADER_BYTES`], on every route.
pub(crate) async fn head_limit(request: Request, next: Next) -> Response {
    let size = header_bytes(request.headers());
    if size > MAX_HEADER_BYTES {
        return Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("the request headers are {size} bytes; at most {MAX_HEADER_BYTES} are read"),
        )
        .into_response();
    }
    next.run(request).await
}

/// Headers as they were sent: `name: value\r\n` each.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// `POST /v1/jobs`: the owner (401) and the key (400) come first, as the contract
/// orders, then the body.
pub(crate) async fn job_body(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(problem) = owner(request.headers()).and_then(|_| idempotency_key(request.headers()))
    {
        linger(request.into_body().into_data_stream(), &app.config.limits);
        return problem.into_response();
    }
    receive(&app, request, next).await
}

/// `POST /v1/jobs/{id}/attempts`: the owner (401) first, then the body.
pub(crate) async fn attempt_body(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(problem) = owner(request.headers()) {
        linger(request.into_body().into_data_stream(), &app.config.limits);
        return problem.into_response();
    }
    receive(&app, request, next).await
}

/// Reads what is left of a refused request's body and throws it away, in the
/// background: at most twice the body limit, within the body timeout.
fn linger(mut frames: BodyDataStream, limits: &Limits) {
    let most = limits.max_body_bytes.saturating_mul(2);
    let within = limits.body_timeout;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(within, async {
            let mut seen = 0usize;
            while let Some(Ok(chunk)) = frames.next().await {
                seen = seen.saturating_add(chunk.len());
                if seen > most {
                    break;
                }
            }
        })
        .await;
    });
}

/// Reads the body into one buffer, then hands the request on with that buffer as its
/// body; the budget's charge is held until the answer is ready.
async fn receive(app: &App, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let limits = app.config.limits;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let max = limits.max_body_bytes;
    let mut frames = body.into_data_stream();
    if declared.is_some_and(|n| n > max as u64) {
        linger(frames, &limits);
        return too_large(&limits).into_response();
    }
    let received = app.intake.read(&mut frames, declared, max).await;
    let Received { bytes, charge } = match received {
        Ok(received) => received,
        Err(problem) => {
            // A body too large or over the budget is still arriving: let it; a body
            // that timed out or broke is not worth waiting for.
            if matches!(problem.code, "body_too_large" | "overloaded") {
                linger(frames, &limits);
            }
            return problem.into_response();
        }
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    drop(charge);
    response
}

fn too_large(limits: &Limits) -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!(
            "the request body is over {} bytes (the limit is --max-body-bytes / CONFORM_MAX_BODY_BYTES)",
            limits.max_body_bytes
        ),
    )
}

fn over_budget(limits: &Limits) -> Problem {
    Problem::overloaded(format!(
        "request bodies in memory would exceed {} bytes; retry after the Retry-After delay",
        limits.body_memory_bytes
    ))
}

/// The body's bytes and the budget's charge for them.
async fn read(
    frames: &mut BodyDataStream,
    declared: Option<u64>,
    max: usize,
    limits: &Limits,
    budget: &Budget,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Problem> {
    let deadline = tokio::time::Instant::now() + limits.body_timeout;
    let mut buf: Vec<u8> = Vec::new();
    let mut charge: Option<OwnedSemaphorePermit> = None;
    let mut charged = 0usize;
    loop {
        let chunk = match tokio::time::timeout_at(deadline, frames.next()).await {
            Err(_) => {
                return Err(Problem::request_timeout(format!(
                    "the request body did not arrive within {} ms",
                    limits.body_timeout.as_millis()
                )));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(Problem::invalid_request(format!(
                    "the request body could not be read: {e}"
                ))
                .closing());
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        let needed = buf.len().saturating_add(chunk.len());
        if needed > max {
            return Err(too_large(limits));
        }
        if needed > buf.capacity() {
            // The announced length at once; without one, doubling. Charged before it
            // is allocated.
            let target = match declared {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX).max(needed),
                None => needed.max(buf.capacity() * 2).max(FIRST_CHUNK),
            }
            .min(max);
            let more = target.saturating_sub(charged);
            if more > 0 {
                let Some(permit) = budget.take(more) else {
                    return Err(over_budget(limits));
                };
                match &mut charge {
                    Some(held) => held.merge(permit),
                    None => charge = Some(permit),
                }
                charged = target;
            }
            buf.reserve_exact(target - buf.len());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((Bytes::from(buf), charge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            max_body_bytes: 1000,
            body_memory_bytes: 1500,
            body_timeout: Duration::from_millis(200),
            ..Limits::default()
        }
    }

    fn chunks(parts: Vec<&'static [u8]>) -> Body {
        Body::from_stream(futures::stream::iter(
            parts
                .into_iter()
                .map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p))),
        ))
    }

    #[tokio::test]
    async fn a_body_is_read_once_and_charged_until_dropped() {
        let budget = Budget::new(1500);
        let (bytes, charge) = read(
            &mut chunks(vec![b"ab", b"cd"]).into_data_stream(),
            Some(4),
            1000,
            &limits(),
            &budget,
        )
        .await
        .unwrap();
        assert_eq!(&bytes[..], b"abcd");
        assert_eq!(budget.free(), 1496);
        drop(charge);
        assert_eq!(budget.free(), 1500);
    }

    #[tokio::test]
    async fn over_the_limit_is_413_and_over_the_budget_503() {
        let budget = Budget::new(1500);
        let big: &'static [u8] = Box::leak(vec![b'x'; 1001].into_boxed_slice());
        let e = read(
            &mut chunks(vec![big]).into_data_stream(),
            None,
            1000,
            &limits(),
            &budget,
        )
        .await
        .unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (413, "body_too_large"));
        let held = budget.take(1000).unwrap();
        let e = read(
            &mut chunks(vec![&big[..900]]).into_data_stream(),
            Some(900),
            1000,
            &limits(),
            &budget,
        )
        .await
        .unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (503, "overloaded"));
        drop(held);
        assert_eq!(budget.free(), 1500, "a refused body leaves no charge");
    }

    #[tokio::test]
    async fn a_body_that_stalls_is_408() {
        let budget = Budget::new(1500);
        let stalled =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let e = read(
            &mut stalled.into_data_stream(),
            Some(10),
            1000,
            &limits(),
            &budget,
        )
        .await
        .unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (408, "request_timeout"));
        assert_eq!(budget.free(), 1500, "announcing a body costs nothing");
    }
}
