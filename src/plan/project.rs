//! The plan of a loaded workspace, as `conform plan` and `run --dry-run` print it: each
//! suite through the run's own pre-flight (every case read once, its bytes held to be
//! counted), then every provider with its own tokenizer.

use std::sync::Arc;

use crate::run::shard::Shard;
use crate::run::{self, Keep};
use conform_config::{Diagnostics, Workspace};

/// The plan of every suite × provider of `workspace`; every problem found on the way.
pub fn of_workspace(
    workspace: Workspace,
    repeats: Option<u32>,
    shard: Option<Shard>,
) -> Result<super::RunPlan, Diagnostics> {
    let suites = run::prepare(workspace.suites, Keep::CaseBytes)?;
    let providers: Vec<_> = workspace.providers.into_iter().map(Arc::new).collect();
    super::for_providers(&suites, &providers, repeats, shard)
}
