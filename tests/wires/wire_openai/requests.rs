//! Request files (SDK captures, SDK-generated bodies, documented curl examples) against
//! the bytes our encoder puts on the wire for the same call, each answered with a
//! recorded or documented response that must decode into the right reply.

use conform_wire::provider::openai_responses::{decode_input_tokens, input_tokens_request};
use conform_wire::provider::{CallSpec, FinishKind, wire_format};
use serde_json::{Value, json};

use super::support::*;
use super::{call_reply, expect_reply, reply};

#[tokio::test]
async fn chat_strict_schema_request_matches_the_sdk_capture() {
    let captured = wire_json("openai_chat_json_schema_strict_temp0_seed_request.captured.json");
    assert_eq!(captured["path"], CHAT);
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_json_schema_response.json"),
        JSON,
    )
    .await;
    let config = provider(&server, "openai", "gpt-4o-2024-08-06", "seed = 42");
    let done = call(config, &Ask::user("What's the weather like in SF?"))
        .await
        .unwrap();

    let sent = only_request(&server).await;
    // model, messages, the nested response_format (name, strict, schema), seed and
    // temperature all as the official SDK sends them.
    let extra = same_keys_plus(&captured["body"], &sent);
    assert_eq!(extra, ["max_completion_tokens", "stream"]);
    assert_eq!(sent["stream"], false);
    assert!(sent.get("stream_options").is_none());

    expect_reply(
        &done,
        reply(
            r#"{"city":"San Francisco","temperature":65,"units":"f"}"#,
            FinishKind::Stop,
            "stop",
            (Some(79), Some(14)),
            "gpt-4o-2024-08-06",
            Some("fp_5050236cbd"),
        ),
    );
}

#[tokio::test]
async fn chat_request_with_pydantic_titles_keeps_the_schema_as_given() {
    let generated = wire_json("openai_chat_json_schema_request.json");
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_json_schema_refusal_response.json"),
        JSON,
    )
    .await;
    let config = provider(&server, "openai", "gpt-4o-2024-08-06", "");
    let mut ask = Ask::user("What's the weather like in SF?");
    ask.schema = generated["response_format"]["json_schema"]["schema"].clone();
    let done = call(config, &ask).await.unwrap();

    let sent = only_request(&server).await;
    let extra = same_keys_plus(&generated, &sent);
    assert_eq!(extra, ["temperature", "max_completion_tokens", "stream"]);

    // A refusal keeps finish_reason "stop"; only the null content and the refusal tell.
    let mut expected = reply(
        "",
        FinishKind::Refusal,
        "stop",
        (Some(79), Some(12)),
        "gpt-4o-2024-08-06",
        Some("fp_5050236cbd"),
    );
    expected.refusal = Some("I'm very sorry, but I can't assist with that.".into());
    expect_reply(&done, expected);
}

#[tokio::test]
async fn chat_default_curl_example_differs_only_in_the_system_role() {
    let documented = curl_body("openai_chat_default_request.sh");
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_default_response.json"),
        JSON,
    )
    .await;
    let config = provider(
        &server,
        "openai",
        "VAR_chat_model_id",
        "structured_output = \"prompt\"",
    );
    let mut ask = Ask::user("Hello!");
    ask.system = Some("You are a helpful assistant.");
    let done = call(config, &ask).await.unwrap();

    let mut sent = only_request(&server).await;
    // The example uses the newer `developer` role; we send `system`, which OpenAI still
    // accepts (and maps to `developer` for reasoning models) and which the chat templates
    // of OpenAI-compatible servers know.
    assert_eq!(documented["messages"][0]["role"], "developer");
    assert_eq!(sent["messages"][0]["role"], "system");
    sent["messages"][0]["role"] = json!("developer");
    let extra = same_keys_plus(&documented, &sent);
    assert_eq!(extra, ["temperature", "max_completion_tokens", "stream"]);
    assert!(sent.get("response_format").is_none());

    // No system_fingerprint in this response: unknown, not an empty string.
    expect_reply(
        &done,
        reply(
            "Hello! How can I assist you today?",
            FinishKind::Stop,
            "stop",
            (Some(19), Some(10)),
            "gpt-5.4",
            None,
        ),
    );
}

#[tokio::test]
async fn chat_logprobs_curl_example_is_answered_without_asking_for_logprobs() {
    let documented = curl_body("openai_chat_logprobs_request.sh");
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_logprobs_response.json"),
        JSON,
    )
    .await;
    let config = provider(
        &server,
        "openai",
        "VAR_chat_model_id",
        "structured_output = \"prompt\"",
    );
    let done = call(config, &Ask::user("Hello!")).await.unwrap();

    let sent = only_request(&server).await;
    assert_eq!(sent["model"], documented["model"]);
    assert_same(&documented["messages"], &sent["messages"], "messages");
    // Checks read the answer, not its token probabilities.
    assert_eq!(documented["logprobs"], true);
    assert!(sent.get("logprobs").is_none() && sent.get("top_logprobs").is_none());

    // The response carries logprobs (ignored) and `system_fingerprint: null`.
    expect_reply(
        &done,
        reply(
            "Hello! How can I assist you today?",
            FinishKind::Stop,
            "stop",
            (Some(9), Some(9)),
            "gpt-4o-mini",
            None,
        ),
    );
}

#[tokio::test]
async fn chat_tool_curl_example_becomes_a_forced_strict_call() {
    let documented = curl_body("openai_chat_tool_calls_request.sh");
    let function = &documented["tools"][0]["function"];
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_tool_calls_response.json"),
        JSON,
    )
    .await;
    let config = provider(&server, "openai", "gpt-5.4", "structured_output = \"tool\"");
    let mut ask = Ask::user("What is the weather like in Boston today?");
    ask.schema = function["parameters"].clone();
    ask.name = "get_current_weather";
    let done = call(config, &ask).await.unwrap();

    let sent = only_request(&server).await;
    assert_eq!(sent["model"], documented["model"]);
    assert_same(&documented["messages"], &sent["messages"], "messages");
    let tool = &sent["tools"][0];
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    assert_eq!(tool["type"], documented["tools"][0]["type"]);
    assert_eq!(tool["function"]["name"], function["name"]);
    assert_same(
        &function["parameters"],
        &tool["function"]["parameters"],
        "parameters",
    );
    assert_eq!(tool["function"]["strict"], true);
    // The example lets the model choose; we force the one function, so its arguments
    // are the answer every time.
    assert_eq!(documented["tool_choice"], "auto");
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "function", "function": {"name": "get_current_weather"}})
    );

    expect_reply(
        &done,
        call_reply(
            reply(
                "{\n\"location\": \"Boston, MA\"\n}",
                FinishKind::ToolUse,
                "tool_calls",
                (Some(82), Some(17)),
                "gpt-4o-mini",
                None,
            ),
            "call_abc123",
            "get_current_weather",
        ),
    );
}

#[tokio::test]
async fn responses_text_format_request_matches_the_sdk_capture() {
    let captured = wire_json("openai_responses_text_format_json_schema_request.captured.json");
    assert_eq!(captured["path"], RESPONSES);
    let server = serve(
        RESPONSES,
        200,
        wire_bytes("openai_responses_recorded_response_gpt4o_mini.json"),
        JSON,
    )
    .await;
    // The Responses API has no seed: a configured one is not sent.
    let config = provider(&server, "openai-responses", "gpt-4o-2024-08-06", "seed = 7");
    let done = call(config, &Ask::user("What's the weather like in SF?"))
        .await
        .unwrap();

    let sent = only_request(&server).await;
    // The flat text.format {type, name, strict, schema}, not the nested Chat shape.
    let extra = same_keys_plus(&captured["body"], &sent);
    assert_eq!(extra, ["max_output_tokens", "store", "stream"]);
    assert_eq!(sent["store"], false);
    assert!(sent["text"]["format"].get("json_schema").is_none());

    expect_reply(
        &done,
        reply(
            "I can't provide real-time updates, but you can easily check the current weather in San Francisco using a weather website or app. Typically, San Francisco has cool, foggy summers and mild winters, so it's good to be prepared for variable weather!",
            FinishKind::Stop,
            "completed",
            (Some(14), Some(50)),
            "gpt-4o-mini-2024-07-18",
            None,
        ),
    );
}

#[tokio::test]
async fn responses_curl_example_and_its_documented_response() {
    let documented = curl_body("openai_responses_text_request.sh");
    let server = serve(
        RESPONSES,
        200,
        wire_bytes("openai_responses_text_response.json"),
        JSON,
    )
    .await;
    let config = provider(
        &server,
        "openai-responses",
        "gpt-5.4",
        "structured_output = \"prompt\"",
    );
    let done = call(
        config,
        &Ask::user("Tell me a three sentence bedtime story about a unicorn."),
    )
    .await
    .unwrap();

    let sent = only_request(&server).await;
    let extra = same_keys_plus(&documented, &sent);
    assert_eq!(
        extra,
        ["temperature", "max_output_tokens", "store", "stream"]
    );

    let done_text = done.reply.text.clone();
    assert!(done_text.starts_with("In a peaceful grove beneath a silver moon"));
    assert!(done_text.ends_with("her hoofprints sparkled like stardust."));
    expect_reply(
        &done,
        reply(
            &done_text,
            FinishKind::Stop,
            "completed",
            (Some(36), Some(87)),
            "gpt-5.4",
            None,
        ),
    );
}

#[test]
fn responses_system_text_goes_in_instructions() {
    let config = conform_config::ProviderConfig::parse(
        std::path::Path::new("providers/r.toml"),
        "kind = \"openai-responses\"\nmodel = \"gpt-4o\"\nstructured_output = \"json_object\"\n",
    )
    .unwrap();
    let prompt = conform_config::Prompt {
        system: Some("Answer in JSON.".into()),
        user: "Hi".into(),
    };
    let schema = location_schema();
    let spec = CallSpec {
        prompt: &prompt,
        schema: &schema,
        schema_name: "Location",
        conversation: None,
    };
    let request = wire_format(config.kind).encode(&spec, &config, None);
    assert_eq!(request.url, "https://api.openai.com/v1/responses");
    assert_eq!(request.body["instructions"], "Answer in JSON.");
    assert_eq!(request.body["input"], "Hi");
    assert_eq!(
        request.body["text"],
        json!({"format": {"type": "json_object"}})
    );
    assert!(request.headers.get("authorization").is_none());
}

#[test]
fn responses_input_token_count_request_and_response() {
    let documented = curl_body("openai_responses_input_tokens_request.sh");
    let config = conform_config::ProviderConfig::parse(
        std::path::Path::new("providers/r.toml"),
        "kind = \"openai-responses\"\nmodel = \"gpt-5\"\n",
    )
    .unwrap();
    let prompt = conform_config::Prompt {
        system: None,
        user: "Tell me a joke.".into(),
    };
    let schema = Value::Null;
    let spec = CallSpec {
        prompt: &prompt,
        schema: &schema,
        schema_name: "x",
        conversation: None,
    };
    let request = input_tokens_request(
        &spec,
        &config,
        Some(&conform_config::secret::Secret::new(KEY.into())),
    );
    assert_eq!(
        request.url,
        "https://api.openai.com/v1/responses/input_tokens"
    );
    assert_same(&documented, &request.body, "body");
    assert!(request.headers["authorization"].is_sensitive());

    let count = decode_input_tokens(&wire_bytes("openai_responses_input_tokens_response.json"));
    assert_eq!(count.unwrap(), 11);
    let wrong = decode_input_tokens(br#"{"object":"response.input_tokens"}"#).unwrap_err();
    assert_eq!(
        wrong.kind,
        conform_wire::provider::ErrorKind::InvalidResponse
    );
}
