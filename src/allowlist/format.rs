//! `conform.allowlist/v1`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::verdict::CheckCount;

pub const FORMAT: &str = "conform.allowlist/v1";

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allowlist {
    pub format: String,
    /// Kept sorted by (suite, provider), so the file diffs cleanly.
    pub entries: Vec<Entry>,
    /// Why entries were removed, for `conform allowlist explain`.
    #[serde(default)]
    pub revocations: Vec<Revocation>,
}

impl Default for Allowlist {
    fn default() -> Self {
        Allowlist {
            format: FORMAT.to_string(),
            entries: Vec::new(),
            revocations: Vec::new(),
        }
    }
}

/// Failover to `provider` for `suite` is permitted until `valid_until`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub suite: String,
    pub provider: String,
    /// The model the provider file names.
    pub model: String,
    /// Every model name the responses reported.
    pub served_models: Vec<String>,
    pub system_fingerprints: Vec<String>,
    /// Templates, schema, rules and cases.
    pub suite_digest: String,
    /// The provider configuration, never a secret.
    pub provider_digest: String,
    /// `tiktoken:o200k_base`, `huggingface:<sha256>`, or `none`.
    pub tokenizer: String,
    pub evidence: Evidence,
    /// RFC 3339, UTC.
    pub generated_at: String,
    /// RFC 3339, UTC. After this instant the entry permits nothing.
    pub valid_until: String,
}

/// What the entry rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub run_id: String,
    /// The run's `report.json`.
    pub report: String,
    pub conform_version: String,
    pub cases: u64,
    pub repeats: u32,
    pub calls: u64,
    pub passed: u64,
    pub pass_rate: f64,
    pub first_attempt_pass_rate: f64,
    pub checks: BTreeMap<String, CheckCount>,
}

/// A removed entry and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revocation {
    pub suite: String,
    pub provider: String,
    pub run_id: String,
    pub at: String,
    /// The finding codes that failed the run.
    pub reasons: Vec<String>,
    pub report: String,
}
