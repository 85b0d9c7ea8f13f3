//! The tool contract of a request-shaped case: every call names a declared tool, its
//! arguments are a JSON object that validates against the tool's `parameters`, no call
//! is written into the text instead, the calls are the ones the case expects (or none),
//! the request's own `tool_choice` and `parallel_tool_calls` are obeyed, and the finish
//! reason agrees with what came back. Every finding has a stable code and the JSON path
//! into the answer (`/tool_calls/1/arguments/order_id`, `/content`).
//!
//! | code | what |
//! |---|---|
//! | `unknown_tool` | a call to a tool the request does not declare |
//! | `tool_arguments_not_json` | arguments that are not JSON, or a JSON string holding JSON (double-encoded) |
//! | `tool_arguments_invalid` | arguments that fail the tool's `parameters`, one finding per error |
//! | `tool_call_as_text` | no structured call, but one written in the text (JSON, tags, code) |
//! | `tool_call_missing` | an expected call that did not come |
//! | `tool_call_unexpected` | a call the case does not expect (no call expected, `tool_choice` none, or more calls than `parallel_tool_calls` allows) |
//! | `tool_choice_ignored` | `tool_choice` forced a call (`required` or a named tool) and none came; it always comes with `tool_call_missing` for each expected call |
//! | `tool_argument_mismatch` | an argument the case pins (by JSON pointer) has another value |
//! | `tool_rule_failed`, `tool_rule_error` | a `[[tool_rules]]` expression over the call did not yield `true` |
//! | `tool_finish_mismatch` | the finish reason says calls were made and none were, or the reverse (OpenAI Chat `tool_calls`, Anthropic `tool_use`) |
//!
//! Each call's outcome also says what the suite's tool measures count: whether a call
//! was expected and whether one was made (trigger precision and recall), how many calls
//! came and how many had valid arguments (schema accuracy).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use jaq_json::Val;
use jsonschema::Validator;
use serde::Serialize;
use serde_json::{Value, json};

use super::rules::{self, Rule};
use super::{Check, Code, Finding, Outcome, Subject, tool_text};
use conform_config::{Answer, Diagnostics, Suite, ToolChoice};
use conform_wire::provider::{FinishKind, ToolCall, wire_format};

/// The check's name in outcomes and reports.
pub const NAME: &str = "tool_calls";

/// Most schema errors reported for one call's arguments.
const MAX_ERRORS_PER_CALL: usize = 8;

/// What one answer adds to the suite's tool measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolSummary {
    /// Whether the case expects a call; `None` when the request declares no tools.
    pub expected_call: Option<bool>,
    /// Whether the answer made a structured call.
    pub called: bool,
    /// Calls made.
    pub calls: u32,
    /// Calls to a declared tool whose arguments validate against its parameters.
    pub valid_calls: u32,
}

/// A `[[tool_rules]]` rule, compiled.
struct ToolRule {
    tool: Option<String>,
    rule: Rule,
}

/// The suite's tool checks, compiled once: the validators of its tools and its tool
/// rules. Tools a case declares itself are compiled the first time they are seen, once
/// per distinct parameter schema.
pub struct ToolCallsCheck {
    suite_validators: HashMap<String, Arc<Validator>>,
    case_validators: RwLock<HashMap<String, Arc<Validator>>>,
    rules: Vec<ToolRule>,
}

impl ToolCallsCheck {
    /// Each call: a declared tool, arguments that are a JSON object valid against its
    /// parameters, and the suite's rules over it. Returns how many calls were valid.
    fn each_call(
        &self,
        subject: &Subject<'_>,
        declared: &[&str],
        findings: &mut Vec<Finding>,
    ) -> u32 {
        let calls = &subject.reply.tool_calls;
        let mut valid_calls = 0u32;
        for (i, call) in calls.iter().enumerate() {
            let at = format!("/tool_calls/{i}");
            let known = declared.contains(&call.name.as_str());
            if !known {
                findings.push(
                    Finding::new(
                        Code::UnknownTool,
                        format!(
                            "called `{}`, which the request does not declare; declared: {}",
                            call.name,
                            list(declared)
                        ),
                    )
                    .at(format!("{at}/name")),
                );
            }
            let Some(arguments) = arguments_object(call, &at, findings) else {
                continue;
            };
            if !known {
                continue;
            }
            let errors: Vec<Finding> = match self.validator(subject, &call.name) {
                Some(v) => v
                    .iter_errors(arguments)
                    .take(MAX_ERRORS_PER_CALL)
                    .map(|e| {
                        Finding::new(
                            Code::ToolArgumentsInvalid,
                            format!("`{}` arguments: {e}", call.name),
                        )
                        .at(format!("{at}/arguments{}", e.instance_path()))
                    })
                    .collect(),
                None => vec![
                    Finding::new(
                        Code::ToolArgumentsInvalid,
                        format!(
                            "`{}` has no usable parameter schema to validate against",
                            call.name
                        ),
                    )
                    .at(format!("{at}/arguments")),
                ],
            };
            if errors.is_empty() {
                valid_calls += 1;
                self.apply_rules(subject, call, arguments, &at, findings);
            }
            findings.extend(errors);
        }

        valid_calls
    }

    /// The check of the suite's expected calls, or every problem with its tools.
    pub fn compile(suite: &Suite) -> Result<ToolCallsCheck, Diagnostics> {
        let mut problems = Diagnostics::default();
        let mut suite_validators = HashMap::new();
        for tool in suite.tools.iter() {
            // A schema that does not compile is reported, at its keyword, when the suite
            // loads; a tool without a validator fails every call's arguments here.
            if let Ok(v) = jsonschema::draft202012::new(tool.parameters()) {
                suite_validators.insert(tool.name().to_string(), Arc::new(v));
            }
        }
        let mut compiled = Vec::with_capacity(suite.tool_rules.len());
        for spec in &suite.tool_rules {
            // `.` is a call's arguments: of the rule's tool, or of any tool the suite
            // declares (a suite whose cases declare their own tools is not checked here).
            let parameters: Vec<&serde_json::Value> = (suite.tools.iter())
                .filter(|t| spec.tool.as_deref().is_none_or(|name| t.name() == name))
                .map(|t| t.parameters())
                .collect();
            problems.extend(rules::unreadable(
                suite,
                "tool_rules",
                &spec.name,
                &spec.expr,
                &parameters,
            ));
            match rules::compile_rule(
                suite,
                "tool_rules",
                &spec.name,
                &spec.expr,
                &["$call", "$input", "$now"],
            ) {
                Ok(filter) => compiled.push(ToolRule {
                    tool: spec.tool.clone(),
                    rule: Rule {
                        name: spec.name.clone(),
                        message: spec.message.clone(),
                        filter,
                    },
                }),
                Err(d) => problems.extend(d),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(ToolCallsCheck {
            suite_validators,
            case_validators: RwLock::new(HashMap::new()),
            rules: compiled,
        })
    }

    /// The validator of `name` as this case declares it.
    fn validator(&self, subject: &Subject<'_>, name: &str) -> Option<Arc<Validator>> {
        let Some(own) = &subject.case.tools else {
            return self.suite_validators.get(name).cloned();
        };
        let tool = own.iter().find(|t| t.name() == name)?;
        let key = tool.parameters().to_string();
        if let Some(found) = self.case_validators.read().ok()?.get(&key) {
            return Some(Arc::clone(found));
        }
        let compiled = Arc::new(jsonschema::draft202012::new(tool.parameters()).ok()?);
        if let Ok(mut cache) = self.case_validators.write() {
            cache.insert(key, Arc::clone(&compiled));
        }
        Some(compiled)
    }
}

impl Check for ToolCallsCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Request-shaped cases only: a template case has no tool contract.
    fn applies(&self, subject: &Subject<'_>) -> bool {
        subject.suite.is_request(subject.case)
    }

    fn check(&self, subject: &Subject<'_>) -> Outcome {
        let case = subject.case;
        let reply = subject.reply;
        let tools = subject.suite.tools_for(case);
        let declared: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        let calls = &reply.tool_calls;
        let choice = case.tool_choice.as_ref();
        let answer = case.answer();
        let mut findings = Vec::new();

        let valid_calls = self.each_call(subject, &declared, &mut findings);

        let as_text = if calls.is_empty() && !declared.is_empty() {
            tool_text::call_in_text(reply.content(), &declared)
        } else {
            None
        };
        if let Some(how) = &as_text {
            findings.push(
                Finding::new(
                    Code::ToolCallAsText,
                    format!("no structured tool call came back, but {how}"),
                )
                .at("/content"),
            );
        }

        against_expectation(
            answer,
            choice,
            reply,
            &declared,
            as_text.is_some(),
            &mut findings,
        );
        if answer == Answer::Text
            && calls.is_empty()
            && as_text.is_none()
            && reply.content().trim().is_empty()
        {
            findings.push(Finding::new(Code::EmptyOutput, "the answer is empty").at("/content"));
        }
        if case.parallel_tool_calls == Some(false) && calls.len() > 1 {
            findings.push(
                Finding::new(
                    Code::ToolCallUnexpected,
                    format!(
                        "parallel_tool_calls is false, but {} calls came in one answer",
                        calls.len()
                    ),
                )
                .at("/tool_calls/1"),
            );
        }
        if let Some(f) = finish_mismatch(subject, choice) {
            findings.push(f);
        }

        let mut outcome = Outcome::from_findings(NAME, findings);
        outcome.tool_calls = Some(ToolSummary {
            expected_call: (!declared.is_empty()).then(|| answer.expects_a_call()),
            called: !calls.is_empty(),
            calls: calls.len() as u32,
            valid_calls,
        });
        outcome
    }
}

impl ToolCallsCheck {
    /// The suite's `[[tool_rules]]` over one valid call.
    fn apply_rules(
        &self,
        subject: &Subject<'_>,
        call: &ToolCall,
        arguments: &Value,
        at: &str,
        findings: &mut Vec<Finding>,
    ) {
        let applicable: Vec<&ToolRule> = self
            .rules
            .iter()
            .filter(|r| r.tool.as_deref().is_none_or(|t| t == call.name))
            .collect();
        if applicable.is_empty() {
            return;
        }
        let args = rules::to_val(arguments);
        let call_val = rules::to_val(&json!({"id": call.id, "name": call.name,
            "arguments": arguments}));
        let input = rules::to_val_map(&subject.case.vars);
        let now = Val::from(subject.now as isize);
        for r in applicable {
            let vars = [call_val.clone(), input.clone(), now.clone()];
            match r.rule.judge(&args, vars) {
                rules::Verdict::Holds => {}
                rules::Verdict::Failed(yielded) => findings.push(
                    Finding::new(
                        Code::ToolRuleFailed,
                        format!(
                            "tool rule `{}` failed on the call to `{}`: {}; it yielded {yielded} on {}",
                            r.rule.name,
                            call.name,
                            r.rule.message,
                            rules::excerpt(&arguments.to_string())
                        ),
                    )
                    .at(at.to_string()),
                ),
                rules::Verdict::Error(error) => findings.push(
                    Finding::new(
                        Code::ToolRuleError,
                        format!(
                            "tool rule `{}` could not be evaluated on the call to `{}`: {error}; a rule that errors fails ({})",
                            r.rule.name, call.name, r.rule.message
                        ),
                    )
                    .at(at.to_string()),
                ),
            }
        }
    }
}

/// The call's arguments when they are a JSON object (or a value a schema can judge);
/// `None`, with a finding, when they are not JSON at all or are double-encoded.
fn arguments_object<'a>(
    call: &'a ToolCall,
    at: &str,
    findings: &mut Vec<Finding>,
) -> Option<&'a Value> {
    let not_json = |message: String| {
        Finding::new(Code::ToolArgumentsNotJson, message).at(format!("{at}/arguments"))
    };
    match &call.arguments {
        None => {
            findings.push(not_json(format!(
                "the arguments of `{}` are not JSON: {}",
                call.name,
                rules::excerpt(&format!("{:?}", call.raw_arguments))
            )));
            None
        }
        Some(Value::String(inner)) if serde_json::from_str::<Value>(inner).is_ok() => {
            findings.push(not_json(format!(
                "the arguments of `{}` are double-encoded: a JSON string holding JSON ({}), where the object itself belongs",
                call.name,
                rules::excerpt(inner)
            )));
            None
        }
        Some(value) => Some(value),
    }
}

/// Matches the expected calls to the calls made, each to a different one: first a call
/// to an allowed tool with every pinned argument equal, then one to an allowed tool
/// (its differing arguments are mismatches). What is left over on both sides is missing
/// and unexpected, except that a call to an undeclared tool in place of an expected one
/// is that tool's `unknown_tool`, not also a missing call.
fn match_expected(
    expected: &[conform_config::ExpectedCall],
    calls: &[ToolCall],
    declared: &[&str],
    findings: &mut Vec<Finding>,
) {
    let mut used = vec![false; calls.len()];
    let mut unmatched = Vec::new();
    let pinned_equal = |e: &conform_config::ExpectedCall, call: &ToolCall| {
        e.arguments.iter().all(|(pointer, want)| {
            call.arguments
                .as_ref()
                .and_then(|a| a.pointer(pointer))
                .is_some_and(|got| same(got, want))
        })
    };
    for e in expected {
        let exact = (0..calls.len())
            .find(|&i| !used[i] && e.name.matches(&calls[i].name) && pinned_equal(e, &calls[i]));
        if let Some(i) = exact {
            used[i] = true;
            continue;
        }
        let named = (0..calls.len()).find(|&i| !used[i] && e.name.matches(&calls[i].name));
        match named {
            Some(i) => {
                used[i] = true;
                let Some(args) = calls[i].arguments.as_ref().filter(|a| a.is_object()) else {
                    // Arguments that are not an object were reported as such.
                    continue;
                };
                for (pointer, want) in &e.arguments {
                    let at = format!("/tool_calls/{i}/arguments{pointer}");
                    let message = match args.pointer(pointer) {
                        None => format!(
                            "`{}` was expected with {pointer} = {want}, but it has no {pointer}",
                            calls[i].name
                        ),
                        Some(got) if !same(got, want) => format!(
                            "`{}` was expected with {pointer} = {want}, but got {got}",
                            calls[i].name
                        ),
                        Some(_) => continue,
                    };
                    findings.push(Finding::new(Code::ToolArgumentMismatch, message).at(at));
                }
            }
            None => unmatched.push(e),
        }
    }
    for (i, call) in calls.iter().enumerate().filter(|(i, _)| !used[*i]) {
        if !declared.contains(&call.name.as_str()) {
            // In place of an expected call: `unknown_tool` already says it.
            if !unmatched.is_empty() {
                unmatched.remove(0);
            }
            continue;
        }
        findings.push(
            Finding::new(
                Code::ToolCallUnexpected,
                format!("the case does not expect this call to `{}`", call.name),
            )
            .at(format!("/tool_calls/{i}")),
        );
    }
    let made: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    for e in unmatched {
        findings.push(
            Finding::new(
                Code::ToolCallMissing,
                format!(
                    "expected a call to {} in this answer, which made {} call{} ({})",
                    e.name.describe(),
                    calls.len(),
                    if calls.len() == 1 { "" } else { "s" },
                    made.join(", ")
                ),
            )
            .at("/tool_calls"),
        );
    }
}

/// The finish reason against what came back, where the vendor has a word for calls
/// (`WireFormat::tool_use_finish`): OpenAI Chat (and the servers that copy it) says
/// `tool_calls` when the model chose to call (a forced named call may say `stop`),
/// Anthropic `tool_use` whenever it calls.
fn finish_mismatch(subject: &Subject<'_>, choice: Option<&ToolChoice>) -> Option<Finding> {
    let reply = subject.reply;
    if reply.finish.kind == FinishKind::Length || subject.suite.tools_for(subject.case).is_empty() {
        return None;
    }
    let raw = reply.finish.raw.as_deref()?;
    let called = !reply.tool_calls.is_empty();
    let says_calls = reply.finish.kind == FinishKind::ToolUse;
    let forced_by_name = matches!(choice, Some(ToolChoice::Tool(_)));
    let wanted = wire_format(subject.provider.wire_kind()).tool_use_finish(forced_by_name);
    let message = match (called, says_calls, wanted) {
        (false, true, _) => format!("the finish reason is `{raw}`, but no tool call came back"),
        (true, false, Some(wanted)) => format!(
            "{} tool call{} came back, but the finish reason is `{raw}`, not `{wanted}`: a client that reads the finish reason would not run {}",
            reply.tool_calls.len(),
            if reply.tool_calls.len() == 1 { "" } else { "s" },
            if reply.tool_calls.len() == 1 {
                "it"
            } else {
                "them"
            }
        ),
        _ => return None,
    };
    Some(Finding::new(Code::ToolFinishMismatch, message).at("/finish_reason"))
}

/// Numbers compare by value: 5.50 and 5.5 agree.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn answered_with(content: &str) -> String {
    let content = content.trim();
    if content.is_empty() {
        String::new()
    } else {
        format!(": it answered {}", rules::excerpt(&format!("{content:?}")))
    }
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// What the case expects of the calls: the expected calls each made (or missing, and a
/// forcing `tool_choice` ignored), or none where the answer is text or JSON.
fn against_expectation(
    answer: Answer<'_>,
    choice: Option<&ToolChoice>,
    reply: &conform_wire::provider::Reply,
    declared: &[&str],
    written_as_text: bool,
    findings: &mut Vec<Finding>,
) {
    let calls = &reply.tool_calls;
    match answer {
        Answer::ToolCalls(expected) => {
            if calls.is_empty() {
                // A call written as text was made, in the wrong channel: that finding
                // says it, not a second one.
                // Each expected call is missing; a request that forced one was also
                // ignored: both are said, so that a consumer looking for missing
                // calls finds these too.
                if !written_as_text {
                    for e in expected {
                        findings.push(
                            Finding::new(
                                Code::ToolCallMissing,
                                format!(
                                    "expected a call to {}, but the answer calls no tool{}",
                                    e.name.describe(),
                                    answered_with(reply.content())
                                ),
                            )
                            .at("/tool_calls"),
                        );
                    }
                    if let Some(forced) = choice.filter(|c| c.forces_a_call()) {
                        findings.push(
                            Finding::new(
                                Code::ToolChoiceIgnored,
                                format!(
                                    "tool_choice is {}, but the answer calls no tool",
                                    forced.describe()
                                ),
                            )
                            .at("/tool_calls"),
                        );
                    }
                }
            } else {
                match_expected(expected, calls, declared, findings);
            }
        }
        Answer::Text | Answer::Json if !declared.is_empty() => {
            for (i, call) in calls.iter().enumerate() {
                if !declared.contains(&call.name.as_str()) {
                    continue;
                }
                let why = match choice {
                    Some(ToolChoice::None) => "tool_choice is none".to_string(),
                    _ if answer == Answer::Text => "the case expects a text answer".into(),
                    _ => "the case expects a JSON answer".into(),
                };
                findings.push(
                    Finding::new(
                        Code::ToolCallUnexpected,
                        format!("{why}, but the answer calls `{}`", call.name),
                    )
                    .at(format!("/tool_calls/{i}")),
                );
            }
        }
        _ => {}
    }
}
