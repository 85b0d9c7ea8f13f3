//! What `conform serve` has read in the allowlist, kept in the ledger: per (suite,
//! provider), when the newest statement about it was made (table `allowlist_seen`). Each
//! write keeps the later of the stored time and the new one, so concurrent processes and
//! statements read out of order only ever move it forward.

use sqlx::{Postgres, Row, Sqlite};
use time::OffsetDateTime;

use super::LedgerError;
use super::store::Store;

/// Keeps the stored time unless the new one is later.
const REMEMBER: &str = "INSERT INTO allowlist_seen (suite, provider, statement_ns, seen_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (suite, provider) DO UPDATE SET \
     statement_ns = excluded.statement_ns, seen_ms = excluded.seen_ms \
     WHERE excluded.statement_ns > allowlist_seen.statement_ns";

const NEWEST: &str = "SELECT statement_ns FROM allowlist_seen WHERE suite = $1 AND provider = $2";

/// A time as the table holds it; `None` past the year 2262, which is then not kept.
pub(crate) fn nanos(at: OffsetDateTime) -> Option<i64> {
    i64::try_from(at.unix_timestamp_nanos()).ok()
}

macro_rules! impl_seen {
    ($db:ty) => {
        impl Store<$db> {
            pub(crate) async fn remember(
                &self,
                stated: &[(&str, &str, i64)],
                now_ms: i64,
            ) -> Result<(), LedgerError> {
                let mut tx = self.begin().await?;
                for (suite, provider, ns) in stated {
                    sqlx::query(REMEMBER)
                        .bind(*suite)
                        .bind(*provider)
                        .bind(*ns)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            pub(crate) async fn newest(
                &self,
                suite: &str,
                provider: &str,
            ) -> Result<Option<i64>, LedgerError> {
                let row = sqlx::query(NEWEST)
                    .bind(suite)
                    .bind(provider)
                    .fetch_optional(&self.read)
                    .await?;
                Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?)
            }
        }
    };
}

impl_seen!(Sqlite);
impl_seen!(Postgres);
