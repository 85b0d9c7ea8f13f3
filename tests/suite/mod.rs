//! Shared by the tests that run the whole `conform scenarios` suite: at most [`AT_ONCE`]
//! suites at a time (across test processes too, so `cargo nextest` cannot run more at
//! once on a small machine and eat the timing margins), and the JSON report.
#![allow(dead_code)]

use std::fs::File;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

/// `exec …/conform serve`: the reference orchestrator this test build made.
pub fn serve_command() -> String {
    // The scenarios' providers are mocks, not a project's: the file alone decides.
    format!(
        "exec '{}' serve --unverified-allowlist",
        env!("CARGO_BIN_EXE_conform")
    )
}

/// How many suites may run at once on this machine. A suite spends most of its time
/// waiting for the deadlines and windows it tests (an attempt timeout, a late window, a
/// restart): the 22 runs of `tests/scenarios_teeth.rs` one after another took 338 s of
/// wall time and 23 s of CPU (issue 43), so four share two cores with their margins
/// intact.
pub const AT_ONCE: usize = 4;

/// One of the machine-wide suite slots, held while `f` runs.
pub struct SuiteLock;

impl SuiteLock {
    /// Runs `f` holding one of [`AT_ONCE`] slots (a lock file each), waiting for one to
    /// come free.
    pub fn with<T>(f: impl FnOnce() -> T) -> T {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let mut slots: Vec<fd_lock::RwLock<File>> = (0..AT_ONCE)
            .map(|i| {
                let path = dir.join(format!("conform-scenarios-suite-{i}.lock"));
                fd_lock::RwLock::new(File::create(path).unwrap())
            })
            .collect();
        loop {
            for slot in &mut slots {
                if let Ok(_guard) = slot.try_write() {
                    return f();
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs `jobs` on [`AT_ONCE`] threads, each taking the next job as it comes free (so the
/// longest go first), and answers their results in the jobs' order.
pub fn at_once<'a, T: Send>(jobs: Vec<Box<dyn FnOnce() -> T + Send + 'a>>) -> Vec<T> {
    let count = jobs.len();
    let queue = Mutex::new(jobs.into_iter().enumerate());
    let done = Mutex::new(Vec::with_capacity(count));
    std::thread::scope(|scope| {
        for _ in 0..AT_ONCE.min(count) {
            scope.spawn(|| {
                loop {
                    let Some((i, job)) = queue.lock().unwrap().next() else {
                        break;
                    };
                    let result = job();
                    done.lock().unwrap().push((i, result));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
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
