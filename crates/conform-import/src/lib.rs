//! `conform import`: a suite from traffic a team already logs, with no code.
//!
//! One file per source format ([`openai_batch`], [`jsonl`], [`promptfoo`], [`otel`],
//! [`litellm`]) is a [`driver::Source`] that reads its input into [`driver::Record`]s, one
//! per request; [`driver::drive`] and the [`Importer`] do what every format shares:
//! redaction ([`redact`]) of each record as a whole (a format may redact the raw
//! request's paths first, through the record's redactor), then deduplication by canonical request fingerprint (RFC 8785, [`conform_config::digest`]), the
//! reproducible sample ([`sample`]) or the size cap, and the suite writer ([`writer`]),
//! which writes one case file at a time into a temporary folder renamed into place at the
//! end. Inputs are read line by line ([`lines`]) with a cap per line, and what grows with
//! the input (the fingerprints seen, the Batch output's index, the distinct schemas) is
//! kept on disk in [`scratch`], a SQLite file in the staging folder with a bounded page
//! cache, so memory stays flat whatever the number of requests.
//!
//! Recorded answers are written in the agreed `reference` format of a case (the model
//! asked for, the served model, when, from which line, and one answer per choice).

#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod chat;
pub mod driver;
pub mod jsonl;
pub mod lines;
pub mod litellm;
pub mod openai_batch;
pub mod otel;
pub mod promptfoo;
pub mod redact;
pub mod sample;
pub mod scratch;
pub mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

pub use redact::Rules as Redaction;

/// Why an import stopped. Nothing was written when it did.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// An input could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The input.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The suite could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A line is longer than `--max-line-bytes`.
    #[error(
        "{path}:{line}: the line is longer than {max} bytes: raise --max-line-bytes if it is a real request"
    )]
    LineTooLong {
        /// The input.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The cap, in bytes.
        max: usize,
    },
    /// A line does not hold what its format promises.
    #[error("{path}:{line}: {field}: {message}")]
    Malformed {
        /// The input.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The field, as a path into the line.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The input as a whole is not the format asked for.
    #[error("{path}: {message}")]
    Format {
        /// The input.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The suite exists and `--force` was not given.
    #[error("{path} already exists: pass --force to replace it, or choose another --suite name")]
    Exists {
        /// The suite folder.
        path: PathBuf,
    },
    /// The suite name would not make a folder name.
    #[error(
        "`{0}` is not a suite name: use letters, digits, `-`, `_` and `.` (it becomes fixtures/NAME)"
    )]
    SuiteName(String),
    /// More distinct requests than `--max-cases`.
    #[error(
        "{path}: more than {max} distinct requests: take a reproducible subset with --sample N --seed S, or raise --max-cases"
    )]
    TooMany {
        /// The input.
        path: PathBuf,
        /// The cap.
        max: usize,
    },
    /// Every request was skipped.
    #[error("{path}: no request could be imported ({skipped} skipped): nothing was written")]
    Empty {
        /// The input.
        path: PathBuf,
        /// Requests skipped.
        skipped: u64,
    },
    /// A command-line option's value cannot be used.
    #[error("{option} `{value}`: {message}")]
    Option {
        /// The option, as typed.
        option: &'static str,
        /// Its value.
        value: String,
        /// Why it cannot be used.
        message: String,
    },
    /// The on-disk index the import keeps could not be used.
    #[error("the import's scratch index {path}: {source}")]
    Scratch {
        /// The index file.
        path: PathBuf,
        /// What went wrong.
        source: scratch::ScratchError,
    },
}

/// What every import is asked.
#[derive(Debug)]
pub struct Options {
    /// The suite's name: it is written to `fixtures/NAME`.
    pub suite: String,
    /// The project's `fixtures/` folder.
    pub fixtures: PathBuf,
    /// Replace an existing suite of that name.
    pub force: bool,
    /// `(N, seed)`: keep a reproducible uniform sample of N distinct requests.
    pub sample: Option<(usize, u64)>,
    /// At most this many cases; more is an error (or use `sample`).
    pub max_cases: usize,
    /// At most this many bytes per input line.
    pub max_line_bytes: usize,
    /// What is removed from the requests before they are written.
    pub redaction: Redaction,
}

/// Default of `--max-cases`.
pub const DEFAULT_MAX_CASES: usize = 100_000;
/// Default of `--max-line-bytes`: 8 MiB, far above a text request, far below memory.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// What an import did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The suite folder written.
    pub dir: PathBuf,
    /// Requests read (lines, or tests).
    pub read: u64,
    /// Case files written.
    pub written: u64,
    /// Requests left out because an earlier one sent the same.
    pub duplicates: u64,
    /// Duplicates whose recorded answers joined the first one's as repeats.
    pub repeats_merged: u64,
    /// Distinct requests left out by `--sample`.
    pub not_sampled: u64,
    /// Requests that could not be carried over (listed in the notes).
    pub skipped: u64,
    /// Cases written with recorded reference answers.
    pub with_reference: u64,
    /// Values replaced by placeholders.
    pub redacted: u64,
    /// What `schema.json` holds, in words.
    pub schema: String,
    /// What could not be carried over, each `FILE:LINE: what` (at most [`MAX_NOTES`]).
    pub notes: Vec<String>,
    /// How many notes there were in all.
    pub notes_total: u64,
}

/// What `conform import` reads, by source format.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// A Batch input file, and its output and error files.
    OpenaiBatch {
        /// The Batch input file.
        input: &'a Path,
        /// Its output and error files, where the recorded answers are.
        outputs: &'a [PathBuf],
    },
    /// One JSON request body per line.
    Jsonl(&'a Path),
    /// A promptfoo configuration's tests.
    Promptfoo(&'a Path),
    /// OTLP JSON exports of OpenTelemetry GenAI telemetry (spans and log records).
    Otel(&'a [PathBuf]),
    /// LiteLLM's standard logging payloads, one per line.
    Litellm(&'a Path),
}

impl Input<'_> {
    /// The format's name, as the command spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Input::OpenaiBatch { .. } => "openai-batch",
            Input::Jsonl(_) => "jsonl",
            Input::Promptfoo(_) => "promptfoo",
            Input::Otel(_) => "otel",
            Input::Litellm(_) => "litellm",
        }
    }

    /// Imports the input as `opts` say; nothing is written when it fails.
    pub fn import(&self, opts: &Options) -> Result<Report, ImportError> {
        let summary = match *self {
            Input::OpenaiBatch { input, outputs } => openai_batch::import(input, outputs, opts),
            Input::Jsonl(input) => jsonl::import(input, opts),
            Input::Promptfoo(input) => promptfoo::import(input, opts),
            Input::Otel(inputs) => otel::import(inputs, opts),
            Input::Litellm(input) => litellm::import(input, opts),
        }?;
        Ok(Report {
            kind: self.kind(),
            summary,
        })
    }
}

/// The summary a person reads after an import of `kind` (`openai-batch`, `jsonl` …):
/// the counts, the schema, the notes (the first 20) and what to do next.
pub struct Report {
    /// The source format, as the command names it.
    pub kind: &'static str,
    /// What the import did.
    pub summary: Summary,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, s) = (self.kind, &self.summary);
        writeln!(
            f,
            "imported {} ({kind}): {} cases from {} requests ({} with recorded answers); {} duplicates dropped ({} answers kept as repeats), {} left out by --sample, {} skipped; {} values redacted",
            s.dir.display(),
            s.written,
            s.read,
            s.with_reference,
            s.duplicates,
            s.repeats_merged,
            s.not_sampled,
            s.skipped,
            s.redacted,
        )?;
        writeln!(f, "schema.json: {}", s.schema)?;
        if s.notes_total > 0 {
            writeln!(
                f,
                "not carried over ({}; all of them in IMPORT_NOTES.md):",
                s.notes_total
            )?;
            for n in s.notes.iter().take(20) {
                writeln!(f, "  {n}")?;
            }
            if s.notes_total > 20 {
                writeln!(f, "  … and {} more", s.notes_total - 20)?;
            }
        }
        writeln!(
            f,
            "next: `conform check` validates it offline; `conform run PROVIDER --suite {}` runs it",
            s.dir
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        )
    }
}

/// The notes kept in memory and written to `IMPORT_NOTES.md`; beyond this they are
/// counted.
pub const MAX_NOTES: usize = 500;

/// One case, ready to be written.
#[derive(Debug, Clone)]
pub struct Item {
    /// Its place in the input, so a sample is written in input order.
    pub order: u64,
    /// The file stem.
    pub id: String,
    /// The case file's content.
    pub case: Value,
    /// The JSON Schema its request asked the answer to follow, if any (redacted).
    pub schema: Option<Value>,
    /// The canonical fingerprint of what is sent.
    pub fingerprint: [u8; 32],
    /// The case records the answers the source logged.
    pub has_reference: bool,
}

impl Item {
    /// Item `id`, at `order` in the input: `case` and the `schema` its request asked
    /// for, both redacted through `redactor` first, so that nothing unredacted is
    /// fingerprinted or written.
    pub fn redacted(
        order: u64,
        id: String,
        mut case: Value,
        mut schema: Option<Value>,
        redactor: &mut redact::Redactor<'_>,
    ) -> Item {
        redactor.value(&mut case);
        if let Some(s) = schema.as_mut() {
            redactor.value(s);
        }
        let fingerprint = fingerprint(&case, schema.as_ref());
        let has_reference = case.get("reference").is_some();
        Item {
            order,
            id,
            case,
            schema,
            fingerprint,
            has_reference,
        }
    }
}

/// Shared by every format: dedup, sample or cap, the writer, the notes.
pub struct Importer<'o> {
    opts: &'o Options,
    source: PathBuf,
    /// Every distinct request so far (for one written with recorded answers, with its
    /// case id, so that the answers of a repeated request join it as further repeats),
    /// the distinct schemas, and a Batch import's output index. Declared before `writer`
    /// so that it is closed before a failed import's staging folder, which holds its
    /// file, is removed.
    scratch: scratch::Scratch,
    writer: writer::SuiteWriter,
    reservoir: Option<sample::Reservoir<Item>>,
    schemas: Schemas,
    summary: Summary,
    /// Fields of the requests not carried over, with how many requests had each.
    dropped: BTreeMap<String, u64>,
    /// What the source format never records (`tool_choice` …), for the notes.
    caveats: Vec<String>,
}

/// The schemas of the cases written (their distinct fingerprints are in the scratch
/// index).
#[derive(Debug, Default)]
struct Schemas {
    first: Option<Value>,
    with: u64,
    without: u64,
}

impl<'o> Importer<'o> {
    /// Starts writing `opts.suite`; `source` is the main input file, for messages.
    pub fn new(opts: &'o Options, source: &Path) -> Result<Importer<'o>, ImportError> {
        let writer = writer::SuiteWriter::create(&opts.fixtures, &opts.suite, opts.force)?;
        let scratch =
            scratch::Scratch::open(writer.staging()).map_err(|source| ImportError::Scratch {
                path: writer.staging().join(scratch::FILE_NAME),
                source,
            })?;
        Ok(Importer {
            opts,
            source: source.to_path_buf(),
            scratch,
            writer,
            reservoir: opts.sample.map(|(n, seed)| sample::Reservoir::new(n, seed)),
            schemas: Schemas::default(),
            summary: Summary::default(),
            dropped: BTreeMap::new(),
            caveats: Vec::new(),
        })
    }

    /// What the import was asked.
    pub fn opts(&self) -> &'o Options {
        self.opts
    }

    /// One more request read.
    fn read(&mut self) {
        self.summary.read += 1;
    }

    /// Something not carried over, at `FILE:LINE` (or a test's index).
    pub fn note(&mut self, at: &str, what: &str) {
        self.summary.notes_total += 1;
        if self.summary.notes.len() < MAX_NOTES {
            self.summary.notes.push(format!("{at}: {what}"));
        }
    }

    /// A request that could not be carried over: skipped and listed.
    pub fn skip(&mut self, at: &str, what: &str) {
        self.summary.skipped += 1;
        self.note(at, what);
    }

    /// Request fields a case does not carry, counted by name.
    pub fn dropped(&mut self, fields: &[String]) {
        for f in fields {
            *self.dropped.entry(f.clone()).or_default() += 1;
        }
    }

    /// Counts `n` values redacted.
    pub fn redacted(&mut self, n: usize) {
        self.summary.redacted += n as u64;
    }

    /// Adds a case: when its request was seen already it is dropped, and its recorded
    /// answers (if any) join the first one's as further repeats; else it is sampled or
    /// written.
    fn add(&mut self, item: Item) -> Result<(), ImportError> {
        // A sampled case may be left out, so no later repeat may be merged into a file by
        // its id: the sample merges into the items it holds.
        let id = (self.reservoir.is_none() && item.has_reference).then_some(item.id.as_str());
        // Insert first and look up only on a repeat: one statement for a new request.
        // (Inserting before the --max-cases check below changes nothing: that error ends
        // the import.)
        let new = self
            .scratch
            .seen_insert(&item.fingerprint, id)
            .map_err(|e| self.scratch_error(e))?;
        if !new {
            self.summary.duplicates += 1;
            if item.has_reference {
                let first = self
                    .scratch
                    .seen_get(&item.fingerprint)
                    .map_err(|e| self.scratch_error(e))?
                    .flatten();
                self.merge(first.as_deref(), &item)?;
            }
            return Ok(());
        }
        match &mut self.reservoir {
            Some(r) => {
                r.offer(item);
                Ok(())
            }
            None => {
                if self.summary.written as usize >= self.opts.max_cases {
                    return Err(ImportError::TooMany {
                        path: self.source.clone(),
                        max: self.opts.max_cases,
                    });
                }
                self.write(&item)
            }
        }
    }

    /// Records where the Batch output's answer to `custom_id` is; `true` when an earlier
    /// line answered it too (this one replaces it).
    pub fn index_put(&mut self, custom_id: &str, at: scratch::At) -> Result<bool, ImportError> {
        self.scratch
            .index_put(custom_id, at)
            .map_err(|e| self.scratch_error(e))
    }

    /// Takes the answer to `custom_id` out of the Batch output index, if it has one.
    pub fn index_take(&mut self, custom_id: &str) -> Result<Option<scratch::At>, ImportError> {
        self.scratch
            .index_take(custom_id)
            .map_err(|e| self.scratch_error(e))
    }

    /// Removes `custom_id` from the Batch output index: its request was skipped, so its
    /// answer is not one that matches no request.
    pub fn index_remove(&mut self, custom_id: &str) -> Result<(), ImportError> {
        self.scratch
            .index_remove(custom_id)
            .map_err(|e| self.scratch_error(e))
    }

    /// Keeps an OpenTelemetry log record until its span is read.
    pub fn event_put(&mut self, span: &str, seq: u64, record: &str) -> Result<(), ImportError> {
        self.scratch
            .event_put(span, seq, record)
            .map_err(|e| self.scratch_error(e))
    }

    /// The log records kept for `span`, in input order, taken out.
    pub fn events_take(&mut self, span: &str) -> Result<Vec<String>, ImportError> {
        self.scratch
            .events_take(span)
            .map_err(|e| self.scratch_error(e))
    }

    /// A span whose log records are still kept, if any.
    pub fn events_any(&self) -> Result<Option<String>, ImportError> {
        self.scratch.events_any().map_err(|e| self.scratch_error(e))
    }

    /// What the source never records, said once at the head of the notes.
    pub fn caveat(&mut self, text: &str) {
        self.caveats.push(text.to_string());
    }

    /// The answers of the Batch output index never taken.
    pub fn index_len(&self) -> u64 {
        self.scratch.index_len()
    }

    fn scratch_error(&self, source: scratch::ScratchError) -> ImportError {
        ImportError::Scratch {
            path: self.scratch.path().to_path_buf(),
            source,
        }
    }

    /// Appends the recorded answers of `item` (a repeat of an earlier request) to the
    /// case written as `first`, or held in the sample; only when both were answered by
    /// the same model, so that a reference's repeats stay one model's noise.
    fn merge(&mut self, first: Option<&str>, item: &Item) -> Result<(), ImportError> {
        let Some(extra) = item.case.get("reference") else {
            return Ok(());
        };
        let add = |case: &mut Value| -> bool {
            let Some(reference) = case.get_mut("reference") else {
                return false;
            };
            let same = ["model", "served_model"]
                .iter()
                .all(|k| reference.get(*k) == extra.get(*k));
            match (same, reference.get_mut("answers"), extra.get("answers")) {
                (true, Some(Value::Array(answers)), Some(Value::Array(more))) => {
                    answers.extend(more.iter().cloned());
                    true
                }
                _ => false,
            }
        };
        let merged = match (&mut self.reservoir, first) {
            (None, Some(id)) => {
                let mut case = self.writer.read_case(id)?;
                let merged = add(&mut case);
                if merged {
                    self.writer.case(id, &case)?;
                }
                merged
            }
            (Some(r), _) => r
                .items_mut()
                .iter_mut()
                .find(|held| held.fingerprint == item.fingerprint)
                .is_some_and(|held| add(&mut held.case)),
            (None, None) => false,
        };
        if merged {
            self.summary.repeats_merged += 1;
        }
        Ok(())
    }

    fn write(&mut self, item: &Item) -> Result<(), ImportError> {
        self.writer.case(&item.id, &item.case)?;
        self.summary.written += 1;
        if item.has_reference {
            self.summary.with_reference += 1;
        }
        match &item.schema {
            Some(schema) => {
                self.schemas.with += 1;
                let new = self
                    .scratch
                    .schema_insert(&conform_config::digest::canonical_raw(schema))
                    .map_err(|e| self.scratch_error(e))?;
                if new && self.schemas.first.is_none() {
                    self.schemas.first = Some(schema.clone());
                }
            }
            None => self.schemas.without += 1,
        }
        Ok(())
    }

    /// Writes the sample (if any), `schema.json`, `suite.toml` and `IMPORT_NOTES.md`,
    /// then moves the suite into place. `suite` is `suite.toml`'s table, without
    /// `schema`; `header` the comment that opens it; `schema` a schema the source
    /// itself gave (promptfoo's assertions), else the requests' own decide it.
    pub fn finish(
        mut self,
        header: &str,
        mut suite: toml::Table,
        schema: Option<(Value, String)>,
    ) -> Result<Summary, ImportError> {
        if let Some(r) = self.reservoir.take() {
            let seen = r.seen();
            let mut items = r.into_items();
            items.sort_by_key(|i| i.order);
            self.summary.not_sampled = seen - items.len() as u64;
            for item in &items {
                self.write(item)?;
            }
        }
        if self.summary.written == 0 {
            return Err(ImportError::Empty {
                path: self.source.clone(),
                skipped: self.summary.skipped,
            });
        }
        let (schema, said) = match schema {
            Some(given) => given,
            None => self.schema_of_requests(),
        };
        self.summary.schema = said;
        self.writer.json("schema.json", &schema)?;
        suite.insert("schema".into(), toml::Value::String("schema.json".into()));
        let text = toml::to_string(&suite).map_err(|e| ImportError::Format {
            path: self.writer.target().join("suite.toml"),
            message: e.to_string(),
        })?;
        self.writer.text("suite.toml", &format!("{header}{text}"))?;
        let notes = self.notes_md();
        self.writer.text("IMPORT_NOTES.md", &notes)?;
        // The scratch file is in the staging folder: it goes before the folder becomes
        // the suite.
        let Importer {
            scratch,
            writer,
            mut summary,
            ..
        } = self;
        let path = scratch.path().to_path_buf();
        scratch
            .close()
            .map_err(|source| ImportError::Scratch { path, source })?;
        summary.dir = writer.finish()?;
        Ok(summary)
    }

    /// `schema.json` from the requests' `response_format`: theirs when every case asked
    /// for the same one, else one that accepts any answer, and why.
    fn schema_of_requests(&mut self) -> (Value, String) {
        let s = &self.schemas;
        match (&s.first, self.scratch.schemas_len(), s.without) {
            (Some(schema), 1, 0) => (
                schema.clone(),
                format!("the one JSON Schema all {} requests asked for", s.with),
            ),
            (None, _, _) => (
                json!({}),
                "no request asked for a JSON Schema: schema.json accepts any JSON".into(),
            ),
            (Some(_), n, without) => {
                let said = format!(
                    "the requests asked for {n} different JSON Schemas ({without} asked for none): schema.json accepts any JSON; import each kind of request into its own suite to keep its schema"
                );
                self.note(&self.source.display().to_string(), &said.clone());
                (json!({}), said)
            }
        }
    }

    fn notes_md(&self) -> String {
        let s = &self.summary;
        let mut out = format!(
            "# Import notes: {}\n\nImported by `conform import` from `{}`.\n\n\
             - requests read: {}\n- cases written: {} ({} with recorded reference answers)\n\
             - duplicates dropped (same canonical request): {} ({} of them answered by the same model: their answers are further repeats of the first's reference)\n- left out by --sample: {}\n\
             - skipped (listed below): {}\n- values redacted: {} (placeholders such as `<EMAIL_1>` are stable within a case)\n\
             - schema.json: {}\n",
            self.opts.suite,
            file_name(&self.source),
            s.read,
            s.written,
            s.with_reference,
            s.duplicates,
            s.repeats_merged,
            s.not_sampled,
            s.skipped,
            s.redacted,
            s.schema,
        );
        if !self.caveats.is_empty() {
            out.push_str("\n## What the source does not record\n\n");
            for c in &self.caveats {
                out.push_str(&format!("- {c}\n"));
            }
        }
        if !self.dropped.is_empty() {
            out.push_str("\n## Request fields not carried over\n\nSampling and limits belong to the provider file (`providers/NAME.toml`: `temperature`, `seed`, `max_output_tokens` …), not to a case:\n\n");
            for (field, n) in &self.dropped {
                out.push_str(&format!("- `{field}`: {n} requests\n"));
            }
        }
        out.push_str("\n## Not carried over\n\n");
        if s.notes.is_empty() {
            out.push_str("Nothing.\n");
        }
        for n in &s.notes {
            out.push_str(&format!("- {n}\n"));
        }
        if s.notes_total > s.notes.len() as u64 {
            out.push_str(&format!(
                "- … and {} more\n",
                s.notes_total - s.notes.len() as u64
            ));
        }
        out
    }
}

/// A file's name alone: notes and cases name where they came from without the user's
/// folders.
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A case in the agreed shape, from a request (already redacted through `r`), with its
/// description, and its recorded answers when there are some.
pub fn request_case(
    description: String,
    request: &chat::Request,
    reference: Option<Value>,
) -> Value {
    let mut case = Map::new();
    case.insert("description".into(), Value::String(description));
    case.insert(
        "messages".into(),
        serde_json::to_value(&request.messages).unwrap_or(Value::Null),
    );
    if let Some(tools) = &request.tools {
        case.insert(
            "tools".into(),
            serde_json::to_value(tools).unwrap_or(Value::Null),
        );
    }
    if let Some(choice) = &request.tool_choice {
        case.insert("tool_choice".into(), Value::from(choice.clone()));
    }
    if let Some(p) = request.parallel_tool_calls {
        case.insert("parallel_tool_calls".into(), Value::Bool(p));
    }
    // With no recorded answer and no tools, a request that did not ask for JSON is
    // answered in text: say so, or the case would be held to a JSON answer.
    if reference.is_none() && request.tools.is_none() && !request.json_answer {
        case.insert("expect".into(), json!({"tool_calls": "none"}));
    }
    if let Some(reference) = reference {
        case.insert("reference".into(), reference);
    }
    Value::Object(case)
}

/// What a request sends, for its fingerprint: the conversation, the tools, how they may
/// be called and the answer's schema. The model and sampling settings are the
/// provider's, and whether an answer was logged is not the request's: two requests that
/// differ only there are one case.
pub fn fingerprint(case: &Value, schema: Option<&Value>) -> [u8; 32] {
    let pick = |k: &str| case.get(k).cloned().unwrap_or(Value::Null);
    conform_config::digest::canonical_raw(&json!({
        "messages": pick("messages"),
        "vars": pick("vars"),
        "tools": pick("tools"),
        "tool_choice": pick("tool_choice"),
        "parallel_tool_calls": pick("parallel_tool_calls"),
        "schema": schema.cloned().unwrap_or(Value::Null),
    }))
}

/// A recorded reference in the agreed format.
pub fn reference(
    model: &str,
    served_model: Option<&str>,
    recorded_at: Option<i64>,
    source: String,
    answers: Vec<Value>,
) -> Option<Value> {
    let at = time::OffsetDateTime::from_unix_timestamp(recorded_at?).ok()?;
    let at = at
        .format(&time::format_description::well_known::Rfc3339)
        .ok()?;
    let mut r = Map::new();
    r.insert("model".into(), Value::String(model.to_string()));
    if let Some(served) = served_model {
        r.insert("served_model".into(), Value::String(served.to_string()));
    }
    r.insert("recorded_at".into(), Value::String(at));
    r.insert("source".into(), Value::String(source));
    r.insert("answers".into(), Value::Array(answers));
    Some(Value::Object(r))
}

/// A file-name-safe slug of an id (lower-case letters, digits, `-`), at most 48 long.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= 48 {
            break;
        }
    }
    out.trim_matches('-').to_string()
}
