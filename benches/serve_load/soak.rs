//! The soak: mixed traffic against one `conform serve` for a bounded time — creations,
//! replays, key reuse, polls, failovers, attempt and job cancels — while the server's
//! resident memory and open descriptors are sampled every second; then every job is
//! read back and held to the contract, and the mock provider's request count per job
//! is compared with the job's attempts (each attempt sends exactly one request).
//!
//! Used by `cargo bench --bench serve_load -- soak SECONDS sqlite|postgres` and, for a
//! shorter run, by `tests/orchestrator_soak.rs`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::served::{Served, mib};
use super::upstream::Upstream;

/// What to run.
pub struct Options {
    pub bin: PathBuf,
    /// Holds the allowlist (and the SQLite file, if that is the database).
    pub dir: PathBuf,
    pub database_url: String,
    pub duration: Duration,
    /// Concurrent simulated users.
    pub users: usize,
    /// Extra variables for the server.
    pub env: Vec<(&'static str, String)>,
}

/// One sample of the server's footprint.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: usize,
}

/// What a soak saw.
#[derive(Debug, Default)]
pub struct Report {
    pub seconds: f64,
    pub ops: BTreeMap<&'static str, usize>,
    pub samples: Vec<Sample>,
    pub jobs: usize,
    pub states: BTreeMap<String, usize>,
    pub upstream_requests: usize,
    pub attempts: usize,
    /// Anything that broke the contract or the bounds.
    pub violations: Vec<String>,
}

/// The attempt deadline and late window the soak configures.
const TIMEOUT_MS: u64 = 1000;
const LATE_WINDOW_MS: u64 = 1000;

impl Report {
    /// Median RSS (KiB) and the largest fd count over the samples in `[from, to)` of the
    /// run, as fractions of it.
    fn window(&self, from: f64, to: f64) -> Option<(u64, usize)> {
        let total = self.samples.last()?.at.as_secs_f64();
        let mut rss: Vec<u64> = Vec::new();
        let mut fds = 0;
        for s in &self.samples {
            let t = s.at.as_secs_f64() / total.max(1e-9);
            if t >= from && t < to {
                rss.push(s.rss_kib);
                fds = fds.max(s.fds);
            }
        }
        if rss.is_empty() {
            return None;
        }
        rss.sort_unstable();
        Some((rss[rss.len() / 2], fds))
    }

    /// RSS and descriptors in the second quarter of the run (after the warm-up) and the
    /// last quarter.
    pub fn early_late(&self) -> Option<((u64, usize), (u64, usize))> {
        Some((self.window(0.25, 0.5)?, self.window(0.75, 1.01)?))
    }

    /// Everything that went wrong, the footprint's growth included: the median RSS of
    /// the last quarter may exceed the second quarter's by 25 % + 16 MiB, the largest fd
    /// count by 24 (connections opening and closing).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = self.violations.clone();
        match self.early_late() {
            Some(((rss0, fd0), (rss1, fd1))) => {
                if rss1 as f64 > rss0 as f64 * 1.25 + 16.0 * 1024.0 {
                    problems.push(format!(
                        "RSS grew: median {:.1} MiB in the second quarter, {:.1} MiB in the last",
                        mib(rss0),
                        mib(rss1)
                    ));
                }
                if fd1 > fd0 + 24 {
                    problems.push(format!(
                        "open descriptors grew: at most {fd0} in the second quarter, {fd1} in the last"
                    ));
                }
            }
            None => problems.push("too few samples to judge RSS and descriptors".into()),
        }
        if self.jobs == 0 {
            problems.push("no job was created".into());
        }
        problems
    }

    /// The figures, as BENCHMARKS.md shows them.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let ops: Vec<String> = self.ops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "soak: {:.0} s, {} jobs, {} attempts, {} upstream requests\n  requests: {}\n  final job states: {:?}\n",
            self.seconds,
            self.jobs,
            self.attempts,
            self.upstream_requests,
            ops.join(", "),
            self.states
        ));
        if let Some(((rss0, fd0), (rss1, fd1))) = self.early_late() {
            let peak = self.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
            out.push_str(&format!(
                "  RSS median {:.1} MiB (2nd quarter) → {:.1} MiB (last quarter), peak {:.1} MiB; fds at most {fd0} → {fd1}\n",
                mib(rss0),
                mib(rss1),
                mib(peak)
            ));
        }
        out.push_str(&format!("  violations: {}", self.violations.len()));
        out
    }
}

/// A job the soak created, to be read back at the end.
struct Made {
    owner: String,
    id: String,
    tag: String,
}

struct Shared {
    base: String,
    http: reqwest::Client,
    ops: Mutex<BTreeMap<&'static str, usize>>,
    violations: Mutex<Vec<String>>,
    made: Mutex<Vec<Made>>,
    serial: AtomicUsize,
}

impl Shared {
    fn op(&self, name: &'static str) {
        *self
            .ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name)
            .or_default() += 1;
    }

    fn violation(&self, what: String) {
        let mut v = self.violations.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < 50 {
            v.push(what);
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value, bool) {
        match request.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let replayed = r
                    .headers()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true");
                let body = r.bytes().await.unwrap_or_default();
                (
                    status,
                    serde_json::from_slice(&body).unwrap_or(Value::Null),
                    replayed,
                )
            }
            Err(e) => (0, json!(e.to_string()), false),
        }
    }

    /// Creates (or replays), retrying a 503 the way its `Retry-After` asks.
    async fn create(&self, owner: &str, key: &str, body: &Value) -> (u16, Value, bool) {
        for _ in 0..20 {
            let answer = self
                .send(
                    self.http
                        .post(format!("{}/v1/jobs", self.base))
                        .header("x-owner-id", owner)
                        .header("idempotency-key", key)
                        .json(body),
                )
                .await;
            if answer.0 != 503 {
                return answer;
            }
            self.op("503 retried");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (503, Value::Null, false)
    }

    async fn get(&self, owner: &str, id: &str) -> (u16, Value, bool) {
        self.op("poll");
        self.send(
            self.http
                .get(format!("{}/v1/jobs/{id}", self.base))
                .header("x-owner-id", owner),
        )
        .await
    }

    async fn post(&self, owner: &str, path: &str, body: Value) -> (u16, Value, bool) {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header("x-owner-id", owner)
                .json(&body),
        )
        .await
    }

    /// Polls until `done` holds, at most `limit`; answers the last job read.
    async fn until(
        &self,
        owner: &str,
        id: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let (status, job, _) = self.get(owner, id).await;
            if status == 200 && done(&job) || started.elapsed() > limit {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn expect(&self, what: &str, got: u16, want: &[u16], body: &Value) -> bool {
        if want.contains(&got) {
            return true;
        }
        self.violation(format!("{what}: {got} (expected {want:?}): {body}"));
        false
    }
}

fn state(job: &Value) -> &str {
    job["state"].as_str().unwrap_or("")
}

/// One user's loop until `until`.
async fn user(shared: Arc<Shared>, n: usize, until: Instant) {
    const MIX: [&str; 7] = ["ok", "fail", "ok", "late", "slow", "ok", "err500"];
    let owner = format!("soak-user-{n}");
    let mut round = 0usize;
    while Instant::now() < until {
        let serial = shared.serial.fetch_add(1, Ordering::Relaxed);
        let directive = MIX[(n + round) % MIX.len()];
        round += 1;
        let tag = format!("soaktag{serial}");
        let key = format!("key-{serial}");
        let body = json!({"task": "invoice-extraction", "provider": "primary",
            "input": {"messages": [{"role": "user", "content": format!("{tag} do:{directive} Invoice INV-2041, total 1250.00 EUR.")}], "temperature": 0}});
        let (status, job, _) = shared.create(&owner, &key, &body).await;
        shared.op("create");
        if !shared.expect("create", status, &[201], &job) {
            continue;
        }
        let id = job["id"].as_str().unwrap_or_default().to_string();
        shared
            .made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Made {
                owner: owner.clone(),
                id: id.clone(),
                tag: tag.clone(),
            });
        let (status, again, replayed) = shared.create(&owner, &key, &body).await;
        shared.op("replay");
        if shared.expect("replay", status, &[200], &again)
            && (!replayed || again["id"] != job["id"])
        {
            shared.violation(format!(
                "a replay of {id} was not marked or named another job: {again}"
            ));
        }
        if round.is_multiple_of(5) {
            let mut other = body.clone();
            other["input"]["temperature"] = json!(0.5);
            let (status, answer, _) = shared.create(&owner, &key, &other).await;
            shared.op("key reuse");
            shared.expect("key reuse", status, &[409, 422], &answer);
        }
        let path = format!("/v1/jobs/{id}");
        match directive {
            "fail" => {
                let job = shared
                    .until(&owner, &id, Duration::from_secs(3), |j| {
                        state(j) == "failed"
                    })
                    .await;
                if state(&job) != "failed" {
                    shared.violation(format!("{id} (do:fail) did not fail: {job}"));
                    continue;
                }
                let (status, attempt, _) = shared
                    .post(
                        &owner,
                        &format!("{path}/attempts"),
                        json!({"provider": "fallback"}),
                    )
                    .await;
                shared.op("failover");
                if shared.expect("failover", status, &[202], &attempt) {
                    let job = shared
                        .until(&owner, &id, Duration::from_secs(3), |j| {
                            state(j) == "succeeded"
                        })
                        .await;
                    if state(&job) != "succeeded" {
                        shared.violation(format!("{id}: the failover did not succeed: {job}"));
                    }
                }
            }
            "slow" => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let attempt = job["attempts"][0]["id"].as_str().unwrap_or_default();
                let (status, answer, _) = shared
                    .post(&owner, &format!("/v1/attempts/{attempt}/cancel"), json!({}))
                    .await;
                shared.op("attempt cancel");
                shared.expect("attempt cancel", status, &[200], &answer);
                let (status, attempt, _) = shared
                    .post(
                        &owner,
                        &format!("{path}/attempts"),
                        json!({"provider": "fallback"}),
                    )
                    .await;
                shared.op("failover");
                shared.expect("failover after a cancel", status, &[202], &attempt);
                let job = shared
                    .until(&owner, &id, Duration::from_secs(3), |j| {
                        state(j) == "succeeded"
                    })
                    .await;
                if state(&job) != "succeeded" {
                    shared.violation(format!(
                        "{id}: the failover after a cancel did not succeed: {job}"
                    ));
                }
            }
            "err500" => {
                let job = shared
                    .until(&owner, &id, Duration::from_secs(3), |j| {
                        state(j) == "unknown"
                    })
                    .await;
                if state(&job) != "unknown" {
                    shared.violation(format!("{id} (do:err500) is not unknown: {job}"));
                }
                let (status, answer, _) = shared
                    .post(&owner, &format!("{path}/cancel"), json!({}))
                    .await;
                shared.op("job cancel");
                shared.expect("job cancel", status, &[200], &answer);
            }
            _ => {
                let job = shared
                    .until(&owner, &id, Duration::from_secs(4), |j| {
                        state(j) == "succeeded"
                    })
                    .await;
                if state(&job) != "succeeded" {
                    shared.violation(format!("{id} (do:{directive}) did not succeed: {job}"));
                }
            }
        }
    }
}

/// The contract's rules for a job at rest: a state it allows, consistent with its
/// attempts.
fn judge(job: &Value) -> Option<String> {
    let attempts = job["attempts"].as_array().cloned().unwrap_or_default();
    let states: Vec<&str> = attempts
        .iter()
        .map(|a| a["state"].as_str().unwrap_or(""))
        .collect();
    let open = states
        .iter()
        .filter(|s| matches!(**s, "starting" | "unknown"))
        .count();
    let id = job["id"].as_str().unwrap_or("?");
    let wrong = |why: &str| Some(format!("{id}: {why}: {job}"));
    if open > 1 {
        return wrong("more than one open attempt");
    }
    match state(job) {
        "succeeded" => {
            let winner = job["completed_by"].as_str().unwrap_or("");
            let won: Vec<&Value> = attempts
                .iter()
                .filter(|a| a["state"] == "succeeded")
                .collect();
            if won.len() != 1 || won[0]["id"] != winner {
                return wrong("succeeded without exactly one winning attempt");
            }
        }
        "cancelled" => {
            if open > 0 {
                return wrong("cancelled with an open attempt");
            }
        }
        "failed" => {
            if states.iter().any(|s| *s != "failed") {
                return wrong("failed while an attempt did not fail");
            }
        }
        "unknown" | "pending" => {}
        "running" => return wrong("still running after every deadline passed"),
        other => return wrong(&format!("state `{other}` is not the contract's")),
    }
    None
}

/// Runs the soak and answers what it saw.
pub async fn run(options: Options) -> Report {
    let upstream = Upstream::start().await;
    std::fs::write(
        options.dir.join("allowlist.json"),
        json!({"format": "conform.allowlist/v1", "entries": [
            {"suite": "invoice-extraction", "provider": "fallback", "valid_until": "2099-01-01T00:00:00Z"}]})
        .to_string(),
    )
    .expect("write the allowlist");
    let mut env = vec![
        ("CONFORM_ATTEMPT_TIMEOUT_MS", TIMEOUT_MS.to_string()),
        ("CONFORM_LATE_WINDOW_MS", LATE_WINDOW_MS.to_string()),
    ];
    env.extend(options.env.iter().cloned());
    let served = Served::start(
        &options.bin,
        &options.dir,
        &format!("primary={0},fallback={0}/fallback", upstream.uri()),
        &options.database_url,
        &env,
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .no_proxy()
        .retry(reqwest::retry::never())
        .timeout(Duration::from_secs(30))
        // Shorter than any server's idle timeout: a pooled connection is never reused
        // just as the server closes it.
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("a client");
    let shared = Arc::new(Shared {
        base: served.base.clone(),
        http,
        ops: Mutex::new(BTreeMap::new()),
        violations: Mutex::new(Vec::new()),
        made: Mutex::new(Vec::new()),
        serial: AtomicUsize::new(0),
    });
    let started = Instant::now();
    let until = started + options.duration;
    let users: Vec<_> = (0..options.users)
        .map(|n| tokio::spawn(user(Arc::clone(&shared), n, until)))
        .collect();
    let mut samples = Vec::new();
    while Instant::now() < until {
        samples.push(Sample {
            at: started.elapsed(),
            rss_kib: served.rss_kib(),
            fds: served.fds(),
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for u in users {
        let _ = u.await;
    }
    // Every attempt has been sent, and every deadline and late window has passed.
    tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + LATE_WINDOW_MS + 800)).await;
    let made: Vec<Made> =
        std::mem::take(&mut *shared.made.lock().unwrap_or_else(|p| p.into_inner()));
    let mut report = Report {
        seconds: started.elapsed().as_secs_f64(),
        samples,
        jobs: made.len(),
        upstream_requests: upstream.counts.total(),
        ..Report::default()
    };
    for m in &made {
        let (status, job, _) = shared.get(&m.owner, &m.id).await;
        if status != 200 {
            shared.violation(format!("job {} cannot be read back: {status}", m.id));
            continue;
        }
        *report.states.entry(state(&job).to_string()).or_default() += 1;
        if let Some(why) = judge(&job) {
            shared.violation(why);
        }
        let attempts = job["attempts"].as_array().map_or(0, Vec::len);
        report.attempts += attempts;
        let sent = upstream.counts.get(&m.tag);
        if sent != attempts {
            shared.violation(format!(
                "job {} has {attempts} attempt(s) but the provider received {sent} request(s)",
                m.id
            ));
        }
    }
    if !served.log_tail().iter().all(|l| !l.contains("panicked")) {
        shared.violation(format!("the server panicked: {:?}", served.log_tail()));
    }
    report.ops = std::mem::take(&mut *shared.ops.lock().unwrap_or_else(|p| p.into_inner()));
    report.violations =
        std::mem::take(&mut *shared.violations.lock().unwrap_or_else(|p| p.into_inner()));
    report
}

/// A fresh PostgreSQL schema (`CONFORM_TEST_DATABASE_URL`, default the local `test`
/// database): its URL and name.
pub async fn postgres_schema() -> (String, String) {
    let base = std::env::var("CONFORM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).expect("randomness");
    let schema = format!(
        "conform_soak_{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let admin = sqlx::PgPool::connect(&base).await.expect("PostgreSQL");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .expect("create the schema");
    admin.close().await;
    let sep = if base.contains('?') { '&' } else { '?' };
    (
        format!("{base}{sep}options=-c%20search_path%3D{schema}"),
        schema,
    )
}

pub async fn drop_schema(schema: &str) {
    let base = std::env::var("CONFORM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    if let Ok(admin) = sqlx::PgPool::connect(&base).await {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&admin)
            .await;
        admin.close().await;
    }
}
