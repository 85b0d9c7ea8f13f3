//! `conform scenarios`: race and timeout scenarios that test any orchestrator speaking
//! the contract in `docs/contract/ORCHESTRATOR.md` keeps one job per intent and gates
//! failover on the allowlist.
//!
//! - [`Scenario`]: the tiny trait every scenario implements (through [`Def`]);
//! - `ctx`: the run's [`Env`] and each scenario's [`Ctx`] (fresh owners, keys and tags,
//!   recorded exchanges and checks, and the final request-count check);
//! - `mock` and [`providers`]: mock providers on loopback (wiremock, plus a fault
//!   server for resets and cut bodies), scripted per job;
//! - `spawn`: starting, crashing and restarting the orchestrator under test;
//! - `runner`: selection, the run, JUnit;
//! - [`session`]: one `conform scenarios` around the runner: options, reaching the
//!   orchestrator, and the text a person reads;
//! - `raw`: HTTP/1.1 written byte for byte, for what a client library will not send;
//! - the scenarios, by theme: `keys`, `idempotency`, `replay`, `owners`,
//!   `outcomes`, `timeout`, `cancel`, `race`, `reads`, `gate`, `restart`,
//!   and the [`robustness`] family (hostile input and load), which runs last.

#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod api;
mod cancel;
mod clauses;
mod ctx;
mod evidence;
mod gate;
mod gatefile;
pub mod gateway;
mod idempotency;
pub mod invoke;
mod job;
mod keys;
mod mock;
mod outcomes;
mod owners;
pub mod providers;
mod race;
mod raw;
mod reads;
mod replay;
mod restart;
pub mod robustness;
mod runner;
pub mod session;
mod spawn;
mod timeout;
mod workdir;

use futures::future::BoxFuture;

pub use ctx::{Checked, Ctx, Env, Failed, Intent, Timing};
pub use evidence::{Evidence, Outcome};

/// One scenario.
pub trait Scenario: Send + Sync {
    /// A stable kebab-case name, for `--only` and `--skip`.
    fn name(&self) -> &'static str;
    /// One sentence: what it proves.
    fn about(&self) -> &'static str;
    /// It kills and restarts the orchestrator, so it runs only with `--spawn`.
    fn needs_restart(&self) -> bool {
        false
    }
    /// Runs it; the evidence always ends with the providers' request counts.
    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Evidence>;
}

/// A scenario as a name, a sentence and an async function.
pub struct Def {
    /// [`Scenario::name`].
    pub name: &'static str,
    /// [`Scenario::about`].
    pub about: &'static str,
    /// [`Scenario::needs_restart`].
    pub needs_restart: bool,
    /// The scenario's own checks; [`Scenario::run`] then counts the providers' requests
    /// and cites the contract's clause on failure.
    pub body: for<'a> fn(&'a Ctx) -> BoxFuture<'a, Checked>,
}

impl Scenario for Def {
    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn needs_restart(&self) -> bool {
        self.needs_restart
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Evidence> {
        Box::pin(async move {
            let mut evidence = ctx.conclude((self.body)(ctx)).await;
            cite(&mut evidence);
            evidence
        })
    }
}

/// A failure names the contract's rule it enforces: a scenario fails an orchestrator
/// only for breaking a rule the contract states.
pub fn cite(evidence: &mut Evidence) {
    if let (Outcome::Failed { reason }, Some(clause)) =
        (&mut evidence.outcome, clauses::of(&evidence.scenario))
        && !reason.contains(clause.quote)
    {
        reason.push_str(&format!(" ({clause})"));
    }
}

/// Every scenario, cheapest first (so that `--fail-fast` stops early), and the
/// robustness family last: it stresses the orchestrator, and no other scenario should
/// run against one it may have hurt.
pub fn all() -> Vec<Box<dyn Scenario>> {
    vec![
        Box::new(keys::key_forms()),
        Box::new(owners::owner_scoping()),
        Box::new(idempotency::double_click()),
        Box::new(idempotency::key_reuse()),
        Box::new(idempotency::concurrent_mismatch()),
        Box::new(replay::replay_in_every_state()),
        Box::new(outcomes::provider_request()),
        Box::new(outcomes::classification()),
        Box::new(outcomes::no_hidden_retries()),
        Box::new(cancel::cancel_releases()),
        Box::new(reads::immutable_result()),
        Box::new(reads::read_only_polling()),
        Box::new(gate::failover_gate()),
        Box::new(timeout::timeout_is_unknown()),
        Box::new(race::reverse_order()),
        Box::new(race::forward_order()),
        Box::new(race::three_way()),
        Box::new(cancel::late_after_job_cancel()),
        Box::new(gate::fail_closed()),
        Box::new(restart::crash_restart()),
        Box::new(robustness::oversized_body()),
        Box::new(robustness::deep_nesting()),
        Box::new(robustness::invalid_utf8()),
        Box::new(robustness::stalled_connections()),
        Box::new(robustness::creation_burst()),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_and_kebab_case() {
        let all = super::all();
        let names: BTreeSet<&str> = all.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), all.len());
        for name in names {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
        }
        assert_eq!(
            all.iter().filter(|s| s.needs_restart()).count(),
            1,
            "only crash-restart restarts"
        );
        let last: Vec<&str> = all[all.len() - super::robustness::FAMILY.len()..]
            .iter()
            .map(|s| s.name())
            .collect();
        assert_eq!(
            last,
            super::robustness::FAMILY,
            "the robustness family runs last"
        );
    }
}
