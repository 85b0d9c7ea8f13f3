//! What the project's files say now about a suite and a provider: the digests an entry's
//! evidence must still match, and whether the provider is a simulation.

use std::path::Path;

use conform_allowlist::sign::Trust;
use conform_allowlist::{Denial, Observed, Reason, ReferenceError};
use conform_config::{Paths, ProviderConfig, ProviderIdentity, Settings, Suite, SuiteIdentity};

/// The suite and provider as the project holds them now, and the project's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Local {
    /// The digest of `suite_identity`, as an entry pins it.
    pub suite_digest: String,
    /// The suite as its files are now, to name the file that changed.
    pub suite_identity: SuiteIdentity,
    /// The repeats the suite asks for.
    pub suite_repeats: u32,
    /// The digest of `provider_identity`, as an entry pins it.
    pub provider_digest: String,
    /// The provider as its file is now, to name the field that changed.
    pub provider_identity: ProviderIdentity,
    /// The provider is a simulation: its evidence never permits a real failover.
    pub simulated: bool,
    /// `conform.toml`: the validity window and the failure rate every permit must rule
    /// out.
    pub settings: Settings,
    /// `trust.toml`: when the project has one, only entries signed by a key it lists.
    pub trust: Option<Trust>,
    /// The project's provider files, for an entry judged against a reference.
    pub providers: Providers,
}

/// The project's `providers/` folder, read when an entry names a reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Providers {
    /// Where the project's files are.
    pub paths: Paths,
}

impl conform_allowlist::References for Providers {
    fn identity(&self, name: &str) -> Result<ProviderIdentity, ReferenceError> {
        match ProviderFacts::read(&self.paths, name) {
            Ok(facts) => Ok(facts.identity),
            Err(denial) if denial.reason == Reason::UnknownProvider => {
                Err(ReferenceError::Gone(denial.detail))
            }
            Err(denial) => Err(ReferenceError::Unreadable(denial.detail)),
        }
    }
}

impl Local {
    /// Reads `fixtures/SUITE`, `providers/PROVIDER.toml` and `conform.toml` under `paths`.
    /// A name the project does not have is [`Reason::UnknownSuite`] or
    /// [`Reason::UnknownProvider`], naming the folder and the names it holds; files that
    /// do not load are [`Reason::InvalidConfig`] with every problem.
    pub fn observe(paths: &Paths, suite: &str, provider: &str) -> Result<Local, Denial> {
        let suite = SuiteFacts::read(paths, suite)?;
        let provider = ProviderFacts::read(paths, provider)?;
        let settings = Settings::load(&paths.settings).map_err(|problems| {
            Denial::new(
                Reason::InvalidConfig,
                format!("the project's settings do not load:\n{problems}"),
            )
        })?;
        let trust = Trust::load(&paths.trust).map_err(|e| {
            Denial::new(
                Reason::InvalidConfig,
                format!("the trust file does not load: {e}"),
            )
        })?;
        Ok(Local {
            suite_digest: suite.identity.digest(),
            suite_identity: suite.identity,
            suite_repeats: suite.repeats,
            provider_digest: provider.identity.digest(),
            provider_identity: provider.identity,
            simulated: provider.simulated,
            settings,
            trust,
            providers: Providers {
                paths: paths.clone(),
            },
        })
    }

    /// What to hold the evidence to: these files, and what the provider `reported`. A
    /// suite digest in `reported` overrides the suite read here (`conform gate
    /// --suite-digest`).
    pub fn observed<'a>(&'a self, reported: Observed<'a>) -> Observed<'a> {
        let suite_given = reported.suite_digest.is_some();
        Observed {
            suite_digest: reported.suite_digest.or(Some(&self.suite_digest)),
            suite_identity: (!suite_given).then_some(&self.suite_identity),
            suite_repeats: Some(self.suite_repeats),
            provider_digest: Some(&self.provider_digest),
            provider_identity: Some(&self.provider_identity),
            simulated: self.simulated,
            trust: self.trust.as_ref(),
            references: Some(&self.providers),
            ..reported
        }
    }
}

/// What `fixtures/SUITE` says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteFacts {
    /// The suite as its files are now.
    pub identity: SuiteIdentity,
    /// The repeats the suite asks for.
    pub repeats: u32,
}

impl SuiteFacts {
    /// Reads `fixtures/SUITE` under `paths`: [`Reason::UnknownSuite`] when there is no
    /// such suite, [`Reason::InvalidConfig`] when it does not load.
    pub fn read(paths: &Paths, suite: &str) -> Result<SuiteFacts, Denial> {
        if let Some(unknown) = unknown_suite(paths, suite) {
            return Err(unknown);
        }
        let loaded = Suite::load(&paths.fixtures.join(suite)).map_err(|problems| {
            Denial::new(
                Reason::InvalidConfig,
                format!("the suite `{suite}` does not load:\n{problems}"),
            )
        })?;
        Ok(SuiteFacts {
            identity: loaded.identity().clone(),
            repeats: loaded.repeats,
        })
    }
}

/// What `providers/PROVIDER.toml` says now.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderFacts {
    /// The fields that shape what is sent and how answers are read.
    pub identity: ProviderIdentity,
    /// `kind = "sim"`.
    pub simulated: bool,
}

impl ProviderFacts {
    /// Reads `providers/PROVIDER.toml` under `paths`: [`Reason::UnknownProvider`] when
    /// there is no such file, [`Reason::InvalidConfig`] when it does not load.
    pub fn read(paths: &Paths, provider: &str) -> Result<ProviderFacts, Denial> {
        let file = paths.providers.join(format!("{provider}.toml"));
        if let Some(unknown) = unknown_provider(paths, provider) {
            return Err(unknown);
        }
        let config = ProviderConfig::load(&file).map_err(|problems| {
            Denial::new(
                Reason::InvalidConfig,
                format!("the provider `{provider}` does not load:\n{problems}"),
            )
        })?;
        Ok(ProviderFacts {
            identity: config.identity(),
            simulated: config.is_simulated(),
        })
    }

    /// The digest an entry's `provider_digest` must equal.
    pub fn digest(&self) -> String {
        self.identity.digest()
    }
}

/// The digest of `fixtures/SUITE` as it is now.
pub fn suite_digest(paths: &Paths, suite: &str) -> Result<String, Denial> {
    SuiteFacts::read(paths, suite).map(|s| s.identity.digest())
}

/// The suite folders of `fixtures/` (those with a `suite.toml`), sorted.
pub fn suite_names(fixtures: &Path) -> Vec<String> {
    names(fixtures, |p| p.join("suite.toml").is_file())
}

/// The provider files of `providers/` (`*.toml`), by stem, sorted.
pub fn provider_names(providers: &Path) -> Vec<String> {
    names(providers, |p| {
        p.extension().is_some_and(|x| x == "toml") && p.is_file()
    })
}

/// A plain file or folder name: never a path that leaves its folder.
fn is_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}

/// [`Reason::UnknownSuite`] when the project has no suite `suite`, naming the ones it has.
pub fn unknown_suite(paths: &Paths, suite: &str) -> Option<Denial> {
    let present = is_name(suite) && paths.fixtures.join(suite).join("suite.toml").is_file();
    (!present).then(|| {
        Denial::new(
            Reason::UnknownSuite,
            format!(
                "no suite named `{suite}` in {}; known: {}",
                paths.fixtures.display(),
                known(&suite_names(&paths.fixtures))
            ),
        )
    })
}

/// [`Reason::UnknownProvider`] when the project has no provider file `provider`, naming
/// the ones it has.
pub fn unknown_provider(paths: &Paths, provider: &str) -> Option<Denial> {
    let file = paths.providers.join(format!("{provider}.toml"));
    (!(is_name(provider) && file.is_file())).then(|| {
        Denial::new(
            Reason::UnknownProvider,
            format!(
                "no provider named `{provider}` in {}; known: {}",
                paths.providers.display(),
                known(&provider_names(&paths.providers))
            ),
        )
    })
}

fn known(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn names(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<String> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<String> = listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| keep(p))
        .filter_map(|p| {
            let stem = if p.is_dir() {
                p.file_name()?
            } else {
                p.file_stem()?
            };
            stem.to_str().map(str::to_string)
        })
        .collect();
    found.sort();
    found
}
