//! Exports of the allowlist to the gateways teams already run, so that their automatic
//! failover only ever goes where the evidence says it may:
//!
//! - [`litellm`]: the router's `fallbacks` section of a LiteLLM proxy `config.yaml`;
//! - [`portkey`]: a Portkey gateway config with `strategy.mode = "fallback"`;
//! - [`tensorzero`]: a TensorZero model's `routing` and its providers' `timeouts`;
//! - [`request`]: what `conform export` asks for, checked against the project.
//!
//! Both start from [`chains`]: for each primary, the fallbacks whose entries permit
//! failover for every selected suite at one instant. An export is a snapshot: the
//! entries it rests on expire, so regenerate it (in CI, say) before [`Chain::expires`].

pub mod cloud;
pub mod litellm;
pub mod portkey;
pub mod request;
pub mod tensorzero;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use time::OffsetDateTime;

use crate::allowlist::{Allowlist, Entry, Query, Seen};
use conform_config::Paths;

/// One suite the fallbacks must be proven for, and optionally the digest to hold its
/// evidence to instead of the one the project's files give (an entry made with another
/// digest then does not count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteRef {
    /// The suite's folder name.
    pub name: String,
    /// The digest its evidence must have been made with, instead of the project's.
    pub digest: Option<String>,
}

/// What to export.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The providers requests go to first.
    pub primaries: Vec<String>,
    /// Candidate fallbacks, in order of preference; empty means every provider that has
    /// an entry, by name.
    pub fallbacks: Vec<String>,
    /// A fallback is listed only if every one of these suites permits it. No suite, no
    /// evidence: nothing is listed.
    pub suites: Vec<SuiteRef>,
    /// The instant the entries must be valid at.
    pub at: OffsetDateTime,
    /// The project whose suites and providers the evidence must still match, as `conform
    /// gate` requires; `None` holds it only to the suites' given digests.
    pub project: Option<Paths>,
    /// What the reader has seen of the allowlist (`--state`): an entry made before the
    /// newest statement seen about its pair is superseded.
    pub seen: Option<Seen>,
}

/// A provider's name in the gateway's config, by conform provider name; a provider not
/// in the map keeps its own name.
#[derive(Debug, Clone, Default)]
pub struct Names(pub BTreeMap<String, String>);

impl Names {
    /// `PROVIDER=NAME`, as `--name` gives one.
    pub fn parse_pair(s: &str) -> Result<(String, String), String> {
        match s.split_once('=') {
            Some((p, n)) if !p.is_empty() && !n.is_empty() => Ok((p.to_string(), n.to_string())),
            _ => Err(format!(
                "`{s}` is not PROVIDER=NAME, e.g. --name openai=gpt-4o"
            )),
        }
    }

    /// The name `provider` goes by in the gateway's config.
    pub fn of<'a>(&'a self, provider: &'a str) -> &'a str {
        self.0.get(provider).map_or(provider, String::as_str)
    }
}

/// A fallback that every selected suite permits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fallback {
    /// The provider, by conform name.
    pub provider: String,
    /// The configured model the evidence was made with.
    pub model: String,
    /// The entries it rests on, one per suite.
    pub entries: Vec<Entry>,
}

/// A candidate left out, and why: the decision's denial for the first suite that denied
/// (`revoked`, `expired`, `suite_changed`, `simulated` …), or `model_differs` when the
/// suites' evidence names different models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excluded {
    /// The provider, by conform name.
    pub provider: String,
    /// The suite that denied it, when one did.
    pub suite: Option<String>,
    /// The denial's reason code, or `model_differs`.
    pub reason: String,
    /// Why, in a sentence.
    pub detail: String,
}

/// The failover chain of one primary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chain {
    /// The provider requests go to first.
    pub primary: String,
    /// In order of preference.
    pub fallbacks: Vec<Fallback>,
    /// The candidates left out, each with why.
    pub excluded: Vec<Excluded>,
}

impl Chain {
    /// When the first entry this chain rests on expires: regenerate before then.
    pub fn expires(&self) -> Option<&str> {
        self.fallbacks
            .iter()
            .flat_map(|f| &f.entries)
            .min_by_key(|e| {
                time::OffsetDateTime::parse(
                    &e.valid_until,
                    &time::format_description::well_known::Rfc3339,
                )
                .ok()
            })
            .map(|e| e.valid_until.as_str())
    }
}

/// For each primary of `plan`, the fallbacks that `list` permits for every suite at
/// `plan.at`. A candidate is checked with [`crate::allowlist::decide`]'s own rules, so an
/// export never names a fallback that `conform gate` would deny.
pub fn chains(list: &Allowlist, plan: &Plan) -> Vec<Chain> {
    let candidates: Vec<String> = if plan.fallbacks.is_empty() {
        let named: BTreeSet<&str> = list
            .entries
            .iter()
            .map(|e| e.provider.as_str())
            .chain(list.revocations.iter().map(|r| r.provider.as_str()))
            .collect();
        named.into_iter().map(str::to_string).collect()
    } else {
        plan.fallbacks.clone()
    };
    plan.primaries
        .iter()
        .map(|primary| {
            let mut chain = Chain {
                primary: primary.clone(),
                fallbacks: Vec::new(),
                excluded: Vec::new(),
            };
            let mut seen = BTreeSet::new();
            for candidate in candidates.iter().filter(|c| *c != primary) {
                if !seen.insert(candidate.as_str()) {
                    continue;
                }
                match fallback(list, plan, candidate) {
                    Ok(f) => chain.fallbacks.push(f),
                    Err(e) => chain.excluded.push(e),
                }
            }
            chain
        })
        .collect()
}

fn fallback(list: &Allowlist, plan: &Plan, provider: &str) -> Result<Fallback, Excluded> {
    let excluded = |suite: Option<&str>, reason: &str, detail: String| Excluded {
        provider: provider.to_string(),
        suite: suite.map(str::to_string),
        reason: reason.to_string(),
        detail,
    };
    if plan.suites.is_empty() {
        return Err(excluded(None, "no_suite", "no suite was selected".into()));
    }
    let mut entries = Vec::new();
    for suite in &plan.suites {
        let mut query = Query::new(&suite.name, provider, plan.at);
        query.project = plan.project.as_ref();
        query.reported.suite_digest = suite.digest.as_deref();
        match crate::allowlist::decide_query(list, &query.seen(plan.seen.as_ref())) {
            Ok(permit) => entries.push(permit.entry),
            Err(denial) => {
                return Err(excluded(
                    Some(&suite.name),
                    denial.reason.code(),
                    denial.detail,
                ));
            }
        }
    }
    let model = entries[0].model.clone();
    if let Some(other) = entries.iter().find(|e| e.model != model) {
        return Err(excluded(
            Some(&other.suite),
            "model_differs",
            format!(
                "the evidence for suite `{}` was made with model `{}`, for suite `{}` with `{model}`",
                other.suite, other.model, entries[0].suite
            ),
        ));
    }
    Ok(Fallback {
        provider: provider.to_string(),
        model,
        entries,
    })
}
