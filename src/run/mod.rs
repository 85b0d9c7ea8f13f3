//! The runner: cases × providers × repeats, concurrent within each provider's limits,
//! each result streamed to `results.jsonl` the moment it completes.
//!
//! Invariants: the plan is an iterator, never a list, and at most the pacer's most calls
//! per provider are in flight (the stated `concurrency`, else what the account's limits
//! keep busy, [`conform_wire::provider::limits::Pacer`]), so memory does not grow with the
//! number of cases; every planned call ends as exactly one record (passed, failed, not
//! run because its provider was stopped, or saved because its verdict was decided); an
//! interrupt stops the run with `complete = false`.

pub mod assemble;
pub mod budget;
pub mod differential;
pub mod judge;
pub mod preflight;
pub mod progress;
pub mod reference_tape;
pub mod resume;
pub mod schedule;
pub mod shard;
pub mod shard_signature;
pub mod tallies;

use std::collections::HashSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::{self, StreamExt};
use time::OffsetDateTime;

use crate::results;
use conform_check::check::record::CallRecord;
use conform_check::check::{CallFacts, Checks};
use conform_check::verdict::{Reason, Tally, Verdict};
use conform_config::ProviderConfig;
use conform_config::{Case, CaseRef, Diagnostics, HeldCases, Rendered, Suite};
use conform_wire::provider::transport::Endpoint;
use conform_wire::provider::{CallError, CallSpec, Completion, Effect, Encoded};
use conform_wire::tokenize::Counter;
use progress::Progress;
use schedule::{Call, Schedule};
use tallies::Tallies;

/// A suite with its checks compiled, and the cases its pre-flight held.
#[derive(Debug)]
pub struct PreparedSuite {
    pub suite: Suite,
    pub checks: Checks,
    /// Every case's bytes as [`prepare`] read them: sent without reading the files again.
    held: HeldCases,
    /// [`schema_name`] of the suite's name, which every call's request carries.
    schema_name: String,
    /// Whether a case the pre-flight read has `expected`: what the answers are compared
    /// with, said once the run is over.
    pub has_expected: bool,
}

impl PreparedSuite {
    pub fn new(suite: Suite) -> Result<Self, Diagnostics> {
        let checks = Checks::for_suite(&suite)?;
        Ok(PreparedSuite {
            schema_name: schema_name(&suite.name),
            suite,
            checks,
            held: HeldCases::default(),
            has_expected: false,
        })
    }

    /// The case at `index` and what is sent for it, from the bytes the pre-flight held
    /// when it held them (the file is not read again), else from its file.
    pub fn load_request(&self, index: usize) -> Result<(Case, Rendered), Diagnostics> {
        let held = self.held.get(index);
        self.suite
            .load_request(&self.suite.cases[index], held.as_deref())
    }
}

/// What a pre-flight keeps of the cases it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every case's bytes ([`HeldCases`]), for a command that comes back to the cases after
    /// its pre-flight: a run sends them, a plan (also `merge`'s estimate) counts them for
    /// each provider, and neither opens a case file again.
    CaseBytes,
    /// Nothing: the command does not come back to the cases (`conform check`).
    Nothing,
}

/// The pre-flight every run and `conform check` share: every case of every suite loads
/// and renders, and every suite's checks compile. Returns every problem, not the first.
pub fn prepare(suites: Vec<Suite>, keep: Keep) -> Result<Vec<Arc<PreparedSuite>>, Diagnostics> {
    prepare_visiting(suites, keep, |_| {})
}

/// A case as the pre-flight loaded it, shown to [`prepare_visiting`]'s caller.
#[derive(Debug, Clone, Copy)]
pub struct Visit<'a> {
    pub suite: &'a Suite,
    pub case_ref: &'a CaseRef,
    pub case: &'a Case,
    /// Its request, when it renders (when not, the pre-flight reports why).
    pub rendered: Option<&'a Rendered>,
}

/// [`prepare`], showing `visit` every case that loads, in the same single read of its
/// file: how `conform check` looks further into each case without reading it again.
pub fn prepare_visiting(
    suites: Vec<Suite>,
    keep: Keep,
    mut visit: impl FnMut(Visit<'_>),
) -> Result<Vec<Arc<PreparedSuite>>, Diagnostics> {
    let mut problems = Diagnostics::default();
    let mut prepared = Vec::with_capacity(suites.len());
    for suite in suites {
        let mut has_expected = false;
        let held = suite.each_case(keep == Keep::CaseBytes, |case_ref, loaded| match loaded {
            Ok(case) => {
                has_expected |= case.expected.is_some();
                let path = case_ref.path();
                problems.extend(suite.case_problems(&case, &path));
                let rendered = suite.request(&case, &path).map_err(|d| problems.extend(d));
                visit(Visit {
                    suite: &suite,
                    case_ref,
                    case: &case,
                    rendered: rendered.as_ref().ok(),
                });
            }
            Err(d) => problems.push(d),
        });
        match PreparedSuite::new(suite) {
            Ok(p) => prepared.push(Arc::new(PreparedSuite {
                held,
                has_expected,
                ..p
            })),
            Err(d) => problems.extend(d),
        }
    }
    if problems.is_empty() {
        Ok(prepared)
    } else {
        Err(problems)
    }
}

/// A provider ready to run, and whether an error has stopped it.
#[derive(Debug)]
pub struct Target {
    pub endpoint: Endpoint,
    /// How this provider's prompts are counted (its `[tokenizer]`).
    pub counter: Counter,
    halted: AtomicBool,
    halt_reason: Mutex<Option<String>>,
}

impl Target {
    pub fn new(endpoint: Endpoint) -> Self {
        Target {
            endpoint,
            counter: Counter::None,
            halted: AtomicBool::new(false),
            halt_reason: Mutex::new(None),
        }
    }

    /// Counts this provider's prompts with `counter` (see [`Counter::for_provider`]).
    pub fn with_counter(mut self, counter: Counter) -> Self {
        self.counter = counter;
        self
    }

    /// Stops calling this provider because a call failed with `error`; the first stop's
    /// reason is the one every later record gives.
    fn halt(&self, error: &CallError) {
        if !self.halted.swap(true, Ordering::SeqCst)
            && let Ok(mut reason) = self.halt_reason.lock()
        {
            *reason = Some(format!(
                "not sent: {} was stopped after an earlier call failed with {error}",
                self.endpoint.config.name
            ));
        }
    }

    /// Why a call is not sent: the conform run stopped this provider (not the user, and
    /// not the provider itself), naming the failure that made it.
    fn halted(&self) -> Option<String> {
        if !self.halted.load(Ordering::SeqCst) {
            return None;
        }
        let reason = self.halt_reason.lock().ok().and_then(|r| r.clone());
        Some(reason.unwrap_or_else(|| {
            format!(
                "not sent: {} was stopped after an earlier call failed",
                self.endpoint.config.name
            )
        }))
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub run_id: String,
    /// `reports/<run-id>`.
    pub dir: PathBuf,
    /// Overrides every suite's `repeats`.
    pub repeats: Option<u32>,
    pub max_transport_error_share: f64,
    pub progress: bool,
    /// Run only this shard's cases (`--shard K/N`).
    pub shard: Option<shard::Shard>,
    /// Send no call that could take the spend over this budget (`--budget USD`); every
    /// provider then has `[pricing]`.
    pub budget: Option<Arc<budget::Budget>>,
    /// Send every planned call even once a pair's verdict is decided (`--every-call`).
    /// A shard always does: its share alone cannot decide what the merge will.
    pub every_call: bool,
    /// Continue the earlier run whose folder is `dir` (`--resume`, `--rerun-failed`): the
    /// calls its records answer are kept, not sent again.
    pub resume: Option<Arc<resume::Resume>>,
    /// The arguments that shape the evidence, which `run.json` pins for a resume (`None`:
    /// a run the library made, which pins only its files).
    pub asked: Option<resume::Asked>,
}

/// The verdict on one (suite, provider), with the counts behind it.
#[derive(Debug, Clone)]
pub struct PairVerdict {
    pub verdict: Verdict,
    pub reasons: Vec<Reason>,
    pub tally: Tally,
    pub suite_index: usize,
    pub provider_index: usize,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub run_id: String,
    pub dir: PathBuf,
    pub started_at: OffsetDateTime,
    pub finished_at: OffsetDateTime,
    /// False when the run was interrupted or stopped by its budget: nothing may be
    /// concluded from it.
    pub complete: bool,
    /// The budget stopped it before every call was sent.
    pub over_budget: bool,
    pub verdicts: Vec<PairVerdict>,
}

/// What a finished run says as a whole: the one mapping its exit code reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overall {
    /// Every pair is conformant.
    Conformant,
    /// A pair is not conformant.
    Nonconformant,
    /// Interrupted, or a pair's evidence is incomplete: nothing is allowlisted.
    Inconclusive,
    /// A provider refused the configuration (a bad key, an unknown model).
    Misconfigured,
    /// A shard recorded its share whole: its partial verdicts decide nothing, the merge
    /// does.
    Recorded,
}

impl RunResult {
    /// The run as a whole. A configuration error outranks everything, an interruption
    /// everything else, and one nonconformant pair outranks an inconclusive one: it is
    /// already known to fail.
    pub fn overall(&self, shard: bool) -> Overall {
        if self.verdicts.iter().any(|v| v.tally.config_error) {
            Overall::Misconfigured
        } else if !self.complete {
            Overall::Inconclusive
        } else if shard {
            Overall::Recorded
        } else if self
            .verdicts
            .iter()
            .any(|v| v.verdict == Verdict::Nonconformant)
        {
            Overall::Nonconformant
        } else if self
            .verdicts
            .iter()
            .any(|v| v.verdict == Verdict::Inconclusive)
        {
            Overall::Inconclusive
        } else {
            Overall::Conformant
        }
    }

    /// For `conform demo`: each simulated provider whose verdict is not the one its
    /// `[sim] expect` declares, or that was caught for something other than the finding
    /// its `caught_by` names (then the drift it was built for went unseen). Empty when
    /// every simulation earned its verdict for the reason it was built to.
    pub fn surprises(&self, providers: &[conform_config::ProviderConfig]) -> Vec<String> {
        let mut surprises = Vec::new();
        for v in &self.verdicts {
            let config = &providers[v.provider_index];
            let expected = config.sim.as_ref().map(|s| Verdict::from(s.expect));
            let caught_by = config.sim.as_ref().and_then(|s| s.caught_by.as_deref());
            if expected != Some(v.verdict) {
                surprises.push(format!(
                    "{} × {}: expected {}, got {}",
                    v.tally.suite,
                    config.name,
                    expected.map_or("?", Verdict::as_str),
                    v.verdict.as_str()
                ));
            } else if let Some(code) = caught_by.filter(|_| v.verdict == Verdict::Nonconformant)
                && !v.reasons.iter().any(|r| *r == code)
            {
                surprises.push(format!(
                    "{} × {}: {} as expected, but not caught by `{code}` (reasons: {})",
                    v.tally.suite,
                    config.name,
                    v.verdict.as_str(),
                    Reason::names(&v.reasons).join(", ")
                ));
            }
        }
        surprises
    }

    /// The verdicts that need explaining: every one that is not conformant.
    pub fn not_conformant(&self) -> impl Iterator<Item = &PairVerdict> {
        self.verdicts
            .iter()
            .filter(|v| v.verdict != Verdict::Conformant)
    }
}

/// Why a run could not be carried out at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot write the run's results to {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Runs every case of every suite through every target, `repeats` times, until done or
/// until `interrupt` resolves.
pub async fn execute(
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    options: &RunOptions,
    interrupt: impl Future<Output = ()>,
) -> Result<RunResult, RunError> {
    let schedule = Schedule::of_run(suites, targets, options.repeats, options.shard);
    execute_scheduled(suites, targets, &schedule, options, interrupt).await
}

/// [`execute`] with the schedule its caller already made of `suites` × `targets` (a run
/// plans its cost with the same one): `options.repeats` and `options.shard` are not read
/// again, the schedule holds them.
pub async fn execute_scheduled(
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    schedule: &Schedule<'_>,
    options: &RunOptions,
    interrupt: impl Future<Output = ()>,
) -> Result<RunResult, RunError> {
    debug_assert_eq!(
        schedule.shard(),
        options.shard,
        "a schedule of another shard"
    );
    std::fs::create_dir_all(&options.dir).map_err(io_at(&options.dir))?;
    let started_at = start(suites, targets, options)?;
    let results_path = results::path(&options.dir);
    let answered = match &options.resume {
        Some(resume) => answered(suites, targets, schedule, resume, &options.dir)?,
        None => HashSet::new(),
    };
    let writer = results::Writer::create(&results_path).map_err(io_at(&results_path))?;
    // One flag per (provider, suite), set once its verdict is decided: its later calls
    // are saved, not sent.
    let decided: Vec<AtomicBool> = (0..targets.len() * suites.len())
        .map(|_| AtomicBool::new(false))
        .collect();
    let mut journal = Journal {
        writer,
        tallies: Tallies::new(suites, targets, schedule),
        progress: Progress::new(schedule.total_calls(), options.progress).with_pacing(targets),
        decided: &decided,
        n_suites: suites.len(),
        every_call: options.every_call || options.shard.is_some(),
    };
    if let Some(resume) = &options.resume {
        (journal.keep(suites, targets, resume, &answered)).map_err(io_at(&results_path))?;
    }
    // Rules see the run's start, never the wall clock of each call: a replay of the
    // same answers gives the same verdicts.
    let now = started_at.unix_timestamp();
    let sent = send_all(suites, targets, schedule, options, &answered, &decided, now);
    let complete = tokio::select! {
        done = journal.consume(sent) => { done.map_err(io_at(&results_path))?; true }
        () = interrupt => false,
    };
    let Journal {
        writer,
        tallies,
        progress,
        ..
    } = journal;
    writer.finish().map_err(io_at(&results_path))?;
    // Calls the budget did not let start leave the run incomplete: nothing is concluded.
    let over_budget = options.budget.as_ref().is_some_and(|b| b.stopped());
    let complete = complete && !over_budget;
    progress.finish(complete);

    let verdicts = tallies.verdicts(
        suites,
        options.max_transport_error_share,
        complete,
        over_budget,
    );
    Ok(RunResult {
        run_id: options.run_id.clone(),
        dir: options.dir.clone(),
        started_at,
        finished_at: OffsetDateTime::now_utc(),
        complete,
        over_budget,
        verdicts,
    })
}

/// The error of a run that cannot write `path`.
fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + use<> {
    let path = path.to_path_buf();
    move |source| RunError::Io { path, source }
}

/// When the run started. A continued run is the same run: it started when the earlier one
/// did, so the evidence's first call, and the validity window anchored to it, are the
/// earlier run's. A new run starts now, and pins what it tests in `run.json`.
fn start(
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    options: &RunOptions,
) -> Result<OffsetDateTime, RunError> {
    if let Some(resume) = &options.resume {
        return Ok(resume.pins.started_at);
    }
    let pins = resume::Pins {
        started_at: OffsetDateTime::now_utc(),
        suites: (suites.iter())
            .map(|s| (s.suite.name.clone(), s.suite.digest().to_string()))
            .collect(),
        providers: (targets.iter())
            .map(|t| (t.endpoint.config.name.clone(), t.endpoint.config.digest()))
            .collect(),
        asked: options.asked.clone(),
    };
    let path = options.dir.join(resume::Pins::FILE);
    pins.write(&options.dir).map_err(io_at(&path))?;
    Ok(pins.started_at)
}

/// The calls of `schedule` that the earlier run's records answer. An answer to a suite
/// or provider changed since counts for nothing. The earlier records are moved aside, to
/// stay beside the new file until the run has written them into it.
fn answered(
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    schedule: &Schedule<'_>,
    resume: &resume::Resume,
    dir: &Path,
) -> Result<HashSet<resume::CallKey>, RunError> {
    let kept = resume.keys();
    let mut answered = HashSet::new();
    for p in 0..targets.len() {
        for call in schedule.calls_of(p) {
            let (suite, config) = (&suites[call.suite].suite, &targets[p].endpoint.config);
            let pinned =
                (resume.pins).holds(&suite.name, suite.digest(), &config.name, &config.digest());
            let key = call_key(suites, targets, call);
            if pinned && kept.contains(&key) {
                answered.insert(key);
            }
        }
    }
    let results_path = results::path(dir);
    let before = dir.join("results.before-resume.jsonl");
    std::fs::rename(&results_path, &before).map_err(io_at(&results_path))?;
    Ok(answered)
}

/// A call made (or saved, or not sent), with its provider's and suite's indexes.
type Made = (usize, usize, CallRecord);

/// Every call of `schedule` not `answered` already, made as the streams are polled: the
/// schedule is an iterator, and each provider's pacer decides how many are in flight.
fn send_all<'a>(
    suites: &'a [Arc<PreparedSuite>],
    targets: &'a [Arc<Target>],
    schedule: &'a Schedule<'_>,
    options: &'a RunOptions,
    answered: &'a HashSet<resume::CallKey>,
    decided: &'a [AtomicBool],
    now: i64,
) -> stream::SelectAll<futures::stream::BoxStream<'a, Made>> {
    let n_suites = suites.len();
    let streams = targets.iter().enumerate().map(move |(p, target)| {
        // The pacer decides how many of these are in flight; the buffer only bounds it.
        let concurrency = target.endpoint.max_in_flight();
        stream::iter(schedule.calls_of(p))
            .filter(move |call| {
                let send =
                    answered.is_empty() || !answered.contains(&call_key(suites, targets, *call));
                std::future::ready(send)
            })
            .map(move |call| {
                let prepared = &suites[call.suite];
                let budget = options.budget.as_deref();
                let decided = &decided[call.provider * n_suites + call.suite];
                async move {
                    let record = call_one(prepared, target, call, now, budget, decided).await;
                    (call.provider, call.suite, record)
                }
            })
            .buffer_unordered(concurrency)
            .boxed()
    });
    stream::select_all(streams)
}

/// Where every record of a run goes as it arrives: the file, the tallies, the progress
/// display, and the flag that saves a decided pair's later calls.
struct Journal<'a> {
    writer: results::Writer,
    tallies: Tallies,
    progress: Progress,
    decided: &'a [AtomicBool],
    n_suites: usize,
    /// Send every planned call even once a pair is decided.
    every_call: bool,
}

impl Journal<'_> {
    /// Buffers `record` for the file, and counts it.
    fn add(&mut self, p: usize, s: usize, mut record: CallRecord) -> std::io::Result<()> {
        self.writer.write(&record)?;
        self.progress.record(&record);
        if self.tallies.add(p, s, &mut record) && !self.every_call {
            self.decided[p * self.n_suites + s].store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The earlier run's records that answer calls of this one, written and counted
    /// first, each once.
    fn keep(
        &mut self,
        suites: &[Arc<PreparedSuite>],
        targets: &[Arc<Target>],
        resume: &resume::Resume,
        answered: &HashSet<resume::CallKey>,
    ) -> std::io::Result<()> {
        for record in resume.records(answered) {
            let p = targets
                .iter()
                .position(|t| t.endpoint.config.name == record.provider);
            let s = suites.iter().position(|s| s.suite.name == record.suite);
            if let (Some(p), Some(s)) = (p, s) {
                self.add(p, s, record)?;
            }
        }
        Ok(())
    }

    /// Takes every call `made` as it completes, flushing the file at most
    /// [`results::FLUSH_INTERVAL`] after the oldest record it holds.
    async fn consume(
        &mut self,
        mut made: impl futures::Stream<Item = Made> + Unpin,
    ) -> std::io::Result<()> {
        // When the oldest buffered record must be on disk; none while nothing waits.
        let mut flush_by: Option<tokio::time::Instant> = None;
        loop {
            let next = match flush_by {
                Some(deadline) => match tokio::time::timeout_at(deadline, made.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        self.writer.flush()?;
                        flush_by = None;
                        continue;
                    }
                },
                None => made.next().await,
            };
            let Some((p, s, record)) = next else {
                return Ok(());
            };
            self.add(p, s, record)?;
            flush_by =
                flush_by.or_else(|| Some(tokio::time::Instant::now() + results::FLUSH_INTERVAL));
        }
    }
}

/// The key of `call`, as its record names it.
fn call_key(suites: &[Arc<PreparedSuite>], targets: &[Arc<Target>], call: Call) -> resume::CallKey {
    let suite = &suites[call.suite].suite;
    resume::key(
        &suite.name,
        &suite.cases[call.case].id,
        &targets[call.provider].endpoint.config.name,
        call.repeat,
    )
}

async fn call_one(
    prepared: &PreparedSuite,
    target: &Target,
    call: Call,
    now: i64,
    budget: Option<&budget::Budget>,
    decided: &AtomicBool,
) -> CallRecord {
    let suite = &prepared.suite;
    let config = &target.endpoint.config;
    let case_ref = &suite.cases[call.case];
    let not_run = |why: String| {
        CallRecord::not_run(&suite.name, &case_ref.id, &config.name, call.repeat, why)
    };
    // Room first, then whether the call is still wanted: a call that waited for room
    // while the verdict was decided is saved, not sent.
    let _slot = target.endpoint.call_slot().await;
    if decided.load(Ordering::SeqCst) {
        return CallRecord {
            saved: true,
            ..not_run(format!(
                "not sent: the verdict on {} × {} was already decided (see `decided`)",
                suite.name, config.name
            ))
        };
    }
    if let Some(why) = target.halted() {
        return not_run(why);
    }
    let (case, rendered) = match prepared.load_request(call.case) {
        Ok(loaded) => loaded,
        Err(d) => return not_run(d.to_string()),
    };
    let prompt = &rendered.prompt;
    let spec = CallSpec {
        prompt,
        schema: &suite.schema,
        schema_name: &prepared.schema_name,
        conversation: rendered.conversation.as_ref(),
    };
    let counted = target
        .counter
        .count_call(&spec)
        .await
        .map(|r| judge::prompt_tokens(target, config, &case, spec.conversation, r));
    let request = target.endpoint.encode(&spec);
    let mut record = CallRecord::new(&suite.name, &case.id, &config.name, call.repeat);
    record.request_digest = Some(request.digest().to_string());
    record.prompt_tokens_counted = counted.as_ref().and_then(|t| t.counted.clone().ok());
    record.prompt_count_inexact = counted.as_ref().is_some_and(|t| !t.exact);
    record.replayed = target.endpoint.replays();
    // An overflow is the provider's failure to hold this prompt: recorded, never sent,
    // and it costs no tokens.
    if let Some(overflow) = judge::overflow(config, counted.as_ref()) {
        record.checks = vec![overflow];
        return record;
    }
    let cost = Cost::of(config, prompt, counted.as_ref(), &record, call.requests());
    if let Some(budget) = budget
        && !budget.reserve(cost.ceiling.unwrap_or(f64::INFINITY))
    {
        return not_run(format!(
            "not sent: it could take the spend over the budget of {} USD",
            budget.limit()
        ));
    }
    let (result, plain) = send(target, &request, &spec, cost.tokens, call.twin).await;
    let judged = judge::judge(
        prepared,
        config,
        &case,
        result.as_ref().map(|c| &c.reply),
        plain.as_ref().map(|p| p.as_ref()),
        CallFacts {
            now,
            tokens: counted.as_ref(),
        },
        call.repeat,
    );
    record.unstreamed = plain.map(|p| Box::new(judge::unstreamed(p)));
    judged.apply(&mut record);
    if let Some(budget) = budget {
        cost.settle(budget, config, &result);
    }
    keep_answer(&mut record, result, config);
    record
}

/// What one call may cost: the tokens it may use (prompt and output ceiling), and the
/// most it may spend with its twin, when the provider has prices.
struct Cost {
    tokens: u32,
    ceiling: Option<f64>,
    /// Requests the call sends: 2 with its unstreamed twin.
    sends: f64,
}

impl Cost {
    fn of(
        config: &ProviderConfig,
        prompt: &conform_config::suite::Prompt,
        counted: Option<&conform_check::check::tokens::PromptTokens>,
        record: &CallRecord,
        requests: u64,
    ) -> Cost {
        let estimate = match record.prompt_tokens_counted {
            Some(n) => n,
            None => (prompt.user.len() + prompt.system.as_ref().map_or(0, String::len)) as u64 / 4,
        };
        let tokens = u32::try_from(estimate)
            .unwrap_or(u32::MAX)
            .saturating_add(config.max_output_tokens);
        let sends = requests as f64;
        let exact = counted.is_some_and(|t| t.exact && t.counted.is_ok());
        let ceiling = config.pricing.map(|p| {
            sends
                * p.call_range(estimate, exact, u64::from(config.max_output_tokens))
                    .high
        });
        Cost {
            tokens,
            ceiling,
            sends,
        }
    }

    /// Gives the budget back what the call did not spend. The twin's usage is not kept:
    /// its share stays at its ceiling.
    fn settle(
        &self,
        budget: &budget::Budget,
        config: &ProviderConfig,
        result: &Result<Completion, CallError>,
    ) {
        let Some(ceiling) = self.ceiling else {
            return;
        };
        let usage = match result {
            Ok(c) => Some(c.reply.usage),
            Err(e) => e.served.as_ref().map(|s| s.usage),
        };
        let actual = usage.and_then(|u| {
            let p = config.pricing?;
            Some(
                p.cost(u.prompt_tokens?, u.output_tokens?)
                    + ceiling * (self.sends - 1.0) / self.sends,
            )
        });
        budget.settle(ceiling, actual);
    }
}

/// Sends the call, and its unstreamed twin when the suite asks streamed answers to agree
/// with it (a streamed call that failed has nothing to agree). An error that stops the
/// provider halts it for every call after.
async fn send(
    target: &Target,
    request: &Encoded,
    spec: &CallSpec<'_>,
    tokens: u32,
    twin: bool,
) -> (
    Result<Completion, CallError>,
    Option<Result<conform_wire::provider::Reply, CallError>>,
) {
    let halts = |error: &CallError| {
        if matches!(error.effect(), Effect::HaltProvider | Effect::ConfigError) {
            target.halt(error);
        }
    };
    let result = target.endpoint.send(request, tokens).await;
    if let Err(error) = &result {
        halts(error);
    }
    let plain = if twin && result.is_ok() {
        let plain = target.endpoint.call_unstreamed(spec, tokens).await;
        if let Err(error) = &plain {
            halts(error);
        }
        Some(plain.map(|c| c.reply))
    } else {
        None
    };
    (result, plain)
}

/// What came back, in the record: the answer and its timings, or the error with what a
/// failed call still said (its retries, and for a processed body of the wrong shape what
/// it cost, which model served it, how long it took and the answer so far).
fn keep_answer(
    record: &mut CallRecord,
    result: Result<Completion, CallError>,
    config: &ProviderConfig,
) {
    // A simulation with a faster clock stands for the latency it simulates.
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0 / config.time_scale();
    match result {
        Ok(completion) => {
            record.latency_ms = Some(ms(completion.latency));
            record.ttfb_ms = completion.first_byte.map(ms);
            record.ttft_ms = completion.first_token.map(ms);
            record.retries = completion.retries;
            let reply = completion.reply;
            record.usage = reply.usage;
            record.served_model = reply.served_model;
            record.system_fingerprint = reply.system_fingerprint;
            record.finish = Some(reply.finish);
            record.refusal = reply.refusal;
            record.output = Some(reply.text);
            record.tool_calls = reply.tool_calls;
        }
        Err(mut error) => {
            record.retries = error.retries;
            if let Some(measured) = error.measured.take() {
                record.latency_ms = Some(ms(measured.latency));
                record.ttfb_ms = measured.first_byte.map(ms);
                record.ttft_ms = measured.first_token.map(ms);
            }
            if let Some(served) = error.served.take() {
                record.usage = served.usage;
                record.served_model = served.model;
                record.system_fingerprint = served.system_fingerprint;
                record.output = served.text;
            }
            record.error = Some(error);
        }
    }
}

pub use conform_config::suite::schema_name;

/// A run id that sorts by start time, to the millisecond: `20261129T163000Z-4071a` (the
/// second, then its milliseconds and a salt).
pub fn new_run_id() -> String {
    let now = OffsetDateTime::now_utc();
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let stamp = now
        .format(&format)
        .unwrap_or_else(|_| now.unix_timestamp().to_string());
    // The milliseconds first, so that ids sort in the order the runs started (two runs in
    // the same second included); the salt then tells apart processes in the same one.
    let salt = (now.nanosecond() ^ std::process::id().rotate_left(16)) & 0xff;
    format!("{stamp}-{:03}{salt:02x}", now.millisecond())
}
