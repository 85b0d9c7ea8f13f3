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
//! retries a 2xx, it retries a 429 at once whatever its `Retry-After` says, it reports
//! the primary's model after failing over, it has no stall timeout (none while a body
//! streams), it resumes a failed stream on the fallback with a prefill and passes the
//! refusal on. The correct one (retrying nothing; a request timeout, and a stall timeout
//! equal to it) passes every scenario; each variant is caught.
//!
//! The team's own config (`--gateway-config`): one that lists the revoked candidate as a
//! fallback is caught and named against the test gateway; a correct one with its own
//! retries runs against the pinned LiteLLM, and the counts show those retries.
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
mod gateway_table;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A pinned gateway and what it gives today.
struct Pinned {
    kind: &'static str,
    version: &'static str,
    /// Its column in docs/gateways.md's results table, which says what it gives today.
    column: &'static str,
    /// A scenario whose evidence must contain each of these texts (what the failure or
    /// the reported behaviour looks like).
    evidence: &'static [(&'static str, &'static str)],
}

const PINNED: [Pinned; 3] = [
    Pinned {
        kind: "litellm",
        version: "1.108.7",
        column: "LiteLLM 1.108.7",
        // A stream cut by closing the connection, and a streamed request answered by an
        // empty or HTML 200, reach the client with LiteLLM's own finish reason and [DONE].
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
            ("accounting", "the answer carries the fallback's usage"),
            (
                "content-filter-400",
                "documented: the gateway fails over on the primary's content-filter rejection",
            ),
            ("wall-clock-budget", "HTTP 408"),
            // With num_retries: 0 nothing is retried: the rule holds with one attempt each.
            ("retry-after-honoured", "no upstream was attempted twice"),
            (
                "flapping-primary",
                "back on the primary within 2000 ms of its recovery",
            ),
            ("no-hammering", "(4 came)"),
            // A slow first token: it fails over at its stream timeout (the first byte
            // only then); a stall ends in an error event at its timeout; a malformed
            // event becomes an error event, the rest of the answer dropped; a stream
            // without [DONE] gets LiteLLM's [DONE] at once, with the usage.
            (
                "slow-first-token",
                "the client got fallback's complete answer",
            ),
            ("slow-first-token", "first byte after 5"),
            ("stall-mid-stream", "an error event"),
            ("malformed-event-mid-stream", "an error event"),
            ("stream-without-done", "ended with [DONE]; usage {"),
            ("fallback-rejects-prefill", "the fallback was not called"),
        ],
    },
    Pinned {
        kind: "portkey",
        version: "1.15.2",
        column: "Portkey gateway 1.15.2",
        // Every streamed request, healthy or not, is answered with Portkey's own 500.
        evidence: &[
            ("primary-answers-streamed", "HTTP 500"),
            (
                "stream-without-done",
                "no usage reached the client: HTTP 500",
            ),
            ("stall-mid-stream", "HTTP 500"),
            ("cut-stream-closed", "HTTP 500"),
            ("failover-on-503", "fallback's complete answer"),
            ("anthropic-failover-on-529", "on /v1/messages"),
            ("accounting", "the answer carries the fallback's usage"),
            (
                "content-filter-400",
                "documented: the gateway fails over on the primary's content-filter rejection",
            ),
            ("wall-clock-budget", "HTTP 408"),
            ("retry-after-honoured", "no upstream was attempted twice"),
            (
                "flapping-primary",
                "back on the primary within 2000 ms of its recovery",
            ),
            ("no-hammering", "(4 came)"),
        ],
    },
    Pinned {
        kind: "tensorzero",
        version: "2026.6.0",
        column: "TensorZero 2026.6.0",
        // Every answer names the model the client asked for: after failover the client
        // is told the primary served it. A cut stream ends in TensorZero's own [DONE]
        // (without a finish reason, so the client sees it incomplete).
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
            // Its usage is the fallback's; only the model names the primary.
            ("accounting", "the answer carries the fallback's usage"),
            ("accounting", "but fallback served it"),
            (
                "content-filter-400",
                "documented: the gateway fails over on the primary's content-filter rejection",
            ),
            ("wall-clock-budget", "HTTP 502"),
            ("retry-after-honoured", "no upstream was attempted twice"),
            (
                "flapping-primary",
                "back on the primary within 2000 ms of its recovery",
            ),
            ("no-hammering", "(4 came)"),
            ("slow-first-token", "but fallback served it"),
            (
                "stall-mid-stream",
                "no stall (inter-chunk) timeout: it held the client for the whole stall",
            ),
            // The malformed event becomes an error event in a stream that then completes.
            (
                "malformed-event-mid-stream",
                "finish_reason stop, [DONE], an error event",
            ),
            ("stream-without-done", "ended with [DONE]; usage {"),
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
    trials.push(own_config_trial(required));
    trials.push(Trial::test(
        "a_relaunched_gateway_is_reached_at_the_url_it_announces",
        || {
            a_relaunched_gateway_is_reached_at_the_url_it_announces();
            Ok(())
        },
    ));
    trials.push(Trial::test(
        "the_results_table_gives_every_scenario_a_verdict_for_every_pinned_gateway",
        || {
            the_results_table_gives_every_scenario_a_verdict_for_every_pinned_gateway();
            Ok(())
        },
    ));
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

/// docs/gateways.md's results table: by pinned gateway's column, each scenario's verdict.
fn results_table() -> BTreeMap<String, gateway_table::Column> {
    let doc = std::fs::read_to_string(Path::new(REPO).join("docs/gateways.md")).unwrap();
    gateway_table::read(&doc).unwrap_or_else(|e| panic!("docs/gateways.md: {e}"))
}

/// Without any gateway installed: the table has a column for every pinned version, and
/// each names every scenario `--list` gives, once.
fn the_results_table_gives_every_scenario_a_verdict_for_every_pinned_gateway() {
    let list = Command::new(env!("CARGO_BIN_EXE_conform"))
        .args(["scenarios", "--gateway", "litellm", "--list"])
        .output()
        .unwrap();
    let listed: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .map(str::to_string)
        .collect();
    assert!(listed.len() > 20, "{listed:?}");
    let mut listed_sorted = listed.clone();
    listed_sorted.sort();
    let mut table = results_table();
    for pinned in &PINNED {
        let column = table.remove(pinned.column).unwrap_or_else(|| {
            panic!(
                "docs/gateways.md's results table has no column {:?}",
                pinned.column
            )
        });
        let stated: Vec<String> = column.into_keys().collect();
        assert_eq!(stated, listed_sorted, "{}", pinned.column);
    }
    assert!(
        table.is_empty(),
        "columns for no pinned version: {:?}",
        table.keys()
    );
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

/// The team's LiteLLM config the real proxy runs: its own model names, keys from its
/// environment, two retries; `fallback` is the allowlisted one.
const TEAM_LITELLM: &str = "\
# The team's LiteLLM proxy.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o-2024-08-06
      api_key: os.environ/OPENAI_API_KEY
      timeout: 5
  - model_name: fallback
    litellm_params:
      model: openai/llama-local
      api_base: http://vllm.internal:8000/v1
      timeout: 5
router_settings:
  num_retries: 2
  fallbacks: [{\"gpt-4o\": [\"fallback\"]}]
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
";

/// The pinned LiteLLM with the team's config: ignored when it is not installed, failed
/// when it must be.
fn own_config_trial(required: bool) -> Trial {
    let name = "litellm_runs_the_teams_own_config_and_shows_its_retries";
    match spawn_command("litellm") {
        Some(spawn) => Trial::test(name, move || {
            the_teams_own_config_runs_with_its_retries(&spawn);
            Ok(())
        }),
        None => Trial::test(name, || {
            Err(Failed::from(
                "not installed: run `scripts/gateways.sh install`",
            ))
        })
        .with_ignored_flag(!required),
    }
}

fn the_teams_own_config_runs_with_its_retries(spawn: &str) {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("team.yaml");
    std::fs::write(&config, TEAM_LITELLM).unwrap();
    let (code, report, stderr) = scenarios(
        "litellm",
        &[
            "--gateway-config",
            config.to_str().unwrap(),
            "--spawn",
            spawn,
            "--startup-timeout",
            "120s",
            "--gateway-timeout",
            "5s",
            "--only",
            "primary-answers,failover-on-500,rate-limited-429,retry-after-honoured,no-hammering",
        ],
        work.path(),
    );
    assert_eq!(code, 0, "{stderr}\n{report:#}");
    let scenarios = by_name(&report);
    assert_eq!(
        scenarios["config-fallbacks-permitted"]["outcome"]["status"], "passed",
        "{report:#}"
    );
    assert_eq!(
        scenarios["primary-answers"]["provider_requests"]["primary"]["received"],
        1
    );
    // num_retries: 2 is the team's: the primary gets three attempts where conform's own
    // config (num_retries: 0) gives it one, and the fallback then answers.
    for name in ["failover-on-500", "rate-limited-429"] {
        let counts = &scenarios[name]["provider_requests"];
        assert_eq!(counts["primary"]["received"], 3, "{name}: {counts}");
        assert_eq!(counts["primary"]["expected"], 1, "{name}: {counts}");
        assert_eq!(counts["fallback"]["received"], 1, "{name}: {counts}");
        let evidence = scenarios[name].to_string();
        assert!(evidence.contains("the config's retries"), "{evidence}");
        assert!(
            evidence.contains("fallback's complete answer"),
            "{evidence}"
        );
    }
    // Its retries are real here, so Retry-After is put to the test: the pinned LiteLLM
    // waits what the header says before the next attempt.
    let honoured = scenarios["retry-after-honoured"].to_string();
    assert!(honoured.contains("primary after "), "{honoured}");
    // And its retries are the bound on one request's attempts, not conform's none.
    let hammering = scenarios["no-hammering"].to_string();
    assert!(
        hammering.contains(
            "at most 3 attempt(s) on one upstream per client request (1 + the config's 2 retries)"
        ),
        "{hammering}"
    );
    assert_arrivals_listed(&report);
}

/// A gateway whose launcher prints its URL (no `{port}`) and exits after its first
/// answer: conform relaunches it, and the next scenario reaches it where it now listens.
fn a_relaunched_gateway_is_reached_at_the_url_it_announces() {
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("gateway.py");
    std::fs::write(&script, ONE_ANSWER_GATEWAY).unwrap();
    let spawn = format!("exec python3 -u '{}'", script.display());
    let (code, report, stderr) = scenarios(
        "litellm",
        &[
            "--spawn",
            &spawn,
            "--only",
            "primary-answers,primary-answers-streamed",
        ],
        work.path(),
    );
    assert_eq!(code, 1, "{stderr}");
    let scenarios = by_name(&report);
    let first = scenarios["primary-answers"].to_string();
    assert!(first.contains("the gateway exited"), "{first}");
    let ports: Vec<String> = [&first, &scenarios["primary-answers-streamed"].to_string()]
        .iter()
        .map(|e| {
            let at = e.find("answered on port ").unwrap_or_else(|| panic!("{e}"));
            e[at..]
                .split_whitespace()
                .nth(3)
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_ne!(ports[0], ports[1], "{report:#}");
}

/// A gateway that picks its port, prints its URL, answers one chat request with a 503
/// naming that port, and exits.
const ONE_ANSWER_GATEWAY: &str = r#"
import http.server, json, os

class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self):
        self.answer(200, b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        port = self.server.server_port
        self.answer(503, json.dumps({"error": {"message": f"answered on port {port} ."}}).encode())
        os._exit(0)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
server.serve_forever()
"#;

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

/// Each scenario's JSON lists the client's requests, what each received, and the
/// upstream attempts that came for each: together, every upstream request counted.
fn assert_client_requests_listed(report: &Value) {
    for (name, s) in &by_name(report) {
        let requests = s["client_requests"].as_array().cloned().unwrap_or_default();
        assert!(
            !requests.is_empty(),
            "{name}: no client request listed: {s}"
        );
        for r in &requests {
            for field in ["status", "complete", "ms", "sent_unix_ms", "attempts"] {
                assert!(r.get(field).is_some(), "{name}: no {field} in {r}");
            }
        }
        for (model, count) in s["provider_requests"].as_object().into_iter().flatten() {
            let attempts: u64 = (requests.iter())
                .filter_map(|r| r["attempts"][model.as_str()].as_u64())
                .sum();
            assert_eq!(
                count["received"].as_u64(),
                Some(attempts),
                "{name}: {model}'s requests are not all attempts of a client request"
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
    assert_client_requests_listed(&report);
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
    let column = results_table().remove(pinned.column).unwrap_or_default();
    let ran: Vec<&str> = scenarios.keys().map(String::as_str).collect();
    let stated: Vec<&str> = column.keys().map(String::as_str).collect();
    assert_eq!(
        ran, stated,
        "{}: docs/gateways.md's results table must give every scenario run a verdict",
        pinned.column
    );
    let want: Vec<&str> = (column.iter())
        .filter(|(_, fails)| **fails)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        failed, want,
        "{}: the scenarios that fail are not those docs/gateways.md's results table says (an \
         upgrade? a regression?)",
        pinned.column
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
    IgnoresRetryAfter,
    ReportsThePrimarysModel,
    /// Waits for an upstream's stream however long it takes: a timeout on the answer's
    /// start, none while the body streams.
    NoStallTimeout,
    /// Resumes a stream that failed part way on the fallback, the partial answer sent as
    /// the assistant's turn (a prefill), and passes on whatever the fallback answers.
    PrefillsTheFallback,
}

/// The test gateway's timeout, for an answer to start and (unless `NoStallTimeout`)
/// between two reads of its body: the scenarios' default `--gateway-timeout`.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

struct Gateway {
    broken: Broken,
    /// Its upstream client: no overall deadline, so that only the read timeout ends a
    /// stream that has started.
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
    let send = g
        .http
        .post(format!("{base}/chat/completions"))
        .json(&request)
        .send();
    let response = tokio::time::timeout(TIMEOUT, send).await.ok()?.ok()?;
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
    let retry = |status: u16| match g.broken {
        Broken::RetriesA2xx => (200..300).contains(&status),
        Broken::IgnoresRetryAfter => status == 429,
        _ => false,
    };
    if first.as_ref().is_some_and(|(s, _)| retry(*s)) {
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
    if g.broken == Broken::PrefillsTheFallback
        && stream
        && let Some((200, bytes)) = &first
    {
        let (status, bytes) = resume_on_fallback(&g, &body, bytes).await;
        return answer(status, bytes);
    }
    let next = if g.broken == Broken::FailsOverToRevoked {
        &g.revoked
    } else {
        &g.fallback
    };
    match call(&g, next, &body).await {
        Some((status, bytes)) if whole(status, &bytes, stream) => {
            if g.broken == Broken::ReportsThePrimarysModel {
                let named = String::from_utf8_lossy(&bytes)
                    .replace(r#""model":"fallback-mock""#, r#""model":"primary-mock""#);
                return answer(status, named.into_bytes());
            }
            answer(status, bytes)
        }
        _ => answer(
            502,
            br#"{"error":{"message":"every model failed","type":"server_error"}}"#.to_vec(),
        ),
    }
}

/// The request again, on the fallback, with the content `partial` streamed so far as the
/// assistant's turn: what the fallback answers, as it answers it.
async fn resume_on_fallback(g: &Gateway, body: &Bytes, partial: &[u8]) -> (u16, Vec<u8>) {
    let content: String = String::from_utf8_lossy(partial)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")?
                .as_str()
                .map(str::to_string)
        })
        .collect();
    let mut request: Value = serde_json::from_slice(body).unwrap_or_default();
    if let Some(messages) = request["messages"].as_array_mut() {
        messages.push(serde_json::json!({"role": "assistant", "content": content}));
    }
    let resumed = Bytes::from(request.to_string());
    call(g, &g.fallback, &resumed)
        .await
        .unwrap_or((502, b"{}".to_vec()))
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
    let http = reqwest::Client::builder().no_proxy();
    // A stall timeout equal to the request timeout: the time one read may take.
    let http = match broken {
        Broken::NoStallTimeout => http,
        _ => http.read_timeout(TIMEOUT),
    };
    let gateway = Arc::new(Gateway {
        broken,
        http: http.build().unwrap(),
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
    assert_client_requests_listed(&report);
    // The same JUnit as the orchestrator scenarios: one case per scenario, each client
    // request's fields as properties.
    let xml = std::fs::read_to_string(&xml).unwrap();
    let cases = report["scenarios"].as_array().unwrap().len();
    assert!(xml.contains(&format!("tests=\"{cases}\"")), "{xml}");
    assert!(xml.contains("failures=\"0\""), "{xml}");
    assert!(
        xml.contains(r#"<property name="client_request.1.first_attempt_ms""#),
        "{xml}"
    );

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

    // The request-level variants run only the scenarios that must catch them.
    let only = |names: &str| ["--only".to_string(), names.to_string()];
    let args = only("retry-after-honoured");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, report, stderr) = against_with(Broken::IgnoresRetryAfter, &args);
    assert_eq!(code, 1, "{stderr}");
    let reason = by_name(&report)["retry-after-honoured"]["outcome"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("primary was attempted again")
            && reason.contains("Retry-After: 2 (2000 ms)"),
        "{reason}"
    );

    let args = only("failover-on-500,accounting");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, report, stderr) = against_with(Broken::ReportsThePrimarysModel, &args);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        failed(&report),
        ["accounting", "failover-on-500"],
        "{report:#}"
    );
    for name in ["failover-on-500", "accounting"] {
        let reason = by_name(&report)[name]["outcome"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            reason.contains("the answer says model \"primary-mock\", but fallback served it"),
            "{name}: {reason}"
        );
    }

    // Only the stream faults: the others cannot tell this variant from the correct one.
    let (code, report, stderr) = against_with(
        Broken::NoStallTimeout,
        &[
            "--only",
            "slow-first-token,stall-mid-stream,malformed-event-mid-stream",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(failed(&report), ["stall-mid-stream"], "{report:#}");
    let stall = by_name(&report)["stall-mid-stream"].to_string();
    assert!(
        stall.contains("no stall (inter-chunk) timeout: it held the client for the whole stall"),
        "{stall}"
    );
    // It waited out the slow first token instead, which is no failure: the answer came.
    let slow = by_name(&report)["slow-first-token"].to_string();
    assert!(
        slow.contains("waited out the primary's 6000 ms silence"),
        "{slow}"
    );

    let (code, report, stderr) = against_with(
        Broken::PrefillsTheFallback,
        &["--only", "fallback-rejects-prefill"],
    );
    assert_eq!(code, 1, "{stderr}");
    let reason = by_name(&report)["fallback-rejects-prefill"]["outcome"]["reason"].to_string();
    assert!(
        reason.contains("the fallback's 400 refusing the gateway's assistant prefill"),
        "{reason}"
    );

    a_team_config_that_fails_over_to_the_revoked_candidate_is_caught_and_named();
}

/// The team's LiteLLM config, its fallback list for `primary` as given.
fn team_config(dir: &Path, fallbacks: &str) -> PathBuf {
    let mut text = String::from("model_list:\n");
    for name in ["primary", "fallback", "revoked"] {
        text.push_str(&format!(
            "  - model_name: {name}\n    litellm_params:\n      model: openai/{name}-mock\n"
        ));
    }
    text.push_str(&format!(
        "router_settings:\n  num_retries: 1\n  fallbacks: [{{\"primary\": {fallbacks}}}]\n"
    ));
    let path = dir.join("team.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn a_team_config_that_fails_over_to_the_revoked_candidate_is_caught_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("team.xml");
    let config = team_config(dir.path(), r#"["fallback", "revoked"]"#);
    let (config, xml) = (config.to_str().unwrap(), xml.to_str().unwrap());
    // The scenarios this config bears on: the rest run in the correct gateway's test.
    let args = [
        "--gateway-config",
        config,
        "--junit",
        xml,
        "--only",
        "failover-on-500,connection-refused",
    ];
    let (code, report, stderr) = against_with(Broken::None, &args);
    assert_eq!(code, 1, "{stderr}");
    let scenarios = by_name(&report);
    let gate = &scenarios["config-fallbacks-permitted"];
    assert_eq!(gate["outcome"]["status"], "failed", "{gate}");
    let reason = gate["outcome"]["reason"].to_string();
    assert!(
        reason.contains(
            "router_settings.fallbacks: the config fails over from primary to revoked, which \
             the allowlist does not permit: revoked ("
        ),
        "{reason}"
    );
    assert!(reason.contains("schema_additional_property"), "{reason}");
    // The gateway itself behaves: only the config is at fault, and scenarios that need a
    // model only conform's config has are skipped, not failed.
    assert_eq!(
        failed(&report),
        ["config-fallbacks-permitted"],
        "{report:#}"
    );
    let skipped = &scenarios["connection-refused"]["outcome"];
    assert_eq!(skipped["status"], "skipped", "{skipped}");
    let junit = std::fs::read_to_string(xml).unwrap();
    assert!(junit.contains("failures=\"1\""), "{junit}");
    assert!(junit.contains("from primary to revoked"), "{junit}");

    // A gateway that does go to the revoked model: its requests there fail the scenario.
    let config = team_config(dir.path(), r#"["fallback"]"#);
    let config = config.to_str().unwrap();
    let (code, report, stderr) = against_with(
        Broken::FailsOverToRevoked,
        &["--gateway-config", config, "--only", "failover-on-500"],
    );
    assert_eq!(code, 1, "{stderr}");
    let scenarios = by_name(&report);
    assert_eq!(
        scenarios["config-fallbacks-permitted"]["outcome"]["status"],
        "passed"
    );
    let reason = scenarios["failover-on-500"]["outcome"]["reason"].to_string();
    assert!(
        reason.contains("revoked received 1 request(s), expected 0"),
        "{reason}"
    );

    // A bad file: its name, line and field, and exit 2.
    std::fs::write(
        dir.path().join("team.yaml"),
        "model_list:\n  - model_name: x\n",
    )
    .unwrap();
    let (code, _, stderr) = against_with(Broken::None, &["--gateway-config", config]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("{config}: model_list[0]")),
        "{stderr}"
    );
    assert!(
        stderr.contains("missing field `litellm_params` at line 2"),
        "{stderr}"
    );
}
