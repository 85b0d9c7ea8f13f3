//! Harness overhead: N calls to a mock provider with a fixed 50 ms latency at
//! concurrency 64. Prints wall time ÷ floor and the runner's peak RSS. The floor is
//! what a harness with no cost at all would take: ⌈N ÷ concurrency⌉ waves of one
//! latency each.
//!
//! `cargo bench --bench run_throughput -- 1000 10000 100000`
//!
//! The mock runs in a child process and each size in a fresh child process, so the
//! peak RSS printed is the runner's alone.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conform::config::{ProviderConfig, Suite};
use conform::provider::transport::{Endpoint, Transport};
use conform::provider::wire_format;
use conform::run::{self, RunOptions, Target};
use serde_json::json;

const LATENCY: Duration = Duration::from_millis(50);
const CONCURRENCY: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("--mock") => mock(),
        Some("--one") => one(args[1].parse().expect("calls"), &args[2]),
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

fn orchestrate(sizes: &[u64]) {
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
    let uri = line.trim().to_string();
    println!("mock provider at {uri}, latency {LATENCY:?}, concurrency {CONCURRENCY}");
    println!(
        "{:>8}  {:>9}  {:>9}  {:>6}  {:>9}  {:>8}",
        "calls", "wall", "floor", "ratio", "calls/s", "peak RSS"
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

/// A mock OpenAI-compatible provider that answers a valid object after `LATENCY`.
fn mock() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        use wiremock::matchers::method;
        use wiremock::{Mock, MockServer, ResponseTemplate};
        let server = MockServer::builder().disable_request_recording().start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_delay(LATENCY)
                    .set_body_json(json!({
                        "id": "chatcmpl-bench", "object": "chat.completion", "model": "bench-model",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "{\"label\":\"ok\",\"score\":0.9}"}}],
                        "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}})),
            )
            .mount(&server)
            .await;
        println!("{}", server.uri());
        std::future::pending::<()>().await;
    });
}

/// One size, measured in its own process.
fn one(calls: u64, uri: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let suite_dir = dir.path().join("fixtures/bench");
    write_suite(&suite_dir, calls);
    let suite = Suite::load(&suite_dir).expect("suite");
    let provider = ProviderConfig::parse(
        &dir.path().join("providers/bench.toml"),
        &format!(
            "kind = \"openai-compatible\"\nmodel = \"bench-model\"\nbase_url = \"{uri}\"\ntimeout = \"30s\"\n[limits]\nconcurrency = {CONCURRENCY}\n"
        ),
    )
    .expect("provider");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let started = Instant::now();
    let result = rt.block_on(async {
        let suites = run::prepare(vec![suite]).expect("prepare");
        let transport = Transport::new().expect("transport");
        let wire = wire_format(provider.kind);
        let targets = vec![Arc::new(Target::new(Endpoint::new(
            Arc::new(provider),
            wire,
            None,
            transport,
        )))];
        let options = RunOptions {
            run_id: "bench".into(),
            dir: dir.path().join("reports/bench"),
            repeats: None,
            max_transport_error_share: 0.1,
            progress: false,
            shard: None,
            budget: None,
        };
        let started = Instant::now();
        let result = run::execute(&suites, &targets, &options, std::future::pending())
            .await
            .expect("run");
        (result, started.elapsed())
    });
    let _ = started;
    let (result, wall) = result;
    let passed: u64 = result.verdicts.iter().map(|v| v.tally.passed).sum();
    assert_eq!(
        passed, calls,
        "every call must pass for the measurement to count"
    );
    let floor = LATENCY.as_secs_f64() * calls.div_ceil(CONCURRENCY as u64) as f64;
    println!(
        "{calls:>8}  {:>8.2}s  {:>8.2}s  {:>6.3}  {:>9.0}  {:>5} MiB",
        wall.as_secs_f64(),
        floor,
        wall.as_secs_f64() / floor,
        calls as f64 / wall.as_secs_f64(),
        peak_rss_kib() / 1024
    );
}

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
            json!({"vars": {"text": format!("message number {i}: the parcel arrived on time")}})
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
