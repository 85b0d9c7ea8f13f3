//! Embeds the repository's own demo files in the binary (`src/embedded.rs`): every
//! simulated provider (`providers/sim-*.toml`) and the suites the demo runs them on, so
//! `conform demo` works from any folder with the files the repository's tests run, not
//! copies. The table is generated so a new case or simulation is carried without a list
//! to keep by hand.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The suites the demo runs: one answered in JSON, one with tools.
const DEMO_SUITES: [&str; 2] = ["ticket-triage", "support-agent"];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let mut files = Vec::new();
    println!("cargo:rerun-if-changed=providers");
    for entry in read_dir(&root.join("providers")) {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("sim-") && name.ends_with(".toml") {
            files.push(entry);
        }
    }
    for suite in DEMO_SUITES {
        let dir = root.join("fixtures").join(suite);
        println!("cargo:rerun-if-changed={}", dir.display());
        walk(&dir, &mut files);
    }
    files.sort();
    let mut table = String::from("&[\n");
    for path in &files {
        let rel = path.strip_prefix(&root).expect("under the manifest dir");
        let rel = rel.to_str().expect("UTF-8 paths").replace('\\', "/");
        writeln!(
            table,
            "    ({rel:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("a String takes writes");
    }
    table.push(']');
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    std::fs::write(out.join("demo_files.rs"), table).expect("OUT_DIR is writable");
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    entries
        .map(|e| e.expect("a readable entry").path())
        .collect()
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in read_dir(dir) {
        if path.is_dir() {
            walk(&path, files);
        } else {
            files.push(path);
        }
    }
}
