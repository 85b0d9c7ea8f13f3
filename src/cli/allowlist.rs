//! `conform allowlist schema | show | explain`: the allowlist for people and reviewers.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use time::OffsetDateTime;

use conform_gate::allowlist;
use conform_gate::allowlist::inspect::{self, Explanation, Show};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct AllowlistArgs {
    #[command(subcommand)]
    pub command: AllowlistCommand,
}

#[derive(Debug, Subcommand)]
pub enum AllowlistCommand {
    /// Print the JSON Schema (draft 2020-12) of the conform.allowlist/v1 format.
    Schema,
    /// What is allowed, until when, on what evidence; and what was revoked.
    #[command(
        after_help = "Exit codes: 0 the allowlist was read, 1 it is missing or \
unreadable (nothing is permitted)."
    )]
    Show(ShowArgs),
    /// Why PROVIDER may or may not take failover, suite by suite, decided as `conform
    /// gate` decides: permitted (on what evidence), never run, revoked by which run and
    /// why, expired when, or made with another suite or provider configuration.
    #[command(
        after_help = "Exit codes: 0 every suite permits PROVIDER, 1 at least one does not, \
2 the provider or a suite is not in this project."
    )]
    Explain(ExplainArgs),
    /// Check every entry's signature against the trust file (trust.toml or --trust).
    #[command(
        after_help = "Exit codes: 0 every entry is signed by a trusted key, as it is now; 1 an \
entry is unsigned, edited after signing or signed by an unlisted key (each named); 2 no trust \
file, or an allowlist or trust file that cannot be read."
    )]
    Verify,
    /// Rewrite the allowlist in a loop with the library writer (crash tests).
    #[command(hide = true)]
    RewriteLoop(RewriteLoopArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The provider, by file name in providers/.
    pub provider: String,
    /// Only these suites [default: every suite in fixtures/ or in the allowlist].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct RewriteLoopArgs {
    /// An entry (JSON) to grant again and again; its run id becomes `gen-N`.
    #[arg(long)]
    pub entry: PathBuf,
    /// The first generation N.
    #[arg(long, default_value_t = 1)]
    pub from: u64,
    /// How many generations to write.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
}

pub fn allowlist(global: &Global, args: AllowlistArgs) -> anyhow::Result<Exit> {
    match args.command {
        AllowlistCommand::Schema => {
            print!("{}", allowlist::SCHEMA);
            Ok(Exit::Ok)
        }
        AllowlistCommand::Show(args) => show(global, &args),
        AllowlistCommand::Explain(args) => explain(global, &args),
        AllowlistCommand::Verify => verify(global),
        AllowlistCommand::RewriteLoop(args) => rewrite_loop(global, &args),
    }
}

fn show(global: &Global, args: &ShowArgs) -> anyhow::Result<Exit> {
    let (now, state) = (OffsetDateTime::now_utc(), global.state.as_deref());
    let shown = Show::of(&global.allowlist_path(), &global.paths(), now, state)?;
    match args.format {
        Format::Json => println!("{}", shown.json()?),
        Format::Text => print!("{shown}"),
    }
    Ok(if shown.readable() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

fn explain(global: &Global, args: &ExplainArgs) -> anyhow::Result<Exit> {
    let (now, state) = (OffsetDateTime::now_utc(), global.state.as_deref());
    let (path, paths) = (global.allowlist_path(), global.paths());
    let explained = match Explanation::of(&path, &paths, &args.provider, &args.suites, now, state) {
        Ok(explained) => explained,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&explained)?),
        Format::Text => print!("{explained}"),
    }
    Ok(if explained.usage_error() {
        Exit::Usage
    } else if explained.permitted {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

fn rewrite_loop(global: &Global, args: &RewriteLoopArgs) -> anyhow::Result<Exit> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let generations = args.from..args.from.saturating_add(args.count);
    allowlist::writer::regrant(&global.allowlist_path(), &args.entry, generations, |n| {
        writeln!(out, "{n}")?;
        out.flush()
    })?;
    Ok(Exit::Ok)
}

fn verify(global: &Global) -> anyhow::Result<Exit> {
    let state = global.state.as_deref();
    match inspect::verify(&global.allowlist_path(), &global.paths().trust, state)? {
        Ok(verified) => {
            print!("{verified}");
            Ok(if verified.failed() == 0 {
                Exit::Ok
            } else {
                Exit::Failed
            })
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(Exit::Usage)
        }
    }
}
