//! What a failed comparison shows: the values behind each worst case's disagreement.
//!
//! During the run a comparison keeps only digests (a few bytes an answer), so once the
//! run is over the answers of the worst cases, at most [`MAX_CASES`] per (suite,
//! candidate), are read back from `results.jsonl` (and a recorded reference from its
//! case file) and set beside each other per field: the reference's values and the
//! candidate's, and for the whole answer the JSON difference (`added /confidence: 0.93`).
//! Every report then shows them from the verdict's own `differential`.
//!
//! [`MAX_CASES`]: conform_check::check::differential::MAX_CASES

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::run::{PreparedSuite, RunResult};
use conform_check::check::differential::{
    ANSWER, FieldDisagreement, TOOL_CALL_ARGUMENTS, TOOL_CALL_MADE, TOOL_CALL_NAMES,
};

/// A value longer than this is cut, with `…`.
const MAX_VALUE: usize = 160;
/// Distinct values shown per side of a field.
const MAX_VALUES: usize = 3;
/// Lines of a whole answer's difference shown.
const MAX_DIFFERENCES: usize = 8;
/// Answers kept per (case, provider): enough to show how they vary.
const MAX_ANSWERS: usize = 8;

/// One answer as `results.jsonl` (or a recorded reference) holds it.
#[derive(Debug, Clone, Default)]
struct Answer {
    output: Option<String>,
    tool_calls: Vec<Call>,
}

#[derive(Debug, Clone)]
struct Call {
    name: String,
    arguments: Option<Value>,
}

type Key = (String, String, String);

/// Fills in the values of every worst case's disagreeing fields, reading the answers of
/// those cases back from the run's `results.jsonl`. Nothing is read when no comparison
/// has a disagreeing case; an unreadable file leaves the counts without values.
pub fn attach(result: &mut RunResult, suites: &[Arc<PreparedSuite>]) {
    let mut wanted: HashSet<Key> = HashSet::new();
    for v in &result.verdicts {
        let Some(d) = &v.tally.differential else {
            continue;
        };
        for row in &d.worst_cases {
            for provider in [&v.tally.provider, &d.reference] {
                wanted.insert((v.tally.suite.clone(), row.case.clone(), provider.clone()));
            }
        }
    }
    if wanted.is_empty() {
        return;
    }
    let mut answers: HashMap<Key, Vec<Answer>> = HashMap::new();
    let records = match crate::results::Records::open(&result.dir) {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("the values of the disagreeing cases could not be read: {e}");
            return;
        }
    };
    // A line that is not a call record has no answer to show: the reports say so elsewhere.
    for (_, record) in records.flatten() {
        let key = (record.suite, record.case, record.provider);
        if wanted.contains(&key) && record.output.is_some() {
            let kept = answers.entry(key).or_default();
            if kept.len() < MAX_ANSWERS {
                kept.push(Answer {
                    output: record.output,
                    tool_calls: (record.tool_calls.into_iter())
                        .map(|c| Call {
                            name: c.name,
                            arguments: c.arguments,
                        })
                        .collect(),
                });
            }
        }
    }
    for v in &mut result.verdicts {
        let suite = suites.iter().find(|s| s.suite.name == v.tally.suite);
        let Some(d) = &mut v.tally.differential else {
            continue;
        };
        for row in &mut d.worst_cases {
            let own = |name: &str| {
                let key = (v.tally.suite.clone(), row.case.clone(), name.to_string());
                answers.get(&key).cloned().unwrap_or_default()
            };
            let reference = match (d.reference.as_str(), suite) {
                ("recorded", Some(suite)) => recorded(suite, &row.case),
                _ => own(&d.reference),
            };
            let candidate = own(&v.tally.provider);
            for field in &mut row.per_field {
                side_by_side(field, &reference, &candidate);
            }
        }
    }
}

/// The recorded reference answers of `case` in `suite`, from its case file.
fn recorded(suite: &PreparedSuite, case: &str) -> Vec<Answer> {
    let Some(index) = suite.suite.cases.iter().position(|c| c.id.as_str() == case) else {
        return Vec::new();
    };
    let Ok((case, _)) = suite.load_request(index) else {
        return Vec::new();
    };
    let answers = case.reference.map(|r| r.answers).unwrap_or_default();
    answers
        .into_iter()
        .map(|a| Answer {
            output: Some(a.text),
            tool_calls: (a.tool_calls.into_iter())
                .map(|c| Call {
                    name: c.name,
                    arguments: Some(c.arguments),
                })
                .collect(),
        })
        .collect()
}

/// Sets the reference's and the candidate's values of `field` beside each other; for the
/// whole answer, the difference between the candidate's first differing answer and the
/// reference's first.
fn side_by_side(field: &mut FieldDisagreement, reference: &[Answer], candidate: &[Answer]) {
    if field.field == ANSWER {
        // Compared by digest: two answers that differ only in key order agree.
        let whole = |a: &Answer| {
            let text = a.output.as_deref().unwrap_or_default().trim();
            serde_json::from_str::<Value>(text).map_or_else(
                |_| text.to_string(),
                |v| conform_config::digest::canonical_json(&v),
            )
        };
        let Some(first) = reference.first() else {
            return;
        };
        let differing = candidate.iter().find(|c| whole(c) != whole(first));
        if let Some(other) = differing {
            field.difference = difference(first, other);
        }
        return;
    }
    let distinct = |answers: &[Answer]| {
        let mut out: Vec<String> = Vec::new();
        for value in answers.iter().map(|a| value_of(&field.field, a)) {
            if !out.contains(&value) && out.len() < MAX_VALUES {
                out.push(value);
            }
        }
        out
    };
    field.reference = distinct(reference);
    field.candidate = distinct(candidate);
}

/// The answer's value of a compared field, as JSON text (as written, not a digest), cut
/// at [`MAX_VALUE`].
fn value_of(field: &str, answer: &Answer) -> String {
    let text = answer.output.as_deref().unwrap_or_default();
    let parsed = serde_json::from_str::<Value>(text.trim()).ok();
    let names = || {
        let mut names: Vec<&str> = answer.tool_calls.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names
    };
    let value = match field {
        ANSWER => match &parsed {
            Some(v) => v.to_string(),
            None => text.to_string(),
        },
        TOOL_CALL_MADE => (if answer.tool_calls.is_empty() {
            "no"
        } else {
            "yes"
        })
        .into(),
        TOOL_CALL_NAMES => format!("[{}]", names().join(", ")),
        TOOL_CALL_ARGUMENTS => {
            let calls: Vec<Value> = (answer.tool_calls.iter())
                .map(|c| serde_json::json!([c.name, c.arguments]))
                .collect();
            Value::Array(calls).to_string()
        }
        pointer => match parsed.as_ref().map(|v| v.pointer(pointer)) {
            None => "(not JSON)".into(),
            Some(None) => "(absent)".into(),
            Some(Some(v)) => v.to_string(),
        },
    };
    cut(value)
}

fn cut(mut text: String) -> String {
    if text.chars().count() > MAX_VALUE {
        text = text.chars().take(MAX_VALUE).collect::<String>() + "…";
    }
    text
}

/// How `candidate` differs from `reference`, a line per pointer: `added /confidence:
/// 0.93`, `removed /x: …`, `changed /priority: "p2" → "p3"`; for answers that are not
/// both JSON, the two texts.
fn difference(reference: &Answer, candidate: &Answer) -> Vec<String> {
    let parse = |a: &Answer| {
        let text = a.output.as_deref().unwrap_or_default().trim();
        serde_json::from_str::<Value>(text).ok()
    };
    let mut out = Vec::new();
    match (parse(reference), parse(candidate)) {
        (Some(r), Some(c))
            if reference.tool_calls.is_empty() && candidate.tool_calls.is_empty() =>
        {
            json_difference("", &r, &c, &mut out);
        }
        _ => {
            out.push(format!("reference: {}", value_of(ANSWER, reference)));
            out.push(format!("candidate: {}", value_of(ANSWER, candidate)));
        }
    }
    if out.len() > MAX_DIFFERENCES {
        let more = out.len() - MAX_DIFFERENCES;
        out.truncate(MAX_DIFFERENCES);
        out.push(format!("… and {more} more"));
    }
    out
}

/// The differences between two JSON values under `at`, objects key by key, arrays of
/// the same length element by element; numbers compare by value (5.50 is 5.5).
fn json_difference(at: &str, reference: &Value, candidate: &Value, out: &mut Vec<String>) {
    let show = |v: &Value| cut(v.to_string());
    let pointer = |key: &str| format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
    match (reference, candidate) {
        (Value::Object(r), Value::Object(c)) => {
            for (key, value) in r {
                match c.get(key) {
                    None => out.push(format!("removed {}: {}", pointer(key), show(value))),
                    Some(other) => json_difference(&pointer(key), value, other, out),
                }
            }
            for (key, value) in c.iter().filter(|(k, _)| !r.contains_key(*k)) {
                out.push(format!("added {}: {}", pointer(key), show(value)));
            }
        }
        (Value::Array(r), Value::Array(c)) if r.len() == c.len() => {
            for (i, (a, b)) in r.iter().zip(c).enumerate() {
                json_difference(&format!("{at}/{i}"), a, b, out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a != b => {
            let at = if at.is_empty() { "/" } else { at };
            out.push(format!("changed {at}: {} → {}", show(a), show(b)));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Answer {
        Answer {
            output: Some(text.into()),
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn an_added_key_and_a_changed_field_are_named_with_their_values() {
        let reference = answer(r#"{"category": "billing", "priority": "p2", "n": 5.5}"#);
        let candidate =
            answer(r#"{"category": "billing", "priority": "p3", "n": 5.50, "confidence": 0.93}"#);
        assert_eq!(
            difference(&reference, &candidate),
            [
                "changed /priority: \"p2\" → \"p3\"",
                "added /confidence: 0.93"
            ]
        );
        let mut field = FieldDisagreement {
            field: "/priority".into(),
            disagreeing: 1,
            pairs: 1,
            ..FieldDisagreement::default()
        };
        side_by_side(
            &mut field,
            std::slice::from_ref(&reference),
            std::slice::from_ref(&candidate),
        );
        assert_eq!(
            (field.reference, field.candidate),
            (vec!["\"p2\"".to_string()], vec!["\"p3\"".to_string()])
        );
        let mut whole = FieldDisagreement {
            field: ANSWER.into(),
            ..FieldDisagreement::default()
        };
        // The candidate's first answer agrees; its second is the one that differs.
        side_by_side(
            &mut whole,
            std::slice::from_ref(&reference),
            &[reference.clone(), candidate],
        );
        assert_eq!(whole.difference.len(), 2, "{:?}", whole.difference);
        assert_eq!(
            difference(&reference, &answer("not json")),
            [
                format!("reference: {}", value_of(ANSWER, &reference)),
                "candidate: not json".to_string()
            ]
        );
    }
}
