//! What a scenario hands back: its verdict and everything it rests on.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::api::Exchange;
use super::gateway::client::Received;
use super::gateway::upstream::Arrival as UpstreamArrival;
use super::mock::Arrival;

/// A scenario's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// `reason` is the first check that failed.
    Failed {
        /// The check, and why it failed.
        reason: String,
    },
    /// Not run, and why (e.g. it restarts the orchestrator and there is no `--spawn`).
    Skipped {
        /// Why it was not run.
        reason: String,
    },
}

/// One thing a scenario verified.
#[derive(Debug, Clone, Serialize)]
pub struct CheckRecord {
    pub what: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl CheckRecord {
    /// A check that passed.
    pub fn pass(what: impl Into<String>) -> Self {
        CheckRecord {
            what: what.into(),
            ok: true,
            detail: None,
        }
    }

    /// A check that failed, and the reason the scenario stops with: what, then why.
    pub fn fail(what: impl Into<String>, detail: Option<String>) -> (Self, String) {
        let what = what.into();
        let reason = match &detail {
            Some(d) => format!("{what}: {d}"),
            None => what.clone(),
        };
        let check = CheckRecord {
            what,
            ok: false,
            detail,
        };
        (check, reason)
    }
}

/// Requests one provider received for the scenario's jobs, against what the scenario
/// allowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RequestCount {
    /// What arrived.
    pub received: usize,
    /// What the scenario's jobs called for.
    pub expected: usize,
}

/// The verdict of one scenario and its evidence.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    /// The scenario's name.
    pub scenario: String,
    /// The scenario's sentence: what it proves.
    pub about: String,
    /// Its verdict.
    pub outcome: Outcome,
    /// How long it ran.
    pub seconds: f64,
    /// Every check, in order; the failing one last.
    pub checks: Vec<CheckRecord>,
    /// The calls sent to the orchestrator and its answers (polling reads are counted in
    /// `polls`, and only their last answer is kept).
    pub exchanges: Vec<Exchange>,
    /// Exchanges not kept once the evidence held its fill of them.
    #[serde(skip_serializing_if = "is_zero")]
    pub exchanges_omitted: usize,
    /// How many polling reads were sent.
    pub polls: usize,
    /// Every job the scenario created, as read back at the end.
    pub jobs: Vec<Value>,
    /// By provider name.
    pub provider_requests: BTreeMap<String, RequestCount>,
    /// Requests the providers received for this scenario, in order: for the jobs of an
    /// orchestrator (bodies included only for the first few), or from a gateway (with
    /// when each upstream finished with it).
    pub provider_arrivals: Vec<ProviderArrival>,
    /// Requests carrying no tag any scenario handed out: work nobody asked for.
    pub stray_requests: Vec<Arrival>,
    /// A gateway scenario's client requests, in order: what each received and when the
    /// upstreams were attempted for it (none for an orchestrator scenario).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_requests: Vec<ClientRequest>,
    /// Things worth knowing that are not checks (timings, which attempt won).
    pub notes: Vec<String>,
}

/// A request a provider received: a mock provider behind an orchestrator, or an
/// upstream behind a gateway.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ProviderArrival {
    /// At a mock provider, for one of the scenario's jobs.
    Job(Arrival),
    /// At a gateway's upstream.
    Upstream(UpstreamArrival),
}

/// One request a client sent through a gateway: what it received (`ms` is the wall time
/// of its whole call) and the upstream attempts that came for it (those that arrived
/// after it was sent and before the client's next request).
#[derive(Debug, Clone, Serialize)]
pub struct ClientRequest {
    /// The model the client asked for, by the gateway's name.
    pub asked: String,
    pub sent_unix_ms: u64,
    #[serde(flatten)]
    pub received: Received,
    /// From the client sending to the first upstream attempt arriving; none when no
    /// upstream was attempted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_attempt_ms: Option<u64>,
    /// The gap before each next attempt, whichever upstream it went to.
    pub gaps_ms: Vec<u64>,
    /// The gaps between attempts on the same upstream, by model (only models attempted
    /// more than once).
    pub gaps_by_upstream_ms: BTreeMap<String, Vec<u64>>,
    /// Attempts each upstream received for this request, by model.
    pub attempts: BTreeMap<String, usize>,
}

impl ClientRequest {
    /// `received` for the request sent at `sent_unix_ms`, timed by the attempts that came
    /// for it, in their order of arrival.
    pub fn timed(
        asked: &str,
        sent_unix_ms: u64,
        received: Received,
        attempts: &[&UpstreamArrival],
    ) -> ClientRequest {
        let gap = |pair: &[&UpstreamArrival]| pair[1].at_unix_ms.saturating_sub(pair[0].at_unix_ms);
        let mut by_model: BTreeMap<String, Vec<&UpstreamArrival>> = BTreeMap::new();
        for a in attempts {
            by_model.entry(a.model.clone()).or_default().push(a);
        }
        ClientRequest {
            asked: asked.to_string(),
            sent_unix_ms,
            received,
            first_attempt_ms: (attempts.first()).map(|a| a.at_unix_ms.saturating_sub(sent_unix_ms)),
            gaps_ms: attempts.windows(2).map(gap).collect(),
            gaps_by_upstream_ms: (by_model.iter())
                .filter(|(_, a)| a.len() > 1)
                .map(|(m, a)| (m.clone(), a.windows(2).map(gap).collect()))
                .collect(),
            attempts: (by_model.iter())
                .map(|(m, a)| (m.clone(), a.len()))
                .collect(),
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Evidence {
    /// Evidence for a scenario that was not run.
    pub fn skipped(scenario: &str, about: &str, reason: &str) -> Evidence {
        Evidence {
            scenario: scenario.to_string(),
            about: about.to_string(),
            outcome: Outcome::Skipped {
                reason: reason.to_string(),
            },
            seconds: 0.0,
            checks: Vec::new(),
            exchanges: Vec::new(),
            exchanges_omitted: 0,
            polls: 0,
            jobs: Vec::new(),
            provider_requests: BTreeMap::new(),
            provider_arrivals: Vec::new(),
            stray_requests: Vec::new(),
            client_requests: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Whether the verdict is a pass.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Passed
    }

    /// Whether the verdict is a failure (a skip is neither).
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }
}
