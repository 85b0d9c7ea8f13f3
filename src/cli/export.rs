//! `conform export litellm | portkey`: the allowlist as the fallback config of the gateway
//! a team already runs, listing only fallbacks whose entries are valid now.

use clap::{Args, Subcommand, ValueEnum};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform::allowlist::Allowlist;
use conform::allowlist::local::{suite_names, unknown_provider, unknown_suite};
use conform::config::ProviderConfig;
use conform::export::{self, Chain, Names, Plan, SuiteRef, litellm, portkey};

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
        after_help = "Example:\n  conform export litellm --primary openai --name openai=gpt-4o \
--name vllm=llama-local\n\nPrints a YAML fragment such as\n  router_settings:\n    fallbacks: \
[{\"gpt-4o\": [\"llama-local\"]}]\nwith comments naming the evidence and every excluded \
candidate. Names are LiteLLM model_name values; a provider without --name keeps its conform name."
    )]
    Litellm(LitellmArgs),
    /// A Portkey gateway config in fallback mode (JSON), for one primary.
    #[command(
        after_help = "Example:\n  conform export portkey --primary openai --name \
openai=@openai-prod\n\nTargets name Portkey integration slugs (`@slug`) and pin each fallback's \
model to the one its evidence was made with."
    )]
    Portkey(PortkeyArgs),
}

#[derive(Debug, Args)]
pub struct Common {
    /// A provider requests go to first (repeatable for LiteLLM).
    #[arg(long = "primary", value_name = "PROVIDER", required = true)]
    pub primaries: Vec<String>,
    /// A candidate fallback, in order of preference (repeatable) [default: every provider
    /// in the allowlist, by name].
    #[arg(long = "fallback", value_name = "PROVIDER")]
    pub fallbacks: Vec<String>,
    /// A suite every fallback must be proven for (repeatable) [default: every suite in
    /// fixtures/].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// The gateway's name for a provider: PROVIDER=NAME (repeatable).
    #[arg(long = "name", value_name = "PROVIDER=NAME", value_parser = parse_name)]
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
pub struct PortkeyArgs {
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SectionArg {
    RouterSettings,
    LitellmSettings,
}

fn parse_name(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((p, n)) if !p.is_empty() && !n.is_empty() => Ok((p.to_string(), n.to_string())),
        _ => Err(format!(
            "`{s}` is not PROVIDER=NAME, e.g. --name openai=gpt-4o"
        )),
    }
}

pub fn export(global: &Global, args: ExportArgs) -> anyhow::Result<Exit> {
    match args.gateway {
        Gateway::Litellm(args) => {
            let Some((chains, names, header)) = prepare(global, &args.common) else {
                return Ok(Exit::Usage);
            };
            let section = match args.section {
                SectionArg::RouterSettings => litellm::Section::RouterSettings,
                SectionArg::LitellmSettings => litellm::Section::LitellmSettings,
            };
            print!("{}", litellm::yaml(&chains, &names, section, &header));
            Ok(summary(&chains))
        }
        Gateway::Portkey(args) => {
            if args.common.primaries.len() != 1 {
                eprintln!(
                    "error: a Portkey config has one primary: run `conform export portkey --primary P` once per primary"
                );
                return Ok(Exit::Usage);
            }
            let Some((chains, names, _)) = prepare(global, &args.common) else {
                return Ok(Exit::Usage);
            };
            let chain = &chains[0];
            let primary_model = ProviderConfig::load(
                &global
                    .paths()
                    .providers
                    .join(format!("{}.toml", chain.primary)),
            )
            .ok()
            .map(|c| c.model);
            let config = portkey::config(chain, primary_model.as_deref(), &names);
            println!("{}", serde_json::to_string_pretty(&config)?);
            report_chains(&chains);
            Ok(summary(&chains))
        }
    }
}

type Prepared = (Vec<Chain>, Names, Vec<String>);

fn prepare(global: &Global, common: &Common) -> Option<Prepared> {
    let path = global.allowlist_path();
    let list = match Allowlist::load(&path) {
        Ok(list) => list,
        Err(denial) => {
            // Failing closed here would still print a config; refusing is clearer.
            eprintln!(
                "error: no fallback can be exported ({}): {}",
                denial.reason.code(),
                denial.detail
            );
            return None;
        }
    };
    let paths = global.paths();
    let names: Vec<String> = if common.suites.is_empty() {
        suite_names(&paths.fixtures)
    } else {
        common.suites.clone()
    };
    if names.is_empty() {
        eprintln!(
            "error: no suite in {}: name the suites the fallbacks must be proven for with --suite",
            paths.fixtures.display()
        );
        return None;
    }
    // A name the project does not have is a typo, not a quiet "nothing to export".
    let suites = names.iter().filter_map(|name| unknown_suite(&paths, name));
    let providers = (common.primaries.iter().chain(&common.fallbacks))
        .filter_map(|name| unknown_provider(&paths, name));
    let unknown: Vec<String> = suites.chain(providers).map(|d| d.detail).collect();
    if !unknown.is_empty() {
        for problem in unknown {
            eprintln!("error: {problem}");
        }
        return None;
    }
    let suites: Vec<SuiteRef> = names
        .iter()
        .map(|name| SuiteRef {
            name: name.clone(),
            digest: None,
        })
        .collect();
    let at = OffsetDateTime::now_utc();
    let plan = Plan {
        primaries: common.primaries.clone(),
        fallbacks: common.fallbacks.clone(),
        suites,
        at,
        // Every candidate is decided against this project's files, as `conform gate` does.
        project: Some(paths.clone()),
    };
    let chains = export::chains(&list, &plan);
    let names_map = Names(common.names.iter().cloned().collect());
    let mut header = vec![
        format!(
            "Generated by conform {} from {} at {}.",
            env!("CARGO_PKG_VERSION"),
            path.display(),
            at.format(&Rfc3339).unwrap_or_default()
        ),
        format!(
            "Lists only fallbacks whose allowlist entries are valid for every suite: {}.",
            names.join(", ")
        ),
    ];
    if let Some(first) = chains.iter().filter_map(Chain::expires).min() {
        header.push(format!(
            "The first entry expires at {first}: export again before then."
        ));
    }
    Some((chains, names_map, header))
}

/// On stderr, so that stdout stays a config.
fn report_chains(chains: &[Chain]) {
    for chain in chains {
        for f in &chain.fallbacks {
            eprintln!("{} -> {} ({})", chain.primary, f.provider, f.model);
        }
        for x in &chain.excluded {
            eprintln!(
                "{} -/-> {}: {} ({})",
                chain.primary, x.provider, x.reason, x.detail
            );
        }
    }
}

/// 0 when every primary has a permitted fallback, 1 when one has none.
fn summary(chains: &[Chain]) -> Exit {
    if chains.iter().all(|c| !c.fallbacks.is_empty()) {
        Exit::Ok
    } else {
        Exit::Failed
    }
}
