//! `conform tape`: what is done with the tapes `conform run --record` writes, beyond
//! replaying them. `to-reference` turns the primary's recorded answers into the
//! `reference` blocks of a suite's cases ([`crate::run::reference_tape`] does the
//! conversion); this names the provider, loads the project and says what changed.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::run::reference_tape::{self, Converted, ToReferenceError};
use conform_config::{Diagnostics, Paths, Selection, Workspace};

/// Why a tape could not become references.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    #[error("cannot tell the provider from {}: name it with --provider", tape.display())]
    NoProvider { tape: PathBuf },
    /// The project's files: every problem, to print as a configuration error.
    #[error("{0}")]
    Config(Diagnostics),
    #[error("no suite {suite} or provider {provider}")]
    Missing { suite: String, provider: String },
    #[error(transparent)]
    Convert(#[from] ToReferenceError),
}

/// The cases of a suite that now carry the recorded answers of a provider.
#[derive(Debug, Clone)]
pub struct ToReference {
    pub suite: String,
    pub provider: String,
    pub model: String,
    pub converted: Converted,
}

impl ToReference {
    /// Writes the answers `tape` recorded for `provider` (by default the tape's file
    /// name: `openai.jsonl` is `providers/openai.toml`) into `suite`'s cases.
    pub fn convert(
        paths: &Paths,
        tape: &Path,
        suite: &str,
        provider: Option<&str>,
    ) -> Result<ToReference, TapeError> {
        let provider = match provider {
            Some(p) => p.to_string(),
            None => (tape.file_stem().and_then(|s| s.to_str()))
                .map(str::to_string)
                .ok_or_else(|| TapeError::NoProvider {
                    tape: tape.to_path_buf(),
                })?,
        };
        let selection = Selection {
            providers: vec![provider.clone()],
            suites: vec![suite.to_string()],
        };
        let workspace = Workspace::load(paths, &selection).map_err(TapeError::Config)?;
        let (Some(suite), Some(config)) = (workspace.suites.first(), workspace.providers.first())
        else {
            return Err(TapeError::Missing {
                suite: suite.to_string(),
                provider,
            });
        };
        let converted = reference_tape::tape_to_reference(tape, suite, config)?;
        Ok(ToReference {
            suite: suite.name.clone(),
            provider: config.name.clone(),
            model: config.model.clone(),
            converted,
        })
    }

    /// Every case of the suite got a reference.
    pub fn complete(&self) -> bool {
        self.converted.missing.is_empty()
    }
}

impl fmt::Display for ToReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let done = &self.converted;
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        writeln!(
            f,
            "{}: {} case{} now carry {} recorded answer{} of {} ({})",
            self.suite,
            done.cases,
            plural(done.cases),
            done.answers,
            plural(done.answers),
            self.provider,
            self.model
        )?;
        if !done.missing.is_empty() {
            writeln!(
                f,
                "not on the tape (left as they were): {}",
                done.missing.join(", ")
            )?;
        }
        Ok(())
    }
}
