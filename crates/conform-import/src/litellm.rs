//! LiteLLM's standard logging payload (`StandardLoggingPayload`), one per line: what the
//! gateway hands its custom loggers and writes to its log sinks. A chat call's
//! `messages`, its `model_parameters` (tools, `tool_choice`, `response_format` and the
//! sampling settings) and its `response` become a case with its recorded answer; other
//! calls (embeddings, images …) are counted and skipped.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::chat::{self, FieldError};
use super::driver::{self, Read, Record, Source, Suite};
use super::lines::Lines;
use super::openai_batch::parse;
use super::{ImportError, Importer, Options, Summary, file_name};

/// The call types that are a chat completion.
const CHAT_CALLS: &[&str] = &["completion", "acompletion"];

/// Imports LiteLLM's logging payloads, one per line, as a suite.
pub fn import(input: &Path, opts: &Options) -> Result<Summary, ImportError> {
    let log = Log {
        input,
        name: file_name(input),
        other: BTreeMap::new(),
    };
    driver::drive(log, opts)
}

struct Log<'a> {
    input: &'a Path,
    name: String,
    /// Calls that are not chat completions, by call type.
    other: BTreeMap<String, u64>,
}

impl Source for Log<'_> {
    fn main(&self) -> &Path {
        self.input
    }

    fn read(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError> {
        let mut lines = Lines::open(self.input, importer.opts().max_line_bytes)?;
        while let Some(line) = lines.next_line()? {
            if line.text.trim().is_empty() {
                continue;
            }
            let payload = parse(self.input, line.number, line.text)?;
            let call = payload
                .get("call_type")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    malformed(
                        self.input,
                        line.number,
                        "call_type",
                        "missing: not a LiteLLM standard logging payload",
                    )
                })?;
            if !CHAT_CALLS.contains(&call) {
                *self.other.entry(call.to_string()).or_default() += 1;
                continue;
            }
            let read = self.call(line.number, &payload, importer)?;
            importer.offer(read)?;
        }
        for (call, n) in &self.other {
            importer.note(
                &self.name,
                &format!("{n} `{call}` calls are not chat completions: skipped"),
            );
        }
        Ok(())
    }

    fn suite(&mut self, _: &mut Importer<'_>) -> Result<Suite, ImportError> {
        let name = &self.name;
        Ok(Suite::described(
            format!("# Imported by `conform import litellm` from {name}.\n"),
            format!("Chat calls imported from LiteLLM's log {name}"),
        ))
    }
}

impl Log<'_> {
    /// The chat call logged on line `number`, with its answer when it succeeded.
    fn call<'o>(
        &self,
        number: usize,
        payload: &Value,
        importer: &mut Importer<'o>,
    ) -> Result<Read<'o>, ImportError> {
        let (input, place) = (self.input, format!("{}:{number}", self.name));
        let mut body = match request_body(payload) {
            Ok(b) => b,
            Err(e) if e.unsupported => {
                let why = format!("{}: {}", e.field, e.message);
                return Ok(Read::Skipped { at: place, why });
            }
            Err(e) => return Err(malformed(input, number, &e.field, &e.message)),
        };
        let mut redactor = importer.opts().redaction.case();
        redactor.paths(&mut body);
        let mut request = match chat::chat_request(&body) {
            Ok(r) => r,
            Err(e) if e.unsupported => {
                let why = format!("{}: {}", field_of(&e.field), e.message);
                return Ok(Read::Skipped { at: place, why });
            }
            Err(e) => return Err(malformed(input, number, &field_of(&e.field), &e.message)),
        };
        let recorded = match answers(payload) {
            Ok(a) => a,
            Err(e) if e.unsupported => {
                importer.note(&place, &format!("response.{}: {}", e.field, e.message));
                None
            }
            Err(e) => {
                let field = format!("response.{}", e.field);
                return Err(malformed(input, number, &field, &e.message));
            }
        };
        for name in chat::declare_called_tools(&mut request, recorded.as_deref()) {
            importer.note(
                &place,
                &format!("tool `{name}` is called but not defined in the request: declared by name with open parameters"),
            );
        }
        let reference = reference(payload, &request, recorded, &place, importer);
        let case = super::request_case(format!("Imported from {place}"), &request, reference);
        Ok(Read::Request(Box::new(Record {
            order: number as u64,
            id: format!("{number:06}"),
            case,
            schema: request.schema,
            dropped: request.dropped,
            redactor,
        })))
    }
}

/// The recorded reference of a call's `recorded` answers (`None` when it failed), if it
/// can be kept.
fn reference(
    payload: &Value,
    request: &chat::Request,
    recorded: Option<Vec<Value>>,
    place: &str,
    importer: &mut Importer<'_>,
) -> Option<Value> {
    let Some(answers) = recorded else {
        importer.note(place, "the call did not succeed: no answer is recorded");
        return None;
    };
    let response = payload.get("response").unwrap_or(&Value::Null);
    let served = response.get("model").and_then(Value::as_str);
    let model = request.model.as_deref().or(served).unwrap_or_default();
    // The call's start: `created` of a streamed answer is when LiteLLM assembled it.
    let at = payload
        .get("startTime")
        .and_then(Value::as_f64)
        .map(|t| t as i64)
        .or_else(|| response.get("created").and_then(Value::as_i64));
    let r = super::reference(model, served, at, place.to_string(), answers);
    if r.is_none() {
        importer.note(place, "the payload has no time: its answer is not recorded");
    }
    r
}

/// A request body's fields are the payload's `model_parameters`; in errors they are
/// named where they are in the payload.
fn field_of(field: &str) -> String {
    if field.starts_with("messages") {
        field.to_string()
    } else {
        format!("model_parameters.{field}")
    }
}

/// The Chat Completions body the call sent: `messages`, and `model_parameters` (what
/// a case does not carry is listed by [`chat::chat_request`] as dropped).
fn request_body(payload: &Value) -> Result<Value, FieldError> {
    let messages = match payload.get("messages") {
        Some(m @ Value::Array(_)) => m.clone(),
        Some(Value::String(_)) => {
            return Err(FieldError {
                field: "messages".into(),
                message: "not a list of chat messages (a text prompt, or redacted by turn_off_message_logging)".into(),
                unsupported: true,
            });
        }
        _ => {
            return Err(FieldError {
                field: "messages".into(),
                message: "missing: the payload holds no messages (was message logging turned off?)"
                    .into(),
                unsupported: true,
            });
        }
    };
    let mut body = Map::new();
    if let Some(Value::Object(params)) = payload.get("model_parameters") {
        for (k, v) in params {
            body.insert(k.clone(), v.clone());
        }
    }
    if let Some(model) = payload.get("model").filter(|m| m.is_string()) {
        body.insert("model".into(), model.clone());
    }
    body.insert("messages".into(), messages);
    Ok(Value::Object(body))
}

/// The recorded answers, when the call succeeded.
fn answers(payload: &Value) -> Result<Option<Vec<Value>>, FieldError> {
    if payload.get("status").and_then(Value::as_str) != Some("success") {
        return Ok(None);
    }
    match payload.get("response") {
        Some(r @ Value::Object(_)) => chat::chat_answers(r).map(Some),
        _ => Ok(None),
    }
}

fn malformed(path: &Path, line: usize, field: &str, message: &str) -> ImportError {
    ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: field.to_string(),
        message: message.to_string(),
    }
}
