//! A verdict decided before its last call (issue 35): once a pair's model failures
//! exceed what `pass_threshold` allows, no call still to come can make it pass, and its
//! later calls are saved. Over 20 seeds, a simulation failing one answer in five on a
//! 1,000-case suite is decided with at most a tenth of the calls, and the faithful one
//! sends every call and keeps its verdict; the report says planned, sent and saved, and
//! what decided it.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conform::config::{ProviderConfig, Suite};
use conform::provider::transport::{Endpoint, Transport};
use conform::provider::wire_format;
use conform::run::{self, PairVerdict, RunOptions, Target};
use conform::sim::{AnswerBook, SimServer};
use conform::tokenize::Counter;
use conform::verdict::{DecisionRule, Verdict};
use serde_json::json;

const SEEDS: u64 = 20;
const CASES: usize = 1000;

/// 1,000 labelling cases whose `label` must agree with the expected one.
fn labels_suite(root: &Path, pass_threshold: f64) -> PathBuf {
    let dir = root.join(format!("fixtures/labels-{pass_threshold}"));
    std::fs::create_dir_all(dir.join("cases")).unwrap();
    std::fs::write(
        dir.join("suite.toml"),
        format!(
            "user = \"Label item {{{{ n }}}}.\"\nschema = \"schema.json\"\npass_threshold = {pass_threshold}\nagree = [\"/label\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("schema.json"),
        serde_json::to_string(&json!({"type": "object",
            "properties": {"label": {"enum": ["red", "green", "blue"]}},
            "required": ["label"], "additionalProperties": false}))
        .unwrap(),
    )
    .unwrap();
    for i in 0..CASES {
        let label = ["red", "green", "blue"][i % 3];
        std::fs::write(
            dir.join(format!("cases/{i:04}.json")),
            json!({"vars": {"n": format!("{i:04}")}, "expected": {"label": label}}).to_string(),
        )
        .unwrap();
    }
    dir
}

fn sim(name: &str, behaviour: &str, extra: &str) -> ProviderConfig {
    let toml = format!(
        "kind = \"sim\"\nmodel = \"{name}\"\ntimeout = \"10s\"\n[limits]\nconcurrency = 4\n[sim]\nbehaviour = \"{behaviour}\"\nexpect = \"conformant\"\nlatency = \"0ms\"\n{extra}\n"
    );
    ProviderConfig::parse(Path::new(&format!("providers/{name}.toml")), &toml).unwrap()
}

/// One run of the faithful simulation and one failing a fifth of its answers.
async fn run_once(
    suite: &Arc<run::PreparedSuite>,
    book: &Arc<AnswerBook>,
    seed: u64,
    reports: &Path,
) -> (PairVerdict, PairVerdict) {
    let mut configs = vec![
        sim("faithful", "steady", ""),
        sim(
            "flipping",
            "flips-enum",
            &format!("rate = 0.2\nseed = {seed}\n"),
        ),
    ];
    let mut servers = Vec::new();
    for c in &mut configs {
        let server = SimServer::start(c, Arc::clone(book)).await.unwrap();
        c.base_url = server.uri();
        servers.push(server);
    }
    let transport = Transport::new().unwrap();
    let targets: Vec<Arc<Target>> = configs
        .into_iter()
        .map(|c| {
            let wire = wire_format(c.wire_kind());
            let counter = Counter::for_provider(&c).unwrap();
            Arc::new(
                Target::new(Endpoint::new(Arc::new(c), wire, None, transport.clone()))
                    .with_counter(counter),
            )
        })
        .collect();
    let options = RunOptions {
        run_id: format!("seed-{seed}"),
        dir: reports.join(format!("{}-seed-{seed}", suite.suite.name)),
        repeats: None,
        max_transport_error_share: 0.1,
        progress: false,
        shard: None,
        budget: None,
        every_call: false,
        resume: None,
    };
    let result = run::execute(
        std::slice::from_ref(suite),
        &targets,
        &options,
        std::future::pending(),
    )
    .await
    .unwrap();
    assert!(result.complete);
    // The terminal says what was planned, sent and saved, and what decided it.
    let text = conform::report::terminal::summary(&result);
    assert!(
        text.contains(" saved (verdicts decided before their last call)"),
        "{text}"
    );
    assert!(text.contains("calls saved"), "{text}");
    let of = |p: usize| {
        let v = result.verdicts.iter().find(|v| v.provider_index == p);
        v.unwrap().clone()
    };
    (of(0), of(1))
}

async fn over_seeds(pass_threshold: f64) -> Vec<u64> {
    let tmp = tempfile::tempdir().unwrap();
    let suite = Suite::load(&labels_suite(tmp.path(), pass_threshold)).unwrap();
    let book = Arc::new(AnswerBook::from_suites(&[&suite]).unwrap());
    let prepared = run::prepare(vec![suite], run::Keep::CaseBytes)
        .unwrap()
        .remove(0);
    let mut sent = Vec::new();
    for seed in 1..=SEEDS {
        let (faithful, flipping) =
            run_once(&prepared, &book, seed, &tmp.path().join("reports")).await;
        // The faithful provider is never decided early: every call is sent, and it passes.
        assert_eq!(
            faithful.verdict,
            Verdict::Conformant,
            "seed {seed}: {:?} {:?}",
            faithful.reasons,
            faithful.tally
        );
        assert_eq!(faithful.tally.sent(), CASES as u64);
        assert_eq!((faithful.tally.saved, faithful.tally.decided), (0, None));
        // The failing one is revoked, by the rule that decided it, for its own failures.
        let t = &flipping.tally;
        assert_eq!(flipping.verdict, Verdict::Nonconformant, "seed {seed}");
        let decided = t.decided.expect("what decided it");
        assert_eq!(decided.rule, DecisionRule::PassThreshold);
        assert!(decided.model_failures > decided.allowed_failures);
        assert_eq!(t.planned, t.sent() + t.saved + t.not_run, "seed {seed}");
        assert_eq!(t.not_run, 0);
        sent.push(t.sent());
    }
    sent
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_failing_a_fifth_of_its_calls_is_decided_with_a_tenth_of_them() {
    for pass_threshold in [1.0, 0.99] {
        let sent = over_seeds(pass_threshold).await;
        let most = *sent.iter().max().unwrap();
        let mean = sent.iter().sum::<u64>() as f64 / sent.len() as f64;
        eprintln!(
            "pass_threshold {pass_threshold}: {SEEDS} seeds, calls sent of {CASES}: mean {mean:.1}, most {most}"
        );
        assert!(most * 10 <= CASES as u64, "{sent:?}");
    }
}
