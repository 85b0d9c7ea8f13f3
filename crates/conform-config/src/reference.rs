//! A case's recorded reference answers: what the primary said to this request earlier.
//!
//! ```json
//! "reference": {
//!   "provider": "openai-prod",
//!   "model": "gpt-4o",
//!   "served_model": "gpt-4o-2024-08-06",
//!   "recorded_at": "2026-11-30T12:00:00Z",
//!   "source": "batch_output.jsonl:17",
//!   "answers": [
//!     { "text": "{\"category\":\"billing\"}" },
//!     { "text": "", "tool_calls": [ { "name": "get_weather", "arguments": {"city": "Paris"} } ] }
//!   ]
//! }
//! ```
//!
//! One answer per recorded repeat. With a reference, a case needs no `expected`: it is
//! judged against the primary's answers, within the noise those answers show among
//! themselves (see [`conform_check::check::differential`]). `conform import` and `conform tape
//! to-reference` write this block; `conform check` validates it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::conversation::Problem;

/// A case's `reference`: the primary's answers to this request, recorded earlier.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// The provider file the answers came from, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model that was asked for.
    pub model: String,
    /// The model the vendor said answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// When the answers were recorded (RFC 3339).
    pub recorded_at: String,
    /// Where they were imported from, e.g. `batch_output.jsonl:17`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// One per recorded repeat; at least one.
    pub answers: Vec<RecordedAnswer>,
}

/// One recorded answer of the primary.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedAnswer {
    /// What the model wrote (the assistant content; "" when none).
    #[serde(default)]
    pub text: String,
    /// The tool calls it made, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<RecordedCall>,
}

/// One recorded tool call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// The tool called.
    pub name: String,
    /// The arguments as a JSON value; arguments that were not JSON stay a string.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// The kind of answer a reference implies for a case with no `expected` / `expect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceKind {
    /// Some recorded answer holds tool calls.
    ToolCalls,
    /// Every recorded text parses as JSON.
    Json,
    /// Otherwise.
    Text,
}

impl Reference {
    /// What the recorded answers say the answer is: tool calls if any has calls, JSON if
    /// every text parses as JSON, else text.
    pub fn kind(&self) -> ReferenceKind {
        if self.answers.iter().any(|a| !a.tool_calls.is_empty()) {
            ReferenceKind::ToolCalls
        } else if !self.answers.is_empty()
            && self
                .answers
                .iter()
                .all(|a| serde_json::from_str::<Value>(&a.text).is_ok())
        {
            ReferenceKind::Json
        } else {
            ReferenceKind::Text
        }
    }

    /// When the answers were recorded, if `recorded_at` is RFC 3339.
    pub fn recorded_at(&self) -> Option<OffsetDateTime> {
        OffsetDateTime::parse(&self.recorded_at, &Rfc3339).ok()
    }

    /// What is wrong with the block, each at its JSON pointer in the case file.
    pub fn problems(&self) -> Vec<Problem> {
        let mut found = Vec::new();
        let mut problem = |pointer: &str, message: String| {
            found.push(Problem {
                pointer: pointer.to_string(),
                message,
            })
        };
        if self.model.trim().is_empty() {
            problem(
                "/reference/model",
                "the model asked for is empty: name it (e.g. \"gpt-4o\")".into(),
            );
        }
        if self.recorded_at().is_none() {
            problem(
                "/reference/recorded_at",
                format!(
                    "`{}` is not an RFC 3339 date and time: write it as \"2026-11-30T12:00:00Z\"",
                    self.recorded_at
                ),
            );
        }
        if self.answers.is_empty() {
            problem(
                "/reference/answers",
                "no recorded answers: give at least one ({\"text\": \"…\"}), one per repeat".into(),
            );
        }
        for (i, answer) in self.answers.iter().enumerate() {
            for (j, call) in answer.tool_calls.iter().enumerate() {
                if call.name.trim().is_empty() {
                    problem(
                        &format!("/reference/answers/{i}/tool_calls/{j}/name"),
                        "a recorded tool call without a tool name".into(),
                    );
                }
            }
        }
        found
    }
}

/// `[differential]` in `suite.toml`: how a candidate is held to the reference.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DifferentialSpec {
    /// How far below the reference's self-agreement the candidate's agreement with the
    /// reference may be before the test is applied [default: 0.05].
    pub margin: Option<f64>,
}

impl DifferentialSpec {
    /// The margin when the suite gives none.
    pub const DEFAULT_MARGIN: f64 = 0.05;

    /// The margin the suite gives, or [`Self::DEFAULT_MARGIN`].
    pub fn margin(&self) -> f64 {
        self.margin.unwrap_or(Self::DEFAULT_MARGIN)
    }
}

/// Points every suite at the live reference `cli` names (`--reference`), or keeps each
/// suite's own `reference`, and loads every reference provider the selection left out.
/// A reference that names no provider file is a problem at the suite's `reference` line
/// (or, for `--reference`, one that lists the files there are).
pub fn add_live_references(
    workspace: &mut super::Workspace,
    paths: &super::Paths,
    cli: Option<&str>,
) -> Result<(), super::Diagnostics> {
    let mut problems = super::Diagnostics::default();
    if let Some(name) = cli {
        for suite in &mut workspace.suites {
            suite.reference = Some(name.to_string());
        }
    }
    let mut wanted: Vec<(String, Option<&super::Suite>)> = Vec::new();
    for suite in &workspace.suites {
        if let Some(name) = &suite.reference
            && !wanted.iter().any(|(w, _)| w == name)
        {
            wanted.push((name.clone(), cli.is_none().then_some(suite)));
        }
    }
    let mut loaded = Vec::new();
    for (name, suite) in wanted {
        if workspace.providers.iter().any(|p| p.name == name) {
            continue;
        }
        let file = paths.providers.join(format!("{name}.toml"));
        if !file.is_file() {
            let message = format!(
                "the reference `{name}` is not a provider: there is no {}",
                file.display()
            );
            problems.push(match suite {
                Some(s) => super::Diagnostic::new(&s.file, message)
                    .field("reference")
                    .near(&s.source, "reference"),
                None => super::Diagnostic::new(&paths.providers, message).field("--reference"),
            });
            continue;
        }
        match super::ProviderConfig::load(&file) {
            Ok(p) => loaded.push(p),
            Err(d) => problems.extend(d),
        }
    }
    workspace.providers.extend(loaded);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Reference, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn the_agreed_example_parses_and_round_trips() {
        let v = json!({
            "provider": "openai-prod", "model": "gpt-4o",
            "served_model": "gpt-4o-2024-08-06", "recorded_at": "2026-11-30T12:00:00Z",
            "source": "batch_output.jsonl:17",
            "answers": [
                {"text": "{\"category\":\"billing\"}"},
                {"text": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
            ]
        });
        let r = parse(v.clone()).unwrap();
        assert!(r.problems().is_empty());
        assert_eq!(
            r.answers[1].tool_calls[0].arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
        assert_eq!(r.kind(), ReferenceKind::ToolCalls);
    }

    #[test]
    fn kind_is_json_only_when_every_text_parses() {
        let mut r = parse(json!({"model": "m", "recorded_at": "2026-11-30T12:00:00Z",
            "answers": [{"text": "{\"a\":1}"}, {"text": "[1]"}]}))
        .unwrap();
        assert_eq!(r.kind(), ReferenceKind::Json);
        r.answers.push(RecordedAnswer {
            text: "sure, here it is".into(),
            tool_calls: vec![],
        });
        assert_eq!(r.kind(), ReferenceKind::Text);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = parse(json!({"model": "m", "recorded_at": "2026-11-30T12:00:00Z",
            "answers": [{"text": "x", "score": 1}]}))
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `score`"), "{e}");
    }

    #[test]
    fn problems_name_their_pointer() {
        let r = parse(json!({"model": " ", "recorded_at": "yesterday", "answers": []})).unwrap();
        let pointers: Vec<String> = r.problems().into_iter().map(|p| p.pointer).collect();
        assert_eq!(
            pointers,
            [
                "/reference/model",
                "/reference/recorded_at",
                "/reference/answers"
            ]
        );
        let r = parse(
            json!({"model": "m", "recorded_at": "2026-11-30T12:00:00+01:00",
            "answers": [{"text": "", "tool_calls": [{"name": ""}]}]}),
        )
        .unwrap();
        let problems = r.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].pointer,
            "/reference/answers/0/tool_calls/0/name"
        );
        assert_eq!(r.answers[0].tool_calls[0].arguments, json!({}));
    }
}
