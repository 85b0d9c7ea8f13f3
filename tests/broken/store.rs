//! Broken job stores: each a decorator of the real store (the ledger) that breaks one
//! rule of the contract and passes everything else through.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use conform_serve::ledger::{
    Attempt, AttemptCancel, AttemptState, Backend, Created, Finished, Job, JobCancel, JobState,
    LedgerError, NewJob, Started, Transition,
};
use conform_serve::orchestrator::Providers;
use conform_serve::orchestrator::store::JobStore;
use conform_serve::orchestrator::upstream::{Outcome, Request, Upstream};
use futures::future::BoxFuture;
use serde_json::Value;

use super::db::Db;

/// A store that changes some operations of the one it wraps. Every method passes
/// through unless a variant overrides it.
pub trait Decorator: Send + Sync + 'static {
    fn inner(&self) -> &dyn JobStore;

    fn create_job<'a>(
        &'a self,
        new: &'a NewJob<'a>,
    ) -> BoxFuture<'a, Result<Created, LedgerError>> {
        self.inner().create_job(new)
    }

    fn job<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, LedgerError>> {
        self.inner().job(owner, id)
    }

    fn blocking_attempt<'j>(&self, job: &'j Job) -> Option<&'j Attempt> {
        self.inner().blocking_attempt(job)
    }

    fn start_attempt<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        provider: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Started, LedgerError>> {
        self.inner().start_attempt(owner, job_id, provider, timeout)
    }

    fn record_result<'a>(
        &'a self,
        attempt_id: &'a str,
        result: &'a Value,
    ) -> BoxFuture<'a, Result<Finished, LedgerError>> {
        self.inner().record_result(attempt_id, result)
    }

    fn record_unknown<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>> {
        self.inner().record_unknown(attempt_id, error)
    }

    fn cancel_attempt<'a>(
        &'a self,
        owner: &'a str,
        attempt_id: &'a str,
    ) -> BoxFuture<'a, Result<AttemptCancel, LedgerError>> {
        self.inner().cancel_attempt(owner, attempt_id)
    }
}

/// A [`Decorator`] as the orchestrator's store.
pub struct Decorated<D>(D);

pub fn decorated<D: Decorator>(decorator: D) -> Arc<dyn JobStore> {
    Arc::new(Decorated(decorator))
}

impl<D: Decorator> JobStore for Decorated<D> {
    fn backend(&self) -> Backend {
        self.0.inner().backend()
    }

    fn create_job<'a>(
        &'a self,
        new: &'a NewJob<'a>,
    ) -> BoxFuture<'a, Result<Created, LedgerError>> {
        self.0.create_job(new)
    }

    fn job<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, LedgerError>> {
        self.0.job(owner, id)
    }

    fn blocking_attempt<'j>(&self, job: &'j Job) -> Option<&'j Attempt> {
        self.0.blocking_attempt(job)
    }

    fn start_attempt<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        provider: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Started, LedgerError>> {
        self.0.start_attempt(owner, job_id, provider, timeout)
    }

    fn record_result<'a>(
        &'a self,
        attempt_id: &'a str,
        result: &'a Value,
    ) -> BoxFuture<'a, Result<Finished, LedgerError>> {
        self.0.record_result(attempt_id, result)
    }

    fn record_failure<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>> {
        self.0.inner().record_failure(attempt_id, error)
    }

    fn record_unknown<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>> {
        self.0.record_unknown(attempt_id, error)
    }

    fn expire_overdue(&self) -> BoxFuture<'_, Result<usize, LedgerError>> {
        self.0.inner().expire_overdue()
    }

    fn cancel_attempt<'a>(
        &'a self,
        owner: &'a str,
        attempt_id: &'a str,
    ) -> BoxFuture<'a, Result<AttemptCancel, LedgerError>> {
        self.0.cancel_attempt(owner, attempt_id)
    }

    fn cancel_job<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<JobCancel, LedgerError>> {
        self.0.inner().cancel_job(owner, job_id)
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), LedgerError>> {
        self.0.inner().ready()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.0.inner().close()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Creation reads the key first and inserts afterwards (the race the unique constraint
/// exists for), with the window widened so the race is hit: the loser of a double click
/// gets an error instead of the winner's job.
pub struct CheckThenInsert {
    inner: Arc<dyn JobStore>,
    db: Arc<Db>,
}

impl CheckThenInsert {
    pub fn new(inner: Arc<dyn JobStore>, db: Arc<Db>) -> CheckThenInsert {
        CheckThenInsert { inner, db }
    }
}

impl Decorator for CheckThenInsert {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn create_job<'a>(
        &'a self,
        new: &'a NewJob<'a>,
    ) -> BoxFuture<'a, Result<Created, LedgerError>> {
        Box::pin(async move {
            if self.db.key_taken(new.owner, new.idempotency_key).await? {
                return self.inner.create_job(new).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            match self.inner.create_job(new).await? {
                Created::New(job) => Ok(Created::New(job)),
                _ => Err(LedgerError::Corrupt(
                    "check-then-insert lost the race".into(),
                )),
            }
        })
    }
}

/// A reused key returns the existing job whatever the payload.
pub struct IgnoredFingerprint {
    inner: Arc<dyn JobStore>,
}

impl IgnoredFingerprint {
    pub fn new(inner: Arc<dyn JobStore>) -> IgnoredFingerprint {
        IgnoredFingerprint { inner }
    }
}

impl Decorator for IgnoredFingerprint {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn create_job<'a>(
        &'a self,
        new: &'a NewJob<'a>,
    ) -> BoxFuture<'a, Result<Created, LedgerError>> {
        Box::pin(async move {
            match self.inner.create_job(new).await? {
                Created::KeyReused { job_id } => match self.inner.job(new.owner, &job_id).await? {
                    Some(existing) => Ok(Created::Replayed(existing)),
                    None => Ok(Created::KeyReused { job_id }),
                },
                created => Ok(created),
            }
        })
    }
}

/// The deadline makes an attempt `failed` instead of `unknown`.
pub struct TimeoutMarkedFailed {
    inner: Arc<dyn JobStore>,
}

impl TimeoutMarkedFailed {
    pub fn new(inner: Arc<dyn JobStore>) -> TimeoutMarkedFailed {
        TimeoutMarkedFailed { inner }
    }
}

impl Decorator for TimeoutMarkedFailed {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn record_unknown<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>> {
        // `timeout` is what the attempt records at its deadline; other unknowns stay.
        match error {
            "timeout" => self.inner.record_failure(attempt_id, error),
            _ => self.inner.record_unknown(attempt_id, error),
        }
    }
}

/// A result claims the slot without the compare-and-swap: the last one wins, over an
/// earlier result or a cancel alike.
pub struct LastWriterWins {
    inner: Arc<dyn JobStore>,
    db: Arc<Db>,
}

impl LastWriterWins {
    pub fn new(inner: Arc<dyn JobStore>, db: Arc<Db>) -> LastWriterWins {
        LastWriterWins { inner, db }
    }
}

impl Decorator for LastWriterWins {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn record_result<'a>(
        &'a self,
        attempt_id: &'a str,
        result: &'a Value,
    ) -> BoxFuture<'a, Result<Finished, LedgerError>> {
        Box::pin(claim_after_loss(
            &*self.inner,
            &self.db,
            attempt_id,
            result,
            false,
        ))
    }
}

/// A late result claims the slot against the current version, so a result arriving
/// after the job was cancelled still completes it (one that finds a result there does
/// not).
pub struct LateResultOverwrites {
    inner: Arc<dyn JobStore>,
    db: Arc<Db>,
}

impl LateResultOverwrites {
    pub fn new(inner: Arc<dyn JobStore>, db: Arc<Db>) -> LateResultOverwrites {
        LateResultOverwrites { inner, db }
    }
}

impl Decorator for LateResultOverwrites {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn record_result<'a>(
        &'a self,
        attempt_id: &'a str,
        result: &'a Value,
    ) -> BoxFuture<'a, Result<Finished, LedgerError>> {
        Box::pin(claim_after_loss(
            &*self.inner,
            &self.db,
            attempt_id,
            result,
            true,
        ))
    }
}

/// The real claim first; a result that lost it takes the slot anyway, without the
/// version check (and, with `only_if_free`, only when no result holds it).
async fn claim_after_loss(
    inner: &dyn JobStore,
    db: &Db,
    attempt_id: &str,
    result: &Value,
    only_if_free: bool,
) -> Result<Finished, LedgerError> {
    let finished = inner.record_result(attempt_id, result).await?;
    let Finished::Lost { job_id, from, .. } = &finished else {
        return Ok(finished);
    };
    let claimed = db
        .claim_without_version(
            job_id,
            attempt_id,
            &result.to_string(),
            now_ms(),
            only_if_free,
        )
        .await?;
    Ok(match claimed {
        Some(version) => Finished::Won {
            job_id: job_id.clone(),
            from: *from,
            version,
        },
        None => finished,
    })
}

/// A new attempt silently releases the open one instead of being refused.
pub struct NoOpenAttemptGuard {
    inner: Arc<dyn JobStore>,
}

impl NoOpenAttemptGuard {
    pub fn new(inner: Arc<dyn JobStore>) -> NoOpenAttemptGuard {
        NoOpenAttemptGuard { inner }
    }
}

impl Decorator for NoOpenAttemptGuard {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn blocking_attempt<'j>(&self, _job: &'j Job) -> Option<&'j Attempt> {
        None
    }

    fn start_attempt<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        provider: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Started, LedgerError>> {
        Box::pin(async move {
            if let Some(job) = self.inner.job(owner, job_id).await? {
                for open in job.attempts.iter().filter(|a| a.state.is_open()) {
                    self.inner.cancel_attempt(owner, &open.id).await?;
                }
            }
            self.inner
                .start_attempt(owner, job_id, provider, timeout)
                .await
        })
    }
}

/// Jobs are read without checking their owner.
pub struct OwnerLeak {
    inner: Arc<dyn JobStore>,
    db: Arc<Db>,
}

impl OwnerLeak {
    pub fn new(inner: Arc<dyn JobStore>, db: Arc<Db>) -> OwnerLeak {
        OwnerLeak { inner, db }
    }
}

impl Decorator for OwnerLeak {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn job<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, LedgerError>> {
        Box::pin(async move {
            if let Some(job) = self.inner.job(owner, id).await? {
                return Ok(Some(job));
            }
            match self.db.owner_of_job(id).await? {
                Some(holder) => self.inner.job(&holder, id).await,
                None => Ok(None),
            }
        })
    }
}

/// Cancelling an attempt answers `cancelled` but changes nothing.
pub struct CancelKeepsBlocking {
    inner: Arc<dyn JobStore>,
    db: Arc<Db>,
}

impl CancelKeepsBlocking {
    pub fn new(inner: Arc<dyn JobStore>, db: Arc<Db>) -> CancelKeepsBlocking {
        CancelKeepsBlocking { inner, db }
    }
}

impl Decorator for CancelKeepsBlocking {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn cancel_attempt<'a>(
        &'a self,
        owner: &'a str,
        attempt_id: &'a str,
    ) -> BoxFuture<'a, Result<AttemptCancel, LedgerError>> {
        Box::pin(async move {
            let Some(job_id) = self.db.job_of_attempt(owner, attempt_id).await? else {
                return Ok(AttemptCancel::NotFound);
            };
            let attempt = self
                .inner
                .job(owner, &job_id)
                .await?
                .and_then(|job| job.attempts.into_iter().find(|a| a.id == attempt_id));
            let Some(mut attempt) = attempt else {
                return Ok(AttemptCancel::NotFound);
            };
            Ok(match attempt.state {
                AttemptState::Cancelled => AttemptCancel::AlreadyCancelled(attempt),
                from @ (AttemptState::Starting | AttemptState::Unknown) => {
                    attempt.state = AttemptState::Cancelled;
                    AttemptCancel::Cancelled { attempt, from }
                }
                _ => AttemptCancel::Terminal(attempt),
            })
        })
    }
}

/// A replay of a job with nothing open (`failed` or `pending`) starts a new attempt on
/// the job's provider, and sends it.
pub struct ReplayRetriesIdle {
    inner: Arc<dyn JobStore>,
    upstream: Arc<dyn Upstream>,
    providers: Providers,
    late_window: Duration,
}

impl ReplayRetriesIdle {
    pub fn new(
        inner: Arc<dyn JobStore>,
        upstream: Arc<dyn Upstream>,
        providers: Providers,
        late_window: Duration,
    ) -> ReplayRetriesIdle {
        ReplayRetriesIdle {
            inner,
            upstream,
            providers,
            late_window,
        }
    }
}

impl Decorator for ReplayRetriesIdle {
    fn inner(&self) -> &dyn JobStore {
        &*self.inner
    }

    fn create_job<'a>(
        &'a self,
        new: &'a NewJob<'a>,
    ) -> BoxFuture<'a, Result<Created, LedgerError>> {
        Box::pin(async move {
            let created = self.inner.create_job(new).await?;
            if let Created::Replayed(job) = &created
                && matches!(job.state(), JobState::Failed | JobState::Pending)
                && let Some(provider) = self.providers.get(&job.provider)
                && let Started::Started { attempt, input } = self
                    .inner
                    .start_attempt(&job.owner, &job.id, &job.provider, new.attempt_timeout)
                    .await?
            {
                tokio::spawn(send(
                    Arc::clone(&self.inner),
                    Arc::clone(&self.upstream),
                    Request::contract(&provider.name, &provider.base_url, input),
                    attempt,
                    self.late_window,
                ));
            }
            Ok(created)
        })
    }
}

/// Sends an attempt the orchestrator does not know it started, and records how it ended
/// as the orchestrator would: `unknown` at the deadline, an answer within the late
/// window.
async fn send(
    store: Arc<dyn JobStore>,
    upstream: Arc<dyn Upstream>,
    request: Request,
    attempt: Attempt,
    late_window: Duration,
) {
    let left = u64::try_from(attempt.deadline_ms.saturating_sub(now_ms())).unwrap_or(0);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(left);
    let call = upstream.call(request);
    tokio::pin!(call);
    let outcome = match tokio::time::timeout_at(deadline, &mut call).await {
        Ok(outcome) => Some(outcome),
        Err(_) => {
            let _ = store.record_unknown(&attempt.id, "timeout").await;
            tokio::time::timeout_at(deadline + late_window, call)
                .await
                .ok()
        }
    };
    let _ = match outcome {
        Some(Outcome::Result(value)) => store.record_result(&attempt.id, &value).await.map(|_| ()),
        Some(Outcome::Failed(code)) => store.record_failure(&attempt.id, &code).await.map(|_| ()),
        Some(Outcome::Unknown(code)) => store.record_unknown(&attempt.id, &code).await.map(|_| ()),
        None => Ok(()),
    };
}
