//! The real round trip: `conform run` against SmolLM2-135M on llama.cpp's `llama-server`
//! on loopback (`scripts/real-model.sh start`), with the model's own tokenizer.
//!
//! Set `CONFORM_LLAMA_URL` (e.g. `http://127.0.0.1:8084`, a server started with
//! `-t 1 -np 1`) to run these. Without it they are reported as *ignored* by the test
//! runner itself (this file has its own `main`, through `libtest-mimic`, so that a test
//! that could not run never counts as passed), unless `CONFORM_REQUIRE_REAL_MODEL` is
//! set, in which case they fail. Optionally, `CONFORM_LLAMA_URL_DEFAULT_SLOTS` points at
//! a second server started with its default slots, for the stability measurement under
//! concurrency. The tool round trip needs the server started with `--jinja` and a
//! tool-aware ChatML template (`.ci/run` does it): SmolLM2's own template has no tool
//! syntax, and llama.cpp then drops the tools without a word.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use assert_cmd::Command;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

/// One test at a time against the one-slot server: the measurements stay clean.
static SERVER: Mutex<()> = Mutex::new(());

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Written straight to stderr, between the runner's own lines.
fn loud(text: &str) {
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

/// A project in a temporary directory: the smoke suite, and one provider file made
/// from the shipped `llamacpp-smollm2.toml` with its `[tokenizer]` and limits replaced.
fn project(name: &str, tokenizer: &str, concurrency: u32) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let suite = root().join("fixtures/smollm2-smoke");
    let into = tmp.path().join("fixtures/smollm2-smoke");
    std::fs::create_dir_all(into.join("cases")).unwrap();
    for file in ["suite.toml", "schema.json"] {
        std::fs::copy(suite.join(file), into.join(file)).unwrap();
    }
    for entry in std::fs::read_dir(suite.join("cases")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, into.join("cases").join(path.file_name().unwrap())).unwrap();
    }
    let shipped = std::fs::read_to_string(root().join("providers/llamacpp-smollm2.toml")).unwrap();
    let head = shipped.split("[limits]").next().unwrap();
    std::fs::create_dir_all(tmp.path().join("providers")).unwrap();
    std::fs::write(
        tmp.path().join(format!("providers/{name}.toml")),
        format!("{head}[limits]\nconcurrency = {concurrency}\nmax_retries = 1\n\n[tokenizer]\n{tokenizer}\ncontext_window = 4096\n"),
    )
    .unwrap();
    tmp
}

/// Runs `conform run PROVIDER --suite smollm2-smoke` at `url`; returns the exit code,
/// the call records and the report.
fn run(root: &Path, provider: &str, url: &str, repeats: u32) -> (i32, Vec<Value>, Value) {
    run_suite(root, provider, "smollm2-smoke", url, repeats)
}

/// Runs `conform run PROVIDER --suite SUITE` at `url`.
fn run_suite(
    root: &Path,
    provider: &str,
    suite: &str,
    url: &str,
    repeats: u32,
) -> (i32, Vec<Value>, Value) {
    let reports = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("conform")
        .unwrap()
        .arg("--root")
        .arg(root)
        .arg("--reports")
        .arg(reports.path())
        .arg("--allowlist")
        .arg(reports.path().join("allowlist.json"))
        .args(["run", provider, "--suite", suite, "--no-progress"])
        // These tests measure every answer, so a verdict settled early must not save calls.
        .arg("--every-call")
        .args(["--base-url", url, "--repeats", &repeats.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    loud(&format!("conform run {provider}:\n{stdout}"));
    let code = out.status.code().unwrap_or(-1);
    // These tests measure counts and repeats, not permits: a faithful run on fewer calls
    // than a permit needs is inconclusive for that reason alone (exit 3), and measured.
    let too_few = code == 3 && stdout.contains("insufficient_evidence: ");
    assert!(
        code == 0 || code == 1 || too_few,
        "conform run {provider} exited {code}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = std::fs::read_dir(reports.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let records = std::fs::read_to_string(run_dir.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let report =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("report.json")).unwrap())
            .unwrap();
    (code, records, report)
}

fn tokens_outcome(record: &Value) -> &Value {
    record["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "tokens")
        .unwrap_or_else(|| panic!("no tokens check in {record}"))
}

fn local_counts_equal_the_servers_prompt_tokens_for_every_case(url: &str) {
    let _one = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let (_, records, report) = run(&root(), "llamacpp-smollm2", url, 1);
    let cases = std::fs::read_dir(root().join("fixtures/smollm2-smoke/cases"))
        .unwrap()
        .count();
    assert_eq!(records.len(), cases);
    for r in &records {
        let reported = r["usage"]["prompt_tokens"].as_u64();
        let counted = r["prompt_tokens_counted"].as_u64();
        loud(&format!(
            "  {}: server usage.prompt_tokens = {reported:?}, counted locally = {counted:?}",
            r["case"]
        ));
        assert!(reported.is_some(), "the server reported no usage: {r}");
        assert_eq!(reported, counted, "{}", r["case"]);
        assert_eq!(tokens_outcome(r)["status"], "pass", "{r}");
    }
    // The report shows it: every call's tokens check passed.
    let verdict = &report["verdicts"][0];
    assert_eq!(
        verdict["checks"]["tokens"]["passed"], cases as u64,
        "{verdict}"
    );
    assert_eq!(verdict["checks"]["tokens"]["failed"], 0);
}

fn a_wrong_tokenizer_fails_with_the_size_of_the_disagreement(url: &str) {
    let _one = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let project = project(
        "smollm2-as-o200k",
        "kind = \"tiktoken\"\nencoding = \"o200k_base\"",
        1,
    );
    let (code, records, report) = run(project.path(), "smollm2-as-o200k", url, 1);
    assert_eq!(
        code, 1,
        "a wrong tokenizer makes the provider nonconformant"
    );
    assert!(
        report["verdicts"][0]["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "token_count_mismatch"),
        "{}",
        report["verdicts"][0]
    );
    for r in &records {
        let reported = r["usage"]["prompt_tokens"].as_u64().unwrap();
        let counted = r["prompt_tokens_counted"].as_u64().unwrap();
        let outcome = tokens_outcome(r);
        assert_eq!(outcome["status"], "fail", "{r}");
        let finding = outcome["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "token_count_mismatch")
            .unwrap();
        let message = finding["message"].as_str().unwrap();
        let by = reported.abs_diff(counted);
        assert!(by > 0);
        let direction = if reported > counted { "more" } else { "fewer" };
        let plural = if by == 1 { "" } else { "s" };
        assert!(
            message.contains(&format!("{by} token{plural} {direction}")),
            "{message}"
        );
        loud(&format!("  {}: {message}", r["case"]));
    }
}

fn the_servers_own_count_endpoints_agree_with_its_usage(url: &str) {
    let _one = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let project = project("smollm2-provider-count", "kind = \"provider\"", 1);
    let (_, records, _) = run(project.path(), "smollm2-provider-count", url, 1);
    for r in &records {
        assert_eq!(
            r["usage"]["prompt_tokens"], r["prompt_tokens_counted"],
            "{r}"
        );
        assert_eq!(tokens_outcome(r)["status"], "pass", "{r}");
    }
}

fn stability(report: &Value) -> &Value {
    &report["verdicts"][0]["stability"]
}

fn sequential_repeats_on_one_slot_agree_and_concurrency_is_measured(url: &str) {
    let _one = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let repeats = 4;
    let (_, records, report) = run(&root(), "llamacpp-smollm2", url, repeats);
    let s = stability(&report);
    loud(&format!("  -np 1, sequential, {repeats} repeats: {s}"));
    assert_eq!(records.len() as u32, 5 * repeats);
    assert_eq!(s["cases"], 5);
    assert_eq!(
        s["cases_unanimous"], 5,
        "one slot, one request at a time, temperature 0: repeats must agree: {s}"
    );

    // The hazard the check exists for: default slots (a unified KV cache) and
    // concurrent requests. Measured, reported; not asserted, since it is a race.
    if let Ok(url) = std::env::var("CONFORM_LLAMA_URL_DEFAULT_SLOTS") {
        let project = project(
            "smollm2-concurrent",
            "kind = \"huggingface\"\npath = \"TOKENIZER\"",
            4,
        );
        let file = project.path().join("providers/smollm2-concurrent.toml");
        let text = std::fs::read_to_string(&file).unwrap().replace(
            "TOKENIZER",
            &root().join("tokenizers/smollm2").display().to_string(),
        );
        std::fs::write(&file, text).unwrap();
        let repeats = 8;
        let (_, _, report) = run(project.path(), "smollm2-concurrent", &url, repeats);
        loud(&format!(
            "  default slots, concurrency 4, {repeats} repeats: {}",
            stability(&report)
        ));
    }
}

/// The support-agent cases the tool round trip sends: a lookup the model may make,
/// a text answer from a tool result, two calls in parallel, a JSON handoff note with
/// tools switched off, a call forced by `required`, and one forced by name.
const TOOL_CASES: &[&str] = &[
    "001-where-is-my-order",
    "010-answer-from-the-lookup-result",
    "015-two-orders-in-parallel",
    "020-handoff-note-refund-over-limit",
    "024-required-first-contact-lookup",
    "028-named-lookup",
];

/// The shipped tool suite (those cases), sent to SmolLM2 with its six tools, counted by
/// the server's own `/apply-template` + `/tokenize` (llama.cpp renders the tools into
/// the prompt with its chat template, so only the server knows the count).
fn the_tool_suite_round_trips_with_calls_decoded_and_counts_equal(url: &str) {
    let _one = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let shipped = root().join("fixtures/support-agent");
    let into = tmp.path().join("fixtures/support-agent");
    std::fs::create_dir_all(into.join("cases")).unwrap();
    for file in ["suite.toml", "tools.json", "schema.json"] {
        std::fs::copy(shipped.join(file), into.join(file)).unwrap();
    }
    for case in TOOL_CASES {
        let file = format!("{case}.json");
        std::fs::copy(
            shipped.join("cases").join(&file),
            into.join("cases").join(&file),
        )
        .unwrap();
    }
    let shipped = std::fs::read_to_string(root().join("providers/llamacpp-smollm2.toml")).unwrap();
    let head = shipped.split("[limits]").next().unwrap();
    std::fs::create_dir_all(tmp.path().join("providers")).unwrap();
    std::fs::write(
        tmp.path().join("providers/smollm2-tools.toml"),
        format!("{head}[limits]\nconcurrency = 1\nmax_retries = 1\n\n[tokenizer]\nkind = \"provider\"\ncontext_window = 4096\n"),
    )
    .unwrap();
    let (_, records, report) = run_suite(tmp.path(), "smollm2-tools", "support-agent", url, 1);
    assert_eq!(records.len(), TOOL_CASES.len());
    let declared: Vec<String> = serde_json::from_str::<Vec<Value>>(
        &std::fs::read_to_string(into.join("tools.json")).unwrap(),
    )
    .unwrap()
    .iter()
    .map(|t| t["function"]["name"].as_str().unwrap().to_string())
    .collect();
    for r in &records {
        let reported = r["usage"]["prompt_tokens"].as_u64();
        let counted = r["prompt_tokens_counted"].as_u64();
        let calls: Vec<&str> = r["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        loud(&format!(
            "  {}: usage.prompt_tokens = {reported:?}, counted by the server = {counted:?}, calls {calls:?}",
            r["case"]
        ));
        // The tools are in the prompt, and counted the way the server saw them.
        assert!(
            reported.is_some_and(|n| n > 1000),
            "the tools were not sent: {r}"
        );
        assert_eq!(reported, counted, "{}", r["case"]);
        assert_eq!(tokens_outcome(r)["status"], "pass", "{r}");
        // The tool contract was checked on every answer.
        let tool_check = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "tool_calls")
            .unwrap_or_else(|| panic!("no tool_calls check in {r}"));
        assert!(tool_check["tool_calls"].is_object(), "{tool_check}");
        for name in &calls {
            assert!(
                declared.iter().any(|d| d == name),
                "{name} is not a declared tool"
            );
        }
    }
    // `required` makes llama.cpp constrain the output to a call of a declared tool: a
    // structured call comes back, decoded.
    let forced = records
        .iter()
        .find(|r| r["case"] == "024-required-first-contact-lookup")
        .unwrap();
    assert!(
        forced["tool_calls"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "no tool call came back where tool_choice was required: is the server started with \
         --jinja and a tool-aware ChatML template (scripts/real-model.sh start --jinja \
         --chat-template-file tests/templates/qwen2.5-7b-instruct.jinja)? {forced}"
    );
    let measures = &report["verdicts"][0]["tool_calls"];
    loud(&format!("  tool measures: {measures}"));
    assert_eq!(measures["answers"], TOOL_CASES.len());
}

/// A test that needs the server at the URL it is given.
type RealTest = fn(&str);

/// The tests that need the server, by name.
const REAL: &[(&str, RealTest)] = &[
    (
        "local_counts_equal_the_servers_prompt_tokens_for_every_case",
        local_counts_equal_the_servers_prompt_tokens_for_every_case,
    ),
    (
        "a_wrong_tokenizer_fails_with_the_size_of_the_disagreement",
        a_wrong_tokenizer_fails_with_the_size_of_the_disagreement,
    ),
    (
        "the_servers_own_count_endpoints_agree_with_its_usage",
        the_servers_own_count_endpoints_agree_with_its_usage,
    ),
    (
        "sequential_repeats_on_one_slot_agree_and_concurrency_is_measured",
        sequential_repeats_on_one_slot_agree_and_concurrency_is_measured,
    ),
    (
        "the_tool_suite_round_trips_with_calls_decoded_and_counts_equal",
        the_tool_suite_round_trips_with_calls_decoded_and_counts_equal,
    ),
];

const NOT_SET: &str = "CONFORM_LLAMA_URL is not set: run `scripts/real-model.sh start` and \
                       export CONFORM_LLAMA_URL=http://127.0.0.1:8084";

/// Set in the runs the self-check starts, so that they do not start it again.
const SELF_CHECK: &str = "CONFORM_REAL_MODEL_SELF_CHECK";

/// A test that could not run is reported as ignored, which the runner counts and shows,
/// never as a pass; when the real model is required, it fails instead.
fn main() {
    let args = Arguments::from_args();
    let url = std::env::var("CONFORM_LLAMA_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .map(|u| u.trim_end_matches('/').to_string());
    let required = std::env::var_os("CONFORM_REQUIRE_REAL_MODEL").is_some();
    let mut trials: Vec<Trial> = REAL
        .iter()
        .map(|&(name, test)| match &url {
            Some(url) => {
                let url = url.clone();
                Trial::test(name, move || {
                    test(&url);
                    Ok(())
                })
            }
            None if required => Trial::test(name, || {
                Err(Failed::from(format!(
                    "CONFORM_REQUIRE_REAL_MODEL is set, so the real model is required, but {NOT_SET}"
                )))
            }),
            // Run anyway (`--include-ignored`), it says why it cannot.
            None => Trial::test(name, || Err(Failed::from(NOT_SET))).with_ignored_flag(true),
        })
        .collect();
    if url.is_none() && !required && !args.list {
        loud(&format!(
            "\nnote: the {} real-model tests are ignored: {NOT_SET}\n",
            REAL.len()
        ));
    }
    if std::env::var_os(SELF_CHECK).is_none() {
        trials.push(Trial::test(
            "without_a_server_the_real_model_tests_are_ignored_or_failed_never_passed",
            self_check,
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}

/// Runs this very test binary without a server, as a user without one would, and reads
/// the runner's own summary.
fn self_check() -> Result<(), Failed> {
    let exe = std::env::current_exe()?;
    let run = |require: bool| {
        let mut command = std::process::Command::new(&exe);
        command
            .env(SELF_CHECK, "1")
            .env_remove("CONFORM_LLAMA_URL")
            .env_remove("CONFORM_REQUIRE_REAL_MODEL")
            .args(["--test-threads", "1"]);
        if require {
            command.env("CONFORM_REQUIRE_REAL_MODEL", "1");
        }
        command.output()
    };
    let n = REAL.len();

    let out = run(false)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("0 passed; 0 failed; {n} ignored")),
        "without a server, every real-model test must be counted as ignored:\n{stdout}"
    );
    for (name, _) in REAL {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("test {name} "))
                    && l.trim_end().ends_with("... ignored")),
            "{name} is not reported as ignored:\n{stdout}"
        );
    }
    assert!(stderr.contains("CONFORM_LLAMA_URL is not set"), "{stderr}");

    let out = run(true)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("0 passed; {n} failed; 0 ignored")),
        "with CONFORM_REQUIRE_REAL_MODEL set, a missing server must fail every test:\n{stdout}"
    );
    assert!(stdout.contains("the real model is required"), "{stdout}");
    Ok(())
}
