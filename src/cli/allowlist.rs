//! `conform allowlist schema | show | explain`: the allowlist for people and reviewers.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform::allowlist::{self, Allowlist, Change, Entry, Standing, standing};
use conform::config::{Paths, ProviderConfig, Suite};

use super::gate::Format;
use super::{EXIT_NONCONFORMANT, EXIT_OK, Global};

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
    /// Why PROVIDER may or may not take failover, suite by suite: permitted (on what
    /// evidence), never run, revoked by which run and why, or expired when.
    #[command(after_help = "Exit codes: 0 every suite permits PROVIDER, 1 at least one does not.")]
    Explain(ExplainArgs),
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

pub fn allowlist(global: &Global, args: AllowlistArgs) -> anyhow::Result<u8> {
    match args.command {
        AllowlistCommand::Schema => {
            print!("{}", allowlist::SCHEMA);
            Ok(EXIT_OK)
        }
        AllowlistCommand::Show(args) => show(global, &args),
        AllowlistCommand::Explain(args) => explain(global, &args),
        AllowlistCommand::RewriteLoop(args) => rewrite_loop(global, &args),
    }
}

fn stamp(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

fn show(global: &Global, args: &ShowArgs) -> anyhow::Result<u8> {
    let path = global.allowlist_path();
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
            return Ok(EXIT_NONCONFORMANT);
        }
    };
    let entries: Vec<(&Entry, &'static str)> = list
        .entries
        .iter()
        .map(|e| {
            let status = standing(&list, &e.suite, &e.provider, now).code();
            (e, status)
        })
        .collect();
    match args.format {
        Format::Json => {
            let entries: Vec<Value> = entries
                .iter()
                .map(|(e, status)| {
                    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
                    if let Some(map) = v.as_object_mut() {
                        map.insert("status".into(), Value::from(*status));
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
                .filter(|(_, s)| *s == "permitted")
                .map(|(e, _)| *e)
                .collect();
            let expired: Vec<&Entry> = entries
                .iter()
                .filter(|(_, s)| *s != "permitted")
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
                    left(&e.valid_until, now)
                );
                print_evidence(e);
            }
            if !expired.is_empty() {
                println!("\nexpired ({}):", expired.len());
                for e in expired {
                    println!(
                        "  {} × {}  expired at {}: rerun `conform run {} --suite {}`",
                        e.suite, e.provider, e.valid_until, e.provider, e.suite
                    );
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
    Ok(EXIT_OK)
}

fn print_evidence(e: &Entry) {
    let ev = &e.evidence;
    println!(
        "    model {}; served {}; fingerprints {}; tokenizer {}",
        e.model,
        list_or_none(&e.served_models),
        list_or_none(&e.system_fingerprints),
        e.tokenizer
    );
    println!(
        "    evidence: run {} ({}, conform {}): {} case{} × {} repeat{}, {}/{} calls passed \
({:.0}% after retries, {:.0}% first attempt)",
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
        ev.first_attempt_pass_rate * 100.0
    );
    if !ev.checks.is_empty() {
        let checks: Vec<String> = ev
            .checks
            .iter()
            .map(|(name, c)| format!("{name} {}/{}", c.passed, c.passed + c.failed))
            .collect();
        println!("    checks: {}", checks.join(", "));
    }
    println!("    report: {}", ev.report);
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

fn reasons(codes: &[String]) -> String {
    if codes.is_empty() {
        "(no finding recorded)".into()
    } else {
        codes.join(", ")
    }
}

fn left(until: &str, now: OffsetDateTime) -> String {
    match OffsetDateTime::parse(until, &Rfc3339) {
        Ok(t) if t > now => {
            let secs = (t - now).whole_seconds().max(0) as u64;
            // Minutes are precise enough for a lifetime counted in days.
            let rounded = std::time::Duration::from_secs(secs - secs % 60);
            humantime::format_duration(rounded).to_string()
        }
        _ => "none".into(),
    }
}

/// What the workspace says now about a suite and a provider, where it can be read.
struct Local {
    suite_digest: Option<String>,
    provider: Option<ProviderConfig>,
}

fn local(paths: &Paths, suite: &str, provider: &str) -> Local {
    Local {
        suite_digest: Suite::load(&paths.fixtures.join(suite))
            .ok()
            .map(|s| s.digest),
        provider: ProviderConfig::load(&paths.providers.join(format!("{provider}.toml"))).ok(),
    }
}

fn explain(global: &Global, args: &ExplainArgs) -> anyhow::Result<u8> {
    let path = global.allowlist_path();
    let paths = global.paths();
    let now = OffsetDateTime::now_utc();
    let list = Allowlist::load(&path);
    let provider = &args.provider;

    let suites: Vec<String> = if args.suites.is_empty() {
        let mut names: Vec<String> = fixture_suites(&paths.fixtures);
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
    let provider_known = paths.providers.join(format!("{provider}.toml")).is_file();

    let mut all_permitted = !suites.is_empty();
    let mut rows = Vec::new();
    for suite in &suites {
        let local = local(&paths, suite, provider);
        let (status, detail, record, mut notes) = match &list {
            Err(denial) => {
                all_permitted = false;
                (
                    denial.reason.code(),
                    format!("nothing is permitted: {}", denial.detail),
                    Value::Null,
                    Vec::new(),
                )
            }
            Ok(list) => {
                let s = standing(list, suite, provider, now);
                let (detail, record) = describe(&s, suite, provider, now);
                if !matches!(s, Standing::Permitted { .. }) {
                    all_permitted = false;
                }
                (s.code(), detail, record, Vec::new())
            }
        };
        if let Ok(list) = &list
            && let Some(entry) = list.entry(suite, provider)
        {
            if let Some(digest) = &local.suite_digest
                && *digest != entry.suite_digest
            {
                notes.push(format!(
                    "fixtures/{suite} has changed since the evidence ({} now, {} then): a gate \
given the current digest denies it (suite_changed); rerun `conform run {provider} --suite {suite}`",
                    digest, entry.suite_digest
                ));
            }
            if let Some(config) = &local.provider
                && config.digest() != entry.provider_digest
            {
                notes.push(format!(
                    "providers/{provider}.toml has changed since the evidence: rerun `conform run \
{provider} --suite {suite}`"
                ));
            }
        }
        rows.push((suite.clone(), status, detail, record, notes));
    }

    match args.format {
        Format::Json => {
            let suites: Vec<Value> = rows
                .iter()
                .map(|(suite, status, detail, record, notes)| {
                    let mut v =
                        json!({"suite": suite, "status": status, "detail": detail, "notes": notes});
                    if let (Some(map), Some(extra)) = (v.as_object_mut(), record.as_object()) {
                        map.extend(extra.clone());
                    }
                    v
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "provider": provider, "path": path, "at": stamp(now),
                    "provider_file": provider_known, "permitted": all_permitted, "suites": suites,
                }))?
            );
        }
        Format::Text => {
            println!("{provider} in {}:", path.display());
            if !provider_known {
                println!(
                    "  (there is no providers/{provider}.toml in {})",
                    paths.providers.display()
                );
            }
            if rows.is_empty() {
                println!("  no suite found: name one with --suite");
            }
            for (suite, status, detail, _, notes) in &rows {
                println!("  {suite}: {status}: {detail}");
                for note in notes {
                    println!("    note: {note}");
                }
            }
        }
    }
    Ok(if all_permitted {
        EXIT_OK
    } else {
        EXIT_NONCONFORMANT
    })
}

/// A sentence for people, and the record it rests on (for JSON).
fn describe(s: &Standing, suite: &str, provider: &str, now: OffsetDateTime) -> (String, Value) {
    match s {
        Standing::Permitted { entry } => {
            let ev = &entry.evidence;
            (
                format!(
                    "failover is permitted until {} ({} left), on run {}: {}/{} calls passed \
({:.0}% after retries, {:.0}% first attempt), served {}; report {}",
                    entry.valid_until,
                    left(&entry.valid_until, now),
                    ev.run_id,
                    ev.passed,
                    ev.calls,
                    ev.pass_rate * 100.0,
                    ev.first_attempt_pass_rate * 100.0,
                    list_or_none(&entry.served_models),
                    ev.report
                ),
                json!({ "entry": entry }),
            )
        }
        Standing::Expired { entry } => (
            format!(
                "expired at {} (evidence from run {}, made {}): rerun `conform run {provider} --suite {suite}`",
                entry.valid_until, entry.evidence.run_id, entry.generated_at
            ),
            json!({ "entry": entry }),
        ),
        Standing::Revoked { revocation: r } => (
            format!(
                "revoked by run {} at {} because of: {}; report {}",
                r.run_id,
                r.at,
                reasons(&r.reasons),
                r.report
            ),
            json!({ "revocation": r }),
        ),
        Standing::NeverRun => (
            format!(
                "never run: no conclusive run of {provider} on {suite} is recorded; run `conform run {provider} --suite {suite}`"
            ),
            Value::Null,
        ),
    }
}

fn fixture_suites(dir: &Path) -> Vec<String> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    listing
        .flatten()
        .filter(|e| e.path().join("suite.toml").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect()
}

fn rewrite_loop(global: &Global, args: &RewriteLoopArgs) -> anyhow::Result<u8> {
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
    Ok(EXIT_OK)
}
