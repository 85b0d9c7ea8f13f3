//! A plain JSONL of logged requests: one request body per line (Chat Completions'
//! `messages` or Responses' `input`), or `{"request": …, "response": …}` with the answer
//! that came back, which becomes the case's recorded reference.

use std::path::Path;

use serde_json::Value;

use super::chat::{Api, FieldError, Request};
use super::driver::{self, Read, Record, Source, Suite};
use super::lines::Lines;
use super::openai_batch::parse;
use super::{ImportError, Importer, Options, Summary, file_name};

/// Imports a file of request bodies, one per line, as a suite.
pub fn import(input: &Path, opts: &Options) -> Result<Summary, ImportError> {
    let name = file_name(input);
    driver::drive(Jsonl { input, name }, opts)
}

struct Jsonl<'a> {
    input: &'a Path,
    name: String,
}

impl Source for Jsonl<'_> {
    fn main(&self) -> &Path {
        self.input
    }

    fn read(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError> {
        let mut lines = Lines::open(self.input, importer.opts().max_line_bytes)?;
        while let Some(line) = lines.next_line()? {
            if line.text.trim().is_empty() {
                continue;
            }
            let read = self.line(line.number, line.text, importer)?;
            importer.offer(read)?;
        }
        Ok(())
    }

    fn suite(&mut self, _: &mut Importer<'_>) -> Result<Suite, ImportError> {
        let name = &self.name;
        Ok(Suite::described(
            format!("# Imported by `conform import jsonl` from {name}.\n"),
            format!("Requests imported from {name}"),
        ))
    }
}

impl Jsonl<'_> {
    /// The request of line `number`, with its recorded answer when the line has one.
    fn line<'o>(
        &self,
        number: usize,
        text: &str,
        importer: &mut Importer<'o>,
    ) -> Result<Read<'o>, ImportError> {
        let input = self.input;
        let place = format!("{}:{number}", self.name);
        let value = parse(input, number, text)?;
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
        let mut redactor = importer.opts().redaction.case();
        redactor.paths(&mut body);
        let request = match api.request(&body) {
            Ok(r) => r,
            Err(e) if e.unsupported => {
                let why = format!("{prefix}{}: {}", e.field, e.message);
                return Ok(Read::Skipped { at: place, why });
            }
            Err(e) => return Err(malformed(input, number, prefix, e)),
        };
        let reference = match response {
            Some(response) => self.reference(api, &request, &response, number, importer)?,
            None => None,
        };
        let case = super::request_case(format!("Imported from {place}"), &request, reference);
        Ok(Read::Request(Box::new(Record {
            order: number as u64,
            id: format!("{number:06}"),
            case,
            schema: request.schema,
            dropped: request.dropped,
            redactor,
        })))
    }

    /// The recorded reference of line `number`'s `response`, if it can be kept.
    fn reference(
        &self,
        api: Api,
        request: &Request,
        response: &Value,
        number: usize,
        importer: &mut Importer<'_>,
    ) -> Result<Option<Value>, ImportError> {
        let place = format!("{}:{number}", self.name);
        match api.answers(response) {
            Ok(answers) => {
                let served = response.get("model").and_then(Value::as_str);
                let model = request.model.as_deref().or(served).unwrap_or_default();
                let created = response
                    .get("created")
                    .or_else(|| response.get("created_at"))
                    .and_then(Value::as_i64);
                let reference = super::reference(model, served, created, place.clone(), answers);
                if reference.is_none() {
                    importer.note(
                        &place,
                        "the response has no `created` time: its answer is not recorded",
                    );
                }
                Ok(reference)
            }
            Err(e) if e.unsupported => {
                importer.note(&place, &format!("response.{}: {}", e.field, e.message));
                Ok(None)
            }
            Err(e) => Err(malformed(self.input, number, "response.", e)),
        }
    }
}

fn malformed(path: &Path, line: usize, prefix: &str, e: FieldError) -> ImportError {
    ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: format!("{prefix}{}", e.field),
        message: e.message,
    }
}
