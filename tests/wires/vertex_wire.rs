//! Vertex AI against a mock token endpoint that verifies the service account's signed JWT
//! (signature with the key's public half, audience, scope, issuer, expiry) before it issues
//! a token, and a mock Vertex that takes only a token it issued and not yet expired;
//! answers from `tests/wire/vertex_*` and the Gemini and Anthropic payloads (see the
//! README). Gemini on Vertex is the Gemini codec's, Claude on Vertex the Anthropic codec's.

use crate::clouds;
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use clouds::{Gate, TokenEndpoint, fixed, google_environment, google_token, service_account_file};
use common::*;
use conform_wire::provider::transport::Endpoint;
use conform_wire::provider::{Effect, ErrorKind, FinishKind};
use serde_json::{Value, json};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

const GEMINI: &str = "/v1/projects/conform-test-project/locations/us-central1/publishers/google/models/gemini-2.0-flash-001";
const CLAUDE: &str = "/v1/projects/conform-test-project/locations/us-east5/publishers/anthropic/models/claude-3-5-haiku@20241022";

/// A token endpoint and a Vertex on one server, and the key file naming the endpoint.
struct Cloud {
    server: MockServer,
    tokens: TokenEndpoint,
    key_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Cloud {
    async fn start(lifetime: u64) -> Cloud {
        let server = MockServer::start().await;
        let tokens = TokenEndpoint::new(lifetime);
        let token_uri = format!("{}/token", server.uri());
        *tokens.uri.lock().unwrap() = token_uri.clone();
        Mock::given(method("POST"))
            .and(path("/token"))
            .respond_with(tokens.clone())
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let key_file = service_account_file(dir.path(), &token_uri);
        Cloud {
            server,
            tokens,
            key_file,
            _dir: dir,
        }
    }

    /// Vertex at `route`, taking this endpoint's tokens.
    async fn serve(&self, route: &str, answer: clouds::Answer) -> Gate {
        let gate = Gate::new(google_token(&self.tokens), answer);
        Mock::given(method("POST"))
            .and(path(route))
            .respond_with(gate.clone())
            .mount(&self.server)
            .await;
        gate
    }

    fn endpoint(&self, config: Arc<conform_config::ProviderConfig>) -> Endpoint {
        endpoint(config).with_environment(&google_environment(&self.key_file))
    }
}

fn toml(model: &str, region: &str, uri: &str, extra: &str) -> String {
    format!(
        "kind = \"vertex\"\nmodel = \"{model}\"\nproject = \"conform-test-project\"\nregion = \"{region}\"\nbase_url = \"{uri}\"\ntimeout = \"5s\"\n{extra}\n{FAST_LIMITS}"
    )
}

fn gemini(uri: &str, extra: &str) -> Arc<conform_config::ProviderConfig> {
    config(
        "vertex-gemini",
        &toml("gemini-2.0-flash-001", "us-central1", uri, extra),
    )
}

fn claude(uri: &str, extra: &str) -> Arc<conform_config::ProviderConfig> {
    config(
        "vertex-claude",
        &toml("claude-3-5-haiku@20241022", "us-east5", uri, extra),
    )
}

fn answer(file: &str) -> clouds::Answer {
    fixed(ok(file))
}

#[tokio::test]
async fn gemini_on_vertex_is_called_with_a_token_the_service_account_obtained_once() {
    let cloud = Cloud::start(3600).await;
    let vertex = cloud
        .serve(
            &format!("{GEMINI}:generateContent"),
            answer("vertex_gemini_generatecontent_response.json"),
        )
        .await;
    let endpoint = cloud.endpoint(gemini(&cloud.server.uri(), ""));
    for _ in 0..3 {
        let reply = call(
            &endpoint,
            Some("Answer in JSON."),
            "Where?",
            &small_schema(),
            "city",
        )
        .await
        .unwrap()
        .reply;
        assert_eq!(reply.text, "{\"city\": \"Paris\"}");
        assert_eq!(reply.served_model.as_deref(), Some("gemini-2.0-flash-001"));
        assert_eq!(reply.usage.prompt_tokens, Some(14));
    }
    assert_eq!(
        cloud.tokens.exchanges(),
        1,
        "one token for every call of its life"
    );
    assert!(cloud.tokens.refused.lock().unwrap().is_empty());
    assert_eq!((vertex.passed(), vertex.refused()), (3, 0));
    let sent = requests(&cloud.server).await;
    let call = sent
        .iter()
        .find(|r| r.url.path().ends_with(":generateContent"))
        .unwrap();
    let body = body(call);
    assert_eq!(body["contents"][0]["parts"][0]["text"], "Where?");
    assert_eq!(
        body["systemInstruction"]["parts"][0]["text"],
        "Answer in JSON."
    );
    assert_eq!(
        body["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert!(body["generationConfig"]["responseJsonSchema"].is_object());
    assert!(call.headers.get("x-goog-api-key").is_none());
}

#[tokio::test]
async fn claude_on_vertex_sends_anthropics_body_with_vertexs_version_and_no_model() {
    let cloud = Cloud::start(3600).await;
    let checked: clouds::Answer = Arc::new(|request: &wiremock::Request| {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        // As Vertex refuses a body without its version, or with a model.
        match (body.get("anthropic_version"), body.get("model")) {
            (Some(v), None) if v == "vertex-2023-10-16" => ok("vertex_claude_rawpredict_response.json"),
            _ => ResponseTemplate::new(400).set_body_json(json!({"type": "error",
                "error": {"type": "invalid_request_error", "message": "anthropic_version: Field required"}})),
        }
    });
    let vertex = cloud.serve(&format!("{CLAUDE}:rawPredict"), checked).await;
    let endpoint = cloud.endpoint(claude(&cloud.server.uri(), "structured_output = \"tool\""));
    let reply = call(&endpoint, None, "Where?", &small_schema(), "city")
        .await
        .unwrap()
        .reply;
    assert_eq!(vertex.passed(), 1);
    assert_eq!(reply.text, "{\"city\": \"Paris\"}");
    assert_eq!(
        reply.served_model.as_deref(),
        Some("claude-3-5-haiku-20241022")
    );
    assert_eq!(reply.usage.prompt_tokens, Some(21));
    let sent = requests(&cloud.server).await;
    let body = body(
        sent.iter()
            .find(|r| r.url.path().ends_with(":rawPredict"))
            .unwrap(),
    );
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "city"}));
    assert!(
        sent.iter()
            .all(|r| r.headers.get("anthropic-version").is_none())
    );
}

#[tokio::test]
async fn the_token_is_reused_and_replaced_before_it_expires() {
    // A two-second token is replaced at half its life.
    let cloud = Cloud::start(2).await;
    let vertex = cloud
        .serve(
            &format!("{GEMINI}:generateContent"),
            answer("vertex_gemini_generatecontent_response.json"),
        )
        .await;
    let endpoint = Arc::new(cloud.endpoint(gemini(&cloud.server.uri(), "")));
    // Calls in flight at once share the one exchange.
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let endpoint = Arc::clone(&endpoint);
            tokio::spawn(async move { call(&endpoint, None, "x", &small_schema(), "x").await })
        })
        .collect();
    for c in calls {
        c.await.unwrap().unwrap();
    }
    assert_eq!(cloud.tokens.exchanges(), 1);
    clouds::sleep_past(1.0).await;
    call(&endpoint, None, "x", &small_schema(), "x")
        .await
        .unwrap();
    assert_eq!(cloud.tokens.exchanges(), 2, "replaced within its last half");
    // Vertex refused none: no call ever went with an expired token.
    assert_eq!((vertex.passed(), vertex.refused()), (7, 0));
}

#[tokio::test]
async fn a_refused_assertion_is_inconclusive_sends_nothing_to_vertex_and_quotes_no_secret() {
    let cloud = Cloud::start(3600).await;
    // The endpoint expects assertions for another audience than the key file's token_uri.
    *cloud.tokens.uri.lock().unwrap() = "https://oauth2.googleapis.com/token".into();
    let vertex = cloud
        .serve(
            &format!("{GEMINI}:generateContent"),
            answer("vertex_gemini_generatecontent_response.json"),
        )
        .await;
    let endpoint = cloud.endpoint(gemini(&cloud.server.uri(), ""));
    let error = call(&endpoint, None, "x", &small_schema(), "x")
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Auth);
    assert_eq!(error.effect(), Effect::HaltProvider);
    assert!(
        error
            .message
            .contains("invalid_grant: Invalid JWT: bad aud"),
        "{error}"
    );
    assert!(error.message.contains(clouds::SERVICE_ACCOUNT), "{error}");
    assert_eq!(vertex.passed() + vertex.refused(), 0);
    let key = clouds::service_account_private_key();
    let body = key.lines().nth(1).unwrap();
    assert!(!error.to_string().contains(body), "{error}");
    assert!(
        !error.to_string().contains("eyJ"),
        "no assertion in {error}"
    );
    // A key file that is not there names the variable's file, not its contents.
    let missing = endpoint_for_file(&cloud, std::path::Path::new("/nonexistent/sa.json"));
    let error = call(&missing, None, "x", &small_schema(), "x")
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Auth);
    assert!(error.message.contains("/nonexistent/sa.json"), "{error}");
}

fn endpoint_for_file(cloud: &Cloud, file: &std::path::Path) -> Endpoint {
    endpoint(gemini(&cloud.server.uri(), "")).with_environment(&google_environment(file))
}

#[tokio::test]
async fn a_token_vertex_refuses_is_inconclusive_and_never_quoted() {
    let cloud = Cloud::start(3600).await;
    // A gateway that echoes the credential it was sent.
    let echo = Gate::new(
        Arc::new(|request: &wiremock::Request| {
            let sent = clouds::header(request, "authorization").unwrap_or_default();
            Some(
                ResponseTemplate::new(401).set_body_json(json!({"error": {"code": 401,
                "message": format!("Request had invalid authentication credentials: {sent}"),
                "status": "UNAUTHENTICATED"}})),
            )
        }),
        fixed(ResponseTemplate::new(500)),
    );
    Mock::given(method("POST"))
        .and(path(format!("{GEMINI}:generateContent")))
        .respond_with(echo)
        .mount(&cloud.server)
        .await;
    let error = call(
        &cloud.endpoint(gemini(&cloud.server.uri(), "")),
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
    assert!(!error.message.contains("ya29.conform-test"), "{error}");
    assert!(error.message.contains("***"), "{error}");
}

#[tokio::test]
async fn a_ready_token_from_token_env_is_sent_as_bearer() {
    let server = MockServer::start().await;
    let gate = Gate::new(
        clouds::google_ready_token(TEST_KEY),
        answer("vertex_gemini_generatecontent_response.json"),
    );
    Mock::given(method("POST"))
        .and(path(format!("{GEMINI}:generateContent")))
        .respond_with(gate.clone())
        .mount(&server)
        .await;
    let config = gemini(&server.uri(), "token_env = \"VERTEX_ACCESS_TOKEN\"");
    call(&endpoint(config), None, "x", &small_schema(), "x")
        .await
        .unwrap();
    assert_eq!(gate.passed(), 1);
}

#[tokio::test]
async fn vertex_failures_and_finishes_are_read_as_gemini_and_anthropic_read_theirs() {
    let cloud = Cloud::start(3600).await;
    // RESOURCE_EXHAUSTED: waited out and answered.
    let route = format!("{GEMINI}:generateContent");
    let throttled = Gate::new(
        google_token(&cloud.tokens),
        fixed(recorded("vertex_error_429_resource_exhausted.json")),
    );
    Mock::given(method("POST"))
        .and(path(route.as_str()))
        .respond_with(throttled.clone())
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&cloud.server)
        .await;
    cloud
        .serve(
            &route,
            answer("vertex_gemini_generatecontent_response.json"),
        )
        .await;
    let completion = call(
        &cloud.endpoint(gemini(&cloud.server.uri(), "")),
        None,
        "x",
        &small_schema(),
        "x",
    )
    .await
    .unwrap();
    assert_eq!((completion.retries, throttled.passed()), (1, 1));
}

#[tokio::test]
async fn gemini_on_vertex_finishes_as_gemini_does() {
    let route = format!("{GEMINI}:generateContent");
    for (reason, kind) in [
        ("SAFETY", FinishKind::ContentFilter),
        ("RECITATION", FinishKind::ContentFilter),
        ("MAX_TOKENS", FinishKind::Length),
    ] {
        let cloud = Cloud::start(3600).await;
        let mut body = body_of(&wire("vertex_gemini_generatecontent_response.json"));
        body["candidates"][0]["finishReason"] = json!(reason);
        cloud
            .serve(
                &route,
                fixed(ResponseTemplate::new(200).set_body_json(body)),
            )
            .await;
        let reply = call(
            &cloud.endpoint(gemini(&cloud.server.uri(), "")),
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
async fn claude_on_vertex_fails_as_claude_and_vertex_do() {
    for (file, kind, effect, sent) in [
        (
            "anthropic_error_529_overloaded.json",
            ErrorKind::Overloaded,
            Effect::ProviderFailure,
            3,
        ),
        (
            "anthropic_error_400_prompt_too_long.json",
            ErrorKind::ContextLength,
            Effect::ConformanceFailure,
            1,
        ),
        (
            "vertex_error_429_resource_exhausted.json",
            ErrorKind::RateLimited,
            Effect::Transport,
            3,
        ),
    ] {
        let cloud = Cloud::start(3600).await;
        let gate = cloud
            .serve(&format!("{CLAUDE}:rawPredict"), fixed(recorded(file)))
            .await;
        let error = call(
            &cloud.endpoint(claude(&cloud.server.uri(), "")),
            None,
            "x",
            &small_schema(),
            "x",
        )
        .await
        .unwrap_err();
        assert_eq!(
            (error.kind, error.effect(), gate.passed()),
            (kind, effect, sent),
            "{file}: {error}"
        );
    }
}

fn recorded(file: &str) -> ResponseTemplate {
    let v = wire(file);
    ResponseTemplate::new(status_of(&v)).set_body_json(body_of(&v))
}

#[tokio::test]
async fn streams_of_both_publishers_fold_and_a_cut_one_is_truncated() {
    let cloud = Cloud::start(3600).await;
    let sse = |file: &str| {
        fixed(
            ResponseTemplate::new(200)
                .set_body_raw(wire_text(file).into_bytes(), "text/event-stream"),
        )
    };
    let gemini_stream = Gate::new(
        google_token(&cloud.tokens),
        sse("vertex_gemini_stream_transcript.sse"),
    );
    Mock::given(method("POST"))
        .and(path(format!("{GEMINI}:streamGenerateContent")))
        .and(query_param("alt", "sse"))
        .respond_with(gemini_stream.clone())
        .mount(&cloud.server)
        .await;
    let claude_stream = cloud
        .serve(
            &format!("{CLAUDE}:streamRawPredict"),
            sse("vertex_claude_stream_transcript.sse"),
        )
        .await;
    for config in [
        gemini(&cloud.server.uri(), "stream = true"),
        claude(&cloud.server.uri(), "stream = true"),
    ] {
        let reply = call(&cloud.endpoint(config), None, "x", &small_schema(), "x")
            .await
            .unwrap()
            .reply;
        assert_eq!(reply.text, "{\"city\": \"Paris\"}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
    }
    assert_eq!((gemini_stream.passed(), claude_stream.passed()), (1, 1));
    let sent = requests(&cloud.server).await;
    let claude_body = body(
        sent.iter()
            .find(|r| r.url.path().ends_with(":streamRawPredict"))
            .unwrap(),
    );
    assert_eq!(claude_body["stream"], true);

    // Each cut before its terminal event: Gemini's last chunk with a finishReason,
    // Claude's message_stop.
    for (file, model, region) in [
        (
            "vertex_gemini_stream_transcript.sse",
            "gemini-2.0-flash-001",
            "us-central1",
        ),
        (
            "vertex_claude_stream_transcript.sse",
            "claude-3-5-haiku@20241022",
            "us-east5",
        ),
    ] {
        let text = wire_text(file);
        // Vertex ends Gemini's events with CRLF pairs, as Google's servers do.
        let end = if text.contains("\r\n\r\n") {
            "\r\n\r\n"
        } else {
            "\n\n"
        };
        let events: Vec<String> = text.split_inclusive(end).map(str::to_string).collect();
        assert!(events.len() > 1, "{file}");
        let (address, _) = streaming_server(
            "text/event-stream",
            events[..events.len() - 1].to_vec(),
            Duration::from_millis(10),
            Vec::new(),
            StreamEnd::Drop,
        )
        .await;
        let config = config(
            "v",
            &toml(model, region, &address, "token_env = \"T\"\nstream = true"),
        );
        let error = call(&endpoint(config), None, "x", &small_schema(), "x")
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::StreamTruncated, "{file}");
        assert!(
            error.partial_text().unwrap().starts_with("{\"city\": "),
            "{file}"
        );
    }
}
