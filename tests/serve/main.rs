//! One job per intent: the ledger on SQLite and PostgreSQL, conform serve, and the contract's scenarios against it.
//!
//! One binary for many test modules: each links the workspace once, not once a file.

#[path = "../clouds/mod.rs"]
mod clouds;
#[path = "../common/mod.rs"]
mod common;
#[path = "../suite/mod.rs"]
mod suite;
#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod ledger_model;
mod ledger_races;
mod orchestrator_contract;
mod orchestrator_limits;
mod orchestrator_processes;
mod orchestrator_races;
mod orchestrator_soak;
mod scenarios_serve;
mod serve_gate;
mod serve_traffic;
