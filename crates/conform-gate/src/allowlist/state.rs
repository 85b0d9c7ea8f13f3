//! `--state FILE`: what a reader has seen of the allowlist, kept between commands, so that
//! an older signed allowlist put back in place of a newer one is denied (`superseded`).
//!
//! The file holds, per (suite, provider), when the newest statement about it (a grant's
//! `generated_at`, a revocation's `at`) that a reader read was made; under a trust file
//! only statements signed by a listed key count ([`conform_allowlist::seen`]). Every
//! reader that keeps it reads it before deciding and writes it after, under a lock and by
//! an atomic rename, as the allowlist writer does. A missing file is an empty state (the
//! first run in CI); a file that cannot be read is an error naming it, never an empty
//! state, since forgetting is exactly what a rollback needs.
//!
//! ```json
//! {"format": "conform.state/v1", "pairs": [
//!   {"suite": "ticket-triage", "provider": "mistral", "newest_statement_at": "2026-03-01T09:12:44.5Z"}]}
//! ```

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Allowlist;
use conform_allowlist::Seen;
use conform_allowlist::sign::Trust;

/// The value of the state file's `format` field.
pub const FORMAT: &str = "conform.state/v1";

/// Why the state could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A usage error: the file is there and says nothing usable. Its cause is in the
    /// sentence, not a source, so that it is never taken for a full disk.
    #[error(
        "cannot read the state file {}: {why}; restore it from where CI keeps it, or delete it \
         to start over (an older allowlist put back is then recognised only from the next read on)",
        path.display()
    )]
    Unreadable {
        /// The state file.
        path: PathBuf,
        /// What was wrong with it.
        why: String,
    },
    /// The state file could not be written.
    #[error("cannot write the state file {}: {source}", path.display())]
    Write {
        /// The state file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: String,
    pairs: Vec<Pair>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pair {
    suite: String,
    provider: String,
    /// RFC 3339, UTC.
    newest_statement_at: String,
}

/// A state file as read, to be written back once the reader is done.
#[derive(Debug)]
pub struct State {
    path: PathBuf,
    seen: Seen,
    /// As read, to write only what changed (and a file that was missing).
    read: Option<Seen>,
}

impl State {
    /// The state at `path`; an empty one when there is no file.
    pub fn load(path: &Path) -> Result<State, StateError> {
        let unreadable = |why: String| StateError::Unreadable {
            path: path.to_path_buf(),
            why,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(State {
                    path: path.to_path_buf(),
                    seen: Seen::default(),
                    read: None,
                });
            }
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let file: File = serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
        if file.format != FORMAT {
            return Err(unreadable(format!(
                "format `{}`, expected `{FORMAT}`",
                file.format
            )));
        }
        let mut seen = Seen::default();
        for (i, pair) in file.pairs.iter().enumerate() {
            let at = OffsetDateTime::parse(&pair.newest_statement_at, &Rfc3339).map_err(|e| {
                unreadable(format!(
                    "pairs[{i}].newest_statement_at `{}` is not an RFC 3339 time: {e}",
                    pair.newest_statement_at
                ))
            })?;
            seen.record(&pair.suite, &pair.provider, at);
        }
        Ok(State {
            path: path.to_path_buf(),
            read: Some(seen.clone()),
            seen,
        })
    }

    /// The statements this reader has seen, pair by pair.
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// Remembers what `list` states (under `trust`, only what a listed key signed).
    pub fn observe(&mut self, list: &Allowlist, trust: Option<&Trust>, now: OffsetDateTime) {
        self.seen.observe(list, trust, now);
    }

    /// Writes the state back, atomically, when it changed or there was no file.
    pub fn save(&self) -> Result<(), StateError> {
        if self.read.as_ref() == Some(&self.seen) {
            return Ok(());
        }
        let pairs = (self.seen.iter())
            .map(|(suite, provider, at)| Pair {
                suite: suite.to_string(),
                provider: provider.to_string(),
                newest_statement_at: at.format(&Rfc3339).unwrap_or_default(),
            })
            .collect();
        let file = File {
            format: FORMAT.to_string(),
            pairs,
        };
        let mut bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
        bytes.push(b'\n');
        let (path, dir) = (&self.path, folder(&self.path));
        std::fs::create_dir_all(&dir)
            .and_then(|()| super::writer::write_atomically(path, &dir, &bytes))
            .map_err(|source| StateError::Write {
                path: path.clone(),
                source,
            })
    }
}

fn folder(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Runs `read` with what the reader has seen: without a state file, with nothing (the
/// reader then cannot tell an older allowlist put back from the newest one); with one,
/// with the state read from it and advanced by the allowlist at `allowlist` (under the
/// trust file at `trust`, when there is one), written back afterwards. The file is locked
/// meanwhile, so two readers sharing it lose neither's advance.
pub fn keeping<T>(
    state: Option<&Path>,
    allowlist: &Path,
    trust: Option<&Path>,
    now: OffsetDateTime,
    read: impl FnOnce(Option<&Seen>) -> T,
) -> Result<T, StateError> {
    let Some(path) = state else {
        return Ok(read(None));
    };
    let dir = folder(path);
    let locked = |source| StateError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(locked)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!(".{name}.lock")))
        .map_err(locked)?;
    let mut lock = fd_lock::RwLock::new(lock_file);
    let _guard = lock.write().map_err(locked)?;
    let mut kept = State::load(path)?;
    // A file or trust file that does not load advances nothing; the decision denies.
    let trust = trust.map_or(Ok(None), Trust::load);
    if let (Ok(list), Ok(trust)) = (Allowlist::load(allowlist), trust) {
        kept.observe(&list, trust.as_ref(), now);
    }
    let answer = read(Some(kept.seen()));
    kept.save()?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn a_state_written_is_the_state_read_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ci/state.json");
        let mut state = State::load(&path).unwrap();
        assert!(state.seen().is_empty());
        state
            .seen
            .record("s", "p", datetime!(2026-03-01 09:12:44.123456789 UTC));
        state.save().unwrap();
        let read = State::load(&path).unwrap();
        assert_eq!(read.seen(), state.seen());

        for (bytes, says) in [
            (&b"{\"format\": \"conform.state/v1\", \"pai"[..], "EOF"),
            (
                br#"{"format": "conform.state/v2", "pairs": []}"#,
                "`conform.state/v2`",
            ),
            (
                br#"{"format": "conform.state/v1", "pairs": [{"suite": "s", "provider": "p", "newest_statement_at": "soon"}]}"#,
                "pairs[0].newest_statement_at `soon`",
            ),
        ] {
            std::fs::write(&path, bytes).unwrap();
            let err = State::load(&path).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, StateError::Unreadable { .. }), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(says), "{text}");
            // Never a cause that reads as an I/O failure: a usage error, exit 2.
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
            while let Some(c) = cause {
                assert!(!c.is::<std::io::Error>(), "{text}");
                cause = c.source();
            }
        }
    }
}
