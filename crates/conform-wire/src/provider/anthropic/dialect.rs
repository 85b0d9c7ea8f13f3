//! Anthropic's `output_config.format` (and strict tool use): numeric bounds, string
//! lengths, `maxItems`, `minItems` above 1, a remote `$ref` and `additionalProperties`
//! other than `false` are a 400; every object must close itself.

use serde_json::Value;

use crate::provider::dialect::{Dialect, Incompatibility, Severity, escape, is_object_node, push};

/// What Anthropic's structured outputs reject outright.
const ANTHROPIC_REJECTED: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
    "uniqueItems",
];

/// `output_config.format`.
pub(crate) struct OutputConfig;

impl Dialect for OutputConfig {
    fn name(&self) -> &'static str {
        "Anthropic output_config.format"
    }

    fn node(&self, node: &Value, path: &str, found: &mut Vec<Incompatibility>) {
        let Some(map) = node.as_object() else {
            return;
        };
        let name = self.name();
        for (key, value) in map {
            let rejected = ANTHROPIC_REJECTED.contains(&key.as_str())
                || (key == "minItems" && value.as_u64().is_some_and(|n| n > 1))
                || (key == "additionalProperties" && value != &Value::Bool(false))
                || (key == "$ref" && value.as_str().is_some_and(|r| !r.starts_with('#')));
            if rejected {
                push(
                    found,
                    Severity::Rejected,
                    format!("{path}/{}", escape(key)),
                    format!(
                        "{name} rejects `{key}: {value}` with a 400: drop it, or use structured_output = \"tool\""
                    ),
                );
            }
        }
        if is_object_node(node) && !map.contains_key("additionalProperties") {
            push(
                found,
                Severity::Rejected,
                format!("{path}/additionalProperties"),
                format!("{name} needs `additionalProperties: false` on every object"),
            );
        }
    }
}
