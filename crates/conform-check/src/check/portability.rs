//! Schema portability pre-flight: which features of a suite's schema a provider's
//! structured-output mode rejects (a 400 on every call) or does not enforce, found
//! statically, with the JSON path, before any token is spent.
//!
//! Each vendor names the dialect of each mode (`WireFormat::answer_dialect`,
//! `tool_dialect`) and writes its rules in its folder (`provider/<vendor>/dialect.rs`):
//! OpenAI strict mode, Gemini's `responseSchema` and `responseJsonSchema`, Anthropic's
//! `output_config.format`. This module walks the schema and asks the dialect about every
//! subschema.
//!
//! Simulated providers accept any schema and are not linted; neither are modes that
//! send no schema (`json_object`, `prompt`), Anthropic's non-strict forced tool, or
//! Ollama, whose grammar compiler has no documented subset.

use serde_json::Value;

use conform_config::ProviderConfig;
use conform_wire::provider::dialect::escape;
pub use conform_wire::provider::dialect::{Incompatibility, Severity};
use conform_wire::provider::{Dialect, wire_format};

/// Every incompatibility of `schema` with `provider`'s structured-output mode, in
/// document order; empty when the mode has no known dialect.
pub fn lint(schema: &Value, provider: &ProviderConfig) -> Vec<Incompatibility> {
    if provider.is_simulated() {
        return Vec::new();
    }
    match wire_format(provider.wire_kind()).answer_dialect(provider) {
        Some(dialect) => lint_as(schema, dialect),
        None => Vec::new(),
    }
}

/// Every incompatibility of a tool's parameter schema with how `provider` declares
/// tools: Gemini's declaration dialect always, OpenAI's and Anthropic's strict rules for
/// a tool declared `strict`. Paths are JSON pointers into the parameter schema.
pub fn lint_tool(
    parameters: &Value,
    strict: bool,
    provider: &ProviderConfig,
) -> Vec<Incompatibility> {
    if provider.is_simulated() {
        return Vec::new();
    }
    match wire_format(provider.wire_kind()).tool_dialect(provider, strict) {
        Some(dialect) => lint_as(parameters, dialect),
        None => Vec::new(),
    }
}

fn lint_as(schema: &Value, dialect: &dyn Dialect) -> Vec<Incompatibility> {
    let mut found = Vec::new();
    dialect.root(schema, &mut found);
    walk(schema, "", true, &mut |node, path| {
        dialect.node(node, path, &mut found)
    });
    found
}

/// Visits every subschema with its JSON pointer.
fn walk(node: &Value, path: &str, root: bool, visit: &mut dyn FnMut(&Value, &str)) {
    let Some(map) = node.as_object() else {
        return;
    };
    visit(node, if root { "" } else { path });
    for (key, value) in map {
        let here = format!("{path}/{}", escape(key));
        match key.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                if let Some(children) = value.as_object() {
                    for (name, child) in children {
                        walk(child, &format!("{here}/{}", escape(name)), false, visit);
                    }
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                for (i, child) in value.as_array().into_iter().flatten().enumerate() {
                    walk(child, &format!("{here}/{i}"), false, visit);
                }
            }
            "items" if value.is_array() => {
                for (i, child) in value.as_array().into_iter().flatten().enumerate() {
                    walk(child, &format!("{here}/{i}"), false, visit);
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems" => {
                walk(value, &here, false, visit);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn provider(src: &str) -> ProviderConfig {
        ProviderConfig::parse(Path::new("providers/p.toml"), src).unwrap()
    }

    fn paths(found: &[Incompatibility]) -> Vec<&str> {
        found.iter().map(|f| f.path.as_str()).collect()
    }

    #[test]
    fn openai_strict_names_optional_properties_and_open_objects() {
        let p = provider("kind = \"openai\"\nmodel = \"m\"\n");
        let schema = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "string"},
                "b": {"type": "object", "properties": {"c": {"type": "number"}}, "required": ["c"]}},
            "required": ["b"]});
        let found = lint(&schema, &p);
        assert_eq!(
            paths(&found),
            ["/properties/a", "/properties/b/additionalProperties"]
        );
        assert!(found.iter().all(|f| f.severity == Severity::Rejected));
        let array_root = lint(&json!({"type": "array", "items": {"type": "string"}}), &p);
        assert_eq!(paths(&array_root), ["/type"]);
    }

    #[test]
    fn gemini_response_schema_rejects_what_openapi_lacks() {
        let p = provider(
            "kind = \"gemini\"\nmodel = \"m\"\n[gemini]\nschema_field = \"responseSchema\"\n",
        );
        let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "additionalProperties": false,
            "properties": {"n": {"type": ["string", "null"]}, "k": {"const": "x"},
                "t": {"type": "array", "items": {"type": "object", "additionalProperties": false}}}});
        let found = lint(&schema, &p);
        assert_eq!(
            paths(&found),
            [
                "/additionalProperties",
                "/properties/k/const",
                "/properties/t/items/additionalProperties"
            ]
        );
    }

    #[test]
    fn gemini_json_schema_only_warns() {
        let p = provider("kind = \"gemini\"\nmodel = \"m\"\n");
        let schema =
            json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}});
        let found = lint(&schema, &p);
        assert_eq!(paths(&found), ["/properties/s/maxLength"]);
        assert_eq!(found[0].severity, Severity::Ignored);
    }

    #[test]
    fn anthropic_output_config_rejects_bounds_but_tool_mode_does_not() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "properties": {"tags": {"type": "array", "maxItems": 3, "minItems": 1}}});
        let native = provider("kind = \"anthropic\"\nmodel = \"m\"\n");
        assert_eq!(
            paths(&lint(&schema, &native)),
            ["/properties/tags/maxItems"]
        );
        let tool = provider("kind = \"anthropic\"\nmodel = \"m\"\nstructured_output = \"tool\"\n");
        assert!(lint(&schema, &tool).is_empty());
    }

    #[test]
    fn tool_parameters_are_held_to_the_vendors_declaration_dialect() {
        let params = json!({"type": "object", "properties": {"id": {"type": "string"}},
            "additionalProperties": false});
        let openai = provider("kind = \"openai\"\nmodel = \"m\"\n");
        // A non-strict OpenAI function takes any schema; a strict one, all-required.
        assert!(lint_tool(&params, false, &openai).is_empty());
        assert_eq!(
            paths(&lint_tool(&params, true, &openai)),
            ["/properties/id"]
        );
        let gemini = provider(
            "kind = \"gemini\"\nmodel = \"m\"\n[gemini]\nschema_field = \"responseSchema\"\n",
        );
        assert_eq!(
            paths(&lint_tool(&params, false, &gemini)),
            ["/additionalProperties"]
        );
        let anthropic = provider("kind = \"anthropic\"\nmodel = \"m\"\n");
        assert!(lint_tool(&params, false, &anthropic).is_empty());
    }

    #[test]
    fn simulations_and_schema_less_modes_are_not_linted() {
        let schema = json!({"type": "object", "properties": {"a": {}}});
        let sim = provider(
            "kind = \"sim\"\nmodel = \"m\"\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\n",
        );
        assert!(lint(&schema, &sim).is_empty());
        let prompt = provider("kind = \"openai\"\nmodel = \"m\"\nstructured_output = \"prompt\"\n");
        assert!(lint(&schema, &prompt).is_empty());
    }
}
