//! The Gemini adapter against wiremock servers speaking the recorded payloads of
//! `tests/wire/gemini_*`: what we send, what we read, how we classify and retry.

use crate::common;

use common::*;
use conform_wire::provider::{CallError, ErrorKind, FinishKind, Reply};
use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

const ROUTE: &str = r"^/v1(beta)?/models/[^/]+:generateContent$";

fn toml(uri: &str, extra: &str) -> String {
    format!(
        "kind = \"gemini\"\nmodel = \"gemini-2.5-flash\"\nbase_url = \"{uri}\"\ntimeout = \"5s\"\n{extra}\n{FAST_LIMITS}"
    )
}

async fn server_answering(template: ResponseTemplate) -> MockServer {
    answering(ROUTE, template).await
}

async fn reply_to(file: &str) -> Reply {
    let server = server_answering(ok(file)).await;
    call(
        &endpoint(config("gemini", &toml(&server.uri(), ""))),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap()
    .reply
}

#[tokio::test]
async fn json_schema_request_matches_the_captured_one() {
    let recorded = wire("gemini_generatecontent_json_schema_request.captured.json");
    let server = MockServer::start().await;
    // The captured request went to v1: pinning api_version must put it in the path.
    Mock::given(method("POST"))
        .and(path("/v1/models/gemini-2.5-flash:generateContent"))
        .respond_with(ok("gemini_generatecontent_response_basic.json"))
        .mount(&server)
        .await;
    let config = config(
        "gemini",
        &toml(&server.uri(), "seed = 42\n[gemini]\napi_version = \"v1\""),
    );
    let body_rec = &recorded["body"];
    let user = body_rec["contents"][0]["parts"][0]["text"]
        .as_str()
        .unwrap();
    let schema = &body_rec["generationConfig"]["responseJsonSchema"];
    call(&endpoint(config), None, user, schema, "weather")
        .await
        .unwrap();

    let sent = requests(&server).await;
    assert_eq!(sent.len(), 1);
    let extra = assert_covers(&body(&sent[0]), body_rec);
    // We also cap the output, as every adapter does.
    assert_eq!(extra, ["/generationConfig/maxOutputTokens"]);
    assert!(recorded["headers"].get("x-goog-api-key").is_some());
    assert_eq!(sent[0].headers.get("x-goog-api-key").unwrap(), TEST_KEY);
    // The key travels in the header, never in the URL.
    assert!(sent[0].url.query().is_none());
}

#[tokio::test]
async fn response_schema_request_is_the_openapi_translation() {
    let recorded = wire("gemini_generatecontent_response_schema_openapi_request.captured.json");
    let server = server_answering(ok("gemini_generatecontent_response_basic.json")).await;
    let config = config(
        "gemini",
        &toml(
            &server.uri(),
            "[gemini]\napi_version = \"v1\"\nschema_field = \"responseSchema\"",
        ),
    );
    // The pydantic model the SDK translated from, as JSON Schema.
    let schema = json!({"title": "Location", "type": "object", "properties": {
        "city": {"title": "City", "type": "string"},
        "temperature": {"title": "Temperature", "type": "number"},
        "units": {"enum": ["c", "f"], "title": "Units", "type": "string"}},
        "required": ["city", "temperature", "units"]});
    let user = recorded["body"]["contents"][0]["parts"][0]["text"]
        .as_str()
        .unwrap();
    call(&endpoint(config), None, user, &schema, "Location")
        .await
        .unwrap();
    let sent = requests(&server).await;
    assert_eq!(
        sent[0].url.path(),
        "/v1/models/gemini-2.5-flash:generateContent"
    );
    // The SDK writes the proto field in snake_case; proto JSON takes either spelling.
    let mut expected = recorded["body"].clone();
    let response_schema = expected["generationConfig"]["responseSchema"]
        .as_object_mut()
        .unwrap();
    let ordering = response_schema.remove("property_ordering").unwrap();
    response_schema.insert("propertyOrdering".into(), ordering);
    let extra = assert_covers(&body(&sent[0]), &expected);
    assert_eq!(extra, ["/generationConfig/maxOutputTokens"]);
}

#[tokio::test]
async fn contents_have_the_shape_count_tokens_reads() {
    let recorded = wire("gemini_counttokens_request.captured.json");
    let server = server_answering(ok("gemini_generatecontent_response_basic.json")).await;
    let user = recorded["body"]["contents"][0]["parts"][0]["text"]
        .as_str()
        .unwrap();
    call(
        &endpoint(config("gemini", &toml(&server.uri(), ""))),
        Some("Answer in JSON."),
        user,
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    let ours = body(&requests(&server).await[0]);
    assert_eq!(ours["contents"], recorded["body"]["contents"]);
    // The system prompt is an instruction, not a turn.
    assert_eq!(
        ours["systemInstruction"],
        json!({"parts": [{"text": "Answer in JSON."}]})
    );
    // v1beta unless pinned otherwise.
    assert!(
        requests(&server).await[0]
            .url
            .path()
            .starts_with("/v1beta/")
    );
}

#[tokio::test]
async fn basic_response_decodes() {
    let reply = reply_to("gemini_generatecontent_response_basic.json").await;
    assert!(reply.text.starts_with("Google's headquarters"));
    assert!(reply.text.ends_with("**Mountain View, California**.\n"));
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.finish.raw.as_deref(), Some("STOP"));
    assert_eq!(reply.usage.prompt_tokens, Some(7));
    assert_eq!(reply.usage.output_tokens, Some(22));
    assert_eq!(reply.served_model.as_deref(), Some("gemini-2.0-flash"));
}

#[tokio::test]
async fn thought_parts_are_skipped_and_thinking_tokens_counted_as_output() {
    let reply = reply_to("gemini_generatecontent_response_thinking_usage.json").await;
    assert_eq!(reply.text, "Mountain View");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.usage.prompt_tokens, Some(14));
    // candidatesTokenCount (2) leaves out the thoughts (24): total 40 = 14 + 2 + 24.
    assert_eq!(reply.usage.output_tokens, Some(26));
    assert_eq!(reply.served_model.as_deref(), Some("gemini-2.5-flash"));
}

#[tokio::test]
async fn safety_stop_keeps_its_partial_text_and_fails_as_a_content_filter() {
    let reply = reply_to("gemini_generatecontent_response_finish_safety.json").await;
    assert_eq!(reply.text, "Safety error incoming in 5, 4, 3, 2...");
    assert_eq!(reply.finish.kind, FinishKind::ContentFilter);
    assert_eq!(reply.finish.raw.as_deref(), Some("SAFETY"));
    assert_eq!(reply.usage.output_tokens, Some(20));
}

#[tokio::test]
async fn a_blocked_prompt_is_a_content_filtered_reply_not_an_error() {
    let server = server_answering(ok(
        "gemini_generatecontent_response_prompt_blocked_no_candidates.json",
    ))
    .await;
    let completion = call(
        &endpoint(config("gemini", &toml(&server.uri(), ""))),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    // Not retried: the provider answered, and its answer is a refusal to process.
    assert_eq!(requests(&server).await.len(), 1);
    let reply = completion.reply;
    assert_eq!(reply.text, "");
    assert_eq!(reply.finish.kind, FinishKind::ContentFilter);
    let raw = reply.finish.raw.unwrap();
    assert!(raw.starts_with("prompt blocked"), "{raw}");
    assert!(raw.contains("Message"), "{raw}");
    assert_eq!(reply.usage.prompt_tokens, None);
    assert_eq!(reply.served_model.as_deref(), Some("gemini-2.0-flash"));
}

#[tokio::test]
async fn finish_reasons_map_to_finish_kinds() {
    for (raw, kind) in [
        ("MAX_TOKENS", FinishKind::Length),
        ("RECITATION", FinishKind::ContentFilter),
        ("BLOCKLIST", FinishKind::ContentFilter),
        ("PROHIBITED_CONTENT", FinishKind::ContentFilter),
        ("SPII", FinishKind::ContentFilter),
        ("MALFORMED_FUNCTION_CALL", FinishKind::Other),
        ("OTHER", FinishKind::Other),
        ("FINISH_REASON_UNSPECIFIED", FinishKind::Other),
    ] {
        let mut response = body_of(&wire("gemini_generatecontent_response_basic.json"));
        response["candidates"][0]["finishReason"] = json!(raw);
        let server = server_answering(ResponseTemplate::new(200).set_body_json(response)).await;
        let reply = call(
            &endpoint(config("gemini", &toml(&server.uri(), ""))),
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
    }
}

/// Serves a recorded error and returns the final classification and request count.
async fn classify_recorded(file: &str) -> (CallError, usize) {
    let recorded = wire(file);
    let body = body_of(&recorded);
    let status = recorded
        .get("status_code")
        .and_then(Value::as_u64)
        .or_else(|| body["error"]["code"].as_u64())
        .unwrap() as u16;
    let server = server_answering(ResponseTemplate::new(status).set_body_json(body)).await;
    let (err, sent) = failed_call(&server, config("gemini", &toml(&server.uri(), ""))).await;
    assert_eq!(err.status, Some(status), "{file}");
    (err, sent)
}

#[tokio::test]
async fn recorded_errors_are_classified_and_retried_only_when_safe() {
    for (file, kind, sent) in [
        // An invalid key is a 400, and an auth failure all the same.
        ("gemini_error_400_api_key_invalid.json", ErrorKind::Auth, 1),
        (
            "gemini_error_400_input_token_count_exceeded.json",
            ErrorKind::ContextLength,
            1,
        ),
        (
            "gemini_error_400_response_schema_unknown_field.json",
            ErrorKind::BadRequest,
            1,
        ),
        ("gemini_error_403_api_not_enabled.json", ErrorKind::Auth, 1),
        (
            "gemini_error_404_unknown_model.json",
            ErrorKind::NotFound,
            1,
        ),
        // A per-day quota among the violations: not worth waiting for.
        (
            "gemini_error_429_resource_exhausted_quota_failure.json",
            ErrorKind::QuotaExhausted,
            1,
        ),
        // A per-minute limit whose value is 0: no wait cures it either.
        (
            "gemini_error_429_resource_exhausted_vertex_firebase.json",
            ErrorKind::QuotaExhausted,
            1,
        ),
        (
            "gemini_error_503_unavailable_overloaded.json",
            ErrorKind::Overloaded,
            3,
        ),
    ] {
        let (err, requests) = classify_recorded(file).await;
        assert_eq!(err.kind, kind, "{file}: {err}");
        assert_eq!(requests, sent, "{file}");
        assert!(!err.message.is_empty(), "{file}");
    }
}

#[tokio::test]
async fn the_debug_detail_that_echoes_a_key_stays_out_of_the_message() {
    let (err, _) = classify_recorded("gemini_error_400_api_key_invalid.json").await;
    assert_eq!(
        err.message,
        "API key not valid. Please pass a valid API key."
    );
    assert!(!err.message.contains("key1234"));
}

#[tokio::test]
async fn an_unknown_schema_field_points_at_the_remedy() {
    let (err, _) = classify_recorded("gemini_error_400_response_schema_unknown_field.json").await;
    assert!(err.message.contains("additional_properties"), "{err}");
    assert!(err.message.contains("responseJsonSchema"), "{err}");
}

#[tokio::test]
async fn per_minute_quota_waits_for_retry_info_then_succeeds() {
    // The recorded quota failure without its per-day violation, plus the RetryInfo
    // Google attaches to it: a wait cures this one.
    let mut body = body_of(&wire(
        "gemini_error_429_resource_exhausted_quota_failure.json",
    ));
    let details = body["error"]["details"].as_array_mut().unwrap();
    details[0]["violations"]
        .as_array_mut()
        .unwrap()
        .retain(|v| !v["quotaId"].as_str().unwrap().contains("PerDay"));
    details.push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex(ROUTE))
        .respond_with(ResponseTemplate::new(429).set_body_json(body))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(ROUTE))
        .respond_with(ok("gemini_generatecontent_response_basic.json"))
        .mount(&server)
        .await;
    let completion = call(
        &endpoint(config("gemini", &toml(&server.uri(), ""))),
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

#[tokio::test]
async fn stream_transcripts_are_not_mistaken_for_answers() {
    // Without `stream = true` (tests/streams.rs), a stream served anyway is named, or its trailing error
    // object is classified the Gemini way (499 CANCELLED: a server-side failure).
    for (file, kind) in [
        (
            "gemini_streamgeneratecontent_alt_sse_transcript.sse",
            ErrorKind::NonJsonBody,
        ),
        (
            "gemini_stream_error_mid_stream_vertex_firebase.txt",
            ErrorKind::ServerError,
        ),
    ] {
        let server = server_answering(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(wire_text(file)),
        )
        .await;
        let (err, sent) = failed_call(&server, config("gemini", &toml(&server.uri(), ""))).await;
        assert_eq!(err.kind, kind, "{file}: {err}");
        assert_eq!(sent, 1, "{file}");
        if kind == ErrorKind::ServerError {
            assert_eq!(err.status, Some(499));
            assert!(err.message.contains("cancelled"), "{err}");
        }
    }
}
