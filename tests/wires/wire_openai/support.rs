//! Replaying real payload files through a wiremock server and the real [`Endpoint`].

use std::path::Path;
use std::sync::Arc;

use conform_config::secret::Secret;
use conform_config::{Prompt, ProviderConfig};
use conform_wire::provider::transport::{Endpoint, Transport};
use conform_wire::provider::{CallError, CallSpec, Completion, wire_format};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

pub const KEY: &str = "sk-wire-test-0123456789";
/// Every provider here retries at most this often, with millisecond waits.
pub const MAX_RETRIES: usize = 2;
pub const CHAT: &str = "/v1/chat/completions";
pub const RESPONSES: &str = "/v1/responses";
pub const JSON: &str = "application/json";
pub const SSE: &str = "text/event-stream";

/// The raw bytes of `tests/wire/NAME`.
pub fn wire_bytes(name: &str) -> Vec<u8> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/wire")
        .join(name);
    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

pub fn wire_text(name: &str) -> String {
    String::from_utf8(wire_bytes(name)).unwrap()
}

pub fn wire_json(name: &str) -> Value {
    serde_json::from_slice(&wire_bytes(name)).unwrap()
}

/// An error file: `{"status_code": N, "body": …}`, or `{"status": N, "body_as_reported": …}`.
/// The files hold the body as parsed JSON (it was pasted from SDK output), so it is served
/// re-serialised; status and fields are as recorded.
pub fn error_file(name: &str) -> (u16, Vec<u8>) {
    let file = wire_json(name);
    let status = file
        .get("status_code")
        .or_else(|| file.get("status"))
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{name}: no status"));
    let body = file
        .get("body")
        .or_else(|| file.get("body_as_reported"))
        .unwrap_or_else(|| panic!("{name}: no body"));
    (status as u16, serde_json::to_vec(body).unwrap())
}

/// The JSON body of a documented curl example (`-d '{…}'`).
pub fn curl_body(name: &str) -> Value {
    let text = wire_text(name);
    let start = text.find("-d '").unwrap_or_else(|| panic!("{name}: no -d")) + 4;
    let end = text.rfind('\'').unwrap();
    serde_json::from_str(&text[start..end]).unwrap()
}

/// A server that answers every POST to `route` with these exact bytes.
pub async fn serve(route: &str, status: u16, body: Vec<u8>, content_type: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(route))
        .respond_with(ResponseTemplate::new(status).set_body_raw(body, content_type))
        .mount(&server)
        .await;
    server
}

/// A provider file for `kind` pointing at `server`; `extra` adds top-level keys.
pub fn provider(server: &MockServer, kind: &str, model: &str, extra: &str) -> ProviderConfig {
    let toml = format!(
        "kind = \"{kind}\"\nmodel = \"{model}\"\nbase_url = \"{}\"\n{extra}\n\
         [limits]\nmax_retries = {MAX_RETRIES}\nretry_base_wait = \"1ms\"\nmax_retry_wait = \"10ms\"\n",
        server.uri()
    );
    ProviderConfig::parse(Path::new("providers/wire-test.toml"), &toml)
        .unwrap_or_else(|e| panic!("{e:?}\n{toml}"))
}

/// What to ask: the prompt, the schema and its name.
pub struct Ask {
    pub system: Option<&'static str>,
    pub user: &'static str,
    pub schema: Value,
    pub name: &'static str,
}

impl Ask {
    pub fn user(user: &'static str) -> Self {
        Ask {
            system: None,
            user,
            schema: location_schema(),
            name: "Location",
        }
    }
}

/// The schema of OpenAI's own structured-output examples (`Location`).
pub fn location_schema() -> Value {
    wire_json("openai_chat_json_schema_strict_temp0_seed_request.captured.json")
        ["body"]["response_format"]["json_schema"]["schema"]
        .clone()
}

/// One call through the real transport, with its retries.
pub async fn call(config: ProviderConfig, ask: &Ask) -> Result<Completion, CallError> {
    let kind = config.kind;
    let endpoint = Endpoint::new(
        Arc::new(config),
        wire_format(kind),
        Some(Secret::new(KEY.to_string())),
        Transport::new().unwrap(),
    );
    let prompt = Prompt {
        system: ask.system.map(str::to_string),
        user: ask.user.to_string(),
    };
    let spec = CallSpec {
        prompt: &prompt,
        schema: &ask.schema,
        schema_name: ask.name,
        conversation: None,
    };
    endpoint.call(&spec, 100).await
}

/// The JSON bodies the server received, in order.
pub async fn received(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// Asserts the server received exactly one request, with our key and a JSON body, and
/// returns the body.
pub async fn only_request(server: &MockServer) -> Value {
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "expected exactly one upstream request");
    let auth = requests[0].headers.get("authorization").unwrap();
    assert_eq!(auth.to_str().unwrap(), format!("Bearer {KEY}"));
    let content_type = requests[0].headers.get("content-type").unwrap();
    assert_eq!(content_type.to_str().unwrap(), JSON);
    serde_json::from_slice(&requests[0].body).unwrap()
}

/// Asserts `ours` equals `theirs` at every key `theirs` has (numbers compared as
/// numbers: `0` and `0.0` are the same temperature), and returns the keys only we send.
pub fn same_keys_plus(theirs: &Value, ours: &Value) -> Vec<String> {
    let (theirs, ours) = (theirs.as_object().unwrap(), ours.as_object().unwrap());
    for (key, value) in theirs {
        let mine = ours
            .get(key)
            .unwrap_or_else(|| panic!("we do not send `{key}`"));
        assert_same(value, mine, key);
    }
    ours.keys()
        .filter(|k| !theirs.contains_key(*k))
        .cloned()
        .collect()
}

/// Deep equality with numbers compared by value, naming the first differing path.
pub fn assert_same(expected: &Value, actual: &Value, at: &str) {
    match (expected, actual) {
        (Value::Number(a), Value::Number(b)) => {
            assert_eq!(a.as_f64(), b.as_f64(), "{at}: {a} != {b}");
        }
        (Value::Object(a), Value::Object(b)) => {
            let (mut ka, mut kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
            ka.sort();
            kb.sort();
            assert_eq!(ka, kb, "{at}: different keys");
            for (k, v) in a {
                assert_same(v, &b[k], &format!("{at}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{at}: different lengths");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_same(x, y, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(expected, actual, "{at}"),
    }
}

/// An SSE event line pair for a JSON object, compacted onto one `data:` line.
pub fn sse_event(name: &str, data: &Value) -> String {
    format!(
        "event: {name}\ndata: {}\n\n",
        serde_json::to_string(data).unwrap()
    )
}
