//! The schema, shipped with the crate and applied at start.
//!
//! Several processes may start together on one database: PostgreSQL serializes them on
//! a transaction-scoped advisory lock, SQLite on `BEGIN IMMEDIATE`. The whole migration
//! runs in that one transaction (both databases have transactional DDL), so a process
//! sees the schema either absent or complete.

use sqlx::{Postgres, Row, Sqlite};

use super::LedgerError;
use super::store::Store;

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs_attempts_races",
        sql: include_str!("migrations/0001_jobs_attempts_races.sql"),
    },
    Migration {
        version: 2,
        name: "allowlist_seen",
        sql: include_str!("migrations/0002_allowlist_seen.sql"),
    },
];

/// `conform` in ASCII: the advisory lock key every conform process agrees on.
const ADVISORY_LOCK_KEY: i64 = 0x63_6f_6e_66_6f_72_6d;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS conform_migrations (\
     version BIGINT PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, \
     applied_ms BIGINT NOT NULL)";

macro_rules! impl_migrate {
    ($db:ty, lock = $lock:expr) => {
        impl Store<$db> {
            pub(crate) async fn migrate(&self) -> Result<(), LedgerError> {
                let mut tx = self.begin().await?;
                if let Some(lock) = $lock {
                    sqlx::query(lock)
                        .bind(ADVISORY_LOCK_KEY)
                        .execute(&mut *tx)
                        .await?;
                }
                sqlx::query(CREATE_TABLE).execute(&mut *tx).await?;
                let rows = sqlx::query("SELECT version, checksum FROM conform_migrations")
                    .fetch_all(&mut *tx)
                    .await?;
                let mut applied = Vec::with_capacity(rows.len());
                for row in &rows {
                    applied.push((row.try_get::<i64, _>(0)?, row.try_get::<String, _>(1)?));
                }
                check_applied(&applied)?;
                for m in MIGRATIONS {
                    if applied.iter().any(|(v, _)| *v == m.version) {
                        continue;
                    }
                    sqlx::raw_sql(m.sql).execute(&mut *tx).await.map_err(|e| {
                        LedgerError::Migration(format!(
                            "migration {} ({}) failed: {e}",
                            m.version, m.name
                        ))
                    })?;
                    sqlx::query(
                        "INSERT INTO conform_migrations (version, name, checksum, applied_ms) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(m.version)
                    .bind(m.name)
                    .bind(checksum(m.sql))
                    .bind(super::now_ms())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    };
}

impl_migrate!(Sqlite, lock = None::<&'static str>);
impl_migrate!(Postgres, lock = Some("SELECT pg_advisory_xact_lock($1)"));

fn checksum(sql: &str) -> String {
    conform_config::digest::bytes_hex(sql.as_bytes())
}

/// Refuses a database migrated by another build: an edited migration or a newer one.
fn check_applied(applied: &[(i64, String)]) -> Result<(), LedgerError> {
    for (version, sum) in applied {
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            None => {
                return Err(LedgerError::Migration(format!(
                    "the database has migration {version}, which this conform does not know: \
                     it was migrated by a newer conform; upgrade conform"
                )));
            }
            Some(m) if checksum(m.sql) != *sum => {
                return Err(LedgerError::Migration(format!(
                    "migration {version} ({}) differs from the one applied to the database; \
                     restore the original migration file",
                    m.name
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}
