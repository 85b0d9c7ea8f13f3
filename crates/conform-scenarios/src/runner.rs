//! Selecting scenarios, running them one after another against one orchestrator, and
//! the report: JSON for machines, JUnit for CI.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quick_junit::{NonSuccessKind, Property, Report as Junit, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;

use super::ctx::{Ctx, Env};
use super::evidence::{CheckRecord, Evidence, Outcome};
use super::{Scenario, gatefile};

/// The format tag of the JSON report.
pub(crate) const FORMAT: &str = "conform.scenarios/v1";

/// `--only` or `--skip` named a scenario that does not exist.
#[derive(Debug, thiserror::Error)]
#[error("no scenario is called `{name}`; the scenarios are: {known}")]
pub(crate) struct UnknownScenario {
    pub name: String,
    pub known: String,
}

/// The scenarios `only` names (all when empty), minus those `skip` names, in the
/// suite's order.
pub(crate) fn select(
    all: Vec<Box<dyn Scenario>>,
    only: &[String],
    skip: &[String],
) -> Result<Vec<Box<dyn Scenario>>, UnknownScenario> {
    let known: BTreeSet<&str> = all.iter().map(|s| s.name()).collect();
    if let Some(name) = only
        .iter()
        .chain(skip)
        .find(|n| !known.contains(n.as_str()))
    {
        return Err(UnknownScenario {
            name: name.clone(),
            known: known.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    Ok(all
        .into_iter()
        .filter(|s| only.is_empty() || only.iter().any(|n| n == s.name()))
        .filter(|s| !skip.iter().any(|n| n == s.name()))
        .collect())
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    pub format: &'static str,
    pub target: String,
    pub attempt_timeout_ms: u64,
    pub late_window_ms: u64,
    pub providers: Vec<(String, String)>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub seconds: f64,
    pub scenarios: Vec<Evidence>,
}

impl SuiteReport {
    /// No selected scenario failed (one that cannot run in this mode is skipped, and
    /// says so).
    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }
}

const FAIL_FAST: &str = "not run: an earlier scenario failed and --fail-fast was given";
const NEEDS_SPAWN: &str =
    "not run: it kills and restarts the orchestrator, which needs --spawn (not --target)";

/// Runs the scenarios one after another; `progress` sees each evidence as it comes.
pub(crate) async fn run(
    env: Arc<Env>,
    scenarios: &[Box<dyn Scenario>],
    fail_fast: bool,
    mut progress: impl FnMut(&Evidence),
) -> SuiteReport {
    let started = Instant::now();
    let mut results = Vec::with_capacity(scenarios.len());
    let mut stop = false;
    for scenario in scenarios {
        let evidence = if stop {
            Evidence::skipped(scenario.name(), scenario.about(), FAIL_FAST)
        } else if scenario.needs_restart() && env.spawned.is_none() {
            Evidence::skipped(scenario.name(), scenario.about(), NEEDS_SPAWN)
        } else {
            let ctx = Ctx::new(Arc::clone(&env), scenario.name(), scenario.about());
            let mut evidence = scenario.run(&ctx).await;
            survive(&env, &mut evidence).await;
            super::cite(&mut evidence);
            evidence
        };
        stop |= fail_fast && evidence.failed();
        progress(&evidence);
        results.push(evidence);
    }
    let count = |f: fn(&Outcome) -> bool| results.iter().filter(|e| f(&e.outcome)).count();
    SuiteReport {
        format: FORMAT,
        target: env.api.base().to_string(),
        attempt_timeout_ms: env.timing.attempt_timeout.as_millis() as u64,
        late_window_ms: env.timing.late_window.as_millis() as u64,
        providers: env.providers.urls().to_vec(),
        passed: count(|o| matches!(o, Outcome::Passed)),
        failed: count(|o| matches!(o, Outcome::Failed { .. })),
        skipped: count(|o| matches!(o, Outcome::Skipped { .. })),
        seconds: started.elapsed().as_secs_f64(),
        scenarios: results,
    }
}

/// After each scenario: an orchestrator that died during it fails it, and is started
/// again so the next scenario has something to test; and the allowlist is back to the
/// standard one in case the scenario left it rewritten.
async fn survive(env: &Env, evidence: &mut Evidence) {
    if let Some(spawned) = &env.spawned
        && let Some(status) = spawned.exited().await
    {
        let what = format!("the orchestrator kept running (it exited: {status})");
        evidence.checks.push(CheckRecord {
            what: what.clone(),
            ok: false,
            detail: Some(spawned.log_tail()),
        });
        if !evidence.failed() {
            evidence.outcome = Outcome::Failed { reason: what };
        }
        if let Err(e) = spawned.relaunch().await {
            evidence
                .notes
                .push(format!("could not start it again: {e}"));
        }
    }
    if !is_standard(&env.allowlist) {
        let _ = gatefile::write(&env.allowlist, &gatefile::standard());
        tokio::time::sleep(env.timing.allowlist_refresh()).await;
    }
}

/// Whether the file is a standard allowlist (whatever its timestamps).
fn is_standard(path: &std::path::Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let Ok(file) = conform_gate::allowlist::Allowlist::parse(&bytes) else {
        return false;
    };
    let now = time::OffsetDateTime::now_utc() + time::Duration::minutes(10);
    file.entries.len() == 1
        && file.entries[0].suite == gatefile::TASK
        && file.entries[0].provider == "fallback"
        && time::OffsetDateTime::parse(
            &file.entries[0].valid_until,
            &time::format_description::well_known::Rfc3339,
        )
        .is_ok_and(|t| t > now)
}

/// The run as JUnit XML: one test case per scenario, the failing check as the message,
/// the evidence as JSON in `system-out`, and each gateway client request's fields as
/// properties (`client_request.N.FIELD`, N from 1), passed or not.
pub(crate) fn junit(report: &SuiteReport) -> Junit {
    let mut suite = TestSuite::new("conform scenarios");
    for evidence in &report.scenarios {
        let status = match &evidence.outcome {
            Outcome::Passed => TestCaseStatus::success(),
            Outcome::Failed { reason } => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(reason.clone());
                s.set_type("scenario_failed");
                s
            }
            Outcome::Skipped { reason } => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(reason.clone());
                s
            }
        };
        let mut case = TestCase::new(evidence.scenario.clone(), status);
        case.set_classname("conform.scenarios");
        case.set_time(Duration::from_secs_f64(evidence.seconds));
        case.add_properties(client_request_properties(evidence));
        if !matches!(evidence.outcome, Outcome::Passed) {
            case.set_system_out(serde_json::to_string_pretty(evidence).unwrap_or_default());
        }
        suite.add_test_case(case);
    }
    let mut junit = Junit::new("conform scenarios");
    junit.add_test_suite(suite);
    junit
}

/// Each client request's top-level fields, as text (an object or a list as its JSON).
fn client_request_properties(evidence: &Evidence) -> Vec<Property> {
    let mut properties = Vec::new();
    for (i, request) in evidence.client_requests.iter().enumerate() {
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(request) else {
            continue;
        };
        for (name, value) in fields {
            let text = match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            properties.push(Property::new(
                format!("client_request.{}.{name}", i + 1),
                text,
            ));
        }
    }
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_by_name_in_suite_order_and_refuses_unknown_names() {
        let names = |v: Vec<Box<dyn Scenario>>| v.iter().map(|s| s.name()).collect::<Vec<_>>();
        let all = names(super::super::all());
        let only = vec!["three-way-race".to_string(), "double-click".to_string()];
        assert_eq!(
            names(select(super::super::all(), &only, &[]).unwrap()),
            vec!["double-click", "three-way-race"]
        );
        let skip = vec!["double-click".to_string()];
        let rest = names(select(super::super::all(), &[], &skip).unwrap());
        assert_eq!(rest.len(), all.len() - 1);
        assert!(!rest.contains(&"double-click"));
        let err = select(super::super::all(), &["nope".to_string()], &[])
            .err()
            .unwrap();
        assert!(err.to_string().contains("`nope`"));
        assert!(err.to_string().contains("double-click"));
    }

    #[test]
    fn junit_has_one_case_per_scenario_with_the_failing_check() {
        let mut failed = Evidence::skipped("a", "about a", "");
        failed.outcome = Outcome::Failed {
            reason: "exactly one 201".into(),
        };
        let mut passed = Evidence::skipped("b", "about b", "");
        passed.outcome = Outcome::Passed;
        let report = SuiteReport {
            format: FORMAT,
            target: "http://127.0.0.1:1".into(),
            attempt_timeout_ms: 1000,
            late_window_ms: 2000,
            providers: Vec::new(),
            passed: 1,
            failed: 1,
            skipped: 0,
            seconds: 1.0,
            scenarios: vec![failed, passed],
        };
        let xml = junit(&report).to_string().unwrap();
        assert!(xml.contains(r#"tests="2""#), "{xml}");
        assert!(xml.contains(r#"failures="1""#), "{xml}");
        assert!(xml.contains("exactly one 201"), "{xml}");
        assert!(!report.all_passed());
    }

    /// A gateway scenario's client requests reach JUnit as properties, passed or not.
    #[test]
    fn junit_carries_each_client_requests_fields_as_properties() {
        let received = crate::gateway::client::Received {
            status: 200,
            content: Some("{}".into()),
            model: Some("fallback-mock".into()),
            complete: true,
            finish_reason: Some("stop".into()),
            ms: 1_234,
            ..crate::gateway::client::Received::unsent()
        };
        let mut passed = Evidence::skipped("accounting", "about", "");
        passed.outcome = Outcome::Passed;
        passed.client_requests = vec![crate::evidence::ClientRequest::timed(
            "primary",
            1_000,
            received,
            &[],
        )];
        let report = SuiteReport {
            format: FORMAT,
            target: "litellm at http://127.0.0.1:1".into(),
            attempt_timeout_ms: 1000,
            late_window_ms: 0,
            providers: Vec::new(),
            passed: 1,
            failed: 0,
            skipped: 0,
            seconds: 1.0,
            scenarios: vec![passed],
        };
        let xml = junit(&report).to_string().unwrap();
        for property in [
            r#"name="client_request.1.status" value="200""#,
            r#"name="client_request.1.model" value="fallback-mock""#,
            r#"name="client_request.1.ms" value="1234""#,
            r#"name="client_request.1.asked" value="primary""#,
        ] {
            assert!(xml.contains(property), "{property}: {xml}");
        }
    }
}
