//! The on-disk sets an import keeps: the Batch output index (`custom_id` → where its
//! answer line is), the fingerprints of the requests seen (dedup, with the case a
//! repeat's answers join) and the distinct answer schemas.
//!
//! Each grows by one entry per request, so held in memory they made an import's peak
//! grow with its input (about 125 bytes per request). Here they are tables of a SQLite
//! file in the suite writer's staging folder: memory is SQLite's page cache, bounded by
//! [`CACHE_KIB`], whatever the number of requests. The file is removed by
//! [`Scratch::close`] before the suite is moved into place, and with the staging folder
//! when an import fails.
//!
//! Nothing here must survive a crash (an interrupted import leaves no suite), so the file
//! has no journal and is never synced; writes are grouped in transactions of
//! [`BATCH`] rows, since a transaction per row would cost a file lock and a page write
//! each.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

/// The scratch file's name in the staging folder; a leading dot and a name no suite file
/// has, so it can never be mistaken for one.
pub const FILE_NAME: &str = ".import-scratch.sqlite3";

/// SQLite's page cache, in KiB: the memory the scratch index may take.
pub const CACHE_KIB: i64 = 2048;

/// Rows written per transaction.
pub const BATCH: usize = 4096;

/// Why the scratch index failed; [`super::ImportError::Scratch`] names its file.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    /// SQLite refused.
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The index file could not be read or written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A count or an offset too large for SQLite.
    #[error("a value does not fit SQLite's 64-bit integer: {0}")]
    TooLarge(#[from] std::num::TryFromIntError),
}

/// Where a Batch output line is: which of the output files, its line number (for
/// messages) and its byte offset (to read it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    /// Which of the output files, from 0.
    pub file: usize,
    /// The line, from 1.
    pub line: usize,
    /// Where the line starts in the file, in bytes.
    pub offset: u64,
}

/// The scratch index of one import.
pub struct Scratch {
    path: PathBuf,
    conn: Connection,
    /// Rows written in the open transaction (0: none is open).
    pending: usize,
    /// Entries in the index, kept here so that counting is not a table scan.
    index_len: u64,
    /// Distinct schemas inserted.
    schemas_len: u64,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("path", &self.path)
            .field("index_len", &self.index_len)
            .field("schemas_len", &self.schemas_len)
            .finish_non_exhaustive()
    }
}

impl Scratch {
    /// Creates the scratch file [`FILE_NAME`] in `dir` (replacing one left there) with
    /// its empty tables.
    pub fn open(dir: &Path) -> Result<Scratch, ScratchError> {
        let path = dir.join(FILE_NAME);
        // The staging folder is new, so a file here is one an earlier process left.
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(e.into());
        }
        let conn = Connection::open(&path)?;
        // No journal and no fsync: the file is thrown away after the import, and a crash
        // loses the staging folder it is in anyway. EXCLUSIVE locking takes the file lock
        // once instead of per transaction: no other process reads it. The cache bound is
        // what keeps memory flat; a negative size is in KiB.
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = OFF;
             PRAGMA synchronous = OFF;
             PRAGMA locking_mode = EXCLUSIVE;
             PRAGMA cache_size = -{CACHE_KIB};
             CREATE TABLE batch_index (
                 custom_id TEXT PRIMARY KEY NOT NULL,
                 file INTEGER NOT NULL,
                 line INTEGER NOT NULL,
                 offset INTEGER NOT NULL
             ) WITHOUT ROWID;
             CREATE TABLE seen (
                 fingerprint BLOB PRIMARY KEY NOT NULL,
                 case_id TEXT
             ) WITHOUT ROWID;
             CREATE TABLE schemas (
                 fingerprint BLOB PRIMARY KEY NOT NULL
             ) WITHOUT ROWID;
             CREATE TABLE events (
                 span TEXT NOT NULL,
                 seq INTEGER NOT NULL,
                 record TEXT NOT NULL,
                 PRIMARY KEY (span, seq)
             ) WITHOUT ROWID;
             CREATE INDEX events_in_order ON events (seq);"
        ))?;
        Ok(Scratch {
            path,
            conn,
            pending: 0,
            index_len: 0,
            schemas_len: 0,
        })
    }

    /// The scratch file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records where the answer to `id` is; `true` when `id` already had one, which this
    /// one replaces (the last answer to a `custom_id` is kept).
    pub fn index_put(&mut self, id: &str, at: At) -> Result<bool, ScratchError> {
        self.begin()?;
        let file = i64::try_from(at.file)?;
        let line = i64::try_from(at.line)?;
        let offset = i64::try_from(at.offset)?;
        // A repeated custom_id is rare: try the insert, and update only when it did not
        // take.
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT OR IGNORE INTO batch_index (custom_id, file, line, offset) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id, file, line, offset])?;
        if inserted == 0 {
            self.conn
                .prepare_cached(
                    "UPDATE batch_index SET file = ?2, line = ?3, offset = ?4 WHERE custom_id = ?1",
                )?
                .execute(params![id, file, line, offset])?;
        } else {
            self.index_len += 1;
        }
        self.wrote()?;
        Ok(inserted == 0)
    }

    /// Where the answer to `id` is, if one was indexed.
    pub fn index_get(&self, id: &str) -> Result<Option<At>, ScratchError> {
        let row = self
            .conn
            .prepare_cached("SELECT file, line, offset FROM batch_index WHERE custom_id = ?1")?
            .query_row(params![id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .optional()?;
        row.map(at_of).transpose()
    }

    /// Takes the answer to `id` out of the index: where it is, if one was indexed.
    pub fn index_take(&mut self, id: &str) -> Result<Option<At>, ScratchError> {
        self.begin()?;
        let row = self
            .conn
            .prepare_cached(
                "DELETE FROM batch_index WHERE custom_id = ?1 RETURNING file, line, offset",
            )?
            .query_row(params![id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .optional()?;
        if row.is_some() {
            self.index_len -= 1;
        }
        self.wrote()?;
        row.map(at_of).transpose()
    }

    /// Removes `id` from the index (a request that was skipped: its answer is not an
    /// unmatched one).
    pub fn index_remove(&mut self, id: &str) -> Result<(), ScratchError> {
        self.index_take(id).map(|_| ())
    }

    /// How many answers are indexed and not taken.
    pub fn index_len(&self) -> u64 {
        self.index_len
    }

    /// Records a request's fingerprint, with the id of the case written for it when its
    /// recorded answers may be joined by a repeat's; `false` when it was seen already (the
    /// first one's entry is kept).
    pub fn seen_insert(
        &mut self,
        fingerprint: &[u8; 32],
        case_id: Option<&str>,
    ) -> Result<bool, ScratchError> {
        self.begin()?;
        let inserted = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO seen (fingerprint, case_id) VALUES (?1, ?2)")?
            .execute(params![fingerprint, case_id])?;
        self.wrote()?;
        Ok(inserted == 1)
    }

    /// Whether a request with this fingerprint was seen, and if so the case id recorded
    /// with it.
    pub fn seen_get(&self, fingerprint: &[u8; 32]) -> Result<Option<Option<String>>, ScratchError> {
        Ok(self
            .conn
            .prepare_cached("SELECT case_id FROM seen WHERE fingerprint = ?1")?
            .query_row(params![fingerprint], |r| r.get::<_, Option<String>>(0))
            .optional()?)
    }

    /// Records a schema's fingerprint; `true` when it is new.
    pub fn schema_insert(&mut self, fingerprint: &[u8; 32]) -> Result<bool, ScratchError> {
        self.begin()?;
        let inserted = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO schemas (fingerprint) VALUES (?1)")?
            .execute(params![fingerprint])?;
        self.schemas_len += inserted as u64;
        self.wrote()?;
        Ok(inserted == 1)
    }

    /// How many distinct schemas were inserted.
    pub fn schemas_len(&self) -> u64 {
        self.schemas_len
    }

    /// Keeps a log record (`record`, JSON) for the span `span` (trace and span id); `seq`
    /// orders a span's records as the input did.
    pub fn event_put(&mut self, span: &str, seq: u64, record: &str) -> Result<(), ScratchError> {
        self.begin()?;
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO events (span, seq, record) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![span, i64::try_from(seq)?, record])?;
        self.wrote()
    }

    /// Takes the log records of `span` out, in input order.
    pub fn events_take(&mut self, span: &str) -> Result<Vec<String>, ScratchError> {
        self.begin()?;
        let records = self
            .conn
            .prepare_cached("DELETE FROM events WHERE span = ?1 RETURNING seq, record")?
            .query_map(params![span], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        self.wrote()?;
        let mut records = records;
        // RETURNING gives no order guarantee.
        records.sort_by_key(|(seq, _)| *seq);
        Ok(records.into_iter().map(|(_, r)| r).collect())
    }

    /// The span of the earliest record still kept, if any: unclaimed records are taken
    /// in input order.
    pub fn events_any(&self) -> Result<Option<String>, ScratchError> {
        Ok(self
            .conn
            .prepare_cached("SELECT span FROM events ORDER BY seq LIMIT 1")?
            .query_row([], |r| r.get::<_, String>(0))
            .optional()?)
    }

    /// The spans whose log records were never taken, and how many records they had.
    pub fn events_left(&self) -> Result<(u64, u64), ScratchError> {
        Ok(self
            .conn
            .prepare_cached("SELECT COUNT(DISTINCT span), COUNT(*) FROM events")?
            .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .map(|(a, b)| (a.max(0) as u64, b.max(0) as u64))?)
    }

    /// Closes the database and removes its file.
    pub fn close(self) -> Result<(), ScratchError> {
        let Scratch { path, conn, .. } = self;
        // The open transaction is not committed: the file is removed anyway.
        conn.close().map_err(|(_, e)| e)?;
        std::fs::remove_file(&path)?;
        Ok(())
    }

    /// Opens a transaction if none is.
    fn begin(&mut self) -> Result<(), ScratchError> {
        if self.pending == 0 {
            self.conn.prepare_cached("BEGIN")?.execute([])?;
        }
        Ok(())
    }

    /// Counts a row written, and commits every [`BATCH`] rows.
    fn wrote(&mut self) -> Result<(), ScratchError> {
        self.pending += 1;
        if self.pending >= BATCH {
            self.conn.prepare_cached("COMMIT")?.execute([])?;
            self.pending = 0;
        }
        Ok(())
    }
}

fn at_of((file, line, offset): (i64, i64, i64)) -> Result<At, ScratchError> {
    Ok(At {
        file: usize::try_from(file)?,
        line: usize::try_from(line)?,
        offset: u64::try_from(offset)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(i: u32) -> [u8; 32] {
        let mut f = [0u8; 32];
        f[..4].copy_from_slice(&i.to_be_bytes());
        f[31] = 0xA5;
        f
    }

    fn at(i: usize) -> At {
        At {
            file: i % 2,
            line: i + 1,
            offset: (i as u64) * 1000 + 7,
        }
    }

    #[test]
    fn a_real_file_keeps_every_entry_across_transaction_batches_and_reports_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Scratch::open(dir.path()).unwrap();
        assert!(s.path().exists());
        let n = 10_000;
        assert!(n > 2 * BATCH);

        for i in 0..n {
            assert!(!s.index_put(&format!("request-{i}"), at(i)).unwrap());
            let case = (i % 3 == 0).then(|| format!("case-{i}"));
            assert!(s.seen_insert(&fp(i as u32), case.as_deref()).unwrap());
        }
        assert_eq!(s.index_len(), n as u64);

        // A second answer to the same custom_id replaces the first, and says so.
        let later = At {
            file: 1,
            line: 99_999,
            offset: 123_456_789_012,
        };
        assert!(s.index_put("request-5", later).unwrap());
        assert_eq!(s.index_len(), n as u64);
        assert_eq!(s.index_get("request-5").unwrap(), Some(later));

        // A fingerprint seen twice says so, and keeps the first one's case id.
        assert!(!s.seen_insert(&fp(3), None).unwrap());
        assert_eq!(s.seen_get(&fp(3)).unwrap(), Some(Some("case-3".into())));
        assert_eq!(s.seen_get(&fp(4)).unwrap(), Some(None));
        assert_eq!(s.seen_get(&fp(n as u32)).unwrap(), None);

        // Every entry is still there, from the first transaction batch to the last.
        for i in (0..n).filter(|&i| i != 5) {
            assert_eq!(s.index_get(&format!("request-{i}")).unwrap(), Some(at(i)));
            let case = (i % 3 == 0).then(|| format!("case-{i}"));
            assert_eq!(s.seen_get(&fp(i as u32)).unwrap(), Some(case));
        }

        // Taking an answer removes it; a second take finds nothing.
        assert_eq!(s.index_take("request-0").unwrap(), Some(at(0)));
        assert_eq!(s.index_take("request-0").unwrap(), None);
        s.index_remove("request-1").unwrap();
        assert_eq!(s.index_get("request-1").unwrap(), None);
        s.index_remove("never-indexed").unwrap();
        assert_eq!(s.index_len(), n as u64 - 2);

        for seq in [3, 1, 2] {
            s.event_put("t1s1", seq, &format!("r{seq}")).unwrap();
        }
        s.event_put("t1s2", 4, "other").unwrap();
        s.event_put("t0s9", 5, "later").unwrap();
        assert_eq!(s.events_any().unwrap().as_deref(), Some("t1s1"));
        assert_eq!(s.events_take("t0s9").unwrap(), ["later"]);
        assert_eq!(s.events_left().unwrap(), (2, 4));
        assert_eq!(s.events_take("t1s1").unwrap(), ["r1", "r2", "r3"]);
        assert!(s.events_take("t1s1").unwrap().is_empty());
        assert_eq!(s.events_left().unwrap(), (1, 1));
        assert_eq!(s.events_any().unwrap().as_deref(), Some("t1s2"));
        s.events_take("t1s2").unwrap();
        assert_eq!(s.events_any().unwrap(), None);

        assert!(s.schema_insert(&fp(1)).unwrap());
        assert!(!s.schema_insert(&fp(1)).unwrap());
        assert!(s.schema_insert(&fp(2)).unwrap());
        assert_eq!(s.schemas_len(), 2);

        let path = s.path().to_path_buf();
        s.close().unwrap();
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
