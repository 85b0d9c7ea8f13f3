//! The reader denies, with the right reason, everything it must, and permits a valid entry.

use std::path::{Path, PathBuf};

use conform_gate::allowlist::{Allowlist, Denial, Observed, Permit, Reason, update};

/// The Rust reader's decision on the file at `path`, as an orchestrator embedding the
/// crate makes it: load, then decide.
fn permits(
    path: &std::path::Path,
    suite: &str,
    provider: &str,
    at: time::OffsetDateTime,
    observed: &Observed<'_>,
) -> Result<Permit, Denial> {
    Allowlist::load(path)?.decide(suite, provider, at, observed)
}
use conform_gate::allowlist::Change;
use time::OffsetDateTime;
use time::macros::datetime;

use super::support::{PROVIDER_DIGEST, SUITE_DIGEST, entry};

const NOW: OffsetDateTime = datetime!(2026-03-01 12:00 UTC);

struct File {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn file(bytes: Option<&[u8]>) -> File {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    if let Some(bytes) = bytes {
        std::fs::write(&path, bytes).unwrap();
    }
    File { _dir: dir, path }
}

/// A file as the writer writes it, holding one entry valid until `until`.
fn written(until: OffsetDateTime) -> File {
    let f = file(None);
    update(
        &f.path,
        &[Change::Grant(Box::new(entry("invoices", "mistral", until)))],
    )
    .unwrap();
    f
}

fn ask(path: &Path, observed: &Observed<'_>) -> Result<String, Denial> {
    permits(path, "invoices", "mistral", NOW, observed).map(|p| p.entry.provider)
}

fn reason(path: &Path, observed: &Observed<'_>) -> Reason {
    ask(path, observed).unwrap_err().reason
}

#[test]
fn no_file_is_missing() {
    let f = file(None);
    assert_eq!(reason(&f.path, &Observed::default()), Reason::Missing);
}

#[test]
fn a_directory_in_place_of_the_file_is_unreadable() {
    let f = file(None);
    std::fs::create_dir(&f.path).unwrap();
    assert_eq!(reason(&f.path, &Observed::default()), Reason::Unreadable);
}

#[test]
fn empty_file_is_unreadable() {
    let f = file(Some(b""));
    assert_eq!(reason(&f.path, &Observed::default()), Reason::Unreadable);
}

#[test]
fn truncated_json_is_unreadable_at_every_cut() {
    let valid = written(NOW + time::Duration::days(1));
    let bytes = std::fs::read(&valid.path).unwrap();
    assert!(ask(&valid.path, &Observed::default()).is_ok());
    // Every proper prefix: half a file must never permit, whatever the cut.
    let trimmed = bytes.trim_ascii_end().len();
    for cut in 0..trimmed {
        let f = file(Some(&bytes[..cut]));
        let denial = ask(&f.path, &Observed::default()).unwrap_err();
        assert_eq!(denial.reason, Reason::Unreadable, "cut at {cut}: {denial}");
    }
}

#[test]
fn a_json_array_is_an_unknown_format() {
    let f = file(Some(b"[]"));
    assert_eq!(reason(&f.path, &Observed::default()), Reason::UnknownFormat);
    let entries =
        serde_json::to_vec(&[entry("invoices", "mistral", NOW + time::Duration::days(1))]).unwrap();
    let f = file(Some(&entries));
    assert_eq!(reason(&f.path, &Observed::default()), Reason::UnknownFormat);
}

#[test]
fn another_format_string_is_an_unknown_format() {
    let valid = written(NOW + time::Duration::days(1));
    let text = std::fs::read_to_string(&valid.path).unwrap();
    for other in [
        "conform.allowlist/v2",
        "conform.allowlist/v0",
        "",
        "CONFORM.ALLOWLIST/V1",
    ] {
        let f = file(Some(text.replace("conform.allowlist/v1", other).as_bytes()));
        let denial = ask(&f.path, &Observed::default()).unwrap_err();
        assert_eq!(denial.reason, Reason::UnknownFormat, "{other}");
    }
    let f = file(Some(br#"{"entries": []}"#));
    assert_eq!(reason(&f.path, &Observed::default()), Reason::UnknownFormat);
    let f = file(Some(br#"{"format": 1, "entries": []}"#));
    assert_eq!(reason(&f.path, &Observed::default()), Reason::UnknownFormat);
}

#[test]
fn an_entry_expired_one_second_ago_is_expired() {
    let f = written(NOW - time::Duration::seconds(1));
    let denial = ask(&f.path, &Observed::default()).unwrap_err();
    assert_eq!(denial.reason, Reason::Expired);
    assert!(denial.detail.contains("2026-03-01T11:59:59Z"), "{denial}");
    // At the instant itself it has already expired; a second before, it still holds.
    let f = written(NOW);
    assert_eq!(reason(&f.path, &Observed::default()), Reason::Expired);
    let f = written(NOW + time::Duration::seconds(1));
    assert!(ask(&f.path, &Observed::default()).is_ok());
}

#[test]
fn an_unparseable_valid_until_is_expired() {
    let mut e = entry("invoices", "mistral", NOW + time::Duration::days(1));
    e.valid_until = "next tuesday".into();
    let list = Allowlist {
        entries: vec![e],
        ..Allowlist::default()
    };
    let f = file(Some(&serde_json::to_vec(&list).unwrap()));
    assert_eq!(reason(&f.path, &Observed::default()), Reason::Expired);
}

#[test]
fn a_suite_digest_mismatch_is_suite_changed() {
    let f = written(NOW + time::Duration::days(1));
    let other = "sha256:9999999999999999999999999999999999999999999999999999999999999999";
    let observed = Observed {
        suite_digest: Some(other),
        ..Observed::default()
    };
    assert_eq!(reason(&f.path, &observed), Reason::SuiteChanged);
    let same = Observed {
        suite_digest: Some(SUITE_DIGEST),
        ..Observed::default()
    };
    assert!(ask(&f.path, &same).is_ok());
}

#[test]
fn a_served_model_never_seen_is_model_drift() {
    let f = written(NOW + time::Duration::days(1));
    let observed = Observed {
        served_model: Some("mistral-model-2026-06-01"),
        ..Observed::default()
    };
    let denial = ask(&f.path, &observed).unwrap_err();
    assert_eq!(denial.reason, Reason::ModelDrift);
    assert!(
        denial.detail.contains("mistral-model-2026-06-01"),
        "{denial}"
    );
    let fingerprint = Observed {
        system_fingerprint: Some("fp_2"),
        ..Observed::default()
    };
    assert_eq!(reason(&f.path, &fingerprint), Reason::ModelDrift);
}

#[test]
fn a_valid_entry_permits_with_everything_observed() {
    let f = written(NOW + time::Duration::days(1));
    let observed = Observed {
        suite_digest: Some(SUITE_DIGEST),
        provider_digest: Some(PROVIDER_DIGEST),
        simulated: false,
        served_model: Some("mistral-model-2026-01-01"),
        system_fingerprint: Some("fp_1"),
        ..Observed::default()
    };
    assert_eq!(ask(&f.path, &observed).unwrap(), "mistral");
}

#[test]
fn another_pair_has_no_entry() {
    let f = written(NOW + time::Duration::days(1));
    let other_suite = permits(&f.path, "tickets", "mistral", NOW, &Observed::default());
    assert_eq!(other_suite.unwrap_err().reason, Reason::NoEntry);
    let other_provider = permits(&f.path, "invoices", "llama", NOW, &Observed::default());
    assert_eq!(other_provider.unwrap_err().reason, Reason::NoEntry);
}

#[test]
fn a_malformed_entry_permits_nothing_and_is_counted() {
    let good =
        serde_json::to_value(entry("invoices", "mistral", NOW + time::Duration::days(1))).unwrap();
    let mut bad =
        serde_json::to_value(entry("tickets", "mistral", NOW + time::Duration::days(1))).unwrap();
    bad.as_object_mut().unwrap().remove("provider");
    let text = serde_json::json!({"format": "conform.allowlist/v1", "entries": [good, bad]});
    let list = Allowlist::parse(text.to_string().as_bytes()).unwrap();
    assert_eq!(list.malformed, 1);
    assert!(
        list.decide("invoices", "mistral", NOW, &Observed::default())
            .is_ok()
    );
    let denial = list
        .decide("tickets", "mistral", NOW, &Observed::default())
        .unwrap_err();
    assert_eq!(denial.reason, Reason::NoEntry);
}

/// An entry with only the members the orchestrator contract requires permits failover
/// to a caller that holds it to nothing else (the contract's reading), and to no caller
/// that observed something it cannot answer for.
#[test]
fn a_contract_only_entry_permits_only_what_it_can_answer_for() {
    let mut partial =
        serde_json::to_value(entry("tickets", "mistral", NOW + time::Duration::days(1))).unwrap();
    partial.as_object_mut().unwrap().remove("served_models");
    let text = serde_json::json!({"format": "conform.allowlist/v1", "entries": [partial]});
    let list = Allowlist::parse(text.to_string().as_bytes()).unwrap();
    assert_eq!(list.malformed, 0);
    assert!(list.entries[0].contract_only);
    assert!(
        list.decide("tickets", "mistral", NOW, &Observed::default())
            .is_ok()
    );
    for observed in [
        Observed {
            suite_digest: Some(SUITE_DIGEST),
            ..Observed::default()
        },
        Observed {
            provider_digest: Some(PROVIDER_DIGEST),
            ..Observed::default()
        },
        Observed {
            served_model: Some("mistral-model-2026-01-01"),
            ..Observed::default()
        },
    ] {
        let denial = list
            .decide("tickets", "mistral", NOW, &observed)
            .unwrap_err();
        assert!(
            matches!(
                denial.reason,
                Reason::SuiteChanged | Reason::ProviderChanged | Reason::ModelDrift
            ),
            "{denial:?}"
        );
    }
}

#[test]
fn reason_codes_are_stable() {
    let codes: Vec<&str> = [
        Reason::Missing,
        Reason::Unreadable,
        Reason::UnknownFormat,
        Reason::NoEntry,
        Reason::Expired,
        Reason::SuiteChanged,
        Reason::ModelDrift,
    ]
    .iter()
    .map(|r| r.code())
    .collect();
    assert_eq!(
        codes,
        [
            "missing",
            "unreadable",
            "unknown_format",
            "no_entry",
            "expired",
            "suite_changed",
            "model_drift"
        ]
    );
    // The serialised form (gate --format json) is the same code.
    assert_eq!(
        serde_json::to_value(Reason::UnknownFormat).unwrap(),
        "unknown_format"
    );
}
