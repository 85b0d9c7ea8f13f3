//! Spans and log records joined by trace and span id. The records come first or last,
//! in the same file or another, so the first pass keeps every GenAI record in the
//! import's scratch index (on disk) under its span's key, and the second takes a span's
//! records back when it reads the span.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::otlp::{self, Record};
use crate::{ImportError, Importer};

/// The first pass: keeps every GenAI log record of `inputs`; how many.
pub fn keep_records(
    importer: &mut Importer<'_>,
    inputs: &[PathBuf],
    max_line_bytes: usize,
) -> Result<u64, ImportError> {
    let mut seq = 0u64;
    for (file, path) in inputs.iter().enumerate() {
        otlp::read(path, max_line_bytes, otlp::Want::Records, |line, item| {
            let otlp::Item::Record(r) = item else {
                return Ok(());
            };
            let genai = r.event.as_deref().is_some_and(|e| e.starts_with("gen_ai."));
            if !genai || r.key.is_empty() {
                return Ok(());
            }
            seq += 1;
            let kept = json!({"event": r.event, "attributes": r.attributes, "body": r.body,
                "time": r.time, "file": file, "line": line});
            importer.event_put(&r.key, seq, &kept.to_string())
        })?;
    }
    Ok(seq)
}

/// A span whose records are still kept: one no span of the input claimed.
pub fn unclaimed(importer: &mut Importer<'_>) -> Result<Option<String>, ImportError> {
    importer.events_any()
}

/// The records kept for the span `key` (read at `path:line`), in input order.
pub fn take(
    importer: &mut Importer<'_>,
    key: &str,
    path: &Path,
    line: usize,
) -> Result<Vec<Record>, ImportError> {
    importer
        .events_take(key)?
        .iter()
        .map(|text| {
            let v: Value = serde_json::from_str(text).map_err(|e| ImportError::Malformed {
                path: path.to_path_buf(),
                line,
                field: "(log record)".into(),
                message: format!("the kept record no longer parses: {e}"),
            })?;
            Ok(Record {
                key: key.to_string(),
                event: v.get("event").and_then(Value::as_str).map(String::from),
                attributes: v
                    .get("attributes")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_else(Map::new),
                body: v.get("body").cloned().unwrap_or(Value::Null),
                time: v.get("time").and_then(Value::as_i64),
                origin: match (v.get("file"), v.get("line")) {
                    (Some(f), Some(l)) => f
                        .as_u64()
                        .zip(l.as_u64())
                        .map(|(f, l)| (f as usize, l as usize)),
                    _ => None,
                },
            })
        })
        .collect()
}
