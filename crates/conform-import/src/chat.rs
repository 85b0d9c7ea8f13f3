//! Logged requests and responses of OpenAI's Chat Completions and Responses APIs, turned
//! into what a case carries: the conversation (`messages`, `tools`, `tool_choice`,
//! `parallel_tool_calls`, as [`conform_config::conversation`] reads them), the answer's
//! schema, and the answers as recorded reference answers.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use conform_config::conversation::{Message, Tool, ToolChoice};

/// What a request says, in the case's shape.
#[derive(Debug, Clone)]
pub struct Request {
    /// The conversation, as the case writes it.
    pub messages: Vec<Message>,
    /// The tools it declared, if any.
    pub tools: Option<Vec<Tool>>,
    /// Which tool the model had to call, could call or could not, if it said.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model could call several tools in one turn, if it said.
    pub parallel_tool_calls: Option<bool>,
    /// `response_format` / `text.format` asked for JSON.
    pub json_answer: bool,
    /// The JSON Schema it asked the answer to follow.
    pub schema: Option<Value>,
    /// The model asked for.
    pub model: Option<String>,
    /// Fields of the body a case does not carry (sampling settings belong to the
    /// provider file): their names.
    pub dropped: Vec<String>,
}

/// Why a request or response could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Where in the body: `messages[2].content`.
    pub field: String,
    /// What is wrong there.
    pub message: String,
    /// True when the body is well-formed but holds something a case cannot carry (an
    /// image, a built-in tool): the request is skipped and listed, not an error.
    pub unsupported: bool,
}

impl FieldError {
    fn malformed(field: impl Into<String>, message: impl Into<String>) -> FieldError {
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
}

/// The endpoint a body was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Chat Completions.
    Chat,
    /// The Responses API.
    Responses,
}

impl Api {
    /// From a Batch line's `url`.
    pub fn from_url(url: &str) -> Option<Api> {
        match url
            .split('?')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/')
        {
            "/v1/chat/completions" | "/chat/completions" => Some(Api::Chat),
            "/v1/responses" | "/responses" => Some(Api::Responses),
            _ => None,
        }
    }

    /// From a request body: `messages` is Chat, `input` is Responses.
    pub fn of_request(body: &Value) -> Option<Api> {
        if body.get("messages").is_some() {
            Some(Api::Chat)
        } else if body.get("input").is_some() {
            Some(Api::Responses)
        } else {
            None
        }
    }

    /// The request `body` in the case's shape, or what it holds that a case cannot.
    pub fn request(self, body: &Value) -> Result<Request, FieldError> {
        match self {
            Api::Chat => chat_request(body),
            Api::Responses => responses_request(body),
        }
    }

    /// The answers a response `body` holds, one per choice, as Chat messages.
    pub fn answers(self, body: &Value) -> Result<Vec<Value>, FieldError> {
        match self {
            Api::Chat => chat_answers(body),
            Api::Responses => responses_answers(body),
        }
    }
}

fn object<'a>(body: &'a Value, field: &str) -> Result<&'a Map<String, Value>, FieldError> {
    body.as_object()
        .ok_or_else(|| FieldError::malformed(field, "must be a JSON object"))
}

/// A Chat Completions request body.
pub fn chat_request(body: &Value) -> Result<Request, FieldError> {
    let body = object(body, "body")?;
    let mut dropped = Vec::new();
    for key in body.keys() {
        match key.as_str() {
            "messages" | "tools" | "tool_choice" | "parallel_tool_calls" | "response_format" => {}
            "functions" | "function_call" => {
                return Err(FieldError::unsupported(
                    key.clone(),
                    "legacy function calling: log `tools` and `tool_choice` instead",
                ));
            }
            "audio" | "web_search_options" => {
                return Err(FieldError::unsupported(
                    key.clone(),
                    "a case cannot ask for audio or web search",
                ));
            }
            other if other != "model" => dropped.push(other.to_string()),
            _ => {}
        }
    }
    let raw = body
        .get("messages")
        .ok_or_else(|| FieldError::malformed("messages", "missing: a chat request has messages"))?
        .as_array()
        .ok_or_else(|| FieldError::malformed("messages", "must be an array of messages"))?;
    if raw.is_empty() {
        return Err(FieldError::malformed("messages", "is empty"));
    }
    let messages = raw
        .iter()
        .enumerate()
        .map(|(i, m)| chat_message(m, &format!("messages[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = match body.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if items.is_empty() => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, t)| chat_tool(t, &format!("tools[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(FieldError::malformed("tools", "must be an array")),
    };
    let tool_choice = tool_choice(body.get("tool_choice"))?;
    let parallel_tool_calls = flag(body.get("parallel_tool_calls"), "parallel_tool_calls")?;
    let (json_answer, schema) = match body.get("response_format") {
        None | Some(Value::Null) => (false, None),
        Some(format) => answer_format(format, "response_format", "/json_schema/schema")?,
    };
    Ok(Request {
        messages,
        tools,
        tool_choice,
        parallel_tool_calls,
        json_answer,
        schema,
        model: body.get("model").and_then(Value::as_str).map(String::from),
        dropped,
    })
}

fn flag(value: Option<&Value>, field: &str) -> Result<Option<bool>, FieldError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(FieldError::malformed(field, "must be true or false")),
    }
}

fn tool_choice(value: Option<&Value>) -> Result<Option<ToolChoice>, FieldError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            // Responses names a forced tool at the top level: {"type": "function", "name": …}.
            let v = match (v.get("type"), v.get("name")) {
                (Some(t), Some(Value::String(name))) if t == "function" => {
                    json!({"type": "function", "function": {"name": name}})
                }
                _ => v.clone(),
            };
            serde_json::from_value::<ToolChoice>(v)
                .map(Some)
                .map_err(|e| FieldError::unsupported("tool_choice", plain(&e)))
        }
    }
}

/// `response_format` (Chat) or `text.format` (Responses): whether JSON is asked for, and
/// the schema at `schema_at` when one is given.
fn answer_format(
    format: &Value,
    field: &str,
    schema_at: &str,
) -> Result<(bool, Option<Value>), FieldError> {
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok((false, None)),
        Some("json_object") => Ok((true, None)),
        Some("json_schema") => match format.pointer(schema_at) {
            Some(schema @ (Value::Object(_) | Value::Bool(_))) => Ok((true, Some(schema.clone()))),
            _ => Err(FieldError::malformed(
                format!("{field}{}", schema_at.replace('/', ".")),
                "a json_schema format needs its schema object",
            )),
        },
        _ => Err(FieldError::malformed(
            format!("{field}.type"),
            "is text, json_object or json_schema",
        )),
    }
}

fn chat_message(m: &Value, field: &str) -> Result<Message, FieldError> {
    let obj = object(m, field)?;
    let mut out = Map::new();
    for (key, value) in obj {
        match key.as_str() {
            "role" => {
                if value == "function" {
                    return Err(FieldError::unsupported(
                        format!("{field}.role"),
                        "legacy `function` messages: log `tool` messages instead",
                    ));
                }
                out.insert(key.clone(), value.clone());
            }
            "content" => {
                out.insert(key.clone(), content(value, &format!("{field}.content"))?);
            }
            "name" | "tool_call_id" | "tool_calls" | "is_error" => {
                out.insert(key.clone(), value.clone());
            }
            // What an assistant turn carried besides its text and calls: nothing that is
            // sent again as input.
            "refusal" | "annotations" | "audio" | "reasoning_content" => {}
            "function_call" => {
                return Err(FieldError::unsupported(
                    format!("{field}.function_call"),
                    "legacy function calling",
                ));
            }
            other => {
                return Err(FieldError::malformed(
                    format!("{field}.{other}"),
                    "unknown message field",
                ));
            }
        }
    }
    if let Some(Value::String(text)) = out.get_mut("content") {
        *text = escape_template(text);
    }
    serde_json::from_value::<Message>(Value::Object(out))
        .map_err(|e| FieldError::malformed(field.to_string(), plain(&e)))
}

/// A message's content as one text: a string, null, or text parts (joined by new
/// lines). Images, audio and files cannot be carried.
fn content(value: &Value, field: &str) -> Result<Value, FieldError> {
    match value {
        Value::Null | Value::String(_) => Ok(value.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let at = format!("{field}[{i}]");
                match part.get("type").and_then(Value::as_str) {
                    Some("text" | "input_text" | "output_text") => match part.get("text") {
                        Some(Value::String(t)) => texts.push(t.as_str()),
                        _ => return Err(FieldError::malformed(at, "a text part needs `text`")),
                    },
                    Some("refusal") => {}
                    Some(other) => {
                        return Err(FieldError::unsupported(
                            at,
                            format!("`{other}` parts cannot be carried into a case (text only)"),
                        ));
                    }
                    None => return Err(FieldError::malformed(at, "a content part needs `type`")),
                }
            }
            Ok(Value::String(texts.join("\n")))
        }
        _ => Err(FieldError::malformed(
            field,
            "must be a string, null or an array of parts",
        )),
    }
}

fn chat_tool(t: &Value, field: &str) -> Result<Tool, FieldError> {
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
    if kind != "function" {
        return Err(FieldError::unsupported(
            format!("{field}.type"),
            format!("`{kind}` tools cannot be carried into a case (functions only)"),
        ));
    }
    let function = t
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| FieldError::malformed(format!("{field}.function"), "missing"))?;
    tool_from(function, field)
}

fn tool_from(function: &Map<String, Value>, field: &str) -> Result<Tool, FieldError> {
    let mut f = Map::new();
    for key in ["name", "description", "parameters", "strict"] {
        if let Some(v) = function.get(key).filter(|v| !v.is_null()) {
            f.insert(key.into(), v.clone());
        }
    }
    serde_json::from_value::<Tool>(json!({"type": "function", "function": f}))
        .map_err(|e| FieldError::malformed(format!("{field}.function"), plain(&e)))
}

/// A Responses API request body (`instructions`, `input`, `tools`, `text.format`).
pub fn responses_request(body: &Value) -> Result<Request, FieldError> {
    let body = object(body, "body")?;
    let mut dropped = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    for key in body.keys() {
        match key.as_str() {
            "instructions"
            | "input"
            | "tools"
            | "tool_choice"
            | "parallel_tool_calls"
            | "text"
            | "model" => {}
            "prompt" | "conversation" => {
                return Err(FieldError::unsupported(
                    key.clone(),
                    "a stored prompt or conversation is not in the log: log the input itself",
                ));
            }
            other => dropped.push(other.to_string()),
        }
    }
    if previous_response(body) {
        return Err(FieldError::unsupported(
            "previous_response_id",
            "the earlier turns are stored at OpenAI, not in the log",
        ));
    }
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(system(text)),
        Some(_) => return Err(FieldError::malformed("instructions", "must be a string")),
    }
    match body.get("input") {
        Some(Value::String(text)) => messages.push(user(text)),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                responses_item(item, &format!("input[{i}]"), &mut messages)?;
            }
        }
        _ => {
            return Err(FieldError::malformed(
                "input",
                "missing: a Responses request has `input`, a string or an array of items",
            ));
        }
    }
    if !messages
        .iter()
        .any(|m| m.role != conform_config::conversation::Role::System)
    {
        return Err(FieldError::malformed("input", "holds no message"));
    }
    let tools = match body.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if items.is_empty() => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let field = format!("tools[{i}]");
                    let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
                    if kind != "function" {
                        return Err(FieldError::unsupported(
                            format!("{field}.type"),
                            format!(
                                "`{kind}` tools cannot be carried into a case (functions only)"
                            ),
                        ));
                    }
                    tool_from(object(t, &field)?, &field)
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(FieldError::malformed("tools", "must be an array")),
    };
    let (json_answer, schema) = match body.get("text").and_then(|t| t.get("format")) {
        None | Some(Value::Null) => (false, None),
        Some(format) => answer_format(format, "text.format", "/schema")?,
    };
    Ok(Request {
        messages,
        tools,
        tool_choice: tool_choice(body.get("tool_choice"))?,
        parallel_tool_calls: flag(body.get("parallel_tool_calls"), "parallel_tool_calls")?,
        json_answer,
        schema,
        model: body.get("model").and_then(Value::as_str).map(String::from),
        dropped,
    })
}

fn previous_response(body: &Map<String, Value>) -> bool {
    body.get("previous_response_id")
        .is_some_and(|v| !v.is_null())
}

fn system(text: &str) -> Message {
    Message::text(
        conform_config::conversation::Role::System,
        escape_template(text),
    )
}

fn user(text: &str) -> Message {
    Message::text(
        conform_config::conversation::Role::User,
        escape_template(text),
    )
}

/// One item of a Responses `input`: a message, a function call (joined to the assistant
/// turn before it) or a function call's output.
fn responses_item(item: &Value, field: &str, out: &mut Vec<Message>) -> Result<(), FieldError> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "message" => {
            let role = item.get("role").cloned().unwrap_or(Value::Null);
            let text = content(
                item.get("content").unwrap_or(&Value::Null),
                &format!("{field}.content"),
            )?;
            let m = json!({"role": role, "content": text.as_str().map(escape_template)});
            let m = serde_json::from_value::<Message>(m)
                .map_err(|e| FieldError::malformed(format!("{field}.role"), plain(&e)))?;
            out.push(m);
        }
        "function_call" => {
            let get = |k: &str| {
                item.get(k)
                    .and_then(Value::as_str)
                    .ok_or_else(|| FieldError::malformed(format!("{field}.{k}"), "missing"))
            };
            let call = json!({
                "id": get("call_id")?,
                "type": "function",
                "function": {"name": get("name")?, "arguments": get("arguments")?}
            });
            let call = serde_json::from_value(call)
                .map_err(|e| FieldError::malformed(field.to_string(), plain(&e)))?;
            match out.last_mut() {
                Some(last) if last.role == conform_config::conversation::Role::Assistant => {
                    last.tool_calls.push(call);
                }
                _ => {
                    let mut m = Message::text(conform_config::conversation::Role::Assistant, "");
                    m.content = None;
                    m.tool_calls.push(call);
                    out.push(m);
                }
            }
        }
        "function_call_output" => {
            let id = item
                .get("call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| FieldError::malformed(format!("{field}.call_id"), "missing"))?;
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => return Err(FieldError::malformed(format!("{field}.output"), "missing")),
            };
            let mut m = Message::text(
                conform_config::conversation::Role::Tool,
                escape_template(&output),
            );
            m.tool_call_id = Some(id.to_string());
            out.push(m);
        }
        other => {
            return Err(FieldError::unsupported(
                format!("{field}.type"),
                format!("`{other}` items cannot be carried into a case"),
            ));
        }
    }
    Ok(())
}

/// The answers of a Chat Completions response body, one per choice, in the recorded
/// answer format: `{"text", "tool_calls": [{"name", "arguments"}]}`.
pub fn chat_answers(body: &Value) -> Result<Vec<Value>, FieldError> {
    let choices = body
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| FieldError::malformed("choices", "missing: not a chat completion"))?;
    if choices.is_empty() {
        return Err(FieldError::unsupported("choices", "no answer was returned"));
    }
    choices
        .iter()
        .enumerate()
        .map(|(i, choice)| {
            let at = format!("choices[{i}].message");
            let message = choice
                .get("message")
                .ok_or_else(|| FieldError::malformed(at.clone(), "missing"))?;
            let text = message
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut calls = Vec::new();
            if let Some(list) = message.get("tool_calls").and_then(Value::as_array) {
                for (j, call) in list.iter().enumerate() {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            FieldError::malformed(
                                format!("{at}.tool_calls[{j}].function.name"),
                                "missing",
                            )
                        })?;
                    calls.push(recorded_call(name, call.pointer("/function/arguments")));
                }
            }
            Ok(answer(text, calls))
        })
        .collect()
}

/// The answer of a Responses response body: its output text and function calls.
pub fn responses_answers(body: &Value) -> Result<Vec<Value>, FieldError> {
    let output = body
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| FieldError::malformed("output", "missing: not a Responses response"))?;
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if part.get("type").and_then(Value::as_str) == Some("output_text")
                        && let Some(t) = part.get("text").and_then(Value::as_str)
                    {
                        texts.push(t);
                    }
                }
            }
            Some("function_call") => {
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| FieldError::malformed(format!("output[{i}].name"), "missing"))?;
                calls.push(recorded_call(name, item.get("arguments")));
            }
            // Reasoning summaries and built-in tool results are not the answer.
            _ => {}
        }
    }
    Ok(vec![answer(&texts.join(""), calls)])
}

fn answer(text: &str, calls: Vec<Value>) -> Value {
    let mut a = Map::new();
    a.insert("text".into(), Value::String(text.to_string()));
    if !calls.is_empty() {
        a.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(a)
}

/// A call as recorded: arguments parsed when they are JSON, kept as the string when not.
fn recorded_call(name: &str, arguments: Option<&Value>) -> Value {
    let arguments = match arguments {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
        None => json!({}),
    };
    json!({"name": name, "arguments": arguments})
}

/// The parameters that accept any arguments: what a tool known only by name takes.
pub fn open_parameters() -> Value {
    json!({"type": "object"})
}

/// Declares, by name with open parameters, every tool the conversation or the recorded
/// answers call that the request does not define (logs and telemetry often keep the calls
/// but not the definitions, and a case must declare what it calls); the names declared.
/// Recorded definitions win: a defined tool is never replaced.
pub fn declare_called_tools(request: &mut Request, answers: Option<&[Value]>) -> Vec<String> {
    let mut called = BTreeSet::new();
    for m in &request.messages {
        for c in &m.tool_calls {
            called.insert(c.function.name.clone());
        }
    }
    for a in answers.unwrap_or_default() {
        for c in a
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = c.get("name").and_then(Value::as_str) {
                called.insert(name.to_string());
            }
        }
    }
    let tools = request.tools.get_or_insert_with(Vec::new);
    let mut declared = Vec::new();
    for name in called {
        if tools.iter().any(|t| t.name() == name) {
            continue;
        }
        let tool = json!({"type": "function", "function": {"name": name, "parameters": open_parameters()}});
        if let Ok(tool) = serde_json::from_value::<Tool>(tool) {
            tools.push(tool);
            declared.push(name);
        }
    }
    if tools.is_empty() {
        request.tools = None;
    }
    declared
}

/// A serde error without the values it quotes: an error names the field and what is
/// wrong, never logged text (which may hold what redaction is there to remove). Quoted
/// names (`role`, `function`) stay.
pub fn plain(error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    let text = text.split(" at line ").next().unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['"', '`']) {
        let quote = rest.as_bytes()[i] as char;
        out.push_str(&rest[..=i]);
        let after = &rest[i + 1..];
        let Some(end) = after.find(quote) else {
            out.push_str(after);
            return out;
        };
        let inner = &after[..end];
        let is_name = inner.len() <= 40
            && inner
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ' ' | ','));
        out.push_str(if is_name { inner } else { "…" });
        out.push(quote);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Logged text is sent as it was, never rendered: a case's message contents are
/// templates, so template syntax in them (`{{`, `{%`, `{#`) is written as an expression
/// that prints it, and a last new line (which rendering trims) likewise.
pub fn escape_template(text: &str) -> String {
    if !(text.contains("{{") || text.contains("{%") || text.contains("{#")) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        match after.as_bytes().get(1) {
            Some(b'{') => out.push_str("{{ \"{{\" }}"),
            Some(b'%') => out.push_str("{{ \"{%\" }}"),
            Some(b'#') => out.push_str("{{ \"{#\" }}"),
            _ => {
                out.push('{');
                rest = &after[1..];
                continue;
            }
        }
        rest = &after[2..];
    }
    out.push_str(rest);
    if out.ends_with('\n') {
        out.pop();
        out.push_str("{{ \"\\n\" }}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_syntax_in_logged_text_renders_back_to_itself() {
        let env = minijinja::Environment::new();
        for text in [
            "plain",
            "Use {{ name }} and {% if %} and {# c #} in Jinja.\n",
            "a { b } {x} }} {",
            "{{{{",
        ] {
            let escaped = escape_template(text);
            let rendered = env.render_str(&escaped, ()).unwrap();
            assert_eq!(rendered, text, "{escaped}");
        }
    }

    #[test]
    fn errors_never_quote_logged_values() {
        let e = chat_request(&json!({"messages": [{"role": "ana@example.com", "content": "x"}]}))
            .unwrap_err();
        assert!(!e.message.contains("ana@"), "{}", e.message);
        assert!(e.message.contains("unknown variant `…`"), "{}", e.message);
        let e = chat_request(
            &json!({"messages": [{"role": "user", "content": "x", "name": "Ana Lind +46 8 555 012 34"}]}),
        );
        assert!(e.is_ok());
        let e = chat_request(&json!({"messages": [{"role": "user", "content": "x", "tool_calls": "call ana@example.com"}]}))
            .unwrap_err();
        assert!(!e.message.contains("ana@"), "{}", e.message);
    }

    #[test]
    fn a_chat_request_becomes_a_conversation() {
        let body = json!({
            "model": "gpt-4o", "temperature": 0, "max_tokens": 100,
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
                {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "tool_choice": "auto", "parallel_tool_calls": false,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
        });
        let r = chat_request(&body).unwrap();
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.messages[1].content.as_deref(), Some("Hi\nthere"));
        assert_eq!(r.tools.unwrap()[0].name(), "f");
        assert_eq!(r.tool_choice, Some(ToolChoice::Auto));
        assert_eq!(r.parallel_tool_calls, Some(false));
        assert_eq!(r.schema, Some(json!({"type": "object"})));
        assert!(r.json_answer);
        assert_eq!(r.model.as_deref(), Some("gpt-4o"));
        assert_eq!(r.dropped, vec!["temperature", "max_tokens"]);
    }

    #[test]
    fn images_are_unsupported_and_a_bad_shape_is_malformed() {
        let img = json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]});
        let e = chat_request(&img).unwrap_err();
        assert!(e.unsupported);
        assert_eq!(e.field, "messages[0].content[0]");
        let bad = json!({"messages": [{"role": "user", "content": 3}]});
        let e = chat_request(&bad).unwrap_err();
        assert!(!e.unsupported);
        assert_eq!(e.field, "messages[0].content");
        let e = chat_request(&json!({"model": "m"})).unwrap_err();
        assert_eq!(e.field, "messages");
    }

    #[test]
    fn a_responses_request_and_answer() {
        let body = json!({
            "model": "gpt-4.1", "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
            ],
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "w"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}
        });
        let r = responses_request(&body).unwrap();
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.messages[2].tool_calls[0].function.name, "w");
        assert_eq!(r.tool_choice, Some(ToolChoice::Tool("w".into())));
        assert_eq!(r.schema, Some(json!({"type": "object"})));
        let answers = responses_answers(&json!({"output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "w", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "message", "content": [{"type": "output_text", "text": "ok"}]}
        ]}))
        .unwrap();
        assert_eq!(
            answers,
            vec![
                json!({"text": "ok", "tool_calls": [{"name": "w", "arguments": {"city": "Paris"}}]})
            ]
        );
    }

    #[test]
    fn called_tools_are_declared_by_name_and_recorded_definitions_win() {
        let mut r = chat_request(&json!({
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
                    {"id": "2", "type": "function", "function": {"name": "defined", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "1", "content": "ok"},
                {"role": "tool", "tool_call_id": "2", "content": "ok"}
            ],
            "tools": [{"type": "function", "function": {"name": "defined", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]
        }))
        .unwrap();
        let answers =
            [json!({"text": "", "tool_calls": [{"name": "answer_only", "arguments": {}}]})];
        let declared = declare_called_tools(&mut r, Some(&answers));
        assert_eq!(declared, ["answer_only", "lookup"]);
        let tools = r.tools.unwrap();
        let by = |n: &str| {
            tools
                .iter()
                .find(|t| t.name() == n)
                .unwrap()
                .parameters()
                .clone()
        };
        assert_eq!(by("defined")["properties"]["a"]["type"], "string");
        assert_eq!(by("lookup"), open_parameters());
        assert_eq!(tools.len(), 3);
        let mut plain =
            chat_request(&json!({"messages": [{"role": "user", "content": "x"}]})).unwrap();
        assert!(declare_called_tools(&mut plain, None).is_empty());
        assert!(plain.tools.is_none());
    }

    #[test]
    fn chat_answers_one_per_choice_with_calls() {
        let body = json!({"choices": [
            {"message": {"content": "{\"a\":1}"}},
            {"message": {"content": null, "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}}
        ]});
        assert_eq!(
            chat_answers(&body).unwrap(),
            vec![
                json!({"text": "{\"a\":1}"}),
                json!({"text": "", "tool_calls": [{"name": "f", "arguments": "not json"}]})
            ]
        );
    }
}
