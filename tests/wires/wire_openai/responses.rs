//! Recorded Chat Completions responses decoded into the normalized reply. (The ones
//! answering a request file are in `requests.rs`.)

use conform_wire::provider::{Finish, FinishKind};

use super::support::*;
use super::{call_reply, expect_reply, reply};

async fn replay(file: &str) -> conform_wire::provider::Completion {
    let server = serve(CHAT, 200, wire_bytes(file), JSON).await;
    let config = provider(&server, "openai", "gpt-4o", "");
    let done = call(config, &Ask::user("q")).await.unwrap();
    assert_eq!(received(&server).await.len(), 1);
    done
}

#[tokio::test]
async fn completion_object_example() {
    let done = replay("openai_chat_completion_object_example.json").await;
    let text = "The image shows a wooden boardwalk path running through a lush green field or meadow. The sky is bright blue with some scattered clouds, giving the scene a serene and peaceful atmosphere. Trees and shrubs are visible in the background.";
    expect_reply(
        &done,
        reply(
            text,
            FinishKind::Stop,
            "stop",
            (Some(1117), Some(46)),
            "gpt-4o-2024-08-06",
            Some("fp_fc9f1d7035"),
        ),
    );
}

#[tokio::test]
async fn strict_schema_cut_at_the_token_limit_is_a_length_finish() {
    let done = replay("openai_chat_json_schema_length_truncated_response.json").await;
    // Strict mode does not save a cut-off answer: it is invalid JSON, and the finish says why.
    expect_reply(
        &done,
        reply(
            "{\"",
            FinishKind::Length,
            "length",
            (Some(79), Some(1)),
            "gpt-4o-2024-08-06",
            Some("fp_7568d46099"),
        ),
    );
}

#[tokio::test]
async fn strict_tool_call_arguments_are_the_answer() {
    let done = replay("openai_chat_strict_tool_call_response.json").await;
    expect_reply(
        &done,
        call_reply(
            reply(
                r#"{"city":"San Francisco","state":"CA"}"#,
                FinishKind::ToolUse,
                "tool_calls",
                (Some(48), Some(19)),
                "gpt-4o-2024-08-06",
                Some("fp_5050236cbd"),
            ),
            "call_CUdUoJpsWWVdxXntucvnol1M",
            "get_weather",
        ),
    );
}

#[tokio::test]
async fn strict_schema_response_and_refusal() {
    let done = replay("openai_chat_json_schema_response.json").await;
    assert_eq!(
        done.reply.text,
        r#"{"city":"San Francisco","temperature":65,"units":"f"}"#
    );
    let refused = replay("openai_chat_json_schema_refusal_response.json").await;
    assert_eq!(
        refused.reply.finish,
        Finish::new(FinishKind::Refusal, Some("stop"))
    );
    assert_eq!(refused.reply.text, "");
}
