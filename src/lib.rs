//! `conform` gates automatic LLM provider failover on evidence.
//!
//! The library is laid out as the pipeline reads:
//!
//! - [`config`]: provider files and fixture suites in, validated with file, line and field;
//! - [`provider`]: one wire format per vendor behind [`provider::WireFormat`], and the shared
//!   [`provider::Transport`] that sends, limits, retries and classifies;
//! - [`run`]: the runner that replays cases × providers × repeats and streams results;
//! - [`check`]: the checks, each a small type behind [`check::Check`];
//! - [`verdict`]: per (suite, provider) conformance from the streamed results;
//! - [`report`]: `results.jsonl`, `report.json` and the terminal summary;
//! - [`allowlist`]: the fail-closed file that gates failover, its writer and its reader;
//! - [`execute`]: `conform run`, `demo` and `merge` end to end, as the binary calls them;
//! - [`export`]: the allowlist as LiteLLM and Portkey fallback configs;
//! - [`history`]: every run's verdicts over time, drift, and the diff of two runs;
//! - [`import`]: suites from logged traffic (OpenAI Batch files, chat-request JSONL,
//!   promptfoo tests), redacted, deduplicated and sampled;
//! - [`tape`]: the tapes of `conform run --record` turned into recorded references;
//! - [`probe`]: which JSON Schema keywords a provider enforces, rejects, strips or ignores;
//! - [`latency`]: percentiles from a streaming histogram of bounded size;
//! - [`error`]: an error and its causes in one line, and whether I/O failed;
//! - [`stats`]: the failure rate a count of failures rules out;
//! - [`sim`]: simulated providers on loopback for `conform demo` and the tests;
//! - [`tokenize`]: counting prompts the way each provider counts them;
//! - [`ledger`]: jobs and attempts on SQLite or PostgreSQL, one job per intent;
//! - [`orchestrator`]: the reference orchestrator (`conform serve`) on the ledger.
//!
//! See `ARCHITECTURE.md` for the invariants each part keeps.

pub mod allowlist;
pub mod check;
pub mod ci;
pub mod conclude;
pub mod config;
pub mod digest;
pub mod error;
pub mod execute;
pub mod export;
pub mod history;
pub mod import;
pub mod init;
pub mod latency;
pub mod ledger;
pub mod merge;
pub mod orchestrator;
pub mod plan;
pub mod probe;
pub mod provider;
pub mod report;
pub mod run;
pub mod scenarios;
pub mod secret;
pub mod sim;
pub mod tape;
pub mod tokenize;
pub mod verdict;

// Signing and the statistics of a permit are the reader crate's: an orchestrator verifies
// and a permit states what it rules out with the same code conform signs and judges with.
pub use conform_allowlist::{sign, stats};
