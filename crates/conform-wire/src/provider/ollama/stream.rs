//! Ollama streams (`stream: true`, Ollama's default): NDJSON, one chat object per line,
//! each with the next piece of `message.content`; the last says `done: true` with
//! `done_reason` and the token counts. A stream without that line was cut off
//! (`stream_truncated`); an `{"error": "…"}` line inside the 200 is classified as the
//! matching error status would be.

use serde_json::{Value, json};

use super::{decode_chat, error_message, kind_of_message, model_of, usage_of};
use crate::provider::error::CallError;
use crate::provider::{Reply, stream};

/// Folds a complete NDJSON body into one reply. A stream that fails part-way keeps, on
/// its error, the model (and any counts) its lines had said.
pub(crate) fn fold(body: &[u8]) -> Result<Reply, CallError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut last = json!({});
    let folded = collect(body, &mut text, &mut calls, &mut last);
    let mut whole = last;
    let said = (!text.is_empty()).then(|| text.clone());
    whole["message"] = json!({"role": "assistant", "content": text});
    // A call arrives whole in one line, before the `done` line, which has none.
    if !calls.is_empty() {
        whole["message"]["tool_calls"] = Value::Array(calls);
    }
    folded.and_then(|()| decode_chat(&whole)).map_err(|e| {
        e.keep_served(usage_of(&whole), model_of(&whole), None)
            .keep_text(said)
    })
}

/// Whether a line carries a piece of the answer.
pub(crate) fn carries_answer(_event: &str, line: &Value) -> bool {
    stream::has_text(line.pointer("/message/content"))
        || line.pointer("/message/tool_calls").is_some()
}

fn collect(
    body: &[u8],
    text: &mut String,
    calls: &mut Vec<Value>,
    last: &mut Value,
) -> Result<(), CallError> {
    let lines = stream::ndjson(body)?;
    for line in &lines {
        if let Some(message) = error_message(line) {
            return Err(CallError::new(kind_of_message(None, &message), message));
        }
        if let Some(piece) = line.pointer("/message/content").and_then(Value::as_str) {
            text.push_str(piece);
        }
        if let Some(Value::Array(more)) = line.pointer("/message/tool_calls") {
            calls.extend(more.iter().cloned());
        }
        *last = line.clone();
        if line.get("done").and_then(Value::as_bool) == Some(true) {
            return Ok(());
        }
    }
    Err(stream::truncated("a line with `done: true`", lines.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ErrorKind, FinishKind};

    #[test]
    fn lines_fold_into_one_message_with_the_final_counts() {
        let body = concat!(
            "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"{\\\"a\\\"\"},\"done\":false}\n",
            "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\":1}\"},\"done\":false}\n",
            "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":26,\"eval_count\":5}\n",
        );
        let reply = fold(body.as_bytes()).unwrap();
        assert_eq!(reply.text, "{\"a\":1}");
        assert_eq!(reply.finish.kind, FinishKind::Stop);
        assert_eq!(reply.usage.prompt_tokens, Some(26));
        assert_eq!(reply.served_model.as_deref(), Some("m"));
    }

    #[test]
    fn a_streamed_tool_call_is_kept() {
        let body = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/wire/ollama_chat_tools_stream_ndjson_first_and_final_chunks.txt"
        ))
        .unwrap();
        // The recorded transcript, one object per line as the server sends it.
        let lines: String = body
            .split("// ")
            .filter_map(|chunk| chunk.split_once('\n').map(|(_, json)| json))
            .map(|json| {
                let v: Value = serde_json::from_str(json.trim()).unwrap();
                format!("{v}\n")
            })
            .collect();
        let reply = fold(lines.as_bytes()).unwrap();
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.tool_calls[0].name, "get_weather");
        assert_eq!(
            reply.tool_calls[0].arguments,
            Some(json!({"city": "Tokyo"}))
        );
        assert_eq!(reply.usage.prompt_tokens, Some(169));
    }

    #[test]
    fn no_done_line_is_truncated_and_an_error_line_is_classified() {
        let cut = "{\"model\":\"m\",\"message\":{\"content\":\"{\"},\"done\":false}\n";
        let err = fold(cut.as_bytes()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::StreamTruncated);
        assert_eq!(err.served_model(), Some("m"));
        let failed =
            format!("{cut}{{\"error\":\"an error was encountered while running the model\"}}\n");
        assert_eq!(
            fold(failed.as_bytes()).unwrap_err().kind,
            ErrorKind::ServerError
        );
    }
}
