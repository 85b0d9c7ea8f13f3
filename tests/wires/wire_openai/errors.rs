//! Real error bodies classified, with the provider's message kept and the exact number of
//! upstream requests: one for what a retry cannot cure, 1 + retries for what it can.

use conform_wire::provider::{Effect, ErrorKind};
use serde_json::{Value, json};

use super::support::*;

struct Case {
    file: &'static str,
    kind: &'static str,
    route: &'static str,
    expected: ErrorKind,
    code: &'static str,
    effect: Effect,
}

const fn openai(
    file: &'static str,
    expected: ErrorKind,
    code: &'static str,
    effect: Effect,
) -> Case {
    Case {
        file,
        kind: "openai",
        route: CHAT,
        expected,
        code,
        effect,
    }
}

const fn compatible(
    file: &'static str,
    expected: ErrorKind,
    code: &'static str,
    effect: Effect,
) -> Case {
    Case {
        file,
        kind: "openai-compatible",
        route: CHAT,
        expected,
        code,
        effect,
    }
}

const CASES: &[Case] = &[
    openai(
        "openai_error_400_context_length_exceeded.json",
        ErrorKind::ContextLength,
        "context_length_exceeded",
        Effect::ConformanceFailure,
    ),
    openai(
        "openai_error_400_invalid_json_schema_chat.json",
        ErrorKind::BadRequest,
        "bad_request",
        Effect::ConfigError,
    ),
    Case {
        file: "openai_error_400_invalid_json_schema_responses.json",
        kind: "openai-responses",
        route: RESPONSES,
        expected: ErrorKind::BadRequest,
        code: "bad_request",
        effect: Effect::ConfigError,
    },
    openai(
        "openai_error_400_temperature_unsupported_value_reasoning_models.json",
        ErrorKind::BadRequest,
        "bad_request",
        Effect::ConfigError,
    ),
    openai(
        "openai_error_401_invalid_api_key.json",
        ErrorKind::Auth,
        "auth_failed",
        Effect::HaltProvider,
    ),
    openai(
        "openai_error_404_model_not_found.json",
        ErrorKind::NotFound,
        "not_found",
        Effect::ConfigError,
    ),
    // A 429 that needs billing action, not a wait.
    openai(
        "openai_error_429_insufficient_quota.json",
        ErrorKind::QuotaExhausted,
        "quota_exhausted",
        Effect::HaltProvider,
    ),
    // `rate_limit_exceeded`, but this request alone exceeds the organisation's per-minute
    // budget: an account limit, which stops the provider like `insufficient_quota` does,
    // and is not the model's failure.
    openai(
        "openai_error_429_request_too_large_tpm.json",
        ErrorKind::RequestTooLarge,
        "request_too_large",
        Effect::HaltProvider,
    ),
    openai(
        "openai_error_500_server_error.json",
        ErrorKind::ServerError,
        "server_error",
        Effect::ProviderFailure,
    ),
    compatible(
        "vllm_error_400_context_length_legacy_flat.json",
        ErrorKind::ContextLength,
        "context_length_exceeded",
        Effect::ConformanceFailure,
    ),
    compatible(
        "vllm_error_400_max_tokens_legacy_flat.json",
        ErrorKind::BadRequest,
        "bad_request",
        Effect::ConfigError,
    ),
    compatible(
        "vllm_error_shape_current_nested.json",
        ErrorKind::BadRequest,
        "bad_request",
        Effect::ConfigError,
    ),
    compatible(
        "llamacpp_error_400_exceed_context_size.json",
        ErrorKind::ContextLength,
        "context_length_exceeded",
        Effect::ConformanceFailure,
    ),
];

/// The provider's own message, from the nested or the flat shape.
fn message_of(body: &[u8]) -> String {
    let body: Value = serde_json::from_slice(body).unwrap();
    let err = body.get("error").unwrap_or(&body);
    err["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn every_error_file_is_classified_with_its_message_and_request_count() {
    for case in CASES {
        let (status, body) = error_file(case.file);
        let server = serve(case.route, status, body.clone(), JSON).await;
        let config = provider(&server, case.kind, "m", "");
        let err = call(config, &Ask::user("q")).await.unwrap_err();
        let f = case.file;
        assert_eq!(err.kind, case.expected, "{f}: {err}");
        assert_eq!(err.code(), case.code, "{f}");
        assert_eq!(err.kind.effect(), case.effect, "{f}");
        assert_eq!(err.status, Some(status), "{f}");
        // A bad request is a configuration error that quotes the provider.
        assert_eq!(err.message, message_of(&body), "{f}");
        let expected_requests = if case.expected.retryable() {
            1 + MAX_RETRIES
        } else {
            1
        };
        assert_eq!(received(&server).await.len(), expected_requests, "{f}");
    }
}

/// Pins the request counts above: of all these, only the 500 is worth sending again
/// (insufficient quota and a too-large request are 429s that a wait does not cure).
#[test]
fn only_the_server_error_is_retried() {
    let retried: Vec<_> = CASES
        .iter()
        .filter(|c| c.expected.retryable())
        .map(|c| c.file)
        .collect();
    assert_eq!(retried, ["openai_error_500_server_error.json"]);
}

/// The nested vLLM file is a shape with a placeholder message; with vLLM's real
/// context-overflow message (from the legacy flat file) in that shape, it is a context
/// failure too, while the same shape with a parameter complaint stays a bad request.
#[tokio::test]
async fn vllm_nested_shape_with_a_real_context_message() {
    let (_, flat) = error_file("vllm_error_400_context_length_legacy_flat.json");
    let overflow = message_of(&flat);
    let (status, nested) = error_file("vllm_error_shape_current_nested.json");
    let mut nested: Value = serde_json::from_slice(&nested).unwrap();
    assert_eq!(nested["error"]["code"], 400);
    nested["error"]["message"] = json!(overflow);
    let server = serve(CHAT, status, serde_json::to_vec(&nested).unwrap(), JSON).await;
    let config = provider(&server, "openai-compatible", "m", "");
    let err = call(config, &Ask::user("q")).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ContextLength);
    assert_eq!(err.message, overflow);
    assert_eq!(received(&server).await.len(), 1);
}

/// llama.cpp reads only the nested `response_format.json_schema.schema` (a flat `schema`
/// is silently unconstrained) and only `max_tokens`: what it was sent when it overflowed.
#[tokio::test]
async fn llamacpp_was_sent_the_nested_schema_shape() {
    let (status, body) = error_file("llamacpp_error_400_exceed_context_size.json");
    let server = serve(CHAT, status, body, JSON).await;
    let config = provider(&server, "openai-compatible", "local", "");
    let err = call(config, &Ask::user("q")).await.unwrap_err();
    assert!(err.message.contains("exceeds the available context size"));
    let sent = only_request(&server).await;
    let format = &sent["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_same(
        &location_schema(),
        &format["json_schema"]["schema"],
        "response_format.json_schema.schema",
    );
    assert!(format.get("schema").is_none());
    assert_eq!(sent["max_tokens"], 1024);
    assert!(sent.get("max_completion_tokens").is_none());
}
