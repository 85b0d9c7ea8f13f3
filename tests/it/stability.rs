//! Stability of repeats, end to end through the runner against a mock that speaks Chat
//! Completions: disagreeing repeats make a suite that demands agreement nonconformant,
//! and a Wilson bound judges each case by the confidence its repeats give.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use conform::run::{self, PreparedSuite, RunOptions, Target};
use conform_check::verdict::Verdict;
use conform_config::{ProviderConfig, Suite};
use conform_wire::provider::transport::{Endpoint, Transport};
use conform_wire::provider::wire_format;

/// Answers `{"summary": "a"}`, then `"b"`, alternating when `flip` is set.
struct Answers {
    n: AtomicU64,
    flip: bool,
}

impl Respond for Answers {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let n = self.n.fetch_add(1, Ordering::SeqCst);
        // Key order varies on purpose: canonical equality must not count it.
        let content = match (self.flip && n % 2 == 1, n % 3) {
            (true, _) => r#"{"summary": "b", "n": 1}"#,
            (false, 0) => r#"{"summary": "a", "n": 1}"#,
            (false, _) => r#"{"n": 1.0, "summary": "a"}"#,
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}}))
    }
}

fn suite(dir: &Path, extra: &str) -> Suite {
    std::fs::create_dir_all(dir.join("cases")).unwrap();
    std::fs::write(
        dir.join("suite.toml"),
        format!("user = \"Summarise: {{{{ body }}}}\"\n{extra}"),
    )
    .unwrap();
    std::fs::write(dir.join("schema.json"), r#"{"type": "object"}"#).unwrap();
    for id in ["one", "two"] {
        std::fs::write(
            dir.join(format!("cases/{id}.json")),
            json!({"vars": {"body": id}}).to_string(),
        )
        .unwrap();
    }
    let mut suite = Suite::load(dir).unwrap();
    // Two cases are few calls: a project that holds its permits to little (what
    // `[evidence] max_undetected_failure_rate` sets), so these verdicts are about stability.
    suite.required_failure_rate = 0.99;
    suite
}

async fn verdict(suite: Suite, flip: bool, dir: &Path) -> run::PairVerdict {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Answers {
            n: AtomicU64::new(0),
            flip,
        })
        .mount(&server)
        .await;
    let file = dir.join("mock.toml");
    let source = format!(
        "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"{}\"\n\n[limits]\nconcurrency = 1\n",
        server.uri()
    );
    let config = ProviderConfig::parse(&file, &source).unwrap();
    let target = Target::new(Endpoint::new(
        Arc::new(config.clone()),
        wire_format(config.kind),
        None,
        Transport::new().unwrap(),
    ));
    let options = RunOptions {
        run_id: "t".into(),
        dir: dir.join("report"),
        repeats: None,
        max_transport_error_share: 1.0,
        progress: false,
        shard: None,
        budget: None,
        every_call: true,
        resume: None,
        asked: None,
    };
    let prepared = Arc::new(PreparedSuite::new(suite).unwrap());
    let result = run::execute(
        &[prepared],
        &[Arc::new(target)],
        &options,
        std::future::pending(),
    )
    .await
    .unwrap();
    result.verdicts.into_iter().next().unwrap()
}

#[tokio::test]
async fn disagreeing_repeats_fail_a_suite_that_demands_agreement() {
    let tmp = tempfile::tempdir().unwrap();
    let s = suite(
        &tmp.path().join("s"),
        "repeats = 4\n[stability]\nmin_agreement = 0.75\n",
    );
    let v = verdict(s, true, tmp.path()).await;
    assert_eq!(v.verdict, Verdict::Nonconformant);
    assert_eq!(v.reasons, ["unstable_repeats"]);
    assert_eq!(v.tally.passed, 8, "every call passed its checks");
    let s = v.tally.stability.unwrap();
    assert_eq!(
        (s.cases, s.cases_unanimous, s.cases_below_agreement),
        (2, 0, 2)
    );
    assert_eq!(s.least_stable.as_ref().unwrap().agreement, 0.5);
    assert_eq!(s.in_flight(), 0);
}

#[tokio::test]
async fn agreeing_repeats_pass_whatever_the_key_order() {
    let tmp = tempfile::tempdir().unwrap();
    let s = suite(
        &tmp.path().join("s"),
        "repeats = 3\n[stability]\nmin_agreement = 1.0\n",
    );
    let v = verdict(s, false, tmp.path()).await;
    assert_eq!(v.verdict, Verdict::Conformant, "{:?}", v.reasons);
    let s = v.tally.stability.unwrap();
    assert_eq!((s.cases, s.cases_unanimous), (2, 2));
    assert_eq!(s.mean_agreement, 1.0);
}

#[tokio::test]
async fn a_wilson_bound_asks_for_more_evidence_than_a_plain_share() {
    let tmp = tempfile::tempdir().unwrap();
    // 3 of 3 passed is a 100% share, but its 95% lower bound is 3 / (3 + 1.96²) = 0.44.
    let s = suite(
        &tmp.path().join("s"),
        "repeats = 3\n[stability]\nmin_case_pass_lower_bound = 0.5\n",
    );
    let v = verdict(s, false, tmp.path()).await;
    assert_eq!(v.tally.pass_rate(), 1.0);
    assert_eq!(v.verdict, Verdict::Nonconformant);
    assert_eq!(v.reasons, ["case_pass_rate_below_bound"]);
    let low = v.tally.stability.unwrap().lowest_pass_lower_bound.unwrap();
    assert!((low - 0.4385).abs() < 1e-3, "{low}");

    // 8 of 8: 8 / (8 + 3.84) = 0.68, enough.
    let tmp = tempfile::tempdir().unwrap();
    let s = suite(
        &tmp.path().join("s"),
        "repeats = 8\n[stability]\nmin_case_pass_lower_bound = 0.5\n",
    );
    let v = verdict(s, false, tmp.path()).await;
    assert_eq!(v.verdict, Verdict::Conformant, "{:?}", v.reasons);
}
