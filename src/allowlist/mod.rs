//! The allowlist: the one file a production system trusts to decide whether it may
//! fail over automatically to a provider for a task.
//!
//! - [`format`](mod@format): `conform.allowlist/v1`, entries and revocations;
//! - [`decision`]: [`decide`], the one place that says whether failover to a provider is
//!   permitted for a suite; every caller asks it, and it fails closed;
//! - [`local`]: what the project's files say now (the digests the evidence must match);
//! - [`reader`]: loading a file without trusting it, and [`permits`] for Rust orchestrators;
//! - [`writer`]: locked read-modify-write and an atomic rename, so a reader sees the
//!   old file or the new one, never half of one;
//! - [`explain`]: a decision's status in words, for people;
//! - [`inspect`]: what `allowlist show`, `allowlist explain` and `gate` answer, typed;
//! - [`outcome`]: what a run did to the file, pair by pair, for its reports.
//!
//! The format's JSON Schema is [`SCHEMA`] (`schemas/allowlist.v1.schema.json`).
//!
//! ```
//! use conform::allowlist::{permits, Observed, Reason};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("allowlist.json");
//! // No file: no failover.
//! let denial = permits(&path, "invoice-extraction", "fallback", time::OffsetDateTime::now_utc(), &Observed::default()).unwrap_err();
//! assert_eq!(denial.reason, Reason::Missing);
//! ```

pub mod attest;
pub mod decision;
pub mod explain;
pub mod format;
pub mod inspect;
pub mod local;
pub mod outcome;
pub mod reader;
pub mod writer;

pub use decision::{Denial, Observed, Permit, Query, Reason, Required, decide};
pub use explain::status;
pub use format::{
    Allowlist, Entry, Evidence, FORMAT, LatencyEvidence, Revocation, RulesOut, SCHEMA,
};
pub use local::Local;
pub use outcome::{PairEffect, PairOutcome, RunOutcome, Unchanged, Untouched};
pub use reader::permits;
pub use writer::{Change, Destination, UpdateError, Updated, changes_from_run, update};
