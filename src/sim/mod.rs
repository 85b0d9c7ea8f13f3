//! Simulated providers on loopback (wiremock, in-process), for `conform demo` and the
//! tests: no keys, no network.
//!
//! Each simulated provider knows the expected answer of every shipped case (looked up
//! by a digest of the rendered prompt), and answers it the way its [`Behaviour`] says:
//! faithfully, or drifting the way real fallbacks drift. A simulation speaks the wire
//! of the vendor its `[sim] wire` names (see [`shape`]), so the runner calls it through
//! that vendor's adapter.

pub mod keywords;
pub mod latency;
mod shape;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::config::{Diagnostic, Diagnostics, Kind, ProviderConfig, Suite};
use crate::tokenize::{Counter, Tokenizer};

/// How a simulated provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// The expected answer, as JSON, every time.
    Steady,
    /// The expected answer plus an invented top-level key.
    ExtraKey,
    /// The expected answer wrapped in markdown fences.
    Fenced,
    /// Ignores the requested format and answers in prose.
    Prose,
    /// Stops at the token limit: half the JSON, `finish_reason: "length"`.
    Truncated,
    /// Answers the first [`RATE_LIMITED_REQUESTS`] requests with 429 and `Retry-After: 1`,
    /// then behaves.
    RateLimited,
    /// Answers faithfully when asked for one document, but streams a different answer
    /// (the last field dropped), as a proxy that rewrites streamed chunks does.
    StreamDrift,
}

/// How many requests a [`Behaviour::RateLimited`] provider turns away.
pub const RATE_LIMITED_REQUESTS: u64 = 3;

/// The expected answer of every case, by prompt.
#[derive(Debug, Default)]
pub struct AnswerBook {
    answers: HashMap<String, Value>,
}

impl AnswerBook {
    /// Renders every case of every suite; a case without `expected` is a problem, since
    /// the simulation would have nothing to answer.
    pub fn from_suites(suites: &[&Suite]) -> Result<AnswerBook, Diagnostics> {
        let mut book = AnswerBook::default();
        let mut problems = Diagnostics::default();
        for suite in suites {
            for case_ref in &suite.cases {
                let case = match case_ref.load() {
                    Ok(case) => case,
                    Err(d) => {
                        problems.push(d);
                        continue;
                    }
                };
                let prompt = match suite.render(&case, &case_ref.path()) {
                    Ok(p) => p,
                    Err(d) => {
                        problems.extend(d);
                        continue;
                    }
                };
                match case.expected {
                    Some(expected) => {
                        book.answers.insert(key(&prompt.user), expected);
                    }
                    None => problems.push(
                        Diagnostic::new(
                            &case_ref.path(),
                            "a simulated provider needs the case's expected answer",
                        )
                        .field("expected"),
                    ),
                }
            }
        }
        if problems.is_empty() {
            Ok(book)
        } else {
            Err(problems)
        }
    }

    /// The expected answer for a rendered user prompt.
    pub fn answer(&self, user_prompt: &str) -> Option<&Value> {
        self.answers.get(&key(user_prompt))
    }
}

fn key(user_prompt: &str) -> String {
    crate::digest::bytes_hex(user_prompt.as_bytes())
}

/// A running simulated provider.
pub struct SimServer {
    server: MockServer,
    requests: Arc<AtomicU64>,
}

impl SimServer {
    /// Starts a simulated provider for `config` on a free loopback port.
    pub async fn start(config: &ProviderConfig, book: Arc<AnswerBook>) -> SimServer {
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
        let server = MockServer::builder()
            .disable_request_recording()
            .start()
            .await;
        let wire = config.wire_kind();
        Mock::given(method("POST"))
            .and(path_regex(shape::route(wire)))
            .respond_with(SimResponder {
                book,
                behaviour,
                wire,
                latency,
                time_scale,
                keywords,
                model: format!("{}-sim-2026-06-01", config.model),
                requests: Arc::clone(&requests),
                tokenizer,
            })
            .mount(&server)
            .await;
        SimServer { server, requests }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

struct SimResponder {
    book: Arc<AnswerBook>,
    behaviour: Behaviour,
    wire: Kind,
    latency: latency::Latency,
    /// The simulated clock's speed: an answer of latency L takes L × this.
    time_scale: f64,
    keywords: std::collections::BTreeMap<String, keywords::Handling>,
    model: String,
    requests: Arc<AtomicU64>,
    tokenizer: Option<Arc<dyn Tokenizer>>,
}

impl Respond for SimResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        let delay = self.latency.nth(n).mul_f64(self.time_scale);
        let reply = |t: ResponseTemplate| t.set_delay(delay);
        if self.behaviour == Behaviour::RateLimited && n < RATE_LIMITED_REQUESTS {
            return reply(shape::rate_limited(self.wire));
        }
        let body: Value = match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => {
                let message = format!("the body is not JSON: {e}");
                return reply(shape::error(self.wire, 400, &message));
            }
        };
        let asked = shape::read(self.wire, &body);
        let used = asked.schema.map(keywords::keywords_of).unwrap_or_default();
        if let Some(refused) = used
            .iter()
            .find(|k| keywords::handling(&self.keywords, k) == keywords::Handling::Reject)
        {
            let message = format!("Invalid schema: the keyword `{refused}` is not supported");
            return reply(shape::error(self.wire, 400, &message));
        }
        let probe = asked.user.and_then(crate::probe::catalogue::recognize);
        let expected = asked.user.and_then(|u| self.book.answer(u));
        let probe_free_expected = expected.filter(|_| probe.is_none());
        let (content, finish) = match (probe, expected) {
            (Some((probe, push)), _) => {
                let present = used.iter().any(|k| k == probe.keyword);
                (self.probe_answer(&probe, push, present), "stop")
            }
            (None, Some(expected)) => self.render(expected, asked.output_limit),
            (None, None) => {
                let message = "the simulation has no answer for this prompt";
                return reply(shape::error(self.wire, 400, message));
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
        if shape::wants_stream(self.wire, request.url.path(), &body) {
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
            let (content_type, stream) = shape::stream(self.wire, answer);
            return reply(ResponseTemplate::new(200).set_body_raw(stream, content_type));
        }
        reply(ResponseTemplate::new(200).set_body_json(shape::success(self.wire, &answer)))
    }
}

impl SimResponder {
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
            Behaviour::Steady | Behaviour::RateLimited | Behaviour::StreamDrift => {
                (compact, "stop")
            }
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
