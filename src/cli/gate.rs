//! `conform gate`: the allowlist decision, for orchestrators in any language.

use clap::{Args, ValueEnum};

use conform::allowlist::{Query, Required, decide};

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct GateArgs {
    /// The suite (the task) the failover is for: a folder in ROOT/fixtures/.
    #[arg(long)]
    pub suite: String,
    /// The provider to fail over to: a file stem in ROOT/providers/.
    #[arg(long)]
    pub provider: String,
    /// The model the provider reported serving; denied if the evidence never saw it.
    #[arg(long, value_name = "MODEL")]
    pub served_model: Option<String>,
    /// The system fingerprint the provider reported; denied if never seen.
    #[arg(long, value_name = "FP")]
    pub system_fingerprint: Option<String>,
    /// Hold the evidence to this suite digest instead of the one computed from
    /// ROOT/fixtures/SUITE.
    #[arg(long, value_name = "DIGEST")]
    pub suite_digest: Option<String>,
    /// Deny (latency_bound) unless the evidence's 95th percentile of whole-call latency
    /// is under this, e.g. `5s` (a percentile within its 1% error of the bound counts as
    /// above it).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub max_p95: Option<std::time::Duration>,
    /// The same bound on the 95th percentile of time to first token.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub max_p95_ttft: Option<std::time::Duration>,
    /// Deny (insufficient_evidence) unless the evidence rules out a failure rate above
    /// RATE at 95 % confidence: 0 failures in 100 calls rule out 3 %, in 20 calls 14 %.
    /// Default: `max_undetected_failure_rate` in ROOT/conform.toml, else no bound.
    #[arg(long, value_name = "RATE", value_parser = rate)]
    pub max_undetected_failure_rate: Option<f64>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// A share in (0, 1).
fn rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r > 0.0 && r < 1.0 => Ok(r),
        _ => Err(format!("`{text}` is not a share in (0, 1), e.g. 0.05")),
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

pub fn gate(global: &Global, args: GateArgs) -> anyhow::Result<Exit> {
    let paths = global.paths();
    let mut query = Query::new(&args.suite, &args.provider, time::OffsetDateTime::now_utc())
        .project(&paths)
        .reported(
            args.served_model.as_deref(),
            args.system_fingerprint.as_deref(),
        );
    query.reported.suite_digest = args.suite_digest.as_deref();
    let query = query.required(Required {
        max_p95_latency: args.max_p95,
        max_p95_ttft: args.max_p95_ttft,
        max_undetected_failure_rate: args.max_undetected_failure_rate,
        max_valid_for: None,
    });
    let decision = decide(&global.allowlist_path(), &query);
    if decision.is_ok() && !paths.trust.exists() {
        // Said once, where a person or a CI log sees it: the permit rests on a file
        // anyone who can write it could have written.
        eprintln!(
            "note: no trust file ({}): entries need no signature (docs/signing.md)",
            paths.trust.display()
        );
    }
    let signed_by = |permit: &conform::allowlist::Permit| {
        conform::allowlist::attest::signed_by(permit.entry.attestation.as_ref()).join(", ")
    };
    match (&decision, args.format) {
        (Ok(permit), Format::Json) => println!(
            "{}",
            serde_json::json!({"permitted": true, "suite": args.suite, "provider": args.provider,
                               "valid_until": permit.entry.valid_until, "evidence": permit.entry.evidence,
                               "signed_by": conform::allowlist::attest::signed_by(permit.entry.attestation.as_ref()),
                               "rules_out": conform::allowlist::RulesOut::of(
                                   permit.entry.evidence.calls, permit.entry.evidence.passed)})
        ),
        (Err(denial), Format::Json) => println!(
            "{}",
            serde_json::json!({"permitted": false, "suite": args.suite, "provider": args.provider,
                               "reason": denial.reason.code(), "detail": denial.detail,
                               "findings": denial.revocation.as_ref().map(|r| &r.reasons)})
        ),
        (Ok(permit), Format::Text) => println!(
            "permitted: failover to {} for {} until {} (run {}, {}/{} calls passed, ruling out {}{}{})",
            args.provider,
            args.suite,
            permit.entry.valid_until,
            permit.entry.evidence.run_id,
            permit.entry.evidence.passed,
            permit.entry.evidence.calls,
            conform::allowlist::RulesOut::of(
                permit.entry.evidence.calls,
                permit.entry.evidence.passed
            )
            .words(),
            permit
                .entry
                .evidence
                .latency
                .map(|l| format!(", p95 latency {}", conform::latency::words(l.total_ms.p95)))
                .unwrap_or_default(),
            match signed_by(permit).as_str() {
                "" => String::new(),
                keys => format!(", signed by {keys}"),
            }
        ),
        (Err(denial), Format::Text) if denial.reason.is_usage_error() => {
            eprintln!("error: {}", denial.detail)
        }
        (Err(denial), Format::Text) => {
            println!("denied ({}): {}", denial.reason.code(), denial.detail)
        }
    }
    Ok(match decision {
        Ok(_) => Exit::Ok,
        Err(denial) if denial.reason.is_usage_error() => Exit::Usage,
        Err(_) => Exit::Failed,
    })
}
