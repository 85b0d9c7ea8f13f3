//! OpenAI strict mode (Chat Completions' `json_schema` and forced tools, and the Responses
//! API, all sending `strict: true`): the root is an object, every object has
//! `additionalProperties: false`, and every property is in `required` (an optional field
//! is written required and nullable).

use serde_json::Value;

use crate::provider::dialect::{Dialect, Incompatibility, Severity, escape, is_object_node, push};

/// OpenAI strict mode.
pub(crate) struct Strict;

impl Dialect for Strict {
    fn name(&self) -> &'static str {
        "OpenAI strict mode"
    }

    fn root(&self, schema: &Value, found: &mut Vec<Incompatibility>) {
        let object = matches!(schema.get("type"), Some(Value::String(t)) if t == "object");
        if !object {
            push(
                found,
                Severity::Rejected,
                "/type".into(),
                format!(
                    "{} needs an object at the root (`\"type\": \"object\"`)",
                    self.name()
                ),
            );
        }
    }

    fn node(&self, node: &Value, path: &str, found: &mut Vec<Incompatibility>) {
        let Some(map) = node.as_object() else {
            return;
        };
        let name = self.name();
        if is_object_node(node) && map.get("additionalProperties") != Some(&Value::Bool(false)) {
            push(
                found,
                Severity::Rejected,
                format!("{path}/additionalProperties"),
                format!("{name} needs `additionalProperties: false` on every object"),
            );
        }
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for key in map
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|p| p.keys())
        {
            if !required.contains(&key.as_str()) {
                push(
                    found,
                    Severity::Rejected,
                    format!("{path}/properties/{}", escape(key)),
                    format!(
                        "{name} needs every property in `required`: `{key}` is optional; make it required and nullable (`\"type\": [\"…\", \"null\"]`)"
                    ),
                );
            }
        }
    }
}
