//! Latency as evidence, end to end through the real binary: a simulated provider whose
//! p95 is 20 s fails a 5 s objective (`slo_latency`), a quick one passes it; a suite's
//! objective holds every provider; the percentiles reach report.json, the terminal, the
//! allowlist evidence (valid against the published schema) and `allowlist show`; and
//! `conform gate --max-p95` decides on them (`latency_bound`). The slow simulation runs
//! its clock 20 times faster (`time_scale = 0.05`): the verdict sees the latency it
//! stands for, measured by the real transport.

use crate::common;

use common::{Project, config};
use conform_wire::sim::SimServer;
use serde_json::Value;

fn read_json(p: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// A simulation with a log-normal latency, a 5 s objective and `extra` in its `[sim]`.
fn sim(project: &Project, name: &str, p50: &str, p95: &str, expect: &str, extra: &str) {
    project.write(
        &format!("providers/{name}.toml"),
        &format!(
            "kind = \"sim\"\nmodel = \"{name}\"\ntimeout = \"10s\"\nmax_p95_latency = \"5s\"\n[limits]\nconcurrency = 30\n[sim]\nbehaviour = \"steady\"\nexpect = \"{expect}\"\nlatency_p50 = \"{p50}\"\nlatency_p95 = \"{p95}\"\n{extra}"
        ),
    );
}

fn verdict<'a>(report: &'a Value, provider: &str) -> &'a Value {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["provider"] == provider)
        .unwrap()
}

#[test]
fn a_20s_p95_fails_a_5s_objective_and_a_quick_provider_passes_it() {
    let project = Project::new(&[]);
    // The slow one's clock runs 20 times faster; the quick one's is real, so the
    // harness's own milliseconds per call are not scaled up against its bound.
    sim(
        &project,
        "slow",
        "5s",
        "20s",
        "nonconformant",
        "time_scale = 0.05\n",
    );
    sim(&project, "quick", "200ms", "1s", "conformant", "");
    // The demo exits 0 only when each simulation earned the verdict it expects.
    let out = project
        .cmd()
        .args(["demo", "--suite", "ticket-triage", "--no-progress"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");

    let run = project.last_run();
    let report = read_json(&run.join("report.json"));
    let slow = verdict(&report, "slow");
    assert_eq!(slow["verdict"], "nonconformant");
    assert_eq!(slow["reasons"], serde_json::json!(["slo_latency"]));
    // Every answer was right: only the time failed.
    assert_eq!(slow["passed"], slow["planned"]);
    let p95 = slow["latency"]["total"]["p95_ms"].as_f64().unwrap();
    assert!((15_000.0..30_000.0).contains(&p95), "{p95}");
    assert_eq!(slow["latency"]["total"]["count"], 30);
    assert_eq!(slow["latency"]["total"]["relative_error"], 0.01);
    assert_eq!(slow["slo"]["max_p95_latency"], "5s");
    let quick = verdict(&report, "quick");
    assert_eq!(quick["verdict"], "conformant");
    assert!(quick["latency"]["total"]["p95_ms"].as_f64().unwrap() < 5_000.0);

    // p50 and p95 are columns of the verdict table, in the row of the pair they time.
    let header = stdout.lines().find(|l| l.starts_with("suite")).unwrap();
    assert!(header.contains("p50") && header.contains("p95"), "{header}");
    let row = stdout.lines().find(|l| l.contains(" slow ")).unwrap();
    let p95_words = conform_check::latency::words(p95);
    assert!(row.contains(&p95_words), "{p95_words} not in {row}");
    assert!(
        stdout.contains("slo_latency: the p95 latency is")
            && stdout.contains("not under max_p95_latency = 5.00 s"),
        "{stdout}"
    );
    // Every call records its times.
    let line = std::fs::read_to_string(run.join("results.jsonl")).unwrap();
    let first: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert!(first["latency_ms"].as_f64().is_some() && first["ttfb_ms"].as_f64().is_some());
    assert!(first["ttft_ms"].as_f64().is_some());
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("latency p50 / p95 / p99"), "report.html");

    // The demo's allowlist: the slow one revoked for its latency.
    let allowlist = read_json(&run.join("allowlist.json"));
    let revoked = &allowlist["revocations"][0];
    assert_eq!(revoked["provider"], "slow");
    assert_eq!(revoked["reasons"], serde_json::json!(["slo_latency"]));

    // A suite's objective holds every provider, whatever its file says: the first token
    // of an answer that is not streamed is the whole answer.
    std::fs::remove_file(project.path("providers/slow.toml")).unwrap();
    let suite = project.path("fixtures/ticket-triage/suite.toml");
    let text = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(&suite, format!("max_p95_ttft = \"50ms\"\n{text}")).unwrap();
    let out = project
        .cmd()
        .args(["demo", "--suite", "ticket-triage", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "quick now misses the suite's bound"
    );
    let report = read_json(&project.last_run().join("report.json"));
    assert_eq!(
        verdict(&report, "quick")["reasons"],
        serde_json::json!(["slo_ttft"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gate_holds_the_evidence_to_a_latency_bound_asked_at_decision_time() {
    let project = Project::new(&[]);
    // A real provider (openai-compatible) that happens to be a simulation on loopback,
    // answering in 300 ms: its evidence enters the allowlist.
    let sim = config(
        "sim",
        "kind = \"sim\"\nmodel = \"m\"\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nlatency = \"300ms\"\n",
    );
    let book = common::answer_book(project.root());
    let server = SimServer::start(&sim, book).await.expect("a simulation");
    project.write(
        "providers/fast.toml",
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"{}\"\ntimeout = \"10s\"\n[limits]\nconcurrency = 8\n",
            server.uri()
        ),
    );
    let out = project
        .cmd()
        .args(["run", "fast", "--suite", "ticket-triage", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let allowlist = project.allowlist();
    let latency = &allowlist["entries"][0]["evidence"]["latency"];
    assert_eq!(latency["calls"], 30);
    let p95 = latency["total_ms"]["p95"].as_f64().unwrap();
    assert!((290.0..2_000.0).contains(&p95), "{p95}");
    assert!(latency["first_token_ms"]["p50"].as_f64().unwrap() > 0.0);
    // What the writer writes, the published schema accepts.
    let schema: Value = serde_json::from_str(conform_gate::allowlist::SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&allowlist)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    let gate = |extra: &[&str]| {
        let mut cmd = project.cmd();
        cmd.args(["gate", "--suite", "ticket-triage", "--provider", "fast"])
            .args(extra);
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = gate(&["--max-p95", "5s"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("p95 latency"), "{text}");
    let (code, text) = gate(&["--max-p95", "100ms"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.starts_with("denied (latency_bound)"), "{text}");
    let (code, text) = gate(&["--max-p95-ttft", "100ms", "--format", "json"]);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["reason"],
        "latency_bound"
    );
    // Without a bound the gate is as before.
    assert_eq!(gate(&[]).0, Some(0));

    // `allowlist show` prints the percentiles.
    let out = project.cmd().args(["allowlist", "show"]).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("latency p50/p95/p99: "), "{shown}");

    // Evidence written before percentiles were kept cannot show it is fast enough.
    let mut older = allowlist.clone();
    older["entries"][0]["evidence"]
        .as_object_mut()
        .unwrap()
        .remove("latency");
    std::fs::write(project.path("allowlist.json"), older.to_string()).unwrap();
    let (code, text) = gate(&["--max-p95", "5s"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("records no latency percentiles"), "{text}");
    assert_eq!(gate(&[]).0, Some(0));
}
