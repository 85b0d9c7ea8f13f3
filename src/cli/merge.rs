//! `conform merge`: shard reports joined into one run, judged and reported as a run is.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use conform::execute::{self, MergeTo};

use super::run::{failed, print_conclusion};
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard report folders (REPORTS/shards/shard-K-of-N), or folders holding them.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// How long an allowlist entry made by the merged run stays valid.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub valid_for: Duration,
    /// Under a trust file, replace signed entries with the merge's unsigned grants anyway.
    #[arg(long)]
    pub allow_unsigned: bool,
}

pub async fn merge(global: &Global, args: MergeArgs) -> anyhow::Result<Exit> {
    let to = MergeTo {
        paths: global.paths(),
        reports: global.reports_dir(),
        allowlist: global.allowlist_path(),
        valid_for: args.valid_for,
        allow_unsigned: args.allow_unsigned,
    };
    let merged = match execute::merge(&args.dirs, &to).await {
        Ok(merged) => merged,
        Err(e) => return failed(e),
    };
    println!("{}", merged.line);
    print_conclusion(merged.conclude(global.verbose > 0)?)?;
    Ok(merged.result.overall(false).into())
}
