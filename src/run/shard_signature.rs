//! A shard's signature: `shard.sig.json` beside its manifest and records, so that
//! `conform merge` refuses a shard whose `shard.json` or `results.jsonl` changed after the
//! CI job that ran it signed them (docs/signing.md).
//!
//! The Statement's subjects are the two files by their SHA-256; its predicate says which
//! shard of which plan they are. Merge re-judges the records either way: the signature
//! is what ties them to the job that made the calls.

use std::path::{Path, PathBuf};

use super::shard::{MANIFEST, Manifest};
use conform_allowlist::sign::{Envelope, SigningKey, Statement, Subject, Trust, Unverified};

/// The signature's file, beside the manifest.
pub const SIGNATURE: &str = "shard.sig.json";
/// The records' file the signature covers.
const RECORDS: &str = "results.jsonl";
/// The predicate type of a signed shard.
pub const PREDICATE_TYPE: &str = "https://conform.dev/attestation/shard/v1";

#[derive(Debug, thiserror::Error)]
pub enum ShardSignatureError {
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{dir}: {why}")]
    Unverified { dir: PathBuf, why: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ShardSignatureError + '_ {
    move |source| ShardSignatureError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The Statement over the shard in `dir` as its files are now.
fn statement(dir: &Path, manifest: &Manifest) -> Result<Statement, ShardSignatureError> {
    let mut subject = Vec::new();
    for name in [MANIFEST, RECORDS] {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        subject.push(Subject::sha256(
            name,
            &conform_config::digest::bytes_hex(&bytes),
        ));
    }
    Ok(Statement::new(
        subject,
        PREDICATE_TYPE,
        serde_json::json!({
            "shard": manifest.shard.to_string(),
            "plan_digest": manifest.plan_digest,
            "conform_version": manifest.conform_version,
        }),
    ))
}

/// Signs the shard in `dir` (after its manifest is written): `DIR/shard.sig.json`.
pub fn sign(
    dir: &Path,
    manifest: &Manifest,
    key: &SigningKey,
) -> Result<PathBuf, ShardSignatureError> {
    let envelope = key.sign(&statement(dir, manifest)?);
    let path = dir.join(SIGNATURE);
    let text = serde_json::to_string_pretty(&envelope).unwrap_or_default() + "\n";
    std::fs::write(&path, text).map_err(io(&path))?;
    Ok(path)
}

/// Checks that the shard in `dir` is, file for file, what a key `trust` lists signed.
pub fn verify(
    dir: &Path,
    manifest: &Manifest,
    trust: &Trust,
) -> Result<String, ShardSignatureError> {
    let unverified = |why: String| ShardSignatureError::Unverified {
        dir: dir.to_path_buf(),
        why,
    };
    let path = dir.join(SIGNATURE);
    let envelope: Option<Envelope> = match std::fs::read(&path) {
        Ok(bytes) => Some(
            serde_json::from_slice(&bytes)
                .map_err(|e| unverified(format!("{SIGNATURE} is not a DSSE envelope: {e}")))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(ShardSignatureError::Io { path, source }),
    };
    let (signed, by) = trust.verify(envelope.as_ref()).map_err(|e| {
        unverified(match e {
            Unverified::Unsigned => format!(
                "the shard is not signed ({SIGNATURE} is missing), and {} requires it",
                trust.path.display()
            ),
            other => format!("the shard's signature: {other}"),
        })
    })?;
    let now = statement(dir, manifest)?;
    if signed.predicate_type != PREDICATE_TYPE || signed.predicate != now.predicate {
        return Err(unverified(
            "the signature is for another shard or plan".into(),
        ));
    }
    let changed: Vec<&str> = (now.subject.iter())
        .filter(|s| !signed.subject.contains(s))
        .map(|s| s.name.as_str())
        .collect();
    if !changed.is_empty() {
        return Err(unverified(format!(
            "{} changed after the shard was signed",
            changed.join(" and ")
        )));
    }
    Ok(by.name.clone())
}
