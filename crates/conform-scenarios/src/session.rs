//! One `conform scenarios` invocation around the runner: which orchestrator to test and
//! whether the options allow it ([`Request::check`]), reaching it ([`reach`]: spawned
//! with the contract's `CONFORM_*` variables, or already running), and what a person
//! reads ([`Listing`], [`Progress`], [`Summary`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::api::Api;
use super::providers::{NAMES, ProviderError, Providers};
use super::runner::{self, SuiteReport};
use super::spawn::{Launch, SpawnError, Spawned};
use super::workdir::free_port;
use super::{Env, Evidence, Outcome, Scenario, Timing, gatefile, job};

/// `NAME=PORT,…`: the fixed loopback port of each mock provider.
pub fn parse_ports(text: &str) -> Result<BTreeMap<String, u16>, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (name, port) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}` is not NAME=PORT"))?;
            let port = port
                .trim()
                .parse::<u16>()
                .map_err(|_| format!("`{port}` is not a port number"))?;
            Ok((name.trim().to_string(), port))
        })
        .collect()
}

/// Which orchestrator to test, and how.
#[derive(Debug, Clone)]
pub struct Request {
    /// Start it with this command (through `sh -c`).
    pub spawn: Option<String>,
    /// Or test the one already running at this URL.
    pub target: Option<String>,
    /// The port of each mock provider, for a running orchestrator configured with them
    /// (`--mock-ports`); otherwise free ports are taken.
    pub mock_ports: Option<BTreeMap<String, u16>>,
    /// With `spawn`: its database [default: a fresh SQLite file in the working folder].
    pub database_url: Option<String>,
    /// The attempt timeout and late window the orchestrator was, or is, configured with.
    pub timing: Timing,
    /// How long a spawned orchestrator may take to answer `/healthz`.
    pub startup: Duration,
    /// The allowlist file the caller named, if any.
    pub allowlist: Option<PathBuf>,
}

/// Options that cannot make a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// Neither `--spawn` nor `--target`.
    #[error("say which orchestrator to test: --spawn 'COMMAND' or --target URL")]
    NoOrchestrator,
    /// `--target` without a port for every mock provider.
    #[error(
        "--target needs --mock-ports naming the port of every mock provider the orchestrator \
         was configured with; missing: {} (e.g. --mock-ports primary=40001,fallback=40002,rogue=40003,faulty=40004,dead=40005)",
        missing.join(", ")
    )]
    MissingPorts {
        /// The mock providers without a port.
        missing: Vec<&'static str>,
    },
    /// `--target` without the allowlist file the orchestrator reads.
    #[error(
        "--target needs --allowlist PATH (or CONFORM_ALLOWLIST): the allowlist file the \
         orchestrator reads, which the scenarios write and rewrite"
    )]
    NoAllowlist,
    /// Timings too short for the scenarios to tell one event's order from another's.
    #[error(
        "the scenarios' ordering margins need --attempt-timeout-ms ≥ {} and --late-window-ms ≥ {}",
        Timing::MIN_ATTEMPT_TIMEOUT.as_millis(),
        Timing::MIN_LATE_WINDOW.as_millis()
    )]
    Margins,
}

impl Request {
    /// Whether the options can make a run: an orchestrator named, a running one fully
    /// described, and timings the scenarios' ordering margins fit in.
    pub fn check(&self) -> Result<(), UsageError> {
        if self.spawn.is_none() && self.target.is_none() {
            return Err(UsageError::NoOrchestrator);
        }
        if self.target.is_some() {
            let missing: Vec<&'static str> = (NAMES.iter().copied())
                .filter(|n| !self.mock_ports.as_ref().is_some_and(|p| p.contains_key(*n)))
                .collect();
            if !missing.is_empty() {
                return Err(UsageError::MissingPorts { missing });
            }
            if self.allowlist.is_none() {
                return Err(UsageError::NoAllowlist);
            }
        }
        if self.timing.attempt_timeout < Timing::MIN_ATTEMPT_TIMEOUT
            || self.timing.late_window < Timing::MIN_LATE_WINDOW
        {
            return Err(UsageError::Margins);
        }
        Ok(())
    }

    /// Writes the allowlist the scenarios start from where the orchestrator reads it: a
    /// running orchestrator's own, or one in the working folder for a spawned one.
    pub fn write_allowlist(&self, work: &Path) -> Result<PathBuf, AllowlistWriteError> {
        let path = match (&self.target, &self.allowlist) {
            (Some(_), Some(path)) => path.clone(),
            _ => work.join("allowlist.json"),
        };
        match gatefile::write(&path, &gatefile::standard()) {
            Ok(()) => Ok(path),
            Err(source) => Err(AllowlistWriteError { path, source }),
        }
    }
}

/// The scenarios' allowlist could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the allowlist {}: {source}", path.display())]
pub struct AllowlistWriteError {
    /// Where it was to be written.
    pub path: PathBuf,
    /// What the file system answered.
    pub source: std::io::Error,
}

/// Why the orchestrator could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    /// No loopback port was free for a spawned orchestrator.
    #[error("cannot find a free loopback port: {0}")]
    Port(#[source] std::io::Error),
    /// The HTTP client could not be built, or the URL is not one.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The spawned orchestrator did not start: inconclusive.
    #[error(transparent)]
    Spawn(SpawnError),
    /// The running orchestrator does not answer: inconclusive.
    #[error("{url}/healthz does not answer 200: is the orchestrator running?")]
    Unhealthy {
        /// The `--target` URL.
        url: String,
    },
}

impl ReachError {
    /// The orchestrator, not the options, is at fault: the run is inconclusive.
    pub fn inconclusive(&self) -> bool {
        matches!(self, ReachError::Spawn(_) | ReachError::Unhealthy { .. })
    }
}

/// The orchestrator under test, reached.
pub struct Orchestrator {
    /// Its HTTP API.
    pub api: Api,
    /// Set when the scenarios started it (and may restart it).
    pub spawned: Option<Arc<Spawned>>,
    /// What is tested, for the header line.
    pub described: String,
}

/// Starts the orchestrator of `request` (healthy before this returns) or checks that the
/// running one answers.
pub async fn reach(
    request: &Request,
    work: &Path,
    providers: &Providers,
    allowlist: &Path,
) -> Result<Orchestrator, ReachError> {
    let Some(command) = &request.spawn else {
        let url = request.target.clone().unwrap_or_default();
        let api = Api::new(&url).map_err(ReachError::Client)?;
        if !api.healthy().await {
            return Err(ReachError::Unhealthy { url });
        }
        return Ok(Orchestrator {
            api,
            spawned: None,
            described: url,
        });
    };
    let listen = free_port().map_err(ReachError::Port)?;
    let database = (request.database_url.clone())
        .unwrap_or_else(|| format!("sqlite://{}", work.join("ledger.db").display()));
    let api = Api::new(&format!("http://{listen}")).map_err(ReachError::Client)?;
    let millis = |d: Duration| d.as_millis().to_string();
    let launch = Launch {
        command: command.clone(),
        vars: vec![
            ("CONFORM_LISTEN".into(), listen.clone()),
            ("CONFORM_DATABASE_URL".into(), database.clone()),
            (
                "CONFORM_ATTEMPT_TIMEOUT_MS".into(),
                millis(request.timing.attempt_timeout),
            ),
            (
                "CONFORM_LATE_WINDOW_MS".into(),
                millis(request.timing.late_window),
            ),
            ("CONFORM_PROVIDERS".into(), providers.env_value()),
            ("CONFORM_ALLOWLIST".into(), allowlist.display().to_string()),
        ],
        log: work.join("orchestrator.log"),
        startup: request.startup,
        announces_url: false,
    };
    let spawned = Spawned::start(launch, api.clone())
        .await
        .map_err(ReachError::Spawn)?;
    Ok(Orchestrator {
        api,
        spawned: Some(Arc::new(spawned)),
        described: format!(
            "`{command}` on {listen}, database {}",
            conform_config::secret::redact_url(&database)
        ),
    })
}

/// Why the scenarios could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The mock providers could not listen (a fixed port taken): a usage error.
    #[error(transparent)]
    Providers(#[from] ProviderError),
    /// The scenarios' allowlist could not be written.
    #[error(transparent)]
    Allowlist(#[from] AllowlistWriteError),
    /// The orchestrator could not be reached.
    #[error(transparent)]
    Reach(#[from] ReachError),
}

impl SetupError {
    /// The orchestrator, not the options, is at fault: the run is inconclusive.
    pub fn inconclusive(&self) -> bool {
        matches!(self, SetupError::Reach(e) if e.inconclusive())
    }

    /// The spawned orchestrator's log is in the working folder: keep it.
    pub fn keeps_work(&self) -> bool {
        matches!(self, SetupError::Reach(ReachError::Spawn(_)))
    }
}

/// The mock providers, the scenarios' allowlist and the orchestrator under test, ready.
pub struct Session {
    /// What every scenario shares: the API, the providers, the allowlist, the timings.
    pub env: Arc<Env>,
    /// Set when the scenarios started the orchestrator, which they stop at the end.
    pub spawned: Option<Arc<Spawned>>,
    /// What is tested, for the header line.
    pub described: String,
}

impl Session {
    /// Starts the mock providers, writes the allowlist the scenarios start from, and
    /// reaches the orchestrator of `request`; `work` is the working folder.
    pub async fn start(request: &Request, work: &Path) -> Result<Session, SetupError> {
        let providers = Providers::start(&request.mock_ports.clone().unwrap_or_default()).await?;
        let allowlist = request.write_allowlist(work)?;
        let reached = reach(request, work, &providers, &allowlist).await?;
        let env = Env::new(
            reached.api,
            providers,
            allowlist,
            request.timing,
            reached.spawned.clone(),
        );
        Ok(Session {
            env: Arc::new(env),
            spawned: reached.spawned,
            described: reached.described,
        })
    }

    /// The first lines of a text run: how many scenarios, against what, with which timings.
    pub fn header(&self, count: usize) -> String {
        let timing = &self.env.timing;
        format!(
            "conform scenarios: {count} scenario(s) against {}\n  attempt timeout {} ms, late window {} ms; providers {}",
            self.described,
            timing.attempt_timeout.as_millis(),
            timing.late_window.as_millis(),
            self.env.providers.env_value()
        )
    }

    /// Runs `selected` one after another (`progress` sees each as it ends) and stops the
    /// orchestrator the scenarios started; `None` when Ctrl-C stopped them first.
    pub async fn run(
        &self,
        selected: &[Box<dyn Scenario>],
        fail_fast: bool,
        progress: impl FnMut(&Evidence),
    ) -> Option<SuiteReport> {
        let run = runner::run(Arc::clone(&self.env), selected, fail_fast, progress);
        let report = tokio::select! {
            report = run => Some(report),
            _ = tokio::signal::ctrl_c() => None,
        };
        self.stop().await;
        report
    }

    /// Stops the orchestrator the scenarios started, if they did.
    pub async fn stop(&self) {
        if let Some(s) = &self.spawned {
            s.stop().await;
        }
    }

    /// The closing lines of a text run of `report`.
    pub fn summary<'a>(&'a self, report: &'a SuiteReport) -> Summary<'a> {
        let log = self.spawned.as_deref().map(|s| s.log().as_path());
        Summary { report, log }
    }
}

/// `conform scenarios --list`.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Listing(pub Vec<Listed>);

/// One scenario of the list.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// [`Scenario::name`].
    pub name: &'static str,
    /// [`Scenario::about`].
    pub about: &'static str,
    /// [`Scenario::needs_restart`].
    pub needs_restart: bool,
}

impl Listing {
    /// The list of `selected`, in their order.
    pub fn of(selected: &[Box<dyn Scenario>]) -> Listing {
        Listing(
            (selected.iter())
                .map(|s| Listed {
                    name: s.name(),
                    about: s.about(),
                    needs_restart: s.needs_restart(),
                })
                .collect(),
        )
    }
}

impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.0 {
            let restart = if s.needs_restart {
                " [--spawn only]"
            } else {
                ""
            };
            writeln!(f, "{}{restart}\n    {}", s.name, s.about)?;
        }
        writeln!(
            f,
            "\nThe orchestrator must be configured with the providers {} (see --mock-ports).",
            NAMES.join(", ")
        )
    }
}

/// A scenario's lines as it ends: PASS, SKIP, or FAIL with what it rests on.
pub struct Progress<'a>(pub &'a Evidence);

impl fmt::Display for Progress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        let counts = |with_expected: bool| -> Vec<String> {
            (e.provider_requests.iter())
                .filter(|(_, c)| c.received > 0 || c.expected > 0)
                .map(|(n, c)| {
                    if with_expected {
                        format!("{n} {}/{}", c.received, c.expected)
                    } else {
                        format!("{n} {}", c.received)
                    }
                })
                .collect()
        };
        match &e.outcome {
            Outcome::Passed => writeln!(
                f,
                "  PASS  {:<30} {:>5.1} s  upstream: {}",
                e.scenario,
                e.seconds,
                counts(false).join(", ")
            ),
            Outcome::Skipped { reason } => {
                writeln!(f, "  SKIP  {:<30}          {reason}", e.scenario)
            }
            Outcome::Failed { reason } => {
                writeln!(f, "  FAIL  {:<30} {:>5.1} s", e.scenario, e.seconds)?;
                writeln!(f, "        {reason}")?;
                let from = e.exchanges.len().saturating_sub(6);
                for x in &e.exchanges[from..] {
                    writeln!(f, "        > {}", job::describe(x))?;
                }
                writeln!(
                    f,
                    "        upstream requests received/expected: {}",
                    counts(true).join(", ")
                )?;
                for j in e.jobs.iter().take(4) {
                    writeln!(
                        f,
                        "        job {}: {}",
                        job::id(j).unwrap_or("?"),
                        job::summary(j)
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// The closing lines of a text run.
pub struct Summary<'a> {
    /// The run's results.
    pub report: &'a SuiteReport,
    /// The spawned orchestrator's log, named when a scenario failed.
    pub log: Option<&'a Path>,
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.report;
        writeln!(
            f,
            "{} scenario(s): {} passed, {} failed, {} skipped in {:.1} s",
            r.scenarios.len(),
            r.passed,
            r.failed,
            r.skipped,
            r.seconds
        )?;
        if r.failed > 0 {
            writeln!(f, "  the full evidence: --format json")?;
            if let Some(log) = self.log {
                writeln!(f, "  the orchestrator's log: {}", log.display())?;
            }
        }
        Ok(())
    }
}

/// Why the JUnit report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum JunitError {
    /// Its folder could not be created.
    #[error("cannot create {}: {source}", dir.display())]
    Dir {
        /// The folder.
        dir: PathBuf,
        /// What the file system answered.
        source: std::io::Error,
    },
    /// The file could not be created.
    #[error("cannot write the JUnit report {}: {source}", path.display())]
    Create {
        /// The report's path.
        path: PathBuf,
        /// What the file system answered.
        source: std::io::Error,
    },
    /// Writing the XML failed.
    #[error("cannot write the JUnit report {}: {source}", path.display())]
    Serialize {
        /// The report's path.
        path: PathBuf,
        /// What the writer answered.
        source: quick_junit::SerializeError,
    },
}

/// Writes the run as JUnit XML at `path`, creating its folder.
pub fn write_junit(path: &Path, report: &SuiteReport) -> Result<(), JunitError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| JunitError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    let file = std::fs::File::create(path).map_err(|source| JunitError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    runner::junit(report)
        .serialize(file)
        .map_err(|source| JunitError::Serialize {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mock_ports() {
        let ports = parse_ports("primary=40001, fallback=40002").unwrap();
        assert_eq!(ports["fallback"], 40002);
        assert!(parse_ports("primary:1").is_err());
        assert!(parse_ports("primary=99999").is_err());
    }
}
