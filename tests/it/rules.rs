//! Business rules: compile errors name the suite file, the rule and the position; a rule
//! that errors at run time fails with the error; the shipped suites' rules hold on every
//! case's expected answer.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::json;

use conform_check::check::{CallFacts, Checks, Status};
use conform_config::{ProviderConfig, Suite};
use conform_wire::provider::{Finish, FinishKind, Reply, Usage};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A project with one provider and one suite whose rules are `rules` (TOML).
fn project(rules: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("providers")).unwrap();
    std::fs::create_dir_all(dir.join("fixtures/orders/cases")).unwrap();
    std::fs::write(
        dir.join("providers/local.toml"),
        "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fixtures/orders/suite.toml"),
        format!("user = \"Order: {{{{ text }}}}\"\n\n{rules}"),
    )
    .unwrap();
    std::fs::write(
        dir.join("fixtures/orders/schema.json"),
        r#"{"type": "object", "properties": {"currency": {"type": "string"}, "total": {"type": "number"}}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("fixtures/orders/cases/one.json"),
        json!({"vars": {"text": "2 mugs, 12 EUR", "currency": "EUR"}}).to_string(),
    )
    .unwrap();
    tmp
}

#[test]
fn a_misspelled_variable_fails_conform_check_with_file_rule_and_position() {
    let tmp = project(
        "[[rules]]\nname = \"currency_matches_input\"\nexpr = '.currency == $inptu.currency'\nmessage = \"currency must match\"\n",
    );
    let out = Command::cargo_bin("conform")
        .unwrap()
        .args(["--root"])
        .arg(tmp.path())
        .arg("check")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let file = tmp.path().join("fixtures/orders/suite.toml");
    // Line 5 of suite.toml, column 22: where `$inptu` starts inside the expression.
    let location = format!("{}:5:22: rules.currency_matches_input:", file.display());
    assert!(stderr.contains(&location), "{stderr}");
    assert!(stderr.contains("undefined variable `$inptu`"), "{stderr}");
    assert!(
        stderr.contains("    .currency == $inptu.currency\n                 ^^^^^^"),
        "the span is drawn under the expression:\n{stderr}"
    );
    assert!(
        !stderr.contains("Undefined"),
        "not jaq's raw error: {stderr}"
    );
}

#[test]
fn syntax_errors_and_unknown_functions_are_reported_for_every_rule() {
    let tmp = project(
        "[[rules]]\nname = \"broken\"\nexpr = '.total > (1'\nmessage = \"m\"\n\n[[rules]]\nname = \"no_such\"\nexpr = '.total | frobnicate'\nmessage = \"m\"\n\n[[rules]]\nname = \"clock\"\nexpr = 'now > 0'\nmessage = \"m\"\n",
    );
    let out = Command::cargo_bin("conform")
        .unwrap()
        .arg("--root")
        .arg(tmp.path())
        .arg("check")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("rules.broken: syntax error"), "{stderr}");
    assert!(
        stderr.contains("rules.no_such: undefined function `frobnicate/0`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("rules.clock: `now` is not available in rules: use $now"),
        "{stderr}"
    );
}

fn reply(text: &str) -> Reply {
    Reply {
        text: text.to_string(),
        tool_calls: Vec::new(),
        finish: Finish::new(FinishKind::Stop, Some("stop")),
        refusal: None,
        usage: Usage::default(),
        served_model: None,
        system_fingerprint: None,
    }
}

fn local_provider() -> ProviderConfig {
    ProviderConfig::parse(
        Path::new("providers/local.toml"),
        "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n",
    )
    .unwrap()
}

#[test]
fn a_rule_that_multiplies_a_string_fails_with_the_error_text() {
    let tmp = project(
        "[[rules]]\nname = \"doubled\"\nexpr = '(.currency * .currency) != null'\nmessage = \"never mind\"\n\n[[rules]]\nname = \"currency_matches_input\"\nexpr = '.currency == $input.currency'\nmessage = \"currency must match the input\"\n",
    );
    let suite = Suite::load(&tmp.path().join("fixtures/orders")).unwrap();
    let checks = Checks::for_suite(&suite).unwrap();
    let case = suite.cases[0].load().unwrap();
    let outcomes = checks
        .evaluate(
            &suite,
            &case,
            &local_provider(),
            Ok(&reply(r#"{"currency": "USD", "total": 12}"#)),
            CallFacts::default(),
        )
        .outcomes;
    let rules = outcomes.iter().find(|o| o.check == "rules").unwrap();
    assert_eq!(rules.status, Status::Fail);
    let error = &rules.findings[0];
    assert_eq!(error.code, "rule_error");
    assert_eq!(error.path.as_deref(), Some("rules.doubled"));
    assert!(
        error.message.contains(r#"cannot calculate "USD" * "USD""#),
        "the jaq error text: {}",
        error.message
    );
    let failed = &rules.findings[1];
    assert_eq!(failed.code, "rule_failed");
    assert!(
        failed.message.contains("currency must match the input"),
        "{}",
        failed.message
    );
    assert!(
        failed.message.contains("yielded false"),
        "{}",
        failed.message
    );
    assert!(
        failed.message.contains(r#""currency":"USD""#),
        "the offending value: {}",
        failed.message
    );
}

#[test]
fn shipped_rules_compile_and_hold_on_every_expected_answer() {
    // A fixed clock after every shipped invoice date: `$now` is the run's start.
    let now = time::macros::datetime!(2026-09-01 0:00 UTC).unix_timestamp();
    let provider = local_provider();
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("fixtures")).unwrap() {
        let dir = entry.unwrap().path();
        let suite = Suite::load(&dir).unwrap();
        let checks = Checks::for_suite(&suite).unwrap();
        for case_ref in &suite.cases {
            let case = case_ref.load().unwrap();
            // A case that expects tool calls or text has no JSON answer for the rules;
            // tests/tool_cases.rs holds its calls to the tool rules.
            if !matches!(case.answer(), conform_config::Answer::Json) {
                continue;
            }
            let expected = case
                .expected
                .clone()
                .expect("every shipped case with a JSON answer has an expected answer");
            let outcomes = checks
                .evaluate(
                    &suite,
                    &case,
                    &provider,
                    Ok(&reply(&expected.to_string())),
                    CallFacts { now, tokens: None },
                )
                .outcomes;
            for o in &outcomes {
                assert_eq!(
                    o.status,
                    Status::Pass,
                    "{}/{}: {} {:?}",
                    suite.name,
                    case.id,
                    o.check,
                    o.findings
                );
            }
            if !suite.rules.is_empty() {
                assert!(outcomes.iter().any(|o| o.check == "rules"));
                checked += 1;
            }
        }
    }
    assert!(checked >= 33, "rules ran on {checked} cases");
}

#[test]
fn a_date_in_the_future_fails_against_the_run_clock() {
    let suite = Suite::load(&root().join("fixtures/invoice-extraction")).unwrap();
    let checks = Checks::for_suite(&suite).unwrap();
    let case = suite.cases[0].load().unwrap();
    let mut answer = case.expected.clone().unwrap();
    answer["issue_date"] = json!("2031-01-01");
    answer["due_date"] = json!(null);
    let now = time::macros::datetime!(2026-09-01 0:00 UTC).unix_timestamp();
    let outcomes = checks
        .evaluate(
            &suite,
            &case,
            &local_provider(),
            Ok(&reply(&answer.to_string())),
            CallFacts { now, tokens: None },
        )
        .outcomes;
    let rules = outcomes.iter().find(|o| o.check == "rules").unwrap();
    let names: Vec<_> = rules
        .findings
        .iter()
        .map(|f| f.path.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["rules.issue_date_not_in_future"]);
}
