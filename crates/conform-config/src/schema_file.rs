//! A suite's `schema.json`: whether it is a JSON Schema (draft 2020-12), and if not,
//! where in the user's file each problem is.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::diagnostic::{Diagnostic, Diagnostics};
use super::json_position::pointer_offset;

/// Every problem of `schema` (parsed from `source`, the text of `file`), one per
/// offending keyword: the field is the JSON pointer into the user's schema (not into the
/// meta-schema), and the line and column are those of the keyword in the file. Empty when
/// the schema compiles.
pub fn problems(file: &Path, source: &str, schema: &Value) -> Diagnostics {
    let mut out = Diagnostics::default();
    for (pointer, message) in pointer_problems(schema) {
        out.push(at_pointer(file, source, &pointer, message));
    }
    out
}

/// Every problem of `schema` as `(JSON pointer into the schema, message)`, one per
/// offending keyword; empty when it compiles. For schemas that live inside another file
/// (a tool's `parameters`), whose caller prefixes the pointer.
pub fn pointer_problems(schema: &Value) -> Vec<(String, String)> {
    let meta = jsonschema::draft202012::meta::validator();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for error in meta.iter_errors(schema) {
        let pointer = error.instance_path().to_string();
        let message = plainer(&pointer, error.to_string());
        if seen.insert((pointer.clone(), message.clone())) {
            out.push((
                pointer,
                format!("not a valid JSON Schema (draft 2020-12): {message}"),
            ));
        }
    }
    // What the meta-schema allows can still fail to compile: a `pattern` that is not a
    // regular expression, a `$ref` to nowhere.
    if out.is_empty()
        && let Err(error) = jsonschema::draft202012::new(schema)
    {
        out.push((
            error.instance_path().to_string(),
            format!("the JSON Schema does not compile: {error}"),
        ));
    }
    out
}

/// The meta-schema says a bad `type` fails "any of the schemas listed in the 'anyOf'
/// keyword"; a person needs the allowed names.
fn plainer(pointer: &str, message: String) -> String {
    let mut tokens = pointer.rsplit('/');
    let keyword = tokens.next();
    let parent = tokens.next().unwrap_or_default();
    let names_a_schema = matches!(
        parent,
        "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas"
    );
    if keyword == Some("type") && !names_a_schema && message.contains("'anyOf'") {
        format!(
            "{message}: `type` is one of \"array\", \"boolean\", \"integer\", \"null\", \
             \"number\", \"object\", \"string\", or a list of them"
        )
    } else {
        message
    }
}

fn at_pointer(file: &Path, source: &str, pointer: &str, message: String) -> Diagnostic {
    let field = if pointer.is_empty() { "/" } else { pointer };
    let d = Diagnostic::new(file, message).field(field);
    match pointer_offset(source, pointer) {
        Some(offset) => d.at_span(source, Some(offset..offset)),
        None => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(source: &str) -> Vec<String> {
        let schema: Value = serde_json::from_str(source).unwrap();
        problems(Path::new("fixtures/s/schema.json"), source, &schema)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_valid_schema_has_no_problems() {
        assert!(
            problems_of(r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#)
                .is_empty()
        );
    }

    #[test]
    fn every_bad_keyword_is_placed_in_the_users_schema() {
        let source = r#"{
  "type": "object",
  "properties": {
    "total": {"type": "nubmer"},
    "tags": {"type": "array", "minItems": -1}
  },
  "required": "total"
}"#;
        let found = problems_of(source);
        let expected = [
            "fixtures/s/schema.json:4:15: /properties/total/type: ",
            "fixtures/s/schema.json:5:31: /properties/tags/minItems: ",
            "fixtures/s/schema.json:7:3: /required: ",
        ];
        for prefix in expected {
            assert!(
                found.iter().any(|f| f.starts_with(prefix)),
                "no problem at {prefix}: {found:#?}"
            );
        }
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        assert!(
            found
                .iter()
                .any(|f| f.contains("/properties/total/type: ") && f.contains("`type` is one of")),
            "{found:#?}"
        );
        for f in &found {
            assert!(!f.contains("anyOf/"), "the meta-schema's path leaked: {f}");
            assert!(!f.contains("/properties/type/"), "{f}");
        }
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_placed_too() {
        let source = "{\n  \"type\": \"string\",\n  \"pattern\": \"([a-z\"\n}";
        let found = problems_of(source);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("fixtures/s/schema.json:3:3: /pattern: "),
            "{found:#?}"
        );
    }
}
