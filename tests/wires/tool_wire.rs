//! Tool calls on the Anthropic, Gemini and Ollama wires, from their recorded payloads:
//! what we send for a conversation with tools, calls and results (compared with the
//! requests the SDKs and docs sent), and how the calls in their answers (parallel, with
//! errors, streamed) decode into the one normalized form. The OpenAI wires are in
//! `tests/wire_openai/tools.rs`.

use crate::common;

use common::*;
use conform_config::{Conversation, Message, Tool, ToolChoice};
use conform_wire::provider::{ErrorKind, FinishKind};
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

/// A conversation in the neutral (OpenAI Chat) shape.
fn conversation(messages: Value, tools: Value) -> Conversation {
    let messages: Vec<Message> = serde_json::from_value(messages).unwrap();
    let tools: Vec<Tool> = serde_json::from_value(tools).unwrap();
    Conversation {
        messages,
        tools: tools.into(),
        tool_choice: None,
        parallel_tool_calls: None,
        json_answer: false,
    }
}

/// A neutral tool from an Anthropic declaration.
fn from_anthropic(tool: &Value) -> Value {
    json!({"type": "function", "function": {"name": tool["name"],
        "description": tool["description"], "parameters": tool["input_schema"]}})
}

/// Anthropic's Python SDK echoes `caller` on the tool_use blocks it sends back; the API
/// accepts the block without it.
fn without_caller(messages: &Value) -> Value {
    let mut messages = messages.clone();
    for m in messages.as_array_mut().unwrap() {
        if let Some(blocks) = m["content"].as_array_mut() {
            for b in blocks {
                b.as_object_mut().unwrap().remove("caller");
            }
        }
    }
    messages
}

fn anthropic(uri: &str, extra: &str) -> std::sync::Arc<conform_config::ProviderConfig> {
    config(
        "anthropic",
        &format!(
            "kind = \"anthropic\"\nmodel = \"claude-haiku-4-5\"\nbase_url = \"{uri}\"\nmax_output_tokens = 1024\ntimeout = \"5s\"\n{extra}\n[anthropic]\nsend_temperature = false\n{FAST_LIMITS}"
        ),
    )
}

fn gemini(uri: &str, extra: &str, field: &str) -> std::sync::Arc<conform_config::ProviderConfig> {
    config(
        "gemini",
        &format!(
            "kind = \"gemini\"\nmodel = \"gemini-2.5-flash\"\nbase_url = \"{uri}\"\ntimeout = \"5s\"\n{extra}\n[gemini]\nschema_field = \"{field}\"\n{FAST_LIMITS}"
        ),
    )
}

fn ollama(uri: &str) -> std::sync::Arc<conform_config::ProviderConfig> {
    config(
        "ollama",
        &format!(
            "kind = \"ollama\"\nmodel = \"llama3.2\"\nbase_url = \"{uri}\"\ntimeout = \"5s\"\n{FAST_LIMITS}"
        ),
    )
}

const MESSAGES: &str = r"^/v1/messages$";
const GENERATE: &str = r"^/v1beta/models/[^/:]+:(stream)?[gG]enerateContent$";
const CHAT: &str = r"^/api/chat$";

#[tokio::test]
async fn anthropic_parallel_tool_use_decodes_every_call_after_the_text() {
    let server = answering(
        MESSAGES,
        ok("anthropic_messages_parallel_tool_use_response.json"),
    )
    .await;
    let recorded = wire("anthropic_messages_parallel_tool_use_request.json");
    let c = conversation(
        json!([{"role": "user", "content": recorded["messages"][0]["content"]}]),
        json!([from_anthropic(&recorded["tools"][0])]),
    );
    let done = call_conversation(&endpoint(anthropic(&server.uri(), "")), &c)
        .await
        .unwrap();
    let sent = body(&requests(&server).await[0]);
    assert_eq!(sent["messages"], recorded["messages"]);
    assert_eq!(sent["tools"][0]["name"], "test_tool");
    assert_eq!(sent["tools"][0]["description"], "A test tool");
    // The SDK's `$schema` is not sent: strict validators do not list the dialect.
    let mut schema = recorded["tools"][0]["input_schema"].clone();
    schema.as_object_mut().unwrap().remove("$schema");
    assert_eq!(sent["tools"][0]["input_schema"], schema);

    let reply = done.reply;
    assert_eq!(
        reply.content(),
        "I'll use the test_tool twice as requested - first with count 1, then with count 2."
    );
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(
        reply.tool_calls[0].id.as_deref(),
        Some("toolu_01L8GVQapA1HmggQcrwboukH")
    );
    assert_eq!(reply.tool_calls[1].arguments, Some(json!({"count": 2})));
    assert_eq!(reply.tool_calls[1].raw_arguments, "{\"count\":2}");
    assert_eq!(reply.finish.raw.as_deref(), Some("tool_use"));
    assert_eq!(reply.usage.prompt_tokens, Some(418));
}

#[tokio::test]
async fn anthropic_gets_the_results_of_one_turn_in_one_user_message() {
    let server = answering(
        MESSAGES,
        ok("anthropic_messages_parallel_tool_result_response.json"),
    )
    .await;
    let recorded = wire("anthropic_messages_parallel_tool_result_request.json");
    let c = conversation(
        json!([
            {"role": "user", "content": recorded["messages"][0]["content"]},
            {"role": "assistant", "content": recorded["messages"][1]["content"][0]["text"],
             "tool_calls": [
                {"id": "toolu_01L8GVQapA1HmggQcrwboukH", "type": "function",
                 "function": {"name": "test_tool", "arguments": "{\"count\": 1}"}},
                {"id": "toolu_01J5Fvzxu7DP1Uh59c1kr5JD", "type": "function",
                 "function": {"name": "test_tool", "arguments": {"count": 2}}}]},
            {"role": "tool", "tool_call_id": "toolu_01L8GVQapA1HmggQcrwboukH", "content": "Called with 1"},
            {"role": "tool", "tool_call_id": "toolu_01J5Fvzxu7DP1Uh59c1kr5JD", "content": "Called with 2"}
        ]),
        json!([from_anthropic(&recorded["tools"][0])]),
    );
    let done = call_conversation(&endpoint(anthropic(&server.uri(), "")), &c)
        .await
        .unwrap();
    let sent = body(&requests(&server).await[0]);
    // Text then both tool_use blocks; then one user message holding both results.
    assert_eq!(sent["messages"], recorded["messages"]);
    assert!(done.reply.tool_calls.is_empty());
    assert!(
        done.reply
            .text
            .starts_with("I've successfully used the test_tool twice")
    );
    assert_eq!(done.reply.finish.raw.as_deref(), Some("end_turn"));
}

#[tokio::test]
async fn anthropic_sends_a_failed_tool_as_is_error_and_reads_the_text_answer() {
    for (request, response, text) in [
        (
            "anthropic_messages_tool_result_is_error_request.json",
            "anthropic_messages_tool_result_is_error_response.json",
            "I apologize, but I'm getting an error",
        ),
        (
            "anthropic_messages_tool_result_request.json",
            "anthropic_messages_tool_result_response.json",
            "The weather in SF is currently **20°C**",
        ),
    ] {
        let server = answering(MESSAGES, ok(response)).await;
        let recorded = wire(request);
        let m = &recorded["messages"];
        let result = &m[2]["content"][0];
        let c = conversation(
            json!([
                {"role": "user", "content": m[0]["content"]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": m[1]["content"][0]["id"], "type": "function",
                     "function": {"name": m[1]["content"][0]["name"],
                                  "arguments": m[1]["content"][0]["input"]}}]},
                {"role": "tool", "tool_call_id": result["tool_use_id"],
                 "content": result["content"], "is_error": result["is_error"] == true}
            ]),
            json!([from_anthropic(&recorded["tools"][0])]),
        );
        let done = call_conversation(&endpoint(anthropic(&server.uri(), "")), &c)
            .await
            .unwrap();
        let sent = body(&requests(&server).await[0]);
        assert_eq!(sent["messages"], without_caller(m), "{request}");
        assert_eq!(sent["tools"], recorded["tools"], "{request}");
        assert!(done.reply.text.starts_with(text), "{}", done.reply.text);
        assert!(done.reply.tool_calls.is_empty());
    }
}

#[tokio::test]
async fn anthropic_tool_choice_says_auto_any_tool_none_and_can_forbid_parallel_calls() {
    let tools = json!([{"type": "function", "function": {"name": "lookup", "description": "d",
        "parameters": {"type": "object", "properties": {}}}}]);
    for (choice, parallel, expected) in [
        (Some(ToolChoice::Auto), None, json!({"type": "auto"})),
        (Some(ToolChoice::Required), None, json!({"type": "any"})),
        (Some(ToolChoice::None), None, json!({"type": "none"})),
        (
            Some(ToolChoice::Tool("lookup".into())),
            Some(false),
            json!({"type": "tool", "name": "lookup", "disable_parallel_tool_use": true}),
        ),
        (
            None,
            Some(false),
            json!({"type": "auto", "disable_parallel_tool_use": true}),
        ),
    ] {
        let server = answering(MESSAGES, ok("anthropic_messages_tool_result_response.json")).await;
        let mut c = conversation(json!([{"role": "user", "content": "hi"}]), tools.clone());
        c.tool_choice = choice;
        c.parallel_tool_calls = parallel;
        call_conversation(&endpoint(anthropic(&server.uri(), "")), &c)
            .await
            .unwrap();
        assert_eq!(body(&requests(&server).await[0])["tool_choice"], expected);
    }
}

#[tokio::test]
async fn anthropic_streams_fold_text_deltas_and_input_json_deltas() {
    // The stored fixture lost the stream's last blank line, which ends its last event
    // (an event without it is never dispatched); the server sends it.
    let stream = format!(
        "{}\n\n",
        wire_text("anthropic_messages_stream_tool_use_response.sse").trim_end()
    );
    let server = answering(
        MESSAGES,
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/event-stream")
            .set_body_string(stream),
    )
    .await;
    let c = conversation(
        json!([{"role": "user", "content": "Weather in Paris?"}]),
        json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]),
    );
    let done = call_conversation(&endpoint(anthropic(&server.uri(), "stream = true")), &c)
        .await
        .unwrap();
    assert_eq!(body(&requests(&server).await[0])["stream"], true);
    let reply = done.reply;
    assert_eq!(
        reply.content(),
        "I'll check the current weather in Paris for you."
    );
    // `""` + `{"locati` + `on": "P` + `ar` + `is"}`.
    assert_eq!(
        reply.tool_calls[0].arguments,
        Some(json!({"location": "Paris"}))
    );
    assert_eq!(
        reply.tool_calls[0].id.as_deref(),
        Some("toolu_01NRLabsLyVHZPKxbKvkfSMn")
    );
    assert_eq!(reply.finish.raw.as_deref(), Some("tool_use"));
    assert_eq!(reply.usage.prompt_tokens, Some(377));
    assert_eq!(reply.usage.output_tokens, Some(65));
    assert_eq!(
        reply.served_model.as_deref(),
        Some("claude-sonnet-4-20250514")
    );
}

#[tokio::test]
async fn anthropic_a_stream_cut_before_message_stop_is_no_answer() {
    let text = wire_text("anthropic_messages_stream_tool_use_response.sse");
    let cut = &text[..text.find("event: message_stop").unwrap()];
    let server = answering(
        MESSAGES,
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/event-stream")
            .set_body_string(cut),
    )
    .await;
    let c = conversation(json!([{"role": "user", "content": "x"}]), json!([]));
    let err = call_conversation(&endpoint(anthropic(&server.uri(), "stream = true")), &c)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::StreamTruncated, "{err}");
    // Not sent again after the 2xx, and what the stream said it cost is kept.
    assert_eq!(requests(&server).await.len(), 1);
    assert_eq!(err.served.unwrap().usage.prompt_tokens, Some(377));
}

/// The cookbook's declarations as the neutral tools they are.
fn cookbook_tools(declarations: &Value) -> Value {
    Value::Array(
        declarations
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                json!({"type": "function", "function": {"name": d["name"],
                "description": d["description"], "parameters": d["parameters"]}})
            })
            .collect(),
    )
}

/// Gemini's enum values are case-insensitive (`any`, `ANY`), and its field names are
/// accepted in both casings (`allowed_function_names`, `allowedFunctionNames`).
fn upper_camel(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let camel: String = k
                        .split('_')
                        .enumerate()
                        .map(|(i, w)| {
                            if i == 0 {
                                w.to_string()
                            } else {
                                w[..1].to_uppercase() + &w[1..]
                            }
                        })
                        .collect();
                    (camel, upper_camel(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(upper_camel).collect()),
        Value::String(s) if s.chars().all(|c| c.is_ascii_lowercase()) => json!(s.to_uppercase()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn gemini_declares_functions_and_reads_the_call_back() {
    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_function_call_response.json"),
    )
    .await;
    let recorded = wire("gemini_generatecontent_function_declarations_request.json");
    let declarations = &recorded["tools"][0]["function_declarations"];
    let c = conversation(
        json!([{"role": "user", "content": recorded["contents"]["parts"]["text"]}]),
        cookbook_tools(declarations),
    );
    let done = call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    let sent = body(&requests(&server).await[0]);
    // The cookbook sends single objects where the API takes lists; we send lists.
    assert_eq!(
        sent["contents"],
        json!([{"role": "user", "parts": [recorded["contents"]["parts"]]}])
    );
    let ours = sent["tools"][0]["functionDeclarations"].as_array().unwrap();
    for (mine, theirs) in ours.iter().zip(declarations.as_array().unwrap()) {
        assert_eq!(mine["name"], theirs["name"]);
        assert_eq!(mine["description"], theirs["description"]);
        assert_eq!(mine["parametersJsonSchema"], theirs["parameters"]);
    }
    assert!(sent["generationConfig"].get("responseMimeType").is_none());

    let call = &done.reply.tool_calls[0];
    assert_eq!(call.name, "find_theaters");
    assert_eq!(call.id, None);
    assert_eq!(
        call.arguments,
        Some(json!({"movie": "Barbie", "location": "Mountain View, CA"}))
    );
    // Gemini has no "called a tool" finish reason: STOP.
    assert_eq!(done.reply.finish.kind, FinishKind::Stop);
}

#[tokio::test]
async fn gemini_sends_the_call_back_as_model_and_the_result_as_a_function_response() {
    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_function_response_followup_response.json"),
    )
    .await;
    let recorded = wire("gemini_generatecontent_function_response_request.json");
    let contents = &recorded["contents"];
    let declarations = &recorded["tools"][0]["functionDeclarations"];
    let result = &contents[2]["parts"][0]["functionResponse"]["response"]["content"];
    let c = conversation(
        json!([
            {"role": "user", "content": contents[0]["parts"][0]["text"]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "find_theaters",
                             "arguments": contents[1]["parts"][0]["functionCall"]["args"]}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "find_theaters", "content": result.to_string()}
        ]),
        cookbook_tools(declarations),
    );
    let done = call_conversation(&endpoint(gemini(&server.uri(), "", "responseSchema")), &c)
        .await
        .unwrap();
    let sent = body(&requests(&server).await[0]);
    assert_eq!(sent["contents"][0], contents[0]);
    // The model's turn as recorded, the call and its arguments; no invented id.
    assert_eq!(sent["contents"][1], contents[1]);
    // The result: a user turn (the cookbook's legacy `function` role is what current docs
    // call `user`), named by its tool, the JSON result under `output` (python-genai's
    // convention; the cookbook wrapped it in its own `{name, content}`).
    let response = &sent["contents"][2]["parts"][0]["functionResponse"];
    assert_eq!(sent["contents"][2]["role"], "user");
    assert_eq!(response["name"], "find_theaters");
    assert_eq!(response["response"], json!({"output": result}));
    // The `responseSchema` dialect: the declarations as the cookbook sent them, upper-case
    // types and all (and the property order Gemini otherwise sorts).
    for (mine, theirs) in sent["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .zip(declarations.as_array().unwrap())
    {
        let mut params = mine["parameters"].clone();
        params.as_object_mut().unwrap().remove("propertyOrdering");
        assert_eq!(params, theirs["parameters"]);
    }
    assert!(done.reply.text.contains("AMC Mountain View 16"));
}

#[tokio::test]
async fn gemini_tool_config_forces_a_named_function_with_any() {
    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_function_call_response.json"),
    )
    .await;
    let recorded = wire("gemini_generatecontent_tool_config_any_allowed_names_request.json");
    let mut c = conversation(
        json!([
            {"role": "system", "content": recorded["system_instruction"]["parts"]["text"]},
            {"role": "user", "content": recorded["contents"]["parts"]["text"]}
        ]),
        cookbook_tools(&recorded["tools"][0]["function_declarations"]),
    );
    c.tool_choice = Some(ToolChoice::Tool("set_light_color".into()));
    call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    let sent = body(&requests(&server).await[0]);
    // The neutral shape names one tool; the cookbook allowed two. Mode and field agree.
    let mut theirs = upper_camel(&recorded["tool_config"]);
    theirs["functionCallingConfig"]["allowedFunctionNames"] = json!(["set_light_color"]);
    assert_eq!(sent["toolConfig"], theirs);
    assert_eq!(
        sent["systemInstruction"],
        json!({"parts": [recorded["system_instruction"]["parts"]]})
    );
    for (choice, mode) in [
        (ToolChoice::Auto, "AUTO"),
        (ToolChoice::None, "NONE"),
        (ToolChoice::Required, "ANY"),
    ] {
        let server = answering(
            GENERATE,
            ok("gemini_generatecontent_function_call_response.json"),
        )
        .await;
        c.tool_choice = Some(choice);
        call_conversation(
            &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
            &c,
        )
        .await
        .unwrap();
        let sent = body(&requests(&server).await[0]);
        assert_eq!(
            sent["toolConfig"],
            json!({"functionCallingConfig": {"mode": mode}})
        );
    }
}

#[tokio::test]
async fn gemini_parallel_calls_and_thought_signatures() {
    let c = conversation(json!([{"role": "user", "content": "x"}]), json!([]));
    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_parallel_function_calls_response.json"),
    )
    .await;
    let done = call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    let names: Vec<&str> = done
        .reply
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["sum", "multiply", "subtract"]);
    assert_eq!(
        done.reply.tool_calls[2].arguments,
        Some(json!({"y": 5, "x": 6}))
    );

    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_function_call_thought_signature_response.json"),
    )
    .await;
    let done = call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    // The thought summary is not the answer; the call beside its signature is, and
    // the signature is kept with the call, as the record keeps it.
    assert_eq!(done.reply.tool_calls.len(), 1);
    let recorded = wire("gemini_generatecontent_function_call_thought_signature_response.json");
    let signature = recorded["candidates"][0]["content"]["parts"][1]["thoughtSignature"]
        .as_str()
        .unwrap();
    assert_eq!(
        done.reply.tool_calls[0].signature.as_deref(),
        Some(signature)
    );
    let record = serde_json::to_value(&done.reply.tool_calls[0]).unwrap();
    assert_eq!(record["signature"], signature);
    assert!(
        !done.reply.content().contains("**"),
        "a thought leaked into the text: {}",
        done.reply.content()
    );
}

#[tokio::test]
async fn gemini_streams_deliver_the_call_whole_in_one_chunk() {
    let server = answering(
        GENERATE,
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/event-stream")
            .set_body_string(wire_text(
                "gemini_streamgeneratecontent_function_call_transcript.sse",
            )),
    )
    .await;
    let c = conversation(
        json!([{"role": "user", "content": "How many days until New Year's Eve?"}]),
        json!([{"type": "function", "function": {"name": "now", "description": "the time"}}]),
    );
    let done = call_conversation(
        &endpoint(gemini(&server.uri(), "stream = true", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    let sent = requests(&server).await;
    assert!(sent[0].url.path().ends_with(":streamGenerateContent"));
    assert_eq!(sent[0].url.query(), Some("alt=sse"));
    let reply = done.reply;
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].name, "now");
    assert_eq!(reply.tool_calls[0].arguments, Some(json!({})));
    assert!(
        reply.tool_calls[0].signature.is_some(),
        "the streamed call's thought signature is kept"
    );
    assert_eq!(reply.content(), "", "thought parts are not the answer");
    assert_eq!(reply.finish.kind, FinishKind::Stop);
    assert!(reply.usage.prompt_tokens.is_some());
}

#[tokio::test]
async fn gemini_malformed_and_unexpected_calls_are_not_normal_stops() {
    let c = conversation(json!([{"role": "user", "content": "x"}]), json!([]));
    // MALFORMED_FUNCTION_CALL: no content at all, usage counts only the prompt.
    let server = answering(
        GENERATE,
        ok("gemini_streamgeneratecontent_chunk_malformed_function_call.json"),
    )
    .await;
    let done = call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    assert_eq!(done.reply.finish.kind, FinishKind::Other);
    assert_eq!(
        done.reply.finish.raw.as_deref(),
        Some("MALFORMED_FUNCTION_CALL")
    );
    assert!(done.reply.tool_calls.is_empty());
    assert_eq!(done.reply.usage.prompt_tokens, Some(2595));
    // The reporter's SDK dump of UNEXPECTED_TOOL_CALL (snake_case, not the REST casing):
    // not a call to execute, and not a normal stop.
    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_response_unexpected_tool_call.json"),
    )
    .await;
    let done = call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    assert!(done.reply.tool_calls.is_empty());
    assert_ne!(done.reply.finish.kind, FinishKind::Stop);
}

#[tokio::test]
async fn ollama_declares_tools_as_documented_and_reads_object_arguments() {
    let server = answering(CHAT, ok("ollama_chat_tools_response.json")).await;
    let documented = wire("ollama_chat_tools_request.json");
    let c = conversation(documented["messages"].clone(), documented["tools"].clone());
    let done = call_conversation(&endpoint(ollama(&server.uri())), &c)
        .await
        .unwrap();
    let sent = body(&requests(&server).await[0]);
    for key in ["model", "messages", "tools", "stream"] {
        assert_eq!(sent[key], documented[key], "{key}");
    }
    let call = &done.reply.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.id, None, "the docs' servers send no id");
    assert_eq!(call.arguments, Some(json!({"city": "Tokyo"})));
    assert_eq!(call.raw_arguments, "{\"city\":\"Tokyo\"}");
    // `done_reason` stays "stop" when tools were called.
    assert_eq!(done.reply.finish.raw.as_deref(), Some("stop"));
}

#[tokio::test]
async fn ollama_gets_the_history_with_object_arguments_and_tool_names() {
    let server = answering(CHAT, ok("ollama_chat_tool_result_followup_response.json")).await;
    let documented = wire("ollama_chat_tool_result_followup_request.json");
    let m = &documented["messages"];
    let c = conversation(
        json!([
            m[0],
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Toronto\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": m[2]["content"]}
        ]),
        documented["tools"].clone(),
    );
    let done = call_conversation(&endpoint(ollama(&server.uri())), &c)
        .await
        .unwrap();
    let sent = body(&requests(&server).await[0]);
    assert_eq!(sent["messages"], documented["messages"]);
    assert_eq!(
        done.reply.text,
        "The current temperature in Toronto is 11°C."
    );
}

#[tokio::test]
async fn an_ollama_tool_stream_nobody_asked_for_is_named() {
    let server = answering(
        CHAT,
        ResponseTemplate::new(200)
            .insert_header("content-type", "application/x-ndjson")
            .set_body_string(wire_text(
                "ollama_chat_tools_stream_ndjson_first_and_final_chunks.txt",
            )),
    )
    .await;
    let c = conversation(json!([{"role": "user", "content": "x"}]), json!([]));
    let err = call_conversation(&endpoint(ollama(&server.uri())), &c)
        .await
        .unwrap_err();
    // Every request says `stream: false`: a stream is a proxy's doing, not an answer.
    assert_eq!(err.kind, ErrorKind::NonJsonBody, "{err}");
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn gemini_gets_a_history_calls_thought_signature_back_byte_for_byte() {
    let server = answering(
        GENERATE,
        ok("gemini_generatecontent_function_response_followup_response.json"),
    )
    .await;
    let recorded = wire("gemini_generatecontent_function_call_thought_signature_response.json");
    let signature = recorded["candidates"][0]["content"]["parts"][1]["thoughtSignature"]
        .as_str()
        .unwrap();
    // As Gemini's OpenAI-compatible API hands the call out, and a case keeps it.
    let c = conversation(
        json!([
            {"role": "user", "content": "How many days until New Year's Eve?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "now", "arguments": "{}"},
                "extra_content": {"google": {"thought_signature": signature}}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "now", "content": "2026-12-04"}
        ]),
        json!([{"type": "function", "function": {"name": "now", "description": "the time"}}]),
    );
    call_conversation(
        &endpoint(gemini(&server.uri(), "", "responseJsonSchema")),
        &c,
    )
    .await
    .unwrap();
    let sent = body(&requests(&server).await[0]);
    let part = &sent["contents"][1]["parts"][0];
    assert_eq!(part["functionCall"]["name"], "now");
    assert_eq!(
        part["thoughtSignature"], signature,
        "a sibling of functionCall"
    );

    // Sent to an OpenAI-compatible server, the call goes back as it came.
    let compatible = answering(
        r"^/v1/chat/completions$",
        ok("openai_chat_tool_calls_response.json"),
    )
    .await;
    let config = common::config(
        "gemini-compat",
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"gemini-3-flash\"\nbase_url = \"{}\"\n",
            compatible.uri()
        ),
    );
    call_conversation(&endpoint(config), &c).await.unwrap();
    let sent = body(&requests(&compatible).await[0]);
    assert_eq!(
        sent["messages"][1]["tool_calls"][0]["extra_content"]["google"]["thought_signature"],
        signature
    );
}

#[tokio::test]
async fn ollama_streams_deliver_the_call_whole_in_one_line() {
    let server = answering(
        CHAT,
        ResponseTemplate::new(200)
            .insert_header("content-type", "application/x-ndjson")
            .set_body_string(ndjson(&wire_text(
                "ollama_chat_tools_stream_ndjson_first_and_final_chunks.txt",
            ))),
    )
    .await;
    let c = conversation(
        json!([{"role": "user", "content": "What is the weather in Tokyo?"}]),
        json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]),
    );
    let mut config = (*ollama(&server.uri())).clone();
    config.force_stream();
    let done = call_conversation(&endpoint(std::sync::Arc::new(config)), &c)
        .await
        .unwrap();
    assert_eq!(
        done.reply.tool_calls.len(),
        1,
        "the streamed call was dropped"
    );
    assert_eq!(done.reply.tool_calls[0].name, "get_weather");
    assert_eq!(
        done.reply.tool_calls[0].arguments,
        Some(json!({"city": "Tokyo"}))
    );
}

/// A transcript file (`// comment` lines, pretty-printed objects) as the server sends it:
/// one object per line.
fn ndjson(transcript: &str) -> String {
    transcript
        .split("// ")
        .filter_map(|chunk| chunk.split_once('\n').map(|(_, json)| json.trim()))
        .filter(|json| !json.is_empty())
        .map(|json| format!("{}\n", serde_json::from_str::<Value>(json).unwrap()))
        .collect()
}
