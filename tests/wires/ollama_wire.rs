//! The Ollama adapter against wiremock servers speaking the recorded payloads of
//! `tests/wire/ollama_*`: what we send, what we read, how we classify and retry.

use crate::common;

use common::*;
use conform_wire::provider::{CallError, ErrorKind, FinishKind, Reply};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

fn toml(model: &str, uri: &str, extra: &str) -> String {
    format!(
        "kind = \"ollama\"\nmodel = \"{model}\"\nbase_url = \"{uri}\"\ntimeout = \"5s\"\n{extra}\n{FAST_LIMITS}"
    )
}

async fn server_answering(template: ResponseTemplate) -> MockServer {
    answering(r"^/api/chat$", template).await
}

async fn reply_with(response: Value) -> Reply {
    let server = server_answering(ResponseTemplate::new(200).set_body_json(response)).await;
    call(
        &endpoint(config("ollama", &toml("llama3.1", &server.uri(), ""))),
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
async fn structured_output_request_and_response_match_the_recording() {
    let recorded = wire("ollama_chat_structured_output_request.json");
    let server = server_answering(ok("ollama_chat_structured_output_response.json")).await;
    let user = recorded["messages"][0]["content"].as_str().unwrap();
    let completion = call(
        &endpoint(config("ollama", &toml("llama3.1", &server.uri(), ""))),
        None,
        user,
        &recorded["format"],
        "x",
    )
    .await
    .unwrap();
    let sent = requests(&server).await;
    assert_eq!(sent.len(), 1);
    let extra = assert_covers(&body(&sent[0]), &recorded);
    // We also cap the output (Ollama's default is unbounded).
    assert_eq!(extra, ["/options/num_predict"]);

    let reply = completion.reply;
    assert_eq!(reply.text, "{\"age\": 22, \"available\": false}");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.finish.raw.as_deref(), Some("stop"));
    assert_eq!(reply.usage.prompt_tokens, Some(34));
    assert_eq!(reply.usage.output_tokens, Some(12));
    assert_eq!(reply.served_model.as_deref(), Some("llama3.1"));
}

#[tokio::test]
async fn seeded_request_and_reproducible_response() {
    let recorded = wire("ollama_chat_reproducible_seed_temp0_request.json");
    let server = server_answering(ok("ollama_chat_reproducible_response.json")).await;
    let config = config(
        "ollama",
        &toml(
            "llama3.2",
            &server.uri(),
            "seed = 101\nstructured_output = \"prompt\"\n[tokenizer]\ncontext_window = 8192",
        ),
    );
    let user = recorded["messages"][0]["content"].as_str().unwrap();
    let completion = call(&endpoint(config), None, user, &small_schema(), "x")
        .await
        .unwrap();
    let ours = body(&requests(&server).await[0]);
    let mut extra = assert_covers(&ours, &recorded);
    extra.sort();
    // No stream unless asked for (it is Ollama's default); the window sent so nothing is cut silently.
    assert_eq!(
        extra,
        ["/options/num_ctx", "/options/num_predict", "/stream"]
    );
    assert_eq!(ours["stream"], false);
    assert_eq!(ours["options"]["num_ctx"], 8192);
    assert!(ours.get("format").is_none(), "prompt mode sends no format");

    let reply = completion.reply;
    assert_eq!(reply.text, "Hello! How are you today?");
    // Recorded before `done_reason` existed: `done: true` alone is a normal stop.
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.finish.raw, None);
    assert_eq!(reply.usage.prompt_tokens, Some(26));
    assert_eq!(reply.usage.output_tokens, Some(298));
    assert_eq!(reply.served_model.as_deref(), Some("llama3.2"));
}

#[tokio::test]
async fn json_object_mode_sends_format_json_and_no_key_when_there_is_none() {
    let server = server_answering(ok("ollama_chat_structured_output_response.json")).await;
    let config = config(
        "ollama",
        &toml(
            "llama3.1",
            &server.uri(),
            "structured_output = \"json_object\"",
        ),
    );
    let wire = conform_wire::provider::wire_format(config.wire_kind());
    let endpoint = conform_wire::provider::transport::Endpoint::new(
        config,
        wire,
        None,
        conform_wire::provider::transport::Transport::new().unwrap(),
    );
    call(&endpoint, Some("Be brief."), "x", &small_schema(), "x")
        .await
        .unwrap();
    let sent = requests(&server).await;
    let ours = body(&sent[0]);
    assert_eq!(ours["format"], "json");
    assert_eq!(
        ours["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert!(sent[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn a_missing_prompt_count_is_unknown_never_zero() {
    // A prompt-cache hit drops prompt_eval_count.
    let mut response = wire("ollama_chat_reproducible_response.json");
    response
        .as_object_mut()
        .unwrap()
        .remove("prompt_eval_count");
    let reply = reply_with(response).await;
    assert_eq!(reply.usage.prompt_tokens, None);
    assert_eq!(reply.usage.output_tokens, Some(298));
}

#[tokio::test]
async fn a_length_stop_is_a_cut_off() {
    let mut response = wire("ollama_chat_structured_output_response.json");
    response["done_reason"] = json!("length");
    let reply = reply_with(response).await;
    assert_eq!(reply.finish.kind, FinishKind::Length);
    assert_eq!(reply.finish.raw.as_deref(), Some("length"));
}

async fn classify_recorded(file: &str) -> (CallError, usize) {
    let recorded = wire(file);
    let server = server_answering(
        ResponseTemplate::new(status_of(&recorded)).set_body_json(body_of(&recorded)),
    )
    .await;
    failed_call(
        &server,
        config("ollama", &toml("llama3.2", &server.uri(), "")),
    )
    .await
}

#[tokio::test]
async fn recorded_errors_are_classified_and_not_retried() {
    let (err, sent) = classify_recorded("ollama_error_400_context_length_native.json").await;
    assert_eq!(err.kind, ErrorKind::ContextLength, "{err}");
    assert_eq!(err.message, "the input length exceeds the context length");
    // The address is beside the vendor's words, not in them.
    let to = err.sent_to.as_deref().map_or("", |s| s.as_str());
    assert!(
        to.starts_with("POST http://") && to.ends_with("/api/chat"),
        "{to}"
    );
    assert!(err.to_string().ends_with(&format!("({to})")), "{err}");
    assert_eq!(sent, 1);
    let (err, sent) = classify_recorded("ollama_error_404_model_not_found_native.json").await;
    assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
    assert_eq!(err.message, "model 'llama3.2' not found");
    assert_eq!(err.status, Some(404));
    assert_eq!(sent, 1);
}

#[tokio::test]
async fn streamed_bodies_are_not_mistaken_for_answers() {
    // Without `stream = true`, `stream: false` is sent; a stream that arrives anyway (an old server, a
    // proxy) is named, or its error line classified.
    for (file, kind) in [
        (
            "ollama_chat_stream_ndjson_first_and_final_chunks.txt",
            ErrorKind::NonJsonBody,
        ),
        ("ollama_error_midstream_ndjson.txt", ErrorKind::ServerError),
    ] {
        let server = server_answering(
            ResponseTemplate::new(200)
                .insert_header("content-type", "application/x-ndjson")
                .set_body_string(wire_text(file)),
        )
        .await;
        let (err, sent) = failed_call(
            &server,
            config("ollama", &toml("llama3.2", &server.uri(), "")),
        )
        .await;
        assert_eq!(err.kind, kind, "{file}: {err}");
        assert_eq!(sent, 1, "{file}");
        if kind == ErrorKind::ServerError {
            assert!(
                err.message
                    .ends_with("an error was encountered while running the model")
            );
        }
    }
}
