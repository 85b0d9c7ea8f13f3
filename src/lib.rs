//! `conform` gates automatic LLM provider failover on evidence: the runner, the reports,
//! the conclusions a run writes, and what the binary calls end to end. The rest of the
//! pipeline is in the workspace's crates, lowest first:
//!
//! - `conform_allowlist`: the file production reads, the one failover decision and
//!   signature checks (what an orchestrator embeds);
//! - `conform_config`: provider files, suites and `conform.toml` in, validated with file,
//!   line and field; the digests and identities evidence is pinned by;
//! - `conform_wire`: one adapter per vendor, the transport, tokenizers, the schema probe
//!   and the simulated providers;
//! - `conform_check`: the checks and the verdicts;
//! - `conform_gate`: the decision held to a project, the reader's state, exports;
//! - `conform_import`: suites from logged traffic;
//! - `conform_serve`: the ledger and the reference orchestrator;
//! - `conform_scenarios`: the race, timeout and gateway scenarios.
//!
//! Here, as the pipeline reads: [`run`] (the schedule, the calls, the tallies), [`results`]
//! (`results.jsonl`: its one writer and its readers), [`plan`] (calls and cost before
//! sending), [`report`] (`report.json`, JUnit, Markdown, HTML, the terminal), [`outcome`]
//! (what a run did to the allowlist, pair by pair), [`conclude`] (the reports, the
//! allowlist update and the history a finished run writes), [`merge`] (shards joined),
//! [`history`], [`tape`], [`ci`], [`init`], [`embedded`] (the demo's
//! files the binary carries), [`execute`] (`run`, `demo` and `merge` end to
//! end) and [`error`] (errors for people). See `ARCHITECTURE.md` for the invariants each
//! part keeps.

pub mod ci;
pub mod conclude;
pub mod embedded;
pub mod error;
pub mod execute;
pub mod history;
pub mod init;
pub mod merge;
pub mod outcome;
pub mod plan;
pub mod report;
pub mod results;
pub mod run;
pub mod tape;
