//! An entry's signature: what is signed, and what a reader checks of it.
//!
//! The Statement's subjects are the suite and the provider as their digests; its
//! predicate is the entry itself, every member but the signature. A reader that trusts
//! the signing key requires the entry it reads to equal the predicate member for member,
//! so no edit after signing (a later `valid_until`, another provider, a pass rate) keeps
//! a permit alive.

use serde_json::Value;

use crate::sign::{Envelope, SigningKey, Statement, Subject, Trust, TrustedKey, Unverified};

use crate::format::Entry;

/// The predicate type of a signed entry; its JSON Schema is
/// `schemas/allowlist-entry-predicate.v1.schema.json`.
pub const PREDICATE_TYPE: &str = "https://conform.dev/attestation/allowlist-entry/v1";

/// The Statement an entry's signature covers.
pub fn statement(entry: &Entry) -> Statement {
    let mut predicate = serde_json::to_value(entry).unwrap_or(Value::Null);
    if let Value::Object(members) = &mut predicate {
        members.remove("attestation");
    }
    Statement::new(
        vec![
            Subject::sha256(
                format!("conform-suite:{}", entry.suite),
                &entry.suite_digest,
            ),
            Subject::sha256(
                format!("conform-provider:{}", entry.provider),
                &entry.provider_digest,
            ),
        ],
        PREDICATE_TYPE,
        predicate,
    )
}

/// Signs `entry` in place.
pub fn sign(entry: &mut Entry, key: &SigningKey) {
    entry.attestation = None;
    entry.attestation = Some(key.sign(&statement(entry)));
}

/// The trusted key that signed `entry` as it is, or why it does not count as signed.
pub fn verify<'t>(entry: &Entry, trust: &'t Trust) -> Result<&'t TrustedKey, Unverified> {
    let (signed, by) = trust.verify(entry.attestation.as_ref())?;
    let now = statement(entry);
    if signed.predicate_type != PREDICATE_TYPE {
        return Err(Unverified::SignatureInvalid(format!(
            "it signs a `{}`, not an allowlist entry",
            signed.predicate_type
        )));
    }
    if signed.subject != now.subject {
        return Err(Unverified::SignatureInvalid(
            "it was signed for another suite, provider or digest".to_string(),
        ));
    }
    if signed.predicate != now.predicate {
        return Err(Unverified::SignatureInvalid(format!(
            "the entry was edited after it was signed: {}",
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

/// One entry of a file checked against a trust file: the key that signed it, or why
/// it does not count as signed.
#[derive(Debug)]
pub struct Checked {
    pub suite: String,
    pub provider: String,
    pub signer: Result<String, Unverified>,
}

/// Every entry of `allowlist`, checked against `trust` (`conform allowlist verify`).
pub fn verify_all(allowlist: &crate::format::Allowlist, trust: &Trust) -> Vec<Checked> {
    (allowlist.entries.iter())
        .map(|entry| Checked {
            suite: entry.suite.clone(),
            provider: entry.provider.clone(),
            signer: verify(entry, trust).map(|key| format!("{} ({})", key.name, key.key.id())),
        })
        .collect()
}

/// `conform allowlist verify` could not check anything.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "no trust file at {}: list the keys allowed to sign (`conform keys new`), or name one with --trust",
        path.display()
    )]
    NoTrust { path: std::path::PathBuf },
    #[error(transparent)]
    Trust(#[from] crate::sign::SignError),
    /// The allowlist's denial detail.
    #[error("{0}")]
    Allowlist(String),
}

/// Every entry of the allowlist at `path` checked against the trust file at `trust`.
#[derive(Debug)]
pub struct Verification {
    pub trust: std::path::PathBuf,
    pub entries: Vec<Checked>,
}

impl Verification {
    pub fn of(
        path: &std::path::Path,
        trust: &std::path::Path,
    ) -> Result<Verification, VerifyError> {
        let trust = Trust::load(trust)?.ok_or_else(|| VerifyError::NoTrust {
            path: trust.to_path_buf(),
        })?;
        let list =
            crate::format::Allowlist::load(path).map_err(|d| VerifyError::Allowlist(d.detail))?;
        Ok(Verification {
            entries: verify_all(&list, &trust),
            trust: trust.path,
        })
    }

    /// Entries unsigned, edited after signing, or signed by an unlisted key.
    pub fn failed(&self) -> usize {
        self.entries.iter().filter(|c| c.signer.is_err()).count()
    }
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in &self.entries {
            match &c.signer {
                Ok(by) => writeln!(f, "ok        {} × {}: signed by {by}", c.suite, c.provider)?,
                Err(why) => {
                    let code = match why {
                        Unverified::Unsigned => "unsigned",
                        Unverified::SignatureInvalid(_) => "invalid",
                        Unverified::UntrustedKey(_) => "untrusted",
                    };
                    writeln!(f, "{code:9} {} × {}: {why}", c.suite, c.provider)?;
                }
            }
        }
        writeln!(
            f,
            "{} of {} entries verified against {}",
            self.entries.len() - self.failed(),
            self.entries.len(),
            self.trust.display()
        )
    }
}

#[cfg(test)]
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
