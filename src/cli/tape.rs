//! `conform tape to-reference`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use conform::config::{ProviderConfig, Selection, Workspace};
use conform::run::reference_tape;

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
    match args.command {
        TapeCommand::ToReference(args) => to_reference(global, args),
    }
}

fn to_reference(global: &Global, args: ToReferenceArgs) -> anyhow::Result<Exit> {
    let provider = match args.provider.clone().or_else(|| {
        args.tape
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string)
    }) {
        Some(p) => p,
        None => {
            eprintln!(
                "error: cannot tell the provider from {}: name it with --provider",
                args.tape.display()
            );
            return Ok(Exit::Usage);
        }
    };
    let selection = Selection {
        providers: vec![provider.clone()],
        suites: vec![args.suite.clone()],
    };
    let workspace = match Workspace::load(&global.paths(), &selection) {
        Ok(ws) => ws,
        Err(problems) => {
            super::run::print_problems(&problems);
            return Ok(Exit::Usage);
        }
    };
    let (Some(suite), Some(config)) = (workspace.suites.first(), workspace.providers.first())
    else {
        eprintln!("error: no suite {} or provider {provider}", args.suite);
        return Ok(Exit::Usage);
    };
    let config: &ProviderConfig = config;
    match reference_tape::tape_to_reference(&args.tape, suite, config) {
        Ok(done) => {
            println!(
                "{}: {} case{} now carry {} recorded answer{} of {} ({})",
                suite.name,
                done.cases,
                if done.cases == 1 { "" } else { "s" },
                done.answers,
                if done.answers == 1 { "" } else { "s" },
                config.name,
                config.model
            );
            if done.missing.is_empty() {
                Ok(Exit::Ok)
            } else {
                println!(
                    "not on the tape (left as they were): {}",
                    done.missing.join(", ")
                );
                Ok(Exit::Failed)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(Exit::Usage)
        }
    }
}
