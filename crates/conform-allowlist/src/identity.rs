//! What a piece of evidence is about: a suite as its files, a provider as the fields that
//! shape what is sent to it and how its answers are read. An allowlist entry pins both, and
//! a reader compares them with what it observes now, naming the file or field that differs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A suite as the files it was read from: `suite.toml`, the schema and the tools by
/// name, and the case files as their count and one digest over every (name, content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteIdentity {
    /// File name (relative to the suite folder) → `sha256:` of its bytes.
    pub files: BTreeMap<String, String>,
    /// The case files, as their count and one digest.
    pub cases: CasesIdentity,
}

/// The case files of a suite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CasesIdentity {
    /// How many case files there are.
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
                let (then_value, now_value) = (then.0.get(name), self.0.get(name));
                let parts = match (name.as_str(), then_value, now_value) {
                    ("endpoint", Some(Value::String(a)), Some(Value::String(b))) => {
                        format!(" ({})", endpoint_parts_differing(a, b))
                    }
                    _ => String::new(),
                };
                format!(
                    "{name}: {} then, {} now{parts}",
                    show(then_value),
                    show(now_value)
                )
            })
            .collect()
    }
}

/// The parts of an address, as conform spells an `endpoint`:
/// `scheme://[user[:[password digest]]@]host:port/path[?query]`.
fn endpoint_parts(endpoint: &str) -> [(&'static str, &str); 7] {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("", endpoint));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (user_info, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
    let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, ""));
    [
        ("the scheme", scheme),
        ("the user", user),
        ("the password", password),
        ("the host", host),
        ("the port", port),
        ("the path", path),
        ("the query", query),
    ]
}

/// Which parts of two endpoints differ, in words: `the query differs`, `the user and the
/// password differ`.
fn endpoint_parts_differing(then: &str, now: &str) -> String {
    let differing: Vec<&str> = endpoint_parts(then)
        .into_iter()
        .zip(endpoint_parts(now))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((part, _), _)| part)
        .collect();
    match differing.as_slice() {
        [] => "spelled otherwise".to_string(),
        [one] => format!("{one} differs"),
        [init @ .., last] => format!("{} and {last} differ", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_change_names_the_part_that_differs() {
        let words = |a: &str, b: &str| endpoint_parts_differing(a, b);
        assert_eq!(
            words("http://h:80/v1", "http://h:80/v1?x=1"),
            "the query differs"
        );
        assert_eq!(
            words("http://h:80/v1", "http://acct2:[sha256:ab]@h:80/v1"),
            "the user and the password differ"
        );
        assert_eq!(words("http://a:80", "http://b:80"), "the host differs");
        assert_eq!(
            words("http://a:80", "https://a:443/x"),
            "the scheme, the port and the path differ"
        );
    }
}
