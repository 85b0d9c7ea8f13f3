//! The writer: grants refresh, revocations remove and explain, unrelated entries stay,
//! entries stay sorted, no change writes nothing.

use conform_gate::allowlist::{Allowlist, Change, Observed, Reason, update};
use time::macros::datetime;

use super::support::{entry, revocation};

#[test]
fn grants_and_revocations_touch_only_their_pair_and_keep_the_file_sorted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    let until = datetime!(2030-01-01 0:00 UTC);
    // Granted out of order on purpose.
    let grants: Vec<Change> = [
        ("tickets", "vllm"),
        ("invoices", "vllm"),
        ("invoices", "mistral"),
    ]
    .iter()
    .map(|(s, p)| Change::Grant(Box::new(entry(s, p, until))))
    .collect();
    update(&path, &grants).unwrap();
    let list = Allowlist::load(&path).unwrap();
    let keys: Vec<(&str, &str)> = list
        .entries
        .iter()
        .map(|e| (e.suite.as_str(), e.provider.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("invoices", "mistral"),
            ("invoices", "vllm"),
            ("tickets", "vllm")
        ]
    );

    // A failing run for (invoices, vllm) removes that entry alone and says why.
    let updated = update(
        &path,
        &[Change::Revoke(revocation("invoices", "vllm", "run-2"))],
    )
    .unwrap();
    assert_eq!(updated.revoked, [("invoices".into(), "vllm".into())]);
    let list = Allowlist::load(&path).unwrap();
    assert_eq!(list.entries.len(), 2);
    assert!(list.entry("invoices", "vllm").is_none());
    assert!(list.entry("tickets", "vllm").is_some());
    let now = datetime!(2029-01-01 0:00 UTC);
    let denial = list
        .decide("invoices", "vllm", now, &Observed::default())
        .unwrap_err();
    assert_eq!(denial.reason, Reason::Revoked);
    assert_eq!(
        denial.revocation.map(|r| r.run_id).as_deref(),
        Some("run-2")
    );

    // A later conformant run grants it again and clears the revocation.
    let mut fresh = entry("invoices", "vllm", until);
    fresh.evidence.run_id = "run-3".into();
    update(&path, &[Change::Grant(Box::new(fresh))]).unwrap();
    let list = Allowlist::load(&path).unwrap();
    assert!(list.revocation("invoices", "vllm").is_none());
    assert_eq!(
        list.entry("invoices", "vllm").unwrap().evidence.run_id,
        "run-3"
    );
    assert_eq!(list.entries.len(), 3);
}

#[test]
fn no_change_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    update(&path, &[]).unwrap();
    assert!(!path.exists());
    std::fs::write(&path, "{}").unwrap();
    update(&path, &[]).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
}

#[test]
fn an_unreadable_file_is_replaced_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    std::fs::write(&path, "{\"format\": \"conform.allowl").unwrap();
    let updated = update(
        &path,
        &[Change::Grant(Box::new(entry(
            "invoices",
            "mistral",
            datetime!(2030-01-01 0:00 UTC),
        )))],
    )
    .unwrap();
    assert!(updated.replaced_unreadable.unwrap().contains("unreadable"));
    assert_eq!(Allowlist::load(&path).unwrap().entries.len(), 1);
}

#[test]
fn the_written_file_is_pretty_and_ends_with_a_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    let change = Change::Grant(Box::new(entry(
        "invoices",
        "mistral",
        datetime!(2030-01-01 0:00 UTC),
    )));
    update(&path, std::slice::from_ref(&change)).unwrap();
    let first = std::fs::read(&path).unwrap();
    assert!(first.ends_with(b"}\n"));
    // Writing the same grant again gives the same bytes: the file diffs cleanly.
    update(&path, &[change]).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), first);
    assert!(
        String::from_utf8(first)
            .unwrap()
            .contains("\n  \"entries\": [\n")
    );
}
