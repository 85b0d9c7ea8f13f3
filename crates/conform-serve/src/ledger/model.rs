//! Jobs, attempts and their states, as the contract names them.

use serde_json::Value;

/// The state of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptState {
    /// The provider call is in flight.
    Starting,
    /// The outcome is not known: the work may be happening or done.
    Unknown,
    /// Released by an external process; a late result may still compete.
    Cancelled,
    /// Its result won the job's result slot.
    Succeeded,
    /// It returned a result that did not win.
    Superseded,
    /// A definite answer without a usable result.
    Failed,
}

impl AttemptState {
    /// Every state, in the contract's order.
    pub const ALL: [AttemptState; 6] = [
        AttemptState::Starting,
        AttemptState::Unknown,
        AttemptState::Cancelled,
        AttemptState::Succeeded,
        AttemptState::Superseded,
        AttemptState::Failed,
    ];

    /// The name stored in the database and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Starting => "starting",
            AttemptState::Unknown => "unknown",
            AttemptState::Cancelled => "cancelled",
            AttemptState::Succeeded => "succeeded",
            AttemptState::Superseded => "superseded",
            AttemptState::Failed => "failed",
        }
    }

    /// The state a stored name stands for; `None` for a name this build does not know.
    pub fn parse(name: &str) -> Option<AttemptState> {
        AttemptState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Open attempts block new ones.
    pub fn is_open(self) -> bool {
        matches!(self, AttemptState::Starting | AttemptState::Unknown)
    }

    /// Whether a result that arrives now may still compete for the job's result slot.
    pub fn accepts_result(self) -> bool {
        matches!(
            self,
            AttemptState::Starting | AttemptState::Unknown | AttemptState::Cancelled
        )
    }
}

impl std::fmt::Display for AttemptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a job, derived from its row and its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// An attempt's result won the result slot.
    Succeeded,
    /// The user cancelled it before any result won.
    Cancelled,
    /// An attempt is `unknown`: it may have done the work, so none may start.
    Unknown,
    /// An attempt is `starting`.
    Running,
    /// Every attempt failed.
    Failed,
    /// Nothing open and no result: a new attempt may start, and a cancelled attempt's
    /// late result may still complete the job.
    Pending,
}

impl JobState {
    /// The name the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Succeeded => "succeeded",
            JobState::Cancelled => "cancelled",
            JobState::Unknown => "unknown",
            JobState::Running => "running",
            JobState::Failed => "failed",
            JobState::Pending => "pending",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One try at fulfilling a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// `att_` and a time-ordered id with 80 random bits.
    pub id: String,
    /// The job it tries to fulfil.
    pub job_id: String,
    /// 1 for the job's first attempt, then 2, 3 …
    pub seq: i64,
    /// The provider it calls, by the orchestrator's name for it.
    pub provider: String,
    /// Where it is in its life; only the ledger's guarded transitions change it.
    pub state: AttemptState,
    /// The job's `version` when the attempt started.
    pub base_version: i64,
    /// A short code (`timeout`, `http_503` …) when the attempt did not produce a result.
    pub error: Option<String>,
    /// When it started, in milliseconds since the Unix epoch (as every `_ms` here).
    pub started_ms: i64,
    /// After this instant a `starting` attempt becomes `unknown`.
    pub deadline_ms: i64,
    /// When it last left an open state (`None` while `starting` or `unknown`).
    pub ended_ms: Option<i64>,
}

/// The durable record of one user intent.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// `job_` and a time-ordered id with 80 random bits; reads are by owner and id.
    pub id: String,
    /// Who created it (`X-Owner-Id`).
    pub owner: String,
    /// The key its creation was sent with; unique per owner.
    pub idempotency_key: String,
    /// Of the creating request's body: a repeat of the key with another body is refused.
    pub fingerprint: String,
    /// The suite whose allowlist entries gate failover for it.
    pub task: String,
    /// The user's chosen provider; an attempt on any other one is a failover.
    pub provider: String,
    /// What every attempt sends, as the creating request gave it.
    pub input: Value,
    /// Raised by each change to the job row (the result claimed, the cancel): the
    /// compare-and-swap on it lets exactly one result win.
    pub version: i64,
    /// The winning attempt.
    pub completed_by: Option<String>,
    /// The winning attempt's result, as the provider answered.
    pub result: Option<Value>,
    /// When the result won.
    pub completed_ms: Option<i64>,
    /// When the user cancelled it.
    pub cancelled_ms: Option<i64>,
    /// When it was created.
    pub created_ms: i64,
    /// In the order they were started.
    pub attempts: Vec<Attempt>,
}

impl Job {
    /// The contract's derivation, in its order.
    pub fn state(&self) -> JobState {
        let any = |s: AttemptState| self.attempts.iter().any(|a| a.state == s);
        if self.completed_by.is_some() {
            JobState::Succeeded
        } else if self.cancelled_ms.is_some() {
            JobState::Cancelled
        } else if any(AttemptState::Unknown) {
            JobState::Unknown
        } else if any(AttemptState::Starting) {
            JobState::Running
        } else if !self.attempts.is_empty()
            && self
                .attempts
                .iter()
                .all(|a| a.state == AttemptState::Failed)
        {
            JobState::Failed
        } else {
            JobState::Pending
        }
    }

    /// The attempt that blocks new ones, if any.
    pub fn open_attempt(&self) -> Option<&Attempt> {
        self.attempts.iter().find(|a| a.state.is_open())
    }
}

/// A result that arrived and did not win, as the race log records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Race {
    /// The record's own id.
    pub id: String,
    /// The job the result was for.
    pub job_id: String,
    /// The attempt whose result was discarded.
    pub loser_attempt: String,
    /// `None` when the job had been cancelled and nothing won.
    pub winner_attempt: Option<String>,
    /// When the losing attempt started.
    pub loser_started_ms: i64,
    /// When the winner's result was claimed (`None` with no winner).
    pub winner_completed_ms: Option<i64>,
    /// When the losing result arrived and was discarded.
    pub lost_ms: i64,
    /// `completed`, `job_cancelled` or `serialization_failure`.
    pub reason: String,
}
