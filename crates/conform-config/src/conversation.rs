//! A case as a whole request, in one provider-neutral shape: OpenAI Chat's `messages`,
//! `tools`, `tool_choice` and `parallel_tool_calls`, so that a request a team already
//! logs can be pasted in as it is. Every adapter translates this shape into its vendor's.
//!
//! Two extensions, both optional: a tool result may say `"is_error": true` (Anthropic
//! sends it as `is_error`, Gemini as an `error` response; OpenAI has no such field), and
//! an assistant's `tool_calls[].function.arguments` may be written as a JSON object
//! instead of a string of JSON.
//!
//! [`problems`] finds what makes a conversation unsendable on any vendor (a tool result
//! that answers no call, a call left unanswered, duplicate tool names, a parameter schema
//! that does not compile …); what one vendor's API refuses besides (Anthropic and Gemini
//! keep the system prompt apart and begin with the user …) is that vendor's to say
//! (`conform_wire::provider::WireFormat::conversation_problems`). Both give JSON pointers into the
//! case file, which [`super::Diagnostic::at_pointer`] places.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions; OpenAI's newer name `developer` is read as this.
    #[serde(alias = "developer")]
    System,
    /// What the caller says.
    User,
    /// What the model said, or the calls it made, earlier in the conversation.
    Assistant,
    /// A tool's result, answering one call of an earlier assistant turn.
    Tool,
}

impl Role {
    /// The role as OpenAI Chat writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text (a template: case variables may appear in it). `null` for an assistant
    /// turn that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// A participant's name on user and assistant turns; on a tool result, the tool's
    /// name (filled in from the call it answers when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The calls an assistant turn made (few-shot history).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<HistoryCall>,
    /// On a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On a tool result: the tool failed, and `content` says how.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl Message {
    /// A message with only a role and a text.
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: Some(content.into()),
            name: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
        }
    }

    /// The text, or "" when there is none.
    pub fn content_str(&self) -> &str {
        self.content.as_deref().unwrap_or_default()
    }
}

/// A call an assistant made earlier in the conversation.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryCall {
    /// The call's id, which the tool message answering it names.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called, with its arguments.
    pub function: HistoryFunction,
    /// What a vendor attached to the call that must go back with it, as Gemini's
    /// OpenAI-compatible API carries it: `{"google": {"thought_signature": "…"}}`. Gemini
    /// requires the signature back, byte for byte, on a later turn's function call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_content: Option<Value>,
}

/// The function a history call named, with its arguments.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryFunction {
    /// The tool's name, as declared.
    pub name: String,
    /// A string of JSON, as OpenAI sends it, or the object itself.
    pub arguments: Value,
}

impl HistoryCall {
    /// Gemini's thought signature for this call, when the history carries one.
    pub fn thought_signature(&self) -> Option<&str> {
        self.extra_content
            .as_ref()?
            .pointer("/google/thought_signature")?
            .as_str()
    }

    /// The arguments as an object; `None` when they are not one.
    pub fn arguments_object(&self) -> Option<Map<String, Value>> {
        match &self.function.arguments {
            Value::Object(map) => Some(map.clone()),
            Value::String(text) => match serde_json::from_str(text) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            },
            _ => None,
        }
    }

    /// The arguments as OpenAI carries them: the string as written, or the object
    /// serialized.
    pub fn arguments_text(&self) -> String {
        match &self.function.arguments {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

fn function_type() -> String {
    "function".into()
}

/// A tool the model may call, as OpenAI Chat declares it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function the tool is.
    pub function: ToolFunction,
}

/// A tool's name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFunction {
    /// What the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema (draft 2020-12) of the arguments object [default: no arguments].
    #[serde(default = "no_parameters")]
    pub parameters: Value,
    /// Ask the provider to enforce `parameters` strictly (OpenAI `strict`, Anthropic
    /// strict tool use), where it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}})
}

impl Tool {
    /// What the model calls it by.
    pub fn name(&self) -> &str {
        &self.function.name
    }

    /// What it does, for the model; empty when not said.
    pub fn description(&self) -> &str {
        self.function.description.as_deref().unwrap_or_default()
    }

    /// The JSON Schema of its arguments.
    pub fn parameters(&self) -> &Value {
        &self.function.parameters
    }

    /// Whether the provider was asked to enforce the arguments' schema.
    pub fn strict(&self) -> bool {
        self.function.strict == Some(true)
    }
}

/// Whether, and which, tools the model may or must call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum ToolChoice {
    /// The model decides (the default when tools are given).
    Auto,
    /// No tool may be called, although tools are declared.
    None,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Tool(String),
}

impl ToolChoice {
    /// Whether this choice makes a call mandatory.
    pub fn forces_a_call(&self) -> bool {
        matches!(self, ToolChoice::Required | ToolChoice::Tool(_))
    }

    /// `auto`, `none`, `required`, or the tool's name.
    pub fn describe(&self) -> String {
        match self {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Tool(name) => format!("the tool `{name}`"),
        }
    }
}

impl TryFrom<Value> for ToolChoice {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        const SHAPES: &str = "tool_choice is \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": \"…\"}}";
        match &value {
            Value::String(s) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => Err(format!("unknown tool_choice `{other}`: {SHAPES}")),
            },
            Value::Object(_) => value
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|_| value.get("type").is_none_or(|t| t == "function"))
                .map(|name| ToolChoice::Tool(name.to_string()))
                .ok_or_else(|| SHAPES.to_string()),
            _ => Err(SHAPES.to_string()),
        }
    }
}

impl From<ToolChoice> for Value {
    fn from(choice: ToolChoice) -> Value {
        match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        }
    }
}

/// A case's request, rendered: what every adapter translates for its vendor.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The messages, in order, the case's variables filled in.
    pub messages: Vec<Message>,
    /// The tools the model may call, shared by every case of a suite that declares them once.
    pub tools: Arc<[Tool]>,
    /// Which tool the model must call, may call or must not, when the case says.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn, when the case says.
    pub parallel_tool_calls: Option<bool>,
    /// Ask for the suite's JSON answer with the provider's structured-output mode; false
    /// when the case expects tool calls or free text.
    pub json_answer: bool,
}

impl Conversation {
    /// The declared tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// The leading system messages' text, joined by a blank line: what vendors that keep
    /// the system prompt apart (Anthropic, Gemini, OpenAI Responses) receive there.
    pub fn system(&self) -> Option<String> {
        let leading: Vec<&str> = self
            .messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .map(Message::content_str)
            .collect();
        (!leading.is_empty()).then(|| leading.join("\n\n"))
    }

    /// The messages after the leading system messages.
    pub fn turns(&self) -> &[Message] {
        let n = self
            .messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count();
        &self.messages[n..]
    }

    /// The text of every user message, in order: what identifies a case to a simulated
    /// provider, whichever wire carried it.
    pub fn user_texts(&self) -> Vec<&str> {
        self.messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(Message::content_str)
            .collect()
    }

    /// The messages as OpenAI Chat carries them.
    pub fn openai_messages(&self) -> Vec<Value> {
        self.messages.iter().map(openai_message).collect()
    }

    /// The tools as OpenAI Chat declares them.
    pub fn openai_tools(&self) -> Vec<Value> {
        self.tools
            .iter()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect()
    }
}

/// One message as OpenAI Chat carries it: an assistant's calls with string arguments,
/// a tool result with its `tool_call_id` (and without `is_error`, which OpenAI lacks).
pub fn openai_message(m: &Message) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!(m.role.as_str()));
    out.insert(
        "content".into(),
        m.content.as_ref().map_or(Value::Null, |c| json!(c)),
    );
    if m.role != Role::Tool
        && let Some(name) = &m.name
    {
        out.insert("name".into(), json!(name));
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let mut call = json!({"id": c.id, "type": "function",
                    "function": {"name": c.function.name, "arguments": c.arguments_text()}});
                // Sent back as it came: Gemini's OpenAI-compatible API reads it there.
                if let Some(extra) = &c.extra_content {
                    call["extra_content"] = extra.clone();
                }
                call
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(out)
}

/// Something wrong with a conversation, at a JSON pointer into its case file (or its
/// suite's tools file, for `/tools/…` when the tools are the suite's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where in the file, as a JSON pointer.
    pub pointer: String,
    /// What is wrong there.
    pub message: String,
}

impl Problem {
    /// A problem at `pointer`.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// What makes `tools` undeclarable anywhere: duplicate or malformed names, a type other
/// than `function`, a parameter schema that is not an object schema or does not compile.
/// Pointers start at `base` (`/tools` in a case, `` in a suite's tools file).
pub fn tool_problems(tools: &[Tool], base: &str) -> Vec<Problem> {
    let mut found = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("{base}/{i}");
        if tool.kind != "function" {
            found.push(Problem::new(
                format!("{at}/type"),
                format!(
                    "tool type `{}`: only \"function\" tools are declared",
                    tool.kind
                ),
            ));
        }
        let name = tool.name();
        if !valid_tool_name(name) {
            found.push(Problem::new(
                format!("{at}/function/name"),
                format!(
                    "tool name `{name}`: names are 1-64 characters of a-z, A-Z, 0-9, `_` and `-` (what every vendor accepts)"
                ),
            ));
        }
        if let Some(first) = seen.insert(name, i) {
            found.push(Problem::new(
                format!("{at}/function/name"),
                format!("a second tool named `{name}` (the first is {base}/{first}): tool names must be unique"),
            ));
        }
        let params = tool.parameters();
        let at_params = format!("{at}/function/parameters");
        match params.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            _ => found.push(Problem::new(
                at_params.clone(),
                "the parameters must be an object schema (`\"type\": \"object\"`): vendors pass arguments as one object",
            )),
        }
        for (pointer, message) in super::schema_file::pointer_problems(params) {
            found.push(Problem::new(format!("{at_params}{pointer}"), message));
        }
    }
    found
}

/// `[a-zA-Z0-9_-]{1,64}`: what OpenAI, Anthropic and Gemini all accept.
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What makes this conversation unsendable on any vendor: tool results that answer no
/// open call, calls left unanswered, history calls to undeclared tools, a `tool_choice`
/// that names no declared tool. The tools themselves are checked by [`tool_problems`].
pub fn problems(
    messages: &[Message],
    tools: &[Tool],
    tool_choice: Option<&ToolChoice>,
) -> Vec<Problem> {
    let mut found = Vec::new();
    if messages.is_empty() {
        found.push(Problem::new(
            "/messages",
            "no messages: a conversation needs at least one user message",
        ));
    }
    let declared: BTreeSet<&str> = tools.iter().map(Tool::name).collect();
    if let Some(choice) = tool_choice {
        choice_problems(choice, tools, &declared, &mut found);
    }
    // Calls made and not yet answered, by id, with where they were made.
    let mut open: Vec<(String, String)> = Vec::new();
    let mut ids: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("/messages/{i}");
        if m.role != Role::Tool && !open.is_empty() {
            let unanswered: Vec<&str> = open.iter().map(|(id, _)| id.as_str()).collect();
            found.push(Problem::new(
                at.clone(),
                format!(
                    "a {} message before every call of the previous assistant turn was answered: no tool result for {}",
                    m.role.as_str(),
                    unanswered.join(", ")
                ),
            ));
            open.clear();
        }
        shape_problems(&at, m, &mut found);
        call_problems(&at, m, &declared, &mut ids, &mut open, &mut found);
        if m.role == Role::Tool {
            result_problems(&at, m, &ids, &mut open, &mut found);
        }
    }
    if !open.is_empty() {
        let unanswered: Vec<&str> = open.iter().map(|(id, _)| id.as_str()).collect();
        found.push(Problem::new(
            format!("/messages/{}", messages.len() - 1),
            format!(
                "the conversation ends with calls that have no tool result: {}",
                unanswered.join(", ")
            ),
        ));
    }
    found
}

/// A `tool_choice` that names no declared tool, or comes without tools.
fn choice_problems(
    choice: &ToolChoice,
    tools: &[Tool],
    declared: &BTreeSet<&str>,
    found: &mut Vec<Problem>,
) {
    match choice {
        _ if tools.is_empty() => found.push(Problem::new(
            "/tool_choice",
            "tool_choice without tools: declare the tools (`tools` in the case, or `tools` in suite.toml)",
        )),
        ToolChoice::Tool(name) if !declared.contains(name.as_str()) => {
            found.push(Problem::new(
                "/tool_choice/function/name",
                format!(
                    "tool_choice names `{name}`, which is not declared; declared: {}",
                    list(declared)
                ),
            ))
        }
        _ => {}
    }
}

/// Fields message `m` (at `at`) has that its role does not, or content it lacks.
fn shape_problems(at: &str, m: &Message, found: &mut Vec<Problem>) {
    if !m.tool_calls.is_empty() && m.role != Role::Assistant {
        found.push(Problem::new(
            format!("{at}/tool_calls"),
            "only assistant messages make tool calls",
        ));
    }
    if m.is_error && m.role != Role::Tool {
        found.push(Problem::new(
            format!("{at}/is_error"),
            "only tool results say is_error",
        ));
    }
    if m.tool_call_id.is_some() && m.role != Role::Tool {
        found.push(Problem::new(
            format!("{at}/tool_call_id"),
            "only tool results answer a call (tool_call_id)",
        ));
    }
    match m.role {
        Role::System | Role::User if m.content.is_none() => found.push(Problem::new(
            format!("{at}/content"),
            format!("a {} message needs content", m.role.as_str()),
        )),
        Role::Assistant if m.content.is_none() && m.tool_calls.is_empty() => {
            found.push(Problem::new(
                format!("{at}/content"),
                "an assistant message needs content or tool_calls",
            ))
        }
        _ => {}
    }
}

/// The calls of message `m` (at `at`): each well formed, with its own id, to a declared
/// tool; each is then `open` until a tool result answers it.
fn call_problems(
    at: &str,
    m: &Message,
    declared: &BTreeSet<&str>,
    ids: &mut HashMap<String, String>,
    open: &mut Vec<(String, String)>,
    found: &mut Vec<Problem>,
) {
    for (j, call) in m.tool_calls.iter().enumerate() {
        let call_at = format!("{at}/tool_calls/{j}");
        if call.kind != "function" {
            found.push(Problem::new(
                format!("{call_at}/type"),
                "only \"function\" calls are made",
            ));
        }
        if call.id.is_empty() {
            found.push(Problem::new(
                format!("{call_at}/id"),
                "a call needs an id, which its tool result names",
            ));
        } else if let Some(first) = ids.insert(call.id.clone(), call_at.clone()) {
            found.push(Problem::new(
                format!("{call_at}/id"),
                format!(
                    "call id `{}` is used twice (first at {first}): every call needs its own",
                    call.id
                ),
            ));
        }
        let name = call.function.name.as_str();
        if !declared.contains(name) {
            found.push(Problem::new(
                format!("{call_at}/function/name"),
                format!(
                    "the history calls `{name}`, which is not declared; declared: {}",
                    list(declared)
                ),
            ));
        }
        if call.arguments_object().is_none() {
            found.push(Problem::new(
                format!("{call_at}/function/arguments"),
                "the arguments must be a JSON object, or a string holding one",
            ));
        }
        open.push((call.id.clone(), call_at));
    }
}

/// Tool result `m` (at `at`) answers an `open` call, which it closes.
fn result_problems(
    at: &str,
    m: &Message,
    ids: &HashMap<String, String>,
    open: &mut Vec<(String, String)>,
    found: &mut Vec<Problem>,
) {
    match &m.tool_call_id {
        None => found.push(Problem::new(
            at,
            "a tool result needs the tool_call_id of the call it answers",
        )),
        Some(id) => match open.iter().position(|(open_id, _)| open_id == id) {
            Some(k) => {
                open.remove(k);
            }
            None if ids.contains_key(id) => found.push(Problem::new(
                format!("{at}/tool_call_id"),
                format!(
                    "`{id}` was already answered, or was not made by the assistant turn right before this result"
                ),
            )),
            None => found.push(Problem::new(
                format!("{at}/tool_call_id"),
                format!("no earlier assistant turn made a call with id `{id}`"),
            )),
        },
    }
}

fn list(names: &BTreeSet<&str>) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.iter().copied().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(v: Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap()
    }

    fn tools(v: Value) -> Vec<Tool> {
        serde_json::from_value(v).unwrap()
    }

    fn pointers(found: &[Problem]) -> Vec<&str> {
        found.iter().map(|p| p.pointer.as_str()).collect()
    }

    fn lookup() -> Vec<Tool> {
        tools(
            json!([{"type": "function", "function": {"name": "lookup_order",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]),
        )
    }

    #[test]
    fn tool_results_must_answer_an_open_call() {
        let m = messages(json!([
            {"role": "user", "content": "where is A1 and A2?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"id\": \"A1\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "lookup_order", "arguments": {"id": "A2"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
            {"role": "tool", "tool_call_id": "c9", "content": "?"},
            {"role": "user", "content": "and?"}
        ]));
        let found = problems(&m, &lookup(), None);
        assert_eq!(
            pointers(&found),
            ["/messages/3/tool_call_id", "/messages/4"],
            "{found:?}"
        );
        assert!(found[1].message.contains("no tool result for c2"));
    }

    #[test]
    fn undeclared_tools_and_bad_choices_are_named() {
        let m = messages(json!([{"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "refund", "arguments": "[1]"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]));
        let found = problems(&m, &lookup(), Some(&ToolChoice::Tool("nope".into())));
        assert_eq!(
            pointers(&found),
            [
                "/tool_choice/function/name",
                "/messages/1/tool_calls/0/function/name",
                "/messages/1/tool_calls/0/function/arguments"
            ]
        );
        assert_eq!(
            pointers(&problems(&m[..1], &[], Some(&ToolChoice::Auto))),
            ["/tool_choice"]
        );
    }

    #[test]
    fn tool_declarations_are_unique_named_and_compile() {
        let t = tools(json!([
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "strnig"}}}}},
            {"type": "function", "function": {"name": "bad name", "parameters": {"type": "array"}}}
        ]));
        let found = tool_problems(&t, "/tools");
        assert_eq!(
            pointers(&found),
            [
                "/tools/1/function/name",
                "/tools/1/function/parameters/properties/x/type",
                "/tools/2/function/name",
                "/tools/2/function/parameters"
            ],
            "{found:?}"
        );
    }

    #[test]
    fn tool_choice_reads_every_openai_shape() {
        let parse = |v: Value| ToolChoice::try_from(v);
        assert_eq!(parse(json!("none")), Ok(ToolChoice::None));
        assert_eq!(
            parse(json!({"type": "function", "function": {"name": "f"}})),
            Ok(ToolChoice::Tool("f".into()))
        );
        assert!(
            parse(json!("any"))
                .unwrap_err()
                .contains("unknown tool_choice")
        );
        assert_eq!(
            Value::from(ToolChoice::Tool("f".into())),
            json!({"type": "function", "function": {"name": "f"}})
        );
    }
}
