//! `conform serve`: the reference orchestrator.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

use conform_serve::orchestrator::config::DEFAULT_DATABASE_TIMEOUT;
use conform_serve::orchestrator::{Config, Limits, Server, filed};

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "CONFORM_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Comma-separated name=base_url pairs of OpenAI-compatible providers. Verified, a
    /// provider with ROOT/providers/NAME.toml is called through that file at its base_url
    /// (another address here refuses the start) [default: the provider files].
    #[arg(long, env = "CONFORM_PROVIDERS", value_name = "NAME=URL,...")]
    pub providers: Option<String>,
    /// After this many milliseconds an attempt without an answer is `unknown`.
    #[arg(
        long,
        env = "CONFORM_ATTEMPT_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 60_000
    )]
    pub attempt_timeout_ms: u64,
    /// How long a late answer is still awaited after the deadline, in milliseconds.
    #[arg(
        long,
        env = "CONFORM_LATE_WINDOW_MS",
        value_name = "MS",
        default_value_t = 120_000
    )]
    pub late_window_ms: u64,
    /// Where the jobs live: sqlite:///abs/path.db or postgres://user@host/db
    /// [default: sqlite://ROOT/ledger.db].
    #[arg(long, env = "CONFORM_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
    /// Database connections per process.
    #[arg(long, env = "CONFORM_DATABASE_CONNECTIONS", value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub database_connections: u32,
    /// How long a request waits for a database connection (and, on SQLite, for another
    /// process's write lock) before it is answered 503 ledger_unavailable.
    #[arg(long, env = "CONFORM_DATABASE_TIMEOUT_MS", value_name = "MS",
        default_value_t = DEFAULT_DATABASE_TIMEOUT.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub database_timeout_ms: u64,
    /// Requests handled at once; beyond it, 503 overloaded at once (never a queue).
    #[arg(long, env = "CONFORM_MAX_IN_FLIGHT", value_name = "N",
        default_value_t = Limits::DEFAULT.max_in_flight as u64,
        value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_in_flight: u64,
    /// The largest request body; beyond it, 413 body_too_large.
    #[arg(long, env = "CONFORM_MAX_BODY_BYTES", value_name = "BYTES",
        default_value_t = Limits::DEFAULT.max_body_bytes as u64,
        value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_body_bytes: u64,
    /// Request bodies held in memory at once, every connection together; beyond it,
    /// 503 overloaded. At least --max-body-bytes.
    #[arg(long, env = "CONFORM_BODY_MEMORY_BYTES", value_name = "BYTES",
        default_value_t = Limits::DEFAULT.body_memory_bytes as u64,
        value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    pub body_memory_bytes: u64,
    /// From a request's first byte to the end of its headers; then 408 and the
    /// connection is closed.
    #[arg(long, env = "CONFORM_HEADER_TIMEOUT_MS", value_name = "MS",
        default_value_t = Limits::DEFAULT.header_timeout.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// From the end of the headers to the end of the body; then 408.
    #[arg(long, env = "CONFORM_BODY_TIMEOUT_MS", value_name = "MS",
        default_value_t = Limits::DEFAULT.body_timeout.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_ms: u64,
    /// How long a connection may stay open without a request; then it is closed.
    #[arg(long, env = "CONFORM_IDLE_TIMEOUT_MS", value_name = "MS",
        default_value_t = Limits::DEFAULT.idle_timeout.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// After SIGTERM or Ctrl-C: how long answers in progress may take before the
    /// process exits anyway.
    #[arg(long, env = "CONFORM_SHUTDOWN_TIMEOUT_MS", value_name = "MS",
        default_value_t = Limits::DEFAULT.shutdown_timeout.as_millis() as u64)]
    pub shutdown_timeout_ms: u64,
    /// Decide failover on the allowlist's `suite`, `provider` and `valid_until` alone, as
    /// the orchestrator contract reads the file, without holding the evidence to
    /// ROOT/fixtures/TASK and ROOT/providers/PROVIDER.toml. For the contract's scenarios
    /// against mock providers (`conform scenarios --spawn 'conform serve
    /// --unverified-allowlist'`), never in production: any entry anyone writes then
    /// permits failover. Said at start and in /readyz.
    #[arg(long, env = "CONFORM_UNVERIFIED_ALLOWLIST")]
    pub unverified_allowlist: bool,
    /// Accepted for older command lines: evidence is verified by default now.
    #[arg(long, hide = true, conflicts_with = "unverified_allowlist")]
    pub verify_evidence: bool,
}

pub async fn serve(global: &Global, args: ServeArgs) -> anyhow::Result<Exit> {
    let project = (!args.unverified_allowlist).then(|| global.paths());
    let providers = match filed::configured(args.providers.as_deref(), project.as_ref()) {
        Ok(providers) => providers,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    if args.body_memory_bytes < args.max_body_bytes {
        eprintln!(
            "error: --body-memory-bytes ({}) must be at least --max-body-bytes ({}): a body of the largest size must fit",
            args.body_memory_bytes, args.max_body_bytes
        );
        return Ok(Exit::Usage);
    }
    let database_url = args
        .database_url
        .unwrap_or_else(|| format!("sqlite://{}", global.root.join("ledger.db").display()));
    let limits = Limits {
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(usize::MAX),
        max_body_bytes: usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX),
        body_memory_bytes: usize::try_from(args.body_memory_bytes).unwrap_or(usize::MAX),
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        body_timeout: Duration::from_millis(args.body_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        shutdown_timeout: Duration::from_millis(args.shutdown_timeout_ms),
        ..Limits::DEFAULT
    };
    let config = Config {
        listen: args.listen,
        providers,
        allowlist: global.allowlist_path(),
        project,
        attempt_timeout: Duration::from_millis(args.attempt_timeout_ms),
        late_window: Duration::from_millis(args.late_window_ms),
        database_url,
        database_connections: args.database_connections,
        database_timeout: Duration::from_millis(args.database_timeout_ms),
        limits,
    };
    super::allocator::tune();
    let trimmer = tokio::spawn(super::allocator::trim_forever());
    let evidence = config.evidence_line();
    let server = Server::bind(config)
        .await
        .context("conform serve cannot start")?;
    eprintln!("conform serve: {evidence}");
    if let Some(addr) = server.local_addr() {
        eprintln!("conform serve: listening on http://{addr}");
    }
    let served = server
        .run(conform_serve::orchestrator::shutdown_signal())
        .await;
    trimmer.abort();
    served.context("conform serve stopped")?;
    Ok(Exit::Ok)
}
