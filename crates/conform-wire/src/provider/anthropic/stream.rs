//! Anthropic Messages streams (`stream: true`): typed events folded into the message
//! they describe, then decoded like a whole one.
//!
//! `message_start` carries the message skeleton (model, input usage); each content block
//! opens with `content_block_start` and grows by `content_block_delta` (`text_delta`, or
//! `input_json_delta.partial_json` for a tool's input); `message_delta` says the
//! `stop_reason` and the output usage; the end is `message_stop`. A stream without it was
//! cut off (`stream_truncated`); an `event: error` inside the 200 is classified as the
//! error status of its type would be (`overloaded_error` is an overload).

use serde_json::{Map, Value, json};

use super::{decode_message, error_object, model_of, usage_of};
use crate::provider::error::{CallError, ErrorKind};
use crate::provider::{Reply, sse, stream};

/// Folds a complete event-stream body into one reply. A stream that fails part-way keeps,
/// on its error, the usage and model its events had said.
pub(crate) fn fold(body: &[u8]) -> Result<Reply, CallError> {
    let mut message = Message::default();
    let folded = collect(body, &mut message);
    let value = message.value();
    folded.and_then(|()| decode_message(&value)).map_err(|e| {
        e.keep_served(usage_of(&value), model_of(&value), None)
            .keep_text(text_of(&value))
    })
}

/// The text blocks of a message built so far, joined.
fn text_of(message: &Value) -> Option<String> {
    let blocks = message.get("content")?.as_array()?;
    let text: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    Some(text)
}

/// Whether an event carries a piece of the answer: text, or a tool's input.
pub(crate) fn carries_answer(_event: &str, data: &Value) -> bool {
    data.get("type").and_then(Value::as_str) == Some("content_block_delta")
        && data.get("delta").is_some_and(|d| {
            stream::has_text(d.get("text")) || stream::has_text(d.get("partial_json"))
        })
}

/// The message as the events have built it so far.
#[derive(Debug, Default)]
struct Message {
    skeleton: Map<String, Value>,
    /// Content blocks by index; a tool block's input arrives as JSON text in pieces.
    blocks: Vec<(Value, String)>,
    usage: Map<String, Value>,
}

impl Message {
    /// The whole message, as a non-streamed response would have carried it.
    fn value(&self) -> Value {
        let mut message = self.skeleton.clone();
        let content: Vec<Value> = self
            .blocks
            .iter()
            .map(|(block, partial)| {
                let mut block = block.clone();
                if block.get("type").and_then(Value::as_str) == Some("tool_use")
                    && !partial.is_empty()
                {
                    // A tool input cut mid-JSON stays as text: decoding it fails loudly.
                    let input = serde_json::from_str(partial)
                        .unwrap_or_else(|_| Value::String(partial.clone()));
                    block["input"] = input;
                }
                block
            })
            .collect();
        message.insert("content".into(), Value::Array(content));
        message.insert("usage".into(), Value::Object(self.usage.clone()));
        Value::Object(message)
    }
}

fn collect(body: &[u8], message: &mut Message) -> Result<(), CallError> {
    let events = sse::events(body)?;
    for event in &events {
        let data = sse::json(event)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(&event.name);
        match kind {
            "message_start" => {
                if let Some(start) = data.get("message").and_then(Value::as_object) {
                    message.skeleton = start.clone();
                    merge(&mut message.usage, start.get("usage"));
                }
            }
            "content_block_start" => {
                let index = index_of(&data)?;
                let block = data.get("content_block").cloned().unwrap_or(json!({}));
                if message.blocks.len() <= index {
                    message.blocks.resize(index + 1, (json!({}), String::new()));
                }
                message.blocks[index] = (block, String::new());
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let Some((block, partial)) = message.blocks.get_mut(index) else {
                    return Err(CallError::new(
                        ErrorKind::InvalidResponse,
                        format!("a content_block_delta for block {index}, which never started"),
                    ));
                };
                let delta = data.get("delta");
                let text = |name: &str| delta.and_then(|d| d.get(name)).and_then(Value::as_str);
                if let Some(piece) = text("text") {
                    let so_far = block.get("text").and_then(Value::as_str).unwrap_or("");
                    block["text"] = Value::String(format!("{so_far}{piece}"));
                }
                if let Some(piece) = text("partial_json") {
                    partial.push_str(piece);
                }
            }
            "message_delta" => {
                if let Some(delta) = data.get("delta").and_then(Value::as_object) {
                    for (key, value) in delta {
                        message.skeleton.insert(key.clone(), value.clone());
                    }
                }
                merge(&mut message.usage, data.get("usage"));
            }
            "message_stop" => return Ok(()),
            "error" => {
                let (kind, text) = error_object(&data).unwrap_or((
                    ErrorKind::ServerError,
                    format!(
                        "an error event: {}",
                        super::error::excerpt(event.data.as_bytes())
                    ),
                ));
                return Err(CallError::new(kind, text));
            }
            // `ping`, `content_block_stop` and event types added later carry nothing
            // the answer needs.
            _ => {}
        }
    }
    Err(stream::truncated("`message_stop`", events.len()))
}

fn index_of(data: &Value) -> Result<usize, CallError> {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < 1024)
        .ok_or_else(|| {
            CallError::new(
                ErrorKind::InvalidResponse,
                "a content block event without a usable `index`",
            )
        })
}

/// Later usage counts replace earlier ones (`message_delta` repeats them cumulatively).
fn merge(usage: &mut Map<String, Value>, more: Option<&Value>) {
    if let Some(more) = more.and_then(Value::as_object) {
        for (key, value) in more {
            usage.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::FinishKind;

    fn event(data: Value) -> String {
        format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap()
        )
    }

    fn start() -> String {
        event(
            json!({"type": "message_start", "message": {"model": "claude-x", "content": [],
            "stop_reason": null, "usage": {"input_tokens": 9, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        )
    }

    #[test]
    fn text_deltas_fold_into_the_message() {
        let body = [
            start(),
            event(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            event(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "{\"a\":"}}),
            ),
            event(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "1}"}}),
            ),
            event(
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
            ),
            event(json!({"type": "message_stop"})),
        ]
        .concat();
        let reply = fold(body.as_bytes()).unwrap();
        assert_eq!(reply.text, "{\"a\":1}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
        assert_eq!(reply.usage.prompt_tokens, Some(9));
        assert_eq!(reply.usage.output_tokens, Some(4));
        assert_eq!(reply.served_model.as_deref(), Some("claude-x"));
    }

    #[test]
    fn a_stream_without_message_stop_is_truncated_and_keeps_what_it_said() {
        let body = [
            start(),
            event(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
        ]
        .concat();
        let err = fold(body.as_bytes()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::StreamTruncated);
        assert_eq!(err.usage().prompt_tokens, Some(9));
        assert_eq!(err.served_model(), Some("claude-x"));
    }

    #[test]
    fn a_delta_for_a_block_that_never_started_is_invalid() {
        let body = [
            start(),
            event(
                json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "x"}}),
            ),
        ]
        .concat();
        assert_eq!(
            fold(body.as_bytes()).unwrap_err().kind,
            ErrorKind::InvalidResponse
        );
    }
}
