//! `conform tape to-reference`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use conform::tape::{TapeError, ToReference};

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct TapeArgs {
    #[command(subcommand)]
    pub command: TapeCommand,
}

#[derive(Debug, Subcommand)]
pub enum TapeCommand {
    /// Turn the primary's answers on a `conform run --record` tape into the `reference`
    /// blocks of a suite's cases: later runs judge candidates against them, with no live
    /// call to the primary (the floor comes from the recorded repeats).
    #[command(after_help = "Examples:\n  \
conform run openai --suite ticket-triage --repeats 3 --record tapes\n  \
conform tape to-reference tapes/openai.jsonl --suite ticket-triage\n  \
conform run fallback --suite ticket-triage      judged against openai's recorded answers\n\n\
The provider is the tape's file name (openai.jsonl: providers/openai.toml) unless --provider \
names it: each case is encoded as that provider's request, and every 2xx answer recorded for \
it becomes one recorded answer. Cases the tape does not hold are listed and left as they were.\n\n\
Exit codes: 0 every case got a reference, 1 some cases are not on the tape, 2 usage, \
configuration or tape error.")]
    ToReference(ToReferenceArgs),
}

#[derive(Debug, Args)]
pub struct ToReferenceArgs {
    /// The tape: DIR/<provider>.jsonl written by `conform run --record DIR`.
    pub tape: PathBuf,
    /// The suite whose cases get the references.
    #[arg(long, value_name = "SUITE")]
    pub suite: String,
    /// The provider the tape recorded [default: the tape's file name].
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
}

pub fn tape(global: &Global, args: TapeArgs) -> anyhow::Result<Exit> {
    let TapeCommand::ToReference(args) = args.command;
    let provider = args.provider.as_deref();
    match ToReference::convert(&global.paths(), &args.tape, &args.suite, provider) {
        Ok(done) => {
            print!("{done}");
            Ok(if done.complete() {
                Exit::Ok
            } else {
                Exit::Failed
            })
        }
        Err(TapeError::Config(problems)) => {
            super::run::print_problems(&problems);
            Ok(Exit::Usage)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(Exit::Usage)
        }
    }
}
