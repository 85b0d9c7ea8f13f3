//! The OpenAI Batch API's JSONL files: input lines `{"custom_id", "method", "url",
//! "body"}` become cases, and the output (and error) files' lines, joined by `custom_id`
//! (their order is not the input's), become the cases' recorded reference answers.
//!
//! The output files are indexed first (each `custom_id` with its line's byte offset,
//! not the line), then the input is streamed and each answer read back by seeking. The
//! index is the import's on-disk scratch index ([`super::scratch`], reached through the
//! [`Importer`]), so memory holds neither the bodies nor an entry per request.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::chat::{Api, FieldError, Request};
use super::driver::{self, Read, Record, Source, Suite};
use super::lines::{self, Lines};
use super::scratch::At;
use super::{ImportError, Importer, Options, Summary, file_name};

/// Imports `input` with the answers in `outputs` (the output file, and the error file
/// if there is one).
pub fn import(input: &Path, outputs: &[PathBuf], opts: &Options) -> Result<Summary, ImportError> {
    let batch = Batch {
        input,
        name: file_name(input),
        outputs,
        handles: Vec::new(),
    };
    driver::drive(batch, opts)
}

struct Batch<'a> {
    input: &'a Path,
    name: String,
    outputs: &'a [PathBuf],
    /// The output files, open to read back each answer the index points at.
    handles: Vec<File>,
}

impl Source for Batch<'_> {
    fn main(&self) -> &Path {
        self.input
    }

    fn read(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError> {
        self.index(importer)?;
        let mut lines = Lines::open(self.input, importer.opts().max_line_bytes)?;
        while let Some(line) = lines.next_line()? {
            if line.text.trim().is_empty() {
                continue;
            }
            let read = self.line(line.number, line.text, importer)?;
            importer.offer(read)?;
        }
        let n = importer.index_len();
        if n > 0 {
            importer.note(
                &self.name,
                &format!("{n} answers in the output files match no request of this input"),
            );
        }
        Ok(())
    }

    fn suite(&mut self, _: &mut Importer<'_>) -> Result<Suite, ImportError> {
        let input_name = &self.name;
        let header = format!(
            "# Imported by `conform import openai-batch` from {input_name}{}.\n# Each case is a logged request; its recorded answers are the reference a candidate is compared with.\n",
            if self.outputs.is_empty() {
                String::new()
            } else {
                format!(
                    " and {}",
                    self.outputs
                        .iter()
                        .map(|p| file_name(p))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        Ok(Suite::described(
            header,
            format!("Requests imported from the OpenAI Batch file {input_name}"),
        ))
    }
}

impl Batch<'_> {
    /// Indexes the output files' answers by `custom_id`, then opens them to read each
    /// back.
    fn index(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError> {
        let max = importer.opts().max_line_bytes;
        for (file, path) in self.outputs.iter().enumerate() {
            let mut lines = Lines::open(path, max)?;
            while let Some(line) = lines.next_line()? {
                if line.text.trim().is_empty() {
                    continue;
                }
                let value = parse(path, line.number, line.text)?;
                let id = custom_id(&value).map_err(|e| malformed(path, line.number, e))?;
                let at = At {
                    file,
                    line: line.number,
                    offset: line.offset,
                };
                if importer.index_put(&id, at)? {
                    let place = format!("{}:{}", file_name(path), line.number);
                    importer.note(
                        &place,
                        "a second answer to the same custom_id: the last one is kept",
                    );
                }
            }
        }
        self.handles = self
            .outputs
            .iter()
            .map(|p| {
                File::open(p).map_err(|source| ImportError::Read {
                    path: p.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    /// The request of input line `number`, with the answer the output files recorded.
    fn line<'o>(
        &mut self,
        number: usize,
        text: &str,
        importer: &mut Importer<'o>,
    ) -> Result<Read<'o>, ImportError> {
        let input = self.input;
        let place = format!("{}:{number}", self.name);
        let value = parse(input, number, text)?;
        let id = custom_id(&value).map_err(|e| malformed(input, number, e))?;
        let url = value.get("url").and_then(Value::as_str).ok_or_else(|| {
            malformed(
                input,
                number,
                field("url", "missing: the endpoint, e.g. /v1/chat/completions"),
            )
        })?;
        if let Some(method) = value.get("method").and_then(Value::as_str)
            && !method.eq_ignore_ascii_case("POST")
        {
            return Err(malformed(
                input,
                number,
                field("method", "a Batch request is POST"),
            ));
        }
        let Some(api) = Api::from_url(url) else {
            let why = format!(
                "`url` {url}: only /v1/chat/completions and /v1/responses requests become cases"
            );
            return skipped(importer, &id, place, why);
        };
        let mut body = value
            .get("body")
            .cloned()
            .ok_or_else(|| malformed(input, number, field("body", "missing: the request body")))?;
        let mut redactor = importer.opts().redaction.case();
        redactor.paths(&mut body);
        let request = match api.request(&body) {
            Ok(r) => r,
            Err(e) if e.unsupported => {
                let why = format!("body.{}: {}", e.field, e.message);
                return skipped(importer, &id, place, why);
            }
            Err(e) => {
                let e = FieldError {
                    field: format!("body.{}", e.field),
                    ..e
                };
                return Err(malformed(input, number, e));
            }
        };
        let reference = self.reference(api, &request, &id, &place, importer)?;
        let safe_id = redactor.text(&id).unwrap_or_else(|| id.clone());
        let description = format!("Imported from {place} (custom_id {safe_id})");
        let case = super::request_case(description, &request, reference);
        let slug = super::slug(&safe_id);
        let id = match slug.is_empty() {
            true => format!("{number:06}"),
            false => format!("{number:06}-{slug}"),
        };
        Ok(Read::Request(Box::new(Record {
            order: number as u64,
            id,
            case,
            schema: request.schema,
            dropped: request.dropped,
            redactor,
        })))
    }

    /// The recorded reference of the answer to `id`, if the output files hold one that
    /// can be kept; `place` is the request's.
    fn reference(
        &mut self,
        api: Api,
        request: &Request,
        id: &str,
        place: &str,
        importer: &mut Importer<'_>,
    ) -> Result<Option<Value>, ImportError> {
        let Some(at) = importer.index_take(id)? else {
            if !self.outputs.is_empty() {
                importer.note(
                    place,
                    "no line of the output files answers this custom_id: the case has no reference",
                );
            }
            return Ok(None);
        };
        let path = &self.outputs[at.file];
        let max = importer.opts().max_line_bytes;
        let text = lines::line_at(&mut self.handles[at.file], path, at.offset, max)?;
        let out = parse(path, at.line, &text)?;
        let out_place = format!("{}:{}", file_name(path), at.line);
        match answer_of(&out, api) {
            Ok(Some((served, created, answers))) => {
                let model = request
                    .model
                    .clone()
                    .or_else(|| served.clone())
                    .unwrap_or_default();
                let reference = super::reference(
                    &model,
                    served.as_deref(),
                    created,
                    out_place.clone(),
                    answers,
                );
                if reference.is_none() {
                    importer.note(
                        &out_place,
                        "the response has no `created` time: its answer is not recorded",
                    );
                }
                Ok(reference)
            }
            Ok(None) => {
                importer.note(
                    &out_place,
                    "no answer recorded (the request failed): the case has no reference",
                );
                Ok(None)
            }
            Err(e) if e.unsupported => {
                importer.note(&out_place, &format!("{}: {}", e.field, e.message));
                Ok(None)
            }
            Err(e) => Err(malformed(path, at.line, e)),
        }
    }
}

/// A request skipped: its answer, if the output files hold one, is no answer that
/// matches no request.
fn skipped<'o>(
    importer: &mut Importer<'_>,
    id: &str,
    at: String,
    why: String,
) -> Result<Read<'o>, ImportError> {
    importer.index_remove(id)?;
    Ok(Read::Skipped { at, why })
}

/// The served model, the `created` time and the answers of an output line; `None` when
/// the request failed (an `error`, or a status other than 2xx).
#[allow(clippy::type_complexity)]
fn answer_of(
    out: &Value,
    api: Api,
) -> Result<Option<(Option<String>, Option<i64>, Vec<Value>)>, FieldError> {
    if out.get("error").is_some_and(|e| !e.is_null()) {
        return Ok(None);
    }
    let Some(response) = out.get("response").filter(|r| !r.is_null()) else {
        return Ok(None);
    };
    let status = response
        .get("status_code")
        .and_then(Value::as_u64)
        .unwrap_or(200);
    if !(200..300).contains(&status) {
        return Ok(None);
    }
    let body = response
        .get("body")
        .ok_or_else(|| field("response.body", "missing"))?;
    if body.get("error").is_some_and(|e| !e.is_null()) {
        return Ok(None);
    }
    let answers = api.answers(body).map_err(|e| FieldError {
        field: format!("response.body.{}", e.field),
        ..e
    })?;
    let served = body.get("model").and_then(Value::as_str).map(String::from);
    let created = body
        .get("created")
        .or_else(|| body.get("created_at"))
        .and_then(Value::as_i64);
    Ok(Some((served, created, answers)))
}

fn custom_id(value: &Value) -> Result<String, FieldError> {
    match value.get("custom_id") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(field("custom_id", "must be a non-empty string")),
        None => Err(field("custom_id", "missing: every Batch line has one")),
    }
}

fn field(name: &str, message: &str) -> FieldError {
    FieldError {
        field: name.into(),
        message: message.into(),
        unsupported: false,
    }
}

fn malformed(path: &Path, line: usize, e: FieldError) -> ImportError {
    ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: e.field,
        message: e.message,
    }
}

/// One line as JSON; a syntax error names the line and the column, never the text.
pub(crate) fn parse(path: &Path, line: usize, text: &str) -> Result<Value, ImportError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: "(line)".into(),
        message: format!(
            "not JSON at column {}: {}",
            e.column(),
            conform_config::diagnostic::json_error_message(&e)
        ),
    })?;
    if !value.is_object() {
        return Err(ImportError::Malformed {
            path: path.to_path_buf(),
            line,
            field: "(line)".into(),
            message: "must be a JSON object".into(),
        });
    }
    Ok(value)
}
