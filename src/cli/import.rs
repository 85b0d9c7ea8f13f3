//! `conform import`: a suite from logged traffic. Parses arguments and prints; the work
//! is in `conform_import`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use conform_import::{Input, Options, Redaction};

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub source: Source,
}

#[derive(Debug, Subcommand)]
pub enum Source {
    /// The OpenAI Batch API's files: input lines become cases, the output file's answers
    /// (joined by custom_id) their recorded reference answers.
    #[command(after_help = "Examples:\n  \
conform import openai-batch batch_input.jsonl --output batch_output.jsonl --suite support-traffic\n  \
conform import openai-batch input.jsonl --output output.jsonl --output errors.jsonl --suite s --sample 500 --seed 7\n\n\
Chat Completions and Responses requests are read; `response_format` / `text.format` JSON \
Schemas become schema.json when every request asked for the same one.")]
    OpenaiBatch {
        /// The Batch input file (JSONL: custom_id, method, url, body).
        input: PathBuf,
        /// The Batch output file, and the error file if there is one (repeatable).
        #[arg(long = "output", value_name = "OUTPUT.jsonl")]
        outputs: Vec<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// A JSONL of chat request bodies, one per line, or {"request": …, "response": …}.
    #[command(after_help = "Examples:\n  \
conform import jsonl logged_requests.jsonl --suite triage-traffic\n  \
conform import jsonl pairs.jsonl --suite triage-traffic --redact-regex 'ACCT-[0-9]+' --redact-path '.metadata'")]
    Jsonl {
        /// The JSONL file.
        input: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// A promptfoo test file (YAML or CSV): vars become cases, prompts the templates,
    /// is-json / contains-json schemas schema.json; the rest is listed as not carried over.
    #[command(after_help = "Examples:\n  \
conform import promptfoo promptfooconfig.yaml --suite triage\n  \
conform import promptfoo tests.csv --suite triage")]
    Promptfoo {
        /// promptfooconfig.yaml, or a tests CSV.
        input: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// OpenTelemetry GenAI telemetry as OTLP JSON: each chat inference span becomes a case,
    /// its answer the reference; content from span attributes or log records (docs/import.md).
    ///
    /// Example: conform import otel traces.jsonl logs.jsonl --suite support-traffic
    Otel {
        /// OTLP JSON files (an export per line or per file); spans and logs join across them.
        #[arg(required = true, value_name = "FILE")]
        inputs: Vec<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// LiteLLM's standard logging payloads (JSONL): chat calls become cases with answers.
    ///
    /// Example: conform import litellm litellm_logs.jsonl --suite gateway-traffic
    Litellm {
        /// The JSONL of `standard_logging_object`s.
        input: PathBuf,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Args)]
pub struct Common {
    /// The new suite's name: it is written to ROOT/fixtures/NAME.
    #[arg(long)]
    pub suite: String,
    /// Replace an existing suite of that name.
    #[arg(long)]
    pub force: bool,
    /// Keep a uniform sample of N distinct requests (reproducible with --seed).
    #[arg(long, value_name = "N")]
    pub sample: Option<usize>,
    /// The sample's seed: the same input, N and seed give the same cases.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Refuse an import of more distinct requests than this (or take --sample).
    #[arg(long, value_name = "N", default_value_t = conform_import::DEFAULT_MAX_CASES)]
    pub max_cases: usize,
    /// Refuse an input line longer than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = conform_import::DEFAULT_MAX_LINE_BYTES)]
    pub max_line_bytes: usize,
    /// Also replace every match of this regular expression (repeatable) by <REDACTED_n>.
    #[arg(long, value_name = "RE")]
    pub redact_regex: Vec<String>,
    /// Also replace the value at this jq path of each request body (repeatable), e.g.
    /// '.messages[0].content' or '.metadata'.
    #[arg(long, value_name = "JQ_PATH")]
    pub redact_path: Vec<String>,
    /// Do not redact e-mail addresses, phone numbers and card numbers (the default).
    #[arg(long)]
    pub no_default_redaction: bool,
}

pub fn import(global: &Global, args: ImportArgs) -> anyhow::Result<Exit> {
    let (input, common) = match &args.source {
        Source::OpenaiBatch {
            input,
            outputs,
            common,
        } => (Input::OpenaiBatch { input, outputs }, common),
        Source::Jsonl { input, common } => (Input::Jsonl(input), common),
        Source::Promptfoo { input, common } => (Input::Promptfoo(input), common),
        Source::Otel { inputs, common } => (Input::Otel(inputs), common),
        Source::Litellm { input, common } => (Input::Litellm(input), common),
    };
    let opts = Redaction::new(
        !common.no_default_redaction,
        &common.redact_regex,
        &common.redact_path,
    )
    .map(|redaction| Options {
        suite: common.suite.clone(),
        fixtures: global.paths().fixtures,
        force: common.force,
        sample: common.sample.map(|n| (n, common.seed)),
        max_cases: common.max_cases,
        max_line_bytes: common.max_line_bytes,
        redaction,
    });
    match opts.and_then(|opts| input.import(&opts)) {
        Ok(report) => {
            print!("{report}");
            Ok(Exit::Ok)
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("nothing was written");
            Ok(Exit::Usage)
        }
    }
}
