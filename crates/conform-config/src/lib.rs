//! Configuration and fixtures in: `providers/*.toml`, `fixtures/SUITE/` and
//! `conform.toml`, validated with file, line and field, and the digests and identities
//! evidence is pinned by.
//!
//! Loading never stops at the first problem: every file is read and every problem is
//! returned as a [`Diagnostic`] naming the file, the line and the field.

#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod case_reader;
pub mod cloud;
pub mod conversation;
pub mod diagnostic;
pub mod digest;
pub mod expect;
mod held_cases;
pub mod identity;
pub mod json_position;
pub mod kind;
pub mod pricing;
pub mod project;
pub mod provider;
mod quick_template;
pub mod reach;
pub mod reference;
pub mod schema_file;
pub mod secret;
pub mod simulation;
pub mod slo;
pub mod suite;

use std::path::{Path, PathBuf};

pub use conversation::{Conversation, Message, Role, Tool, ToolChoice};
pub use diagnostic::{Diagnostic, Diagnostics};
pub use expect::{Answer, Expect, ExpectedCall, ExpectedCalls, ToolNames};
pub use held_cases::HeldCases;
pub use identity::{ProviderIdentity, SuiteIdentity};
pub use kind::Kind;
pub use project::Settings;
pub use provider::{
    KeyError, Limits, ProviderConfig, StructuredOutput, TokenizerConfig, TokenizerKind,
};
pub use reference::{DifferentialSpec, RecordedAnswer, RecordedCall, Reference, ReferenceKind};
pub use slo::Slo;
pub use suite::{
    Case, CaseRef, Prompt, Rendered, RuleSpec, StabilitySpec, Suite, ToolRuleSpec, ToolThresholds,
};

/// Where the configuration lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `providers/`: one TOML file per provider.
    pub providers: PathBuf,
    /// `fixtures/`: one folder per suite.
    pub fixtures: PathBuf,
    /// `conform.toml`: the project's settings ([`Settings`]); optional.
    pub settings: PathBuf,
    /// `trust.toml`: the keys allowed to sign evidence; optional (docs/signing.md).
    pub trust: PathBuf,
}

impl Paths {
    /// The usual layout of a project at `root`.
    pub fn under(root: &Path) -> Paths {
        Paths {
            providers: root.join("providers"),
            fixtures: root.join("fixtures"),
            settings: root.join(project::FILE),
            trust: root.join("trust.toml"),
        }
    }
}

/// Which providers and suites to load; empty means all of them.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Provider names, as their files are named.
    pub providers: Vec<String>,
    /// Suite names, as their folders are named.
    pub suites: Vec<String>,
}

/// The loaded, validated configuration of one run.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The selected providers, each validated.
    pub providers: Vec<ProviderConfig>,
    /// The selected suites, each validated.
    pub suites: Vec<Suite>,
    /// `conform.toml`, or the defaults when there is none.
    pub settings: Settings,
}

impl Workspace {
    /// Loads the selected providers and suites. A name that matches no file is a problem
    /// that lists the names that exist.
    pub fn load(paths: &Paths, selection: &Selection) -> Result<Workspace, Diagnostics> {
        let (workspace, problems) = Self::load_partial(paths, selection);
        if problems.is_empty() {
            Ok(workspace)
        } else {
            Err(problems)
        }
    }

    /// Loads what can be loaded and returns it with every problem found, so that
    /// `conform check` can go on checking the suites when a provider file is broken.
    pub fn load_partial(paths: &Paths, selection: &Selection) -> (Workspace, Diagnostics) {
        let mut problems = Diagnostics::default();
        let provider_files = named_entries(&paths.providers, "toml", &mut problems);
        let suite_dirs = named_entries(&paths.fixtures, "", &mut problems);

        let mut providers = Vec::new();
        for path in select(
            &provider_files,
            &selection.providers,
            "provider",
            &paths.providers,
            &mut problems,
        ) {
            match ProviderConfig::load(&path) {
                Ok(p) => providers.push(p),
                Err(d) => problems.extend(d),
            }
        }
        let mut suites = Vec::new();
        for dir in select(
            &suite_dirs,
            &selection.suites,
            "suite",
            &paths.fixtures,
            &mut problems,
        ) {
            match Suite::load(&dir) {
                Ok(s) => suites.push(s),
                Err(d) => problems.extend(d),
            }
        }
        // Nothing to test is not a pass: an empty selection is a problem, named by the
        // folder that was looked in.
        if provider_files.is_empty() && paths.providers.is_dir() {
            problems.push(Diagnostic::new(
                &paths.providers,
                "no providers: add one as providers/NAME.toml (see docs/providers.md)",
            ));
        }
        if suite_dirs.is_empty() && paths.fixtures.is_dir() {
            problems.push(Diagnostic::new(
                &paths.fixtures,
                "no suites: add one as fixtures/SUITE/ with suite.toml, schema.json and cases/",
            ));
        }
        let settings = Settings::load(&paths.settings).unwrap_or_else(|d| {
            problems.extend(d);
            Settings::default()
        });
        for suite in &mut suites {
            suite.required_failure_rate = suite::required_failure_rate(
                suite.max_undetected_failure_rate,
                settings.failure_rate_bound(),
            );
        }
        (
            Workspace {
                providers,
                suites,
                settings,
            },
            problems,
        )
    }
}

/// `(name, path)` of every `*.ext` file (or every directory, for an empty `ext`), sorted.
fn named_entries(dir: &Path, ext: &str, problems: &mut Diagnostics) -> Vec<(String, PathBuf)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            problems.push(Diagnostic::new(dir, format!("cannot list: {e}")));
            return Vec::new();
        }
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            if ext.is_empty() {
                p.is_dir()
            } else {
                p.extension().is_some_and(|x| x == ext)
            }
        })
        .filter_map(|p| Some((p.file_stem()?.to_str()?.to_string(), p)))
        .collect();
    found.sort();
    found
}

fn select(
    found: &[(String, PathBuf)],
    wanted: &[String],
    what: &str,
    dir: &Path,
    problems: &mut Diagnostics,
) -> Vec<PathBuf> {
    if wanted.is_empty() {
        return found.iter().map(|(_, p)| p.clone()).collect();
    }
    let mut picked = Vec::new();
    for name in wanted {
        match found.iter().find(|(n, _)| n == name) {
            Some((_, p)) => picked.push(p.clone()),
            None => {
                let known: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
                problems.push(Diagnostic::new(
                    dir,
                    format!("no {what} named `{name}`; known: {}", known.join(", ")),
                ));
            }
        }
    }
    picked
}
