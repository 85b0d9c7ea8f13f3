//! `conform ci comment`: the pull-request comment body a CI job posts after a merged run:
//! the fallbacks the new allowlist adds, revokes, or lets expire soon, with the finding
//! codes, and the diff of the gateway config it exports.
//!
//! Invariants: whether a pair is permitted, before and after, is asked of
//! [`conform_gate::allowlist::decide_query`] (the one failover decision), never re-derived; the gateway
//! config on both sides is made by `export` exactly as `conform export` makes it, without
//! the time-stamped header, so the diff shows only what changed.

pub mod diff;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform_config::Paths;
use conform_gate::allowlist::{Allowlist, Query};
use conform_gate::export::{self, Names, SuiteRef, litellm};

/// A (suite, provider) the new allowlist permits and the old one did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub suite: String,
    pub provider: String,
    pub model: String,
    pub valid_until: String,
}

/// A (suite, provider) the old allowlist permitted and the new one does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    pub suite: String,
    pub provider: String,
    /// The denial's code (`revoked`, `expired`, `suite_changed` …).
    pub reason: String,
    /// The finding codes of the run that revoked it, when one did.
    pub codes: Vec<String>,
}

/// A (suite, provider) the new allowlist permits that expires within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiring {
    pub suite: String,
    pub provider: String,
    pub valid_until: String,
}

/// What to compare and how.
#[derive(Debug, Clone)]
pub struct CommentPlan<'a> {
    pub before: &'a Allowlist,
    pub after: &'a Allowlist,
    pub at: OffsetDateTime,
    pub expiring_within: time::Duration,
    /// The project the evidence is held to, as `conform gate` holds it.
    pub project: Option<&'a Paths>,
    /// Primaries whose exported gateway config is diffed; none: no config diff.
    pub primaries: Vec<String>,
    pub names: Names,
}

/// The changes, and the config diff, of one allowlist update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub added: Vec<Added>,
    pub revoked: Vec<Revoked>,
    pub expiring: Vec<Expiring>,
    /// Unified-style lines (`+`, `-`, ` `) of the LiteLLM fallbacks, when asked.
    pub litellm_diff: Option<Vec<String>>,
}

impl Comment {
    pub fn is_quiet(&self) -> bool {
        self.added.is_empty()
            && self.revoked.is_empty()
            && self.expiring.is_empty()
            && self
                .litellm_diff
                .as_ref()
                .is_none_or(|d| d.iter().all(|l| l.starts_with(' ')))
    }
}

/// An allowlist that could not be read for a comparison.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {detail}", path.display())]
pub struct ReadError {
    pub path: std::path::PathBuf,
    pub detail: String,
}

/// The allowlist at `path` for a comparison: a missing file is an empty allowlist (the
/// first run), anything else unreadable an error.
pub fn read(path: &std::path::Path) -> Result<Allowlist, ReadError> {
    match Allowlist::load(path) {
        Ok(list) => Ok(list),
        Err(denial) if denial.reason == conform_gate::allowlist::Reason::Missing => {
            Ok(Allowlist::default())
        }
        Err(denial) => Err(ReadError {
            path: path.to_path_buf(),
            detail: denial.detail,
        }),
    }
}

/// Compares the allowlists of `plan`.
pub fn compare(plan: &CommentPlan<'_>) -> Comment {
    let pairs: BTreeSet<(String, String)> = [plan.before, plan.after]
        .iter()
        .flat_map(|l| {
            l.entries
                .iter()
                .map(|e| (e.suite.clone(), e.provider.clone()))
                .chain(
                    l.revocations
                        .iter()
                        .map(|r| (r.suite.clone(), r.provider.clone())),
                )
        })
        .collect();
    let ask = |list: &Allowlist, suite: &str, provider: &str| {
        let mut query = Query::new(suite, provider, plan.at);
        if let Some(paths) = plan.project {
            query = query.project(paths);
        }
        conform_gate::allowlist::decide_query(list, &query)
    };
    let horizon = plan.at + plan.expiring_within;
    let mut comment = Comment {
        added: Vec::new(),
        revoked: Vec::new(),
        expiring: Vec::new(),
        litellm_diff: None,
    };
    for (suite, provider) in &pairs {
        let before = ask(plan.before, suite, provider);
        let after = ask(plan.after, suite, provider);
        match (&before, &after) {
            (Err(_), Ok(permit)) => comment.added.push(Added {
                suite: suite.clone(),
                provider: provider.clone(),
                model: permit.entry.model.clone(),
                valid_until: permit.entry.valid_until.clone(),
            }),
            (Ok(_), Err(denial)) => comment.revoked.push(Revoked {
                suite: suite.clone(),
                provider: provider.clone(),
                reason: denial.reason.code().to_string(),
                codes: denial
                    .revocation
                    .as_ref()
                    .map(|r| r.reasons.clone())
                    .unwrap_or_default(),
            }),
            _ => {}
        }
        if let Ok(permit) = &after
            && OffsetDateTime::parse(&permit.entry.valid_until, &Rfc3339)
                .is_ok_and(|until| until <= horizon)
        {
            comment.expiring.push(Expiring {
                suite: suite.clone(),
                provider: provider.clone(),
                valid_until: permit.entry.valid_until.clone(),
            });
        }
    }
    if !plan.primaries.is_empty() {
        let config = |list: &Allowlist| {
            let suites: BTreeSet<&str> = pairs.iter().map(|(s, _)| s.as_str()).collect();
            let export_plan = export::Plan {
                primaries: plan.primaries.clone(),
                fallbacks: Vec::new(),
                suites: suites
                    .into_iter()
                    .map(|name| SuiteRef {
                        name: name.to_string(),
                        digest: None,
                    })
                    .collect(),
                at: plan.at,
                project: plan.project.cloned(),
                seen: None,
            };
            let chains = export::chains(list, &export_plan);
            litellm::yaml(&chains, &plan.names, litellm::Section::RouterSettings, &[])
        };
        comment.litellm_diff = Some(diff::lines(&config(plan.before), &config(plan.after)));
    }
    comment
}

/// A window as people say it: `7 days`, `12 hours`, `30 minutes`.
pub fn window(d: time::Duration) -> String {
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    let s = d.whole_seconds();
    if s >= 86_400 && s % 86_400 == 0 {
        plural(s / 86_400, "day")
    } else if s >= 3600 && s % 3600 == 0 {
        plural(s / 3600, "hour")
    } else {
        plural(s.div_euclid(60).max(1), "minute")
    }
}

/// The Markdown comment between the allowlist files `before` and `after` (a missing one
/// is empty), each pair decided at `at` against `project` as `conform gate` decides it.
pub fn comment_between(
    before: &std::path::Path,
    after: &std::path::Path,
    project: &Paths,
    at: OffsetDateTime,
    expiring_within: std::time::Duration,
    primaries: Vec<String>,
    names: Names,
) -> Result<String, ReadError> {
    let (before, after) = (read(before)?, read(after)?);
    let within = time::Duration::try_from(expiring_within).unwrap_or(time::Duration::MAX);
    let comment = compare(&CommentPlan {
        before: &before,
        after: &after,
        at,
        expiring_within: within,
        project: Some(project),
        primaries,
        names,
    });
    Ok(markdown(&comment, within))
}

/// The comment as Markdown, for a pull request.
pub fn markdown(comment: &Comment, expiring_within: time::Duration) -> String {
    let expiring_within = window(expiring_within);
    let mut out = String::from("## conform: fallback changes\n\n");
    if comment.is_quiet() {
        out.push_str("No fallback was added, revoked or is about to expire.\n");
        return out;
    }
    if !comment.added.is_empty() {
        let _ = writeln!(out, "**Added** ({}):\n", comment.added.len());
        for a in &comment.added {
            let _ = writeln!(
                out,
                "- `{}` × `{}` (`{}`), valid until {}",
                a.suite, a.provider, a.model, a.valid_until
            );
        }
        out.push('\n');
    }
    if !comment.revoked.is_empty() {
        let _ = writeln!(out, "**Revoked** ({}):\n", comment.revoked.len());
        for r in &comment.revoked {
            let codes = if r.codes.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}",
                    r.codes
                        .iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let _ = writeln!(
                out,
                "- `{}` × `{}` ({}){codes}",
                r.suite, r.provider, r.reason
            );
        }
        out.push('\n');
    }
    if !comment.expiring.is_empty() {
        let _ = writeln!(
            out,
            "**Expiring within {expiring_within}** ({}): run conform again before then.\n",
            comment.expiring.len()
        );
        for e in &comment.expiring {
            let _ = writeln!(
                out,
                "- `{}` × `{}` until {}",
                e.suite, e.provider, e.valid_until
            );
        }
        out.push('\n');
    }
    if let Some(lines) = comment
        .litellm_diff
        .as_ref()
        .filter(|d| d.iter().any(|l| !l.starts_with(' ')))
    {
        out.push_str("**LiteLLM fallbacks** (`conform export litellm`):\n\n```diff\n");
        for line in lines {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("```\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(json: serde_json::Value) -> Allowlist {
        Allowlist::parse(json.to_string().as_bytes()).unwrap()
    }

    fn entry(suite: &str, provider: &str, until: &str) -> serde_json::Value {
        serde_json::json!({
            "suite": suite, "provider": provider, "model": "m", "served_models": [],
            "system_fingerprints": [], "suite_digest": "sha256:s", "provider_digest": "sha256:p",
            "tokenizer": "none", "generated_at": "2026-01-01T00:00:00Z", "valid_until": until,
            "evidence": {"run_id": "r1", "report": "reports/r1/report.json",
                "conform_version": "0.1.0", "cases": 1, "repeats": 1, "calls": 1, "passed": 1,
                "pass_rate": 1.0, "first_attempt_pass_rate": 1.0, "checks": {}}
        })
    }

    #[test]
    fn added_revoked_and_expiring_pairs_with_their_codes() {
        let before = list(serde_json::json!({"format": "conform.allowlist/v1",
            "entries": [entry("s", "kept", "2026-12-31T00:00:00Z"), entry("s", "lost", "2026-12-31T00:00:00Z")],
            "revocations": []}));
        let after = list(serde_json::json!({"format": "conform.allowlist/v1",
            "entries": [entry("s", "kept", "2026-06-03T00:00:00Z"), entry("s", "new", "2026-12-31T00:00:00Z")],
            "revocations": [{"suite": "s", "provider": "lost", "run_id": "r2", "at": "2026-06-01T00:00:00Z",
                "reasons": ["not_pure_json", "schema_violation"], "report": "reports/r2/report.json"}]}));
        let at = OffsetDateTime::parse("2026-06-01T12:00:00Z", &Rfc3339).unwrap();
        let comment = compare(&CommentPlan {
            before: &before,
            after: &after,
            at,
            expiring_within: time::Duration::days(7),
            project: None,
            primaries: vec!["primary".into()],
            names: Names::default(),
        });
        assert_eq!(comment.added.len(), 1);
        assert_eq!(comment.added[0].provider, "new");
        assert_eq!(comment.revoked.len(), 1);
        assert_eq!(comment.revoked[0].provider, "lost");
        assert_eq!(comment.revoked[0].reason, "revoked");
        assert_eq!(
            comment.revoked[0].codes,
            ["not_pure_json", "schema_violation"]
        );
        assert_eq!(comment.expiring.len(), 1);
        assert_eq!(comment.expiring[0].provider, "kept");
        let diff = comment.litellm_diff.as_ref().unwrap();
        assert!(
            diff.iter()
                .any(|l| l.starts_with('-') && l.contains("lost")),
            "{diff:?}"
        );
        assert!(
            diff.iter().any(|l| l.starts_with('+') && l.contains("new")),
            "{diff:?}"
        );

        let md = markdown(&comment, time::Duration::days(7));
        assert!(
            md.contains("- `s` × `new` (`m`), valid until 2026-12-31T00:00:00Z"),
            "{md}"
        );
        assert!(
            md.contains("- `s` × `lost` (revoked): `not_pure_json`, `schema_violation`"),
            "{md}"
        );
        assert!(md.contains("**Expiring within 7 days** (1)"), "{md}");
        assert!(md.contains("```diff\n"), "{md}");

        let same = compare(&CommentPlan {
            before: &after,
            after: &after,
            at,
            expiring_within: time::Duration::hours(1),
            project: None,
            primaries: vec!["primary".into()],
            names: Names::default(),
        });
        assert!(same.is_quiet(), "{same:?}");
        assert!(markdown(&same, time::Duration::hours(1)).contains("No fallback was added"));
        assert_eq!(window(time::Duration::hours(36)), "36 hours");
        assert_eq!(window(time::Duration::days(1)), "1 day");
    }
}
