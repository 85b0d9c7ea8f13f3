//! Reading the allowlist the way an orchestrator must: anything unexpected is a denial.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::format::{Allowlist, Entry, FORMAT};
use crate::config::diagnostic;

/// Why failover is not permitted. The codes are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// There is no allowlist file.
    Missing,
    /// The file is not JSON, or has no `entries` list.
    Unreadable,
    /// Not an object, or another `format`.
    UnknownFormat,
    /// No entry for this (suite, provider).
    NoEntry,
    /// The entry's `valid_until` has passed or does not parse.
    Expired,
    /// The caller's suite digest differs from the one the evidence was made with.
    SuiteChanged,
    /// The caller saw a served model or fingerprint that the evidence never saw.
    ModelDrift,
}

impl Reason {
    /// The stable, machine-readable code: `missing`, `unreadable`, `unknown_format`,
    /// `no_entry`, `expired`, `suite_changed` or `model_drift`.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Missing => "missing",
            Reason::Unreadable => "unreadable",
            Reason::UnknownFormat => "unknown_format",
            Reason::NoEntry => "no_entry",
            Reason::Expired => "expired",
            Reason::SuiteChanged => "suite_changed",
            Reason::ModelDrift => "model_drift",
        }
    }
}

/// Failover is not permitted, and why: a stable [`Reason`] and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("failover not allowed ({}): {detail}", reason.code())]
pub struct Denial {
    pub reason: Reason,
    pub detail: String,
}

impl Denial {
    fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Denial {
            reason,
            detail: detail.into(),
        }
    }
}

/// Failover is permitted, on this entry's evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Permit {
    pub entry: Entry,
}

/// What the caller has observed of the provider, to be held against the evidence.
/// Every field is optional: a field left out is not checked.
///
/// Pass what you know: the digest of the suite your application runs (so that a changed
/// prompt or schema invalidates old evidence), and the `model` and `system_fingerprint`
/// the provider's last response reported (so that a silently swapped model does).
///
/// ```
/// use conform::allowlist::{Allowlist, Observed, Reason};
/// use time::macros::datetime;
/// # let json = r#"{"format": "conform.allowlist/v1", "entries": [{
/// #   "suite": "invoice-extraction", "provider": "mistral", "model": "mistral-small-latest",
/// #   "served_models": ["mistral-small-2503"], "system_fingerprints": [],
/// #   "suite_digest": "sha256:5e1f", "provider_digest": "sha256:9c0d", "tokenizer": "none",
/// #   "evidence": {"run_id": "r1", "report": "reports/r1/report.json", "conform_version": "0.1.0",
/// #     "cases": 25, "repeats": 3, "calls": 75, "passed": 75, "pass_rate": 1.0,
/// #     "first_attempt_pass_rate": 0.96, "checks": {}},
/// #   "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}]}"#;
/// let list = Allowlist::parse(json.as_bytes()).unwrap();
/// let at = datetime!(2026-01-02 12:00 UTC);
///
/// let same = Observed { served_model: Some("mistral-small-2503"), ..Observed::default() };
/// assert!(list.permits("invoice-extraction", "mistral", at, &same).is_ok());
///
/// let swapped = Observed { served_model: Some("mistral-small-2509"), ..Observed::default() };
/// let denial = list.permits("invoice-extraction", "mistral", at, &swapped).unwrap_err();
/// assert_eq!(denial.reason, Reason::ModelDrift);
///
/// let edited = Observed { suite_digest: Some("sha256:77aa"), ..Observed::default() };
/// let denial = list.permits("invoice-extraction", "mistral", at, &edited).unwrap_err();
/// assert_eq!(denial.reason, Reason::SuiteChanged);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    pub suite_digest: Option<&'a str>,
    pub served_model: Option<&'a str>,
    pub system_fingerprint: Option<&'a str>,
}

/// Whether the allowlist at `path` permits failover to `provider` for `suite` at `at`.
///
/// It fails closed: a missing or unreadable file, another format, no entry, an expired
/// entry, another suite digest, or a served model or fingerprint the evidence never saw
/// is a [`Denial`] with its [`Reason`]. Read the file at the moment of deciding: it is
/// replaced atomically, so a read sees the old version or the new one, never a mix.
///
/// ```
/// use conform::allowlist::{Observed, Reason, permits};
/// use time::macros::datetime;
/// # let json = r#"{"format": "conform.allowlist/v1", "entries": [{
/// #   "suite": "invoice-extraction", "provider": "mistral", "model": "mistral-small-latest",
/// #   "served_models": ["mistral-small-2503"], "system_fingerprints": [],
/// #   "suite_digest": "sha256:5e1f", "provider_digest": "sha256:9c0d", "tokenizer": "none",
/// #   "evidence": {"run_id": "r1", "report": "reports/r1/report.json", "conform_version": "0.1.0",
/// #     "cases": 25, "repeats": 3, "calls": 75, "passed": 75, "pass_rate": 1.0,
/// #     "first_attempt_pass_rate": 0.96, "checks": {}},
/// #   "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}]}"#;
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("allowlist.json");
/// let at = datetime!(2026-01-02 12:00 UTC);
///
/// // No file: no failover.
/// let denial = permits(&path, "invoice-extraction", "mistral", at, &Observed::default()).unwrap_err();
/// assert_eq!(denial.reason, Reason::Missing);
///
/// std::fs::write(&path, json).unwrap();
/// let permit = permits(&path, "invoice-extraction", "mistral", at, &Observed::default()).unwrap();
/// assert_eq!(permit.entry.evidence.run_id, "r1");
///
/// // A week later the evidence has expired.
/// let later = datetime!(2026-01-08 00:00 UTC);
/// let denial = permits(&path, "invoice-extraction", "mistral", later, &Observed::default()).unwrap_err();
/// assert_eq!(denial.reason, Reason::Expired);
/// assert_eq!(denial.reason.code(), "expired");
/// ```
pub fn permits(
    path: &Path,
    suite: &str,
    provider: &str,
    at: OffsetDateTime,
    observed: &Observed<'_>,
) -> Result<Permit, Denial> {
    Allowlist::load(path)?.permits(suite, provider, at, observed)
}

impl Allowlist {
    /// Reads and parses the file at `path`, failing closed: [`Reason::Missing`] when there
    /// is no file, [`Reason::Unreadable`] when it cannot be read, and whatever
    /// [`Allowlist::parse`] says of its bytes.
    pub fn load(path: &Path) -> Result<Allowlist, Denial> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Denial::new(
                    Reason::Missing,
                    format!("{} does not exist", path.display()),
                ));
            }
            Err(e) => {
                return Err(Denial::new(
                    Reason::Unreadable,
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        };
        // Every reader (gate, show, explain, export) prints the detail: it names the file.
        Allowlist::parse(&bytes).map_err(|mut denial| {
            denial.detail = format!("{}: {}", path.display(), denial.detail);
            denial
        })
    }

    /// Parses an allowlist, failing closed. Entries that do not have the v1 shape are
    /// dropped (they can permit nothing; [`Allowlist::malformed`] counts them); the rest
    /// of the file still counts. It never panics, whatever the bytes.
    ///
    /// ```
    /// use conform::allowlist::{Allowlist, Observed, Reason};
    /// use time::macros::datetime;
    /// # let json = r#"{"format": "conform.allowlist/v1", "entries": [{
    /// #   "suite": "invoice-extraction", "provider": "mistral", "model": "mistral-small-latest",
    /// #   "served_models": ["mistral-small-2503"], "system_fingerprints": [],
    /// #   "suite_digest": "sha256:5e1f", "provider_digest": "sha256:9c0d", "tokenizer": "none",
    /// #   "evidence": {"run_id": "r1", "report": "reports/r1/report.json", "conform_version": "0.1.0",
    /// #     "cases": 25, "repeats": 3, "calls": 75, "passed": 75, "pass_rate": 1.0,
    /// #     "first_attempt_pass_rate": 0.96, "checks": {}},
    /// #   "generated_at": "2026-01-01T00:00:00Z", "valid_until": "2026-01-08T00:00:00Z"}]}"#;
    /// let list = Allowlist::parse(json.as_bytes()).unwrap();
    /// assert_eq!(list.entries.len(), 1);
    /// let at = datetime!(2026-01-02 12:00 UTC);
    /// assert!(list.permits("invoice-extraction", "mistral", at, &Observed::default()).is_ok());
    /// // Another task was never proven on this provider.
    /// let denial = list.permits("ticket-triage", "mistral", at, &Observed::default()).unwrap_err();
    /// assert_eq!(denial.reason, Reason::NoEntry);
    ///
    /// assert_eq!(Allowlist::parse(b"").unwrap_err().reason, Reason::Unreadable);
    /// assert_eq!(Allowlist::parse(b"[]").unwrap_err().reason, Reason::UnknownFormat);
    /// let v2 = br#"{"format": "conform.allowlist/v2", "entries": []}"#;
    /// assert_eq!(Allowlist::parse(v2).unwrap_err().reason, Reason::UnknownFormat);
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Allowlist, Denial> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            let (line, column) = diagnostic::json_error_at(bytes, &e);
            let message = diagnostic::json_error_message(&e);
            Denial::new(
                Reason::Unreadable,
                format!("not JSON at line {line}, column {column}: {message}"),
            )
        })?;
        let Value::Object(map) = value else {
            return Err(Denial::new(Reason::UnknownFormat, "not a JSON object"));
        };
        match map.get("format").and_then(Value::as_str) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(Denial::new(
                    Reason::UnknownFormat,
                    format!("format `{other}`, expected `{FORMAT}`"),
                ));
            }
            None => {
                return Err(Denial::new(
                    Reason::UnknownFormat,
                    format!("no `format` string, expected `{FORMAT}`"),
                ));
            }
        }
        let Some(Value::Array(raw_entries)) = map.get("entries") else {
            return Err(Denial::new(Reason::Unreadable, "no `entries` list"));
        };
        let entries: Vec<Entry> = raw_entries
            .iter()
            .filter_map(|e| serde_json::from_value::<Entry>(e.clone()).ok())
            .collect();
        let malformed = raw_entries.len() - entries.len();
        let revocations = map
            .get("revocations")
            .and_then(|r| serde_json::from_value(r.clone()).ok())
            .unwrap_or_default();
        Ok(Allowlist {
            format: FORMAT.to_string(),
            entries,
            revocations,
            malformed,
        })
    }

    /// The decision for one (suite, provider) at one instant, as [`permits`] makes it
    /// for a file.
    pub fn permits(
        &self,
        suite: &str,
        provider: &str,
        at: OffsetDateTime,
        observed: &Observed<'_>,
    ) -> Result<Permit, Denial> {
        let mut candidates = self
            .entries
            .iter()
            .filter(|e| e.suite == suite && e.provider == provider)
            .peekable();
        if candidates.peek().is_none() {
            return Err(Denial::new(
                Reason::NoEntry,
                format!("no entry for provider `{provider}` and suite `{suite}`"),
            ));
        }
        let mut last = None;
        for entry in candidates {
            match check_entry(entry, at, observed) {
                Ok(()) => {
                    return Ok(Permit {
                        entry: entry.clone(),
                    });
                }
                Err(denial) => last = Some(denial),
            }
        }
        Err(last.unwrap_or_else(|| Denial::new(Reason::NoEntry, "no usable entry")))
    }
}

fn check_entry(entry: &Entry, at: OffsetDateTime, observed: &Observed<'_>) -> Result<(), Denial> {
    match OffsetDateTime::parse(&entry.valid_until, &Rfc3339) {
        Ok(until) if at < until => {}
        Ok(_) => {
            return Err(Denial::new(
                Reason::Expired,
                format!("the entry expired at {}", entry.valid_until),
            ));
        }
        Err(_) => {
            return Err(Denial::new(
                Reason::Expired,
                format!(
                    "valid_until `{}` is not an RFC 3339 time",
                    entry.valid_until
                ),
            ));
        }
    }
    if let Some(digest) = observed.suite_digest
        && digest != entry.suite_digest
    {
        return Err(Denial::new(
            Reason::SuiteChanged,
            format!(
                "the suite is now {digest}; the evidence was made with {}",
                entry.suite_digest
            ),
        ));
    }
    if let Some(model) = observed.served_model
        && !entry.served_models.iter().any(|m| m == model)
    {
        return Err(Denial::new(
            Reason::ModelDrift,
            format!(
                "served model `{model}` was never seen in the evidence (seen: {})",
                entry.served_models.join(", ")
            ),
        ));
    }
    if let Some(fp) = observed.system_fingerprint
        && !entry.system_fingerprints.iter().any(|f| f == fp)
    {
        return Err(Denial::new(
            Reason::ModelDrift,
            format!("system fingerprint `{fp}` was never seen in the evidence"),
        ));
    }
    Ok(())
}
