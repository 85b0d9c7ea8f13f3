//! Bedrock's streams, in AWS event-stream frames ([`super::eventstream`]), folded into
//! one reply.
//!
//! ConverseStream sends events named by `:event-type`: `messageStart`, then per content
//! block `contentBlockStart` (a `toolUse`'s id and name), `contentBlockDelta` (`text`, or a
//! piece of a tool's `input` as JSON text) and `contentBlockStop`, then `messageStop` with
//! the `stopReason`, and last `metadata` with the usage. InvokeModelWithResponseStream
//! sends `chunk` events whose `bytes` (base64) are the model's own events: Anthropic's
//! `message_start` … `message_stop`, read by the Anthropic module. A stream without its
//! terminal event (`messageStop`; Anthropic's `message_stop`) was cut off
//! (`stream_truncated`), and so was one whose last frame the body cut; an exception
//! inside it (`:message-type: exception`: `throttlingException`,
//! `modelStreamErrorException`, `validationException` …) is classified as that error
//! would be as a status.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::converse;
use super::eventstream::{self, Ending, Message};
use crate::provider::error::{CallError, ErrorKind};
use crate::provider::{Reply, stream};

/// Folds a complete body of frames into one reply.
pub(super) fn fold(body: &[u8]) -> Result<Reply, CallError> {
    let (messages, ending) = eventstream::messages(body);
    if let Ending::Corrupt(why) = &ending {
        return Err(CallError::new(
            ErrorKind::InvalidResponse,
            format!("the event stream is corrupt {why}"),
        ));
    }
    let chunks = messages
        .iter()
        .any(|m| m.header(":event-type") == Some("chunk"));
    match chunks {
        true => fold_chunks(&messages),
        false => fold_converse(&messages),
    }
}

/// The error an exception or error message carries; `None` for an event.
fn failure(message: &Message) -> Option<CallError> {
    let text = || -> String {
        serde_json::from_slice::<Value>(&message.payload)
            .ok()
            .and_then(|v| {
                (v.get("message").or_else(|| v.get("Message")))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&message.payload).into_owned())
    };
    match message.header(":message-type")? {
        "exception" => {
            let kind = message.header(":exception-type").unwrap_or_default();
            let text = text();
            Some(CallError::new(
                super::errors::kind_of(kind, &text).unwrap_or(ErrorKind::ServerError),
                format!("{kind} in the stream: {text}"),
            ))
        }
        "error" => Some(CallError::new(
            ErrorKind::ServerError,
            format!(
                "{} in the stream: {}",
                message.header(":error-code").unwrap_or("an error"),
                message.header(":error-message").unwrap_or_default()
            ),
        )),
        _ => None,
    }
}

/// The answer Converse events build, as a non-streamed Converse answer would carry it.
#[derive(Debug, Default)]
struct Building {
    /// Content blocks by index: the block so far and a tool's input text.
    blocks: Vec<(Value, String)>,
    stop: Option<Value>,
    usage: Option<Value>,
}

impl Building {
    fn value(&self) -> Value {
        let content: Vec<Value> = (self.blocks.iter())
            .map(|(block, input)| match block.get("toolUse") {
                Some(call) => {
                    let mut call = call.clone();
                    // A tool input cut mid-JSON stays text: decoding it says so.
                    call["input"] = serde_json::from_str(input)
                        .unwrap_or_else(|_| Value::String(input.clone()));
                    json!({ "toolUse": call })
                }
                None => block.clone(),
            })
            .collect();
        let mut answer = json!({"output": {"message": {"role": "assistant", "content": content}}});
        if let Some(stop) = &self.stop {
            answer["stopReason"] = stop.clone();
        }
        if let Some(usage) = &self.usage {
            answer["usage"] = usage.clone();
        }
        answer
    }

    fn text(&self) -> String {
        (self.blocks.iter())
            .filter_map(|(b, _)| b.get("text").and_then(Value::as_str))
            .collect()
    }

    fn block(&mut self, data: &Value) -> Result<&mut (Value, String), CallError> {
        let index = data
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < 1024)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::InvalidResponse,
                    "a content block event without a usable contentBlockIndex",
                )
            })?;
        if self.blocks.len() <= index {
            self.blocks.resize(index + 1, (json!({}), String::new()));
        }
        Ok(&mut self.blocks[index])
    }

    /// Takes one event; `true` at the terminal one.
    fn take(&mut self, kind: &str, data: &Value) -> Result<bool, CallError> {
        match kind {
            "contentBlockStart" => {
                if let Some(call) = data.pointer("/start/toolUse") {
                    *self.block(data)? = (json!({ "toolUse": call }), String::new());
                }
            }
            "contentBlockDelta" => {
                let delta = data.get("delta");
                let (block, input) = self.block(data)?;
                if let Some(piece) = delta.and_then(|d| d.get("text")).and_then(Value::as_str) {
                    let so_far = block.get("text").and_then(Value::as_str).unwrap_or("");
                    *block = json!({ "text": format!("{so_far}{piece}") });
                }
                if let Some(piece) = delta
                    .and_then(|d| d.pointer("/toolUse/input"))
                    .and_then(Value::as_str)
                {
                    input.push_str(piece);
                }
            }
            "messageStop" => {
                self.stop = data.get("stopReason").cloned();
                return Ok(true);
            }
            "metadata" => self.usage = data.get("usage").cloned(),
            // `messageStart`, `contentBlockStop` and event types added later carry
            // nothing the answer needs.
            _ => {}
        }
        Ok(false)
    }
}

fn fold_converse(messages: &[Message]) -> Result<Reply, CallError> {
    let mut building = Building::default();
    let mut stopped = false;
    let mut taken = || -> Result<(), CallError> {
        for message in messages {
            if let Some(error) = failure(message) {
                return Err(error);
            }
            let kind = message.header(":event-type").unwrap_or_default();
            let data: Value = serde_json::from_slice(&message.payload).map_err(|_| {
                CallError::new(
                    ErrorKind::NonJsonBody,
                    format!("a `{kind}` event whose payload is not JSON"),
                )
            })?;
            // Metadata follows messageStop: read on to it.
            stopped |= building.take(kind, &data)?;
        }
        match stopped {
            true => Ok(()),
            false => Err(stream::truncated("`messageStop`", messages.len())),
        }
    };
    let folded = taken();
    let value = building.value();
    folded.and_then(|()| converse::decode(&value)).map_err(|e| {
        e.keep_served(converse::usage(value.get("usage")), None, None)
            .keep_text(Some(building.text()))
    })
}

/// InvokeModelWithResponseStream: each chunk's model events, as the Anthropic module reads
/// a stream of them.
fn fold_chunks(messages: &[Message]) -> Result<Reply, CallError> {
    let mut events = String::new();
    for message in messages {
        if let Some(error) = failure(message) {
            // What came before is still folded, so the error keeps what was said.
            let said = crate::provider::anthropic::stream::fold(events.as_bytes()).err();
            let served = said.and_then(|e| e.served).map(|s| *s).unwrap_or_default();
            return Err(error
                .keep_served(served.usage, served.model, None)
                .keep_text(served.text));
        }
        let event = chunk_event(message)?;
        let name = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        events.push_str(&format!("event: {name}\ndata: {event}\n\n"));
    }
    crate::provider::anthropic::stream::fold(events.as_bytes())
}

/// The model's event a `chunk` carries: `{"bytes": base64 of its JSON}`.
fn chunk_event(message: &Message) -> Result<Value, CallError> {
    let unreadable =
        |what: &str| CallError::new(ErrorKind::NonJsonBody, format!("a chunk whose {what}"));
    let payload: Value =
        serde_json::from_slice(&message.payload).map_err(|_| unreadable("payload is not JSON"))?;
    let bytes = (payload.get("bytes").and_then(Value::as_str))
        .ok_or_else(|| unreadable("payload has no `bytes`"))?;
    let decoded = STANDARD
        .decode(bytes)
        .map_err(|_| unreadable("bytes are not base64"))?;
    serde_json::from_slice(&decoded).map_err(|_| unreadable("event is not JSON"))
}

/// The offset just past the first frame that carries a piece of the answer.
pub(super) fn first_answer_end(body: &[u8]) -> Option<usize> {
    let (messages, _) = eventstream::messages(body);
    messages.iter().find(|m| carries_answer(m)).map(|m| m.end)
}

fn carries_answer(message: &Message) -> bool {
    match message.header(":event-type") {
        Some("contentBlockDelta") => serde_json::from_slice::<Value>(&message.payload)
            .ok()
            .and_then(|v| v.get("delta").cloned())
            .is_some_and(|d| {
                stream::has_text(d.get("text")) || stream::has_text(d.pointer("/toolUse/input"))
            }),
        Some("chunk") => chunk_event(message)
            .is_ok_and(|e| crate::provider::anthropic::stream::carries_answer("", &e)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::FinishKind;
    use crate::provider::bedrock::eventstream::{event, exception};

    fn converse_stream() -> Vec<Vec<u8>> {
        vec![
            event("messageStart", r#"{"role":"assistant"}"#),
            event(
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"{\"a\":"}}"#,
            ),
            event(
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"1}"}}"#,
            ),
            event("contentBlockStop", r#"{"contentBlockIndex":0}"#),
            event("messageStop", r#"{"stopReason":"end_turn"}"#),
            event(
                "metadata",
                r#"{"usage":{"inputTokens":9,"outputTokens":4,"totalTokens":13},"metrics":{"latencyMs":120}}"#,
            ),
        ]
    }

    #[test]
    fn converse_events_fold_into_the_answer() {
        let reply = fold(&converse_stream().concat()).unwrap();
        assert_eq!(reply.text, "{\"a\":1}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
        assert_eq!(reply.usage.prompt_tokens, Some(9));
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_truncated_and_keeps_its_text() {
        let frames = converse_stream();
        let error = fold(&frames[..4].concat()).unwrap_err();
        assert_eq!(error.kind, ErrorKind::StreamTruncated);
        assert_eq!(error.partial_text(), Some("{\"a\":1}"));
        // Cut inside the messageStop frame itself.
        let mut body = frames[..5].concat();
        body.truncate(body.len() - 7);
        assert_eq!(fold(&body).unwrap_err().kind, ErrorKind::StreamTruncated);
    }

    #[test]
    fn an_exception_in_the_stream_is_that_error() {
        for (kind, expected) in [
            ("throttlingException", ErrorKind::RateLimited),
            ("modelStreamErrorException", ErrorKind::ServerError),
            ("validationException", ErrorKind::BadRequest),
            ("serviceUnavailableException", ErrorKind::Overloaded),
        ] {
            let body = [converse_stream()[..2].concat(), exception(kind, "it broke")].concat();
            let error = fold(&body).unwrap_err();
            assert_eq!(error.kind, expected, "{kind}");
            assert!(error.message.contains("it broke"));
        }
    }
}
