//! The tool-drifting simulations earn their verdicts, measured: a simulation that writes
//! the call into the text in 10% of 200 cases is revoked in every one of 20 seeded runs,
//! and the faithful one in none (the figures are printed, and kept in BENCHMARKS.md);
//! and a demo on the support-agent suite puts K2 Vendor Verifier's measures in
//! report.json and in the allowlist's evidence, which stays valid for its published
//! schema.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::Project;
use conform::run::{self, RunOptions};
use conform_check::verdict::Verdict;
use conform_config::{ProviderConfig, Suite};
use conform_wire::sim::AnswerBook;
use serde_json::{Value, json};

const SEEDS: u64 = 20;
const CASES: usize = 200;

/// A suite of 200 order lookups with the support agent's tools, each a different order.
fn lookup_suite(root: &Path) -> PathBuf {
    let dir = root.join("fixtures/lookups");
    let shipped = Path::new(common::REPO).join("fixtures/support-agent");
    std::fs::create_dir_all(dir.join("cases")).unwrap();
    for file in ["tools.json", "schema.json"] {
        std::fs::copy(shipped.join(file), dir.join(file)).unwrap();
    }
    std::fs::write(
        dir.join("suite.toml"),
        "description = \"200 order lookups\"\nsystem = \"You are a support agent. Use the tools.\"\ntools = \"tools.json\"\n",
    )
    .unwrap();
    for i in 0..CASES {
        let order = format!("BR-{:05}", 20_000 + i);
        let case = json!({
            "description": "a lookup",
            "messages": [{"role": "user", "content": format!("Where is my order {order}?")}],
            "expect": {"tool_calls": [{"name": "lookup_order", "arguments": {"/order_id": order}}]}
        });
        std::fs::write(
            dir.join(format!("cases/{i:03}.json")),
            serde_json::to_string_pretty(&case).unwrap(),
        )
        .unwrap();
    }
    dir
}

fn sim(name: &str, behaviour: &str, extra: &str) -> ProviderConfig {
    common::sim_config(name, behaviour, extra, 32)
}

/// One run of both simulations on the suite; the verdicts and the as-text one's recall.
async fn run_once(
    suite: &Arc<run::PreparedSuite>,
    book: &Arc<AnswerBook>,
    seed: u64,
    reports: &Path,
) -> (Verdict, Verdict, f64) {
    let configs = vec![
        sim("faithful", "steady", ""),
        sim(
            "as-text",
            "call-as-text",
            &format!("rate = 0.1\nseed = {seed}\n"),
        ),
    ];
    let options = RunOptions {
        run_id: format!("seed-{seed}"),
        dir: reports.join(format!("seed-{seed}")),
        repeats: None,
        max_transport_error_share: 0.1,
        progress: false,
        shard: None,
        budget: None,
        every_call: true,
        resume: None,
        asked: None,
    };
    let result = common::run_in_library(suite, book, configs, &options).await;
    let verdict = |p: usize| {
        result
            .verdicts
            .iter()
            .find(|v| v.provider_index == p)
            .unwrap()
    };
    let drifted = verdict(1);
    let recall = drifted
        .tally
        .tool_calls
        .as_ref()
        .and_then(|m| m.trigger_recall)
        .unwrap();
    if drifted.verdict == Verdict::Nonconformant {
        assert_eq!(
            drifted.reasons[0], "tool_call_as_text",
            "{:?}",
            drifted.reasons
        );
    }
    (verdict(0).verdict, drifted.verdict, recall)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ten_percent_call_as_text_drift_is_revoked_in_every_seeded_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = lookup_suite(tmp.path());
    let suite = Suite::load(&dir).unwrap();
    let book = Arc::new(AnswerBook::from_suites(&[&suite]).unwrap());
    let prepared = run::prepare(vec![suite], run::Keep::CaseBytes)
        .unwrap()
        .remove(0);
    let started = std::time::Instant::now();
    let (mut faithful_revoked, mut drift_revoked) = (0, 0);
    let mut recalls = Vec::new();
    for seed in 1..=SEEDS {
        let (faithful, drifted, recall) =
            run_once(&prepared, &book, seed, &tmp.path().join("reports")).await;
        faithful_revoked += u32::from(faithful == Verdict::Nonconformant);
        drift_revoked += u32::from(drifted == Verdict::Nonconformant);
        recalls.push(recall);
    }
    let (lo, hi) = recalls
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let mean = recalls.iter().sum::<f64>() / recalls.len() as f64;
    eprintln!(
        "call-as-text at 10% on {CASES} cases, {SEEDS} seeds: revoked {drift_revoked}/{SEEDS} \
         (missed {}), trigger recall {lo:.3}..{hi:.3} (mean {mean:.3}); faithful revoked \
         {faithful_revoked}/{SEEDS} (false alarms); {:.1} s",
        SEEDS as u32 - drift_revoked,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(drift_revoked, SEEDS as u32, "a 10% drift went unseen");
    assert_eq!(faithful_revoked, 0, "the faithful simulation was blamed");
    // The drift shows where the seed says, about one answer in ten.
    assert!((0.8..0.97).contains(&mean), "mean recall {mean}");
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_demo_puts_tool_measures_in_the_report_and_the_allowlist_evidence() {
    let project = Project::new(&[
        "sim-steady",
        "sim-anthropic",
        "sim-tool-required-ignored",
        "sim-tool-invented",
    ]);
    let out = project
        .cmd()
        .args(["demo", "--suite", "support-agent", "--no-progress"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let run = project.last_run();
    let report = read_json(&run.join("report.json"));
    let verdict = |p: &str| -> Value {
        report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["provider"] == p)
            .unwrap()
            .clone()
    };
    let steady = verdict("sim-steady");
    let measures = &steady["tool_calls"];
    assert_eq!(steady["verdict"], "conformant");
    assert_eq!(measures["trigger_precision"], 1.0);
    assert_eq!(measures["trigger_recall"], 1.0);
    assert_eq!(measures["trigger_f1"], 1.0);
    assert_eq!(measures["schema_accuracy"], 1.0);
    assert_eq!(measures["thresholds"]["min_trigger_f1"], 0.95);
    let answers = measures["answers"].as_u64().unwrap();
    assert_eq!(answers, 36, "every case declares the suite's tools");
    // Ignoring `required` makes false negatives: recall, and F1, fall below the bar.
    let ignored = verdict("sim-tool-required-ignored");
    assert!(ignored["tool_calls"]["false_negatives"].as_u64().unwrap() >= 3);
    let reasons: Vec<&str> = ignored["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&"tool_trigger_f1_below_threshold"),
        "{reasons:?}"
    );
    assert!(reasons.contains(&"tool_choice_ignored"), "{reasons:?}");
    // An invented name is a call that fails schema accuracy.
    let invented = verdict("sim-tool-invented");
    assert!(invented["tool_calls"]["schema_accuracy"].as_f64().unwrap() < 0.5);

    let allowlist = read_json(&run.join("allowlist.json"));
    let entry = allowlist["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["provider"] == "sim-steady")
        .unwrap();
    let evidence = &entry["evidence"]["tool_calls"];
    assert_eq!(evidence["answers"], answers);
    assert_eq!(evidence["trigger_f1"], 1.0);
    assert_eq!(evidence["schema_accuracy"], 1.0);
    // The writer's output stays valid for the published schema.
    let schema: Value = serde_json::from_str(conform_allowlist::SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&allowlist)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}
