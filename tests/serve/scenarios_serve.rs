//! CI for `conform scenarios` against the reference orchestrator: the whole suite with
//! `--spawn 'conform serve'` on PostgreSQL (the SQLite run is the baseline of
//! `tests/scenarios_teeth.rs`), `--target` with `--mock-ports` against a running one,
//! and the command's usage errors.
//!
//! PostgreSQL is `postgres://postgres@127.0.0.1:5432/test` unless
//! `CONFORM_TEST_DATABASE_URL` says otherwise; the run gets a fresh schema.

use crate::suite;
use crate::support;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use suite::{SuiteLock, assert_all_passed, run_suite, serve_command, with_status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_passes_against_conform_serve_on_postgres() {
    let db = support::TestDb::postgres().await;
    let work = tempfile::tempdir().unwrap();
    let url = db.url.clone();
    let spawn = serve_command();
    let path = work.path().to_path_buf();
    let (code, report) = tokio::task::spawn_blocking(move || {
        run_suite(&["--spawn", &spawn, "--database-url", &url], &[], &path)
    })
    .await
    .unwrap();
    db.cleanup().await;
    assert_all_passed(code, &report);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn target_mode_runs_against_a_running_orchestrator_and_skips_restarts() {
    let work = tempfile::tempdir().unwrap();
    let ports: Vec<(&str, u16)> = conform_scenarios::providers::NAMES
        .iter()
        .map(|n| (*n, free_port()))
        .collect();
    let providers: Vec<String> = ports
        .iter()
        .map(|(n, p)| format!("{n}=http://127.0.0.1:{p}"))
        .collect();
    let mock_ports: Vec<String> = ports.iter().map(|(n, p)| format!("{n}={p}")).collect();
    let listen = format!("127.0.0.1:{}", free_port());
    let allowlist = work.path().join("allowlist.json");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args(["serve", "--unverified-allowlist"])
        .env("CONFORM_LISTEN", &listen)
        .env("CONFORM_PROVIDERS", providers.join(","))
        .env("CONFORM_ALLOWLIST", &allowlist)
        .env("CONFORM_ATTEMPT_TIMEOUT_MS", "1000")
        .env("CONFORM_LATE_WINDOW_MS", "2000")
        .env(
            "CONFORM_DATABASE_URL",
            format!("sqlite://{}", work.path().join("ledger.db").display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "conform serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let junit = work.path().join("junit.xml");
    let (code, report) = run_suite(
        &[
            "--target",
            &format!("http://{listen}"),
            "--mock-ports",
            &mock_ports.join(","),
            "--allowlist",
            allowlist.to_str().unwrap(),
            "--only",
            "key-forms,double-click,failover-gate,crash-restart",
            "--junit",
            junit.to_str().unwrap(),
        ],
        &[],
        work.path(),
    );
    let _ = serve.kill();
    let _ = serve.wait();
    let passed: Vec<&str> = with_status(&report, "passed")
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        passed,
        ["key-forms", "double-click", "failover-gate"],
        "{report:#}"
    );
    let skipped = with_status(&report, "skipped");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["scenario"], "crash-restart");
    assert!(
        skipped[0]["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("--spawn")
    );
    assert_eq!(code, 0, "skipped is not failed");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"tests="4""#) && xml.contains(r#"skipped="1""#),
        "{xml}"
    );
    // The evidence of a passed scenario: exchanges, jobs read back, provider counts.
    let double = &report["scenarios"][1];
    assert!(double["exchanges"].as_array().unwrap().len() >= 2 * 6 + 32 * 3);
    assert_eq!(double["jobs"].as_array().unwrap().len(), 9);
    assert_eq!(double["provider_requests"]["primary"]["received"], 9);
    assert_eq!(double["provider_requests"]["primary"]["expected"], 9);
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
fn an_unknown_scenario_name_is_a_usage_error_naming_the_scenarios() {
    let output = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args(["scenarios", "--spawn", "true", "--only", "double-clik"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("double-clik") && stderr.contains("double-click"),
        "{stderr}"
    );
}

#[test]
fn an_orchestrator_that_exits_at_start_is_inconclusive_and_its_log_is_shown() {
    let work = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args([
            "scenarios",
            "--spawn",
            "echo broken on purpose >&2; exit 7",
            "--only",
            "double-click",
            "--work-dir",
        ])
        .arg(work.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("exited"), "{stderr}");
    assert!(stderr.contains("broken on purpose"), "{stderr}");
}

/// The working directory is made in the temporary directory. A passing run removes it,
/// and so does a run whose orchestrator could not be reached (nothing in it to look at);
/// when the orchestrator fails to start, it is kept, with its log, and its path printed.
#[test]
fn a_passing_run_leaves_nothing_in_the_temporary_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        SuiteLock::with(|| {
            Command::new(env!("CARGO_BIN_EXE_conform"))
                .arg("scenarios")
                .args(args)
                .env("TMPDIR", tmp.path())
                .env_remove("CONFORM_ALLOWLIST")
                .output()
                .unwrap()
        })
    };
    let left = || -> Vec<String> {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };

    let out = run(&[
        "--spawn",
        &serve_command(),
        "--only",
        "double-click,key-reuse",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(left(), Vec::<String>::new(), "after a passing run");

    let elsewhere = tempfile::tempdir().unwrap();
    let allowlist = elsewhere.path().join("allowlist.json");
    let ports: Vec<String> = conform_scenarios::providers::NAMES
        .iter()
        .map(|n| format!("{n}={}", free_port()))
        .collect();
    let out = run(&[
        "--target",
        &format!("http://127.0.0.1:{}", free_port()),
        "--mock-ports",
        &ports.join(","),
        "--allowlist",
        allowlist.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        left(),
        Vec::<String>::new(),
        "after an unreachable orchestrator"
    );

    let out = run(&[
        "--spawn",
        "echo broken on purpose >&2; exit 7",
        "--only",
        "double-click",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let kept = left();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].starts_with("conform-scenarios-"), "{kept:?}");
    let dir = tmp.path().join(&kept[0]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("working directory kept: {}", dir.display())),
        "{stderr}"
    );
    assert!(dir.join("orchestrator.log").is_file());
}
