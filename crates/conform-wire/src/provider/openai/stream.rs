//! Chat Completions streams (`stream: true`): `data: {chunk}` events folded into one
//! [`Reply`], as if the answer had come whole.
//!
//! Content and refusal arrive as deltas of the first choice; `finish_reason` on its last
//! chunk; usage on an extra chunk with `choices: []` (with `stream_options.include_usage`);
//! the end is `data: [DONE]`. A stream without it, or without a `finish_reason` before
//! it, was cut off (`stream_truncated`), however plausible its text; a
//! `data: {"error": …}` chunk inside the 200 is the call's error.
//!
//! Tool calls arrive in pieces keyed by `index`: the first delta of a call carries its
//! `id`, `type` and `function.name` with `arguments: ""`, later ones only `index` and an
//! `arguments` fragment split anywhere (mid-token, mid-string). They are accumulated per
//! index and parsed only once the stream is complete. vLLM repeats `function.name` on
//! every delta of a named-choice stream, so a name is taken once, never appended.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{ChatParts, error_in_body, usage};
use crate::provider::error::{CallError, ErrorKind};
use crate::provider::{Reply, ToolCall, sse, stream};

/// A tool call being assembled from its deltas.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Folds a complete event-stream body into one reply. A stream that fails part-way
/// keeps, on its error, the usage, model and fingerprint its chunks had said.
pub(crate) fn fold(body: &[u8]) -> Result<Reply, CallError> {
    let mut parts = ChatParts::default();
    let folded = collect(body, &mut parts);
    let (usage, model, fingerprint, text) = (
        parts.usage,
        parts.served_model.clone(),
        parts.system_fingerprint.clone(),
        parts.content.clone(),
    );
    folded
        .and_then(|()| parts.into_reply())
        .map_err(|e| e.keep_served(usage, model, fingerprint).keep_text(text))
}

fn collect(body: &[u8], parts: &mut ChatParts) -> Result<(), CallError> {
    let events = sse::events(body)?;
    let (mut saw_choice, mut done) = (false, false);
    let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
    for event in &events {
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let chunk = sse::json(event)?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(error_in_body(err));
        }
        let text = |name: &str| chunk.get(name).and_then(Value::as_str).map(str::to_string);
        parts.served_model = text("model").or(parts.served_model.take());
        parts.system_fingerprint = text("system_fingerprint").or(parts.system_fingerprint.take());
        if let Some(counts) = chunk.get("usage").filter(|u| u.is_object()) {
            parts.usage = usage(Some(counts));
        }
        let Some(choice) = first(chunk.get("choices")) else {
            continue;
        };
        saw_choice = true;
        let delta = choice.get("delta");
        append(&mut parts.content, delta.and_then(|d| d.get("content")));
        append(&mut parts.refusal, delta.and_then(|d| d.get("refusal")));
        for delta in delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = delta.get("index").and_then(Value::as_u64).unwrap_or(0);
            let call = calls.entry(index).or_default();
            let text = |pointer: &str| {
                delta
                    .pointer(pointer)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            call.id = call.id.take().or_else(|| text("/id"));
            call.name = call.name.take().or_else(|| text("/function/name"));
            match delta.pointer("/function/arguments") {
                Some(Value::String(fragment)) => call.arguments.push_str(fragment),
                // A server that sends the whole object at once.
                Some(object @ Value::Object(_)) => call.arguments.push_str(&object.to_string()),
                _ => {}
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            parts.finish_reason = Some(reason.to_string());
        }
    }
    if !done {
        return Err(stream::truncated("`data: [DONE]`", events.len()));
    }
    if !saw_choice {
        return Err(CallError::new(
            ErrorKind::InvalidResponse,
            "the event stream carried no choices",
        ));
    }
    // The last chunk of a choice says why it stopped; a proxy that lost it lost the end.
    if parts.finish_reason.is_none() {
        return Err(stream::truncated(
            "a chunk with a `finish_reason` (before `data: [DONE]`)",
            events.len(),
        ));
    }
    // The first delta of every stream says `refusal: ""` or `null`; only text is a refusal.
    if parts.refusal.as_deref() == Some("") {
        parts.refusal = None;
    }
    parts.tool_calls = calls
        .into_values()
        .filter_map(|c| Some(ToolCall::from_text(c.id, c.name?, c.arguments)))
        .collect();
    Ok(())
}

/// Whether a chunk carries a piece of the answer: content, refusal or tool arguments.
pub(crate) fn carries_answer(_event: &str, chunk: &Value) -> bool {
    let Some(delta) = first(chunk.get("choices")).and_then(|c| c.get("delta")) else {
        return false;
    };
    stream::has_text(delta.get("content"))
        || stream::has_text(delta.get("refusal"))
        || stream::has_text(
            first(delta.get("tool_calls")).and_then(|call| call.pointer("/function/arguments")),
        )
}

/// The entry with `index` 0 (the first choice, the first tool call).
fn first(list: Option<&Value>) -> Option<&Value> {
    list.and_then(Value::as_array)?
        .iter()
        .find(|item| item.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

/// Appends a string delta; `null` and absent leave the text as it was.
fn append(text: &mut Option<String>, delta: Option<&Value>) {
    if let Some(delta) = delta.and_then(Value::as_str) {
        text.get_or_insert_default().push_str(delta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::FinishKind;

    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"model\":\"m-1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    #[test]
    fn deltas_fold_into_text_with_usage_and_model() {
        let body = [
            chunk(
                r#"{"role":"assistant","content":"","refusal":null}"#,
                "null",
            ),
            chunk(r#"{"content":"{\"a\":"}"#, "null"),
            chunk(r#"{"content":"1}"}"#, "null"),
            chunk("{}", r#""stop""#),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n"
                .into(),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let reply = fold(body.as_bytes()).unwrap();
        assert_eq!(reply.text, "{\"a\":1}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
        assert_eq!(reply.usage.prompt_tokens, Some(5));
        assert_eq!(reply.usage.output_tokens, Some(3));
        assert_eq!(reply.served_model.as_deref(), Some("m-1"));
        assert_eq!(reply.refusal, None);
    }

    #[test]
    fn streamed_tool_call_arguments_are_the_answer() {
        let body = [
            chunk(
                r#"{"tool_calls":[{"index":0,"function":{"name":"f","arguments":""}}]}"#,
                "null",
            ),
            chunk(
                r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\""}}]}"#,
                "null",
            ),
            chunk(
                r#"{"tool_calls":[{"index":0,"function":{"arguments":":2}"}}]}"#,
                r#""tool_calls""#,
            ),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let reply = fold(body.as_bytes()).unwrap();
        assert_eq!(reply.text, "{\"x\":2}");
        assert_eq!(reply.finish.raw.as_deref(), Some("tool_calls"));
        // No usage chunk: unknown, never zero.
        assert_eq!(reply.usage.prompt_tokens, None);
    }

    #[test]
    fn a_stream_of_nothing_is_invalid() {
        let err = fold(b"data: [DONE]\n\n").unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidResponse);
    }

    #[test]
    fn error_chunks_are_classified_and_a_null_error_is_none() {
        let vllm = |message: &str| {
            let body = format!(
                "data: {{\"error\":{{\"message\":\"{message}\",\"type\":\"BadRequestError\",\"code\":400}}}}\n\n"
            );
            fold(body.as_bytes()).unwrap_err().kind
        };
        assert_eq!(vllm("max_tokens must be at least 1"), ErrorKind::BadRequest);
        assert_eq!(
            vllm("This model's maximum context length is 4096 tokens."),
            ErrorKind::ContextLength
        );
        let body = [
            chunk(r#"{"content":"{}"}"#, r#""stop""#)
                .replace("{\"model", "{\"error\":null,\"model"),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        assert_eq!(fold(body.as_bytes()).unwrap().text, "{}");
    }
}
