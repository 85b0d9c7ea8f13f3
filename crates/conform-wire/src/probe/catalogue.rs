//! One small probe per JSON Schema keyword: a schema that uses the keyword once (on the
//! answer's `value`), an answer that breaks it and one that keeps it, and two prompts.
//!
//! The *pushed* prompt asks for the breaking answer word for word: a provider that
//! enforces the keyword cannot give it, one that ignores or strips it gives it (the model
//! does what it is told). The *plain* prompt asks for the same content in words, without
//! dictating the JSON: a model that was shown the keyword (a provider that strips it into
//! the description) keeps it, one that never saw it (a provider that ignores it) does not.
//!
//! Every probe schema is otherwise what every strict mode accepts: an object root with
//! `additionalProperties: false` and every property required, so a rejection is the
//! keyword's.

use serde_json::{Value, json};

/// The probe of one keyword.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The JSON Schema keyword this probe tests.
    pub keyword: &'static str,
    /// The subschema of `value`, which uses the keyword.
    value: Value,
    /// An answer's `value` that breaks the keyword (and keeps everything else).
    pub breaking: Value,
    /// An answer's `value` that keeps it.
    pub keeping: Value,
    /// What the plain prompt asks `value` to be, in words (it describes `breaking`).
    plain: &'static str,
}

/// Which of a probe's two prompts a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Push {
    /// Dictates the breaking answer word for word.
    Pushed,
    /// Asks for the same content in words.
    Plain,
}

impl Probe {
    /// The schema sent: `{"value": …}`, required, nothing else allowed.
    pub fn schema(&self) -> Value {
        wrap(self.value.clone())
    }

    /// The schema without the keyword where the probe uses it: what a control request
    /// sends after a rejection, to tell a refused keyword from a refused request.
    pub fn schema_without_keyword(&self) -> Value {
        let mut value = self.value.clone();
        if let Some(map) = value.as_object_mut() {
            map.remove(self.keyword);
        }
        wrap(value)
    }

    /// The answer that breaks the keyword, as the pushed prompt dictates it.
    pub fn breaking_answer(&self) -> Value {
        json!({"value": self.breaking})
    }

    /// An answer that keeps the keyword.
    pub fn keeping_answer(&self) -> Value {
        json!({"value": self.keeping})
    }

    /// The user prompt of one of the probe's two requests.
    pub fn prompt(&self, push: Push) -> String {
        match push {
            Push::Pushed => format!(
                "This is a test of the response format. Reply with exactly this JSON object, \
                 character for character, and nothing else: {}",
                self.breaking_answer()
            ),
            Push::Plain => format!(
                "This is a test of the response format. Reply with a JSON object whose \
                 \"value\" is {}.",
                self.plain
            ),
        }
    }
}

fn wrap(value: Value) -> Value {
    json!({"type": "object", "properties": {"value": value}, "required": ["value"],
           "additionalProperties": false})
}

/// One row of the catalogue: the probe's schema and answers as JSON text.
struct Row {
    keyword: &'static str,
    value: &'static str,
    breaking: &'static str,
    keeping: &'static str,
    plain: &'static str,
}

/// The catalogue, a row per keyword, in the order [`all`] gives them.
const CATALOGUE: &[Row] = &[
    Row {
        keyword: "minItems",
        value: r#"{"type": "array", "items": {"type": "string"}, "minItems": 3}"#,
        breaking: r#"["red"]"#,
        keeping: r#"["red", "green", "blue"]"#,
        plain: "a list of the colours of a ripe tomato, one word per colour",
    },
    Row {
        keyword: "maxItems",
        value: r#"{"type": "array", "items": {"type": "string"}, "maxItems": 2}"#,
        breaking: r#"["a", "b", "c", "d"]"#,
        keeping: r#"["a", "b"]"#,
        plain: "a list of the first four letters of the alphabet, one letter per item",
    },
    Row {
        keyword: "minLength",
        value: r#"{"type": "string", "minLength": 12}"#,
        breaking: r#""ok""#,
        keeping: r#""okay, agreed""#,
        plain: "the two-letter word \"ok\"",
    },
    Row {
        keyword: "maxLength",
        value: r#"{"type": "string", "maxLength": 5}"#,
        breaking: r#""international""#,
        keeping: r#""intl""#,
        plain: "the English word \"international\"",
    },
    Row {
        keyword: "minimum",
        value: r#"{"type": "integer", "minimum": 100}"#,
        breaking: r#"8"#,
        keeping: r#"100"#,
        plain: "the number of legs of a spider, as an integer",
    },
    Row {
        keyword: "maximum",
        value: r#"{"type": "integer", "maximum": 10}"#,
        breaking: r#"365"#,
        keeping: r#"10"#,
        plain: "the number of days in a common year, as an integer",
    },
    Row {
        keyword: "exclusiveMinimum",
        value: r#"{"type": "number", "exclusiveMinimum": 0}"#,
        breaking: r#"-5"#,
        keeping: r#"5"#,
        plain: "the number minus five",
    },
    Row {
        keyword: "exclusiveMaximum",
        value: r#"{"type": "number", "exclusiveMaximum": 1}"#,
        breaking: r#"2"#,
        keeping: r#"0.5"#,
        plain: "the number two",
    },
    Row {
        keyword: "multipleOf",
        value: r#"{"type": "integer", "multipleOf": 5}"#,
        breaking: r#"7"#,
        keeping: r#"5"#,
        plain: "the number seven, as an integer",
    },
    Row {
        keyword: "pattern",
        value: r#"{"type": "string", "pattern": "^[A-Z]{3}$"}"#,
        breaking: r#""euro""#,
        keeping: r#""EUR""#,
        plain: "the word \"euro\", in lower case",
    },
    Row {
        keyword: "enum",
        value: r#"{"type": "string", "enum": ["low", "medium", "high"]}"#,
        breaking: r#""urgent""#,
        keeping: r#""high""#,
        plain: "the word \"urgent\"",
    },
    Row {
        keyword: "const",
        value: r#"{"type": "string", "const": "v1"}"#,
        breaking: r#""v2""#,
        keeping: r#""v1""#,
        plain: "the version label \"v2\"",
    },
    Row {
        keyword: "uniqueItems",
        value: r#"{"type": "array", "items": {"type": "string"}, "uniqueItems": true}"#,
        breaking: r#"["a", "a"]"#,
        keeping: r#"["a", "b"]"#,
        plain: "a list holding the letter \"a\" twice",
    },
    Row {
        keyword: "format",
        value: r#"{"type": "string", "format": "date"}"#,
        breaking: r#""next Tuesday""#,
        keeping: r#""2026-01-06""#,
        plain: "the words \"next Tuesday\"",
    },
    Row {
        keyword: "minProperties",
        value: r#"{"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 2}"#,
        breaking: r#"{"a": "x"}"#,
        keeping: r#"{"a": "x", "b": "y"}"#,
        plain: "an object that maps the letter \"a\" to \"x\", and nothing else",
    },
    Row {
        keyword: "maxProperties",
        value: r#"{"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}"#,
        breaking: r#"{"a": "x", "b": "y"}"#,
        keeping: r#"{"a": "x"}"#,
        plain: "an object that maps \"a\" to \"x\" and \"b\" to \"y\"",
    },
    Row {
        keyword: "additionalProperties",
        value: r#"{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false}"#,
        breaking: r#"{"name": "Ada", "born": "1815"}"#,
        keeping: r#"{"name": "Ada"}"#,
        plain: "an object giving the name \"Ada\" and the year born \"1815\"",
    },
    Row {
        keyword: "required",
        value: r#"{"type": "object", "properties": {"name": {"type": ["string", "null"]}, "born": {"type": ["string", "null"]}}, "required": ["name", "born"], "additionalProperties": false}"#,
        breaking: r#"{"name": "Ada"}"#,
        keeping: r#"{"name": "Ada", "born": null}"#,
        plain: "an object giving only the name \"Ada\"",
    },
];

/// JSON text of the catalogue (a test parses every row).
fn parsed(text: &str) -> Value {
    serde_json::from_str(text).expect("the probe catalogue is JSON")
}

/// Every keyword that can be probed, in a fixed order.
pub fn all() -> Vec<Probe> {
    CATALOGUE
        .iter()
        .map(|row| Probe {
            keyword: row.keyword,
            value: parsed(row.value),
            breaking: parsed(row.breaking),
            keeping: parsed(row.keeping),
            plain: row.plain,
        })
        .collect()
}

/// The probe of `keyword`, if it has one.
pub fn of(keyword: &str) -> Option<Probe> {
    all().into_iter().find(|p| p.keyword == keyword)
}

/// Which probe, and which of its prompts, a rendered user prompt is (for simulations).
pub fn recognize(user_prompt: &str) -> Option<(Probe, Push)> {
    all().into_iter().find_map(|p| {
        [Push::Pushed, Push::Plain]
            .into_iter()
            .find(|push| p.prompt(*push) == user_prompt)
            .map(|push| (p.clone(), push))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(schema: &Value, instance: &Value) -> bool {
        super::super::validator(schema)
            .map(|v| v.is_valid(instance))
            .unwrap_or(false)
    }

    #[test]
    fn each_probe_breaks_its_keyword_and_nothing_else() {
        for p in all() {
            let schema = p.schema();
            assert!(
                valid(&schema, &p.keeping_answer()),
                "{}: keeping",
                p.keyword
            );
            assert!(
                !valid(&schema, &p.breaking_answer()),
                "{}: breaking",
                p.keyword
            );
            // Without the keyword the breaking answer is fine: only the keyword breaks.
            assert!(
                valid(&p.schema_without_keyword(), &p.breaking_answer()),
                "{}: breaking without the keyword",
                p.keyword
            );
            assert!(
                schema.to_string().contains(&format!("\"{}\"", p.keyword)),
                "{}",
                p.keyword
            );
        }
    }

    #[test]
    fn prompts_are_recognized_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for p in all() {
            for push in [Push::Pushed, Push::Plain] {
                assert!(seen.insert(p.prompt(push)), "{} {push:?}", p.keyword);
                let (found, how) = recognize(&p.prompt(push)).unwrap();
                assert_eq!((found.keyword, how), (p.keyword, push));
            }
        }
        assert!(recognize("What is the invoice total?").is_none());
    }
}
