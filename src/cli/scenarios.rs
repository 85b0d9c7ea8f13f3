//! `conform scenarios`: the race and timeout suite against an orchestrator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use conform::scenarios::api::Api;
use conform::scenarios::providers::{NAMES, Providers};
use conform::scenarios::runner::{self, SuiteReport};
use conform::scenarios::spawn::{Launch, Spawned};
use conform::scenarios::workdir::{WorkDir, free_port};
use conform::scenarios::{self as suite, Env, Evidence, Outcome, Timing, gatefile, job};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ScenariosArgs {
    /// Start the orchestrator with COMMAND (through `sh -c`), with the contract's CONFORM_*
    /// variables, restarting it where a scenario needs that, and stop it at the end.
    #[arg(long, value_name = "COMMAND", conflicts_with = "target")]
    pub spawn: Option<String>,
    /// Test an orchestrator already running at URL (configured with the providers that
    /// --mock-ports fixes and the allowlist that --allowlist names, which the scenarios
    /// rewrite); scenarios that restart it are skipped.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Fixed loopback ports for the mock providers, every one of primary, fallback, rogue,
    /// faulty, dead: `primary=40001,fallback=40002,rogue=40003,faulty=40004,dead=40005`.
    #[arg(long, value_name = "NAME=PORT,…", value_parser = parse_ports)]
    pub mock_ports: Option<BTreeMap<String, u16>>,
    /// With --spawn: CONFORM_DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/test
    /// [default: a fresh SQLite file].
    #[arg(long, value_name = "URL", requires = "spawn")]
    pub database_url: Option<String>,
    /// CONFORM_ATTEMPT_TIMEOUT_MS: the attempt deadline (with --target: the one the
    /// orchestrator was started with).
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
    /// Keep the working directory (database, allowlist, orchestrator log) even when
    /// every scenario passed.
    #[arg(long)]
    pub keep: bool,
    /// Where the working directory is made [default: the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

fn parse_ports(text: &str) -> Result<BTreeMap<String, u16>, String> {
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

pub async fn scenarios(global: &Global, args: ScenariosArgs) -> anyhow::Result<Exit> {
    let selected = match runner::select(suite::all(), &args.only, &args.skip) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    if args.list {
        list(&selected, args.format);
        return Ok(Exit::Ok);
    }
    let timing = Timing {
        attempt_timeout: Duration::from_millis(args.attempt_timeout_ms),
        late_window: Duration::from_millis(args.late_window_ms),
    };
    if let Some(problem) = usage_problem(global, &args, &timing) {
        eprintln!("error: {problem}");
        return Ok(Exit::Usage);
    }
    let mut work = WorkDir::create(args.work_dir.as_deref(), args.keep)?;
    let ports = args.mock_ports.clone().unwrap_or_default();
    let providers = match Providers::start(&ports).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    let allowlist = match (&args.target, &global.allowlist) {
        (Some(_), Some(path)) => path.clone(),
        _ => work.path().join("allowlist.json"),
    };
    gatefile::write(&allowlist, &gatefile::standard())
        .with_context(|| format!("cannot write the allowlist {}", allowlist.display()))?;

    let (api, spawned, described) = if let Some(command) = &args.spawn {
        let listen = free_port().context("cannot find a free loopback port")?;
        let database = args
            .database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", work.path().join("ledger.db").display()));
        let api = Api::new(&format!("http://{listen}")).context("cannot build the HTTP client")?;
        let launch = Launch {
            command: command.clone(),
            vars: vec![
                ("CONFORM_LISTEN".into(), listen.clone()),
                ("CONFORM_DATABASE_URL".into(), database.clone()),
                (
                    "CONFORM_ATTEMPT_TIMEOUT_MS".into(),
                    args.attempt_timeout_ms.to_string(),
                ),
                (
                    "CONFORM_LATE_WINDOW_MS".into(),
                    args.late_window_ms.to_string(),
                ),
                ("CONFORM_PROVIDERS".into(), providers.env_value()),
                ("CONFORM_ALLOWLIST".into(), allowlist.display().to_string()),
            ],
            log: work.path().join("orchestrator.log"),
            startup: args.startup_timeout,
        };
        let spawned = match Spawned::start(launch, api.clone()).await {
            Ok(s) => Arc::new(s),
            Err(e) => {
                eprintln!("error: {e}");
                eprintln!("(working directory kept: {})", work.keep().display());
                return Ok(Exit::Inconclusive);
            }
        };
        let described = format!(
            "`{command}` on {listen}, database {}",
            conform::secret::redact_url(&database)
        );
        (api, Some(spawned), described)
    } else {
        let url = args.target.clone().unwrap_or_default();
        let api = Api::new(&url).context("cannot build the HTTP client")?;
        if !api.healthy().await {
            eprintln!("error: {url}/healthz does not answer 200: is the orchestrator running?");
            return Ok(Exit::Inconclusive);
        }
        (api, None, url)
    };

    let env = Arc::new(Env::new(api, providers, allowlist, timing, spawned.clone()));
    let text = matches!(args.format, Format::Text);
    if text {
        println!(
            "conform scenarios: {} scenario(s) against {described}\n  attempt timeout {} ms, late window {} ms; providers {}",
            selected.len(),
            args.attempt_timeout_ms,
            args.late_window_ms,
            env.providers.env_value()
        );
    }
    let run = runner::run(Arc::clone(&env), &selected, args.fail_fast, |e| {
        if text {
            print_line(e);
        }
    });
    let report = tokio::select! {
        report = run => report,
        _ = tokio::signal::ctrl_c() => {
            if let Some(s) = &spawned {
                s.stop().await;
            }
            eprintln!("interrupted; working directory kept: {}", work.keep().display());
            return Ok(Exit::Inconclusive);
        }
    };
    if let Some(s) = &spawned {
        s.stop().await;
    }
    if let Some(path) = &args.junit {
        write_junit(path, &report)?;
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text => print_summary(&report, spawned.as_deref(), work.path()),
    }
    let passed = report.all_passed();
    if !passed || args.keep {
        eprintln!("working directory kept: {}", work.keep().display());
    }
    Ok(if passed { Exit::Ok } else { Exit::Failed })
}

fn usage_problem(global: &Global, args: &ScenariosArgs, timing: &Timing) -> Option<String> {
    if args.spawn.is_none() && args.target.is_none() {
        return Some("say which orchestrator to test: --spawn 'COMMAND' or --target URL".into());
    }
    if args.target.is_some() {
        let missing: Vec<&str> = NAMES
            .iter()
            .copied()
            .filter(|n| !args.mock_ports.as_ref().is_some_and(|p| p.contains_key(*n)))
            .collect();
        if !missing.is_empty() {
            return Some(format!(
                "--target needs --mock-ports naming the port of every mock provider the orchestrator \
                 was configured with; missing: {} (e.g. --mock-ports primary=40001,fallback=40002,rogue=40003,faulty=40004,dead=40005)",
                missing.join(", ")
            ));
        }
        if global.allowlist.is_none() {
            return Some(
                "--target needs --allowlist PATH (or CONFORM_ALLOWLIST): the allowlist file the \
                 orchestrator reads, which the scenarios write and rewrite"
                    .into(),
            );
        }
    }
    if timing.attempt_timeout < Timing::MIN_ATTEMPT_TIMEOUT
        || timing.late_window < Timing::MIN_LATE_WINDOW
    {
        return Some(format!(
            "the scenarios' ordering margins need --attempt-timeout-ms ≥ {} and --late-window-ms ≥ {}",
            Timing::MIN_ATTEMPT_TIMEOUT.as_millis(),
            Timing::MIN_LATE_WINDOW.as_millis()
        ));
    }
    None
}

fn list(selected: &[Box<dyn suite::Scenario>], format: Format) {
    match format {
        Format::Json => {
            let items: Vec<_> = selected
                .iter()
                .map(|s| serde_json::json!({"name": s.name(), "about": s.about(), "needs_restart": s.needs_restart()}))
                .collect();
            println!("{}", serde_json::Value::Array(items));
        }
        Format::Text => {
            for s in selected {
                let restart = if s.needs_restart() {
                    " [--spawn only]"
                } else {
                    ""
                };
                println!("{}{restart}\n    {}", s.name(), s.about());
            }
            println!(
                "\nThe orchestrator must be configured with the providers {} (see --mock-ports).",
                NAMES.join(", ")
            );
        }
    }
}

fn print_line(e: &Evidence) {
    let counts: Vec<String> = e
        .provider_requests
        .iter()
        .filter(|(_, c)| c.received > 0 || c.expected > 0)
        .map(|(n, c)| format!("{n} {}", c.received))
        .collect();
    match &e.outcome {
        Outcome::Passed => println!(
            "  PASS  {:<30} {:>5.1} s  upstream: {}",
            e.scenario,
            e.seconds,
            counts.join(", ")
        ),
        Outcome::Skipped { reason } => println!("  SKIP  {:<30}          {reason}", e.scenario),
        Outcome::Failed { reason } => {
            println!("  FAIL  {:<30} {:>5.1} s", e.scenario, e.seconds);
            println!("        {reason}");
            let from = e.exchanges.len().saturating_sub(6);
            for x in &e.exchanges[from..] {
                println!("        > {}", job::describe(x));
            }
            let counts: Vec<String> = e
                .provider_requests
                .iter()
                .filter(|(_, c)| c.received > 0 || c.expected > 0)
                .map(|(n, c)| format!("{n} {}/{}", c.received, c.expected))
                .collect();
            println!(
                "        upstream requests received/expected: {}",
                counts.join(", ")
            );
            for j in e.jobs.iter().take(4) {
                println!(
                    "        job {}: {}",
                    job::id(j).unwrap_or("?"),
                    job::summary(j)
                );
            }
        }
    }
}

fn print_summary(report: &SuiteReport, spawned: Option<&Spawned>, work: &Path) {
    println!(
        "{} scenario(s): {} passed, {} failed, {} skipped in {:.1} s",
        report.scenarios.len(),
        report.passed,
        report.failed,
        report.skipped,
        report.seconds
    );
    if report.failed > 0 {
        println!("  the full evidence: --format json");
        if let Some(s) = spawned {
            println!("  the orchestrator's log: {}", s.log().display());
        } else {
            let _ = work;
        }
    }
}

fn write_junit(path: &Path, report: &SuiteReport) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot write the JUnit report {}", path.display()))?;
    runner::junit(report)
        .serialize(file)
        .with_context(|| format!("cannot write the JUnit report {}", path.display()))
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
