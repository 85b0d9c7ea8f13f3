//! `conform run`, `demo` and `merge` end to end, as the binary calls them: the runner
//! ([`crate::run`]), the estimate ([`crate::plan`]), the shard manifest and the
//! conclusions ([`crate::conclude`]) put together once, so that a run and a merge
//! estimate, conclude and say what they wrote by the same path.
//!
//! A run goes in steps, so the caller prints between them what a person reads first:
//! [`Ready::assemble`], [`Ready::run`] (which says the budget line before anything is
//! sent), then [`Ran::write_shard`] or [`Ran::conclude`]. A merge is [`merge`] and the
//! same conclusion.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use crate::conclude::Destination;
use crate::conclude::{Conclude, ConcludeError};
use crate::merge::{self, MergeError};
use crate::plan;
use crate::run::assemble::{AssembleError, Assembly, Setup, TapeMode, assemble};
use crate::run::budget::Budget;
use crate::run::resume::{Asked, Given, Pins};
use crate::run::schedule::Schedule;
use crate::run::shard::{Manifest, PlanOptions, Shard, ShardedRun};
use crate::run::shard_signature::{self, ShardSignatureError};
use crate::run::{self, PreparedSuite, RunError, RunOptions, RunResult, Target};
use conform_allowlist::sign::{SignError, SigningKey, Trust};
use conform_config::{Diagnostics, Paths, Selection, Workspace};
use conform_gate::allowlist::UpdateError;
use conform_wire::provider::tape::{Recorder, TapeError};

/// Why a run or a merge could not be carried out or concluded.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// Every problem of the files at once: a configuration error.
    #[error("{0}")]
    Problems(Diagnostics),
    /// Options the project refuses (a validity beyond `max_valid_for`, a budget
    /// without prices …): a usage error.
    #[error("{0}")]
    Usage(String),
    /// The tapes to replay could not be read: a usage error.
    #[error(transparent)]
    Replay(AssembleError),
    #[error(transparent)]
    Assemble(AssembleError),
    #[error(transparent)]
    Run(#[from] RunError),
    /// The run to continue could not be read: a usage error.
    #[error(transparent)]
    Resume(#[from] run::resume::ResumeError),
    #[error("cannot write the shard manifest in {}: {source}", dir.display())]
    Manifest {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tape(#[from] TapeError),
    #[error("cannot unpack the demo's simulated providers: {0}")]
    Unpack(std::io::Error),
    #[error(transparent)]
    Conclude(#[from] ConcludeError),
    #[error(transparent)]
    Sign(#[from] SignError),
    #[error(transparent)]
    ShardSignature(#[from] ShardSignatureError),
    /// The shards do not make one run: nothing was merged.
    #[error("{0}")]
    Refused(MergeError),
}

impl ExecuteError {
    /// The command was asked something it cannot do (as opposed to a failure to
    /// write): a usage or configuration error. An unsigned run refused the allowlist
    /// under a trust file is one: signing, or `--allow-unsigned`, is the caller's to add.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ExecuteError::Usage(_)
                | ExecuteError::Replay(_)
                | ExecuteError::Resume(_)
                | ExecuteError::Conclude(ConcludeError::Allowlist(
                    UpdateError::UnsignedOverSigned { .. }
                ))
        )
    }
}

/// The providers and suites `selection` names in the project, every problem at once.
pub fn load(paths: &Paths, selection: Selection) -> Result<Workspace, ExecuteError> {
    Workspace::load(paths, &selection).map_err(ExecuteError::Problems)
}

/// The workspace `conform run` runs and the arguments it runs with (`given`, or those of
/// the run in `resume` it continues, [`Given::continuing`]): the providers asked for
/// (every real one by default), their live references, one provider's address replaced
/// when asked. The arguments come back with the providers and suites resolved, as the
/// run's `run.json` pins them.
pub fn for_run(
    paths: &Paths,
    given: Given,
    resume: Option<&Path>,
) -> Result<(Workspace, Asked), ExecuteError> {
    // Every provider that is not simulated, unless named (or pinned, which names them).
    let mut every_real = given.providers.is_empty();
    let mut asked = match resume.map(|dir| (dir, run::resume::Pins::read(dir))) {
        Some((
            dir,
            Some(Pins {
                asked: Some(pinned),
                ..
            }),
        )) => {
            every_real = false;
            given.continuing(&pinned, dir)?
        }
        // A run of a conform before `run.json` kept its arguments: its records name the
        // providers and suites, and the command line the rest.
        Some((dir, _)) if given.providers.is_empty() && given.suites.is_empty() => {
            let (providers, suites) = run::resume::selection(dir)?;
            Given {
                providers,
                suites,
                ..given
            }
            .fresh()
        }
        _ => given.fresh(),
    };
    if asked.base_url.is_some() && asked.providers.len() != 1 {
        return Err(ExecuteError::Usage(
            "--base-url needs exactly one provider, e.g. `conform run openai --base-url URL`"
                .into(),
        ));
    }
    // A signing key or trust file that cannot be read is found before anything is paid for.
    SigningKey::from_env().map_err(|e| ExecuteError::Usage(e.to_string()))?;
    Trust::load(&paths.trust).map_err(|e| ExecuteError::Usage(e.to_string()))?;
    let selection = Selection {
        providers: asked.providers.clone(),
        suites: asked.suites.clone(),
    };
    let mut workspace = load(paths, selection)?;
    (workspace.settings)
        .allow_valid_for(asked.valid_for)
        .map_err(|e| ExecuteError::Usage(e.to_string()))?;
    if every_real {
        workspace.providers.retain(|p| !p.is_simulated());
        if workspace.providers.is_empty() {
            return Err(ExecuteError::Usage(format!(
                "no providers to run in {}: every one there is simulated; add providers/NAME.toml, or try `conform demo`",
                paths.providers.display()
            )));
        }
    }
    (asked.providers, asked.suites) = names(&workspace);
    conform_config::reference::add_live_references(
        &mut workspace,
        paths,
        asked.reference.as_deref(),
    )
    .map_err(ExecuteError::Problems)?;
    // The one provider named, never the reference added beside it: the reference is what
    // the candidate is judged against, sent as its own file says.
    if let Some(url) = &asked.base_url {
        for p in &mut workspace.providers {
            if asked.providers.contains(&p.name) {
                p.override_base_url(url);
            }
        }
    }
    Ok((workspace, asked))
}

/// Which provider `--base-url` sent elsewhere, when a reference runs beside it: the URL
/// replaces the candidate's address, not the reference's.
pub fn base_url_note(asked: &Asked) -> Option<String> {
    let (url, reference) = (asked.base_url.as_ref()?, asked.reference.as_ref()?);
    Some(format!(
        "--base-url {url} replaces the address of `{}` only; the reference `{reference}` is \
         sent where providers/{reference}.toml says",
        asked.providers.join("`, `")
    ))
}

/// The names of the providers and suites of `workspace`.
fn names(workspace: &Workspace) -> (Vec<String>, Vec<String>) {
    (
        workspace.providers.iter().map(|p| p.name.clone()).collect(),
        workspace.suites.iter().map(|s| s.name.clone()).collect(),
    )
}

/// The workspace `conform demo` runs ([`demo_workspace`]: the project's simulations or
/// the embedded ones), its simulated providers with their live references, the
/// arguments (`given`) it runs with, and whose simulations they are.
pub fn for_demo(
    project: &Paths,
    given: Given,
) -> Result<(Workspace, Asked, DemoSource), ExecuteError> {
    let (mut workspace, paths, source) = demo_workspace(project, &given.suites)?;
    workspace.providers.retain(|p| p.is_simulated());
    let mut asked = given.fresh();
    (asked.providers, asked.suites) = names(&workspace);
    conform_config::reference::add_live_references(&mut workspace, &paths, None)
        .map_err(ExecuteError::Problems)?;
    if workspace.providers.is_empty() {
        return Err(ExecuteError::Usage(format!(
            "no simulated providers (kind = \"sim\") in {}",
            paths.providers.display()
        )));
    }
    Ok((workspace, asked, source))
}

/// Where the demo's simulated providers come from.
#[derive(Debug)]
pub enum DemoSource {
    /// The project's own (`kind = "sim"` in its providers folder), by name, run on its
    /// own suites.
    Project(Vec<String>),
    /// Those the binary carries ([`crate::embedded`]), unpacked here for as long as the
    /// demo runs, with the demo's suites and no project settings.
    Embedded(tempfile::TempDir),
}

impl DemoSource {
    /// What a person reads first: whose simulations these are.
    pub fn describe(&self, project: &Paths) -> String {
        match self {
            DemoSource::Project(names) => format!(
                "demo: this project's own simulated providers in {}: {}",
                project.providers.display(),
                names.join(", ")
            ),
            DemoSource::Embedded(_) => format!(
                "demo: no simulated provider (kind = \"sim\") in {}: running the ones built \
                 into conform on its demo suites",
                project.providers.display()
            ),
        }
    }
}

/// The demo's workspace, with the paths it was read from: the project's own simulations
/// and suites where its providers folder has any, else the ones the binary carries, so
/// the demo runs from any folder (an empty one, a project `conform init` made).
pub fn demo_workspace(
    project: &Paths,
    suites: &[String],
) -> Result<(Workspace, Paths, DemoSource), ExecuteError> {
    let own = own_simulations(&project.providers);
    if !own.is_empty() {
        let selection = Selection {
            providers: Vec::new(),
            suites: suites.to_vec(),
        };
        return Ok((
            load(project, selection)?,
            project.clone(),
            DemoSource::Project(own),
        ));
    }
    let dir = tempfile::tempdir().map_err(ExecuteError::Unpack)?;
    crate::embedded::unpack(dir.path()).map_err(ExecuteError::Unpack)?;
    let paths = Paths::under(dir.path());
    let selection = Selection {
        providers: Vec::new(),
        suites: suites.to_vec(),
    };
    Ok((load(&paths, selection)?, paths, DemoSource::Embedded(dir)))
}

/// The names of the simulated providers in `dir`; a file that does not load is left to
/// the full load to report.
fn own_simulations(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "toml"))
        .filter_map(|path| conform_config::ProviderConfig::load(&path).ok())
        .filter(|p| p.is_simulated())
        .map(|p| p.name)
        .collect();
    names.sort();
    names
}

/// Simulated evidence permits nothing, so the demo never writes the allowlist production
/// reads: when one was named, saying so beats a flag that silently does nothing.
pub fn demo_note(allowlist: Option<&std::path::Path>) -> Option<String> {
    allowlist.map(|path| {
        format!(
            "note: the demo does not write {} (--allowlist or CONFORM_ALLOWLIST): simulated \
             evidence goes only to the run's own reports/<run-id>/allowlist.json",
            path.display()
        )
    })
}

/// A budget every provider has the prices to keep.
pub fn keepable(budget: Option<f64>, workspace: &Workspace) -> Result<(), ExecuteError> {
    match budget.map(|limit| run::budget::keepable(limit, &workspace.providers)) {
        Some(Err(e)) => Err(ExecuteError::Usage(e.to_string())),
        _ => Ok(()),
    }
}

/// How a run goes beyond what the files say.
#[derive(Debug, Clone)]
pub struct Execute {
    /// Every argument that shapes the evidence (`--stream`, `--repeats`, `--shard` …),
    /// as the run's `run.json` pins them.
    pub asked: Asked,
    pub tape: Option<TapeMode>,
    pub progress: bool,
    /// Continue the run in this folder, keeping what its records answered (`--resume`,
    /// `--rerun-failed`).
    pub resume: Option<(PathBuf, run::resume::Keep)>,
    /// USD (`--budget`).
    pub budget: Option<f64>,
    /// The reports folder: the run writes `<run-id>/`, a shard `shards/shard-K-of-N/`.
    pub reports: PathBuf,
}

/// A run assembled, nothing sent yet. The simulations live as long as it does.
pub struct Ready {
    setup: Setup,
    assembly: Assembly,
}

impl Ready {
    /// Assembles `workspace`: suites, endpoints, simulations, tapes.
    pub async fn assemble(workspace: Workspace, how: &Execute) -> Result<Ready, ExecuteError> {
        let setup = Setup {
            tape: how.tape.clone(),
            stream: how.asked.stream,
            offline: false,
        };
        match assemble(workspace, &setup).await {
            Ok(assembly) => Ok(Ready { setup, assembly }),
            Err(AssembleError::Problems(problems)) => Err(ExecuteError::Problems(problems)),
            Err(e @ AssembleError::Tape(_)) if matches!(setup.tape, Some(TapeMode::Replay(_))) => {
                Err(ExecuteError::Replay(e))
            }
            Err(e) => Err(ExecuteError::Assemble(e)),
        }
    }

    /// Schedules and estimates the run, tells `say` the budget beside the plan's cost
    /// (before anything is sent), then sends every scheduled call (or answers it from
    /// the tapes) until done or `interrupt`.
    pub async fn run(
        self,
        how: &Execute,
        say: impl FnOnce(&str),
        interrupt: impl Future<Output = ()>,
    ) -> Result<Ran, ExecuteError> {
        let Assembly {
            suites,
            targets,
            recorders,
            sims,
        } = self.assembly;
        let asked = &how.asked;
        let schedule = Schedule::of_run(&suites, &targets, asked.repeats, asked.shard);
        let estimate =
            plan::estimate(&suites, &targets, &schedule).map_err(ExecuteError::Problems)?;
        if let Some(line) = budget_line(how.budget, estimate.as_ref()) {
            say(&line);
        }
        let budget = how.budget.map(|limit| Arc::new(Budget::new(limit)));
        let mut run_id = run::new_run_id();
        let dir = match (&how.resume, asked.shard) {
            // A continued run is the same run, in the same folder, under the same id.
            (Some((dir, _)), _) => {
                if let Some(id) = dir.file_name().and_then(|n| n.to_str()) {
                    run_id = id.to_string();
                }
                dir.clone()
            }
            // One folder per shard, named for it, so a CI job uploads a known path and
            // `conform merge REPORTS/shards` finds every one.
            (None, Some(shard)) => how.reports.join("shards").join(shard.folder()),
            (None, None) => how.reports.join(&run_id),
        };
        let resume = match &how.resume {
            Some((dir, keep)) => Some(Arc::new(run::resume::Resume::read(dir, *keep)?)),
            None => None,
        };
        let options = RunOptions {
            dir,
            run_id,
            repeats: asked.repeats,
            max_transport_error_share: asked.max_transport_errors,
            progress: how.progress,
            // A simulation (`conform demo`) costs nothing, and what its drift does to
            // every call is worth seeing; a tape is replayed later, perhaps under changed
            // rules, so it holds every answer.
            every_call: asked.every_call || !sims.is_empty() || how.tape.is_some(),
            shard: asked.shard,
            budget: budget.clone(),
            resume,
            asked: Some(asked.clone()),
        };
        let mut result =
            run::execute_scheduled(&suites, &targets, &schedule, &options, interrupt).await?;
        drop(schedule);
        drop(sims);
        if let Some(plan) = &estimate {
            plan::attach_estimates(&mut result.verdicts, plan);
        }
        crate::report::evidence::attach(&mut result, &suites);
        Ok(Ran {
            replayed: Assembly::replayed(&self.setup),
            result,
            suites,
            targets,
            recorders,
            budget,
        })
    }
}

/// With a budget and prices: the limit beside the plan's cost range.
fn budget_line(budget: Option<f64>, estimate: Option<&plan::RunPlan>) -> Option<String> {
    let (limit, high) = (budget?, estimate?.cost?);
    Some(format!(
        "budget: {} USD; the plan costs {} – {}{}",
        limit,
        plan::usd(high.low),
        plan::usd(high.high),
        if high.high > limit {
            ": the run stops before a call could take the spend over the budget"
        } else {
            ""
        }
    ))
}

/// A run whose calls have all ended (or been interrupted).
pub struct Ran {
    pub result: RunResult,
    pub suites: Vec<Arc<PreparedSuite>>,
    pub targets: Vec<Arc<Target>>,
    pub recorders: Vec<Arc<Recorder>>,
    pub replayed: Option<PathBuf>,
    budget: Option<Arc<Budget>>,
}

impl Ran {
    /// Finishes the tapes the run recorded (a shard's, which writes no conclusion).
    pub fn finish_tape(recorder: &Recorder) -> Result<PathBuf, ExecuteError> {
        Ok(recorder.finish()?)
    }

    /// A shard's report: its records are already in `results.jsonl`; the manifest says
    /// which run they belong to. No verdict, no allowlist, no history: the merge decides.
    pub fn write_shard(&self, shard: Shard, how: &Execute) -> Result<ShardWritten, ExecuteError> {
        let result = &self.result;
        let options = PlanOptions {
            repeats: how.asked.repeats,
            max_transport_error_share: how.asked.max_transport_errors,
            stream: how.asked.stream,
            references: (self.suites.iter())
                .filter_map(|s| Some((s.suite.name.clone(), s.suite.reference.clone()?)))
                .collect(),
        };
        let manifest = Manifest::of_run(
            result,
            &self.suites,
            &self.targets,
            shard,
            options,
            self.replayed.clone(),
        );
        let path = manifest
            .write(&result.dir)
            .map_err(|source| ExecuteError::Manifest {
                dir: result.dir.clone(),
                source,
            })?;
        // Signed last, over the manifest and the records as the job leaves them.
        if let Some(key) = SigningKey::from_env()? {
            shard_signature::sign(&result.dir, &manifest, &key)?;
        }
        Ok(ShardWritten {
            shard,
            calls: manifest.calls,
            planned: result.verdicts.iter().map(|v| v.tally.planned).sum(),
            complete: result.complete,
            dir: result.dir.clone(),
            manifest: path,
        })
    }

    /// Writes what the run concludes (reports, allowlist, history) and says so.
    pub fn conclude(&self, how: &Conclude, verbose: bool) -> Result<Concluded, ExecuteError> {
        let mut done = conclude(
            &self.result,
            &self.suites,
            &self.targets,
            how,
            &self.recorders,
            verbose,
        )?;
        done.budget = (self.budget.as_ref()).filter(|b| b.stopped()).map(|budget| {
            format!(
                "budget: stopped before a call could take the spend over {} USD ({} spent by the calls' usage); \
                 the run is inconclusive and nothing was allowlisted",
                budget.limit(),
                plan::usd(budget.spent())
            )
        });
        Ok(done)
    }
}

/// What a shard wrote.
#[derive(Debug, Clone)]
pub struct ShardWritten {
    pub shard: Shard,
    pub calls: u64,
    pub planned: u64,
    pub complete: bool,
    pub dir: PathBuf,
    pub manifest: PathBuf,
}

impl fmt::Display for ShardWritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "shard {}: {} of {} planned call{} recorded{}",
            self.shard,
            self.calls,
            self.planned,
            if self.planned == 1 { "" } else { "s" },
            if self.complete {
                ""
            } else {
                " (interrupted: the merge will refuse this shard)"
            }
        )?;
        writeln!(f, "shard report: {}", self.dir.display())?;
        writeln!(f, "manifest: {}", self.manifest.display())?;
        writeln!(
            f,
            "no verdict and no allowlist change from a shard: run every shard, then `conform merge {}`",
            self.dir.parent().unwrap_or(&self.dir).display()
        )
    }
}

/// What concluding a run or a merge wrote, in words.
#[derive(Debug)]
pub struct Concluded {
    /// The terminal summary, the allowlist line and where everything went.
    pub text: String,
    pub warnings: Vec<String>,
    /// The allowlist update failed: the file is as it was, and the reports say so.
    pub update_error: Option<UpdateError>,
    /// The budget stopped the run.
    pub budget: Option<String>,
}

/// Concludes `result` through [`crate::conclude`] and finishes the tapes.
fn conclude(
    result: &RunResult,
    suites: &[Arc<PreparedSuite>],
    targets: &[Arc<Target>],
    how: &Conclude,
    recorders: &[Arc<Recorder>],
    verbose: bool,
) -> Result<Concluded, ExecuteError> {
    // Read as the entries are granted, as `conclude` signs them.
    let how = Conclude {
        signing: SigningKey::from_env()?.map(Arc::new),
        ..how.clone()
    };
    let done = crate::conclude::conclude(result, suites, targets, &how)?;
    let tapes = (recorders.iter())
        .map(|r| r.finish())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Concluded {
        text: done.text(result, targets, &tapes, verbose),
        warnings: done.warnings,
        update_error: done.update_error,
        budget: None,
    })
}

/// A merge of shard reports, judged and ready to conclude.
pub struct Merged {
    /// "merged N shards of M into run R".
    pub line: String,
    pub result: RunResult,
    /// The conclusions' destination, with the replayed tapes the shards name.
    pub conclude: Conclude,
    suites: Vec<Arc<PreparedSuite>>,
    targets: Vec<Arc<Target>>,
}

/// Where a merge concludes to, besides what the shards say.
#[derive(Debug, Clone)]
pub struct MergeTo {
    pub paths: Paths,
    pub reports: PathBuf,
    pub allowlist: PathBuf,
    pub valid_for: Duration,
    /// `--allow-unsigned`: see [`Conclude::allow_unsigned`].
    pub allow_unsigned: bool,
}

/// Collects and validates the shard reports under `dirs`, checks them against the
/// project as it is now, and judges their records again as one run.
pub async fn merge(dirs: &[PathBuf], to: &MergeTo) -> Result<Merged, ExecuteError> {
    SigningKey::from_env().map_err(|e| ExecuteError::Usage(e.to_string()))?;
    let mut reports = merge::collect(dirs).map_err(ExecuteError::Refused)?;
    merge::validate(&mut reports).map_err(ExecuteError::Refused)?;
    // Under a trust file, only shards that are what their CI job signed.
    let trust = Trust::load(&to.paths.trust).map_err(|e| ExecuteError::Usage(e.to_string()))?;
    if let Some(trust) = &trust {
        for report in &reports {
            shard_signature::verify(&report.dir, &report.manifest, trust)
                .map_err(|e| ExecuteError::Refused(MergeError::Signature(e)))?;
        }
    }
    let first = &reports[0];
    let plan = &first.manifest.plan;

    // The suites and providers the shards ran, as this workspace has them now.
    let selection = Selection {
        providers: plan.providers.iter().map(|p| p.name.clone()).collect(),
        suites: plan.suites.iter().map(|s| s.name.clone()).collect(),
    };
    let mut workspace = load(&to.paths, selection)?;
    (workspace.settings)
        .allow_valid_for(to.valid_for)
        .map_err(|e| ExecuteError::Usage(e.to_string()))?;
    // Judged against the live references the shards ran with.
    for suite in &mut workspace.suites {
        suite.reference = plan.options.references.get(&suite.name).cloned();
    }
    // Each provider's endpoint for what the records say of it, and its tokenizer to count
    // the prompts again as the records are judged: nothing is sent.
    let setup = Setup {
        stream: plan.options.stream,
        offline: true,
        ..Setup::default()
    };
    let Assembly {
        suites, targets, ..
    } = match assemble(workspace, &setup).await {
        Ok(assembly) => assembly,
        Err(AssembleError::Problems(problems)) => return Err(ExecuteError::Problems(problems)),
        Err(e) => return Err(ExecuteError::Assemble(e)),
    };
    let configs: Vec<_> = targets.iter().map(|t| t.endpoint.config.as_ref()).collect();
    let here = ShardedRun::new(&suites, &configs, plan.options.clone());
    merge::check_workspace(first, &here, &here.digest(&suites)).map_err(ExecuteError::Refused)?;
    merge::check_fresh(&reports, to.valid_for, OffsetDateTime::now_utc())
        .map_err(ExecuteError::Refused)?;
    let schedule = merge::schedule(&reports, &suites, &targets);
    let estimate = plan::estimate(&suites, &targets, &schedule).map_err(ExecuteError::Problems)?;
    let mut result = merge::join(&reports, &suites, &targets, &schedule, &to.reports)
        .map_err(ExecuteError::Refused)?;
    drop(schedule);
    if let Some(estimate) = &estimate {
        plan::attach_estimates(&mut result.verdicts, estimate);
    }
    crate::report::evidence::attach(&mut result, &suites);
    let line = format!(
        "merged {} shard{} of {} into run {}",
        reports.len(),
        if reports.len() == 1 { "" } else { "s" },
        first.manifest.shard.n,
        result.run_id
    );
    Ok(Merged {
        line,
        conclude: Conclude {
            replayed: first.manifest.replayed_from.clone(),
            allow_unsigned: to.allow_unsigned,
            ..Conclude::to(
                to.allowlist.clone(),
                &to.reports,
                Destination::Real,
                to.valid_for,
                Some(to.paths.trust.clone()),
            )
        },
        result,
        suites,
        targets,
    })
}

impl Merged {
    /// Writes what the merged run concludes, as a run would.
    pub fn conclude(&self, verbose: bool) -> Result<Concluded, ExecuteError> {
        conclude(
            &self.result,
            &self.suites,
            &self.targets,
            &self.conclude,
            &[],
            verbose,
        )
    }
}

/// Resolves on Ctrl-C or SIGTERM: the runner then stops sending, and the calls in flight
/// end as records of an incomplete run.
pub async fn signalled() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// What `conform check` found: the files' problems, the warnings of the probes, and
/// what was checked.
#[derive(Debug, Clone)]
pub struct Checked {
    pub problems: Diagnostics,
    pub warnings: Diagnostics,
    pub providers: usize,
    pub suites: usize,
    pub cases: usize,
}

/// Checks every provider and suite of `selection` offline, as a run's pre-flight reads
/// them, with the live references they name; `probes` is `probes.json`, for the keywords
/// a provider was probed to let through (only against `primary`, when given).
pub fn check(
    paths: &Paths,
    selection: &Selection,
    probes: &std::path::Path,
    primary: Option<&str>,
) -> Checked {
    let (mut workspace, mut problems) = Workspace::load_partial(paths, selection);
    // A suite's live reference must be a provider file; it is checked like the others.
    if let Err(d) = conform_config::reference::add_live_references(&mut workspace, paths, None) {
        problems.extend(d);
    }
    let cases = workspace.suites.iter().map(|s| s.cases.len()).sum();
    let (providers, suites) = (workspace.providers.len(), workspace.suites.len());
    let found = crate::run::preflight::preflight(workspace, probes, primary);
    problems.extend(found.problems);
    Checked {
        problems,
        warnings: found.warnings,
        providers,
        suites,
        cases,
    }
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        write!(
            f,
            "ok: {} provider{}, {} suite{}, {} cases",
            self.providers,
            plural(self.providers),
            self.suites,
            plural(self.suites),
            self.cases
        )
    }
}

/// Why one provider cannot be reached outside a run.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    /// The key the provider file names is not there: a usage error.
    #[error("{}: {source}", file.display())]
    Key {
        file: PathBuf,
        source: conform_config::KeyError,
    },
    #[error(transparent)]
    Sim(#[from] conform_wire::sim::StartError),
    #[error(transparent)]
    Transport(#[from] conform_wire::provider::transport::SetupError),
}

/// One provider's endpoint outside a run (`conform probe`), with the server of a
/// simulation, which lives as long as this does.
pub struct Reached {
    pub endpoint: conform_wire::provider::transport::Endpoint,
    pub config: Arc<conform_config::ProviderConfig>,
    _sim: Option<conform_wire::sim::SimServer>,
}

/// Reaches `config` with its key; a simulation is started on loopback and answers from
/// no case (a probe's requests are not a suite's).
pub async fn reach(mut config: conform_config::ProviderConfig) -> Result<Reached, ReachError> {
    use conform_wire::provider::transport::{Endpoint, Transport};
    let key = config.api_key().map_err(|source| ReachError::Key {
        file: config.file.clone(),
        source,
    })?;
    let sim = if config.is_simulated() {
        let book = Arc::new(conform_wire::sim::AnswerBook::default());
        let server = conform_wire::sim::SimServer::start(&config, book).await?;
        config.base_url = server.uri();
        Some(server)
    } else {
        None
    };
    let config = Arc::new(config);
    let transport = Transport::for_addresses([config.base_url.as_str()])?;
    let wire = conform_wire::provider::wire_format(config.wire_kind());
    Ok(Reached {
        endpoint: Endpoint::new(Arc::clone(&config), wire, key, transport),
        config,
        _sim: sim,
    })
}
