//! Reading the allowlist the way an orchestrator must: anything unexpected is a denial.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::decision::{Denial, Reason};
use crate::format::{Allowlist, Entry, FORMAT};
use crate::position;

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

    /// Parses an allowlist, failing closed. An entry with only the members the
    /// orchestrator contract requires (`suite`, `provider`, `valid_until`) is kept as
    /// [`Entry::contract_only`]: it permits failover only to a caller that observes
    /// nothing it could contradict. Entries without even those are dropped
    /// ([`Allowlist::malformed`] counts them); the rest of the file still counts. It
    /// never panics, whatever the bytes.
    ///
    /// ```
    /// use conform_allowlist::{Allowlist, Observed, Reason};
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
    /// assert!(list.decide("invoice-extraction", "mistral", at, &Observed::default()).is_ok());
    /// // Another task was never proven on this provider.
    /// let denial = list.decide("ticket-triage", "mistral", at, &Observed::default()).unwrap_err();
    /// assert_eq!(denial.reason, Reason::NoEntry);
    ///
    /// assert_eq!(Allowlist::parse(b"").unwrap_err().reason, Reason::Unreadable);
    /// assert_eq!(Allowlist::parse(b"[]").unwrap_err().reason, Reason::UnknownFormat);
    /// let v2 = br#"{"format": "conform.allowlist/v2", "entries": []}"#;
    /// assert_eq!(Allowlist::parse(v2).unwrap_err().reason, Reason::UnknownFormat);
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Allowlist, Denial> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            let (line, column) = position::json_error_at(bytes, &e);
            let message = position::json_error_message(&e);
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
        let entries: Vec<Entry> = raw_entries.iter().filter_map(entry).collect();
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
}

/// The members the orchestrator contract requires of an entry; the rest are for tools
/// that can check them.
#[derive(Deserialize)]
struct ContractEntry {
    suite: String,
    provider: String,
    /// Anything but a string is kept as an empty time, which never parses: `expired`,
    /// as the contract says of a `valid_until` that does not parse.
    #[serde(default)]
    valid_until: Value,
    #[serde(default)]
    simulated: bool,
}

fn entry(raw: &Value) -> Option<Entry> {
    if let Ok(entry) = Entry::deserialize(raw) {
        return Some(entry);
    }
    let minimal = ContractEntry::deserialize(raw).ok()?;
    Some(Entry {
        suite: minimal.suite,
        provider: minimal.provider,
        model: String::new(),
        served_models: Vec::new(),
        system_fingerprints: Vec::new(),
        suite_digest: String::new(),
        provider_digest: String::new(),
        suite_identity: None,
        provider_identity: None,
        tokenizer: String::new(),
        evidence: Default::default(),
        generated_at: String::new(),
        valid_until: minimal.valid_until.as_str().unwrap_or_default().to_string(),
        simulated: minimal.simulated,
        contract_only: true,
        attestation: None,
    })
}
