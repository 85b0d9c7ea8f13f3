//! `conform probe PROVIDER`: which JSON Schema keywords the suites use, and whether the
//! provider enforces, rejects, strips or ignores each; the cost first, then the matrix,
//! the findings, `reports/<run-id>/probe.json` and `probes.json` beside the allowlist.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use conform::config::{ProviderConfig, Selection, StructuredOutput, Workspace};
use conform::probe::file::{self, Probes, Update};
use conform::probe::{self, Support, findings, inventory};
use conform::provider::transport::{Endpoint, Transport};
use conform::provider::wire_format;
use conform::sim::{AnswerBook, SimServer};

use super::run::print_problems;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The provider to probe: a file stem in providers/.
    pub provider: String,
    /// Probe the keywords these suites' schemas use [default: every suite].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// How many times each of a keyword's two prompts is sent (the pushed one stops at
    /// the first answer that breaks the keyword).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeats: u32,
    /// The output limit of each probe request (never above the provider's own).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(16..))]
    pub max_output_tokens: u32,
    /// Print what probing would cost, and send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Report only keywords this provider enforces and the probed one ignores or strips
    /// (or the other way round) [default: every provider on file].
    #[arg(long, value_name = "PROVIDER")]
    pub primary: Option<String>,
}

pub async fn probe(global: &Global, args: ProbeArgs) -> anyhow::Result<Exit> {
    let selection = Selection {
        providers: vec![args.provider.clone()],
        suites: args.suites.clone(),
    };
    let workspace = match Workspace::load(&global.paths(), &selection) {
        Ok(ws) => ws,
        Err(problems) => {
            print_problems(&problems);
            return Ok(Exit::Usage);
        }
    };
    let Some(mut config) = workspace.providers.into_iter().next() else {
        return Ok(Exit::Usage);
    };
    // The results are for the provider as its file says; the probes' own output limit
    // and a simulation's address do not change what it does with a keyword.
    let as_written = config.clone();
    config.max_output_tokens = config.max_output_tokens.min(args.max_output_tokens);
    // The answer schemas and every tool's parameters: a fallback meets both.
    let schemas: Vec<_> = workspace
        .suites
        .iter()
        .flat_map(inventory::suite_schemas)
        .collect();
    let used = inventory::keywords(schemas.iter().map(|s| &s.schema));
    let (probes, not_probed) = probe::split_probeable(&used);
    let suites: Vec<&str> = workspace.suites.iter().map(|s| s.name.as_str()).collect();
    println!(
        "keywords the schemas of {} use: {}",
        suites.join(", "),
        used.len()
    );
    println!(
        "  probed: {}",
        if probes.is_empty() {
            "none".to_string()
        } else {
            probes
                .iter()
                .map(|p| p.keyword)
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    if !not_probed.is_empty() {
        println!(
            "  not probed (structure and annotations, which every structured-output mode needs or none enforces): {}",
            not_probed.join(", ")
        );
    }
    if probes.is_empty() {
        println!("nothing to probe");
        return Ok(Exit::Ok);
    }
    let cost = probe::cost(&probes, args.repeats, config.max_output_tokens);
    println!(
        "cost: at most {} requests to `{}` ({}), about {} prompt tokens and at most {} output tokens{}",
        cost.requests,
        config.name,
        config.model,
        cost.prompt_tokens,
        cost.output_tokens,
        if config.is_simulated() {
            " (a simulation: free)"
        } else {
            ""
        }
    );
    if matches!(
        config.structured_output,
        StructuredOutput::JsonObject | StructuredOutput::Prompt
    ) {
        println!(
            "note: structured_output = \"{}\" sends no schema: no keyword can be enforced, so none will be",
            serde_json::to_value(config.structured_output)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        );
    }
    if args.dry_run {
        println!("dry run: nothing sent");
        return Ok(Exit::Ok);
    }
    let key = match config.api_key() {
        Ok(key) => key,
        Err(e) => {
            eprintln!("error: {}: {e}", config.file.display());
            return Ok(Exit::Usage);
        }
    };
    // A simulated provider answers probes from the catalogue; it needs no case answers.
    let _sim = if config.is_simulated() {
        let server = SimServer::start(&config, Arc::new(AnswerBook::default())).await?;
        config.base_url = server.uri();
        Some(server)
    } else {
        None
    };
    let config = Arc::new(config);
    let endpoint = Endpoint::new(
        Arc::clone(&config),
        wire_format(config.wire_kind()),
        key,
        Transport::for_addresses([config.base_url.as_str()])?,
    );
    let outcomes = probe::run(&endpoint, &probes, args.repeats).await;

    let run_id = conform::run::new_run_id();
    let dir = global.reports_dir().join(&run_id);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let report = dir.join("probe.json");
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let probes_path = file::beside(&global.allowlist_path());
    let on_file = file::update(
        &probes_path,
        &Update {
            provider: &as_written,
            outcomes: &outcomes,
            probed_at: now.clone(),
            run_id: &run_id,
            report: report.display().to_string(),
        },
    )?;
    // keyword → provider → support, for every provider on file.
    let matrix_json: serde_json::Map<String, serde_json::Value> = probes
        .iter()
        .map(|p| {
            let row: serde_json::Map<String, serde_json::Value> = on_file
                .providers
                .iter()
                .filter_map(|(name, pp)| {
                    let k = pp.keywords.get(p.keyword)?;
                    Some((name.clone(), json!(k.support)))
                })
                .collect();
            (p.keyword.to_string(), serde_json::Value::Object(row))
        })
        .collect();
    let body = json!({
        "format": "conform.probe-report/v1",
        "run_id": run_id, "at": now, "provider": config.name, "model": config.model,
        "kind": config.kind, "wire": config.wire_kind(), "provider_digest": as_written.digest(),
        "suites": suites, "repeats": args.repeats, "max_output_tokens": config.max_output_tokens,
        "requests_sent": endpoint.requests_sent(),
        "keywords": outcomes, "not_probed": not_probed, "matrix": matrix_json,
    });
    std::fs::write(
        &report,
        format!("{}\n", serde_json::to_string_pretty(&body)?),
    )
    .with_context(|| format!("cannot write {}", report.display()))?;

    println!();
    print!("{}", matrix(&on_file, &probes, &config.name));
    for o in outcomes
        .iter()
        .filter(|o| o.support != Support::Inconclusive)
    {
        println!("  {}: {} ({})", o.keyword, o.support.as_str(), o.detail);
    }
    let inconclusive: Vec<_> = outcomes
        .iter()
        .filter(|o| o.support == Support::Inconclusive)
        .collect();
    for o in &inconclusive {
        println!("  {}: inconclusive ({})", o.keyword, o.detail);
    }

    // The findings, among the providers of the project.
    let everyone = Workspace::load_partial(
        &global.paths(),
        &Selection {
            providers: Vec::new(),
            suites: args.suites.clone(),
        },
    )
    .0;
    let providers: Vec<&ProviderConfig> = everyone.providers.iter().collect();
    let mut found = Vec::new();
    for suite in &everyone.suites {
        for f in findings::ignored(&on_file, &suite.schema, &providers, args.primary.as_deref()) {
            if f.candidate == config.name || f.primary == config.name {
                found.push((suite.schema_file.display().to_string(), f));
            }
        }
    }
    if !found.is_empty() {
        println!();
    }
    for (file, f) in &found {
        println!("{file}: {}: {}", f.path, f.message());
    }
    println!(
        "\nprobe: {} ({} requests sent); probes: {}",
        report.display(),
        endpoint.requests_sent(),
        probes_path.display()
    );
    Ok(if !found.is_empty() {
        Exit::Failed
    } else if !inconclusive.is_empty() {
        Exit::Inconclusive
    } else {
        Exit::Ok
    })
}

/// Keyword × provider: the probed provider first, then every other provider on file that
/// was probed for one of these keywords.
fn matrix(on_file: &Probes, probes: &[probe::catalogue::Probe], probed: &str) -> String {
    let mut columns = vec![probed.to_string()];
    let others: BTreeSet<&String> = on_file
        .providers
        .iter()
        .filter(|(name, p)| {
            *name != probed && probes.iter().any(|k| p.keywords.contains_key(k.keyword))
        })
        .map(|(name, _)| name)
        .collect();
    columns.extend(others.into_iter().cloned());
    let width = probes
        .iter()
        .map(|p| p.keyword.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let cell = |name: &String| name.len().max(12);
    let mut out = format!("{:width$}", "keyword");
    for c in &columns {
        out.push_str(&format!("  {:w$}", c, w = cell(c)));
    }
    out.push('\n');
    for p in probes {
        out.push_str(&format!("{:width$}", p.keyword));
        for c in &columns {
            let support = on_file
                .providers
                .get(c)
                .and_then(|pp| pp.keywords.get(p.keyword))
                .map_or("—", |k| k.support.as_str());
            out.push_str(&format!("  {:w$}", support, w = cell(c)));
        }
        out.push('\n');
    }
    out
}
