//! A suite's `system` and `user` templates, rendered without minijinja where what
//! minijinja would give is known at load.
//!
//! Most prompt templates are text with a few `{{ name }}` in it, filled with strings. Each
//! case is rendered twice (by the pre-flight and by its call), and minijinja's render
//! (its context built from the case's variables, its machine run, its output) was a
//! quarter of the pre-flight's instructions and a twentieth of a run's. What the
//! template's text is around each name is learnt from minijinja itself, once: the template
//! is rendered with a marker for every name, so its own handling of whitespace control
//! (`{{- name -}}`) and of a trailing newline is kept. Anything else (a block, a filter,
//! an expression, a variable that is not a string) is rendered by minijinja, case by case.

use std::collections::BTreeMap;

use minijinja::Environment;
use serde_json::{Map, Value};

/// One template, worked out at load.
#[derive(Debug, Clone)]
enum Quick {
    /// No template syntax: the same text for every case.
    Fixed(String),
    /// Text and `{{ name }}` only: `text[0]`, the string `names[0]`, `text[1]`, … .
    Slots {
        text: Vec<String>,
        names: Vec<String>,
    },
}

/// The suite's `system` and `user` templates that need no minijinja for a case whose
/// variables are strings.
#[derive(Debug, Clone, Default)]
pub(super) struct QuickTemplates {
    system: Option<Quick>,
    user: Option<Quick>,
}

impl QuickTemplates {
    /// Works out each template of `env` by its name; `system` and `user` are their
    /// sources.
    pub(super) fn of(env: &Environment<'_>, system: Option<&str>, user: Option<&str>) -> Self {
        QuickTemplates {
            system: system.and_then(|source| work_out(env, "system", source)),
            user: user.and_then(|source| work_out(env, "user", source)),
        }
    }

    /// Whether the template `name` is the same text for every case.
    #[cfg(test)]
    pub(super) fn is_fixed(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Quick::Fixed(_)))
    }

    /// What minijinja renders for the template `name` with `vars`, when that is known
    /// without it; `None` when minijinja must render it (and say what is wrong, if
    /// anything is).
    pub(super) fn render(&self, name: &str, vars: &Map<String, Value>) -> Option<String> {
        match self.get(name)? {
            Quick::Fixed(text) => Some(text.clone()),
            Quick::Slots { text, names } => {
                let mut values = Vec::with_capacity(names.len());
                for name in names {
                    match vars.get(name)? {
                        Value::String(value) => values.push(value.as_str()),
                        _ => return None,
                    }
                }
                let len = text.iter().map(String::len).sum::<usize>()
                    + values.iter().map(|v| v.len()).sum::<usize>();
                let mut out = String::with_capacity(len);
                for (piece, value) in text.iter().zip(&values) {
                    out.push_str(piece);
                    out.push_str(value);
                }
                if let Some(last) = text.last() {
                    out.push_str(last);
                }
                Some(out)
            }
        }
    }

    fn get(&self, name: &str) -> Option<&Quick> {
        match name {
            "system" => self.system.as_ref(),
            "user" => self.user.as_ref(),
            _ => None,
        }
    }
}

/// Whether a text holds template syntax at all.
pub(super) fn is_template(text: &str) -> bool {
    text.contains("{{") || text.contains("{%") || text.contains("{#")
}

/// Private-use characters around a name's number in the render that finds the text
/// between the names. A source that holds either is left to minijinja.
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

fn work_out(env: &Environment<'_>, name: &str, source: &str) -> Option<Quick> {
    let template = env.get_template(name).ok()?;
    if !is_template(source) {
        return template.render(()).ok().map(Quick::Fixed);
    }
    if source.contains([OPEN, CLOSE]) {
        return None;
    }
    let names = placeholders(source)?;
    let mut distinct: Vec<&str> = names.iter().map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let marker = |name: &str| {
        let n = distinct.binary_search(&name).unwrap_or_default();
        format!("{OPEN}{n}{CLOSE}")
    };
    let context: BTreeMap<&str, String> = distinct.iter().map(|n| (*n, marker(n))).collect();
    let marked = template.render(context).ok()?;
    // The markers must come back one for each name, in the source's order; a name that
    // minijinja reads as something else (`{{ true }}`, `{{ none }}`) leaves its own text.
    let mut text = Vec::with_capacity(names.len() + 1);
    let mut rest = marked.as_str();
    for name in &names {
        let (before, after) = rest.split_at(rest.find(OPEN)?);
        rest = after.strip_prefix(marker(name).as_str())?;
        text.push(before.to_string());
    }
    if rest.contains(OPEN) {
        return None;
    }
    text.push(rest.to_string());
    Some(Quick::Slots { text, names })
}

/// The names of a source whose only syntax is `{{ name }}` (with `-` for whitespace
/// control), in order; `None` for any other syntax.
fn placeholders(source: &str) -> Option<Vec<String>> {
    if source.contains("{%") || source.contains("{#") {
        return None;
    }
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("{{") {
        let inner = rest[at + 2..].strip_prefix('-').unwrap_or(&rest[at + 2..]);
        let inner = inner.trim_start_matches(is_space);
        let end = inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(inner.len());
        let (name, after) = inner.split_at(end);
        if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return None;
        }
        let after = after.trim_start_matches(is_space);
        let after = after.strip_prefix('-').unwrap_or(after);
        rest = after.strip_prefix("}}")?;
        names.push(name.to_string());
    }
    Some(names)
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::UndefinedBehavior;
    use proptest::prelude::*;

    fn env(user: &str) -> Option<Environment<'static>> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.add_template_owned("user", user.to_string()).ok()?;
        Some(env)
    }

    fn by_minijinja(env: &Environment<'_>, vars: &Map<String, Value>) -> Option<String> {
        env.get_template("user")
            .ok()?
            .render(minijinja::value::Serde(vars))
            .ok()
    }

    fn vars(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn names_are_filled_as_minijinja_fills_them() {
        let cases = [
            "Text: {{ text }}",
            "{{text}} and {{ text }} again, then {{ other }}.\n",
            "  {{- text -}}  \n\n {{other}}",
            "{{ text }}\n",
            "} }} { {{ text }}",
        ];
        let v = vars(&[
            ("text", Value::from("a {{ b }} \u{E000}0\u{E001} ü\n")),
            ("other", Value::from("")),
        ]);
        for source in cases {
            let env = env(source).expect("it parses");
            let quick = QuickTemplates::of(&env, None, Some(source));
            let rendered = quick.render("user", &v);
            assert!(rendered.is_some(), "{source:?} needs no minijinja");
            assert_eq!(rendered, by_minijinja(&env, &v), "{source:?}");
        }
    }

    #[test]
    fn anything_else_is_left_to_minijinja() {
        for source in [
            "{{ text | upper }}",
            "{% if text %}{{ text }}{% endif %}",
            "{# note #}{{ text }}",
            "{{ true }} {{ text }}",
            "{{ text.x }}",
            "{{ 'a' }}",
            "a \u{E000} {{ text }}",
        ] {
            let env = env(source).expect("it parses");
            let quick = QuickTemplates::of(&env, None, Some(source));
            let v = vars(&[("text", Value::from("t"))]);
            assert_eq!(quick.render("user", &v), None, "{source:?}");
        }
    }

    #[test]
    fn a_variable_that_is_not_a_string_or_is_missing_goes_to_minijinja() {
        let source = "n = {{ n }}";
        let env = env(source).expect("it parses");
        let quick = QuickTemplates::of(&env, None, Some(source));
        assert!(
            quick
                .render("user", &vars(&[("n", Value::from(0.1))]))
                .is_none()
        );
        assert!(quick.render("user", &vars(&[("n", Value::Null)])).is_none());
        assert!(quick.render("user", &vars(&[])).is_none());
        assert_eq!(
            quick.render("user", &vars(&[("n", Value::from("1"))])),
            Some("n = 1".to_string())
        );
    }

    #[test]
    fn text_without_syntax_is_rendered_once() {
        let source = "Label it: { \"label\": ... }\n";
        let env = env(source).expect("it parses");
        let quick = QuickTemplates::of(&env, None, Some(source));
        assert!(quick.is_fixed("user"));
        assert_eq!(
            quick.render("user", &vars(&[])),
            by_minijinja(&env, &vars(&[]))
        );
    }

    /// Text around names, and names, drawn from pieces that make syntax by accident too.
    fn template() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            "[a-z {}\\-\n\t.:é🙂]{0,6}",
            Just("{{ a }}".to_string()),
            Just("{{-b-}}".to_string()),
            Just("{{ a -}}".to_string()),
            Just("{{\nb }}".to_string()),
        ];
        prop::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => any::<String>().prop_map(Value::from),
            1 => any::<i64>().prop_map(Value::from),
            1 => any::<bool>().prop_map(Value::from),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn whatever_is_rendered_without_minijinja_is_what_minijinja_renders(
            source in template(),
            a in value(),
            b in value(),
        ) {
            let Some(env) = env(&source) else { return Ok(()) };
            let v = vars(&[("a", a), ("b", b)]);
            let quick = QuickTemplates::of(&env, None, Some(&source));
            if let Some(text) = quick.render("user", &v) {
                prop_assert_eq!(Some(text), by_minijinja(&env, &v));
            }
            // Text with no brace at all around string names is never left to minijinja.
            let plain = !source.replace("{{ a }}", "").replace("{{-b-}}", "")
                .replace("{{ a -}}", "").replace("{{\nb }}", "").contains(['{', '}']);
            let strings = v.values().all(Value::is_string);
            if plain && strings {
                prop_assert!(quick.render("user", &v).is_some(), "{:?}", source);
            }
        }
    }
}
