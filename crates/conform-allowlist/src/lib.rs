//! Read a conform allowlist and decide whether an orchestrator may fail over to a provider.
//!
//! `conform run` proves a fallback provider keeps the primary's operational contract and
//! writes what it proved to `allowlist.json`. This crate is what a production service
//! embeds to read that file: the format ([`format`]), the one failover decision
//! ([`decision`]), and the check of the signature a CI job put on each entry ([`attest`],
//! [`sign`]). It fails closed: no valid, fresh entry for the (suite, provider), signed by
//! a trusted key where the service trusts keys, means no failover. `conform` itself
//! decides with this same code, so the command line and a Rust orchestrator cannot
//! disagree.
//!
//! ```
//! use conform_allowlist::{Allowlist, Observed, Reason};
//! use time::macros::datetime;
//!
//! let file = br#"{"format": "conform.allowlist/v1", "entries": [{
//!   "suite": "invoice-extraction", "provider": "mistral", "model": "mistral-small-latest",
//!   "served_models": ["mistral-small-2503"], "system_fingerprints": [],
//!   "suite_digest": "sha256:5e1f", "provider_digest": "sha256:9c0d", "tokenizer": "none",
//!   "evidence": {"run_id": "r1", "report": "reports/r1/report.json", "conform_version": "0.1.0",
//!     "cases": 25, "repeats": 3, "calls": 75, "passed": 75, "pass_rate": 1.0,
//!     "first_attempt_pass_rate": 0.96, "checks": {}},
//!   "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}]}"#;
//! let list = Allowlist::parse(file).unwrap();
//! let now = datetime!(2026-01-02 12:00 UTC);
//!
//! // The provider answered with the model the evidence saw: failover is permitted.
//! let served = Observed { served_model: Some("mistral-small-2503"), ..Observed::default() };
//! assert!(list.decide("invoice-extraction", "mistral", now, &served).is_ok());
//!
//! // A model swapped behind the same name is not what was proven.
//! let swapped = Observed { served_model: Some("mistral-small-2509"), ..Observed::default() };
//! let denial = list.decide("invoice-extraction", "mistral", now, &swapped).unwrap_err();
//! assert_eq!(denial.reason, Reason::ModelDrift);
//! ```
//!
//! To require signed evidence, load the service's `trust.toml` with
//! [`sign::Trust::load`] and pass it as [`Observed::trust`]; `examples/decide.rs` is a
//! whole reader. What the file holds and why each denial happens is in conform's
//! docs/allowlist.md and docs/signing.md.

#![deny(missing_docs)]
#![deny(unreachable_pub)]

// What a reader calls is at the root; what is a namespace of its own stays a module:
// signatures (`attest`, `sign`), the statistics of a permit (`stats`), digests, latency
// words and where in a JSON file a parse error is (`position`).
pub mod attest;
mod decision;
pub mod digest;
mod explain;
mod format;
mod identity;
pub mod latency;
pub mod position;
mod reader;
mod seen;
pub mod sign;
pub mod stats;

pub use decision::{
    Bound, BoundFrom, CLOCK_SKEW, DEFAULT_MAX_UNDETECTED_FAILURE_RATE, Denial, NotARate, Observed,
    Permit, ProjectBounds, RECORDED_REFERENCE, Reason, ReferenceError, References, Required,
};
pub use explain::{list_or_none, sentence, status, time_left};
pub use format::{
    Allowlist, Bounds, CheckCount, DifferentialEvidence, DriftRulesOut, Entry, Evidence, FORMAT,
    FieldEvidence, LatencyEvidence, Revocation, RulesOut, SCHEMA, ToolEvidence,
};
pub use identity::{CasesIdentity, ProviderIdentity, SuiteIdentity};
pub use seen::{Seen, Stated, statements};

// The README's example runs as a doc test, so what the crate's page shows works.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "sign"))]
pub struct ReadmeDoctests;
