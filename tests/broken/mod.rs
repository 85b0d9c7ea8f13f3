//! Deliberately broken variants of the reference orchestrator, built from the library's
//! seams (`conform_serve::orchestrator::Seams`): each replaces one seam of `conform serve` with
//! a decorator of the real one that breaks one rule of the contract, or narrows one
//! setting, so `tests/scenarios_teeth.rs` can prove `conform scenarios` catches it; and
//! two lenient variants that choose otherwise where the contract is silent, which must
//! pass every scenario. None of this is in the production build.
//!
//! One file per seam: [`store`] (the ledger operations), [`upstream`] (the provider
//! call), [`gate`] (the failover decision), [`intake`] (body parsing, body reading and the
//! overload answer); [`db`] is the back door into the database that a decorator needs
//! for what the ledger's API (rightly) cannot do.

pub mod db;
pub mod gate;
pub mod intake;
pub mod store;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use conform_serve::orchestrator::config::DEFAULT_DATABASE_TIMEOUT;
use conform_serve::orchestrator::{Config, Limits, OwnerIds, Providers, Seams, Server};

use db::Db;

/// Every variant, by the name the teeth test gives it.
pub const ALL: [&str; 20] = [
    "check-then-insert",
    "ignored-fingerprint",
    "timeout-marked-failed",
    "retry-after-timeout",
    "last-writer-wins",
    "no-open-attempt-guard",
    "allowlist-ignored",
    "allowlist-fails-open",
    "owner-leak",
    "hidden-retries",
    "cancel-keeps-blocking",
    "late-result-overwrites",
    "replay-retries-idle",
    "oversized-aborts",
    "deep-nesting-panics",
    "lossy-utf8",
    "serialized-body-reads",
    "plain-overload",
    // Lenient but conformant: where the contract is silent they choose otherwise than
    // `conform serve`, and must pass every scenario.
    "no-body-limit",
    "percent-encoded-owners",
];

/// The name of the orchestrator with every seam real, for proving that what this
/// harness serves passes the whole suite before any variant is held to it.
pub const NONE: &str = "none";

/// Breaks `seams` (or `config`) the way `variant` says; `false` for an unknown name.
pub fn apply(variant: &str, config: &mut Config, seams: &mut Seams, db: &Arc<Db>) -> bool {
    let store = Arc::clone(&seams.store);
    match variant {
        NONE => {}
        "check-then-insert" => {
            seams.store = store::decorated(store::CheckThenInsert::new(store, Arc::clone(db)))
        }
        "ignored-fingerprint" => {
            seams.store = store::decorated(store::IgnoredFingerprint::new(store))
        }
        "timeout-marked-failed" => {
            seams.store = store::decorated(store::TimeoutMarkedFailed::new(store))
        }
        "last-writer-wins" => {
            seams.store = store::decorated(store::LastWriterWins::new(store, Arc::clone(db)))
        }
        "late-result-overwrites" => {
            seams.store = store::decorated(store::LateResultOverwrites::new(store, Arc::clone(db)))
        }
        "no-open-attempt-guard" => {
            seams.store = store::decorated(store::NoOpenAttemptGuard::new(store))
        }
        "owner-leak" => {
            seams.store = store::decorated(store::OwnerLeak::new(store, Arc::clone(db)))
        }
        "cancel-keeps-blocking" => {
            seams.store = store::decorated(store::CancelKeepsBlocking::new(store, Arc::clone(db)))
        }
        "replay-retries-idle" => {
            seams.store = store::decorated(store::ReplayRetriesIdle::new(
                store,
                Arc::clone(&seams.upstream),
                config.providers.clone(),
                config.late_window,
            ))
        }
        "retry-after-timeout" => {
            seams.upstream = Arc::new(upstream::RetryAfterTimeout::new(
                Arc::clone(&seams.upstream),
                config.attempt_timeout,
            ))
        }
        "hidden-retries" => {
            seams.upstream = Arc::new(upstream::HiddenRetries::new(Arc::clone(&seams.upstream)))
        }
        "allowlist-ignored" => seams.gate = Arc::new(gate::AllowlistIgnored),
        "allowlist-fails-open" => {
            seams.gate = Arc::new(gate::AllowlistFailsOpen::new(Arc::clone(&seams.gate)))
        }
        // The limit is configuration: the variant is the orchestrator without one, which
        // the contract allows (it sets no size).
        "no-body-limit" => config.limits.max_body_bytes = usize::MAX,
        "percent-encoded-owners" => config.limits.owner_ids = OwnerIds::PercentEncoded,
        "oversized-aborts" => {
            seams.intake = Arc::new(intake::OversizedAborts::new(Arc::clone(&seams.intake)))
        }
        "deep-nesting-panics" => {
            seams.parser = Arc::new(intake::DeepNestingPanics::new(Arc::clone(&seams.parser)))
        }
        "lossy-utf8" => seams.parser = Arc::new(intake::LossyUtf8::new(Arc::clone(&seams.parser))),
        "serialized-body-reads" => {
            seams.intake = Arc::new(intake::SerializedBodyReads::new(Arc::clone(&seams.intake)))
        }
        "plain-overload" => {
            config.limits.max_in_flight = intake::PLAIN_OVERLOAD_SLOTS;
            seams.overload = Arc::new(intake::PlainOverload);
        }
        _ => return false,
    }
    true
}

/// `scenarios_teeth serve-broken VARIANT`: the orchestrator `conform scenarios --spawn`
/// starts, configured by the contract's `CONFORM_*` variables as `conform serve
/// --unverified-allowlist` is, with `VARIANT` applied; it serves until SIGTERM or
/// Ctrl-C (SIGKILL, for the crash scenario, needs nothing). Answers the exit code: 2 for
/// an unknown variant or a missing variable, as `conform serve` answers a usage error.
pub fn serve(variant: Option<&str>) -> u8 {
    let Some(variant) = variant.filter(|v| *v == NONE || ALL.contains(v)) else {
        eprintln!(
            "error: {variant:?} is not a broken variant; the variants are: {NONE}, {}",
            ALL.join(", ")
        );
        return 2;
    };
    let config = match config_from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "warn,conform_serve::ledger=info,conform_serve::orchestrator=info",
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        if variant != NONE {
            eprintln!(
                "WARNING: broken variant {variant}: this orchestrator is DELIBERATELY BROKEN, for testing conform scenarios"
            );
        }
        match run(variant, config).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e}");
                1
            }
        }
    })
}

async fn run(variant: &str, mut config: Config) -> Result<(), String> {
    let mut seams = Seams::real(&config).await.map_err(|e| e.to_string())?;
    let db = Arc::new(
        Db::connect(&config.database_url)
            .await
            .map_err(|e| format!("cannot open the back door into the database: {e}"))?,
    );
    apply(variant, &mut config, &mut seams, &db);
    let server = Server::bind_with(config, seams)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(addr) = server.local_addr() {
        eprintln!("scenarios_teeth serve-broken {variant}: listening on http://{addr}");
    }
    server.run(shutdown()).await.map_err(|e| e.to_string())
}

async fn shutdown() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(terminate) => terminate,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

/// The variables `conform scenarios --spawn` sets, read as `conform serve` reads them;
/// everything else at `conform serve`'s defaults.
fn config_from_env() -> Result<Config, String> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let millis = |name: &str| -> Result<Duration, String> {
        let text = var(name)?;
        text.trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{name}={text}: {e}"))
    };
    Ok(Config {
        listen: var("CONFORM_LISTEN")?,
        providers: Providers::parse(&var("CONFORM_PROVIDERS")?).map_err(|e| e.to_string())?,
        allowlist: var("CONFORM_ALLOWLIST")?.into(),
        project: None,
        attempt_timeout: millis("CONFORM_ATTEMPT_TIMEOUT_MS")?,
        late_window: millis("CONFORM_LATE_WINDOW_MS")?,
        database_url: var("CONFORM_DATABASE_URL")?,
        database_connections: 8,
        database_timeout: DEFAULT_DATABASE_TIMEOUT,
        limits: Limits::DEFAULT,
    })
}
