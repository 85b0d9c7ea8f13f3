//! CI: the whole `conform scenarios` suite, spawning the reference orchestrator
//! `conform serve`, on SQLite and on PostgreSQL: every scenario must pass.
//!
//! PostgreSQL is `postgres://postgres@127.0.0.1:5432/test` unless
//! `CONFORM_TEST_DATABASE_URL` says otherwise.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

/// One suite at a time: two at once on a 2-core machine would eat the timing margins.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serve_command() -> String {
    format!("exec '{}' serve", env!("CARGO_BIN_EXE_conform"))
}

/// Runs the suite and answers (exit code, report).
fn run_suite(extra: &[&str]) -> (i32, Value) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let output = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args(["scenarios", "--spawn", &serve_command(), "--format", "json"])
        .args(extra)
        .env_remove("CONFORM_BROKEN")
        .env_remove("CONFORM_ALLOWLIST")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "the suite printed no JSON report ({e}); stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), report)
}

fn assert_all_passed(code: i32, report: &Value) {
    let scenarios = report["scenarios"].as_array().unwrap();
    let failed: Vec<&Value> = scenarios
        .iter()
        .filter(|s| s["outcome"]["status"] != "passed")
        .collect();
    assert!(
        failed.is_empty(),
        "{} scenario(s) did not pass:\n{}",
        failed.len(),
        serde_json::to_string_pretty(&failed).unwrap()
    );
    assert_eq!(
        scenarios.len(),
        conform::scenarios::all().len(),
        "every scenario ran"
    );
    assert_eq!(code, 0, "exit code with every scenario passed");
    assert!(
        report["seconds"].as_f64().unwrap() < 120.0,
        "the suite stays under two minutes"
    );
}

#[test]
fn every_scenario_passes_against_conform_serve_on_sqlite() {
    let (code, report) = run_suite(&[]);
    assert_all_passed(code, &report);
}

#[test]
fn every_scenario_passes_against_conform_serve_on_postgres() {
    let url = std::env::var("CONFORM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let (code, report) = run_suite(&["--database-url", &url]);
    assert_all_passed(code, &report);
}

#[test]
fn a_target_without_mock_ports_is_a_usage_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args(["scenarios", "--target", "http://127.0.0.1:9"])
        .env_remove("CONFORM_ALLOWLIST")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--mock-ports"), "{stderr}");
}

#[test]
fn an_orchestrator_that_never_becomes_healthy_is_inconclusive() {
    let output = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args([
            "scenarios",
            "--spawn",
            "echo broken on purpose >&2; exit 7",
            "--only",
            "double-click",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("exited"), "{stderr}");
    assert!(stderr.contains("broken on purpose"), "{stderr}");
}
