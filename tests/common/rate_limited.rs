//! A Chat Completions server behind an account's rate limits, as OpenAI enforces them: a
//! token bucket for requests and one for tokens (each refilled continuously), OpenAI's
//! `x-ratelimit-*` headers on every answer, and a 429 with `retry-after-ms` when a
//! request does not fit. A request is charged what OpenAI charges before it answers: its
//! messages' characters ÷ 4 plus its output ceiling. [`RateLimited::per_minute`] is an
//! account as OpenAI runs one: the headers state the limit per minute, and it is enforced
//! over short windows besides (a second's worth at most at once). Shared by
//! `tests/pacing.rs` and the `run_throughput` bench (`--paced`); it needs only wiremock
//! and serde_json.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

/// One bucket: its size and refill per second.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub capacity: f64,
    pub per_second: f64,
}

#[derive(Debug)]
struct Level {
    limit: Limit,
    level: f64,
}

impl Level {
    fn new(limit: Limit) -> Self {
        Level {
            limit,
            level: limit.capacity,
        }
    }

    fn refill(&mut self, seconds: f64) {
        self.level = (self.level + seconds * self.limit.per_second).min(self.limit.capacity);
    }

    /// How long until `cost` fits.
    fn short_of(&self, cost: f64) -> Duration {
        let missing = (cost.min(self.limit.capacity) - self.level).max(0.0);
        Duration::from_secs_f64(missing / self.limit.per_second)
    }

    /// The OpenAI headers of this dimension: the bucket's size, what is left (whole), and
    /// how long until it is full again.
    fn headers(&self, what: &str, mut answer: ResponseTemplate) -> ResponseTemplate {
        let reset = (self.limit.capacity - self.level).max(0.0) / self.limit.per_second;
        answer = answer
            .insert_header(
                format!("x-ratelimit-limit-{what}").as_str(),
                format!("{}", self.limit.capacity as u64),
            )
            .insert_header(
                format!("x-ratelimit-remaining-{what}").as_str(),
                format!("{}", self.level.max(0.0).floor() as u64),
            )
            .insert_header(
                format!("x-ratelimit-reset-{what}").as_str(),
                format!("{}ms", (reset * 1000.0).ceil() as u64),
            );
        answer
    }
}

#[derive(Debug)]
struct Buckets {
    requests: Option<Level>,
    tokens: Option<Level>,
    /// Requests enforced over a short window too, and not stated in any header.
    enforced: Option<Level>,
    at: Instant,
}

/// The server: answers `content` to every request that fits the buckets.
#[derive(Debug)]
pub struct RateLimited {
    buckets: Mutex<Buckets>,
    content: String,
    /// Requests received, answered 200, and answered 429.
    pub received: AtomicU64,
    pub answered: AtomicU64,
    pub throttled: AtomicU64,
    /// Whether answers state the limits (OpenAI's headers), or only a 429's wait does
    /// (as Gemini's `RetryInfo`).
    pub states_limits: bool,
    /// When each request arrived.
    arrivals: Mutex<Vec<Instant>>,
}

impl RateLimited {
    pub fn new(requests: Option<Limit>, tokens: Option<Limit>, content: &str) -> Self {
        RateLimited {
            buckets: Mutex::new(Buckets {
                requests: requests.map(Level::new),
                tokens: tokens.map(Level::new),
                enforced: None,
                at: Instant::now(),
            }),
            content: content.to_string(),
            received: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            states_limits: true,
            arrivals: Mutex::new(Vec::new()),
        }
    }

    /// The most requests that arrived within any `window`: with answers that take longer
    /// than `window`, all of them were in flight at once.
    pub fn most_arrived_within(&self, window: Duration) -> usize {
        let arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        let mut first = 0;
        let mut most = 0;
        for (last, at) in arrivals.iter().enumerate() {
            while at.duration_since(arrivals[first]) >= window {
                first += 1;
            }
            most = most.max(last + 1 - first);
        }
        most
    }

    /// An account of `per_minute` requests a minute as OpenAI states and enforces it
    /// (issue 46): the headers say the minute's limit, what is left of it and when it is
    /// full again, and the account also holds the requests to a second's worth at once,
    /// refilled at `per_minute` ÷ 60 a second, which no header states.
    pub fn per_minute(per_minute: f64, content: &str) -> Self {
        let per_second = per_minute / 60.0;
        let stated = Limit {
            capacity: per_minute,
            per_second,
        };
        let server = RateLimited::new(Some(stated), None, content);
        server
            .buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .enforced = Some(Level::new(Limit {
            capacity: per_second,
            per_second,
        }));
        server
    }

    /// The same server, stating its limits only in its 429s (no headers).
    pub fn unstated(mut self) -> Self {
        self.states_limits = false;
        self
    }

    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.received.load(Ordering::SeqCst),
            self.answered.load(Ordering::SeqCst),
            self.throttled.load(Ordering::SeqCst),
        )
    }
}

/// What OpenAI charges a request against tokens per minute before answering it.
pub fn charged_tokens(body: &Value) -> f64 {
    let characters: usize = body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .map(str::len)
                .sum()
        })
        .unwrap_or(0);
    let ceiling = body["max_completion_tokens"]
        .as_u64()
        .or_else(|| body["max_tokens"].as_u64())
        .unwrap_or(0);
    (characters / 4) as f64 + ceiling as f64
}

impl Respond for RateLimited {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.received.fetch_add(1, Ordering::SeqCst);
        (self.arrivals.lock().unwrap_or_else(|e| e.into_inner())).push(Instant::now());
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let cost = charged_tokens(&body);
        let mut guard = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let buckets = &mut *guard;
        let now = Instant::now();
        let seconds = (now - buckets.at).as_secs_f64();
        buckets.at = now;
        for level in [
            &mut buckets.requests,
            &mut buckets.tokens,
            &mut buckets.enforced,
        ]
        .into_iter()
        .flatten()
        {
            level.refill(seconds);
        }
        let wait = [
            buckets.requests.as_ref().map(|l| l.short_of(1.0)),
            buckets.tokens.as_ref().map(|l| l.short_of(cost)),
            buckets.enforced.as_ref().map(|l| l.short_of(1.0)),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or_default();
        let mut answer = if wait.is_zero() {
            for l in [&mut buckets.requests, &mut buckets.enforced]
                .into_iter()
                .flatten()
            {
                l.level -= 1.0;
            }
            if let Some(l) = &mut buckets.tokens {
                l.level -= cost.min(l.limit.capacity);
            }
            self.answered.fetch_add(1, Ordering::SeqCst);
            ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-paced", "object": "chat.completion", "created": 1727346143,
                "model": "paced-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.content},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}
            }))
        } else {
            self.throttled.fetch_add(1, Ordering::SeqCst);
            ResponseTemplate::new(429)
                .insert_header(
                    "retry-after-ms",
                    format!("{}", (wait.as_secs_f64() * 1000.0).ceil() as u64),
                )
                .set_body_json(json!({"error": {
                    "message": "Rate limit reached for paced-model on requests per min (RPM). Please try again shortly.",
                    "type": "requests", "param": null, "code": "rate_limit_exceeded"}}))
        };
        if !self.states_limits {
            return answer;
        }
        if let Some(l) = &buckets.requests {
            answer = l.headers("requests", answer);
        }
        if let Some(l) = &buckets.tokens {
            answer = l.headers("tokens", answer);
        }
        answer
    }
}

// What `tests/pacing.rs` measures a resumed run with; the bench, which includes this file
// too, does not.
#[allow(dead_code)]
impl RateLimited {
    /// Requests a second the server received from the `from`-th request on: how fast a
    /// run sent them, from its first request to its last.
    pub fn rate_from(&self, from: usize) -> f64 {
        let arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        let sent = &arrivals[from.min(arrivals.len())..];
        match (sent.first(), sent.last()) {
            (Some(first), Some(last)) if sent.len() > 1 => {
                (sent.len() - 1) as f64 / last.duration_since(*first).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// Empties the buckets, as calls of another run just before would have.
    pub fn drain(&self) {
        let mut guard = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let buckets = &mut *guard;
        buckets.at = Instant::now();
        for level in [
            &mut buckets.requests,
            &mut buckets.tokens,
            &mut buckets.enforced,
        ]
        .into_iter()
        .flatten()
        {
            level.level = 0.0;
        }
    }

    /// Requests received so far.
    pub fn arrived(&self) -> usize {
        self.arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}
