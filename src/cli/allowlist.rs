//! `conform allowlist schema | show | explain`: the allowlist for people and reviewers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform::allowlist::{
    self, Allowlist, Change, Denial, Entry, LatencyEvidence, Permit, Query, decide, status,
};

use super::gate::Format;
use super::{Exit, Global};

#[derive(Debug, Args)]
pub struct AllowlistArgs {
    #[command(subcommand)]
    pub command: AllowlistCommand,
}

#[derive(Debug, Subcommand)]
pub enum AllowlistCommand {
    /// Print the JSON Schema (draft 2020-12) of the conform.allowlist/v1 format.
    Schema,
    /// What is allowed, until when, on what evidence; and what was revoked.
    #[command(
        after_help = "Exit codes: 0 the allowlist was read, 1 it is missing or \
unreadable (nothing is permitted)."
    )]
    Show(ShowArgs),
    /// Why PROVIDER may or may not take failover, suite by suite, decided as `conform
    /// gate` decides: permitted (on what evidence), never run, revoked by which run and
    /// why, expired when, or made with another suite or provider configuration.
    #[command(
        after_help = "Exit codes: 0 every suite permits PROVIDER, 1 at least one does not, \
2 the provider or a suite is not in this project."
    )]
    Explain(ExplainArgs),
    /// Check every entry's signature against the trust file (trust.toml or --trust).
    #[command(
        after_help = "Exit codes: 0 every entry is signed by a trusted key, as it is now; 1 an \
entry is unsigned, edited after signing or signed by an unlisted key (each named); 2 no trust \
file, or an allowlist or trust file that cannot be read."
    )]
    Verify,
    /// Rewrite the allowlist in a loop with the library writer (crash tests).
    #[command(hide = true)]
    RewriteLoop(RewriteLoopArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The provider, by file name in providers/.
    pub provider: String,
    /// Only these suites [default: every suite in fixtures/ or in the allowlist].
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct RewriteLoopArgs {
    /// An entry (JSON) to grant again and again; its run id becomes `gen-N`.
    #[arg(long)]
    pub entry: PathBuf,
    /// The first generation N.
    #[arg(long, default_value_t = 1)]
    pub from: u64,
    /// How many generations to write.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
}

pub fn allowlist(global: &Global, args: AllowlistArgs) -> anyhow::Result<Exit> {
    match args.command {
        AllowlistCommand::Schema => {
            print!("{}", allowlist::SCHEMA);
            Ok(Exit::Ok)
        }
        AllowlistCommand::Show(args) => show(global, &args),
        AllowlistCommand::Explain(args) => explain(global, &args),
        AllowlistCommand::Verify => verify(global),
        AllowlistCommand::RewriteLoop(args) => rewrite_loop(global, &args),
    }
}

fn stamp(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

fn show(global: &Global, args: &ShowArgs) -> anyhow::Result<Exit> {
    let path = global.allowlist_path();
    let paths = global.paths();
    let now = OffsetDateTime::now_utc();
    let list = match Allowlist::load(&path) {
        Ok(list) => list,
        Err(denial) => {
            match args.format {
                Format::Json => println!(
                    "{}",
                    json!({"path": path, "readable": false, "reason": denial.reason.code(),
                           "detail": denial.detail, "entries": [], "revocations": []})
                ),
                Format::Text => println!(
                    "nothing is permitted ({}): {}",
                    denial.reason.code(),
                    denial.detail
                ),
            }
            return Ok(Exit::Failed);
        }
    };
    // Each entry as `conform gate` would decide it now, against this project's files.
    let entries: Vec<(&Entry, Result<Permit, Denial>)> = list
        .entries
        .iter()
        .map(|e| {
            let query = Query::new(&e.suite, &e.provider, now).project(&paths);
            (e, list.decide_query(&query))
        })
        .collect();
    match args.format {
        Format::Json => {
            let entries: Vec<Value> = entries
                .iter()
                .map(|(e, decision)| {
                    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
                    if let Some(map) = v.as_object_mut() {
                        map.insert("status".into(), Value::from(status(decision)));
                        if let Err(denial) = decision {
                            map.insert("detail".into(), Value::from(denial.detail.clone()));
                        }
                    }
                    v
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "path": path, "readable": true, "format": list.format, "at": stamp(now),
                    "entries": entries, "revocations": list.revocations, "malformed": list.malformed,
                }))?
            );
        }
        Format::Text => {
            println!("allowlist: {} ({})", path.display(), list.format);
            let permitted: Vec<&Entry> = entries
                .iter()
                .filter(|(_, d)| d.is_ok())
                .map(|(e, _)| *e)
                .collect();
            println!("\npermitted now ({}):", permitted.len());
            if permitted.is_empty() {
                println!("  nothing: no failover is allowed");
            }
            for e in permitted {
                println!(
                    "  {} × {}  until {} ({} left)",
                    e.suite,
                    e.provider,
                    e.valid_until,
                    allowlist::explain::time_left(&e.valid_until, now)
                );
                print_evidence(e);
            }
            // The entries that permit nothing, one section per reason.
            let mut denied: BTreeMap<&str, Vec<(&Entry, &Denial)>> = BTreeMap::new();
            for (e, decision) in &entries {
                if let Err(denial) = decision {
                    denied
                        .entry(denial.reason.code())
                        .or_default()
                        .push((*e, denial));
                }
            }
            for (code, items) in denied {
                println!("\n{code} ({}):", items.len());
                for (e, denial) in items {
                    println!("  {} × {}  {}", e.suite, e.provider, denial.detail);
                    if denial.reason.lifted_by_rerun() {
                        println!(
                            "    to renew: `conform run {} --suite {}`",
                            e.provider, e.suite
                        );
                    }
                    print_evidence(e);
                }
            }
            if !list.revocations.is_empty() {
                println!("\nrevoked ({}):", list.revocations.len());
                for r in &list.revocations {
                    println!(
                        "  {} × {}  by run {} at {} because of: {}",
                        r.suite,
                        r.provider,
                        r.run_id,
                        r.at,
                        reasons(&r.reasons)
                    );
                    println!("    report: {}", r.report);
                }
            }
            if list.malformed > 0 {
                println!(
                    "\nwarning: {} entr{} in the file do{} not have the v1 shape and permit nothing",
                    list.malformed,
                    if list.malformed == 1 { "y" } else { "ies" },
                    if list.malformed == 1 { "es" } else { "" }
                );
            }
        }
    }
    Ok(Exit::Ok)
}

fn print_evidence(e: &Entry) {
    let ev = &e.evidence;
    println!(
        "    model {}; served {}; fingerprints {}; tokenizer {}",
        e.model,
        allowlist::explain::list_or_none(&e.served_models),
        allowlist::explain::list_or_none(&e.system_fingerprints),
        e.tokenizer
    );
    println!(
        "    evidence: run {} ({}, conform {}): {} case{} × {} repeat{}, {}/{} calls passed \
({:.0}% after retries, {:.0}% first attempt), ruling out {}",
        ev.run_id,
        e.generated_at,
        ev.conform_version,
        ev.cases,
        if ev.cases == 1 { "" } else { "s" },
        ev.repeats,
        if ev.repeats == 1 { "" } else { "s" },
        ev.passed,
        ev.calls,
        ev.pass_rate * 100.0,
        ev.first_attempt_pass_rate * 100.0,
        allowlist::RulesOut::of(ev.calls, ev.passed).words()
    );
    if !ev.checks.is_empty() {
        let checks: Vec<String> = ev
            .checks
            .iter()
            .map(|(name, c)| format!("{name} {}/{}", c.passed, c.passed + c.failed))
            .collect();
        println!("    checks: {}", checks.join(", "));
    }
    match &ev.latency {
        Some(l) => println!(
            "    latency p50/p95/p99: {}; first token: {} ({} calls, ±{:.0}%)",
            LatencyEvidence::words(&l.total_ms),
            LatencyEvidence::words(&l.first_token_ms),
            l.calls,
            l.relative_error * 100.0
        ),
        None => println!("    latency: not recorded (evidence made before conform kept it)"),
    }
    println!("    report: {}", ev.report);
}

fn reasons(codes: &[String]) -> String {
    if codes.is_empty() {
        "(no finding recorded)".into()
    } else {
        codes.join(", ")
    }
}

fn explain(global: &Global, args: &ExplainArgs) -> anyhow::Result<Exit> {
    let path = global.allowlist_path();
    let paths = global.paths();
    let now = OffsetDateTime::now_utc();
    let list = Allowlist::load(&path);
    let provider = &args.provider;

    let suites: Vec<String> = if args.suites.is_empty() {
        let mut names = allowlist::local::suite_names(&paths.fixtures);
        if let Ok(list) = &list {
            names.extend(list.entries.iter().map(|e| e.suite.clone()));
            names.extend(list.revocations.iter().map(|r| r.suite.clone()));
        }
        names.sort();
        names.dedup();
        names
    } else {
        args.suites.clone()
    };
    if suites.is_empty() {
        eprintln!(
            "error: no suite in {} or in the allowlist: name one with --suite",
            paths.fixtures.display()
        );
        return Ok(Exit::Usage);
    }

    // Every suite as `conform gate` would decide it now.
    let rows: Vec<(String, Result<Permit, Denial>)> = suites
        .iter()
        .map(|suite| {
            let query = Query::new(suite, provider, now).project(&paths);
            let decision = match &list {
                Ok(list) => list.decide_query(&query),
                // Unreadable: the same denial, or an unknown suite or provider first.
                Err(_) => decide(&path, &query),
            };
            (suite.clone(), decision)
        })
        .collect();

    match args.format {
        Format::Json => {
            let suites: Vec<Value> = rows
                .iter()
                .map(|(suite, decision)| {
                    let mut v = json!({
                        "suite": suite,
                        "status": status(decision),
                        "detail": allowlist::explain::sentence(decision, suite, provider, now),
                    });
                    if let Some(map) = v.as_object_mut() {
                        match decision {
                            Ok(permit) => {
                                map.insert("entry".into(), json!(permit.entry));
                            }
                            Err(denial) => {
                                if let Some(entry) = &denial.entry {
                                    map.insert("entry".into(), json!(entry));
                                }
                                if let Some(r) = &denial.revocation {
                                    map.insert("revocation".into(), json!(r));
                                }
                            }
                        }
                    }
                    v
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "provider": provider, "path": path, "at": stamp(now),
                    "permitted": rows.iter().all(|(_, d)| d.is_ok()), "suites": suites,
                }))?
            );
        }
        Format::Text => {
            println!("{provider} in {}:", path.display());
            for (suite, decision) in &rows {
                println!(
                    "  {suite}: {}: {}",
                    status(decision),
                    allowlist::explain::sentence(decision, suite, provider, now)
                );
            }
        }
    }
    let usage_error = rows
        .iter()
        .any(|(_, d)| matches!(d, Err(denial) if denial.reason.is_usage_error()));
    Ok(if usage_error {
        Exit::Usage
    } else if rows.iter().all(|(_, d)| d.is_ok()) {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

fn rewrite_loop(global: &Global, args: &RewriteLoopArgs) -> anyhow::Result<Exit> {
    use std::io::Write;
    let text = std::fs::read(&args.entry)
        .with_context(|| format!("cannot read {}", args.entry.display()))?;
    let mut entry: Entry = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not an allowlist entry", args.entry.display()))?;
    let path = global.allowlist_path();
    let mut out = std::io::stdout().lock();
    for n in args.from..args.from.saturating_add(args.count) {
        entry.evidence.run_id = format!("gen-{n}");
        allowlist::update(&path, &[Change::Grant(Box::new(entry.clone()))])?;
        // Printed only once the new version is in place: the crash test holds the file
        // to "this generation or the next".
        writeln!(out, "{n}")?;
        out.flush()?;
    }
    Ok(Exit::Ok)
}

fn verify(global: &Global) -> anyhow::Result<Exit> {
    let paths = global.paths();
    let trust = match conform::sign::Trust::load(&paths.trust) {
        Ok(Some(trust)) => trust,
        Ok(None) => {
            eprintln!(
                "error: no trust file at {}: list the keys allowed to sign (`conform keys new`), or name one with --trust",
                paths.trust.display()
            );
            return Ok(Exit::Usage);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Usage);
        }
    };
    let path = global.allowlist_path();
    let list = match Allowlist::load(&path) {
        Ok(list) => list,
        Err(denial) => {
            eprintln!("error: {}", denial.detail);
            return Ok(Exit::Usage);
        }
    };
    let checked = allowlist::attest::verify_all(&list, &trust);
    let mut failed = 0;
    for c in &checked {
        match &c.signer {
            Ok(by) => println!("ok        {} × {}: signed by {by}", c.suite, c.provider),
            Err(why) => {
                failed += 1;
                println!("{:9} {} × {}: {why}", why_code(why), c.suite, c.provider);
            }
        }
    }
    println!(
        "{} of {} entries verified against {}",
        checked.len() - failed,
        checked.len(),
        trust.path.display()
    );
    Ok(if failed == 0 { Exit::Ok } else { Exit::Failed })
}

fn why_code(why: &conform::sign::Unverified) -> &'static str {
    use conform::sign::Unverified;
    match why {
        Unverified::Unsigned => "unsigned",
        Unverified::SignatureInvalid(_) => "invalid",
        Unverified::UntrustedKey(_) => "untrusted",
    }
}
