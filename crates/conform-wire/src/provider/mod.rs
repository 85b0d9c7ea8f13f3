//! Provider adapters: one wire format per file behind [`WireFormat`], and the shared
//! [`Transport`] that sends, rate-limits, retries and classifies.
//!
//! A wire format is pure translation, with no I/O: it encodes a [`CallSpec`] into a
//! [`WireRequest`], decodes a success body into a [`Reply`], and classifies an error
//! body into a [`CallError`]. That keeps every vendor quirk testable against the
//! recorded payloads, and keeps retries and limits in one place.

mod anthropic;
pub mod auth;
mod azure;
pub mod bedrock;
mod completion;
mod conversation;
pub(crate) mod count;
pub mod dialect;
mod encoded;
mod error;
mod gemini;
mod limits;
mod ollama;
pub(crate) mod openai;
pub mod openai_responses;
pub mod policy;
pub mod server;
mod sse;
pub(crate) mod stream;
mod streamed;
pub mod tape;
mod template;
pub mod transport;
mod vertex;

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

pub use completion::{Completion, Finish, FinishKind, Reply, ToolCall, Usage};
pub use count::{CountError, CountRequest, Counted};
pub use dialect::Dialect;
pub use encoded::Encoded;
pub use error::{CallError, Effect, ErrorKind, Measured, Served};
pub use limits::{CallSlot, Pace, RateLimitInfo, Window};
pub use policy::Stage;
pub use transport::Transport;

use conform_config::conversation::Problem;
use conform_config::secret::Secret;
use conform_config::{Conversation, Kind, Prompt, ProviderConfig};

/// What to ask of the provider for one call.
#[derive(Debug, Clone, Copy)]
pub struct CallSpec<'a> {
    /// The case's system and user text (for a request-shaped case, its summary).
    pub prompt: &'a Prompt,
    /// The suite's JSON Schema for the answer.
    pub schema: &'a Value,
    /// A name for the schema, where the wire format needs one (`[a-zA-Z0-9_-]{1,64}`).
    pub schema_name: &'a str,
    /// The whole request, for a request-shaped case: the conversation replaces the
    /// prompt's two messages, and its tools are declared.
    pub conversation: Option<&'a Conversation>,
}

impl CallSpec<'_> {
    /// Whether the suite's JSON answer is asked for with the provider's structured-output
    /// mode: always for a template case; for a request, when it expects a JSON answer.
    pub fn wants_json(&self) -> bool {
        self.conversation.is_none_or(|c| c.json_answer)
    }

    /// The tools the request declares (none for a template case).
    pub fn tools(&self) -> &[conform_config::Tool] {
        self.conversation.map_or(&[], |c| &c.tools)
    }

    /// The system prompt, where a vendor keeps it apart from the conversation.
    pub fn system(&self) -> Option<String> {
        match self.conversation {
            Some(c) => c.system(),
            None => self.prompt.system.clone(),
        }
    }
}

/// An HTTP POST, ready to send.
#[derive(Debug, Clone)]
pub struct WireRequest {
    /// Where it goes, query included.
    pub url: String,
    /// Headers, including authentication; sensitive values are marked so.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Value,
}

/// One vendor's wire format.
///
/// Implement this to add a provider; the [`Transport`] does the rest.
pub trait WireFormat: Send + Sync {
    /// Builds the request for one call.
    fn encode(
        &self,
        call: &CallSpec<'_>,
        config: &ProviderConfig,
        key: Option<&Secret>,
    ) -> WireRequest;

    /// Decodes a 2xx body. The default reads one JSON document ([`decode_document`]): a
    /// wire whose bodies are something else (a fast path, a stream folded here, a body
    /// that tells which of two codecs speaks) overrides it.
    fn decode(&self, body: &[u8]) -> Result<Reply, CallError> {
        decode_document(self, body)
    }

    /// The reply a whole 2xx JSON document holds, for the default [`WireFormat::decode`].
    /// A wire that overrides `decode` does not need it; one that does not, must say.
    fn reply(&self, _document: &Value) -> Result<Reply, CallError> {
        Err(CallError::new(
            ErrorKind::InvalidResponse,
            "this wire format reads no JSON document",
        ))
    }

    /// The error an event of a streamed body carries, in this vendor's words, when a
    /// stream came where one document was expected; `None` when the event is no error.
    fn error_event(&self, _event: &Value) -> Option<CallError> {
        None
    }

    /// What a processed document of the wrong shape still says: what it cost, and the
    /// model that served it.
    fn served(&self, _document: &Value) -> (Usage, Option<String>) {
        (Usage::default(), None)
    }

    /// Decodes the 2xx body of a call that asked for a stream (`stream = true`): the
    /// vendor's events folded into one reply, as if it had come whole. A stream that ends
    /// without the vendor's terminal event is [`ErrorKind::StreamTruncated`]; an error
    /// event inside it is classified as the matching error status would be. A server that
    /// ignores the request and answers with one document still decodes. The default
    /// folds server-sent events with [`WireFormat::fold`], and decodes anything else
    /// with [`WireFormat::decode`] (which is where some wire formats fold streams).
    fn decode_stream(&self, body: &[u8]) -> Result<Reply, CallError> {
        if sse::is_event_stream(body)
            && let Some(folded) = self.fold(body)
        {
            return folded.map_err(CallError::after_success);
        }
        self.decode(body)
    }

    /// A body of server-sent events folded into one reply, for the default
    /// [`WireFormat::decode_stream`]; `None` for a wire that folds streams elsewhere.
    fn fold(&self, _body: &[u8]) -> Option<Result<Reply, CallError>> {
        None
    }

    /// In a streamed body, the byte offset just past the first event that carries a
    /// piece of the answer (text, refusal or tool arguments): time to first token is when
    /// that byte arrived. `None` when no event does, or the wire format does not stream.
    /// The default reads SSE events or NDJSON lines and asks [`WireFormat::carries_answer`].
    fn first_token_end(&self, body: &[u8]) -> Option<usize> {
        stream::first_answer_end(body, |event, data| self.carries_answer(event, data))
    }

    /// Whether the JSON data of a streamed event (named `event` in SSE) or line carries
    /// a piece of the answer.
    fn carries_answer(&self, _event: &str, _data: &Value) -> bool {
        false
    }

    /// Classifies a non-2xx answer. The default reads the status as every vendor does
    /// (`error::classify_status`), refined by what the body says
    /// ([`WireFormat::error_fields`]), with a vendor's advice ([`WireFormat::advise`]),
    /// the body's excerpt when it says nothing, and the server's hints of when to retry
    /// (the headers', else the body's: [`WireFormat::retry_hint`]).
    fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> CallError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let (kind, message) = self.error_fields(status, parsed.as_ref());
        let mut classified = error::classify_status(status, body, message);
        if let Some(kind) = kind {
            classified.kind = kind;
        }
        self.advise(&mut classified);
        if classified.message.is_empty() {
            classified.message = error::excerpt(body);
        }
        let hinted = classified.server_hints(headers);
        match hinted.retry_after {
            Some(_) => hinted,
            None => hinted.retry_after(self.retry_hint(parsed.as_ref())),
        }
    }

    /// What an error body (`parsed`, when it is JSON) says: the kind it makes of
    /// `status`, when it refines it, and its message.
    fn error_fields(&self, _status: u16, _parsed: Option<&Value>) -> (Option<ErrorKind>, String) {
        (None, String::new())
    }

    /// Advice added to a classified error: the setting that avoids it.
    fn advise(&self, _classified: &mut CallError) {}

    /// When the error body says to retry, where the headers said nothing.
    fn retry_hint(&self, _parsed: Option<&Value>) -> Option<std::time::Duration> {
        None
    }

    /// What this vendor's API refuses in a conversation, on top of what no vendor takes
    /// (`conform_config::conversation::problems`): JSON pointers into the case.
    fn conversation_problems(&self, _messages: &[conform_config::Message]) -> Vec<Problem> {
        Vec::new()
    }

    /// Whether the vendor bills, on top of the prompt's messages, the schema `config`'s
    /// structured-output mode sends, by a rule it does not publish: a local count is then
    /// a lower bound (OpenAI's own API with `json_schema` or a forced tool; servers that
    /// constrain decoding with a grammar, such as llama.cpp, add nothing to the prompt).
    fn bills_schema_unpublished(&self, _config: &ProviderConfig) -> bool {
        false
    }

    /// The word this vendor's finish reason must say when tool calls came back (a client
    /// that reads it runs them only then); `None` when its vocabulary has none, or when a
    /// call forced by name (`forced_by_name`) may end with its plain stop.
    fn tool_use_finish(&self, _forced_by_name: bool) -> Option<&'static str> {
        None
    }

    /// The first request that counts, at this vendor's own endpoint, the prompt tokens of
    /// the call whose request is `sent`; `None` when the vendor has no count endpoint.
    fn count_request(
        &self,
        _sent: &WireRequest,
        _config: &ProviderConfig,
    ) -> Option<count::CountRequest> {
        None
    }

    /// What the answer to count request number `step` (0 for the first) says.
    fn count_answer(
        &self,
        _step: usize,
        _answer: &Value,
        _sent: &WireRequest,
        _config: &ProviderConfig,
    ) -> Result<count::Counted, count::CountError> {
        Err(count::CountError::NoEndpoint)
    }

    /// The schema dialect the answer's schema is held to in `config`'s structured-output
    /// mode; `None` where no schema is sent or its dialect is not known.
    fn answer_dialect(&self, _config: &ProviderConfig) -> Option<&'static dyn Dialect> {
        None
    }

    /// The dialect a tool's `parameters` is held to, declared `strict` or not.
    fn tool_dialect(
        &self,
        _config: &ProviderConfig,
        _strict: bool,
    ) -> Option<&'static dyn Dialect> {
        None
    }

    /// What an answer's headers say of the account's rate limits, in this vendor's
    /// header names; nothing for a vendor that states none.
    fn rate_limits(&self, _headers: &HeaderMap) -> limits::RateLimitInfo {
        limits::RateLimitInfo::default()
    }

    /// The server side of this wire, which a simulation speaks; `None` for a wire no
    /// simulation speaks.
    fn server(&self) -> Option<&'static dyn server::WireServer> {
        None
    }

    /// How the transport authenticates each attempt ([`auth`]), from `key` (what
    /// `api_key_env` or `token_env` holds) and `env`; `None`, the default, for a wire
    /// that puts `key` in the request as it encodes it.
    fn credentials(
        &self,
        _config: &ProviderConfig,
        _key: Option<&Secret>,
        _env: &dyn auth::Environment,
    ) -> Result<auth::Credentials, auth::CredentialError> {
        Ok(None)
    }
}

/// A 2xx body as one JSON document, as [`WireFormat::decode`] reads it by default: a
/// streamed body where one was expected is named as such, or its error event classified
/// ([`WireFormat::error_event`]); a document [`WireFormat::reply`] cannot read keeps
/// what it said it cost and who served it ([`WireFormat::served`]).
pub(crate) fn decode_document<W: WireFormat + ?Sized>(
    wire: &W,
    body: &[u8],
) -> Result<Reply, CallError> {
    parse_body(body)
        .map_err(|e| streamed::reject(body, |event| wire.error_event(event)).unwrap_or(e))
        .and_then(|document| {
            wire.reply(&document).map_err(|e| {
                let (usage, model) = wire.served(&document);
                e.keep_served(usage, model, None)
            })
        })
        .map_err(CallError::after_success)
}

/// The wire format for a provider kind. Pass [`ProviderConfig::wire_kind`], which
/// resolves a simulated provider to the vendor it imitates.
pub fn wire_format(kind: Kind) -> Arc<dyn WireFormat> {
    match kind {
        Kind::Openai => Arc::new(openai::OpenAiChat::official()),
        Kind::OpenaiResponses => Arc::new(openai_responses::OpenAiResponses),
        // A simulation without a `wire` speaks Chat Completions, as most fallbacks do.
        Kind::OpenaiCompatible | Kind::Sim => Arc::new(openai::compatible::OpenAiCompatible),
        Kind::Anthropic => Arc::new(anthropic::AnthropicMessages),
        Kind::Gemini => Arc::new(gemini::GeminiGenerateContent),
        Kind::Ollama => Arc::new(ollama::OllamaChat),
        Kind::AzureOpenai => Arc::new(azure::AzureOpenAi),
        Kind::Bedrock => Arc::new(bedrock::Bedrock),
        Kind::Vertex => Arc::new(vertex::Vertex),
    }
}

/// The server side of every wire a simulation speaks.
static SERVERS: &[&dyn server::WireServer] = &[
    &openai::server::ChatServer,
    &anthropic::server::MessagesServer,
    &gemini::server::GenerateServer,
    &ollama::server::ChatServer,
];

/// The server side of the wire whose route `path` ends in (a gateway may put a prefix
/// before it), and Chat Completions, which most gateways speak, when none does: what a
/// mock upstream behind a gateway answers with.
pub fn server_for_path(path: &str) -> &'static dyn server::WireServer {
    let tails = path.match_indices('/').map(|(at, _)| &path[at..]);
    tails
        .flat_map(|tail| SERVERS.iter().filter(move |s| s.on_route(tail)))
        .next()
        .copied()
        .unwrap_or(SERVERS[0])
}

/// The headers of a JSON request, with the credential (`(header, value)`, the value in
/// that header's form) marked sensitive so that no debug print or log shows it.
pub(crate) fn json_headers(credential: Option<(HeaderName, String)>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some((name, value)) = credential
        && let Ok(mut value) = HeaderValue::from_str(&value)
    {
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    headers
}

/// The chat messages a call is sent as, in OpenAI Chat's shape: the conversation, or
/// the prompt's system message, if any, then the user's.
pub(crate) fn call_messages(call: &CallSpec<'_>) -> Value {
    match call.conversation {
        Some(c) => Value::Array(c.openai_messages()),
        None => chat_messages(call.prompt),
    }
}

/// The chat messages a prompt is sent as: the system prompt, if any, then the user's.
pub(crate) fn chat_messages(prompt: &Prompt) -> Value {
    let mut messages = Vec::with_capacity(2);
    if let Some(system) = &prompt.system {
        messages.push(serde_json::json!({"role": "system", "content": system}));
    }
    messages.push(serde_json::json!({"role": "user", "content": prompt.user}));
    Value::Array(messages)
}

/// Reads `x-should-retry: true|false`; anything else is no answer.
pub fn should_retry(headers: &HeaderMap) -> Option<bool> {
    let value = headers.get("x-should-retry")?.to_str().ok()?.trim();
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// Reads `retry-after-ms`, then `retry-after` (seconds or an HTTP date).
pub fn retry_after(headers: &HeaderMap) -> Option<std::time::Duration> {
    use std::time::Duration;
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = get("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate_to_unix(value)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs() as i64;
    Some(Duration::from_secs(when.saturating_sub(now).max(0) as u64))
}

fn httpdate_to_unix(value: &str) -> Option<i64> {
    let format = time::format_description::well_known::Rfc2822;
    time::OffsetDateTime::parse(value, &format)
        .ok()
        .map(|t| t.unix_timestamp())
}

/// The JSON headers with the key as a bearer token (OpenAI and every server that speaks
/// its dialect, Ollama included).
pub(crate) fn bearer_headers(key: Option<&Secret>) -> HeaderMap {
    json_headers(key.map(|k| (AUTHORIZATION, format!("Bearer {}", k.expose()))))
}

/// The schema as providers accept it: without the `$schema` dialect marker, which
/// strict mode does not list among its keywords.
pub(crate) fn wire_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
    }
    schema
}

/// Parses a success body as JSON, telling a cut-off body from one that never was JSON.
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, CallError> {
    serde_json::from_slice(body).map_err(|e| {
        if error::looks_like_html(body) {
            CallError::new(
                ErrorKind::HtmlErrorPage,
                "an HTML page instead of JSON (a proxy or gateway answered)",
            )
        } else if e.is_eof() {
            CallError::new(
                ErrorKind::TruncatedBody,
                format!("the body ended mid-JSON after {} bytes", body.len()),
            )
        } else {
            CallError::new(
                ErrorKind::NonJsonBody,
                format!("the body is not JSON ({e}): {}", error::excerpt(body)),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_prefers_milliseconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(std::time::Duration::from_secs(7)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(std::time::Duration::from_millis(250)));
    }

    #[test]
    fn garbage_retry_after_is_ignored() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
    }
}
