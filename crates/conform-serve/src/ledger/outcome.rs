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
    KeyReused {
        /// The job the key is bound to.
        job_id: String,
    },
}

/// What a request for a new attempt amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Started {
    /// The attempt is `starting`; `input` is the job's input, to send upstream.
    Started {
        /// The new attempt.
        attempt: Attempt,
        /// The job's input.
        input: Value,
    },
    /// The owner has no job by that id.
    NotFound,
    /// A result already won: nothing is left to try.
    JobCompleted,
    /// The user cancelled the job.
    JobCancelled,
    /// Another attempt is `starting` or `unknown`.
    InProgress {
        /// The open attempt.
        attempt_id: String,
    },
}

/// What a result that arrived for an attempt amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// The compare-and-swap claimed the result slot: the attempt is `succeeded`.
    Won {
        /// The job it completed.
        job_id: String,
        /// The attempt's state before.
        from: AttemptState,
        /// The job's version after the claim.
        version: i64,
    },
    /// The slot was taken or the job cancelled: the attempt is `superseded`, the result
    /// discarded and the race logged.
    Lost {
        /// The job it was for.
        job_id: String,
        /// The attempt's state before.
        from: AttemptState,
        /// The attempt that had won, if one had.
        winner: Option<String>,
        /// Why it lost.
        reason: LossReason,
    },
    /// The attempt had already ended (`succeeded`, `superseded` or `failed`): nothing changed.
    Ignored {
        /// The state it had ended in.
        state: AttemptState,
    },
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
    /// The name the race log records.
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
    /// The attempt moved from one state to another.
    Changed {
        /// The attempt's job.
        job_id: String,
        /// The state before.
        from: AttemptState,
        /// The state now.
        to: AttemptState,
    },
    /// The attempt was in a state that this event does not change.
    Unchanged(AttemptState),
}

/// What an external cancel of an attempt amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptCancel {
    /// Released now: the attempt is `cancelled`.
    Cancelled {
        /// The attempt, now `cancelled`.
        attempt: Attempt,
        /// The open state it was in.
        from: AttemptState,
    },
    /// It was `cancelled` before: nothing changed.
    AlreadyCancelled(Attempt),
    /// `succeeded`, `superseded` or `failed`.
    Terminal(Attempt),
    /// The owner has no attempt by that id.
    NotFound,
}

/// What a user's cancel of a job amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum JobCancel {
    /// Cancelled now; `released` lists the open attempts that became `cancelled`.
    Cancelled {
        /// The job, now cancelled.
        job: Job,
        /// Each released attempt's id and the state it left.
        released: Vec<(String, AttemptState)>,
    },
    /// It was cancelled before: nothing changed.
    AlreadyCancelled(Job),
    /// A result already won, too late to cancel.
    Completed,
    /// The owner has no job by that id.
    NotFound,
}
