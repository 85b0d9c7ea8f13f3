//! The reference orchestrator (`conform serve`): the HTTP contract
//! `conform.orchestrator/v1` (`docs/contract/ORCHESTRATOR.md`) on top of the [`ledger`].
//!
//! - [`config`]: the `CONFORM_*` settings and the provider list;
//! - [`gate`]: the allowlist, read at every failover decision, failing closed;
//! - [`identity`]: `X-Owner-Id` and the `Idempotency-Key` rules;
//! - [`problem`]: RFC 9457 errors with the contract's codes;
//! - `routes`: the endpoints; `attempt`: one upstream call per attempt, the deadline and
//!   the late window; [`upstream`]: the HTTP client and the outcome classification;
//! - [`view`]: jobs and attempts as JSON.
//!
//! A sweeper turns `starting` attempts whose stored deadline has passed into `unknown`,
//! so an attempt that was in flight when a process died keeps blocking and is never
//! sent again.
//!
//! [`ledger`]: crate::ledger

mod attempt;
pub mod config;
pub mod gate;
pub mod identity;
pub mod problem;
mod routes;
pub mod upstream;
pub mod view;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

pub use config::{Config, Provider, Providers};

use crate::ledger::{Ledger, LedgerError, LedgerOptions};
use upstream::{SetupError, Upstream};

/// What every handler and attempt shares.
pub(crate) struct App {
    pub(crate) config: Config,
    pub(crate) ledger: Ledger,
    pub(crate) upstream: Upstream,
}

/// Why the orchestrator could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("cannot listen on {addr}: {error} (set CONFORM_LISTEN or --listen to a free address)")]
    Bind { addr: String, error: std::io::Error },
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("the HTTP server failed: {0}")]
    Http(std::io::Error),
}

/// An orchestrator with its ledger open and its address bound, ready to serve.
pub struct Server {
    app: Arc<App>,
    listener: TcpListener,
}

impl Server {
    /// Opens (and migrates) the ledger and binds `config.listen`.
    pub async fn bind(config: Config) -> Result<Server, ServeError> {
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|error| ServeError::Bind {
                    addr: config.listen.clone(),
                    error,
                })?;
        Server::on(config, listener).await
    }

    /// Like [`Server::bind`] on a listener the caller bound (tests bind port 0).
    pub async fn on(config: Config, listener: TcpListener) -> Result<Server, ServeError> {
        let options = LedgerOptions {
            max_connections: config.database_connections,
            ..LedgerOptions::default()
        };
        let ledger = Ledger::connect(&config.database_url, &options).await?;
        let upstream = Upstream::new()?;
        Ok(Server {
            app: Arc::new(App {
                config,
                ledger,
                upstream,
            }),
            listener,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The ledger this server writes to.
    pub fn ledger(&self) -> &Ledger {
        &self.app.ledger
    }

    /// Serves until `shutdown` completes. Attempts still in flight then are abandoned
    /// exactly as in a crash: they stay `starting` until their deadline, then `unknown`.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let sweeper = tokio::spawn(sweep(self.app.clone()));
        tracing::info!(target: "conform::orchestrator", addr = ?self.local_addr(),
            backend = ?self.app.ledger.backend(), "accepting requests");
        let served = axum::serve(self.listener, routes::router(self.app.clone()))
            .with_graceful_shutdown(shutdown)
            .await;
        sweeper.abort();
        served.map_err(ServeError::Http)
    }
}

/// Turns overdue `starting` attempts into `unknown`, whichever process started them.
async fn sweep(app: Arc<App>) {
    let period =
        (app.config.attempt_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = app.ledger.expire_overdue().await {
            tracing::warn!(target: "conform::orchestrator", error = %e, "cannot expire overdue attempts");
        }
    }
}
