//! The allowlist: the one file a production system trusts to decide whether it may
//! fail over automatically to a provider for a task.
//!
//! The format, the decision and signature checks are the reader crate's
//! (`crates/conform-allowlist`, what a Rust orchestrator embeds), re-exported here so that
//! conform decides with the very code production does. What conform adds:
//!
//! - [`query`]: a question about a project, holding the evidence to its files now
//!   ([`decide`]);
//! - [`local`]: what the project's files say now (the digests the evidence must match);
//! - [`writer`]: locked read-modify-write and an atomic rename, so a reader sees the
//!   old file or the new one, never half of one;
//! - [`inspect`]: what `allowlist show`, `allowlist explain` and `gate` answer, typed;
//! - [`state`]: `--state FILE`, the newest statement per pair a reader has seen, so that
//!   an older allowlist put back is denied (`superseded`).
//!
//! ```
//! use conform_gate::allowlist::{Query, Reason, decide};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("allowlist.json");
//! // No file: no failover.
//! let query = Query::new("invoice-extraction", "fallback", time::OffsetDateTime::now_utc());
//! assert_eq!(decide(&path, &query).unwrap_err().reason, Reason::Missing);
//! ```

pub mod inspect;
pub mod local;
pub mod query;
pub mod state;
pub mod writer;

pub use conform_allowlist::attest;

pub use conform_allowlist::{
    Allowlist, Denial, Entry, Evidence, FORMAT, LatencyEvidence, Observed, Permit, Reason,
    Required, Revocation, RulesOut, SCHEMA, Seen, status,
};
pub use local::Local;
pub use query::{Query, decide, decide_query};
pub use writer::{Change, Overwrite, UpdateError, Updated, update, update_with};
