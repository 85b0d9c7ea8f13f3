//! A back door into the orchestrator's database, beside the ledger, for the decorators
//! that break what the ledger's API keeps (the owner check on a read, the result slot's
//! compare-and-swap): the API has no way to do those things, which is the point of it.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Pool, Postgres, Sqlite};

pub enum Db {
    Sqlite(Pool<Sqlite>),
    Postgres(Pool<Postgres>),
}

/// The same statements on either pool.
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            Db::Sqlite($pool) => $body,
            Db::Postgres($pool) => $body,
        }
    };
}

impl Db {
    /// The database at `url`, which the ledger has opened and migrated already.
    pub async fn connect(url: &str) -> Result<Db, sqlx::Error> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = PgPoolOptions::new().max_connections(2).connect(url).await?;
            return Ok(Db::Postgres(pool));
        }
        // The ledger's writer holds SQLite's lock in turns with this one.
        let options = SqliteConnectOptions::from_str(url)?.busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await?;
        Ok(Db::Sqlite(pool))
    }

    /// Who owns job `id`, whoever asks.
    pub async fn owner_of_job(&self, id: &str) -> Result<Option<String>, sqlx::Error> {
        on_pool!(self, |pool| {
            sqlx::query_scalar("SELECT owner_id FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await
        })
    }

    /// The job of attempt `attempt_id`, if `owner` owns it.
    pub async fn job_of_attempt(
        &self,
        owner: &str,
        attempt_id: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        on_pool!(self, |pool| {
            sqlx::query_scalar(
                "SELECT j.id FROM attempts a JOIN jobs j ON j.id = a.job_id \
                 WHERE a.id = $1 AND j.owner_id = $2",
            )
            .bind(attempt_id)
            .bind(owner)
            .fetch_optional(pool)
            .await
        })
    }

    /// Whether `owner` has a job under `key`.
    pub async fn key_taken(&self, owner: &str, key: &str) -> Result<bool, sqlx::Error> {
        let id: Option<String> = on_pool!(self, |pool| {
            sqlx::query_scalar("SELECT id FROM jobs WHERE owner_id = $1 AND idempotency_key = $2")
                .bind(owner)
                .bind(key)
                .fetch_optional(pool)
                .await
        })?;
        Ok(id.is_some())
    }

    /// Writes `result` into job `job_id`'s slot for attempt `attempt_id` without the
    /// compare-and-swap on the version: unconditionally, or (`only_if_free`) as long as
    /// no result holds it, cancelled or not. Answers the job's new version when it did.
    pub async fn claim_without_version(
        &self,
        job_id: &str,
        attempt_id: &str,
        result: &str,
        now_ms: i64,
        only_if_free: bool,
    ) -> Result<Option<i64>, sqlx::Error> {
        let claim = if only_if_free {
            "UPDATE jobs SET result = $2, completed_by = $3, completed_ms = $4, \
             version = version + 1 WHERE id = $1 AND completed_by IS NULL RETURNING version"
        } else {
            "UPDATE jobs SET result = $2, completed_by = $3, completed_ms = $4, \
             version = version + 1 WHERE id = $1 RETURNING version"
        };
        on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let version: Option<i64> = sqlx::query_scalar(claim)
                .bind(job_id)
                .bind(result)
                .bind(attempt_id)
                .bind(now_ms)
                .fetch_optional(&mut *tx)
                .await?;
            if version.is_some() {
                sqlx::query(
                    "UPDATE attempts SET state = 'succeeded', error = NULL, ended_ms = $2 \
                     WHERE id = $1",
                )
                .bind(attempt_id)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(version)
        })
    }
}
