//! OTLP JSON as the OTLP/HTTP JSON encoding writes it: an `ExportTraceServiceRequest` or
//! `ExportLogsServiceRequest` per line (the OpenTelemetry Collector's file exporter, the
//! SDKs' file exporters) or one per file (a saved HTTP body, pretty-printed or not).
//!
//! Each line is read whole (at most `--max-line-bytes`) and handed on span by span and
//! record by record, so memory is one export batch, whatever the file's size. Attribute
//! values (`AnyValue`: `stringValue`, `intValue` as a string or number, `kvlistValue` …)
//! become plain JSON.

use std::path::Path;

use serde_json::{Map, Value};

use crate::ImportError;
use crate::lines::Lines;

/// A span: where it is, what it is, and its attributes as plain JSON.
#[derive(Debug, Clone)]
pub struct Span {
    /// `TRACEID:SPANID`, lower-case hex: what its log records name too.
    pub key: String,
    /// Its span id, lower-case hex.
    pub span_id: String,
    /// The span's name.
    pub name: String,
    /// When it ended (else started), in Unix seconds.
    pub time: Option<i64>,
    /// Its attributes, as plain JSON.
    pub attributes: Map<String, Value>,
}

/// A log record, joined to its span by [`Record::key`].
#[derive(Debug, Clone)]
pub struct Record {
    /// `TRACEID:SPANID` of the span it belongs to.
    pub key: String,
    /// `eventName`, or the older `event.name` attribute.
    pub event: Option<String>,
    /// Its attributes, as plain JSON.
    pub attributes: Map<String, Value>,
    /// Its body, as plain JSON.
    pub body: Value,
    /// When it happened (else was observed), in Unix seconds.
    pub time: Option<i64>,
    /// Which input file and line it came from, once [`super::join`] has kept it.
    pub origin: Option<(usize, usize)>,
}

/// What one line (or file) held.
#[derive(Debug)]
pub enum Item {
    /// A span.
    Span(Span),
    /// A log record.
    Record(Record),
}

/// Which signal a pass reads: a line that cannot hold it is not parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Spans only.
    Spans,
    /// Log records only.
    Records,
}

impl Want {
    fn marker(self) -> &'static str {
        match self {
            Want::Spans => "\"resourceSpans\"",
            Want::Records => "\"resourceLogs\"",
        }
    }
}

/// Reads `path`, handing `each` every span or log record (as `want` says) with its line
/// number. Every line is checked to be an export on either pass.
pub fn read(
    path: &Path,
    max_line_bytes: usize,
    want: Want,
    mut each: impl FnMut(usize, Item) -> Result<(), ImportError>,
) -> Result<(), ImportError> {
    let mut lines = Lines::open(path, max_line_bytes)?;
    let mut first = true;
    while let Some(line) = lines.next_line()? {
        if line.text.trim().is_empty() {
            continue;
        }
        let number = line.number;
        // A trace export has no `"resourceLogs"` key, and the other way round: a line
        // without the key is not parsed on the pass that wants it. Between the two passes
        // every line is parsed, so a malformed one is an error either way.
        let other = match want {
            Want::Spans => Want::Records,
            Want::Records => Want::Spans,
        };
        let skip = match want {
            Want::Records => !line.text.contains(want.marker()),
            // The records pass parsed the lines that hold logs.
            Want::Spans => !line.text.contains(want.marker()) && line.text.contains(other.marker()),
        };
        if skip && !first {
            first = false;
            continue;
        }
        match serde_json::from_str::<Value>(line.text) {
            Ok(value) => export(path, number, &value, want, &mut each)?,
            // A line that starts a document but does not end it: one pretty-printed
            // export in the whole file.
            Err(e) if first && e.is_eof() => return whole(path, max_line_bytes, want, each),
            Err(e) => {
                return Err(ImportError::Malformed {
                    path: path.to_path_buf(),
                    line: number,
                    field: "(line)".into(),
                    message: format!(
                        "not JSON ({}): one OTLP JSON export per line",
                        crate::chat::plain(&e)
                    ),
                });
            }
        }
        first = false;
    }
    Ok(())
}

/// A file holding one export, read whole: it may not be larger than one line may.
fn whole(
    path: &Path,
    max: usize,
    want: Want,
    mut each: impl FnMut(usize, Item) -> Result<(), ImportError>,
) -> Result<(), ImportError> {
    let io = |source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > max as u64 {
        return Err(ImportError::LineTooLong {
            path: path.to_path_buf(),
            line: 1,
            max,
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| ImportError::Malformed {
        path: path.to_path_buf(),
        line: e.line(),
        field: "(file)".into(),
        message: format!(
            "not JSON ({}): an OTLP JSON export, or one per line",
            crate::chat::plain(&e)
        ),
    })?;
    export(path, 1, &value, want, &mut each)
}

fn malformed(path: &Path, line: usize, field: &str, message: &str) -> ImportError {
    ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: field.to_string(),
        message: message.to_string(),
    }
}

/// One `ExportTraceServiceRequest` and/or `ExportLogsServiceRequest`.
fn export(
    path: &Path,
    line: usize,
    value: &Value,
    want: Want,
    each: &mut impl FnMut(usize, Item) -> Result<(), ImportError>,
) -> Result<(), ImportError> {
    let Some(obj) = value.as_object() else {
        return Err(malformed(path, line, "(line)", "must be a JSON object"));
    };
    if !obj.contains_key("resourceSpans") && !obj.contains_key("resourceLogs") {
        return Err(malformed(
            path,
            line,
            "resourceSpans",
            "missing: not an OTLP JSON export (ExportTraceServiceRequest or ExportLogsServiceRequest); metrics are not read",
        ));
    }
    let spans = if want == Want::Spans {
        list(obj.get("resourceSpans"))
    } else {
        &[]
    };
    let logs = if want == Want::Records {
        list(obj.get("resourceLogs"))
    } else {
        &[]
    };
    for (r, resource) in spans.iter().enumerate() {
        for (s, scope) in list(resource.get("scopeSpans")).iter().enumerate() {
            for (i, span) in list(scope.get("spans")).iter().enumerate() {
                let at = format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]");
                let span = read_span(span)
                    .map_err(|(f, m)| malformed(path, line, &format!("{at}.{f}"), m))?;
                each(line, Item::Span(span))?;
            }
        }
    }
    for (r, resource) in logs.iter().enumerate() {
        for (s, scope) in list(resource.get("scopeLogs")).iter().enumerate() {
            for (i, record) in list(scope.get("logRecords")).iter().enumerate() {
                let at = format!("resourceLogs[{r}].scopeLogs[{s}].logRecords[{i}]");
                let record = read_record(record)
                    .map_err(|(f, m)| malformed(path, line, &format!("{at}.{f}"), m))?;
                each(line, Item::Record(record))?;
            }
        }
    }
    Ok(())
}

fn list(value: Option<&Value>) -> &[Value] {
    value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

type Field = (&'static str, &'static str);

fn id(value: Option<&Value>, field: &'static str) -> Result<String, Field> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.to_ascii_lowercase()),
        _ => Err((
            field,
            "missing: spans and log records are joined by trace and span id",
        )),
    }
}

fn read_span(span: &Value) -> Result<Span, Field> {
    let trace = id(span.get("traceId"), "traceId")?;
    let span_id = id(span.get("spanId"), "spanId")?;
    let time = nanos(span.get("endTimeUnixNano")).or_else(|| nanos(span.get("startTimeUnixNano")));
    Ok(Span {
        key: format!("{trace}:{span_id}"),
        span_id,
        name: span
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        time: time.map(|n| (n / 1_000_000_000) as i64),
        attributes: attributes(span.get("attributes")).map_err(|m| ("attributes", m))?,
    })
}

fn read_record(record: &Value) -> Result<Record, Field> {
    let attributes = attributes(record.get("attributes")).map_err(|m| ("attributes", m))?;
    // A record outside any span cannot be joined: it keeps an empty key, which no span
    // has.
    let key = match (record.get("traceId"), record.get("spanId")) {
        (Some(Value::String(t)), Some(Value::String(s))) if !t.is_empty() && !s.is_empty() => {
            format!("{}:{}", t.to_ascii_lowercase(), s.to_ascii_lowercase())
        }
        _ => String::new(),
    };
    let event = record
        .get("eventName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| attributes.get("event.name").and_then(Value::as_str))
        .map(String::from);
    let time = nanos(record.get("timeUnixNano"))
        .filter(|n| *n > 0)
        .or_else(|| nanos(record.get("observedTimeUnixNano")));
    Ok(Record {
        key,
        event,
        body: record.get("body").map(any).unwrap_or(Value::Null),
        attributes,
        time: time.map(|n| (n / 1_000_000_000) as i64),
        origin: None,
    })
}

/// OTLP int64 fields are strings in JSON (numbers are accepted too).
fn nanos(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// `[{"key", "value": AnyValue}]` as a JSON object.
pub fn attributes(value: Option<&Value>) -> Result<Map<String, Value>, &'static str> {
    let mut out = Map::new();
    for kv in list(value) {
        let key = kv
            .get("key")
            .and_then(Value::as_str)
            .ok_or("an attribute needs a `key`")?;
        out.insert(
            key.to_string(),
            kv.get("value").map(any).unwrap_or(Value::Null),
        );
    }
    Ok(out)
}

/// An `AnyValue` as plain JSON: an empty one (`{}`) is null.
pub fn any(value: &Value) -> Value {
    let Some(obj) = value.as_object() else {
        return value.clone();
    };
    let Some((kind, inner)) = obj.iter().next() else {
        return Value::Null;
    };
    match kind.as_str() {
        "stringValue" | "boolValue" | "doubleValue" | "bytesValue" => inner.clone(),
        "intValue" => match inner {
            Value::String(s) => s
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or_else(|_| inner.clone()),
            other => other.clone(),
        },
        "arrayValue" => Value::Array(list(inner.get("values")).iter().map(any).collect()),
        "kvlistValue" => Value::Object(attributes(inner.get("values")).unwrap_or_default()),
        _ => value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn any_values_become_plain_json() {
        let v = json!({"kvlistValue": {"values": [
            {"key": "n", "value": {"intValue": "42"}},
            {"key": "xs", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"boolValue": true}, {"doubleValue": 0.5}]}}},
            {"key": "empty", "value": {}}
        ]}});
        assert_eq!(
            any(&v),
            json!({"n": 42, "xs": ["a", true, 0.5], "empty": null})
        );
    }

    #[test]
    fn a_line_that_is_not_an_export_names_its_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(
            &path,
            "{\"resourceSpans\": []}\n{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{\"spanId\": \"ab\"}]}]}]}\n",
        )
        .unwrap();
        let e = read(&path, 1 << 20, Want::Spans, |_, _| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.jsonl:2: resourceSpans[0].scopeSpans[0].spans[0].traceId"),
            "{e}"
        );
        std::fs::write(&path, "{\"resourceMetrics\": []}\n").unwrap();
        let e = read(&path, 1 << 20, Want::Spans, |_, _| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.jsonl:1: resourceSpans: missing"), "{e}");
    }

    #[test]
    fn a_pretty_printed_export_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        let export = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [
            {"traceId": "AB", "spanId": "CD", "eventName": "gen_ai.choice", "body": {"stringValue": "hi"}}
        ]}]}]});
        std::fs::write(&path, serde_json::to_string_pretty(&export).unwrap()).unwrap();
        let mut seen = Vec::new();
        read(&path, 1 << 20, Want::Records, |line, item| {
            seen.push((line, item));
            Ok(())
        })
        .unwrap();
        match &seen[..] {
            [(1, Item::Record(r))] => {
                assert_eq!(r.key, "ab:cd");
                assert_eq!(r.event.as_deref(), Some("gen_ai.choice"));
                assert_eq!(r.body, json!("hi"));
            }
            other => panic!("{other:?}"),
        }
    }
}
