//! A plain JSONL of logged requests: one request body per line (Chat Completions'
//! `messages` or Responses' `input`), or `{"request": …, "response": …}` with the answer
//! that came back, which becomes the case's recorded reference.

use std::path::Path;

use serde_json::Value;

use super::chat::{Api, FieldError};
use super::lines::Lines;
use super::openai_batch::parse;
use super::{ImportError, Importer, Item, Options, Summary, file_name};

pub fn import(input: &Path, opts: &Options) -> Result<Summary, ImportError> {
    let mut importer = Importer::new(opts, input)?;
    let name = file_name(input);
    let mut lines = Lines::open(input, opts.max_line_bytes)?;
    while let Some(line) = lines.next_line()? {
        if line.text.trim().is_empty() {
            continue;
        }
        importer.read();
        let number = line.number;
        let place = format!("{name}:{number}");
        let value = parse(input, number, line.text)?;
        let paired = value.get("request").is_some();
        let (mut body, response, prefix) = if paired {
            (
                value.get("request").cloned().unwrap_or(Value::Null),
                value.get("response").filter(|r| !r.is_null()).cloned(),
                "request.",
            )
        } else {
            (value, None, "")
        };
        let api = Api::of_request(&body).ok_or_else(|| ImportError::Malformed {
            path: input.to_path_buf(),
            line: number,
            field: format!("{prefix}messages"),
            message: "missing: a chat request has `messages` (or, for the Responses API, `input`)"
                .into(),
        })?;
        let mut redactor = opts.redaction.case();
        redactor.paths(&mut body);
        let request = match api.request(&body) {
            Ok(r) => r,
            Err(e) if e.unsupported => {
                importer.skip(&place, &format!("{prefix}{}: {}", e.field, e.message));
                continue;
            }
            Err(e) => return Err(malformed(input, number, prefix, e)),
        };
        importer.dropped(&request.dropped);
        let mut reference = None;
        if let Some(response) = response {
            match api.answers(&response) {
                Ok(answers) => {
                    let served = response.get("model").and_then(Value::as_str);
                    let model = request.model.as_deref().or(served).unwrap_or_default();
                    let created = response
                        .get("created")
                        .or_else(|| response.get("created_at"))
                        .and_then(Value::as_i64);
                    reference = super::reference(model, served, created, place.clone(), answers);
                    if reference.is_none() {
                        importer.note(
                            &place,
                            "the response has no `created` time: its answer is not recorded",
                        );
                    }
                }
                Err(e) if e.unsupported => {
                    importer.note(&place, &format!("response.{}: {}", e.field, e.message))
                }
                Err(e) => return Err(malformed(input, number, "response.", e)),
            }
        }
        let case = super::request_case(format!("Imported from {place}"), &request, reference);
        let id = format!("{number:06}");
        let item = Item::redacted(
            number as u64,
            id,
            case,
            request.schema.as_ref(),
            &mut redactor,
        );
        importer.redacted(redactor.replaced);
        importer.add(item)?;
    }
    let mut suite = toml::Table::new();
    suite.insert(
        "description".into(),
        toml::Value::String(format!("Requests imported from {name}")),
    );
    let header = format!("# Imported by `conform import jsonl` from {name}.\n");
    importer.finish(&header, suite, None)
}

fn malformed(path: &Path, line: usize, prefix: &str, e: FieldError) -> ImportError {
    ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: format!("{prefix}{}", e.field),
        message: e.message,
    }
}
