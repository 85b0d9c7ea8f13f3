//! `conform probe`: simulated providers that enforce, reject, strip and ignore each of
//! ten keywords are classified correctly, 40 of 40, through four vendors' wires; the cost
//! is printed before anything is sent; the results land in `probes.json`, from which
//! `conform check` warns offline (`schema_keyword_ignored`).

use crate::common;

use std::sync::Arc;

use common::*;
use conform_wire::probe::{self, Support, catalogue};
use conform_wire::sim::{AnswerBook, SimServer};
use serde_json::Value;

const KEYWORDS: [&str; 10] = [
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "multipleOf",
    "pattern",
    "enum",
    "uniqueItems",
];

fn sim_toml(wire: &str, keywords: &str) -> String {
    format!(
        "kind = \"sim\"\nmodel = \"sim-{wire}\"\ntimeout = \"5s\"\nmax_output_tokens = 64\n{FAST_LIMITS}[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nlatency = \"1ms\"\nwire = \"{wire}\"\n[sim.schema_keywords]\n{keywords}\n"
    )
}

/// Probes the ten keywords on a simulation speaking `wire` with `keywords` handling.
async fn probe_sim(wire: &str, keywords: &str) -> (Vec<probe::Outcome>, u64) {
    let mut config = config("sim", &sim_toml(wire, keywords)).as_ref().clone();
    let server = SimServer::start(&config, Arc::new(AnswerBook::default()))
        .await
        .expect("a simulation");
    config.base_url = server.uri();
    let endpoint = endpoint(Arc::new(config));
    let probes: Vec<catalogue::Probe> = KEYWORDS.iter().filter_map(|k| catalogue::of(k)).collect();
    assert_eq!(probes.len(), 10);
    let outcomes = probe::run(&endpoint, &probes, 3).await;
    (outcomes, server.requests())
}

#[tokio::test]
async fn enforcing_rejecting_stripping_and_ignoring_simulations_are_classified_40_of_40() {
    let mut right = 0;
    for (wire, handling, expected) in [
        ("openai", "enforce", Support::Enforces),
        ("anthropic", "reject", Support::Rejects),
        ("gemini", "strip", Support::Strips),
        ("ollama", "ignore", Support::Ignores),
    ] {
        let (outcomes, requests) = probe_sim(wire, &format!("\"*\" = \"{handling}\"")).await;
        for (keyword, outcome) in KEYWORDS.iter().zip(&outcomes) {
            assert_eq!(outcome.keyword, *keyword);
            assert_eq!(
                outcome.support, expected,
                "{wire} {handling} {keyword}: {}",
                outcome.detail
            );
            right += 1;
        }
        // What each classification cost: a rejection one request and one control; an
        // enforced keyword three pushed requests; the others one pushed (it broke) and
        // three plain.
        let per_keyword = match expected {
            Support::Rejects => 2,
            Support::Enforces => 3,
            _ => 4,
        };
        assert_eq!(requests, 10 * per_keyword, "{wire} {handling}");
    }
    assert_eq!(right, 40);
}

#[tokio::test]
async fn each_keyword_is_classified_by_its_own_handling() {
    // One provider, four ways at once (Gemini drops some keywords and enforces others).
    let table =
        "minItems = \"ignore\"\nmaxItems = \"strip\"\npattern = \"reject\"\n\"*\" = \"enforce\"";
    let (outcomes, _) = probe_sim("gemini", table).await;
    let support = |k: &str| outcomes.iter().find(|o| o.keyword == k).unwrap().support;
    assert_eq!(support("minItems"), Support::Ignores);
    assert_eq!(support("maxItems"), Support::Strips);
    assert_eq!(support("pattern"), Support::Rejects);
    assert_eq!(support("enum"), Support::Enforces);
    // The rejection names the keyword, as the provider's 400 did.
    let pattern = outcomes.iter().find(|o| o.keyword == "pattern").unwrap();
    assert!(pattern.detail.contains("pattern"), "{}", pattern.detail);
}

fn sim_provider(project: &Project, name: &str, handling: &str) {
    project.write(
        &format!("providers/{name}.toml"),
        &format!(
            "kind = \"sim\"\nmodel = \"{name}\"\ntimeout = \"5s\"\n[limits]\nconcurrency = 4\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nlatency = \"1ms\"\n[sim.schema_keywords]\n\"*\" = \"{handling}\"\n"
        ),
    );
}

#[test]
fn the_cost_comes_first_results_go_to_probes_json_and_check_warns_offline() {
    let project = Project::new(&[]);
    sim_provider(&project, "primary", "enforce");
    sim_provider(&project, "fallback", "ignore");

    // A dry run prints the cost and sends nothing.
    let out = project
        .cmd()
        .args(["probe", "fallback", "--suite", "ticket-triage", "--dry-run"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("cost: at most"), "{stdout}");
    assert!(stdout.contains("dry run: nothing sent"), "{stdout}");
    assert!(!project.path("probes.json").exists());

    // The primary enforces every keyword: no finding yet.
    let out = project
        .cmd()
        .args(["probe", "primary", "--suite", "ticket-triage"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");

    // The fallback ignores them: each keyword both use is a finding.
    let out = project
        .cmd()
        .args(["probe", "fallback", "--suite", "ticket-triage"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let cost = stdout.find("cost: at most").expect("the cost");
    let matrix = stdout.find("keyword ").expect("the matrix");
    assert!(
        cost < matrix,
        "the cost is printed before the results:\n{stdout}"
    );
    assert!(
        stdout.contains("schema_keyword_ignored: `maxItems`"),
        "{stdout}"
    );
    // Probed as the files say: not stale.
    assert!(!stdout.contains("probed before"), "{stdout}");
    // The matrix has both providers as columns.
    let header = stdout[matrix..].lines().next().unwrap();
    assert!(
        header.contains("fallback") && header.contains("primary"),
        "{header}"
    );

    let probes: Value =
        serde_json::from_slice(&std::fs::read(project.path("probes.json")).unwrap()).unwrap();
    assert_eq!(probes["format"], "conform.probes/v1");
    assert_eq!(
        probes["providers"]["fallback"]["keywords"]["maxItems"]["support"],
        "ignores"
    );
    assert_eq!(
        probes["providers"]["primary"]["keywords"]["maxItems"]["support"],
        "enforces"
    );
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("probe: "))
        .and_then(|l| l.split(" (").next())
        .expect("the report's path");
    let report: Value = serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap();
    assert_eq!(report["provider"], "fallback");
    // The keyword × provider matrix, both providers in it.
    assert_eq!(report["matrix"]["maxItems"]["fallback"], "ignores");
    assert_eq!(report["matrix"]["maxItems"]["primary"], "enforces");
    assert!(report["requests_sent"].as_u64().unwrap() > 0);

    // `conform check`, offline, from the file: a warning, not a problem.
    let out = project
        .cmd()
        .args(["check", "--suite", "ticket-triage", "--primary", "primary"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("schema_keyword_ignored"),
        "{stderr}"
    );
    assert!(
        stderr.contains("fixtures/ticket-triage/schema.json"),
        "{stderr}"
    );
    assert!(stderr.contains("/properties/tags/maxItems"), "{stderr}");
    // Asked from the fallback's side, nothing is lost.
    let out = project
        .cmd()
        .args(["check", "--suite", "ticket-triage", "--primary", "fallback"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("schema_keyword_ignored"), "{stderr}");
}

/// The keywords only a tool's parameters use are probed too, and `conform check` places
/// what a fallback ignores of them in the tools file, at the keyword.
#[test]
fn keywords_of_tool_parameters_are_probed_and_warned_about_in_the_tools_file() {
    let project = Project::new(&[]);
    sim_provider(&project, "primary", "enforce");
    sim_provider(&project, "fallback", "ignore");
    for provider in ["primary", "fallback"] {
        let out = project
            .cmd()
            .args(["probe", provider, "--suite", "support-agent"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // support-agent's answer schema uses no length or bound; its tools do.
        let probed = stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("probed: "))
            .unwrap_or_else(|| panic!("the probed keywords:\n{stdout}"));
        for keyword in ["maxLength", "minLength", "maximum", "exclusiveMinimum"] {
            assert!(probed.contains(keyword), "{keyword} in `{probed}`");
        }
    }
    let probes: Value =
        serde_json::from_slice(&std::fs::read(project.path("probes.json")).unwrap()).unwrap();
    assert_eq!(
        probes["providers"]["fallback"]["keywords"]["maxLength"]["support"],
        "ignores"
    );

    let warning = check_warning(&project, "support-agent", "maxLength");
    assert!(
        warning.contains("fixtures/support-agent/tools.json:"),
        "placed in the tools file: {warning}"
    );

    // A tool a case declares itself is warned about in the case's file, at the keyword.
    project.write(
        "fixtures/support-agent/cases/099-own-tool.json",
        r#"{
  "messages": [{"role": "user", "content": "Note that the vase arrived broken."}],
  "tools": [
    {"type": "function", "function": {"name": "note", "parameters":
      {"type": "object", "properties": {"text": {"type": "string", "maxLength": 40}}}}}
  ],
  "expect": {"tool_calls": [{"name": "note"}]}
}
"#,
    );
    let warning = check_warning(&project, "support-agent", "099-own-tool.json:");
    assert!(
        warning.contains("099-own-tool.json:5:")
            && warning.contains("/tools/0/function/parameters/properties/text/maxLength"),
        "placed at the keyword: {warning}"
    );
}

/// `conform check --suite SUITE --primary primary`, which passes, and its first
/// `schema_keyword_ignored` warning that contains `naming`.
fn check_warning(project: &Project, suite: &str, naming: &str) -> String {
    let out = project
        .cmd()
        .args(["check", "--suite", suite, "--primary", "primary"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    stderr
        .lines()
        .find(|l| l.contains("schema_keyword_ignored") && l.contains(naming))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("a warning with `{naming}`:\n{stderr}"))
}
