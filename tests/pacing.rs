//! Pacing to an account's live limits (issue 35): a provider file with no `[limits]`,
//! against a server that enforces a token bucket and says so in OpenAI's headers, gets
//! every call answered and conformant with at most 1 % of its requests answered 429.
//! Wall time is measured by the `run_throughput` bench (`--paced`); here only against
//! issue 46's per-minute account, held to 1.15 × its floor.
//!
//! This file has its own `main` (libtest-mimic) so that its tests run all at once: each
//! spends its 12 to 25 seconds waiting for an account's refill, not on the CPU, and one
//! after another two at a time they took two minutes of CI (issue 43).

mod common;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use common::rate_limited::{Limit, RateLimited};
use common::{Project, read_json};
use libtest_mimic::{Arguments, Trial};
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const CALLS: usize = 240;

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // The longest first: each trial takes a thread until it ends.
    let trials = vec![
        trial(
            "a_resumed_run_paces_as_fast_as_a_fresh_one",
            a_resumed_run_paces_as_fast_as_a_fresh_one,
        ),
        trial(
            "a_limit_stated_only_by_its_429s_still_gets_every_call_answered",
            a_limit_stated_only_by_its_429s_still_gets_every_call_answered,
        ),
        trial(
            "slow_answers_under_a_stated_limit_get_more_calls_in_flight",
            slow_answers_under_a_stated_limit_get_more_calls_in_flight,
        ),
        trial(
            "slow_answers_with_a_stated_concurrency_keep_to_it",
            slow_answers_with_a_stated_concurrency_keep_to_it,
        ),
        trial(
            "a_per_minute_limit_enforced_over_short_windows_holds_with_slow_answers",
            a_per_minute_limit_enforced_over_short_windows_holds_with_slow_answers,
        ),
        trial(
            "a_per_minute_limit_enforced_over_short_windows_is_not_hammered_by_fast_answers",
            a_per_minute_limit_enforced_over_short_windows_is_not_hammered_by_fast_answers,
        ),
        trial(
            "a_tokens_per_minute_limit_no_limits_configured_almost_no_429",
            a_tokens_per_minute_limit_no_limits_configured_almost_no_429,
        ),
        trial(
            "ten_requests_a_second_no_limits_configured_almost_no_429",
            ten_requests_a_second_no_limits_configured_almost_no_429,
        ),
    ];
    // Each waits on its own account's clock (about one `conform run` sending 10 requests a
    // second), so they share two cores without eating the 1.15 × floor's margin.
    args.test_threads.get_or_insert(trials.len());
    libtest_mimic::run(&args, trials).exit_code()
}

/// A test of `body` on its own runtime, as `#[tokio::test(flavor = "multi_thread")]` ran it.
fn trial<F: Future<Output = ()> + 'static>(name: &'static str, body: fn() -> F) -> Trial {
    Trial::test(name, move || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime: {e}"))?
            .block_on(body());
        Ok(())
    })
}

/// A project with one suite of [`CALLS`] cases and a provider `paced` at `server`, with
/// no `[limits]` and an output ceiling of `max_output_tokens`.
fn project(server: &MockServer, max_output_tokens: u32) -> Project {
    project_of(server, max_output_tokens, CALLS)
}

/// [`project`] with `cases` cases.
fn project_of(server: &MockServer, max_output_tokens: u32, cases: usize) -> Project {
    let project = Project::new(&[]);
    project.write(
        "fixtures/paced/suite.toml",
        "user = \"case {{ n }}\"\nschema = \"schema.json\"\nrepeats = 1\npass_threshold = 1.0\n",
    );
    project.write(
        "fixtures/paced/schema.json",
        r#"{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}"#,
    );
    for n in 0..cases {
        project.write(
            &format!("fixtures/paced/cases/c{n:03}.json"),
            &format!(r#"{{"vars": {{"n": "{n:03}"}}}}"#),
        );
    }
    project.write(
        "providers/paced.toml",
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"paced-model\"\nbase_url = \"{}\"\nmax_output_tokens = {max_output_tokens}\n\n[tokenizer]\nkind = \"none\"\n",
            server.uri()
        ),
    );
    project
}

async fn serve(limits: RateLimited) -> (MockServer, Arc<RateLimited>) {
    serve_after(limits, std::time::Duration::ZERO).await
}

/// Serves `limits`, each answer `latency` after its request.
async fn serve_after(
    limits: RateLimited,
    latency: std::time::Duration,
) -> (MockServer, Arc<RateLimited>) {
    let server = MockServer::builder()
        .disable_request_recording()
        .start()
        .await;
    let limits = Arc::new(limits);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ArcResponder(Arc::clone(&limits), latency))
        .mount(&server)
        .await;
    (server, limits)
}

struct ArcResponder(Arc<RateLimited>, std::time::Duration);

impl wiremock::Respond for ArcResponder {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        self.0.respond(request).set_delay(self.1)
    }
}

/// Runs the suite and returns the report and the progress lines.
fn run(project: &Project) -> (Value, String) {
    let out = project
        .cmd()
        .args(["run", "paced", "--suite", "paced"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    (read_json(&project.last_run().join("report.json")), stderr)
}

fn assert_paced(limits: &RateLimited, report: &Value) {
    let (received, answered, throttled) = limits.counts();
    eprintln!("received {received}, answered {answered}, 429 {throttled}");
    assert_eq!(
        answered, CALLS as u64,
        "received {received}, 429 {throttled}"
    );
    assert!(
        throttled * 100 <= received,
        "{throttled} of {received} requests were answered 429"
    );
    let pair = &report["verdicts"][0];
    assert_eq!(pair["verdict"], "conformant", "{pair}");
    // The report says what the pacer learnt, and how many requests it took.
    let provider = &report["providers"][0];
    assert_eq!(provider["requests_sent"], received, "{provider}");
    assert!(
        provider["pacing"]["requests"]["learnt"].is_f64()
            || provider["pacing"]["tokens"]["learnt"].is_f64(),
        "{provider}"
    );
}

async fn ten_requests_a_second_no_limits_configured_almost_no_429() {
    let (server, limits) = serve(ten_a_second()).await;
    let project = project(&server, 64);
    let (report, progress) = run(&project);
    assert_paced(&limits, &report);
    // The progress line says what was learnt: a run in a pipe prints it at its end.
    assert!(progress.contains("paced: "), "{progress}");
    assert!(progress.contains("req/s (limit"), "{progress}");
}

async fn a_tokens_per_minute_limit_no_limits_configured_almost_no_429() {
    // 100 tokens a call (its 96-token ceiling and 3 for `case NNN`) against 1,000 tokens a
    // second, a bucket of 1,000: ten calls a second again.
    let (server, limits) = serve(RateLimited::new(
        None,
        Some(Limit {
            capacity: 1000.0,
            per_second: 1000.0,
        }),
        r#"{"ok": true}"#,
    ))
    .await;
    let project = project(&server, 97);
    let (report, progress) = run(&project);
    assert_paced(&limits, &report);
    assert!(progress.contains("tok/min (limit"), "{progress}");
}

/// A limit stated only by its 429s (`retry-after-ms`, as Gemini states it in
/// `RetryInfo`): the pacer infers the rate from what got through before the first 429,
/// so every call is still answered and conformant with at most 5 % of the requests
/// answered 429 (about 1 % measured), and none is counted against the provider.
async fn a_limit_stated_only_by_its_429s_still_gets_every_call_answered() {
    let limited = ten_a_second();
    let (server, limits) = serve(limited.unstated()).await;
    let project = project(&server, 64);
    let (report, _) = run(&project);
    let (received, answered, throttled) = limits.counts();
    eprintln!("no headers: received {received}, answered {answered}, 429 {throttled}");
    assert_eq!(answered, CALLS as u64);
    assert!(throttled * 20 <= received, "{throttled} of {received}");
    assert_eq!(report["verdicts"][0]["verdict"], "conformant");
}

/// Issue 46's account: 600 requests a minute stated in OpenAI's headers (the limit, what
/// is left of the minute, when it is full again), enforced over short windows (10 a
/// second, a second's worth at once). Its answers take `latency`. The minute's 599 left
/// is no burst allowance: every call answered with at most 1 % of the requests answered
/// 429, within 1.15 × the account's floor (the first second's 10 at once, the other 230
/// at 10 a second, and one answer's latency).
async fn paced_against_a_per_minute_account(latency: std::time::Duration) {
    let (server, limits) =
        serve_after(RateLimited::per_minute(600.0, r#"{"ok": true}"#), latency).await;
    let project = project(&server, 64);
    let started = std::time::Instant::now();
    let (report, _) = run(&project);
    let wall = started.elapsed().as_secs_f64();
    assert_paced(&limits, &report);
    let floor = (CALLS as f64 - 10.0) / 10.0 + latency.as_secs_f64();
    eprintln!(
        "{latency:?} answers: {wall:.2} s, {:.3} × the floor; {}",
        wall / floor,
        report["providers"][0]["pacing"]
    );
    assert!(
        wall <= 1.15 * floor,
        "{wall:.2} s against a floor of {floor:.2} s"
    );
}

async fn a_per_minute_limit_enforced_over_short_windows_is_not_hammered_by_fast_answers() {
    paced_against_a_per_minute_account(std::time::Duration::from_millis(1)).await;
}

async fn a_per_minute_limit_enforced_over_short_windows_holds_with_slow_answers() {
    paced_against_a_per_minute_account(std::time::Duration::from_secs(1)).await;
}

/// An account of 10 requests a second, a bucket of 10, stating it in OpenAI's headers.
fn ten_a_second() -> RateLimited {
    RateLimited::new(
        Some(Limit {
            capacity: 10.0,
            per_second: 10.0,
        }),
        None,
        r#"{"ok": true}"#,
    )
}

/// Answers that take half a second against 10 requests a second: four calls in flight
/// would send 8 a second. With no `concurrency` in the provider file, the calls in
/// flight grow to what the stated limit keeps busy, and still almost no request is
/// answered 429. (The wall time this saves is the bench's: `--paced` with
/// `RUN_THROUGHPUT_LATENCY_MS=1000`.)
async fn slow_answers_under_a_stated_limit_get_more_calls_in_flight() {
    let latency = std::time::Duration::from_millis(500);
    let (server, limits) = serve_after(ten_a_second(), latency).await;
    let adaptive = project(&server, 64);
    let (report, _) = run(&adaptive);
    assert_paced(&limits, &report);
    // More than the default four were in flight at once, seen from the server.
    let most = limits.most_arrived_within(latency - std::time::Duration::from_millis(50));
    let cap = &report["providers"][0]["pacing"]["in_flight_cap"];
    eprintln!("most in flight seen by the server: {most}; the pacer's cap: {cap}");
    assert!(most > 4, "at most {most} requests in flight");
    assert!(cap.as_u64().is_some_and(|c| c > 4), "{cap}");
}

/// The same account and answers as the test above: a provider file that states its
/// concurrency keeps to it.
async fn slow_answers_with_a_stated_concurrency_keep_to_it() {
    let latency = std::time::Duration::from_millis(500);
    let (server, limits) = serve_after(ten_a_second(), latency).await;
    let bounded = project(&server, 64);
    let path = bounded.root().join("providers/paced.toml");
    let stated = std::fs::read_to_string(&path).unwrap() + "\n[limits]\nconcurrency = 4\n";
    std::fs::write(&path, stated).unwrap();
    let (report, _) = run(&bounded);
    assert_eq!(report["verdicts"][0]["verdict"], "conformant");
    let most = limits.most_arrived_within(latency - std::time::Duration::from_millis(50));
    assert!(
        most <= 4,
        "{most} requests in flight with concurrency = 4 stated"
    );
}

/// A run cut halfway and resumed at once, on an account its calls used up, paces at the
/// rate the account allows, as a fresh run does: its request rate is within 15 % of the
/// fresh run's. (Its first calls are answered 429, which leaves one call in flight; the
/// calls then each find the bucket full, and a pacer that read one request used as half
/// of one learnt half the rate and kept to it: 2.4 a second against 5.)
async fn a_resumed_run_paces_as_fast_as_a_fresh_one() {
    let (server, limits) = serve(RateLimited::new(
        Some(Limit {
            capacity: 5.0,
            per_second: 5.0,
        }),
        None,
        r#"{"ok": true}"#,
    ))
    .await;
    let cases = CALLS / 2;
    let project = project_of(&server, 64, cases);
    let (fresh_report, _) = run(&project);
    let fresh = limits.rate_from(0);
    let dir = project.last_run();
    // Cut it as a kill would: half its records, no report.
    let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let half: Vec<&str> = text.lines().take(cases / 2).collect();
    std::fs::write(dir.join("results.jsonl"), half.join("\n") + "\n").unwrap();
    std::fs::remove_file(dir.join("report.json")).unwrap();
    // Resumed at once: the calls of the run cut short have used the account up.
    limits.drain();
    let before = limits.arrived();
    let out = project
        .cmd()
        .arg("run")
        .arg("--resume")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::output_text(&out));
    let resumed = limits.rate_from(before);
    let report = read_json(&dir.join("report.json"));
    eprintln!(
        "fresh: {fresh:.2} req/s ({}), resumed: {resumed:.2} req/s ({})",
        fresh_report["providers"][0]["pacing"], report["providers"][0]["pacing"]
    );
    assert!(
        (resumed - fresh).abs() <= 0.15 * fresh,
        "resumed at {resumed:.2} req/s, fresh at {fresh:.2}"
    );
}
