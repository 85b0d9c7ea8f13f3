//! The job store seam: the ledger operations the orchestrator performs, as a trait, so
//! that what the routes and attempts decide is independent of where jobs are kept.
//! [`Ledger`] is the one implementation `conform serve` uses; a decorator around it can
//! change one rule while keeping the rest (the scenario suite's tests build broken ones
//! that way).

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::ledger::{
    Attempt, AttemptCancel, Backend, Created, Finished, Job, JobCancel, Ledger, LedgerError,
    NewJob, Started, Transition,
};

/// Where the orchestrator keeps jobs and attempts. Every method has the meaning of the
/// [`Ledger`] method of the same name.
pub trait JobStore: Send + Sync + 'static {
    /// Which database it keeps jobs in, for the startup log ([`Ledger::backend`]).
    fn backend(&self) -> Backend;

    /// Creates the job and its first attempt, or finds the job already holding the key
    /// ([`Ledger::create_job`]).
    fn create_job<'a>(&'a self, new: &'a NewJob<'a>)
    -> BoxFuture<'a, Result<Created, LedgerError>>;

    /// The job with its attempts, if `owner` owns it ([`Ledger::job`]).
    fn job<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, LedgerError>>;

    /// The open attempt that refuses a new one, read on a snapshot of the job so the
    /// answer keeps the contract's order of refusals (a failover's gate is asked only
    /// after this); [`JobStore::start_attempt`] checks again atomically.
    fn blocking_attempt<'j>(&self, job: &'j Job) -> Option<&'j Attempt> {
        job.open_attempt()
    }

    /// Starts an attempt unless the job is completed, cancelled or has an open attempt
    /// ([`Ledger::start_attempt`]).
    fn start_attempt<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        provider: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Started, LedgerError>>;

    /// Lets a result claim the job's result slot, or records that it lost
    /// ([`Ledger::record_result`]).
    fn record_result<'a>(
        &'a self,
        attempt_id: &'a str,
        result: &'a Value,
    ) -> BoxFuture<'a, Result<Finished, LedgerError>>;

    /// A definite answer without a usable result: the attempt `failed`
    /// ([`Ledger::record_failure`]).
    fn record_failure<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>>;

    /// No definite answer: a `starting` attempt becomes `unknown`
    /// ([`Ledger::record_unknown`]).
    fn record_unknown<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>>;

    /// Overdue `starting` attempts become `unknown`; answers how many
    /// ([`Ledger::expire_overdue`]).
    fn expire_overdue(&self) -> BoxFuture<'_, Result<usize, LedgerError>>;

    /// An external process releases an open attempt ([`Ledger::cancel_attempt`]).
    fn cancel_attempt<'a>(
        &'a self,
        owner: &'a str,
        attempt_id: &'a str,
    ) -> BoxFuture<'a, Result<AttemptCancel, LedgerError>>;

    /// The user abandons the job ([`Ledger::cancel_job`]).
    fn cancel_job<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<JobCancel, LedgerError>>;

    /// Whether the database takes writes now, for `/readyz` ([`Ledger::ready`]).
    fn ready(&self) -> BoxFuture<'_, Result<(), LedgerError>>;

    /// Returns the connections at shutdown ([`Ledger::close`]).
    fn close(&self) -> BoxFuture<'_, ()>;
}

impl JobStore for Ledger {
    fn backend(&self) -> Backend {
        Ledger::backend(self)
    }

    fn create_job<'a>(
        &'a self,
        new: &'a NewJob<'a>,
    ) -> BoxFuture<'a, Result<Created, LedgerError>> {
        Box::pin(Ledger::create_job(self, new))
    }

    fn job<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, LedgerError>> {
        Box::pin(Ledger::job(self, owner, id))
    }

    fn start_attempt<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
        provider: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Started, LedgerError>> {
        Box::pin(Ledger::start_attempt(
            self, owner, job_id, provider, timeout,
        ))
    }

    fn record_result<'a>(
        &'a self,
        attempt_id: &'a str,
        result: &'a Value,
    ) -> BoxFuture<'a, Result<Finished, LedgerError>> {
        Box::pin(Ledger::record_result(self, attempt_id, result))
    }

    fn record_failure<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>> {
        Box::pin(Ledger::record_failure(self, attempt_id, error))
    }

    fn record_unknown<'a>(
        &'a self,
        attempt_id: &'a str,
        error: &'a str,
    ) -> BoxFuture<'a, Result<Transition, LedgerError>> {
        Box::pin(Ledger::record_unknown(self, attempt_id, error))
    }

    fn expire_overdue(&self) -> BoxFuture<'_, Result<usize, LedgerError>> {
        Box::pin(Ledger::expire_overdue(self))
    }

    fn cancel_attempt<'a>(
        &'a self,
        owner: &'a str,
        attempt_id: &'a str,
    ) -> BoxFuture<'a, Result<AttemptCancel, LedgerError>> {
        Box::pin(Ledger::cancel_attempt(self, owner, attempt_id))
    }

    fn cancel_job<'a>(
        &'a self,
        owner: &'a str,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<JobCancel, LedgerError>> {
        Box::pin(Ledger::cancel_job(self, owner, job_id))
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), LedgerError>> {
        Box::pin(Ledger::ready(self))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(Ledger::close(self))
    }
}
