//! The upstreams behind the gateway: one loopback server per model, speaking OpenAI Chat
//! Completions byte for byte (plain and streamed), so that a fault can be framed exactly
//! as a real one is: a stream cut by closing the connection, the same cut inside a
//! chunked body, a reset after the request was read, a hang, a 200 that is not a
//! completion.
//!
//! Every client request carries a tag (as `conform scenarios` jobs do, `mock::find_tag`); a
//! server picks its behaviour by (model, tag) and counts arrivals by (model, tag), so
//! one gateway process serves every scenario without a restart, and a request nobody
//! tagged is a stray.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use conform_wire::provider::server::{Answer, Response, WireServer, stream_events};
use conform_wire::provider::server_for_path;

use crate::mock::{find_tag, unix_ms};

/// What an upstream does with a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Behaviour {
    /// A complete completion: JSON, or an SSE stream ending in a finish reason and
    /// `[DONE]`, as the request asked.
    Answer,
    /// An error status with an OpenAI error body, and `Retry-After` when given.
    Status {
        /// The status.
        status: u16,
        /// `Retry-After`, in seconds.
        retry_after: Option<u32>,
    },
    /// 400 `context_length_exceeded`, as OpenAI words it.
    ContextLength,
    /// The request is read, then the connection is reset: the work may have started.
    Reset,
    /// The answer comes only after this long (the gateway's timeout should pass first).
    Hang {
        /// Milliseconds until it answers.
        ms: u64,
    },
    /// A 200 stream of part of the answer (no finish reason, no `[DONE]`), ended by
    /// closing the connection: no length, no chunked framing to say it was cut.
    CutByClose,
    /// The same part of the answer in a chunked body that stops without its last chunk.
    CutInChunked,
    /// A 200 stream of part of the answer, then an error event, then the end of the body.
    ErrorEvent,
    /// A 200 whose body is not a completion.
    Unreadable {
        /// What the body is instead.
        body: Unreadable,
    },
    /// 400: the vendor's content filter refused the request (OpenAI's
    /// `content_policy_violation`), which no retry of it cures.
    ContentFilter,
    /// `status` until the instant `up_at_unix_ms`, then answers: a primary that is down
    /// for a while and recovers. An arrival records what it did then.
    Flapping {
        /// The error status while it is down.
        status: u16,
        /// When it comes up, in milliseconds since the Unix epoch.
        up_at_unix_ms: u64,
    },
    /// Silent until the gateway closes the connection (it gave up), or answers after `ms`:
    /// a hang whose end shows when the gateway abandoned the attempt.
    HangUntilClosed {
        /// Milliseconds until it answers, if the gateway still waits.
        ms: u64,
    },
    /// The status and the stream's headers at once, its first event only after this long,
    /// then the whole stream.
    SlowFirstToken {
        /// Milliseconds between the headers and the first event.
        ms: u64,
    },
    /// Part of the stream (as [`Behaviour::CutInChunked`]), then open and silent this
    /// long, then the connection closed without the last chunk.
    Stall {
        /// Milliseconds of silence before the close.
        ms: u64,
    },
    /// The whole stream, with one more event in its middle whose data is not JSON.
    MalformedEvent,
    /// The whole stream but its terminator (`[DONE]`), finish reason and usage included,
    /// ended cleanly by the chunked body's last chunk.
    NoTerminator,
    /// Answers, except a request that ends with the assistant's turn (a prefill), which
    /// it refuses with the 400 of a model that takes none.
    RejectsPrefill,
}

impl Behaviour {
    /// The error `status`, with no `Retry-After`.
    pub(crate) fn failing(status: u16) -> Behaviour {
        Behaviour::Status {
            status,
            retry_after: None,
        }
    }

    /// What the upstream does with a request arriving at `now_unix_ms`: a flapping
    /// upstream is down or up by then; every other behaviour is itself.
    fn at(self, now_unix_ms: u64) -> Behaviour {
        match self {
            Behaviour::Flapping {
                status,
                up_at_unix_ms,
            } if now_unix_ms < up_at_unix_ms => Behaviour::failing(status),
            Behaviour::Flapping { .. } => Behaviour::Answer,
            other => other,
        }
    }
}

/// The prompt tokens an upstream's answers report: distinct per model, so that the usage
/// a client receives tells which upstream it was counted by.
pub(crate) fn prompt_tokens(model: &str) -> u64 {
    match model {
        super::config::FALLBACK => 31,
        super::config::REVOKED => 43,
        _ => 24,
    }
}

/// A 2xx body that cannot be read as a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unreadable {
    /// The answer's JSON cut in half.
    BrokenJson,
    /// A web server's HTML page.
    Html,
    /// No body at all.
    Empty,
}

/// A request an upstream received.
#[derive(Debug, Clone, Serialize)]
pub struct Arrival {
    /// The model the upstream serves (`primary`, `fallback`, ...).
    pub model: String,
    /// The request's path: `/v1/chat/completions` (OpenAI) or `/v1/messages` (Anthropic).
    pub path: String,
    /// The tag the request carried; none for a stray.
    pub tag: Option<String>,
    /// When it arrived, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// When the upstream finished with it (answered, cut or reset): for a hang, later
    /// than a fallback's arrival means two upstream calls ran at once for one intent.
    pub done_unix_ms: Option<u64>,
    /// The request asked for a stream.
    pub stream: bool,
    /// What the upstream did with it (a flapping upstream: down or up at the time).
    pub behaviour: Behaviour,
}

#[derive(Default)]
struct Inner {
    scripts: HashMap<(String, String), Behaviour>,
    arrivals: Vec<Arrival>,
    /// The arrivals (by index) refused as prefills.
    refused_prefills: Vec<usize>,
    /// The tags whose scripted silences may end now: the scenario has what it needs.
    released: HashSet<String>,
}

/// The scripts every upstream reads and the arrivals they report.
#[derive(Clone, Default)]
pub(crate) struct Board(Arc<Mutex<Inner>>);

impl Board {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `model` does with requests tagged `tag` (default: it answers).
    pub(crate) fn script(&self, model: &str, tag: &str, behaviour: Behaviour) {
        self.lock()
            .scripts
            .insert((model.to_string(), tag.to_string()), behaviour);
    }

    /// Requests `model` received for `tag`.
    pub(crate) fn count(&self, model: &str, tag: &str) -> usize {
        self.arrivals(tag)
            .iter()
            .filter(|a| a.model == model)
            .count()
    }

    /// Every arrival for `tag`, in order.
    pub(crate) fn arrivals(&self, tag: &str) -> Vec<Arrival> {
        self.lock()
            .arrivals
            .iter()
            .filter(|a| a.tag.as_deref() == Some(tag))
            .cloned()
            .collect()
    }

    fn arrive(
        &self,
        model: &str,
        path: &str,
        body: &[u8],
    ) -> (usize, Behaviour, bool, Option<String>) {
        let tag = find_tag(body);
        let stream = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("stream").and_then(Value::as_bool))
            .unwrap_or(false);
        let mut inner = self.lock();
        let behaviour = tag
            .as_ref()
            .and_then(|t| inner.scripts.get(&(model.to_string(), t.clone())))
            .cloned()
            .unwrap_or(Behaviour::Answer);
        let at_unix_ms = unix_ms();
        let behaviour = behaviour.at(at_unix_ms);
        inner.arrivals.push(Arrival {
            model: model.to_string(),
            path: path.to_string(),
            tag: tag.clone(),
            at_unix_ms,
            done_unix_ms: None,
            stream,
            behaviour: behaviour.clone(),
        });
        (inner.arrivals.len() - 1, behaviour, stream, tag)
    }

    /// Requests `model` refused as prefills for `tag`.
    pub(crate) fn refused_prefills(&self, model: &str, tag: &str) -> usize {
        let inner = self.lock();
        (inner.refused_prefills.iter())
            .filter_map(|i| inner.arrivals.get(*i))
            .filter(|a| a.model == model && a.tag.as_deref() == Some(tag))
            .count()
    }

    /// Ends `tag`'s scripted silences now: the client's call is over, and waiting out
    /// the rest would only lengthen the run (a gateway that keeps the upstream's
    /// connection open after giving up on it would hold the scenario for the whole
    /// silence).
    pub(crate) fn release(&self, tag: &str) {
        self.lock().released.insert(tag.to_string());
    }

    fn released(&self, tag: &str) -> bool {
        self.lock().released.contains(tag)
    }

    fn refused_prefill(&self, index: usize) {
        self.lock().refused_prefills.push(index);
    }

    fn done(&self, index: usize) {
        if let Some(a) = self.lock().arrivals.get_mut(index) {
            a.done_unix_ms = Some(unix_ms());
        }
    }
}

/// The content every genuine answer carries: who served it, for which request. A client
/// that receives anything else as a complete answer was handed something no upstream
/// finished.
pub(crate) fn content(model: &str, tag: &str) -> String {
    json!({"served_by": model, "tag": tag, "total": 12.5}).to_string()
}

/// Starts `model`'s upstream on `listener`; it serves until the process ends.
pub(crate) fn serve(listener: TcpListener, model: &str, board: Board) {
    let model = model.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (model, board) = (model.clone(), board.clone());
            tokio::spawn(async move { one(stream, &model, &board).await });
        }
    });
}

/// How long an upstream waits for a request's bytes.
const READ_WITHIN: Duration = Duration::from_secs(30);

async fn one(mut stream: TcpStream, model: &str, board: &Board) {
    let _ = stream.set_nodelay(true);
    let Ok(Some((path, body))) = tokio::time::timeout(READ_WITHIN, read_request(&mut stream))
        .await
        .map(|r| r.ok().flatten())
    else {
        return;
    };
    let (index, behaviour, streamed, tag) = board.arrive(model, &path, &body);
    let tag = tag.unwrap_or_default();
    // The model the gateway asked for is the one that serves: the answer names it.
    let asked = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| model.to_string());
    let answer = Answer {
        content: content(model, &tag),
        cut_off: false,
        model: &asked,
        n: unix_ms(),
        prompt_tokens: prompt_tokens(model),
        tool: None,
    };
    let server = server_for_path(&path);
    let prefill = behaviour == Behaviour::RejectsPrefill
        && serde_json::from_slice::<Value>(&body).is_ok_and(|v| server.is_prefill(&v));
    if prefill {
        board.refused_prefill(index);
        let refused = shaped(&server.prefill_rejected(), &[]);
        let _ = stream.write_all(&refused).await;
        let _ = stream.shutdown().await;
    } else {
        let silence = Silence { board, tag: &tag };
        let _ = respond(
            &mut stream,
            &behaviour,
            (server, streamed),
            &answer,
            silence,
        )
        .await;
    }
    board.done(index);
}

/// The request's path and body (Content-Length or chunked); `None` when the peer went
/// away.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .split('?')
        .next()
        .unwrap_or("/")
        .to_string();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    loop {
        let body = &got[head_end..];
        match (length, chunked) {
            (Some(n), _) if body.len() >= n => return Ok(Some((path, body[..n].to_vec()))),
            (_, true) if body.ends_with(b"0\r\n\r\n") => return Ok(Some((path, dechunk(body)))),
            (None, false) => return Ok(Some((path, Vec::new()))),
            _ => {}
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        got.extend_from_slice(&buf[..n]);
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..i])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || body.len() < i + 2 + size {
            break;
        }
        out.extend_from_slice(&body[i + 2..i + 2 + size]);
        body = &body[(i + 4 + size).min(body.len())..];
    }
    out
}

fn head(status: u16, content_type: &str, extra: &[String]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n");
    for line in extra {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

fn sized(status: u16, content_type: &str, extra: &[String], body: &[u8]) -> Vec<u8> {
    let mut lines = extra.to_vec();
    lines.push(format!("Content-Length: {}", body.len()));
    let mut out = head(status, content_type, &lines);
    out.extend_from_slice(body);
    out
}

fn chunked(pieces: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        out.extend_from_slice(format!("{:x}\r\n{p}\r\n", p.len()).as_bytes());
    }
    out
}

/// `server`'s answer for `answer`, whole: a stream in a chunked body ending in its last
/// chunk, or a sized JSON document.
fn whole(server: &dyn WireServer, answer: &Answer<'_>, streamed: bool) -> Vec<u8> {
    if streamed {
        let (content_type, body) = server.stream(answer);
        let mut out = head(200, content_type, &[CHUNKED.to_string()]);
        out.extend_from_slice(&chunked(&stream_events(content_type, &body)));
        out.extend_from_slice(LAST_CHUNK);
        out
    } else {
        let body = server.success(answer).to_string();
        sized(200, "application/json", &[], body.as_bytes())
    }
}

/// A response the vendor's server shaped, with `extra` header lines.
fn shaped(response: &Response, extra: &[String]) -> Vec<u8> {
    let mut lines: Vec<String> = (response.headers.iter())
        .map(|(name, value)| format!("{name}: {value}"))
        .collect();
    lines.extend_from_slice(extra);
    sized(
        response.status,
        response.content_type,
        &lines,
        &response.body,
    )
}

const CHUNKED: &str = "Transfer-Encoding: chunked";
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// What the upstream writes for `behaviour`, in `server`'s wire; `None` for a reset,
/// which writes nothing.
fn framed(
    behaviour: &Behaviour,
    server: &dyn WireServer,
    answer: &Answer<'_>,
    streamed: bool,
) -> Option<Vec<u8>> {
    let (content_type, cut) = server.stream_cut(answer);
    let cut_events = stream_events(content_type, &cut);
    Some(match behaviour {
        Behaviour::Answer
        | Behaviour::Hang { .. }
        | Behaviour::HangUntilClosed { .. }
        | Behaviour::Flapping { .. }
        | Behaviour::RejectsPrefill
        | Behaviour::SlowFirstToken { .. }
        | Behaviour::Stall { .. } => whole(server, answer, streamed),
        Behaviour::ContentFilter => shaped(&server.content_filtered(), &[]),
        Behaviour::MalformedEvent | Behaviour::NoTerminator if streamed => {
            let (content_type, body) = if *behaviour == Behaviour::MalformedEvent {
                server.stream_malformed(answer)
            } else {
                server.stream_unterminated(answer)
            };
            let mut out = head(200, content_type, &[CHUNKED.to_string()]);
            out.extend_from_slice(&chunked(&stream_events(content_type, &body)));
            out.extend_from_slice(LAST_CHUNK);
            out
        }
        Behaviour::MalformedEvent | Behaviour::NoTerminator => whole(server, answer, streamed),
        Behaviour::Status {
            status,
            retry_after,
        } => {
            let message = format!("simulated HTTP {status} from {}", answer.model);
            let extra: Vec<String> = (retry_after.iter())
                .map(|s| format!("Retry-After: {s}"))
                .collect();
            shaped(&server.failure(*status, &message), &extra)
        }
        Behaviour::ContextLength => shaped(&server.context_exceeded(), &[]),
        Behaviour::Reset => return None,
        Behaviour::CutByClose => {
            let mut out = head(200, content_type, &[]);
            out.extend_from_slice(cut.as_bytes());
            out
        }
        Behaviour::CutInChunked => {
            let mut out = head(200, content_type, &[CHUNKED.to_string()]);
            out.extend_from_slice(&chunked(&cut_events));
            out
        }
        Behaviour::ErrorEvent => {
            let mut pieces = cut_events;
            pieces.push(server.stream_failure());
            let mut out = head(200, content_type, &[CHUNKED.to_string()]);
            out.extend_from_slice(&chunked(&pieces));
            out.extend_from_slice(LAST_CHUNK);
            out
        }
        Behaviour::Unreadable { body } => {
            let (content_type, bytes) = unreadable(*body, server, answer);
            sized(200, content_type, &[], &bytes)
        }
    })
}

/// A 2xx body that is not the answer: the vendor's own document cut in half, a web
/// server's page, nothing.
fn unreadable(
    body: Unreadable,
    server: &dyn WireServer,
    answer: &Answer<'_>,
) -> (&'static str, Vec<u8>) {
    match body {
        Unreadable::BrokenJson => {
            let document = server.success(answer).to_string().into_bytes();
            ("application/json", document[..document.len() / 2].to_vec())
        }
        Unreadable::Html => (
            "text/html",
            b"<html><body><h1>Welcome to nginx!</h1></body></html>".to_vec(),
        ),
        Unreadable::Empty => ("application/json", Vec::new()),
    }
}

/// A stream sent in two parts with a silence between them: what comes before the
/// silence, its length, and what comes after (nothing, for a stall: the connection is
/// then closed with the body unfinished). `None` for any other behaviour.
fn paused(
    behaviour: &Behaviour,
    server: &dyn WireServer,
    answer: &Answer<'_>,
) -> Option<(Vec<u8>, Duration, Vec<u8>)> {
    let (content_type, body, ms, finish) = match behaviour {
        Behaviour::SlowFirstToken { ms } => {
            let (content_type, body) = server.stream(answer);
            (content_type, body, *ms, true)
        }
        Behaviour::Stall { ms } => {
            let (content_type, cut) = server.stream_cut(answer);
            (content_type, cut, *ms, false)
        }
        _ => return None,
    };
    let mut before = head(200, content_type, &[CHUNKED.to_string()]);
    let mut after = chunked(&stream_events(content_type, &body));
    if finish {
        after.extend_from_slice(LAST_CHUNK);
    } else {
        before.append(&mut after);
    }
    Some((before, Duration::from_millis(ms), after))
}

/// Whose silence it is: it ends early when the scenario releases its tag.
struct Silence<'a> {
    board: &'a Board,
    tag: &'a str,
}

impl Silence<'_> {
    /// Waits `length`, or until the scenario releases the tag.
    async fn wait(&self, length: Duration) {
        let end = tokio::time::Instant::now() + length;
        while tokio::time::Instant::now() < end && !self.board.released(self.tag) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    behaviour: &Behaviour,
    (server, streamed): (&dyn WireServer, bool),
    answer: &Answer<'_>,
    silence: Silence<'_>,
) -> std::io::Result<()> {
    if let Behaviour::Hang { ms } = behaviour {
        tokio::time::sleep(Duration::from_millis(*ms)).await;
    }
    if let Behaviour::HangUntilClosed { ms } = behaviour
        && !held_open(stream, Duration::from_millis(*ms)).await
    {
        return Ok(());
    }
    if let Some((before, length, after)) = paused(behaviour, server, answer).filter(|_| streamed) {
        stream.write_all(&before).await?;
        stream.flush().await?;
        // A gateway that gives up closes its side: the silence ends there (the call is
        // over, and the scenario need not wait out the rest).
        let mut byte = [0u8; 1];
        tokio::select! {
            _ = silence.wait(length) => {}
            _ = stream.read(&mut byte) => return Ok(()),
        }
        stream.write_all(&after).await?;
        return stream.shutdown().await;
    }
    match framed(behaviour, server, answer, streamed) {
        Some(bytes) => {
            stream.write_all(&bytes).await?;
            if matches!(behaviour, Behaviour::CutByClose | Behaviour::CutInChunked) {
                // The cut stays a cut: the connection closes a moment after its last byte.
                stream.flush().await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        None => {
            // SO_LINGER 0: closing sends RST, as a crashed upstream's kernel does. The
            // deprecation is about a linger that blocks on drop; a zero one never waits.
            #[allow(deprecated)]
            let _ = stream.set_linger(Some(Duration::ZERO));
        }
    }
    stream.shutdown().await
}

/// Waits `wait` in silence; `false` when the peer closed or reset the connection first.
async fn held_open(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return true,
            read = stream.read(&mut buf) => match read {
                // The request was read whole: more bytes are a pipelined request, ignored.
                Ok(n) if n > 0 => {}
                _ => return false,
            },
        }
    }
}

/// Test machinery: a chat request posted to an upstream on `addr` by hand (the gateway's
/// side of the connection), its stream left open for the test to read or drop.
#[cfg(test)]
pub(crate) async fn post(addr: std::net::SocketAddr, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On each wire the gateway may call, a cut stream is the start of the whole one:
    /// part of the answer, and none of what ends it.
    #[test]
    fn a_cut_stream_is_the_start_of_the_whole_one_on_each_wire() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789";
        let answer = Answer {
            content: text.to_string(),
            cut_off: false,
            model: "primary-mock",
            n: 1,
            prompt_tokens: 24,
            tool: None,
        };
        for path in [
            "/v1/chat/completions",
            "/v1/messages",
            "/prefix/v1/messages",
        ] {
            let server = server_for_path(path);
            let (_, whole) = server.stream(&answer);
            let (_, cut) = server.stream_cut(&answer);
            assert!(whole.starts_with(&cut), "{path}: {cut}");
            assert!(cut.contains(&text[..4]), "{path}: {cut}");
            assert!(!cut.contains(&text[text.len() - 4..]), "{path}: {cut}");
        }
        for (path, route) in [
            ("/v1/messages", "/v1/messages"),
            ("/anthropic/v1/messages", "/v1/messages"),
            ("/v1/chat/completions", "/v1/chat/completions"),
            ("/somewhere/else", "/v1/chat/completions"),
        ] {
            assert!(server_for_path(path).on_route(route), "{path}");
        }
    }

    /// What the upstream writes for a request scripted with `behaviour`, whole.
    async fn raw_answer(behaviour: Behaviour) -> (String, Board) {
        let board = Board::default();
        board.script("primary", "ctagframing1", behaviour);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        serve(listener, "primary", board.clone());
        let mut stream = post(addr, r#"{"model":"primary-mock","stream":true,"messages":[{"role":"user","content":"ctagframing1"}]}"#).await;
        let mut got = Vec::new();
        let _ = stream.read_to_end(&mut got).await;
        (String::from_utf8_lossy(&got).into_owned(), board)
    }

    #[tokio::test]
    async fn a_cut_is_framed_as_a_closed_connection_or_a_chunked_body_without_its_last_chunk() {
        let (closed, board) = raw_answer(Behaviour::CutByClose).await;
        let head = closed
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        assert!(closed.starts_with("HTTP/1.1 200"), "{closed}");
        assert!(
            !head.contains("content-length") && !head.contains("transfer-encoding"),
            "{head}"
        );
        assert!(!closed.contains("[DONE]") && !closed.contains("\"finish_reason\":\"stop\""));
        assert_eq!(board.count("primary", "ctagframing1"), 1);

        let (chunked, _) = raw_answer(Behaviour::CutInChunked).await;
        assert!(
            chunked
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
        );
        assert!(!chunked.ends_with("0\r\n\r\n"), "{chunked}");
        assert!(!chunked.contains("[DONE]"));

        let (whole, _) = raw_answer(Behaviour::Answer).await;
        assert!(whole.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{whole}");
    }

    /// A flapping upstream answers its status until the instant, then answers; its
    /// arrivals say which it did. A content filter's 400 is the vendor's own.
    #[tokio::test]
    async fn a_flapping_upstream_is_down_until_its_instant_and_each_arrival_says_what_it_did() {
        let down = Behaviour::Flapping {
            status: 503,
            up_at_unix_ms: unix_ms() + 60_000,
        };
        let (answer, board) = raw_answer(down).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        let arrivals = board.arrivals("ctagframing1");
        assert!(
            matches!(arrivals[0].behaviour, Behaviour::Status { status: 503, .. }),
            "{arrivals:?}"
        );
        let up = Behaviour::Flapping {
            status: 503,
            up_at_unix_ms: unix_ms(),
        };
        let (answer, board) = raw_answer(up).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert_eq!(
            board.arrivals("ctagframing1")[0].behaviour,
            Behaviour::Answer
        );
        let (refused, _) = raw_answer(Behaviour::ContentFilter).await;
        assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    }

    /// A hang that ends when the gateway gives up: the arrival is done when the
    /// connection closed, not when the hang would have ended.
    #[tokio::test]
    async fn a_hang_until_closed_ends_when_the_peer_closes() {
        let board = Board::default();
        board.script(
            "primary",
            "ctaghang1",
            Behaviour::HangUntilClosed { ms: 30_000 },
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        serve(listener, "primary", board.clone());
        let stream = post(
            addr,
            r#"{"model":"primary-mock","messages":[{"role":"user","content":"ctaghang1"}]}"#,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(stream);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let arrival = &board.arrivals("ctaghang1")[0];
        let held = arrival.done_unix_ms.expect("done once closed") - arrival.at_unix_ms;
        assert!((150..5_000).contains(&held), "{held} ms");
    }

    /// A slow first token: the head at once, the whole stream after the silence. A
    /// stall: part of the stream, then nothing until the connection closes, unfinished;
    /// and its silence ends when the gateway closes its side. A stream without its
    /// terminator: the usage, no `[DONE]`, the last chunk.
    #[tokio::test]
    async fn silences_and_terminators_are_framed_as_scripted() {
        let started = std::time::Instant::now();
        let (slow, _) = raw_answer(Behaviour::SlowFirstToken { ms: 300 }).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(slow.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"), "{slow}");

        let started = std::time::Instant::now();
        let (stalled, _) = raw_answer(Behaviour::Stall { ms: 300 }).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(stalled.starts_with("HTTP/1.1 200") && stalled.contains("\"content\""));
        assert!(!stalled.contains("[DONE]") && !stalled.ends_with("0\r\n\r\n"));

        let (open, _) = raw_answer(Behaviour::NoTerminator).await;
        assert!(
            open.contains("\"usage\":{") && !open.contains("[DONE]"),
            "{open}"
        );
        assert!(open.ends_with("\r\n0\r\n\r\n"), "{open}");

        // The gateway gives up: the upstream's call ends then, not after the silence.
        let board = Board::default();
        board.script("primary", "ctagframing2", Behaviour::Stall { ms: 30_000 });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        serve(listener, "primary", board.clone());
        let mut stream = post(addr, r#"{"model":"primary-mock","stream":true,"messages":[{"role":"user","content":"ctagframing2"}]}"#).await;
        let mut head = [0u8; 64];
        let _ = stream.read(&mut head).await.unwrap();
        drop(stream);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let arrivals = board.arrivals("ctagframing2");
        assert!(arrivals[0].done_unix_ms.is_some(), "{arrivals:?}");
    }

    #[test]
    fn chunked_bodies_are_read_back_whole() {
        let body = chunked(&["{\"a\":".to_string(), "1}".to_string()]);
        let mut framed = body.clone();
        framed.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(dechunk(&framed), b"{\"a\":1}");
    }
}
