//! A writer killed with SIGKILL at random points while rewriting the allowlist, 200 times:
//! the file on disk is always exactly the old version or the new one.
//!
//! The child is `conform allowlist rewrite-loop` (hidden), which grants generation after
//! generation of one entry with the library writer and prints each generation once its
//! rename is done. After each kill the file must be byte for byte the writer's rendering
//! of the last generation printed, or of the one after it (renamed, not yet printed).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use conform_gate::allowlist::{Allowlist, Change, Entry, update};
use time::macros::datetime;

use super::support::entry;

const KILLS: usize = 200;

/// A small xorshift, seeded from the clock and printed, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn churned(k: u64, template: &Entry) -> Entry {
    let mut e = template.clone();
    e.evidence.run_id = format!("gen-{k}");
    e
}

/// The exact bytes the writer produces for generation `k` on top of `base`.
fn rendering(dir: &Path, base: &[u8], template: &Entry, k: u64) -> Vec<u8> {
    let scratch = dir.join(format!("expected-{k}.json"));
    std::fs::write(&scratch, base).unwrap();
    update(&scratch, &[Change::Grant(Box::new(churned(k, template)))]).unwrap();
    let bytes = std::fs::read(&scratch).unwrap();
    std::fs::remove_file(&scratch).unwrap();
    bytes
}

fn generation_on_disk(bytes: &[u8]) -> u64 {
    let list = Allowlist::parse(bytes).unwrap_or_else(|d| {
        panic!(
            "the file on disk is neither version: {d}\n{}",
            String::from_utf8_lossy(bytes)
        )
    });
    let e = list.entry("churn", "victim").expect("the churned entry");
    e.evidence.run_id["gen-".len()..].parse().unwrap()
}

fn temporaries(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(".allowlist.json.") && name.ends_with(".tmp")
        })
        .count()
}

#[test]
fn sigkill_mid_rewrite_leaves_the_old_or_the_new_file() {
    let live = tempfile::tempdir().unwrap();
    // The expected renderings are written through the library writer too; on tmpfs their
    // fsyncs cost nothing. The live file stays on the ordinary file system.
    let scratch = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let path = live.path().join("allowlist.json");
    let until = datetime!(2030-01-01 0:00 UTC);

    // Many unrelated entries, so that a write takes long enough to be caught mid-way,
    // and so that losing any of them would show.
    let mut template = entry("churn", "victim", until);
    template.served_models = (0..200).map(|i| format!("victim-model-{i:04}")).collect();
    let mut base_changes: Vec<Change> = (0..150)
        .map(|i| {
            Change::Grant(Box::new(entry(
                &format!("suite-{i:03}"),
                "bystander",
                until,
            )))
        })
        .collect();
    base_changes.push(Change::Grant(Box::new(churned(0, &template))));
    update(&path, &base_changes).unwrap();
    let base = std::fs::read(&path).unwrap();
    let template_file = scratch.path().join("entry.json");
    std::fs::write(&template_file, serde_json::to_vec(&template).unwrap()).unwrap();

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test seed: {seed}");
    let mut rng = Rng(seed);
    let mut expected: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut next = 1;
    let (mut caught_between, mut caught_mid_write) = (0, 0);

    for round in 0..KILLS {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("conform"))
            .env_remove("CONFORM_ALLOWLIST")
            .arg("--allowlist")
            .arg(&path)
            .args(["allowlist", "rewrite-loop", "--entry"])
            .arg(&template_file)
            .args(["--from", &next.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        // Wait until the child is inside its loop, then kill it at a random point of it.
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(
            !first.is_empty(),
            "round {round}: the writer printed nothing"
        );
        std::thread::sleep(Duration::from_micros(rng.next() % 15_000));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let acked: u64 = first
            .lines()
            .chain(rest.lines())
            .filter_map(|l| l.trim().parse().ok())
            .max()
            .unwrap();

        if temporaries(live.path()) > 0 {
            caught_mid_write += 1;
        }
        let bytes = std::fs::read(&path).unwrap();
        let k = generation_on_disk(&bytes);
        assert!(
            k == acked || k == acked + 1,
            "round {round}: generation {k} on disk, {acked} acknowledged"
        );
        if k == acked + 1 {
            caught_between += 1;
        }
        let want = expected
            .entry(k)
            .or_insert_with(|| rendering(scratch.path(), &base, &template, k));
        assert!(
            bytes == *want,
            "round {round}: the file is not exactly generation {k}"
        );
        next = k + 1;
    }
    println!(
        "{KILLS} kills: {caught_mid_write} left a temporary file (killed mid-write), \
{caught_between} landed between the rename and the acknowledgement"
    );
    // Killed writers leave temporary files; the next writer, holding the lock, removes them.
    assert!(temporaries(live.path()) <= 1);
    assert!(
        caught_mid_write > 0,
        "no kill landed while a temporary file was being written"
    );
    let list = Allowlist::load(&path).unwrap();
    assert_eq!(list.entries.len(), 151);
}
