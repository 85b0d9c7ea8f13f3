//! `conform serve` under hostile load, measured from outside the process: the figures of
//! issue 12 and the soak. Each case starts a fresh `conform serve` (a release build of
//! this crate, or `CONFORM_SERVE_BIN`) on SQLite in a temporary directory, with a mock
//! provider that answers at once, and reads the server's memory and descriptors from
//! `/proc`.
//!
//! ```text
//! cargo bench --bench serve_load -- memory          # peak and settled RSS under big bodies
//! cargo bench --bench serve_load -- slow            # 1,000 stalled connections
//! cargo bench --bench serve_load -- soak 300 sqlite # mixed traffic for 300 s (or postgres)
//! ```
//!
//! `SERVE_LOAD_ENV="CONFORM_MAX_IN_FLIGHT=64 …"` passes settings to the server;
//! `SERVE_LOAD_DATABASE=postgres` runs `memory` and `slow` on PostgreSQL instead.

mod served;
mod soak;
mod upstream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use served::{Served, mib, serve_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use upstream::Upstream;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let what = args.first().map(String::as_str).unwrap_or("memory");
    runtime.block_on(async {
        match what {
            "memory" => memory().await,
            "slow" => slow().await,
            "soak" => {
                let seconds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(120);
                let backend = args.get(2).map(String::as_str).unwrap_or("sqlite");
                soak_bench(seconds, backend).await
            }
            other => eprintln!("unknown case `{other}`: memory, slow or soak"),
        }
    });
}

/// `SERVE_LOAD_ENV`, as variables for the server.
fn extra_env() -> Vec<(&'static str, String)> {
    let text = std::env::var("SERVE_LOAD_ENV").unwrap_or_default();
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (&*Box::leak(k.to_string().into_boxed_str()), v.to_string()))
        .collect()
}

/// A fresh server on SQLite in `dir`, or on a fresh PostgreSQL schema when
/// `SERVE_LOAD_DATABASE=postgres`; the schema, if any, is for [`finish`] to drop.
async fn start(dir: &std::path::Path, upstream: &Upstream) -> (Served, Option<String>) {
    let (url, schema) = if std::env::var("SERVE_LOAD_DATABASE").is_ok_and(|v| v == "postgres") {
        let (url, schema) = soak::postgres_schema().await;
        (url, Some(schema))
    } else {
        (
            format!("sqlite://{}", dir.join("ledger.db").display()),
            None,
        )
    };
    let served = Served::start(
        &serve_bin(),
        dir,
        &format!("primary={}", upstream.uri()),
        &url,
        &extra_env(),
    );
    (served, schema)
}

/// Stops the server and drops its PostgreSQL schema.
async fn finish(served: Served, schema: Option<String>) {
    drop(served);
    if let Some(schema) = schema {
        soak::drop_schema(&schema).await;
    }
}

/// A job body of about `size` bytes: one user message of invoice lines.
pub fn job_body(tag: &str, directive: &str, size: usize) -> Vec<u8> {
    let line = "Invoice INV-2041 line: 3 x widget at 12.50 EUR. ";
    let mut text = format!("{tag} {directive} ");
    while text.len() + line.len() < size.saturating_sub(120) {
        text.push_str(line);
    }
    serde_json::json!({"task": "invoice-extraction", "provider": "primary",
        "input": {"messages": [{"role": "user", "content": text}], "temperature": 0}})
    .to_string()
    .into_bytes()
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .retry(reqwest::retry::never())
        .timeout(Duration::from_secs(120))
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client")
}

/// `201×40, 503×60, error×0`.
fn histogram(outcomes: &[Result<u16, String>]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for o in outcomes {
        let key = match o {
            Ok(status) => status.to_string(),
            Err(_) => "no answer".to_string(),
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn memory() {
    let upstream = Upstream::start().await;
    println!(
        "serve_load memory: {} (fresh server per case, SQLite)",
        serve_bin().display()
    );
    println!(
        "{:>6} {:>9} {:>8} {:>10} {:>10} {:>10} {:>9}  answers",
        "conc", "body", "wall", "idle RSS", "peak RSS", "RSS +2 s", "RSS +5 s"
    );
    let cases: [(usize, usize); 6] = [
        (1, 2_000_000),
        (10, 2_000_000),
        (40, 2_000_000),
        (100, 2_000_000),
        (100, 100_000),
        (1000, 100_000),
    ];
    for (n, size) in cases {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (served, schema) = start(dir.path(), &upstream).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = served.rss_kib();
        let http = client();
        let bodies: Vec<Vec<u8>> = (0..n)
            .map(|i| job_body(&format!("soaktag{i}"), "do:ok", size))
            .collect();
        let started = Instant::now();
        let tasks: Vec<_> = bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                let http = http.clone();
                let url = format!("{}/v1/jobs", served.base);
                tokio::spawn(async move {
                    let sent = http
                        .post(url)
                        .header("x-owner-id", "load")
                        .header("idempotency-key", format!("k{i}"))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await;
                    match sent {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let _ = r.bytes().await;
                            Ok(status)
                        }
                        Err(e) => Err(e.to_string()),
                    }
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(n);
        for t in tasks {
            outcomes.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
        }
        let wall = started.elapsed();
        let ended = Instant::now();
        tokio::time::sleep_until((ended + Duration::from_secs(2)).into()).await;
        let after2 = served.rss_kib();
        tokio::time::sleep_until((ended + Duration::from_secs(5)).into()).await;
        let after5 = served.rss_kib();
        println!(
            "{:>6} {:>7.1}MB {:>7.2}s {:>6.1} MiB {:>6.1} MiB {:>6.1} MiB {:>5.1} MiB  {}",
            n,
            size as f64 / 1e6,
            wall.as_secs_f64(),
            mib(idle),
            mib(served.peak_kib()),
            mib(after2),
            mib(after5),
            histogram(&outcomes)
        );
        finish(served, schema).await;
    }
}

/// How a stalled connection ended, as its client saw it.
#[derive(Debug, Clone)]
struct Ending {
    after: Option<Duration>,
    /// `408 application/problem+json`, or `closed` without an answer.
    answer: String,
}

async fn stall(addr: String, announce_body: bool, watch: Duration) -> Ending {
    let Ok(mut stream) = TcpStream::connect(&addr).await else {
        return Ending {
            after: Some(Duration::ZERO),
            answer: "connect failed".into(),
        };
    };
    let head = if announce_body {
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: slow\r\nIdempotency-Key: s\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            .to_string()
    } else {
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Owner-Id: slow\r\n".to_string()
    };
    let started = Instant::now();
    if stream.write_all(head.as_bytes()).await.is_err() {
        return Ending {
            after: Some(Duration::ZERO),
            answer: "write failed".into(),
        };
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + watch).into(), stream.read(&mut buf)).await {
            Err(_) => {
                return Ending {
                    after: None,
                    answer: "still open".into(),
                };
            }
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            Ok(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&got);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("");
    let content_type = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type").then(|| v.trim())
        })
        .unwrap_or("");
    Ending {
        after: Some(started.elapsed()),
        answer: if got.is_empty() {
            "closed without an answer".into()
        } else {
            format!("{status} {content_type}")
        },
    }
}

/// One request on a fresh connection; answers its status and latency.
async fn timed(request: reqwest::RequestBuilder) -> (u16, Duration) {
    let started = Instant::now();
    let status = match request.send().await {
        Ok(r) => {
            let s = r.status().as_u16();
            let _ = r.bytes().await;
            s
        }
        Err(_) => 0,
    };
    (status, started.elapsed())
}

async fn slow() {
    const STALLED: usize = 1000;
    const WATCH: Duration = Duration::from_secs(45);
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (served, schema) = start(dir.path(), &upstream).await;
    println!(
        "serve_load slow: {} ({STALLED} stalled connections: half stop inside the headers, half \
         announce a 1000-byte body and send none; watched for {} s)",
        serve_bin().display(),
        WATCH.as_secs()
    );
    let idle_fds = served.fds();
    let stalls: Vec<_> = (0..STALLED)
        .map(|i| tokio::spawn(stall(served.addr.clone(), i % 2 == 1, WATCH)))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let held_fds = served.fds();
    let http = client();
    let mut health = Vec::new();
    for _ in 0..20 {
        health.push(timed(http.get(format!("{}/healthz", served.base))).await);
    }
    let mut creations = Vec::new();
    for i in 0..10 {
        let request = http
            .post(format!("{}/v1/jobs", served.base))
            .header("x-owner-id", "fresh")
            .header("idempotency-key", format!("fresh-{i}"))
            .header("content-type", "application/json")
            .body(job_body(&format!("soaktag{i}"), "do:ok", 300));
        creations.push(timed(request).await);
    }
    let describe = |v: &[(u16, Duration)]| {
        let mut ms: Vec<f64> = v.iter().map(|(_, d)| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let statuses: Vec<u16> = v.iter().map(|(s, _)| *s).collect();
        format!(
            "median {:.1} ms, max {:.1} ms, statuses {:?}",
            ms[ms.len() / 2],
            ms[ms.len() - 1],
            statuses
                .iter()
                .fold(BTreeMap::<u16, usize>::new(), |mut m, s| {
                    *m.entry(*s).or_default() += 1;
                    m
                })
        )
    };
    println!("server fds: {idle_fds} idle, {held_fds} with the stalled connections open");
    println!(
        "/healthz while stalled (20, fresh connections): {}",
        describe(&health)
    );
    println!(
        "new job while stalled (10, fresh connections): {}",
        describe(&creations)
    );
    let mut endings = Vec::new();
    for s in stalls {
        if let Ok(e) = s.await {
            endings.push(e);
        }
    }
    let closed_within = |secs: u64| {
        endings
            .iter()
            .filter(|e| e.after.is_some_and(|d| d <= Duration::from_secs(secs)))
            .count()
    };
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for e in &endings {
        *answers.entry(e.answer.clone()).or_default() += 1;
    }
    println!(
        "stalled connections closed by the server within 6 s: {}, 11 s: {}, 40 s: {}; still open after {} s: {}",
        closed_within(6),
        closed_within(11),
        closed_within(40),
        WATCH.as_secs(),
        endings.iter().filter(|e| e.after.is_none()).count()
    );
    println!("how they ended: {answers:?}");
    println!("server fds afterwards: {}", served.fds());
    finish(served, schema).await;
}

async fn soak_bench(seconds: u64, backend: &str) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (url, cleanup) = match backend {
        "postgres" => {
            let (url, schema) = soak::postgres_schema().await;
            (url, Some(schema))
        }
        _ => (
            format!("sqlite://{}", dir.path().join("ledger.db").display()),
            None,
        ),
    };
    let report = soak::run(soak::Options {
        bin: serve_bin(),
        dir: dir.path().to_path_buf(),
        database_url: url,
        duration: Duration::from_secs(seconds),
        users: 16,
        env: extra_env(),
    })
    .await;
    println!("{}", report.table());
    if let Some(schema) = cleanup {
        soak::drop_schema(&schema).await;
    }
    let problems = report.problems();
    if !problems.is_empty() {
        eprintln!("PROBLEMS:\n{}", problems.join("\n"));
    }
}
