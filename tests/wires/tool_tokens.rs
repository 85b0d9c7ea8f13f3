//! Tokens with tools: OpenAI's published rule for tool definitions (the cookbook's 101
//! and 105), a lower bound where the rule is unpublished; a Hugging Face chat template
//! given the conversation and tools exactly as transformers takes them (rendered
//! byte-identical to Jinja2 in tests/tokens.rs); and the providers' own count endpoints
//! (Anthropic `count_tokens`, Gemini `countTokens`, OpenAI Responses `input_tokens`,
//! llama.cpp `/apply-template`), each sent the request's tools.

use crate::common;

use std::path::Path;

use common::{config, wire};
use conform_config::{Conversation, Prompt, Suite, Tool, ToolChoice};
use conform_wire::provider::CallSpec;
use conform_wire::tokenize::huggingface::{HuggingFace, transformers_messages, transformers_tools};
use conform_wire::tokenize::provider::ProviderCounter;
use conform_wire::tokenize::tiktoken::Tiktoken;
use conform_wire::tokenize::{Count, Tokenizer};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn conversation(messages: Value, tools: Value) -> Conversation {
    Conversation {
        messages: serde_json::from_value(messages).unwrap(),
        tools: serde_json::from_value::<Vec<Tool>>(tools).unwrap().into(),
        tool_choice: None,
        parallel_tool_calls: None,
        json_answer: false,
    }
}

fn support_case(id: &str) -> Conversation {
    let suite = Suite::load(&Path::new(common::REPO).join("fixtures/support-agent")).unwrap();
    let case_ref = suite.cases.iter().find(|c| c.id == id).unwrap();
    let case = case_ref.load().unwrap();
    suite
        .request(&case, &case_ref.path())
        .unwrap()
        .conversation
        .unwrap()
}

#[test]
fn tool_definitions_are_counted_by_openais_published_rule() {
    let fixture = wire("tokenizer_openai_cookbook_tools_fixture.json");
    let c = conversation(fixture["messages"].clone(), fixture["tools"].clone());
    for (encoding, model) in [
        ("o200k_base", "gpt-4o (o200k_base)"),
        ("cl100k_base", "gpt-4 (cl100k_base)"),
    ] {
        let counted = Tiktoken::shared(encoding)
            .unwrap()
            .count_conversation(&c)
            .unwrap();
        assert_eq!(
            counted,
            Count {
                tokens: fixture["expected_prompt_tokens"][model].as_u64().unwrap(),
                exact: true,
            },
            "{encoding}"
        );
    }
}

#[test]
fn what_the_rule_does_not_cover_is_a_lower_bound() {
    let o200k = Tiktoken::shared("o200k_base").unwrap();
    // The support agent's tools: a nested address object, properties without a
    // description. The rule says nothing about those.
    let c = support_case("005-change-delivery-address");
    let counted = o200k.count_conversation(&c).unwrap();
    assert!(!counted.exact);
    let messages_only = o200k
        .count_messages(&conform_wire::tokenize::conversation_messages(&c))
        .unwrap();
    assert!(
        counted.tokens > messages_only + 100,
        "{counted:?} vs {messages_only}"
    );
    // Calls and results in the history: unpublished too.
    let fixture = wire("tokenizer_openai_cookbook_tools_fixture.json");
    let mut history = conversation(fixture["messages"].clone(), fixture["tools"].clone());
    history.messages.push(
        serde_json::from_value(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_current_weather",
                "arguments": "{\"location\": \"San Francisco, CA\"}"}}]}))
        .unwrap(),
    );
    history.messages.push(
        serde_json::from_value(json!({"role": "tool", "tool_call_id": "c1", "content": "18 C"}))
            .unwrap(),
    );
    assert!(!o200k.count_conversation(&history).unwrap().exact);
}

#[test]
fn a_conversation_reaches_the_chat_template_as_transformers_takes_it() {
    // tests/templates/qwen2.5-support-agent.json holds what transformers' documented
    // tool-use shape makes of this case (written independently, in Python, with the
    // template's Jinja2 rendering beside it): our conversion must be that.
    let case: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(common::REPO).join("tests/templates/qwen2.5-support-agent.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let c = support_case("002-damaged-vase-refund-after-lookup");
    assert_eq!(transformers_messages(&c), case["messages"]);
    assert_eq!(transformers_tools(&c), case["tools"]);

    // SmolLM2's template has no tool syntax: the history still renders, a tool-calling
    // turn as its text (never "none"), and the count is the template's.
    let smol = HuggingFace::shared(&Path::new(common::REPO).join("tokenizers/smollm2")).unwrap();
    let rendered = smol.render_conversation(&c).unwrap();
    assert!(
        !rendered.contains("none") && !rendered.contains("None"),
        "{rendered}"
    );
    let counted = smol.count_conversation(&c).unwrap();
    assert!(counted.exact);
    assert_eq!(counted.tokens, smol.count_text(&rendered).unwrap());
}

/// One POST route answering `answer`, recording what it received.
async fn counting(route: &str, answer: Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(route))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .mount(&server)
        .await;
    server
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn spec<'a>(prompt: &'a Prompt, schema: &'a Value, c: Option<&'a Conversation>) -> CallSpec<'a> {
    CallSpec {
        prompt,
        schema,
        schema_name: "answer",
        conversation: c,
    }
}

fn weather() -> Conversation {
    let fixture = wire("tokenizer_openai_cookbook_tools_fixture.json");
    let mut c = conversation(fixture["messages"].clone(), fixture["tools"].clone());
    c.tool_choice = Some(ToolChoice::Required);
    c
}

#[tokio::test]
async fn anthropic_count_tokens_is_sent_the_system_messages_and_tools() {
    let server = counting("/v1/messages/count_tokens", json!({"input_tokens": 431})).await;
    let toml = format!(
        "kind = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nbase_url = \"{}\"\n[tokenizer]\nkind = \"provider\"\n",
        server.uri()
    );
    let counter = ProviderCounter::new(&config("anthropic", &toml)).unwrap();
    let schema = json!({"type": "object"});
    // A plain prompt: exactly the body the SDK sends (model and messages).
    let captured = wire("anthropic_count_tokens_request.captured.json");
    let prompt = Prompt {
        system: None,
        user: captured["body"]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .into(),
    };
    let count = counter
        .count_call(&spec(&prompt, &schema, None))
        .await
        .unwrap();
    // The JSON answer goes in output_config, which count_tokens does not take.
    assert_eq!(
        count,
        Count {
            tokens: 431,
            exact: false
        }
    );
    // With tools, forcing a call: no answer schema, every part of the request counted.
    let c = weather();
    let count = counter
        .count_call(&spec(&prompt, &schema, Some(&c)))
        .await
        .unwrap();
    assert!(count.exact);
    let sent = bodies(&server).await;
    assert_eq!(sent[0], captured["body"]);
    assert_eq!(sent[1]["system"], c.messages[0].content.clone().unwrap());
    assert_eq!(sent[1]["tools"][0]["name"], "get_current_weather");
    assert_eq!(sent[1]["tool_choice"], json!({"type": "any"}));
    assert!(sent[1].get("max_tokens").is_none());
    let headers = &server.received_requests().await.unwrap()[1].headers;
    assert_eq!(headers.get("anthropic-version").unwrap(), "2023-06-01");
}

#[tokio::test]
async fn gemini_count_tokens_takes_contents_alone_or_the_whole_request() {
    let server = counting(
        "/v1beta/models/gemini-2.5-flash:countTokens",
        json!({"totalTokens": 77}),
    )
    .await;
    let toml = format!(
        "kind = \"gemini\"\nmodel = \"gemini-2.5-flash\"\nbase_url = \"{}\"\nstructured_output = \"prompt\"\n[tokenizer]\nkind = \"provider\"\n",
        server.uri()
    );
    let counter = ProviderCounter::new(&config("gemini", &toml)).unwrap();
    let schema = json!({"type": "object"});
    let captured = wire("gemini_counttokens_request.captured.json");
    let prompt = Prompt {
        system: None,
        user: captured["body"]["contents"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .into(),
    };
    let count = counter
        .count_call(&spec(&prompt, &schema, None))
        .await
        .unwrap();
    assert_eq!(
        count,
        Count {
            tokens: 77,
            exact: true
        }
    );
    let c = weather();
    counter
        .count_call(&spec(&prompt, &schema, Some(&c)))
        .await
        .unwrap();
    let sent = bodies(&server).await;
    assert_eq!(sent[0], captured["body"]);
    let inner = &sent[1]["generateContentRequest"];
    assert_eq!(inner["model"], "models/gemini-2.5-flash");
    assert_eq!(
        inner["tools"][0]["functionDeclarations"][0]["name"],
        "get_current_weather"
    );
    assert_eq!(inner["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
    assert!(inner["systemInstruction"].is_object());
}

#[tokio::test]
async fn llama_cpp_applies_its_template_to_the_messages_and_tools() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/apply-template"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"prompt": "<rendered>"})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/tokenize"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"tokens": [1, 2, 3, 4, 5]})))
        .mount(&server)
        .await;
    let toml = format!(
        "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"{}\"\n[tokenizer]\nkind = \"provider\"\n",
        server.uri()
    );
    let counter = ProviderCounter::new(&config("llamacpp", &toml)).unwrap();
    let (prompt, schema) = (
        Prompt {
            system: None,
            user: String::new(),
        },
        json!({}),
    );
    let c = weather();
    let count = counter
        .count_call(&spec(&prompt, &schema, Some(&c)))
        .await
        .unwrap();
    assert_eq!(
        count,
        Count {
            tokens: 5,
            exact: true
        }
    );
    let sent = bodies(&server).await;
    assert_eq!(sent[0]["messages"], Value::Array(c.openai_messages()));
    assert_eq!(sent[0]["tools"], Value::Array(c.openai_tools()));
    assert_eq!(sent[0]["tool_choice"], "required");
    assert_eq!(sent[1]["content"], "<rendered>");
}

#[tokio::test]
async fn responses_input_tokens_counts_the_input_items_and_tools() {
    let server = counting(
        "/v1/responses/input_tokens",
        common::body_of(&wire("openai_responses_input_tokens_response.json")),
    )
    .await;
    let toml = format!(
        "kind = \"openai-responses\"\nmodel = \"gpt-5\"\nbase_url = \"{}\"\n[tokenizer]\nkind = \"provider\"\n",
        server.uri()
    );
    let counter = ProviderCounter::new(&config("responses", &toml)).unwrap();
    let (prompt, schema) = (
        Prompt {
            system: None,
            user: String::new(),
        },
        json!({}),
    );
    let c = weather();
    let count = counter
        .count_call(&spec(&prompt, &schema, Some(&c)))
        .await
        .unwrap();
    assert_eq!(
        count,
        Count {
            tokens: 11,
            exact: true
        }
    );
    let sent = &bodies(&server).await[0];
    assert_eq!(sent["model"], "gpt-5");
    assert_eq!(sent["tools"][0]["name"], "get_current_weather");
    assert!(sent.get("max_output_tokens").is_none() && sent.get("store").is_none());
}

#[test]
fn kinds_without_a_count_endpoint_are_refused_with_the_ones_that_have_one() {
    let problems = conform_config::ProviderConfig::parse(
        Path::new("providers/o.toml"),
        "kind = \"ollama\"\nmodel = \"m\"\n[tokenizer]\nkind = \"provider\"\n",
    )
    .unwrap_err();
    let message = problems.to_string();
    assert!(
        message.contains("Anthropic count_tokens, Gemini countTokens"),
        "{message}"
    );
}
