//! Accepting connections and serving HTTP/1.1 on them with hyper, each connection on its
//! own clock (`connection`), until shutdown: then no new connection is accepted, idle
//! ones are closed, and those answering a request finish it (hyper-util's graceful
//! shutdown), for at most the shutdown timeout.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::config::Limits;
use super::connection::{Clock, Clocked, Tracked};
use super::intake::HEAD_BUFFER_BYTES;

/// How the drain after shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Every connection finished its answer and closed.
    Clean,
    /// The shutdown timeout ran out with connections still open; they are dropped.
    TimedOut,
}

/// Serves `router` on `listener` until `shutdown` completes, then drains.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    on_shutdown: impl FnOnce(),
) -> Drained {
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .keep_alive(true)
        .max_buf_size(HEAD_BUFFER_BYTES)
        // Our clock times heads (see `connection`); hyper's would also count idle time.
        .header_read_timeout(None);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or memory: keep serving the connections we
                    // have and try again shortly, rather than spin or stop.
                    tracing::warn!(target: "conform_serve::orchestrator", error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let clock = Clock::new(limits.idle_timeout, limits.header_timeout);
        let io = TokioIo::new(Clocked::new(stream, clock.clone()));
        let service = TowerToHyperService::new(Tracked::new(router.clone(), clock));
        let connection = graceful.watch(builder.serve_connection(io, service).into_owned());
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(target: "conform_serve::orchestrator", error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    on_shutdown();
    let open = graceful.count();
    tracing::info!(target: "conform_serve::orchestrator", connections = open,
        "shutting down: no new connections; finishing the answers in progress");
    match tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown()).await {
        Ok(()) => Drained::Clean,
        Err(_) => Drained::TimedOut,
    }
}

/// Resolves on Ctrl-C or, on Unix, SIGTERM: when `conform serve` starts its graceful
/// shutdown. A signal that cannot be listened for leaves Ctrl-C.
pub async fn shutdown_signal() {
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
