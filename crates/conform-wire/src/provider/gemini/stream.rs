//! Gemini streams (`:streamGenerateContent?alt=sse`): every `data:` chunk is a
//! `GenerateContentResponse` holding the next parts of the first candidate; the last one
//! carries `finishReason` (and the final `usageMetadata`). There is no sentinel: a stream
//! whose last chunk has no `finishReason` was cut off (`stream_truncated`). An error
//! arrives as a chunk with an `error` object, or as a bare error object after the data
//! lines; it is classified as the matching error status would be.

use serde_json::{Value, json};

use super::{decode_response, error_object, model_of, usage_of};
use crate::provider::error::{CallError, ErrorKind};
use crate::provider::{Reply, sse, stream};

/// Folds a complete event-stream body into one reply. A stream that fails part-way keeps,
/// on its error, the usage and model its chunks had said.
pub(crate) fn fold(body: &[u8]) -> Result<Reply, CallError> {
    let mut whole = Whole::default();
    let folded = collect(body, &mut whole);
    let value = whole.value();
    folded.and_then(|()| decode_response(&value)).map_err(|e| {
        e.keep_served(usage_of(&value), model_of(&value), None)
            .keep_text(Some(whole.text()))
    })
}

/// Whether a chunk carries a piece of the answer: text that is not a thought, or a call.
pub(crate) fn carries_answer(_event: &str, chunk: &Value) -> bool {
    chunk
        .pointer("/candidates/0/content/parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|part| {
            part.get("thought").and_then(Value::as_bool) != Some(true)
                && (stream::has_text(part.get("text")) || part.get("functionCall").is_some())
        })
}

/// The response the chunks add up to.
#[derive(Debug, Default)]
struct Whole {
    parts: Vec<Value>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    model: Option<Value>,
    prompt_feedback: Option<Value>,
    /// Whether any chunk had a candidate.
    candidates: bool,
}

impl Whole {
    /// The answer's text so far: the parts that are not thoughts.
    fn text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect()
    }

    fn value(&self) -> Value {
        let mut value = json!({});
        if self.candidates {
            let mut candidate = json!({"content": {"parts": self.parts, "role": "model"}});
            if let Some(reason) = &self.finish_reason {
                candidate["finishReason"] = reason.clone();
            }
            value["candidates"] = json!([candidate]);
        }
        for (key, field) in [
            ("usageMetadata", &self.usage),
            ("modelVersion", &self.model),
            ("promptFeedback", &self.prompt_feedback),
        ] {
            if let Some(v) = field {
                value[key] = v.clone();
            }
        }
        value
    }
}

fn collect(body: &[u8], whole: &mut Whole) -> Result<(), CallError> {
    let events = sse::events(body)?;
    let mut last_finished = false;
    for event in &events {
        let chunk = sse::json(event)?;
        if let Some(err) = classified(&chunk) {
            return Err(err);
        }
        whole.usage = chunk.get("usageMetadata").cloned().or(whole.usage.take());
        whole.model = chunk.get("modelVersion").cloned().or(whole.model.take());
        if let Some(feedback) = chunk.get("promptFeedback") {
            whole.prompt_feedback = Some(feedback.clone());
        }
        last_finished = false;
        if let Some(candidate) = chunk.pointer("/candidates/0") {
            whole.candidates = true;
            let parts = candidate
                .pointer("/content/parts")
                .and_then(Value::as_array);
            whole.parts.extend(parts.into_iter().flatten().cloned());
            if let Some(reason) = candidate.get("finishReason").filter(|r| !r.is_null()) {
                whole.finish_reason = Some(reason.clone());
                last_finished = true;
            }
        } else if chunk.pointer("/promptFeedback/blockReason").is_some() {
            // A blocked prompt is answered by one chunk with no candidate at all.
            last_finished = true;
        }
    }
    // A failed stream may end with a bare, pretty-printed error object, outside every
    // event: it is the text that is not a field line.
    if let Some(err) = trailing(body).as_ref().and_then(classified) {
        return Err(err);
    }
    if last_finished {
        Ok(())
    } else {
        Err(stream::truncated(
            "a last chunk with a `finishReason`",
            events.len(),
        ))
    }
}

/// An error object, classified the vendor's way, with the status it names.
fn classified(value: &Value) -> Option<CallError> {
    let (kind, message, code) = error_object(value)?;
    let mut err = CallError::new(kind.unwrap_or(ErrorKind::ServerError), message);
    err.status = code;
    Some(err)
}

fn trailing(body: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?;
    let rest: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| {
            !["data:", "event:", "id:", "retry:", ":"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    if rest.is_empty() {
        return None;
    }
    serde_json::from_str(&rest.join("\n")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::FinishKind;

    fn chunk(text: &str, finish: Option<&str>) -> String {
        let mut c = json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}}],
            "usageMetadata": {"promptTokenCount": 7}, "modelVersion": "gemini-x"});
        if let Some(f) = finish {
            c["candidates"][0]["finishReason"] = json!(f);
            c["usageMetadata"]["candidatesTokenCount"] = json!(3);
        }
        format!("data: {c}\r\n\r\n")
    }

    #[test]
    fn chunks_fold_into_one_candidate() {
        let body = [
            chunk("{\"a\"", None),
            chunk(":1}", None),
            chunk("", Some("STOP")),
        ]
        .concat();
        let reply = fold(body.as_bytes()).unwrap();
        assert_eq!(reply.text, "{\"a\":1}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
        assert_eq!(reply.usage.output_tokens, Some(3));
        assert_eq!(reply.served_model.as_deref(), Some("gemini-x"));
    }

    #[test]
    fn no_final_finish_reason_is_truncated() {
        let body = [chunk("{\"a\"", None), chunk(":1}", None)].concat();
        let err = fold(body.as_bytes()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::StreamTruncated);
        assert_eq!(err.usage().prompt_tokens, Some(7));
    }

    #[test]
    fn an_error_chunk_is_classified_by_its_status() {
        let body = [
            chunk("{", None),
            "data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}\n\n".into(),
        ]
        .concat();
        let err = fold(body.as_bytes()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Overloaded);
        assert_eq!(err.status, Some(503));
    }
}
