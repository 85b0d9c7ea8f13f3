//! One chat inference span, with its content, as a whole-request case: the messages,
//! the tools (recorded definitions, else the tools its calls name, declared by name with
//! open parameters), and the recorded answers as the reference.

use serde_json::{Map, Value, json};

use super::content::Content;
use super::otlp::Span;
use crate::Redaction;
use crate::chat::{self, FieldError};
use crate::redact::Redactor;

/// A case built from a span, with what the notes must say about it.
pub struct Built<'r> {
    /// The case, its request's paths redacted through `redactor`, which the import
    /// redacts as a whole.
    pub case: Value,
    /// The JSON Schema its request asked the answer to follow, if any.
    pub schema: Option<Value>,
    /// Tools its calls name that the telemetry never defined, declared by name.
    pub declared: Vec<String>,
    /// Request settings recorded but not carried (`temperature` …).
    pub dropped: Vec<String>,
    /// Redacts the case as a whole, the request paths it redacted already included.
    pub redactor: Redactor<'r>,
    /// Why the answers were not kept, when they were not.
    pub no_reference: Option<&'static str>,
}

/// Builds the case of `span` from `content`; `place` is where it came from.
pub fn build<'r>(
    span: &Span,
    content: Content,
    place: &str,
    redaction: &'r Redaction,
) -> Result<Built<'r>, FieldError> {
    let attr = |k: &str| span.attributes.get(k).and_then(Value::as_str);
    let mut body = Map::new();
    if let Some(model) = attr("gen_ai.request.model") {
        body.insert("model".into(), json!(model));
    }
    body.insert("messages".into(), Value::Array(content.messages));
    if let Some(tools) = content.tools {
        body.insert("tools".into(), Value::Array(tools));
    }
    // Only the answer's type is recorded, never its schema.
    let format = attr("gen_ai.output.type").or(attr("gen_ai.openai.request.response_format"));
    if matches!(format, Some("json" | "json_object" | "json_schema")) {
        body.insert("response_format".into(), json!({"type": "json_object"}));
    }
    let mut body = Value::Object(body);
    let mut redactor = redaction.case();
    redactor.paths(&mut body);
    let mut request = chat::chat_request(&body)?;
    let dropped = span
        .attributes
        .keys()
        .filter_map(|k| k.strip_prefix("gen_ai.request."))
        .filter(|k| *k != "model")
        .map(String::from)
        .collect();

    let choices = Value::Array(content.choices);
    let answers = match &choices {
        Value::Array(c) if c.is_empty() => None,
        _ => Some(chat::chat_answers(&json!({"choices": choices}))?),
    };
    let declared = chat::declare_called_tools(&mut request, answers.as_deref());
    let served = attr("gen_ai.response.model");
    let model = request.model.as_deref().or(served).unwrap_or_default();
    let (reference, no_reference) = match answers {
        None => (None, Some("no answer was recorded")),
        Some(answers) => {
            match crate::reference(model, served, span.time, place.to_string(), answers) {
                Some(r) => (Some(r), None),
                None => (
                    None,
                    Some("the span has no time: its answer is not recorded"),
                ),
            }
        }
    };
    let case = crate::request_case(
        format!("Imported from {place} (`{}`)", span.name),
        &request,
        reference,
    );
    Ok(Built {
        case,
        schema: None,
        declared,
        dropped,
        redactor,
        no_reference,
    })
}
