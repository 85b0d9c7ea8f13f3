//! The soak of issue 12, bounded for CI: 20 s of mixed traffic (creations, replays, key
//! reuse, polls, failovers, attempt and job cancels) from 8 users against a real
//! `conform serve` process, on SQLite and on PostgreSQL. Resident memory and open
//! descriptors must stay flat, every job must end in a state the contract allows, and
//! the provider must have received exactly one request per attempt.
//!
//! `CONFORM_SOAK_SECONDS` makes it longer; `cargo bench --bench serve_load -- soak
//! SECONDS sqlite|postgres` runs the same soak for the figures in BENCHMARKS.md.

#[allow(dead_code)]
#[path = "../../benches/serve_load/served.rs"]
mod served;
#[allow(dead_code)]
#[path = "../../benches/serve_load/soak.rs"]
mod soak;
use crate::support;
#[allow(dead_code)]
#[path = "../../benches/serve_load/upstream.rs"]
mod upstream;

use std::time::Duration;

use support::TestDb;

async fn soak_holds_its_bounds(db: TestDb) {
    let seconds = std::env::var("CONFORM_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let report = soak::run(soak::Options {
        bin: served::serve_bin(),
        dir: dir.path().to_path_buf(),
        database_url: db.url.clone(),
        duration: Duration::from_secs(seconds),
        users: 8,
        env: Vec::new(),
    })
    .await;
    eprintln!("{}", report.table());
    let problems = report.problems();
    db.cleanup().await;
    assert!(
        problems.is_empty(),
        "the soak broke its bounds:\n{}",
        problems.join("\n")
    );
    assert!(
        report.ops.get("failover").copied().unwrap_or(0) > 0,
        "failovers ran"
    );
    assert!(
        report.ops.get("job cancel").copied().unwrap_or(0) > 0,
        "job cancels ran"
    );
    assert!(
        report.ops.get("replay").copied().unwrap_or(0) > 0,
        "replays ran"
    );
}

on_both_backends!(soak_holds_its_bounds);
