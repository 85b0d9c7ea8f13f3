//! The mock providers' shared script board: what each provider answers to each job,
//! and every request each one received.
//!
//! Every job a scenario creates carries a unique tag in its `input` (the orchestrator
//! passes the input through as the provider request's body), so one long-lived mock per
//! provider name serves every scenario: the board picks the script by the tag it finds
//! in the body, and counts arrivals per (provider, tag). A request without a known tag
//! is a *stray*: work nobody asked for.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

/// The prefix of every tag; what follows is lowercase alphanumeric.
pub(crate) const TAG_PREFIX: &str = "ctag";

/// What a provider answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// A complete 200 chat completion whose first choice's content is `content`.
    Result { content: String },
    /// This status with an OpenAI-style error body (`Retry-After: 1` on 429, 503, 529;
    /// `Location` back to the same path on a 3xx).
    Status { status: u16 },
    /// A complete 200 whose `choices` list is empty: no usable first choice.
    NoChoice,
    /// The connection is reset after the request was read, before any answer. Only the
    /// fault server can do this; wiremock answers it with a 200 result.
    Reset,
    /// A 200 whose body stops half-way through its announced length. Only the fault
    /// server can do this.
    Truncated,
}

impl Reply {
    /// A result that says who answered: `{"provider": "primary", "arrival": 1}`.
    pub fn answer(provider: &str, arrival: usize) -> Reply {
        Reply::Result {
            content: answer_content(provider, arrival),
        }
    }
}

/// The content of [`Reply::answer`]; the job's `result` is this, parsed.
pub(crate) fn answer_content(provider: &str, arrival: usize) -> String {
    json!({"provider": provider, "arrival": arrival}).to_string()
}

/// When a reply is sent, counted from the request's arrival or on the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    Now,
    AfterMs(u64),
    /// At this instant (milliseconds since the Unix epoch), so that several providers
    /// can answer at the same moment.
    AtUnixMs(u64),
}

impl When {
    /// How long to wait from now.
    pub fn delay(self) -> Duration {
        match self {
            When::Now => Duration::ZERO,
            When::AfterMs(ms) => Duration::from_millis(ms),
            When::AtUnixMs(at) => Duration::from_millis(at.saturating_sub(unix_ms())),
        }
    }
}

/// One reply and when it is sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub reply: Reply,
    pub when: When,
}

impl Step {
    pub fn now(reply: Reply) -> Step {
        Step {
            reply,
            when: When::Now,
        }
    }

    pub fn after(delay: Duration, reply: Reply) -> Step {
        Step {
            reply,
            when: When::AfterMs(delay.as_millis() as u64),
        }
    }

    pub fn at(instant: SystemTime, reply: Reply) -> Step {
        let ms = instant
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Step {
            reply,
            when: When::AtUnixMs(ms),
        }
    }
}

/// A request a provider received.
#[derive(Debug, Clone, Serialize)]
pub struct Arrival {
    pub provider: String,
    pub tag: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    pub method: String,
    pub path: String,
    /// The body, as JSON when it parses.
    pub body: Value,
    /// What the provider answered (or will answer, after the delay).
    pub answer: Step,
}

#[derive(Default)]
struct Inner {
    /// Every tag a scenario handed out.
    tags: HashSet<String>,
    /// By (provider, tag): the replies in arrival order, the last one repeating.
    scripts: HashMap<(String, String), Vec<Step>>,
    arrivals: HashMap<(String, String), Vec<Arrival>>,
    strays: Vec<Arrival>,
}

/// The board every mock provider reads its script from and reports arrivals to.
#[derive(Clone, Default)]
pub struct Board {
    inner: Arc<Mutex<Inner>>,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-written in a way that
        // matters for counting, so a poisoned lock is still read.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `tag` known: requests carrying it are counted, not strays.
    pub fn register(&self, tag: &str) {
        self.lock().tags.insert(tag.to_string());
    }

    /// Sets what `provider` answers to requests carrying `tag` (and registers the tag).
    /// Without a script, a provider answers every known tag with [`Reply::answer`].
    pub fn script(&self, provider: &str, tag: &str, steps: Vec<Step>) {
        let mut inner = self.lock();
        inner.tags.insert(tag.to_string());
        inner
            .scripts
            .insert((provider.to_string(), tag.to_string()), steps);
    }

    /// Records a request and decides the answer.
    pub fn arrive(&self, provider: &str, method: &str, path: &str, body: &[u8]) -> Arrival {
        let tag = find_tag(body);
        let body_value = serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
        let mut inner = self.lock();
        let known = tag.as_ref().filter(|t| inner.tags.contains(*t));
        let mut arrival = Arrival {
            provider: provider.to_string(),
            tag: tag.clone(),
            at_unix_ms: unix_ms(),
            method: method.to_string(),
            path: path.to_string(),
            body: body_value,
            answer: Step::now(Reply::Status { status: 404 }),
        };
        match known.cloned() {
            Some(tag) => {
                let key = (provider.to_string(), tag);
                let index = inner.arrivals.get(&key).map_or(0, Vec::len);
                arrival.answer = match inner.scripts.get(&key) {
                    Some(steps) => steps
                        .get(index)
                        .or(steps.last())
                        .cloned()
                        .unwrap_or_else(|| Step::now(Reply::answer(provider, index + 1))),
                    None => Step::now(Reply::answer(provider, index + 1)),
                };
                inner.arrivals.entry(key).or_default().push(arrival.clone());
            }
            None => inner.strays.push(arrival.clone()),
        }
        arrival
    }

    /// Requests `provider` received for `tag`.
    pub fn count(&self, provider: &str, tag: &str) -> usize {
        self.lock()
            .arrivals
            .get(&(provider.to_string(), tag.to_string()))
            .map_or(0, Vec::len)
    }

    /// The requests `provider` received for `tag`, in order.
    pub fn arrivals(&self, provider: &str, tag: &str) -> Vec<Arrival> {
        self.lock()
            .arrivals
            .get(&(provider.to_string(), tag.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// Requests that carried no tag a scenario had scripted.
    pub fn strays(&self) -> Vec<Arrival> {
        self.lock().strays.clone()
    }
}

/// The tag in a request body: `ctag` followed by lowercase alphanumerics.
pub(crate) fn find_tag(body: &[u8]) -> Option<String> {
    let prefix = TAG_PREFIX.as_bytes();
    let start = body.windows(prefix.len()).position(|w| w == prefix)?;
    let tail = &body[start..];
    let len = tail
        .iter()
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        .count();
    (len > prefix.len()).then(|| String::from_utf8_lossy(&tail[..len]).into_owned())
}

/// The HTTP answer for a reply, as status, headers and body. `Reset` and `Truncated`
/// have no faithful HTTP form; callers that cannot produce them send this instead.
pub(crate) fn http_answer(
    provider: &str,
    arrival: &Arrival,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let json_header = ("content-type".to_string(), "application/json".to_string());
    match &arrival.answer.reply {
        Reply::Result { .. } | Reply::Reset | Reply::Truncated => {
            let content = match &arrival.answer.reply {
                Reply::Result { content } => content.clone(),
                _ => String::new(),
            };
            (200, vec![json_header], completion(provider, Some(&content)))
        }
        Reply::NoChoice => (200, vec![json_header], completion(provider, None)),
        Reply::Status { status } => {
            let mut headers = vec![json_header];
            if matches!(status, 429 | 503 | 529) {
                headers.push(("retry-after".to_string(), "1".to_string()));
            }
            if (300..400).contains(status) {
                headers.push(("location".to_string(), arrival.path.clone()));
            }
            let body = json!({"error": {
                "message": format!("simulated HTTP {status} from {provider}"),
                "type": if *status >= 500 { "server_error" } else { "invalid_request_error" },
                "code": null,
            }});
            (*status, headers, body.to_string().into_bytes())
        }
    }
}

/// An OpenAI chat completion; `content: None` gives an empty `choices` list.
pub(crate) fn completion(provider: &str, content: Option<&str>) -> Vec<u8> {
    let choices = match content {
        Some(c) => json!([{
            "index": 0,
            "message": {"role": "assistant", "content": c},
            "logprobs": null,
            "finish_reason": "stop",
        }]),
        None => json!([]),
    };
    json!({
        "id": format!("chatcmpl-{}", unix_ms()),
        "object": "chat.completion",
        "created": unix_ms() / 1000,
        "model": format!("{provider}-mock"),
        "choices": choices,
        "usage": {"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33},
    })
    .to_string()
    .into_bytes()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_tag_in_a_json_body() {
        let body = br#"{"messages":[{"role":"user","content":"extract ctag7f3a9x12"}]}"#;
        assert_eq!(find_tag(body).as_deref(), Some("ctag7f3a9x12"));
        assert_eq!(find_tag(b"{\"content\":\"ctag\"}"), None);
        assert_eq!(find_tag(b"no tag here"), None);
    }

    #[test]
    fn scripts_answer_in_arrival_order_and_repeat_the_last_step() {
        let board = Board::default();
        board.script(
            "primary",
            "ctag1",
            vec![
                Step::now(Reply::Status { status: 503 }),
                Step::now(Reply::NoChoice),
            ],
        );
        let body = br#"{"content":"ctag1"}"#;
        let answers: Vec<Reply> = (0..3)
            .map(|_| board.arrive("primary", "POST", "/v1/chat/completions", body))
            .map(|a| a.answer.reply)
            .collect();
        assert_eq!(
            answers,
            vec![
                Reply::Status { status: 503 },
                Reply::NoChoice,
                Reply::NoChoice
            ]
        );
        assert_eq!(board.count("primary", "ctag1"), 3);
        assert_eq!(board.count("fallback", "ctag1"), 0);
    }

    #[test]
    fn unknown_tags_are_strays_and_known_ones_get_a_default_answer() {
        let board = Board::default();
        board.script("primary", "ctag1", vec![Step::now(Reply::NoChoice)]);
        let a = board.arrive("fallback", "POST", "/", br#"{"content":"ctag1"}"#);
        assert_eq!(a.answer.reply, Reply::answer("fallback", 1));
        assert_eq!(board.count("fallback", "ctag1"), 1);
        board.arrive("primary", "POST", "/", b"{}");
        board.arrive("primary", "POST", "/", b"ctag9");
        assert_eq!(board.strays().len(), 2);
        assert_eq!(board.count("primary", "ctag1"), 0);
    }

    #[test]
    fn a_3xx_points_back_and_a_429_asks_to_wait() {
        let board = Board::default();
        board.script(
            "p",
            "ctag2",
            vec![
                Step::now(Reply::Status { status: 307 }),
                Step::now(Reply::Status { status: 429 }),
            ],
        );
        let a = board.arrive("p", "POST", "/v1/chat/completions", b"ctag2");
        let (status, headers, _) = http_answer("p", &a);
        assert_eq!(status, 307);
        assert!(headers.contains(&("location".into(), "/v1/chat/completions".into())));
        let a = board.arrive("p", "POST", "/v1/chat/completions", b"ctag2");
        let (status, headers, _) = http_answer("p", &a);
        assert_eq!(status, 429);
        assert!(headers.contains(&("retry-after".into(), "1".into())));
    }
}
