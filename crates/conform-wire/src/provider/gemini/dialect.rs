//! Gemini's two schema fields: `responseSchema`, an OpenAPI 3.0 subset whose unknown
//! keywords are a 400 "Unknown name" (`additionalProperties`, `$ref`, `const` …) and
//! whose type lists other than `["T", "null"]` have no translation; and
//! `responseJsonSchema`, whose keywords outside the documented subset are not enforced
//! (a warning: conform's own schema check still enforces them). Function declarations are
//! held to the same field's dialect.

use serde_json::Value;

use crate::provider::dialect::{Dialect, Incompatibility, Severity, escape, push};

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

/// `responseSchema`.
pub(crate) struct ResponseSchema;

impl Dialect for ResponseSchema {
    fn name(&self) -> &'static str {
        "Gemini responseSchema (an OpenAPI subset)"
    }

    fn node(&self, node: &Value, path: &str, found: &mut Vec<Incompatibility>) {
        let Some(map) = node.as_object() else {
            return;
        };
        let name = self.name();
        for (key, value) in map {
            // The adapter strips the root `$schema` before sending.
            if path.is_empty() && key == "$schema" {
                continue;
            }
            if key == "type" && !type_translates(value) {
                push(
                    found,
                    Severity::Rejected,
                    format!("{path}/type"),
                    format!(
                        "{name} takes one type per schema (or [\"T\", \"null\"], sent as `nullable`): use anyOf"
                    ),
                );
            } else if key == "items" && value.is_array() {
                push(
                    found,
                    Severity::Rejected,
                    format!("{path}/items"),
                    format!("{name} has no tuple `items`"),
                );
            } else if !GEMINI_OPENAPI_FIELDS.contains(&key.as_str()) {
                push(
                    found,
                    Severity::Rejected,
                    format!("{path}/{}", escape(key)),
                    format!(
                        "{name} rejects `{key}` (400 \"Unknown name\"): drop it, or set [gemini] schema_field = \"responseJsonSchema\""
                    ),
                );
            }
        }
    }
}

/// `responseJsonSchema`.
pub(crate) struct ResponseJsonSchema;

impl Dialect for ResponseJsonSchema {
    fn name(&self) -> &'static str {
        "Gemini responseJsonSchema"
    }

    fn node(&self, node: &Value, path: &str, found: &mut Vec<Incompatibility>) {
        let Some(map) = node.as_object() else {
            return;
        };
        for key in map.keys() {
            if (path.is_empty() && key == "$schema")
                || GEMINI_JSON_SCHEMA_KEYWORDS.contains(&key.as_str())
            {
                continue;
            }
            push(
                found,
                Severity::Ignored,
                format!("{path}/{}", escape(key)),
                format!(
                    "`{key}` is outside the keywords {} documents: the provider may not enforce it (conform's schema check still does)",
                    self.name()
                ),
            );
        }
    }
}

/// Whether the Gemini adapter can send this `type`: a string, or a string and "null".
fn type_translates(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(types) => {
            let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
            non_null.len() == 1 && non_null[0].is_string() && non_null.len() < types.len()
        }
        _ => false,
    }
}
