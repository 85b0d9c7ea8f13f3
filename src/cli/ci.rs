//! `conform ci …`: what a CI job posts after a merged run.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use conform::ci;
use conform_gate::export::Names;

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct CiArgs {
    #[command(subcommand)]
    pub command: CiCommand,
}

#[derive(Debug, Subcommand)]
pub enum CiCommand {
    /// The pull-request comment body (Markdown): fallbacks added, revoked (with finding
    /// codes) or expiring soon, and the diff of the exported LiteLLM fallbacks.
    #[command(after_help = "Example (as the CI workflow runs it):\n  \
cp allowlist.json allowlist.before.json\n  \
conform merge shards/\n  \
conform ci comment --before allowlist.before.json --after allowlist.json \\\n    \
--expiring-within 7d --primary openai --out comment.md\n\n\
A missing --before file is an empty allowlist (the first run). Each pair is decided as \
`conform gate` decides it, against this project's suites and providers.")]
    Comment(CommentArgs),
}

#[derive(Debug, Args)]
pub struct CommentArgs {
    /// The allowlist before the run (a copy taken before `conform merge`).
    #[arg(long, value_name = "FILE")]
    pub before: PathBuf,
    /// The allowlist after the run [default: the allowlist].
    #[arg(long, value_name = "FILE")]
    pub after: Option<PathBuf>,
    /// List the permitted fallbacks that expire within this window.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub expiring_within: Duration,
    /// A primary whose LiteLLM fallbacks are diffed (repeatable); none: no config diff.
    #[arg(long = "primary", value_name = "PROVIDER")]
    pub primaries: Vec<String>,
    /// The gateway's name for a provider: PROVIDER=NAME (repeatable).
    #[arg(long = "name", value_name = "PROVIDER=NAME", value_parser = Names::parse_pair)]
    pub names: Vec<(String, String)>,
    /// Write the body here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn ci(global: &Global, args: CiArgs) -> anyhow::Result<Exit> {
    let CiCommand::Comment(args) = args.command;
    let after = args.after.unwrap_or_else(|| global.allowlist_path());
    let names = Names(args.names.into_iter().collect());
    let now = time::OffsetDateTime::now_utc();
    let (paths, within) = (global.paths(), args.expiring_within);
    let body = match ci::comment_between(
        &args.before,
        &after,
        &paths,
        now,
        within,
        args.primaries,
        names,
    ) {
        Ok(body) => body,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    match &args.out {
        Some(path) => std::fs::write(path, &body)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => print!("{body}"),
    }
    Ok(Exit::Ok)
}
