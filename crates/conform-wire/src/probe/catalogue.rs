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

fn probe(
    keyword: &'static str,
    value: Value,
    breaking: Value,
    keeping: Value,
    plain: &'static str,
) -> Probe {
    Probe {
        keyword,
        value,
        breaking,
        keeping,
        plain,
    }
}

/// Every keyword that can be probed, in a fixed order.
pub fn all() -> Vec<Probe> {
    vec![
        probe(
            "minItems",
            json!({"type": "array", "items": {"type": "string"}, "minItems": 3}),
            json!(["red"]),
            json!(["red", "green", "blue"]),
            "a list of the colours of a ripe tomato, one word per colour",
        ),
        probe(
            "maxItems",
            json!({"type": "array", "items": {"type": "string"}, "maxItems": 2}),
            json!(["a", "b", "c", "d"]),
            json!(["a", "b"]),
            "a list of the first four letters of the alphabet, one letter per item",
        ),
        probe(
            "minLength",
            json!({"type": "string", "minLength": 12}),
            json!("ok"),
            json!("okay, agreed"),
            "the two-letter word \"ok\"",
        ),
        probe(
            "maxLength",
            json!({"type": "string", "maxLength": 5}),
            json!("international"),
            json!("intl"),
            "the English word \"international\"",
        ),
        probe(
            "minimum",
            json!({"type": "integer", "minimum": 100}),
            json!(8),
            json!(100),
            "the number of legs of a spider, as an integer",
        ),
        probe(
            "maximum",
            json!({"type": "integer", "maximum": 10}),
            json!(365),
            json!(10),
            "the number of days in a common year, as an integer",
        ),
        probe(
            "exclusiveMinimum",
            json!({"type": "number", "exclusiveMinimum": 0}),
            json!(-5),
            json!(5),
            "the number minus five",
        ),
        probe(
            "exclusiveMaximum",
            json!({"type": "number", "exclusiveMaximum": 1}),
            json!(2),
            json!(0.5),
            "the number two",
        ),
        probe(
            "multipleOf",
            json!({"type": "integer", "multipleOf": 5}),
            json!(7),
            json!(5),
            "the number seven, as an integer",
        ),
        probe(
            "pattern",
            json!({"type": "string", "pattern": "^[A-Z]{3}$"}),
            json!("euro"),
            json!("EUR"),
            "the word \"euro\", in lower case",
        ),
        probe(
            "enum",
            json!({"type": "string", "enum": ["low", "medium", "high"]}),
            json!("urgent"),
            json!("high"),
            "the word \"urgent\"",
        ),
        probe(
            "const",
            json!({"type": "string", "const": "v1"}),
            json!("v2"),
            json!("v1"),
            "the version label \"v2\"",
        ),
        probe(
            "uniqueItems",
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
            json!(["a", "a"]),
            json!(["a", "b"]),
            "a list holding the letter \"a\" twice",
        ),
        probe(
            "format",
            json!({"type": "string", "format": "date"}),
            json!("next Tuesday"),
            json!("2026-01-06"),
            "the words \"next Tuesday\"",
        ),
        probe(
            "minProperties",
            json!({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 2}),
            json!({"a": "x"}),
            json!({"a": "x", "b": "y"}),
            "an object that maps the letter \"a\" to \"x\", and nothing else",
        ),
        probe(
            "maxProperties",
            json!({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}),
            json!({"a": "x", "b": "y"}),
            json!({"a": "x"}),
            "an object that maps \"a\" to \"x\" and \"b\" to \"y\"",
        ),
        probe(
            "additionalProperties",
            json!({"type": "object", "properties": {"name": {"type": "string"}},
                   "required": ["name"], "additionalProperties": false}),
            json!({"name": "Ada", "born": "1815"}),
            json!({"name": "Ada"}),
            "an object giving the name \"Ada\" and the year born \"1815\"",
        ),
        probe(
            "required",
            json!({"type": "object", "properties": {"name": {"type": ["string", "null"]},
                   "born": {"type": ["string", "null"]}}, "required": ["name", "born"],
                   "additionalProperties": false}),
            json!({"name": "Ada"}),
            json!({"name": "Ada", "born": null}),
            "an object giving only the name \"Ada\"",
        ),
    ]
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
