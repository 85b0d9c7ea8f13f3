//! The other side of a wire: how a server speaking it reads a request and shapes its
//! answers and errors, as the recorded payloads in `tests/wire/` show them. Simulated
//! providers (`crate::sim`) answer through it, so every vendor's knowledge of its own wire,
//! both ways, lives in its folder.

use serde_json::Value;

/// One vendor's wire, as a server speaks it.
pub trait WireServer: Send + Sync {
    /// Whether `path` is where this wire's server answers.
    fn on_route(&self, path: &str) -> bool;

    /// What the server reads from a request body.
    fn read<'a>(&self, body: &'a Value) -> Asked<'a>;

    /// Whether the request asks for a stream.
    fn wants_stream(&self, _path: &str, body: &Value) -> bool {
        body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// A 200 body holding `answer` (a forced tool's input, when `answer.tool` names it).
    fn success(&self, answer: &Answer<'_>) -> Value;

    /// A 200 body carrying `calls` after the content; `named` says the request forced a
    /// tool by name.
    fn success_with_calls(&self, answer: &Answer<'_>, calls: &[Call<'_>], named: bool) -> Value;

    /// `answer` as the vendor streams it: the content type and the body.
    fn stream(&self, answer: &Answer<'_>) -> (&'static str, String);

    /// A 429 a wait cures, with the vendor's own hints.
    fn rate_limited(&self) -> Response;

    /// A 4xx in the vendor's error shape.
    fn error(&self, status: u16, message: &str) -> Response;

    /// The vendor's answer when it fails with `status` (a 429, a 5xx, an overload), with
    /// the error type it gives that status; by default its 4xx shape.
    fn failure(&self, status: u16, message: &str) -> Response {
        self.error(status, message)
    }

    /// A 400 for a prompt longer than the model's context, as the vendor words it.
    fn context_exceeded(&self) -> Response {
        self.error(
            400,
            "the prompt (9000 tokens) is longer than the model's context (8192 tokens)",
        )
    }

    /// A 400 for a request the vendor's content filter refused, as the vendor words it:
    /// a rejection a retry of the same request does not cure.
    fn content_filtered(&self) -> Response {
        self.error(
            400,
            "the request was rejected by the provider's content filter",
        )
    }

    /// `answer`'s stream as a connection dropped in the middle of it leaves it: its
    /// opening and part of the content, none of the events that end it. By default the
    /// first half of the content's events, for a wire that opens with content.
    fn stream_cut(&self, answer: &Answer<'_>) -> (&'static str, String) {
        cut_stream(self, answer, 0)
    }

    /// The event the vendor sends when it fails in the middle of a stream (overloaded,
    /// say), framed as its stream frames events.
    fn stream_failure(&self) -> String;

    /// `answer`'s whole stream with one more event in its middle whose data is not JSON
    /// (a copy of the middle event cut in half, as a faulty proxy or a torn write leaves
    /// it): every genuine event is still there, so a reader that skips the bad one gets
    /// the whole answer.
    fn stream_malformed(&self, answer: &Answer<'_>) -> (&'static str, String) {
        let (content_type, whole) = self.stream(answer);
        let mut events = stream_events(content_type, &whole);
        let middle = events.len() / 2;
        let torn = events
            .get(middle)
            .map(|e| torn_event(e))
            .unwrap_or_default();
        events.insert(middle, torn);
        (content_type, events.concat())
    }

    /// `answer`'s whole stream without its terminator (its last event: OpenAI's
    /// `data: [DONE]`, Anthropic's last event): the finish reason and the usage are
    /// there, then the body ends cleanly.
    fn stream_unterminated(&self, answer: &Answer<'_>) -> (&'static str, String) {
        let (content_type, whole) = self.stream(answer);
        let mut events = stream_events(content_type, &whole);
        events.pop();
        (content_type, events.concat())
    }

    /// Whether the request ends with the assistant's turn: a prefill, which the answer
    /// would continue (how a gateway resumes a stream that failed part way).
    fn is_prefill(&self, body: &Value) -> bool {
        body.get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "assistant")
    }

    /// The 400 a model that takes no prefill answers one (Anthropic's words on Claude
    /// 4.6 and later), in this wire's error shape.
    fn prefill_rejected(&self) -> Response {
        self.error(400, PREFILL_UNSUPPORTED)
    }
}

/// What a model that takes no assistant prefill answers, word for word as recorded
/// (`anthropic_error_400_prefill_not_supported.json`).
pub const PREFILL_UNSUPPORTED: &str = "This model does not support assistant message prefill. The conversation must end with a user message.";

/// `event` with the JSON of its `data:` line (a line of NDJSON: the line) cut in half,
/// its framing kept.
fn torn_event(event: &str) -> String {
    let half = |json: &str| -> String {
        let json = json.trim_end();
        json.chars().take(json.chars().count() / 2).collect()
    };
    if !event.contains("data:") {
        return format!("{}\n", half(event));
    }
    event
        .split_inclusive('\n')
        .map(|line| match line.strip_prefix("data:") {
            Some(data) => format!("data:{}\n", half(data)),
            None => line.to_string(),
        })
        .collect()
}

/// A stream's events, each with its end: a server-sent event ends in a blank line, a
/// line of NDJSON in a line break.
pub fn stream_events(content_type: &str, body: &str) -> Vec<String> {
    let end = if content_type == "text/event-stream" {
        "\n\n"
    } else {
        "\n"
    };
    body.split_inclusive(end).map(str::to_string).collect()
}

/// The first `opening` events of `answer`'s stream, then those of the first half of its
/// pieces of content.
pub fn cut_stream<S: WireServer + ?Sized>(
    server: &S,
    answer: &Answer<'_>,
    opening: usize,
) -> (&'static str, String) {
    let (content_type, whole) = server.stream(answer);
    let keep = opening + pieces(&answer.content).len() / 2;
    let events = stream_events(content_type, &whole);
    (content_type, events.into_iter().take(keep).collect())
}

/// An HTTP answer, before it is sent.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status to answer with.
    pub status: u16,
    /// Extra headers, beside the content type.
    pub headers: Vec<(&'static str, &'static str)>,
    /// The `Content-Type` header's value.
    pub content_type: &'static str,
    /// The body, as sent.
    pub body: Vec<u8>,
}

impl Response {
    /// A JSON answer.
    pub fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: body.to_string().into_bytes(),
        }
    }

    /// An answer with `body` as it is: a stream, an HTML error page, a broken body.
    pub fn raw(status: u16, body: String, content_type: &'static str) -> Response {
        Response {
            status,
            headers: Vec::new(),
            content_type,
            body: body.into_bytes(),
        }
    }

    /// Adds a header to the answer (a rate limit, a retry hint).
    pub fn header(mut self, name: &'static str, value: &'static str) -> Response {
        self.headers.push((name, value));
        self
    }
}

/// What a server reads from a request.
#[derive(Debug, Default)]
pub struct Asked<'a> {
    /// Characters of system and user text, for a plausible token count.
    pub prompt_chars: usize,
    /// The request's output token cap, when it set one.
    pub output_limit: Option<u64>,
    /// The tool the request forces, if any.
    pub tool: Option<&'a str>,
    /// The schema the answer is held to, wherever the vendor's request carries it.
    pub schema: Option<&'a Value>,
    /// The text of every user message, in order: what identifies a case whichever wire
    /// carried it (tool results, which vendors put in user turns, are left out).
    pub user_texts: Vec<&'a str>,
    /// Whether, and how, tools may be called.
    pub choice: Choice,
}

/// What the request asked of tool use, as read off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    /// The model chooses whether to call a tool.
    #[default]
    Auto,
    /// No tool may be called.
    None,
    /// Some tool must be called.
    Required,
    /// A named tool.
    Named,
}

/// One answer, before it takes a vendor's shape.
#[derive(Debug)]
pub struct Answer<'a> {
    /// The text, or the forced tool's JSON input.
    pub content: String,
    /// Cut off at the output limit rather than finished.
    pub cut_off: bool,
    /// The model the answer says served it.
    pub model: &'a str,
    /// The request's sequence number, for ids.
    pub n: u64,
    /// Prompt tokens to report in the usage.
    pub prompt_tokens: u64,
    /// The forced tool, when the content is its JSON input.
    pub tool: Option<&'a str>,
}

/// One tool call an answer carries.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// The arguments as they go on the wire: their JSON text, or whatever a drift made of
    /// it.
    pub raw: &'a str,
}

impl Call<'_> {
    /// The arguments as an object, as Anthropic, Gemini and Ollama carry them; arguments
    /// that are not one (double-encoded, cut off) go as the string they became.
    pub fn object(&self) -> Value {
        serde_json::from_str::<Value>(self.raw)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::String(self.raw.to_string()))
    }
}

/// Output tokens an answer plausibly took: four characters a token.
pub fn output_tokens(content: &str, calls: &[Call<'_>]) -> u64 {
    (content.len() + calls.iter().map(|c| c.raw.len()).sum::<usize>())
        .div_ceil(4)
        .max(1) as u64
}

/// The text in pieces of about four characters, as tokens come.
pub fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let pieces: Vec<String> = chars.chunks(4).map(|c| c.iter().collect()).collect();
    if pieces.is_empty() {
        vec![String::new()]
    } else {
        pieces
    }
}

/// Server-sent events, one `data:` line each.
pub fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// What a request carrying `messages` says (OpenAI Chat, Anthropic Messages, Ollama
/// chat), given where its vendor keeps the forced tool, the schema and the tool choice.
pub fn read_messages<'a>(
    body: &'a Value,
    tool: Option<&'a str>,
    schema: Option<&'a Value>,
    choice: Choice,
) -> Asked<'a> {
    let messages = body.get("messages").and_then(Value::as_array);
    // A user turn is a string, or (Anthropic) blocks of which the text ones count.
    let user_texts: Vec<&str> = messages
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.as_str()],
            Value::Array(blocks) => blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    let chars: usize = messages
        .map(|m| {
            m.iter()
                .filter_map(|m| m["content"].as_str())
                .map(str::len)
                .sum()
        })
        .unwrap_or(0);
    let system = body
        .get("system")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    let output_limit = [
        "/max_tokens",
        "/max_completion_tokens",
        "/options/num_predict",
    ]
    .iter()
    .find_map(|p| body.pointer(p).and_then(Value::as_u64));
    Asked {
        prompt_chars: chars + system,
        output_limit,
        tool,
        schema,
        user_texts,
        choice,
    }
}

/// OpenAI Chat's `tool_choice` (`none`, `required`, a named function, else `auto`), which
/// Ollama copies.
pub fn chat_choice(body: &Value) -> Choice {
    match body.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => Choice::None,
        Some(Value::String(s)) if s == "required" => Choice::Required,
        Some(Value::Object(_)) => Choice::Named,
        _ => Choice::Auto,
    }
}

/// The first of `pointers` the body holds.
pub fn first_at<'a>(body: &'a Value, pointers: &[&str]) -> Option<&'a Value> {
    pointers.iter().find_map(|p| body.pointer(p))
}

/// What every vendor's server tests share: a gateway scenario's answer, and how the
/// vendor's own client must read what its server sends a gateway.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Answer, WireServer};
    use crate::provider::{ErrorKind, WireFormat};

    /// The answer a gateway scenario's upstream gives.
    pub(crate) fn answer() -> Answer<'static> {
        Answer {
            content: "{\"served_by\": \"primary\", \"tag\": \"ctagabc\"}".into(),
            cut_off: false,
            model: "primary-mock",
            n: 7,
            prompt_tokens: 24,
            tool: None,
        }
    }

    /// `wire` reads `server`'s cut stream as truncated, a stream ending in the failure
    /// event as failed, the whole stream as the answer, each failure status as retryable
    /// and the context error as the context error.
    pub(crate) fn read_as_its_client_reads_them(server: &dyn WireServer, wire: &impl WireFormat) {
        let answer = answer();
        let (_, whole) = server.stream(&answer);
        let reply = wire.decode_stream(whole.as_bytes()).unwrap();
        assert_eq!(reply.text, answer.content);
        let (_, cut) = server.stream_cut(&answer);
        assert!(whole.starts_with(&cut) && cut.len() < whole.len());
        let truncated = wire.decode_stream(cut.as_bytes()).unwrap_err();
        assert_eq!(truncated.kind, ErrorKind::StreamTruncated, "{cut}");
        let failed = cut.clone() + &server.stream_failure();
        let error = wire.decode_stream(failed.as_bytes()).unwrap_err();
        assert_ne!(error.kind, ErrorKind::StreamTruncated, "{failed}");
        let headers = reqwest::header::HeaderMap::new();
        for status in [429, 500, 503, 529] {
            let failure = server.failure(status, "simulated");
            let error = wire.classify(status, &headers, &failure.body);
            assert!(error.kind.retryable(), "{status}: {:?}", error.kind);
        }
        let too_long = server.context_exceeded();
        let error = wire.classify(400, &headers, &too_long.body);
        assert_eq!(error.kind, ErrorKind::ContextLength);
    }
}
