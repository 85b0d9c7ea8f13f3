//! `conform scenarios --gateway litellm|portkey|tensorzero`: does the gateway that carries the
//! traffic fail over only to proven fallbacks, and never hand the client a broken answer
//! as complete?
//!
//! - `upstream`: mock upstreams on loopback speaking OpenAI Chat byte for byte, faults
//!   framed as real ones are;
//! - `config`: the gateway's configuration, written with `conform export`'s code and
//!   decision (plus a revoked candidate in the model list and in no fallback list);
//! - `client`: the application in front of the gateway, and when what it received is
//!   complete;
//! - `tensorzero`: TensorZero's config, and how its client names a model;
//! - `team` and `own`: the team's own config (`--gateway-config`), read, rewritten to
//!   reach the mocks, and held to the allowlist;
//! - `ctx` and `scenarios`: one scenario's context and evidence, and the scenarios;
//!   `stream_faults`: the stream fault classes' scenarios;
//! - this file: the run: upstreams, config, the gateway started (`--spawn`, with
//!   `{config}` and `{port}` filled) or reached (`--target`), the scenarios one after
//!   another, the same `SuiteReport` as the orchestrator scenarios.

pub(crate) mod client;
mod config;
mod ctx;
mod own;
mod scenarios;
mod stream_faults;
mod team;
mod tensorzero;
pub(crate) mod upstream;

pub use own::Team;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::api::Api;
use super::evidence::{Evidence, Outcome};
use super::runner::{FORMAT, SuiteReport, UnknownScenario};
use super::spawn::{Launch, SpawnError, Spawned};
use super::workdir::free_port;
use config::{GATEWAY_KEY, MODELS, PRIMARY};

/// `conform scenarios --help`'s closing lines.
pub const HELP: &str = "Examples:\n  \
conform scenarios --spawn 'conform serve --unverified-allowlist'\n  \
conform scenarios --spawn 'conform serve --unverified-allowlist' --database-url postgres://postgres@127.0.0.1:5432/test\n  \
conform scenarios --target http://127.0.0.1:8080 --allowlist /srv/allowlist.json \\\n    \
--mock-ports primary=40001,fallback=40002,rogue=40003,faulty=40004,dead=40005\n  \
conform scenarios --list\n  \
conform scenarios --gateway litellm --spawn 'litellm --config {config} --port {port}'\n  \
conform scenarios --gateway portkey --spawn 'npx @portkey-ai/gateway --port={port} --headless'\n  \
conform scenarios --gateway tensorzero --spawn 'python3 scripts/tensorzero-gateway.py {config}'\n\n\
With --gateway, conform starts mock upstreams (primary, fallback, and a revoked candidate), \
writes the gateway's config with the code of `conform export` ({config}), starts the gateway \
on {port} (or learns the URL a command without {port} prints), and checks that it fails over only to the allowlisted fallback and never hands the \
client a broken answer as complete (docs/gateways.md). With --gateway-config FILE, the team's \
own config is tested instead: its models pointed at the mocks, every other setting kept, \
its fallback lists held to the allowlist.\n\n\
Exit codes: 0 every selected scenario passed, 1 a scenario failed, 2 usage error, \
3 the orchestrator or gateway could not be started or reached, or the run was interrupted.";

/// The gateways the scenarios know how to configure and talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// LiteLLM's proxy, configured in YAML.
    Litellm,
    /// Portkey's gateway: each request carries its model's config in a header.
    Portkey,
    /// TensorZero, configured in TOML, reached through its OpenAI-compatible endpoint.
    Tensorzero,
}

impl Kind {
    /// Every gateway, in the order the command line lists them.
    pub const ALL: [Kind; 3] = [Kind::Litellm, Kind::Portkey, Kind::Tensorzero];

    /// Its `--gateway` argument, also the name reports give it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Litellm => "litellm",
            Kind::Portkey => "portkey",
            Kind::Tensorzero => "tensorzero",
        }
    }

    /// The gateway called `name` (`--gateway NAME`).
    pub fn parse(name: String) -> Result<Kind, String> {
        (Kind::ALL.into_iter())
            .find(|k| k.name() == name)
            .ok_or_else(|| format!("no gateway is called {name}"))
    }

    /// The path that answers 200 once the gateway is up.
    fn health(self) -> &'static str {
        match self {
            Kind::Litellm => "/health/liveliness",
            Kind::Portkey => "/",
            Kind::Tensorzero => tensorzero::CHAT_PATH,
        }
    }

    /// What the health path answers once the gateway is up.
    fn health_status(self) -> u16 {
        match self {
            Kind::Tensorzero => tensorzero::HEALTH_STATUS,
            _ => 200,
        }
    }

    /// The config file's name in the working folder.
    fn config_file(self) -> &'static str {
        match self {
            Kind::Litellm => "litellm-config.yaml",
            Kind::Portkey => "portkey-config.json",
            Kind::Tensorzero => "tensorzero.toml",
        }
    }

    /// Where the client posts its chat completions, after the gateway's URL.
    fn chat_path(self) -> &'static str {
        match self {
            Kind::Tensorzero => tensorzero::CHAT_PATH,
            _ => "/v1/chat/completions",
        }
    }

    /// What the client puts before a model's name.
    fn model_prefix(self) -> &'static str {
        match self {
            Kind::Tensorzero => tensorzero::MODEL_PREFIX,
            _ => "",
        }
    }
}

/// Which gateway to test, and how.
#[derive(Debug, Clone)]
pub struct Request {
    /// The gateway, which decides the config written and the paths asked.
    pub kind: Kind,
    /// Start it with this command (`sh -c`), `{config}` and `{port}` filled in.
    pub spawn: Option<String>,
    /// Or test the one already running at this URL (configured with the file this run
    /// writes, the upstreams on the ports `mock_ports` fixes).
    pub target: Option<String>,
    /// Fixed loopback ports for the upstreams, by model (`primary=40001,...`): a gateway
    /// configured beforehand (`--target`) must find them where its config says.
    pub mock_ports: Option<BTreeMap<String, u16>>,
    /// The gateway's per-request timeout, as its config says.
    pub timeout: Duration,
    /// How long a spawned gateway may take to answer its health path.
    pub startup: Duration,
    /// Test the team's own config instead of the generated one.
    pub team: Option<own::Team>,
}

/// Why a gateway run could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Neither `--spawn` nor `--target`: there is no gateway to test.
    #[error(
        "say which gateway to test: --spawn 'COMMAND' (with {{config}} and {{port}}) or --target URL"
    )]
    NoGateway,
    /// `--target` without the upstream ports its config was written for.
    #[error(
        "--gateway with --target needs --mock-ports naming the upstream of every model the gateway \
         was configured with: primary, fallback, revoked, and unreachable (a port nothing listens on) \
         (e.g. --mock-ports primary=40001,fallback=40002,revoked=40003,unreachable=40004)"
    )]
    MissingPorts,
    /// A loopback port could not be taken.
    #[error("cannot listen on loopback for the {model} upstream: {source}")]
    Listen {
        /// The upstream's model (or `gateway`, for the spawned gateway's port).
        model: String,
        /// The socket's error.
        #[source]
        source: std::io::Error,
    },
    /// The gateway's config, or the allowlist it is exported from, could not be written.
    #[error("cannot write the gateway config {}: {source}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// The write's error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client (the application's, or the health check's) could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The gateway did not start (offline, say): the run is inconclusive, and says why.
    #[error("the gateway did not start: {0}")]
    Spawn(#[source] SpawnError),
    /// The gateway at `--target` is not up: the run is inconclusive.
    #[error("{url}{health} does not answer 200: is the gateway running?")]
    Unhealthy {
        /// `--target`, without a trailing slash.
        url: String,
        /// The path asked, which a running gateway answers.
        health: &'static str,
    },
    /// The team's config cannot be read or used.
    #[error(transparent)]
    Team(team::TeamError),
    /// The team's config (this file) lists no fallbacks, so failover cannot be tested.
    #[error(
        "{}: no model has a fallback list to fail over to: there is nothing to test",
        .0.display()
    )]
    NoFallbacks(PathBuf),
    /// `--gateway-primary` names no model of the team's config that has fallbacks.
    #[error("--gateway-primary {name}: {} has no fallback list for it (it has: {known})", path.display())]
    UnknownPrimary {
        /// `--gateway-primary`.
        name: String,
        /// The team's config.
        path: PathBuf,
        /// The names it could have been, comma-separated.
        known: String,
    },
    /// `--allowlist` cannot decide the config's fallbacks (unreadable, or its entries do
    /// not match the project's suites and providers).
    #[error("cannot hold the config's fallbacks to the allowlist {}: {problems}", path.display())]
    Allowlist {
        /// `--allowlist`.
        path: PathBuf,
        /// What is wrong with it, `; `-separated.
        problems: String,
    },
}

impl GatewayError {
    /// The gateway, not the options, is at fault.
    pub fn inconclusive(&self) -> bool {
        matches!(
            self,
            GatewayError::Spawn(_) | GatewayError::Unhealthy { .. }
        )
    }

    /// What the user gave is at fault (a bad config file, say): exit 2.
    pub fn usage(&self) -> bool {
        matches!(
            self,
            GatewayError::Team(_)
                | GatewayError::NoFallbacks(_)
                | GatewayError::UnknownPrimary { .. }
                | GatewayError::Allowlist { .. }
        )
    }
}

impl Request {
    pub(crate) fn check(&self) -> Result<(), GatewayError> {
        if self.spawn.is_none() && self.target.is_none() {
            return Err(GatewayError::NoGateway);
        }
        if self.target.is_some()
            && !MODELS
                .iter()
                .chain(&[config::UNREACHABLE])
                .all(|m| self.mock_ports.as_ref().is_some_and(|p| p.contains_key(*m)))
        {
            return Err(GatewayError::MissingPorts);
        }
        Ok(())
    }
}

/// The scenarios `only` names (all when empty), minus `skip`.
pub(crate) fn select(
    only: &[String],
    skip: &[String],
) -> Result<Vec<scenarios::Def>, UnknownScenario> {
    let all = scenarios::all();
    let known: Vec<&str> = all.iter().map(|d| d.name).collect();
    if let Some(name) = only
        .iter()
        .chain(skip)
        .find(|n| !known.contains(&n.as_str()))
    {
        return Err(UnknownScenario {
            name: name.clone(),
            known: known.join(", "),
        });
    }
    Ok(all
        .into_iter()
        .filter(|d| only.is_empty() || only.iter().any(|n| n == d.name))
        .filter(|d| !skip.iter().any(|n| n == d.name))
        .collect())
}

/// A gateway reached, with its upstreams running.
pub(crate) struct Session {
    env: Arc<ctx::Env>,
    spawned: Option<Spawned>,
    upstreams: config::Upstreams,
    /// The config file written.
    pub config: PathBuf,
    pub timeout: Duration,
    kind: Kind,
    /// With the team's config: its fallbacks held to the allowlist, as a scenario.
    gate: Option<super::evidence::Evidence>,
}

impl Session {
    /// Starts the upstreams, writes the config, and starts or reaches the gateway.
    pub(crate) async fn start(request: &Request, work: &Path) -> Result<Session, GatewayError> {
        let own = (request.team.as_ref())
            .map(|team| own::Own::prepare(team, request.kind, work))
            .transpose()?;
        let board = upstream::Board::default();
        let others = own.as_ref().map(own::Own::others).unwrap_or_default();
        let upstreams = start_upstreams(request, &board, &others).await?;
        let path = work.join(request.kind.config_file());
        let (headers, per_model) = match &own {
            Some(own) => (own.write(&upstreams, &path)?, Vec::new()),
            None => write_config(request, &upstreams, &path)?,
        };
        let vars = own.as_ref().map(own::Own::vars).unwrap_or_default();
        let (url, spawned) = reach(request, &path, work, vars).await?;
        let mut client = client::Client::new(format!("{url}{}", request.kind.chat_path()), headers)
            .map_err(GatewayError::Client)?
            .with_model_prefix(request.kind.model_prefix());
        for (model, headers) in per_model {
            client = client.for_model(&model, headers);
        }
        let mut gateway = format!("{} at {url}", request.kind.name());
        if let Some(own) = &own {
            client = client.with_names(vec![(PRIMARY.to_string(), own.ask.clone())]);
            gateway.push_str(&format!(" with {}", own.config.path.display()));
        }
        Ok(Session {
            env: Arc::new(ctx::Env {
                board,
                client,
                timeout: request.timeout,
                gateway,
                team: own.as_ref().map(|own| ctx::Team {
                    aliases: own.aliases(),
                }),
                retries: own
                    .as_ref()
                    .map_or(config::RETRIES, |own| own.config.retries),
            }),
            spawned,
            upstreams,
            config: path,
            timeout: request.timeout,
            kind: request.kind,
            gate: own.as_ref().map(own::Own::evidence),
        })
    }
}

/// Headers for every request, and per model.
pub(crate) type Headers = Vec<(String, String)>;

/// Starts an upstream for every model and each of `others` (on its fixed port, if any)
/// and picks the unreachable primary's address: each model's name and base URL.
async fn start_upstreams(
    request: &Request,
    board: &upstream::Board,
    others: &[String],
) -> Result<config::Upstreams, GatewayError> {
    let mut upstreams = Vec::new();
    for model in MODELS
        .iter()
        .copied()
        .chain(others.iter().map(String::as_str))
    {
        let port = request
            .mock_ports
            .as_ref()
            .and_then(|p| p.get(model))
            .copied()
            .unwrap_or(0);
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|source| GatewayError::Listen {
                model: model.to_string(),
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| GatewayError::Listen {
                model: model.to_string(),
                source,
            })?;
        upstream::serve(listener, model, board.clone());
        upstreams.push((model.to_string(), format!("http://{addr}/v1")));
    }
    // Nothing listens on the unreachable primary's port: a request to it is refused
    // before it is sent.
    let fixed = (request.mock_ports.as_ref()).and_then(|p| p.get(config::UNREACHABLE));
    let dead = match fixed {
        Some(port) => format!("127.0.0.1:{port}"),
        None => free_port().map_err(|source| GatewayError::Listen {
            model: config::UNREACHABLE.to_string(),
            source,
        })?,
    };
    upstreams.push((config::UNREACHABLE.to_string(), format!("http://{dead}/v1")));
    Ok(upstreams)
}

/// Writes the gateway's config to `path`: the headers every request carries, and those
/// each model's requests carry.
fn write_config(
    request: &Request,
    upstreams: &config::Upstreams,
    path: &Path,
) -> Result<(Headers, Vec<(String, Headers)>), GatewayError> {
    let chains = write_allowlist(path.with_file_name(config::ALLOWLIST_FILE))?;
    let auth = vec![("authorization".to_string(), format!("Bearer {GATEWAY_KEY}"))];
    let (text, headers, per_model) = match request.kind {
        Kind::Litellm => (
            config::litellm(&chains, upstreams, request.timeout.as_secs_f64()),
            auth,
            Vec::new(),
        ),
        Kind::Portkey => {
            let timeout = request.timeout.as_millis() as u64;
            let configs: Vec<(String, serde_json::Value)> = chains
                .iter()
                .map(|c| (c.primary.clone(), config::portkey(c, upstreams, timeout)))
                .collect();
            let header =
                |v: &serde_json::Value| vec![("x-portkey-config".to_string(), v.to_string())];
            let text = serde_json::to_string_pretty(
                &configs.iter().cloned().collect::<serde_json::Map<_, _>>(),
            )
            .unwrap_or_default();
            let per_model = configs
                .iter()
                .map(|(m, v)| (m.clone(), header(v)))
                .collect();
            (text, Vec::new(), per_model)
        }
        Kind::Tensorzero => {
            let ms = request.timeout.as_millis() as u64;
            (tensorzero::config(&chains, upstreams, ms), auth, Vec::new())
        }
    };
    std::fs::write(path, &text).map_err(|source| GatewayError::Config {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((headers, per_model))
}

/// Writes the allowlist the export decides from to `path`, which its revocation cites,
/// and returns the export's chains.
fn write_allowlist(path: PathBuf) -> Result<Vec<conform_gate::export::Chain>, GatewayError> {
    let list = config::allowlist(&path);
    let text = serde_json::to_vec_pretty(&list).unwrap_or_default();
    std::fs::write(&path, text).map_err(|source| GatewayError::Config { path, source })?;
    Ok(config::chains(&list))
}

/// Starts the gateway (`--spawn`) or checks the one at `--target` is up: its URL, and the
/// process when spawned.
async fn reach(
    request: &Request,
    path: &Path,
    work: &Path,
    vars: Vec<(String, String)>,
) -> Result<(String, Option<Spawned>), GatewayError> {
    match (&request.spawn, &request.target) {
        (Some(command), _) => {
            let listen = free_port().map_err(|source| GatewayError::Listen {
                model: "gateway".to_string(),
                source,
            })?;
            let port = listen.rsplit(':').next().unwrap_or_default().to_string();
            let url = format!("http://{listen}");
            let api = Api::new(&url)
                .map_err(GatewayError::Client)?
                .with_health(request.kind.health())
                .with_health_status(request.kind.health_status());
            let launch = Launch {
                command: command
                    .replace("{config}", &path.display().to_string())
                    .replace("{port}", &port),
                vars: vec![
                    // LiteLLM refuses to start without a master key, and fetches
                    // its cost map from the network unless told not to.
                    ("LITELLM_MASTER_KEY".into(), GATEWAY_KEY.into()),
                    ("LITELLM_LOCAL_MODEL_COST_MAP".into(), "True".into()),
                    ("CONFORM_GATEWAY_CONFIG".into(), path.display().to_string()),
                    ("CONFORM_GATEWAY_PORT".into(), port),
                    (tensorzero::KEY_VARIABLE.into(), config::UPSTREAM_KEY.into()),
                ]
                .into_iter()
                .chain(vars)
                .collect(),
                log: work.join("gateway.log"),
                startup: request.startup,
                // Without {port}, the gateway picks its port and prints its URL.
                announces_url: !command.contains("{port}"),
            };
            let spawned = Spawned::start(launch, api)
                .await
                .map_err(GatewayError::Spawn)?;
            Ok((spawned.url(), Some(spawned)))
        }
        (None, target) => {
            let url = target.clone().unwrap_or_default();
            let url = url.trim_end_matches('/').to_string();
            let api = Api::new(&url)
                .map_err(GatewayError::Client)?
                .with_health(request.kind.health())
                .with_health_status(request.kind.health_status());
            if !api.healthy().await {
                return Err(GatewayError::Unhealthy {
                    url,
                    health: request.kind.health(),
                });
            }
            Ok((url, None))
        }
    }
}

impl Session {
    /// What is tested, for the header line.
    pub(crate) fn header(&self, count: usize) -> String {
        format!(
            "conform scenarios: {count} gateway scenario(s) against {} (config {}; upstreams {})",
            self.env.gateway,
            self.config.display(),
            self.upstreams
                .iter()
                .map(|(m, u)| format!("{m}={u}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }

    /// Runs the scenarios one after another (`progress` sees each evidence as it comes)
    /// and stops the gateway the run started; `None` when Ctrl-C stopped them first.
    pub(crate) async fn run(
        &self,
        selected: &[scenarios::Def],
        fail_fast: bool,
        progress: impl FnMut(&Evidence),
    ) -> Option<SuiteReport> {
        let report = tokio::select! {
            report = self.run_all(selected, fail_fast, progress) => Some(report),
            _ = tokio::signal::ctrl_c() => None,
        };
        self.stop().await;
        report
    }

    async fn run_all(
        &self,
        selected: &[scenarios::Def],
        fail_fast: bool,
        mut progress: impl FnMut(&Evidence),
    ) -> SuiteReport {
        let started = Instant::now();
        let mut results = Vec::new();
        if let Some(gate) = &self.gate {
            progress(gate);
            results.push(gate.clone());
        }
        let mut stop = fail_fast && self.gate.as_ref().is_some_and(Evidence::failed);
        for def in selected {
            let evidence = if stop {
                Evidence::skipped(
                    def.name,
                    def.about,
                    "not run: an earlier scenario failed and --fail-fast was given",
                )
            } else {
                let ctx = ctx::Ctx::new(Arc::clone(&self.env), def.name, def.about);
                let mut evidence = ctx.conclude((def.body)(&ctx)).await;
                if let Some(spawned) = &self.spawned
                    && let Some(status) = spawned.exited().await
                {
                    evidence.notes.push(format!(
                        "the gateway exited ({status}); the end of its log:\n{}",
                        spawned.log_tail()
                    ));
                    if !evidence.failed() {
                        evidence.outcome = Outcome::Failed {
                            reason: format!("the gateway kept running (it exited: {status})"),
                        };
                    }
                    // A gateway that announces its URL may come back on another port.
                    if spawned.relaunch().await.is_ok() {
                        (self.env.client).retarget(format!(
                            "{}{}",
                            spawned.url(),
                            self.kind.chat_path()
                        ));
                    }
                }
                evidence
            };
            stop |= fail_fast && evidence.failed();
            progress(&evidence);
            results.push(evidence);
        }
        let count = |f: fn(&Outcome) -> bool| results.iter().filter(|e| f(&e.outcome)).count();
        SuiteReport {
            format: FORMAT,
            target: self.env.gateway.clone(),
            attempt_timeout_ms: self.timeout.as_millis() as u64,
            late_window_ms: 0,
            providers: self.upstreams.clone(),
            passed: count(|o| matches!(o, Outcome::Passed)),
            failed: count(|o| matches!(o, Outcome::Failed { .. })),
            skipped: count(|o| matches!(o, Outcome::Skipped { .. })),
            seconds: started.elapsed().as_secs_f64(),
            scenarios: results,
        }
    }

    /// Stops a spawned gateway.
    pub(crate) async fn stop(&self) {
        if let Some(spawned) = &self.spawned {
            spawned.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config's comment cites the revocation's evidence: a file the run wrote, which
    /// holds the revocation, not a report no run made.
    #[test]
    fn the_litellm_config_cites_the_allowlist_it_was_made_from() {
        let dir = tempfile::tempdir().unwrap();
        let request = Request {
            kind: Kind::Litellm,
            spawn: Some("litellm".into()),
            target: None,
            mock_ports: None,
            timeout: Duration::from_secs(2),
            startup: Duration::from_secs(1),
            team: None,
        };
        let upstreams: config::Upstreams = (MODELS.iter().chain(&[config::UNREACHABLE]))
            .map(|m| (m.to_string(), "http://127.0.0.1:9/v1".to_string()))
            .collect();
        let path = dir.path().join(Kind::Litellm.config_file());
        write_config(&request, &upstreams, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let cited = text
            .split("; report ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .unwrap_or_else(|| panic!("no report cited:\n{text}"));
        let evidence = std::fs::read(cited).unwrap_or_else(|e| panic!("{cited}: {e}\n{text}"));
        let list = conform_gate::allowlist::Allowlist::parse(&evidence).unwrap();
        assert!(
            (list.revocations.iter()).any(|r| r.provider == config::REVOKED && r.report == cited),
            "{cited}"
        );
    }
}
