//! SQLite job creation with group commit.
//!
//! SQLite has one writer at a time and, with `synchronous=FULL`, one fsync per commit:
//! a transaction per creation caps creations at the disk's fsync rate. Creations that
//! arrive while the writer is busy are therefore committed together, in two statements
//! for the whole batch (see `insert_sqlite_batch`). Each one still inserts first: a taken
//! key inserts nothing (`ON CONFLICT DO NOTHING`), and the caller then reads the row that
//! holds the key in a separate statement. Every caller is answered only after the commit
//! that made its job durable; if the batch fails, nothing of it was written.

use sqlx::{Pool, Sqlite};
use tokio::sync::{mpsc, oneshot};

use super::LedgerError;
use super::model::Job;
use super::store::insert_sqlite_batch;

/// The most creations one transaction carries.
const MAX_BATCH: usize = 256;

struct Pending {
    job: Job,
    reply: oneshot::Sender<Result<bool, String>>,
}

/// The queue to the task that writes creations.
#[derive(Debug, Clone)]
pub(crate) struct Creations {
    queue: mpsc::Sender<Pending>,
}

impl Creations {
    /// Starts the writing task on the current runtime; it stops when the last
    /// `Creations` is dropped.
    pub(crate) fn start(pool: Pool<Sqlite>) -> Creations {
        let (queue, pending) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(run(pool, pending));
        Creations { queue }
    }

    /// Inserts the job and its first attempt; `false` when the key is taken.
    pub(crate) async fn insert(&self, job: Job) -> Result<bool, LedgerError> {
        let stopped = || LedgerError::Write("the SQLite writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending { job, reply })
            .await
            .map_err(|_| stopped())?;
        answer
            .await
            .map_err(|_| stopped())?
            .map_err(LedgerError::Write)
    }
}

async fn run(pool: Pool<Sqlite>, mut pending: mpsc::Receiver<Pending>) {
    while let Some(first) = pending.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match pending.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        match write(&pool, &batch).await {
            Ok(inserted) => {
                for (p, fresh) in batch.into_iter().zip(inserted) {
                    let _ = p.reply.send(Ok(fresh));
                }
            }
            Err(e) => {
                // Nothing was committed: every caller may retry with its key.
                let message = e.to_string();
                for p in batch {
                    let _ = p.reply.send(Err(message.clone()));
                }
            }
        }
    }
}

async fn write(pool: &Pool<Sqlite>, batch: &[Pending]) -> Result<Vec<bool>, LedgerError> {
    let jobs: Vec<&Job> = batch.iter().map(|p| &p.job).collect();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let inserted = insert_sqlite_batch(&mut tx, &jobs).await?;
    tx.commit().await?;
    Ok(inserted)
}
