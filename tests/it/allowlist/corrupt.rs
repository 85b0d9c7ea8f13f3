//! A corrupt allowlist, as every command that reads it reports it: the file by name, and
//! where its JSON stops, at a real line and column.

use conform_gate::allowlist::{Change, update};
use time::OffsetDateTime;

use super::support::{conform_at, entry, project};

/// A valid allowlist cut right after a line break, the way a full disk or a killed copy
/// leaves it; returns the directory, the path and the line:column where the text stops.
fn truncated() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = project();
    let path = dir.path().join("allow list.json");
    let until = OffsetDateTime::now_utc() + time::Duration::days(3);
    update(
        &path,
        &[Change::Grant(Box::new(entry(
            "invoice-extraction",
            "mistral",
            until,
        )))],
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 6, "{text}");
    let kept = lines[..6].join("\n") + "\n";
    std::fs::write(&path, &kept).unwrap();
    let at = format!("line 6, column {}", lines[5].chars().count() + 1);
    (dir, path, at)
}

fn output_of(args: &[&str], path: &std::path::Path) -> (Option<i32>, String) {
    let out = conform_at(path.parent().unwrap())
        .arg("--allowlist")
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn every_reader_names_the_file_and_where_its_json_stops() {
    let (_dir, path, at) = truncated();
    let name = path.display().to_string();
    for args in [
        &[
            "gate",
            "--suite",
            "invoice-extraction",
            "--provider",
            "mistral",
        ][..],
        &["allowlist", "show"],
        &[
            "allowlist",
            "explain",
            "mistral",
            "--suite",
            "invoice-extraction",
        ],
        &[
            "export",
            "litellm",
            "--primary",
            "openai",
            "--suite",
            "invoice-extraction",
        ],
        &[
            "export",
            "portkey",
            "--primary",
            "openai",
            "--suite",
            "invoice-extraction",
        ],
    ] {
        let (code, text) = output_of(args, &path);
        assert_ne!(
            code,
            Some(0),
            "{args:?} permitted on a corrupt file:\n{text}"
        );
        assert!(
            text.contains(&name),
            "{args:?} does not name {name}:\n{text}"
        );
        assert!(text.contains(&at), "{args:?} does not say {at}:\n{text}");
        assert!(!text.contains("column 0"), "{args:?}:\n{text}");
    }
}
