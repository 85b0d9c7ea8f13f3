//! A mock OpenAI-compatible provider for the load programs: it answers by a directive in
//! the request (`do:ok`, `do:fail`, `do:err500`, `do:late`, `do:slow`; anything else is
//! `ok`) and counts the requests it received per job tag (`soaktag<digits>`), so a run
//! can check that no attempt was sent twice. Requests under `/fallback` (the fallback
//! provider's base URL) are always answered at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// How long `do:late` waits (past a 1 s deadline, inside a 1 s late window).
pub const LATE: Duration = Duration::from_millis(1400);
/// How long `do:slow` waits: past any deadline and late window the programs use.
pub const SLOW: Duration = Duration::from_secs(6);

/// Requests per tag, shared with the responder.
#[derive(Clone, Default)]
pub struct Counts(Arc<Mutex<HashMap<String, usize>>>);

impl Counts {
    pub fn get(&self, tag: &str) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tag)
            .copied()
            .unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum()
    }
}

pub struct Upstream {
    pub server: MockServer,
    pub counts: Counts,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let server = MockServer::builder()
            .disable_request_recording()
            .start()
            .await;
        let counts = Counts::default();
        Mock::given(any())
            .respond_with(Responder {
                counts: counts.clone(),
            })
            .mount(&server)
            .await;
        Upstream { server, counts }
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }
}

struct Responder {
    counts: Counts,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `soaktag` and the digits after it.
fn tag(body: &[u8]) -> Option<String> {
    let at = find(body, b"soaktag")?;
    let digits = body[at + 7..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    Some(String::from_utf8_lossy(&body[at..at + 7 + digits]).into_owned())
}

fn completion(content: &str) -> serde_json::Value {
    json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        // The directive sits near the start of the prompt; a 2 MB body is not searched
        // through for it.
        let head = &request.body[..request.body.len().min(4096)];
        if let Some(tag) = tag(head) {
            *self
                .counts
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(tag)
                .or_default() += 1;
        }
        let ok = ResponseTemplate::new(200).set_body_json(completion(r#"{"total": 1250}"#));
        // The fallback (base URL `…/fallback`) always answers at once.
        if request.url.path().starts_with("/fallback") {
            ok
        } else if find(head, b"do:fail").is_some() {
            ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}}))
        } else if find(head, b"do:err500").is_some() {
            ResponseTemplate::new(500)
        } else if find(head, b"do:late").is_some() {
            ok.set_delay(LATE)
        } else if find(head, b"do:slow").is_some() {
            ok.set_delay(SLOW)
        } else {
            ok
        }
    }
}
