//! SQLite job creation with group commit.
//!
//! SQLite has one writer at a time and, with `synchronous=FULL`, one fsync per commit:
//! a transaction per creation caps creations at the disk's fsync rate. Creations that
//! arrive while the writer is busy are therefore committed together, in two statements
//! for the whole batch (see `insert_sqlite_batch`). Each one still inserts first: a taken
//! key inserts nothing (`ON CONFLICT DO NOTHING`), and the caller then reads the row that
//! holds the key in a separate statement. Every caller is answered only after the commit
//! that made its job durable; if the batch fails, nothing of it was written.
//!
//! A job whose input is large is inserted with its own statements instead, in its place
//! in the same transaction: inside the batch's one JSON text its input would be copied
//! several times over by SQLite's JSON functions (about ten times a 2 MB input).

use sqlx::{Pool, Sqlite};
use tokio::sync::{mpsc, oneshot};

use super::LedgerError;
use super::model::Job;
use super::store::{insert_sqlite_batch, insert_sqlite_one};

/// The most creations one transaction carries.
const MAX_BATCH: usize = 256;

/// Inputs of more bytes than this are inserted with their own statements.
const LARGE_INPUT: usize = 64 * 1024;

struct Pending {
    job: Job,
    /// The job's input as JSON text.
    input: String,
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

    /// Inserts the job (its input given as JSON text) and its first attempt; `false`
    /// when the key is taken.
    pub(crate) async fn insert(&self, job: Job, input: String) -> Result<bool, LedgerError> {
        let stopped = || LedgerError::Write("the SQLite writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending { job, input, reply })
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
        match write(&pool, &mut batch).await {
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

/// The batch in one transaction, in arrival order: runs of small inputs as batch
/// statements, each large input on its own.
async fn write(pool: &Pool<Sqlite>, batch: &mut [Pending]) -> Result<Vec<bool>, LedgerError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut inserted = Vec::with_capacity(batch.len());
    let mut start = 0;
    for i in 0..=batch.len() {
        let large = batch.get(i).is_some_and(|p| p.input.len() > LARGE_INPUT);
        if (large || i == batch.len()) && start < i {
            let run: Vec<(&Job, &str)> = batch[start..i]
                .iter()
                .map(|p| (&p.job, p.input.as_str()))
                .collect();
            inserted.extend(insert_sqlite_batch(&mut tx, &run).await?);
        }
        if large {
            // Moved into the statement: the input is bound without another copy.
            let input = std::mem::take(&mut batch[i].input);
            inserted.push(insert_sqlite_one(&mut tx, &batch[i].job, input).await?);
            start = i + 1;
        }
    }
    tx.commit().await?;
    Ok(inserted)
}
