//! Tool calls on the OpenAI wires: Chat Completions (parallel calls, the tool-role
//! follow-up, argument fragments by index in streams), the Responses API (function
//! tools, `function_call` items by `call_id`, streams keyed by `output_index`), and the
//! servers that copy Chat (llama.cpp's older flat calls, vLLM's named-choice streams and
//! its calls leaking into the text), each from its recorded payload.

use std::sync::Arc;

use conform_check::check::tool_text::call_in_text;
use conform_config::secret::Secret;
use conform_config::{Conversation, Message, Prompt, ProviderConfig, Tool, ToolChoice};
use conform_wire::provider::transport::{Endpoint, Transport};
use conform_wire::provider::{CallError, CallSpec, Completion, ErrorKind, FinishKind, wire_format};
use serde_json::{Value, json};

use super::support::*;

/// A conversation from recorded OpenAI Chat messages and tools: our neutral shape is
/// OpenAI Chat's, less the fields a response echoes (`refusal`, `annotations`).
fn conversation(messages: &Value, tools: &Value) -> Conversation {
    let messages: Vec<Message> = serde_json::from_value(strip_echoes(messages)).unwrap();
    let tools: Vec<Tool> = serde_json::from_value(tools.clone()).unwrap();
    Conversation {
        messages,
        tools: tools.into(),
        tool_choice: None,
        parallel_tool_calls: None,
        json_answer: false,
    }
}

/// The messages without the output-only fields an assistant turn is echoed with.
fn strip_echoes(messages: &Value) -> Value {
    let mut messages = messages.clone();
    for m in messages.as_array_mut().unwrap() {
        let m = m.as_object_mut().unwrap();
        m.remove("refusal");
        m.remove("annotations");
    }
    messages
}

/// One call of a conversation through the real transport.
async fn send(config: ProviderConfig, c: &Conversation) -> Result<Completion, CallError> {
    let kind = config.kind;
    let endpoint = Endpoint::new(
        Arc::new(config),
        wire_format(kind),
        Some(Secret::new(KEY.to_string())),
        Transport::new().unwrap(),
    );
    let prompt = Prompt {
        system: None,
        user: String::new(),
    };
    let schema = location_schema();
    let spec = CallSpec {
        prompt: &prompt,
        schema: &schema,
        schema_name: "answer",
        conversation: Some(c),
    };
    endpoint.call(&spec, 100).await
}

#[tokio::test]
async fn parallel_calls_decode_each_with_its_id_and_parsed_arguments() {
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_parallel_tool_calls_response.json"),
        JSON,
    )
    .await;
    let recorded = wire_json("openai_chat_parallel_tool_calls_request.json");
    let c = conversation(&recorded["messages"], &recorded["tools"]);
    let done = send(provider(&server, "openai", "gpt-4o", ""), &c)
        .await
        .unwrap();
    let sent = only_request(&server).await;
    assert_same(&recorded["messages"], &sent["messages"], "messages");
    assert_same(&recorded["tools"], &sent["tools"], "tools");
    // A request that expects calls asks for no JSON answer.
    assert!(sent.get("response_format").is_none(), "{sent}");

    let calls = &done.reply.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].id.as_deref(),
        Some("call_SOafgmSqA42A5VTHNCFzzclP")
    );
    assert_eq!(
        calls[1].id.as_deref(),
        Some("call_vOoqWR3PM0cJycPOu020fsIB")
    );
    assert!(calls.iter().all(|c| c.name == "test_tool"));
    // Parallel arguments come spaced, `{"count": 1}`: parsed, and kept as sent.
    assert_eq!(calls[0].arguments, Some(json!({"count": 1})));
    assert_eq!(calls[1].raw_arguments, "{\"count\": 2}");
    assert_eq!(done.reply.finish.raw.as_deref(), Some("tool_calls"));
    assert_eq!(done.reply.content(), "");
}

#[tokio::test]
async fn the_tool_role_follow_up_is_sent_as_recorded_and_its_answer_is_text() {
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_tool_role_followup_response.json"),
        JSON,
    )
    .await;
    let recorded = wire_json("openai_chat_tool_role_followup_request.json");
    let c = conversation(&recorded["messages"], &recorded["tools"]);
    let done = send(provider(&server, "openai", "gpt-4o", ""), &c)
        .await
        .unwrap();
    let sent = only_request(&server).await;
    // The assistant turn as returned (content null, the calls with string arguments), then
    // one tool message per tool_call_id in call order.
    assert_same(
        &strip_echoes(&recorded["messages"]),
        &sent["messages"],
        "messages",
    );
    assert_eq!(done.reply.text, "231");
    assert!(done.reply.tool_calls.is_empty());
    assert_eq!(done.reply.usage.prompt_tokens, Some(134));
}

#[tokio::test]
async fn a_parallel_stream_assembles_argument_fragments_by_index() {
    let server = serve(
        CHAT,
        200,
        wire_bytes("openai_chat_parallel_tool_calls_stream_transcript.sse"),
        SSE,
    )
    .await;
    let c = conversation(
        &json!([{"role": "user", "content": "What's the weather in Edinburgh and AAPL?"}]),
        &json!([]),
    );
    let done = send(provider(&server, "openai", "gpt-4o", "stream = true"), &c)
        .await
        .unwrap();
    let calls = &done.reply.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].id.as_deref(),
        Some("call_JMW1whyEaYG438VE1OIflxA2")
    );
    assert_eq!(calls[0].name, "GetWeatherArgs");
    // `{"ci` + `ty": ` + `"Edinb` + `urgh` …: fragments split mid-token, joined by index.
    assert_eq!(
        calls[0].arguments,
        Some(json!({"city": "Edinburgh", "country": "GB", "units": "c"}))
    );
    assert_eq!(calls[1].name, "get_stock_price");
    assert_eq!(
        calls[1].arguments,
        Some(json!({"ticker": "AAPL", "exchange": "NASDAQ"}))
    );
    assert_eq!(done.reply.finish.kind, FinishKind::ToolUse);
    assert_eq!(done.reply.finish.raw.as_deref(), Some("tool_calls"));
    assert_eq!(done.reply.usage.prompt_tokens, Some(149));
}

#[tokio::test]
async fn a_parameters_schema_that_is_not_an_object_is_refused_before_and_by_the_api() {
    // The file is the body the API answered with a 400 (openai-node's recording).
    let server = serve(
        CHAT,
        400,
        wire_bytes("openai_error_400_invalid_function_parameters.json"),
        JSON,
    )
    .await;
    let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function", "function": {
        "name": "array_tool", "parameters": {"type": "array"}}}]))
    .unwrap();
    // `conform check` names it before anything is sent …
    let found = conform_config::conversation::tool_problems(&tools, "/tools");
    assert_eq!(found[0].pointer, "/tools/0/function/parameters");
    // … and sent anyway, the API's 400 stops the provider as a configuration error.
    let c = conversation(&json!([{"role": "user", "content": "go"}]), &json!([]));
    let c = Conversation {
        tools: tools.into(),
        ..c
    };
    let err = send(provider(&server, "openai", "gpt-4o", ""), &c)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::BadRequest, "{err}");
    assert!(err.message.contains("array_tool"), "{err}");
}

#[tokio::test]
async fn responses_declares_flat_function_tools_and_reads_call_ids() {
    let server = serve(
        RESPONSES,
        200,
        wire_bytes("openai_responses_function_call_response.json"),
        JSON,
    )
    .await;
    let documented = curl_body("openai_responses_function_tools_request.sh");
    // The same tool, declared the neutral (Chat) way.
    let function = documented["tools"][0].clone();
    let mut tool = function.clone();
    let tool = tool.as_object_mut().unwrap();
    tool.remove("type");
    let c = Conversation {
        tool_choice: Some(ToolChoice::Auto),
        ..conversation(
            &json!([{"role": "user", "content": documented["input"]}]),
            &json!([{"type": "function", "function": tool}]),
        )
    };
    let done = send(provider(&server, "openai-responses", "gpt-5.4", ""), &c)
        .await
        .unwrap();
    let sent = only_request(&server).await;
    assert_eq!(sent["input"], documented["input"]);
    assert_eq!(sent["tool_choice"], documented["tool_choice"]);
    let ours = &sent["tools"][0];
    for key in ["type", "name", "description", "parameters"] {
        assert_same(&function[key], &ours[key], key);
    }
    // The API makes a function strict unless told otherwise; we say what the case says.
    assert_eq!(ours["strict"], false);

    let call = &done.reply.tool_calls[0];
    // `call_id` pairs with the output sent back; `id` (`fc_…`) is the item's own.
    assert_eq!(call.id.as_deref(), Some("call_unLAR8MvFNptuiZK6K6HCy5k"));
    assert_eq!(call.name, "get_current_weather");
    assert_eq!(
        call.arguments,
        Some(json!({"location": "Boston, MA", "unit": "celsius"}))
    );
}

#[tokio::test]
async fn responses_sends_calls_and_outputs_back_as_items_paired_by_call_id() {
    let server = serve(
        RESPONSES,
        200,
        wire_bytes("openai_responses_text_response.json"),
        JSON,
    )
    .await;
    // No full follow-up body was ever published; the items' shape is the spec's
    // `FunctionCallOutputItemParam`, and the calls go back before their outputs.
    let recorded = wire_json("openai_chat_tool_role_followup_request.json");
    let mut c = conversation(&recorded["messages"], &recorded["tools"]);
    c.messages
        .insert(0, Message::text(conform_config::Role::System, "Be brief."));
    send(provider(&server, "openai-responses", "gpt-4o", ""), &c)
        .await
        .unwrap();
    let sent = only_request(&server).await;
    assert_eq!(sent["instructions"], "Be brief.");
    let input = sent["input"].as_array().unwrap();
    assert_eq!(
        input[0],
        json!({"role": "user", "content": recorded["messages"][0]["content"]})
    );
    assert_eq!(
        input[1],
        json!({"type": "function_call", "call_id": "call_SOafgmSqA42A5VTHNCFzzclP",
            "name": "test_tool", "arguments": "{\"count\": 1}"})
    );
    assert_eq!(input[2]["call_id"], "call_vOoqWR3PM0cJycPOu020fsIB");
    assert_eq!(
        input[3],
        json!({"type": "function_call_output", "call_id": "call_SOafgmSqA42A5VTHNCFzzclP",
            "output": "Called with 1"})
    );
    assert_eq!(input[4]["output"], "Called with 2");
    assert_eq!(input.len(), 5);
}

#[tokio::test]
async fn a_responses_stream_keys_argument_deltas_by_output_index() {
    // The guide prints its events one JSON per line; framed as the server sends them,
    // and closed by a `response.completed` whose output is empty, so that only the
    // deltas and items can say what was called.
    let mut body = String::new();
    for line in wire_text("openai_responses_function_call_stream_transcript.txt").lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        body.push_str(&sse_event(event["type"].as_str().unwrap(), &event));
    }
    body.push_str(&sse_event(
        "response.completed",
        &json!({"type": "response.completed", "response": {"status": "completed",
            "model": "gpt-4o-2024-08-06", "output": [],
            "usage": {"input_tokens": 61, "output_tokens": 17}}}),
    ));
    let server = serve(RESPONSES, 200, body.into_bytes(), SSE).await;
    let c = conversation(
        &json!([{"role": "user", "content": "Weather in Paris?"}]),
        &json!([]),
    );
    let done = send(
        provider(&server, "openai-responses", "gpt-4o", "stream = true"),
        &c,
    )
    .await
    .unwrap();
    let call = &done.reply.tool_calls[0];
    assert_eq!(call.id.as_deref(), Some("call_1234xyz"));
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.arguments, Some(json!({"location": "Paris, France"})));
    assert_eq!(done.reply.usage.prompt_tokens, Some(61));
}

#[tokio::test]
async fn llama_cpp_gets_the_documented_request_and_its_old_flat_calls_decode() {
    let server = serve(
        CHAT,
        200,
        wire_bytes("llamacpp_chat_tool_calls_docs_response.json"),
        JSON,
    )
    .await;
    let documented = wire_json("llamacpp_chat_tools_request.json");
    let c = conversation(&documented["messages"], &documented["tools"]);
    let done = send(
        provider(&server, "openai-compatible", "gpt-3.5-turbo", ""),
        &c,
    )
    .await
    .unwrap();
    let sent = only_request(&server).await;
    for key in ["model", "messages", "tools"] {
        assert_same(&documented[key], &sent[key], key);
    }
    // The docs' output is the flat `{name, arguments}` with `finish_reason: "tool"`.
    let call = &done.reply.tool_calls[0];
    assert_eq!(call.name, "python");
    assert_eq!(call.id, None);
    assert_eq!(
        call.arguments,
        Some(json!({"code": " \nprint(\"Hello, World!\")"}))
    );
    assert_eq!(done.reply.finish.kind, FinishKind::ToolUse);
}

#[tokio::test]
async fn vllm_without_a_tool_parser_leaks_the_call_into_the_text() {
    let server = serve(
        CHAT,
        200,
        wire_bytes("vllm_chat_tool_call_as_content_text_response.json"),
        JSON,
    )
    .await;
    let c = conversation(
        &json!([{"role": "user", "content": "How is the traffic in Sydney?"}]),
        &json!([{"type": "function", "function": {"name": "get_current_traffic",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]),
    );
    let done = send(
        provider(&server, "openai-compatible", "llama-3.2-11b", ""),
        &c,
    )
    .await
    .unwrap();
    // `tool_calls: []` and `finish_reason: "stop"`: no call came back …
    assert!(done.reply.tool_calls.is_empty());
    assert_eq!(done.reply.finish.raw.as_deref(), Some("stop"));
    // … but one is written in the text, unbalanced brace and all.
    let how = call_in_text(done.reply.content(), &["get_current_traffic"]).unwrap();
    assert!(how.contains("get_current_traffic"), "{how}");
}

#[tokio::test]
async fn a_vllm_named_choice_stream_names_the_tool_once_and_a_cut_stream_is_no_answer() {
    let transcript = wire_text("vllm_chat_named_tool_choice_stream_partial_transcript.sse");
    let c = conversation(&json!([{"role": "user", "content": "你好"}]), &json!([]));
    // As recorded: three events and no `[DONE]`, so the stream was cut.
    let server = serve(CHAT, 200, transcript.clone().into_bytes(), SSE).await;
    let err = send(
        provider(&server, "openai-compatible", "qwen", "stream = true"),
        &c,
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::StreamTruncated, "{err}");
    // `[DONE]` alone does not end it either: no chunk said why the answer stopped.
    let server = serve(
        CHAT,
        200,
        format!("{transcript}\ndata: [DONE]\n\n").into_bytes(),
        SSE,
    )
    .await;
    let err = send(
        provider(&server, "openai-compatible", "qwen", "stream = true"),
        &c,
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::StreamTruncated, "{err}");
    // Ended (a finishing chunk, then `[DONE]`): the name that every delta repeats is the
    // call's name, once.
    let finish = r#"data: {"id":"chatcmpl-4f37bbbaef1b4a73b737731599a4453d","object":"chat.completion.chunk","created":1739261756,"model":"Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}"#;
    let server = serve(
        CHAT,
        200,
        format!("{transcript}\n{finish}\n\ndata: [DONE]\n\n").into_bytes(),
        SSE,
    )
    .await;
    let done = send(
        provider(&server, "openai-compatible", "qwen", "stream = true"),
        &c,
    )
    .await
    .unwrap();
    let call = &done.reply.tool_calls[0];
    assert_eq!(call.name, "System-knowledge_base_search");
    // The recorded fragments are not JSON: kept as sent, for the checks to name.
    assert_eq!(call.raw_arguments, "你好！");
    assert_eq!(call.arguments, None);
}
