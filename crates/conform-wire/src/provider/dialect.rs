//! The JSON Schema dialect a provider's structured-output mode holds a schema to: what it
//! rejects (a 400 on every call) or accepts without enforcing. Each vendor's dialects are
//! in its folder; `conform_check::check::portability` walks a schema and asks them about every
//! subschema, before any token is spent.

use serde_json::Value;

/// How bad an incompatibility is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The provider answers 400: nothing can run. A `conform check` problem.
    Rejected,
    /// The provider accepts the schema but does not enforce this part. A warning.
    Ignored,
}

/// One schema feature a provider's structured-output mode cannot honour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    /// Whether the feature is refused or only not enforced.
    pub severity: Severity,
    /// JSON pointer into the schema file.
    pub path: String,
    /// What the feature is and what the provider does with it, for the user.
    pub message: String,
}

/// One schema dialect.
pub trait Dialect: Sync {
    /// Its name in messages: `OpenAI strict mode`.
    fn name(&self) -> &'static str;

    /// What it says of the schema as a whole (its root).
    fn root(&self, _schema: &Value, _found: &mut Vec<Incompatibility>) {}

    /// What it says of one subschema, at `path` (a JSON pointer; empty for the root).
    fn node(&self, node: &Value, path: &str, found: &mut Vec<Incompatibility>);
}

/// Pushes an incompatibility at `path` (the root shown as `/`).
pub fn push(found: &mut Vec<Incompatibility>, severity: Severity, path: String, message: String) {
    found.push(Incompatibility {
        severity,
        path: if path.is_empty() { "/".into() } else { path },
        message,
    });
}

/// A schema that describes an object: typed so, or with properties.
pub fn is_object_node(node: &Value) -> bool {
    let typed = match node.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => false,
    };
    typed || node.get("properties").is_some()
}

/// RFC 6901 escaping of one pointer segment.
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}
