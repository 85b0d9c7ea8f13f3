//! `conform scenarios --gateway` against the real gateways, pinned, and against a small
//! deliberately broken gateway written here.
//!
//! The real ones are installed by `scripts/gateways.sh install` (cached outside the
//! repository; `.ci/run` does it). Each pinned version is held to the results it gives
//! today, scenario by scenario, so an upgrade that changes behaviour is noticed. Without
//! an installed gateway its test is reported *ignored* by the runner (this file has its
//! own `main`), unless `CONFORM_REQUIRE_GATEWAYS` is set, when it fails. A gateway that is
//! installed but does not start offline fails its test with the gateway's log: never
//! skipped in silence.
//!
//! The teeth: `broken_gateway` is a gateway of a few lines (primary, then the fallback;
//! streams buffered and checked), correct as written, and wrong in one way per variant:
//! it fails over to the revoked candidate, it presents a cut stream as complete, it
//! retries a 2xx. The correct one passes every scenario; each variant is caught.
//!
//! The call-time gate (`gate_callback/`): `integrations/litellm/`'s callback in the pinned
//! LiteLLM proxy, asking a real `conform serve`, sees a revocation at the next request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

mod common;
mod gate_callback;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A pinned gateway and what it gives today.
struct Pinned {
    kind: &'static str,
    version: &'static str,
    /// The scenarios it fails today; every other scenario passes.
    fails: &'static [&'static str],
    /// A scenario whose evidence must contain each of these texts (what the failure or
    /// the reported behaviour looks like).
    evidence: &'static [(&'static str, &'static str)],
}

const PINNED: [Pinned; 3] = [
    Pinned {
        kind: "litellm",
        version: "1.108.7",
        // A stream cut by closing the connection, and a streamed request answered by an
        // empty or HTML 200, reach the client with LiteLLM's own finish reason and [DONE].
        fails: &[
            "cut-stream-closed",
            "unreadable-2xx-broken-json-streamed",
            "unreadable-2xx-html-streamed",
            "unreadable-2xx-empty-streamed",
        ],
        evidence: &[
            (
                "cut-stream-closed",
                "a broken answer was presented as complete",
            ),
            ("cut-stream-closed", "finish_reason stop, [DONE]"),
            (
                "unreadable-2xx-empty-streamed",
                "finish_reason stop, [DONE]",
            ),
            // The same cut inside a chunked body ends in an error event.
            ("cut-stream-chunked", "an error event"),
            ("failover-on-500", "fallback's complete answer"),
            ("hang-past-timeout", "duplicate work"),
            ("anthropic-primary-streams", "on /v1/messages"),
            ("anthropic-cut-stream-chunked", "an error event"),
        ],
    },
    Pinned {
        kind: "portkey",
        version: "1.15.2",
        // Every streamed request, healthy or not, is answered with Portkey's own 500.
        fails: &["primary-answers-streamed", "anthropic-primary-streams"],
        evidence: &[
            ("primary-answers-streamed", "HTTP 500"),
            ("cut-stream-closed", "HTTP 500"),
            ("failover-on-503", "fallback's complete answer"),
            ("anthropic-failover-on-529", "on /v1/messages"),
        ],
    },
    Pinned {
        kind: "tensorzero",
        version: "2026.6.0",
        // Every answer names the model the client asked for: after failover the client
        // is told the primary served it. A cut stream ends in TensorZero's own [DONE]
        // (without a finish reason, so the client sees it incomplete).
        fails: &[
            "failover-on-500",
            "failover-on-503",
            "failover-on-529",
            "rate-limited-429",
            "connection-refused",
            "connection-reset",
            "hang-past-timeout",
            "unreadable-2xx-broken-json",
            "unreadable-2xx-html",
            "unreadable-2xx-empty",
            "unreadable-2xx-broken-json-streamed",
            "unreadable-2xx-html-streamed",
            "unreadable-2xx-empty-streamed",
            "context-length",
            "anthropic-failover-on-529",
        ],
        evidence: &[
            ("rate-limited-429", "fallback's complete answer"),
            (
                "failover-on-500",
                "model tensorzero::model_name::primary, finish_reason stop",
            ),
            ("failover-on-500", "but fallback served it"),
            (
                "cut-stream-closed",
                "model tensorzero::model_name::primary, [DONE], content",
            ),
            ("cut-stream-chunked", "[DONE], an error event"),
            ("hang-past-timeout", "duplicate work"),
            ("anthropic-primary-streams", "on /v1/messages"),
            ("every-fallback-fails", "HTTP 502"),
        ],
    },
];

fn main() {
    let mut args = Arguments::from_args();
    let required = std::env::var_os("CONFORM_REQUIRE_GATEWAYS").is_some();
    let mut trials: Vec<Trial> = PINNED
        .iter()
        .map(|pinned| {
            let name = format!(
                "{}_{}_gives_its_known_results",
                pinned.kind,
                pinned.version.replace('.', "_")
            );
            match spawn_command(pinned.kind) {
                Some(spawn) => Trial::test(name, move || known_results(pinned, &spawn)),
                None if required => Trial::test(name, move || {
                    Err(Failed::from(format!(
                        "CONFORM_REQUIRE_GATEWAYS is set, but {} {} is not installed: run \
                         `scripts/gateways.sh install`",
                        pinned.kind, pinned.version
                    )))
                }),
                None => Trial::test(name, || {
                    Err(Failed::from(
                        "not installed: run `scripts/gateways.sh install`",
                    ))
                })
                .with_ignored_flag(true),
            }
        })
        .collect();
    trials.push(gate_callback_trial(required));
    trials.push(Trial::test(
        "a_gateway_that_does_not_start_is_reported_inconclusive_with_its_log",
        || {
            a_gateway_that_does_not_start_is_reported_inconclusive_with_its_log();
            Ok(())
        },
    ));
    // The longest first (four runs of the scenarios), and every trial at once: each spends
    // its time waiting on its gateway's timeouts and its upstreams' delays, not on the CPU,
    // and two at a time they took over two minutes of CI (issue 43).
    trials.insert(
        0,
        Trial::test(
            "a_correct_gateway_passes_and_each_broken_one_is_caught",
            || {
                broken_gateways();
                Ok(())
            },
        ),
    );
    args.test_threads.get_or_insert(trials.len());
    libtest_mimic::run(&args, trials).exit();
}

/// `integrations/litellm/`'s callback in the pinned LiteLLM proxy: ignored when LiteLLM
/// is not installed, failed when it must be.
fn gate_callback_trial(required: bool) -> Trial {
    let name = "litellm_the_gate_callback_sees_a_revocation_at_the_next_request";
    let script = Path::new(REPO).join("scripts/gateways.sh");
    let litellm = Command::new(&script)
        .args(["path", "litellm"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.exists());
    match litellm {
        Some(litellm) => Trial::test(name, move || {
            gate_callback::a_revocation_reaches_the_running_proxys_next_request(&litellm)
        }),
        None => Trial::test(name, move || {
            Err(Failed::from(
                "not installed: run `scripts/gateways.sh install`",
            ))
        })
        .with_ignored_flag(!required),
    }
}

/// The `--spawn` command of an installed gateway, or `None`.
fn spawn_command(kind: &str) -> Option<String> {
    let script = Path::new(REPO).join("scripts/gateways.sh");
    let path = Command::new(&script).args(["path", kind]).output().ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&path.stdout).trim());
    if !path.exists() {
        return None;
    }
    let spawn = Command::new(&script).args(["spawn", kind]).output().ok()?;
    Some(String::from_utf8_lossy(&spawn.stdout).trim().to_string())
}

/// `conform scenarios --gateway KIND ARGS --format json`: the exit code and the report.
fn scenarios(kind: &str, args: &[&str], work: &Path) -> (i32, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args(["scenarios", "--gateway", kind])
        .args(args)
        .args(["--format", "json", "--work-dir"])
        .arg(work)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), report, stderr)
}

fn by_name(report: &Value) -> BTreeMap<String, Value> {
    report["scenarios"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|s| (s["scenario"].as_str().unwrap_or("").to_string(), s.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Every scenario ran, and the revoked candidate received nothing in any of them.
fn assert_revoked_untouched(report: &Value) {
    let scenarios = by_name(report);
    assert!(!scenarios.is_empty(), "no scenario ran: {report}");
    for (name, s) in &scenarios {
        assert_eq!(
            s["provider_requests"]["revoked"]["received"], 0,
            "{name}: the revoked candidate received a request"
        );
    }
}

/// Each scenario's JSON lists every upstream request it counted, with its timing.
fn assert_arrivals_listed(report: &Value) {
    for (name, s) in &by_name(report) {
        let arrivals = s["provider_arrivals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (model, count) in s["provider_requests"].as_object().into_iter().flatten() {
            let listed = (arrivals.iter())
                .filter(|a| a["model"] == model.as_str())
                .inspect(|a| assert!(a["at_unix_ms"].is_u64(), "{name}: {a}"))
                .count();
            assert_eq!(
                count["received"].as_u64(),
                Some(listed as u64),
                "{name}: {model}'s requests are counted but not listed in provider_arrivals"
            );
        }
    }
}

/// Live processes (not zombies) whose environment names `work`: what a spawned gateway
/// left running after `conform scenarios` ended (the run gives its gateway the config's
/// path, in the working folder, in `CONFORM_GATEWAY_CONFIG`).
fn survivors(work: &Path) -> Vec<String> {
    let needle = work.display().to_string().into_bytes();
    let scan = || -> Vec<String> {
        let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
        entries
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
                !state.is_empty() && !state.starts_with('Z')
            })
            .filter(|e| {
                let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
                environ.windows(needle.len()).any(|w| w == needle)
            })
            .map(|e| {
                let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                format!(
                    "{}: {}",
                    e.file_name().to_string_lossy(),
                    String::from_utf8_lossy(&cmdline).replace('\0', " ")
                )
            })
            .collect()
    };
    // A process killed a moment ago may take that moment to go.
    for _ in 0..50 {
        if scan().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    scan()
}

fn known_results(pinned: &Pinned, spawn: &str) -> Result<(), Failed> {
    let work = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (code, report, stderr) = scenarios(
        pinned.kind,
        // A timeout well above a loaded machine's latency: only the hang passes it.
        &[
            "--spawn",
            spawn,
            "--startup-timeout",
            "120s",
            "--gateway-timeout",
            "5s",
        ],
        work.path(),
    );
    if code == 3 {
        return Err(Failed::from(format!(
            "{} {} did not start offline (exit 3):\n{stderr}",
            pinned.kind, pinned.version
        )));
    }
    assert_revoked_untouched(&report);
    assert_arrivals_listed(&report);
    let survivors = survivors(work.path());
    assert!(
        survivors.is_empty(),
        "{} {}: processes of the gateway outlived conform scenarios: {survivors:?}",
        pinned.kind,
        pinned.version
    );
    let scenarios = by_name(&report);
    let failed: Vec<&str> = scenarios
        .iter()
        .filter(|(_, s)| s["outcome"]["status"] == "failed")
        .map(|(n, _)| n.as_str())
        .collect();
    let mut want: Vec<&str> = pinned.fails.to_vec();
    want.sort_unstable();
    assert_eq!(
        failed, want,
        "{} {}: the scenarios that fail changed (an upgrade? a regression?)",
        pinned.kind, pinned.version
    );
    assert_eq!(code, 1, "a failing scenario exits 1");
    for (name, text) in pinned.evidence {
        let evidence = scenarios[*name].to_string();
        assert!(
            evidence.contains(text),
            "{name}: its evidence does not say {text:?}: {evidence}"
        );
    }
    eprintln!(
        "{} {}: {} scenarios in {:.1} s, failing {:?}",
        pinned.kind,
        pinned.version,
        scenarios.len(),
        started.elapsed().as_secs_f64(),
        failed
    );
    Ok(())
}

fn a_gateway_that_does_not_start_is_reported_inconclusive_with_its_log() {
    let work = tempfile::tempdir().unwrap();
    let (code, report, stderr) = scenarios(
        "litellm",
        &["--spawn", "echo no route to the model cost map >&2; exit 1"],
        work.path(),
    );
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(
        report,
        Value::Null,
        "no report for a run that never started"
    );
    assert!(stderr.contains("the gateway did not start"), "{stderr}");
    assert!(
        stderr.contains("no route to the model cost map"),
        "{stderr}"
    );
    assert!(stderr.contains("working directory kept"), "{stderr}");
    // A command without {port} must announce its URL on stdout: one that never does is
    // not started, and what it printed (stderr included) is shown.
    let (code, _, stderr) = scenarios(
        "tensorzero",
        &[
            "--spawn",
            "echo config error at line 3 >&2; echo starting; sleep 30",
            "--startup-timeout",
            "2s",
        ],
        work.path(),
    );
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("printed no http:// URL on stdout"),
        "{stderr}"
    );
    assert!(stderr.contains("config error at line 3"), "{stderr}");
    assert!(stderr.contains("starting"), "{stderr}");
    // Neither a gateway nor a way to reach one: a usage error.
    let (code, _, stderr) = scenarios("portkey", &[], work.path());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--spawn"), "{stderr}");
}

/// How the test gateway is broken.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Broken {
    None,
    FailsOverToRevoked,
    CompletesCutStreams,
    RetriesA2xx,
}

struct Gateway {
    broken: Broken,
    http: reqwest::Client,
    /// Where a request for the model `unreachable` goes first (nothing listens there).
    unreachable: String,
    primary: String,
    fallback: String,
    revoked: String,
}

/// A free loopback port (bound, then released for conform to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The body is a whole answer: a completion with content, or a stream that ends in
/// `[DONE]` after a finish reason.
fn whole(status: u16, body: &[u8], stream: bool) -> bool {
    if !(200..300).contains(&status) {
        return false;
    }
    let text = String::from_utf8_lossy(body);
    if stream {
        text.contains("\"finish_reason\":\"stop\"") && text.trim_end().ends_with("data: [DONE]")
    } else {
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.pointer("/choices/0/message/content").cloned())
            .is_some_and(|c| c.is_string())
    }
}

/// One upstream call, for the model `base` serves (as a gateway's model list maps its
/// name to the upstream's): status and body, or `None` when the transfer broke.
async fn call(g: &Gateway, base: &str, body: &Bytes) -> Option<(u16, Vec<u8>)> {
    let model = [
        (&g.primary, "primary-mock"),
        (&g.fallback, "fallback-mock"),
        (&g.revoked, "revoked-mock"),
    ]
    .into_iter()
    .find(|(b, _)| b.as_str() == base)
    .map_or("unknown", |(_, m)| m);
    let mut request: Value = serde_json::from_slice(body).ok()?;
    request["model"] = Value::String(model.to_string());
    let response = g
        .http
        .post(format!("{base}/chat/completions"))
        .json(&request)
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    match response.bytes().await {
        Ok(bytes) => Some((status, bytes.to_vec())),
        // A cut body still shows what arrived, for the variant that completes it.
        Err(_) => Some((status, Vec::new())).filter(|_| g.broken == Broken::CompletesCutStreams),
    }
}

async fn completions(State(g): State<Arc<Gateway>>, _: HeaderMap, body: Bytes) -> Response {
    let stream = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("stream").and_then(Value::as_bool))
        .unwrap_or(false);
    let answer = |status: u16, bytes: Vec<u8>| {
        let ct = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        (
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            [("content-type", ct)],
            bytes,
        )
            .into_response()
    };
    let asked = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_string));
    let primary = match asked.as_deref() {
        Some("unreachable") => &g.unreachable,
        _ => &g.primary,
    };
    let mut first = call(&g, primary, &body).await;
    if g.broken == Broken::RetriesA2xx
        && first.as_ref().is_some_and(|(s, _)| (200..300).contains(s))
    {
        first = call(&g, primary, &body).await;
    }
    if let Some((status, bytes)) = &first {
        if whole(*status, bytes, stream) {
            return answer(*status, bytes.clone());
        }
        if g.broken == Broken::CompletesCutStreams && stream && *status == 200 {
            let mut bytes = bytes.clone();
            bytes.extend_from_slice(
                b"data: {\"model\":\"primary\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
            );
            return answer(200, bytes);
        }
    }
    let next = if g.broken == Broken::FailsOverToRevoked {
        &g.revoked
    } else {
        &g.fallback
    };
    match call(&g, next, &body).await {
        Some((status, bytes)) if whole(status, &bytes, stream) => answer(status, bytes),
        _ => answer(
            502,
            br#"{"error":{"message":"every model failed","type":"server_error"}}"#.to_vec(),
        ),
    }
}

/// Runs the scenarios (as `--gateway litellm`) against the test gateway broken as
/// `broken`; answers the report.
fn against(broken: Broken) -> (i32, Value, String) {
    against_with(broken, &[])
}

fn against_with(broken: Broken, extra: &[&str]) -> (i32, Value, String) {
    let ports: BTreeMap<&str, u16> = [
        ("primary", free_port()),
        ("fallback", free_port()),
        ("revoked", free_port()),
        ("unreachable", free_port()),
    ]
    .into_iter()
    .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = |name: &str| format!("http://127.0.0.1:{}/v1", ports[name]);
    let gateway = Arc::new(Gateway {
        broken,
        // The gateway's own timeout, as the scenarios' default --gateway-timeout.
        http: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(2))
            .no_proxy()
            .build()
            .unwrap(),
        unreachable: base("unreachable"),
        primary: base("primary"),
        fallback: base("fallback"),
        revoked: base("revoked"),
    });
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/health/liveliness", get(|| async { "ok" }))
        .route("/v1/chat/completions", post(completions))
        .with_state(gateway);
    runtime.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mock_ports = ports
        .iter()
        .map(|(n, p)| format!("{n}={p}"))
        .collect::<Vec<_>>()
        .join(",");
    let work = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--target",
        url.as_str(),
        "--mock-ports",
        mock_ports.as_str(),
    ];
    args.extend_from_slice(extra);
    let result = scenarios("litellm", &args, work.path());
    runtime.shutdown_background();
    result
}

fn failed(report: &Value) -> Vec<String> {
    by_name(report)
        .into_iter()
        .filter(|(_, s)| s["outcome"]["status"] == "failed")
        .map(|(n, _)| n)
        .collect()
}

fn broken_gateways() {
    let junit = tempfile::tempdir().unwrap();
    let xml = junit.path().join("gateway.xml");
    // Each run has its own gateway, upstreams and ports: the four go at once.
    let (correct, revoked, completes, retries) = std::thread::scope(|scope| {
        let correct =
            scope.spawn(|| against_with(Broken::None, &["--junit", xml.to_str().unwrap()]));
        let revoked = scope.spawn(|| against(Broken::FailsOverToRevoked));
        let completes = scope.spawn(|| against(Broken::CompletesCutStreams));
        let retries = scope.spawn(|| against(Broken::RetriesA2xx));
        let join = |run: std::thread::ScopedJoinHandle<'_, _>| run.join().unwrap();
        (join(correct), join(revoked), join(completes), join(retries))
    });
    let (code, report, stderr) = correct;
    assert_eq!(
        failed(&report),
        Vec::<String>::new(),
        "{stderr}\n{report:#}"
    );
    assert_eq!(code, 0, "{stderr}");
    assert_revoked_untouched(&report);
    // The same JUnit as the orchestrator scenarios: one case per scenario.
    let xml = std::fs::read_to_string(&xml).unwrap();
    let cases = report["scenarios"].as_array().unwrap().len();
    assert!(xml.contains(&format!("tests=\"{cases}\"")), "{xml}");
    assert!(xml.contains("failures=\"0\""), "{xml}");

    let (code, report, _) = revoked;
    assert_eq!(code, 1);
    let scenarios = by_name(&report);
    let reason = scenarios["failover-on-500"]["outcome"]["reason"].to_string();
    assert!(
        reason.contains("revoked received 1 request(s), expected 0"),
        "{reason}"
    );

    let (code, report, _) = completes;
    assert_eq!(code, 1);
    let failing = failed(&report);
    for name in [
        "cut-stream-closed",
        "cut-stream-chunked",
        "unreadable-2xx-empty-streamed",
    ] {
        assert!(
            failing.contains(&name.to_string()),
            "{name} missed: {failing:?}"
        );
    }
    let reason = by_name(&report)["cut-stream-chunked"]["outcome"]["reason"].to_string();
    assert!(
        reason.contains("a broken answer was presented as complete"),
        "{reason}"
    );

    let (code, report, _) = retries;
    assert_eq!(code, 1);
    let reason = by_name(&report)["primary-answers"]["outcome"]["reason"].to_string();
    assert!(
        reason.contains("primary received 2 request(s), expected 1"),
        "{reason}"
    );
}
