//! `conform import otel`: chat inferences from OpenTelemetry GenAI telemetry (OTLP JSON).
//!
//! Two passes over the files, each a line at a time ([`otlp`]): the first keeps the
//! GenAI log records in the import's scratch index by the span they belong to, the second
//! reads the spans in input order, takes each chat span's records back ([`join`]), finds
//! its content wherever the instrumentation put it ([`content`]) and builds its case
//! ([`case`]); records no span claimed are last, in input order (a logs-only export).
//! Memory is one export line and SQLite's bounded page cache, whatever the size of the
//! export or the order spans and records come in.

pub mod case;
pub mod content;
pub mod join;
pub mod otlp;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::driver::{self, Read, Record, Source, Suite};
use super::{ImportError, Importer, Options, Summary, file_name};
use otlp::Span;

/// The GenAI operations that are a chat inference: a case each.
const CHAT_OPERATIONS: &[&str] = &["chat", "generate_content"];

/// What a span is to the import.
#[derive(Debug, PartialEq, Eq)]
enum Kind<'a> {
    Chat,
    /// A GenAI operation that is not a chat inference (embeddings, tools, agents).
    OtherGenAi(&'a str),
    /// An application span, an HTTP client span …
    NotGenAi,
}

fn kind(span: &Span) -> Kind<'_> {
    match span
        .attributes
        .get("gen_ai.operation.name")
        .and_then(Value::as_str)
    {
        Some(op) if CHAT_OPERATIONS.contains(&op) => Kind::Chat,
        Some(op) => Kind::OtherGenAi(op),
        None if span.attributes.keys().any(|k| k.starts_with("gen_ai.")) => {
            Kind::OtherGenAi("unnamed")
        }
        None => Kind::NotGenAi,
    }
}

/// Counts over the whole import, said once in the notes.
#[derive(Debug, Default)]
struct Tally {
    not_genai: u64,
    other: BTreeMap<String, u64>,
    declared: BTreeMap<String, u64>,
    placements: BTreeMap<&'static str, u64>,
}

/// Imports OTLP JSON exports of GenAI telemetry, spans and log records, as a suite.
pub fn import(inputs: &[PathBuf], opts: &Options) -> Result<Summary, ImportError> {
    let first = inputs.first().ok_or_else(|| ImportError::Option {
        option: "FILE",
        value: String::new(),
        message: "name at least one OTLP JSON file".into(),
    })?;
    let export = Export {
        inputs,
        first,
        tally: Tally::default(),
        order: 0,
    };
    driver::drive(export, opts)
}

struct Export<'a> {
    inputs: &'a [PathBuf],
    first: &'a Path,
    tally: Tally,
    /// Chat inferences read so far.
    order: u64,
}

impl Source for Export<'_> {
    fn main(&self) -> &Path {
        self.first
    }

    fn read(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError> {
        let max = importer.opts().max_line_bytes;
        let records = join::keep_records(importer, self.inputs, max)?;
        for path in self.inputs {
            self.spans(importer, path, records > 0)?;
        }
        let (orphan_spans, orphan_records) = self.unclaimed(importer)?;
        say(
            importer,
            &self.tally,
            self.first,
            orphan_spans,
            orphan_records,
        );
        Ok(())
    }

    fn suite(&mut self, _: &mut Importer<'_>) -> Result<Suite, ImportError> {
        let names: Vec<String> = self.inputs.iter().map(|p| file_name(p)).collect();
        Ok(Suite::described(
            format!(
                "# Imported by `conform import otel` from {}.\n",
                names.join(", ")
            ),
            format!(
                "Chat inferences imported from OpenTelemetry telemetry: {}",
                names.join(", ")
            ),
        ))
    }
}

impl Export<'_> {
    /// The spans of `path`, in input order: each chat span, with the log records kept
    /// for it (`joined`: there are some), is a request.
    fn spans(
        &mut self,
        importer: &mut Importer<'_>,
        path: &Path,
        joined: bool,
    ) -> Result<(), ImportError> {
        let name = file_name(path);
        let max = importer.opts().max_line_bytes;
        otlp::read(path, max, otlp::Want::Spans, |line, item| {
            let otlp::Item::Span(span) = item else {
                return Ok(());
            };
            match kind(&span) {
                Kind::NotGenAi => self.tally.not_genai += 1,
                Kind::OtherGenAi(op) => *self.tally.other.entry(op.to_string()).or_default() += 1,
                Kind::Chat => {
                    self.order += 1;
                    let at = format!("{name}:{line}");
                    let taken = if joined {
                        join::take(importer, &span.key, path, line)?
                    } else {
                        Vec::new()
                    };
                    let read = self.inference(importer, (path, line), &at, &span, &taken)?;
                    importer.offer(read)?;
                }
            }
            Ok(())
        })
    }

    /// Records whose spans are not in the input (a logs-only export): a details record
    /// carries the model and the content, so it is an inference on its own; older
    /// releases' records name no model and stay listed. Returns how many spans, and
    /// records, stayed unclaimed.
    fn unclaimed(&mut self, importer: &mut Importer<'_>) -> Result<(u64, u64), ImportError> {
        let (mut unclaimed_spans, mut unclaimed) = (0u64, 0u64);
        while let Some(key) = join::unclaimed(importer)? {
            let taken = join::take(importer, &key, self.first, 0)?;
            let Some(span) = span_of_records(&key, &taken) else {
                unclaimed_spans += 1;
                unclaimed += taken.len() as u64;
                continue;
            };
            let (file, line) = taken.iter().find_map(|r| r.origin).unwrap_or((0, 0));
            let path = self.inputs.get(file).map_or(self.first, |p| p.as_path());
            let at = format!("{}:{line}", file_name(path));
            match kind(&span) {
                Kind::Chat => {
                    self.order += 1;
                    let read = self.inference(importer, (path, line), &at, &span, &taken)?;
                    importer.offer(read)?;
                }
                Kind::OtherGenAi(op) => *self.tally.other.entry(op.to_string()).or_default() += 1,
                Kind::NotGenAi => {
                    unclaimed_spans += 1;
                    unclaimed += taken.len() as u64;
                }
            }
        }
        Ok((unclaimed_spans, unclaimed))
    }

    /// The request of chat `span` (read at `origin`, a file and line, shown as `at`),
    /// its content in the span or in `records`.
    fn inference<'o>(
        &mut self,
        importer: &mut Importer<'o>,
        (path, line): (&Path, usize),
        at: &str,
        span: &Span,
        records: &[otlp::Record],
    ) -> Result<Read<'o>, ImportError> {
        let place = format!("{at} span {}", span.span_id);
        let malformed = |e: super::chat::FieldError| ImportError::Malformed {
            path: path.to_path_buf(),
            line,
            field: format!("span {}: {}", span.span_id, e.field),
            message: e.message,
        };
        let content = match content::gather(span, records) {
            Ok(Some(c)) => c,
            Ok(None) => {
                let why = format!(
                    "`{}`: no message content was captured (set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT in the instrumented application)",
                    span.name
                );
                return Ok(Read::Skipped { at: place, why });
            }
            Err(e) if e.unsupported => {
                let why = format!("{}: {}", e.field, e.message);
                return Ok(Read::Skipped { at: place, why });
            }
            Err(e) => return Err(malformed(e)),
        };
        *self
            .tally
            .placements
            .entry(content.placement.describe())
            .or_default() += 1;
        let built = match case::build(span, content, &place, &importer.opts().redaction) {
            Ok(b) => b,
            Err(e) if e.unsupported => {
                let why = format!("{}: {}", e.field, e.message);
                return Ok(Read::Skipped { at: place, why });
            }
            Err(e) => return Err(malformed(e)),
        };
        for name in &built.declared {
            *self.tally.declared.entry(name.clone()).or_default() += 1;
        }
        if let Some(why) = built.no_reference {
            importer.note(&place, why);
        }
        Ok(Read::Request(Box::new(Record {
            order: self.order,
            id: format!("{:06}", self.order),
            case: built.case,
            schema: built.schema,
            dropped: built.dropped,
            redactor: built.redactor,
        })))
    }
}

/// The span a details record stands for when its span is not in the input: the record
/// carries the span's request and response attributes.
fn span_of_records(key: &str, records: &[otlp::Record]) -> Option<Span> {
    let details = records
        .iter()
        .find(|r| r.event.as_deref() == Some(content::DETAILS_EVENT))?;
    let attributes = details.attributes.clone();
    let model = attributes
        .get("gen_ai.request.model")
        .and_then(Value::as_str)
        .unwrap_or("?");
    Some(Span {
        key: key.to_string(),
        span_id: key.rsplit(':').next().unwrap_or(key).to_string(),
        name: format!("{} {model} (log record only)", content::DETAILS_EVENT),
        time: details.time,
        attributes,
    })
}

/// The notes every OpenTelemetry import carries, and its counts.
fn say(
    importer: &mut Importer<'_>,
    tally: &Tally,
    first: &Path,
    orphan_spans: u64,
    orphan_records: u64,
) {
    importer.caveat(
        "`tool_choice` and `parallel_tool_calls`: GenAI telemetry never records them, so the cases leave them unset (the provider's default, `auto`).",
    );
    importer.caveat(
        "The answer's JSON Schema: at most its type is recorded (`gen_ai.output.type`), so a request that asked for JSON is a `json_object` request, and schema.json accepts any JSON.",
    );
    importer.caveat(
        "Tool definitions: only instrumentation that records `gen_ai.tool.definitions` gives them; a tool that is called but not defined is declared by name with open parameters (`{\"type\": \"object\"}`), listed below.",
    );
    for (placement, n) in &tally.placements {
        importer.caveat(&format!("{n} inferences had their content in {placement}."));
    }
    let at = file_name(first);
    for (name, n) in &tally.declared {
        importer.note(
            &at,
            &format!("tool `{name}` is called in {n} requests but never defined: declared by name with open parameters"),
        );
    }
    if tally.not_genai > 0 {
        importer.note(
            &at,
            &format!(
                "{} spans are not GenAI operations (application spans): not requests, skipped",
                tally.not_genai
            ),
        );
    }
    for (op, n) in &tally.other {
        importer.note(
            &at,
            &format!("{n} `{op}` spans are not chat inferences: skipped"),
        );
    }
    if orphan_records > 0 {
        importer.note(
            &at,
            &format!("{orphan_records} GenAI log records of {orphan_spans} spans that are not in the input name no model (older releases' records): skipped; export the traces with the logs"),
        );
    }
}
