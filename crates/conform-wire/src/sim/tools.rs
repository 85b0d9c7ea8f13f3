//! What a simulated provider answers to a request-shaped case: the expected tool calls
//! (with whole arguments, made from the case's pinned arguments and the tool's schema),
//! a short text, or the expected JSON; and how each tool-call drift changes that.

use serde_json::{Map, Value, json};

use super::Behaviour;
use conform_config::{Answer, Case, Tool, ToolNames};

/// One call a simulation makes.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCall {
    /// The tool's name.
    pub name: String,
    /// The arguments object.
    pub arguments: Value,
    /// The arguments as they go on the wire: their JSON text, unless a drift changed it.
    pub raw: String,
    /// The JSON pointers the case pins, which a faithful simulation never drops.
    pub pinned: Vec<String>,
    /// The tool's required arguments, which one drift drops.
    pub required: Vec<String>,
}

impl SimCall {
    fn new(name: &str, arguments: Value, pinned: Vec<String>, required: Vec<String>) -> Self {
        SimCall {
            name: name.to_string(),
            raw: arguments.to_string(),
            arguments,
            pinned,
            required,
        }
    }
}

/// What the simulation knows of a request-shaped case.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// The expected calls; empty when the answer is text or JSON.
    pub calls: Vec<SimCall>,
    /// A call to the first declared tool, for the drift that calls uninvited.
    pub uninvited: Option<SimCall>,
}

impl ToolAnswer {
    /// The calls `case` expects, each to its first allowed tool, with arguments that
    /// satisfy the tool's schema and hold every pinned value.
    pub fn of(case: &Case, tools: &[Tool]) -> ToolAnswer {
        let make = |name: &str, pinned: &Map<String, Value>| -> SimCall {
            let tool = tools.iter().find(|t| t.name() == name);
            let schema = tool.map(Tool::parameters).cloned().unwrap_or(json!({}));
            let mut arguments = instance(&schema);
            for (pointer, value) in pinned {
                set(&mut arguments, pointer, value.clone());
            }
            let required = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            SimCall::new(name, arguments, pinned.keys().cloned().collect(), required)
        };
        let calls = match case.answer() {
            Answer::ToolCalls(expected) => expected
                .iter()
                .map(|e| {
                    let name = match &e.name {
                        ToolNames::One(one) => one.clone(),
                        ToolNames::AnyOf(any) => any.first().cloned().unwrap_or_default(),
                    };
                    make(&name, &e.arguments)
                })
                .collect(),
            Answer::Json | Answer::Text => Vec::new(),
        };
        let uninvited = tools.first().map(|t| make(t.name(), &Map::new()));
        ToolAnswer { calls, uninvited }
    }
}

pub use crate::provider::server::Choice;

/// An answer before it takes a vendor's shape.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Planned {
    /// The answer text.
    pub content: String,
    /// The tool calls, in order.
    pub calls: Vec<SimCall>,
    /// Whether the answer stops at the output limit rather than finishing.
    pub cut_off: bool,
}

/// The answer to a request that expects calls, text or JSON (`json` is the answer text
/// the behaviour already rendered), as `behaviour` gives it; `drifts` says whether this
/// answer is one where the drift shows.
pub fn plan(
    behaviour: Behaviour,
    answer: &ToolAnswer,
    json: Option<String>,
    choice: Choice,
    drifts: bool,
) -> Planned {
    let mut planned = Planned {
        content: json.unwrap_or_else(|| TEXT.to_string()),
        calls: answer.calls.clone(),
        cut_off: false,
    };
    if !answer.calls.is_empty() {
        planned.content.clear();
    }
    if !drifts {
        return planned;
    }
    match behaviour {
        Behaviour::CallsDespiteNone if choice == Choice::None => {
            planned.calls.extend(answer.uninvited.clone());
        }
        Behaviour::InventsTool => {
            for call in &mut planned.calls {
                call.name = format!("{}_v2", call.name);
            }
        }
        Behaviour::DoubleEncodes => {
            for call in &mut planned.calls {
                call.raw = Value::String(call.raw.clone()).to_string();
            }
        }
        Behaviour::DropsRequired => {
            for call in &mut planned.calls {
                // An argument the case does not pin, so that the drift is the schema's
                // to catch; the last required one when every one is pinned.
                let victim = call
                    .required
                    .iter()
                    .rev()
                    .find(|k| !call.pinned.contains(&format!("/{k}")))
                    .or(call.required.last())
                    .cloned();
                if let (Some(key), Some(map)) = (victim, call.arguments.as_object_mut()) {
                    map.remove(&key);
                    call.raw = call.arguments.to_string();
                }
            }
        }
        Behaviour::CallAsText if !planned.calls.is_empty() => {
            let written: Vec<Value> = planned
                .calls
                .iter()
                .map(|c| json!({"name": c.name, "arguments": c.arguments}))
                .collect();
            let body = if written.len() == 1 {
                written[0].to_string()
            } else {
                Value::Array(written).to_string()
            };
            planned.content = format!("I'll do that now.\n```json\n{body}\n```");
            planned.calls.clear();
        }
        Behaviour::IgnoresRequired if choice == Choice::Required => {
            planned.calls.clear();
            planned.content = TEXT.to_string();
        }
        Behaviour::OneOfParallel if planned.calls.len() > 1 => {
            planned.calls.truncate(1);
        }
        Behaviour::Truncated if !planned.calls.is_empty() => {
            if let Some(call) = planned.calls.last_mut() {
                let cut = call.raw.len() / 2;
                let mut end = cut.max(1);
                while !call.raw.is_char_boundary(end) {
                    end -= 1;
                }
                call.raw.truncate(end);
            }
            planned.cut_off = true;
        }
        _ => {}
    }
    planned
}

/// What a simulation writes when the answer is text.
pub const TEXT: &str = "Thanks for getting in touch! I've looked into this for you and everything is in order; is there anything else I can help with?";

/// A value that satisfies `schema` as simply as it can: the first enum value or the
/// constant, every required property of an object, the fewest items of an array,
/// numbers at their lower bound.
pub fn instance(schema: &Value) -> Value {
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match kind {
        "object" => {
            let mut out = Map::new();
            let properties = schema.get("properties").and_then(Value::as_object);
            for key in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let sub = properties.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
                out.insert(key.to_string(), instance(sub));
            }
            Value::Object(out)
        }
        "array" => {
            let n = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema.get("items").unwrap_or(&Value::Null);
            Value::Array((0..n).map(|_| instance(item)).collect())
        }
        "number" | "integer" => {
            let number = |k: &str| schema.get(k).and_then(Value::as_f64);
            let low = number("minimum")
                .or(number("exclusiveMinimum").map(|m| m + 1.0))
                .unwrap_or(1.0);
            let high = number("maximum").unwrap_or(f64::MAX);
            let v = low.min(high);
            if kind == "integer" {
                json!(v.ceil() as i64)
            } else {
                json!(v)
            }
        }
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            let max = schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .map_or(usize::MAX, |m| m as usize);
            let text = "sample";
            let mut s: String = text.chars().take(max).collect();
            while s.len() < min {
                s.push('x');
            }
            json!(s)
        }
    }
}

/// Sets the value at a JSON pointer, making the objects on the way.
fn set(target: &mut Value, pointer: &str, value: Value) {
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut at = target;
    for (i, token) in tokens.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if i + 1 == tokens.len() {
            map.insert(token.clone(), value);
            return;
        }
        at = map.entry(token.clone()).or_insert_with(|| json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_satisfy_their_schemas() {
        let schema = json!({"type": "object", "required": ["id", "amount", "reason", "address"],
            "properties": {"id": {"type": "string"}, "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 500},
                "reason": {"type": "string", "enum": ["damaged", "late"]},
                "address": {"type": "object", "required": ["country"], "properties": {
                    "country": {"type": "string", "minLength": 2, "maxLength": 2}}},
                "optional": {"type": "string"}}});
        let mut v = instance(&schema);
        set(&mut v, "/address/city", json!("Berlin"));
        assert_eq!(
            v,
            json!({"id": "sample", "amount": 1.0, "reason": "damaged",
                "address": {"country": "sa", "city": "Berlin"}})
        );
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        assert!(validator.is_valid(&v));
    }

    #[test]
    fn each_drift_changes_only_what_it_is_named_for() {
        let call = SimCall::new(
            "lookup_order",
            json!({"order_id": "BR-1", "note": "x"}),
            vec!["/order_id".into()],
            vec!["order_id".into(), "note".into()],
        );
        let answer = ToolAnswer {
            calls: vec![call.clone(), call.clone()],
            uninvited: Some(call.clone()),
        };
        let p = |b, choice| plan(b, &answer, None, choice, true);
        assert_eq!(
            p(Behaviour::InventsTool, Choice::Auto).calls[0].name,
            "lookup_order_v2"
        );
        let double = p(Behaviour::DoubleEncodes, Choice::Auto);
        assert_eq!(
            double.calls[0].raw,
            r#""{\"order_id\":\"BR-1\",\"note\":\"x\"}""#
        );
        let dropped = p(Behaviour::DropsRequired, Choice::Auto);
        assert_eq!(dropped.calls[0].arguments, json!({"order_id": "BR-1"}));
        let text = p(Behaviour::CallAsText, Choice::Auto);
        assert!(text.calls.is_empty() && text.content.contains("```json"));
        assert!(
            p(Behaviour::IgnoresRequired, Choice::Required)
                .calls
                .is_empty()
        );
        assert_eq!(p(Behaviour::IgnoresRequired, Choice::Auto).calls.len(), 2);
        assert_eq!(p(Behaviour::OneOfParallel, Choice::Auto).calls.len(), 1);
        let none = ToolAnswer {
            calls: Vec::new(),
            uninvited: Some(call),
        };
        let uninvited = plan(Behaviour::CallsDespiteNone, &none, None, Choice::None, true);
        assert_eq!(uninvited.calls.len(), 1);
        assert_eq!(uninvited.content, TEXT);
        // Not drifting: the expected calls, faithfully.
        let faithful = plan(Behaviour::CallAsText, &answer, None, Choice::Auto, false);
        assert_eq!(faithful.calls.len(), 2);
    }
}
