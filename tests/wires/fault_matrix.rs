//! The fault matrix, for every provider kind: the same fault, each vendor's way of
//! saying it, the same classification and the exact number of upstream requests.
//!
//! Every provider runs with two retries 5 ms apart, so a retryable fault costs exactly
//! three requests and a final one exactly one. Once a 2xx status has arrived, nothing is
//! retried: the provider processed (and billed) the request, whatever its body was.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use conform_wire::provider::{CallError, Completion, Effect, ErrorKind, Stage, wire_format};
use serde_json::{Value, json};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// One vendor: how to configure it, where it listens, and how it says each fault.
struct Vendor {
    kind: &'static str,
    model: &'static str,
    route: &'static str,
    ok: Value,
    auth: (u16, Value),
    bad_request: (u16, Value),
    context_length: (u16, Value),
    /// A 429 a wait cures; `retry-after: 0` is added (Gemini says it in `RetryInfo`).
    rate_limited: Value,
    /// A 429 (or the vendor's equivalent) that needs a person.
    quota: (u16, Value),
    server_error: Value,
    /// 503, or Anthropic's 529.
    overloaded: (u16, Value),
}

fn vendors() -> Vec<Vendor> {
    let openai_ok = wire("openai_chat_json_schema_response.json");
    let openai_429 = json!({"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
        "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
    let recorded = |file: &str| {
        let v = wire(file);
        (status_of(&v), body_of(&v))
    };
    let gemini_per_minute = {
        let mut body = body_of(&wire(
            "gemini_error_429_resource_exhausted_quota_failure.json",
        ));
        let details = body["error"]["details"].as_array_mut().unwrap();
        details[0]["violations"]
            .as_array_mut()
            .unwrap()
            .retain(|v| !v["quotaId"].as_str().unwrap().contains("PerDay"));
        details
            .push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}));
        body
    };
    vec![
        Vendor {
            kind: "openai",
            model: "gpt-4o-mini",
            route: r"^/v1/chat/completions$",
            ok: openai_ok.clone(),
            auth: recorded("openai_error_401_invalid_api_key.json"),
            bad_request: recorded("openai_error_400_invalid_json_schema_chat.json"),
            context_length: recorded("openai_error_400_context_length_exceeded.json"),
            rate_limited: openai_429.clone(),
            quota: recorded("openai_error_429_insufficient_quota.json"),
            server_error: body_of(&wire("openai_error_500_server_error.json")),
            overloaded: (
                503,
                json!({"error": {"message": "The engine is currently overloaded, please try again later",
                    "type": "server_error", "param": null, "code": null}}),
            ),
        },
        Vendor {
            kind: "openai-compatible",
            model: "Qwen/Qwen2.5-7B-Instruct",
            route: r"^/v1/chat/completions$",
            ok: openai_ok,
            // vLLM's --api-key middleware.
            auth: (401, json!({"error": "Unauthorized"})),
            bad_request: recorded("vllm_error_400_max_tokens_legacy_flat.json"),
            context_length: recorded("llamacpp_error_400_exceed_context_size.json"),
            rate_limited: openai_429,
            // A hosted OpenAI-compatible gateway out of credit.
            quota: recorded("openai_error_429_insufficient_quota.json"),
            server_error: json!({"error": {"message": "EngineCore encountered an issue.",
                "type": "InternalServerError", "param": null, "code": 500}}),
            overloaded: (
                503,
                json!({"error": {"message": "The server is overloaded.",
                    "type": "unavailable_error", "param": null, "code": 503}}),
            ),
        },
        Vendor {
            kind: "anthropic",
            model: "claude-sonnet-4-5",
            route: r"^/v1/messages$",
            ok: wire("anthropic_messages_output_config_json_schema_response.json"),
            auth: (
                401,
                json!({"type": "error", "error": {"type": "authentication_error",
                    "message": "invalid x-api-key"}, "request_id": "req_x"}),
            ),
            bad_request: recorded("anthropic_error_400_invalid_request.json"),
            context_length: recorded("anthropic_error_400_prompt_too_long.json"),
            rate_limited: body_of(&wire("anthropic_error_429_rate_limit.json")),
            // Anthropic says "out of credit" as a 400.
            quota: (
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},
                    "request_id": "req_x"}),
            ),
            server_error: json!({"type": "error", "error": {"type": "api_error",
                "message": "Internal server error"}, "request_id": "req_x"}),
            overloaded: recorded("anthropic_error_529_overloaded.json"),
        },
        Vendor {
            kind: "gemini",
            model: "gemini-2.5-flash",
            route: r"^/v1(beta)?/models/[^/]+:generateContent$",
            ok: wire("gemini_generatecontent_response_basic.json"),
            // A bad key is a 400 at Google.
            auth: (400, wire("gemini_error_400_api_key_invalid.json")),
            bad_request: recorded("gemini_error_400_response_schema_unknown_field.json"),
            context_length: recorded("gemini_error_400_input_token_count_exceeded.json"),
            rate_limited: gemini_per_minute,
            quota: recorded("gemini_error_429_resource_exhausted_quota_failure.json"),
            server_error: json!({"error": {"code": 500,
                "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
                "status": "INTERNAL"}}),
            overloaded: recorded("gemini_error_503_unavailable_overloaded.json"),
        },
        Vendor {
            kind: "ollama",
            model: "llama3.1",
            route: r"^/api/chat$",
            ok: wire("ollama_chat_structured_output_response.json"),
            auth: (401, json!({"error": "unauthorized"})),
            bad_request: (
                400,
                json!({"error": "invalid format: expected \"json\" or a valid JSON schema"}),
            ),
            context_length: recorded("ollama_error_400_context_length_native.json"),
            rate_limited: json!({"error": "too many concurrent requests"}),
            // Ollama's cloud, out of its weekly allowance.
            quota: (
                429,
                json!({"error": "you've reached your weekly usage limit, please wait or upgrade to continue"}),
            ),
            server_error: json!({"error": "llama runner process has terminated: exit status 2"}),
            overloaded: (
                503,
                json!({"error": "server busy, please try again.  maximum pending requests exceeded"}),
            ),
        },
    ]
}

fn toml(v: &Vendor, base: &str, timeout: &str) -> String {
    format!(
        "kind = \"{}\"\nmodel = \"{}\"\nbase_url = \"{base}\"\ntimeout = \"{timeout}\"\nmax_output_tokens = 64\n{FAST_LIMITS}",
        v.kind, v.model
    )
}

async fn call_vendor(v: &Vendor, base: &str, timeout: &str) -> Result<Completion, CallError> {
    let endpoint = endpoint(config(
        v.kind.replace('-', "_").as_str(),
        &toml(v, base, timeout),
    ));
    call(
        &endpoint,
        None,
        "What's the weather like in SF?",
        &small_schema(),
        "weather",
    )
    .await
}

/// Serves `template` for every request and returns what the call came to and how many
/// requests reached the server.
async fn serve(v: &Vendor, template: ResponseTemplate) -> (Result<Completion, CallError>, usize) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex(v.route))
        .respond_with(template)
        .mount(&server)
        .await;
    let result = call_vendor(v, &server.uri(), "5s").await;
    let sent = server
        .received_requests()
        .await
        .expect("recording on")
        .len();
    (result, sent)
}

async fn assert_fault(
    v: &Vendor,
    template: ResponseTemplate,
    kind: ErrorKind,
    requests: usize,
) -> CallError {
    let (result, sent) = serve(v, template).await;
    let err = result.expect_err(v.kind);
    assert_eq!(err.kind, kind, "{}: {err}", v.kind);
    assert_eq!(sent, requests, "{}: requests for {}", v.kind, kind.code());
    assert_eq!(err.retryable(), requests > 1, "{}", v.kind);
    // The final error says how many retries it took, so the record can.
    assert_eq!(err.retries as usize, requests - 1, "{}: retries", v.kind);
    // Nothing a provider echoes can carry our key into a report.
    assert!(!err.message.contains(TEST_KEY), "{}", v.kind);
    err
}

/// A fault that arrived with (or after) a 2xx status: one request, never retried, a
/// failed call of the provider's own whatever its kind.
async fn assert_processed_fault(
    v: &Vendor,
    template: ResponseTemplate,
    kind: ErrorKind,
) -> CallError {
    let err = assert_fault(v, template, kind, 1).await;
    assert_eq!(err.stage, Stage::AfterSuccess, "{}: {err}", v.kind);
    assert_eq!(err.effect(), Effect::ProviderFailure, "{}: {err}", v.kind);
    err
}

fn json_template(status: u16, body: &Value) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(body.clone())
}

#[tokio::test]
async fn auth_failure_stops_at_once() {
    for v in vendors() {
        assert_fault(&v, json_template(v.auth.0, &v.auth.1), ErrorKind::Auth, 1).await;
    }
}

#[tokio::test]
async fn forbidden_stops_at_once() {
    for v in vendors() {
        assert_fault(&v, json_template(403, &v.auth.1), ErrorKind::Auth, 1).await;
    }
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    for v in vendors() {
        let (status, body) = &v.bad_request;
        assert_fault(&v, json_template(*status, body), ErrorKind::BadRequest, 1).await;
    }
}

#[tokio::test]
async fn context_length_is_not_retried() {
    for v in vendors() {
        let (status, body) = &v.context_length;
        assert_fault(
            &v,
            json_template(*status, body),
            ErrorKind::ContextLength,
            1,
        )
        .await;
    }
}

#[tokio::test]
async fn quota_exhaustion_is_not_retried() {
    for v in vendors() {
        let (status, body) = &v.quota;
        assert_fault(
            &v,
            json_template(*status, body),
            ErrorKind::QuotaExhausted,
            1,
        )
        .await;
    }
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    for v in vendors() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path_regex(v.route))
            .respond_with(json_template(429, &v.rate_limited).insert_header("retry-after", "0"))
            .up_to_n_times(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path_regex(v.route))
            .respond_with(json_template(200, &v.ok))
            .mount(&server)
            .await;
        let completion = call_vendor(&v, &server.uri(), "5s")
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", v.kind));
        assert_eq!(completion.retries, 1, "{}", v.kind);
        let sent = server.received_requests().await.unwrap().len();
        assert_eq!(sent, 2, "{}", v.kind);
        assert!(!completion.reply.text.is_empty(), "{}", v.kind);
    }
}

#[tokio::test]
async fn rate_limit_that_persists_is_retried_within_bounds() {
    for v in vendors() {
        let template = json_template(429, &v.rate_limited).insert_header("retry-after", "0");
        assert_fault(&v, template, ErrorKind::RateLimited, 3).await;
    }
}

#[tokio::test]
async fn a_retry_after_beyond_the_longest_wait_is_not_waited_for() {
    for v in vendors() {
        // max_retry_wait is 1s: asking for an hour gives up after one request.
        let template = json_template(429, &v.rate_limited).insert_header("retry-after", "3600");
        let (result, sent) = serve(&v, template).await;
        let err = result.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::RateLimited, "{}: {err}", v.kind);
        assert_eq!(
            err.retry_after,
            Some(Duration::from_secs(3600)),
            "{}",
            v.kind
        );
        assert_eq!(sent, 1, "{}", v.kind);
    }
}

#[tokio::test]
async fn server_error_is_retried() {
    for v in vendors() {
        assert_fault(
            &v,
            json_template(500, &v.server_error),
            ErrorKind::ServerError,
            3,
        )
        .await;
    }
}

/// `x-should-retry` is the provider's own word and comes before the status table, as in
/// the OpenAI and Anthropic SDKs: `false` stops a fault the table would retry, `true`
/// retries one it would not.
#[tokio::test]
async fn x_should_retry_overrides_the_status() {
    for v in vendors() {
        let refused = json_template(500, &v.server_error).insert_header("x-should-retry", "false");
        assert_fault(&v, refused, ErrorKind::ServerError, 1).await;
        let (status, body) = &v.bad_request;
        let invited = json_template(*status, body).insert_header("x-should-retry", "true");
        assert_fault(&v, invited, ErrorKind::BadRequest, 3).await;
        // Anything but true or false is no answer: the table decides.
        let garbled = json_template(500, &v.server_error).insert_header("x-should-retry", "maybe");
        assert_fault(&v, garbled, ErrorKind::ServerError, 3).await;
    }
}

#[tokio::test]
async fn overload_is_retried() {
    for v in vendors() {
        let (status, body) = &v.overloaded;
        assert_fault(&v, json_template(*status, body), ErrorKind::Overloaded, 3).await;
    }
}

#[tokio::test]
async fn timeout_is_retried() {
    // All vendors at once: each waits out three 300 ms timeouts.
    let checks = vendors().into_iter().map(|v| async move {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path_regex(v.route))
            .respond_with(json_template(200, &v.ok).set_delay(Duration::from_secs(3)))
            .mount(&server)
            .await;
        let err = call_vendor(&v, &server.uri(), "300ms")
            .await
            .expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::Timeout, "{}: {err}", v.kind);
        let sent = server.received_requests().await.unwrap().len();
        assert_eq!(sent, 3, "{}", v.kind);
    });
    futures::future::join_all(checks).await;
}

#[tokio::test]
async fn connection_refused_names_the_url_and_counts_its_retries() {
    // Nothing listens, so nothing counts requests: the error says how often it tried.
    for v in vendors() {
        let address = refused_address().await;
        let err = call_vendor(&v, &address, "5s").await.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::ConnectionRefused, "{}: {err}", v.kind);
        assert_eq!(err.effect(), Effect::HaltProvider, "{}", v.kind);
        assert_eq!(err.retries, 2, "{}: {err}", v.kind);
        // scheme://host:port/path, the path the vendor's wire format posts to.
        let path = match v.kind {
            "openai" | "openai-compatible" => "/v1/chat/completions".to_string(),
            "anthropic" => "/v1/messages".to_string(),
            "gemini" => format!("/v1beta/models/{}:generateContent", v.model),
            "ollama" => "/api/chat".to_string(),
            other => panic!("no path for {other}"),
        };
        assert!(
            err.message.contains(&format!("{address}{path}")),
            "{}: no {address}{path} in {err}",
            v.kind
        );
        assert!(err.message.contains("refused"), "{}: {err}", v.kind);
    }
}

/// A URL never shows a query string or user info, where a key could be.
#[tokio::test]
async fn a_connection_error_never_shows_a_query_or_credentials() {
    let address = refused_address().await;
    let port = address.rsplit(':').next().unwrap();
    let base = format!("http://user:{TEST_KEY}@127.0.0.1:{port}/gateway?key={TEST_KEY}");
    for v in vendors() {
        let err = call_vendor(&v, &base, "5s").await.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::ConnectionRefused, "{}: {err}", v.kind);
        let text = err.to_string();
        assert!(!text.contains(TEST_KEY), "{}: {text}", v.kind);
        assert!(
            !text.contains("?key") && !text.contains("user:"),
            "{}: {text}",
            v.kind
        );
        assert!(
            text.contains(&format!("http://127.0.0.1:{port}/gateway")),
            "{}: {text}",
            v.kind
        );
    }
}

#[tokio::test]
async fn connection_reset_after_the_request_is_retried() {
    for v in vendors() {
        let (address, count) = resetting_server().await;
        let err = call_vendor(&v, &address, "5s").await.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::ConnectionReset, "{}: {err}", v.kind);
        assert_eq!(count.load(Ordering::SeqCst), 3, "{}", v.kind);
        assert_eq!(err.retries, 2, "{}", v.kind);
        assert!(err.message.contains(&address), "{}: {err}", v.kind);
    }
}

#[tokio::test]
async fn a_2xx_body_that_breaks_off_mid_read_is_not_retried() {
    for v in vendors() {
        let (address, count) = short_body_server("{\"id\": \"cut", 4096).await;
        let err = call_vendor(&v, &address, "5s").await.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::TruncatedBody, "{}: {err}", v.kind);
        assert_eq!(err.status, Some(200), "{}", v.kind);
        assert!(!err.retryable(), "{}", v.kind);
        assert_eq!(err.effect(), Effect::ProviderFailure, "{}", v.kind);
        assert_eq!(err.retries, 0, "{}", v.kind);
        assert_eq!(count.load(Ordering::SeqCst), 1, "{}", v.kind);
    }
}

#[tokio::test]
async fn an_error_body_that_breaks_off_is_classified_by_its_status() {
    for v in vendors() {
        // A 401 whose body never arrives whole is still a 401: not retried, stops the
        // provider.
        let (address, count) = raw_answer_server(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{\"error\": ",
        )
        .await;
        let err = call_vendor(&v, &address, "5s").await.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::Auth, "{}: {err}", v.kind);
        assert_eq!(err.status, Some(401), "{}", v.kind);
        assert_eq!(count.load(Ordering::SeqCst), 1, "{}", v.kind);
    }
}

#[tokio::test]
async fn json_cut_mid_document_is_not_retried() {
    for v in vendors() {
        let text = v.ok.to_string();
        let cut = &text[..text.len() / 2];
        let template = ResponseTemplate::new(200)
            .insert_header("content-type", "application/json")
            .set_body_string(cut);
        assert_processed_fault(&v, template, ErrorKind::TruncatedBody).await;
    }
}

#[tokio::test]
async fn non_json_body_with_a_success_status_is_not_retried() {
    for v in vendors() {
        let template = ResponseTemplate::new(200)
            .insert_header("content-type", "text/plain")
            .set_body_string("upstream connect error or disconnect/reset before headers");
        assert_processed_fault(&v, template, ErrorKind::NonJsonBody).await;
    }
}

const HTML: &str = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n";

#[tokio::test]
async fn html_page_with_a_success_status_is_not_retried() {
    for v in vendors() {
        let template = ResponseTemplate::new(200)
            .insert_header("content-type", "text/html")
            .set_body_string(HTML);
        assert_processed_fault(&v, template, ErrorKind::HtmlErrorPage).await;
    }
}

#[tokio::test]
async fn an_empty_2xx_body_is_not_retried() {
    for v in vendors() {
        let template = ResponseTemplate::new(200).insert_header("content-type", "application/json");
        assert_processed_fault(&v, template, ErrorKind::TruncatedBody).await;
    }
}

/// The vendor's own success body with the answer taken out: no choices, no content, no
/// candidates, no message.
fn wrong_shape(v: &Vendor) -> Value {
    let mut body = v.ok.clone();
    let map = body.as_object_mut().unwrap();
    match v.kind {
        "openai" | "openai-compatible" => {
            map.insert("choices".into(), json!([]));
        }
        "anthropic" => {
            map.remove("content");
        }
        "gemini" => {
            map.remove("candidates");
        }
        "ollama" => {
            map.remove("message");
        }
        other => panic!("no wrong shape for {other}"),
    }
    body
}

/// A 2xx of the wrong shape is the provider's failed call, sent once, and keeps what the
/// body did say: the usage and the served model (and fingerprint) of the intact body.
#[tokio::test]
async fn a_wrong_shaped_2xx_is_not_retried_and_keeps_usage_and_model() {
    for v in vendors() {
        let configured = config(
            v.kind.replace('-', "_").as_str(),
            &toml(&v, "http://127.0.0.1:9", "5s"),
        );
        let intact = wire_format(configured.wire_kind())
            .decode(v.ok.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{}: {e}", v.kind));
        assert!(intact.usage.prompt_tokens.is_some(), "{}", v.kind);
        assert!(intact.served_model.is_some(), "{}", v.kind);
        let err = assert_processed_fault(
            &v,
            json_template(200, &wrong_shape(&v)),
            ErrorKind::InvalidResponse,
        )
        .await;
        assert_eq!(err.status, Some(200), "{}", v.kind);
        assert_eq!(err.usage(), intact.usage, "{}: usage", v.kind);
        assert_eq!(
            err.served_model(),
            intact.served_model.as_deref(),
            "{}: model",
            v.kind
        );
        assert_eq!(
            err.system_fingerprint(),
            intact.system_fingerprint.as_deref(),
            "{}: fingerprint",
            v.kind
        );
    }
}

/// An error object inside a 200 (a proxy's, or the vendor's own) is whatever it says, but
/// the request was processed: once, and `x-should-retry: true` cannot change that.
#[tokio::test]
async fn an_error_object_in_a_2xx_is_not_retried_whatever_it_says() {
    for v in vendors() {
        assert_processed_fault(
            &v,
            json_template(200, &v.server_error),
            ErrorKind::ServerError,
        )
        .await;
        let invited = json_template(200, &v.server_error).insert_header("x-should-retry", "true");
        assert_processed_fault(&v, invited, ErrorKind::ServerError).await;
        // A rate-limit body in a 200 (Ollama's says so only in prose, which without a 429
        // reads as a server error): sent once all the same.
        let (result, sent) = serve(
            &v,
            json_template(200, &v.rate_limited).insert_header("retry-after", "0"),
        )
        .await;
        let err = result.expect_err(v.kind);
        assert_eq!(sent, 1, "{}: {err}", v.kind);
        assert_eq!(err.status, Some(200), "{}", v.kind);
        assert_eq!(err.effect(), Effect::ProviderFailure, "{}", v.kind);
    }
}

/// A 2xx that never finishes within the timeout was still processed.
#[tokio::test]
async fn a_2xx_body_that_stalls_past_the_timeout_is_not_retried() {
    let checks = vendors().into_iter().map(|v| async move {
        let (address, count) = stalling_server(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{\"id\": ",
        )
        .await;
        let err = call_vendor(&v, &address, "300ms").await.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::Timeout, "{}: {err}", v.kind);
        assert_eq!(err.stage, Stage::AfterSuccess, "{}", v.kind);
        assert_eq!(count.load(Ordering::SeqCst), 1, "{}", v.kind);
    });
    futures::future::join_all(checks).await;
}

/// An account limit is not the model's behaviour: a 413, or a 429 that says this
/// request alone is over the organisation's tokens per minute, is sent once and stops the
/// provider (the pair is inconclusive, as with an exhausted quota).
#[tokio::test]
async fn account_limits_are_not_retried_and_stop_the_provider() {
    let tpm = body_of(&wire("openai_error_429_request_too_large_tpm.json"));
    for v in vendors() {
        let err = assert_fault(
            &v,
            ResponseTemplate::new(413)
                .insert_header("content-type", "text/html")
                .set_body_string(
                    "<html><head><title>413 Request Entity Too Large</title></head></html>",
                ),
            ErrorKind::RequestTooLarge,
            1,
        )
        .await;
        assert_eq!(err.effect(), Effect::HaltProvider, "{}", v.kind);
        if matches!(v.kind, "openai" | "openai-compatible") {
            let err =
                assert_fault(&v, json_template(429, &tpm), ErrorKind::RequestTooLarge, 1).await;
            assert_eq!(err.effect(), Effect::HaltProvider, "{}", v.kind);
        }
        // The same words in each vendor's own 429 shape.
        let mut said = v.rate_limited.clone();
        let message = json!(
            "Request too large for this model in organization org-x on tokens per min (TPM): Limit 30000, Requested 30601."
        );
        if said["error"].is_string() {
            said["error"] = message;
        } else {
            said["error"]["message"] = message;
        }
        let err = assert_fault(
            &v,
            json_template(429, &said).insert_header("retry-after", "0"),
            ErrorKind::RequestTooLarge,
            1,
        )
        .await;
        assert_eq!(err.effect(), Effect::HaltProvider, "{}", v.kind);
    }
}

#[tokio::test]
async fn html_gateway_error_is_a_retried_server_error() {
    for v in vendors() {
        let template = ResponseTemplate::new(502)
            .insert_header("content-type", "text/html")
            .set_body_string(HTML);
        let (result, sent) = serve(&v, template).await;
        let err = result.expect_err(v.kind);
        assert_eq!(err.kind, ErrorKind::ServerError, "{}: {err}", v.kind);
        assert!(err.message.contains("HTML"), "{}: {err}", v.kind);
        assert_eq!(sent, 3, "{}", v.kind);
    }
}
