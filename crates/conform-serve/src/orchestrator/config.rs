//! The orchestrator's configuration: the contract's `CONFORM_*` variables.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::filed::Filed;
use conform_config::Paths;

/// Everything `conform serve` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// `CONFORM_LISTEN`, e.g. `127.0.0.1:38211`.
    pub listen: String,
    /// `CONFORM_PROVIDERS` (the URL map), and in verified mode the project's provider
    /// files ([`super::filed::providers`]).
    pub providers: Providers,
    /// `CONFORM_ALLOWLIST`: read at every failover decision.
    pub allowlist: PathBuf,
    /// The project whose suites and providers the allowlist's evidence must still match
    /// (the default); `None` reads the file as the contract does (`--unverified-allowlist`).
    pub project: Option<Paths>,
    /// `CONFORM_ATTEMPT_TIMEOUT_MS`: after this an attempt is `unknown`.
    pub attempt_timeout: Duration,
    /// `CONFORM_LATE_WINDOW_MS`: how long a late answer is still awaited after the deadline.
    pub late_window: Duration,
    /// `CONFORM_DATABASE_URL`: `sqlite:///abs/path.db` or `postgres://…`.
    pub database_url: String,
    /// Database connections per process.
    pub database_connections: u32,
    /// `CONFORM_DATABASE_TIMEOUT_MS`: how long a request waits for a database connection
    /// (and, on SQLite, for another process's write lock) before it is answered 503.
    pub database_timeout: Duration,
    /// What one client, or all of them together, can make the server spend.
    pub limits: Limits,
}

impl Config {
    /// What failover evidence is held to, for the line `conform serve` starts with.
    pub fn evidence_line(&self) -> String {
        let Some(project) = &self.project else {
            return "--unverified-allowlist: failover is decided on the allowlist's suite, provider and valid_until alone; its evidence is NOT held to a project, so any entry anyone writes permits failover".into();
        };
        let signed = match project.trust.exists() {
            true => format!(
                "only entries signed by a key in {}",
                project.trust.display()
            ),
            false => format!("entries need no signature (no {})", project.trust.display()),
        };
        format!(
            "failover evidence is held to {} and {} (with conform.toml), as `conform gate` holds it; {signed}",
            project.fixtures.display(),
            project.providers.display()
        )
    }
}

/// The HTTP layer's bounds: requests in flight, bodies in memory, and how long a
/// connection may take to say what it wants. See `docs/orchestrator.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests being handled at once (their body already read); beyond it, 503
    /// `overloaded` at once.
    pub max_in_flight: usize,
    /// The largest request body, in bytes; beyond it, 413 `body_too_large`.
    pub max_body_bytes: usize,
    /// Request bodies held in memory at once, all connections together, in bytes;
    /// beyond it, 503 `overloaded`.
    pub body_memory_bytes: usize,
    /// From the first byte of a request to the end of its headers; then 408
    /// `request_timeout` and the connection is closed.
    pub header_timeout: Duration,
    /// From the end of the headers to the end of the body; then 408 `request_timeout`.
    pub body_timeout: Duration,
    /// How long a connection may stay open without a request (new, or after an
    /// answer); then it is closed.
    pub idle_timeout: Duration,
    /// After SIGTERM: how long answers in progress may take before the process exits
    /// anyway.
    pub shutdown_timeout: Duration,
    /// Which `X-Owner-Id` bytes are taken: the contract leaves it to the orchestrator.
    pub owner_ids: OwnerIds,
}

/// What an `X-Owner-Id` may hold. The contract names no character set, so either choice
/// is conformant; `conform scenarios` reports which one an orchestrator made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OwnerIds {
    /// Visible ASCII only; anything else is 401 `owner_required` (`conform serve`).
    #[default]
    VisibleAscii,
    /// Any bytes HTTP carries: bytes outside visible ASCII, and `%`, are percent-encoded
    /// into the stored owner, so two different headers never name one owner.
    PercentEncoded,
}

impl Limits {
    /// `conform serve`'s defaults.
    pub const DEFAULT: Limits = Limits {
        max_in_flight: 256,
        max_body_bytes: 2 << 20,
        body_memory_bytes: 64 << 20,
        header_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(10),
        shutdown_timeout: Duration::from_secs(10),
        owner_ids: OwnerIds::VisibleAscii,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// `conform serve`'s default database timeout.
pub const DEFAULT_DATABASE_TIMEOUT: Duration = Duration::from_secs(2);

/// One configured provider: its name, its base URL, and the provider file it is called
/// through, if any.
#[derive(Debug, Clone)]
pub struct Provider {
    /// What jobs call it by (`provider` in a job, the allowlist's `provider`).
    pub name: String,
    /// The contract's base URL (`{base}/v1/chat/completions`); for a provider file, the
    /// file's `base_url`.
    pub base_url: String,
    /// `providers/NAME.toml`, in verified mode: the request is then its wire adapter's,
    /// with the file's settings. `None`: the contract's pass-through.
    pub filed: Option<Arc<Filed>>,
}

impl Provider {
    /// A provider known only by its address: the contract's pass-through.
    pub fn addressed(name: impl Into<String>, base_url: impl Into<String>) -> Provider {
        Provider {
            name: name.into(),
            base_url: base_url.into(),
            filed: None,
        }
    }
}

/// The configured providers, in the order given.
#[derive(Debug, Clone, Default)]
pub struct Providers(Vec<Provider>);

/// Why `CONFORM_PROVIDERS` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "CONFORM_PROVIDERS: {0} (expected comma-separated name=base_url pairs, e.g. primary=http://127.0.0.1:40001,fallback=http://127.0.0.1:40002)"
)]
pub struct ProvidersError(String);

impl Providers {
    /// Parses `name=base_url,name=base_url`.
    pub fn parse(spec: &str) -> Result<Providers, ProvidersError> {
        let mut providers: Vec<Provider> = Vec::new();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, url)) = pair.split_once('=') else {
                return Err(ProvidersError(format!("`{pair}` has no `=`")));
            };
            let (name, url) = (name.trim(), url.trim());
            if name.is_empty() {
                return Err(ProvidersError(format!("`{pair}` has no name")));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ProvidersError(format!(
                    "the base URL of `{name}` must start with http:// or https://, not `{url}`"
                )));
            }
            if providers.iter().any(|p| p.name == name) {
                return Err(ProvidersError(format!("`{name}` is given twice")));
            }
            providers.push(Provider::addressed(name, url.trim_end_matches('/')));
        }
        if providers.is_empty() {
            return Err(ProvidersError("no provider is configured".into()));
        }
        Ok(Providers(providers))
    }

    /// The providers in `list`, in its order; the names are unique.
    pub(crate) fn of(list: Vec<Provider>) -> Providers {
        Providers(list)
    }

    /// The provider a job or an attempt names, if configured.
    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.0.iter().find(|p| p.name == name)
    }

    /// Every provider, in the configured order.
    pub fn iter(&self) -> impl Iterator<Item = &Provider> {
        self.0.iter()
    }

    /// Their names, in order, for messages that list what is configured.
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|p| p.name.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_contract_example() {
        let p = Providers::parse(
            "primary=http://127.0.0.1:40001,fallback=http://127.0.0.1:40002/, rogue=http://127.0.0.1:40003",
        )
        .unwrap();
        assert_eq!(p.names(), ["primary", "fallback", "rogue"]);
        assert_eq!(
            p.get("fallback").unwrap().base_url,
            "http://127.0.0.1:40002"
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for bad in [
            "",
            "primary",
            "=http://x",
            "p=ftp://x",
            "p=http://a,p=http://b",
        ] {
            assert!(Providers::parse(bad).is_err(), "{bad}");
        }
    }
}
