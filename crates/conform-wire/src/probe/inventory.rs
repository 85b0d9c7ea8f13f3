//! Which JSON Schema keywords a suite's schemas use, and where: what `conform probe`
//! probes and `conform check` warns about.

use std::path::PathBuf;

use serde_json::Value;

use conform_config::{Case, CaseRef, Suite};

/// A schema a suite sends to the provider, and where it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaSource {
    /// The schema itself.
    pub schema: Value,
    /// The file that holds it.
    pub file: PathBuf,
    /// JSON pointer to it in that file ("" when it is the whole file).
    pub pointer: String,
}

/// Every schema `suite` sends: its answer schema, the parameters of its tools, and those
/// of the tools its request-shaped cases declare themselves (a case that does not load
/// is `conform check`'s to report, and is passed over here).
pub fn suite_schemas(suite: &Suite) -> Vec<SchemaSource> {
    let mut found = own_schemas(suite);
    for case_ref in &suite.cases {
        let Ok(case) = case_ref.load() else { continue };
        found.extend(case_schemas(case_ref, &case));
    }
    found
}

/// The schemas `suite` sends whatever the case: its answer schema and the parameters of
/// its tools.
pub fn own_schemas(suite: &Suite) -> Vec<SchemaSource> {
    let mut found = vec![SchemaSource {
        schema: suite.schema.as_ref().clone(),
        file: suite.schema_file.clone(),
        pointer: String::new(),
    }];
    if let Some(file) = &suite.tools_file {
        for (i, tool) in suite.tools.iter().enumerate() {
            found.push(SchemaSource {
                schema: tool.parameters().clone(),
                file: file.clone(),
                pointer: format!("/{i}/function/parameters"),
            });
        }
    }
    found
}

/// The parameters of the tools `case` declares itself.
pub fn case_schemas(case_ref: &CaseRef, case: &Case) -> Vec<SchemaSource> {
    let tools = case.tools.iter().flatten().enumerate();
    tools
        .map(|(i, tool)| SchemaSource {
            schema: tool.parameters().clone(),
            file: case_ref.path(),
            pointer: format!("/tools/{i}/function/parameters"),
        })
        .collect()
}

/// One keyword as a schema uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// The keyword's name.
    pub keyword: String,
    /// JSON pointer to the keyword in its schema.
    pub path: String,
}

/// Every keyword of every subschema of `schema`, in document order, with its pointer.
pub fn uses(schema: &Value) -> Vec<Use> {
    let mut found = Vec::new();
    walk_keywords(schema, &mut |keyword, path| {
        found.push(Use {
            keyword: keyword.to_string(),
            path: path.to_string(),
        })
    });
    found
}

/// The distinct keywords of `schemas`, in the order they first appear.
pub fn keywords<'a>(schemas: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for schema in schemas {
        for u in uses(schema) {
            if !out.contains(&u.keyword) {
                out.push(u.keyword);
            }
        }
    }
    out
}

/// Calls `visit(keyword, pointer)` for every keyword of every subschema.
pub fn walk_keywords(schema: &Value, visit: &mut dyn FnMut(&str, &str)) {
    walk(schema, "", visit);
}

fn walk(node: &Value, path: &str, visit: &mut dyn FnMut(&str, &str)) {
    let Some(map) = node.as_object() else {
        return;
    };
    for (key, value) in map {
        let here = format!("{path}/{}", escape(key));
        visit(key, &here);
        match key.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                for (name, child) in value.as_object().into_iter().flatten() {
                    walk(child, &format!("{here}/{}", escape(name)), visit);
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                for (i, child) in value.as_array().into_iter().flatten().enumerate() {
                    walk(child, &format!("{here}/{i}"), visit);
                }
            }
            "items" if value.is_array() => {
                for (i, child) in value.as_array().into_iter().flatten().enumerate() {
                    walk(child, &format!("{here}/{i}"), visit);
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
            | "unevaluatedItems" => walk(value, &here, visit),
            _ => {}
        }
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

    #[test]
    fn keywords_are_found_in_nested_schemas_with_their_pointers() {
        let schema = json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1},
            "a/b": {"enum": [1, 2]}}});
        let found = uses(&schema);
        let at = |k: &str| {
            found
                .iter()
                .filter(|u| u.keyword == k)
                .map(|u| u.path.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(at("maxLength"), ["/properties/tags/items/maxLength"]);
        assert_eq!(at("minItems"), ["/properties/tags/minItems"]);
        assert_eq!(at("enum"), ["/properties/a~1b/enum"]);
        // A property named like a keyword is not a keyword.
        let named = json!({"properties": {"minimum": {"type": "number"}}});
        assert_eq!(keywords([&named]), ["properties", "type"]);
    }
}
