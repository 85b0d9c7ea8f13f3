//! `conform gate`: the allowlist decision, for orchestrators in any language.

use clap::{Args, ValueEnum};

use conform::allowlist::{Observed, permits};

use super::{EXIT_NONCONFORMANT, EXIT_OK, Global};

#[derive(Debug, Args)]
pub struct GateArgs {
    /// The suite (the task) the failover is for.
    #[arg(long)]
    pub suite: String,
    /// The provider to fail over to.
    #[arg(long)]
    pub provider: String,
    /// The model the provider reported serving; denied if the evidence never saw it.
    #[arg(long, value_name = "MODEL")]
    pub served_model: Option<String>,
    /// The system fingerprint the provider reported; denied if never seen.
    #[arg(long, value_name = "FP")]
    pub system_fingerprint: Option<String>,
    /// The caller's suite digest; denied if the evidence was made with another suite.
    #[arg(long, value_name = "DIGEST")]
    pub suite_digest: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

pub fn gate(global: &Global, args: GateArgs) -> anyhow::Result<u8> {
    let observed = Observed {
        suite_digest: args.suite_digest.as_deref(),
        served_model: args.served_model.as_deref(),
        system_fingerprint: args.system_fingerprint.as_deref(),
    };
    let path = global.allowlist_path();
    let decision = permits(
        &path,
        &args.suite,
        &args.provider,
        time::OffsetDateTime::now_utc(),
        &observed,
    );
    match (&decision, args.format) {
        (Ok(permit), Format::Json) => println!(
            "{}",
            serde_json::json!({"permitted": true, "suite": args.suite, "provider": args.provider,
                               "valid_until": permit.entry.valid_until, "evidence": permit.entry.evidence})
        ),
        (Err(denial), Format::Json) => println!(
            "{}",
            serde_json::json!({"permitted": false, "suite": args.suite, "provider": args.provider,
                               "reason": denial.reason.code(), "detail": denial.detail})
        ),
        (Ok(permit), Format::Text) => println!(
            "permitted: failover to {} for {} until {} (run {}, {}/{} calls passed)",
            args.provider,
            args.suite,
            permit.entry.valid_until,
            permit.entry.evidence.run_id,
            permit.entry.evidence.passed,
            permit.entry.evidence.calls
        ),
        (Err(denial), Format::Text) => {
            println!("denied ({}): {}", denial.reason.code(), denial.detail)
        }
    }
    Ok(if decision.is_ok() {
        EXIT_OK
    } else {
        EXIT_NONCONFORMANT
    })
}
