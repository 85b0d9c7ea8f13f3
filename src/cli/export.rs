//! `conform export litellm | portkey | tensorzero`: the allowlist as the fallback config of
//! the gateway a team already runs, listing only fallbacks whose entries are valid now.

use clap::{Args, Subcommand, ValueEnum};
use time::OffsetDateTime;

use conform_gate::export::request::{Export, Request};
use conform_gate::export::{Names, litellm};

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub gateway: Gateway,
}

#[derive(Debug, Subcommand)]
pub enum Gateway {
    /// The `fallbacks` setting of a LiteLLM proxy config.yaml (YAML, to merge).
    #[command(
        after_help = "Example:\n  conform export litellm --primary openai --name openai=gpt-4o --name vllm=llama-local\n\n\
Prints a YAML fragment such as\n  router_settings:\n    fallbacks: [{\"gpt-4o\": [\"llama-local\"]}]\nwith comments \
naming the evidence and every excluded candidate. Names are LiteLLM model_name values; a provider without --name keeps its conform name."
    )]
    Litellm(LitellmArgs),
    /// A Portkey gateway config in fallback mode (JSON), for one primary.
    #[command(
        after_help = "Example:\n  conform export portkey --primary openai --name openai=@openai-prod\n\n\
Targets name Portkey integration slugs (`@slug`) and pin each fallback's model to the one its evidence was made with."
    )]
    Portkey(Common),
    /// A TensorZero model per primary (TOML, to merge): its `routing`, its providers' timeouts.
    Tensorzero(TensorzeroArgs),
}

#[derive(Debug, Args)]
pub struct Common {
    /// A provider requests go to first (repeatable for LiteLLM).
    #[arg(long = "primary", value_name = "PROVIDER", required = true)]
    pub primaries: Vec<String>,
    /// A candidate fallback, in order of preference (repeatable) [default: every provider in the allowlist, by name].
    #[arg(long = "fallback", value_name = "PROVIDER")]
    pub fallbacks: Vec<String>,
    /// A suite every fallback must be proven for (repeatable) [default: every suite in fixtures/].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// The gateway's name for a provider: PROVIDER=NAME (repeatable).
    #[arg(long = "name", value_name = "PROVIDER=NAME", value_parser = Names::parse_pair)]
    pub names: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct LitellmArgs {
    #[command(flatten)]
    pub common: Common,
    /// The config.yaml section to write `fallbacks` under.
    #[arg(long, value_enum, default_value_t = SectionArg::RouterSettings)]
    pub section: SectionArg,
}

#[derive(Debug, Args)]
pub struct TensorzeroArgs {
    #[command(flatten)]
    pub common: Common,
    /// Each provider's timeouts: the --gateway-timeout the scenarios were run with.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SectionArg {
    RouterSettings,
    LitellmSettings,
}

pub fn export(global: &Global, args: ExportArgs) -> anyhow::Result<Exit> {
    let (allowlist, paths) = (global.allowlist_path(), global.paths());
    let request = |common: Common| Request {
        allowlist: &allowlist,
        paths: &paths,
        primaries: common.primaries,
        fallbacks: common.fallbacks,
        suites: common.suites,
        names: Names(common.names.into_iter().collect()),
        at: OffsetDateTime::now_utc(),
        state: global.state.as_deref(),
    };
    let prepared = match args.gateway {
        Gateway::Litellm(args) => Export::prepare(request(args.common)).inspect(|export| {
            let section = match args.section {
                SectionArg::RouterSettings => litellm::Section::RouterSettings,
                SectionArg::LitellmSettings => litellm::Section::LitellmSettings,
            };
            print!("{}", export.litellm(section));
        }),
        Gateway::Portkey(common) => Export::for_portkey(request(common)).inspect(|export| {
            let config = serde_json::to_string_pretty(&export.portkey(&paths));
            println!("{}", config.unwrap_or_default());
            eprint!("{}", export.routes());
        }),
        Gateway::Tensorzero(args) => Export::prepare(request(args.common))
            .inspect(|export| print!("{}", export.tensorzero(&paths, args.timeout))),
    };
    match prepared {
        Ok(export) if export.complete() => Ok(Exit::Ok),
        Ok(_) => Ok(Exit::Failed),
        Err(e) => {
            for problem in e.problems() {
                eprintln!("error: {problem}");
            }
            Ok(Exit::Usage)
        }
    }
}
