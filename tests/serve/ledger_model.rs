//! Model-based test of the ledger: random sequences of create / replay / start / finish /
//! fail / time out / cancel / job-cancel against an in-memory model and the real ledger
//! (a SQLite file and PostgreSQL), comparing every answer and every job after every step,
//! and checking the invariants straight from the rows.
//!
//! `PROPTEST_CASES` overrides the number of sequences per backend.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use conform_serve::ledger::{
    AttemptCancel, AttemptState, Created, Finished, Job, JobCancel, Ledger, NewJob, Started,
    Transition as LedgerTransition,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
use serde_json::json;

// ---- the model -------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct MAttempt {
    provider: u8,
    state: AttemptState,
    base_version: i64,
}

#[derive(Debug, Clone, PartialEq)]
struct MJob {
    owner: u8,
    key: u8,
    payload: u8,
    version: i64,
    /// Index of the winning attempt.
    completed_by: Option<usize>,
    result: Option<u32>,
    cancelled: bool,
    attempts: Vec<MAttempt>,
}

#[derive(Debug, Clone, Default)]
struct Model {
    jobs: Vec<MJob>,
}

#[derive(Debug, Clone)]
enum Step {
    /// A creation; a replay when (owner, key) is taken with the same payload.
    Create {
        owner: u8,
        key: u8,
        payload: u8,
    },
    Start {
        job: Index,
        provider: u8,
    },
    Result {
        job: Index,
        attempt: Index,
        value: u32,
    },
    Fail {
        job: Index,
        attempt: Index,
    },
    /// The deadline passes (or a 5xx): `starting` becomes `unknown`.
    TimeOut {
        job: Index,
        attempt: Index,
    },
    CancelAttempt {
        job: Index,
        attempt: Index,
    },
    CancelJob {
        job: Index,
    },
}

/// What the ledger must answer to a step.
#[derive(Debug, Clone, PartialEq)]
enum Expected {
    New,
    Replayed(usize),
    KeyReused(usize),
    Started(usize, usize),
    JobCompleted,
    JobCancelled,
    InProgress(usize, usize),
    Won,
    Lost,
    Ignored(AttemptState),
    Changed(AttemptState, AttemptState),
    Unchanged(AttemptState),
    AttemptCancelled(AttemptState),
    AlreadyCancelled,
    Terminal,
    JobCancelledNow(Vec<usize>),
    JobAlreadyCancelled,
}

fn pick(model: &Model, job: &Index, attempt: &Index) -> (usize, usize) {
    let j = job.index(model.jobs.len());
    (j, attempt.index(model.jobs[j].attempts.len()))
}

/// The model's answer and next state: the contract's transitions and nothing else.
fn step(mut model: Model, s: &Step) -> (Model, Expected) {
    let expected = match s {
        Step::Create {
            owner,
            key,
            payload,
        } => {
            match model
                .jobs
                .iter()
                .position(|j| j.owner == *owner && j.key == *key)
            {
                Some(j) if model.jobs[j].payload == *payload => Expected::Replayed(j),
                Some(j) => Expected::KeyReused(j),
                None => {
                    model.jobs.push(MJob {
                        owner: *owner,
                        key: *key,
                        payload: *payload,
                        version: 1,
                        completed_by: None,
                        result: None,
                        cancelled: false,
                        attempts: vec![MAttempt {
                            provider: 0,
                            state: AttemptState::Starting,
                            base_version: 1,
                        }],
                    });
                    Expected::New
                }
            }
        }
        Step::Start { job, provider } => {
            let j = job.index(model.jobs.len());
            let m = &mut model.jobs[j];
            if m.completed_by.is_some() {
                Expected::JobCompleted
            } else if m.cancelled {
                Expected::JobCancelled
            } else if let Some(open) = m.attempts.iter().position(|a| a.state.is_open()) {
                Expected::InProgress(j, open)
            } else {
                m.attempts.push(MAttempt {
                    provider: *provider,
                    state: AttemptState::Starting,
                    base_version: m.version,
                });
                Expected::Started(j, m.attempts.len() - 1)
            }
        }
        Step::Result {
            job,
            attempt,
            value,
        } => {
            let (j, a) = pick(&model, job, attempt);
            let m = &mut model.jobs[j];
            let state = m.attempts[a].state;
            if !state.accepts_result() {
                Expected::Ignored(state)
            } else if m.version == m.attempts[a].base_version && m.completed_by.is_none() {
                m.completed_by = Some(a);
                m.result = Some(*value);
                m.version += 1;
                m.attempts[a].state = AttemptState::Succeeded;
                Expected::Won
            } else {
                m.attempts[a].state = AttemptState::Superseded;
                Expected::Lost
            }
        }
        Step::Fail { job, attempt } => {
            let (j, a) = pick(&model, job, attempt);
            let at = &mut model.jobs[j].attempts[a];
            if at.state.is_open() {
                let from = at.state;
                at.state = AttemptState::Failed;
                Expected::Changed(from, AttemptState::Failed)
            } else {
                Expected::Unchanged(at.state)
            }
        }
        Step::TimeOut { job, attempt } => {
            let (j, a) = pick(&model, job, attempt);
            let at = &mut model.jobs[j].attempts[a];
            if at.state == AttemptState::Starting {
                at.state = AttemptState::Unknown;
                Expected::Changed(AttemptState::Starting, AttemptState::Unknown)
            } else {
                Expected::Unchanged(at.state)
            }
        }
        Step::CancelAttempt { job, attempt } => {
            let (j, a) = pick(&model, job, attempt);
            let at = &mut model.jobs[j].attempts[a];
            match at.state {
                AttemptState::Starting | AttemptState::Unknown => {
                    let from = at.state;
                    at.state = AttemptState::Cancelled;
                    Expected::AttemptCancelled(from)
                }
                AttemptState::Cancelled => Expected::AlreadyCancelled,
                _ => Expected::Terminal,
            }
        }
        Step::CancelJob { job } => {
            let j = job.index(model.jobs.len());
            let m = &mut model.jobs[j];
            if m.completed_by.is_some() {
                Expected::JobCompleted
            } else if m.cancelled {
                Expected::JobAlreadyCancelled
            } else {
                m.cancelled = true;
                m.version += 1;
                let mut released = Vec::new();
                for (i, a) in m.attempts.iter_mut().enumerate() {
                    if a.state.is_open() {
                        a.state = AttemptState::Cancelled;
                        released.push(i);
                    }
                }
                Expected::JobCancelledNow(released)
            }
        }
    };
    (model, expected)
}

struct LedgerModel;

impl ReferenceStateMachine for LedgerModel {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        let create = (0..2u8, 0..3u8, 0..2u8).prop_map(|(owner, key, payload)| Step::Create {
            owner,
            key,
            payload,
        });
        if state.jobs.is_empty() {
            return create.boxed();
        }
        let ja = (any::<Index>(), any::<Index>());
        prop_oneof![
            3 => create,
            3 => (any::<Index>(), 0..2u8).prop_map(|(job, provider)| Step::Start { job, provider }),
            4 => (ja.clone(), 0..1000u32)
                .prop_map(|((job, attempt), value)| Step::Result { job, attempt, value }),
            2 => ja.clone().prop_map(|(job, attempt)| Step::Fail { job, attempt }),
            2 => ja.clone().prop_map(|(job, attempt)| Step::TimeOut { job, attempt }),
            3 => ja.prop_map(|(job, attempt)| Step::CancelAttempt { job, attempt }),
            1 => any::<Index>().prop_map(|job| Step::CancelJob { job }),
        ]
        .boxed()
    }

    fn preconditions(state: &Model, s: &Step) -> bool {
        matches!(s, Step::Create { .. }) || !state.jobs.is_empty()
    }

    fn apply(state: Model, s: &Step) -> Model {
        step(state, s).0
    }
}

// ---- the system under test -------------------------------------------------------------

/// One database per backend for the whole run; every sequence has its own owners.
struct Shared {
    runtime: tokio::runtime::Runtime,
    ledger: Ledger,
    db: support::TestDb,
}

/// The database of the run in progress, per backend (`init_test` takes no context).
static SHARED: [Mutex<Option<Arc<Shared>>>; 2] = [Mutex::new(None), Mutex::new(None)];

fn shared(postgres: bool) -> Arc<Shared> {
    SHARED[usize::from(postgres)]
        .lock()
        .unwrap()
        .clone()
        .expect("the run installed its database")
}

struct Sut {
    shared: Arc<Shared>,
    /// Unique per sequence, so sequences never see each other's jobs.
    case: String,
    /// The real ids, in the model's order.
    jobs: Vec<(String, Vec<String>)>,
    model: Model,
    /// The first result seen per job: it must never change.
    results: HashMap<String, serde_json::Value>,
    /// Each attempt's state after the previous step.
    states: HashMap<String, AttemptState>,
}

const PROVIDERS: [&str; 2] = ["primary", "fallback"];
const TIMEOUT: Duration = Duration::from_secs(3600);

impl Sut {
    fn owner(&self, owner: u8) -> String {
        format!("{}-{owner}", self.case)
    }

    fn ids(&self, j: usize, a: usize) -> (String, String) {
        (self.jobs[j].0.clone(), self.jobs[j].1[a].clone())
    }

    fn apply(&mut self, s: &Step) {
        let (next, expected) = step(self.model.clone(), s);
        let ledger = &self.shared.ledger;
        let rt = &self.shared.runtime;
        let got = match s {
            Step::Create {
                owner,
                key,
                payload,
            } => {
                let owner = self.owner(*owner);
                let key = format!("key-{key}");
                let input = json!({"payload": payload});
                let fingerprint = format!("sha256:{payload}");
                let new = NewJob {
                    owner: &owner,
                    idempotency_key: &key,
                    fingerprint: &fingerprint,
                    task: "t",
                    provider: PROVIDERS[0],
                    input: &input,
                    attempt_timeout: TIMEOUT,
                };
                match rt.block_on(ledger.create_job(&new)).unwrap() {
                    Created::New(job) => {
                        self.jobs.push((job.id, vec![job.attempts[0].id.clone()]));
                        Expected::New
                    }
                    Created::Replayed(job) => Expected::Replayed(self.job_index(&job.id)),
                    Created::KeyReused { job_id } => Expected::KeyReused(self.job_index(&job_id)),
                }
            }
            Step::Start { job, provider } => {
                let j = job.index(self.jobs.len());
                let owner = self.owner(self.model.jobs[j].owner);
                let job_id = self.jobs[j].0.clone();
                let started = rt
                    .block_on(ledger.start_attempt(
                        &owner,
                        &job_id,
                        PROVIDERS[*provider as usize],
                        TIMEOUT,
                    ))
                    .unwrap();
                match started {
                    Started::Started { attempt, .. } => {
                        self.jobs[j].1.push(attempt.id);
                        Expected::Started(j, self.jobs[j].1.len() - 1)
                    }
                    Started::InProgress { attempt_id } => {
                        Expected::InProgress(j, self.attempt_index(j, &attempt_id))
                    }
                    Started::JobCompleted => Expected::JobCompleted,
                    Started::JobCancelled => Expected::JobCancelled,
                    Started::NotFound => panic!("own job not found"),
                }
            }
            Step::Result {
                job,
                attempt,
                value,
            } => {
                let (j, a) = pick(&self.model, job, attempt);
                let (_, id) = self.ids(j, a);
                match rt
                    .block_on(ledger.record_result(&id, &json!(value)))
                    .unwrap()
                {
                    Finished::Won { .. } => Expected::Won,
                    Finished::Lost { .. } => Expected::Lost,
                    Finished::Ignored { state } => Expected::Ignored(state),
                }
            }
            Step::Fail { job, attempt } | Step::TimeOut { job, attempt } => {
                let (j, a) = pick(&self.model, job, attempt);
                let (_, id) = self.ids(j, a);
                let t = if matches!(s, Step::Fail { .. }) {
                    rt.block_on(ledger.record_failure(&id, "http_400"))
                } else {
                    rt.block_on(ledger.record_unknown(&id, "timeout"))
                };
                match t.unwrap() {
                    LedgerTransition::Changed { from, to, .. } => Expected::Changed(from, to),
                    LedgerTransition::Unchanged(state) => Expected::Unchanged(state),
                }
            }
            Step::CancelAttempt { job, attempt } => {
                let (j, a) = pick(&self.model, job, attempt);
                let owner = self.owner(self.model.jobs[j].owner);
                let (_, id) = self.ids(j, a);
                match rt.block_on(ledger.cancel_attempt(&owner, &id)).unwrap() {
                    AttemptCancel::Cancelled { from, .. } => Expected::AttemptCancelled(from),
                    AttemptCancel::AlreadyCancelled(_) => Expected::AlreadyCancelled,
                    AttemptCancel::Terminal(_) => Expected::Terminal,
                    AttemptCancel::NotFound => panic!("own attempt not found"),
                }
            }
            Step::CancelJob { job } => {
                let j = job.index(self.jobs.len());
                let owner = self.owner(self.model.jobs[j].owner);
                let job_id = self.jobs[j].0.clone();
                match rt.block_on(ledger.cancel_job(&owner, &job_id)).unwrap() {
                    JobCancel::Cancelled { released, .. } => Expected::JobCancelledNow(
                        released
                            .iter()
                            .map(|(id, _)| self.attempt_index(j, id))
                            .collect(),
                    ),
                    JobCancel::AlreadyCancelled(_) => Expected::JobAlreadyCancelled,
                    JobCancel::Completed => Expected::JobCompleted,
                    JobCancel::NotFound => panic!("own job not found"),
                }
            }
        };
        assert_eq!(got, expected, "the ledger and the model disagree on {s:?}");
        self.model = next;
        self.check(s);
    }

    fn job_index(&self, id: &str) -> usize {
        self.jobs
            .iter()
            .position(|(j, _)| j == id)
            .expect("a job of this sequence")
    }

    fn attempt_index(&self, j: usize, id: &str) -> usize {
        self.jobs[j]
            .1
            .iter()
            .position(|a| a == id)
            .expect("an attempt of this job")
    }

    /// Every job equals its model, and the invariants hold on the rows themselves.
    fn check(&mut self, s: &Step) {
        let ledger = &self.shared.ledger;
        let mut real: HashMap<String, Job> = HashMap::new();
        for owner in 0..2u8 {
            let jobs = self
                .shared
                .runtime
                .block_on(ledger.jobs(&self.owner(owner)))
                .unwrap();
            let expected = self.model.jobs.iter().filter(|m| m.owner == owner).count();
            // At most one job per (owner, key): exactly as many as the model created.
            assert_eq!(jobs.len(), expected, "jobs of owner {owner}");
            real.extend(jobs.into_iter().map(|j| (j.id.clone(), j)));
        }
        for (j, m) in self.model.jobs.clone().iter().enumerate() {
            let (job_id, attempt_ids) = self.jobs[j].clone();
            let job = real.remove(&job_id).expect("the job exists");
            assert_eq!(job.idempotency_key, format!("key-{}", m.key));
            assert_eq!(job.version, m.version, "version of job {j}");
            assert_eq!(job.cancelled_ms.is_some(), m.cancelled);
            assert_eq!(
                job.completed_by,
                m.completed_by.map(|a| attempt_ids[a].clone()),
                "winner of job {j}"
            );
            assert_eq!(job.result, m.result.map(|v| json!(v)));
            let ids: Vec<_> = job.attempts.iter().map(|a| a.id.clone()).collect();
            assert_eq!(ids, attempt_ids, "attempts of job {j}, in order");
            for (a, (real, model)) in job.attempts.iter().zip(&m.attempts).enumerate() {
                assert_eq!(real.state, model.state, "attempt {a} of job {j}");
                assert_eq!(real.base_version, model.base_version);
                assert_eq!(real.provider, PROVIDERS[model.provider as usize]);
            }
            // At most one winner, and it is the winning attempt.
            let winners: Vec<_> = job
                .attempts
                .iter()
                .filter(|a| a.state == AttemptState::Succeeded)
                .collect();
            assert!(winners.len() <= 1);
            assert_eq!(winners.first().map(|a| &a.id), job.completed_by.as_ref());
            // No attempt starts while another is open.
            assert!(job.attempts.iter().filter(|a| a.state.is_open()).count() <= 1);
            // A result is never overwritten.
            if let Some(result) = &job.result {
                let first = self.results.entry(job.id.clone()).or_insert(result.clone());
                assert_eq!(first, result, "the result of job {j} was overwritten");
            }
            // `unknown` never turns into `failed` without a failure event for it.
            for attempt in &job.attempts {
                let before = self.states.insert(attempt.id.clone(), attempt.state);
                if before == Some(AttemptState::Unknown) && attempt.state == AttemptState::Failed {
                    let Step::Fail {
                        job: fj,
                        attempt: fa,
                    } = s
                    else {
                        panic!("attempt {} went unknown -> failed on {s:?}", attempt.id);
                    };
                    let (fj, fa) = pick(&self.model, fj, fa);
                    assert_eq!(
                        self.jobs[fj].1[fa], attempt.id,
                        "unknown -> failed on another attempt's event"
                    );
                }
            }
        }
    }
}

struct LedgerTest<const POSTGRES: bool>;

static CASE: LazyLock<std::sync::atomic::AtomicU64> =
    LazyLock::new(|| std::sync::atomic::AtomicU64::new(0));

impl<const POSTGRES: bool> StateMachineTest for LedgerTest<POSTGRES> {
    type SystemUnderTest = Sut;
    type Reference = LedgerModel;

    fn init_test(_: &Model) -> Sut {
        let n = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Sut {
            shared: shared(POSTGRES),
            case: format!("case-{}-{n}", support::unique()),
            jobs: Vec::new(),
            model: Model::default(),
            results: HashMap::new(),
            states: HashMap::new(),
        }
    }

    fn apply(mut sut: Sut, _: &Model, s: Step) -> Sut {
        sut.apply(&s);
        sut
    }
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

/// Runs `cases` random sequences on one backend, then drops its database.
fn run(postgres: bool, cases: u32) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (db, ledger) = runtime.block_on(async {
        let db = if postgres {
            // Thousands of commits: durability is not what this test is about.
            support::TestDb::postgres_with("-c synchronous_commit=off").await
        } else {
            support::TestDb::sqlite().await
        };
        let ledger = db.ledger().await;
        (db, ledger)
    });
    *SHARED[usize::from(postgres)].lock().unwrap() = Some(Arc::new(Shared {
        runtime,
        ledger,
        db,
    }));
    let config = Config {
        cases,
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config.clone());
    let outcome = runner.run(
        &LedgerModel::sequential_strategy(1..40),
        |(initial, transitions, seen)| {
            if postgres {
                LedgerTest::<true>::test_sequential(config.clone(), initial, transitions, seen);
            } else {
                LedgerTest::<false>::test_sequential(config.clone(), initial, transitions, seen);
            }
            Ok(())
        },
    );
    let shared = SHARED[usize::from(postgres)].lock().unwrap().take();
    if let Some(Shared {
        runtime,
        ledger,
        db,
    }) = shared.and_then(|s| Arc::try_unwrap(s).ok())
    {
        runtime.block_on(async {
            ledger.close().await;
            db.cleanup().await;
        });
    }
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

#[test]
fn sqlite_ledger_matches_the_model() {
    run(false, cases(1000));
}

#[test]
fn postgres_ledger_matches_the_model() {
    run(true, cases(200));
}
