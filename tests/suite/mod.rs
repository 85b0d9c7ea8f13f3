//! Shared by the tests that run the whole `conform scenarios` suite: one suite at a time
//! (across test processes too, so `cargo nextest` cannot run two at once on a small
//! machine and eat the timing margins), and the JSON report.
#![allow(dead_code)]

use std::fs::File;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// `exec …/conform serve`: the reference orchestrator this test build made.
pub fn serve_command() -> String {
    // The scenarios' providers are mocks, not a project's: the file alone decides.
    format!(
        "exec '{}' serve --unverified-allowlist",
        env!("CARGO_BIN_EXE_conform")
    )
}

/// Holds the machine-wide suite lock while it lives.
pub struct SuiteLock(fd_lock::RwLock<File>);

impl SuiteLock {
    /// Runs `f` holding the lock.
    pub fn with<T>(f: impl FnOnce() -> T) -> T {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conform-scenarios-suite.lock");
        let mut lock = SuiteLock(fd_lock::RwLock::new(File::create(path).unwrap()));
        let _guard = lock.0.write().unwrap();
        f()
    }
}

/// `conform scenarios ARGS --format json`, with `env` added; answers the exit code and
/// the report.
pub fn run_suite(args: &[&str], env: &[(&str, &str)], work: &Path) -> (i32, Value) {
    let output = SuiteLock::with(|| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_conform"));
        command
            .arg("scenarios")
            .args(args)
            .args(["--format", "json", "--work-dir"])
            .arg(work)
            .env_remove("CONFORM_ALLOWLIST")
            .env_remove("RUST_LOG");
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    });
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "the suite printed no JSON report ({e}); exit {:?}, stderr:\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), report)
}

/// The scenarios with this outcome status (`passed`, `failed`, `skipped`).
pub fn with_status<'a>(report: &'a Value, status: &str) -> Vec<&'a Value> {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["outcome"]["status"] == status)
        .collect()
}

/// Every scenario of the suite ran and passed, within two minutes, and the exit code
/// says so.
pub fn assert_all_passed(code: i32, report: &Value) {
    let not_passed: Vec<&Value> = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["outcome"]["status"] != "passed")
        .collect();
    assert!(
        not_passed.is_empty(),
        "{} scenario(s) did not pass:\n{}",
        not_passed.len(),
        serde_json::to_string_pretty(&not_passed).unwrap()
    );
    assert_eq!(
        report["scenarios"].as_array().unwrap().len(),
        conform_scenarios::all().len(),
        "every scenario ran"
    );
    assert_eq!(code, 0, "the exit code when every scenario passed");
    let seconds = report["seconds"].as_f64().unwrap();
    assert!(
        seconds < 120.0,
        "the suite took {seconds:.1} s, over two minutes"
    );
}
