//! Integration tests of conform as a user meets it: the binary, the library's commands, the docs held to the code, the allowlist's readers and writers.
//!
//! One binary for many test modules: each links the workspace once, not once a file.

#[path = "../clouds/mod.rs"]
mod clouds;
#[path = "../common/mod.rs"]
mod common;

mod allowlist;
mod architecture;
mod check_portability;
mod ci_script;
mod cli_check;
mod cli_faults;
mod cli_run;
mod cloud_run;
mod differential;
mod docs_examples;
mod docs_links;
mod early_verdict;
mod evidence_doc;
mod export;
mod fail_closed;
mod false_permits;
mod history;
mod import;
mod import_otel;
mod init;
mod latency;
mod permit_proof;
mod plan_budget;
mod probe;
mod readme_tour;
mod resume;
mod rules;
mod schedule;
mod shards;
mod signing;
mod stability;
mod tool_cases;
mod tool_sims;
