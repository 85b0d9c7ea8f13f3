//! The published JSON Schema: what the writer writes validates; what it must not, fails.

use conform_gate::allowlist::{Change, update};
use serde_json::Value;
use time::macros::datetime;

use super::support::{entry, revocation, schema, validate};

fn written() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    update(
        &path,
        &[
            Change::Grant(Box::new(entry(
                "invoices",
                "mistral",
                datetime!(2030-01-01 0:00 UTC),
            ))),
            Change::Grant(Box::new(entry(
                "tickets",
                "mistral",
                datetime!(2030-01-01 0:00:00.123456789 UTC),
            ))),
            Change::Revoke(revocation("invoices", "fenced", "run-9")),
            Change::Revoke(signed_revocation("tickets", "fenced")),
        ],
    )
    .unwrap();
    (dir, path)
}

/// A revocation as a signed run writes it: with its digests and its envelope.
fn signed_revocation(suite: &str, provider: &str) -> conform_gate::allowlist::Revocation {
    let mut r = revocation(suite, provider, "run-10");
    r.suite_digest = Some(super::support::SUITE_DIGEST.into());
    r.provider_digest = Some(super::support::PROVIDER_DIGEST.into());
    let key = conform_allowlist::sign::SigningKey::generate().unwrap();
    conform_gate::allowlist::attest::sign(&mut r, &key);
    r
}

#[test]
fn a_file_written_by_the_writer_validates() {
    let (_dir, path) = written();
    validate(&path).unwrap();
}

#[test]
fn the_schema_rejects_another_format_string() {
    let (_dir, path) = written();
    let mut value: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let validator = schema();
    assert!(validator.is_valid(&value));
    value["format"] = Value::from("conform.allowlist/v2");
    assert!(!validator.is_valid(&value));
    value.as_object_mut().unwrap().remove("format");
    assert!(!validator.is_valid(&value));
}

#[test]
fn the_schema_rejects_what_a_reader_would_drop() {
    let (_dir, path) = written();
    let value: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let validator = schema();
    type Break = fn(&mut Value);
    let broken: [(&str, Break); 6] = [
        ("no valid_until", |v| {
            v["entries"][0]
                .as_object_mut()
                .unwrap()
                .remove("valid_until");
        }),
        ("valid_until not a time", |v| {
            v["entries"][0]["valid_until"] = Value::from("next tuesday")
        }),
        ("served_models not a list", |v| {
            v["entries"][0]["served_models"] = Value::from("m")
        }),
        ("pass rate above 1", |v| {
            v["entries"][0]["evidence"]["pass_rate"] = Value::from(1.5)
        }),
        ("digest not sha256", |v| {
            v["entries"][0]["suite_digest"] = Value::from("md5:abc")
        }),
        ("an unknown entry field", |v| {
            v["entries"][0]["api_key"] = Value::from("sk-…")
        }),
    ];
    for (what, breaks) in broken {
        let mut v = value.clone();
        breaks(&mut v);
        assert!(!validator.is_valid(&v), "{what} should not validate");
    }
}

#[test]
fn the_schema_is_the_shipped_file() {
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/allowlist.v1.schema.json"),
    )
    .unwrap();
    assert_eq!(shipped, conform_gate::allowlist::SCHEMA);
    let schema: Value = serde_json::from_str(&shipped).unwrap();
    assert_eq!(
        schema["properties"]["format"]["const"],
        conform_gate::allowlist::FORMAT
    );
}
