//! A streamed body where one JSON document was expected.
//!
//! Every call asks for a single JSON response, but a proxy that forces streaming, a
//! server that ignores `stream: false` (Ollama streams by default), or a cut-over to a
//! streaming endpoint answers with server-sent events or NDJSON. That is not a model
//! answer: it is named as what it is, and when the stream carries an error event
//! (Anthropic's `event: error`, Ollama's `{"error": …}` line, Gemini's trailing error
//! object) that error is classified the vendor's way instead.

use serde_json::Value;

use super::error::{CallError, ErrorKind};

/// When `body` is an SSE or NDJSON stream: the vendor's classification of its error
/// event, if `classify` recognizes one, else a [`ErrorKind::NonJsonBody`] that says what
/// arrived. `None` when the body is not a stream at all.
pub(crate) fn reject(
    body: &[u8],
    classify: impl Fn(&Value) -> Option<CallError>,
) -> Option<CallError> {
    let text = std::str::from_utf8(body).ok()?;
    let (shape, documents) = documents(text)?;
    let error = documents.iter().find_map(|doc| {
        classify(doc).map(|mut e| {
            e.message = format!("an error event in a streamed body: {}", e.message);
            e
        })
    });
    Some(error.unwrap_or_else(|| {
        CallError::new(
            ErrorKind::NonJsonBody,
            format!(
                "a streamed body ({shape}, {} events) where one JSON response was expected: is a proxy forcing streaming, or was `stream: false` dropped?",
                documents.len()
            ),
        )
    }))
}

/// The JSON documents of a stream, and its shape.
fn documents(text: &str) -> Option<(&'static str, Vec<Value>)> {
    if super::sse::is_event_stream(text.as_bytes()) {
        let mut docs: Vec<Value> = super::sse::events(text.as_bytes())
            .unwrap_or_default()
            .iter()
            .filter_map(|event| serde_json::from_str(event.data.trim()).ok())
            .collect();
        // Gemini ends a failed stream with a bare, pretty-printed error object, which the
        // event grammar ignores: it is the text outside every field line.
        let rest: String = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !is_field_line(l))
            .collect::<Vec<_>>()
            .join("\n");
        if let Ok(trailing) = serde_json::from_str::<Value>(&rest) {
            docs.push(trailing);
        }
        return Some(("server-sent events", docs));
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let docs: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // NDJSON: more than one line, and the lines (not the whole) are JSON.
    (lines.len() > 1 && !docs.is_empty() && docs.len() * 2 >= lines.len())
        .then_some(("NDJSON", docs))
}

fn is_field_line(line: &str) -> bool {
    ["data:", "event:", "id:", "retry:", ":"]
        .iter()
        .any(|p| line.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_error(_: &Value) -> Option<CallError> {
        None
    }

    #[test]
    fn plain_garbage_is_not_a_stream() {
        assert!(reject(b"hello world", no_error).is_none());
        assert!(reject(b"{\"a\": 1", no_error).is_none());
    }

    #[test]
    fn sse_and_ndjson_are_named() {
        let sse = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";
        let e = reject(sse, no_error).unwrap();
        assert_eq!(e.kind, ErrorKind::NonJsonBody);
        assert!(e.message.contains("server-sent events"), "{e}");
        let nd = b"{\"done\": false}\n{\"done\": true}\n";
        assert!(reject(nd, no_error).unwrap().message.contains("NDJSON"));
    }

    #[test]
    fn an_error_event_is_classified_by_the_vendor() {
        let nd = b"{\"done\": false}\n{\"error\": \"boom\"}\n";
        let e = reject(nd, |v| {
            v.get("error")
                .and_then(Value::as_str)
                .map(|m| CallError::new(ErrorKind::ServerError, m))
        })
        .unwrap();
        assert_eq!(e.kind, ErrorKind::ServerError);
        assert!(e.message.ends_with("boom"));
    }
}
