//! A private signing key: the writer's side of signed evidence, behind the `sign`
//! feature. Read only from `CONFORM_SIGNING_KEY` (a file's path, or the key's text
//! itself for CI secrets) and never printed: its `Debug` shows its public half, and no
//! error message quotes the variable's value.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::envelope::{self, Envelope, Signature, Statement, pae};
use super::{KEY_VARIABLE, PublicKey, SECRET_PREFIX, SignError};

/// A private signing key. Never printed, never serialized.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public().id())
    }
}

impl SigningKey {
    /// A new key from the system's randomness.
    pub fn generate() -> Result<SigningKey, SignError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| SignError::Random(e.to_string()))?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// The key `CONFORM_SIGNING_KEY` names, if it is set: the key's text itself (a CI
    /// secret) or the path of its file.
    pub fn from_env() -> Result<Option<SigningKey>, SignError> {
        match std::env::var(KEY_VARIABLE) {
            Ok(value) if !value.trim().is_empty() => Self::from_setting(value.trim()).map(Some),
            _ => Ok(None),
        }
    }

    fn from_setting(value: &str) -> Result<SigningKey, SignError> {
        if value.starts_with(SECRET_PREFIX) {
            return Self::parse(value).ok_or(SignError::NotAKey);
        }
        let path = Path::new(value);
        // The value may be a key that lost its prefix: never name it in an error.
        let text = std::fs::read_to_string(path).map_err(|_| SignError::NotAKey)?;
        Self::parse(text.trim()).ok_or_else(|| SignError::NotAKeyFile {
            path: path.to_path_buf(),
        })
    }

    fn parse(text: &str) -> Option<SigningKey> {
        let bytes = B64.decode(text.strip_prefix(SECRET_PREFIX)?).ok()?;
        let seed: [u8; 32] = bytes.try_into().ok()?;
        Some(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// The half that `trust.toml` lists and readers verify with.
    pub fn public(&self) -> PublicKey {
        PublicKey::of(self.0.verifying_key())
    }

    /// A new key pair written to `dir` as NAME.key and NAME.pub (`conform keys new`).
    pub fn new_pair(dir: &Path, name: &str) -> Result<NewPair, SignError> {
        let key = Self::generate()?;
        let (secret, public) = key.write_pair(dir, name)?;
        Ok(NewPair {
            name: name.to_string(),
            secret,
            public,
            key: key.public(),
        })
    }

    /// Writes `DIR/NAME.key` (the private key, readable by its owner only) and
    /// `DIR/NAME.pub`; refuses to replace either.
    pub fn write_pair(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), SignError> {
        let secret = dir.join(format!("{name}.key"));
        let public = dir.join(format!("{name}.pub"));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SignError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let secret_text = format!("{SECRET_PREFIX}{}\n", B64.encode(self.0.to_bytes()));
        write_new(&secret, &secret_text, 0o600).map_err(io(&secret))?;
        write_new(&public, &format!("{}\n", self.public()), 0o644).map_err(io(&public))?;
        Ok((secret, public))
    }

    /// Signs `statement` as a DSSE envelope.
    pub fn sign(&self, statement: &Statement) -> Envelope {
        let payload = serde_json::to_vec(statement).unwrap_or_default();
        let signature =
            ed25519_dalek::Signer::sign(&self.0, &pae(envelope::PAYLOAD_TYPE, &payload));
        Envelope {
            payload_type: envelope::PAYLOAD_TYPE.to_string(),
            payload: B64.encode(&payload),
            signatures: vec![Signature {
                keyid: self.public().id(),
                sig: B64.encode(signature.to_bytes()),
            }],
        }
    }
}

/// Writes a file that must not exist yet, created with `mode` on Unix (a private key is
/// never readable by others, not even between its creation and a chmod).
fn write_new(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    std::io::Write::write_all(&mut options.open(path)?, text.as_bytes())
}

/// A key pair just written, and where each half goes.
pub struct NewPair {
    /// The name the pair is written under, and that `trust.toml` lists it by.
    pub name: String,
    /// The private half's file: it goes to the CI's secret store, nowhere else.
    pub secret: PathBuf,
    /// The public half's file: it goes into `trust.toml`.
    pub public: PathBuf,
    /// The public key, to name in `trust.toml` and to find by id in envelopes.
    pub key: PublicKey,
}

impl std::fmt::Display for NewPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "private key: {} (keep it secret: CONFORM_SIGNING_KEY)",
            self.secret.display()
        )?;
        writeln!(
            f,
            "public key:  {} (list it in trust.toml)",
            self.public.display()
        )?;
        writeln!(
            f,
            "\n[[keys]]\nname = \"{}\"\npublic_key = \"{}\"",
            self.name, self.key
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_written_is_the_key_read_and_its_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::generate().unwrap();
        let (secret, public) = key.write_pair(dir.path(), "ci").unwrap();
        let read = SigningKey::from_setting(secret.to_str().unwrap()).unwrap();
        assert_eq!(read.public(), key.public());
        let text = std::fs::read_to_string(&secret).unwrap();
        assert_eq!(
            SigningKey::from_setting(text.trim()).unwrap().public(),
            key.public()
        );
        let listed = PublicKey::parse(&std::fs::read_to_string(public).unwrap()).unwrap();
        assert_eq!(listed, key.public());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Never replaced.
        assert!(key.write_pair(dir.path(), "ci").is_err());
        // Neither the Debug form nor an error shows the secret.
        let shown = format!("{key:?}");
        assert!(!shown.contains(text.trim()) && shown.contains("sha256:"));
        let secret_text = text.trim().strip_prefix(SECRET_PREFIX).unwrap();
        let err = SigningKey::from_setting(secret_text)
            .unwrap_err()
            .to_string();
        assert!(!err.contains(secret_text), "{err}");
    }
}
