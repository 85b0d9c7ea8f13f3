//! Providers served through their provider files: `conform serve` in verified mode.
//!
//! An allowlist entry's evidence was made with `providers/NAME.toml`: its address, model,
//! temperature, seed, output ceiling, structured-output mode, stream and wire. In verified
//! mode a provider that has such a file is called with exactly those, through the adapter
//! `conform run` used (`request`), so a failover sends what was proven. A URL map
//! (`--providers`, `CONFORM_PROVIDERS`) that sends one of them to another address is
//! refused when the process starts, naming both addresses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::config::{Provider, Providers, ProvidersError};
use conform_config::identity::endpoint;
use conform_config::secret::Secret;
use conform_config::{Diagnostics, Paths, ProviderConfig};
use conform_wire::provider::auth::{Credentials, ProcessEnvironment};
use conform_wire::provider::{WireFormat, wire_format};

/// A provider file as `conform serve` loaded it when it started, with its adapter and
/// its key.
pub struct Filed {
    /// The file as loaded at start: what every attempt sends, whatever the file says later.
    pub config: ProviderConfig,
    /// The adapter its `wire` names, shared with `conform run`.
    pub wire: Arc<dyn WireFormat>,
    /// The key from `api_key_env`, read once; `Err(variable)` when the file names a
    /// variable that is not set.
    key: Result<Option<Secret>, String>,
    /// What authenticates each attempt of a cloud (SigV4, a service account's token), as
    /// `conform run`'s transport asks it; `Err(why)` when its credentials are not set.
    credentials: Result<Credentials, String>,
}

impl std::fmt::Debug for Filed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filed")
            .field("file", &self.config.file)
            .field("kind", &self.config.kind)
            .field("model", &self.config.model)
            .finish_non_exhaustive()
    }
}

impl Filed {
    /// Reads the key and the credentials once, now; what is missing is kept as the
    /// reason an attempt on this provider cannot be sent, not as an error to start.
    pub fn new(config: ProviderConfig) -> Filed {
        let key = match config.api_key() {
            Ok(key) => Ok(key),
            Err(_) => Err(config.api_key_env.clone().unwrap_or_default()),
        };
        let wire = wire_format(config.wire_kind());
        let credentials = wire
            .credentials(
                &config,
                key.as_ref().ok().and_then(Option::as_ref),
                &ProcessEnvironment,
            )
            .map_err(|e| e.to_string());
        Filed {
            wire,
            config,
            key,
            credentials,
        }
    }

    /// What authenticates each attempt, when the wire needs more than a key in a header;
    /// `Err` says which credentials are not set.
    pub fn credentials(&self) -> Result<&Credentials, &str> {
        self.credentials.as_ref().map_err(String::as_str)
    }

    /// The key to send, or the variable that should hold it and does not.
    pub fn key(&self) -> Result<Option<&Secret>, &str> {
        match &self.key {
            Ok(key) => Ok(key.as_ref()),
            Err(var) => Err(var),
        }
    }

    /// `providers/NAME.toml`, as `/readyz` and the problems name it.
    pub fn shown_file(&self) -> String {
        shown_file(&self.config.file)
    }

    /// What `providers/NAME.toml` says now that differs from what was loaded when the
    /// process started (each field with both values); empty when nothing does. A file
    /// that no longer loads is a change too.
    pub fn changes_since_start(&self) -> Vec<String> {
        match ProviderConfig::load(&self.config.file) {
            Ok(now) => now.identity().changes_since(&self.config.identity()),
            Err(problems) => vec![format!("it no longer loads: {problems}")],
        }
    }
}

/// Why `conform serve` does not start with the providers it was given.
#[derive(Debug, thiserror::Error)]
pub enum FiledError {
    /// The URL map sends a provider with a file to another address than the file's.
    #[error(
        "the URL map (--providers / CONFORM_PROVIDERS) sends `{provider}` to {map}, but its evidence is about {file} (base_url {filed}): a failover would reach a server nothing proved. Point the map at {filed}, or leave `{provider}` out of the map (the file's address is then used); to serve {map} instead, set it as the file's base_url and prove it with `conform run {provider}`"
    )]
    Disagrees {
        /// The provider, by name.
        provider: String,
        /// The address the map gives.
        map: String,
        /// The provider file, as shown.
        file: String,
        /// The file's `base_url`.
        filed: String,
    },
    /// A provider file does not load; every problem found is listed.
    #[error("the provider files do not load, so what they proved cannot be sent:\n{0}")]
    Unloadable(Diagnostics),
    /// The URL map names a simulated provider.
    #[error(
        "`{provider}` is a simulation ({file}, kind = \"sim\"): it has no address to serve, and its evidence never permits a failover; leave it out of the URL map"
    )]
    Simulated {
        /// The provider, by name.
        provider: String,
        /// Its file, as shown.
        file: String,
    },
    /// Neither a provider file nor a URL map.
    #[error(
        "no provider to serve: {dir} holds no provider file and no URL map was given (--providers NAME=URL,… or CONFORM_PROVIDERS)"
    )]
    NoProvider {
        /// The folder searched for provider files.
        dir: PathBuf,
    },
    /// Unverified mode without a URL map: no provider has an address.
    #[error(
        "--unverified-allowlist needs the providers' addresses: --providers NAME=URL,… or CONFORM_PROVIDERS"
    )]
    NoMap,
    /// The URL map does not parse.
    #[error(transparent)]
    Map(#[from] ProvidersError),
}

/// The providers `conform serve` calls: the URL map `map` (`name=url,…`) as the contract
/// reads it without a project (`--unverified-allowlist`), else held to the project's
/// provider files ([`providers`]).
pub fn configured(map: Option<&str>, project: Option<&Paths>) -> Result<Providers, FiledError> {
    let map = map.map(Providers::parse).transpose()?;
    match project {
        Some(paths) => providers(map, paths),
        None => map.ok_or(FiledError::NoMap),
    }
}

/// What `conform serve` says when it starts of each provider: the file it is called
/// through, or that it is passed through; and a key that is not set.
pub fn announce(providers: &Providers) -> Vec<String> {
    let mut lines = Vec::new();
    for p in providers.iter() {
        let Some(filed) = &p.filed else {
            lines.push(format!(
                "`{}` has no provider file: its jobs are passed through to {} as the contract says, and no failover to it is permitted",
                p.name,
                shown_endpoint(&p.base_url)
            ));
            continue;
        };
        let (config, file) = (&filed.config, filed.shown_file());
        lines.push(format!(
            "`{}` is called through {file} ({}, model {}, at {})",
            p.name,
            config.kind.as_str(),
            config.model,
            shown_endpoint(&config.base_url)
        ));
        if let Err(var) = filed.key() {
            lines.push(format!(
                "warning: {file} reads its key from ${var}, which is not set: attempts on `{}` fail at once (missing_api_key) until conform serve is started with it",
                p.name
            ));
        }
        if let Err(why) = filed.credentials() {
            lines.push(format!(
                "warning: {file}: {why}: attempts on `{}` fail at once (missing_credentials) until conform serve is started with them",
                p.name
            ));
        }
    }
    lines
}

/// The providers `conform serve` calls in verified mode: every name of the URL map, in
/// its order, then every provider file the map does not name. A provider that has a
/// file is called through it, at the file's `base_url`; one only in the map is the
/// contract's pass-through (failover to it is denied, `unknown_provider`). A map address
/// that is not the file's endpoint (`conform_config::identity::endpoint`, after the wire's
/// own API path, such as `/v1`, is taken off as the file's is) refuses the start.
/// Simulations (`kind = "sim"`) have no address and are not served.
pub fn providers(map: Option<Providers>, paths: &Paths) -> Result<Providers, FiledError> {
    let mut files = load(&paths.providers)?;
    let mut served = Vec::new();
    for entry in map.iter().flat_map(Providers::iter) {
        let Some(at) = files.iter().position(|c| c.name == entry.name) else {
            served.push(entry.clone());
            continue;
        };
        let config = files.remove(at);
        let file = shown_file(&config.file);
        if config.is_simulated() {
            return Err(FiledError::Simulated {
                provider: entry.name.clone(),
                file,
            });
        }
        let asked = config.kind.describe().base_url(&entry.base_url);
        if endpoint(&asked) != endpoint(&config.base_url) {
            return Err(FiledError::Disagrees {
                provider: entry.name.clone(),
                map: conform_config::secret::redact_url(&entry.base_url),
                file,
                filed: conform_config::secret::redact_url(&config.base_url),
            });
        }
        served.push(filed(config));
    }
    served.extend(files.into_iter().filter(|c| !c.is_simulated()).map(filed));
    if served.is_empty() {
        return Err(FiledError::NoProvider {
            dir: paths.providers.clone(),
        });
    }
    Ok(Providers::of(served))
}

fn filed(config: ProviderConfig) -> Provider {
    Provider {
        name: config.name.clone(),
        base_url: config.base_url.clone(),
        filed: Some(Arc::new(Filed::new(config))),
    }
}

/// `providers/NAME.toml` of the file at `path`.
fn shown_file(path: &Path) -> String {
    let name = path.file_name().unwrap_or_default();
    format!("providers/{}", name.to_string_lossy())
}

/// Every `providers/*.toml`, loaded; any that does not load refuses the start.
fn load(dir: &Path) -> Result<Vec<ProviderConfig>, FiledError> {
    let mut configs = Vec::new();
    let mut problems = Diagnostics::default();
    for name in conform_gate::allowlist::local::provider_names(dir) {
        match ProviderConfig::load(&dir.join(format!("{name}.toml"))) {
            Ok(config) => configs.push(config),
            Err(found) => problems.extend(found),
        }
    }
    match problems.is_empty() {
        true => Ok(configs),
        false => Err(FiledError::Unloadable(problems)),
    }
}

/// An address as `/readyz` shows it: no password (the user name stays), and a query's
/// values hidden, since a key may travel there.
pub fn shown_endpoint(base_url: &str) -> String {
    let Ok(mut url) = reqwest::Url::parse(base_url) else {
        return conform_config::secret::redact_url(base_url);
    };
    let _ = url.set_password(None);
    if url.query().is_some() {
        let names: Vec<String> = url.query_pairs().map(|(k, _)| format!("{k}=***")).collect();
        url.set_query(Some(&names.join("&")));
    }
    let shown = url.to_string();
    match url.path() == "/" && url.query().is_none() {
        true => shown.trim_end_matches('/').to_string(),
        false => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, Paths) {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::under(dir.path());
        std::fs::create_dir_all(&paths.providers).unwrap();
        for (name, text) in files {
            std::fs::write(paths.providers.join(format!("{name}.toml")), text).unwrap();
        }
        (dir, paths)
    }

    const FALLBACK: &str = "kind = \"openai-compatible\"\nmodel = \"qwen2.5-7b\"\nbase_url = \"http://127.0.0.1:9101\"\n";

    #[test]
    fn a_map_that_sends_a_filed_provider_elsewhere_refuses_the_start() {
        let (_dir, paths) = project(&[("fb-good", FALLBACK)]);
        let map =
            Providers::parse("claude=http://127.0.0.1:9000,fb-good=http://127.0.0.1:9102").unwrap();
        let e = providers(Some(map), &paths).unwrap_err().to_string();
        assert!(e.contains("`fb-good`"), "{e}");
        assert!(e.contains("http://127.0.0.1:9102"), "{e}");
        assert!(e.contains("http://127.0.0.1:9101"), "{e}");
        assert!(e.contains("providers/fb-good.toml"), "{e}");
    }

    #[test]
    fn the_same_endpoint_in_another_spelling_is_the_files() {
        let (_dir, paths) = project(&[("fb-good", FALLBACK)]);
        for spelled in [
            "http://127.0.0.1:9101/",
            "http://127.0.0.1:9101/v1",
            "http://127.0.0.1:9101/v1/",
        ] {
            let map =
                Providers::parse(&format!("legacy=http://10.0.0.1:1,fb-good={spelled}")).unwrap();
            let served = providers(Some(map), &paths).unwrap();
            assert_eq!(served.names(), ["legacy", "fb-good"], "{spelled}");
            assert!(served.get("legacy").unwrap().filed.is_none());
            let fb = served.get("fb-good").unwrap();
            assert_eq!(fb.base_url, "http://127.0.0.1:9101");
            assert_eq!(fb.filed.as_ref().unwrap().config.model, "qwen2.5-7b");
        }
    }

    #[test]
    fn without_a_map_the_files_are_the_providers_and_simulations_are_left_out() {
        let sim = "kind = \"sim\"\nmodel = \"m\"\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\n";
        let (_dir, paths) = project(&[("fb-good", FALLBACK), ("sim-one", sim)]);
        let served = providers(None, &paths).unwrap();
        assert_eq!(served.names(), ["fb-good"]);
        let map = Providers::parse("sim-one=http://127.0.0.1:1").unwrap();
        let e = providers(Some(map), &paths).unwrap_err().to_string();
        assert!(e.contains("simulation"), "{e}");
        let (_empty, nothing) = project(&[]);
        assert!(matches!(
            providers(None, &nothing),
            Err(FiledError::NoProvider { .. })
        ));
    }

    #[test]
    fn a_file_that_does_not_load_refuses_the_start() {
        let (_dir, paths) = project(&[("broken", "kind = \"openai-compatible\"\nmodle = \"x\"\n")]);
        let e = providers(None, &paths).unwrap_err().to_string();
        assert!(e.contains("broken.toml"), "{e}");
    }

    #[test]
    fn an_edit_since_the_start_is_named_field_by_field() {
        let (_dir, paths) = project(&[("fb-good", FALLBACK)]);
        let served = providers(None, &paths).unwrap();
        let filed = served.get("fb-good").unwrap().filed.clone().unwrap();
        assert!(filed.changes_since_start().is_empty());
        let file = paths.providers.join("fb-good.toml");
        std::fs::write(&file, format!("{FALLBACK}temperature = 1.5\n")).unwrap();
        let changes = filed.changes_since_start();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].starts_with("temperature"), "{changes:?}");
        // Operational settings change nothing that was proven.
        std::fs::write(&file, format!("{FALLBACK}timeout = \"5s\"\n")).unwrap();
        assert!(filed.changes_since_start().is_empty());
    }

    #[test]
    fn an_endpoint_is_shown_without_its_secrets() {
        assert_eq!(
            shown_endpoint("http://127.0.0.1:9101"),
            "http://127.0.0.1:9101"
        );
        assert_eq!(
            shown_endpoint("https://app:s3cret@gw.example/v1?key=AIza123&x=1"),
            "https://app@gw.example/v1?key=***&x=***"
        );
    }
}
