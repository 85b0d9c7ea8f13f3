//! Azure's content filter, as its answers report it.
//!
//! Every answer annotates the prompt (`prompt_filter_results: [{prompt_index,
//! content_filter_results}]`) and each choice (`content_filter_results`) with a result
//! per category (`hate`, `sexual`, `violence`, `self_harm`: `{filtered, severity}`;
//! `jailbreak`, `protected_material_text` …: `{filtered, detected}`). A completion the
//! filter stopped ends with `finish_reason: "content_filter"`; a prompt it stopped is a
//! 400 whose error has `code: "content_filter"` and, in `innererror`, the results.
//! Either way the answer is the filter's, and says which categories it stopped.

use serde_json::Value;

use crate::provider::{FinishKind, Reply, sse};

/// `reply` with the content filter's word on it: a content-filter finish naming the
/// categories `body` (one document, or an event stream of chunks) marks filtered.
pub(super) fn apply(mut reply: Reply, body: &[u8]) -> Reply {
    let found = found(body);
    if found.is_empty() && reply.finish.kind != FinishKind::ContentFilter {
        return reply;
    }
    let raw = reply.finish.raw.as_deref().unwrap_or("content_filter");
    reply.finish.kind = FinishKind::ContentFilter;
    reply.finish.raw = Some(match found.is_empty() {
        true => raw.to_string(),
        false => format!("{raw} (filtered: {})", found.join(", ")),
    });
    reply
}

/// What a 400's error object says the filter stopped in the prompt; `None` for any other
/// error.
pub(super) fn prompt_refused(error: &Value) -> Option<String> {
    let text = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).map(str::to_string);
    let inner = error.get("innererror");
    let filtered = text(error, "code").as_deref() == Some("content_filter")
        || inner.and_then(|i| text(i, "code")).as_deref() == Some("ResponsibleAIPolicyViolation");
    if !filtered {
        return None;
    }
    let message =
        text(error, "message").unwrap_or_else(|| "the content filter stopped the prompt".into());
    let categories = inner
        .and_then(|i| i.get("content_filter_result"))
        .map(categories)
        .unwrap_or_default();
    Some(match categories.is_empty() {
        true => message,
        false => format!("{message} (filtered: {})", categories.join(", ")),
    })
}

/// Every category filtered anywhere in `body`: the prompt's as `prompt: hate (medium)`,
/// a choice's as `hate (medium)`.
fn found(body: &[u8]) -> Vec<String> {
    let documents: Vec<Value> = if sse::is_event_stream(body) {
        (sse::events(body).unwrap_or_default().iter())
            .filter_map(|e| serde_json::from_str(e.data.trim()).ok())
            .collect()
    } else {
        serde_json::from_slice(body).into_iter().collect()
    };
    let mut found = Vec::new();
    for document in &documents {
        let prompts = document
            .get("prompt_filter_results")
            .and_then(Value::as_array);
        for prompt in prompts.into_iter().flatten() {
            let results = prompt.get("content_filter_results").unwrap_or(&Value::Null);
            found.extend(
                categories(results)
                    .into_iter()
                    .map(|c| format!("prompt: {c}")),
            );
        }
        let choices = document.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            found.extend(categories(
                choice.get("content_filter_results").unwrap_or(&Value::Null),
            ));
        }
    }
    found.dedup();
    found
}

/// The categories of one result object marked `filtered: true`, with their severity.
fn categories(results: &Value) -> Vec<String> {
    let Some(results) = results.as_object() else {
        return Vec::new();
    };
    results
        .iter()
        .filter(|(_, r)| r.get("filtered").and_then(Value::as_bool) == Some(true))
        .map(
            |(name, r)| match r.get("severity").and_then(Value::as_str) {
                Some(severity) => format!("{name} ({severity})"),
                None => name.clone(),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_what_is_filtered_is_named() {
        let results = json!({"hate": {"filtered": false, "severity": "safe"},
            "violence": {"filtered": true, "severity": "medium"},
            "jailbreak": {"filtered": true, "detected": true}});
        assert_eq!(categories(&results), ["violence (medium)", "jailbreak"]);
        let error = json!({"code": "content_filter", "message": "filtered",
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": results}});
        assert_eq!(
            prompt_refused(&error).as_deref(),
            Some("filtered (filtered: violence (medium), jailbreak)")
        );
        assert_eq!(
            prompt_refused(&json!({"code": "429", "message": "slow down"})),
            None
        );
    }
}
