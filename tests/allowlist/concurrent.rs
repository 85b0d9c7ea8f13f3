//! Concurrent writers never lose an update: two `conform run` processes for different
//! providers, started together on one allowlist, end with both providers' entries; and
//! many writers at once in one process keep every entry.

use std::process::{Command, Stdio};

use conform::allowlist::{Allowlist, Change, update};
use time::macros::datetime;

use super::support::{entry, validate};

#[test]
fn two_conform_runs_on_one_allowlist_keep_both_entries() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let allowlist = dir.path().join("allowlist.json");
        let spawn = |provider: &str| {
            Command::new(assert_cmd::cargo::cargo_bin("conform"))
                .env_remove("CONFORM_ALLOWLIST")
                .env("CONFORM_ROOT", env!("CARGO_MANIFEST_DIR"))
                .args(["run", provider, "--no-progress", "--repeats", "1"])
                .arg("--allowlist")
                .arg(&allowlist)
                .arg("--reports")
                .arg(dir.path().join("reports"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let steady = spawn("sim-steady");
        let limited = spawn("sim-rate-limited");
        for (name, child) in [("sim-steady", steady), ("sim-rate-limited", limited)] {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {name} exited {:?}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let list = Allowlist::load(&allowlist).unwrap();
        let mut pairs: Vec<(String, String)> = list
            .entries
            .iter()
            .map(|e| (e.suite.clone(), e.provider.clone()))
            .collect();
        pairs.sort();
        let mut suites: Vec<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.join("suite.toml").is_file())
                .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
                .collect();
        suites.sort();
        let mut expected: Vec<(String, String)> = suites
            .iter()
            .flat_map(|s| ["sim-rate-limited", "sim-steady"].map(|p| (s.clone(), p.to_string())))
            .collect();
        expected.sort();
        assert!(expected.len() >= 4);
        assert_eq!(pairs, expected, "round {round}");
        // A real allowlist, written by real runs, validates against the published schema.
        validate(&allowlist).unwrap();
        let now = time::OffsetDateTime::now_utc();
        for e in &list.entries {
            assert!(
                list.permits(&e.suite, &e.provider, now, &Default::default())
                    .is_ok()
            );
            assert!(!e.served_models.is_empty());
            assert!(e.evidence.checks.contains_key("schema"));
        }
    }
}

#[test]
fn many_writers_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    let until = datetime!(2030-01-01 0:00 UTC);
    const WRITERS: usize = 8;
    const UPDATES: usize = 20;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let path = &path;
            s.spawn(move || {
                for u in 0..UPDATES {
                    let mut e = entry("invoices", &format!("provider-{w}"), until);
                    e.evidence.run_id = format!("run-{u}");
                    update(path, &[Change::Grant(Box::new(e))]).unwrap();
                }
            });
        }
    });
    let list = Allowlist::load(&path).unwrap();
    assert_eq!(list.entries.len(), WRITERS);
    for e in &list.entries {
        assert_eq!(e.evidence.run_id, format!("run-{}", UPDATES - 1));
    }
}
