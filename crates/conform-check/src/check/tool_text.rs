//! A tool call written into the answer's text instead of made as a structured call: the
//! failure behind "tool calls leaking out as assistant text" on fallbacks (a server
//! without the right tool-call parser, a gateway that drops `tools`).
//!
//! What models write when that happens: the call as JSON (`{"name": …, "arguments": …}`,
//! `{"function": …}`, `{"tool_calls": […]}`), bare or in a code block; one of the chat
//! formats' own markers (`<tool_call>`, `<function=…>`, `<|python_tag|>`, `[TOOL_CALLS]`,
//! `<tool_use>`, `<function_calls>`, `<invoke name=…>`, `<|tool_call_start|>`); or a
//! declared tool called like a function (`lookup_order(order_id="A-1")`) in a code block
//! or as the whole answer. Prose that merely names a tool is not a call.

use serde_json::Value;

/// Markers of the chat formats' own tool-call syntax.
const MARKERS: &[&str] = &[
    "<tool_call>",
    "<tool_calls>",
    "<function=",
    "<function_call>",
    "<function_calls>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "<tool_use>",
    "<invoke name=",
    "<|tool_call_start|>",
    "<|tool_calls_section_begin|>",
    "<｜tool▁calls▁begin｜>",
];

/// How the text holds a call, in words, or `None` when it holds none. `tools` are the
/// declared tool names.
pub fn call_in_text(text: &str, tools: &[&str]) -> Option<String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    if let Some(marker) = MARKERS.iter().find(|m| trimmed.contains(**m)) {
        return Some(format!("the text holds the tool-call marker `{marker}`"));
    }
    for candidate in json_candidates(trimmed) {
        if let Some(name) = call_object(&candidate, tools) {
            return Some(format!("the text holds a call to `{name}` written as JSON"));
        }
    }
    for block in code_blocks(trimmed).into_iter().chain([trimmed]) {
        if let Some(name) = function_style(block, tools) {
            return Some(format!(
                "the text holds a call to `{name}` written as code: `{}`",
                excerpt(block)
            ));
        }
    }
    None
}

/// The JSON values the text holds: the whole text, each code block's body, and each
/// balanced `{…}` that parses.
fn json_candidates(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        out.push(v);
    }
    for block in code_blocks(text) {
        if let Ok(v) = serde_json::from_str::<Value>(block) {
            out.push(v);
        }
    }
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(open) = text[start..].find('{').map(|i| start + i) {
        match balanced_end(bytes, open) {
            Some(end) => {
                if let Ok(v) = serde_json::from_str::<Value>(&text[open..=end]) {
                    out.push(v);
                    start = end + 1;
                    continue;
                }
                start = open + 1;
            }
            // Unbalanced (a model that forgot a brace): an inner object may still be whole.
            None => start = open + 1,
        }
    }
    out
}

/// The index of the `}` that closes the `{` at `open`, strings skipped.
fn balanced_end(bytes: &[u8], open: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The tool a JSON value calls: `{"name", "arguments"|"parameters"|"args"|"input"}`,
/// `{"function": {"name", …}}`, `{"tool": …}`, `{"tool_calls": [call, …]}`, or a list of
/// calls. A name must be declared, or the object must say `arguments`/`parameters`.
fn call_object(value: &Value, tools: &[&str]) -> Option<String> {
    match value {
        Value::Array(items) => items.iter().find_map(|v| call_object(v, tools)),
        Value::Object(map) => {
            if let Some(inner) = map.get("tool_calls").or_else(|| map.get("tool_call")) {
                return call_object(inner, tools);
            }
            if let Some(function @ Value::Object(_)) = map.get("function") {
                return call_object(function, tools).or_else(|| {
                    function
                        .get("name")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                });
            }
            let name = map
                .get("name")
                .or_else(|| map.get("tool"))
                .or_else(|| map.get("tool_name"))
                .or_else(|| map.get("function_name"))
                .and_then(Value::as_str)?;
            let has_arguments = ["arguments", "parameters", "args", "input"]
                .iter()
                .any(|k| map.contains_key(*k));
            (has_arguments || tools.contains(&name)).then(|| name.to_string())
        }
        _ => None,
    }
}

/// The bodies of the text's fenced code blocks.
fn code_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        match body.find("```") {
            Some(close) => {
                out.push(body[..close].trim());
                rest = &body[close + 3..];
            }
            None => break,
        }
    }
    out
}

/// A declared tool called like a function: the block begins with `name(`, or with it
/// under a module (`default_api.name(`, as Gemini writes calls in its code-execution
/// style; `functions.name(`), and ends with `)` (so a sentence that mentions the tool is
/// not a call).
fn function_style<'a>(block: &str, tools: &[&'a str]) -> Option<&'a str> {
    let block = block.trim().trim_start_matches("print(").trim();
    let unqualified = strip_module(block);
    tools.iter().copied().find(|name| {
        unqualified
            .strip_prefix(name)
            .is_some_and(|rest| rest.trim_start().starts_with('('))
            && block.trim_end().trim_end_matches(';').ends_with(')')
    })
}

/// `default_api.lookup_order(…)` without `default_api.`: the leading dotted path of
/// identifiers before the last one.
fn strip_module(block: &str) -> &str {
    let head_end = block.find('(').unwrap_or(block.len());
    let head = &block[..head_end];
    let is_path = head
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    match head.rfind('.') {
        Some(dot) if is_path => &block[dot + 1..],
        _ => block,
    }
}

fn excerpt(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &["lookup_order", "issue_refund"];

    fn found(text: &str) -> bool {
        call_in_text(text, TOOLS).is_some()
    }

    #[test]
    fn calls_written_as_text_are_found_in_every_form_models_use() {
        assert!(found(
            r#"{"name": "lookup_order", "arguments": {"order_id": "A-1"}}"#
        ));
        assert!(found(
            "Let me check.\n```json\n{\"name\": \"lookup_order\", \"parameters\": {\"order_id\": \"A-1\"}}\n```"
        ));
        assert!(found(
            r#"{"tool_calls": [{"function": {"name": "issue_refund", "arguments": "{}"}}]}"#
        ));
        assert!(found(
            "<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {}}\n</tool_call>"
        ));
        assert!(found("[TOOL_CALLS][{\"name\": \"x\"}]"));
        assert!(found("<|python_tag|>lookup_order.call(order_id=\"A-1\")"));
        assert!(found("```python\nlookup_order(order_id=\"A-1\")\n```"));
        assert!(found("lookup_order(order_id='A-1')"));
        // Gemini's code-execution style, in a block or printed.
        assert!(found(
            "```tool_code\nprint(default_api.lookup_order(order_id=\"A-1\"))\n```"
        ));
        assert!(found(
            "```python\ndefault_api.issue_refund(order_id=\"A-1\")\n```"
        ));
        assert!(found("functions.lookup_order(order_id='A-1')"));
        assert!(found(
            "Sure: {\"tool\": \"lookup_order\", \"order_id\": \"A-1\"} done"
        ));
    }

    #[test]
    fn prose_and_json_answers_are_not_calls() {
        assert!(!found(
            "Your order A-1 shipped yesterday; I used lookup_order to check."
        ));
        assert!(!found(
            "I can look that up with lookup_order (I need the order number)."
        ));
        assert!(!found(r#"{"category": "billing", "priority": "p3"}"#));
        assert!(!found(r#"{"name": "Ada Lovelace", "age": 36}"#));
        assert!(!found(
            "See default_api.lookup_order for details (the docs)."
        ));
        assert!(!found("```python\nother_api.unknown_tool(x=1)\n```"));
        assert!(!found(""));
    }
}
