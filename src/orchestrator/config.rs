//! The orchestrator's configuration: the contract's `CONFORM_*` variables.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Paths;

/// Everything `conform serve` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// `CONFORM_LISTEN`, e.g. `127.0.0.1:38211`.
    pub listen: String,
    /// `CONFORM_PROVIDERS`.
    pub providers: Providers,
    /// `CONFORM_ALLOWLIST`: read at every failover decision.
    pub allowlist: PathBuf,
    /// The project whose suites and providers the allowlist's evidence must still match
    /// (`--verify-evidence`); `None` reads the file as the contract does.
    pub project: Option<Paths>,
    /// `CONFORM_ATTEMPT_TIMEOUT_MS`: after this an attempt is `unknown`.
    pub attempt_timeout: Duration,
    /// `CONFORM_LATE_WINDOW_MS`: how long a late answer is still awaited after the deadline.
    pub late_window: Duration,
    /// `CONFORM_DATABASE_URL`: `sqlite:///abs/path.db` or `postgres://…`.
    pub database_url: String,
    /// Database connections per process.
    pub database_connections: u32,
}

/// One configured provider: its name and the base URL of its OpenAI-compatible API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub name: String,
    pub base_url: String,
}

/// The configured providers, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
            providers.push(Provider {
                name: name.to_string(),
                base_url: url.trim_end_matches('/').to_string(),
            });
        }
        if providers.is_empty() {
            return Err(ProvidersError("no provider is configured".into()));
        }
        Ok(Providers(providers))
    }

    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.0.iter().find(|p| p.name == name)
    }

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
