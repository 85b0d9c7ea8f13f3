//! `conform init`: a new project from a primary, its fallbacks and, optionally, traffic.

use std::path::PathBuf;

use clap::Args;

use conform::init::{InitError, Plan, ProviderSpec, scaffold};

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
    let done = match specs().and_then(|plan| scaffold(&global.root, &plan)) {
        Ok(done) => done,
        Err(InitError::Io { path, source }) => {
            return Err(
                anyhow::Error::new(source).context(format!("cannot write {}", path.display()))
            );
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    // The suite's own files are summed up in one line below.
    let suite_dir = global.root.join("fixtures").join(&done.suite);
    for file in done.files.iter().filter(|f| !f.starts_with(&suite_dir)) {
        let shown = file.strip_prefix(&global.root).unwrap_or(file);
        println!("wrote {}", shown.display());
    }
    match &done.imported {
        Some(s) => println!(
            "wrote fixtures/{}/: {} cases from {} requests ({} with recorded answers); what was not carried over is in IMPORT_NOTES.md",
            done.suite, s.written, s.read, s.with_reference
        ),
        None => println!(
            "wrote fixtures/{}/: a starter suite of four cases; replace them with your own (`conform import`)",
            done.suite
        ),
    }
    println!("\nnext:");
    if global.root != std::path::Path::new(".") {
        println!("  cd {}", global.root.display());
    }
    for command in &done.next {
        println!("  {command}");
    }
    Ok(Exit::Ok)
}
