//! Request-shaped cases and the tool contract: every finding code of the tool-calls
//! check on the shipped support-agent suite, with its JSON path; the suite's own
//! expectations and tool rules holding on the calls it expects; and `conform check`
//! placing every problem of a request-shaped case at its file, line and column.

use crate::common;

use std::path::Path;

use common::Project;
use conform_check::check::{CallFacts, Checks, Finding, Outcome, Status, all_passed};
use conform_config::{Answer, Case, ProviderConfig, Suite};
use conform_wire::provider::{Finish, FinishKind, Reply, ToolCall, Usage};
use conform_wire::sim::tools::ToolAnswer;
use serde_json::{Value, json};

fn suite() -> Suite {
    Suite::load(&Path::new(common::REPO).join("fixtures/support-agent")).unwrap()
}

fn provider(kind: &str) -> ProviderConfig {
    ProviderConfig::parse(
        Path::new("providers/p.toml"),
        &format!("kind = \"{kind}\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n"),
    )
    .unwrap()
}

fn case(suite: &Suite, id: &str) -> Case {
    suite
        .cases
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no case {id}"))
        .load()
        .unwrap()
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall::from_text(Some("call_1".into()), name, arguments.to_string())
}

/// A reply with these calls (and this text), finished the way OpenAI Chat finishes.
fn reply(text: &str, calls: Vec<ToolCall>, finish: &str) -> Reply {
    Reply {
        text: Reply::text_or_first_arguments(text.to_string(), &calls),
        tool_calls: calls,
        // As the adapters decode them: the vendors' words for a call are a tool-use finish.
        finish: Finish::new(
            match finish {
                "tool_calls" | "tool_use" => FinishKind::ToolUse,
                _ => FinishKind::Stop,
            },
            Some(finish),
        ),
        refusal: None,
        usage: Usage::default(),
        served_model: None,
        system_fingerprint: None,
    }
}

/// Every outcome of the suite's checks for this answer on an OpenAI-compatible server.
fn outcomes(id: &str, reply: &Reply) -> Vec<Outcome> {
    outcomes_on("openai-compatible", id, reply)
}

fn outcomes_on(kind: &str, id: &str, reply: &Reply) -> Vec<Outcome> {
    let suite = suite();
    let checks = Checks::for_suite(&suite).unwrap();
    let case = case(&suite, id);
    checks
        .evaluate(
            &suite,
            &case,
            &provider(kind),
            Ok(reply),
            CallFacts {
                now: 1_800_000_000,
                tokens: None,
            },
        )
        .outcomes
}

fn tool_findings(outcomes: &[Outcome]) -> Vec<Finding> {
    outcomes
        .iter()
        .find(|o| o.check == "tool_calls")
        .expect("a tool_calls outcome")
        .findings
        .clone()
}

/// `(code, path)` of every finding of the tool-calls check.
fn codes(outcomes: &[Outcome]) -> Vec<(&'static str, String)> {
    tool_findings(outcomes)
        .into_iter()
        .map(|f| (f.code.as_str(), f.path.unwrap_or_default()))
        .collect()
}

fn lookup(id: &str) -> ToolCall {
    call("lookup_order", json!({"order_id": id}))
}

#[test]
fn a_faithful_call_passes_and_counts_as_a_true_positive() {
    let out = outcomes(
        "001-where-is-my-order",
        &reply("", vec![lookup("BR-10452")], "tool_calls"),
    );
    assert!(all_passed(&out), "{out:?}");
    // A case that expects calls has no JSON answer to parse: no json or schema outcome.
    assert!(out.iter().all(|o| o.check != "json" && o.check != "schema"));
    let summary = out
        .iter()
        .find_map(|o| o.tool_calls)
        .expect("the outcome carries the measures");
    assert_eq!(summary.expected_call, Some(true));
    assert!(summary.called);
    assert_eq!((summary.calls, summary.valid_calls), (1, 1));
}

#[test]
fn unknown_tools_and_arguments_that_are_not_json_are_named_at_their_path() {
    let out = outcomes(
        "001-where-is-my-order",
        &reply(
            "",
            vec![call("lookup_order_v2", json!({"order_id": "BR-10452"}))],
            "tool_calls",
        ),
    );
    // In place of the expected call: the unknown name says it, not also a missing call.
    assert_eq!(codes(&out), [("unknown_tool", "/tool_calls/0/name".into())]);

    let broken = ToolCall::from_text(None, "lookup_order", "{\"order_id\": \"BR-10");
    let out = outcomes(
        "001-where-is-my-order",
        &reply("", vec![broken], "tool_calls"),
    );
    assert_eq!(
        codes(&out),
        [("tool_arguments_not_json", "/tool_calls/0/arguments".into())]
    );

    let double = ToolCall::from_text(
        None,
        "lookup_order",
        Value::String("{\"order_id\":\"BR-10452\"}".into()).to_string(),
    );
    let out = outcomes(
        "001-where-is-my-order",
        &reply("", vec![double], "tool_calls"),
    );
    let found = tool_findings(&out);
    assert_eq!(found[0].code, "tool_arguments_not_json");
    assert!(
        found[0].message.contains("double-encoded"),
        "{}",
        found[0].message
    );
}

#[test]
fn invalid_and_mismatched_arguments_name_the_instance_path() {
    // A refund over the schema's 500 and without its reason.
    let out = outcomes(
        "002-damaged-vase-refund-after-lookup",
        &reply(
            "",
            vec![call(
                "issue_refund",
                json!({"order_id": "BR-10452", "amount": 900}),
            )],
            "tool_calls",
        ),
    );
    let found = codes(&out);
    assert!(
        found.contains(&("tool_arguments_invalid", "/tool_calls/0/arguments".into())),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            "tool_arguments_invalid",
            "/tool_calls/0/arguments/amount".into()
        )),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            "tool_argument_mismatch",
            "/tool_calls/0/arguments/amount".into()
        )),
        "{found:?}"
    );
    let out = outcomes(
        "005-change-delivery-address",
        &reply(
            "",
            vec![call(
                "update_shipping_address",
                json!({"order_id": "BR-10877",
                "address": {"line1": "Kastanienallee 17", "city": "Berlin", "postal_code": "10437", "country": "DE"}}),
            )],
            "tool_calls",
        ),
    );
    assert_eq!(
        codes(&out),
        [(
            "tool_argument_mismatch",
            "/tool_calls/0/arguments/address/postal_code".into()
        )]
    );
}

#[test]
fn a_call_written_as_text_is_caught_and_not_also_reported_missing() {
    let text = "Let me look that up.\n```json\n{\"name\": \"lookup_order\", \"arguments\": {\"order_id\": \"BR-10452\"}}\n```";
    let out = outcomes("001-where-is-my-order", &reply(text, vec![], "stop"));
    assert_eq!(codes(&out), [("tool_call_as_text", "/content".into())]);
    let summary = out.iter().find_map(|o| o.tool_calls).unwrap();
    assert!(
        !summary.called,
        "a call in the text is not a call: a false negative"
    );
}

#[test]
fn missing_calls_ignored_choices_and_unexpected_calls() {
    let text = "Sure, one moment.";
    // Auto: the expected call did not come.
    let out = outcomes("001-where-is-my-order", &reply(text, vec![], "stop"));
    assert_eq!(codes(&out), [("tool_call_missing", "/tool_calls".into())]);
    // Required: the request forced a call.
    let out = outcomes(
        "024-required-first-contact-lookup",
        &reply(text, vec![], "stop"),
    );
    // Missing, as every expected call that did not come is, and forced besides.
    assert_eq!(
        codes(&out),
        [
            ("tool_call_missing", "/tool_calls".into()),
            ("tool_choice_ignored", "/tool_calls".into())
        ]
    );
    // Two in parallel, one came.
    let out = outcomes(
        "015-two-orders-in-parallel",
        &reply("", vec![lookup("BR-10452")], "tool_calls"),
    );
    assert_eq!(codes(&out), [("tool_call_missing", "/tool_calls".into())]);
    assert!(tool_findings(&out)[0].message.contains("made 1 call"));
    // tool_choice none, and a call anyway.
    let out = outcomes(
        "019-tools-switched-off-answer-in-text",
        &reply("", vec![lookup("BR-10452")], "tool_calls"),
    );
    let found = tool_findings(&out);
    assert_eq!(found[0].code, "tool_call_unexpected");
    assert!(
        found[0].message.starts_with("tool_choice is none"),
        "{}",
        found[0].message
    );
    // A text answer was expected.
    let out = outcomes(
        "008-thanks-goodbye-no-tool",
        &reply("", vec![lookup("BR-10460")], "tool_calls"),
    );
    assert_eq!(
        codes(&out),
        [("tool_call_unexpected", "/tool_calls/0".into())]
    );
    // …and an empty text is no answer.
    let out = outcomes("008-thanks-goodbye-no-tool", &reply("", vec![], "stop"));
    assert_eq!(codes(&out), [("empty_output", "/content".into())]);
    // Any of two tools will do.
    for name in ["escalate_to_human", "search_help_center"] {
        let args = if name == "search_help_center" {
            json!({"query": "contact a person"})
        } else {
            json!({"reason": "no answer for weeks", "priority": "high"})
        };
        let out = outcomes(
            "007-no-answer-for-weeks-any-of",
            &reply("", vec![call(name, args)], "tool_calls"),
        );
        assert!(all_passed(&out), "{name}: {out:?}");
    }
}

#[test]
fn tool_rules_see_the_call_and_the_finish_reason_must_agree() {
    let out = outcomes(
        "025-required-manager-request",
        &reply(
            "",
            vec![call(
                "escalate_to_human",
                json!({"reason": "wants a manager", "priority": "high", "order_id": "10452"}),
            )],
            "tool_calls",
        ),
    );
    let found = tool_findings(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].code, "tool_rule_failed");
    assert_eq!(found[0].path.as_deref(), Some("/tool_calls/0"));
    assert!(found[0].message.contains("order_numbers_are_well_formed"));

    // OpenAI Chat: the model chose to call, but says it stopped.
    let out = outcomes_on(
        "openai",
        "001-where-is-my-order",
        &reply("", vec![lookup("BR-10452")], "stop"),
    );
    assert_eq!(
        codes(&out),
        [("tool_finish_mismatch", "/finish_reason".into())]
    );
    // A forced named call may say `stop`.
    let out = outcomes_on(
        "openai",
        "028-named-lookup",
        &reply("", vec![lookup("BR-10877")], "stop"),
    );
    assert!(all_passed(&out), "{out:?}");
    // Anthropic says `tool_use` whenever it calls.
    let out = outcomes_on(
        "anthropic",
        "001-where-is-my-order",
        &reply("", vec![lookup("BR-10452")], "end_turn"),
    );
    assert_eq!(
        codes(&out),
        [("tool_finish_mismatch", "/finish_reason".into())]
    );
}

#[test]
fn a_json_answer_with_tools_declared_is_read_from_the_text_never_from_a_call() {
    let expected = case(&suite(), "020-handoff-note-refund-over-limit")
        .expected
        .unwrap();
    let out = outcomes(
        "020-handoff-note-refund-over-limit",
        &reply(&expected.to_string(), vec![], "stop"),
    );
    assert!(all_passed(&out), "{out:?}");
    // The model called a tool instead: the call is unexpected, and there is no JSON
    // answer, even though the call's arguments are JSON.
    let out = outcomes(
        "020-handoff-note-refund-over-limit",
        &reply("", vec![lookup("BR-10702")], "tool_calls"),
    );
    let json = out.iter().find(|o| o.check == "json").unwrap();
    assert_eq!(json.status, Status::Fail);
    assert_eq!(json.findings[0].code, "empty_output");
    assert_eq!(
        codes(&out),
        [("tool_call_unexpected", "/tool_calls/0".into())]
    );
}

#[test]
fn the_shipped_suite_holds_on_the_calls_it_expects() {
    // What a faithful simulation answers: every expected call to its first allowed
    // tool, with arguments from the tool's schema and the pinned values. Every check,
    // the tool rules included, must pass on every case.
    let suite = suite();
    let checks = Checks::for_suite(&suite).unwrap();
    let (mut calls, mut none, mut parallel, mut json_answers) = (0, 0, 0, 0);
    for case_ref in &suite.cases {
        let case = case_ref.load().unwrap();
        let rendered = suite.request(&case, &case_ref.path()).unwrap();
        let tools = &rendered.conversation.as_ref().unwrap().tools;
        let answer = ToolAnswer::of(&case, tools);
        let made: Vec<ToolCall> = answer
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                ToolCall::from_value(Some(format!("call_{i}")), c.name.clone(), &c.arguments)
            })
            .collect();
        let text = match case.answer() {
            Answer::Json => {
                json_answers += 1;
                case.expected.clone().unwrap().to_string()
            }
            Answer::Text => {
                none += 1;
                "Happy to help!".to_string()
            }
            Answer::ToolCalls(expected) => {
                calls += 1;
                parallel += usize::from(expected.len() > 1);
                String::new()
            }
        };
        let finish = if made.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let out = checks
            .evaluate(
                &suite,
                &case,
                &provider("openai-compatible"),
                Ok(&reply(&text, made, finish)),
                CallFacts {
                    now: 1_800_000_000,
                    tokens: None,
                },
            )
            .outcomes;
        assert!(all_passed(&out), "{}: {out:#?}", case.id);
    }
    // What the suite is made of: realistic multi-turn support, with cases that must not
    // call a tool and cases that need parallel calls.
    assert!(suite.cases.len() >= 30, "{}", suite.cases.len());
    assert!((4..=6).contains(&suite.tools.len()));
    assert!(
        none >= 5 && parallel >= 3 && json_answers >= 3 && calls >= 15,
        "{none} {parallel} {json_answers} {calls}"
    );
}

#[test]
fn conform_check_places_every_problem_of_a_request_case() {
    let project = Project::new(&["anthropic"]);
    project.write(
        "fixtures/tools-broken/suite.toml",
        "description = \"broken on purpose\"\nschema = \"schema.json\"\n",
    );
    project.write(
        "fixtures/tools-broken/schema.json",
        "{\"type\": \"object\"}\n",
    );
    // Line by line, so that every position below can be read off the text.
    project.write(
        "fixtures/tools-broken/cases/001-broken.json",
        r#"{
  "vars": {"name": "Ada"},
  "messages": [
    {"role": "assistant", "content": "Hello {{ name }}"},
    {"role": "user", "content": "Where is {{ order }}?"},
    {"role": "tool", "tool_call_id": "call_9", "content": "{}"}
  ],
  "tools": [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"id": {"type": "strnig"}}}}}
  ],
  "tool_choice": "none",
  "expect": {"tool_calls": [{"name": "lookup"}, {"name": "refund", "arguments": {"id": 1}}]}
}
"#,
    );
    let out = project.cmd().args(["check", "anthropic"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let at = |line: usize, col: usize, pointer: &str, text: &str| {
        let want = format!("fixtures/tools-broken/cases/001-broken.json:{line}:{col}: {pointer}: ");
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&want) && l.contains(text)),
            "no `{want}…{text}` in:\n{stderr}"
        );
    };
    // Each at the key it concerns (an array element at its first character).
    at(
        10,
        39,
        "/tools/1/function/name",
        "a second tool named `lookup`",
    );
    at(
        10,
        112,
        "/tools/1/function/parameters/properties/id/type",
        "not a valid JSON Schema",
    );
    at(
        6,
        22,
        "/messages/2/tool_call_id",
        "no earlier assistant turn made a call with id `call_9`",
    );
    at(13, 14, "/expect/tool_calls", "tool_choice is none");
    at(
        13,
        50,
        "/expect/tool_calls/1/name",
        "`refund`, which is not declared",
    );
    at(
        13,
        68,
        "/expect/tool_calls/1/arguments",
        "not a JSON pointer",
    );
    at(
        4,
        5,
        "/messages/0",
        "provider `anthropic`: Anthropic needs the conversation to begin with a user message",
    );
    at(5, 22, "/messages/1/content", "{{ order }}");
    assert!(stderr.contains("8 problems found"), "{stderr}");
}
