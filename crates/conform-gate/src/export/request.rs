//! What `conform export` asks for, checked against the project before anything is
//! exported: the allowlist must be readable (failing closed would still print a config;
//! refusing is clearer), and every suite and provider named must exist (a typo is not a
//! quiet "nothing to export").

use std::path::{Path, PathBuf};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Chain, Names, Plan, SuiteRef, chains, litellm, portkey};
use crate::allowlist::Allowlist;
use crate::allowlist::local::{suite_names, unknown_provider, unknown_suite};
use crate::allowlist::state::keeping;
use conform_config::{Paths, ProviderConfig};

/// The fallbacks to export, as asked.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The allowlist file.
    pub allowlist: &'a Path,
    /// Where the project's files are.
    pub paths: &'a Paths,
    /// The providers requests go to first.
    pub primaries: Vec<String>,
    /// Empty: every provider in the allowlist.
    pub fallbacks: Vec<String>,
    /// Empty: every suite in the project's fixtures.
    pub suites: Vec<String>,
    /// What each provider is called in the gateway's config.
    pub names: Names,
    /// The instant the entries must be valid at.
    pub at: OffsetDateTime,
    /// The state file the reader keeps (`--state`), if any.
    pub state: Option<&'a Path>,
}

/// Why nothing can be exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The allowlist could not be trusted: nothing is permitted.
    #[error("no fallback can be exported ({code}): {detail}")]
    Unreadable {
        /// The denial's reason code.
        code: &'static str,
        /// Why, in a sentence.
        detail: String,
    },
    /// The state file (`--state`) could not be read or written.
    #[error("{0}")]
    State(String),
    /// No suite to prove the fallbacks for.
    #[error(
        "no suite in {}: name the suites the fallbacks must be proven for with --suite",
        fixtures.display()
    )]
    NoSuite {
        /// The fixtures folder that holds no suite.
        fixtures: PathBuf,
    },
    /// Suites or providers the project does not have, one problem each.
    #[error("{}", .0.join("; "))]
    Unknown(Vec<String>),
    /// A Portkey config was asked for more than one primary.
    #[error(
        "a Portkey config has one primary: run `conform export portkey --primary P` once per primary"
    )]
    OnePrimary,
}

impl ExportError {
    /// One line per problem.
    pub fn problems(&self) -> Vec<String> {
        match self {
            ExportError::Unknown(problems) => problems.clone(),
            other => vec![other.to_string()],
        }
    }
}

/// The chains of every primary, decided at one instant, and the header naming them.
#[derive(Debug, Clone)]
pub struct Export {
    /// One chain per primary, in the order asked.
    pub chains: Vec<Chain>,
    /// What each provider is called in the gateway's config.
    pub names: Names,
    /// The provider files of the primaries and fallbacks that are a cloud's, whose
    /// deployments the configs pin.
    pub clouds: super::cloud::Clouds,
    /// The comment lines a config starts with: who made it, from what, until when.
    pub header: Vec<String>,
}

/// The provider files of `chains`' primaries and fallbacks that are a cloud's.
fn clouds_of(chains: &[Chain], paths: &Paths) -> super::cloud::Clouds {
    let names = chains
        .iter()
        .flat_map(|c| std::iter::once(&c.primary).chain(c.fallbacks.iter().map(|f| &f.provider)));
    names
        .filter_map(|name| {
            let config =
                ProviderConfig::load(&paths.providers.join(format!("{name}.toml"))).ok()?;
            config.kind.describe().cloud.map(|_| (name.clone(), config))
        })
        .collect()
}

impl Export {
    /// Decides every candidate of `request` against the allowlist and the project, as
    /// `conform gate` does.
    pub fn prepare(request: Request<'_>) -> Result<Export, ExportError> {
        let list = Allowlist::load(request.allowlist).map_err(|d| ExportError::Unreadable {
            code: d.reason.code(),
            detail: d.detail,
        })?;
        let paths = request.paths;
        let names: Vec<String> = if request.suites.is_empty() {
            suite_names(&paths.fixtures)
        } else {
            request.suites
        };
        if names.is_empty() {
            return Err(ExportError::NoSuite {
                fixtures: paths.fixtures.clone(),
            });
        }
        let suites = names.iter().filter_map(|name| unknown_suite(paths, name));
        let providers = (request.primaries.iter().chain(&request.fallbacks))
            .filter_map(|name| unknown_provider(paths, name));
        let unknown: Vec<String> = suites.chain(providers).map(|d| d.detail).collect();
        if !unknown.is_empty() {
            return Err(ExportError::Unknown(unknown));
        }
        let plan = Plan {
            primaries: request.primaries,
            fallbacks: request.fallbacks,
            suites: (names.iter())
                .map(|name| SuiteRef {
                    name: name.clone(),
                    digest: None,
                })
                .collect(),
            at: request.at,
            project: Some(paths.clone()),
            seen: None,
        };
        let trust = Some(paths.trust.as_path());
        let chains = keeping(request.state, request.allowlist, trust, plan.at, |seen| {
            chains(
                &list,
                &Plan {
                    seen: seen.cloned(),
                    ..plan
                },
            )
        })
        .map_err(|e| ExportError::State(e.to_string()))?;
        let mut header = vec![
            format!(
                "Generated by conform {} from {} at {}.",
                env!("CARGO_PKG_VERSION"),
                request.allowlist.display(),
                request.at.format(&Rfc3339).unwrap_or_default()
            ),
            format!(
                "Lists only fallbacks whose allowlist entries are valid for every suite: {}.",
                names.join(", ")
            ),
        ];
        if let Some(first) = chains.iter().filter_map(Chain::expires).min() {
            header.push(format!(
                "The first entry expires at {first}: export again before then."
            ));
        }
        let clouds = clouds_of(&chains, paths);
        Ok(Export {
            chains,
            names: request.names,
            clouds,
            header,
        })
    }

    /// As [`Export::prepare`], for a Portkey config, which has one primary.
    pub fn for_portkey(request: Request<'_>) -> Result<Export, ExportError> {
        if request.primaries.len() != 1 {
            return Err(ExportError::OnePrimary);
        }
        Export::prepare(request)
    }

    /// The LiteLLM `config.yaml` fragment, with the `model_list` entries of the clouds'
    /// deployments it names.
    pub fn litellm(&self, section: litellm::Section) -> String {
        let named = self
            .routed()
            .map(|p| (p, self.names.of(p)))
            .collect::<Vec<_>>();
        litellm::yaml(&self.chains, &self.names, section, &self.header)
            + &super::cloud::litellm_models(&self.clouds, &named)
    }

    /// Every primary and permitted fallback, once each.
    fn routed(&self) -> impl Iterator<Item = &str> {
        let mut seen = std::collections::BTreeSet::new();
        (self.chains.iter())
            .flat_map(|c| {
                std::iter::once(c.primary.as_str())
                    .chain(c.fallbacks.iter().map(|f| f.provider.as_str()))
            })
            .filter(move |p| seen.insert(*p))
    }

    /// The Portkey config of the first primary, its model pinned as its provider file
    /// names it (when the file reads).
    pub fn portkey(&self, paths: &Paths) -> Value {
        let Some(chain) = self.chains.first() else {
            return Value::Null;
        };
        let file = paths.providers.join(format!("{}.toml", chain.primary));
        let primary_model = ProviderConfig::load(&file).ok().map(|c| c.model);
        let mut config = portkey::config(chain, primary_model.as_deref(), &self.names);
        // A cloud's target names its deployment, region or project, as its evidence did.
        let providers =
            std::iter::once(&chain.primary).chain(chain.fallbacks.iter().map(|f| &f.provider));
        let targets = config["targets"].as_array_mut().into_iter().flatten();
        for (target, provider) in targets.zip(providers) {
            let pinned = (self.clouds.get(provider))
                .and_then(|c| super::cloud::portkey_target(c, self.names.of(provider)));
            if let Some(pinned) = pinned {
                *target = Value::Object(pinned);
            }
        }
        config
    }

    /// Every primary has a permitted fallback.
    pub fn complete(&self) -> bool {
        self.chains.iter().all(|c| !c.fallbacks.is_empty())
    }

    /// Each chain's fallbacks and exclusions, one line each, for a person beside the
    /// config (stderr, so that stdout stays a config).
    pub fn routes(&self) -> String {
        let mut out = String::new();
        for chain in &self.chains {
            for f in &chain.fallbacks {
                out.push_str(&format!(
                    "{} -> {} ({})\n",
                    chain.primary, f.provider, f.model
                ));
            }
            for x in &chain.excluded {
                out.push_str(&format!(
                    "{} -/-> {}: {} ({})\n",
                    chain.primary, x.provider, x.reason, x.detail
                ));
            }
        }
        out
    }
}
