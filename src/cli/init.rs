//! `conform init`: a new project from a primary, its fallbacks and, optionally, traffic.

use std::path::PathBuf;

use clap::Args;

use conform::init::{InitError, Plan, ProviderSpec, Written, scaffold};

use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The primary's kind: openai, anthropic, gemini, ollama or openai-compatible.
    #[arg(long, value_name = "KIND", default_value = "openai")]
    pub provider: String,
    /// The primary's model [default: the shipped provider file's].
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// A fallback to prove (repeatable): NAME:URL for a server speaking Chat Completions
    /// (vLLM, llama.cpp, LiteLLM), KIND:URL, or a vendor's KIND at its own address.
    #[arg(long, value_name = "NAME:URL")]
    pub fallback: Vec<String>,
    /// The fallbacks' model [default: the shipped provider file's for their kind].
    #[arg(long, value_name = "MODEL")]
    pub fallback_model: Option<String>,
    /// Build the suite from traffic you log (a JSONL of chat requests or request/response
    /// pairs, or a promptfoo YAML or CSV) instead of the starter suite.
    #[arg(long, value_name = "FILE")]
    pub traffic: Option<PathBuf>,
}

pub fn init(global: &Global, args: InitArgs) -> anyhow::Result<Exit> {
    let specs = || -> Result<Plan, InitError> {
        Ok(Plan {
            primary: ProviderSpec::primary(&args.provider, args.model.clone())?,
            fallbacks: (args.fallback.iter())
                .map(|f| ProviderSpec::fallback(f, args.fallback_model.clone()))
                .collect::<Result<_, _>>()?,
            traffic: args.traffic.clone(),
        })
    };
    match specs().and_then(|plan| scaffold(&global.root, &plan)) {
        Ok(done) => {
            let root = &global.root;
            print!("{}", Written { root, done: &done });
            Ok(Exit::Ok)
        }
        Err(e @ InitError::Io { .. }) => Err(e.into()),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(Exit::Usage)
        }
    }
}
