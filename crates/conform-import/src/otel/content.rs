//! Where GenAI instrumentation puts an inference's messages, read into the shape of a
//! Chat Completions request and response, so that [`crate::chat`] takes it from
//! there like any logged request:
//!
//! - the latest conventions on the span: `gen_ai.input.messages`,
//!   `gen_ai.output.messages`, `gen_ai.system_instructions`, `gen_ai.tool.definitions`
//!   (JSON strings of parts);
//! - the same attributes, as structured values, on a
//!   `gen_ai.client.inference.operation.details` log record of the span;
//! - older releases' log records `gen_ai.{system,user,assistant,tool}.message` and
//!   `gen_ai.choice`, the content in the body.
//!
//! The span wins when it holds the content and a record holds it too.

use serde_json::{Map, Value, json};

use super::otlp::{Record, Span};
use crate::chat::FieldError;

/// The log record that carries the latest conventions' content.
pub const DETAILS_EVENT: &str = "gen_ai.client.inference.operation.details";

/// An inference's content, as Chat Completions would carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct Content {
    /// Chat Completions `messages`.
    pub messages: Vec<Value>,
    /// Chat Completions `choices` (each `{"message": …}`): the recorded answers.
    pub choices: Vec<Value>,
    /// Chat Completions `tools`, when the telemetry recorded their definitions.
    pub tools: Option<Vec<Value>>,
    /// Where the content was found.
    pub placement: Placement,
}

/// Where the content was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On the span, as `gen_ai.input.messages` and `gen_ai.output.messages` attributes.
    SpanAttributes,
    /// In a `gen_ai.client.inference.operation.details` log record.
    DetailsEvent,
    /// In the older per-message log records (`gen_ai.*.message`, `gen_ai.choice`).
    LegacyEvents,
}

impl Placement {
    /// Where the content was found, in words for a note.
    pub fn describe(self) -> &'static str {
        match self {
            Placement::SpanAttributes => "span attributes",
            Placement::DetailsEvent => "`gen_ai.client.inference.operation.details` log records",
            Placement::LegacyEvents => "`gen_ai.*.message` / `gen_ai.choice` log records",
        }
    }
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
        unsupported: false,
    }
}

fn unsupported(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
        unsupported: true,
    }
}

/// The content of `span`, from its attributes or its log records; `None` when none was
/// captured.
pub fn gather(span: &Span, records: &[Record]) -> Result<Option<Content>, FieldError> {
    // A span attribute cut short by a length limit may be whole in a record.
    let on_span = match conventions(&span.attributes, Placement::SpanAttributes) {
        Ok(Some(c)) => return Ok(Some(c)),
        Ok(None) => None,
        Err(e) if e.unsupported => Some(e),
        Err(e) => return Err(e),
    };
    if let Some(c) = from_records(records)? {
        return Ok(Some(c));
    }
    on_span.map_or(Ok(None), Err)
}

fn from_records(records: &[Record]) -> Result<Option<Content>, FieldError> {
    for r in records {
        if r.event.as_deref() == Some(DETAILS_EVENT)
            && let Some(c) = conventions(&r.attributes, Placement::DetailsEvent)?
        {
            return Ok(Some(c));
        }
    }
    legacy(records)
}

/// An attribute that is a JSON string on spans and a structured value on records.
fn structured(attrs: &Map<String, Value>, key: &str) -> Result<Option<Value>, FieldError> {
    match attrs.get(key) {
        None | Some(Value::Null) => Ok(None),
        // Exporters cut long attribute values (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT): one
        // such span is skipped and listed, not the end of the import.
        Some(Value::String(text)) => serde_json::from_str(text).map(Some).map_err(|e| {
            unsupported(
                key,
                format!(
                    "not JSON ({}): cut short by an attribute length limit? Raise OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, or capture content as events",
                    crate::chat::plain(&e)
                ),
            )
        }),
        Some(other) => Ok(Some(other.clone())),
    }
}

fn conventions(
    attrs: &Map<String, Value>,
    placement: Placement,
) -> Result<Option<Content>, FieldError> {
    let Some(input) = structured(attrs, "gen_ai.input.messages")? else {
        return Ok(None);
    };
    let mut messages = Vec::new();
    if let Some(system) = structured(attrs, "gen_ai.system_instructions")? {
        let text = texts(&system, "gen_ai.system_instructions")?;
        messages.push(json!({"role": "system", "content": text}));
    }
    let input = input
        .as_array()
        .ok_or_else(|| bad("gen_ai.input.messages", "must be an array of messages"))?;
    for (i, m) in input.iter().enumerate() {
        message(m, &format!("gen_ai.input.messages[{i}]"), &mut messages)?;
    }
    let mut choices = Vec::new();
    if let Some(output) = structured(attrs, "gen_ai.output.messages")? {
        let output = output
            .as_array()
            .ok_or_else(|| bad("gen_ai.output.messages", "must be an array of messages"))?;
        for (i, m) in output.iter().enumerate() {
            let mut out = Vec::new();
            message(m, &format!("gen_ai.output.messages[{i}]"), &mut out)?;
            for m in out {
                choices.push(json!({"message": m}));
            }
        }
    }
    let tools = match structured(attrs, "gen_ai.tool.definitions")? {
        None => None,
        Some(Value::Array(defs)) => Some(
            defs.iter()
                .enumerate()
                .map(|(i, d)| definition(d, &format!("gen_ai.tool.definitions[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(bad("gen_ai.tool.definitions", "must be an array")),
    };
    Ok(Some(Content {
        messages,
        choices,
        tools,
        placement,
    }))
}

/// A tool definition: the conventions' flat `{"type", "name", "parameters"}` or Chat
/// Completions' `{"type", "function": {…}}`.
fn definition(d: &Value, field: &str) -> Result<Value, FieldError> {
    if d.get("function").is_some() {
        return Ok(d.clone());
    }
    let kind = d.get("type").and_then(Value::as_str).unwrap_or("function");
    if kind != "function" {
        return Err(unsupported(
            format!("{field}.type"),
            format!("`{kind}` tools cannot be carried into a case (functions only)"),
        ));
    }
    let mut f = Map::new();
    for key in ["name", "description", "parameters", "strict"] {
        if let Some(v) = d.get(key).filter(|v| !v.is_null()) {
            f.insert(key.into(), v.clone());
        }
    }
    Ok(json!({"type": "function", "function": f}))
}

/// The text parts of a list of parts, joined.
fn texts(parts: &Value, field: &str) -> Result<String, FieldError> {
    let parts = parts
        .as_array()
        .ok_or_else(|| bad(field, "must be an array of parts"))?;
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => out.push(text_of(p, &format!("{field}[{i}]"))?),
            Some(other) => {
                return Err(unsupported(
                    format!("{field}[{i}].type"),
                    format!("`{other}` parts cannot be carried into a case (text only)"),
                ));
            }
            None => return Err(bad(format!("{field}[{i}].type"), "missing")),
        }
    }
    Ok(out.join(""))
}

fn text_of(part: &Value, field: &str) -> Result<String, FieldError> {
    match part.get("content") {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(bad(
            format!("{field}.content"),
            "a text part needs its text",
        )),
    }
}

/// One message of parts, as Chat Completions messages: a tool role's responses become
/// one `tool` message each.
fn message(m: &Value, field: &str, out: &mut Vec<Value>) -> Result<(), FieldError> {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{field}.role"), "missing"))?;
    let parts = match m.get("parts") {
        Some(Value::Array(parts)) => parts.as_slice(),
        None | Some(Value::Null) => &[],
        Some(_) => return Err(bad(format!("{field}.parts"), "must be an array of parts")),
    };
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let at = format!("{field}.parts[{i}]");
        match p.get("type").and_then(Value::as_str) {
            Some("text") => text.get_or_insert_default().push_str(&text_of(p, &at)?),
            Some("tool_call") => {
                let get = |k: &str| {
                    p.get(k)
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad(format!("{at}.{k}"), "missing"))
                };
                let arguments = match p.get("arguments") {
                    None | Some(Value::Null) => json!({}),
                    Some(a) => a.clone(),
                };
                calls.push(json!({
                    "id": get("id")?,
                    "type": "function",
                    "function": {"name": get("name")?, "arguments": arguments}
                }));
            }
            Some("tool_call_response") => {
                let id = p
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{at}.id"), "missing"))?;
                let content = match p.get("response") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => return Err(bad(format!("{at}.response"), "missing")),
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            // Reasoning is not sent back as input, nor part of an answer's text.
            Some("reasoning") => {}
            Some(other) => {
                return Err(unsupported(
                    format!("{at}.type"),
                    format!(
                        "`{other}` parts cannot be carried into a case (text and tool calls only)"
                    ),
                ));
            }
            None => return Err(bad(format!("{at}.type"), "missing")),
        }
    }
    if role == "tool" {
        // Its text would be lost: a tool result must say which call it answers.
        if !parts
            .iter()
            .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_call_response"))
        {
            return Err(bad(
                format!("{field}.parts"),
                "a tool message needs a `tool_call_response` part naming its call",
            ));
        }
        return Ok(());
    }
    let mut msg = Map::new();
    msg.insert("role".into(), Value::String(role.to_string()));
    msg.insert(
        "content".into(),
        text.map(Value::String).unwrap_or(Value::Null),
    );
    if !calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(calls));
    }
    out.push(Value::Object(msg));
    Ok(())
}

/// Older releases: a record per message, the content in the body.
fn legacy(records: &[Record]) -> Result<Option<Content>, FieldError> {
    let mut messages = Vec::new();
    let mut choices: Vec<(i64, Value)> = Vec::new();
    let mut captured = false;
    for r in records {
        let Some(event) = r.event.as_deref() else {
            continue;
        };
        let body = &r.body;
        let field = |k: &str| format!("{event}.body.{k}");
        let role = match event {
            "gen_ai.system.message" => "system",
            "gen_ai.user.message" => "user",
            "gen_ai.assistant.message" => "assistant",
            "gen_ai.tool.message" => "tool",
            "gen_ai.choice" => {
                let message = body.get("message").cloned().unwrap_or(json!({}));
                captured |= message.get("content").is_some() || message.get("tool_calls").is_some();
                let index = body.get("index").and_then(Value::as_i64).unwrap_or(0);
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                m.insert(
                    "content".into(),
                    message.get("content").cloned().unwrap_or(Value::Null),
                );
                if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
                    m.insert(
                        "tool_calls".into(),
                        legacy_calls(calls, &field("message.tool_calls"))?,
                    );
                }
                choices.push((index, json!({"message": m})));
                continue;
            }
            _ => continue,
        };
        // Without content capture the records exist with no `content`.
        let content = body.get("content").filter(|c| !c.is_null());
        let calls = body.get("tool_calls").filter(|c| !c.is_null());
        captured |= content.is_some() || calls.is_some();
        let mut m = Map::new();
        let role = body.get("role").and_then(Value::as_str).unwrap_or(role);
        m.insert("role".into(), json!(role));
        m.insert(
            "content".into(),
            match content {
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(parts @ Value::Array(_)) => parts.clone(),
                Some(other) => Value::String(other.to_string()),
                None => Value::Null,
            },
        );
        if let Some(calls) = calls {
            m.insert(
                "tool_calls".into(),
                legacy_calls(calls, &field("tool_calls"))?,
            );
        }
        if role == "tool" {
            let id = body
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(field("id"), "missing: a tool message names its call"))?;
            m.insert("tool_call_id".into(), json!(id));
        }
        messages.push(Value::Object(m));
    }
    if !captured || messages.is_empty() {
        return Ok(None);
    }
    choices.sort_by_key(|(i, _)| *i);
    Ok(Some(Content {
        messages,
        choices: choices.into_iter().map(|(_, c)| c).collect(),
        tools: None,
        placement: Placement::LegacyEvents,
    }))
}

/// Older releases record calls as Chat Completions does, with `type` sometimes left out.
fn legacy_calls(calls: &Value, field: &str) -> Result<Value, FieldError> {
    let calls = calls
        .as_array()
        .ok_or_else(|| bad(field, "must be an array of calls"))?;
    Ok(Value::Array(
        calls
            .iter()
            .map(|c| {
                let mut c = c.clone();
                if let Some(obj) = c.as_object_mut() {
                    obj.entry("type").or_insert(json!("function"));
                }
                c
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(attrs: Value) -> Span {
        Span {
            key: "t:s".into(),
            span_id: "s".into(),
            name: "chat m".into(),
            time: Some(1),
            attributes: attrs.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn parts_become_chat_messages_with_calls_and_tool_results() {
        let input = json!([
            {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]},
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "w", "arguments": {"city": "Oslo"}}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": {"t": 4}}]}
        ]);
        let s = span(json!({
            "gen_ai.system_instructions": "[{\"type\":\"text\",\"content\":\"Be brief.\"}]",
            "gen_ai.input.messages": input.to_string(),
            "gen_ai.output.messages": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"reasoning\",\"content\":\"hm\"},{\"type\":\"text\",\"content\":\"4 C\"}],\"finish_reason\":\"stop\"}]",
            "gen_ai.tool.definitions": "[{\"type\":\"function\",\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}]"
        }));
        let c = gather(&s, &[]).unwrap().unwrap();
        assert_eq!(c.placement, Placement::SpanAttributes);
        assert_eq!(
            c.messages,
            vec![
                json!({"role": "system", "content": "Be brief."}),
                json!({"role": "user", "content": "Weather?"}),
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": {"city": "Oslo"}}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "{\"t\":4}"}),
            ]
        );
        assert_eq!(
            c.choices,
            vec![json!({"message": {"role": "assistant", "content": "4 C"}})]
        );
        assert_eq!(
            c.tools,
            Some(vec![
                json!({"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}})
            ])
        );
    }

    #[test]
    fn a_cut_short_span_attribute_is_skipped_unless_a_record_holds_the_content() {
        let cut =
            span(json!({"gen_ai.input.messages": "[{\"role\":\"user\",\"parts\":[{\"type\":\"te"}));
        let e = gather(&cut, &[]).unwrap_err();
        assert!(e.unsupported);
        assert_eq!(e.field, "gen_ai.input.messages");
        let whole = Record {
            key: "t:s".into(),
            event: Some(DETAILS_EVENT.into()),
            attributes: json!({"gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]})
                .as_object()
                .unwrap()
                .clone(),
            body: json!({}),
            time: None,
            origin: None,
        };
        let c = gather(&cut, &[whole]).unwrap().unwrap();
        assert_eq!(c.placement, Placement::DetailsEvent);
        assert_eq!(c.messages, vec![json!({"role": "user", "content": "hi"})]);
    }

    #[test]
    fn no_content_is_none_and_an_image_is_unsupported() {
        assert_eq!(
            gather(&span(json!({"gen_ai.operation.name": "chat"})), &[]).unwrap(),
            None
        );
        let s = span(
            json!({"gen_ai.input.messages": [{"role": "user", "parts": [{"type": "blob", "content": "…"}]}]}),
        );
        let e = gather(&s, &[]).unwrap_err();
        assert!(e.unsupported);
        assert_eq!(e.field, "gen_ai.input.messages[0].parts[0].type");
        let legacy_without_content = Record {
            key: "t:s".into(),
            event: Some("gen_ai.user.message".into()),
            attributes: Map::new(),
            body: json!({}),
            time: None,
            origin: None,
        };
        assert_eq!(
            gather(&span(json!({})), &[legacy_without_content]).unwrap(),
            None
        );
    }
}
