//! What `conform allowlist show`, `conform allowlist explain` and `conform gate` answer: each
//! a value a Rust caller can read, serialized for `--format json` and rendered for people
//! by `Display`. Every pair is decided by [`super::decide`] with the project's files, as
//! a gate decides it; nothing here re-derives a decision.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Seen;
use super::attest::{Verification, VerifyError};
use super::local::suite_names;
use super::query::{Query, decide, decide_query};
use super::state::{StateError, keeping};
use conform_allowlist::{Allowlist, Entry, Evidence, LatencyEvidence, Revocation, RulesOut};
use conform_allowlist::{Denial, Permit};
use conform_allowlist::{list_or_none, sentence, status, time_left};
use conform_config::Paths;

fn stamp(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// `conform allowlist show`: the file as a gate reads it now.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Show {
    /// The file could not be trusted: nothing is permitted.
    Unreadable(Unreadable),
    /// The file was read: each entry with what a gate decides now.
    Readable(Listing),
}

/// An allowlist that permits nothing because it could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    /// The allowlist file.
    pub path: PathBuf,
    /// Always false: what a script branches on.
    pub readable: bool,
    /// Why it could not be read, as a denial reason code.
    pub reason: &'static str,
    /// Why, in a sentence.
    pub detail: String,
    /// Always empty: an unreadable file lists nothing a reader could rely on.
    pub entries: Vec<Entry>,
    /// Always empty, like `entries`.
    pub revocations: Vec<Revocation>,
}

/// Every entry of a readable allowlist with its decision now.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    /// The allowlist file.
    pub path: PathBuf,
    /// Always true: what a script branches on.
    pub readable: bool,
    /// The file's `format`.
    pub format: String,
    /// The instant every entry was decided at, RFC 3339.
    pub at: String,
    /// Every entry, each with its decision now.
    pub entries: Vec<ShownEntry>,
    /// Every revocation the file records.
    pub revocations: Vec<Revocation>,
    /// Entries that did not have the v1 shape: they permit nothing.
    pub malformed: usize,
    /// The instant every entry was decided at (`at`), which the text counts time left from.
    #[serde(skip)]
    pub now: OffsetDateTime,
}

/// An entry as the file holds it, with the status a gate would give it now.
#[derive(Debug, Clone, Serialize)]
pub struct ShownEntry {
    /// The entry, as the file holds it.
    #[serde(flatten)]
    pub entry: Entry,
    /// `permitted`, or the denial's reason code.
    pub status: &'static str,
    /// Why it permits nothing (absent when permitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A fresh run would lift the denial.
    #[serde(skip)]
    pub renewable: bool,
}

impl Show {
    /// Reads `path` and decides each of its entries at `now` against the project's files,
    /// and what the reader has seen, kept in the `state` file when one is given.
    pub fn of(
        path: &Path,
        paths: &Paths,
        now: OffsetDateTime,
        state: Option<&Path>,
    ) -> Result<Show, StateError> {
        keeping(state, path, Some(&paths.trust), now, |seen| {
            Show::seeing(path, paths, now, seen)
        })
    }

    fn seeing(path: &Path, paths: &Paths, now: OffsetDateTime, seen: Option<&Seen>) -> Show {
        let list = match Allowlist::load(path) {
            Ok(list) => list,
            Err(denial) => {
                return Show::Unreadable(Unreadable {
                    path: path.to_path_buf(),
                    readable: false,
                    reason: denial.reason.code(),
                    detail: denial.detail,
                    entries: Vec::new(),
                    revocations: Vec::new(),
                });
            }
        };
        let entries = (list.entries.iter())
            .map(|e| {
                let query = Query::new(&e.suite, &e.provider, now).project(paths);
                let decision = decide_query(&list, &query.seen(seen));
                let (detail, renewable) = match &decision {
                    Ok(_) => (None, false),
                    Err(d) => (Some(d.detail.clone()), d.reason.lifted_by_rerun()),
                };
                ShownEntry {
                    entry: e.clone(),
                    status: status(&decision),
                    detail,
                    renewable,
                }
            })
            .collect();
        Show::Readable(Listing {
            path: path.to_path_buf(),
            readable: true,
            format: list.format,
            at: stamp(now),
            entries,
            revocations: list.revocations,
            malformed: list.malformed,
            now,
        })
    }

    /// The JSON of `--format json`: one line when unreadable, indented when read.
    pub fn json(&self) -> serde_json::Result<String> {
        match self {
            Show::Unreadable(_) => serde_json::to_string(self),
            Show::Readable(_) => serde_json::to_string_pretty(self),
        }
    }

    /// The file could be read (a gate may permit something from it).
    pub fn readable(&self) -> bool {
        matches!(self, Show::Readable(_))
    }
}

impl fmt::Display for Show {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = match self {
            Show::Unreadable(u) => {
                return writeln!(f, "nothing is permitted ({}): {}", u.reason, u.detail);
            }
            Show::Readable(list) => list,
        };
        let now = list.now;
        writeln!(f, "allowlist: {} ({})", list.path.display(), list.format)?;
        let permitted: Vec<&ShownEntry> = (list.entries.iter())
            .filter(|e| e.detail.is_none())
            .collect();
        writeln!(f, "\npermitted now ({}):", permitted.len())?;
        if permitted.is_empty() {
            writeln!(f, "  nothing: no failover is allowed")?;
        }
        for shown in permitted {
            let e = &shown.entry;
            writeln!(
                f,
                "  {} × {}  until {} ({} left)",
                e.suite,
                e.provider,
                e.valid_until,
                time_left(&e.valid_until, now)
            )?;
            write_evidence(f, e)?;
        }
        // The entries that permit nothing, one section per reason.
        let mut denied: BTreeMap<&str, Vec<(&Entry, &str, bool)>> = BTreeMap::new();
        for shown in &list.entries {
            if let Some(detail) = &shown.detail {
                (denied.entry(shown.status).or_default()).push((
                    &shown.entry,
                    detail,
                    shown.renewable,
                ));
            }
        }
        for (code, items) in denied {
            writeln!(f, "\n{code} ({}):", items.len())?;
            for (e, detail, renewable) in items {
                writeln!(f, "  {} × {}  {}", e.suite, e.provider, detail)?;
                if renewable {
                    writeln!(
                        f,
                        "    to renew: `conform run {} --suite {}`",
                        e.provider, e.suite
                    )?;
                }
                write_evidence(f, e)?;
            }
        }
        if !list.revocations.is_empty() {
            writeln!(f, "\nrevoked ({}):", list.revocations.len())?;
            for r in &list.revocations {
                writeln!(
                    f,
                    "  {} × {}  by run {} at {} because of: {}",
                    r.suite,
                    r.provider,
                    r.run_id,
                    r.at,
                    reasons(&r.reasons)
                )?;
                writeln!(f, "    report: {}", r.report)?;
            }
        }
        if list.malformed > 0 {
            writeln!(
                f,
                "\nwarning: {} entr{} in the file do{} not have the v1 shape and permit nothing",
                list.malformed,
                if list.malformed == 1 { "y" } else { "ies" },
                if list.malformed == 1 { "es" } else { "" }
            )?;
        }
        Ok(())
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// What an entry rests on, indented under its line.
fn write_evidence(f: &mut fmt::Formatter<'_>, e: &Entry) -> fmt::Result {
    let ev: &Evidence = &e.evidence;
    let signers = super::attest::signed_by(e.attestation.as_ref());
    if !signers.is_empty() {
        writeln!(f, "    signed by key {}", signers.join(", "))?;
    }
    writeln!(
        f,
        "    model {}; served {}; fingerprints {}; tokenizer {}",
        e.model,
        list_or_none(&e.served_models),
        list_or_none(&e.system_fingerprints),
        e.tokenizer
    )?;
    writeln!(
        f,
        "    evidence: run {} ({}, conform {}): {} case{} × {} repeat{}, {}/{} calls passed \
({:.0}% after retries, {:.0}% first attempt), ruling out {}",
        ev.run_id,
        e.generated_at,
        ev.conform_version,
        ev.cases,
        plural(ev.cases),
        ev.repeats,
        plural(u64::from(ev.repeats)),
        ev.passed,
        ev.calls,
        ev.pass_rate * 100.0,
        ev.first_attempt_pass_rate * 100.0,
        RulesOut::of(ev.calls, ev.passed).words()
    )?;
    if !ev.checks.is_empty() {
        let checks: Vec<String> = (ev.checks.iter())
            .map(|(name, c)| format!("{name} {}/{}", c.passed, c.passed + c.failed))
            .collect();
        writeln!(f, "    checks: {}", checks.join(", "))?;
    }
    if let Some(d) = &ev.differential {
        let drift = match d.drift_rules_out() {
            Some(r) => format!("ruling out {}", r.words(&d.reference)),
            None => "no compared field passed".to_string(),
        };
        writeln!(
            f,
            "    judged against {}{}: {drift}",
            d.reference,
            (d.reference_run.as_deref())
                .map(|run| format!(" (its answers in run {run})"))
                .unwrap_or_default()
        )?;
    }
    match &ev.latency {
        Some(l) => writeln!(
            f,
            "    latency p50/p95/p99: {}; first token: {} ({} calls, ±{:.0}%)",
            LatencyEvidence::words(&l.total_ms),
            LatencyEvidence::words(&l.first_token_ms),
            l.calls,
            l.relative_error * 100.0
        )?,
        None => writeln!(
            f,
            "    latency: not recorded (evidence made before conform kept it)"
        )?,
    }
    writeln!(f, "    report: {}", ev.report)
}

fn reasons(codes: &[String]) -> String {
    if codes.is_empty() {
        "(no finding recorded)".into()
    } else {
        codes.join(", ")
    }
}

/// `conform allowlist explain` named no suite, and neither the project nor the
/// allowlist has one.
#[derive(Debug, thiserror::Error)]
#[error("no suite in {} or in the allowlist: name one with --suite", fixtures.display())]
pub struct NoSuite {
    /// The fixtures folder that holds no suite.
    pub fixtures: PathBuf,
}

/// Why `conform allowlist explain` could not explain.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// No suite to explain.
    #[error(transparent)]
    NoSuite(NoSuite),
    /// The reader's state file could not be read.
    #[error(transparent)]
    State(#[from] StateError),
}

/// `conform allowlist explain`: a provider, suite by suite, decided as a gate decides.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The provider explained.
    pub provider: String,
    /// The allowlist file.
    pub path: PathBuf,
    /// The instant every suite was decided at, RFC 3339.
    pub at: String,
    /// Every suite permits the provider.
    pub permitted: bool,
    /// Each suite's decision, in name order.
    pub suites: Vec<SuiteStanding>,
}

/// One suite's decision for the provider, in words.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteStanding {
    /// The suite, by name.
    pub suite: String,
    /// `permitted`, or the denial's reason code.
    pub status: &'static str,
    /// Why, in a sentence.
    pub detail: String,
    /// The entry the decision was made on, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<Entry>,
    /// The revocation behind a denial, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation: Option<Revocation>,
    /// The suite or the provider is not in this project.
    #[serde(skip)]
    pub usage_error: bool,
}

impl Explanation {
    /// Decides `provider` at `now` for `suites`, or for every suite in the project's
    /// fixtures and in the allowlist when none is named, against what the reader has
    /// seen, kept in the `state` file when one is given.
    pub fn of(
        path: &Path,
        paths: &Paths,
        provider: &str,
        suites: &[String],
        now: OffsetDateTime,
        state: Option<&Path>,
    ) -> Result<Explanation, ExplainError> {
        keeping(state, path, Some(&paths.trust), now, |seen| {
            Explanation::seeing(path, paths, provider, suites, (now, seen))
        })?
        .map_err(ExplainError::NoSuite)
    }

    fn seeing(
        path: &Path,
        paths: &Paths,
        provider: &str,
        suites: &[String],
        (now, seen): (OffsetDateTime, Option<&Seen>),
    ) -> Result<Explanation, NoSuite> {
        let list = Allowlist::load(path);
        let suites: Vec<String> = if suites.is_empty() {
            let mut names = suite_names(&paths.fixtures);
            if let Ok(list) = &list {
                names.extend(list.entries.iter().map(|e| e.suite.clone()));
                names.extend(list.revocations.iter().map(|r| r.suite.clone()));
            }
            names.sort();
            names.dedup();
            names
        } else {
            suites.to_vec()
        };
        if suites.is_empty() {
            return Err(NoSuite {
                fixtures: paths.fixtures.clone(),
            });
        }
        let standings: Vec<SuiteStanding> = (suites.into_iter())
            .map(|suite| {
                let query = Query::new(&suite, provider, now).project(paths).seen(seen);
                let decision = match &list {
                    Ok(list) => decide_query(list, &query),
                    // Unreadable: the same denial, or an unknown suite or provider first.
                    Err(_) => decide(path, &query),
                };
                SuiteStanding::of(&decision, &suite, provider, now)
            })
            .collect();
        Ok(Explanation {
            provider: provider.to_string(),
            path: path.to_path_buf(),
            at: stamp(now),
            permitted: standings.iter().all(|s| s.entry_permits()),
            suites: standings,
        })
    }

    /// A suite or the provider is not in this project.
    pub fn usage_error(&self) -> bool {
        self.suites.iter().any(|s| s.usage_error)
    }
}

impl SuiteStanding {
    fn of(
        decision: &Result<Permit, Denial>,
        suite: &str,
        provider: &str,
        now: OffsetDateTime,
    ) -> SuiteStanding {
        let (entry, revocation, usage_error) = match decision {
            Ok(permit) => (Some(permit.entry.clone()), None, false),
            Err(denial) => (
                denial.entry.as_deref().cloned(),
                denial.revocation.as_deref().cloned(),
                denial.reason.is_usage_error(),
            ),
        };
        SuiteStanding {
            suite: suite.to_string(),
            status: status(decision),
            detail: sentence(decision, suite, provider, now),
            entry,
            revocation,
            usage_error,
        }
    }

    fn entry_permits(&self) -> bool {
        self.status == "permitted"
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} in {}:", self.provider, self.path.display())?;
        for s in &self.suites {
            writeln!(f, "  {}: {}: {}", s.suite, s.status, s.detail)?;
        }
        Ok(())
    }
}

/// `conform allowlist verify`: the allowlist at `path` checked against the trust file at
/// `trust`, its entries also against what the reader has seen, kept in the `state` file
/// when one is given. The inner error: nothing could be checked.
pub fn verify(
    path: &Path,
    trust: &Path,
    state: Option<&Path>,
) -> Result<Result<Verification, VerifyError>, StateError> {
    let now = OffsetDateTime::now_utc();
    keeping(state, path, Some(trust), now, |seen| {
        Verification::of(path, trust, seen)
    })
}

/// `conform gate`'s answer: permitted on what evidence, or denied and why.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum GateAnswer {
    /// Failover is permitted, on this evidence.
    Permitted(Box<GatePermit>),
    /// Failover is denied, and why.
    Denied(GateDenial),
}

/// A permit as `conform gate --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct GatePermit {
    /// Always true: what a script branches on.
    pub permitted: bool,
    /// The suite asked about.
    pub suite: String,
    /// The provider asked about.
    pub provider: String,
    /// When the entry stops permitting, RFC 3339.
    pub valid_until: String,
    /// What the entry rests on.
    pub evidence: Evidence,
    /// The keys whose signatures the entry carries (none when unsigned).
    pub signed_by: Vec<String>,
    /// The failure rate the evidence rules out, recomputed from its counts.
    pub rules_out: RulesOut,
    /// The failure rate the evidence had to rule out, and who set it (none for the
    /// orchestrator contract's reading).
    pub required: Option<conform_allowlist::Bound>,
    /// What the comparison with a reference rules out, when the evidence has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_rules_out: Option<conform_allowlist::DriftRulesOut>,
    /// The drift the comparison had to rule out, when one was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_required: Option<conform_allowlist::Bound>,
    /// [`Permit::rules_out_words`], for people.
    #[serde(skip)]
    pub words: String,
}

/// A denial as `conform gate --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct GateDenial {
    /// Always false: what a script branches on.
    pub permitted: bool,
    /// The suite asked about.
    pub suite: String,
    /// The provider asked about.
    pub provider: String,
    /// The denial's stable reason code.
    pub reason: &'static str,
    /// Why, in a sentence, and what to do about it.
    pub detail: String,
    /// The finding codes of the revocation behind the denial, if one is.
    pub findings: Option<Vec<String>>,
    /// The suite or the provider is not in this project.
    #[serde(skip)]
    pub usage_error: bool,
}

impl GateAnswer {
    /// A permit with no trust file rests on a file anyone who can write it could have
    /// written: said once, where a person or a CI log sees it.
    pub fn unsigned_note(&self, trust: &Path) -> Option<String> {
        (matches!(self, GateAnswer::Permitted(_)) && !trust.exists()).then(|| {
            format!(
                "note: no trust file ({}): entries need no signature (docs/signing.md)",
                trust.display()
            )
        })
    }

    /// Asks the allowlist at `path` the gate's question, `query`, remembering what it
    /// states in the `state` file when one is given (`--state`).
    pub fn ask(
        path: &Path,
        query: &Query<'_>,
        state: Option<&Path>,
    ) -> Result<GateAnswer, StateError> {
        let trust = query.project.map(|p| p.trust.as_path());
        keeping(state, path, trust, query.at, |seen| {
            let decision = decide(path, &query.seen(seen));
            GateAnswer::of(decision, query.suite, query.provider)
        })
    }

    /// The answer for `decision` about (`suite`, `provider`).
    pub fn of(decision: Result<Permit, Denial>, suite: &str, provider: &str) -> GateAnswer {
        match decision {
            Ok(permit) => GateAnswer::Permitted(Box::new(GatePermit {
                permitted: true,
                suite: suite.to_string(),
                provider: provider.to_string(),
                words: permit.rules_out_words(),
                required: permit.failure_bound,
                drift_required: permit.drift_bound,
                drift_rules_out: (permit.entry.evidence.differential.as_ref())
                    .and_then(|d| d.drift_rules_out()),
                valid_until: permit.entry.valid_until,
                rules_out: RulesOut::of(permit.entry.evidence.calls, permit.entry.evidence.passed),
                signed_by: (super::attest::signed_by(permit.entry.attestation.as_ref()).iter())
                    .map(|k| k.to_string())
                    .collect(),
                evidence: permit.entry.evidence,
            })),
            Err(denial) => GateAnswer::Denied(GateDenial {
                permitted: false,
                suite: suite.to_string(),
                provider: provider.to_string(),
                reason: denial.reason.code(),
                usage_error: denial.reason.is_usage_error(),
                detail: denial.detail,
                findings: denial.revocation.map(|r| r.reasons.clone()),
            }),
        }
    }
}

/// The line a person reads (a usage error is only its detail: the caller says `error:`).
impl fmt::Display for GateAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateAnswer::Permitted(p) => write!(
                f,
                "permitted: failover to {} for {} until {} (run {}, {}/{} calls passed, ruling out {}{}{})",
                p.provider,
                p.suite,
                p.valid_until,
                p.evidence.run_id,
                p.evidence.passed,
                p.evidence.calls,
                p.words,
                (p.evidence.latency.as_ref())
                    .map(|l| format!(
                        ", p95 latency {}",
                        conform_allowlist::latency::words(l.total_ms.p95)
                    ))
                    .unwrap_or_default(),
                match p.signed_by.join(", ").as_str() {
                    "" => String::new(),
                    keys => format!(", signed by {keys}"),
                }
            ),
            GateAnswer::Denied(d) if d.usage_error => write!(f, "{}", d.detail),
            GateAnswer::Denied(d) => write!(f, "denied ({}): {}", d.reason, d.detail),
        }
    }
}
