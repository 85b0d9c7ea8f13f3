//! Simulated providers speak each vendor's wire well enough for that vendor's adapter:
//! the faithful answer arrives intact, a cut-off is a cut-off, a forced tool call
//! carries the object, and a rate-limited simulation recovers within its retries.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::{FAST_LIMITS, config, endpoint};
use conform_config::{Paths, Selection, Workspace};
use conform_wire::provider::{CallSpec, FinishKind};
use conform_wire::sim::{AnswerBook, SimServer};
use serde_json::Value;

const WIRES: [&str; 5] = [
    "openai",
    "openai-compatible",
    "anthropic",
    "gemini",
    "ollama",
];

/// The first ticket-triage case, its rendered prompt, expected answer and the suite.
fn first_case() -> (conform_config::Suite, conform_config::Prompt, Value) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let selection = Selection {
        providers: vec!["sim-steady".into()],
        suites: vec!["ticket-triage".into()],
    };
    let workspace = Workspace::load(&Paths::under(root), &selection).unwrap();
    let suite = workspace.suites.into_iter().next().unwrap();
    let case_ref = &suite.cases[0];
    let case = case_ref.load().unwrap();
    let prompt = suite.render(&case, &case_ref.path()).unwrap();
    let expected = case.expected.clone().unwrap();
    (suite, prompt, expected)
}

async fn ask(
    wire: &str,
    behaviour: &str,
    extra: &str,
) -> (conform_wire::provider::Completion, Value) {
    let (suite, prompt, expected) = first_case();
    let book = Arc::new(AnswerBook::from_suites(&[&suite]).unwrap());
    let toml = format!(
        "kind = \"sim\"\nmodel = \"sim-{wire}\"\ntimeout = \"5s\"\nmax_output_tokens = 16\n{extra}\n{FAST_LIMITS}[sim]\nbehaviour = \"{behaviour}\"\nexpect = \"conformant\"\nlatency = \"1ms\"\nwire = \"{wire}\"\n"
    );
    let mut config = config("sim", &toml).as_ref().clone();
    let server = SimServer::start(&config, book).await.expect("a simulation");
    config.base_url = server.uri();
    let endpoint = endpoint(Arc::new(config));
    let spec = CallSpec {
        prompt: &prompt,
        schema: &suite.schema,
        schema_name: "ticket-triage",
        conversation: None,
    };
    let completion = endpoint
        .call(&spec, 100)
        .await
        .unwrap_or_else(|e| panic!("{wire}: {e}"));
    (completion, expected)
}

#[tokio::test]
async fn a_steady_simulation_answers_through_every_adapter() {
    for wire in WIRES {
        let (completion, expected) = ask(wire, "steady", "").await;
        let reply = completion.reply;
        let answer: Value = serde_json::from_str(&reply.text).unwrap();
        assert_eq!(answer, expected, "{wire}");
        assert_eq!(reply.finish.kind, FinishKind::Stop, "{wire}");
        assert_eq!(
            reply.served_model.as_deref(),
            Some(format!("sim-{wire}-sim-2026-06-01").as_str())
        );
        assert!(reply.usage.prompt_tokens.is_some_and(|n| n > 0), "{wire}");
    }
}

#[tokio::test]
async fn a_truncating_simulation_stops_at_each_vendors_length_reason() {
    for (wire, raw) in [
        ("openai", "length"),
        ("anthropic", "max_tokens"),
        ("gemini", "MAX_TOKENS"),
        ("ollama", "length"),
    ] {
        let (completion, _) = ask(wire, "truncated", "").await;
        let reply = completion.reply;
        assert_eq!(reply.finish.kind, FinishKind::Length, "{wire}");
        assert_eq!(reply.finish.raw.as_deref(), Some(raw), "{wire}");
        // max_output_tokens = 16: at most 64 characters.
        assert!(reply.text.len() <= 64, "{wire}: {}", reply.text);
    }
}

#[tokio::test]
async fn a_forced_tool_call_carries_the_object() {
    for (wire, raw) in [
        ("openai", "stop"),
        ("anthropic", "tool_use"),
        ("gemini", "STOP"),
    ] {
        let (completion, expected) = ask(wire, "steady", "structured_output = \"tool\"").await;
        let reply = completion.reply;
        assert_eq!(
            serde_json::from_str::<Value>(&reply.text).unwrap(),
            expected,
            "{wire}"
        );
        assert_eq!(reply.finish.raw.as_deref(), Some(raw), "{wire}");
    }
}

#[tokio::test]
async fn a_rate_limited_anthropic_simulation_recovers_within_its_retries() {
    // Three 429s in the Anthropic shape with `retry-after: 1`, then the answer: the
    // third retry reaches it.
    let (suite, prompt, _) = first_case();
    let book = Arc::new(AnswerBook::from_suites(&[&suite]).unwrap());
    let toml = "kind = \"sim\"\nmodel = \"sim-rl\"\ntimeout = \"5s\"\n[limits]\nmax_retries = 3\nretry_base_wait = \"5ms\"\n[sim]\nbehaviour = \"rate-limited\"\nexpect = \"conformant\"\nlatency = \"1ms\"\nwire = \"anthropic\"\n";
    let mut config = config("sim", toml).as_ref().clone();
    let server = SimServer::start(&config, book).await.expect("a simulation");
    config.base_url = server.uri();
    let endpoint = endpoint(Arc::new(config));
    let spec = CallSpec {
        prompt: &prompt,
        schema: &suite.schema,
        schema_name: "ticket-triage",
        conversation: None,
    };
    let completion = endpoint.call(&spec, 100).await.unwrap();
    assert_eq!(completion.retries, 3);
    assert_eq!(server.requests(), 4);
}

#[tokio::test]
async fn a_streaming_simulation_streams_the_same_answer_through_every_adapter() {
    for wire in WIRES {
        let (completion, expected) = ask(wire, "steady", "stream = true").await;
        let reply = completion.reply;
        assert_eq!(
            serde_json::from_str::<Value>(&reply.text).unwrap(),
            expected,
            "{wire}"
        );
        assert_eq!(reply.finish.kind, FinishKind::Stop, "{wire}");
        assert!(reply.usage.prompt_tokens.is_some_and(|n| n > 0), "{wire}");
        // The answer came in pieces: the first one before the whole.
        assert!(completion.first_token.is_some(), "{wire}");
    }
    // A forced tool call streams its arguments.
    for wire in ["openai", "anthropic", "gemini"] {
        let (completion, expected) = ask(
            wire,
            "steady",
            "stream = true\nstructured_output = \"tool\"",
        )
        .await;
        let text = &completion.reply.text;
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap_or_else(|e| panic!("{wire}: {e}: {text}")),
            expected,
            "{wire}"
        );
    }
}
