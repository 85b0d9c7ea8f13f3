//! A Hugging Face chat template, rendered the way transformers renders it.
//!
//! transformers compiles `chat_template` in a Jinja2 sandbox with `trim_blocks` and
//! `lstrip_blocks`, the loop-controls extension, its own `tojson` (Python's
//! `json.dumps`: `", "` and `": "` separators, no HTML escaping, keys in insertion
//! order, `ensure_ascii=False`), and the globals `raise_exception` and
//! `strftime_now`; it renders with `messages`, `tools`, `documents`,
//! `add_generation_prompt` and the special tokens (`bos_token`, `eos_token` …).
//! minijinja with Python string methods (minijinja-contrib `pycompat`) and these
//! additions gives byte-identical text (tested against Jinja2's renderings in
//! `tests/templates/`).

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value as JValue};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::Value;

const NAME: &str = "chat_template";

/// A compiled chat template and the special tokens it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// `bos_token`, `eos_token`, `unk_token`, `pad_token` … as transformers passes them.
    special: BTreeMap<String, String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `special` maps `bos_token` etc. to their text.
    pub fn new(source: &str, special: BTreeMap<String, String>) -> Result<ChatTemplate, Error> {
        let mut env = Environment::new();
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_string())?;
        Ok(ChatTemplate { env, special })
    }

    /// Renders `messages` (an array of `{role, content, …}`), with `tools` when given.
    pub fn render(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        let template = self.env.get_template(NAME)?;
        let mut ctx: BTreeMap<&str, JValue> = BTreeMap::new();
        for (k, v) in &self.special {
            ctx.insert(k, JValue::from(v.as_str()));
        }
        ctx.insert("messages", JValue::from(Serde(messages)));
        ctx.insert(
            "tools",
            tools.map_or(JValue::from(()), |t| JValue::from(Serde(t))),
        );
        ctx.insert("documents", JValue::from(()));
        ctx.insert("add_generation_prompt", JValue::from(add_generation_prompt));
        template.render(ctx)
    }
}

/// `raise_exception(message)`: templates call it to refuse a conversation they cannot
/// format (a tool message without a tool call, roles out of order …).
fn raise_exception(message: String) -> Result<JValue, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC time, for templates that print today's date.
fn strftime_now(format: String) -> Result<String, Error> {
    Ok(strftime(time::OffsetDateTime::now_utc(), &format))
}

/// The subset of C `strftime` that chat templates use.
pub fn strftime(t: time::OffsetDateTime, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let month = MONTHS[usize::from(u8::from(t.month())) - 1];
    let day = DAYS[usize::from(t.weekday().number_days_from_monday())];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{:02}", t.day())),
            Some('m') => out.push_str(&format!("{:02}", u8::from(t.month()))),
            Some('Y') => out.push_str(&t.year().to_string()),
            Some('y') => out.push_str(&format!("{:02}", t.year().rem_euclid(100))),
            Some('H') => out.push_str(&format!("{:02}", t.hour())),
            Some('M') => out.push_str(&format!("{:02}", t.minute())),
            Some('S') => out.push_str(&format!("{:02}", t.second())),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&day[..3]),
            Some('A') => out.push_str(day),
            Some('j') => out.push_str(&format!("{:03}", t.ordinal())),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`.
fn tojson(value: JValue, kwargs: Kwargs) -> Result<String, Error> {
    let indent: Option<JValue> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(usize::try_from(n).unwrap_or(0))),
            None => v.as_str().map(str::to_string),
        },
    };
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be (item_separator, key_separator)",
            ));
        }
        // Python drops the space after "," when indenting.
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let style = Style {
        indent,
        item_sep,
        key_sep,
        ensure_ascii: ensure_ascii.unwrap_or(false),
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&json, 0, &mut out);
    Ok(out)
}

/// Python's `json.dumps` layout.
pub struct Style {
    /// The indentation of a nested level; `None` puts everything on one line.
    pub indent: Option<String>,
    /// What goes between items: Python's `", "`.
    pub item_sep: String,
    /// What goes between a key and its value: Python's `": "`.
    pub key_sep: String,
    /// Whether non-ASCII characters are written as `\uXXXX` escapes.
    pub ensure_ascii: bool,
    /// Whether objects are written with their keys sorted.
    pub sort_keys: bool,
}

impl Style {
    /// `json.dumps(value)` with Python's defaults, as transformers calls it.
    pub fn python_default() -> Style {
        Style {
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            ensure_ascii: false,
            sort_keys: false,
        }
    }

    /// Appends `value` at nesting `level` to `out`, as `json.dumps` lays it out.
    pub fn write(&self, value: &Value, level: usize, out: &mut String) {
        match value {
            Value::Array(items) if !items.is_empty() => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separate(i, level + 1, out);
                    self.write(item, level + 1, out);
                }
                self.close(level, out);
                out.push(']');
            }
            Value::Object(map) if !map.is_empty() => {
                out.push('{');
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    self.separate(i, level + 1, out);
                    self.string(k, out);
                    out.push_str(&self.key_sep);
                    self.write(v, level + 1, out);
                }
                self.close(level, out);
                out.push('}');
            }
            Value::Array(_) => out.push_str("[]"),
            Value::Object(_) => out.push_str("{}"),
            Value::String(s) => self.string(s, out),
            other => out.push_str(&other.to_string()),
        }
    }

    fn separate(&self, i: usize, level: usize, out: &mut String) {
        if i > 0 {
            out.push_str(&self.item_sep);
        }
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level));
        }
    }

    fn close(&self, level: usize, out: &mut String) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level));
        }
    }

    fn string(&self, s: &str, out: &mut String) {
        // serde_json escapes exactly what Python escapes with ensure_ascii=False:
        // `"`, `\`, \b \f \n \r \t, and other control characters as \u00XX.
        let quoted = serde_json::to_string(s).unwrap_or_default();
        if !self.ensure_ascii {
            out.push_str(&quoted);
            return;
        }
        for c in quoted.chars() {
            if c.is_ascii() && c != '\x7f' {
                out.push(c);
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dumps(v: &Value, style: &Style) -> String {
        let mut out = String::new();
        style.write(v, 0, &mut out);
        out
    }

    #[test]
    fn python_layout_no_html_escaping_insertion_order() {
        let v = json!({"z": "<b>&'é\n", "a": [1, 2.5, null, true], "e": {}});
        assert_eq!(
            dumps(&v, &Style::python_default()),
            r#"{"z": "<b>&'é\n", "a": [1, 2.5, null, true], "e": {}}"#
        );
        let style = Style {
            indent: Some("  ".into()),
            item_sep: ",".into(),
            key_sep: ": ".into(),
            ensure_ascii: true,
            sort_keys: true,
        };
        assert_eq!(
            dumps(&json!({"b": ["é😀"], "a": 1}), &style),
            "{\n  \"a\": 1,\n  \"b\": [\n    \"\\u00e9\\ud83d\\ude00\"\n  ]\n}"
        );
    }

    #[test]
    fn raise_exception_fails_the_render_with_its_message() {
        let t = ChatTemplate::new(
            "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
            BTreeMap::new(),
        )
        .unwrap();
        let err = t
            .render(&json!([{"role": "system", "content": "x"}]), None, true)
            .unwrap_err();
        assert!(err.to_string().contains("first must be user"), "{err}");
        assert_eq!(
            t.render(&json!([{"role": "user", "content": "x"}]), None, true)
                .unwrap(),
            "ok"
        );
    }

    #[test]
    fn strftime_formats_what_templates_use() {
        let t = time::macros::datetime!(2024-07-26 09:05:03 UTC);
        assert_eq!(strftime(t, "%d %b %Y"), "26 Jul 2024");
        assert_eq!(strftime(t, "%A %B %H:%M:%S %%"), "Friday July 09:05:03 %");
    }
}
