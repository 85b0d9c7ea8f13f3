//! The retry policy: one table, kind × where the failure happened → retried or not, and
//! what a final failure means for the run. docs/providers.md's "What is retried" is this table,
//! rendered by [`markdown`] (a test keeps the two equal).
//!
//! The rule behind the second column: once a 2xx status has arrived, the provider
//! processed the request and probably billed it. Nothing that goes wrong after that (a
//! body that is HTML, not JSON, cut off, of the wrong shape, an error object inside the
//! 200, a connection or a stream that breaks mid-body) is a reason to send it again: it
//! is the provider's own failure, counted against it like the model's.
//!
//! Which failures are the provider's: everything after a 2xx, and a 5xx or an overload
//! that outlasts its retries. Which say nothing about its answers: a 429 past its
//! retries, a connection that broke or timed out before any status (our network as much
//! as theirs), authentication, quotas. Counting the first kind against the provider is
//! what keeps verdicts monotone: a provider that breaks more never gets a weaker verdict
//! than one that breaks less.

use super::error::{Effect, ErrorKind};

/// Where in a call a failure happened.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// No 2xx status arrived: the connection failed or broke, the call timed out before
    /// a status, the provider answered with an error status, or a tape held no answer.
    #[default]
    BeforeSuccess,
    /// A 2xx status arrived: the provider processed (and billed) the request, whatever
    /// its body turned out to be.
    AfterSuccess,
}

impl Stage {
    /// Whether no 2xx had arrived: the default, which records leave out.
    pub fn is_before_success(&self) -> bool {
        *self == Stage::BeforeSuccess
    }
}

/// What happens to a failure of one kind at one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Whether the same request is sent again (within `max_retries` and `max_retry_wait`).
    pub retried: bool,
    /// What the failure means once it is final.
    pub effect: Effect,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// What the kind is, for the README.
    pub meaning: &'static str,
    /// What a failure of this kind does when no 2xx has arrived.
    pub before_success: Rule,
    /// What it does once a 2xx has arrived.
    pub after_success: Rule,
}

const fn retried(effect: Effect) -> Rule {
    Rule {
        retried: true,
        effect,
    }
}

const fn final_(effect: Effect) -> Rule {
    Rule {
        retried: false,
        effect,
    }
}

/// Every broken 2xx alike: not sent again, the provider's own failure.
const PROCESSED: Rule = final_(Effect::ProviderFailure);

const fn row(kind: ErrorKind, meaning: &'static str, before_success: Rule) -> Row {
    Row {
        kind,
        meaning,
        before_success,
        after_success: PROCESSED,
    }
}

/// The table, one row per [`ErrorKind`], in the order of its variants.
pub const TABLE: &[Row] = &[
    row(
        ErrorKind::Auth,
        "401/403 or an invalid key",
        final_(Effect::HaltProvider),
    ),
    row(
        ErrorKind::BadRequest,
        "the provider rejected the request as malformed",
        final_(Effect::ConfigError),
    ),
    row(
        ErrorKind::NotFound,
        "no such model or endpoint",
        final_(Effect::ConfigError),
    ),
    row(
        ErrorKind::ContextLength,
        "the prompt does not fit the model's context",
        final_(Effect::ConformanceFailure),
    ),
    row(
        ErrorKind::PromptFiltered,
        "the provider's content filter refused the prompt (Azure's 400 `content_filter`)",
        final_(Effect::ConformanceFailure),
    ),
    row(
        ErrorKind::RateLimited,
        "a 429 that a wait cures",
        retried(Effect::Transport),
    ),
    row(
        ErrorKind::QuotaExhausted,
        "a 429 that needs a person: billing, a daily quota",
        final_(Effect::HaltProvider),
    ),
    row(
        ErrorKind::RequestTooLarge,
        "an account limit: the request exceeds the organisation's tokens per minute, or a 413",
        final_(Effect::HaltProvider),
    ),
    row(
        ErrorKind::ServerError,
        "5xx",
        retried(Effect::ProviderFailure),
    ),
    row(
        ErrorKind::Overloaded,
        "503/529: out of capacity",
        retried(Effect::ProviderFailure),
    ),
    row(
        ErrorKind::Timeout,
        "no complete answer within `timeout` (or 408)",
        retried(Effect::Transport),
    ),
    row(
        ErrorKind::ConnectionRefused,
        "no connection: refused, name or TLS failure, or a plain `http://` base URL that redirected to `https://` (the message names the address to put in `base_url`)",
        retried(Effect::HaltProvider),
    ),
    row(
        ErrorKind::ConnectionReset,
        "the connection broke before a status",
        retried(Effect::Transport),
    ),
    row(
        ErrorKind::TruncatedBody,
        "the body ended early",
        retried(Effect::Transport),
    ),
    // Only a 2xx starts a stream: without one there is nothing to have been cut.
    row(
        ErrorKind::StreamTruncated,
        "a stream that ended without the vendor's terminal event",
        final_(Effect::ProviderFailure),
    ),
    row(
        ErrorKind::NonJsonBody,
        "a body that is not JSON",
        retried(Effect::Transport),
    ),
    row(
        ErrorKind::HtmlErrorPage,
        "an HTML page (a proxy or gateway)",
        retried(Effect::Transport),
    ),
    row(
        ErrorKind::InvalidResponse,
        "JSON of the wrong shape: no choices, no content",
        final_(Effect::ProviderFailure),
    ),
    row(
        ErrorKind::UnexpectedStatus,
        "any other status",
        final_(Effect::Transport),
    ),
    row(
        ErrorKind::NotRecorded,
        "replaying: the tape holds no answer",
        final_(Effect::ConfigError),
    ),
];

/// The table's row for `kind`.
pub fn row_of(kind: ErrorKind) -> &'static Row {
    // Every kind has a row (a test pins it); the fallback only keeps this total.
    TABLE.iter().find(|r| r.kind == kind).unwrap_or(&FALLBACK)
}

const FALLBACK: Row = row(ErrorKind::UnexpectedStatus, "", final_(Effect::Transport));

/// The rule for a failure of `kind` at `stage`.
pub fn rule(kind: ErrorKind, stage: Stage) -> Rule {
    let row = row_of(kind);
    match stage {
        Stage::BeforeSuccess => row.before_success,
        Stage::AfterSuccess => row.after_success,
    }
}

fn words(rule: Rule) -> (&'static str, &'static str) {
    let retried = if rule.retried { "retried" } else { "no" };
    let effect = match rule.effect {
        Effect::HaltProvider => "provider stopped, inconclusive",
        Effect::ConfigError => "provider stopped, configuration error (exit 2)",
        Effect::ConformanceFailure => "failed call (the model's)",
        Effect::ProviderFailure => "failed call (the provider's)",
        Effect::Transport => "failed call (transport: not the provider's)",
    };
    (retried, effect)
}

/// The table as README.md shows it.
pub fn markdown() -> String {
    let mut out = String::from(
        "| code | what it is | no 2xx: retried? | no 2xx: then | after a 2xx: retried? | after a 2xx: then |\n|---|---|---|---|---|---|\n",
    );
    for row in TABLE {
        let (before_retried, before_effect) = words(row.before_success);
        let (after_retried, after_effect) = words(row.after_success);
        out.push_str(&format!(
            "| `{}` | {} | {before_retried} | {before_effect} | {after_retried} | {after_effect} |\n",
            row.kind.code(),
            row.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_exactly_one_row() {
        for kind in ErrorKind::ALL {
            let rows = TABLE.iter().filter(|r| r.kind == *kind).count();
            assert_eq!(rows, 1, "{kind:?}");
        }
        assert_eq!(TABLE.len(), ErrorKind::ALL.len());
    }

    #[test]
    fn nothing_after_a_2xx_is_retried_and_all_of_it_is_the_providers_failure() {
        for kind in ErrorKind::ALL {
            assert_eq!(rule(*kind, Stage::AfterSuccess), PROCESSED, "{kind:?}");
        }
    }

    #[test]
    fn the_providers_page_shows_this_table() {
        let readme = include_str!("../../../../docs/providers.md");
        assert!(
            readme.contains(&markdown()),
            "docs/providers.md's \"What is retried\" table differs from the code; paste:\n{}",
            markdown()
        );
    }
}
