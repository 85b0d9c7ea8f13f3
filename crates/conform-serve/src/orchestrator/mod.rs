//! The reference orchestrator (`conform serve`): the HTTP contract
//! `conform.orchestrator/v1` (`docs/contract/ORCHESTRATOR.md`) on top of the [`ledger`].
//!
//! - [`config`]: the `CONFORM_*` settings and the provider list; [`filed`]: in verified
//!   mode, the providers called through their provider files, the URL map held to them;
//! - [`gate`]: the allowlist, read at every failover decision, failing closed;
//!   `question`: the same decision asked over HTTP (`GET /v1/gate`), for gateways;
//! - `identity`: `X-Owner-Id` and the `Idempotency-Key` rules;
//! - [`problem`]: RFC 9457 errors with the contract's codes;
//! - `listen`: accepting connections and graceful shutdown; `connection`: each
//!   connection's idle and header timeouts; [`intake`]: header size, and bodies read once
//!   within the body timeout, the size limit and the memory budget;
//! - `routes`: the endpoints, behind the in-flight limit; `attempt`: one upstream call
//!   per attempt, the deadline and the late window; `request`: a job's input as a
//!   provider file's adapter sends it; [`upstream`]: the HTTP client and the outcome
//!   classification;
//! - `view`: jobs and attempts as JSON;
//! - [`allocator`]: glibc's allocator told to give freed memory back under load.
//!
//! What the routes and attempts rely on is reached through [`Seams`], one small trait
//! each: the job [`store`], the [`upstream`], the failover [`gate`], the body
//! [`parser`], the body [`intake`] and the [`overload`] answer. [`Server::bind`] uses the
//! real ones; [`Server::bind_with`] takes others, so a test can break one rule at a time
//! and prove the scenarios notice.
//!
//! A sweeper turns `starting` attempts whose stored deadline has passed into `unknown`,
//! so an attempt that was in flight when a process died keeps blocking and is never
//! sent again.
//!
//! [`ledger`]: crate::ledger

pub mod allocator;
mod attempt;
pub mod config;
mod connection;
pub mod filed;
pub mod gate;
mod identity;
pub mod intake;
mod listen;
pub mod overload;
pub mod parser;
pub mod problem;
mod question;
mod request;
mod routes;
pub mod store;
pub mod upstream;
mod view;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use config::{Config, Limits, OwnerIds, Provider, Providers};
pub use listen::shutdown_signal;

use crate::ledger::{Ledger, LedgerError, LedgerOptions};
use gate::{AllowlistGate, FailoverGate};
use intake::{BodyIntake, BudgetedIntake};
use overload::{Overload, ProblemOverload};
use parser::{BodyParser, StrictJson};
use store::JobStore;
use upstream::{HttpUpstream, SetupError, Upstream};

/// What the orchestrator's rules are applied through. [`Seams::real`] is `conform
/// serve`'s; a field replaced by a decorator of the real one changes that one concern.
#[derive(Clone)]
pub struct Seams {
    /// Where jobs and attempts are kept.
    pub store: Arc<dyn JobStore>,
    /// How an attempt reaches its provider.
    pub upstream: Arc<dyn Upstream>,
    /// Whether an attempt may go to a provider other than the job's.
    pub gate: Arc<dyn FailoverGate>,
    /// The allowlist as `GET /v1/gate` reads it: the real gate, which `gate` is too unless
    /// a decorator replaced it (a test's broken failover changes failover alone).
    pub allowlist: Arc<AllowlistGate>,
    /// How a request body becomes JSON.
    pub parser: Arc<dyn BodyParser>,
    /// How a request body is read, within the limits and the memory budget.
    pub intake: Arc<dyn BodyIntake>,
    /// The answer to a request shed by the in-flight limit.
    pub overload: Arc<dyn Overload>,
}

impl Seams {
    /// The ledger at `config.database_url` (opened and migrated), the HTTP client, the
    /// allowlist gate, strict JSON, the budgeted intake and the problem answer.
    pub async fn real(config: &Config) -> Result<Seams, ServeError> {
        let options = LedgerOptions {
            max_connections: config.database_connections,
            busy_timeout: config.database_timeout,
            acquire_timeout: config.database_timeout,
        };
        let ledger = Ledger::connect(&config.database_url, &options).await?;
        // One gate for both: what it remembered for one is remembered for the other.
        let allowlist = Arc::new(AllowlistGate::new(
            config.allowlist.clone(),
            config.project.clone(),
            Some(ledger.clone()),
        ));
        Ok(Seams {
            gate: allowlist.clone(),
            allowlist,
            store: Arc::new(ledger),
            upstream: Arc::new(HttpUpstream::new()?),
            parser: Arc::new(StrictJson),
            intake: Arc::new(BudgetedIntake::new(config.limits)),
            overload: Arc::new(ProblemOverload),
        })
    }
}

/// What every handler and attempt shares.
pub(crate) struct App {
    pub(crate) config: Config,
    pub(crate) store: Arc<dyn JobStore>,
    pub(crate) upstream: Arc<dyn Upstream>,
    pub(crate) gate: Arc<dyn FailoverGate>,
    pub(crate) allowlist: Arc<AllowlistGate>,
    pub(crate) parser: Arc<dyn BodyParser>,
    /// Request bodies, read within the limits and the memory budget.
    pub(crate) intake: Arc<dyn BodyIntake>,
    pub(crate) overload: Arc<dyn Overload>,
    /// In-flight slots (`Limits::max_in_flight`).
    pub(crate) slots: Arc<Semaphore>,
    /// Set once shutdown has begun: `/readyz` says so.
    pub(crate) draining: AtomicBool,
    /// One readiness probe at a time; the others wait for its answer.
    probe: tokio::sync::Mutex<Option<(tokio::time::Instant, Result<(), String>)>>,
}

/// How long a readiness answer is reused: probes from many load balancers cost one
/// database round trip.
const PROBE_REUSE: Duration = Duration::from_millis(250);

impl App {
    /// Whether the database takes writes now (see [`Ledger::ready`]), bounded by the
    /// database timeout.
    pub(crate) async fn ready(&self) -> Result<(), LedgerError> {
        let mut last = self.probe.lock().await;
        if let Some((at, answer)) = &*last
            && at.elapsed() < PROBE_REUSE
        {
            return answer.clone().map_err(LedgerError::Write);
        }
        let limit = self.config.database_timeout * 2;
        let answer = match tokio::time::timeout(limit, self.store.ready()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "the database did not answer within {} ms",
                limit.as_millis()
            )),
        };
        *last = Some((tokio::time::Instant::now(), answer.clone()));
        answer.map_err(LedgerError::Write)
    }
}

/// Why the orchestrator could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The ledger did not open or migrate.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The address is taken, not local, or does not resolve.
    #[error("cannot listen on {addr}: {error} (set CONFORM_LISTEN or --listen to a free address)")]
    Bind {
        /// The address asked for (`CONFORM_LISTEN`).
        addr: String,
        /// What the operating system answered.
        error: std::io::Error,
    },
    /// The HTTP client for providers could not be built.
    #[error(transparent)]
    Setup(#[from] SetupError),
}

/// An orchestrator with its ledger open and its address bound, ready to serve.
pub struct Server {
    app: Arc<App>,
    listener: TcpListener,
}

impl Server {
    /// Opens (and migrates) the ledger and binds `config.listen` (see [`listener`]).
    pub async fn bind(config: Config) -> Result<Server, ServeError> {
        let listener = bound(&config).await?;
        Server::on(config, listener).await
    }

    /// Like [`Server::bind`] with the given seams in place of the real ones.
    pub async fn bind_with(config: Config, seams: Seams) -> Result<Server, ServeError> {
        let listener = bound(&config).await?;
        Ok(Server::on_with(config, listener, seams))
    }

    /// Like [`Server::bind`] on a listener the caller bound (tests bind port 0).
    pub async fn on(config: Config, listener: TcpListener) -> Result<Server, ServeError> {
        let seams = Seams::real(&config).await?;
        Ok(Server::on_with(config, listener, seams))
    }

    /// Like [`Server::on`] with the given seams in place of the real ones.
    pub fn on_with(config: Config, listener: TcpListener, seams: Seams) -> Server {
        let Seams {
            store,
            upstream,
            gate,
            allowlist,
            parser,
            intake,
            overload,
        } = seams;
        Server {
            app: Arc::new(App {
                slots: Arc::new(Semaphore::new(
                    config.limits.max_in_flight.min(Semaphore::MAX_PERMITS),
                )),
                draining: AtomicBool::new(false),
                probe: tokio::sync::Mutex::new(None),
                config,
                store,
                upstream,
                gate,
                allowlist,
                parser,
                intake,
                overload,
            }),
            listener,
        }
    }

    /// The address it listens on, with the port the system chose for port 0.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `shutdown` completes, then stops accepting connections, closes the
    /// idle ones and lets those answering a request finish (at most the shutdown
    /// timeout). Attempts still in flight are then abandoned exactly as in a crash: they
    /// stay `starting` until their deadline, then `unknown`, and are never sent again.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        if self.app.config.project.is_some() {
            for line in filed::announce(&self.app.config.providers) {
                tracing::info!(target: "conform_serve::orchestrator", "{line}");
            }
        }
        let sweeper = tokio::spawn(sweep(self.app.clone()));
        tracing::info!(target: "conform_serve::orchestrator", addr = ?self.local_addr(),
            backend = ?self.app.store.backend(), "accepting requests");
        let app = self.app.clone();
        let drained = listen::serve(
            self.listener,
            routes::router(self.app.clone()),
            self.app.config.limits,
            shutdown,
            move || app.draining.store(true, Ordering::Relaxed),
        )
        .await;
        sweeper.abort();
        // A clean close checkpoints SQLite's WAL; bounded, since an attempt abandoned in
        // flight may still hold a connection.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.app.store.close()).await;
        if drained == listen::Drained::TimedOut {
            tracing::warn!(target: "conform_serve::orchestrator",
                timeout_ms = self.app.config.limits.shutdown_timeout.as_millis() as u64,
                "the shutdown timeout ran out with answers still in progress; they were dropped");
        }
        Ok(())
    }
}

/// The listener on `config.listen`, bound before the ledger is opened so a taken address
/// is reported without touching the database.
async fn bound(config: &Config) -> Result<TcpListener, ServeError> {
    listener(&config.listen)
        .await
        .map_err(|error| ServeError::Bind {
            addr: config.listen.clone(),
            error,
        })
}

/// Connections the kernel completes and queues before the server accepts them.
const BACKLOG: u32 = 4096;

/// A listener on `addr` (`host:port`, the first address it resolves to) whose queue
/// holds a burst of [`BACKLOG`] new connections (the kernel caps it at
/// `net.core.somaxconn`). tokio's own `bind` queues 128: a burst beyond that has its
/// handshakes dropped, and those clients wait one to seven seconds for the kernel to
/// retry, believing they are connected.
pub async fn listener(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(addr).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return socket.listen(BACKLOG),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    }))
}

/// Turns overdue `starting` attempts into `unknown`, whichever process started them.
async fn sweep(app: Arc<App>) {
    let period =
        (app.config.attempt_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = app.store.expire_overdue().await {
            tracing::warn!(target: "conform_serve::orchestrator", error = %e, "cannot expire overdue attempts");
        }
    }
}
