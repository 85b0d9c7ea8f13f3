//! `conform history`: each (suite, provider)'s runs as the history holds them, with the
//! flags [`super::drift`] raises over all of them; serialized for `--format json`, and
//! the text a person reads by `Display`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Line;
use super::drift::{self, Flag, Policy, percent};

/// Which pairs to list.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub suite: Option<String>,
    pub provider: Option<String>,
}

impl Filter {
    pub fn keeps(&self, line: &Line) -> bool {
        self.suite.as_deref().is_none_or(|s| s == line.suite)
            && self.provider.as_deref().is_none_or(|p| p == line.provider)
    }
}

/// The history holds no run the filter keeps.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no runs in {}{}: every conclusive `conform run` appends to it", path.display(), scope(filter))]
pub struct NoRuns {
    pub path: PathBuf,
    pub filter: Filter,
}

fn scope(filter: &Filter) -> String {
    match (&filter.suite, &filter.provider) {
        (None, None) => String::new(),
        (s, p) => format!(
            " for{}{}",
            s.as_ref()
                .map(|s| format!(" suite `{s}`"))
                .unwrap_or_default(),
            p.as_ref()
                .map(|p| format!(" provider `{p}`"))
                .unwrap_or_default()
        ),
    }
}

/// Every pair's runs and flags.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub history: PathBuf,
    pub pairs: Vec<PairRuns>,
    /// How many of each pair's latest runs the text lists.
    #[serde(skip)]
    pub last: usize,
}

/// One (suite, provider)'s runs, oldest first, and what they flag.
#[derive(Debug, Clone, Serialize)]
pub struct PairRuns {
    pub suite: String,
    pub provider: String,
    pub runs: Vec<Line>,
    pub flags: Vec<Flag>,
}

impl Listing {
    /// Groups `lines` (read from `path`) by pair and flags each pair's slips and
    /// served-model changes.
    pub fn new(
        path: &Path,
        lines: Vec<Line>,
        filter: &Filter,
        last: usize,
    ) -> Result<Listing, NoRuns> {
        if lines.is_empty() {
            return Err(NoRuns {
                path: path.to_path_buf(),
                filter: filter.clone(),
            });
        }
        let mut pairs: BTreeMap<(String, String), Vec<Line>> = BTreeMap::new();
        for line in lines {
            (pairs
                .entry((line.suite.clone(), line.provider.clone()))
                .or_default())
            .push(line);
        }
        let policy = Policy::default();
        let pairs = (pairs.into_iter())
            .map(|((suite, provider), runs)| PairRuns {
                flags: drift::flags(&runs, &policy),
                suite,
                provider,
                runs,
            })
            .collect();
        Ok(Listing {
            history: path.to_path_buf(),
            pairs,
            last,
        })
    }

    /// A slip or a served-model change is flagged.
    pub fn warned(&self) -> bool {
        (self.pairs.iter()).any(|p| p.flags.iter().any(Flag::is_warning))
    }
}

impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pair in &self.pairs {
            let runs = &pair.runs;
            writeln!(
                f,
                "{} × {} ({} runs)",
                pair.suite,
                pair.provider,
                runs.len()
            )?;
            let shown = runs.len().saturating_sub(self.last);
            if shown > 0 {
                writeln!(f, "  … {shown} earlier runs")?;
            }
            for run in &runs[shown..] {
                writeln!(
                    f,
                    "  {}  {}  {:>13}  {:>6}  {:>9}  served {}",
                    run.run_id,
                    at_second(&run.at),
                    run.verdict.as_str(),
                    percent(run.passed, run.ran()),
                    format!("{}/{}", run.passed, run.planned),
                    if run.served_models.is_empty() {
                        "?".to_string()
                    } else {
                        run.served_models.join(", ")
                    }
                )?;
            }
            for flag in &pair.flags {
                writeln!(f, "  {flag}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn at_second(rfc3339: &str) -> String {
    rfc3339.get(..19).unwrap_or(rfc3339).replace('T', " ")
}
