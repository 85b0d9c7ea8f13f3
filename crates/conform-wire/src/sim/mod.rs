//! Simulated providers on loopback (axum, in-process), for `conform demo` and the
//! tests: no keys, no network. They keep nothing per request but a counter, so their
//! memory does not grow with the number of calls (a mock server that logs every matched
//! request grew by about 7 KB a call).
//!
//! Each simulated provider knows the expected answer of every shipped case (looked up
//! by a digest of the rendered prompt), and answers it the way its [`Behaviour`] says:
//! faithfully, or drifting the way real fallbacks drift. A simulation speaks the wire
//! of the vendor its `[sim] wire` names, through that vendor's server side
//! ([`crate::provider::server::WireServer`], in the vendor's folder), so the runner calls
//! it through that vendor's adapter.

mod keywords;
mod latency;
pub mod tools;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::provider::server::{self as shape, Response as Reply, WireServer};
use serde_json::{Value, json};

use crate::tokenize::{Counter, Tokenizer};
pub use conform_config::simulation::Behaviour;
use conform_config::{Diagnostic, Diagnostics, ProviderConfig, Suite};

/// How many requests a [`Behaviour::RateLimited`] provider turns away.
pub const RATE_LIMITED_REQUESTS: u64 = 3;

/// The expected answer of every case, by prompt.
#[derive(Debug, Default)]
pub struct AnswerBook {
    /// Sorted by the first 128 bits of the SHA-256 of the user messages (two prompts of
    /// a suite colliding there is as likely as never), each with its answer's place in
    /// `entries`: 20 bytes a case, where a hash map of shared answers took 33.
    keys: Vec<([u8; 16], u32)>,
    /// Every distinct answer once: a suite of many cases with few distinct answers costs
    /// little more than its keys.
    entries: Vec<Entry>,
}

/// What a simulation answers to one case.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    /// The expected JSON answer, when the answer is JSON.
    json: Option<Value>,
    /// For a request-shaped case: its tool calls (or none); usage then counts its tools.
    tools: Option<tools::ToolAnswer>,
}

impl AnswerBook {
    /// Renders every case of every suite; a case that expects JSON without `expected` is
    /// a problem, since the simulation would have nothing to answer, and so are two cases
    /// that a simulation cannot tell apart (the same user messages) but answer
    /// differently.
    pub fn from_suites(suites: &[&Suite]) -> Result<AnswerBook, Diagnostics> {
        let mut problems = Diagnostics::default();
        let mut entries: Vec<Entry> = Vec::new();
        let mut distinct: HashMap<String, u32> = HashMap::new();
        // Every case's key, its answer and its place in the suites' order: sorted by key
        // and place, the first case of a key is the one kept.
        let mut keyed: Vec<([u8; 16], u32, u32)> =
            Vec::with_capacity(suites.iter().map(|s| s.cases.len()).sum());
        let every_case = || {
            suites
                .iter()
                .flat_map(|s| s.cases.iter().map(move |c| (*s, c)))
        };
        for (place, (suite, case_ref)) in every_case().enumerate() {
            let (case, rendered) = match suite.load_request(case_ref, None) {
                Ok(loaded) => loaded,
                Err(d) => {
                    problems.extend(d);
                    continue;
                }
            };
            let json_answer = matches!(case.answer(), conform_config::Answer::Json);
            // A case judged against its recorded reference alone is answered with
            // the reference's first recorded answer.
            let recorded = case
                .reference
                .as_ref()
                .and_then(|r| r.answers.first())
                .and_then(|a| serde_json::from_str::<Value>(&a.text).ok());
            let expected = case.expected.clone().or(recorded);
            if json_answer && expected.is_none() {
                problems.push(
                    Diagnostic::new(
                        &case_ref.path(),
                        "a simulated provider needs the case's expected answer",
                    )
                    .field("expected"),
                );
                continue;
            }
            let key = match &rendered.conversation {
                Some(c) => raw_key_of(&c.user_texts()),
                None => raw_key(&rendered.prompt.user),
            };
            let entry = Entry {
                json: expected.filter(|_| json_answer),
                tools: rendered
                    .conversation
                    .as_ref()
                    .map(|c| tools::ToolAnswer::of(&case, &c.tools)),
            };
            let index = *distinct.entry(format!("{entry:?}")).or_insert_with(|| {
                entries.push(entry);
                (entries.len() - 1) as u32
            });
            keyed.push((key, index, place as u32));
        }
        keyed.sort_unstable();
        let mut keys: Vec<([u8; 16], u32)> = Vec::with_capacity(keyed.len());
        let mut clashes = Vec::new();
        for (key, index, place) in keyed {
            match keys.last() {
                Some((last, kept)) if *last == key => {
                    if entries[*kept as usize] != entries[index as usize] {
                        clashes.push(place);
                    }
                }
                _ => keys.push((key, index)),
            }
        }
        keys.shrink_to_fit();
        clashes.sort_unstable();
        for (_, case_ref) in clashes.iter().filter_map(|&p| every_case().nth(p as usize)) {
            problems.push(Diagnostic::new(
                &case_ref.path(),
                "another case has the same user messages but another answer: a simulated provider cannot tell them apart",
            ));
        }
        if problems.is_empty() {
            Ok(AnswerBook { keys, entries })
        } else {
            Err(problems)
        }
    }

    /// The expected answer for a rendered user prompt.
    pub fn answer(&self, user_prompt: &str) -> Option<&Value> {
        self.find(raw_key(user_prompt))?.json.as_ref()
    }

    fn entry(&self, user_texts: &[&str]) -> Option<&Entry> {
        self.find(raw_key_of(user_texts))
    }

    fn find(&self, key: [u8; 16]) -> Option<&Entry> {
        let at = self.keys.binary_search_by(|(k, _)| k.cmp(&key)).ok()?;
        self.entries.get(self.keys[at].1 as usize)
    }
}

/// The key of a conversation: its user messages' texts.
fn key_of(user_texts: &[&str]) -> String {
    match user_texts {
        [one] => key(one),
        many => key(&many.join("\u{1f}")),
    }
}

/// [`key_of`] as the 32 bytes of the digest: what the book is indexed by.
fn raw_key_of(user_texts: &[&str]) -> [u8; 16] {
    match user_texts {
        [one] => raw_key(one),
        many => raw_key(&many.join("\u{1f}")),
    }
}

fn raw_key(user_prompt: &str) -> [u8; 16] {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(user_prompt.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    first
}

fn key(user_prompt: &str) -> String {
    conform_config::digest::bytes_hex(user_prompt.as_bytes())
}

/// A running simulated provider. Dropping it stops the server.
pub struct SimServer {
    address: std::net::SocketAddr,
    requests: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Why a simulated provider could not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start the simulated provider `{provider}`: {what} ({source}); a simulation is served on 127.0.0.1, so the loopback interface must be up, with a port and a thread to spare"
)]
pub struct StartError {
    provider: String,
    what: &'static str,
    source: std::io::Error,
}

/// The server side of the wire `config` simulates: every simulation speaks a vendor's wire
/// with a server side (the configuration refuses the others when it loads).
fn server_of(config: &ProviderConfig) -> &'static dyn WireServer {
    let chat: &'static dyn WireServer = &crate::provider::openai::server::ChatServer;
    crate::provider::wire_format(config.wire_kind())
        .server()
        .unwrap_or(chat)
}

impl SimServer {
    /// Starts a simulated provider for `config` on a free loopback port, served by a
    /// thread of its own; an error when the machine gives it no port or no thread.
    pub async fn start(
        config: &ProviderConfig,
        book: Arc<AnswerBook>,
    ) -> Result<SimServer, StartError> {
        let sim = config.sim.clone();
        let (behaviour, latency, keywords) = sim
            .map(|s| (s.behaviour, latency::Latency::of(&s), s.schema_keywords))
            .unwrap_or((
                Behaviour::Steady,
                latency::Latency::Fixed(Duration::from_millis(20)),
                Default::default(),
            ));
        let time_scale = config.time_scale();
        let requests = Arc::new(AtomicU64::new(0));
        // Usage is reported the way the configured tokenizer counts, as a real provider
        // reports what its own tokenizer counted.
        let tokenizer = match Counter::for_provider(config) {
            Ok(Counter::Local(t)) => Some(t),
            _ => None,
        };
        let responder = Arc::new(SimResponder {
            book,
            behaviour,
            wire: server_of(config),
            latency,
            time_scale,
            keywords,
            model: format!("{}-sim-2026-06-01", config.model),
            requests: Arc::clone(&requests),
            tokenizer,
            rate: config.sim.as_ref().and_then(|s| s.rate).unwrap_or(1.0),
            seed: config.sim.as_ref().and_then(|s| s.seed).unwrap_or(0),
            seen: Mutex::new(HashMap::new()),
        });
        let failed = |what: &'static str| {
            let provider = config.name.clone();
            move |source| StartError {
                provider,
                what,
                source,
            }
        };
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(failed("no port on 127.0.0.1"))?;
        let address = listener
            .local_addr()
            .map_err(failed("no address for its port"))?;
        listener
            .set_nonblocking(true)
            .map_err(failed("its port cannot be made non-blocking"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Its own thread and runtime, as the mock servers of the tests have: the server
        // keeps answering while the caller's runtime blocks (a test that runs the binary
        // against it, a single-threaded test runtime).
        std::thread::Builder::new()
            .name(format!("sim-{}", address.port()))
            .spawn(move || serve(listener, responder, stopped))
            .map_err(failed("no thread to serve it"))?;
        Ok(SimServer {
            address,
            requests,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may be gone already; then there is nothing to stop.
            let _ = stop.send(());
        }
    }
}

/// Serves `responder` on `listener` until `stopped`; the runtime, and every connection
/// with it, ends then.
fn serve(
    listener: std::net::TcpListener,
    responder: Arc<SimResponder>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("a simulated provider could not start its runtime: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("a simulated provider could not listen: {e}");
                return;
            }
        };
        let app = axum::Router::new()
            .fallback(answer)
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(responder);
        tokio::select! {
            served = axum::serve(listener, app) => {
                if let Err(e) = served {
                    tracing::error!("a simulated provider stopped serving: {e}");
                }
            }
            _ = stopped => {}
        }
    });
}

/// Every request: a POST on the wire's route is answered after the simulated latency;
/// anything else is a 404, as from a server that does not know the path.
async fn answer(
    axum::extract::State(responder): axum::extract::State<Arc<SimResponder>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if method != axum::http::Method::POST || !responder.wire.on_route(uri.path()) {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    }
    let (delay, reply) = responder.respond(uri.path(), &body);
    drop(body);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let status = axum::http::StatusCode::from_u16(reply.status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, reply.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(reply.content_type),
    );
    for (name, value) in reply.headers {
        headers.insert(name, axum::http::HeaderValue::from_static(value));
    }
    response
}

struct SimResponder {
    book: Arc<AnswerBook>,
    behaviour: Behaviour,
    /// The server side of the wire the simulation speaks.
    wire: &'static dyn WireServer,
    latency: latency::Latency,
    /// The simulated clock's speed: an answer of latency L takes L × this.
    time_scale: f64,
    keywords: std::collections::BTreeMap<String, keywords::Handling>,
    model: String,
    requests: Arc<AtomicU64>,
    tokenizer: Option<Arc<dyn Tokenizer>>,
    /// The share of answers that drift, and what picks them.
    rate: f64,
    seed: u64,
    /// How many times each case has been asked, so that its repeats drift
    /// independently but every run with the same seed drifts alike.
    seen: Mutex<HashMap<String, u32>>,
}

impl SimResponder {
    /// The answer to a POST on the wire's route, and how long to wait before sending it.
    fn respond(&self, path: &str, request: &[u8]) -> (Duration, Reply) {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        let delay = self.latency.nth(n).mul_f64(self.time_scale);
        (delay, self.reply(path, request, n))
    }

    fn reply(&self, path: &str, request: &[u8], n: u64) -> Reply {
        if self.behaviour == Behaviour::RateLimited && n < RATE_LIMITED_REQUESTS {
            return self.wire.rate_limited();
        }
        let body: Value = match serde_json::from_slice(request) {
            Ok(v) => v,
            Err(e) => {
                let message = format!("the body is not JSON: {e}");
                return self.wire.error(400, &message);
            }
        };
        let asked = self.wire.read(&body);
        let used = asked.schema.map(keywords::keywords_of).unwrap_or_default();
        if let Some(refused) = used
            .iter()
            .find(|k| keywords::handling(&self.keywords, k) == keywords::Handling::Reject)
        {
            let message = format!("Invalid schema: the keyword `{refused}` is not supported");
            return self.wire.error(400, &message);
        }
        let probe = asked
            .user_texts
            .last()
            .and_then(|u| crate::probe::catalogue::recognize(u));
        let mut probe_free_expected = None;
        let (content, finish) = match probe {
            Some((probe, push)) => {
                let present = used.iter().any(|k| k == probe.keyword);
                (self.probe_answer(&probe, push, present), "stop")
            }
            None => {
                let Some(entry) = self.book.entry(&asked.user_texts) else {
                    let message = "the simulation has no answer for this prompt";
                    return self.wire.error(400, message);
                };
                if let Some(answer) = &entry.tools {
                    return self.answer_request(entry, answer, &asked, &body, n);
                }
                let Some(expected) = entry.json.as_ref() else {
                    let message = "the simulation has no answer for this prompt";
                    return self.wire.error(400, message);
                };
                probe_free_expected = Some(expected);
                match self.field_drift(expected, &asked, n) {
                    Some(drifted) => (drifted.to_string(), "stop"),
                    None => self.render(expected, asked.output_limit),
                }
            }
        };
        let answer = shape::Answer {
            content,
            cut_off: finish == "length",
            model: &self.model,
            n,
            prompt_tokens: self.prompt_tokens(&body, asked.prompt_chars),
            tool: asked.tool,
        };
        if self.wire.wants_stream(path, &body) {
            let drifted;
            let answer = match (self.behaviour, probe_free_expected) {
                (Behaviour::StreamDrift, Some(expected)) => {
                    let mut v = expected.clone();
                    if let Some(map) = v.as_object_mut()
                        && let Some(last) = map.keys().next_back().cloned()
                    {
                        map.remove(&last);
                    }
                    drifted = shape::Answer {
                        content: v.to_string(),
                        ..answer
                    };
                    &drifted
                }
                _ => &answer,
            };
            let (content_type, stream) = self.wire.stream(answer);
            return Reply::raw(200, stream, content_type);
        }
        Reply::json(200, &self.wire.success(&answer))
    }

    /// The answer to a `conform probe` request: the one the prompt dictates or describes
    /// (which breaks the keyword), unless the keyword is in the schema and enforced, or
    /// stripped into the description and the prompt does not dictate against it.
    fn probe_answer(
        &self,
        probe: &crate::probe::catalogue::Probe,
        push: crate::probe::catalogue::Push,
        present: bool,
    ) -> String {
        use crate::probe::catalogue::Push;
        use keywords::Handling;
        let kept = present
            && match keywords::handling(&self.keywords, probe.keyword) {
                Handling::Enforce => true,
                Handling::Strip => push == Push::Plain,
                Handling::Ignore | Handling::Reject => false,
            };
        if kept {
            probe.keeping_answer().to_string()
        } else {
            probe.breaking_answer().to_string()
        }
    }

    /// The answer to a request-shaped case: its calls, its text or its JSON, as the
    /// behaviour gives them.
    fn answer_request(
        &self,
        entry: &Entry,
        answer: &tools::ToolAnswer,
        asked: &shape::Asked<'_>,
        body: &Value,
        n: u64,
    ) -> Reply {
        let json = entry.json.as_ref().map(|expected| {
            let (text, _) = self.render(expected, asked.output_limit);
            text
        });
        let cut_json = entry.json.is_some() && self.behaviour == Behaviour::Truncated;
        let drifts = self.drifts(&key_of(&asked.user_texts));
        let mut planned = tools::plan(self.behaviour, answer, json, asked.choice, drifts);
        planned.cut_off |= cut_json;
        let result = shape::Answer {
            content: planned.content,
            cut_off: planned.cut_off,
            model: &self.model,
            n,
            prompt_tokens: self.request_tokens(body, asked.prompt_chars),
            tool: None,
        };
        let named = asked.choice == tools::Choice::Named;
        let calls: Vec<shape::Call<'_>> = (planned.calls.iter())
            .map(|c| shape::Call {
                name: &c.name,
                raw: &c.raw,
            })
            .collect();
        Reply::json(200, &self.wire.success_with_calls(&result, &calls, named))
    }

    /// The answer with one field changed, for the behaviours that change a field, when
    /// this answer is one where the drift shows: the enum field flipped to the enum's
    /// next value, or the free-text field reworded (uniquely: by the request's number).
    fn field_drift(&self, expected: &Value, asked: &shape::Asked<'_>, n: u64) -> Option<Value> {
        if !matches!(self.behaviour, Behaviour::FlipsEnum | Behaviour::VariesText) {
            return None;
        }
        let properties = asked.schema?.get("properties")?.as_object()?;
        let map = expected.as_object()?;
        let (field, replacement) = map.iter().find_map(|(key, value)| {
            let text = value.as_str()?;
            let choices = properties.get(key)?.get("enum").and_then(Value::as_array);
            match (self.behaviour, choices) {
                (Behaviour::FlipsEnum, Some(choices)) if choices.len() > 1 => {
                    let at = choices.iter().position(|c| c == value).unwrap_or(0);
                    Some((key.clone(), choices[(at + 1) % choices.len()].clone()))
                }
                (Behaviour::VariesText, None) => Some((
                    key.clone(),
                    Value::String(format!("{text} (reworded, take {n})")),
                )),
                _ => None,
            }
        })?;
        if !self.drifts(&key_of(&asked.user_texts)) {
            return None;
        }
        let mut drifted = expected.clone();
        if let Some(m) = drifted.as_object_mut() {
            m.insert(field, replacement);
        }
        Some(drifted)
    }

    /// Whether this answer to the case keyed `key` is one where the drift shows: always
    /// at rate 1; otherwise decided by the seed, the case and how often it was asked.
    fn drifts(&self, key: &str) -> bool {
        if self.rate >= 1.0 {
            return true;
        }
        let occurrence = match self.seen.lock() {
            Ok(mut seen) => {
                let n = seen.entry(key.to_string()).or_insert(0);
                *n += 1;
                *n
            }
            Err(_) => 0,
        };
        let digest = conform_config::digest::bytes_hex(
            format!("{}:{key}:{occurrence}", self.seed).as_bytes(),
        );
        let hex = digest.trim_start_matches("sha256:");
        let draw = u64::from_str_radix(hex.get(..16).unwrap_or("0"), 16).unwrap_or(0);
        (draw as f64 / u64::MAX as f64) < self.rate
    }

    /// The prompt tokens of a request-shaped case: counted by the configured tokenizer
    /// over the whole Chat Completions request (messages and tools), as the runner's
    /// counter counts the conversation; else estimated at four bytes a token.
    fn request_tokens(&self, body: &Value, prompt_chars: usize) -> u64 {
        let conversation = || -> Option<conform_config::Conversation> {
            let messages = serde_json::from_value(body.get("messages")?.clone()).ok()?;
            let tools: Vec<conform_config::Tool> = match body.get("tools") {
                Some(t) => serde_json::from_value(t.clone()).ok()?,
                None => Vec::new(),
            };
            Some(conform_config::Conversation {
                messages,
                tools: tools.into(),
                tool_choice: None,
                parallel_tool_calls: None,
                json_answer: false,
            })
        };
        if let (Some(t), Some(c)) = (self.tokenizer.as_ref(), conversation())
            && let Ok(count) = t.count_conversation(&c)
        {
            return count.tokens;
        }
        prompt_chars.div_ceil(4) as u64
    }

    /// The prompt tokens of the request: counted by the configured tokenizer over the
    /// Chat Completions messages, else estimated at four bytes a token.
    fn prompt_tokens(&self, body: &Value, prompt_chars: usize) -> u64 {
        let parsed = crate::tokenize::chat_messages(body);
        if !parsed.is_empty()
            && let Some(count) = self
                .tokenizer
                .as_ref()
                .and_then(|t| t.count_messages(&parsed).ok())
        {
            return count;
        }
        prompt_chars.div_ceil(4) as u64
    }

    fn render(&self, expected: &Value, output_limit: Option<u64>) -> (String, &'static str) {
        let compact = expected.to_string();
        match self.behaviour {
            // The tool-call drifts answer JSON faithfully: what they change is calls.
            Behaviour::Steady
            | Behaviour::RateLimited
            | Behaviour::StreamDrift
            | Behaviour::CallsDespiteNone
            | Behaviour::InventsTool
            | Behaviour::DoubleEncodes
            | Behaviour::DropsRequired
            | Behaviour::CallAsText
            | Behaviour::IgnoresRequired
            | Behaviour::OneOfParallel
            | Behaviour::FlipsEnum
            | Behaviour::VariesText => (compact, "stop"),
            Behaviour::ExtraKey => {
                let mut v = expected.clone();
                if let Some(map) = v.as_object_mut() {
                    map.insert("confidence".into(), json!(0.97));
                }
                (v.to_string(), "stop")
            }
            Behaviour::Fenced => {
                let pretty = serde_json::to_string_pretty(expected).unwrap_or(compact);
                (format!("```json\n{pretty}\n```"), "stop")
            }
            Behaviour::Prose => (prose(expected), "stop"),
            Behaviour::Truncated => {
                let limit = output_limit.unwrap_or(64) as usize;
                let cut = (compact.len() / 2).min(limit * 4).max(1);
                let mut end = cut;
                while !compact.is_char_boundary(end) {
                    end -= 1;
                }
                (compact[..end].to_string(), "length")
            }
        }
    }
}

/// What a model that ignores the format says instead.
fn prose(expected: &Value) -> String {
    let facts: Vec<String> = expected
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.is_string() || v.is_number())
                .take(3)
                .map(|(k, v)| {
                    format!(
                        "the {} is {}",
                        k.replace('_', " "),
                        v.to_string().trim_matches('"')
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "Sure! I have reviewed the document. In short, {}. Let me know if you need anything else.",
        facts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A suite whose cases are `(text, expected label)`, in this order.
    fn suite(cases: &[(&str, &str)]) -> (tempfile::TempDir, Suite) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("cases")).expect("cases dir");
        std::fs::write(
            dir.path().join("suite.toml"),
            "user = \"Text: {{ text }}\"\n",
        )
        .expect("suite.toml");
        std::fs::write(dir.path().join("schema.json"), r#"{"type":"object"}"#).expect("schema");
        for (i, (text, label)) in cases.iter().enumerate() {
            let case = json!({"vars": {"text": text}, "expected": {"label": label}});
            std::fs::write(
                dir.path().join(format!("cases/{i:03}.json")),
                case.to_string(),
            )
            .expect("case");
        }
        let suite = Suite::load(dir.path()).expect("suite");
        (dir, suite)
    }

    #[test]
    fn every_prompt_finds_its_own_answer() {
        let cases: Vec<(String, String)> = (0..300)
            .map(|i| (format!("message {i}"), format!("label {}", i % 7)))
            .collect();
        let refs: Vec<(&str, &str)> = cases
            .iter()
            .map(|(t, l)| (t.as_str(), l.as_str()))
            .collect();
        let (_dir, suite) = suite(&refs);
        let book = AnswerBook::from_suites(&[&suite]).expect("book");
        assert_eq!(book.entries.len(), 7, "equal answers are kept once");
        for (text, label) in &cases {
            assert_eq!(
                book.answer(&format!("Text: {text}")),
                Some(&json!({"label": label})),
                "{text}"
            );
        }
        assert_eq!(book.answer("Text: message 300"), None);
    }

    #[test]
    fn two_cases_of_one_prompt_with_other_answers_are_named_by_the_later_one() {
        let (dir, suite) = suite(&[
            ("same", "a"),
            ("other", "b"),
            ("same", "a"),
            ("same", "c"),
            ("other", "d"),
        ]);
        let problems = AnswerBook::from_suites(&[&suite]).expect_err("two clashes");
        let named: Vec<String> = problems.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(
            named[0].contains(&dir.path().join("cases/003.json").display().to_string()),
            "{named:?}"
        );
        assert!(
            named[1].contains(&dir.path().join("cases/004.json").display().to_string()),
            "{named:?}"
        );
        assert!(named[0].contains("cannot tell them apart"));
    }
}
