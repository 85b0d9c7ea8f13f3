//! Streaming conformance, for every vendor: the recorded stream transcripts decode; a
//! stream cut after 40 of its 60 tokens, cleanly or by a dropped connection, is
//! `stream_truncated` and sent once; an error event inside the 200 is classified as that
//! vendor's matching error status is; time to first token is when the first piece of the
//! answer arrived; and through `conform run`, none of these calls ever passes.

use crate::common;

use std::time::Duration;

use common::*;
use conform_wire::provider::{CallError, Completion, Effect, ErrorKind, FinishKind, wire_format};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

const SSE: &str = "text/event-stream";
const NDJSON: &str = "application/x-ndjson";

/// A streaming provider of `kind` at `base`.
fn streaming(kind: &str, base: &str) -> std::sync::Arc<conform_config::ProviderConfig> {
    let model = match kind {
        "anthropic" => "claude-sonnet-4-5",
        "gemini" => "gemini-2.0-flash",
        "ollama" => "llama3.2",
        _ => "gpt-4o-mini",
    };
    config(
        kind,
        &format!(
            "kind = \"{kind}\"\nmodel = \"{model}\"\nbase_url = \"{base}\"\nstream = true\ntimeout = \"5s\"\n{FAST_LIMITS}"
        ),
    )
}

async fn ask(kind: &str, base: &str) -> Result<Completion, CallError> {
    call(
        &endpoint(streaming(kind, base)),
        None,
        "Name a city.",
        &small_schema(),
        "city",
    )
    .await
}

/// The route each vendor streams on.
fn route(kind: &str) -> &'static str {
    match kind {
        "anthropic" => r"^/v1/messages$",
        "gemini" => r"^/v1beta/models/[^/]+:streamGenerateContent$",
        "ollama" => r"^/api/chat$",
        "openai-responses" => r"^/v1/responses$",
        _ => r"^/v1/chat/completions$",
    }
}

async fn serve_transcript(kind: &str, body: String, content_type: &str) -> wiremock::MockServer {
    answering(
        route(kind),
        ResponseTemplate::new(200).set_body_raw(body, content_type),
    )
    .await
}

#[tokio::test]
async fn every_vendors_recorded_transcripts_decode() {
    // OpenAI Chat Completions, and the same chunks from an OpenAI-compatible server.
    for kind in ["openai", "openai-compatible"] {
        let server = serve_transcript(
            kind,
            wire_text("openai_chat_json_schema_stream_transcript.sse"),
            SSE,
        )
        .await;
        let reply = ask(kind, &server.uri()).await.unwrap().reply;
        assert_eq!(
            serde_json::from_str::<Value>(&reply.text).unwrap()["city"],
            "San Francisco",
            "{kind}"
        );
        assert_eq!(reply.finish.kind, FinishKind::Stop);
        assert_eq!(body(&requests(&server).await[0])["stream"], true);
    }
    let server = serve_transcript(
        "openai",
        wire_text("openai_chat_json_schema_refusal_stream_transcript.sse"),
        SSE,
    )
    .await;
    let reply = ask("openai", &server.uri()).await.unwrap().reply;
    assert_eq!(reply.finish.kind, FinishKind::Refusal);

    // Anthropic: three recordings were stored without the blank line that dispatches
    // their last event. As stored, `message_stop` never arrives: cut off. With it, whole.
    for (file, text, finish) in [
        (
            "anthropic_messages_output_config_stream_transcript.sse",
            "[12345,67890]",
            FinishKind::Stop,
        ),
        (
            "anthropic_messages_stream_basic_response.sse",
            "Hello there!",
            FinishKind::Stop,
        ),
        (
            "anthropic_messages_stream_refusal_response.sse",
            "",
            FinishKind::Refusal,
        ),
        (
            "anthropic_messages_stream_tool_use_response.sse",
            "I'll check the current weather in Paris for you.",
            FinishKind::ToolUse,
        ),
    ] {
        let recorded = wire_text(file);
        if !recorded.ends_with("\n\n") {
            let server = serve_transcript("anthropic", recorded.clone(), SSE).await;
            let err = ask("anthropic", &server.uri()).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::StreamTruncated, "{file}: {err}");
        }
        let whole = format!("{}\n\n", recorded.trim_end());
        let server = serve_transcript("anthropic", whole, SSE).await;
        let reply = ask("anthropic", &server.uri())
            .await
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .reply;
        assert_eq!(reply.text, text, "{file}");
        assert_eq!(reply.finish.kind, finish, "{file}");
        // The tool_use block's partial JSON pieces fold into one call, not into the text.
        let calls: Vec<_> = reply
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.clone()))
            .collect();
        if file.contains("tool_use") {
            assert_eq!(
                calls,
                [(
                    "get_weather",
                    Some(serde_json::json!({"location": "Paris"}))
                )],
                "{file}"
            );
        } else {
            assert!(calls.is_empty(), "{file}: {calls:?}");
        }
        assert!(reply.usage.output_tokens.is_some(), "{file}");
        assert_eq!(body(&requests(&server).await[0])["stream"], true);
    }

    // Gemini: no sentinel; the last chunk says STOP.
    let server = serve_transcript(
        "gemini",
        wire_text("gemini_streamgeneratecontent_alt_sse_transcript.sse"),
        SSE,
    )
    .await;
    let reply = ask("gemini", &server.uri()).await.unwrap().reply;
    assert_eq!(reply.text, "The capital of Wyoming is **Cheyenne**.\n");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.usage.prompt_tokens, Some(7));
    assert_eq!(reply.usage.output_tokens, Some(10));
    assert_eq!(reply.served_model.as_deref(), Some("gemini-2.0-flash"));
    let sent = &requests(&server).await[0];
    assert_eq!(sent.url.query(), Some("alt=sse"));

    // Ollama: the documented first and final chunks, each compacted to its NDJSON line
    // (the documentation pretty-prints them under `//` captions).
    let doc = wire_text("ollama_chat_stream_ndjson_first_and_final_chunks.txt");
    let ndjson: String = doc
        .split("// ")
        .filter_map(|part| part.split_once('\n').map(|(_, json)| json))
        .map(|json| format!("{}\n", serde_json::from_str::<Value>(json).unwrap()))
        .collect();
    let server = serve_transcript("ollama", ndjson, NDJSON).await;
    let reply = ask("ollama", &server.uri()).await.unwrap().reply;
    assert_eq!(reply.text, "The");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert_eq!(reply.usage.prompt_tokens, Some(26));
    assert_eq!(reply.usage.output_tokens, Some(282));
    assert_eq!(body(&requests(&server).await[0])["stream"], true);
}

/// Sixty pieces that together are `{"city": "w1 … w58 "}`.
fn tokens() -> Vec<String> {
    let mut pieces = vec!["{\"city\": \"".to_string()];
    pieces.extend((1..=58).map(|i| format!("w{i} ")));
    pieces.push("\"}".to_string());
    pieces
}

fn whole_text() -> String {
    tokens().concat()
}

/// One vendor's 60-token stream: what comes before the tokens, one event (or line) per
/// token, and the vendor's end.
struct Stream {
    kind: &'static str,
    content_type: &'static str,
    preamble: Vec<String>,
    tokens: Vec<String>,
    end: Vec<String>,
}

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

fn named(v: Value) -> String {
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}

fn streams() -> Vec<Stream> {
    let chat_chunk = |delta: Value, finish: Value| {
        data(
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_1",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": null}),
        )
    };
    let chat = |kind| Stream {
        kind,
        content_type: SSE,
        preamble: vec![chat_chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        )],
        tokens: tokens()
            .iter()
            .map(|t| chat_chunk(json!({"content": t}), Value::Null))
            .collect(),
        end: vec![
            chat_chunk(json!({}), json!("stop")),
            data(
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-4o-mini-2024-07-18", "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 60, "total_tokens": 72}}),
            ),
            "data: [DONE]\n\n".into(),
        ],
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_1", "object": "response", "status": status, "model": "gpt-5.4",
            "output": output, "usage": {"input_tokens": 12, "output_tokens": 60}})
    };
    let gemini_chunk = |text: &str, finish: Option<&str>| {
        let mut c = json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}}],
            "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
            "modelVersion": "gemini-2.0-flash"});
        if let Some(f) = finish {
            c["candidates"][0]["finishReason"] = json!(f);
            c["usageMetadata"] =
                json!({"promptTokenCount": 12, "candidatesTokenCount": 60, "totalTokenCount": 72});
        }
        data(c)
    };
    let ollama_line = |text: &str, done: bool| {
        let mut line = json!({"model": "llama3.2", "created_at": "2023-08-04T08:52:19.385406455-07:00",
            "message": {"role": "assistant", "content": text}, "done": done});
        if done {
            line["done_reason"] = json!("stop");
            line["prompt_eval_count"] = json!(12);
            line["eval_count"] = json!(60);
        }
        format!("{line}\n")
    };
    vec![
        chat("openai"),
        chat("openai-compatible"),
        Stream {
            kind: "openai-responses",
            content_type: SSE,
            preamble: vec![named(
                json!({"type": "response.created", "response": response("in_progress", json!([]))}),
            )],
            tokens: tokens()
                .iter()
                .map(|t| {
                    named(
                        json!({"type": "response.output_text.delta", "item_id": "msg_1",
                    "output_index": 0, "content_index": 0, "delta": t}),
                    )
                })
                .collect(),
            end: vec![named(
                json!({"type": "response.completed", "response": response(
                    "completed",
                    json!([{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": whole_text(), "annotations": []}]}]),
                )}),
            )],
        },
        Stream {
            kind: "anthropic",
            content_type: SSE,
            preamble: vec![
                named(
                    json!({"type": "message_start", "message": {"model": "claude-sonnet-4-5-20250929",
                    "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                    "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 12,
                    "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
                ),
                named(
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                named(json!({"type": "ping"})),
            ],
            tokens: tokens()
                .iter()
                .map(|t| {
                    named(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": t}}))
                })
                .collect(),
            end: vec![
                named(json!({"type": "content_block_stop", "index": 0})),
                named(
                    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                    "usage": {"output_tokens": 60}}),
                ),
                named(json!({"type": "message_stop"})),
            ],
        },
        Stream {
            kind: "gemini",
            content_type: SSE,
            preamble: Vec::new(),
            // The terminal is the last token's chunk itself, carrying `finishReason`.
            tokens: tokens()[..59]
                .iter()
                .map(|t| gemini_chunk(t, None))
                .collect(),
            end: vec![gemini_chunk(&tokens()[59], Some("STOP"))],
        },
        Stream {
            kind: "ollama",
            content_type: NDJSON,
            preamble: Vec::new(),
            tokens: tokens().iter().map(|t| ollama_line(t, false)).collect(),
            end: vec![ollama_line("", true)],
        },
    ]
}

#[tokio::test]
async fn a_stream_cut_after_40_of_60_tokens_is_truncated_for_every_vendor() {
    for s in streams() {
        // The whole stream is an answer: the control.
        let mut all = s.preamble.clone();
        all.extend(s.tokens.clone());
        let (base, _) = streaming_server(
            s.content_type,
            all,
            Duration::ZERO,
            s.end.clone(),
            StreamEnd::Complete,
        )
        .await;
        let reply = ask(s.kind, &base)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", s.kind))
            .reply;
        assert_eq!(reply.text, whole_text(), "{}", s.kind);
        assert_eq!(reply.finish.kind, FinishKind::Stop, "{}", s.kind);

        // 40 of the 60 tokens, then the body ends cleanly, or the connection drops.
        let mut cut = s.preamble.clone();
        cut.extend(s.tokens[..40].iter().cloned());
        for end in [StreamEnd::Complete, StreamEnd::Drop] {
            let (base, sent) =
                streaming_server(s.content_type, cut.clone(), Duration::ZERO, Vec::new(), end)
                    .await;
            let err = ask(s.kind, &base).await.unwrap_err();
            assert_eq!(
                err.kind,
                ErrorKind::StreamTruncated,
                "{} {end:?}: {err}",
                s.kind
            );
            // A 2xx arrived: processed and billed, never sent again.
            assert_eq!(
                sent.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "{}",
                s.kind
            );
            assert_eq!(err.effect(), Effect::ProviderFailure, "{}", s.kind);
            assert_eq!(err.retries, 0);
            assert!(
                err.served_model().is_some(),
                "{} keeps its model: {err}",
                s.kind
            );
            if end == StreamEnd::Drop {
                assert!(err.message.contains("connection closed"), "{err}");
            }
            // What the stream had said, and when, is kept for the record.
            let said = err.partial_text().unwrap_or_default();
            assert!(
                !said.is_empty() && whole_text().starts_with(said) && said != whole_text(),
                "{} {end:?}: kept {said:?}",
                s.kind
            );
            let measured = err
                .measured
                .unwrap_or_else(|| panic!("{}: not timed", s.kind));
            assert!(measured.first_byte.is_some() && measured.first_token.is_some());
        }

        // Every token, and no terminal event: the whole valid JSON arrived before the
        // cut. Still not an answer, and kept whole. (Gemini's last chunk carries the last
        // text with the finish reason: no cut of it leaves the whole text.)
        if s.kind == "gemini" {
            continue;
        }
        for end in [StreamEnd::Complete, StreamEnd::Drop] {
            let (base, _) = streaming_server(
                s.content_type,
                all_but_the_end(&s),
                Duration::ZERO,
                Vec::new(),
                end,
            )
            .await;
            let err = ask(s.kind, &base).await.unwrap_err();
            assert_eq!(err.kind, ErrorKind::StreamTruncated, "{} {end:?}", s.kind);
            assert_eq!(
                err.partial_text(),
                Some(whole_text().as_str()),
                "{}",
                s.kind
            );
        }
    }
}

fn all_but_the_end(s: &Stream) -> Vec<String> {
    let mut all = s.preamble.clone();
    all.extend(s.tokens.clone());
    all
}

/// The kind the vendor's adapter gives an error status with this body.
fn as_status(kind: &str, status: u16, body: &Value) -> ErrorKind {
    let wire = wire_format(streaming(kind, "http://127.0.0.1:9").wire_kind());
    wire.classify(status, &HeaderMap::new(), body.to_string().as_bytes())
        .kind
}

#[tokio::test]
async fn an_error_event_mid_stream_is_classified_like_the_matching_http_error() {
    let by_kind = |kind: &str| streams().into_iter().find(|s| s.kind == kind).unwrap();
    // Each: the first 20 tokens, then the vendor's error event carrying a recorded error
    // body, whose HTTP status it is held against.
    let openai_500 = body_of(&wire("openai_error_500_server_error.json"));
    let openai_ctx = body_of(&wire("openai_error_400_context_length_exceeded.json"));
    let anthropic_529 = wire("anthropic_error_529_overloaded.json");
    let gemini_503 = wire("gemini_error_503_unavailable_overloaded.json");
    let cases: Vec<(&str, String, u16, Value, ErrorKind)> = vec![
        (
            "openai",
            data(json!({"error": openai_500["error"]})),
            500,
            openai_500.clone(),
            ErrorKind::ServerError,
        ),
        (
            "openai",
            data(json!({"error": openai_ctx["error"]})),
            400,
            openai_ctx.clone(),
            ErrorKind::ContextLength,
        ),
        (
            "openai-responses",
            named(json!({"type": "error", "code": "server_error",
                "message": openai_500["error"]["message"]})),
            500,
            openai_500.clone(),
            ErrorKind::ServerError,
        ),
        (
            "anthropic",
            wire_text("anthropic_stream_error_event_overloaded.sse"),
            status_of(&anthropic_529),
            body_of(&anthropic_529),
            ErrorKind::Overloaded,
        ),
        (
            "gemini",
            data(body_of(&gemini_503)),
            status_of(&gemini_503),
            body_of(&gemini_503),
            ErrorKind::Overloaded,
        ),
        (
            "ollama",
            "{\"error\":\"an error was encountered while running the model\"}\n".into(),
            500,
            json!({"error": "an error was encountered while running the model"}),
            ErrorKind::ServerError,
        ),
    ];
    for (kind, error_event, status, error_body, expected) in cases {
        assert_eq!(as_status(kind, status, &error_body), expected, "{kind}");
        let s = by_kind(kind);
        let mut head = s.preamble.clone();
        head.extend(s.tokens[..20].iter().cloned());
        head.push(error_event);
        let (base, sent) = streaming_server(
            s.content_type,
            head,
            Duration::ZERO,
            Vec::new(),
            StreamEnd::Complete,
        )
        .await;
        let err = ask(kind, &base).await.unwrap_err();
        assert_eq!(err.kind, expected, "{kind}: {err}");
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1, "{kind}");
        assert_eq!(err.effect(), Effect::ProviderFailure, "{kind}");
    }

    // The recorded ones: a Vertex stream ending in a bare 499 CANCELLED object, and
    // Ollama's error line after four pieces of an answer.
    let server = serve_transcript(
        "gemini",
        wire_text("gemini_stream_error_mid_stream_vertex_firebase.txt"),
        SSE,
    )
    .await;
    let err = ask("gemini", &server.uri()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerError, "{err}");
    assert_eq!(err.status, Some(499));
    let server = serve_transcript(
        "ollama",
        wire_text("ollama_error_midstream_ndjson.txt"),
        NDJSON,
    )
    .await;
    let err = ask("ollama", &server.uri()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerError, "{err}");
    assert!(err.message.contains("running the model"), "{err}");
}

#[tokio::test]
async fn time_to_first_token_is_when_the_first_piece_arrived() {
    // Every vendor at once: ten tokens, a pause of half a second, then the rest.
    let timed = streams().into_iter().map(|s| async move {
        let mut head = s.preamble.clone();
        head.extend(s.tokens[..10].iter().cloned());
        let mut tail: Vec<String> = s.tokens[10..].to_vec();
        tail.extend(s.end.clone());
        let (base, _) = streaming_server(
            s.content_type,
            head,
            Duration::from_millis(500),
            tail,
            StreamEnd::Complete,
        )
        .await;
        (s.kind, ask(s.kind, &base).await.unwrap())
    });
    for (kind, done) in futures::future::join_all(timed).await {
        let first_token = done.first_token.unwrap();
        let first_byte = done.first_byte.unwrap();
        assert!(first_byte <= first_token, "{kind}");
        assert!(
            first_token + Duration::from_millis(300) <= done.latency,
            "{kind}: first token {first_token:?}, whole {:?}",
            done.latency
        );
    }
}

fn read_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn stream_agreement_compares_each_streamed_answer_with_the_unstreamed_one() {
    let project = Project::new(&["sim-steady"]);
    project.write(
        "providers/sim-stream-drift.toml",
        "kind = \"sim\"\nmodel = \"sim-stream-drift\"\ntimeout = \"10s\"\n[limits]\nconcurrency = 8\n[sim]\nbehaviour = \"stream-drift\"\nexpect = \"nonconformant\"\nlatency = \"1ms\"\nwire = \"anthropic\"\n",
    );
    let suite = project.path("fixtures/ticket-triage/suite.toml");
    let text = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(&suite, format!("stream_agreement = true\n{text}")).unwrap();
    // `--stream`: every provider streams, although its file does not say so.
    let out = project
        .cmd()
        .args([
            "demo",
            "--suite",
            "ticket-triage",
            "--stream",
            "--no-progress",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let run = project.last_run();
    let records = read_lines(&run.join("results.jsonl"));
    assert_eq!(records.len(), 60);
    for r in &records {
        let agreement = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "stream_agreement")
            .unwrap_or_else(|| panic!("no stream_agreement check: {r}"));
        if r["provider"] == "sim-steady" {
            assert_eq!(agreement["status"], "pass", "{r}");
            assert_eq!(r["passed"], true);
        } else {
            assert_eq!(
                agreement["findings"][0]["code"], "stream_disagreement",
                "{r}"
            );
            assert_eq!(r["passed"], false);
        }
        assert!(r["ttft_ms"].as_f64().is_some(), "{r}");
    }
    let report: Value =
        serde_json::from_slice(&std::fs::read(run.join("report.json")).unwrap()).unwrap();
    let properties = report["providers"][0]["properties"].to_string();
    assert!(
        properties.contains("streamed_by_command_line"),
        "{properties}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn through_conform_run_a_cut_or_failed_stream_never_passes() {
    let project = Project::new(&[]);
    let mut expected = Vec::new();
    for s in streams() {
        // Every call gets 40 of its 60 tokens, or 20 and the vendor's overload event.
        let mut cut = s.preamble.clone();
        cut.extend(s.tokens[..40].iter().cloned());
        let (base, _) = streaming_server(
            s.content_type,
            cut,
            Duration::ZERO,
            Vec::new(),
            StreamEnd::Drop,
        )
        .await;
        let name = format!("cut-{}", s.kind);
        project.write(
            &format!("providers/{name}.toml"),
            &format!(
                "kind = \"{}\"\nmodel = \"m\"\nbase_url = \"{base}\"\nstream = true\ntimeout = \"5s\"\n",
                s.kind
            ),
        );
        expected.push((name, "stream_truncated"));
    }
    let anthropic = streams()
        .into_iter()
        .find(|s| s.kind == "anthropic")
        .unwrap();
    let mut failing = anthropic.preamble.clone();
    failing.extend(anthropic.tokens[..20].iter().cloned());
    failing.push(wire_text("anthropic_stream_error_event_overloaded.sse"));
    let (base, _) = streaming_server(
        SSE,
        failing,
        Duration::ZERO,
        Vec::new(),
        StreamEnd::Complete,
    )
    .await;
    project.write(
        "providers/overloaded.toml",
        &format!(
            "kind = \"anthropic\"\nmodel = \"m\"\nbase_url = \"{base}\"\nstream = true\ntimeout = \"5s\"\n"
        ),
    );
    expected.push(("overloaded".into(), "overloaded"));

    let out = project
        .cmd()
        .args([
            "run",
            "--suite",
            "ticket-triage",
            "--no-progress",
            "--every-call",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The provider's own failures after a 2xx, on every call: nonconformant, each
    // pair revoked (none was granted), nothing granted.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let records = read_lines(&project.last_run().join("results.jsonl"));
    assert_eq!(records.len(), 30 * expected.len());
    for r in &records {
        assert_eq!(r["passed"], false, "{r}");
        let (_, code) = expected
            .iter()
            .find(|(name, _)| r["provider"] == name.as_str())
            .unwrap();
        assert_eq!(r["checks"][0]["findings"][0]["code"], *code, "{r}");
        assert_eq!(r["retries"], 0, "{r}");
        // Not a thin record: how long it took, and what had arrived.
        for field in ["latency_ms", "ttfb_ms", "ttft_ms"] {
            assert!(r[field].as_f64().is_some(), "{field}: {r}");
        }
        assert!(r["output"].as_str().is_some_and(|o| !o.is_empty()), "{r}");
    }
    let list: serde_json::Value =
        serde_json::from_slice(&std::fs::read(project.path("allowlist.json")).unwrap()).unwrap();
    assert_eq!(list["entries"], serde_json::json!([]), "{list}");
    assert_eq!(
        list["revocations"].as_array().map(Vec::len),
        Some(expected.len()),
        "{list}"
    );
}
