//! A failover question about a project: conform's readers (`gate`, `export`, `allowlist
//! explain`, `serve`) hold the evidence to the project's files as they are now, then ask
//! the reader crate's one decision ([`Allowlist::decide_with`]).

use std::path::Path;

use time::OffsetDateTime;

use super::local::Local;
use super::{Allowlist, Denial, Observed, Permit, Required, Seen};
use conform_config::Paths;

/// One failover question: to `provider`, for `suite`, at `at`.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    /// The suite the fallback must keep.
    pub suite: &'a str,
    /// The fallback provider, by name.
    pub provider: &'a str,
    /// The instant the question is asked at.
    pub at: OffsetDateTime,
    /// The project whose `fixtures/SUITE` and `providers/PROVIDER.toml` the evidence must
    /// still match. `None` holds the entry to nothing but its time (the orchestrator
    /// contract's reading).
    pub project: Option<&'a Paths>,
    /// What the provider reported of itself (only the served model and fingerprint are
    /// read; the rest comes from `project`).
    pub reported: Observed<'a>,
    /// What the caller needs of the provider now, beyond conformance.
    pub required: Required,
    /// What the reader has seen of the allowlist (`--state`, `conform serve`'s ledger):
    /// an entry made before the newest statement seen about its pair is superseded.
    pub seen: Option<&'a Seen>,
}

impl<'a> Query<'a> {
    /// A question about `suite` and `provider` at `at`, checked against nothing but time.
    pub fn new(suite: &'a str, provider: &'a str, at: OffsetDateTime) -> Self {
        Query {
            suite,
            provider,
            at,
            project: None,
            reported: Observed::default(),
            required: Required::default(),
            seen: None,
        }
    }

    /// Holds the evidence's latency percentiles to `required`.
    pub fn required(mut self, required: Required) -> Self {
        self.required = required;
        self
    }

    /// Holds the evidence to the project's suite and provider files as they are now.
    pub fn project(mut self, paths: &'a Paths) -> Self {
        self.project = Some(paths);
        self
    }

    /// Holds the entry to what the reader has seen (`None`: nothing kept).
    pub fn seen(mut self, seen: Option<&'a Seen>) -> Self {
        self.seen = seen;
        self
    }

    /// Holds the evidence to what the provider reported of itself.
    pub fn reported(mut self, served_model: Option<&'a str>, fingerprint: Option<&'a str>) -> Self {
        self.reported.served_model = served_model;
        self.reported.system_fingerprint = fingerprint;
        self
    }
}

/// The failover decision for one [`Query`] against the allowlist file at `path`.
///
/// The project's files are read first (an unknown suite or provider is a question that
/// cannot be answered, whatever the file says), then the allowlist, at the moment of
/// deciding: it is replaced atomically, so a read sees the old version or the new one.
/// Everything unexpected is a [`Denial`].
///
/// ```
/// use conform_gate::allowlist::{Query, Reason, decide};
/// let dir = tempfile::tempdir().unwrap();
/// let now = time::OffsetDateTime::now_utc();
/// let query = Query::new("invoice-extraction", "fallback", now);
/// let denial = decide(&dir.path().join("allowlist.json"), &query).unwrap_err();
/// assert_eq!(denial.reason, Reason::Missing);
/// ```
pub fn decide(path: &Path, query: &Query<'_>) -> Result<Permit, Denial> {
    let local = observe(query)?;
    answer(&Allowlist::load(path)?, query, local.as_ref())
}

fn observe(query: &Query<'_>) -> Result<Option<Local>, Denial> {
    query
        .project
        .map(|paths| Local::observe(paths, query.suite, query.provider))
        .transpose()
}

/// [`decide`] for a file already read (to answer many questions from one read): the
/// same question, against the same project, gets the same answer.
pub fn decide_query(list: &Allowlist, query: &Query<'_>) -> Result<Permit, Denial> {
    let local = observe(query)?;
    answer(list, query, local.as_ref())
}

fn answer(list: &Allowlist, query: &Query<'_>, local: Option<&Local>) -> Result<Permit, Denial> {
    let (observed, required) = match local {
        Some(local) => (
            local.observed(query.reported),
            query.required.or_defaults(local.settings.bounds()),
        ),
        None => (query.reported, query.required.contract()),
    };
    let observed = Observed {
        seen: (query.seen).and_then(|s| s.get(query.suite, query.provider)),
        ..observed
    };
    list.decide_with(query.suite, query.provider, query.at, &observed, &required)
}
