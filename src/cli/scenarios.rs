//! `conform scenarios`: the race and timeout suite against an orchestrator, or the
//! failover suite against a gateway (`--gateway`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};

use conform_scenarios::Timing;
use conform_scenarios::gateway as gw;
use conform_scenarios::invoke::{Ended, Options, Target, invoke};
use conform_scenarios::session::{Request, parse_ports};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ScenariosArgs {
    /// Test a gateway instead of an orchestrator, configured as `conform export` does. --spawn's
    /// COMMAND may hold {config} and {port}; without {port}, it must print its URL on stdout.
    #[arg(long, value_name = "GATEWAY", value_parser = PossibleValuesParser::new(gw::Kind::ALL.map(gw::Kind::name)).try_map(gw::Kind::parse))]
    pub gateway: Option<gw::Kind>,
    /// Test this gateway config of the team's instead, held to --allowlist (docs/gateways.md).
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub gateway_config: Option<PathBuf>,
    /// The config's model to play the primary [default: the first with a fallback list].
    #[arg(long, value_name = "MODEL", requires = "gateway_config")]
    pub gateway_primary: Option<String>,
    /// With --gateway: the per-request timeout in the gateway's config (the hang waits three).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration, requires = "gateway")]
    pub gateway_timeout: Duration,
    /// Start the orchestrator with COMMAND (through `sh -c`), with the contract's CONFORM_*
    /// variables, restarting it where a scenario needs that, and stop it at the end.
    #[arg(long, value_name = "COMMAND", conflicts_with = "target")]
    pub spawn: Option<String>,
    /// Test an orchestrator already running at URL (with the providers --mock-ports fixes and
    /// the allowlist --allowlist names, which the scenarios rewrite); restarts are skipped.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Fixed loopback ports for the mock providers, every one of primary, fallback, rogue,
    /// faulty, dead: `primary=40001,fallback=40002,rogue=40003,faulty=40004,dead=40005`.
    #[arg(long, value_name = "NAME=PORT,…", value_parser = parse_ports)]
    pub mock_ports: Option<BTreeMap<String, u16>>,
    /// With --spawn: CONFORM_DATABASE_URL, e.g. postgres://… [default: a fresh SQLite file].
    #[arg(long, value_name = "URL", requires = "spawn")]
    pub database_url: Option<String>,
    /// CONFORM_ATTEMPT_TIMEOUT_MS: the attempt deadline (with --target: the orchestrator's).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub attempt_timeout_ms: u64,
    /// CONFORM_LATE_WINDOW_MS: how long a late result is still awaited.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub late_window_ms: u64,
    /// Run only these scenarios (comma-separated names; see --list).
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Leave these scenarios out.
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub skip: Vec<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    pub list: bool,
    /// `json` prints the whole report, every scenario's evidence included.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write a JUnit XML report here.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Stop at the first failing scenario (the rest are reported skipped).
    #[arg(long)]
    pub fail_fast: bool,
    /// How long the spawned orchestrator may take to answer /healthz.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub startup_timeout: Duration,
    /// Keep the working directory (database, allowlist, logs) even when every scenario passed.
    #[arg(long)]
    pub keep: bool,
    /// Where the working directory is made [default: the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

pub async fn scenarios(global: &Global, args: ScenariosArgs) -> anyhow::Result<Exit> {
    let target = match args.gateway {
        Some(kind) => Target::Gateway(gw::Request {
            kind,
            spawn: args.spawn,
            target: args.target,
            mock_ports: args.mock_ports,
            timeout: args.gateway_timeout,
            startup: args.startup_timeout,
            team: args.gateway_config.map(|config| gw::Team {
                config,
                primary: args.gateway_primary,
                allowlist: global.allowlist.clone(),
                paths: global.paths(),
                state: global.state.clone(),
            }),
        }),
        None => Target::Orchestrator(Request {
            spawn: args.spawn,
            target: args.target,
            mock_ports: args.mock_ports,
            database_url: args.database_url,
            timing: Timing {
                attempt_timeout: Duration::from_millis(args.attempt_timeout_ms),
                late_window: Duration::from_millis(args.late_window_ms),
            },
            startup: args.startup_timeout,
            allowlist: global.allowlist.clone(),
        }),
    };
    let options = Options {
        only: args.only,
        skip: args.skip,
        list: args.list,
        json: matches!(args.format, Format::Json),
        junit: args.junit,
        fail_fast: args.fail_fast,
        work_dir: args.work_dir,
        keep: args.keep,
    };
    let (mut out, mut err) = (|s: &str| print!("{s}"), |s: &str| eprintln!("{s}"));
    Ok(match invoke(target, options, &mut out, &mut err).await? {
        Ended::Passed => Exit::Ok,
        Ended::Failed => Exit::Failed,
        Ended::Usage => Exit::Usage,
        Ended::Inconclusive => Exit::Inconclusive,
    })
}
