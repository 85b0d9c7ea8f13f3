//! `conform check`: every problem, each with its file, line and field.

use crate::common;

use common::Project;

#[test]
fn the_shipped_configuration_is_clean() {
    let out = assert_cmd::Command::cargo_bin("conform")
        .unwrap()
        .current_dir(common::REPO)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_problem_is_listed_with_file_line_and_field() {
    let project = Project::new(&["openai"]);
    project.write(
        "providers/typo.toml",
        "kind = \"openai\"\nmodel = \"gpt-4o\"\nmodle = \"gpt-4o-mini\"\n",
    );
    project.write(
        "providers/nested.toml",
        "kind = \"openai\"\nmodel = \"m\"\n\n[limits]\nconcurency = 4\n",
    );
    // A case that does not define a variable the prompt uses.
    let case = project.path("fixtures/ticket-triage/cases/999-no-tier.json");
    std::fs::write(
        &case,
        "{\n  \"description\": \"no tier\",\n  \"vars\": {\"subject\": \"Hi\", \"body\": \"Help\"}\n}\n",
    )
    .unwrap();

    let out = project.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("providers/typo.toml:3:1: modle: unknown field `modle`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("providers/nested.toml:5:1: concurency: unknown field"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "999-no-tier.json:3:3: vars.customer_tier: the prompt uses {{ customer_tier }}"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("3 problems found"), "{stderr}");
}

#[test]
fn a_malformed_case_names_its_line_and_column() {
    let project = Project::new(&["sim-steady"]);
    project.write(
        "fixtures/ticket-triage/cases/998-broken.json",
        "{\n  \"vars\": {\"subject\": \"x\",}\n}\n",
    );
    project.write(
        "fixtures/ticket-triage/cases/997-unknown.json",
        "{\n  \"varz\": {}\n}\n",
    );
    let out = project.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("998-broken.json:2:"), "{stderr}");
    assert!(stderr.contains("997-unknown.json:2:"), "{stderr}");
    assert!(stderr.contains("unknown field `varz`"), "{stderr}");
    assert!(stderr.contains("2 problems found"), "{stderr}");
}

#[test]
fn an_invalid_schema_is_reported_keyword_by_keyword_in_the_users_file() {
    let project = Project::new(&["sim-steady"]);
    project.write(
        "fixtures/ticket-triage/schema.json",
        r#"{
  "type": "object",
  "properties": {
    "category": {"type": "strnig"},
    "tags": {"type": "array", "maxItems": -3}
  },
  "required": "category"
}
"#,
    );
    let out = project.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = "fixtures/ticket-triage/schema.json";
    for at in [
        format!("{file}:4:18: /properties/category/type: not a valid JSON Schema"),
        format!("{file}:5:31: /properties/tags/maxItems: not a valid JSON Schema"),
        format!("{file}:7:3: /required: not a valid JSON Schema"),
    ] {
        assert!(stderr.contains(&at), "no `{at}` in:\n{stderr}");
    }
    // The user's schema, not the meta-schema's insides.
    assert!(!stderr.contains("anyOf/"), "{stderr}");
    assert!(!stderr.contains("/allOf/"), "{stderr}");
    assert!(stderr.contains("3 problems found"), "{stderr}");
}

#[test]
fn truncated_json_files_are_placed_where_they_stop() {
    let project = Project::new(&[]);
    // Cut right after a line break: serde_json itself would say column 0.
    project.write(
        "fixtures/ticket-triage/schema.json",
        "{\n  \"type\": \"object\",\n",
    );
    project.write(
        "fixtures/invoice-extraction/cases/996-cut.json",
        "{\n  \"vars\": {\"subject\": \"Refund\",\n",
    );
    let out = project.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fixtures/ticket-triage/schema.json:2:20: EOF while parsing"),
        "{stderr}"
    );
    assert!(
        stderr.contains("996-cut.json:2:32: EOF while parsing"),
        "{stderr}"
    );
    assert!(stderr.contains("cut off"), "{stderr}");
    assert!(!stderr.contains(":0:"), "{stderr}");
}

/// `conform check` reads each case file once: the pre-flight a run makes, what each vendor
/// refuses in a case and whether its prompt fits each context window all look at the case
/// as that one read found it. Each used to read it again (three reads of every case).
#[cfg(target_os = "linux")]
#[test]
fn check_reads_each_case_once() {
    use conform_config::{Paths, Selection, Workspace};
    let project = Project::new(&["openai"]);
    let suite = project.path("fixtures/ticket-triage");
    let padding = "The parcel arrived on time. ".repeat(600);
    let mut case_bytes = 0;
    for entry in std::fs::read_dir(suite.join("cases")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    for i in 0..200 {
        let case = serde_json::json!({
            "vars": {"subject": format!("Ticket {i}"), "body": padding, "customer_tier": "pro"},
        })
        .to_string();
        case_bytes += case.len() as u64;
        project.write(&format!("fixtures/ticket-triage/cases/{i:03}.json"), &case);
    }
    let selection = Selection {
        providers: vec!["openai".into()],
        suites: vec!["ticket-triage".into()],
    };
    let workspace = Workspace::load(&Paths::under(project.root()), &selection).unwrap();
    // Every prompt is counted against the provider's context window: all three look.
    assert!(workspace.providers[0].tokenizer.context_window.is_some());

    let probes = project.path("probes.json");
    let (found, read) =
        common::bytes_read_by(|| conform::run::preflight::preflight(workspace, &probes, None));
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    assert!(
        read >= case_bytes && read < case_bytes + case_bytes / 2,
        "read {read} bytes for {case_bytes} bytes of cases"
    );
}

/// Issue 42: a suite whose `agree` pointers have nothing to compare with (cases without
/// `expected` or a recorded reference, no reference in `suite.toml`) is a warning at its
/// `agree` line: `conform check` cannot know whether the run will be given
/// `--reference`, and `conform run` refuses it without one. A reference in `suite.toml`
/// settles it.
#[test]
fn agree_with_nothing_to_compare_with_is_a_warning_that_the_run_needs_a_reference() {
    let project = Project::new(&[]);
    project.chat_provider("local", "http://127.0.0.1:9");
    project.chat_provider("primary", "http://127.0.0.1:9");
    let suite = "user = \"Label {{ text }}\"\nschema = \"schema.json\"\nagree = [\"/label\"]\n";
    project.write("fixtures/labels/suite.toml", suite);
    project.write(
        "fixtures/labels/schema.json",
        r#"{"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"],
            "additionalProperties": false}"#,
    );
    project.write("fixtures/labels/cases/a.json", r#"{"vars": {"text": "a"}}"#);
    project.write(
        "fixtures/labels/cases/b.json",
        r#"{"vars": {"text": "b"}, "expected": {"label": "b"}}"#,
    );
    project.write("fixtures/labels/cases/c.json", r#"{"vars": {"text": "c"}}"#);
    let out = project
        .cmd()
        .args(["check", "--suite", "labels"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warning = "warning: ".to_string()
        + &project
            .path("fixtures/labels/suite.toml")
            .display()
            .to_string()
        + ":3:1: agree: suite `labels`: agree compares /label, but 2 cases (cases/a.json, cases/c.json) \
           have neither `expected` nor a recorded `reference`: `conform run` refuses the suite unless \
           it is given --reference PRIMARY; add `expected` holding /label to each, name a reference \
           in suite.toml (reference = \"PRIMARY\"), or run with --reference PRIMARY";
    assert!(stderr.contains(&warning), "no `{warning}` in:\n{stderr}");

    project.write(
        "fixtures/labels/suite.toml",
        &format!("{suite}reference = \"primary\"\n"),
    );
    let out = project
        .cmd()
        .args(["check", "--suite", "labels"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("agree compares"), "{stderr}");
}
