//! One job per intent: the ledger of jobs and attempts on SQLite or PostgreSQL
//! ([`ledger`]) and the reference orchestrator, `conform serve`, that implements
//! docs/contract/ORCHESTRATOR.md on it ([`orchestrator`]).

#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod ledger;
pub mod orchestrator;
