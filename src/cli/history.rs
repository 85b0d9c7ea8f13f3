//! `conform history` and `conform diff`: a provider over time, and two runs side by side.

use clap::Args;

use conform::history;
use conform::history::diff::{self, run_dir};
use conform::history::listing::{Filter, Listing};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this suite.
    #[arg(long, value_name = "SUITE")]
    pub suite: Option<String>,
    /// Only this provider.
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// How many of each pair's latest runs to list (the flags look at all of them).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub last: usize,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier run: its id (a folder in the reports directory) or its folder.
    pub run_a: String,
    /// The later run.
    pub run_b: String,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub fn history(global: &Global, args: HistoryArgs) -> anyhow::Result<Exit> {
    let path = history::file_in(&global.reports_dir());
    let filter = Filter {
        suite: args.suite,
        provider: args.provider,
    };
    let (lines, skipped) = history::read(&path, |l| filter.keeps(l))?;
    for s in &skipped {
        eprintln!("warning: {}:{}: skipped: {}", path.display(), s.line, s.why);
    }
    let listing = match Listing::new(&path, lines, &filter, args.last) {
        Ok(listing) => listing,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&listing)?),
        Format::Text => print!("{listing}"),
    }
    Ok(if listing.warned() {
        Exit::Failed
    } else {
        Exit::Ok
    })
}

pub fn diff(global: &Global, args: DiffArgs) -> anyhow::Result<Exit> {
    let reports = global.reports_dir();
    let (a, b) = (
        run_dir(&reports, &args.run_a),
        run_dir(&reports, &args.run_b),
    );
    let diff = match diff::diff(&a, &b) {
        Ok(diff) => diff,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&diff)?),
        Format::Text => print!("{diff}"),
    }
    Ok(if diff.regressed() {
        Exit::Failed
    } else {
        Exit::Ok
    })
}
