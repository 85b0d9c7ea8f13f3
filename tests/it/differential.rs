//! Differential conformance against the primary, measured on simulated providers.
//!
//! A suite of 100 support tickets (an enum `category` and a free-text `summary`, no
//! `expected` answers) runs with 3 repeats through a simulated primary whose summary
//! varies in 30 % of its answers (its run-to-run noise) and three candidates: one that
//! flips the category in 15 % of its answers, a faithful one, and a faithful one that is
//! as noisy as the primary. Over 20 seeds, the flipping one is revoked every time and
//! the faithful ones are not blamed for the primary's noise; the figures are printed and
//! kept in BENCHMARKS.md. Then the same with the primary's answers recorded in the
//! cases (no live call), and the cases where no floor can be measured.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conform::run::{self, PairVerdict, RunOptions, RunResult};
use conform_check::check::differential::{
    CODE, FieldVerdict, INSUFFICIENT, NO_FLOOR, NO_REFERENCE,
};
use conform_check::verdict::Verdict;
use conform_config::{ProviderConfig, Suite};
use conform_wire::sim::AnswerBook;
use serde_json::{Value, json};

const SEEDS: u64 = 20;

/// How many seeds the measuring test runs: 20, or `CONFORM_DIFFERENTIAL_SEEDS` for a
/// tighter estimate of the rates in BENCHMARKS.md (the bars hold for the first 20).
fn seeds() -> u64 {
    std::env::var("CONFORM_DIFFERENTIAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n >= SEEDS)
        .unwrap_or(SEEDS)
}
const CASES: usize = 100;
const CATEGORIES: [&str; 4] = ["billing", "shipping", "technical", "account"];

fn canonical_answer(i: usize) -> Value {
    json!({
        "category": CATEGORIES[i % CATEGORIES.len()],
        "summary": format!("Customer {i} asks about their {}", CATEGORIES[i % 4])
    })
}

/// `fixtures/tickets`: 100 cases, none with `expected`. Each carries a recorded
/// reference of `recorded` answers, the first the canonical one (which the simulations
/// answer), the others reworded in every third case.
fn ticket_suite(root: &Path, reference: Option<&str>, recorded: usize) -> PathBuf {
    let dir = root.join("fixtures/tickets");
    std::fs::create_dir_all(dir.join("cases")).unwrap();
    let reference = reference
        .map(|r| format!("reference = \"{r}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("suite.toml"),
        format!(
            "description = \"tickets\"\nuser = \"Ticket: {{{{ text }}}}\"\nrepeats = 3\n\
             agree = [\"/category\"]\n{reference}\n[differential]\nmargin = 0.05\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("schema.json"),
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "category": {"type": "string", "enum": CATEGORIES},
                "summary": {"type": "string"}
            },
            "required": ["category", "summary"],
            "additionalProperties": false
        })
        .to_string(),
    )
    .unwrap();
    for i in 0..CASES {
        let answer = canonical_answer(i);
        let answers: Vec<Value> = (0..recorded)
            .map(|k| {
                let mut a = answer.clone();
                if k > 0 && i % 3 == 0 {
                    a["summary"] = json!(format!("Ticket {i}, take {k}: a question"));
                }
                json!({"text": a.to_string()})
            })
            .collect();
        let case = json!({
            "description": "a ticket",
            "vars": {"text": format!("ticket number {i}: something about {}", CATEGORIES[i % 4])},
            "reference": {
                "provider": "primary", "model": "primary-model",
                "recorded_at": "2026-11-30T12:00:00Z", "answers": answers
            }
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

async fn run_with(
    suite: &Arc<run::PreparedSuite>,
    book: &Arc<AnswerBook>,
    configs: Vec<ProviderConfig>,
    dir: PathBuf,
) -> RunResult {
    let options = RunOptions {
        run_id: dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("run")
            .into(),
        dir,
        repeats: None,
        max_transport_error_share: 0.1,
        progress: false,
        shard: None,
        budget: None,
        every_call: true,
        resume: None,
        asked: None,
    };
    common::run_in_library(suite, book, configs, &options).await
}

fn verdict_of<'a>(result: &'a RunResult, provider: &str) -> &'a PairVerdict {
    result
        .verdicts
        .iter()
        .find(|v| v.tally.provider == provider)
        .unwrap()
}

fn prepared(dir: &Path) -> (Arc<run::PreparedSuite>, Arc<AnswerBook>) {
    let suite = Suite::load(dir).unwrap();
    let book = Arc::new(AnswerBook::from_suites(&[&suite]).unwrap());
    (
        run::prepare(vec![suite], run::Keep::CaseBytes)
            .unwrap()
            .remove(0),
        book,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifteen_percent_enum_flip_is_revoked_every_time_and_the_primarys_noise_is_not_blamed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ticket_suite(tmp.path(), Some("primary"), 1);
    let (suite, book) = prepared(&dir);
    let started = std::time::Instant::now();
    let (mut flipper_revoked, mut steady_revoked, mut noisy_revoked) = (0, 0, 0);
    let (mut floors, mut flipper_agreement) = (Vec::new(), Vec::new());
    let seeds = seeds();
    let mut first_twenty = (0, 0, 0);
    for seed in 1..=seeds {
        if seed == SEEDS + 1 {
            first_twenty = (flipper_revoked, steady_revoked, noisy_revoked);
        }
        let configs = vec![
            sim(
                "primary",
                "varies-text",
                &format!("rate = 0.3\nseed = {seed}\n"),
            ),
            sim(
                "flipper",
                "flips-enum",
                &format!("rate = 0.15\nseed = {seed}\n"),
            ),
            sim("faithful", "steady", ""),
            sim(
                "noisy",
                "varies-text",
                &format!("rate = 0.3\nseed = {}\n", seed + 1000),
            ),
        ];
        let result = run_with(
            &suite,
            &book,
            configs,
            tmp.path().join(format!("reports/seed-{seed}")),
        )
        .await;
        let primary = verdict_of(&result, "primary");
        assert_eq!(
            primary.verdict,
            Verdict::Conformant,
            "{:?}",
            primary.reasons
        );
        assert!(
            primary.tally.differential.is_none(),
            "the reference is not judged against itself"
        );

        let flipper = verdict_of(&result, "flipper");
        let d = flipper.tally.differential.as_ref().unwrap();
        let category = d.fields.iter().find(|f| f.field == "/category").unwrap();
        let answer = d.fields.iter().find(|f| f.field == "answer").unwrap();
        floors.push(answer.reference_agreement.unwrap());
        flipper_agreement.push(category.candidate_agreement.unwrap());
        assert_eq!(
            category.reference_agreement,
            Some(1.0),
            "the primary never varies its category"
        );
        if flipper.verdict == Verdict::Nonconformant {
            flipper_revoked += 1;
            assert_eq!(
                flipper.reasons,
                [CODE],
                "only the differential can see a valid flip"
            );
            assert_eq!(category.verdict, FieldVerdict::Fail);
            // The cases that disagree most come first, and name the field.
            assert!(
                d.worst_cases[0].fields.iter().any(|f| f == "/category"),
                "{:?}",
                d.worst_cases
            );
        }
        // The tool fields apply to no case of this suite: compared on nothing.
        let made = d
            .fields
            .iter()
            .find(|f| f.field == "tool_call.made")
            .unwrap();
        assert_eq!(made.verdict, FieldVerdict::NotCompared);

        for (name, count) in [
            ("faithful", &mut steady_revoked),
            ("noisy", &mut noisy_revoked),
        ] {
            let v = verdict_of(&result, name);
            assert_ne!(v.verdict, Verdict::Inconclusive, "{name}: {:?}", v.reasons);
            *count += u32::from(v.verdict == Verdict::Nonconformant);
        }
    }
    if seeds == SEEDS {
        first_twenty = (flipper_revoked, steady_revoked, noisy_revoked);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (lo, hi) = flipper_agreement
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    eprintln!(
        "differential, {CASES} cases x 3 repeats, {seeds} seeds: enum flip at 15% revoked \
         {flipper_revoked}/{seeds} (missed {}; its category agreement {lo:.3}..{hi:.3}, mean \
         {:.3}); faithful revoked {steady_revoked}/{seeds}, faithful-and-as-noisy revoked \
         {noisy_revoked}/{seeds} (false alarms); the primary's whole-answer floor {:.3}; {:.1} s",
        seeds as u32 - flipper_revoked,
        mean(&flipper_agreement),
        mean(&floors),
        started.elapsed().as_secs_f64()
    );
    let (flipped, steady, noisy) = first_twenty;
    assert_eq!(
        flipped, SEEDS as u32,
        "a 15% enum flip went unseen in 20 runs"
    );
    assert!(
        steady <= 1,
        "the faithful candidate was blamed {steady} times in 20"
    );
    assert!(
        noisy <= 1,
        "the noisy faithful candidate was blamed {noisy} times in 20"
    );
    // The primary's noise is real: its whole answers agree in about half of the pairs.
    assert!(
        (0.35..0.65).contains(&mean(&floors)),
        "floor {}",
        mean(&floors)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn recorded_answers_give_the_floor_with_no_live_primary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ticket_suite(tmp.path(), None, 3);
    let (suite, book) = prepared(&dir);
    let configs = vec![
        sim("flipper", "flips-enum", "rate = 0.15\nseed = 7\n"),
        sim("faithful", "steady", ""),
    ];
    let result = run_with(&suite, &book, configs, tmp.path().join("reports/recorded")).await;
    let flipper = verdict_of(&result, "flipper");
    assert_eq!(
        flipper.verdict,
        Verdict::Nonconformant,
        "{:?}",
        flipper.reasons
    );
    assert!(flipper.reasons.iter().any(|r| *r == CODE));
    let faithful = verdict_of(&result, "faithful");
    assert_eq!(
        faithful.verdict,
        Verdict::Conformant,
        "{:?}",
        faithful.reasons
    );
    let d = faithful.tally.differential.as_ref().unwrap();
    assert_eq!(d.reference, "recorded");
    assert_eq!(d.cases, CASES as u64);
    let answer = &d.fields[0];
    // Every third case's three recorded answers all differ: none of its 3 pairs agree.
    let expected_floor = 1.0 - (34.0 * 3.0) / (CASES as f64 * 3.0);
    let floor = answer.reference_agreement.unwrap();
    assert!((floor - expected_floor).abs() < 1e-9, "{floor}");
    // The category never varies in the recorded answers.
    assert_eq!(d.fields[1].reference_agreement, Some(1.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_recorded_answer_gives_no_floor_and_no_grant() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ticket_suite(tmp.path(), None, 1);
    let (suite, book) = prepared(&dir);
    let result = run_with(
        &suite,
        &book,
        vec![sim("faithful", "steady", "")],
        tmp.path().join("reports/one"),
    )
    .await;
    let faithful = verdict_of(&result, "faithful");
    assert_eq!(faithful.verdict, Verdict::Inconclusive);
    assert_eq!(faithful.reasons, [NO_FLOOR]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_reference_missing_from_the_run_is_inconclusive() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ticket_suite(tmp.path(), Some("primary"), 1);
    let (suite, book) = prepared(&dir);
    let result = run_with(
        &suite,
        &book,
        vec![sim("faithful", "steady", "")],
        tmp.path().join("reports/missing"),
    )
    .await;
    let faithful = verdict_of(&result, "faithful");
    assert_eq!(faithful.verdict, Verdict::Inconclusive);
    assert_eq!(
        faithful.reasons,
        [conform_check::check::differential::NO_REFERENCE]
    );
}

// The command line: `--reference`, the reports, the allowlist evidence, recorded tapes.

/// A project with only the tickets suite and the given simulated providers.
fn project(providers: &[(&str, &str, &str)], recorded: usize) -> common::Project {
    let project = common::Project::new(&[]);
    std::fs::remove_dir_all(project.path("fixtures")).unwrap();
    ticket_suite(project.root(), None, recorded);
    for (name, behaviour, extra) in providers {
        project.write(
            &format!("providers/{name}.toml"),
            &format!(
                "kind = \"sim\"\nmodel = \"{name}-model\"\ntimeout = \"10s\"\n[limits]\nconcurrency = 16\n\
                 [sim]\nbehaviour = \"{behaviour}\"\nlatency = \"0ms\"\n{extra}\n"
            ),
        );
    }
    project
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn verdict_in(report: &Value, provider: &str) -> Value {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["provider"] == provider)
        .unwrap()
        .clone()
}

#[test]
fn run_reference_reports_the_table_everywhere_and_revokes_through_the_verdict() {
    let project = project(
        &[
            (
                "primary",
                "varies-text",
                "expect = \"conformant\"\nrate = 0.3\nseed = 3",
            ),
            (
                "flipper",
                "flips-enum",
                "expect = \"nonconformant\"\nrate = 0.15\nseed = 3",
            ),
        ],
        1,
    );
    let out = project
        .cmd()
        .args([
            "run",
            "flipper",
            "--reference",
            "primary",
            "--suite",
            "tickets",
            "--no-progress",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Against the reference `primary` (tickets × flipper"),
        "{stdout}"
    );
    // The verdict's row says why, beside a pass count that alone would look fine.
    assert!(
        stdout.lines().any(|l| l.contains("flipper")
            && l.contains("nonconformant")
            && l.contains("reference_disagreement")),
        "{stdout}"
    );
    // The why names the field, both agreements and the reference.
    assert!(
        stdout.contains("reference_disagreement: `/category` agrees with `primary` in "),
        "{stdout}"
    );
    let run = project.last_run();
    let report = read_json(&run.join("report.json"));
    let flipper = verdict_in(&report, "flipper");
    assert_eq!(flipper["verdict"], "nonconformant");
    let fields = flipper["differential"]["fields"].as_array().unwrap();
    let category = fields.iter().find(|f| f["field"] == "/category").unwrap();
    assert_eq!(category["verdict"], "fail");
    assert_eq!(category["reference_agreement"], 1.0);
    assert!(category["candidate_agreement"].as_f64().unwrap() < 0.95);
    assert!(
        !flipper["differential"]["worst_cases"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The reference ran too, and is judged on its own.
    assert_eq!(verdict_in(&report, "primary")["verdict"], "conformant");
    let summary = std::fs::read_to_string(run.join("summary.md")).unwrap();
    assert!(summary.contains("| `/category` | 100.0% ("), "{summary}");
    assert!(summary.contains("| FAIL |"), "{summary}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        html.contains("Against the reference <code>primary</code>"),
        "{html}"
    );
    // The field is escaped as everything shown is (`/` too).
    assert!(
        html.contains("<tr class=\"fail\"><td><code>&#x2f;category</code>"),
        "{html}"
    );
}

#[test]
fn the_demo_grants_with_the_differential_evidence_in_a_schema_valid_allowlist() {
    let project = project(
        &[
            (
                "primary",
                "varies-text",
                "expect = \"conformant\"\nrate = 0.3\nseed = 5",
            ),
            ("faithful", "steady", "expect = \"conformant\""),
            (
                "flipper",
                "flips-enum",
                "expect = \"nonconformant\"\ncaught_by = \"reference_disagreement\"\nrate = 0.15\nseed = 5",
            ),
        ],
        1,
    );
    let toml = project.path("fixtures/tickets/suite.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("reference = \"primary\"\n{text}")).unwrap();
    let out = project
        .cmd()
        .args(["demo", "--no-progress"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let allowlist = read_json(&project.last_run().join("allowlist.json"));
    let entry = allowlist["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["provider"] == "faithful")
        .unwrap();
    let evidence = &entry["evidence"]["differential"];
    assert_eq!(evidence["reference"], "primary");
    assert_eq!(evidence["cases"], CASES);
    assert_eq!(evidence["fields"][0]["field"], "answer");
    assert_eq!(evidence["fields"][0]["verdict"], "pass");
    let schema: Value = serde_json::from_str(conform_allowlist::SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&allowlist)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn one_repeat_of_a_live_reference_is_inconclusive_and_an_unknown_reference_a_usage_error() {
    let project = project(
        &[
            ("primary", "steady", "expect = \"conformant\""),
            ("faithful", "steady", "expect = \"conformant\""),
        ],
        1,
    );
    let run = |args: &[&str]| {
        let out = project.cmd().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, _) = run(&[
        "run",
        "faithful",
        "--reference",
        "primary",
        "--suite",
        "tickets",
        "--repeats",
        "1",
        "--no-progress",
    ]);
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("reference_no_floor"), "{stdout}");
    assert!(stdout.contains("run with --repeats 2 or more"), "{stdout}");
    let (code, _, stderr) = run(&["run", "faithful", "--reference", "nobody", "--no-progress"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the reference `nobody` is not a provider"),
        "{stderr}"
    );
}

#[test]
fn a_recorded_tape_of_the_primary_becomes_the_cases_references() {
    let project = project(
        &[
            (
                "primary",
                "varies-text",
                "expect = \"conformant\"\nrate = 0.3\nseed = 9",
            ),
            (
                "flipper",
                "flips-enum",
                "expect = \"nonconformant\"\nrate = 0.15\nseed = 9",
            ),
        ],
        1,
    );
    let out = project
        .cmd()
        .args([
            "run",
            "primary",
            "--suite",
            "tickets",
            "--no-progress",
            "--record",
            "tapes",
        ])
        .output()
        .unwrap();
    // One recorded answer per case: the primary itself is judged without a floor.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = project
        .cmd()
        .args([
            "tape",
            "to-reference",
            "tapes/primary.jsonl",
            "--suite",
            "tickets",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("100 cases now carry 300 recorded answers of primary"),
        "{stdout}"
    );
    let case = read_json(&project.path("fixtures/tickets/cases/000.json"));
    let reference = &case["reference"];
    assert_eq!(reference["provider"], "primary");
    assert_eq!(reference["model"], "primary-model");
    assert_eq!(reference["served_model"], "primary-model-sim-2026-06-01");
    assert_eq!(reference["answers"].as_array().unwrap().len(), 3);
    assert_eq!(
        case["description"], "a ticket",
        "the rest of the case is kept"
    );
    let check = project.cmd().arg("check").output().unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // Judged against the recorded answers, no live call to the primary.
    let out = project
        .cmd()
        .args(["run", "flipper", "--suite", "tickets", "--no-progress"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&project.last_run().join("report.json"));
    let flipper = verdict_in(&report, "flipper");
    assert_eq!(flipper["differential"]["reference"], "recorded");
    assert!(
        flipper["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "reference_disagreement")
    );
    assert!(
        report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["provider"] != "primary")
    );
}

#[test]
fn conform_check_places_a_bad_reference_at_its_line() {
    let project = project(&[("faithful", "steady", "expect = \"conformant\"")], 1);
    project.write(
        "fixtures/tickets/cases/000.json",
        "{\n  \"vars\": {\"text\": \"x\"},\n  \"reference\": {\n    \"model\": \"m\",\n    \"recorded_at\": \"yesterday\",\n    \"answers\": []\n  }\n}\n",
    );
    let out = project.cmd().arg("check").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("cases/000.json:5:5: /reference/recorded_at: `yesterday` is not an RFC 3339"),
        "{all}"
    );
    assert!(
        all.contains("cases/000.json:6:5: /reference/answers: no recorded answers"),
        "{all}"
    );
    let toml = project.path("fixtures/tickets/suite.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("reference = \"nobody\"\n{text}")).unwrap();
    let out = project.cmd().arg("check").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("suite.toml:1:1: reference: the reference `nobody` is not a provider"),
        "{stderr}"
    );
}

/// 40 order lookups with the support agent's tools, each expecting its call and carrying
/// the primary's two recorded answers: that call.
fn lookup_suite(root: &Path) -> PathBuf {
    let dir = root.join("fixtures/lookups");
    let shipped = Path::new(common::REPO).join("fixtures/support-agent");
    std::fs::create_dir_all(dir.join("cases")).unwrap();
    for file in ["tools.json", "schema.json"] {
        std::fs::copy(shipped.join(file), dir.join(file)).unwrap();
    }
    std::fs::write(
        dir.join("suite.toml"),
        "system = \"You are a support agent. Use the tools.\"\ntools = \"tools.json\"\nrepeats = 2\n",
    )
    .unwrap();
    for i in 0..40 {
        let order = format!("BR-{:05}", 30_000 + i);
        let call = json!({"name": "lookup_order", "arguments": {"order_id": order}});
        let case = json!({
            "messages": [{"role": "user", "content": format!("Where is my order {order}?")}],
            "expect": {"tool_calls": [{"name": "lookup_order", "arguments": {"/order_id": order}}]},
            "reference": {"model": "primary-model", "recorded_at": "2026-11-30T12:00:00Z",
                "answers": [{"text": "", "tool_calls": [call]}, {"text": "", "tool_calls": [call]}]}
        });
        std::fs::write(
            dir.join(format!("cases/{i:03}.json")),
            serde_json::to_string_pretty(&case).unwrap(),
        )
        .unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_are_compared_by_whether_which_and_with_what() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = lookup_suite(tmp.path());
    let (suite, book) = prepared(&dir);
    let configs = vec![
        sim("faithful", "steady", ""),
        sim("dropper", "drops-required", ""),
    ];
    let result = run_with(&suite, &book, configs, tmp.path().join("reports/tools")).await;
    let field = |provider: &str, name: &str| {
        verdict_of(&result, provider)
            .tally
            .differential
            .as_ref()
            .unwrap()
            .fields
            .iter()
            .find(|f| f.field == name)
            .unwrap()
            .clone()
    };
    let faithful = verdict_of(&result, "faithful");
    assert_eq!(
        faithful.verdict,
        Verdict::Conformant,
        "{:?}",
        faithful.reasons
    );
    for name in [
        "answer",
        "tool_call.made",
        "tool_call.name",
        "tool_call.arguments",
    ] {
        let f = field("faithful", name);
        assert_eq!(f.verdict, FieldVerdict::Pass, "{name}");
        assert_eq!(f.candidate.pairs, 40 * 2 * 2, "{name}");
        assert_eq!(f.candidate_agreement, Some(1.0), "{name}");
    }
    // The dropped argument: the call is made, to the right tool, with other arguments.
    let dropper = verdict_of(&result, "dropper");
    assert_eq!(dropper.verdict, Verdict::Nonconformant);
    assert!(
        dropper.reasons.iter().any(|r| *r == CODE),
        "{:?}",
        dropper.reasons
    );
    assert_eq!(
        field("dropper", "tool_call.made").verdict,
        FieldVerdict::Pass
    );
    assert_eq!(
        field("dropper", "tool_call.name").verdict,
        FieldVerdict::Pass
    );
    assert_eq!(
        field("dropper", "tool_call.arguments").verdict,
        FieldVerdict::Fail
    );
    assert_eq!(
        field("dropper", "tool_call.arguments").candidate_agreement,
        Some(0.0)
    );
}

/// Shards of a run against a live reference merge into the verdicts and the field table
/// the unsharded run reached: each record carries what the comparison needs.
#[test]
fn a_merged_sharded_run_compares_with_the_reference_as_the_whole_run_does() {
    let project = project(
        &[
            (
                "primary",
                "varies-text",
                "expect = \"conformant\"\nrate = 0.3\nseed = 3",
            ),
            (
                "flipper",
                "flips-enum",
                "expect = \"nonconformant\"\nrate = 0.15\nseed = 3",
            ),
        ],
        1,
    );
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "flipper",
            "--reference",
            "primary",
            "--suite",
            "tickets",
            "--no-progress",
        ];
        args.extend_from_slice(extra);
        let out = project.cmd().args(&args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, stdout) = run(&[]);
    assert_eq!(code, Some(1), "{stdout}");
    let whole = read_json(&project.last_run().join("report.json"));
    for shard in ["1/2", "2/2"] {
        let (code, stdout) = run(&["--shard", shard]);
        assert_eq!(code, Some(0), "{stdout}");
    }
    let out = project
        .cmd()
        .args(["merge", "reports/shards"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let id = stdout
        .lines()
        .find_map(|l| l.split(" into run ").nth(1))
        .expect("the merged run's id");
    let merged = read_json(&project.path("reports").join(id.trim()).join("report.json"));
    assert_ne!(whole["run"]["id"], merged["run"]["id"]);
    for provider in ["flipper", "primary"] {
        let (a, b) = (verdict_in(&whole, provider), verdict_in(&merged, provider));
        assert_eq!(a["verdict"], b["verdict"], "{provider}");
        assert_eq!(a["reasons"], b["reasons"], "{provider}");
        assert_eq!(
            a["differential"]["fields"], b["differential"]["fields"],
            "{provider}"
        );
    }
    assert_eq!(verdict_in(&merged, "flipper")["verdict"], "nonconformant");
}

/// A suite of `cases` tickets, each sent once, judged against recorded answers: two
/// agreeing ones for the first case (one agreeing pair: the whole floor), one for each of
/// the others.
fn thin_suite(root: &Path, cases: usize) -> PathBuf {
    let dir = ticket_suite(root, None, 1);
    let toml = dir.join("suite.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("repeats = 3", "repeats = 1")).unwrap();
    for entry in std::fs::read_dir(dir.join("cases")).unwrap() {
        let path = entry.unwrap().path();
        let i: usize = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        if i >= cases {
            std::fs::remove_file(&path).unwrap();
        } else if i == 0 {
            let mut case: Value = read_json(&path);
            let first = case["reference"]["answers"][0].clone();
            case["reference"]["answers"] = json!([first.clone(), first]);
            std::fs::write(&path, case.to_string()).unwrap();
        }
    }
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn a_comparison_that_could_not_have_failed_is_insufficient_evidence_never_a_pass() {
    let tmp = tempfile::tempdir().unwrap();
    // The numbers: one agreeing pair of reference answers, four cases, a
    // candidate that disagrees on every one (z 1.57 < 1.645 passed it).
    let dir = thin_suite(tmp.path(), 4);
    let (suite, book) = prepared(&dir);
    let result = run_with(
        &suite,
        &book,
        vec![sim("flipper", "flips-enum", "")],
        tmp.path().join("reports/thin"),
    )
    .await;
    let flipper = verdict_of(&result, "flipper");
    let d = flipper.tally.differential.as_ref().unwrap();
    let category = d.fields.iter().find(|f| f.field == "/category").unwrap();
    assert_eq!(category.candidate.agreeing, 0, "it disagreed everywhere");
    let z = category.test.unwrap().z;
    assert!((z - 1.57).abs() < 0.01, "the issue's test statistic: {z}");
    assert_eq!(category.verdict, FieldVerdict::Insufficient);
    assert_eq!(
        flipper.verdict,
        Verdict::Inconclusive,
        "{:?}",
        flipper.reasons
    );
    assert_eq!(flipper.reasons, [INSUFFICIENT]);

    // With enough cases the same candidate is caught.
    let tmp = tempfile::tempdir().unwrap();
    let mut many = thin_suite(tmp.path(), 40);
    for i in 1..40 {
        let path = many.join(format!("cases/{i:03}.json"));
        let mut case: Value = read_json(&path);
        let first = case["reference"]["answers"][0].clone();
        case["reference"]["answers"] = json!([first.clone(), first]);
        std::fs::write(&path, case.to_string()).unwrap();
    }
    let (suite, book) = prepared(&many);
    let result = run_with(
        &suite,
        &book,
        vec![sim("flipper", "flips-enum", "")],
        tmp.path().join("reports/many"),
    )
    .await;
    let flipper = verdict_of(&result, "flipper");
    assert_eq!(
        flipper.verdict,
        Verdict::Nonconformant,
        "{:?}",
        flipper.reasons
    );
    // The failed field counts among the pair's codes, as its reasons name it.
    assert_eq!(
        flipper
            .tally
            .codes
            .get(&conform_check::check::Code::ReferenceDisagreement)
            .copied(),
        Some(2),
        "{:?}",
        flipper.tally.codes
    );
    many.pop();
}

/// A primary that answers every ticket as the simulations do, except ticket `down`,
/// which it fails with a 500 every time.
struct FailsOneCase {
    down: usize,
}

impl wiremock::Respond for FailsOneCase {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let user = body["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string();
        let i: usize = user
            .trim_start_matches("Ticket: ticket number ")
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        if i == self.down {
            return wiremock::ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "boom", "type": "server_error"}}));
        }
        wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "id": "c", "object": "chat.completion", "created": 1, "model": "primary-model",
            "choices": [{"index": 0, "message": {"role": "assistant",
                "content": canonical_answer(i).to_string()}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
        }))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_case_the_primary_failed_is_left_out_and_the_rest_still_judge() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ticket_suite(tmp.path(), Some("primary"), 1);
    let (suite, book) = prepared(&dir);
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(FailsOneCase { down: 7 })
        .mount(&server)
        .await;
    let primary = ProviderConfig::parse(
        Path::new("providers/primary.toml"),
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"primary-model\"\nbase_url = \"{}\"\n\
             structured_output = \"prompt\"\n[limits]\nconcurrency = 16\nmax_retries = 1\n\
             retry_base_wait = \"1ms\"\n",
            server.uri()
        ),
    )
    .unwrap();
    let result = run_with(
        &suite,
        &book,
        vec![
            primary,
            sim("flipper", "flips-enum", "rate = 0.5\nseed = 3\n"),
            sim("faithful", "steady", ""),
        ],
        tmp.path().join("reports/one-down"),
    )
    .await;
    for name in ["flipper", "faithful"] {
        let v = verdict_of(&result, name);
        let d = v.tally.differential.as_ref().unwrap();
        assert_eq!(
            d.left_out, 1,
            "{name}: the case the primary failed is left out"
        );
        assert_eq!(d.cases, CASES as u64 - 1, "{name}");
        assert!(d.unavailable.is_none(), "{name}: {:?}", d.unavailable);
        assert!(
            !v.reasons.iter().any(|r| *r == NO_REFERENCE),
            "{name}: one unanswered case voided the comparison: {:?}",
            v.reasons
        );
    }
    assert_eq!(
        verdict_of(&result, "flipper").verdict,
        Verdict::Nonconformant
    );
    assert_eq!(verdict_of(&result, "faithful").verdict, Verdict::Conformant);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_is_not_strict_json_takes_part_in_no_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = ticket_suite(tmp.path(), Some("primary"), 1);
    let (suite, book) = prepared(&dir);
    let result = run_with(
        &suite,
        &book,
        vec![sim("primary", "steady", ""), sim("fenced", "fenced", "")],
        tmp.path().join("reports/fenced"),
    )
    .await;
    let fenced = verdict_of(&result, "fenced");
    assert_eq!(fenced.verdict, Verdict::Nonconformant);
    let d = fenced.tally.differential.as_ref().unwrap();
    for field in &d.fields {
        assert_eq!(
            field.candidate.pairs, 0,
            "{}: a fenced answer was paired with the reference",
            field.field
        );
    }
}

/// Issue 46: a reference failure said "agrees in 86.7 % of pairs" and `examples: []`,
/// and nowhere what differed. A fallback that adds a key and one that changes a field,
/// revoked against the reference, show the values side by side, field by field with
/// their own pair counts, in the terminal, `report.json` and report.html.
#[test]
fn a_drifting_fallback_shows_the_values_that_differed_in_every_report() {
    let project = project(
        &[
            ("primary", "steady", "expect = \"conformant\""),
            ("extra", "extra-key", "expect = \"nonconformant\""),
            (
                "flipper",
                "flips-enum",
                "expect = \"nonconformant\"\nrate = 0.5\nseed = 3",
            ),
        ],
        1,
    );
    let out = project
        .cmd()
        .args(["run", "extra", "flipper", "--reference", "primary"])
        .args(["--suite", "tickets", "--no-progress", "--every-call"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // The terminal: the added key with its value, the changed field with both values,
    // and each field's own pairs.
    assert!(stdout.contains("answer: added /confidence: "), "{stdout}");
    assert!(stdout.contains("answer 9/9 pairs"), "{stdout}");
    let changed = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("/category: `primary` \""))
        .unwrap_or_else(|| panic!("no /category values in {stdout}"));
    assert!(changed.contains(", `flipper` \""), "{changed}");
    assert!(stdout.contains("answer: changed /category: \""), "{stdout}");

    let run = project.last_run();
    let report = read_json(&run.join("report.json"));
    let worst =
        |provider: &str| verdict_in(&report, provider)["differential"]["worst_cases"][0].clone();
    let extra = worst("extra");
    let answer = &extra["per_field"][0];
    assert_eq!(answer["field"], "answer", "{extra}");
    assert_eq!(
        (answer["disagreeing"].as_u64(), answer["pairs"].as_u64()),
        (Some(9), Some(9))
    );
    assert!(
        answer["difference"][0]
            .as_str()
            .unwrap()
            .starts_with("added /confidence: "),
        "{extra}"
    );
    let flipper = worst("flipper");
    let category = (flipper["per_field"].as_array().unwrap().iter())
        .find(|f| f["field"] == "/category")
        .unwrap_or_else(|| panic!("{flipper}"));
    let (reference, candidate) = (&category["reference"], &category["candidate"]);
    assert_eq!(reference.as_array().unwrap().len(), 1, "{category}");
    assert!(
        (candidate.as_array().unwrap().iter()).any(|c| c != &reference[0]),
        "{category}"
    );

    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("<code>added &#x2f;confidence: "), "{html}");
    let shown = reference[0].as_str().unwrap().replace('"', "&quot;");
    assert!(
        html.contains(&format!("<td><code>{shown}</code></td>")),
        "{html}"
    );
}
