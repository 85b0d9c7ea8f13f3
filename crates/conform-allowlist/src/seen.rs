//! What a reader has seen: for each (suite, provider), when the newest statement about it
//! was made. An entry made before it is [`Reason::Superseded`](crate::Reason::Superseded).
//!
//! Each entry and each revocation is signed on its own, so a file is no proof that it is
//! the newest one: an older signed allowlist put back in place of a newer revocation
//! would verify entry by entry. A reader that remembers the newest statement it has read
//! per pair (`conform gate --state FILE`, `conform serve`'s ledger) denies such a file.
//! Where the reader trusts signing keys, only statements signed by a listed key, as they
//! are, advance what it remembers: anyone can write a revocation, which denies anyway,
//! but nobody but the CI can make a reader forget an entry.

use std::collections::BTreeMap;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::decision::CLOCK_SKEW;
use crate::format::Allowlist;
use crate::sign::Trust;

/// When the newest statement about each (suite, provider) that a reader has seen was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pairs: BTreeMap<(String, String), OffsetDateTime>,
}

/// One statement that counts: a grant or a revocation about (`suite`, `provider`), made
/// `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stated {
    /// The suite the statement is about.
    pub suite: String,
    /// The provider the statement is about.
    pub provider: String,
    /// When it was made: a later statement about the pair supersedes it.
    pub at: OffsetDateTime,
}

impl Seen {
    /// When the newest statement about (`suite`, `provider`) seen was made.
    pub fn get(&self, suite: &str, provider: &str) -> Option<OffsetDateTime> {
        let key = (suite.to_string(), provider.to_string());
        self.pairs.get(&key).copied()
    }

    /// Remembers a statement about (`suite`, `provider`) made `at`, unless a newer one
    /// is remembered already; true when it advanced.
    pub fn record(&mut self, suite: &str, provider: &str, at: OffsetDateTime) -> bool {
        let key = (suite.to_string(), provider.to_string());
        match self.pairs.get(&key) {
            Some(seen) if *seen >= at => false,
            _ => {
                self.pairs.insert(key, at);
                true
            }
        }
    }

    /// Remembers every statement of `list` that counts ([`statements`]); true when
    /// anything advanced.
    pub fn observe(
        &mut self,
        list: &Allowlist,
        trust: Option<&Trust>,
        now: OffsetDateTime,
    ) -> bool {
        let mut advanced = false;
        for s in statements(list, trust, now) {
            advanced |= self.record(&s.suite, &s.provider, s.at);
        }
        advanced
    }

    /// Every pair remembered, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, OffsetDateTime)> {
        (self.pairs.iter()).map(|((s, p), at)| (s.as_str(), p.as_str(), *at))
    }

    /// Nothing has been seen: a first reader, or a state file lost.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// The statements of `list` a reader may remember: every entry (made `generated_at`) and
/// every revocation (made `at`) whose time parses and is not later than `now` (beyond
/// the clock skew: a clock running ahead must not lock a pair out until it is caught
/// up). Where `trust` is given, only those signed by a key it lists, as they are now.
pub fn statements(list: &Allowlist, trust: Option<&Trust>, now: OffsetDateTime) -> Vec<Stated> {
    let entries = (list.entries.iter())
        .filter(|e| trust.is_none_or(|t| crate::attest::verify(*e, t).is_ok()))
        .map(|e| (&e.suite, &e.provider, &e.generated_at));
    let revocations = (list.revocations.iter())
        .filter(|r| trust.is_none_or(|t| crate::attest::verify(*r, t).is_ok()))
        .map(|r| (&r.suite, &r.provider, &r.at));
    entries
        .chain(revocations)
        .filter_map(|(suite, provider, at)| {
            let at = OffsetDateTime::parse(at, &Rfc3339).ok()?;
            (at <= now + CLOCK_SKEW).then(|| Stated {
                suite: suite.clone(),
                provider: provider.clone(),
                at,
            })
        })
        .collect()
}

// The tests sign what they verify: they need the writer's half.
#[cfg(all(test, feature = "sign"))]
mod tests {
    use super::*;
    use crate::format::Revocation;
    use crate::sign::{SigningKey, TrustedKey};
    use time::macros::datetime;

    fn revocation(at: &str) -> Revocation {
        Revocation {
            suite: "s".into(),
            provider: "p".into(),
            run_id: "r".into(),
            at: at.into(),
            reasons: vec!["not_pure_json".into()],
            report: "x".into(),
            suite_digest: Some("sha256:aa".into()),
            provider_digest: Some("sha256:bb".into()),
            attestation: None,
        }
    }

    #[test]
    fn only_signed_statements_advance_a_reader_that_trusts_keys() {
        let now = datetime!(2026-01-10 00:00 UTC);
        let key = SigningKey::generate().unwrap();
        let trust = Trust {
            path: "trust.toml".into(),
            keys: vec![TrustedKey {
                name: "ci".into(),
                key: key.public(),
            }],
        };
        let mut list = Allowlist::default();
        list.revocations.push(revocation("2026-01-02T00:00:00Z"));
        let mut seen = Seen::default();
        // Unsigned: it denies, but cannot make a trusting reader forget anything.
        assert!(!seen.observe(&list, Some(&trust), now));
        assert!(seen.observe(&list, None, now));
        assert_eq!(seen.get("s", "p"), Some(datetime!(2026-01-02 00:00 UTC)));

        let mut seen = Seen::default();
        crate::attest::sign(&mut list.revocations[0], &key);
        assert!(seen.observe(&list, Some(&trust), now));
        // Read again: nothing new.
        assert!(!seen.observe(&list, Some(&trust), now));
        // An older statement never moves it back.
        assert!(!seen.record("s", "p", datetime!(2026-01-01 00:00 UTC)));
        assert_eq!(seen.get("s", "p"), Some(datetime!(2026-01-02 00:00 UTC)));
        // Moved later by hand: the signature no longer holds, so it does not count.
        list.revocations[0].at = "2026-01-05T00:00:00Z".into();
        assert!(!seen.observe(&list, Some(&trust), now));
    }

    #[test]
    fn an_entry_made_before_the_newest_statement_seen_is_superseded() {
        use crate::decision::{Observed, Reason};
        let text = br#"{"format": "conform.allowlist/v1", "entries": [{"suite": "s",
            "provider": "p", "model": "m", "served_models": [], "system_fingerprints": [],
            "suite_digest": "sha256:aa", "provider_digest": "sha256:bb", "tokenizer": "none",
            "evidence": {"run_id": "r1", "report": "x", "conform_version": "0", "cases": 30,
            "repeats": 2, "calls": 60, "passed": 60, "pass_rate": 1.0,
            "first_attempt_pass_rate": 1.0, "checks": {}},
            "generated_at": "2026-01-02T00:00:00Z", "valid_until": "2026-01-09T00:00:00Z"}]}"#;
        let mut list = Allowlist::parse(text).unwrap();
        let now = datetime!(2026-01-03 00:00 UTC);
        let decide = |list: &Allowlist, seen: Option<OffsetDateTime>| {
            let observed = Observed {
                seen,
                ..Observed::default()
            };
            list.decide("s", "p", now, &observed).map(|_| ())
        };
        // Nothing seen, or this very entry seen (the same file read twice): it permits.
        assert_eq!(decide(&list, None), Ok(()));
        let mut seen = Seen::default();
        seen.observe(&list, None, now);
        assert_eq!(decide(&list, seen.get("s", "p")), Ok(()));
        // A revocation made after it was seen: this entry, put back, permits nothing.
        seen.record("s", "p", datetime!(2026-01-02 12:00 UTC));
        let denial = decide(&list, seen.get("s", "p")).unwrap_err();
        assert_eq!(denial.reason, Reason::Superseded);
        assert!(
            denial.detail.contains("2026-01-02T12:00:00Z"),
            "{}",
            denial.detail
        );
        assert!(denial.entry.is_some());
        // A time that does not parse is never newer.
        list.entries[0].generated_at = "yesterday".into();
        assert_eq!(
            decide(&list, Some(datetime!(2020-01-01 00:00 UTC)))
                .unwrap_err()
                .reason,
            Reason::Superseded
        );
        // A newer entry permits again.
        list.entries[0].generated_at = "2026-01-02T18:00:00Z".into();
        assert_eq!(decide(&list, seen.get("s", "p")), Ok(()));
    }

    #[test]
    fn a_statement_dated_after_now_is_not_remembered() {
        let now = datetime!(2026-01-10 00:00 UTC);
        let mut list = Allowlist::default();
        list.revocations.push(revocation("2026-01-10T00:04:00Z"));
        list.revocations.push(revocation("2026-02-01T00:00:00Z"));
        list.revocations[1].provider = "q".into();
        list.revocations.push(revocation("not a time"));
        list.revocations[2].provider = "r".into();
        let mut seen = Seen::default();
        seen.observe(&list, None, now);
        let pairs: Vec<_> = seen.iter().map(|(s, p, _)| format!("{s}×{p}")).collect();
        assert_eq!(pairs, ["s×p"]);
    }
}
