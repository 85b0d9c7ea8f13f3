//! `trust.toml`: the public keys allowed to sign a project's evidence. Several may be
//! listed at once (a rotation); each envelope names the key that signed it.
//!
//! ```toml
//! [[keys]]
//! name = "ci-2026"
//! public_key = "conform-ed25519:…"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Envelope, PublicKey, SignError, Statement, pae};

/// The keys a project trusts to sign its evidence, as its `trust.toml` lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct Trust {
    /// Where the trust file was read from.
    pub path: PathBuf,
    /// The listed keys, in the file's order.
    pub keys: Vec<TrustedKey>,
}

/// One listed key.
#[derive(Debug, Clone, PartialEq)]
pub struct TrustedKey {
    /// The name the trust file gives it, which reports show next to its id.
    pub name: String,
    /// The key.
    pub key: PublicKey,
}

/// Why an envelope does not count as signed by a trusted key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// The record carries no signature.
    #[error("it carries no signature")]
    Unsigned,
    /// A signature does not verify over the record as it is now.
    #[error("its signature does not verify: {0}")]
    SignatureInvalid(String),
    /// The record is signed only by keys the trust file does not list.
    #[error("it is signed by key {0}, which the trust file does not list")]
    UntrustedKey(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    keys: Vec<KeySpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeySpec {
    name: String,
    public_key: serde_spanned::Spanned<String>,
}

impl Trust {
    /// The trust file at `path`, or `None` when there is none (evidence is then read
    /// unsigned, as before signing existed).
    pub fn load(path: &Path) -> Result<Option<Trust>, SignError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SignError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let line_of = |offset: usize| text[..offset.min(text.len())].lines().count().max(1);
        let file: File = toml::from_str(&text).map_err(|e| SignError::Trust {
            path: path.to_path_buf(),
            line: e.span().map_or(1, |s| line_of(s.start)),
            message: e.message().to_string(),
        })?;
        let mut keys = Vec::with_capacity(file.keys.len());
        for spec in file.keys {
            let key =
                PublicKey::parse(spec.public_key.get_ref()).map_err(|e| SignError::Trust {
                    path: path.to_path_buf(),
                    line: line_of(spec.public_key.span().start),
                    message: format!("keys `{}`: public_key: {e}", spec.name),
                })?;
            keys.push(TrustedKey {
                name: spec.name,
                key,
            });
        }
        if keys.is_empty() {
            return Err(SignError::Trust {
                path: path.to_path_buf(),
                line: 1,
                message: "no [[keys]]: a trust file that trusts nobody would deny every failover; \
                          list a public key (`conform keys new` writes one)"
                    .to_string(),
            });
        }
        Ok(Some(Trust {
            path: path.to_path_buf(),
            keys,
        }))
    }

    /// The Statement `envelope` carries, and the trusted key that signed it.
    pub fn verify<'t>(
        &'t self,
        envelope: Option<&Envelope>,
    ) -> Result<(Statement, &'t TrustedKey), Unverified> {
        let envelope = envelope.ok_or(Unverified::Unsigned)?;
        if envelope.signatures.is_empty() {
            return Err(Unverified::Unsigned);
        }
        let (payload, statement) = envelope
            .statement()
            .map_err(|e| Unverified::SignatureInvalid(e.to_string()))?;
        let message = pae(&envelope.payload_type, &payload);
        let mut untrusted = None;
        for signature in &envelope.signatures {
            let Some(trusted) = self.keys.iter().find(|k| k.key.id() == signature.keyid) else {
                untrusted.get_or_insert_with(|| signature.keyid.clone());
                continue;
            };
            if trusted.key.verifies(&message, &signature.sig) {
                return Ok((statement, trusted));
            }
            return Err(Unverified::SignatureInvalid(format!(
                "the signature by `{}` ({}) is not over this payload",
                trusted.name, signature.keyid
            )));
        }
        Err(Unverified::UntrustedKey(untrusted.unwrap_or_default()))
    }
}

// The tests sign what they verify: they need the writer's half.
#[cfg(all(test, feature = "sign"))]
mod tests {
    use super::super::{SigningKey, Subject};
    use super::*;

    fn trust_of(keys: &[(&str, &SigningKey)]) -> Trust {
        Trust {
            path: PathBuf::from("trust.toml"),
            keys: keys
                .iter()
                .map(|(name, k)| TrustedKey {
                    name: name.to_string(),
                    key: k.public(),
                })
                .collect(),
        }
    }

    #[test]
    fn only_a_listed_key_over_the_same_payload_verifies() {
        let (ci, old, other) = (
            SigningKey::generate().unwrap(),
            SigningKey::generate().unwrap(),
            SigningKey::generate().unwrap(),
        );
        let trust = trust_of(&[("old", &old), ("ci", &ci)]);
        let statement = Statement::new(
            vec![Subject::sha256("conform-suite:s", "sha256:00ff")],
            "https://example.com/p",
            serde_json::json!({"a": 1}),
        );
        let signed = ci.sign(&statement);
        let (read, by) = trust.verify(Some(&signed)).unwrap();
        assert_eq!((read, by.name.as_str()), (statement.clone(), "ci"));
        // Rotation: the old key still verifies what it signed.
        assert_eq!(
            trust.verify(Some(&old.sign(&statement))).unwrap().1.name,
            "old"
        );
        assert_eq!(trust.verify(None).unwrap_err(), Unverified::Unsigned);
        assert!(matches!(
            trust.verify(Some(&other.sign(&statement))),
            Err(Unverified::UntrustedKey(id)) if id == other.public().id()
        ));
        // A payload edited after signing.
        let mut edited = signed.clone();
        let forged = Statement {
            predicate: serde_json::json!({"a": 2}),
            ..statement
        };
        edited.payload = ci.sign(&forged).payload;
        assert!(matches!(
            trust.verify(Some(&edited)),
            Err(Unverified::SignatureInvalid(_))
        ));
    }

    #[test]
    fn a_trust_file_names_its_line_and_never_trusts_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust.toml");
        assert!(Trust::load(&path).unwrap().is_none());
        std::fs::write(&path, "[[keys]]\nname = \"ci\"\npublic_key = \"nope\"\n").unwrap();
        let err = Trust::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("trust.toml:3:") && err.contains("keys `ci`"),
            "{err}"
        );
        std::fs::write(&path, "").unwrap();
        assert!(
            Trust::load(&path)
                .unwrap_err()
                .to_string()
                .contains("no [[keys]]")
        );
        let key = SigningKey::generate().unwrap();
        std::fs::write(
            &path,
            format!(
                "[[keys]]\nname = \"ci\"\npublic_key = \"{}\"\n",
                key.public()
            ),
        )
        .unwrap();
        assert_eq!(
            Trust::load(&path).unwrap().unwrap().keys[0].key,
            key.public()
        );
    }
}
