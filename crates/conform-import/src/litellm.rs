//! LiteLLM's standard logging payload (`StandardLoggingPayload`), one per line: what the
//! gateway hands its custom loggers and writes to its log sinks. A chat call's
//! `messages`, its `model_parameters` (tools, `tool_choice`, `response_format` and the
//! sampling settings) and its `response` become a case with its recorded answer; other
//! calls (embeddings, images …) are counted and skipped.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::chat::{self, FieldError};
use super::lines::Lines;
use super::openai_batch::parse;
use super::{ImportError, Importer, Item, Options, Summary, file_name};

/// The call types that are a chat completion.
const CHAT_CALLS: &[&str] = &["completion", "acompletion"];

pub fn import(input: &Path, opts: &Options) -> Result<Summary, ImportError> {
    let mut importer = Importer::new(opts, input)?;
    let name = file_name(input);
    let mut lines = Lines::open(input, opts.max_line_bytes)?;
    let mut other: BTreeMap<String, u64> = BTreeMap::new();
    while let Some(line) = lines.next_line()? {
        if line.text.trim().is_empty() {
            continue;
        }
        let number = line.number;
        let place = format!("{name}:{number}");
        let payload = parse(input, number, line.text)?;
        let call = payload
            .get("call_type")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                malformed(
                    input,
                    number,
                    "call_type",
                    "missing: not a LiteLLM standard logging payload",
                )
            })?;
        if !CHAT_CALLS.contains(&call) {
            *other.entry(call.to_string()).or_default() += 1;
            continue;
        }
        importer.read();
        let mut body = match request_body(&payload) {
            Ok(b) => b,
            Err(e) if e.unsupported => {
                importer.skip(&place, &format!("{}: {}", e.field, e.message));
                continue;
            }
            Err(e) => return Err(malformed(input, number, &e.field, &e.message)),
        };
        let mut redactor = opts.redaction.case();
        redactor.paths(&mut body);
        let request = match chat::chat_request(&body) {
            Ok(r) => r,
            Err(e) if e.unsupported => {
                importer.skip(&place, &format!("{}: {}", field_of(&e.field), e.message));
                continue;
            }
            Err(e) => return Err(malformed(input, number, &field_of(&e.field), &e.message)),
        };
        importer.dropped(&request.dropped);
        let mut request = request;
        let recorded = match answers(&payload) {
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
        let reference = match recorded {
            Some(answers) => {
                let response = payload.get("response").unwrap_or(&Value::Null);
                let served = response.get("model").and_then(Value::as_str);
                let model = request.model.as_deref().or(served).unwrap_or_default();
                // The call's start: `created` of a streamed answer is when LiteLLM
                // assembled it.
                let at = payload
                    .get("startTime")
                    .and_then(Value::as_f64)
                    .map(|t| t as i64)
                    .or_else(|| response.get("created").and_then(Value::as_i64));
                let r = super::reference(model, served, at, place.clone(), answers);
                if r.is_none() {
                    importer.note(
                        &place,
                        "the payload has no time: its answer is not recorded",
                    );
                }
                r
            }
            None => {
                importer.note(&place, "the call did not succeed: no answer is recorded");
                None
            }
        };
        let case = super::request_case(format!("Imported from {place}"), &request, reference);
        let id = format!("{number:06}");
        let item = Item::redacted(
            number as u64,
            id,
            case,
            request.schema.as_ref(),
            &mut redactor,
        );
        importer.redacted(redactor.replaced);
        importer.add(item)?;
    }
    for (call, n) in &other {
        importer.note(
            &name,
            &format!("{n} `{call}` calls are not chat completions: skipped"),
        );
    }
    let mut suite = toml::Table::new();
    suite.insert(
        "description".into(),
        toml::Value::String(format!("Chat calls imported from LiteLLM's log {name}")),
    );
    let header = format!("# Imported by `conform import litellm` from {name}.\n");
    importer.finish(&header, suite, None)
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
