//! The answer is JSON and nothing else. Fences and prose are failures, never repaired:
//! the application that reads this provider's answers would choke on them too.

use serde_json::Value;

use super::{Code, Finding};
use conform_config::StructuredOutput;

/// The check's name in outcomes and reports.
pub const NAME: &str = "json";

/// Parses `text` as one JSON value, or says precisely what is wrong with it.
pub fn parse_strict(text: &str, requested: StructuredOutput) -> Result<Value, Finding> {
    let error = match serde_json::from_str::<Value>(text) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(Finding::new(Code::EmptyOutput, "the answer is empty"));
    }
    if trimmed.starts_with("```") {
        return Err(Finding::new(
            Code::NotPureJson,
            "the JSON is wrapped in markdown fences (```); the answer must be JSON only",
        ));
    }
    if let Some(embedded) = embedded_object(trimmed) {
        return Err(Finding::new(
            Code::NotPureJson,
            format!(
                "prose around the JSON: {} bytes before it, {} after; the answer must be JSON only",
                embedded.0, embedded.1
            ),
        ));
    }
    if error.is_eof() && trimmed.starts_with(['{', '[']) {
        return Err(Finding::new(
            Code::InvalidJson,
            format!("the JSON is truncated: it ends after {} bytes", text.len()),
        ));
    }
    if requested != StructuredOutput::Prompt && !trimmed.contains('{') {
        return Err(Finding::new(
            Code::StructuredOutputIgnored,
            format!(
                "JSON was requested ({}) but the answer is not JSON at all: {}",
                requested_name(requested),
                excerpt(trimmed)
            ),
        ));
    }
    Err(Finding::new(
        Code::InvalidJson,
        format!("not valid JSON ({error}): {}", excerpt(trimmed)),
    ))
}

/// `(bytes before, bytes after)` when the text holds a parseable object amid prose.
fn embedded_object(text: &str) -> Option<(usize, usize)> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end <= start || (start == 0 && end == text.len() - 1) {
        return None;
    }
    serde_json::from_str::<Value>(&text[start..=end]).ok()?;
    Some((start, text.len() - end - 1))
}

fn requested_name(requested: StructuredOutput) -> &'static str {
    match requested {
        StructuredOutput::JsonSchema => "json_schema",
        StructuredOutput::JsonObject => "json_object",
        StructuredOutput::Tool => "a forced tool call",
        StructuredOutput::Prompt => "in the prompt",
    }
}

fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        out.push('…');
    }
    format!("{out:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(text: &str) -> &'static str {
        parse_strict(text, StructuredOutput::JsonSchema)
            .map(|_| "ok")
            .unwrap_or_else(|f| f.code.as_str())
    }

    #[test]
    fn classifies_what_models_do() {
        assert_eq!(code("{\"a\": 1}"), "ok");
        assert_eq!(code("  {\"a\": 1}\n"), "ok");
        assert_eq!(code("```json\n{\"a\": 1}\n```"), "not_pure_json");
        assert_eq!(code("Here it is: {\"a\": 1}"), "not_pure_json");
        assert_eq!(code("{\"a\": 1} Hope this helps!"), "not_pure_json");
        assert_eq!(code("{\""), "invalid_json");
        assert_eq!(code("The total is 42 EUR."), "structured_output_ignored");
        assert_eq!(code(""), "empty_output");
        assert_eq!(code("{'a': 1}"), "invalid_json");
    }

    #[test]
    fn prose_is_not_ignored_structure_when_only_the_prompt_asked() {
        let f = parse_strict("The total is 42.", StructuredOutput::Prompt).unwrap_err();
        assert_eq!(f.code, "invalid_json");
    }
}
