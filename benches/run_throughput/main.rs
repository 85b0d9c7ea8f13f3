//! Harness overhead: N calls to a mock provider with a fixed 50 ms latency at
//! concurrency 64. Prints wall time ÷ floor and the runner's peak RSS. The floor is
//! what a harness with no cost at all would take: ⌈N ÷ concurrency⌉ waves of one
//! latency each.
//!
//! `cargo bench --bench run_throughput -- 1000 10000 100000`
//!
//! The wall time is the run's; the peak RSS also covers `report.json` and `junit.xml`,
//! written after it from `results.jsonl`.
//!
//! The mock (`mock.rs`) runs in a child process and each size in a fresh child process,
//! so the peak RSS printed is the runner's alone.
//!
//! `cargo bench --bench run_throughput -- --sim 1000 10000 100000`: the same calls to a
//! simulated provider (`kind = "sim"`, 50 ms) served in the runner's process, so the peak
//! RSS printed is the runner's and the simulation's together; `--sim-wiremock` serves the
//! same answer from a wiremock mock in the process instead (request recording disabled),
//! which is what the simulations were built on before and what grew with every call.
//!
//! `cargo bench --bench run_throughput -- --e2e 1000 10000 100000` runs the `conform`
//! binary itself, end to end (`conform run`: suite load and pre-flight, the calls, every
//! report written: report.json, report.html, summary.md, junit.xml, the allowlist), one
//! process per size, and reads the child's own resource usage (`wait4`): its CPU time
//! (user + system) per call and its peak RSS, and the mean latency `conform` recorded for
//! a call (the provider's 50 ms plus the loopback's and the client's share of it).
//! `--e2e --sim N…` does the same with a simulated provider (`kind = "sim"`), served
//! inside the `conform` process. `RUN_THROUGHPUT_CONFORM=PATH` measures another build of
//! `conform` instead of this one's (to compare two commits on the same machine). Each
//! size's project is made once under `target/tmp/run_throughput/` and kept for the next
//! bench (see `e2e_project`).
//!
//! `cargo bench --bench run_throughput -- --paced` runs `conform run` end to end against
//! an account's rate limits, with no `[limits]` in the provider file: 240 calls to a mock
//! (in its own process) that enforces a token bucket of 10 requests a second (bucket of
//! 10), then one of tokens per minute (ten calls' worth a second, a bucket of ten calls'
//! worth), then one of 600 requests a minute stated as OpenAI states it (the minute's
//! limit, what is left of it) and enforced over short windows (10 a second, a bucket of
//! 10: issue 46's account), answers 50 ms after a request arrives (or
//! `RUN_THROUGHPUT_LATENCY_MS`), sends OpenAI's `x-ratelimit-*` headers
//! on every answer and `retry-after-ms` on a 429 (`tests/common/rate_limited.rs`; served
//! by wiremock on its own thread in the bench's process, `conform` in a child). The
//! floor is what the bucket allows: the first bucket at once, the rest at its refill, and
//! one latency. Prints the wall time ÷ floor and the share of requests answered 429. A
//! third run states the request limit only in its 429s (no headers, as Gemini).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conform::run::{self, RunOptions, Target};
use conform_config::{ProviderConfig, Suite};
use conform_wire::provider::transport::{Endpoint, Transport};
use conform_wire::provider::wire_format;
use serde_json::json;

mod mock;
#[path = "../../tests/common/rate_limited.rs"]
mod rate_limited;

/// The mock's latency: 50 ms, or `RUN_THROUGHPUT_LATENCY_MS` (0 measures the harness's
/// CPU per call alone).
fn latency() -> Duration {
    let ms = std::env::var("RUN_THROUGHPUT_LATENCY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    Duration::from_millis(ms)
}
const CONCURRENCY: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("--mock") => mock::serve(latency()),
        Some("--paced") => paced(),
        Some("--one") => one(args[1].parse().expect("calls"), &args[2]),
        Some(mode @ ("--sim" | "--sim-wiremock")) => {
            let exe = std::env::current_exe().expect("own path");
            println!(
                "in-process server ({mode}), latency {:?}, concurrency {CONCURRENCY}",
                latency()
            );
            println!(
                "{:>8}  {:>9}  {:>9}  {:>6}  {:>9}  {:>8}  {:>10}",
                "calls", "wall", "floor", "ratio", "calls/s", "peak RSS", "CPU/call"
            );
            for n in &args[1..] {
                let out = Command::new(&exe)
                    .args([&format!("{mode}-one"), n])
                    .output()
                    .expect("run one size");
                print!("{}", String::from_utf8_lossy(&out.stdout));
                if !out.status.success() {
                    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
                }
            }
        }
        Some("--e2e") => {
            let sim = args.get(1).is_some_and(|a| a == "--sim");
            let sizes: Vec<u64> = args[1 + usize::from(sim)..]
                .iter()
                .map(|a| a.parse().expect("a number of calls"))
                .collect();
            e2e(&sizes, sim);
        }
        Some("--sim-one") => one_in_process(args[1].parse().expect("calls"), false),
        Some("--sim-wiremock-one") => one_in_process(args[1].parse().expect("calls"), true),
        _ => {
            let sizes: Vec<u64> = if args.is_empty() {
                vec![1_000, 10_000]
            } else {
                args.iter()
                    .map(|a| a.parse().expect("a number of calls"))
                    .collect()
            };
            orchestrate(&sizes);
        }
    }
}

/// Starts the mock in its own process; returns it and its address.
fn start_mock() -> (std::process::Child, String) {
    let exe = std::env::current_exe().expect("own path");
    let mut mock = Command::new(&exe)
        .arg("--mock")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the mock");
    let mut line = String::new();
    BufReader::new(mock.stdout.take().expect("mock stdout"))
        .read_line(&mut line)
        .expect("mock address");
    (mock, line.trim().to_string())
}

/// The `conform` binary end to end, one child process per size.
fn e2e(sizes: &[u64], sim: bool) {
    // Another build of `conform` may be measured against the same mock and cases (an A/B
    // of two commits, run alternately): `RUN_THROUGHPUT_CONFORM=path/to/conform`.
    let exe = std::env::var("RUN_THROUGHPUT_CONFORM")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_conform").to_string());
    let mock = (!sim).then(start_mock);
    let provider = match &mock {
        Some((_, uri)) => format!(
            "kind = \"openai-compatible\"\nmodel = \"bench-model\"\nbase_url = \"{uri}\"\ntimeout = \"30s\"\n[limits]\nconcurrency = {CONCURRENCY}\n"
        ),
        None => format!(
            "kind = \"sim\"\nmodel = \"bench-model\"\ntimeout = \"30s\"\n[limits]\nconcurrency = {CONCURRENCY}\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nlatency = \"{}ms\"\nwire = \"openai-compatible\"\n",
            latency().as_millis()
        ),
    };
    println!(
        "conform run, end to end, against {}, latency {:?}, concurrency {CONCURRENCY}",
        match &mock {
            Some((_, uri)) => format!("the mock at {uri}"),
            None => "a simulated provider in the process".to_string(),
        },
        latency()
    );
    println!(
        "{:>8}  {:>9}  {:>9}  {:>9}  {:>7}  {:>7}  {:>9}  {:>8}  {:>10}  {:>10}",
        "calls",
        "process",
        "run",
        "floor",
        "process÷floor",
        "run÷floor",
        "calls/s",
        "peak RSS",
        "CPU/call",
        "latency"
    );
    for &n in sizes {
        let root = e2e_project(n);
        std::fs::write(root.join("providers/bench.toml"), &provider).expect("provider file");
        let started = Instant::now();
        let child = Command::new(&exe)
            .arg("--root")
            .arg(&root)
            .args(["run", "bench", "--no-progress"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start conform");
        let (status, usage) = wait4(child);
        let wall = started.elapsed();
        assert_eq!(status, 0, "conform run must exit 0 (every call conformant)");
        let reports = root.join("reports");
        let run = std::fs::read_dir(&reports)
            .expect("reports dir")
            .filter_map(Result::ok)
            .find(|e| e.path().join("report.json").is_file())
            .expect("a run folder")
            .path();
        for file in ["report.json", "report.html", "summary.md", "junit.xml"] {
            assert!(run.join(file).is_file(), "{file} written");
        }
        let results = std::fs::read_to_string(run.join("results.jsonl")).expect("results.jsonl");
        let latencies: Vec<f64> = results
            .lines()
            .map(|line| {
                let record: serde_json::Value = serde_json::from_str(line).expect("a record");
                record["latency_ms"].as_f64().expect("latency_ms")
            })
            .collect();
        assert_eq!(latencies.len() as u64, n, "one record per call");
        let mean_latency = latencies.iter().sum::<f64>() / n as f64;
        let floor = latency().as_secs_f64() * n.div_ceil(CONCURRENCY as u64) as f64;
        let run_wall = run_seconds(&run.join("report.json"));
        let ratio = |t: f64| {
            if floor > 0.0 {
                format!("{:.3}", t / floor)
            } else {
                "-".into()
            }
        };
        let cpu = usage.cpu.as_secs_f64();
        println!(
            "{n:>8}  {:>8.2}s  {:>8.2}s  {:>8.2}s  {:>13}  {:>9}  {:>9.0}  {:>5} MiB  {:>7.1} µs  {:>7.2} ms",
            wall.as_secs_f64(),
            run_wall,
            floor,
            ratio(wall.as_secs_f64()),
            ratio(run_wall),
            n as f64 / wall.as_secs_f64(),
            usage.max_rss_kib / 1024,
            cpu * 1e6 / n as f64,
            mean_latency
        );
    }
    if let Some((mut mock, _)) = mock {
        let _ = mock.kill();
        let _ = mock.wait();
    }
}

/// The project of `n` cases the end-to-end runs use, made once and kept under the target
/// folder (`target/tmp/run_throughput/e2e-N`): each run removes only the reports and the
/// allowlist of the run before it. Projects made in a temporary folder and deleted when
/// the bench ended charged the next bench's runs: on ext4 without a journal, a new file's
/// inode is chosen past every inode freed in the last minutes, and after the 111,000 case
/// files of the bench before were deleted, 1,000 calls cost 46–72 µs of CPU each instead
/// of 35–41 (BENCHMARKS.md, "A tenth machine").
fn e2e_project(n: u64) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("run_throughput")
        .join(format!("e2e-{n}"));
    // Written last, once every case is: a bench stopped while writing starts again, and
    // a project of an older `write_suite` is made again.
    let made = root.join("complete");
    if std::fs::read_to_string(&made).ok().as_deref() != Some(SUITE_VERSION) {
        let _ = std::fs::remove_dir_all(&root);
        write_suite(&root.join("fixtures/bench"), n);
        std::fs::create_dir_all(root.join("providers")).expect("providers dir");
        std::fs::write(&made, SUITE_VERSION).expect("marker");
    }
    // Each run starts as the first did: no reports, no allowlist.
    for removed in [
        std::fs::remove_dir_all(root.join("reports")),
        std::fs::remove_file(root.join("allowlist.json")),
    ] {
        if let Err(e) = removed
            && e.kind() != std::io::ErrorKind::NotFound
        {
            panic!(
                "cannot remove the last run's output in {}: {e}",
                root.display()
            );
        }
    }
    root
}

/// The run's own wall time, from its first call to its last record (report.json's
/// `run.started_at` and `run.finished_at`): the process's less its start (loading and the
/// pre-flight of every case) and the reports written after.
fn run_seconds(report: &Path) -> f64 {
    use std::io::Read;
    // The run's times come first; the calls (all of them) follow.
    let mut head = String::new();
    std::fs::File::open(report)
        .expect("report.json")
        .take(4096)
        .read_to_string(&mut head)
        .expect("report.json head");
    let at = |field: &str| {
        let from = head.find(&format!("\"{field}\":")).expect(field) + field.len() + 3;
        let text = head[from..].trim_start().trim_start_matches('"');
        let end = text.find('"').expect("closing quote");
        time::OffsetDateTime::parse(&text[..end], &time::format_description::well_known::Rfc3339)
            .expect("an RFC 3339 time")
    };
    (at("finished_at") - at("started_at")).as_seconds_f64()
}

/// What a child used: CPU (user + system) and its peak resident set.
struct Usage {
    cpu: Duration,
    max_rss_kib: u64,
}

/// Waits for `child` and returns its exit code and its own resource usage (not that of
/// every child this process has waited for, as `getrusage(RUSAGE_CHILDREN)` would).
fn wait4(child: std::process::Child) -> (i32, Usage) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value, and wait4 writes only the two
    // locals it is given, for a child of this process that nothing else waits for.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    // Dropping a Child neither kills nor waits for it: it is reaped above.
    drop(child);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (
        code,
        Usage {
            cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
            max_rss_kib: usage.ru_maxrss as u64,
        },
    )
}

fn orchestrate(sizes: &[u64]) {
    let exe = std::env::current_exe().expect("own path");
    let (mut mock, uri) = start_mock();
    println!(
        "mock provider at {uri}, latency {:?}, concurrency {CONCURRENCY}",
        latency()
    );
    println!(
        "{:>8}  {:>9}  {:>9}  {:>6}  {:>9}  {:>8}  {:>10}",
        "calls", "wall", "floor", "ratio", "calls/s", "peak RSS", "CPU/call"
    );
    for &n in sizes {
        let out = Command::new(&exe)
            .args(["--one", &n.to_string(), &uri])
            .output()
            .expect("run one size");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        if !out.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let _ = mock.kill();
    let _ = mock.wait();
}

/// One size against a provider served in this process: a simulation, or the wiremock
/// mock the simulations used to be built on.
fn one_in_process(calls: u64, wiremock: bool) {
    let (dir, suite) = bench_suite(calls);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (result, wall) = rt.block_on(async {
        let suites = run::prepare(vec![suite], run::Keep::CaseBytes).expect("prepare");
        let sim_config = ProviderConfig::parse(
            &dir.path().join("providers/sim.toml"),
            &format!(
                "kind = \"sim\"\nmodel = \"bench-model\"\ntimeout = \"30s\"\n[limits]\nconcurrency = {CONCURRENCY}\n[sim]\nbehaviour = \"steady\"\nexpect = \"conformant\"\nlatency = \"{}ms\"\nwire = \"openai-compatible\"\n",
                latency().as_millis()
            ),
        )
        .expect("sim provider");
        // Both servers are kept alive until the run ends.
        let (_sim, _mock, uri) = if wiremock {
            let mock = mock::wiremock(latency()).await;
            let uri = mock.uri();
            (None, Some(mock), uri)
        } else {
            let refs: Vec<&Suite> = suites.iter().map(|s| &s.suite).collect();
            let book = conform_wire::sim::AnswerBook::from_suites(&refs).expect("answer book");
            let sim = conform_wire::sim::SimServer::start(&sim_config, Arc::new(book))
                .await
                .expect("a simulated provider");
            let uri = sim.uri();
            (Some(sim), None, uri)
        };
        run_against(dir.path(), &suites, &uri).await
    });
    print_one(calls, &result, wall);
}

/// A project in a temporary folder with the bench's suite of `calls` cases, loaded.
fn bench_suite(calls: u64) -> (tempfile::TempDir, Suite) {
    let dir = tempfile::tempdir().expect("temp dir");
    let suite_dir = dir.path().join("fixtures/bench");
    write_suite(&suite_dir, calls);
    let suite = Suite::load(&suite_dir).expect("suite");
    (dir, suite)
}

/// One size, measured in its own process.
fn one(calls: u64, uri: &str) {
    let (dir, suite) = bench_suite(calls);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (result, wall) = rt.block_on(async {
        let suites = run::prepare(vec![suite], run::Keep::CaseBytes).expect("prepare");
        run_against(dir.path(), &suites, uri).await
    });
    print_one(calls, &result, wall);
}

/// Runs `suites` against the OpenAI-compatible server at `uri`, then writes report.json and
/// junit.xml, so the peak RSS printed covers them. The wall time is the run's alone.
async fn run_against(
    dir: &Path,
    suites: &[Arc<run::PreparedSuite>],
    uri: &str,
) -> (run::RunResult, Duration) {
    let provider = ProviderConfig::parse(
        &dir.join("providers/bench.toml"),
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"bench-model\"\nbase_url = \"{uri}\"\ntimeout = \"30s\"\n[limits]\nconcurrency = {CONCURRENCY}\n"
        ),
    )
    .expect("provider");
    let wire = wire_format(provider.kind);
    let transport = Transport::new().expect("transport");
    let targets = vec![Arc::new(Target::new(Endpoint::new(
        Arc::new(provider),
        wire,
        None,
        transport,
    )))];
    let options = RunOptions {
        run_id: "bench".into(),
        dir: dir.join("reports/bench"),
        repeats: None,
        max_transport_error_share: 0.1,
        progress: false,
        shard: None,
        budget: None,
        every_call: true,
        resume: None,
        asked: None,
    };
    // Writing the cases and loading the suite are not the run's cost.
    let _ = CPU_AT_START.set(cpu_seconds());
    let started = Instant::now();
    let result = run::execute(suites, &targets, &options, std::future::pending())
        .await
        .expect("run");
    let wall = started.elapsed();
    conform::report::json::write(&result, suites, &targets).expect("report.json");
    conform::report::junit::write(&result.dir, &result.run_id).expect("junit.xml");
    (result, wall)
}

fn print_one(calls: u64, result: &run::RunResult, wall: Duration) {
    let passed: u64 = result.verdicts.iter().map(|v| v.tally.passed).sum();
    assert_eq!(
        passed, calls,
        "every call must pass for the measurement to count"
    );
    let floor = latency().as_secs_f64() * calls.div_ceil(CONCURRENCY as u64) as f64;
    println!(
        "{calls:>8}  {:>8.2}s  {:>8.2}s  {:>6.3}  {:>9.0}  {:>5} MiB  {:>7.1} µs",
        wall.as_secs_f64(),
        floor,
        wall.as_secs_f64() / floor,
        calls as f64 / wall.as_secs_f64(),
        peak_rss_kib() / 1024,
        (cpu_seconds() - CPU_AT_START.get().copied().unwrap_or(0.0)) * 1e6 / calls as f64
    );
}

/// Changed with whatever [`write_suite`] writes, so that kept projects are made again.
const SUITE_VERSION: &str = "1";

fn write_suite(dir: &Path, cases: u64) {
    std::fs::create_dir_all(dir.join("cases")).expect("suite dir");
    std::fs::write(
        dir.join("suite.toml"),
        "system = \"Label the text. Answer with JSON only.\"\nuser = \"Text: {{ text }}\"\n",
    )
    .expect("suite.toml");
    let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "additionalProperties": false, "required": ["label", "score"],
        "properties": {"label": {"type": "string", "enum": ["ok", "spam"]}, "score": {"type": "number"}}});
    std::fs::write(dir.join("schema.json"), schema.to_string()).expect("schema");
    for i in 0..cases {
        std::fs::write(
            dir.join(format!("cases/{i:06}.json")),
            json!({"vars": {"text": format!("message number {i}: the parcel arrived on time")},
                   "expected": {"label": "ok", "score": 0.9}})
            .to_string(),
        )
        .expect("case");
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

static CPU_AT_START: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// User + system CPU time of this process so far (`/proc/self/stat`, clock ticks of
/// 10 ms): the runner's, and the simulation's when it runs in the process.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The fields after the command name, which is in parentheses.
            let rest = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

/// 240 calls, as issue 35 states the bar.
const PACED_CALLS: u64 = 240;
/// The output ceiling each paced call asks for: what a call is charged besides its text.
const PACED_MAX_TOKENS: u64 = 64;

/// What one bench case is charged against tokens per minute, as the mock charges it.
fn paced_cost(i: u64) -> f64 {
    let system = "Label the text. Answer with JSON only.";
    let user = format!("Text: message number {i}: the parcel arrived on time");
    ((system.len() + user.len()) / 4) as f64 + PACED_MAX_TOKENS as f64
}

/// Answers as the rate-limited mock says, after the bench's latency.
struct Delayed(Arc<rate_limited::RateLimited>, Duration);

impl wiremock::Respond for Delayed {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        self.0.respond(request).set_delay(self.1)
    }
}

/// `conform run` against a request limit, then a token limit, with no `[limits]`.
fn paced() {
    let exe = std::env::var("RUN_THROUGHPUT_CONFORM")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_conform").to_string());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let per_second = 10.0;
    let costs: Vec<f64> = (0..PACED_CALLS).map(paced_cost).collect();
    let mean_cost = costs.iter().sum::<f64>() / PACED_CALLS as f64;
    println!(
        "conform run, end to end, {PACED_CALLS} calls, no [limits], against a token bucket; latency {:?}",
        latency()
    );
    // `RUN_THROUGHPUT_PACED_CONCURRENCY=4` states a concurrency in the provider file: the
    // fixed cap every run had before the calls in flight adapted.
    let stated = std::env::var("RUN_THROUGHPUT_PACED_CONCURRENCY")
        .ok()
        .map(|n| format!("\n[limits]\nconcurrency = {n}\n"))
        .unwrap_or_default();
    if !stated.is_empty() {
        println!("the provider file states:{stated}");
    }
    println!(
        "{:>28}  {:>9}  {:>9}  {:>7}  {:>9}  {:>6}  {:>7}  {:>9}",
        "limit", "wall", "floor", "ratio", "requests", "429", "429 %", "in flight"
    );
    for dimension in ["requests", "per minute", "tokens", "429s only"] {
        let limit = |unit: f64| rate_limited::Limit {
            capacity: per_second * unit,
            per_second: per_second * unit,
        };
        let answer = r#"{"label":"ok","score":0.9}"#;
        let (limits, floor, what) = match dimension {
            "429s only" => (
                rate_limited::RateLimited::new(Some(limit(1.0)), None, answer).unstated(),
                (PACED_CALLS as f64 - per_second) / per_second,
                format!("{per_second} req/s, no headers"),
            ),
            "requests" => (
                rate_limited::RateLimited::new(Some(limit(1.0)), None, answer),
                (PACED_CALLS as f64 - per_second) / per_second,
                format!("{per_second} req/s, bucket {per_second}"),
            ),
            "per minute" => (
                rate_limited::RateLimited::per_minute(per_second * 60.0, answer),
                (PACED_CALLS as f64 - per_second) / per_second,
                format!("{} req/min, {per_second} at once", per_second * 60.0),
            ),
            _ => {
                let rate = per_second * mean_cost;
                let total: f64 = costs.iter().sum();
                (
                    rate_limited::RateLimited::new(None, Some(limit(mean_cost)), answer),
                    (total - rate) / rate,
                    format!("{:.0} tok/min, bucket {:.0}", rate * 60.0, rate),
                )
            }
        };
        let floor = floor + latency().as_secs_f64();
        let limits = Arc::new(limits);
        let server = rt.block_on(async {
            let server = wiremock::MockServer::builder()
                .disable_request_recording()
                .start()
                .await;
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .respond_with(Delayed(Arc::clone(&limits), latency()))
                .mount(&server)
                .await;
            server
        });
        let root = e2e_project(PACED_CALLS);
        std::fs::write(
            root.join("providers/bench.toml"),
            format!(
                "kind = \"openai-compatible\"\nmodel = \"bench-model\"\nbase_url = \"{}\"\nmax_output_tokens = {PACED_MAX_TOKENS}\n\n[tokenizer]\nkind = \"none\"\n{stated}",
                server.uri()
            ),
        )
        .expect("provider file");
        let started = Instant::now();
        let status = Command::new(&exe)
            .arg("--root")
            .arg(&root)
            .args(["run", "bench", "--no-progress"])
            .stdout(Stdio::null())
            .status()
            .expect("run conform");
        let wall = started.elapsed().as_secs_f64();
        assert!(
            status.success(),
            "conform run must exit 0 (every call conformant)"
        );
        let (received, answered, throttled) = limits.counts();
        assert_eq!(answered, PACED_CALLS, "every call answered once");
        // Requests that arrived closer together than an answer takes were in flight at once.
        let in_flight = limits.most_arrived_within(latency().mul_f64(0.9));
        println!(
            "{what:>28}  {wall:>8.2}s  {floor:>8.2}s  {:>7.3}  {received:>9}  {throttled:>6}  {:>6.2}%  {in_flight:>9}",
            wall / floor,
            throttled as f64 * 100.0 / received as f64
        );
        drop(server);
    }
}
