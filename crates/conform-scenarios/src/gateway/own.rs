//! `--gateway-config FILE`: the scenarios against the team's own configuration.
//!
//! Every fallback list of the config is held to the allowlist with `conform export`'s
//! decision ([`conform_gate::export::chains`], which asks `decide`): a fallback it does
//! not permit fails the run, in a scenario of its own ([`GATE_SCENARIO`]). The
//! allowlist is `--allowlist FILE` with the project's suites, as `conform export` reads
//! them; without it, the scenarios' own (which permits `fallback` and revokes `revoked`).
//!
//! The scenarios' roles: `primary` is the first model with a failover list (or the one
//! `--gateway-primary` names), `fallback` the first model of its list the allowlist
//! permits; a listed model it does not permit plays `revoked` (held to no request); every
//! other model keeps its own name. The client asks for the primary by the name the
//! config gives its route.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::config::{self, FALLBACK, GATEWAY_KEY, MODELS, PRIMARY, REVOKED, UNREACHABLE};
use super::team::{MasterKey, TeamConfig, TeamError};
use super::{GatewayError, Headers, Kind};
use crate::evidence::{CheckRecord, Evidence, Outcome};
use conform_gate::export::request::{Export, Request};
use conform_gate::export::{Chain, Names};

/// The scenario that holds the config's fallback lists to the allowlist.
pub(crate) const GATE_SCENARIO: &str = "config-fallbacks-permitted";

/// What `--gateway-config` asks for.
#[derive(Debug, Clone)]
pub struct Team {
    /// The team's config file.
    pub config: PathBuf,
    /// The model to play `primary` (`--gateway-primary`), by the config's name for it or
    /// for its route.
    pub primary: Option<String>,
    /// `--allowlist`, when given: decided with the project's suites, as `conform export`.
    pub allowlist: Option<PathBuf>,
    /// The project, for the suites and providers `--allowlist`'s entries must match.
    pub paths: conform_config::Paths,
    /// `--state`, as `conform export` reads it.
    pub state: Option<PathBuf>,
}

/// A fallback the config lists that the allowlist does not permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unproven {
    pub list: String,
    pub primary: String,
    pub fallback: String,
    /// The decision's reason code (`revoked`, `not_allowlisted`, …).
    pub reason: String,
    pub detail: String,
}

/// The team's config, held to the allowlist, its models given the scenarios' roles.
#[derive(Debug, Clone)]
pub(crate) struct Own {
    pub config: TeamConfig,
    /// The allowlist it was held to.
    pub allowlist: PathBuf,
    /// `(list, primary, fallback)` the allowlist permits.
    pub permitted: Vec<(String, String, String)>,
    pub unproven: Vec<Unproven>,
    /// What the client asks the gateway for to reach the primary.
    pub ask: String,
    /// Where the roles come from.
    pub route: String,
    /// The scenarios' label of each of the config's models, by its name.
    pub labels: BTreeMap<String, String>,
}

/// The items of `items`, each once, in order.
fn unique(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

impl Own {
    /// Reads the team's config, decides its fallbacks, and gives its models roles.
    pub(crate) fn prepare(team: &Team, kind: Kind, work: &Path) -> Result<Own, GatewayError> {
        let config = TeamConfig::read(kind, &team.config)?;
        let (chains, allowlist) = decide(team, &config, work)?;
        let (permitted, unproven) = judge(&config, &chains);
        let failover = || config.routes.iter().filter(|r| r.failover);
        let route = match &team.primary {
            Some(name) => failover()
                .find(|r| &r.ask == name || &r.primary == name)
                .ok_or_else(|| GatewayError::UnknownPrimary {
                    name: name.clone(),
                    path: team.config.clone(),
                    known: unique(failover().map(|r| r.ask.clone())).join(", "),
                })?,
            None => failover()
                .find(|r| !r.fallbacks.is_empty())
                .ok_or_else(|| GatewayError::NoFallbacks(team.config.clone()))?,
        };
        let denied: Vec<&str> = (unproven.iter())
            .filter(|u| u.primary == route.primary)
            .map(|u| u.fallback.as_str())
            .collect();
        let fallback = (route.fallbacks.iter()).find(|f| !denied.contains(&f.as_str()));
        let labels = (config.models.iter())
            .map(|m| {
                let label = match m.name.as_str() {
                    name if name == route.primary => PRIMARY.to_string(),
                    name if denied.contains(&name) => REVOKED.to_string(),
                    _ if Some(&m.name) == fallback => FALLBACK.to_string(),
                    name if MODELS.contains(&name) || name == UNREACHABLE => format!("team-{name}"),
                    name => name.to_string(),
                };
                (m.name.clone(), label)
            })
            .collect();
        Ok(Own {
            ask: route.ask.clone(),
            route: route.list.clone(),
            config,
            allowlist,
            permitted,
            unproven,
            labels,
        })
    }

    /// The labels of the config's models that are not one of the scenarios' roles: each
    /// gets an upstream of its own.
    pub(crate) fn others(&self) -> Vec<String> {
        unique(
            self.labels
                .values()
                .filter(|l| !MODELS.contains(&l.as_str()))
                .cloned(),
        )
    }

    /// The team's names for each label's model: its name, the model its upstream is
    /// asked for, and for the primary, the name of its route.
    pub(crate) fn aliases(&self) -> BTreeMap<String, Vec<String>> {
        let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for model in &self.config.models {
            let names = aliases.entry(self.labels[&model.name].clone()).or_default();
            names.extend([model.name.clone(), model.asks.clone()]);
        }
        aliases
            .entry(PRIMARY.into())
            .or_default()
            .push(self.ask.clone());
        aliases
    }

    /// Writes the config, each model pointed at its label's upstream: the headers every
    /// request carries.
    pub(crate) fn write(
        &self,
        upstreams: &config::Upstreams,
        path: &Path,
    ) -> Result<Headers, GatewayError> {
        let base = |name: &str| {
            let label = self.labels.get(name).map_or(name, String::as_str);
            (upstreams.iter())
                .find(|(l, _)| l == label)
                .map(|(_, u)| u.clone())
                .unwrap_or_default()
        };
        let text = self.config.rewrite(&base);
        std::fs::write(path, &text).map_err(|source| GatewayError::Config {
            path: path.to_path_buf(),
            source,
        })?;
        let key = match &self.config.master_key {
            Some(MasterKey::Literal(key)) => key.clone(),
            _ => GATEWAY_KEY.to_string(),
        };
        Ok(match self.config.kind {
            Kind::Portkey => {
                let compact = serde_json::from_str::<serde_json::Value>(&text)
                    .map(|v| v.to_string())
                    .unwrap_or(text);
                vec![("x-portkey-config".to_string(), compact)]
            }
            _ => vec![("authorization".to_string(), format!("Bearer {key}"))],
        })
    }

    /// The variables the gateway reads its key from, as the config names them.
    pub(crate) fn vars(&self) -> Vec<(String, String)> {
        match &self.config.master_key {
            Some(MasterKey::Variable(var)) => vec![(var.clone(), GATEWAY_KEY.to_string())],
            _ => Vec::new(),
        }
    }

    /// The gate as a scenario: every listed fallback permitted, or the run fails naming
    /// each that is not.
    pub(crate) fn evidence(&self) -> Evidence {
        let about = format!(
            "every fallback the team's config ({}) lists is one the allowlist ({}) permits",
            self.config.path.display(),
            self.allowlist.display()
        );
        let mut evidence = Evidence::skipped(GATE_SCENARIO, &about, "");
        evidence.outcome = Outcome::Passed;
        for (list, primary, fallback) in &self.permitted {
            evidence.checks.push(CheckRecord::pass(format!(
                "{list}: the allowlist permits failing over from {primary} to {fallback}"
            )));
        }
        let mut reasons = Vec::new();
        for u in &self.unproven {
            let (check, reason) = CheckRecord::fail(
                format!(
                    "{}: the config fails over from {} to {}, which the allowlist does not permit",
                    u.list, u.primary, u.fallback
                ),
                Some(format!("{} ({})", u.reason, u.detail)),
            );
            evidence.checks.push(check);
            reasons.push(reason);
        }
        if !reasons.is_empty() {
            evidence.outcome = Outcome::Failed {
                reason: reasons.join("; "),
            };
        }
        let roles: Vec<String> = (self.labels.iter())
            .map(|(name, label)| format!("{name} plays {label}"))
            .collect();
        evidence.notes.push(format!(
            "roles from {} (the client asks for {}): {}",
            self.route,
            self.ask,
            roles.join(", ")
        ));
        evidence
    }
}

/// The chains of the config's primaries over every fallback it lists, decided as
/// `conform export` decides them, and the allowlist they were decided from.
fn decide(
    team: &Team,
    config: &TeamConfig,
    work: &Path,
) -> Result<(Vec<Chain>, PathBuf), GatewayError> {
    let primaries = unique(config.routes.iter().map(|r| r.primary.clone()));
    let fallbacks = unique(config.routes.iter().flat_map(|r| r.fallbacks.clone()));
    if fallbacks.is_empty() {
        return Err(GatewayError::NoFallbacks(team.config.clone()));
    }
    match &team.allowlist {
        Some(path) => {
            let request = Request {
                allowlist: path,
                paths: &team.paths,
                primaries,
                fallbacks,
                suites: Vec::new(),
                names: Names::default(),
                at: OffsetDateTime::now_utc(),
                state: team.state.as_deref(),
            };
            let export = Export::prepare(request).map_err(|e| GatewayError::Allowlist {
                path: path.clone(),
                problems: e.problems().join("; "),
            })?;
            Ok((export.chains, path.clone()))
        }
        None => {
            let path = work.join(config::ALLOWLIST_FILE);
            let list = config::allowlist(&path);
            let text = serde_json::to_vec_pretty(&list).unwrap_or_default();
            std::fs::write(&path, text).map_err(|source| GatewayError::Config {
                path: path.clone(),
                source,
            })?;
            Ok((config::chains_for(&list, primaries, fallbacks), path))
        }
    }
}

/// Each listed fallback: permitted `(list, primary, fallback)`, or why not.
fn judge(config: &TeamConfig, chains: &[Chain]) -> (Vec<(String, String, String)>, Vec<Unproven>) {
    let (mut permitted, mut unproven) = (Vec::new(), Vec::new());
    for route in &config.routes {
        let chain = chains.iter().find(|c| c.primary == route.primary);
        for fallback in route.fallbacks.iter().filter(|f| **f != route.primary) {
            let named = |p: &String| p == fallback;
            if chain.is_some_and(|c| c.fallbacks.iter().any(|f| named(&f.provider))) {
                permitted.push((route.list.clone(), route.primary.clone(), fallback.clone()));
                continue;
            }
            let excluded = chain.and_then(|c| c.excluded.iter().find(|e| named(&e.provider)));
            unproven.push(Unproven {
                list: route.list.clone(),
                primary: route.primary.clone(),
                fallback: fallback.clone(),
                reason: excluded.map_or("undecided".into(), |e| e.reason.clone()),
                detail: excluded.map_or("the allowlist gave no decision".into(), |e| {
                    e.detail.clone()
                }),
            });
        }
    }
    (permitted, unproven)
}

impl From<TeamError> for GatewayError {
    fn from(e: TeamError) -> GatewayError {
        GatewayError::Team(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare(yaml: &str, primary: Option<&str>) -> Own {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, yaml).unwrap();
        let team = Team {
            config: path,
            primary: primary.map(str::to_string),
            allowlist: None,
            paths: conform_config::Paths::under(dir.path()),
            state: None,
        };
        Own::prepare(&team, Kind::Litellm, dir.path()).unwrap()
    }

    fn yaml(fallbacks: &str) -> String {
        let mut text = String::from("model_list:\n");
        for name in ["primary", "fallback", "revoked", "spare"] {
            text.push_str(&format!(
                "  - model_name: {name}\n    litellm_params: {{model: openai/{name}-model}}\n"
            ));
        }
        text + &format!("router_settings:\n  fallbacks: {fallbacks}\n")
    }

    #[test]
    fn a_listed_fallback_the_allowlist_does_not_permit_fails_naming_it_and_its_reason() {
        let own = prepare(&yaml(r#"[{"primary": ["revoked", "fallback"]}]"#), None);
        assert_eq!(own.unproven.len(), 1, "{:?}", own.unproven);
        let u = &own.unproven[0];
        assert_eq!(
            (u.primary.as_str(), u.fallback.as_str(), u.reason.as_str()),
            ("primary", "revoked", "revoked")
        );
        // The permitted one plays the fallback; the revoked one is held to no request.
        assert_eq!(own.labels["fallback"], FALLBACK);
        assert_eq!(own.labels["revoked"], REVOKED);
        assert_eq!(own.labels["spare"], "spare");
        assert_eq!(own.others(), ["spare"]);
        let evidence = own.evidence();
        let Outcome::Failed { reason } = &evidence.outcome else {
            panic!("{:?}", evidence.outcome)
        };
        assert!(
            reason.contains(
                "router_settings.fallbacks: the config fails over from primary to revoked"
            ),
            "{reason}"
        );
        assert!(reason.contains("revoked ("), "{reason}");
    }

    #[test]
    fn a_config_of_permitted_fallbacks_passes_and_the_roles_follow_the_named_primary() {
        let own = prepare(
            &yaml(r#"[{"spare": ["primary"]}, {"primary": ["fallback"]}]"#),
            Some("primary"),
        );
        let evidence = own.evidence();
        // `spare` → `primary`: the scenarios' allowlist has no entry for `primary`.
        assert!(evidence.failed(), "{:?}", evidence.outcome);
        assert_eq!(own.unproven.len(), 1);
        assert_eq!(own.unproven[0].primary, "spare");
        assert_eq!(own.labels["primary"], PRIMARY);
        assert_eq!(own.labels["fallback"], FALLBACK);
        assert_eq!(own.ask, "primary");
        let aliases = own.aliases();
        assert!(aliases[FALLBACK].contains(&"fallback-model".to_string()));

        let own = prepare(&yaml(r#"[{"primary": ["fallback"]}]"#), None);
        assert!(own.evidence().passed(), "{:?}", own.evidence());
        assert_eq!(own.permitted.len(), 1);
    }
}
