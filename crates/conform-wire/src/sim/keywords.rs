//! How a simulated provider treats the JSON Schema keywords of a request's schema, the
//! four ways real providers do: OpenAI strict mode rejects what it does not support,
//! Gemini's `responseJsonSchema` ignores keywords outside its subset, an SDK or gateway
//! strips them (Anthropic's SDK moves them into the description, where the model may read
//! them as advice), and constrained decoding enforces them.
//!
//! A simulation answers `conform probe`'s requests from [`crate::probe::Catalogue`]: the
//! answer the prompt pushes for, unless the keyword is enforced (then the answer that
//! keeps it), or stripped into the description and the prompt does not push against it
//! (the model reads the advice and keeps it).

use serde_json::Value;

pub(crate) use conform_config::simulation::Handling;

/// The handling of `keyword` under `table`. `"*"` stands for every constraint keyword not
/// named (those `conform probe` probes, but `required` and `additionalProperties`, which
/// every structured-output mode needs); structure (`type`, `properties` …) is enforced
/// unless named.
pub(crate) fn handling(
    table: &std::collections::BTreeMap<String, Handling>,
    keyword: &str,
) -> Handling {
    let constraint = !matches!(keyword, "required" | "additionalProperties")
        && crate::probe::catalogue::of(keyword).is_some();
    table
        .get(keyword)
        .or_else(|| table.get("*").filter(|_| constraint))
        .copied()
        .unwrap_or(Handling::Enforce)
}

/// Every keyword used anywhere in `schema`, in document order, without repeats.
pub(crate) fn keywords_of(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    crate::probe::inventory::walk_keywords(schema, &mut |keyword, _| {
        if !found.iter().any(|k| k == keyword) {
            found.push(keyword.to_string());
        }
    });
    found
}
