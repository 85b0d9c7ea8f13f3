//! What a scenario works with: the run's shared [`Env`] (orchestrator, mock providers,
//! allowlist, timing) and its own [`Ctx`], which hands out fresh owners, keys and tags,
//! records every exchange and check, and at the end reads the jobs back and checks
//! every provider's request count.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::api::{Api, Call, Exchange};
use super::evidence::{CheckRecord, Evidence, Outcome, ProviderArrival, RequestCount};
use super::gatefile::TASK;
use super::job;
use super::mock::{Arrival, Board, Step};
use super::providers::{NAMES, Providers};
use super::spawn::Spawned;

/// How many exchanges a scenario's evidence keeps in full.
const KEPT_EXCHANGES: usize = 160;
/// How many provider requests a scenario's evidence keeps in full.
const KEPT_ARRIVALS: usize = 40;

/// The orchestrator's timing, as configured with `CONFORM_ATTEMPT_TIMEOUT_MS` and
/// `CONFORM_LATE_WINDOW_MS`, and the margins the scenarios derive from it.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `CONFORM_ATTEMPT_TIMEOUT_MS`: when a `starting` attempt becomes `unknown`.
    pub attempt_timeout: Duration,
    /// `CONFORM_LATE_WINDOW_MS`: how long after its deadline a result still competes.
    pub late_window: Duration,
}

impl Timing {
    /// The smallest attempt timeout the scenarios' ordering margins stay safe with.
    pub const MIN_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
    /// The smallest late window the scenarios' ordering margins stay safe with.
    pub const MIN_LATE_WINDOW: Duration = Duration::from_millis(1000);

    /// How much later than promised the orchestrator may be seen to act, on a busy
    /// machine, before a scenario calls it a failure.
    pub fn slack(&self) -> Duration {
        Duration::from_secs(3) + self.attempt_timeout / 2
    }

    /// A provider delay that no orchestrator waits for: past the deadline and the late
    /// window, with room to spare.
    pub fn never(&self) -> Duration {
        self.attempt_timeout + self.late_window + Duration::from_secs(30)
    }

    /// A provider delay past the deadline but well inside the late window.
    pub fn late(&self) -> Duration {
        self.attempt_timeout + self.late_window / 4
    }

    /// How long after the deadline the late window is surely closed.
    pub fn window_closed(&self) -> Duration {
        self.attempt_timeout + self.late_window + Duration::from_millis(500)
    }

    /// The wait after rewriting the allowlist: the contract allows a one-second cache.
    pub fn allowlist_refresh(&self) -> Duration {
        Duration::from_millis(1250)
    }

    /// How long to let stray work arrive before the providers' requests are counted.
    pub fn settle(&self) -> Duration {
        Duration::from_millis(400)
    }
}

/// Everything the scenarios of one run share.
pub struct Env {
    /// The orchestrator under test.
    pub api: Api,
    /// The mock providers it is configured with.
    pub providers: Providers,
    /// `CONFORM_ALLOWLIST`: the scenarios write it and may rewrite it.
    pub allowlist: PathBuf,
    /// The orchestrator's timing, which the scenarios' waits are derived from.
    pub timing: Timing,
    /// The spawned orchestrator, when the suite started it (restarts need it).
    pub spawned: Option<Arc<Spawned>>,
    /// Ten hex digits, in every owner, key and tag, so runs sharing one database
    /// never meet.
    pub run_id: String,
    serial: AtomicU64,
}

impl Env {
    /// A run with a fresh run id.
    pub fn new(
        api: Api,
        providers: Providers,
        allowlist: PathBuf,
        timing: Timing,
        spawned: Option<Arc<Spawned>>,
    ) -> Env {
        Env {
            api,
            providers,
            allowlist,
            timing,
            spawned,
            run_id: run_id(),
            serial: AtomicU64::new(1),
        }
    }

    fn next(&self) -> u64 {
        self.serial.fetch_add(1, Ordering::Relaxed)
    }
}

fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!("{nanos}:{}", std::process::id());
    conform_config::digest::bytes_hex(seed.as_bytes())
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(10)
        .collect()
}

/// A scenario stopped: this check failed.
#[derive(Debug, Clone)]
pub struct Failed(
    /// The scenario's failure reason: the check, then why.
    pub String,
);

/// A step of a scenario: it goes on, or it stops with the check that failed.
pub type Checked<T = ()> = Result<T, Failed>;

/// One user intent: who, under which key, what, and the tag that finds its provider
/// requests.
#[derive(Debug, Clone)]
pub struct Intent {
    /// `X-Owner-Id`.
    pub owner: String,
    /// `Idempotency-Key`.
    pub key: String,
    /// In the job's input, so the mock providers know which requests are this intent's.
    pub tag: String,
    /// The `POST /v1/jobs` body.
    pub body: Value,
}

impl Intent {
    /// The creation call with this intent's owner, key and body.
    pub fn create(&self) -> Call {
        Call::post("/v1/jobs")
            .owner(&self.owner)
            .key(&self.key)
            .json(&self.body)
    }

    /// The same intent with another value at a JSON pointer of the body.
    pub fn with(&self, pointer: &str, value: Value) -> Intent {
        let mut other = self.clone();
        if let Some(slot) = other.body.pointer_mut(pointer) {
            *slot = value;
        }
        other
    }
}

#[derive(Default)]
struct Record {
    checks: Vec<CheckRecord>,
    exchanges: Vec<Exchange>,
    exchanges_omitted: usize,
    polls: usize,
    jobs: Vec<(String, String)>,
    tags: Vec<String>,
    expected: BTreeMap<(String, String), usize>,
    notes: Vec<String>,
}

/// One scenario's view of the run.
pub struct Ctx {
    env: Arc<Env>,
    scenario: &'static str,
    about: &'static str,
    started: Instant,
    strays_before: usize,
    record: Mutex<Record>,
}

impl Ctx {
    /// A scenario's context, counting from now; strays already on the board are not its.
    pub fn new(env: Arc<Env>, scenario: &'static str, about: &'static str) -> Ctx {
        let strays_before = env.providers.board().strays().len();
        Ctx {
            env,
            scenario,
            about,
            started: Instant::now(),
            strays_before,
            record: Mutex::new(Record::default()),
        }
    }

    fn record(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What every scenario of the run shares.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// The orchestrator's timing, for the scenario's waits.
    pub fn timing(&self) -> Timing {
        self.env.timing
    }

    /// A fresh name for an owner or a key: `{run}-{scenario}-{n}-{what}`.
    pub fn fresh(&self, what: &str) -> String {
        format!(
            "{}-{}-{}-{what}",
            self.env.run_id,
            self.scenario,
            self.env.next()
        )
    }

    /// A fresh tag, known to the providers.
    pub fn tag(&self) -> String {
        let tag = format!("ctag{}x{}", self.env.run_id, self.env.next());
        self.env.providers.board().register(&tag);
        self.record().tags.push(tag.clone());
        tag
    }

    /// A fresh intent on `provider` for `TASK`: new owner, key and tag. Every provider
    /// is expected to see none of its requests until [`Ctx::expect`] says otherwise.
    pub fn intent(&self, provider: &str) -> Intent {
        let tag = self.tag();
        Intent {
            owner: self.fresh("owner"),
            key: self.fresh("key"),
            body: json!({
                "task": TASK,
                "provider": provider,
                "input": {
                    "messages": [
                        {"role": "system", "content": "Extract the invoice fields as JSON."},
                        {"role": "user", "content": format!("Invoice INV-2041, total 1250.00 EUR, due 2026-07-01. {tag}")},
                    ],
                    "temperature": 0,
                },
            }),
            tag,
        }
    }

    /// What `provider` answers to this intent's requests, in arrival order.
    pub fn script(&self, intent: &Intent, provider: &str, steps: Vec<Step>) {
        self.env
            .providers
            .board()
            .script(provider, &intent.tag, steps);
    }

    /// `provider` must see exactly `n` requests for this intent by the end.
    pub fn expect(&self, intent: &Intent, provider: &str, n: usize) {
        self.record()
            .expected
            .insert((provider.to_string(), intent.tag.clone()), n);
    }

    /// Requests `provider` has received for this intent so far.
    pub fn count(&self, intent: &Intent, provider: &str) -> usize {
        self.env.providers.board().count(provider, &intent.tag)
    }

    /// Waits until `provider` has received `n` requests for this intent.
    pub async fn arrivals(&self, intent: &Intent, provider: &str, n: usize) -> Checked {
        let limit = self.timing().slack();
        let started = Instant::now();
        while self.count(intent, provider) < n {
            if started.elapsed() > limit {
                return self.check(
                    false,
                    format!(
                        "{provider} receives request #{n} for job {} within {:.1} s (it has {})",
                        intent.tag,
                        limit.as_secs_f64(),
                        self.count(intent, provider)
                    ),
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Sends one call and records the exchange.
    pub async fn send(&self, call: Call) -> Exchange {
        let exchange = self.env.api.send(&call).await;
        self.keep(&exchange);
        exchange
    }

    /// Creates a job and remembers it for the final read-back.
    pub async fn create(&self, intent: &Intent) -> Exchange {
        self.send(intent.create()).await
    }

    /// Sends every call at once: the connections are opened first, then a barrier
    /// releases all the requests together.
    pub async fn send_all(&self, calls: Vec<Call>) -> Vec<Exchange> {
        let n = calls.len();
        let health = Call::get("/healthz");
        let warm: Vec<_> = (0..n).map(|_| self.env.api.send(&health)).collect();
        futures::future::join_all(warm).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let tasks: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let api = self.env.api.clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    api.send(&call).await
                })
            })
            .collect();
        let mut exchanges = Vec::with_capacity(n);
        for task in tasks {
            match task.await {
                Ok(exchange) => exchanges.push(exchange),
                Err(e) => self.note(format!("a concurrent call's task failed: {e}")),
            }
        }
        for exchange in &exchanges {
            self.keep(exchange);
        }
        exchanges
    }

    /// Keeps an exchange sent outside [`Ctx::send`] in the evidence.
    pub fn keep(&self, exchange: &Exchange) {
        let mut record = self.record();
        if exchange.method == "POST"
            && exchange.path == "/v1/jobs"
            && (exchange.status == 200 || exchange.status == 201)
            && let (Some(owner), Some(id)) = (&exchange.owner, job::id(&exchange.answer))
        {
            let entry = (owner.clone(), id.to_string());
            if !record.jobs.contains(&entry) {
                record.jobs.push(entry);
            }
        }
        if record.exchanges.len() < KEPT_EXCHANGES {
            record.exchanges.push(exchange.clone());
        } else {
            record.exchanges_omitted += 1;
        }
    }

    /// Reads a job; anything but a 200 with a job stops the scenario.
    pub async fn read(&self, owner: &str, id: &str) -> Checked<Value> {
        let exchange = self.send(job::get(owner, id)).await;
        self.check(
            exchange.status == 200 && job::id(&exchange.answer) == Some(id),
            format!("GET /v1/jobs/{id} answers 200 with the job"),
        )
        .map_err(|f| self.detail(f, exchange.summary()))?;
        Ok(exchange.answer)
    }

    /// Reads the job until `until` holds, within `limit`; only the last read is kept.
    pub async fn poll(
        &self,
        owner: &str,
        id: &str,
        what: &str,
        limit: Duration,
        until: impl Fn(&Value) -> bool,
    ) -> Checked<Value> {
        let started = Instant::now();
        let call = job::get(owner, id);
        loop {
            let exchange = self.env.api.send(&call).await;
            self.record().polls += 1;
            if exchange.status == 200 && until(&exchange.answer) {
                self.keep(&exchange);
                self.pass(format!(
                    "{what} (after {:.2} s)",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(exchange.answer);
            }
            if started.elapsed() > limit {
                self.keep(&exchange);
                return Err(self.fail(
                    format!("{what}, within {:.1} s", limit.as_secs_f64()),
                    Some(format!("last read: {}", job::describe(&exchange))),
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Sleeps until `at` (no-op if it has passed).
    pub async fn sleep_until(&self, at: Instant) {
        tokio::time::sleep_until(at.into()).await;
    }

    /// Records a check; a false one stops the scenario.
    pub fn check(&self, ok: bool, what: impl Into<String>) -> Checked {
        if ok {
            self.pass(what);
            Ok(())
        } else {
            Err(self.fail(what, None))
        }
    }

    /// Records `actual == expected`.
    pub fn check_eq<T: Debug + PartialEq>(
        &self,
        actual: T,
        expected: T,
        what: impl Into<String>,
    ) -> Checked {
        if actual == expected {
            self.pass(what);
            Ok(())
        } else {
            Err(self.fail(what, Some(format!("expected {expected:?}, got {actual:?}"))))
        }
    }

    /// The answer has one of these statuses.
    pub fn status(&self, exchange: &Exchange, statuses: &[u16], what: &str) -> Checked {
        if statuses.contains(&exchange.status) {
            self.pass(what);
            Ok(())
        } else {
            Err(self.fail(what, Some(job::describe(exchange))))
        }
    }

    /// The answer is an RFC 9457 problem with this status and `code`.
    pub fn problem(&self, exchange: &Exchange, status: u16, code: &str, what: &str) -> Checked {
        if exchange.status != status {
            return Err(self.fail(
                what,
                Some(format!("expected {status}; {}", job::describe(exchange))),
            ));
        }
        let mut wrong = Vec::new();
        if exchange.code() != Some(code) {
            wrong.push(format!("code {:?} (expected {code:?})", exchange.code()));
        }
        if !exchange
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/problem+json"))
        {
            wrong.push(format!(
                "content type {:?} (expected application/problem+json)",
                exchange.content_type
            ));
        }
        if exchange.answer.get("status").and_then(Value::as_u64) != Some(u64::from(status)) {
            wrong.push(format!("member status {}", exchange.answer["status"]));
        }
        for member in ["type", "title", "detail"] {
            if exchange.text(member).is_none() {
                wrong.push(format!("no string member `{member}`"));
            }
        }
        if wrong.is_empty() {
            self.pass(what);
            Ok(())
        } else {
            Err(self.fail(
                what,
                Some(format!("{}; {}", wrong.join(", "), job::describe(exchange))),
            ))
        }
    }

    /// A check that passed.
    pub fn pass(&self, what: impl Into<String>) {
        self.record().checks.push(CheckRecord::pass(what));
    }

    /// A check that failed; returns the failure to stop the scenario with.
    pub fn fail(&self, what: impl Into<String>, detail: Option<String>) -> Failed {
        let (check, reason) = CheckRecord::fail(what, detail);
        self.record().checks.push(check);
        Failed(reason)
    }

    fn detail(&self, failed: Failed, detail: String) -> Failed {
        let mut record = self.record();
        if let Some(last) = record.checks.last_mut() {
            last.detail = Some(detail.clone());
        }
        Failed(format!("{}: {detail}", failed.0))
    }

    /// Something worth knowing that is not a check.
    pub fn note(&self, text: impl Into<String>) {
        self.record().notes.push(text.into());
    }

    /// Kills the orchestrator with SIGKILL and starts it again with the same variables.
    pub async fn restart(&self) -> Checked {
        let Some(spawned) = &self.env.spawned else {
            return Err(self.fail("restart the orchestrator (needs --spawn)", None));
        };
        match spawned.restart().await {
            Ok(took) => {
                self.pass(format!(
                    "the orchestrator was killed with SIGKILL and answered /healthz again after {:.2} s",
                    took.as_secs_f64()
                ));
                Ok(())
            }
            Err(e) => Err(self.fail("restart the orchestrator", Some(e.to_string()))),
        }
    }

    /// Every job the scenario created, as read back now (or why it could not be).
    async fn read_back(&self, jobs: &[(String, String)]) -> Vec<Value> {
        let mut read_back = Vec::new();
        for (owner, id) in jobs {
            let exchange = self.env.api.send(&job::get(owner, id)).await;
            read_back.push(if exchange.status == 200 {
                exchange.answer
            } else {
                json!({"id": id, "read_back": exchange.summary()})
            });
        }
        read_back
    }

    /// Runs the scenario's body, then lets stray work arrive, reads every job back and
    /// checks every provider's request count.
    pub async fn conclude(&self, body: impl Future<Output = Checked>) -> Evidence {
        let result = body.await;
        tokio::time::sleep(self.timing().settle()).await;
        let board = self.env.providers.board();
        let (jobs, tags, expected) = {
            let r = self.record();
            (r.jobs.clone(), r.tags.clone(), r.expected.clone())
        };
        let read_back = self.read_back(&jobs).await;
        let (counts, count_failures, arrivals) = counted(board, &tags, &expected);
        let summary: Vec<String> = counts
            .iter()
            .map(|(n, c)| format!("{n} {}/{}", c.received, c.expected))
            .collect();
        let counts_ok = count_failures.is_empty();
        if counts_ok {
            self.pass(format!(
                "every provider received exactly the requests the jobs called for ({})",
                summary.join(", ")
            ));
        }
        let count_failure = (!counts_ok).then(|| {
            self.fail(
                "every provider received exactly the requests the jobs called for",
                Some(count_failures.join("; ")),
            )
        });
        let strays: Vec<Arrival> = board
            .strays()
            .into_iter()
            .skip(self.strays_before)
            .collect();
        let stray_failure = (!strays.is_empty()).then(|| {
            self.fail(
                "no provider received a request that no job asked for",
                Some(format!(
                    "{} request(s) without a known tag, first to {}",
                    strays.len(),
                    strays[0].provider
                )),
            )
        });
        let outcome = match (result, count_failure, stray_failure) {
            (Err(Failed(reason)), _, _) => Outcome::Failed { reason },
            (Ok(()), Some(Failed(reason)), _) | (Ok(()), None, Some(Failed(reason))) => {
                Outcome::Failed { reason }
            }
            (Ok(()), None, None) => Outcome::Passed,
        };
        let r = self.record();
        Evidence {
            scenario: self.scenario.to_string(),
            about: self.about.to_string(),
            outcome,
            seconds: self.started.elapsed().as_secs_f64(),
            checks: r.checks.clone(),
            exchanges: r.exchanges.clone(),
            exchanges_omitted: r.exchanges_omitted,
            polls: r.polls,
            jobs: read_back,
            provider_requests: counts,
            provider_arrivals: arrivals.into_iter().map(ProviderArrival::Job).collect(),
            stray_requests: strays,
            client_requests: Vec::new(),
            notes: r.notes.clone(),
        }
    }
}

/// By provider: the requests received for `tags` against those `expected`, each
/// mismatch said, and the arrivals in order (bodies kept only for the first few).
fn counted(
    board: &Board,
    tags: &[String],
    expected: &BTreeMap<(String, String), usize>,
) -> (BTreeMap<String, RequestCount>, Vec<String>, Vec<Arrival>) {
    let mut counts: BTreeMap<String, RequestCount> = NAMES
        .iter()
        .map(|n| (n.to_string(), RequestCount::default()))
        .collect();
    let mut count_failures = Vec::new();
    let mut arrivals: Vec<Arrival> = Vec::new();
    for tag in tags {
        for name in NAMES {
            let received = board.count(name, tag);
            let want = expected
                .get(&(name.to_string(), tag.clone()))
                .copied()
                .unwrap_or(0);
            let entry = counts.entry(name.to_string()).or_default();
            entry.received += received;
            entry.expected += want;
            if received != want {
                count_failures.push(format!(
                    "{name} received {received} request(s) for job {tag}, expected {want}"
                ));
            }
            arrivals.extend(board.arrivals(name, tag));
        }
    }
    arrivals.sort_by_key(|a| a.at_unix_ms);
    for (i, a) in arrivals.iter_mut().enumerate() {
        if i >= KEPT_ARRIVALS {
            a.body = Value::Null;
        }
    }
    (counts, count_failures, arrivals)
}
