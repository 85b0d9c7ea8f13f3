//! The writer under a trust file: an unsigned grant never replaces a signed statement
//! unless told to, nothing is written when it refuses, and an unsigned revocation still
//! revokes, saying what it cannot do.

use conform_allowlist::sign::{SigningKey, Trust, TrustedKey};
use conform_gate::allowlist::attest::sign;
use conform_gate::allowlist::{Allowlist, Change, Overwrite, UpdateError, update, update_with};
use time::macros::datetime;

use super::support::{PROVIDER_DIGEST, SUITE_DIGEST, entry, revocation};

fn trusting(key: &SigningKey) -> Trust {
    Trust {
        path: "trust.toml".into(),
        keys: vec![TrustedKey {
            name: "ci".into(),
            key: key.public(),
        }],
    }
}

#[test]
fn an_unsigned_grant_never_silently_replaces_a_signed_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    let key = SigningKey::generate().unwrap();
    let trust = trusting(&key);
    let until = datetime!(2030-01-01 0:00 UTC);
    let mut signed = entry("invoices", "mistral", until);
    sign(&mut signed, &key);
    update(&path, &[Change::Grant(Box::new(signed.clone()))]).unwrap();
    let before = std::fs::read(&path).unwrap();

    let unsigned = || Change::Grant(Box::new(entry("invoices", "mistral", until)));
    let guarded = |allow_unsigned| Overwrite {
        trust: Some(&trust),
        allow_unsigned,
    };
    let refused = update_with(&path, &[unsigned()], guarded(false)).unwrap_err();
    let said = refused.to_string();
    assert!(
        matches!(&refused, UpdateError::UnsignedOverSigned { pairs, .. }
            if pairs == &["invoices × mistral (entry)"]),
        "{said}"
    );
    for needed in ["CONFORM_SIGNING_KEY", "docs/signing.md", "--allow-unsigned"] {
        assert!(said.contains(needed), "{said}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "{said}");

    // Control: a signed grant replaces it, and says nothing.
    let mut newer = entry("invoices", "mistral", until);
    newer.evidence.run_id = "run-2".into();
    sign(&mut newer, &key);
    let updated = update_with(&path, &[Change::Grant(Box::new(newer))], guarded(false)).unwrap();
    assert!(updated.unsigned.is_empty(), "{:?}", updated.unsigned);

    // Told to, it replaces it, and says what every reader will make of it.
    let updated = update_with(&path, &[unsigned()], guarded(true)).unwrap();
    assert_eq!(updated.granted.len(), 1);
    assert!(
        updated.unsigned[0].contains("granted unsigned")
            && updated.unsigned[0].contains("(unsigned)"),
        "{:?}",
        updated.unsigned
    );
    let list = Allowlist::load(&path).unwrap();
    assert!(list.entries[0].attestation.is_none());
}

#[test]
fn an_unsigned_revocation_revokes_a_signed_grant_and_says_it_is_unsigned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    let key = SigningKey::generate().unwrap();
    let trust = trusting(&key);
    let mut signed = entry("invoices", "mistral", datetime!(2030-01-01 0:00 UTC));
    sign(&mut signed, &key);
    update(&path, &[Change::Grant(Box::new(signed))]).unwrap();

    let failing = Change::Revoke(revocation("invoices", "mistral", "run-bad"));
    let overwrite = Overwrite {
        trust: Some(&trust),
        allow_unsigned: false,
    };
    let updated = update_with(&path, &[failing], overwrite).unwrap();
    assert_eq!(updated.revoked.len(), 1);
    assert!(
        updated.unsigned[0].contains("revoked unsigned, replacing a signed entry"),
        "{:?}",
        updated.unsigned
    );
    let list = Allowlist::load(&path).unwrap();
    assert!(list.entries.is_empty() && list.revocations.len() == 1);

    // A signed revocation is the same change, and needs no word.
    let mut signed = revocation("invoices", "mistral", "run-bad-2");
    signed.suite_digest = Some(SUITE_DIGEST.into());
    signed.provider_digest = Some(PROVIDER_DIGEST.into());
    sign(&mut signed, &key);
    let updated = update_with(&path, &[Change::Revoke(signed)], overwrite).unwrap();
    assert!(updated.unsigned.is_empty(), "{:?}", updated.unsigned);
    // And an unsigned grant does not replace it either: it is a signed statement.
    let grant = Change::Grant(Box::new(entry(
        "invoices",
        "mistral",
        datetime!(2030-01-01 0:00 UTC),
    )));
    let refused = update_with(&path, &[grant], overwrite).unwrap_err();
    assert!(refused.to_string().contains("(revocation)"), "{refused}");
}
