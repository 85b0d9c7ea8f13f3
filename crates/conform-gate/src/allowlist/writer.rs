//! Updating the allowlist: an advisory lock around read-modify-write, so concurrent
//! runs never lose each other's entries, and a temporary file, fsync and rename, so a
//! reader never sees half a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use conform_allowlist::attest::verify;
use conform_allowlist::sign::Trust;
use conform_allowlist::{Allowlist, Entry, Revocation};

/// One change to the allowlist.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Add or refresh the (suite, provider) entry.
    Grant(Box<Entry>),
    /// Remove the (suite, provider) entry, recording why.
    Revoke(Revocation),
    /// A conformant verdict that grants nothing, and why: the run sent something other
    /// than what the project's files say (`--base-url`, `--stream`, fewer `--repeats`
    /// than the suite's), so its evidence is not about them. The file is not touched.
    Withhold {
        /// The suite, by name.
        suite: String,
        /// The provider, by name.
        provider: String,
        /// What the run sent that the project's files do not say.
        why: String,
    },
}

/// What an update did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Updated {
    /// The (suite, provider) pairs granted.
    pub granted: Vec<(String, String)>,
    /// The (suite, provider) pairs revoked.
    pub revoked: Vec<(String, String)>,
    /// Set when the previous file could not be read and was replaced.
    pub replaced_unreadable: Option<String>,
    /// Entries of the previous file that had no v1 evidence (contract-only or malformed):
    /// they are not carried into the new file.
    pub dropped: usize,
    /// Under a trust file: what was written unsigned, and what that means, one sentence
    /// each.
    pub unsigned: Vec<String>,
}

/// What an update may replace where the project trusts signing keys.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overwrite<'a> {
    /// The project's trust file. An unsigned grant never replaces a statement (an entry
    /// or a revocation) signed by a key it lists: every reader under it would deny the
    /// grant (`unsigned`), and the signed permit would be lost without a word. An unsigned
    /// revocation still replaces anything (failing closed needs no proof), and says so.
    pub trust: Option<&'a Trust>,
    /// Replace signed statements with unsigned grants anyway (`--allow-unsigned`).
    pub allow_unsigned: bool,
}

/// Why the allowlist was not written.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The file, its lock or its temporary copy could not be read or written.
    #[error("cannot update the allowlist {path}: {source}")]
    Io {
        /// The allowlist file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// An unsigned grant would replace signed statements: nothing was written.
    #[error(
        "refused to replace signed evidence in {} with unsigned: {} signed by a key {} lists, \
         and this run has no signing key, so every reader under that trust file would deny what \
         it grants (unsigned). Set CONFORM_SIGNING_KEY to the CI's key (docs/signing.md), or pass \
         --allow-unsigned to replace {} anyway; the allowlist was not written",
        path.display(),
        pairs.join(", "),
        trust.display(),
        if pairs.len() == 1 { "it" } else { "them" }
    )]
    UnsignedOverSigned {
        /// The allowlist file.
        path: PathBuf,
        /// `suite × provider (entry)`, one per statement that would be replaced.
        pairs: Vec<String>,
        /// The trust file that lists the key.
        trust: PathBuf,
    },
}

/// Applies `changes` to the allowlist at `path` under an exclusive advisory lock.
pub fn update(path: &Path, changes: &[Change]) -> Result<Updated, UpdateError> {
    update_with(path, changes, Overwrite::default())
}

/// [`update`], refusing what `overwrite` does not allow (nothing is then written).
pub fn update_with(
    path: &Path,
    changes: &[Change],
    overwrite: Overwrite<'_>,
) -> Result<Updated, UpdateError> {
    let io = |source| UpdateError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !changes
        .iter()
        .any(|c| !matches!(c, Change::Withhold { .. }))
    {
        return Ok(Updated::default());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let lock_path = dir.join(format!(
        ".{}.lock",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("allowlist.json")
    ));
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io)?;
    let mut lock = fd_lock::RwLock::new(lock_file);
    let _guard = lock.write().map_err(io)?;
    // Every writer holds the lock while its temporary file exists, so any temporary file
    // seen now was left by a writer that died mid-write.
    remove_stale_temporaries(path, &dir);

    let mut updated = Updated::default();
    let mut list = match std::fs::read(path) {
        Ok(bytes) => match Allowlist::parse(&bytes) {
            Ok(mut list) => {
                let before = list.entries.len();
                list.entries.retain(|e| !e.contract_only);
                updated.dropped = list.malformed + before - list.entries.len();
                list
            }
            Err(denial) => {
                updated.replaced_unreadable = Some(denial.to_string());
                Allowlist::default()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Allowlist::default(),
        Err(e) => return Err(io(e)),
    };
    if let Some(trust) = overwrite.trust {
        updated.unsigned = guard(path, &list, changes, trust, overwrite.allow_unsigned)?;
    }
    for change in changes {
        match change {
            Change::Grant(entry) => {
                let key = (entry.suite.clone(), entry.provider.clone());
                list.entries
                    .retain(|e| (&e.suite, &e.provider) != (&key.0, &key.1));
                list.revocations
                    .retain(|r| (&r.suite, &r.provider) != (&key.0, &key.1));
                list.entries.push((**entry).clone());
                updated.granted.push(key);
            }
            Change::Revoke(revocation) => {
                let key = (revocation.suite.clone(), revocation.provider.clone());
                list.entries
                    .retain(|e| (&e.suite, &e.provider) != (&key.0, &key.1));
                list.revocations
                    .retain(|r| (&r.suite, &r.provider) != (&key.0, &key.1));
                list.revocations.push(revocation.clone());
                updated.revoked.push(key);
            }
            Change::Withhold { .. } => {}
        }
    }
    list.entries
        .sort_by(|a, b| (&a.suite, &a.provider).cmp(&(&b.suite, &b.provider)));
    list.revocations
        .sort_by(|a, b| (&a.suite, &a.provider).cmp(&(&b.suite, &b.provider)));
    let mut bytes = serde_json::to_vec_pretty(&list).map_err(|e| io(e.into()))?;
    bytes.push(b'\n');
    write_atomically(path, &dir, &bytes).map_err(io)?;
    Ok(updated)
}

/// Under `trust`: refuses unsigned grants that would replace signed statements of `list`
/// (unless `allow_unsigned`), and says what each unsigned change written means.
fn guard(
    path: &Path,
    list: &Allowlist,
    changes: &[Change],
    trust: &Trust,
    allow_unsigned: bool,
) -> Result<Vec<String>, UpdateError> {
    let signed = |suite: &str, provider: &str| -> Option<&'static str> {
        let entry = (list.entries.iter())
            .any(|e| (e.suite == suite && e.provider == provider) && verify(e, trust).is_ok());
        let revocation = (list.revocations.iter())
            .any(|r| (r.suite == suite && r.provider == provider) && verify(r, trust).is_ok());
        (entry.then_some("entry")).or(revocation.then_some("revocation"))
    };
    let (mut refused, mut said) = (Vec::new(), Vec::new());
    for change in changes {
        match change {
            Change::Grant(e) if e.attestation.is_none() => {
                if let Some(kind) = signed(&e.suite, &e.provider) {
                    refused.push(format!("{} × {} ({kind})", e.suite, e.provider));
                }
                said.push(format!(
                    "{} × {} was granted unsigned: every reader under {} denies it (unsigned); \
                     set CONFORM_SIGNING_KEY to sign what a run grants (docs/signing.md)",
                    e.suite,
                    e.provider,
                    trust.path.display()
                ));
            }
            Change::Revoke(r) if r.attestation.is_none() => said.push(format!(
                "{} × {} was revoked unsigned{}: it denies, but no reader that keeps state \
                 remembers it, so an older signed allowlist put back would permit until it \
                 expires; set CONFORM_SIGNING_KEY (docs/signing.md)",
                r.suite,
                r.provider,
                match signed(&r.suite, &r.provider) {
                    Some(kind) => format!(", replacing a signed {kind}"),
                    None => String::new(),
                }
            )),
            _ => {}
        }
    }
    if !refused.is_empty() && !allow_unsigned {
        return Err(UpdateError::UnsignedOverSigned {
            path: path.to_path_buf(),
            pairs: refused,
            trust: trust.path.clone(),
        });
    }
    Ok(said)
}

fn temporary_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("allowlist.json");
    format!(".{name}.")
}

fn remove_stale_temporaries(path: &Path, dir: &Path) {
    let prefix = temporary_prefix(path);
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for item in listing.flatten() {
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            let _ = std::fs::remove_file(item.path());
        }
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over `path`,
/// and syncs the directory so the rename itself survives a crash. Callers outside
/// [`update`] must not share the file with a concurrent `update`, whose clean-up of
/// stale temporary files assumes it holds the lock.
pub fn write_atomically(path: &Path, dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(
        "{}{}.tmp",
        temporary_prefix(path),
        std::process::id()
    ));
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Why [`regrant`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum RegrantError {
    /// The entry file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The entry file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The entry file does not hold an entry.
    #[error("{} is not an allowlist entry: {source}", path.display())]
    Entry {
        /// The entry file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// The allowlist could not be updated.
    #[error(transparent)]
    Update(#[from] UpdateError),
    /// The caller could not say a generation was written.
    #[error("{0}")]
    Said(#[source] std::io::Error),
}

/// Grants the entry in the file `entry` again and again in the allowlist at `path`, as
/// run `gen-N` for each N of `generations`, telling `written` each N once that version is
/// in place: the crash tests hold the file to "this generation or the next".
pub fn regrant(
    path: &Path,
    entry: &Path,
    generations: std::ops::Range<u64>,
    mut written: impl FnMut(u64) -> std::io::Result<()>,
) -> Result<(), RegrantError> {
    let text = std::fs::read(entry).map_err(|source| RegrantError::Read {
        path: entry.to_path_buf(),
        source,
    })?;
    let mut granted: Entry =
        serde_json::from_slice(&text).map_err(|source| RegrantError::Entry {
            path: entry.to_path_buf(),
            source,
        })?;
    for n in generations {
        granted.evidence.run_id = format!("gen-{n}");
        update(path, &[Change::Grant(Box::new(granted.clone()))])?;
        written(n).map_err(RegrantError::Said)?;
    }
    Ok(())
}
