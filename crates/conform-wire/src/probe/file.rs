//! `probes.json` (`conform.probes/v1`), beside the allowlist: the last conclusive probe
//! of every keyword on every provider, for `conform check` to warn from offline. Written
//! like the allowlist: under an advisory lock, through a temporary file, fsync and rename.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Answers, Outcome, Support};
use conform_config::ProviderConfig;

/// The value of the file's `format` field.
pub const FORMAT: &str = "conform.probes/v1";

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probes {
    /// Always [`FORMAT`]: a file of another format is neither read nor overwritten.
    pub format: String,
    /// By provider name.
    pub providers: BTreeMap<String, ProviderProbes>,
}

impl Default for Probes {
    fn default() -> Self {
        Probes {
            format: FORMAT.to_string(),
            providers: BTreeMap::new(),
        }
    }
}

/// What is known of one provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderProbes {
    /// The model probed: results for another model say nothing about this one.
    pub model: String,
    /// The configuration probed (never a secret): a later change makes the results stale.
    pub provider_digest: String,
    /// Whether the results came from a simulated provider, not a real one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
    /// By keyword.
    pub keywords: BTreeMap<String, KeywordProbe>,
}

/// The last conclusive probe of one keyword.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeywordProbe {
    /// What the provider does with the keyword.
    pub support: Support,
    /// Why, in words: the error of a rejection, or what decided.
    pub detail: String,
    /// Answers to the pushed prompt.
    pub pushed: Answers,
    /// Answers to the plain prompt.
    pub plain: Answers,
    /// RFC 3339, UTC.
    pub probed_at: String,
    /// The probe run that concluded it.
    pub run_id: String,
    /// The probe's report.
    pub report: String,
}

/// Why the file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it failed with.
        source: std::io::Error,
    },
    /// The file is not JSON of this format.
    #[error("{path} is not a {FORMAT} file: {why}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What writing it failed with.
        source: std::io::Error,
    },
}

/// Where the probe file of the allowlist at `allowlist` lives: `probes.json` beside it.
pub fn beside(allowlist: &Path) -> PathBuf {
    allowlist.with_file_name("probes.json")
}

/// Reads the file; a missing one is empty (nothing probed yet).
pub fn load(path: &Path) -> Result<Probes, FileError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Probes::default()),
        Err(source) => {
            return Err(FileError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let probes: Probes = serde_json::from_slice(&bytes).map_err(|e| FileError::Format {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    if probes.format != FORMAT {
        return Err(FileError::Format {
            path: path.to_path_buf(),
            why: format!("its format is `{}`", probes.format),
        });
    }
    Ok(probes)
}

/// One probe run's conclusive outcomes for `provider`, to merge into the file.
#[derive(Debug, Clone)]
pub struct Update<'a> {
    /// The provider as its file says; its digest marks the results stale once it changes.
    pub provider: &'a ProviderConfig,
    /// The run's outcomes; inconclusive ones are not merged.
    pub outcomes: &'a [Outcome],
    /// When, RFC 3339 UTC.
    pub probed_at: String,
    /// The probe run.
    pub run_id: &'a str,
    /// The probe's report, for a reader of the file to find why.
    pub report: String,
}

/// Merges `update` into the file at `path`: each conclusive outcome replaces that
/// keyword's result; inconclusive ones leave it as it was. A file of another format is
/// not overwritten.
pub fn update(path: &Path, update: &Update<'_>) -> Result<Probes, FileError> {
    let write_error = |source| FileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(write_error)?;
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".probes.json.lock"))
        .map_err(write_error)?;
    let mut lock = fd_lock::RwLock::new(lock_file);
    let _guard = lock.write().map_err(write_error)?;

    let mut probes = load(path)?;
    let config = update.provider;
    let digest = config.digest();
    let entry = probes
        .providers
        .entry(config.name.clone())
        .or_insert_with(|| ProviderProbes {
            model: config.model.clone(),
            provider_digest: digest.clone(),
            simulated: config.is_simulated(),
            keywords: BTreeMap::new(),
        });
    // Results made with another configuration say nothing about this one.
    if entry.provider_digest != digest {
        entry.keywords.clear();
    }
    entry.model = config.model.clone();
    entry.provider_digest = digest;
    entry.simulated = config.is_simulated();
    for outcome in update
        .outcomes
        .iter()
        .filter(|o| o.support != Support::Inconclusive)
    {
        entry.keywords.insert(
            outcome.keyword.clone(),
            KeywordProbe {
                support: outcome.support,
                detail: outcome.detail.clone(),
                pushed: outcome.pushed,
                plain: outcome.plain,
                probed_at: update.probed_at.clone(),
                run_id: update.run_id.to_string(),
                report: update.report.clone(),
            },
        );
    }
    let text = serde_json::to_string_pretty(&probes).map_err(|e| FileError::Format {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let temporary = dir.join(format!(".probes.json.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(write_error(source));
    }
    Ok(probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(model: &str) -> ProviderConfig {
        ProviderConfig::parse(
            Path::new("providers/p.toml"),
            &format!("kind = \"openai\"\nmodel = \"{model}\"\n"),
        )
        .unwrap()
    }

    fn outcome(keyword: &str, support: Support) -> Outcome {
        Outcome {
            keyword: keyword.into(),
            support,
            pushed: Answers::default(),
            plain: Answers::default(),
            detail: String::new(),
        }
    }

    #[test]
    fn updates_merge_by_keyword_and_a_new_configuration_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = beside(&dir.path().join("allowlist.json"));
        assert_eq!(load(&path).unwrap(), Probes::default());
        let p = provider("m1");
        let first = [
            outcome("minItems", Support::Ignores),
            outcome("pattern", Support::Enforces),
        ];
        let at = |outcomes| Update {
            provider: &p,
            outcomes,
            probed_at: "2026-01-01T00:00:00Z".into(),
            run_id: "r1",
            report: "reports/r1/probe.json".into(),
        };
        update(&path, &at(&first)).unwrap();
        let second = [
            outcome("minItems", Support::Enforces),
            outcome("pattern", Support::Inconclusive),
        ];
        let probes = update(&path, &at(&second)).unwrap();
        let keywords = &probes.providers["p"].keywords;
        assert_eq!(keywords["minItems"].support, Support::Enforces);
        // An inconclusive probe keeps the last conclusive one.
        assert_eq!(keywords["pattern"].support, Support::Enforces);
        assert_eq!(load(&path).unwrap(), probes);

        let changed = provider("m2");
        let probes = update(
            &path,
            &Update {
                provider: &changed,
                ..at(&[outcome("enum", Support::Rejects)])
            },
        )
        .unwrap();
        let keys: Vec<&String> = probes.providers["p"].keywords.keys().collect();
        assert_eq!(keys, ["enum"]);
    }

    #[test]
    fn another_format_is_an_error_not_an_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probes.json");
        std::fs::write(&path, r#"{"format": "other/v9", "providers": {}}"#).unwrap();
        assert!(matches!(load(&path), Err(FileError::Format { .. })));
        let p = provider("m");
        let err = update(
            &path,
            &Update {
                provider: &p,
                outcomes: &[],
                probed_at: String::new(),
                run_id: "r",
                report: String::new(),
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("other/v9"), "{err}");
        assert!(std::fs::read_to_string(&path).unwrap().contains("other/v9"));
    }
}
