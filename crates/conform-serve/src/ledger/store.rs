//! The SQL, written once for both backends.
//!
//! sqlx has no convenient way to be generic over databases without a wall of trait
//! bounds, so [`impl_store!`] stamps the same statements out for SQLite and PostgreSQL.
//! The two differ only in how a read-then-write transaction begins (`BEGIN IMMEDIATE`
//! takes SQLite's write lock up front; PostgreSQL runs READ COMMITTED) and in row locks
//! (`FOR UPDATE` on PostgreSQL; SQLite's write lock already covers the database).
//! Job creation is the one backend-specific part (see `insert_new`): one statement on
//! PostgreSQL, a group-committed transaction on SQLite.
//!
//! Locks are always taken job first, attempt second, so two writers cannot deadlock.

use std::collections::HashSet;

use sqlx::{Database, Pool, Postgres, Row, Sqlite, Transaction};

use super::LedgerError;
use super::group_commit::Creations;
use super::model::{Attempt, AttemptState, Job, Race};
use super::outcome::{
    AttemptCancel, Created, Finished, JobCancel, LossReason, Started, Transition,
};

/// The pools of one backend. SQLite gets a single writer connection (its writes are
/// serialized anyway, and one connection avoids busy-waiting inside a process) and a few
/// readers; PostgreSQL uses one pool for both.
#[derive(Debug)]
pub(crate) struct Store<DB: Database> {
    pub(crate) write: Pool<DB>,
    pub(crate) read: Pool<DB>,
    /// SQLite only: the group-committing writer of new jobs.
    pub(crate) creations: Option<Creations>,
}

impl<DB: Database> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Store {
            write: self.write.clone(),
            read: self.read.clone(),
            creations: self.creations.clone(),
        }
    }
}

macro_rules! job_columns {
    () => {
        "j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.task, j.provider, j.input, \
         j.version, j.completed_by, j.result, j.completed_ms, j.cancelled_ms, j.created_ms"
    };
}

/// Where the attempt columns start in a `select_job!()` row.
const ATTEMPT_AT: usize = 13;

macro_rules! attempt_columns {
    () => {
        "a.id, a.job_id, a.seq, a.provider, a.state, a.base_version, a.error, a.started_ms, \
         a.deadline_ms, a.ended_ms"
    };
}

/// A job and its attempts in one statement, hence one snapshot: a job read while a
/// result is being recorded never shows the job and its attempts out of step.
macro_rules! select_job {
    () => {
        concat!(
            "SELECT ",
            job_columns!(),
            ", ",
            attempt_columns!(),
            " FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id"
        )
    };
}

const INSERT_ATTEMPT: &str = "INSERT INTO attempts (id, job_id, seq, provider, state, \
     base_version, started_ms, deadline_ms) VALUES ($1, $2, $3, $4, 'starting', $5, $6, $7)";

/// The compare-and-swap of the contract: the first result claims the slot, exactly once.
const CLAIM_RESULT: &str = "UPDATE jobs SET result = $3, completed_by = $4, completed_ms = $5, \
     version = version + 1 WHERE id = $1 AND version = $2 AND completed_by IS NULL";

fn corrupt(what: impl Into<String>) -> LedgerError {
    LedgerError::Corrupt(what.into())
}

fn state(name: &str) -> Result<AttemptState, LedgerError> {
    AttemptState::parse(name).ok_or_else(|| corrupt(format!("unknown attempt state `{name}`")))
}

fn json(text: &str, what: &str) -> Result<serde_json::Value, LedgerError> {
    serde_json::from_str(text).map_err(|e| corrupt(format!("{what} is not JSON: {e}")))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

fn is_serialization_failure(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "40001")
}

/// What the ledger needs to write a race-log row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RaceIds<'a> {
    pub(crate) race_id: &'a str,
    pub(crate) now: i64,
}

macro_rules! impl_store {
    ($db:ty, begin = $begin:literal, for_update = $fu:literal) => {
        impl Store<$db> {
            /// A read-then-write transaction.
            pub(super) async fn begin(&self) -> Result<Transaction<'static, $db>, sqlx::Error> {
                self.write.begin_with($begin).await
            }

            fn decode_attempt(
                row: &<$db as Database>::Row,
                at: usize,
            ) -> Result<Option<Attempt>, LedgerError> {
                let id: Option<String> = row.try_get(at)?;
                let Some(id) = id else {
                    return Ok(None);
                };
                let name: String = row.try_get(at + 4)?;
                Ok(Some(Attempt {
                    id,
                    job_id: row.try_get(at + 1)?,
                    seq: row.try_get(at + 2)?,
                    provider: row.try_get(at + 3)?,
                    state: state(&name)?,
                    base_version: row.try_get(at + 5)?,
                    error: row.try_get(at + 6)?,
                    started_ms: row.try_get(at + 7)?,
                    deadline_ms: row.try_get(at + 8)?,
                    ended_ms: row.try_get(at + 9)?,
                }))
            }

            fn decode_job(rows: &[<$db as Database>::Row]) -> Result<Option<Job>, LedgerError> {
                let Some(first) = rows.first() else {
                    return Ok(None);
                };
                let input: String = first.try_get(6)?;
                let result: Option<String> = first.try_get(9)?;
                let mut job = Job {
                    id: first.try_get(0)?,
                    owner: first.try_get(1)?,
                    idempotency_key: first.try_get(2)?,
                    fingerprint: first.try_get(3)?,
                    task: first.try_get(4)?,
                    provider: first.try_get(5)?,
                    input: json(&input, "a job's input")?,
                    version: first.try_get(7)?,
                    completed_by: first.try_get(8)?,
                    result: result.as_deref().map(|r| json(r, "a job's result")).transpose()?,
                    completed_ms: first.try_get(10)?,
                    cancelled_ms: first.try_get(11)?,
                    created_ms: first.try_get(12)?,
                    attempts: Vec::with_capacity(rows.len()),
                };
                for row in rows {
                    if let Some(attempt) = Self::decode_attempt(row, ATTEMPT_AT)? {
                        job.attempts.push(attempt);
                    }
                }
                Ok(Some(job))
            }

            pub(crate) async fn job(&self, owner: &str, id: &str) -> Result<Option<Job>, LedgerError> {
                let rows = sqlx::query(concat!(
                    select_job!(),
                    " WHERE j.id = $1 AND j.owner_id = $2 ORDER BY a.seq"
                ))
                .bind(id)
                .bind(owner)
                .fetch_all(&self.read)
                .await?;
                Self::decode_job(&rows)
            }

            pub(crate) async fn jobs(&self, owner: &str) -> Result<Vec<Job>, LedgerError> {
                let rows = sqlx::query(concat!(
                    select_job!(),
                    " WHERE j.owner_id = $1 ORDER BY j.created_ms, j.id, a.seq"
                ))
                .bind(owner)
                .fetch_all(&self.read)
                .await?;
                let mut jobs = Vec::new();
                for group in rows.chunk_by(|a, b| {
                    a.try_get::<String, _>(0).ok() == b.try_get::<String, _>(0).ok()
                }) {
                    jobs.extend(Self::decode_job(group)?);
                }
                Ok(jobs)
            }

            async fn job_by_key(&self, owner: &str, key: &str) -> Result<Option<Job>, LedgerError> {
                let rows = sqlx::query(concat!(
                    select_job!(),
                    " WHERE j.owner_id = $1 AND j.idempotency_key = $2 ORDER BY a.seq"
                ))
                .bind(owner)
                .bind(key)
                .fetch_all(&self.read)
                .await?;
                Self::decode_job(&rows)
            }

            /// Inserts first; when the key is taken (the insert wrote nothing), reads the row
            /// that holds it in a separate statement. Never check-then-insert. `input` is
            /// the job's input as JSON text (`job.input` itself is not read here).
            pub(crate) async fn create(&self, job: Job, input: String) -> Result<Created, LedgerError> {
                if self.insert_new(&job, input).await? {
                    return Ok(Created::New(job));
                }
                match self.job_by_key(&job.owner, &job.idempotency_key).await? {
                    Some(existing) if existing.fingerprint == job.fingerprint => {
                        Ok(Created::Replayed(existing))
                    }
                    Some(existing) => Ok(Created::KeyReused {
                        job_id: existing.id,
                    }),
                    None => Err(corrupt(
                        "job creation found its key taken, but no job holds it",
                    )),
                }
            }

            pub(crate) async fn start_attempt(
                &self,
                owner: &str,
                job_id: &str,
                attempt: Attempt,
            ) -> Result<Started, LedgerError> {
                let mut tx = self.begin().await?;
                let row = sqlx::query(concat!(
                    "SELECT version, completed_by, cancelled_ms, input FROM jobs \
                     WHERE id = $1 AND owner_id = $2",
                    $fu
                ))
                .bind(job_id)
                .bind(owner)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    tx.rollback().await?;
                    return Ok(Started::NotFound);
                };
                let version: i64 = row.try_get(0)?;
                let completed_by: Option<String> = row.try_get(1)?;
                let cancelled_ms: Option<i64> = row.try_get(2)?;
                let input: String = row.try_get(3)?;
                if completed_by.is_some() {
                    tx.rollback().await?;
                    return Ok(Started::JobCompleted);
                }
                if cancelled_ms.is_some() {
                    tx.rollback().await?;
                    return Ok(Started::JobCancelled);
                }
                let open: Option<String> = sqlx::query_scalar(
                    "SELECT id FROM attempts WHERE job_id = $1 AND state IN ('starting', 'unknown')",
                )
                .bind(job_id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(attempt_id) = open {
                    tx.rollback().await?;
                    return Ok(Started::InProgress { attempt_id });
                }
                let seq: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE job_id = $1",
                )
                .bind(job_id)
                .fetch_one(&mut *tx)
                .await?;
                let attempt = Attempt {
                    job_id: job_id.to_string(),
                    seq,
                    base_version: version,
                    ..attempt
                };
                let inserted = sqlx::query(INSERT_ATTEMPT)
                    .bind(&attempt.id)
                    .bind(&attempt.job_id)
                    .bind(attempt.seq)
                    .bind(&attempt.provider)
                    .bind(attempt.base_version)
                    .bind(attempt.started_ms)
                    .bind(attempt.deadline_ms)
                    .execute(&mut *tx)
                    .await;
                match inserted {
                    Ok(_) => {}
                    // The partial unique index is the last word on "one open attempt".
                    Err(e) if is_unique_violation(&e) => {
                        tx.rollback().await?;
                        let open: Option<String> = sqlx::query_scalar(
                            "SELECT id FROM attempts WHERE job_id = $1 \
                             AND state IN ('starting', 'unknown')",
                        )
                        .bind(job_id)
                        .fetch_optional(&self.read)
                        .await?;
                        return match open {
                            Some(attempt_id) => Ok(Started::InProgress { attempt_id }),
                            None => Err(LedgerError::Database(e)),
                        };
                    }
                    Err(e) => return Err(e.into()),
                }
                tx.commit().await?;
                Ok(Started::Started {
                    attempt,
                    input: json(&input, "a job's input")?,
                })
            }

            pub(crate) async fn record_result(
                &self,
                attempt_id: &str,
                result: &str,
                race: RaceIds<'_>,
            ) -> Result<Finished, LedgerError> {
                // An attempt never changes job: reading it before the transaction lets the
                // transaction lock the job first, as every other writer does.
                let job_id: Option<String> =
                    sqlx::query_scalar("SELECT job_id FROM attempts WHERE id = $1")
                        .bind(attempt_id)
                        .fetch_optional(&self.read)
                        .await?;
                let Some(job_id) = job_id else {
                    return Err(LedgerError::NoSuchAttempt(attempt_id.to_string()));
                };
                let mut tx = self.begin().await?;
                let Some((from, base_version, started_ms)) =
                    Self::lock_for_result(&mut tx, &job_id, attempt_id).await?
                else {
                    tx.rollback().await?;
                    return Err(LedgerError::NoSuchAttempt(attempt_id.to_string()));
                };
                if !from.accepts_result() {
                    tx.rollback().await?;
                    return Ok(Finished::Ignored { state: from });
                }
                let claimed = sqlx::query(CLAIM_RESULT)
                    .bind(&job_id)
                    .bind(base_version)
                    .bind(result)
                    .bind(attempt_id)
                    .bind(race.now)
                    .execute(&mut *tx)
                    .await;
                let claimed = match claimed {
                    Ok(done) => done.rows_affected() == 1,
                    Err(e) if is_serialization_failure(&e) => {
                        tx.rollback().await?;
                        let mut tx = self.begin().await?;
                        let Some((from, _, started_ms)) =
                            Self::lock_for_result(&mut tx, &job_id, attempt_id).await?
                        else {
                            return Err(LedgerError::NoSuchAttempt(attempt_id.to_string()));
                        };
                        if !from.accepts_result() {
                            tx.rollback().await?;
                            return Ok(Finished::Ignored { state: from });
                        }
                        return Self::lose(
                            tx,
                            &job_id,
                            attempt_id,
                            from,
                            started_ms,
                            Some(LossReason::SerializationFailure),
                            race,
                        )
                        .await;
                    }
                    Err(e) => return Err(e.into()),
                };
                if !claimed {
                    return Self::lose(tx, &job_id, attempt_id, from, started_ms, None, race)
                        .await;
                }
                sqlx::query(
                    "UPDATE attempts SET state = 'succeeded', error = NULL, ended_ms = $2 \
                     WHERE id = $1",
                )
                    .bind(attempt_id)
                    .bind(race.now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Finished::Won {
                    job_id,
                    from,
                    version: base_version + 1,
                })
            }

            /// Locks the job, then the attempt; answers the attempt's state, base version
            /// and start.
            async fn lock_for_result(
                tx: &mut Transaction<'static, $db>,
                job_id: &str,
                attempt_id: &str,
            ) -> Result<Option<(AttemptState, i64, i64)>, LedgerError> {
                sqlx::query(concat!("SELECT id FROM jobs WHERE id = $1", $fu))
                    .bind(job_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                let row = sqlx::query(concat!(
                    "SELECT state, base_version, started_ms FROM attempts WHERE id = $1",
                    $fu
                ))
                .bind(attempt_id)
                .fetch_optional(&mut **tx)
                .await?;
                let Some(row) = row else {
                    return Ok(None);
                };
                let name: String = row.try_get(0)?;
                Ok(Some((state(&name)?, row.try_get(1)?, row.try_get(2)?)))
            }

            /// The result did not win: the attempt is `superseded` and the race is logged.
            async fn lose(
                mut tx: Transaction<'static, $db>,
                job_id: &str,
                attempt_id: &str,
                from: AttemptState,
                started_ms: i64,
                reason: Option<LossReason>,
                race: RaceIds<'_>,
            ) -> Result<Finished, LedgerError> {
                let row = sqlx::query("SELECT completed_by, completed_ms FROM jobs WHERE id = $1")
                    .bind(job_id)
                    .fetch_one(&mut *tx)
                    .await?;
                let winner: Option<String> = row.try_get(0)?;
                let winner_completed_ms: Option<i64> = row.try_get(1)?;
                let reason = reason.unwrap_or(if winner.is_some() {
                    LossReason::Completed
                } else {
                    LossReason::JobCancelled
                });
                sqlx::query(
                    "UPDATE attempts SET state = 'superseded', error = NULL, ended_ms = $2 \
                     WHERE id = $1",
                )
                    .bind(attempt_id)
                    .bind(race.now)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO races (id, job_id, loser_attempt, winner_attempt, \
                     loser_started_ms, winner_completed_ms, lost_ms, reason) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(race.race_id)
                .bind(job_id)
                .bind(attempt_id)
                .bind(&winner)
                .bind(started_ms)
                .bind(winner_completed_ms)
                .bind(race.now)
                .bind(reason.as_str())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(Finished::Lost {
                    job_id: job_id.to_string(),
                    from,
                    winner,
                    reason,
                })
            }

            /// A definite answer without a usable result: an open attempt becomes `failed`.
            pub(crate) async fn record_failure(
                &self,
                attempt_id: &str,
                error: &str,
                now: i64,
            ) -> Result<Transition, LedgerError> {
                let mut tx = self.begin().await?;
                let (job_id, from) = Self::lock_attempt_state(&mut tx, attempt_id).await?;
                if !from.is_open() {
                    tx.rollback().await?;
                    return Ok(Transition::Unchanged(from));
                }
                sqlx::query(
                    "UPDATE attempts SET state = 'failed', error = $2, ended_ms = $3 WHERE id = $1",
                )
                .bind(attempt_id)
                .bind(error)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(Transition::Changed {
                    job_id,
                    from,
                    to: AttemptState::Failed,
                })
            }

            async fn lock_attempt_state(
                tx: &mut Transaction<'static, $db>,
                attempt_id: &str,
            ) -> Result<(String, AttemptState), LedgerError> {
                let row = sqlx::query(concat!(
                    "SELECT job_id, state FROM attempts WHERE id = $1",
                    $fu
                ))
                .bind(attempt_id)
                .fetch_optional(&mut **tx)
                .await?;
                let Some(row) = row else {
                    return Err(LedgerError::NoSuchAttempt(attempt_id.to_string()));
                };
                let name: String = row.try_get(1)?;
                Ok((row.try_get(0)?, state(&name)?))
            }

            /// No definite answer: a `starting` attempt becomes `unknown`.
            pub(crate) async fn record_unknown(
                &self,
                attempt_id: &str,
                error: &str,
            ) -> Result<Transition, LedgerError> {
                let changed: Option<String> = sqlx::query_scalar(
                    "UPDATE attempts SET state = 'unknown', error = $2 \
                     WHERE id = $1 AND state = 'starting' RETURNING job_id",
                )
                .bind(attempt_id)
                .bind(error)
                .fetch_optional(&self.write)
                .await?;
                if let Some(job_id) = changed {
                    return Ok(Transition::Changed {
                        job_id,
                        from: AttemptState::Starting,
                        to: AttemptState::Unknown,
                    });
                }
                let name: Option<String> =
                    sqlx::query_scalar("SELECT state FROM attempts WHERE id = $1")
                        .bind(attempt_id)
                        .fetch_optional(&self.read)
                        .await?;
                match name {
                    Some(name) => Ok(Transition::Unchanged(state(&name)?)),
                    None => Err(LedgerError::NoSuchAttempt(attempt_id.to_string())),
                }
            }

            /// `starting` attempts whose deadline has passed, whoever started them: after a
            /// restart nobody else will. Answers (job, attempt) of each one changed here.
            pub(crate) async fn expire_overdue(
                &self,
                now: i64,
            ) -> Result<Vec<(String, String)>, LedgerError> {
                // The `IN` term repeats the predicate of the partial index `attempts_one_open`
                // (open attempts only), so both databases scan that small index.
                let rows = sqlx::query(
                    "SELECT id, job_id FROM attempts WHERE state IN ('starting', 'unknown') \
                     AND state = 'starting' AND deadline_ms <= $1 LIMIT 500",
                )
                .bind(now)
                .fetch_all(&self.read)
                .await?;
                let mut expired = Vec::new();
                for row in rows {
                    let id: String = row.try_get(0)?;
                    let job_id: String = row.try_get(1)?;
                    // One row per statement: two processes sweeping together cannot deadlock.
                    let done = sqlx::query(
                        "UPDATE attempts SET state = 'unknown', error = 'timeout' \
                         WHERE id = $1 AND state = 'starting' AND deadline_ms <= $2",
                    )
                    .bind(&id)
                    .bind(now)
                    .execute(&self.write)
                    .await?;
                    if done.rows_affected() == 1 {
                        expired.push((job_id, id));
                    }
                }
                Ok(expired)
            }

            pub(crate) async fn cancel_attempt(
                &self,
                owner: &str,
                attempt_id: &str,
                now: i64,
            ) -> Result<AttemptCancel, LedgerError> {
                let holder: Option<String> = sqlx::query_scalar(
                    "SELECT j.owner_id FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.id = $1",
                )
                .bind(attempt_id)
                .fetch_optional(&self.read)
                .await?;
                if holder.as_deref() != Some(owner) {
                    return Ok(AttemptCancel::NotFound);
                }
                let mut tx = self.begin().await?;
                let row = sqlx::query(concat!(
                    "SELECT ",
                    attempt_columns!(),
                    " FROM attempts a WHERE a.id = $1",
                    $fu
                ))
                .bind(attempt_id)
                .fetch_one(&mut *tx)
                .await?;
                let Some(mut attempt) = Self::decode_attempt(&row, 0)? else {
                    return Err(LedgerError::NoSuchAttempt(attempt_id.to_string()));
                };
                let from = attempt.state;
                match from {
                    AttemptState::Cancelled => {
                        tx.rollback().await?;
                        Ok(AttemptCancel::AlreadyCancelled(attempt))
                    }
                    AttemptState::Starting | AttemptState::Unknown => {
                        sqlx::query(
                            "UPDATE attempts SET state = 'cancelled', ended_ms = $2 WHERE id = $1",
                        )
                        .bind(attempt_id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        attempt.state = AttemptState::Cancelled;
                        attempt.ended_ms = Some(now);
                        Ok(AttemptCancel::Cancelled { attempt, from })
                    }
                    _ => {
                        tx.rollback().await?;
                        Ok(AttemptCancel::Terminal(attempt))
                    }
                }
            }

            pub(crate) async fn cancel_job(
                &self,
                owner: &str,
                job_id: &str,
                now: i64,
            ) -> Result<JobCancel, LedgerError> {
                let mut tx = self.begin().await?;
                let row = sqlx::query(concat!(
                    "SELECT completed_by, cancelled_ms FROM jobs WHERE id = $1 AND owner_id = $2",
                    $fu
                ))
                .bind(job_id)
                .bind(owner)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    tx.rollback().await?;
                    return Ok(JobCancel::NotFound);
                };
                let completed_by: Option<String> = row.try_get(0)?;
                let cancelled_ms: Option<i64> = row.try_get(1)?;
                if completed_by.is_some() {
                    tx.rollback().await?;
                    return Ok(JobCancel::Completed);
                }
                if cancelled_ms.is_some() {
                    tx.rollback().await?;
                    return match self.job(owner, job_id).await? {
                        Some(job) => Ok(JobCancel::AlreadyCancelled(job)),
                        None => Ok(JobCancel::NotFound),
                    };
                }
                sqlx::query(
                    "UPDATE jobs SET cancelled_ms = $2, version = version + 1 WHERE id = $1",
                )
                .bind(job_id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                let open = sqlx::query(concat!(
                    "SELECT id, state FROM attempts WHERE job_id = $1 \
                     AND state IN ('starting', 'unknown')",
                    $fu
                ))
                .bind(job_id)
                .fetch_all(&mut *tx)
                .await?;
                let mut released = Vec::with_capacity(open.len());
                for row in &open {
                    let name: String = row.try_get(1)?;
                    released.push((row.try_get::<String, _>(0)?, state(&name)?));
                }
                sqlx::query(
                    "UPDATE attempts SET state = 'cancelled', ended_ms = $2 \
                     WHERE job_id = $1 AND state IN ('starting', 'unknown')",
                )
                .bind(job_id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                match self.job(owner, job_id).await? {
                    Some(job) => Ok(JobCancel::Cancelled { job, released }),
                    None => Err(corrupt("a job vanished after it was cancelled")),
                }
            }

            /// See [`super::Ledger::ready`]: a write transaction that takes its locks and
            /// rolls back.
            pub(crate) async fn ready(&self) -> Result<(), LedgerError> {
                let mut tx = self.begin().await?;
                sqlx::query("SELECT 1").execute(&mut *tx).await?;
                tx.rollback().await?;
                Ok(())
            }

            pub(crate) async fn races(&self, job_id: &str) -> Result<Vec<Race>, LedgerError> {
                let rows = sqlx::query(
                    "SELECT id, job_id, loser_attempt, winner_attempt, loser_started_ms, \
                     winner_completed_ms, lost_ms, reason FROM races WHERE job_id = $1 \
                     ORDER BY lost_ms, id",
                )
                .bind(job_id)
                .fetch_all(&self.read)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(Race {
                            id: row.try_get(0)?,
                            job_id: row.try_get(1)?,
                            loser_attempt: row.try_get(2)?,
                            winner_attempt: row.try_get(3)?,
                            loser_started_ms: row.try_get(4)?,
                            winner_completed_ms: row.try_get(5)?,
                            lost_ms: row.try_get(6)?,
                            reason: row.try_get(7)?,
                        })
                    })
                    .collect()
            }
        }
    };
}

impl_store!(Sqlite, begin = "BEGIN IMMEDIATE", for_update = "");
impl_store!(
    Postgres,
    begin = "BEGIN ISOLATION LEVEL READ COMMITTED",
    for_update = " FOR UPDATE"
);

fn first_attempt(job: &Job) -> Result<&Attempt, LedgerError> {
    job.attempts
        .first()
        .ok_or_else(|| corrupt("a new job without its first attempt"))
}

impl Store<Sqlite> {
    /// Through the group-committing writer; see [`super::group_commit`].
    async fn insert_new(&self, job: &Job, input: String) -> Result<bool, LedgerError> {
        match &self.creations {
            Some(creations) => creations.insert(job.clone(), input).await,
            None => Err(corrupt("a SQLite ledger without its writer")),
        }
    }
}

/// One creation as the SQLite batch statements read it (see [`INSERT_JOBS_BATCH`]).
#[derive(serde::Serialize)]
struct CreationRow<'a> {
    id: &'a str,
    owner: &'a str,
    key: &'a str,
    fingerprint: &'a str,
    task: &'a str,
    provider: &'a str,
    input: &'a str,
    version: i64,
    created_ms: i64,
    attempt: &'a str,
    seq: i64,
    attempt_provider: &'a str,
    base_version: i64,
    started_ms: i64,
    deadline_ms: i64,
}

/// A whole batch of jobs in one statement, whatever its size: the rows travel as one
/// JSON array, so the statement is prepared once. A taken key (also one taken earlier
/// in the same batch: `json_each` keeps the array's order) inserts nothing and returns
/// nothing. `WHERE true` is SQLite's way to let `ON CONFLICT` follow a `SELECT`.
const INSERT_JOBS_BATCH: &str = "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, \
     task, provider, input, version, created_ms) \
     SELECT json_extract(c.value, '$.id'), json_extract(c.value, '$.owner'), \
     json_extract(c.value, '$.key'), json_extract(c.value, '$.fingerprint'), \
     json_extract(c.value, '$.task'), json_extract(c.value, '$.provider'), \
     json_extract(c.value, '$.input'), json_extract(c.value, '$.version'), \
     json_extract(c.value, '$.created_ms') FROM json_each($1) AS c WHERE true \
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING RETURNING id";

/// The first attempts of the jobs the batch inserted: a job id is fresh randomness, so
/// a job that holds it is one this batch wrote.
const INSERT_ATTEMPTS_BATCH: &str = "INSERT INTO attempts (id, job_id, seq, provider, state, \
     base_version, started_ms, deadline_ms) \
     SELECT json_extract(c.value, '$.attempt'), j.id, json_extract(c.value, '$.seq'), \
     json_extract(c.value, '$.attempt_provider'), 'starting', \
     json_extract(c.value, '$.base_version'), json_extract(c.value, '$.started_ms'), \
     json_extract(c.value, '$.deadline_ms') \
     FROM json_each($1) AS c JOIN jobs j ON j.id = json_extract(c.value, '$.id')";

/// Inserts every job of `jobs` (with its input as JSON text) whose key is free, with its
/// first attempt, inside the caller's transaction: two statements for the whole batch.
/// Answers, for each job in order, whether it was inserted (`false`: its key is taken).
pub(super) async fn insert_sqlite_batch(
    tx: &mut Transaction<'static, Sqlite>,
    jobs: &[(&Job, &str)],
) -> Result<Vec<bool>, LedgerError> {
    let rows = jobs
        .iter()
        .map(|(job, input)| {
            let attempt = first_attempt(job)?;
            Ok(CreationRow {
                id: &job.id,
                owner: &job.owner,
                key: &job.idempotency_key,
                fingerprint: &job.fingerprint,
                task: &job.task,
                provider: &job.provider,
                input,
                version: job.version,
                created_ms: job.created_ms,
                attempt: &attempt.id,
                seq: attempt.seq,
                attempt_provider: &attempt.provider,
                base_version: attempt.base_version,
                started_ms: attempt.started_ms,
                deadline_ms: attempt.deadline_ms,
            })
        })
        .collect::<Result<Vec<_>, LedgerError>>()?;
    let rows = serde_json::to_string(&rows)
        .map_err(|e| corrupt(format!("a batch of new jobs is not JSON: {e}")))?;
    let inserted: Vec<String> = sqlx::query_scalar(INSERT_JOBS_BATCH)
        .bind(&rows)
        .fetch_all(&mut **tx)
        .await?;
    if !inserted.is_empty() {
        sqlx::query(INSERT_ATTEMPTS_BATCH)
            .bind(&rows)
            .execute(&mut **tx)
            .await?;
    }
    let inserted: HashSet<&str> = inserted.iter().map(String::as_str).collect();
    Ok(jobs
        .iter()
        .map(|(job, _)| inserted.contains(job.id.as_str()))
        .collect())
}

/// One job whose key is free and its first attempt, with their own statements, inside
/// the caller's transaction; `false` when the key is taken. For inputs too large for the
/// batch's JSON text (see `group_commit`): the input is bound once, as it is.
pub(super) async fn insert_sqlite_one(
    tx: &mut Transaction<'static, Sqlite>,
    job: &Job,
    input: String,
) -> Result<bool, LedgerError> {
    let attempt = first_attempt(job)?;
    let done = sqlx::query(
        "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, task, provider, input, \
         version, created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (owner_id, idempotency_key) DO NOTHING",
    )
    .bind(&job.id)
    .bind(&job.owner)
    .bind(&job.idempotency_key)
    .bind(&job.fingerprint)
    .bind(&job.task)
    .bind(&job.provider)
    .bind(input)
    .bind(job.version)
    .bind(job.created_ms)
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query(INSERT_ATTEMPT)
        .bind(&attempt.id)
        .bind(&job.id)
        .bind(attempt.seq)
        .bind(&attempt.provider)
        .bind(attempt.base_version)
        .bind(attempt.started_ms)
        .bind(attempt.deadline_ms)
        .execute(&mut **tx)
        .await?;
    Ok(true)
}

/// How a PostgreSQL ledger creates a job: the job and its first attempt in one
/// statement, `$1`–`$9` the job's columns and `$10`–`$15` the attempt's. A taken key
/// inserts nothing and answers zero rows without an error: replays are routine here, and
/// a unique violation would leave a dead row and an `ERROR` line in the server's log for
/// every double click.
pub const CREATE_JOB_POSTGRES: &str = "WITH job AS (INSERT INTO jobs (id, owner_id, \
     idempotency_key, fingerprint, task, provider, input, version, created_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING RETURNING id) \
     INSERT INTO attempts (id, job_id, seq, provider, state, base_version, started_ms, \
     deadline_ms) SELECT $10, job.id, $11, $12, 'starting', $13, $14, $15 FROM job";

impl Store<Postgres> {
    /// [`CREATE_JOB_POSTGRES`], one round trip in its own READ COMMITTED transaction (the
    /// session default we set). It only inserts; the row that holds a taken key is read
    /// afterwards, in another statement, because this statement's snapshot cannot see a
    /// concurrent winner.
    async fn insert_new(&self, job: &Job, input: String) -> Result<bool, LedgerError> {
        let attempt = first_attempt(job)?;
        let inserted = sqlx::query(CREATE_JOB_POSTGRES)
            .bind(&job.id)
            .bind(&job.owner)
            .bind(&job.idempotency_key)
            .bind(&job.fingerprint)
            .bind(&job.task)
            .bind(&job.provider)
            .bind(input)
            .bind(job.version)
            .bind(job.created_ms)
            .bind(&attempt.id)
            .bind(attempt.seq)
            .bind(&attempt.provider)
            .bind(attempt.base_version)
            .bind(attempt.started_ms)
            .bind(attempt.deadline_ms)
            .execute(&self.write)
            .await?;
        Ok(inserted.rows_affected() == 1)
    }
}
