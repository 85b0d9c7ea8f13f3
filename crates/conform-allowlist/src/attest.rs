//! What is signed of the allowlist, and what a reader checks of it: each entry (a grant)
//! and each revocation is a statement of its own, signed by the CI job that made it.
//!
//! A Statement's subjects are the suite and the provider as their digests; its predicate
//! is the record itself, every member but the signature (the time it was made
//! included: an entry's `generated_at`, a revocation's `at`). A reader that trusts the
//! signing key requires the record it reads to equal the predicate member for member,
//! so no edit after signing (a later `valid_until`, another provider, a pass rate, an
//! earlier revocation time) keeps a statement alive.

use serde::Serialize;
use serde_json::Value;

#[cfg(feature = "sign")]
use crate::sign::SigningKey;
use crate::sign::{Envelope, Statement, Subject, Trust, TrustedKey, Unverified};

use crate::format::{Entry, Revocation};

/// The predicate type of a signed entry; its JSON Schema is
/// `schemas/allowlist-entry-predicate.v1.schema.json`.
pub const PREDICATE_TYPE: &str = "https://conform.dev/attestation/allowlist-entry/v1";

/// The predicate type of a signed revocation: "the provider was found nonconformant for
/// the suite at `at`, because of the finding codes `reasons`".
pub const REVOCATION_PREDICATE_TYPE: &str =
    "https://conform.dev/attestation/allowlist-revocation/v1";

/// A record of the allowlist that a CI job signs: an [`Entry`] or a [`Revocation`].
pub trait Signed: Serialize {
    /// The Statement's `predicateType`.
    const PREDICATE_TYPE: &'static str;
    /// What it is called in a sentence: `entry`, `revocation`.
    const NOUN: &'static str;
    /// The suite and the provider, by the digests the record names.
    fn subjects(&self) -> Vec<Subject>;
    /// The signature the record carries, if any.
    fn attestation(&self) -> Option<&Envelope>;
    /// Where signing puts its envelope.
    fn attestation_mut(&mut self) -> &mut Option<Envelope>;
}

impl Signed for Entry {
    const PREDICATE_TYPE: &'static str = PREDICATE_TYPE;
    const NOUN: &'static str = "entry";
    fn subjects(&self) -> Vec<Subject> {
        vec![
            Subject::sha256(format!("conform-suite:{}", self.suite), &self.suite_digest),
            Subject::sha256(
                format!("conform-provider:{}", self.provider),
                &self.provider_digest,
            ),
        ]
    }
    fn attestation(&self) -> Option<&Envelope> {
        self.attestation.as_ref()
    }
    fn attestation_mut(&mut self) -> &mut Option<Envelope> {
        &mut self.attestation
    }
}

impl Signed for Revocation {
    const PREDICATE_TYPE: &'static str = REVOCATION_PREDICATE_TYPE;
    const NOUN: &'static str = "revocation";
    fn subjects(&self) -> Vec<Subject> {
        let digest = |d: &Option<String>| d.as_deref().unwrap_or_default().to_string();
        vec![
            Subject::sha256(
                format!("conform-suite:{}", self.suite),
                &digest(&self.suite_digest),
            ),
            Subject::sha256(
                format!("conform-provider:{}", self.provider),
                &digest(&self.provider_digest),
            ),
        ]
    }
    fn attestation(&self) -> Option<&Envelope> {
        self.attestation.as_ref()
    }
    fn attestation_mut(&mut self) -> &mut Option<Envelope> {
        &mut self.attestation
    }
}

/// The Statement a record's signature covers.
pub fn statement<T: Signed>(record: &T) -> Statement {
    let mut predicate = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Value::Object(members) = &mut predicate {
        members.remove("attestation");
    }
    Statement::new(record.subjects(), T::PREDICATE_TYPE, predicate)
}

/// Signs `record` (an entry or a revocation) in place.
#[cfg(feature = "sign")]
pub fn sign<T: Signed>(record: &mut T, key: &SigningKey) {
    *record.attestation_mut() = None;
    let envelope = key.sign(&statement(record));
    *record.attestation_mut() = Some(envelope);
}

/// The trusted key that signed `record` as it is, or why it does not count as signed.
pub fn verify<'t, T: Signed>(record: &T, trust: &'t Trust) -> Result<&'t TrustedKey, Unverified> {
    let (signed, by) = trust.verify(record.attestation())?;
    let now = statement(record);
    if signed.predicate_type != T::PREDICATE_TYPE {
        return Err(Unverified::SignatureInvalid(format!(
            "it signs a `{}`, not an allowlist {}",
            signed.predicate_type,
            T::NOUN
        )));
    }
    if signed.subject != now.subject {
        return Err(Unverified::SignatureInvalid(
            "it was signed for another suite, provider or digest".to_string(),
        ));
    }
    if signed.predicate != now.predicate {
        return Err(Unverified::SignatureInvalid(format!(
            "the {} was edited after it was signed: {}",
            T::NOUN,
            changed_members(&signed.predicate, &now.predicate).join(", ")
        )));
    }
    Ok(by)
}

/// The top-level members that differ between two entries, by name.
fn changed_members(signed: &Value, now: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (a, b) = (
        signed.as_object().unwrap_or(&empty),
        now.as_object().unwrap_or(&empty),
    );
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .map(|n| format!("`{n}`"))
        .collect()
}

/// Who signed an envelope, by key id, without checking it: for people reading the file.
pub fn signed_by(envelope: Option<&Envelope>) -> Vec<&str> {
    envelope
        .map(|e| e.signatures.iter().map(|s| s.keyid.as_str()).collect())
        .unwrap_or_default()
}

/// One record of a file (an entry or a revocation) checked against a trust file: the key
/// that signed it, or why it does not count as signed; and, for an entry, whether a
/// statement about its pair made after it was already seen.
#[derive(Debug)]
pub struct Checked {
    /// The suite the record is about.
    pub suite: String,
    /// The provider the record is about.
    pub provider: String,
    /// `entry` or `revocation`.
    pub kind: &'static str,
    /// The key that signed it, as `name (id)`, or why it does not count as signed.
    pub signer: Result<String, Unverified>,
    /// Why the entry is superseded, when it is.
    pub superseded: Option<String>,
}

impl Checked {
    fn of<T: Signed>(record: &T, suite: &str, provider: &str, trust: &Trust) -> Checked {
        Checked {
            suite: suite.to_string(),
            provider: provider.to_string(),
            kind: T::NOUN,
            signer: verify(record, trust).map(|key| format!("{} ({})", key.name, key.key.id())),
            superseded: None,
        }
    }

    /// It is signed by a listed key, as it is, and not superseded.
    pub fn holds(&self) -> bool {
        self.signer.is_ok() && self.superseded.is_none()
    }
}

/// Every entry, then every revocation, of `allowlist`, checked against `trust` (`conform
/// allowlist verify`); entries also against what the reader has `seen`, when given.
pub fn verify_all(
    allowlist: &crate::format::Allowlist,
    trust: &Trust,
    seen: Option<&crate::seen::Seen>,
) -> Vec<Checked> {
    let entries = allowlist.entries.iter().map(|e| Checked {
        superseded: seen
            .and_then(|s| crate::decision::not_superseded(e, s.get(&e.suite, &e.provider)).err())
            .map(|d| d.detail),
        ..Checked::of(e, &e.suite, &e.provider, trust)
    });
    let revocations =
        (allowlist.revocations.iter()).map(|r| Checked::of(r, &r.suite, &r.provider, trust));
    entries.chain(revocations).collect()
}

/// `conform allowlist verify` could not check anything.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// There is no trust file to check the signatures against.
    #[error(
        "no trust file at {}: list the keys allowed to sign (`conform keys new`), or name one with --trust",
        path.display()
    )]
    NoTrust {
        /// Where the trust file was looked for.
        path: std::path::PathBuf,
    },
    /// The trust file could not be read or lists a key that is not one.
    #[error(transparent)]
    Trust(#[from] crate::sign::SignError),
    /// The allowlist's denial detail.
    #[error("{0}")]
    Allowlist(String),
}

/// Every entry and revocation of the allowlist at `path` checked against the trust file
/// at `trust`.
#[derive(Debug)]
pub struct Verification {
    /// The trust file the signatures were checked against.
    pub trust: std::path::PathBuf,
    /// Every entry, then every revocation, as checked.
    pub entries: Vec<Checked>,
}

impl Verification {
    /// The file at `path` checked against the trust file at `trust` and, when given,
    /// against what the reader has `seen` (`--state`).
    pub fn of(
        path: &std::path::Path,
        trust: &std::path::Path,
        seen: Option<&crate::seen::Seen>,
    ) -> Result<Verification, VerifyError> {
        let trust = Trust::load(trust)?.ok_or_else(|| VerifyError::NoTrust {
            path: trust.to_path_buf(),
        })?;
        let list =
            crate::format::Allowlist::load(path).map_err(|d| VerifyError::Allowlist(d.detail))?;
        Ok(Verification {
            entries: verify_all(&list, &trust, seen),
            trust: trust.path,
        })
    }

    /// Records unsigned, edited after signing, signed by an unlisted key, or superseded.
    /// An unsigned revocation still denies, but no reader that trusts keys remembers it,
    /// so an older entry put back in its place would not be known superseded.
    pub fn failed(&self) -> usize {
        self.entries.iter().filter(|c| !c.holds()).count()
    }
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in &self.entries {
            let pair = match c.kind {
                "entry" => format!("{} × {}", c.suite, c.provider),
                kind => format!("{} × {} ({kind})", c.suite, c.provider),
            };
            match (&c.signer, &c.superseded) {
                (Ok(by), None) => writeln!(f, "ok        {pair}: signed by {by}")?,
                (Ok(by), Some(why)) => writeln!(f, "superseded {pair}: signed by {by}; {why}")?,
                (Err(why), _) => {
                    let code = match why {
                        Unverified::Unsigned => "unsigned",
                        Unverified::SignatureInvalid(_) => "invalid",
                        Unverified::UntrustedKey(_) => "untrusted",
                    };
                    writeln!(f, "{code:9} {pair}: {why}")?;
                }
            }
        }
        writeln!(
            f,
            "{} of {} entries and revocations verified against {}",
            self.entries.len() - self.failed(),
            self.entries.len(),
            self.trust.display()
        )
    }
}

// The tests sign what they verify: they need the writer's half.
#[cfg(all(test, feature = "sign"))]
mod tests {
    use super::*;
    use crate::sign::TrustedKey;

    fn entry() -> Entry {
        let text = r#"{"suite": "s", "provider": "p", "model": "m", "served_models": ["m-1"],
            "system_fingerprints": [], "suite_digest": "sha256:aa", "provider_digest": "sha256:bb",
            "tokenizer": "none", "evidence": {"run_id": "r", "report": "x", "conform_version": "0",
            "cases": 1, "repeats": 1, "calls": 1, "passed": 1, "pass_rate": 1.0,
            "first_attempt_pass_rate": 1.0, "checks": {}},
            "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}"#;
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_signed_entry_verifies_until_any_member_is_edited() {
        let key = SigningKey::generate().unwrap();
        let trust = Trust {
            path: "trust.toml".into(),
            keys: vec![TrustedKey {
                name: "ci".into(),
                key: key.public(),
            }],
        };
        let mut signed = entry();
        sign(&mut signed, &key);
        // Through the file's JSON and back, as every reader gets it.
        let read: Entry = serde_json::from_str(&serde_json::to_string(&signed).unwrap()).unwrap();
        assert_eq!(verify(&read, &trust).unwrap().name, "ci");
        assert_eq!(verify(&entry(), &trust).unwrap_err(), Unverified::Unsigned);
        let edits: [fn(&mut Entry); 4] = [
            |e| e.valid_until = "2099-01-01T00:00:00Z".into(),
            |e| e.provider = "other".into(),
            |e| e.evidence.passed = 0,
            |e| e.served_models.push("m-2".into()),
        ];
        for edit in edits {
            let mut edited = read.clone();
            edit(&mut edited);
            assert!(
                matches!(
                    verify(&edited, &trust),
                    Err(Unverified::SignatureInvalid(_))
                ),
                "{edited:?}"
            );
        }
        let mut moved = read.clone();
        moved.valid_until = "2099-01-01T00:00:00Z".into();
        let Err(Unverified::SignatureInvalid(why)) = verify(&moved, &trust) else {
            panic!("an edit verified")
        };
        assert!(why.contains("`valid_until`"), "{why}");
    }

    #[test]
    fn a_signed_revocation_verifies_until_it_is_moved_or_read_as_an_entry() {
        let key = SigningKey::generate().unwrap();
        let trust = Trust {
            path: "trust.toml".into(),
            keys: vec![TrustedKey {
                name: "ci".into(),
                key: key.public(),
            }],
        };
        let mut revocation = Revocation {
            suite: "s".into(),
            provider: "p".into(),
            run_id: "r2".into(),
            at: "2026-01-03T00:00:00Z".into(),
            reasons: vec!["not_pure_json".into()],
            report: "x".into(),
            suite_digest: Some("sha256:aa".into()),
            provider_digest: Some("sha256:bb".into()),
            attestation: None,
        };
        assert_eq!(
            verify(&revocation, &trust).unwrap_err(),
            Unverified::Unsigned
        );
        sign(&mut revocation, &key);
        let read: Revocation =
            serde_json::from_str(&serde_json::to_string(&revocation).unwrap()).unwrap();
        assert_eq!(verify(&read, &trust).unwrap().name, "ci");
        let statement = statement(&read);
        assert_eq!(statement.predicate_type, REVOCATION_PREDICATE_TYPE);
        assert_eq!(statement.predicate["at"], "2026-01-03T00:00:00Z");
        // Dated earlier by hand, so that an older entry would look newer: not signed.
        let mut moved = read.clone();
        moved.at = "2026-01-01T00:00:00Z".into();
        let Err(Unverified::SignatureInvalid(why)) = verify(&moved, &trust) else {
            panic!("a moved revocation verified")
        };
        assert!(
            why.contains("the revocation was edited") && why.contains("`at`"),
            "{why}"
        );
        // Its envelope put on an entry signs nothing the entry says.
        let mut entry = entry();
        entry.attestation = read.attestation.clone();
        let Err(Unverified::SignatureInvalid(why)) = verify(&entry, &trust) else {
            panic!("a revocation's signature verified an entry")
        };
        assert!(why.contains("not an allowlist entry"), "{why}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever happens to a signed entry's bytes on the way (edits, cuts, another
        /// payload type, fields duplicated or re-encoded), a signature that still verifies
        /// vouches for exactly the entry that was signed.
        #[test]
        fn no_edit_of_a_signed_entry_verifies_as_another_entry(
            edits in proptest::collection::vec((0usize..4096, proptest::num::u8::ANY), 1..4),
            cut in proptest::option::of(0usize..4096),
            kind in 0u8..4,
        ) {
            let key = SigningKey::generate().unwrap();
            let trust = Trust {
                path: "trust.toml".into(),
                keys: vec![TrustedKey { name: "ci".into(), key: key.public() }],
            };
            let mut original = entry();
            sign(&mut original, &key);
            let mut text = serde_json::to_string(&original).unwrap().into_bytes();
            match kind {
                // Bytes anywhere.
                0 => {
                    for (at, byte) in &edits {
                        let at = at % text.len();
                        text[at] = *byte;
                    }
                }
                // The payload type, or a duplicated member whose last copy wins.
                1 => {
                    let s = String::from_utf8(text).unwrap().replacen(
                        "application/vnd.in-toto+json", "application/json", 1);
                    text = s.into_bytes();
                }
                2 => {
                    let s = String::from_utf8(text).unwrap().replacen(
                        "\"valid_until\":", "\"valid_until\":\"2099-01-01T00:00:00Z\",\"valid_until\":", 1);
                    text = s.into_bytes();
                }
                // The payload re-encoded: the same Statement, other bytes.
                _ => {
                    let mut e = original.clone();
                    let pretty = serde_json::to_vec_pretty(&statement(&original)).unwrap();
                    let envelope = e.attestation.as_mut().unwrap();
                    envelope.payload = base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD, pretty);
                    text = serde_json::to_vec(&e).unwrap();
                }
            }
            if let Some(cut) = cut {
                text.truncate(cut % (text.len() + 1));
            }
            let Ok(read) = serde_json::from_slice::<Entry>(&text) else {
                return Ok(());
            };
            if verify(&read, &trust).is_ok() {
                let (was, is) = (statement(&original), statement(&read));
                proptest::prop_assert_eq!(was.subject, is.subject);
                proptest::prop_assert_eq!(was.predicate, is.predicate);
            }
        }
    }
}
