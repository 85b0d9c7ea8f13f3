//! HTTP/1.1 written byte for byte on a connection of its own: what a client library
//! would refuse to send (invalid UTF-8, bodies that never end, heads cut short) or could
//! not time (hundreds of requests released at one instant).
//!
//! A request is written while its answer is read, so an orchestrator that answers early
//! (a 413 before the body is in) and closes is still heard, not mistaken for a reset.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;

use super::api::Exchange;

/// A request's head: `METHOD PATH HTTP/1.1`, `Host`, the given headers, and a
/// `Content-Length` when `length` is given (none: the body is sent chunked when there is
/// one, or the head ends there).
pub(crate) fn head(
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    length: Option<usize>,
) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: orchestrator\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(n) = length {
        out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
    }
    out
}

/// `head` finished with a blank line.
pub(crate) fn request(method: &str, path: &str, headers: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut out = head(method, path, headers, Some(body.len()));
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// One answer, as far as it arrived.
#[derive(Debug, Clone, Default)]
pub(crate) struct Answer {
    /// 0 when no status line arrived.
    pub status: u16,
    pub content_type: Option<String>,
    pub replayed: bool,
    pub body: Value,
    /// Why no complete answer came: the connection was closed or reset, or the wait
    /// ran out.
    pub error: Option<String>,
    pub ms: u64,
}

impl Answer {
    /// As the evidence shows an exchange; `sent` describes the request.
    pub(crate) fn exchange(
        &self,
        method: &str,
        path: &str,
        owner: Option<&str>,
        sent: Value,
    ) -> Exchange {
        Exchange {
            method: method.to_string(),
            path: path.to_string(),
            owner: owner.map(str::to_string),
            idempotency_keys: Vec::new(),
            body: Some(sent),
            status: self.status,
            content_type: self.content_type.clone(),
            idempotent_replayed: self.replayed.then(|| "true".to_string()),
            answer: self.body.clone(),
            error: self.error.clone(),
            ms: self.ms,
        }
    }
}

/// Connects to `addr` (`host:port`).
pub(crate) async fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Writes `bytes` (in 64 KiB pieces) while reading the answer; stops writing once an
/// answer has arrived. Waits at most `limit` for the answer.
pub(crate) async fn exchange(stream: TcpStream, bytes: Vec<u8>, limit: Duration) -> Answer {
    let started = Instant::now();
    let (read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        for piece in bytes.chunks(64 * 1024) {
            if write.write_all(piece).await.is_err() {
                return;
            }
        }
        // Keep the write half (and so the connection) open until the answer is read.
        std::future::pending::<()>().await;
    });
    let mut answer = read_answer(read, limit).await;
    writer.abort();
    answer.ms = started.elapsed().as_millis() as u64;
    answer
}

/// Reads one answer from `read`, at most `limit`.
pub(crate) async fn read_answer(mut read: OwnedReadHalf, limit: Duration) -> Answer {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut answer = Answer::default();
    loop {
        if let Some(parsed) = parse(&got) {
            answer = parsed;
            break;
        }
        match tokio::time::timeout_at(deadline, read.read(&mut buf)).await {
            Err(_) => {
                answer.error = Some(format!(
                    "no complete answer within {:.1} s",
                    limit.as_secs_f64()
                ));
                break;
            }
            Ok(Ok(0)) => {
                answer.error = Some(if got.is_empty() {
                    "the connection was closed without an answer".into()
                } else {
                    "the connection was closed in the middle of the answer".into()
                });
                break;
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => {
                answer.error = Some(format!("the connection broke: {e}"));
                break;
            }
        }
    }
    if answer.status == 0
        && let Some(partial) = parse_head(&got)
    {
        answer.status = partial.0;
    }
    answer.ms = started.elapsed().as_millis() as u64;
    answer
}

/// Header names (lowercase) and values.
type Headers = Vec<(String, String)>;

/// Status and headers of a complete head, and where the body starts.
fn parse_head(bytes: &[u8]) -> Option<(u16, Headers, usize)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = text.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((status, headers, end))
}

/// A complete answer, or `None` while more is to come. 1xx answers are skipped.
fn parse(bytes: &[u8]) -> Option<Answer> {
    let (status, headers, start) = parse_head(bytes)?;
    if (100..200).contains(&status) {
        return parse(&bytes[start..]);
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let rest = &bytes[start..];
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        if !rest.ends_with(b"0\r\n\r\n") {
            return None;
        }
        super::providers::dechunk(rest)
    } else {
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if rest.len() < length {
            return None;
        }
        rest[..length].to_vec()
    };
    Some(Answer {
        status,
        content_type: header("content-type"),
        replayed: header("idempotent-replayed").is_some_and(|v| v.eq_ignore_ascii_case("true")),
        body: if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
        },
        error: None,
        ms: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_answers_and_waits_for_the_rest() {
        let full = b"HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/problem+json\r\ncontent-length: 13\r\n\r\n{\"code\":\"x\"}\n";
        let answer = parse(full).unwrap();
        assert_eq!(answer.status, 413);
        assert_eq!(answer.body["code"], "x");
        assert!(parse(&full[..full.len() - 3]).is_none());
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nidempotent-replayed: true\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        let answer = parse(chunked).unwrap();
        assert!(answer.replayed);
        assert_eq!(answer.body, serde_json::json!({}));
        let continued =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(parse(continued).unwrap().status, 201);
    }
}
