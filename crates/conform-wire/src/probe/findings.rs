//! `schema_keyword_ignored`: a keyword a suite's schema uses, that one provider was probed
//! to enforce and another to ignore or strip. Failing over from the first to the second
//! lets through answers that break it: the schema check still catches them, but as
//! failures the primary never had.

use serde_json::Value;

use super::Support;
use super::file::Probes;
use super::inventory;
use conform_config::ProviderConfig;

/// The stable code of the finding.
pub const CODE: &str = "schema_keyword_ignored";

/// One keyword the failover from `primary` to `candidate` loses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The keyword the candidate does not enforce.
    pub keyword: String,
    /// The first place the schema uses it (a JSON pointer).
    pub path: String,
    /// How many more places use it.
    pub more: usize,
    /// The provider that enforces it.
    pub primary: String,
    /// The fallback that strips or ignores it.
    pub candidate: String,
    /// What the candidate does with it.
    pub candidate_support: Support,
    /// Set when a probe was made with another configuration than the provider's now.
    pub stale: Vec<String>,
}

impl Finding {
    /// The warning in words.
    pub fn message(&self) -> String {
        let more = match self.more {
            0 => String::new(),
            1 => " (and 1 more place)".into(),
            n => format!(" (and {n} more places)"),
        };
        let stale = if self.stale.is_empty() {
            String::new()
        } else {
            format!(
                "; probed before `{}` changed: run `conform probe` again",
                self.stale.join("`, `")
            )
        };
        format!(
            "{CODE}: `{}`{more} is enforced by `{}`, but `{}` {} it: a failover to `{}` lets through answers that break it{stale}",
            self.keyword,
            self.primary,
            self.candidate,
            self.candidate_support.as_str(),
            self.candidate
        )
    }
}

/// Every keyword of `schema` that a provider of `providers` (or only `primary`, when
/// given) enforces and another of `providers` ignores or strips, by the probes on file.
pub fn ignored(
    probes: &Probes,
    schema: &Value,
    providers: &[&ProviderConfig],
    primary: Option<&str>,
) -> Vec<Finding> {
    let support = |provider: &str, keyword: &str| {
        probes
            .providers
            .get(provider)
            .and_then(|p| p.keywords.get(keyword))
            .map(|k| k.support)
    };
    let stale = |config: &ProviderConfig| {
        probes
            .providers
            .get(&config.name)
            .is_some_and(|p| p.provider_digest != config.digest())
    };
    let uses = inventory::uses(schema);
    let mut keywords: Vec<&str> = Vec::new();
    for u in &uses {
        if !keywords.contains(&u.keyword.as_str()) {
            keywords.push(&u.keyword);
        }
    }
    let mut found = Vec::new();
    for keyword in keywords {
        let places: Vec<&str> = uses
            .iter()
            .filter(|u| u.keyword == keyword)
            .map(|u| u.path.as_str())
            .collect();
        for a in providers
            .iter()
            .filter(|a| primary.is_none_or(|p| p == a.name))
        {
            if support(&a.name, keyword) != Some(Support::Enforces) {
                continue;
            }
            for b in providers.iter().filter(|b| b.name != a.name) {
                let Some(s) = support(&b.name, keyword).filter(|s| s.lets_through()) else {
                    continue;
                };
                found.push(Finding {
                    keyword: keyword.to_string(),
                    path: places[0].to_string(),
                    more: places.len() - 1,
                    primary: a.name.clone(),
                    candidate: b.name.clone(),
                    candidate_support: s,
                    stale: [a, b]
                        .iter()
                        .filter(|c| stale(c))
                        .map(|c| c.name.clone())
                        .collect(),
                });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::super::file::{KeywordProbe, ProviderProbes};
    use super::super::{Answers, Support};
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn provider(name: &str) -> ProviderConfig {
        ProviderConfig::parse(
            Path::new(&format!("providers/{name}.toml")),
            "kind = \"openai\"\nmodel = \"m\"\n",
        )
        .unwrap()
    }

    fn probed(config: &ProviderConfig, results: &[(&str, Support)]) -> ProviderProbes {
        ProviderProbes {
            model: "m".into(),
            provider_digest: config.digest(),
            simulated: false,
            keywords: results
                .iter()
                .map(|(k, s)| {
                    (
                        k.to_string(),
                        KeywordProbe {
                            support: *s,
                            detail: String::new(),
                            pushed: Answers::default(),
                            plain: Answers::default(),
                            probed_at: String::new(),
                            run_id: "r".into(),
                            report: String::new(),
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn enforced_by_one_and_ignored_by_another_is_found_where_the_schema_uses_it() {
        let (a, b, c) = (provider("a"), provider("b"), provider("c"));
        let mut providers = BTreeMap::new();
        providers.insert(
            "a".into(),
            probed(
                &a,
                &[
                    ("minItems", Support::Enforces),
                    ("pattern", Support::Enforces),
                ],
            ),
        );
        providers.insert(
            "b".into(),
            probed(
                &b,
                &[
                    ("minItems", Support::Ignores),
                    ("pattern", Support::Enforces),
                ],
            ),
        );
        providers.insert("c".into(), probed(&c, &[("minItems", Support::Strips)]));
        let probes = Probes {
            providers,
            ..Probes::default()
        };
        let schema = json!({"type": "object", "properties": {
            "tags": {"type": "array", "minItems": 1}, "more": {"type": "array", "minItems": 2},
            "code": {"type": "string", "pattern": "^x$"}}});
        let all = [&a, &b, &c];
        let found = ignored(&probes, &schema, &all, None);
        let pairs: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|f| (f.keyword.as_str(), f.primary.as_str(), f.candidate.as_str()))
            .collect();
        assert_eq!(pairs, [("minItems", "a", "b"), ("minItems", "a", "c")]);
        assert_eq!(found[0].path, "/properties/tags/minItems");
        assert_eq!(found[0].more, 1);
        assert!(
            found[1].message().contains("strips"),
            "{}",
            found[1].message()
        );
        // Only from the primary asked about.
        assert!(ignored(&probes, &schema, &all, Some("b")).is_empty());
        // A changed configuration makes the probe stale, and the message says so.
        let b2 = ProviderConfig::parse(
            Path::new("providers/b.toml"),
            "kind = \"openai\"\nmodel = \"m2\"\n",
        )
        .unwrap();
        let found = ignored(&probes, &schema, &[&a, &b2], Some("a"));
        assert_eq!(found[0].stale, ["b"]);
        assert!(found[0].message().contains("probe"));
    }
}
