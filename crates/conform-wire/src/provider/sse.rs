//! Server-sent events in a complete response body.
//!
//! The transport reads every body whole (one timeout covers the call, and checks need the
//! whole answer anyway), so a streamed answer arrives here as bytes, not as a live stream.
//! The event grammar (`data:` lines joined, `event:` names, comments, CR/LF/CRLF, a BOM,
//! an event only dispatched at its blank line) comes from `eventsource-stream`, driven
//! over the one in-memory chunk: that stream never waits, so it is drained synchronously.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use eventsource_stream::{EventStream, EventStreamError};
use futures::Stream;
use serde_json::Value;

use super::error::{self, CallError, ErrorKind};

/// One dispatched event: its name (`message` when the server named none) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub name: String,
    pub data: String,
}

/// Whether a success body is an event stream rather than one JSON document: its first
/// line is an SSE field or comment. Deciding by content lets one decoder take both, so a
/// server that ignores `stream: true` and answers in JSON still decodes.
pub(crate) fn is_event_stream(body: &[u8]) -> bool {
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    let head = &body[start..];
    [&b"data:"[..], b"event:", b"id:", b"retry:", b":"]
        .iter()
        .any(|field| head.starts_with(field))
}

/// Every complete event in `body`, in order. An event cut off before its blank line is
/// not dispatched, as the SSE rules say; the caller notices the missing terminator.
pub(crate) fn events(body: &[u8]) -> Result<Vec<Event>, CallError> {
    let mut stream = EventStream::new(futures::stream::iter([Ok::<_, Infallible>(body)]));
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(event))) => out.push(Event {
                name: event.event,
                data: event.data,
            }),
            Poll::Ready(Some(Err(EventStreamError::Utf8(_)))) => {
                return Err(CallError::new(
                    ErrorKind::NonJsonBody,
                    "the event stream is not valid UTF-8",
                ));
            }
            Poll::Ready(Some(Err(e))) => {
                return Err(CallError::new(
                    ErrorKind::NonJsonBody,
                    format!("the body is not a valid event stream ({e})"),
                ));
            }
            // An in-memory stream is always ready: reaching here would mean the crate
            // changed how it polls, and the body read so far is all there is.
            Poll::Ready(None) | Poll::Pending => return Ok(out),
        }
    }
}

/// Parses one event's data as JSON, telling a cut-off chunk from one that never was JSON.
pub(crate) fn json(event: &Event) -> Result<Value, CallError> {
    serde_json::from_str(&event.data).map_err(|e| {
        let kind = if e.is_eof() {
            ErrorKind::TruncatedBody
        } else {
            ErrorKind::NonJsonBody
        };
        CallError::new(
            kind,
            format!(
                "a `{}` event's data is not JSON ({e}): {}",
                event.name,
                error::excerpt(event.data.as_bytes())
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_at_blank_lines_and_named() {
        let body = b": keep-alive\r\nevent: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\ndata: [DONE]\n\n";
        let events = events(body).unwrap();
        assert_eq!(
            events,
            [
                Event {
                    name: "a".into(),
                    data: "{\"x\":\n1}".into()
                },
                Event {
                    name: "message".into(),
                    data: "[DONE]".into()
                },
            ]
        );
        assert_eq!(json(&events[0]).unwrap()["x"], 1);
    }

    #[test]
    fn an_event_without_its_blank_line_is_not_dispatched() {
        let events = events(b"data: {\"a\":1}\n\ndata: [DONE]\n").unwrap();
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn bodies_are_told_apart_by_their_first_line() {
        assert!(is_event_stream(b"\n\ndata: {}\n\n"));
        assert!(is_event_stream(b"event: response.created\ndata: {}\n\n"));
        assert!(is_event_stream(b": comment\n\n"));
        assert!(!is_event_stream(b"{\"choices\": []}"));
        assert!(!is_event_stream(b"<html>"));
        assert!(!is_event_stream(b""));
    }

    #[test]
    fn invalid_utf8_is_not_a_panic() {
        let err = events(b"data: \xff\xfe\n\n").unwrap_err();
        assert_eq!(err.kind, ErrorKind::NonJsonBody);
    }

    #[test]
    fn a_cut_chunk_is_truncated_and_garbage_is_not_json() {
        let cut = Event {
            name: "message".into(),
            data: "{\"id\":".into(),
        };
        assert_eq!(json(&cut).unwrap_err().kind, ErrorKind::TruncatedBody);
        let prose = Event {
            name: "message".into(),
            data: "hello".into(),
        };
        assert_eq!(json(&prose).unwrap_err().kind, ErrorKind::NonJsonBody);
    }
}
