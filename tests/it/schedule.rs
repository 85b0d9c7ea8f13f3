//! The schedule (`run::schedule`): its planned counts are the calls it yields, in the
//! runner's order; shards 1..=N of any split are the whole schedule with no call twice;
//! and through the real binary, a run's recorded planned counts, `conform plan`'s
//! estimate and what `conform merge` accepts as complete agree on one fixture (a
//! streaming provider whose suite asks for stream agreement sends two requests a call).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{Project, config, output_text, read_json};
use conform::run::schedule::{Call, Schedule};
use conform::run::shard::Shard;
use conform_config::{ProviderConfig, Suite};
use proptest::prelude::*;
use serde_json::Value;

/// One generated suite: its case ids, repeats and whether it asks for stream agreement.
#[derive(Debug, Clone)]
struct SuiteSpec {
    cases: BTreeSet<String>,
    repeats: u32,
    stream_agreement: bool,
}

/// One generated provider: whether it streams, and the suites a simulation is limited to.
#[derive(Debug, Clone)]
struct ProviderSpec {
    stream: bool,
    only: Option<BTreeSet<usize>>,
}

fn suite_spec() -> impl Strategy<Value = SuiteSpec> {
    (
        proptest::collection::btree_set("[a-z0-9][a-z0-9-]{0,10}", 1..24),
        1u32..4,
        any::<bool>(),
    )
        .prop_map(|(cases, repeats, stream_agreement)| SuiteSpec {
            cases,
            repeats,
            stream_agreement,
        })
}

fn provider_spec() -> impl Strategy<Value = ProviderSpec> {
    (
        any::<bool>(),
        proptest::option::of(proptest::collection::btree_set(0usize..3, 0..3)),
    )
        .prop_map(|(stream, only)| ProviderSpec { stream, only })
}

/// The suites on disk (a schedule reads only their names and case ids) and the providers.
fn build(
    dir: &Path,
    suites: &[SuiteSpec],
    providers: &[ProviderSpec],
) -> (Vec<Suite>, Vec<ProviderConfig>) {
    let loaded = suites
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let root = dir.join(format!("s{i}"));
            std::fs::create_dir_all(root.join("cases")).unwrap();
            std::fs::write(
                root.join("suite.toml"),
                format!(
                    "user = \"{{{{ x }}}}\"\nrepeats = {}\nstream_agreement = {}\n",
                    spec.repeats, spec.stream_agreement
                ),
            )
            .unwrap();
            std::fs::write(root.join("schema.json"), r#"{"type": "object"}"#).unwrap();
            for case in &spec.cases {
                std::fs::write(
                    root.join("cases").join(format!("{case}.json")),
                    r#"{"vars": {"x": "a"}}"#,
                )
                .unwrap();
            }
            Suite::load(&root).unwrap_or_else(|d| panic!("{d}"))
        })
        .collect();
    let configs = providers
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut toml = format!(
                "kind = \"sim\"\nmodel = \"p{i}\"\nstream = {}\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\n",
                spec.stream
            );
            if let Some(only) = &spec.only {
                let names: Vec<String> = only.iter().map(|s| format!("\"s{s}\"")).collect();
                toml.push_str(&format!("suites = [{}]\n", names.join(", ")));
            }
            config(&format!("p{i}"), &toml).as_ref().clone()
        })
        .collect();
    (loaded, configs)
}

fn schedule<'a>(
    suites: &'a [Suite],
    providers: &[ProviderConfig],
    repeats: Option<u32>,
    shard: Option<Shard>,
) -> Schedule<'a> {
    Schedule::new(suites, providers, repeats, shard)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn planned_counts_are_the_calls_yielded_and_shards_split_the_whole(
        suites in proptest::collection::vec(suite_spec(), 1..4),
        providers in proptest::collection::vec(provider_spec(), 1..4),
        repeats in proptest::option::of(1u32..4),
        n in 1u32..7,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (suites, providers) = build(dir.path(), &suites, &providers);
        let whole = schedule(&suites, &providers, repeats, None);
        let calls: Vec<Call> = whole.calls().collect();

        // The runner's order, each call once.
        let key = |c: &Call| (c.provider, c.suite, c.case, c.repeat);
        let ordered = calls.windows(2).all(|w| key(&w[0]) < key(&w[1]));
        prop_assert!(ordered, "not in the runner's order, or a call twice");
        prop_assert_eq!(whole.total_calls(), calls.len() as u64);
        prop_assert_eq!(
            whole.total_requests(),
            calls.iter().map(|c| c.requests()).sum::<u64>()
        );
        let mut by_pair: BTreeMap<(usize, usize), (u64, u64)> = BTreeMap::new();
        for c in &calls {
            let e = by_pair.entry((c.provider, c.suite)).or_default();
            e.0 += 1;
            e.1 += c.requests();
            prop_assert_eq!(c.twin, whole.twin(c.provider, c.suite));
            prop_assert!(c.repeat < whole.repeats(c.suite));
        }
        for (p, provider) in providers.iter().enumerate() {
            prop_assert_eq!(
                whole.calls_of(p).count() as u64,
                (0..suites.len()).map(|s| whole.planned_calls(p, s)).sum::<u64>()
            );
            for (s, suite) in suites.iter().enumerate() {
                let (c, r) = by_pair.get(&(p, s)).copied().unwrap_or_default();
                prop_assert_eq!(whole.planned_calls(p, s), c);
                prop_assert_eq!(whole.planned_requests(p, s), r);
                // Counted from the suites and providers without the schedule: one that
                // yields and counts the same wrong calls still fails here.
                let runs = provider.runs_suite(&suite.name);
                let expected = if runs {
                    suite.cases.len() as u64 * u64::from(repeats.unwrap_or(suite.repeats))
                } else {
                    0
                };
                prop_assert_eq!(c, expected);
                prop_assert_eq!(
                    whole.twin(p, s),
                    runs && suite.stream_agreement && provider.stream
                );
            }
        }

        // Shards 1..=n: together the whole, no call in two of them, a case's calls in one.
        let by_shard = whole.calls_by_shard(n);
        prop_assert_eq!(by_shard.len(), n as usize);
        let mut union: Vec<Call> = Vec::new();
        let mut shard_of_case: BTreeMap<(usize, usize), u32> = BTreeMap::new();
        for k in 1..=n {
            let part = schedule(&suites, &providers, repeats, Some(Shard { k, n }));
            let mine: Vec<Call> = part.calls().collect();
            prop_assert_eq!(part.total_calls(), mine.len() as u64);
            prop_assert_eq!(by_shard[(k - 1) as usize], mine.len() as u64);
            prop_assert_eq!(
                part.total_requests(),
                mine.iter().map(|c| c.requests()).sum::<u64>()
            );
            for c in &mine {
                let owner = *shard_of_case.entry((c.suite, c.case)).or_insert(k);
                prop_assert_eq!(owner, k, "a case split across shards");
            }
            union.extend(mine);
        }
        prop_assert_eq!(union.len(), calls.len(), "a call in two shards, or in none");
        union.sort();
        let mut sorted = calls.clone();
        sorted.sort();
        prop_assert_eq!(union, sorted);
    }
}

const SUITES: [&str; 4] = ["--suite", "invoice-extraction", "--suite", "ticket-triage"];

/// `conform plan`'s requests per (suite, provider), for `--shard` when given.
fn planned_requests(project: &Project, shard: Option<&str>) -> BTreeMap<(String, String), u64> {
    let mut cmd = project.cmd();
    cmd.args([
        "plan",
        "sim-steady",
        "sim-streamer",
        "--repeats",
        "2",
        "--format",
        "json",
    ])
    .args(SUITES);
    if let Some(shard) = shard {
        cmd.args(["--shard", shard]);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    (plan["pairs"].as_array().unwrap().iter())
        .map(|p| {
            let key = (
                p["suite"].as_str().unwrap().to_string(),
                p["provider"].as_str().unwrap().to_string(),
            );
            (key, p["calls"].as_u64().unwrap())
        })
        .collect()
}

/// A report's planned calls per (suite, provider).
fn planned_calls(report: &Value) -> BTreeMap<(String, String), u64> {
    (report["verdicts"].as_array().unwrap().iter())
        .map(|v| {
            let key = (
                v["suite"].as_str().unwrap().to_string(),
                v["provider"].as_str().unwrap().to_string(),
            );
            (key, v["planned"].as_u64().unwrap())
        })
        .collect()
}

/// The requests a run's records say were sent: each call's, and its unstreamed twin's.
fn requests_sent(results: &Path) -> BTreeMap<(String, String), u64> {
    let mut sent = BTreeMap::new();
    for line in std::fs::read_to_string(results).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let key = (
            r["suite"].as_str().unwrap().to_string(),
            r["provider"].as_str().unwrap().to_string(),
        );
        *sent.entry(key).or_default() += 1 + u64::from(!r["unstreamed"].is_null());
    }
    sent
}

/// Twice as many requests as calls where the streamer's suite asks for agreement, none
/// for the suite a simulation leaves out: the run, the plan and the merge all agree.
#[test]
fn a_runs_planned_counts_the_plan_and_the_merge_agree() {
    let project = Project::new(&["sim-steady"]);
    let steady = std::fs::read_to_string(project.path("providers/sim-steady.toml")).unwrap();
    // sim-steady, streamed, and run on ticket-triage only.
    project.write(
        "providers/sim-streamer.toml",
        &format!("stream = true\n{steady}")
            .replace("model = \"sim-steady\"", "model = \"sim-streamer\"")
            .replace("[sim]\n", "[sim]\nsuites = [\"ticket-triage\"]\n"),
    );
    let suite = project.path("fixtures/ticket-triage/suite.toml");
    let original = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(&suite, format!("stream_agreement = true\n{original}")).unwrap();
    // The shards report elsewhere: reports/ then holds runs only, the newest last.
    let shard_reports = project.path("shard-reports");
    let run = |extra: &[&str]| {
        let mut cmd = project.cmd();
        if extra.contains(&"--shard") {
            cmd.arg("--reports").arg(&shard_reports);
        }
        cmd.args([
            "run",
            "sim-steady",
            "sim-streamer",
            "--no-progress",
            "--repeats",
            "2",
        ])
        .args(SUITES)
        .args(extra)
        .output()
        .unwrap()
    };

    let plan = planned_requests(&project, None);
    let pair = |s: &str, p: &str| (s.to_string(), p.to_string());
    assert_eq!(
        plan,
        BTreeMap::from([
            (pair("invoice-extraction", "sim-steady"), 30 * 2),
            (pair("ticket-triage", "sim-steady"), 30 * 2),
            (pair("ticket-triage", "sim-streamer"), 30 * 2 * 2),
        ]),
        "the streamer skips invoice-extraction and sends a twin for every ticket call"
    );

    let whole = run(&[]);
    assert!(
        matches!(whole.status.code(), Some(0 | 1)),
        "{}",
        output_text(&whole)
    );
    let dir = project.last_run();
    let report = read_json(&dir.join("report.json"));
    let planned = planned_calls(&report);
    assert_eq!(
        planned,
        BTreeMap::from([
            (pair("invoice-extraction", "sim-steady"), 30 * 2),
            (pair("ticket-triage", "sim-steady"), 30 * 2),
            (pair("ticket-triage", "sim-streamer"), 30 * 2),
        ])
    );
    assert_eq!(requests_sent(&dir.join("results.jsonl")), plan);

    // Three shards: each one's plan is what it records, and together they are the whole.
    let n = 3;
    let mut shard_plans: BTreeMap<(String, String), u64> = BTreeMap::new();
    for k in 1..=n {
        let shard = format!("{k}/{n}");
        let out = run(&["--shard", &shard]);
        assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
        let folder = shard_reports.join(format!("shards/shard-{k}-of-{n}"));
        let manifest = read_json(&folder.join("shard.json"));
        let share = planned_requests(&project, Some(&shard));
        assert_eq!(requests_sent(&folder.join("results.jsonl")), {
            let mut s = share.clone();
            s.retain(|_, v| *v > 0);
            s
        });
        let calls: u64 = (share.iter())
            .map(|((suite, provider), r)| {
                if suite == "ticket-triage" && provider == "sim-streamer" {
                    r / 2
                } else {
                    *r
                }
            })
            .sum();
        assert_eq!(manifest["calls"], calls, "shard {shard}");
        for (key, r) in share {
            *shard_plans.entry(key).or_default() += r;
        }
    }
    assert_eq!(shard_plans, plan, "the shards' plans add up to the whole's");

    let shards = shard_reports.join("shards");
    let merged = project.cmd().arg("merge").arg(&shards).output().unwrap();
    assert_eq!(
        merged.status.code(),
        whole.status.code(),
        "{}",
        output_text(&merged)
    );
    let merged_dir = project.last_run();
    assert_ne!(merged_dir, dir);
    assert_eq!(
        planned_calls(&read_json(&merged_dir.join("report.json"))),
        planned
    );
    assert_eq!(requests_sent(&merged_dir.join("results.jsonl")), plan);

    // A shard that says it holds other than the calls the schedule gives it is refused,
    // before a record is read.
    let first = shards.join(format!("shard-1-of-{n}"));
    let mut manifest = read_json(&first.join("shard.json"));
    let calls = manifest["calls"].as_u64().unwrap();
    manifest["calls"] = Value::from(calls + 1);
    std::fs::write(first.join("shard.json"), manifest.to_string()).unwrap();
    let refused = project.cmd().arg("merge").arg(&shards).output().unwrap();
    assert_eq!(refused.status.code(), Some(3), "{}", output_text(&refused));
    assert!(
        output_text(&refused).contains(&format!(
            "recorded {} calls, but the plan gives it {calls}",
            calls + 1
        )),
        "{}",
        output_text(&refused)
    );
}
