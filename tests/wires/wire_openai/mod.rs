//! Every OpenAI, OpenAI-compatible (vLLM, llama.cpp) payload file in `tests/wire/`,
//! replayed byte for byte (status, body, content type) from a wiremock server through
//! the real [`conform_wire::provider::transport::Endpoint`]: request files compared with what
//! we send, responses decoded into the normalized reply, errors classified (with the
//! number of upstream requests wherever a retry could happen), streams folded.

mod errors;
mod requests;
mod responses;
mod streams;
mod support;
mod tools;

use conform_wire::provider::{Completion, Finish, FinishKind, Reply, Usage};

/// The reply a file must decode into.
pub fn reply(
    text: &str,
    kind: FinishKind,
    raw: &str,
    (prompt_tokens, output_tokens): (Option<u64>, Option<u64>),
    model: &str,
    fingerprint: Option<&str>,
) -> Reply {
    Reply {
        text: text.to_string(),
        tool_calls: Vec::new(),
        finish: Finish::new(kind, Some(raw)),
        refusal: None,
        usage: Usage {
            prompt_tokens,
            output_tokens,
        },
        served_model: Some(model.to_string()),
        system_fingerprint: fingerprint.map(str::to_string),
    }
}

/// The reply a forced-call file must decode into: the call's arguments are the text, and
/// the call itself is kept.
pub fn call_reply(mut expected: Reply, id: &str, name: &str) -> Reply {
    expected.tool_calls = vec![conform_wire::provider::ToolCall::from_text(
        Some(id.to_string()),
        name,
        expected.text.clone(),
    )];
    expected
}

/// The whole reply matches, and it took one request.
pub fn expect_reply(done: &Completion, expected: Reply) {
    assert_eq!(done.reply, expected);
    assert_eq!(done.retries, 0);
}

/// The files this target owns: each must be named in one of its test sources, so a
/// payload added to `tests/wire/` without a test fails here.
#[test]
fn every_openai_and_compatible_payload_file_is_exercised() {
    let sources = [
        include_str!("errors.rs"),
        include_str!("requests.rs"),
        include_str!("responses.rs"),
        include_str!("streams.rs"),
        include_str!("support.rs"),
        include_str!("tools.rs"),
    ]
    .concat();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wire");
    let mut owned: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            ["openai_", "vllm_", "llamacpp_"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .collect();
    owned.sort();
    assert!(owned.len() >= 41, "only {} files found", owned.len());
    let missing: Vec<_> = owned
        .iter()
        .filter(|n| !sources.contains(&format!("\"{n}\"")))
        .collect();
    assert!(missing.is_empty(), "no test names {missing:?}");
}
