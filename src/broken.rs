//! Deliberately broken variants of the reference orchestrator, so that a test can prove
//! `conform scenarios` catches each way of breaking the contract
//! (`tests/scenarios_teeth.rs`).
//!
//! A variant is chosen with `CONFORM_BROKEN=<name>` when `conform serve` starts, and only
//! in a build with the cargo feature `broken-variants`. `cargo test` has it (the crate
//! is its own dev-dependency with that feature); `cargo build`, `cargo run` and `cargo
//! install` do not, and there [`is`] is the constant `false`: the hooks compile away and
//! the variable is ignored with a warning. Every hook in the code is marked
//! `BROKEN VARIANT` and does nothing else.

/// One way to break the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Creation reads the key first and inserts afterwards (the race the unique
    /// constraint exists for), with the window widened so the race is hit.
    CheckThenInsert,
    /// A reused key returns the existing job whatever the payload.
    IgnoredFingerprint,
    /// The deadline makes an attempt `failed` instead of `unknown`.
    TimeoutMarkedFailed,
    /// After the deadline the request is sent upstream again.
    RetryAfterTimeout,
    /// A result claims the slot without the compare-and-swap: the last one wins.
    LastWriterWins,
    /// A new attempt silently releases the open one instead of being refused.
    NoOpenAttemptGuard,
    /// Failover is never checked against the allowlist.
    AllowlistIgnored,
    /// A missing, unreadable or unknown-format allowlist permits failover.
    AllowlistFailsOpen,
    /// Jobs are read without checking their owner.
    OwnerLeak,
    /// The HTTP client retries 429, 5xx and broken connections behind the
    /// orchestrator's back.
    HiddenRetries,
    /// Cancelling an attempt answers `cancelled` but changes nothing.
    CancelKeepsBlocking,
    /// A late result claims the slot against the current version, so a result arriving
    /// after the job was cancelled still completes it.
    LateResultOverwrites,
    /// A replay of a job with nothing open (`failed` or `pending`) starts a new attempt.
    ReplayRetriesIdle,
    /// A request body of any size is read and accepted.
    NoBodyLimit,
    /// A body nested deeper than the parser allows panics the handler: the connection
    /// is dropped without an answer.
    DeepNestingPanics,
    /// Invalid UTF-8 in a body is replaced (U+FFFD) instead of refused.
    LossyUtf8,
    /// Request bodies are read one at a time, so one client that stalls in its body
    /// holds up every other creation.
    SerializedBodyReads,
    /// Forty requests in flight at most, and the overload answer is a bare 503 without
    /// the contract's problem document.
    PlainOverload,
}

impl Broken {
    /// Every variant, with its `CONFORM_BROKEN` name.
    pub const ALL: [(&'static str, Broken); 18] = [
        ("check-then-insert", Broken::CheckThenInsert),
        ("ignored-fingerprint", Broken::IgnoredFingerprint),
        ("timeout-marked-failed", Broken::TimeoutMarkedFailed),
        ("retry-after-timeout", Broken::RetryAfterTimeout),
        ("last-writer-wins", Broken::LastWriterWins),
        ("no-open-attempt-guard", Broken::NoOpenAttemptGuard),
        ("allowlist-ignored", Broken::AllowlistIgnored),
        ("allowlist-fails-open", Broken::AllowlistFailsOpen),
        ("owner-leak", Broken::OwnerLeak),
        ("hidden-retries", Broken::HiddenRetries),
        ("cancel-keeps-blocking", Broken::CancelKeepsBlocking),
        ("late-result-overwrites", Broken::LateResultOverwrites),
        ("replay-retries-idle", Broken::ReplayRetriesIdle),
        ("no-body-limit", Broken::NoBodyLimit),
        ("deep-nesting-panics", Broken::DeepNestingPanics),
        ("lossy-utf8", Broken::LossyUtf8),
        ("serialized-body-reads", Broken::SerializedBodyReads),
        ("plain-overload", Broken::PlainOverload),
    ];

    pub fn name(self) -> &'static str {
        Broken::ALL
            .iter()
            .find(|(_, b)| *b == self)
            .map_or("?", |(n, _)| n)
    }

    pub fn parse(name: &str) -> Option<Broken> {
        Broken::ALL
            .iter()
            .find(|(n, _)| *n == name.trim())
            .map(|(_, b)| *b)
    }
}

/// The environment variable that selects a variant.
pub const VAR: &str = "CONFORM_BROKEN";

/// Whether this process runs the broken variant `variant`.
#[cfg(feature = "broken-variants")]
pub fn is(variant: Broken) -> bool {
    active() == Some(variant)
}

/// Whether this process runs the broken variant `variant`: never, in this build.
#[cfg(not(feature = "broken-variants"))]
#[inline(always)]
pub fn is(_variant: Broken) -> bool {
    false
}

#[cfg(feature = "broken-variants")]
fn active() -> Option<Broken> {
    static ACTIVE: std::sync::OnceLock<Option<Broken>> = std::sync::OnceLock::new();
    *ACTIVE.get_or_init(|| {
        std::env::var(VAR)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .and_then(|v| Broken::parse(&v))
    })
}

/// Checks `CONFORM_BROKEN` at start-up: the variant this process runs (loudly), nothing,
/// or an error for a name that is not a variant. Without the feature the variable is
/// ignored, with a warning.
pub fn announce() -> Result<Option<Broken>, String> {
    let Some(name) = std::env::var(VAR).ok().filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    if !cfg!(feature = "broken-variants") {
        eprintln!(
            "warning: {VAR}={name} is ignored: this build has no broken variants (they exist only for `cargo test`)"
        );
        return Ok(None);
    }
    match Broken::parse(&name) {
        Some(variant) => {
            eprintln!(
                "WARNING: {VAR}={name}: this orchestrator is DELIBERATELY BROKEN, for testing conform scenarios"
            );
            Ok(Some(variant))
        }
        None => Err(format!(
            "{VAR}={name} is not a broken variant; the variants are: {}",
            Broken::ALL.map(|(n, _)| n).join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, variant) in Broken::ALL {
            assert_eq!(Broken::parse(name), Some(variant));
            assert_eq!(variant.name(), name);
        }
        assert_eq!(Broken::parse("nope"), None);
    }
}
