//! The allowlist: the one file a production system trusts to decide whether it may
//! fail over automatically to a provider for a task.
//!
//! - [`format`](mod@format): `conform.allowlist/v1`, entries and revocations;
//! - [`reader`]: [`permits`], for Rust orchestrators; it fails closed;
//! - [`writer`]: locked read-modify-write and an atomic rename, so a reader sees the
//!   old file or the new one, never half of one;
//! - [`explain`]: where a (suite, provider) stands and why, for people;
//! - [`decision`]: what a run did to the file, pair by pair, for its reports.
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

pub mod decision;
pub mod explain;
pub mod format;
pub mod reader;
pub mod writer;

pub use decision::{Decision, PairDecision, PairEffect, Unchanged, Untouched};
pub use explain::{Standing, standing};
pub use format::{Allowlist, Entry, Evidence, FORMAT, Revocation, SCHEMA};
pub use reader::{Denial, Observed, Permit, Reason, permits};
pub use writer::{Change, UpdateError, Updated, changes_from_run, update};
