//! `conform serve`: the reference orchestrator.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

use conform::orchestrator::{Config, Providers, Server};

use super::{EXIT_CONFIG, EXIT_OK, Global};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "CONFORM_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Comma-separated name=base_url pairs of OpenAI-compatible providers.
    #[arg(long, env = "CONFORM_PROVIDERS", value_name = "NAME=URL,...")]
    pub providers: String,
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
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub database_connections: u32,
    /// Also hold every allowlist entry to ROOT/fixtures/TASK and ROOT/providers/PROVIDER.toml
    /// as they are now, exactly as `conform gate` does (a changed suite or provider
    /// configuration denies failover). Without it the allowlist is read as the
    /// orchestrator contract reads it: suite, provider and valid_until.
    #[arg(long, env = "CONFORM_VERIFY_EVIDENCE")]
    pub verify_evidence: bool,
}

pub async fn serve(global: &Global, args: ServeArgs) -> anyhow::Result<u8> {
    // BROKEN VARIANT (tests only): say loudly which one runs, refuse unknown names.
    if let Err(e) = conform::broken::announce() {
        eprintln!("error: {e}");
        return Ok(EXIT_CONFIG);
    }
    let providers = match Providers::parse(&args.providers) {
        Ok(providers) => providers,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_CONFIG);
        }
    };
    let database_url = args
        .database_url
        .unwrap_or_else(|| format!("sqlite://{}", global.root.join("ledger.db").display()));
    let config = Config {
        listen: args.listen,
        providers,
        allowlist: global.allowlist_path(),
        project: args.verify_evidence.then(|| global.paths()),
        attempt_timeout: Duration::from_millis(args.attempt_timeout_ms),
        late_window: Duration::from_millis(args.late_window_ms),
        database_url,
        database_connections: args.database_connections,
    };
    let server = Server::bind(config)
        .await
        .context("conform serve cannot start")?;
    if let Some(addr) = server.local_addr() {
        eprintln!("conform serve: listening on http://{addr}");
    }
    server
        .run(shutdown_signal())
        .await
        .context("conform serve stopped")?;
    Ok(EXIT_OK)
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
