//! The application in front of the gateway: one chat completion, plain or streamed, and
//! what it received, judged as a client library would judge it. A plain answer is
//! complete when it is a 200 completion with content; a stream, when it ended cleanly
//! with a finish reason and `[DONE]` and no error event. A complete answer is genuine
//! only when its content is what an upstream finished ([`super::upstream::content`]).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::api::Exchange;

/// How the client reaches the gateway.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    /// Shared by every clone: a gateway relaunched on another port is followed at once.
    url: Arc<RwLock<String>>,
    headers: Vec<(String, String)>,
    /// Headers that replace `headers` for one model (Portkey's config per primary).
    per_model: Vec<(String, Vec<(String, String)>)>,
    /// Put before every model's name (TensorZero's `tensorzero::model_name::`).
    model_prefix: String,
    /// With the team's own config: the gateway's name for each model the scenarios ask
    /// for; a model not named here is one the config does not have.
    names: Option<Vec<(String, String)>>,
}

/// What the client received.
#[derive(Debug, Clone, Serialize)]
pub struct Received {
    /// 0 when no answer came.
    pub status: u16,
    /// The content the client assembled (a stream's deltas joined).
    pub content: Option<String>,
    /// The answer's `model`.
    pub model: Option<String>,
    /// A plain completion with content, or a stream with a finish reason and `[DONE]`
    /// that ended without an error event or a transfer error.
    pub complete: bool,
    /// Why the answer ended, as it says; none when it never said.
    pub finish_reason: Option<String>,
    /// The stream's `[DONE]` arrived.
    pub done: bool,
    /// The stream carried an event with an error in it.
    pub error_event: bool,
    /// The body broke off, or did not arrive in time.
    pub transfer_error: Option<String>,
    /// The answer's `usage` (a stream's last one), when it carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// How long the request took, to the end of the body or its error.
    pub ms: u64,
    /// When the first byte of the body arrived, after the request was sent.
    pub first_byte_ms: Option<u64>,
    /// The exchange, for the evidence.
    #[serde(skip)]
    pub exchange: Option<Exchange>,
}

/// The token counts an answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens of the request, which each upstream reports differently: they tell which
    /// one counted it.
    pub prompt_tokens: Option<u64>,
    /// Tokens of the answer.
    pub completion_tokens: Option<u64>,
    /// Both.
    pub total_tokens: Option<u64>,
}

impl Usage {
    /// The `usage` object of an answer or a stream's event, if it holds any count.
    fn read(value: &Value) -> Option<Usage> {
        let usage = value.get("usage")?;
        let count = |k: &str| usage.get(k).and_then(Value::as_u64);
        let read = Usage {
            prompt_tokens: count("prompt_tokens"),
            completion_tokens: count("completion_tokens"),
            total_tokens: count("total_tokens"),
        };
        (read.prompt_tokens.is_some()
            || read.completion_tokens.is_some()
            || read.total_tokens.is_some())
        .then_some(read)
    }
}

impl Received {
    /// The content parsed as a genuine answer: (served_by, tag).
    pub fn served(&self) -> Option<(String, String)> {
        let v: Value = serde_json::from_str(self.content.as_deref()?).ok()?;
        Some((
            v.get("served_by")?.as_str()?.to_string(),
            v.get("tag")?.as_str()?.to_string(),
        ))
    }

    /// What a client that sent nothing holds.
    pub fn unsent() -> Received {
        Received {
            status: 0,
            content: None,
            model: None,
            complete: false,
            finish_reason: None,
            done: false,
            error_event: false,
            transfer_error: None,
            usage: None,
            ms: 0,
            first_byte_ms: None,
            exchange: None,
        }
    }

    /// One line for the evidence.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("HTTP {}", self.status)];
        if let Some(m) = &self.model {
            parts.push(format!("model {m}"));
        }
        if let Some(f) = &self.finish_reason {
            parts.push(format!("finish_reason {f}"));
        }
        if self.done {
            parts.push("[DONE]".into());
        }
        if self.error_event {
            parts.push("an error event".into());
        }
        if let Some(e) = &self.transfer_error {
            parts.push(format!("transfer error: {e}"));
        }
        parts.push(format!(
            "content {}",
            self.content
                .as_deref()
                .map_or("none".to_string(), |c| format!("{c:?}"))
        ));
        if let Some(tokens) = self.usage.and_then(|u| u.prompt_tokens) {
            parts.push(format!("usage {tokens} prompt tokens"));
        }
        parts.join(", ")
    }
}

/// How long a client waits for a whole answer: longer than any scripted hang.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(60);

impl Client {
    /// `url` is the gateway's chat completions endpoint; `headers` go on every request
    /// (the gateway's key, Portkey's config).
    pub(crate) fn new(
        url: String,
        headers: Vec<(String, String)>,
    ) -> Result<Client, reqwest::Error> {
        // reqwest is built without a default TLS provider; a gateway may be https.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(ANSWER_WITHIN)
            .no_proxy()
            .build()?;
        Ok(Client {
            http,
            url: Arc::new(RwLock::new(url)),
            headers,
            per_model: Vec::new(),
            model_prefix: String::new(),
            names: None,
        })
    }

    /// Sends every request from now on to `url` (the gateway restarted elsewhere).
    pub(crate) fn retarget(&self, url: String) {
        *self.url.write().unwrap_or_else(|e| e.into_inner()) = url;
    }

    fn url(&self) -> String {
        self.url.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Asks for each `(model, name)`'s model by `name`, and for no other model.
    pub(crate) fn with_names(mut self, names: Vec<(String, String)>) -> Client {
        self.names = Some(names);
        self
    }

    /// The gateway has a name for `model`.
    pub(crate) fn offers(&self, model: &str) -> bool {
        (self.names.as_ref()).is_none_or(|names| names.iter().any(|(m, _)| m == model))
    }

    fn name<'a>(&'a self, model: &'a str) -> &'a str {
        (self.names.iter().flatten())
            .find(|(m, _)| m == model)
            .map_or(model, |(_, n)| n.as_str())
    }

    /// Requests for `model` carry `headers` instead.
    pub(crate) fn for_model(mut self, model: &str, headers: Vec<(String, String)>) -> Client {
        self.per_model.push((model.to_string(), headers));
        self
    }

    /// Every model's name is sent with `prefix` before it.
    pub(crate) fn with_model_prefix(mut self, prefix: &str) -> Client {
        self.model_prefix = prefix.to_string();
        self
    }

    /// Asks `model` for the invoice of `tag`, streamed or not, with the top-level fields
    /// `extra` added (say, the stream options a client sets to get the usage).
    pub(crate) async fn ask_with(
        &self,
        model: &str,
        tag: &str,
        stream: bool,
        extra: &[(&str, Value)],
    ) -> Received {
        let mut body = json!({
            "model": format!("{}{}", self.model_prefix, self.name(model)),
            "messages": [
                {"role": "system", "content": "Extract the invoice total as JSON."},
                {"role": "user", "content": format!("Invoice {tag}: 1 x widget at 12.50 EUR.")},
            ],
            "temperature": 0,
            "stream": stream,
        });
        for (key, value) in extra {
            body[*key] = value.clone();
        }
        let started = Instant::now();
        let url = self.url();
        let mut request = self.http.post(&url).json(&body);
        let headers = (self.per_model.iter())
            .find(|(m, _)| m == model)
            .map_or(&self.headers, |(_, h)| h);
        for (k, v) in headers {
            request = request.header(k, v);
        }
        let mut received = Received::unsent();
        let (bytes, content_type) = match request.send().await {
            Ok(mut response) => {
                received.status = response.status().as_u16();
                let content_type = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let mut bytes = Vec::new();
                loop {
                    match response.chunk().await {
                        Ok(Some(piece)) => {
                            received
                                .first_byte_ms
                                .get_or_insert_with(|| started.elapsed().as_millis() as u64);
                            bytes.extend_from_slice(&piece)
                        }
                        Ok(None) => break,
                        Err(e) => {
                            received.transfer_error = Some(error_chain(&e));
                            break;
                        }
                    }
                }
                (bytes, content_type)
            }
            Err(e) => {
                received.transfer_error = Some(error_chain(&e));
                (Vec::new(), None)
            }
        };
        received.ms = started.elapsed().as_millis() as u64;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let answer = if stream && received.status == 200 && !text.trim_start().starts_with('{') {
            read_stream(&text, &mut received);
            json!({"stream": text.lines().filter(|l| !l.is_empty()).take(40).collect::<Vec<_>>()})
        } else {
            let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            read_plain(&value, &mut received);
            value
        };
        received.complete &= received.transfer_error.is_none();
        received.exchange = Some(Exchange {
            method: "POST".into(),
            path: url,
            owner: None,
            idempotency_keys: Vec::new(),
            body: Some(body),
            status: received.status,
            content_type,
            idempotent_replayed: None,
            answer,
            error: received.transfer_error.clone(),
            ms: received.ms,
        });
        received
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn read_plain(value: &Value, received: &mut Received) {
    received.usage = Usage::read(value);
    received.model = value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    let choice = value.pointer("/choices/0");
    received.content = choice
        .and_then(|c| c.pointer("/message/content"))
        .and_then(Value::as_str)
        .map(str::to_string);
    received.finish_reason = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        .map(str::to_string);
    received.complete = received.status == 200 && received.content.is_some();
}

/// Reads SSE `data:` events: content deltas joined, the finish reason, `[DONE]`, and any
/// error event.
fn read_stream(text: &str, received: &mut Received) {
    let mut content = String::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data == "[DONE]" {
            received.done = true;
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if event.get("error").is_some() {
            received.error_event = true;
        }
        if let Some(usage) = Usage::read(&event) {
            received.usage = Some(usage);
        }
        if let Some(m) = event.get("model").and_then(Value::as_str)
            && !m.is_empty()
        {
            received.model = Some(m.to_string());
        }
        if let Some(piece) = event
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            content.push_str(piece);
        }
        if let Some(f) = event
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
        {
            received.finish_reason = Some(f.to_string());
        }
    }
    received.content = Some(content);
    received.complete = received.finish_reason.is_some() && received.done && !received.error_event;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blank() -> Received {
        Received {
            status: 200,
            ..Received::unsent()
        }
    }

    #[test]
    fn a_stream_is_complete_only_with_a_finish_reason_and_done_and_no_error() {
        let whole = "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"{\\\"a\\\"\"}}]}\n\n\
                     data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let mut r = blank();
        read_stream(whole, &mut r);
        assert!(r.complete);
        assert_eq!(r.content.as_deref(), Some("{\"a\""));
        assert_eq!(r.model.as_deref(), Some("m"));
        assert_eq!(r.usage, None);
        let mut r = blank();
        let with_usage = whole.replace(
            "data: [DONE]",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":24,\"completion_tokens\":3}}\n\ndata: [DONE]",
        );
        read_stream(&with_usage, &mut r);
        assert!(r.complete);
        assert_eq!(r.usage.as_ref().and_then(|u| u.prompt_tokens), Some(24));
        let mut r = blank();
        read_stream(&whole.replace("data: [DONE]", ""), &mut r);
        assert!(!r.complete);
        let mut r = blank();
        read_stream(
            &format!("{whole}data: {{\"error\":{{\"message\":\"x\"}}}}\n\n"),
            &mut r,
        );
        assert!(!r.complete && r.error_event);
    }

    #[test]
    fn usage_is_read_from_an_answer_and_from_a_streams_last_usage() {
        let mut r = blank();
        let answer = json!({"model": "m", "choices": [{"message": {"content": "x"}}],
            "usage": {"prompt_tokens": 31, "completion_tokens": 4, "total_tokens": 35}});
        read_plain(&answer, &mut r);
        assert_eq!(r.usage.and_then(|u| u.prompt_tokens), Some(31));
        let mut r = blank();
        read_plain(&json!({"usage": null}), &mut r);
        assert_eq!(r.usage, None);
        let mut r = blank();
        read_stream(
            "data: {\"choices\":[],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":24}}\n\n",
            &mut r,
        );
        assert_eq!(r.usage.and_then(|u| u.prompt_tokens), Some(24));
    }

    #[test]
    fn a_genuine_answer_names_who_served_it() {
        let mut r = blank();
        r.content = Some(super::super::upstream::content("fallback", "ctagx1"));
        assert_eq!(r.served(), Some(("fallback".into(), "ctagx1".into())));
        r.content = Some("{\"served_by\": \"fall".into());
        assert_eq!(r.served(), None);
    }
}
