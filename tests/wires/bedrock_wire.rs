//! AWS Bedrock Runtime against a mock that verifies every request's SigV4 signature as
//! AWS does (recomputed here, with the test's credentials, by a verifier that reproduces
//! AWS's published test vectors), answering with `tests/wire/bedrock_*` (written from the
//! Bedrock Runtime API reference: see the README): Converse and InvokeModel, their event
//! streams with CRC-checked frames, tool calls, and each documented failure.

use crate::clouds;
use crate::common;

use std::sync::Arc;

use clouds::{
    AWS, AwsAccount, Gate, Signed, aws_environment, aws_error, aws_signature, fixed, verify_sigv4,
};
use common::*;
use conform_config::{Conversation, Message, Tool};
use conform_wire::provider::bedrock::eventstream::{event, exception, frame};
use conform_wire::provider::transport::Endpoint;
use conform_wire::provider::{Effect, ErrorKind, FinishKind};
use serde_json::{Value, json};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

const MODEL: &str = "anthropic.claude-3-5-haiku-20241022-v1:0";
/// The model id as the path carries it.
const MODEL_PATH: &str = "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0";

fn toml(uri: &str, extra: &str) -> String {
    format!(
        "kind = \"bedrock\"\nmodel = \"{MODEL}\"\nregion = \"us-east-1\"\nbase_url = \"{uri}\"\ntimeout = \"5s\"\n{extra}\n{FAST_LIMITS}"
    )
}

fn bedrock(uri: &str, extra: &str) -> Arc<conform_config::ProviderConfig> {
    config("bedrock", &toml(uri, extra))
}

fn signed_endpoint(config: Arc<conform_config::ProviderConfig>, account: &AwsAccount) -> Endpoint {
    endpoint(config).with_environment(&aws_environment(account))
}

/// Bedrock at `operation` (`converse`, `invoke` …), checking signatures with `AWS`.
async fn bedrock_at(server: &MockServer, operation: &str, answer: clouds::Answer) -> Gate {
    let gate = Gate::new(aws_signature(AWS), answer);
    Mock::given(method("POST"))
        .and(path_regex(format!("^/model/[^/]+/{operation}$")))
        .respond_with(gate.clone())
        .mount(server)
        .await;
    gate
}

fn frames(events: &Value) -> Vec<u8> {
    events
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| event(e[0].as_str().unwrap(), &e[1].to_string()))
        .collect()
}

fn chunks(events: &Value) -> Vec<u8> {
    use base64::Engine;
    events
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            let bytes = base64::engine::general_purpose::STANDARD.encode(e.to_string());
            frame(
                &[
                    (":event-type", "chunk"),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
                json!({ "bytes": bytes }).to_string().as_bytes(),
            )
        })
        .collect()
}

fn eventstream(bytes: Vec<u8>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(bytes, "application/vnd.amazon.eventstream")
}

/// AWS's own test vectors, as `tests/wire/sigv4_*` hold them, as a verifier reads them.
fn vector(name: &str) -> (Signed, AwsAccount) {
    let context = wire(&format!("sigv4_{name}_context.json"));
    let signed_text = wire_text(&format!("sigv4_{name}_header-signed-request.txt"));
    let mut lines = signed_text.lines();
    let first: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
        .collect();
    let leak =
        |v: &Value| -> &'static str { Box::leak(v.as_str().unwrap().to_string().into_boxed_str()) };
    let credentials = &context["credentials"];
    let account = AwsAccount {
        access_key_id: leak(&credentials["access_key_id"]),
        secret_access_key: leak(&credentials["secret_access_key"]),
        session_token: credentials.get("token").map(leak),
        region: leak(&context["region"]),
        service: leak(&context["service"]),
    };
    let request = Signed {
        method: first[0].to_string(),
        path: first[1].to_string(),
        query: String::new(),
        headers,
        body: Vec::new(),
    };
    (request, account)
}

#[test]
fn the_mocks_verifier_reproduces_aws_published_signatures_and_refuses_any_change() {
    for name in ["post_vanilla", "get_vanilla_with_session_token"] {
        let (request, account) = vector(name);
        assert_eq!(verify_sigv4(&request, &account, None), Ok(()), "{name}");
        let mut body = request.clone();
        body.body = b"x".to_vec();
        assert!(
            verify_sigv4(&body, &account, None)
                .unwrap_err()
                .starts_with("InvalidSignature")
        );
        let wrong = AwsAccount {
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEX",
            ..account.clone()
        };
        assert!(verify_sigv4(&request, &wrong, None).is_err());
    }
}

#[tokio::test]
async fn converse_is_signed_and_sent_as_bedrock_documents_it() {
    let server = MockServer::start().await;
    let gate = bedrock_at(
        &server,
        "converse",
        fixed(ok("bedrock_converse_response.json")),
    )
    .await;
    let config = bedrock(&server.uri(), "structured_output = \"json_schema\"");
    let reply = call(
        &signed_endpoint(config, &AWS),
        Some("Answer in JSON."),
        "Where?",
        &small_schema(),
        "city",
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(
        (gate.passed(), gate.refused()),
        (1, 0),
        "AWS accepted the signature"
    );
    assert_eq!(reply.text, "{\"city\": \"Paris\"}");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.usage.prompt_tokens, Some(21));
    let sent = &requests(&server).await[0];
    assert_eq!(sent.url.path(), format!("{MODEL_PATH}/converse"));
    assert_eq!(
        sent.headers.get("x-amz-security-token").unwrap(),
        AWS.session_token.unwrap()
    );
    let body = body(sent);
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"text": "Where?"}]}])
    );
    assert_eq!(body["system"], json!([{"text": "Answer in JSON."}]));
    assert_eq!(
        body["inferenceConfig"],
        json!({"maxTokens": 1024, "temperature": 0.0})
    );
    let format = &body["outputConfig"]["textFormat"];
    assert_eq!(format["type"], "json_schema");
    let schema: Value = serde_json::from_str(
        format["structure"]["jsonSchema"]["schema"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(schema, small_schema());
}

#[tokio::test]
async fn credentials_aws_refuses_are_inconclusive_and_never_quoted() {
    let server = MockServer::start().await;
    let gate = bedrock_at(
        &server,
        "converse",
        fixed(ok("bedrock_converse_response.json")),
    )
    .await;
    let wrong = AwsAccount {
        secret_access_key: "not-the-secret-at-all-0000000000000000000",
        ..AWS
    };
    let error = call(
        &signed_endpoint(bedrock(&server.uri(), ""), &wrong),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap_err();
    assert_eq!(
        (error.kind, error.effect()),
        (ErrorKind::Auth, Effect::HaltProvider)
    );
    assert!(
        error.message.starts_with("InvalidSignatureException"),
        "{error}"
    );
    assert_eq!(gate.refused(), 1, "authentication is not retried");
    assert!(!error.to_string().contains(wrong.secret_access_key));
    // A temporary credential without its session token.
    let bare = AwsAccount {
        session_token: None,
        ..AWS
    };
    let error = call(
        &signed_endpoint(bedrock(&server.uri(), ""), &bare),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap_err();
    assert!(
        error.message.starts_with("UnrecognizedClientException"),
        "{error}"
    );
    // No credentials at all: nothing is sent.
    let nothing = endpoint(bedrock(&server.uri(), "")).with_environment(&|_: &str| None);
    let error = call(&nothing, None, "x", &small_schema(), "x")
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Auth);
    assert!(error.message.contains("AWS_ACCESS_KEY_ID"), "{error}");
    assert_eq!(gate.refused() + gate.passed(), 2);
}

#[tokio::test]
async fn a_bedrock_api_key_is_sent_as_bearer_and_wins_over_access_keys() {
    let server = MockServer::start().await;
    let gate = Gate::new(
        clouds::aws_bearer("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"),
        fixed(ok("bedrock_converse_response.json")),
    );
    Mock::given(method("POST"))
        .respond_with(gate.clone())
        .mount(&server)
        .await;
    let both = |name: &str| match name {
        "AWS_BEARER_TOKEN_BEDROCK" => Some("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl".to_string()),
        other => aws_environment(&AWS)(other),
    };
    call(
        &endpoint(bedrock(&server.uri(), "")).with_environment(&both),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    assert_eq!(gate.passed(), 1);
    assert!(
        requests(&server).await[0]
            .headers
            .get("x-amz-date")
            .is_none()
    );
}

#[tokio::test]
async fn invoke_sends_anthropics_body_as_bedrock_takes_it() {
    let server = MockServer::start().await;
    let checked: clouds::Answer = Arc::new(|request: &wiremock::Request| {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        match (
            body.get("anthropic_version"),
            body.get("model"),
            body.get("stream"),
        ) {
            (Some(v), None, None) if v == "bedrock-2023-05-31" => {
                ok("bedrock_invoke_anthropic_response.json")
            }
            _ => aws_error(
                400,
                "ValidationException",
                "Malformed input request: #: extraneous key [model] is not permitted",
            ),
        }
    });
    let gate = bedrock_at(&server, "invoke", checked).await;
    let config = bedrock(
        &server.uri(),
        "api = \"invoke\"\nstructured_output = \"tool\"",
    );
    let reply = call(
        &signed_endpoint(config, &AWS),
        None,
        "Where?",
        &small_schema(),
        "city",
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(gate.passed(), 1);
    assert_eq!(reply.text, "{\"city\": \"Paris\"}");
    assert_eq!(
        reply.served_model.as_deref(),
        Some("claude-3-5-haiku-20241022")
    );
    let body = body(&requests(&server).await[0]);
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "city"}));
}

fn weather_conversation() -> Conversation {
    let messages: Vec<Message> = serde_json::from_value(json!([
        {"role": "system", "content": "You help with the weather."},
        {"role": "user", "content": "Weather in Lyon?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "tooluse_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
        {"role": "tool", "tool_call_id": "tooluse_1", "content": "{\"temp\": 21}"},
        {"role": "user", "content": "And in Paris?"}
    ]))
    .unwrap();
    let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]))
    .unwrap();
    Conversation {
        messages,
        tools: tools.into(),
        tool_choice: None,
        parallel_tool_calls: None,
        json_answer: false,
    }
}

#[tokio::test]
async fn tool_calls_go_through_tool_config_tool_use_and_tool_result() {
    let server = MockServer::start().await;
    let gate = bedrock_at(
        &server,
        "converse",
        fixed(ok("bedrock_converse_tool_use_response.json")),
    )
    .await;
    let completion = call_conversation(
        &signed_endpoint(bedrock(&server.uri(), ""), &AWS),
        &weather_conversation(),
    )
    .await
    .unwrap();
    assert_eq!(gate.passed(), 1);
    let reply = completion.reply;
    assert_eq!(reply.finish.kind, FinishKind::ToolUse);
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    assert_eq!(
        reply.tool_calls[0].id.as_deref(),
        Some("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q")
    );
    assert_eq!(
        reply.tool_calls[0].arguments,
        Some(json!({"city": "Paris", "unit": "celsius"}))
    );
    let body = body(&requests(&server).await[0]);
    assert_eq!(
        body["system"],
        json!([{"text": "You help with the weather."}])
    );
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["name"],
        "get_weather"
    );
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"]["required"],
        json!(["city"])
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Lyon"}}}]})
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
        {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "{\"temp\": 21}"}], "status": "success"}},
        {"text": "And in Paris?"}]})
    );
}

/// Bedrock answering `exception` once, then its answer.
async fn failing_once(exception: &str) -> (MockServer, Gate) {
    let errors = wire("bedrock_errors.json");
    let error = &errors[exception];
    let server = MockServer::start().await;
    let failing = Gate::new(
        aws_signature(AWS),
        fixed(aws_error(
            error["status"].as_u64().unwrap() as u16,
            exception,
            error["message"].as_str().unwrap(),
        )),
    );
    Mock::given(method("POST"))
        .respond_with(failing.clone())
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    bedrock_at(
        &server,
        "converse",
        fixed(ok("bedrock_converse_response.json")),
    )
    .await;
    (server, failing)
}

#[tokio::test]
async fn each_documented_failure_is_classified_as_the_other_kinds_classify_theirs() {
    // Retried and answered.
    for exception in [
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
    ] {
        let (server, failing) = failing_once(exception).await;
        let completion = call(
            &signed_endpoint(bedrock(&server.uri(), ""), &AWS),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap_or_else(|e| panic!("{exception}: {e}"));
        assert_eq!(
            (completion.retries, failing.passed()),
            (1, 1),
            "{exception}"
        );
    }
    // Final at once: the model's failure, inconclusive, or the configuration's.
    for (exception, kind, effect) in [
        (
            "ValidationException",
            ErrorKind::ContextLength,
            Effect::ConformanceFailure,
        ),
        (
            "AccessDeniedException",
            ErrorKind::Auth,
            Effect::HaltProvider,
        ),
        (
            "ResourceNotFoundException",
            ErrorKind::NotFound,
            Effect::ConfigError,
        ),
    ] {
        let (server, failing) = failing_once(exception).await;
        let error = call(
            &signed_endpoint(bedrock(&server.uri(), ""), &AWS),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap_err();
        assert_eq!(
            (error.kind, error.effect(), failing.passed()),
            (kind, effect, 1),
            "{exception}: {error}"
        );
    }
    // How the model stopped.
    for (reason, kind) in [
        ("max_tokens", FinishKind::Length),
        ("content_filtered", FinishKind::ContentFilter),
        ("guardrail_intervened", FinishKind::ContentFilter),
        ("end_turn", FinishKind::Stop),
    ] {
        let server = MockServer::start().await;
        let mut answer = wire("bedrock_converse_response.json");
        answer["stopReason"] = json!(reason);
        bedrock_at(
            &server,
            "converse",
            fixed(ResponseTemplate::new(200).set_body_json(answer)),
        )
        .await;
        let reply = call(
            &signed_endpoint(bedrock(&server.uri(), ""), &AWS),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap()
        .reply;
        assert_eq!(reply.finish.kind, kind, "{reason}");
    }
}

#[tokio::test]
async fn streams_of_both_apis_fold_from_their_frames() {
    let server = MockServer::start().await;
    let converse = bedrock_at(
        &server,
        "converse-stream",
        fixed(eventstream(frames(&wire(
            "bedrock_converse_stream_events.json",
        )))),
    )
    .await;
    let invoke = bedrock_at(
        &server,
        "invoke-with-response-stream",
        fixed(eventstream(chunks(&wire(
            "bedrock_invoke_stream_chunks.json",
        )))),
    )
    .await;
    for extra in ["stream = true", "stream = true\napi = \"invoke\""] {
        let reply = call(
            &signed_endpoint(bedrock(&server.uri(), extra), &AWS),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap_or_else(|e| panic!("{extra}: {e}"))
        .reply;
        assert_eq!(reply.text, "{\"city\": \"Paris\"}", "{extra}");
        assert_eq!(reply.usage.prompt_tokens, Some(21), "{extra}");
    }
    assert_eq!((converse.passed(), invoke.passed()), (1, 1));
    assert!(
        requests(&server)
            .await
            .iter()
            .all(|r| r.headers.get("accept").unwrap() == "application/vnd.amazon.eventstream")
    );

    // A streamed tool call.
    let server = MockServer::start().await;
    bedrock_at(
        &server,
        "converse-stream",
        fixed(eventstream(frames(&wire(
            "bedrock_converse_stream_tool_use_events.json",
        )))),
    )
    .await;
    let reply = call_conversation(
        &signed_endpoint(bedrock(&server.uri(), "stream = true"), &AWS),
        &weather_conversation(),
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(reply.finish.kind, FinishKind::ToolUse);
    assert_eq!(
        reply.tool_calls[0].arguments,
        Some(json!({"city": "Paris"}))
    );
}

#[tokio::test]
async fn a_stream_cut_before_its_stop_is_truncated_the_providers_failure() {
    // Cut before messageStop (Converse) or message_stop (Anthropic's body).
    let converse_frames = frames(&wire("bedrock_converse_stream_events.json"));
    let cut_converse = converse_frames[..converse_frames.len() / 2].to_vec();
    let events = wire("bedrock_invoke_stream_chunks.json");
    let cut_invoke = chunks(&json!(events.as_array().unwrap()[..5]));
    for (bytes, extra) in [
        (cut_converse, "stream = true"),
        (cut_invoke, "stream = true\napi = \"invoke\""),
    ] {
        let address = clouds::cut_stream_server(bytes).await;
        let error = call(
            &signed_endpoint(bedrock(&address, extra), &AWS),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap_err();
        assert_eq!(
            (error.kind, error.effect()),
            (ErrorKind::StreamTruncated, Effect::ProviderFailure),
            "{extra}: {error}"
        );
    }
}

#[tokio::test]
async fn an_exception_inside_the_stream_is_that_error_the_providers_never_sent_again() {
    for (kind, expected) in [
        ("throttlingException", ErrorKind::RateLimited),
        ("modelStreamErrorException", ErrorKind::ServerError),
        ("validationException", ErrorKind::BadRequest),
    ] {
        let server = MockServer::start().await;
        let all = frames(&wire("bedrock_converse_stream_events.json"));
        let first_two = frames(&json!(
            wire("bedrock_converse_stream_events.json")
                .as_array()
                .unwrap()[..2]
        ));
        assert!(all.starts_with(&first_two));
        let body = [first_two, exception(kind, "The stream failed.")].concat();
        let gate = bedrock_at(&server, "converse-stream", fixed(eventstream(body))).await;
        let error = call(
            &signed_endpoint(bedrock(&server.uri(), "stream = true"), &AWS),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap_err();
        assert_eq!(
            (error.kind, error.effect(), gate.passed()),
            (expected, Effect::ProviderFailure, 1),
            "{kind}"
        );
        assert_eq!(error.partial_text(), Some("{\"city\": "), "{kind}");
    }
}
