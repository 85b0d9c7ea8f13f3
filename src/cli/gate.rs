//! `conform gate`: the allowlist decision, for orchestrators in any language.

use clap::{Args, ValueEnum};

use conform_gate::allowlist::inspect::GateAnswer;
use conform_gate::allowlist::{Query, Required};

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
    /// Default: `max_undetected_failure_rate` in ROOT/conform.toml, else 0.10.
    #[arg(long, value_name = "RATE", value_parser = Required::parse_rate)]
    pub max_undetected_failure_rate: Option<f64>,
    /// For evidence judged against a reference (`run --reference`): deny
    /// (insufficient_evidence) unless its comparison rules out a drift from the reference
    /// above RATE (an answer disagreeing with the primary that much more often than the
    /// primary disagrees with itself). Default: `max_undetected_drift` in
    /// ROOT/conform.toml, else none required.
    #[arg(long, value_name = "RATE", value_parser = Required::parse_rate)]
    pub max_undetected_drift: Option<f64>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
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
        max_undetected_drift: args.max_undetected_drift,
        ..Required::default()
    });
    let answer = GateAnswer::ask(&global.allowlist_path(), &query, global.state.as_deref())?;
    if let Some(note) = answer.unsigned_note(&paths.trust) {
        eprintln!("{note}");
    }
    match (&answer, args.format) {
        (_, Format::Json) => println!("{}", serde_json::to_string(&answer)?),
        (GateAnswer::Denied(d), Format::Text) if d.usage_error => eprintln!("error: {answer}"),
        (_, Format::Text) => println!("{answer}"),
    }
    Ok(match answer {
        GateAnswer::Permitted(_) => Exit::Ok,
        GateAnswer::Denied(d) if d.usage_error => Exit::Usage,
        GateAnswer::Denied(_) => Exit::Failed,
    })
}
