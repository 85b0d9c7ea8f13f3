//! Redaction on the way in: e-mail addresses, phone numbers and card numbers (those that
//! pass the Luhn check) by default, the user's own regular expressions, and values at jq
//! paths of each request. Every value found is replaced by a placeholder (`<EMAIL_1>`,
//! `<PHONE_1>`, `<CARD_1>`, `<REDACTED_1>`) that is stable within a case: the same
//! address in the question and in the recorded answer becomes the same placeholder, so
//! the case still means what it meant.

use std::collections::HashMap;

use regex::Regex;
use serde_json::Value;

use super::ImportError;

/// What to redact; compiled once per import.
pub struct Rules {
    defaults: bool,
    email: Regex,
    card: Regex,
    phone: Regex,
    custom: Vec<Regex>,
    paths: Vec<(String, conform_check::check::rules::JqFilter)>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("defaults", &self.defaults)
            .field("custom", &self.custom)
            .field(
                "paths",
                &self.paths.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Which kind of value a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Email,
    Phone,
    Card,
    Custom,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Email => "EMAIL",
            Kind::Phone => "PHONE",
            Kind::Card => "CARD",
            Kind::Custom => "REDACTED",
        }
    }
}

impl Rules {
    /// `defaults`: e-mails, phones and cards; `regexes`: the user's patterns (each whole
    /// match is replaced); `paths`: jq paths into each request body.
    pub fn new(defaults: bool, regexes: &[String], paths: &[String]) -> Result<Rules, ImportError> {
        let custom = regexes
            .iter()
            .map(|r| {
                Regex::new(r).map_err(|e| ImportError::Option {
                    option: "--redact-regex",
                    value: r.clone(),
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let paths = paths
            .iter()
            .map(|p| {
                conform_check::check::rules::compile_path(p)
                    .map(|f| (p.clone(), f))
                    .map_err(|e| ImportError::Option {
                        option: "--redact-path",
                        value: p.clone(),
                        message: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // These patterns are constants: a failure to compile them is a bug caught by the
        // tests, and the fallback keeps the function total.
        let fixed = |re: &str| Regex::new(re).unwrap_or_else(|_| Regex::new("$^").expect("empty"));
        Ok(Rules {
            defaults,
            email: fixed(
                r"(?i)\b[a-z0-9._%+\-]+@[a-z0-9](?:[a-z0-9\-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-]*[a-z0-9])?)*\.[a-z]{2,}\b",
            ),
            // 13 to 19 digits, in groups split by single spaces or hyphens.
            card: fixed(r"\b\d(?:[ \-]?\d){12,18}\b"),
            // International (+ and 8 to 15 digits, grouped) or North American
            // ((555) 123-4567, 555-123-4567, 555.123.4567). Bare digit runs are left
            // alone: they are order numbers and amounts far more often than phones.
            phone: fixed(
                r"(?:\+\d{1,3}(?:[ .\-]?\(?\d{1,4}\)?){2,6}\d?|(?:\(\d{3}\)\s?|\b\d{3}[.\-])\d{3}[.\-]\d{4})\b",
            ),
            custom,
            paths,
        })
    }

    /// No redaction at all (`--no-redact` without patterns).
    pub fn is_empty(&self) -> bool {
        !self.defaults && self.custom.is_empty() && self.paths.is_empty()
    }

    /// A fresh placeholder table, for one case.
    pub fn case(&self) -> Redactor<'_> {
        Redactor {
            rules: self,
            seen: HashMap::new(),
            counts: HashMap::new(),
            replaced: 0,
        }
    }
}

/// Redacts the values of one case, keeping its placeholders stable.
pub struct Redactor<'a> {
    rules: &'a Rules,
    seen: HashMap<(Kind, String), String>,
    counts: HashMap<Kind, usize>,
    /// How many values were replaced.
    pub replaced: usize,
}

impl Redactor<'_> {
    /// Replaces the values at the user's jq paths of `body` (a request as logged).
    pub fn paths(&mut self, body: &mut Value) {
        for (_, filter) in &self.rules.paths {
            for path in conform_check::check::rules::paths_of(filter, body) {
                if let Some(slot) = pointer_mut(body, &path)
                    && !slot.is_null()
                {
                    let key = conform_config::digest::canonical(slot);
                    let placeholder = self.placeholder(Kind::Custom, key);
                    *slot = Value::String(placeholder);
                }
            }
        }
    }

    /// Redacts every string in `value` (not object keys).
    pub fn value(&mut self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Some(new) = self.text(s) {
                    *s = new;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.value(v)),
            _ => {}
        }
    }

    /// `text` with every finding replaced; `None` when nothing was found.
    pub fn text(&mut self, text: &str) -> Option<String> {
        let rules = self.rules;
        let mut out = std::borrow::Cow::Borrowed(text);
        for re in &rules.custom {
            out = self.replace(out, re, Kind::Custom, |m| Some(m.to_string()));
        }
        if rules.defaults {
            // Cards first: a grouped card number also looks like a phone number.
            out = self.replace(out, &rules.card, Kind::Card, |m| {
                let digits: String = m.chars().filter(char::is_ascii_digit).collect();
                luhn(&digits).then_some(digits)
            });
            out = self.replace(out, &rules.email, Kind::Email, |m| Some(m.to_lowercase()));
            out = self.replace(out, &rules.phone, Kind::Phone, |m| {
                let digits: String = m.chars().filter(char::is_ascii_digit).collect();
                (8..=15).contains(&digits.len()).then_some(digits)
            });
        }
        match out {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(s) => Some(s),
        }
    }

    /// Replaces each match that `key` accepts (giving the value's identity: the digits
    /// of a phone, the lower-cased address) by its placeholder.
    fn replace<'t>(
        &mut self,
        text: std::borrow::Cow<'t, str>,
        re: &Regex,
        kind: Kind,
        key: impl Fn(&str) -> Option<String>,
    ) -> std::borrow::Cow<'t, str> {
        let mut out = String::new();
        let mut last = 0;
        let mut changed = false;
        for m in re.find_iter(&text) {
            let Some(k) = key(m.as_str()) else { continue };
            out.push_str(&text[last..m.start()]);
            out.push_str(&self.placeholder(kind, k));
            last = m.end();
            changed = true;
        }
        if !changed {
            return text;
        }
        out.push_str(&text[last..]);
        std::borrow::Cow::Owned(out)
    }

    fn placeholder(&mut self, kind: Kind, key: String) -> String {
        self.replaced += 1;
        if let Some(p) = self.seen.get(&(kind, key.clone())) {
            return p.clone();
        }
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        let p = format!("<{}_{}>", kind.label(), n);
        self.seen.insert((kind, key), p.clone());
        p
    }
}

/// The slot at a jq path (object keys and array indices), if the value has one there.
fn pointer_mut<'v>(value: &'v mut Value, path: &[Value]) -> Option<&'v mut Value> {
    let mut at = value;
    for step in path {
        at = match (at, step) {
            (Value::Object(map), Value::String(k)) => map.get_mut(k)?,
            (Value::Array(items), Value::Number(n)) => {
                let i = n.as_i64()?;
                let len = items.len() as i64;
                let i = if i < 0 { len + i } else { i };
                items.get_mut(usize::try_from(i).ok()?)?
            }
            _ => return None,
        };
    }
    Some(at)
}

/// The Luhn checksum of a card number's digits.
pub fn luhn(digits: &str) -> bool {
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let d = d * 2;
                if d > 9 { d - 9 } else { d }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults() -> Rules {
        Rules::new(true, &[], &[]).unwrap()
    }

    #[test]
    fn emails_phones_and_cards_get_stable_placeholders() {
        let rules = defaults();
        let mut r = rules.case();
        let text = "Mail Ana.Lind@Example.co.uk or ana.lind@example.co.uk, call +46 8 555 012 34 \
                    or (555) 123-4567; card 4111 1111 1111 1111, order BR-10452, total 1234567890123.";
        let out = r.text(text).unwrap();
        assert_eq!(
            out,
            "Mail <EMAIL_1> or <EMAIL_1>, call <PHONE_1> or <PHONE_2>; card <CARD_1>, order BR-10452, total 1234567890123."
        );
        // The same value later in the case keeps its placeholder.
        assert_eq!(r.text("+46 8 555 01234").unwrap(), "<PHONE_1>");
        // A new case starts over.
        assert_eq!(rules.case().text("x@y.io").unwrap(), "<EMAIL_1>");
    }

    #[test]
    fn only_luhn_valid_card_numbers_are_cards() {
        assert!(luhn("4111111111111111"));
        assert!(luhn("5500005555555559"));
        assert!(!luhn("4111111111111112"));
        let rules = defaults();
        assert_eq!(rules.case().text("ref 4111-1111-1111-1112"), None);
        assert_eq!(
            rules.case().text("5500-0055-5555-5559").as_deref(),
            Some("<CARD_1>")
        );
    }

    #[test]
    fn dates_amounts_and_ids_are_left_alone() {
        let rules = defaults();
        for text in [
            "2024-08-06",
            "gpt-4o-2024-08-06",
            "1711652795",
            "total 89.90 EUR",
            "v1.2.3",
            "order 10452",
        ] {
            assert_eq!(rules.case().text(text), None, "{text}");
        }
    }

    #[test]
    fn user_patterns_and_jq_paths() {
        let rules = Rules::new(
            false,
            &[r"ACCT-\d+".into()],
            &[".metadata.customer".into(), ".messages[0].content".into()],
        )
        .unwrap();
        let mut r = rules.case();
        let mut body = json!({
            "metadata": {"customer": "Ana Lind"},
            "messages": [{"role": "user", "content": "I am Ana Lind"}, {"role": "user", "content": "ACCT-991 and ACCT-991"}]
        });
        r.paths(&mut body);
        r.value(&mut body);
        assert_eq!(body["metadata"]["customer"], "<REDACTED_1>");
        assert_eq!(body["messages"][0]["content"], "<REDACTED_2>");
        assert_eq!(
            body["messages"][1]["content"],
            "<REDACTED_3> and <REDACTED_3>"
        );
        // A path that is not there adds nothing.
        let mut other = json!({"messages": []});
        rules.case().paths(&mut other);
        assert_eq!(other, json!({"messages": []}));
    }

    #[test]
    fn bad_options_name_themselves() {
        let e = Rules::new(true, &["(".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--redact-regex `(`"), "{e}");
        let e = Rules::new(true, &[], &[".a[".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--redact-path `.a[`"), "{e}");
    }
}
