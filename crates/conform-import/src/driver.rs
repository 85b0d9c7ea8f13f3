//! The one import pipeline: a [`Source`] reads its format into [`Record`]s, one per
//! request, and hands each to the [`Importer`], which redacts it, drops a repeat of an
//! earlier request, samples or caps, and writes the suite with the notes of what was
//! left behind. A format says only how its input becomes records and its suite's header.

use std::path::Path;

use serde_json::Value;

use super::redact::Redactor;
use super::{ImportError, Importer, Item, Options, Summary};

/// One request as a source read it, in the common shape, not yet redacted as a whole.
pub struct Record<'r> {
    /// Its place in the input, so a sample is written in input order.
    pub order: u64,
    /// The case's file stem.
    pub id: String,
    /// The case (`messages` or `vars`, the tools, the recorded reference).
    pub case: Value,
    /// The JSON Schema its request asked the answer to follow, if any.
    pub schema: Option<Value>,
    /// Request fields the case does not carry.
    pub dropped: Vec<String>,
    /// The case's redactor: a source may already have redacted the raw request's paths
    /// through it, so that placeholders stay stable across the whole case.
    pub redactor: Redactor<'r>,
}

/// What a source made of one request it read.
pub enum Read<'r> {
    /// Boxed: a record is large, and most sources skip few requests.
    Request(Box<Record<'r>>),
    /// A request that cannot be carried over: `at` is its place, `why` what was not.
    Skipped {
        /// Its place in the input.
        at: String,
        /// What could not be carried over.
        why: String,
    },
}

/// What `suite.toml` says about a source: the comment that opens it, its table (without
/// `schema`), and a schema the source itself gave (else the requests' own decide it).
pub struct Suite {
    /// The comment that opens `suite.toml`: where the suite came from.
    pub header: String,
    /// The rest of `suite.toml`.
    pub table: toml::Table,
    /// The schema the source gave, and the sentence that says where it came from.
    pub schema: Option<(Value, String)>,
}

impl Suite {
    /// A suite with a `description` and nothing else.
    pub fn described(header: String, description: String) -> Suite {
        let mut table = toml::Table::new();
        table.insert("description".into(), toml::Value::String(description));
        Suite {
            header,
            table,
            schema: None,
        }
    }
}

/// A source format: what reads its input into records.
pub trait Source {
    /// The main input file, which messages name.
    fn main(&self) -> &Path;
    /// Reads the whole input, offering each request to `importer` ([`Importer::offer`])
    /// and noting what is not carried over.
    fn read(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError>;
    /// What `suite.toml` says, once everything is read.
    fn suite(&mut self, importer: &mut Importer<'_>) -> Result<Suite, ImportError>;
}

/// Imports `source` as `opts` say; nothing is written when it fails.
pub fn drive(mut source: impl Source, opts: &Options) -> Result<Summary, ImportError> {
    let mut importer = Importer::new(opts, source.main())?;
    source.read(&mut importer)?;
    let suite = source.suite(&mut importer)?;
    importer.finish(&suite.header, suite.table, suite.schema)
}

impl Importer<'_> {
    /// One request read: a skipped one is listed, a record redacted as a whole (so that
    /// nothing unredacted is fingerprinted or written), then deduplicated, sampled or
    /// written.
    pub fn offer(&mut self, read: Read<'_>) -> Result<(), ImportError> {
        self.read();
        let record = match read {
            Read::Skipped { at, why } => {
                self.skip(&at, &why);
                return Ok(());
            }
            Read::Request(record) => *record,
        };
        let Record {
            order,
            id,
            case,
            schema,
            dropped,
            mut redactor,
        } = record;
        self.dropped(&dropped);
        let item = Item::redacted(order, id, case, schema, &mut redactor);
        self.redacted(redactor.replaced);
        self.add(item)
    }
}
