//! What every vendor's stream folding shares: the error for a stream that ended without
//! its terminal event, NDJSON lines, and where in a streamed body the first piece of the
//! answer arrived (what time to first token is measured at).
//!
//! A body is folded only once it is complete (see [`super::sse`]); the transport notes
//! when each chunk of it arrived, so a byte offset here becomes a time there.

use serde_json::Value;

use super::error::{CallError, ErrorKind};
use super::sse;

/// A stream that ended without `terminal` after `events` events: cut off, whatever its
/// text says.
pub(crate) fn truncated(terminal: &str, events: usize) -> CallError {
    CallError::new(
        ErrorKind::StreamTruncated,
        format!(
            "the stream ended without {terminal} after {events} events: the answer was cut off"
        ),
    )
}

/// The JSON documents of an NDJSON body, one per non-empty line, in order. A line that
/// is not JSON is the body's failure: a cut-off last line is [`ErrorKind::StreamTruncated`]
/// (nothing after it arrived), any other is [`ErrorKind::NonJsonBody`].
pub(crate) fn ndjson(body: &[u8]) -> Result<Vec<Value>, CallError> {
    let text = std::str::from_utf8(body).map_err(|_| {
        CallError::new(
            ErrorKind::NonJsonBody,
            "the NDJSON stream is not valid UTF-8",
        )
    })?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut docs = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(doc) => docs.push(doc),
            Err(e) if e.is_eof() && i + 1 == lines.len() => {
                return Err(CallError::new(
                    ErrorKind::StreamTruncated,
                    format!(
                        "the stream broke off inside its line {} after {i} complete lines: the answer was cut off",
                        i + 1
                    ),
                ));
            }
            Err(e) => {
                return Err(CallError::new(
                    ErrorKind::NonJsonBody,
                    format!(
                        "line {} of the NDJSON stream is not JSON ({e}): {}",
                        i + 1,
                        super::error::excerpt(line.as_bytes())
                    ),
                ));
            }
        }
    }
    Ok(docs)
}

/// The byte offset just past the first event (SSE) or line (NDJSON) whose JSON data
/// `carries_answer` says holds a piece of the answer; `None` when none does.
pub(crate) fn first_answer_end(
    body: &[u8],
    carries_answer: impl Fn(&str, &Value) -> bool,
) -> Option<usize> {
    if sse::is_event_stream(body) {
        for (start, end) in event_blocks(body) {
            let events = sse::events(&body[start..end]).ok()?;
            let hit = events.iter().any(|event| {
                serde_json::from_str::<Value>(event.data.trim())
                    .is_ok_and(|data| carries_answer(&event.name, &data))
            });
            if hit {
                return Some(end);
            }
        }
        return None;
    }
    let mut start = 0;
    for (i, byte) in body.iter().enumerate() {
        if *byte == b'\n' {
            let line = &body[start..i];
            if serde_json::from_slice::<Value>(line).is_ok_and(|v| carries_answer("", &v)) {
                return Some(i + 1);
            }
            start = i + 1;
        }
    }
    None
}

/// `(start, end)` of each blank-line-terminated block of an event stream: an event is
/// dispatched at the blank line that ends it, so `end` is where it became usable.
fn event_blocks(body: &[u8]) -> Vec<(usize, usize)> {
    let mut blocks = Vec::new();
    let (mut start, mut line_start, mut i) = (0, 0, 0);
    while i < body.len() {
        let newline = match body[i] {
            b'\r' if body.get(i + 1) == Some(&b'\n') => 2,
            b'\r' | b'\n' => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        let blank = i == line_start;
        i += newline;
        line_start = i;
        if blank {
            if i > start {
                blocks.push((start, i));
            }
            start = i;
        }
    }
    blocks
}

/// Whether a JSON value is a non-empty string.
pub(crate) fn has_text(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_end_at_blank_lines_whatever_the_line_ending() {
        let body = b"data: a\n\ndata: b\r\n\r\n: c\rdata: d\r\r";
        let blocks = event_blocks(body);
        let texts: Vec<&[u8]> = blocks.iter().map(|(s, e)| &body[*s..*e]).collect();
        assert_eq!(
            texts,
            [&b"data: a\n\n"[..], b"data: b\r\n\r\n", b": c\rdata: d\r\r"]
        );
    }

    #[test]
    fn the_first_answer_is_found_in_sse_and_ndjson() {
        let sse = b"data: {\"t\": \"\"}\n\ndata: {\"t\": \"x\"}\n\ndata: {\"t\": \"y\"}\n\n";
        let at = first_answer_end(sse, |_, v| has_text(v.get("t"))).unwrap();
        assert_eq!(
            &sse[..at],
            b"data: {\"t\": \"\"}\n\ndata: {\"t\": \"x\"}\n\n"
        );
        let nd = b"{\"t\":\"\"}\n{\"t\":\"x\"}\n";
        assert_eq!(
            first_answer_end(nd, |_, v| has_text(v.get("t"))),
            Some(nd.len())
        );
        assert_eq!(
            first_answer_end(b"{\"t\":\"\"}\n", |_, v| has_text(v.get("t"))),
            None
        );
    }

    #[test]
    fn a_line_cut_mid_json_is_a_truncated_stream_and_garbage_is_not_json() {
        let cut = ndjson(b"{\"a\":1}\n{\"b\":").unwrap_err();
        assert_eq!(cut.kind, ErrorKind::StreamTruncated);
        let garbage = ndjson(b"{\"a\":1}\nnot json\n{\"b\":2}\n").unwrap_err();
        assert_eq!(garbage.kind, ErrorKind::NonJsonBody);
        assert_eq!(ndjson(b"{\"a\":1}\n\n{\"b\":2}\n").unwrap().len(), 2);
    }
}
