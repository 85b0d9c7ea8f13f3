//! Stream transcripts served as `text/event-stream` to a provider with `stream = true`,
//! folded into one reply; cut streams and errors inside a 200 stream classified.

use conform_wire::provider::{Completion, ErrorKind, FinishKind};
use serde_json::{Value, json};

use super::support::*;
use super::{expect_reply, reply};

/// Serves `body` as an event stream to a streaming provider; returns the outcome and
/// the request bodies the server saw.
async fn stream(
    kind: &str,
    body: Vec<u8>,
    extra: &str,
) -> (
    Result<Completion, conform_wire::provider::CallError>,
    Vec<Value>,
) {
    let route = if kind == "openai-responses" {
        RESPONSES
    } else {
        CHAT
    };
    let server = serve(route, 200, body, SSE).await;
    let config = provider(&server, kind, "m", &format!("stream = true\n{extra}"));
    let outcome = call(config, &Ask::user("What's the weather like in SF?")).await;
    (outcome, received(&server).await)
}

/// The blank-line-separated events of a recorded `.sse` file.
fn events_of(name: &str) -> Vec<String> {
    wire_text(name)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| format!("{e}\n\n"))
        .collect()
}

#[tokio::test]
async fn chat_strict_schema_stream() {
    let (done, sent) = stream(
        "openai",
        wire_bytes("openai_chat_json_schema_stream_transcript.sse"),
        "",
    )
    .await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(sent[0]["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent[0]["response_format"]["type"], "json_schema");
    // Usage comes from the extra `choices: []` chunk before [DONE].
    expect_reply(
        &done.unwrap(),
        reply(
            r#"{"city":"San Francisco","temperature":61,"units":"f"}"#,
            FinishKind::Stop,
            "stop",
            (Some(79), Some(14)),
            "gpt-4o-2024-08-06",
            Some("fp_5050236cbd"),
        ),
    );
}

#[tokio::test]
async fn chat_json_object_stream() {
    let (done, sent) = stream(
        "openai",
        wire_bytes("openai_chat_json_object_stream_transcript.sse"),
        "structured_output = \"json_object\"",
    )
    .await;
    assert_eq!(sent[0]["response_format"], json!({"type": "json_object"}));
    let done = done.unwrap();
    // JSON mode wraps its object in whitespace; the text is kept exactly as streamed.
    assert!(
        done.reply
            .text
            .starts_with("\n  {\n    \"location\": \"San Francisco, CA\",\n")
    );
    let object: Value = serde_json::from_str(&done.reply.text).unwrap();
    assert_eq!(object["location"], "San Francisco, CA");
    assert_eq!(object["weather"]["temperature"], "18°C");
    let expected = reply(
        &done.reply.text,
        FinishKind::Stop,
        "stop",
        (Some(19), Some(177)),
        "gpt-4o-2024-08-06",
        Some("fp_5050236cbd"),
    );
    expect_reply(&done, expected);
}

#[tokio::test]
async fn chat_refusal_stream() {
    let (done, _) = stream(
        "openai",
        wire_bytes("openai_chat_json_schema_refusal_stream_transcript.sse"),
        "",
    )
    .await;
    let mut expected = reply(
        "",
        FinishKind::Refusal,
        "stop",
        (Some(79), Some(11)),
        "gpt-4o-2024-08-06",
        Some("fp_5050236cbd"),
    );
    expected.refusal = Some("I'm sorry, I can't assist with that request.".into());
    expect_reply(&done.unwrap(), expected);
}

/// The documentation's transcript is chunks without `data:` prefixes, with `....` for
/// the elided middle and no `[DONE]`. Adapted to real SSE here: each chunk becomes a
/// `data:` event, the elision is dropped, and `data: [DONE]` is appended.
#[tokio::test]
async fn chat_documented_stream_adapted_to_sse() {
    let doc = wire_text("openai_chat_stream_transcript.txt");
    let mut sse: String = doc
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| format!("data: {l}\n\n"))
        .collect();
    sse.push_str("data: [DONE]\n\n");
    let (done, _) = stream("openai", sse.into_bytes(), "").await;
    // No usage chunk in this transcript: counts unknown, never 0.
    expect_reply(
        &done.unwrap(),
        reply(
            "Hello",
            FinishKind::Stop,
            "stop",
            (None, None),
            "gpt-4o-mini",
            Some("fp_44709d6fcb"),
        ),
    );

    // Unadapted, it is neither an event stream nor one JSON document: a failed call, sent
    // once (the 200 was processed).
    let (err, sent) = stream("openai", doc.into_bytes(), "").await;
    assert_eq!(err.unwrap_err().kind, ErrorKind::NonJsonBody);
    assert_eq!(sent.len(), 1);
}

#[tokio::test]
async fn chat_stream_without_done_is_truncated_sent_once_and_keeps_usage_and_model() {
    let events = events_of("openai_chat_json_schema_stream_transcript.sse");
    assert_eq!(events.last().unwrap(), "data: [DONE]\n\n");
    // Every chunk, the finish reason and the usage arrived; only the terminator did not.
    let no_done = events[..events.len() - 1].concat();
    let (err, sent) = stream("openai", no_done.clone().into_bytes(), "").await;
    let err = err.unwrap_err();
    assert_eq!(err.kind, ErrorKind::StreamTruncated);
    assert!(err.message.contains("[DONE]"), "{err}");
    assert_eq!(sent.len(), 1);
    // What the chunks said before the cut is kept: the call was processed and billed.
    let (whole, _) = stream(
        "openai",
        wire_bytes("openai_chat_json_schema_stream_transcript.sse"),
        "",
    )
    .await;
    let whole = whole.unwrap().reply;
    assert!(whole.usage.prompt_tokens.is_some() && whole.served_model.is_some());
    assert_eq!(err.usage(), whole.usage);
    assert_eq!(err.served_model(), whole.served_model.as_deref());
    assert_eq!(
        err.system_fingerprint(),
        whole.system_fingerprint.as_deref()
    );
    assert_eq!(err.retries, 0);

    // Cut in the middle of a chunk.
    let cut = &no_done.as_bytes()[..no_done.len() / 2];
    let (err, sent) = stream("openai", cut.to_vec(), "").await;
    assert_eq!(err.unwrap_err().kind, ErrorKind::StreamTruncated);
    assert_eq!(sent.len(), 1);
}

/// `data: {"error": …}` inside a 200 stream, built from the first recorded chunks and a
/// recorded error object: classified by the object, and never sent again (the 200 was
/// processed).
#[tokio::test]
async fn chat_error_in_the_middle_of_a_stream() {
    let events = events_of("openai_chat_json_schema_stream_transcript.sse");
    let with_error = |file: &str| {
        let (_, body) = error_file(file);
        let body: Value = serde_json::from_slice(&body).unwrap();
        let chunk = json!({"error": body["error"]});
        let mut sse = events[..3].concat();
        sse.push_str(&format!("data: {chunk}\n\ndata: [DONE]\n\n"));
        (sse.into_bytes(), body["error"]["message"].clone())
    };

    let (body, message) = with_error("openai_error_500_server_error.json");
    let (err, sent) = stream("openai", body, "").await;
    let err = err.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerError);
    assert_eq!(err.status, Some(200));
    assert_eq!(
        err.effect(),
        conform_wire::provider::Effect::ProviderFailure
    );
    assert_eq!(json!(err.message), message);
    assert_eq!(sent.len(), 1);

    let (body, _) = with_error("openai_error_400_context_length_exceeded.json");
    let (err, sent) = stream("openai", body, "").await;
    assert_eq!(err.unwrap_err().kind, ErrorKind::ContextLength);
    assert_eq!(sent.len(), 1);
}

/// The same recorded stream through an OpenAI-compatible server (vLLM and llama.cpp
/// stream Chat Completions chunks too), which is sent `max_tokens`.
#[tokio::test]
async fn compatible_server_stream() {
    let (done, sent) = stream(
        "openai-compatible",
        wire_bytes("openai_chat_json_schema_stream_transcript.sse"),
        "",
    )
    .await;
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(sent[0]["max_tokens"], 1024);
    assert_eq!(done.unwrap().reply.usage.output_tokens, Some(14));
}

/// The Responses transcript is real SSE (`event:` and `data:` lines) with one `...` line
/// for the elided deltas and no blank line after its last event. Adapted here: the
/// elision is dropped and the last event is terminated.
#[tokio::test]
async fn responses_documented_stream() {
    let doc = wire_text("openai_responses_stream_transcript.txt");
    let unelided: String = doc
        .lines()
        .filter(|l| l.trim() != "...")
        .map(|l| format!("{l}\n"))
        .collect();
    let (done, sent) = stream("openai-responses", format!("{unelided}\n").into_bytes(), "").await;
    assert_eq!(sent[0]["stream"], true);
    assert!(sent[0].get("stream_options").is_none());
    // One delta survives the elision ("Hi"); the terminal response has the whole text.
    expect_reply(
        &done.unwrap(),
        reply(
            "Hi there! How can I assist you today?",
            FinishKind::Stop,
            "completed",
            (Some(37), Some(11)),
            "gpt-5.4",
            None,
        ),
    );

    // Without the blank line, `response.completed` never dispatches: the stream was cut.
    let (err, _) = stream("openai-responses", unelided.into_bytes(), "").await;
    assert_eq!(err.unwrap_err().kind, ErrorKind::StreamTruncated);
}

/// The transcript's `response.created` event, then `events`: a stream around a recorded
/// single event.
fn responses_stream(events: &[Value]) -> Vec<u8> {
    let created = wire_text("openai_responses_stream_transcript.txt")
        .split("\n\n")
        .next()
        .unwrap()
        .to_string();
    let mut sse = format!("{created}\n\n");
    for event in events {
        sse.push_str(&sse_event(event["type"].as_str().unwrap(), event));
    }
    sse.into_bytes()
}

#[tokio::test]
async fn responses_incomplete_event_is_a_length_finish_with_the_streamed_text() {
    let delta = json!({"type": "response.output_text.delta", "item_id": "msg_1",
        "output_index": 0, "content_index": 0, "delta": "{\"city\":"});
    let incomplete = wire_json("openai_responses_stream_event_incomplete.json");
    let (done, _) = stream(
        "openai-responses",
        responses_stream(&[delta, incomplete]),
        "",
    )
    .await;
    // The spec's own example says `max_tokens` (the API says `max_output_tokens`); its
    // `output` is empty, so the text is what the deltas said; `usage: null` is unknown.
    expect_reply(
        &done.unwrap(),
        reply(
            "{\"city\":",
            FinishKind::Length,
            "max_tokens",
            (None, None),
            "gpt-4o-mini-2024-07-18",
            None,
        ),
    );
}

#[tokio::test]
async fn responses_failed_and_error_events_are_server_errors_sent_once() {
    for (file, message) in [
        (
            "openai_responses_stream_event_failed.json",
            "The model failed to generate a response.",
        ),
        (
            "openai_responses_stream_event_error.json",
            "Something went wrong",
        ),
    ] {
        let (err, sent) =
            stream("openai-responses", responses_stream(&[wire_json(file)]), "").await;
        let err = err.unwrap_err();
        assert_eq!(err.kind, ErrorKind::ServerError, "{file}");
        assert_eq!(err.message, message, "{file}");
        assert_eq!(sent.len(), 1, "{file}");
    }
}

#[tokio::test]
async fn responses_refusal_done_event_is_a_refusal() {
    let refusal = wire_json("openai_responses_stream_event_refusal_done.json");
    // A terminal event to close the stream; its `output` is empty, as the refusal was
    // already streamed.
    let completed = json!({"type": "response.completed", "response": {
        "status": "completed", "model": "gpt-4o-mini-2024-07-18", "output": [],
        "usage": {"input_tokens": 20, "output_tokens": 4}}});
    let (done, _) = stream(
        "openai-responses",
        responses_stream(&[refusal.clone(), completed]),
        "",
    )
    .await;
    let mut expected = reply(
        "",
        FinishKind::Refusal,
        "completed",
        (Some(20), Some(4)),
        "gpt-4o-mini-2024-07-18",
        None,
    );
    expected.refusal = Some("final refusal text".into());
    expect_reply(&done.unwrap(), expected);

    // The refusal alone, with no terminal event: the stream was cut.
    let (err, sent) = stream("openai-responses", responses_stream(&[refusal]), "").await;
    assert_eq!(err.unwrap_err().kind, ErrorKind::StreamTruncated);
    assert_eq!(sent.len(), 1);
}
