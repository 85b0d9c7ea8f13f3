//! What a piece of evidence is about: a suite as its files, a provider as the fields that
//! shape what is sent to it and how its answers are read.
//!
//! An allowlist entry pins both, and a reader compares them with the project as it is
//! now, naming the file or field that differs (`docs/evidence.md`). Operational settings
//! (how hard conform pushes a provider, how long it waits) are left out: they change how
//! fast evidence is gathered, never what it proves.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Fields of a provider file that are operational and so outside its identity: the
/// `[limits]` table (concurrency, request and token rates, retries and their waits), the
/// per-call `timeout`, and `[pricing]`.
pub const OPERATIONAL: &[&str] = &["limits", "timeout", "pricing"];

/// A suite as the files it was read from: `suite.toml`, the schema and the tools by
/// name, and the case files as their count and one digest over every (name, content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteIdentity {
    /// File name (relative to the suite folder) → `sha256:` of its bytes.
    pub files: BTreeMap<String, String>,
    pub cases: CasesIdentity,
}

/// The case files of a suite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CasesIdentity {
    pub count: u64,
    /// `sha256:` over each case's name and the digest of its bytes, in name order.
    pub digest: String,
}

impl SuiteIdentity {
    /// The one digest an entry's `suite_digest` holds: RFC 8785 of this identity.
    pub fn digest(&self) -> String {
        crate::digest::canonical(self)
    }

    /// What differs from `then` (the evidence's) to `self` (now), in words, one item per
    /// file: `schema.json changed`, `tools.json removed`, `cases: 25 then, 26 now`.
    pub fn changes_since(&self, then: &SuiteIdentity) -> Vec<String> {
        let mut out = Vec::new();
        for (name, digest) in &self.files {
            match then.files.get(name) {
                None => out.push(format!("{name} added")),
                Some(d) if d != digest => out.push(format!("{name} changed")),
                Some(_) => {}
            }
        }
        for name in then.files.keys() {
            if !self.files.contains_key(name) {
                out.push(format!("{name} removed"));
            }
        }
        if self.cases.count != then.cases.count {
            out.push(format!(
                "cases/: {} case files when the evidence was made, {} now",
                then.cases.count, self.cases.count
            ));
        } else if self.cases.digest != then.cases.digest {
            out.push(format!(
                "cases/: the content or names of the {} case files changed",
                self.cases.count
            ));
        }
        out
    }
}

/// A provider as the fields that shape what is sent and how the answers are read, never
/// a secret (the key's variable name is part of it, the key never is).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProviderIdentity(pub BTreeMap<String, Value>);

impl ProviderIdentity {
    /// The one digest an entry's `provider_digest` holds: RFC 8785 of this identity.
    pub fn digest(&self) -> String {
        crate::digest::canonical(&self.0)
    }

    /// The fields that differ from `then` (the evidence's) to `self` (now), each with both
    /// values: `endpoint: http://a:8000 then, http://b:8000 now`.
    pub fn changes_since(&self, then: &ProviderIdentity) -> Vec<String> {
        let mut names: Vec<&String> = self.0.keys().chain(then.0.keys()).collect();
        names.sort();
        names.dedup();
        let show = |v: Option<&Value>| match v {
            None => "unset".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        names
            .into_iter()
            .filter(|name| self.0.get(*name) != then.0.get(*name))
            .map(|name| {
                format!(
                    "{name}: {} then, {} now",
                    show(then.0.get(name)),
                    show(self.0.get(name))
                )
            })
            .collect()
    }
}

/// The address a `base_url` names, as identity compares it: scheme, host, port (the
/// scheme's default written out) and path without a trailing slash, so that
/// `https://api.openai.com/` and `https://api.openai.com:443` are one endpoint and
/// `http://host:8000/v1` another than `http://host:8000`. A text that is not a URL is kept
/// as it is.
pub fn endpoint(base_url: &str) -> String {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return base_url.to_string();
    };
    let host = url.host_str().unwrap_or_default();
    let port = url
        .port_or_known_default()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    let path = url.path().trim_end_matches('/');
    format!("{}://{host}{port}{path}", url.scheme())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints_compare_by_address_not_spelling() {
        assert_eq!(
            endpoint("https://api.openai.com"),
            "https://api.openai.com:443"
        );
        assert_eq!(
            endpoint("https://API.openai.com:443/"),
            "https://api.openai.com:443"
        );
        assert_eq!(
            endpoint("http://10.0.0.5:8000/v1/"),
            "http://10.0.0.5:8000/v1"
        );
        assert_ne!(
            endpoint("http://10.0.0.5:8000"),
            endpoint("http://10.0.0.6:8000")
        );
        assert_ne!(endpoint("http://h:8000"), endpoint("http://h:8000/v1"));
        assert_ne!(endpoint("http://h:8000"), endpoint("https://h:8000"));
        assert_eq!(endpoint("not a url"), "not a url");
    }

    #[test]
    fn provider_changes_name_each_field_with_both_values() {
        let then = ProviderIdentity(
            [
                ("model".to_string(), json!("m")),
                ("endpoint".to_string(), json!("http://a:1")),
                ("seed".to_string(), json!(7)),
            ]
            .into(),
        );
        let mut now = then.clone();
        assert!(now.changes_since(&then).is_empty());
        now.0.insert("endpoint".into(), json!("http://b:1"));
        now.0.remove("seed");
        assert_eq!(
            now.changes_since(&then),
            [
                "endpoint: http://a:1 then, http://b:1 now",
                "seed: 7 then, unset now"
            ]
        );
        assert_ne!(now.digest(), then.digest());
    }

    #[test]
    fn suite_changes_name_each_file() {
        let then = SuiteIdentity {
            files: [
                ("suite.toml".to_string(), "sha256:a".to_string()),
                ("schema.json".to_string(), "sha256:b".to_string()),
            ]
            .into(),
            cases: CasesIdentity {
                count: 2,
                digest: "sha256:c".into(),
            },
        };
        let mut now = then.clone();
        assert!(now.changes_since(&then).is_empty());
        now.files.insert("schema.json".into(), "sha256:x".into());
        now.files.insert("tools.json".into(), "sha256:t".into());
        now.cases.digest = "sha256:d".into();
        assert_eq!(
            now.changes_since(&then),
            [
                "schema.json changed",
                "tools.json added",
                "cases/: the content or names of the 2 case files changed"
            ]
        );
        now.cases.count = 3;
        assert!(
            now.changes_since(&then)[2].contains("2 case files when the evidence was made, 3 now")
        );
    }
}
