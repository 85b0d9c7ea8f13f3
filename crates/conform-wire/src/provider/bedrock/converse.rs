//! Bedrock's Converse API: one request shape for every model on Bedrock.
//!
//! A request is `{messages, system, inferenceConfig, toolConfig, outputConfig}`: each
//! message's `content` a list of blocks (`{text}`, `{toolUse: {toolUseId, name, input}}`,
//! `{toolResult: {toolUseId, content, status}}`), the system prompt a list of `{text}`,
//! `maxTokens` and `temperature` in `inferenceConfig`, tools as `toolSpec`s with their
//! schema in `inputSchema.json`, and a structured answer either as a forced tool
//! (`toolChoice: {tool: {name}}`) or as `outputConfig.textFormat` with the schema as a
//! string (`{type: "json_schema", structure: {jsonSchema: {schema, name}}}`).
//!
//! The answer is `{output: {message: {role, content}}, stopReason, usage, metrics}`;
//! `stopReason` is `end_turn`, `stop_sequence`, `tool_use`, `max_tokens`,
//! `model_context_window_exceeded`, or a filter's `content_filtered` or
//! `guardrail_intervened` (never a refusal). It names no model: the model is the one the
//! address named.

use serde_json::{Map, Value, json};

use crate::provider::error::{CallError, ErrorKind};
use crate::provider::{CallSpec, Finish, FinishKind, Reply, ToolCall, Usage, wire_schema};
use conform_config::conversation::{Message, Role, Tool, ToolChoice};
use conform_config::{ProviderConfig, StructuredOutput};

/// The request body for one call.
pub(super) fn body(call: &CallSpec<'_>, config: &ProviderConfig) -> Value {
    let mut body = Map::new();
    let messages = match call.conversation {
        Some(c) => Value::Array(messages(c.turns())),
        None => json!([{"role": "user", "content": [{"text": call.prompt.user}]}]),
    };
    body.insert("messages".into(), messages);
    if let Some(system) = call.system() {
        body.insert("system".into(), json!([{ "text": system }]));
    }
    let mut inference = Map::new();
    inference.insert("maxTokens".into(), json!(config.max_output_tokens));
    if config.sends_temperature() {
        inference.insert("temperature".into(), json!(config.temperature));
    }
    body.insert("inferenceConfig".into(), Value::Object(inference));
    let mut tools: Vec<Value> = call.tools().iter().map(tool_spec).collect();
    let mut choice = call
        .conversation
        .and_then(|c| tool_choice(c.tool_choice.as_ref()));
    let schema = wire_schema(call.schema);
    let output = json!({"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
        "schema": schema.to_string(), "name": call.schema_name}}}});
    match config.structured_output {
        _ if !call.wants_json() => {}
        StructuredOutput::JsonSchema => {
            body.insert("outputConfig".into(), output);
        }
        // The request declares tools of its own: the answer cannot be one more forced
        // tool, so it is asked for with the schema instead.
        StructuredOutput::Tool if !tools.is_empty() => {
            body.insert("outputConfig".into(), output);
        }
        StructuredOutput::Tool => {
            tools.push(json!({"toolSpec": {"name": call.schema_name,
                "description": "Return the answer", "inputSchema": {"json": schema}}}));
            choice = Some(json!({"tool": {"name": call.schema_name}}));
        }
        // Refused at configuration time: Bedrock has no JSON mode.
        StructuredOutput::JsonObject | StructuredOutput::Prompt => {}
    }
    if !tools.is_empty() {
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = choice {
            config.insert("toolChoice".into(), choice);
        }
        body.insert("toolConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// A declared tool as Converse takes it.
fn tool_spec(tool: &Tool) -> Value {
    json!({"toolSpec": {"name": tool.name(), "description": tool.description(),
        "inputSchema": {"json": wire_schema(tool.parameters())}}})
}

/// `auto`, `any` (OpenAI's `required`), or `tool` by name. Converse has no `none`: such
/// a request leaves the choice to the model (`auto`).
fn tool_choice(choice: Option<&ToolChoice>) -> Option<Value> {
    Some(match choice? {
        ToolChoice::Auto | ToolChoice::None => json!({"auto": {}}),
        ToolChoice::Required => json!({"any": {}}),
        ToolChoice::Tool(name) => json!({"tool": {"name": name}}),
    })
}

/// The conversation after its system prompt: an assistant's calls as `toolUse` blocks
/// after its text; the results of one turn's calls as `toolResult` blocks in one user
/// message (with `status: "error"` for a failed tool), to which a user message that
/// follows them is added as a text block. Converse refuses an empty text block, so a
/// turn without text has none.
fn messages(turns: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(turns.len());
    let mut results: Vec<Value> = Vec::new();
    for m in turns {
        match m.role {
            Role::Tool => {
                let status = if m.is_error { "error" } else { "success" };
                results.push(json!({"toolResult": {
                    "toolUseId": m.tool_call_id.clone().unwrap_or_default(),
                    "content": [{"text": m.content_str()}], "status": status}}));
            }
            Role::User if !results.is_empty() => {
                results.push(json!({ "text": m.content_str() }));
                out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
            }
            role => {
                if !results.is_empty() {
                    out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
                }
                let role = if role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                let mut blocks = Vec::with_capacity(m.tool_calls.len() + 1);
                if !m.content_str().is_empty() || m.tool_calls.is_empty() {
                    blocks.push(json!({ "text": m.content_str() }));
                }
                for call in &m.tool_calls {
                    blocks.push(json!({"toolUse": {"toolUseId": call.id,
                        "name": call.function.name,
                        "input": Value::Object(call.arguments_object().unwrap_or_default())}}));
                }
                out.push(json!({"role": role, "content": blocks}));
            }
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "content": results}));
    }
    out
}

/// Whether a document is a Converse answer (rather than a model's own body).
pub(super) fn is_converse(value: &Value) -> bool {
    value.get("output").is_some() || value.get("stopReason").is_some()
}

/// Reads a Converse answer.
pub(super) fn decode(value: &Value) -> Result<Reply, CallError> {
    let invalid = |what: &str| CallError::new(ErrorKind::InvalidResponse, what.to_string());
    let content = value
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("the response has no output.message.content"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        if let Some(piece) = block.get("text").and_then(Value::as_str) {
            text.push_str(piece);
        } else if let Some(call) = block.get("toolUse") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let id = call
                .get("toolUseId")
                .and_then(Value::as_str)
                .map(str::to_string);
            let input = call.get("input").cloned().unwrap_or(json!({}));
            tool_calls.push(ToolCall::from_value(id, name, &input));
        }
    }
    let raw = value.get("stopReason").and_then(Value::as_str);
    let kind = match raw {
        Some("end_turn" | "stop_sequence") => FinishKind::Stop,
        Some("tool_use") => FinishKind::ToolUse,
        Some("max_tokens" | "model_context_window_exceeded") => FinishKind::Length,
        Some("content_filtered" | "guardrail_intervened") => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    };
    let text = Reply::text_or_first_arguments(text, &tool_calls);
    Ok(Reply {
        text,
        tool_calls,
        finish: Finish::new(kind, raw),
        refusal: None,
        usage: usage(value.get("usage")),
        served_model: None,
        system_fingerprint: None,
    })
}

/// `inputTokens` plus the cache's reads and writes where the answer counts them apart.
pub(super) fn usage(usage: Option<&Value>) -> Usage {
    let count = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
    let cached =
        count("cacheReadInputTokens").unwrap_or(0) + count("cacheWriteInputTokens").unwrap_or(0);
    Usage {
        prompt_tokens: count("inputTokens").map(|input| input + cached),
        output_tokens: count("outputTokens"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_are_read_as_their_finish() {
        let answer = |reason: &str| {
            json!({"output": {"message": {"role": "assistant", "content": [{"text": "{}"}]}},
                "stopReason": reason, "usage": {"inputTokens": 3, "outputTokens": 2,
                "cacheReadInputTokens": 4}})
        };
        for (reason, kind) in [
            ("end_turn", FinishKind::Stop),
            ("tool_use", FinishKind::ToolUse),
            ("max_tokens", FinishKind::Length),
            ("content_filtered", FinishKind::ContentFilter),
            ("guardrail_intervened", FinishKind::ContentFilter),
            ("something_new", FinishKind::Other),
        ] {
            let reply = decode(&answer(reason)).unwrap();
            assert_eq!(reply.finish.kind, kind, "{reason}");
            assert_eq!(reply.usage.prompt_tokens, Some(7));
        }
        assert_eq!(
            decode(&json!({"stopReason": "end_turn"})).unwrap_err().kind,
            ErrorKind::InvalidResponse
        );
    }
}
