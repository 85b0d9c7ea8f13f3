//! The Anthropic adapter against wiremock servers speaking the recorded payloads of
//! `tests/wire/anthropic_*`: what we send, what we read, how we classify and retry.

use crate::common;

use common::*;
use conform_wire::provider::{ErrorKind, FinishKind};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn toml(uri: &str, extra: &str) -> String {
    toml_for("claude-sonnet-4-5", uri, extra)
}

fn toml_for(model: &str, uri: &str, extra: &str) -> String {
    format!(
        "kind = \"anthropic\"\nmodel = \"{model}\"\nbase_url = \"{uri}\"\nmax_output_tokens = 1024\ntimeout = \"5s\"\n{extra}\n{FAST_LIMITS}"
    )
}

async fn server_answering(template: ResponseTemplate) -> MockServer {
    answering(r"^/v1/messages$", template).await
}

/// The prompt and schema of a recorded request.
fn recorded_call(recorded: &Value) -> (String, Value) {
    let user = recorded["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let schema = recorded
        .pointer("/output_config/format/schema")
        .or_else(|| recorded.pointer("/tools/0/input_schema"))
        .unwrap()
        .clone();
    (user, schema)
}

#[tokio::test]
async fn output_config_request_and_response_match_the_recording() {
    let recorded = wire("anthropic_messages_output_config_json_schema_request.json");
    let server = server_answering(ok(
        "anthropic_messages_output_config_json_schema_response.json",
    ))
    .await;
    let config = config(
        "anthropic",
        &toml(&server.uri(), "[anthropic]\nsend_temperature = false"),
    );
    let (user, schema) = recorded_call(&recorded["body"]);
    let completion = call(&endpoint(config), None, &user, &schema, "OrderItem")
        .await
        .unwrap();

    let sent = requests(&server).await;
    assert_eq!(sent.len(), 1);
    // The recorded body exactly: no temperature, no prefill, nothing extra.
    assert_eq!(normalized(&body(&sent[0])), normalized(&recorded["body"]));
    let headers = &recorded["headers_sent_excluding_sdk_telemetry_and_x-api-key"];
    assert_eq!(
        sent[0].headers.get("anthropic-version").unwrap(),
        headers["anthropic-version"].as_str().unwrap()
    );
    assert_eq!(sent[0].headers.get("x-api-key").unwrap(), TEST_KEY);
    assert!(sent[0].headers.get("authorization").is_none());

    let reply = completion.reply;
    assert_eq!(
        reply.text,
        "{\"product_name\": \"Green Tea\", \"price\": 5.50, \"quantity\": 2}"
    );
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.finish.raw.as_deref(), Some("end_turn"));
    assert_eq!(reply.usage.prompt_tokens, Some(249));
    assert_eq!(reply.usage.output_tokens, Some(26));
    assert_eq!(
        reply.served_model.as_deref(),
        Some("claude-sonnet-4-5-20250929")
    );
    assert_eq!(completion.retries, 0);
}

#[tokio::test]
async fn temperature_is_sent_unless_the_config_says_it_cannot_be() {
    let recorded = wire("anthropic_messages_output_config_temp0_request.captured.json");
    let server = server_answering(ok(
        "anthropic_messages_output_config_json_schema_response.json",
    ))
    .await;
    let (user, schema) = recorded_call(&recorded["body"]);
    call(
        &endpoint(config("anthropic", &toml(&server.uri(), ""))),
        None,
        &user,
        &schema,
        "weather",
    )
    .await
    .unwrap();
    let sent = requests(&server).await;
    assert_eq!(normalized(&body(&sent[0])), normalized(&recorded["body"]));
    // The newest SDK sends a bearer token and a newer version; we speak the version the
    // recorded responses were made with.
    assert_eq!(recorded["headers"]["anthropic-version"], "2026-10-21");
    assert_eq!(
        sent[0].headers.get("anthropic-version").unwrap(),
        "2023-06-01"
    );
}

#[tokio::test]
async fn forced_tool_request_matches_and_tool_input_becomes_the_text() {
    let recorded = wire("anthropic_messages_forced_tool_use_request.captured.json");
    let server = server_answering(ok("anthropic_messages_tool_use_response.json")).await;
    let config = config(
        "anthropic",
        &toml(&server.uri(), "structured_output = \"tool\""),
    );
    let (user, schema) = recorded_call(&recorded["body"]);
    let completion = call(&endpoint(config), None, &user, &schema, "emit_location")
        .await
        .unwrap();
    let sent = requests(&server).await;
    assert_eq!(normalized(&body(&sent[0])), normalized(&recorded["body"]));

    let reply = completion.reply;
    // The object arrives parsed; the checks read it serialized, key order kept.
    assert_eq!(reply.text, "{\"location\":\"SF\",\"units\":\"c\"}");
    assert_eq!(reply.finish.kind, FinishKind::ToolUse);
    assert_eq!(reply.finish.raw.as_deref(), Some("tool_use"));
    assert_eq!(reply.usage.prompt_tokens, Some(597));
    assert_eq!(reply.usage.output_tokens, Some(71));
    assert_eq!(
        reply.served_model.as_deref(),
        Some("claude-haiku-4-5-20251001")
    );
}

#[tokio::test]
async fn tool_definition_has_the_recorded_shape() {
    // A recorded (unforced) tool request: our tool has the same fields, and we add the
    // tool_choice that forces it.
    let recorded = wire("anthropic_messages_tool_use_request.json");
    let server = server_answering(ok("anthropic_messages_tool_use_response.json")).await;
    let config = config(
        "anthropic",
        &toml_for(
            "claude-haiku-4-5",
            &server.uri(),
            "structured_output = \"tool\"",
        ),
    );
    let (user, schema) = recorded_call(&recorded);
    call(&endpoint(config), None, &user, &schema, "get_weather")
        .await
        .unwrap();
    let ours = body(&requests(&server).await[0]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&ours["tools"][0]), keys(&recorded["tools"][0]));
    assert_eq!(
        ours["tools"][0]["input_schema"],
        recorded["tools"][0]["input_schema"]
    );
    assert_eq!(ours["messages"], recorded["messages"]);
    assert_eq!(
        ours["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
}

#[tokio::test]
async fn stream_request_is_the_same_call_without_streaming() {
    let recorded = wire("anthropic_messages_output_config_stream_request.json");
    assert_eq!(recorded["stream"], true);
    let server = server_answering(ok(
        "anthropic_messages_output_config_json_schema_response.json",
    ))
    .await;
    let config = config(
        "anthropic",
        &toml(&server.uri(), "[anthropic]\nsend_temperature = false"),
    );
    let (user, schema) = recorded_call(&recorded);
    call(&endpoint(config), None, &user, &schema, "ids")
        .await
        .unwrap();
    let mut expected = recorded.clone();
    expected.as_object_mut().unwrap().remove("stream");
    let ours = body(&requests(&server).await[0]);
    assert_eq!(normalized(&ours), normalized(&expected));
}

#[tokio::test]
async fn messages_have_the_shape_count_tokens_reads() {
    let recorded = wire("anthropic_count_tokens_request.captured.json");
    let server = server_answering(ok(
        "anthropic_messages_output_config_json_schema_response.json",
    ))
    .await;
    let user = recorded["body"]["messages"][0]["content"].as_str().unwrap();
    call(
        &endpoint(config("anthropic", &toml(&server.uri(), ""))),
        None,
        user,
        &small_schema(),
        "weather",
    )
    .await
    .unwrap();
    let ours = body(&requests(&server).await[0]);
    assert_eq!(ours["messages"], recorded["body"]["messages"]);
    assert_eq!(ours["model"], recorded["body"]["model"]);
}

#[tokio::test]
async fn system_prompt_goes_top_level_and_the_user_speaks_last() {
    let server = server_answering(ok(
        "anthropic_messages_output_config_json_schema_response.json",
    ))
    .await;
    call(
        &endpoint(config("anthropic", &toml(&server.uri(), ""))),
        Some("Answer in JSON."),
        "hello",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    let ours = body(&requests(&server).await[0]);
    assert_eq!(ours["system"], "Answer in JSON.");
    let messages = ours["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages.last().unwrap()["role"], "user");
}

#[tokio::test]
async fn rate_limit_headers_on_success_change_nothing() {
    let headers = wire("anthropic_response_headers_ratelimit_example.json");
    let mut template = ok("anthropic_messages_output_config_json_schema_response.json");
    for (name, value) in headers.as_object().unwrap() {
        template = template.insert_header(name.as_str(), value.as_str().unwrap());
    }
    let server = server_answering(template).await;
    let completion = call(
        &endpoint(config("anthropic", &toml(&server.uri(), ""))),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    assert_eq!(completion.retries, 0);
    assert_eq!(completion.reply.usage.prompt_tokens, Some(249));
}

#[tokio::test]
async fn a_missing_usage_part_makes_the_prompt_count_unknown() {
    for missing in [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ] {
        let mut response = wire("anthropic_messages_output_config_json_schema_response.json");
        response["usage"].as_object_mut().unwrap().remove(missing);
        let server = server_answering(ResponseTemplate::new(200).set_body_json(response)).await;
        let reply = call(
            &endpoint(config("anthropic", &toml(&server.uri(), ""))),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap()
        .reply;
        assert_eq!(reply.usage.prompt_tokens, None, "without {missing}");
        assert_eq!(reply.usage.output_tokens, Some(26));
    }
    // Cached parts are added in, not ignored.
    let mut response = wire("anthropic_messages_output_config_json_schema_response.json");
    response["usage"]["cache_creation_input_tokens"] = json!(1000);
    response["usage"]["cache_read_input_tokens"] = json!(20);
    let server = server_answering(ResponseTemplate::new(200).set_body_json(response)).await;
    let reply = call(
        &endpoint(config("anthropic", &toml(&server.uri(), ""))),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(reply.usage.prompt_tokens, Some(249 + 1000 + 20));
}

#[tokio::test]
async fn stop_reasons_map_to_finish_kinds() {
    for (raw, kind) in [
        ("end_turn", FinishKind::Stop),
        ("stop_sequence", FinishKind::Stop),
        ("max_tokens", FinishKind::Length),
        ("model_context_window_exceeded", FinishKind::Length),
        ("refusal", FinishKind::Refusal),
        ("pause_turn", FinishKind::Other),
    ] {
        let mut response = wire("anthropic_messages_output_config_json_schema_response.json");
        response["stop_reason"] = json!(raw);
        if raw == "refusal" {
            response["stop_details"] = json!({"type": "refusal", "category": "cyber",
                "explanation": "This request was refused due to policy."});
        }
        let server = server_answering(ResponseTemplate::new(200).set_body_json(response)).await;
        let reply = call(
            &endpoint(config("anthropic", &toml(&server.uri(), ""))),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap()
        .reply;
        assert_eq!(reply.finish.kind, kind, "{raw}");
        assert_eq!(reply.finish.raw.as_deref(), Some(raw));
        if raw == "refusal" {
            assert_eq!(
                reply.refusal.as_deref(),
                Some("This request was refused due to policy.")
            );
        }
    }
}

/// Serves a recorded error (status, body and recorded headers) and returns the final
/// classification and the number of requests the endpoint made.
async fn classify_recorded(file: &str) -> (conform_wire::provider::CallError, usize) {
    let recorded = wire(file);
    let mut template =
        ResponseTemplate::new(status_of(&recorded)).set_body_json(body_of(&recorded));
    if let Some(headers) = recorded["headers"].as_object() {
        for (name, value) in headers {
            if name != "content-length" && name != "content-type" {
                template = template.insert_header(name.as_str(), value.as_str().unwrap());
            }
        }
    }
    let server = server_answering(template).await;
    failed_call(&server, config("anthropic", &toml(&server.uri(), ""))).await
}

#[tokio::test]
async fn recorded_errors_are_classified_and_retried_only_when_safe() {
    for (file, kind, sent) in [
        (
            "anthropic_error_400_invalid_request.json",
            ErrorKind::BadRequest,
            1,
        ),
        (
            "anthropic_error_400_prefill_not_supported.json",
            ErrorKind::BadRequest,
            1,
        ),
        (
            "anthropic_error_400_prompt_too_long.json",
            ErrorKind::ContextLength,
            1,
        ),
        (
            "anthropic_error_400_temperature_deprecated.json",
            ErrorKind::BadRequest,
            1,
        ),
        // Retryable: the first request and both retries.
        (
            "anthropic_error_429_rate_limit.json",
            ErrorKind::RateLimited,
            3,
        ),
        (
            "anthropic_error_429_rate_limit_streaming_call.json",
            ErrorKind::RateLimited,
            3,
        ),
        (
            "anthropic_error_529_overloaded.json",
            ErrorKind::Overloaded,
            3,
        ),
    ] {
        let (err, requests) = classify_recorded(file).await;
        assert_eq!(err.kind, kind, "{file}: {err}");
        assert_eq!(requests, sent, "{file}");
        assert_eq!(err.status, Some(status_of(&wire(file))), "{file}");
        assert!(!err.message.is_empty(), "{file}");
    }
}

#[tokio::test]
async fn a_deprecated_temperature_names_the_setting_that_fixes_it() {
    let (err, _) = classify_recorded("anthropic_error_400_temperature_deprecated.json").await;
    assert!(err.message.contains("`temperature` is deprecated"), "{err}");
    assert!(err.message.contains("send_temperature = false"), "{err}");
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let server = MockServer::start().await;
    let recorded = wire("anthropic_error_429_rate_limit.json");
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_json(body_of(&recorded)),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ok(
            "anthropic_messages_output_config_json_schema_response.json",
        ))
        .mount(&server)
        .await;
    let completion = call(
        &endpoint(config("anthropic", &toml(&server.uri(), ""))),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    assert_eq!(completion.retries, 1);
    assert_eq!(requests(&server).await.len(), 2);
}

/// A stream transcript served where one JSON message was expected.
async fn serve_stream(file: &str) -> (conform_wire::provider::CallError, usize) {
    let server = server_answering(
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/event-stream")
            .set_body_string(wire_text(file)),
    )
    .await;
    failed_call(&server, config("anthropic", &toml(&server.uri(), ""))).await
}

#[tokio::test]
async fn stream_transcripts_are_not_mistaken_for_answers() {
    // Without `stream = true` a call asks for one JSON message (tests/streams.rs folds
    // streams that were asked for). A stream that
    // arrives anyway is named for what it is; it came with a 200, so it is not sent again.
    for file in [
        "anthropic_messages_output_config_stream_transcript.sse",
        "anthropic_messages_stream_basic_response.sse",
        "anthropic_messages_stream_refusal_response.sse",
        "anthropic_messages_stream_tool_use_response.sse",
    ] {
        let (err, requests) = serve_stream(file).await;
        assert_eq!(err.kind, ErrorKind::NonJsonBody, "{file}: {err}");
        assert!(err.message.contains("server-sent events"), "{file}: {err}");
        assert_eq!(requests, 1, "{file}");
    }
    // A stream's error event is the vendor's error: an overload, but inside a 200.
    let (err, requests) = serve_stream("anthropic_stream_error_event_overloaded.sse").await;
    assert_eq!(err.kind, ErrorKind::Overloaded, "{err}");
    assert!(err.message.contains("Overloaded"));
    assert_eq!(requests, 1);
}
