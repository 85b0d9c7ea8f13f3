//! What a case expects of the answer beyond `expected`: which tool calls (or none).
//!
//! ```json
//! "expect": {"tool_calls": [
//!   {"name": "lookup_order", "arguments": {"/order_id": "A-1001"}},
//!   {"name": ["search_help_center", "escalate_to_human"]}
//! ]}
//! ```
//!
//! Each entry is one call the answer must hold: to this tool (or to any of a list), with
//! these arguments where a JSON pointer pins one. Two or more entries are calls made in
//! parallel: every one must come back in this one answer. `"tool_calls": "none"` (or `[]`)
//! says that no tool may be called: the answer is text, or the JSON in `expected`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::conversation::{Problem, Tool, ToolChoice};

/// A case's `expect`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The calls the answer must make, or `"none"`.
    pub tool_calls: ExpectedCalls,
}

/// The calls an answer must hold.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub enum ExpectedCalls {
    /// No tool may be called.
    None,
    /// These calls, each matched by a different call of the answer.
    Calls(Vec<ExpectedCall>),
}

/// Why `expect.tool_calls` is not a list of calls.
#[derive(Debug, thiserror::Error)]
pub enum ExpectError {
    /// A call of the list that does not read as one.
    #[error("{0}")]
    Call(serde_json::Error),
    /// `tool_calls` is neither `"none"` nor a list.
    #[error(
        "expect.tool_calls is \"none\", or a list of calls: [{{\"name\": \"…\", \"arguments\": {{\"/pointer\": value}}}}]"
    )]
    Shape,
}

impl TryFrom<Value> for ExpectedCalls {
    type Error = ExpectError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        match value {
            Value::String(s) if s == "none" => Ok(ExpectedCalls::None),
            Value::Array(items) if items.is_empty() => Ok(ExpectedCalls::None),
            Value::Array(items) => items
                .into_iter()
                .map(|item| serde_json::from_value(item).map_err(ExpectError::Call))
                .collect::<Result<Vec<ExpectedCall>, ExpectError>>()
                .map(ExpectedCalls::Calls),
            _ => Err(ExpectError::Shape),
        }
    }
}

/// One call the answer must make.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    /// The tool, or the tools any of which will do.
    pub name: ToolNames,
    /// Arguments the call must carry: JSON pointer into the arguments → value (numbers
    /// compare by value).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub arguments: Map<String, Value>,
}

/// `"lookup_order"` or `["search_help_center", "escalate_to_human"]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ToolNames {
    /// This one tool.
    One(String),
    /// Any one of these tools.
    AnyOf(Vec<String>),
}

impl ToolNames {
    /// A call of the tool `name` is what is expected.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            ToolNames::One(one) => one == name,
            ToolNames::AnyOf(any) => any.iter().any(|n| n == name),
        }
    }

    /// The tools named, in the case's order.
    pub fn names(&self) -> Vec<&str> {
        match self {
            ToolNames::One(one) => vec![one.as_str()],
            ToolNames::AnyOf(any) => any.iter().map(String::as_str).collect(),
        }
    }

    /// `lookup_order`, or `any of search_help_center, escalate_to_human`.
    pub fn describe(&self) -> String {
        match self {
            ToolNames::One(one) => format!("`{one}`"),
            ToolNames::AnyOf(any) => format!(
                "any of {}",
                any.iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// What the answer must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer<'a> {
    /// JSON, checked against the suite's schema, rules and `expected` (as template cases
    /// always are).
    Json,
    /// Text, and no tool call.
    Text,
    /// These tool calls.
    ToolCalls(&'a [ExpectedCall]),
}

impl Answer<'_> {
    /// Whether the answer must call a tool: the trigger the precision and recall of tool
    /// calling are measured on.
    pub fn expects_a_call(&self) -> bool {
        matches!(self, Answer::ToolCalls(_))
    }
}

/// What contradicts itself or the declared tools in an expectation.
pub fn problems(
    expect: &Expect,
    tools: &[Tool],
    tool_choice: Option<&ToolChoice>,
    parallel_tool_calls: Option<bool>,
) -> Vec<Problem> {
    let mut found = Vec::new();
    let problem = |pointer: String, message: String| Problem { pointer, message };
    match &expect.tool_calls {
        ExpectedCalls::None => {
            if let Some(choice) = tool_choice.filter(|c| c.forces_a_call()) {
                found.push(problem(
                    "/expect/tool_calls".into(),
                    format!(
                        "expects no tool call, but tool_choice is {}: the request forces one",
                        choice.describe()
                    ),
                ));
            }
        }
        ExpectedCalls::Calls(calls) => {
            if tools.is_empty() {
                found.push(problem(
                    "/expect/tool_calls".into(),
                    "expects tool calls, but no tools are declared (`tools` in the case or in suite.toml)".into(),
                ));
            }
            if tool_choice == Some(&ToolChoice::None) {
                found.push(problem(
                    "/expect/tool_calls".into(),
                    "expects tool calls, but tool_choice is none: the request forbids them".into(),
                ));
            }
            if calls.len() > 1 && parallel_tool_calls == Some(false) {
                found.push(problem(
                    "/expect/tool_calls".into(),
                    format!(
                        "expects {} calls in one answer, but parallel_tool_calls is false",
                        calls.len()
                    ),
                ));
            }
            for (i, call) in calls.iter().enumerate() {
                let at = format!("/expect/tool_calls/{i}");
                if let ToolNames::AnyOf(any) = &call.name
                    && any.is_empty()
                {
                    found.push(problem(
                        format!("{at}/name"),
                        "an empty list of tools: name at least one".into(),
                    ));
                }
                for name in call.name.names() {
                    if !tools.is_empty() && !tools.iter().any(|t| t.name() == name) {
                        found.push(problem(
                            format!("{at}/name"),
                            format!("expects a call to `{name}`, which is not declared"),
                        ));
                    }
                }
                if let Some(ToolChoice::Tool(forced)) = tool_choice
                    && !call.name.matches(forced)
                {
                    found.push(problem(
                        format!("{at}/name"),
                        format!(
                            "expects {}, but tool_choice forces `{forced}`",
                            call.name.describe()
                        ),
                    ));
                }
                for pointer in call.arguments.keys() {
                    if !pointer.starts_with('/') {
                        found.push(problem(
                            format!("{at}/arguments"),
                            format!(
                                "`{pointer}` is not a JSON pointer into the arguments: write it as \"/{pointer}\""
                            ),
                        ));
                    }
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn expect(v: Value) -> Expect {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn none_and_empty_mean_no_call_and_lists_are_calls() {
        assert_eq!(
            expect(json!({"tool_calls": "none"})).tool_calls,
            ExpectedCalls::None
        );
        assert_eq!(
            expect(json!({"tool_calls": []})).tool_calls,
            ExpectedCalls::None
        );
        let e = expect(json!({"tool_calls": [{"name": ["a", "b"], "arguments": {"/x": 1}}]}));
        let ExpectedCalls::Calls(calls) = e.tool_calls else {
            panic!()
        };
        assert!(calls[0].name.matches("b"));
        assert!(!calls[0].name.matches("c"));
        assert!(
            serde_json::from_value::<Expect>(json!({"tool_calls": "all"}))
                .unwrap_err()
                .to_string()
                .contains("is \"none\", or a list")
        );
    }

    #[test]
    fn contradictions_with_the_request_are_named() {
        let tools: Vec<Tool> = serde_json::from_value(json!([
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "b"}}]))
        .unwrap();
        let two =
            expect(json!({"tool_calls": [{"name": "a"}, {"name": "zz", "arguments": {"x": 1}}]}));
        let found = problems(&two, &tools, Some(&ToolChoice::None), Some(false));
        let pointers: Vec<&str> = found.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/expect/tool_calls",
                "/expect/tool_calls",
                "/expect/tool_calls/1/name",
                "/expect/tool_calls/1/arguments"
            ]
        );
        let none = expect(json!({"tool_calls": "none"}));
        assert_eq!(
            problems(&none, &tools, Some(&ToolChoice::Required), None).len(),
            1
        );
        let forced = expect(json!({"tool_calls": [{"name": "a"}]}));
        assert!(
            problems(&forced, &tools, Some(&ToolChoice::Tool("b".into())), None)[0]
                .message
                .contains("forces `b`")
        );
    }
}
