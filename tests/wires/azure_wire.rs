//! Azure OpenAI against wiremock servers that check its key or Entra ID token as the
//! service does, answering with `tests/wire/azure_*` (written from Azure OpenAI's REST
//! reference and content-filtering pages: see the README): what we send, what we read, how
//! each documented failure is classified and retried.

use crate::clouds;
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use clouds::{Gate, azure_key, fixed};
use common::*;
use conform_check::check::code::Code;
use conform_wire::provider::{Effect, ErrorKind, FinishKind};
use serde_json::{Value, json};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

const DATED: &str = "/openai/deployments/gpt-4o-mini-prod/chat/completions";

fn toml(uri: &str, extra: &str) -> String {
    format!(
        "kind = \"azure-openai\"\nbase_url = \"{uri}\"\ndeployment = \"gpt-4o-mini-prod\"\nmodel = \"gpt-4o-mini\"\ntimeout = \"5s\"\n{extra}\n{FAST_LIMITS}"
    )
}

fn dated(uri: &str, extra: &str) -> Arc<conform_config::ProviderConfig> {
    config(
        "azure",
        &toml(
            uri,
            &format!("api_version = \"2024-10-21\"\napi_key_env = \"AZ\"\n{extra}"),
        ),
    )
}

/// A deployment that checks the key, then answers `answer`.
async fn deployment(answer: ResponseTemplate) -> (MockServer, Gate) {
    let server = MockServer::start().await;
    let gate = Gate::new(azure_key(TEST_KEY, false), fixed(answer));
    Mock::given(method("POST"))
        .and(path(DATED))
        .and(query_param("api-version", "2024-10-21"))
        .respond_with(gate.clone())
        .mount(&server)
        .await;
    (server, gate)
}

fn recorded(file: &str) -> ResponseTemplate {
    let v = wire(file);
    let mut template = ResponseTemplate::new(status_of(&v)).set_body_json(body_of(&v));
    for (name, value) in v
        .get("headers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        template = template.insert_header(name.as_str(), value.as_str().unwrap());
    }
    template
}

#[tokio::test]
async fn a_dated_deployment_is_called_as_azure_documents_it_with_the_key_in_api_key() {
    let (server, gate) = deployment(ok("azure_chat_completions_response.json")).await;
    let completion = call(
        &endpoint(dated(&server.uri(), "")),
        Some("Answer in JSON."),
        "Where?",
        &small_schema(),
        "city",
    )
    .await
    .unwrap();
    assert_eq!((gate.passed(), gate.refused()), (1, 0));
    let sent = &requests(&server).await[0];
    assert_eq!(sent.headers.get("api-key").unwrap(), TEST_KEY);
    assert!(sent.headers.get("authorization").is_none());
    let body = body(sent);
    // The deployment is the model: the body names none.
    assert!(body.get("model").is_none(), "{body}");
    assert_eq!(body["max_completion_tokens"], 1024);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["messages"][0]["role"], "system");
    let reply = completion.reply;
    assert_eq!(reply.text, "{\"city\": \"Paris\"}");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(
        reply.served_model.as_deref(),
        Some("gpt-4o-mini-2024-07-18")
    );
    assert_eq!(reply.usage.prompt_tokens, Some(24));
}

#[tokio::test]
async fn the_v1_api_names_the_deployment_as_model_and_sends_an_entra_token_as_bearer() {
    let server = MockServer::start().await;
    let gate = Gate::new(
        azure_key(TEST_KEY, true),
        fixed(ok("azure_chat_completions_response.json")),
    );
    Mock::given(method("POST"))
        .and(path("/openai/v1/chat/completions"))
        .respond_with(gate.clone())
        .mount(&server)
        .await;
    let config = config(
        "azure",
        &toml(&server.uri(), "token_env = \"AZURE_OPENAI_TOKEN\""),
    );
    assert_eq!(config.identity().0["auth"], "bearer");
    call(&endpoint(config), None, "Where?", &small_schema(), "city")
        .await
        .unwrap();
    assert_eq!(gate.passed(), 1);
    let sent = &requests(&server).await[0];
    assert_eq!(body(sent)["model"], "gpt-4o-mini-prod");
    assert!(sent.url.query().is_none());
    assert!(sent.headers.get("api-key").is_none());
}

#[tokio::test]
async fn a_refused_key_is_inconclusive_and_never_quoted() {
    let server = MockServer::start().await;
    // A proxy that echoes what it was sent.
    let echo: clouds::Answer = Arc::new(|_| unreachable!());
    let gate = Gate::new(
        Arc::new(|request: &wiremock::Request| {
            let sent = clouds::header(request, "api-key").unwrap_or_default();
            Some(
                ResponseTemplate::new(401).set_body_json(json!({"error": {"code": "401",
                "message": format!("Access denied due to invalid subscription key {sent}.")}})),
            )
        }),
        echo,
    );
    Mock::given(method("POST"))
        .respond_with(gate.clone())
        .mount(&server)
        .await;
    let (error, sent) = failed_call(&server, dated(&server.uri(), "")).await;
    assert_eq!(error.kind, ErrorKind::Auth);
    assert_eq!(error.effect(), Effect::HaltProvider);
    assert_eq!(sent, 1, "authentication is not retried");
    assert!(!error.to_string().contains(TEST_KEY), "{error}");
    assert!(error.message.contains("***"), "{error}");
}

#[tokio::test]
async fn the_content_filter_is_a_finding_of_its_own_never_a_refusal() {
    let (server, _) = deployment(ok("azure_chat_content_filter_response.json")).await;
    let reply = call(
        &endpoint(dated(&server.uri(), "")),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(reply.finish.kind, FinishKind::ContentFilter);
    assert_eq!(
        reply.finish.raw.as_deref(),
        Some("content_filter (filtered: violence (medium))")
    );
    assert_eq!(reply.refusal, None);
    let outcome = conform_check::check::transport::outcome_of_reply(&reply);
    assert_eq!(outcome.findings[0].code, Code::ContentFilter);
    // A prompt the filter stops: Azure's 400, the model's failure on this case, not a
    // configuration error, and not retried.
    let (server, _) = deployment(recorded("azure_error_400_content_filter.json")).await;
    let (error, sent) = failed_call(&server, dated(&server.uri(), "")).await;
    assert_eq!(error.kind, ErrorKind::PromptFiltered);
    assert_eq!(error.code(), "prompt_filtered");
    assert_eq!(error.effect(), Effect::ConformanceFailure);
    assert_eq!(sent, 1);
    assert!(error.message.contains("filtered: hate (high)"), "{error}");
}

#[tokio::test]
async fn a_429_is_waited_out_for_retry_after_ms_and_answered() {
    let server = MockServer::start().await;
    let gate = Gate::new(
        azure_key(TEST_KEY, false),
        fixed(ok("azure_chat_completions_response.json")),
    );
    let throttled = Gate::new(
        azure_key(TEST_KEY, false),
        fixed(recorded("azure_error_429_rate_limit.json")),
    );
    Mock::given(method("POST"))
        .respond_with(throttled.clone())
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(gate.clone())
        .mount(&server)
        .await;
    let started = std::time::Instant::now();
    let completion = call(
        &endpoint(dated(&server.uri(), "")),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    // `retry-after: 6` is past max_retry_wait (1 s): only `retry-after-ms: 40` let it retry.
    assert_eq!(completion.retries, 1);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!((throttled.passed(), gate.passed()), (1, 1));
}

#[tokio::test]
async fn each_documented_failure_is_classified_as_the_other_kinds_classify_theirs() {
    let cases = [
        (
            "azure_error_400_context_length_exceeded.json",
            ErrorKind::ContextLength,
            Effect::ConformanceFailure,
        ),
        (
            "azure_error_400_json_schema_api_version.json",
            ErrorKind::BadRequest,
            Effect::ConfigError,
        ),
        (
            "azure_error_404_deployment_not_found.json",
            ErrorKind::NotFound,
            Effect::ConfigError,
        ),
        (
            "azure_error_401_invalid_key.json",
            ErrorKind::Auth,
            Effect::HaltProvider,
        ),
    ];
    for (file, kind, effect) in cases {
        let (server, _) = deployment(recorded(file)).await;
        let (error, sent) = failed_call(&server, dated(&server.uri(), "")).await;
        assert_eq!(
            (error.kind, error.effect(), sent),
            (kind, effect, 1),
            "{file}: {error}"
        );
    }
    // The old API version's refusal of json_schema says what to do.
    let (server, _) = deployment(recorded("azure_error_400_json_schema_api_version.json")).await;
    let (error, _) = failed_call(&server, dated(&server.uri(), "")).await;
    assert!(
        error.message.contains("2024-08-01-preview or later"),
        "{error}"
    );
}

fn streaming(uri: &str) -> Arc<conform_config::ProviderConfig> {
    dated(uri, "stream = true")
}

#[tokio::test]
async fn streams_fold_through_their_filter_chunks_and_a_cut_one_is_truncated() {
    let sse = |file: &str| {
        ResponseTemplate::new(200).set_body_raw(wire_text(file).into_bytes(), "text/event-stream")
    };
    let (server, _) = deployment(sse("azure_chat_stream_transcript.sse")).await;
    let reply = call(
        &endpoint(streaming(&server.uri())),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(reply.text, "{\"city\": \"Paris\"}");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.usage.prompt_tokens, Some(24));
    let sent = body(&requests(&server).await[0]);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);

    let (server, _) = deployment(sse("azure_chat_stream_content_filter_transcript.sse")).await;
    let reply = call(
        &endpoint(streaming(&server.uri())),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap()
    .reply;
    assert_eq!(reply.finish.kind, FinishKind::ContentFilter);
    assert!(reply.finish.raw.unwrap().contains("violence (medium)"));

    // Cut before `data: [DONE]` and the chunk with the finish reason.
    let events: Vec<String> = wire_text("azure_chat_stream_transcript.sse")
        .split_inclusive("\n\n")
        .map(str::to_string)
        .collect();
    let (address, _) = streaming_server(
        "text/event-stream",
        events[..4].to_vec(),
        Duration::from_millis(10),
        Vec::new(),
        StreamEnd::Drop,
    )
    .await;
    let config = config(
        "azure",
        &toml(
            &address,
            "api_version = \"2024-10-21\"\napi_key_env = \"AZ\"\nstream = true",
        ),
    );
    let error = call(&endpoint(config), None, "x", &small_schema(), "x")
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::StreamTruncated);
    assert_eq!(error.effect(), Effect::ProviderFailure);
}

#[test]
fn an_old_api_version_asks_with_the_words_it_knows() {
    let config = dated("https://r.openai.azure.com", "").as_ref().clone();
    let mut old = config.clone();
    old.cloud.api_version = Some("2024-06-01".into());
    let wire = conform_wire::provider::wire_format(old.wire_kind());
    let prompt = conform_config::Prompt {
        system: None,
        user: "x".into(),
    };
    let schema = small_schema();
    let spec = conform_wire::provider::CallSpec {
        prompt: &prompt,
        schema: &schema,
        schema_name: "x",
        conversation: None,
    };
    let mut streamed = old.clone();
    streamed.stream = true;
    let body = wire.encode(&spec, &streamed, None).body;
    assert!(
        body.get("max_tokens").is_some() && body.get("stream_options").is_none(),
        "{body}"
    );
}
