//! The ledger: jobs and attempts, on SQLite or PostgreSQL, keeping exactly one job per
//! (owner, idempotency key) and at most one winning result per job, under any
//! interleaving and across processes.
//!
//! - `model`: [`Job`], [`Attempt`] and their states;
//! - `outcome`: what each operation answers;
//! - [`fingerprint`]: SHA-256 over RFC 8785 canonical JSON, refusing what it cannot canonicalize;
//! - `store`: the SQL, written once for both backends; `migrate`: the shipped schema;
//! - `seen`: when the newest allowlist statement per (suite, provider) that `conform
//!   serve` read was made, so that an older allowlist put back is `superseded`.
//!
//! The database enforces the rules, not only this code: `UNIQUE (owner_id,
//! idempotency_key)` on jobs, a partial unique index allowing one open attempt per job,
//! and a compare-and-swap on the job's `version` for the result slot. Every state change
//! and every lost race is logged as one structured line (target `conform_serve::ledger`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), conform_serve::ledger::LedgerError> {
//! use conform_serve::ledger::{Ledger, LedgerOptions};
//! let ledger = Ledger::connect("sqlite:///var/lib/conform/ledger.db", &LedgerOptions::default()).await?;
//! # Ok(()) }
//! ```

pub mod fingerprint;
mod group_commit;
mod migrate;
mod model;
mod outcome;
mod seen;
mod store;
mod text;

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sqlx::pool::PoolOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Postgres, Sqlite};

pub use model::{Attempt, AttemptState, Job, JobState, Race};
pub use outcome::{AttemptCancel, Created, Finished, JobCancel, LossReason, Started, Transition};
pub use store::CREATE_JOB_POSTGRES;
pub use text::json_text;

use group_commit::Creations;
use store::{RaceIds, Store};

/// Why a ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The URL names neither a SQLite file nor PostgreSQL (an in-memory SQLite database
    /// is refused too: each connection would see its own).
    #[error(
        "the database URL `{0}` is not supported: use sqlite:///absolute/path.db (a file) or postgres://user@host/db"
    )]
    Url(String),
    /// The database could not be reached or opened.
    #[error("cannot open the ledger at {url}: {error}")]
    Connect {
        /// The URL, its password redacted.
        url: String,
        /// What the driver answered.
        error: sqlx::Error,
    },
    /// The shipped schema could not be applied, or the database's is not one it knows.
    #[error("cannot migrate the ledger: {0}")]
    Migration(String),
    /// A query failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A stored value breaks the schema's rules (an unknown state name, say).
    #[error("the ledger holds a row it cannot read: {0}")]
    Corrupt(String),
    /// An attempt id that no job has.
    #[error("attempt `{0}` does not exist")]
    NoSuchAttempt(String),
    /// A write that did not take effect (the SQLite writer stopped, or the database
    /// refuses writes); nothing of it was kept.
    #[error("the write failed and was rolled back: {0}")]
    Write(String),
    /// The operating system's random source failed, so no id can be made.
    #[error("cannot draw a random id: {0}")]
    Random(String),
}

/// How to open a ledger.
#[derive(Debug, Clone)]
pub struct LedgerOptions {
    /// Connections per process (PostgreSQL), or readers (SQLite, which has one writer).
    pub max_connections: u32,
    /// How long a SQLite writer waits for another process's write lock.
    pub busy_timeout: Duration,
    /// How long an operation waits for a connection from the pool (on PostgreSQL that
    /// includes connecting, so an unreachable server fails within it).
    pub acquire_timeout: Duration,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            max_connections: 8,
            busy_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(2),
        }
    }
}

/// Which database a ledger lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file: one writer at a time, across processes on one machine.
    Sqlite,
    /// A PostgreSQL server, shared by orchestrators on many machines.
    Postgres,
}

#[derive(Debug, Clone)]
enum Inner {
    Sqlite(Store<Sqlite>),
    Postgres(Store<Postgres>),
}

/// Runs the same call on whichever backend the ledger has.
macro_rules! on_store {
    ($self:ident . $method:ident ( $($arg:expr),* $(,)? )) => {
        match &$self.inner {
            Inner::Sqlite(store) => store.$method($($arg),*).await,
            Inner::Postgres(store) => store.$method($($arg),*).await,
        }
    };
}

/// A new job: who wants what, under which key.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    /// Whose job it is (`X-Owner-Id`); keys are unique per owner only.
    pub owner: &'a str,
    /// The caller's `Idempotency-Key`: a repeat with the same key finds this job.
    pub idempotency_key: &'a str,
    /// From [`fingerprint::fingerprint`] over the whole request body.
    pub fingerprint: &'a str,
    /// The suite whose allowlist entries gate this job's failover.
    pub task: &'a str,
    /// The provider its first attempt calls.
    pub provider: &'a str,
    /// The request's input, kept to be sent again by later attempts.
    pub input: &'a Value,
    /// The first attempt's deadline is its start plus this.
    pub attempt_timeout: Duration,
}

/// The jobs and attempts of one database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    inner: Inner,
}

impl Ledger {
    /// Opens the ledger at `url` (`sqlite://…` or `postgres://…`) and applies the shipped
    /// migrations. Safe when several processes start together.
    pub async fn connect(url: &str, options: &LedgerOptions) -> Result<Ledger, LedgerError> {
        let inner = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Inner::Postgres(connect_postgres(url, options).await?)
        } else if url.starts_with("sqlite:") {
            Inner::Sqlite(connect_sqlite(url, options).await?)
        } else {
            return Err(LedgerError::Url(conform_config::secret::redact_url(url)));
        };
        let ledger = Ledger { inner };
        on_store!(ledger.migrate())?;
        Ok(ledger)
    }

    /// Which database it opened, as the startup log names it.
    pub fn backend(&self) -> Backend {
        match self.inner {
            Inner::Sqlite(_) => Backend::Sqlite,
            Inner::Postgres(_) => Backend::Postgres,
        }
    }

    /// Creates the job and its first attempt (`starting`), or answers the job that
    /// already holds the key. The caller sends the first attempt upstream only on
    /// [`Created::New`].
    pub async fn create_job(&self, new: &NewJob<'_>) -> Result<Created, LedgerError> {
        let now = now_ms();
        let job_id = new_id("job")?;
        let attempt = Attempt {
            id: new_id("att")?,
            job_id: job_id.clone(),
            seq: 1,
            provider: new.provider.to_string(),
            state: AttemptState::Starting,
            base_version: 1,
            error: None,
            started_ms: now,
            deadline_ms: deadline(now, new.attempt_timeout),
            ended_ms: None,
        };
        let job = Job {
            id: job_id,
            owner: new.owner.to_string(),
            idempotency_key: new.idempotency_key.to_string(),
            fingerprint: new.fingerprint.to_string(),
            task: new.task.to_string(),
            provider: new.provider.to_string(),
            input: Value::Null,
            version: 1,
            completed_by: None,
            result: None,
            completed_ms: None,
            cancelled_ms: None,
            created_ms: now,
            attempts: vec![attempt],
        };
        // The store writes the text; the job takes its own copy of the input only once
        // the write is done, so the two are never held together with the caller's.
        let input = json_text(new.input);
        let mut created = on_store!(self.create(job, input))?;
        if let Created::New(job) = &mut created {
            job.input = new.input.clone();
            let attempt = job.attempts.first().map(|a| a.id.as_str()).unwrap_or("");
            tracing::info!(target: "conform_serve::ledger", job = %job.id, attempt = %attempt,
                from = %"none", to = %"starting", reason = %"job_created", provider = %job.provider,
                "job created");
        }
        Ok(created)
    }

    /// The job with its attempts, if `owner` owns it.
    pub async fn job(&self, owner: &str, id: &str) -> Result<Option<Job>, LedgerError> {
        on_store!(self.job(owner, id))
    }

    /// Every job of `owner`, oldest first, with its attempts.
    pub async fn jobs(&self, owner: &str) -> Result<Vec<Job>, LedgerError> {
        on_store!(self.jobs(owner))
    }

    /// Starts a new attempt on `provider` unless the job is completed, cancelled or has
    /// an open attempt. The caller sends it upstream only on [`Started::Started`].
    pub async fn start_attempt(
        &self,
        owner: &str,
        job_id: &str,
        provider: &str,
        timeout: Duration,
    ) -> Result<Started, LedgerError> {
        let now = now_ms();
        let attempt = Attempt {
            id: new_id("att")?,
            job_id: job_id.to_string(),
            seq: 0,
            provider: provider.to_string(),
            state: AttemptState::Starting,
            base_version: 0,
            error: None,
            started_ms: now,
            deadline_ms: deadline(now, timeout),
            ended_ms: None,
        };
        let started = on_store!(self.start_attempt(owner, job_id, attempt))?;
        if let Started::Started { attempt, .. } = &started {
            tracing::info!(target: "conform_serve::ledger", job = %attempt.job_id, attempt = %attempt.id,
                from = %"none", to = %"starting", reason = %"attempt_started", provider = %attempt.provider,
                seq = attempt.seq, "attempt started");
        }
        Ok(started)
    }

    /// A result arrived for the attempt: it claims the job's result slot with the
    /// compare-and-swap, or loses (the attempt becomes `superseded`, the race is logged).
    pub async fn record_result(
        &self,
        attempt_id: &str,
        result: &Value,
    ) -> Result<Finished, LedgerError> {
        let race_id = new_id("race")?;
        let race = RaceIds {
            race_id: &race_id,
            now: now_ms(),
        };
        let text = result.to_string();
        let finished = on_store!(self.record_result(attempt_id, &text, race))?;
        match &finished {
            Finished::Won {
                job_id,
                from,
                version,
            } => {
                tracing::info!(target: "conform_serve::ledger", job = %job_id, attempt = %attempt_id,
                    from = %from, to = %"succeeded", reason = %"result_won", version = version,
                    "attempt state changed");
            }
            Finished::Lost {
                job_id,
                from,
                winner,
                reason,
            } => {
                tracing::info!(target: "conform_serve::ledger", job = %job_id, attempt = %attempt_id,
                    from = %from, to = %"superseded", reason = %reason.as_str(),
                    "attempt state changed");
                tracing::warn!(target: "conform_serve::ledger", job = %job_id, loser = %attempt_id,
                    winner = winner.as_deref().unwrap_or("none"), reason = %reason.as_str(),
                    race = %race_id, "lost race: result discarded");
            }
            Finished::Ignored { state } => {
                tracing::debug!(target: "conform_serve::ledger", attempt = %attempt_id, state = %state,
                    "result for an ended attempt ignored");
            }
        }
        Ok(finished)
    }

    /// A definite answer without a usable result (`error` is a short code such as
    /// `http_400`): `starting` or `unknown` becomes `failed`; other states do not change.
    pub async fn record_failure(
        &self,
        attempt_id: &str,
        error: &str,
    ) -> Result<Transition, LedgerError> {
        let t = on_store!(self.record_failure(attempt_id, error, now_ms()))?;
        log_transition(attempt_id, &t, error);
        Ok(t)
    }

    /// No definite answer (`timeout`, `http_502` …): `starting` becomes `unknown`; other
    /// states do not change.
    pub async fn record_unknown(
        &self,
        attempt_id: &str,
        error: &str,
    ) -> Result<Transition, LedgerError> {
        let t = on_store!(self.record_unknown(attempt_id, error))?;
        log_transition(attempt_id, &t, error);
        Ok(t)
    }

    /// Turns every `starting` attempt whose deadline has passed into `unknown` (error
    /// `timeout`), including those a previous process started and never finished.
    /// Answers how many changed.
    pub async fn expire_overdue(&self) -> Result<usize, LedgerError> {
        let expired = on_store!(self.expire_overdue(now_ms()))?;
        for (job, attempt) in &expired {
            tracing::info!(target: "conform_serve::ledger", job = %job, attempt = %attempt,
                from = %"starting", to = %"unknown", reason = %"timeout", "attempt state changed");
        }
        Ok(expired.len())
    }

    /// An external process releases an open attempt.
    pub async fn cancel_attempt(
        &self,
        owner: &str,
        attempt_id: &str,
    ) -> Result<AttemptCancel, LedgerError> {
        let cancel = on_store!(self.cancel_attempt(owner, attempt_id, now_ms()))?;
        if let AttemptCancel::Cancelled { attempt, from } = &cancel {
            tracing::info!(target: "conform_serve::ledger", job = %attempt.job_id, attempt = %attempt.id,
                from = %from, to = %"cancelled", reason = %"attempt_cancelled", "attempt state changed");
        }
        Ok(cancel)
    }

    /// The user abandons the job: `version` is incremented (so no result can claim the
    /// slot any more) and open attempts become `cancelled`.
    pub async fn cancel_job(&self, owner: &str, job_id: &str) -> Result<JobCancel, LedgerError> {
        let cancel = on_store!(self.cancel_job(owner, job_id, now_ms()))?;
        if let JobCancel::Cancelled { job, released } = &cancel {
            tracing::info!(target: "conform_serve::ledger", job = %job.id, from = %"open",
                to = %"cancelled", reason = %"job_cancelled", version = job.version, "job cancelled");
            for (attempt, from) in released {
                tracing::info!(target: "conform_serve::ledger", job = %job.id, attempt = %attempt,
                    from = %from, to = %"cancelled", reason = %"job_cancelled", "attempt state changed");
            }
        }
        Ok(cancel)
    }

    /// Whether the database takes writes now: PostgreSQL answers a query; SQLite grants
    /// the write lock (another process holding it longer than the busy timeout is as
    /// good as down). Bounded by the acquire and busy timeouts.
    pub async fn ready(&self) -> Result<(), LedgerError> {
        on_store!(self.ready())
    }

    /// Remembers the allowlist statements a reader read ([`conform_allowlist::seen`]):
    /// per (suite, provider), the later of what is stored and what is stated.
    pub async fn remember_statements(
        &self,
        stated: &[conform_allowlist::Stated],
    ) -> Result<(), LedgerError> {
        let rows: Vec<(&str, &str, i64)> = (stated.iter())
            .filter_map(|s| Some((s.suite.as_str(), s.provider.as_str(), seen::nanos(s.at)?)))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        on_store!(self.remember(&rows, now_ms()))
    }

    /// When the newest statement about (`suite`, `provider`) remembered was made.
    pub async fn newest_statement(
        &self,
        suite: &str,
        provider: &str,
    ) -> Result<Option<time::OffsetDateTime>, LedgerError> {
        let nanos = on_store!(self.newest(suite, provider))?;
        nanos
            .map(|ns| {
                time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
                    .map_err(|e| LedgerError::Corrupt(format!("allowlist_seen: {e}")))
            })
            .transpose()
    }

    /// The race log of one job, oldest first.
    pub async fn races(&self, job_id: &str) -> Result<Vec<Race>, LedgerError> {
        on_store!(self.races(job_id))
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        match &self.inner {
            Inner::Sqlite(s) => {
                s.write.close().await;
                s.read.close().await;
            }
            Inner::Postgres(s) => s.write.close().await,
        }
    }
}

fn log_transition(attempt_id: &str, t: &Transition, reason: &str) {
    if let Transition::Changed { job_id, from, to } = t {
        tracing::info!(target: "conform_serve::ledger", job = %job_id, attempt = %attempt_id, from = %from, to = %to,
            reason = %reason, "attempt state changed");
    }
}

async fn connect_sqlite(url: &str, options: &LedgerOptions) -> Result<Store<Sqlite>, LedgerError> {
    let connect_error = |error| LedgerError::Connect {
        url: url.to_string(),
        error,
    };
    let base = SqliteConnectOptions::from_str(url).map_err(connect_error)?;
    if base.get_filename().as_os_str() == ":memory:" || url.contains(":memory:") {
        // The writer and the readers would each see their own empty database.
        return Err(LedgerError::Url(url.to_string()));
    }
    // FULL: a committed job survives a power cut, not only a crash.
    let base = base
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(options.busy_timeout)
        .foreign_keys(true);
    let write = open_sqlite_writer(&base, options)
        .await
        .map_err(connect_error)?;
    let read = PoolOptions::<Sqlite>::new()
        .max_connections(options.max_connections.max(1))
        .acquire_timeout(options.acquire_timeout)
        .test_before_acquire(false)
        .connect_lazy_with(base);
    let creations = Some(Creations::start(write.clone()));
    Ok(Store {
        write,
        read,
        creations,
    })
}

/// The writer's pool, its first connection made now. Opening a database that other
/// processes are opening too can fail at once with `SQLITE_BUSY`: setting the journal
/// mode to WAL takes a lock that SQLite's busy handler does not wait for. That is retried
/// until `busy_timeout` has passed, as any other lock would be waited for.
async fn open_sqlite_writer(
    base: &SqliteConnectOptions,
    options: &LedgerOptions,
) -> Result<sqlx::Pool<Sqlite>, sqlx::Error> {
    const SQLITE_BUSY: &str = "5";
    let give_up = tokio::time::Instant::now() + options.busy_timeout;
    let mut wait = Duration::from_millis(5);
    loop {
        let opened = PoolOptions::<Sqlite>::new()
            .max_connections(1)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .connect_with(base.clone())
            .await;
        match opened {
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some(SQLITE_BUSY)
                    && tokio::time::Instant::now() + wait < give_up =>
            {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            opened => return opened,
        }
    }
}

async fn connect_postgres(
    url: &str,
    options: &LedgerOptions,
) -> Result<Store<Postgres>, LedgerError> {
    let connect_error = |error| LedgerError::Connect {
        url: conform_config::secret::redact_url(url),
        error,
    };
    // Job creation is one statement in its own transaction: pin that transaction to
    // READ COMMITTED whatever the server's default is.
    let base = PgConnectOptions::from_str(url)
        .map_err(connect_error)?
        .options([("default_transaction_isolation", "read committed")])
        .application_name("conform");
    // One direct connection first: a pool would only report that it timed out, this
    // names the cause (refused, unknown host, authentication) at once.
    let probe = sqlx::ConnectOptions::connect(&base)
        .await
        .map_err(connect_error)?;
    sqlx::Connection::close(probe)
        .await
        .map_err(connect_error)?;
    let pool = PoolOptions::<Postgres>::new()
        .max_connections(options.max_connections.max(1))
        .acquire_timeout(options.acquire_timeout)
        .test_before_acquire(false)
        .connect_with(base)
        .await
        .map_err(connect_error)?;
    Ok(Store {
        write: pool.clone(),
        read: pool,
        creations: None,
    })
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn deadline(start_ms: i64, timeout: Duration) -> i64 {
    start_ms.saturating_add(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX))
}

/// `prefix_` and 128 bits in hex, laid out as a UUIDv7's: 48 bits of Unix milliseconds,
/// then 80 random bits. New ids sort after old ones, so each new row lands at the right
/// edge of the id indexes instead of on a random page: SQLite's WAL writes whole pages,
/// and a batch of random ids would dirty a page per row in every index.
fn new_id(prefix: &str) -> Result<String, LedgerError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes[6..]).map_err(|e| LedgerError::Random(e.to_string()))?;
    bytes[..6].copy_from_slice(&now_ms().to_be_bytes()[2..]);
    let mut id = String::with_capacity(prefix.len() + 33);
    id.push_str(prefix);
    id.push('_');
    for b in bytes {
        use std::fmt::Write;
        let _ = write!(id, "{b:02x}");
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_an_error_message() {
        assert_eq!(
            conform_config::secret::redact_url("postgres://app:s3cret@db:5432/jobs"),
            "postgres://app:***@db:5432/jobs"
        );
        assert_eq!(
            conform_config::secret::redact_url("postgres://app@db/jobs"),
            "postgres://app@db/jobs"
        );
    }

    #[test]
    fn ids_are_prefixed_distinct_and_sort_by_time() {
        let a = new_id("job").unwrap();
        let b = new_id("job").unwrap();
        assert!(a.starts_with("job_") && a.len() == 36, "{a}");
        assert_ne!(a, b);
        std::thread::sleep(Duration::from_millis(2));
        let later = new_id("job").unwrap();
        assert!(later > a && later > b, "{a} {b} {later}");
        let millis = i64::from_str_radix(&later[4..16], 16).unwrap();
        assert!((now_ms() - millis).abs() < 1_000, "{later}");
    }
}
