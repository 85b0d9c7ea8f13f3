//! What each ledger operation can answer. Every answer that changed an attempt's state
//! carries the state it came from, so the change can be logged.

use serde_json::Value;

use super::model::{Attempt, AttemptState, Job};

/// What a job-creating request amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new job with its first attempt, `starting`.
    New(Job),
    /// The key was already bound to a job with the same fingerprint: nothing changed.
    Replayed(Job),
    /// The key is bound to a job with another fingerprint: nothing changed.
    KeyReused { job_id: String },
}

/// What a request for a new attempt amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Started {
    /// The attempt is `starting`; `input` is the job's input, to send upstream.
    Started {
        attempt: Attempt,
        input: Value,
    },
    NotFound,
    JobCompleted,
    JobCancelled,
    /// Another attempt is `starting` or `unknown`.
    InProgress {
        attempt_id: String,
    },
}

/// What a result that arrived for an attempt amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// The compare-and-swap claimed the result slot: the attempt is `succeeded`.
    Won {
        job_id: String,
        from: AttemptState,
        version: i64,
    },
    /// The slot was taken or the job cancelled: the attempt is `superseded`, the result
    /// discarded and the race logged.
    Lost {
        job_id: String,
        from: AttemptState,
        winner: Option<String>,
        reason: LossReason,
    },
    /// The attempt had already ended (`succeeded`, `superseded` or `failed`): nothing changed.
    Ignored { state: AttemptState },
}

/// Why a result did not win, as the race log records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// Another attempt had won.
    Completed,
    /// The job was cancelled.
    JobCancelled,
    /// The database refused the compare-and-swap as a serialization failure
    /// (only under REPEATABLE READ or SERIALIZABLE): a lost race, not an error.
    SerializationFailure,
}

impl LossReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Completed => "completed",
            LossReason::JobCancelled => "job_cancelled",
            LossReason::SerializationFailure => "serialization_failure",
        }
    }
}

/// A guarded state change of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Changed {
        job_id: String,
        from: AttemptState,
        to: AttemptState,
    },
    /// The attempt was in a state that this event does not change.
    Unchanged(AttemptState),
}

/// What an external cancel of an attempt amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptCancel {
    Cancelled {
        attempt: Attempt,
        from: AttemptState,
    },
    AlreadyCancelled(Attempt),
    /// `succeeded`, `superseded` or `failed`.
    Terminal(Attempt),
    NotFound,
}

/// What a user's cancel of a job amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum JobCancel {
    /// Cancelled now; `released` lists the open attempts that became `cancelled`.
    Cancelled {
        job: Job,
        released: Vec<(String, AttemptState)>,
    },
    AlreadyCancelled(Job),
    Completed,
    NotFound,
}
