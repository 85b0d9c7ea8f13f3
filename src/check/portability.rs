//! Schema portability pre-flight: which features of a suite's schema a provider's
//! structured-output mode rejects (a 400 on every call) or does not enforce, found
//! statically, with the JSON path, before any token is spent.
//!
//! The modes and their rules:
//! - OpenAI strict mode (`openai` and `openai-compatible` with `json_schema` or `tool`:
//!   the request says `strict: true`): the root is an object, every object has
//!   `additionalProperties: false`, every property is in `required` (an optional field
//!   is written required and nullable).
//! - Gemini `responseSchema` (an OpenAPI 3.0 subset): any keyword outside its `Schema`
//!   fields is a 400 "Unknown name" (`additionalProperties`, `$ref`, `const`,
//!   `propertyNames` …); a type list other than `["T", "null"]` has no translation.
//! - Gemini `responseJsonSchema`: keywords outside its documented subset are not
//!   enforced (a warning: conform's own schema check still enforces them).
//! - Anthropic `output_config.format`: numeric bounds, string lengths, `maxItems`,
//!   `minItems` above 1 and `additionalProperties` other than `false` are a 400.
//!
//! Simulated providers accept any schema and are not linted; neither are modes that
//! send no schema (`json_object`, `prompt`), Anthropic's non-strict forced tool, or
//! Ollama, whose grammar compiler has no documented subset.

use serde_json::Value;

use crate::config::provider::GeminiSchemaField;
use crate::config::{Kind, ProviderConfig, StructuredOutput};

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
    pub severity: Severity,
    /// JSON pointer into the schema file.
    pub path: String,
    pub message: String,
}

/// A structured-output mode with a known schema dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    OpenAiStrict,
    GeminiResponseSchema,
    GeminiResponseJsonSchema,
    AnthropicOutputConfig,
}

impl Mode {
    fn of(provider: &ProviderConfig) -> Option<Mode> {
        if provider.kind == Kind::Sim {
            return None;
        }
        use StructuredOutput::{JsonSchema, Tool};
        match (provider.wire_kind(), provider.structured_output) {
            // The Responses API says `strict: true` for the answer's format and a forced
            // function alike.
            (Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses, JsonSchema | Tool) => {
                Some(Mode::OpenAiStrict)
            }
            (Kind::Gemini, JsonSchema | Tool) => {
                Some(match provider.gemini_options().schema_field {
                    GeminiSchemaField::ResponseSchema => Mode::GeminiResponseSchema,
                    GeminiSchemaField::ResponseJsonSchema => Mode::GeminiResponseJsonSchema,
                })
            }
            (Kind::Anthropic, JsonSchema) => Some(Mode::AnthropicOutputConfig),
            _ => None,
        }
    }

    /// The dialect a tool's `parameters` is held to: what a strict function (OpenAI,
    /// Anthropic strict tool use) accepts, or Gemini's declaration field.
    fn for_tool(provider: &ProviderConfig, strict: bool) -> Option<Mode> {
        if provider.kind == Kind::Sim {
            return None;
        }
        match provider.wire_kind() {
            Kind::Openai | Kind::OpenaiCompatible | Kind::OpenaiResponses if strict => {
                Some(Mode::OpenAiStrict)
            }
            Kind::Anthropic if strict => Some(Mode::AnthropicOutputConfig),
            Kind::Gemini => Some(match provider.gemini_options().schema_field {
                GeminiSchemaField::ResponseSchema => Mode::GeminiResponseSchema,
                GeminiSchemaField::ResponseJsonSchema => Mode::GeminiResponseJsonSchema,
            }),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::OpenAiStrict => "OpenAI strict mode",
            Mode::GeminiResponseSchema => "Gemini responseSchema (an OpenAPI subset)",
            Mode::GeminiResponseJsonSchema => "Gemini responseJsonSchema",
            Mode::AnthropicOutputConfig => "Anthropic output_config.format",
        }
    }
}

/// The `Schema` fields Gemini's `responseSchema` knows.
const GEMINI_OPENAPI_FIELDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// The keywords Gemini documents for `responseJsonSchema`.
const GEMINI_JSON_SCHEMA_KEYWORDS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

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

/// Every incompatibility of `schema` with `provider`'s structured-output mode, in
/// document order; empty when the mode has no known dialect.
pub fn lint(schema: &Value, provider: &ProviderConfig) -> Vec<Incompatibility> {
    match Mode::of(provider) {
        Some(mode) => lint_as(schema, mode),
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
    match Mode::for_tool(provider, strict) {
        Some(mode) => lint_as(parameters, mode),
        None => Vec::new(),
    }
}

fn lint_as(schema: &Value, mode: Mode) -> Vec<Incompatibility> {
    let mut found = Vec::new();
    if mode == Mode::OpenAiStrict && !is_object_type(schema) {
        found.push(Incompatibility {
            severity: Severity::Rejected,
            path: "/type".into(),
            message: format!(
                "{} needs an object at the root (`\"type\": \"object\"`)",
                mode.name()
            ),
        });
    }
    walk(schema, "", true, &mut |node, path| {
        node_rules(mode, node, path, &mut found)
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

fn node_rules(mode: Mode, node: &Value, path: &str, found: &mut Vec<Incompatibility>) {
    let Some(map) = node.as_object() else {
        return;
    };
    let root = path.is_empty();
    let mut push = |severity, at: String, message: String| {
        found.push(Incompatibility {
            severity,
            path: if at.is_empty() { "/".into() } else { at },
            message,
        })
    };
    let name = mode.name();
    match mode {
        Mode::OpenAiStrict => {
            if is_object_node(node) && map.get("additionalProperties") != Some(&Value::Bool(false))
            {
                push(
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
                        Severity::Rejected,
                        format!("{path}/properties/{}", escape(key)),
                        format!(
                            "{name} needs every property in `required`: `{key}` is optional; make it required and nullable (`\"type\": [\"…\", \"null\"]`)"
                        ),
                    );
                }
            }
        }
        Mode::GeminiResponseSchema => {
            for (key, value) in map {
                // The adapter strips the root `$schema` before sending.
                if root && key == "$schema" {
                    continue;
                }
                if key == "type" && !gemini_type_translates(value) {
                    push(
                        Severity::Rejected,
                        format!("{path}/type"),
                        format!(
                            "{name} takes one type per schema (or [\"T\", \"null\"], sent as `nullable`): use anyOf"
                        ),
                    );
                } else if key == "items" && value.is_array() {
                    push(
                        Severity::Rejected,
                        format!("{path}/items"),
                        format!("{name} has no tuple `items`"),
                    );
                } else if !GEMINI_OPENAPI_FIELDS.contains(&key.as_str()) {
                    push(
                        Severity::Rejected,
                        format!("{path}/{}", escape(key)),
                        format!(
                            "{name} rejects `{key}` (400 \"Unknown name\"): drop it, or set [gemini] schema_field = \"responseJsonSchema\""
                        ),
                    );
                }
            }
        }
        Mode::GeminiResponseJsonSchema => {
            for key in map.keys() {
                if (root && key == "$schema") || GEMINI_JSON_SCHEMA_KEYWORDS.contains(&key.as_str())
                {
                    continue;
                }
                push(
                    Severity::Ignored,
                    format!("{path}/{}", escape(key)),
                    format!(
                        "`{key}` is outside the keywords {name} documents: the provider may not enforce it (conform's schema check still does)"
                    ),
                );
            }
        }
        Mode::AnthropicOutputConfig => {
            for (key, value) in map {
                let at = format!("{path}/{}", escape(key));
                let rejected = ANTHROPIC_REJECTED.contains(&key.as_str())
                    || (key == "minItems" && value.as_u64().is_some_and(|n| n > 1))
                    || (key == "additionalProperties" && value != &Value::Bool(false))
                    || (key == "$ref" && value.as_str().is_some_and(|r| !r.starts_with('#')));
                if rejected {
                    push(
                        Severity::Rejected,
                        at,
                        format!(
                            "{name} rejects `{key}: {value}` with a 400: drop it, or use structured_output = \"tool\""
                        ),
                    );
                }
            }
            if is_object_node(node) && !map.contains_key("additionalProperties") {
                push(
                    Severity::Rejected,
                    format!("{path}/additionalProperties"),
                    format!("{name} needs `additionalProperties: false` on every object"),
                );
            }
        }
    }
}

fn is_object_type(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "object",
        _ => false,
    }
}

/// A schema that describes an object: typed so, or with properties.
fn is_object_node(node: &Value) -> bool {
    let typed = match node.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => false,
    };
    typed || node.get("properties").is_some()
}

/// Whether the Gemini adapter can send this `type`: a string, or a string and "null".
fn gemini_type_translates(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(types) => {
            let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
            non_null.len() == 1 && non_null[0].is_string() && non_null.len() < types.len()
        }
        _ => false,
    }
}

/// RFC 6901 escaping of one pointer segment.
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
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
