//! Writes an imported suite so that nothing half-written is ever left behind: every file
//! goes into a temporary folder beside the target (same file system), and the folder is
//! renamed into place at the end. An import that fails, or is dropped, removes it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ImportError;

/// A suite being written.
#[derive(Debug)]
pub struct SuiteWriter {
    target: PathBuf,
    tmp: PathBuf,
    force: bool,
    done: bool,
}

impl SuiteWriter {
    /// Starts `fixtures/NAME`; an existing suite is an error unless `force`.
    pub fn create(fixtures: &Path, name: &str, force: bool) -> Result<SuiteWriter, ImportError> {
        if !valid_name(name) {
            return Err(ImportError::SuiteName(name.to_string()));
        }
        let target = fixtures.join(name);
        if target.exists() && !force {
            return Err(ImportError::Exists { path: target });
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let tmp = fixtures.join(format!(".{name}.import-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(tmp.join("cases")).map_err(|source| ImportError::Write {
            path: tmp.clone(),
            source,
        })?;
        Ok(SuiteWriter {
            target,
            tmp,
            force,
            done: false,
        })
    }

    /// The folder the suite will have.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary folder the suite is written in, renamed into place by
    /// [`SuiteWriter::finish`] and removed when the import fails.
    pub fn staging(&self) -> &Path {
        &self.tmp
    }

    /// Writes `cases/ID.json`.
    pub fn case(&self, id: &str, case: &Value) -> Result<(), ImportError> {
        self.json(&format!("cases/{id}.json"), case)
    }

    /// Reads back `cases/ID.json`, written earlier by this writer.
    pub fn read_case(&self, id: &str) -> Result<Value, ImportError> {
        let path = self.tmp.join(format!("cases/{id}.json"));
        let bytes = std::fs::read(&path).map_err(|source| ImportError::Read {
            path: path.clone(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|e| ImportError::Format {
            path,
            message: e.to_string(),
        })
    }

    /// Writes a JSON file of the suite, pretty-printed.
    pub fn json(&self, rel: &str, value: &Value) -> Result<(), ImportError> {
        let path = self.tmp.join(rel);
        let write = || -> std::io::Result<()> {
            let mut out = BufWriter::new(File::create(&path)?);
            serde_json::to_writer_pretty(&mut out, value)?;
            out.write_all(b"\n")?;
            out.flush()
        };
        write().map_err(|source| ImportError::Write {
            path: self.target.join(rel),
            source,
        })
    }

    /// Writes a text file of the suite.
    pub fn text(&self, rel: &str, text: &str) -> Result<(), ImportError> {
        std::fs::write(self.tmp.join(rel), text).map_err(|source| ImportError::Write {
            path: self.target.join(rel),
            source,
        })
    }

    /// Moves the suite into place: a rename of the whole folder (an existing suite, with
    /// `force`, is moved aside first and removed after).
    pub fn finish(mut self) -> Result<PathBuf, ImportError> {
        let fail = |path: &Path, source| ImportError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut aside = None;
        if self.target.exists() {
            if !self.force {
                return Err(ImportError::Exists {
                    path: self.target.clone(),
                });
            }
            let old = PathBuf::from(format!("{}-replaced", self.tmp.display()));
            std::fs::rename(&self.target, &old).map_err(|e| fail(&self.target, e))?;
            aside = Some(old);
        }
        if let Err(e) = std::fs::rename(&self.tmp, &self.target) {
            if let Some(old) = &aside {
                let _ = std::fs::rename(old, &self.target);
            }
            return Err(fail(&self.target, e));
        }
        self.done = true;
        if let Some(old) = aside {
            let _ = std::fs::remove_dir_all(old);
        }
        if let Some(parent) = self.target.parent()
            && let Ok(dir) = File::open(parent)
        {
            let _ = dir.sync_all();
        }
        Ok(self.target.clone())
    }
}

impl Drop for SuiteWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// A suite name is a folder name: letters, digits, `-`, `_` and `.`, not starting with a dot.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_dropped_writer_leaves_nothing_and_a_finished_one_replaces_only_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let w = SuiteWriter::create(dir.path(), "s", false).unwrap();
        w.case("1", &json!({})).unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        let w = SuiteWriter::create(dir.path(), "s", false).unwrap();
        w.case("1", &json!({"a": 1})).unwrap();
        let at = w.finish().unwrap();
        assert!(at.join("cases/1.json").exists());
        assert!(matches!(
            SuiteWriter::create(dir.path(), "s", false),
            Err(ImportError::Exists { .. })
        ));
        let w = SuiteWriter::create(dir.path(), "s", true).unwrap();
        w.case("2", &json!({})).unwrap();
        w.finish().unwrap();
        assert!(!at.join("cases/1.json").exists());
        assert!(at.join("cases/2.json").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(matches!(
            SuiteWriter::create(dir.path(), "../x", false),
            Err(ImportError::SuiteName(_))
        ));
    }
}
