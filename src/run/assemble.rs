//! From a loaded workspace to what a run calls: the prepared suites, a server for each
//! simulated provider, and one target per provider with its key, its tokenizer and its
//! tape. `conform run`, `conform demo` and a shard assemble the same way.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conform_config::{Diagnostic, Diagnostics, KeyError, Workspace};
use conform_wire::provider::tape::{Recorder, Replayer, TapeError};
use conform_wire::provider::transport::{Endpoint, SetupError, Tape, Transport};
use conform_wire::provider::wire_format;
use conform_wire::sim::{AnswerBook, SimServer, StartError};
use conform_wire::tokenize::Counter;

use super::preflight::{Stage, Uncomparable};
use super::{PreparedSuite, Target};

/// Where a run's answers go besides the reports, or come from instead of the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TapeMode {
    /// Also write every answer to DIR/<provider>.jsonl.
    Record(PathBuf),
    /// Answer every call from DIR/<provider>.jsonl: nothing is sent, no key is needed.
    Replay(PathBuf),
}

/// How to assemble a run beyond what the files say.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub tape: Option<TapeMode>,
    /// Ask every provider for a stream, as `--stream` does.
    pub stream: bool,
    /// Send nothing and need no key: `conform merge` judges recorded answers again, with
    /// each provider's endpoint for what the records say of it and its tokenizer.
    pub offline: bool,
}

/// A run ready to start. The simulations' servers live as long as it does.
pub struct Assembly {
    pub suites: Vec<Arc<PreparedSuite>>,
    pub targets: Vec<Arc<Target>>,
    pub recorders: Vec<Arc<Recorder>>,
    pub sims: Vec<SimServer>,
}

impl Assembly {
    /// The tapes' folder when the answers are replayed.
    pub fn replayed(setup: &Setup) -> Option<PathBuf> {
        match &setup.tape {
            Some(TapeMode::Replay(dir)) => Some(dir.clone()),
            _ => None,
        }
    }
}

/// Why a run could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// Every problem of the files at once (missing keys, tokenizers, suites), so a user
    /// fixes them in one go.
    #[error("{0}")]
    Problems(Diagnostics),
    #[error(transparent)]
    Tape(#[from] TapeError),
    #[error(transparent)]
    Sim(#[from] StartError),
    #[error(transparent)]
    Transport(#[from] SetupError),
}

/// Assembles `workspace` for a run.
pub async fn assemble(workspace: Workspace, setup: &Setup) -> Result<Assembly, AssembleError> {
    // A case that gives `agree` nothing to compare with would be judged on its schema
    // and rules alone: refused, with every other problem, before anything is sent.
    let mut uncomparable = Uncomparable::default();
    let prepared = super::prepare_visiting(workspace.suites, super::Keep::CaseBytes, |visit| {
        uncomparable.visit(&visit)
    });
    let refused = uncomparable.diagnostics(Stage::Run);
    let suites = match prepared {
        Ok(suites) if refused.is_empty() => suites,
        Ok(_) => return Err(AssembleError::Problems(refused)),
        Err(mut problems) => {
            problems.extend(refused);
            return Err(AssembleError::Problems(problems));
        }
    };
    let silent = setup.offline || matches!(setup.tape, Some(TapeMode::Replay(_)));
    let mut providers = workspace.providers;
    if setup.stream {
        for p in &mut providers {
            p.force_stream();
        }
    }

    // Simulated providers get a server of their own, alive for the whole run.
    let mut sims = Vec::new();
    if !setup.offline && providers.iter().any(|p| p.is_simulated()) {
        let all: Vec<_> = suites.iter().map(|s| &s.suite).collect();
        let book = Arc::new(AnswerBook::from_suites(&all).map_err(AssembleError::Problems)?);
        for p in providers.iter_mut().filter(|p| p.is_simulated()) {
            let server = SimServer::start(p, Arc::clone(&book)).await?;
            p.base_url = server.uri();
            sims.push(server);
        }
    }

    let mut problems = Diagnostics::default();
    let mut ready = Vec::new();
    for config in providers {
        let key = match config.api_key() {
            Ok(_) if setup.offline => None,
            Ok(key) => key,
            // Nothing is sent when replaying, so no key is needed.
            Err(_) if silent => None,
            Err(e) => {
                problems.push(key_problem(&config.file, &e));
                None
            }
        };
        match Counter::for_provider(&config) {
            Ok(counter) => ready.push((config, key, counter)),
            Err(d) => problems.extend(d),
        }
    }
    if !problems.is_empty() {
        return Err(AssembleError::Problems(problems));
    }

    // A replay sends nothing: no address needs the system's TLS roots.
    let transport = if silent {
        Transport::for_addresses([])?
    } else {
        Transport::for_addresses(ready.iter().map(|(c, _, _)| c.base_url.as_str()))?
    };
    let mut targets = Vec::new();
    let mut recorders = Vec::new();
    for (config, key, counter) in ready {
        let wire = wire_format(config.wire_kind());
        let name = config.name.clone();
        let mut endpoint = Endpoint::new(Arc::new(config), wire, key.clone(), transport.clone());
        match &setup.tape {
            Some(TapeMode::Record(dir)) => {
                let recorder = Arc::new(Recorder::create(dir, &name, key)?);
                recorders.push(Arc::clone(&recorder));
                endpoint = endpoint.with_tape(Tape::Record(recorder));
            }
            Some(TapeMode::Replay(dir)) => {
                let replayer = Replayer::open(dir, &name)?;
                endpoint = endpoint.with_tape(Tape::Replay(Arc::new(replayer)));
            }
            None => {}
        }
        targets.push(Arc::new(Target::new(endpoint).with_counter(counter)));
    }
    Ok(Assembly {
        suites,
        targets,
        recorders,
        sims,
    })
}

/// A missing key, placed at the provider file's `api_key_env` line.
fn key_problem(file: &Path, error: &KeyError) -> Diagnostic {
    let d = Diagnostic::new(file, error.to_string()).field("api_key_env");
    match std::fs::read_to_string(file) {
        Ok(source) => d.near(&source, "api_key_env"),
        Err(_) => d,
    }
}
