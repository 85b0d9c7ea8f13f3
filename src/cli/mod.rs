//! Command-line definitions and dispatch.

// Output whose reader has gone away (`conform allowlist show | head`) is dropped, not a
// panic: these shadow std's macros in every command below.
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
macro_rules! print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod allowlist;
mod check;
mod ci;
mod exit;
mod export;
mod gate;
mod history;
mod import;
mod init;
mod keys;
mod merge;
mod plan;
mod probe;
mod run;
pub(crate) mod scenarios;
mod serve;
mod tape;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
// `serve` tunes the allocator it runs on (`super::allocator`).
use conform_serve::orchestrator::allocator;

pub use exit::{Exit, describe};

#[derive(Debug, Parser)]
#[command(
    name = "conform",
    version,
    about = "Decide, with evidence, whether an application may fail over automatically to another LLM provider.",
    long_about = "conform replays real fixture inputs through each configured LLM provider at low \
temperature, checks every answer for schema, business-rule and tokenizer conformance, writes \
reports for people and CI, and writes an allowlist that an orchestrator reads to gate automatic \
failover. It fails closed: no valid, fresh allowlist entry means no failover.\n\n\
Start with `conform demo`: simulated providers on loopback, no keys, no network.",
    after_help = "Exit codes: 0 conformant, 1 not conformant, 2 usage or configuration error, \
3 inconclusive (nothing allowlisted), 4 a file could not be read or written."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// The project directory holding providers/ and fixtures/.
    #[arg(long, global = true, env = "CONFORM_ROOT", default_value = ".")]
    pub root: PathBuf,
    /// The allowlist file [default: ROOT/allowlist.json].
    #[arg(long, global = true, env = "CONFORM_ALLOWLIST")]
    pub allowlist: Option<PathBuf>,
    /// The keys allowed to sign evidence [default: ROOT/trust.toml, when it exists]:
    /// every reader then denies an entry they did not sign.
    #[arg(long, global = true, env = "CONFORM_TRUST")]
    pub trust: Option<PathBuf>,
    /// Readers (gate, export, allowlist show|explain|verify) remember here the newest signed
    /// statement per pair, and deny an older allowlist put back (superseded; docs/signing.md).
    #[arg(long, global = true, env = "CONFORM_STATE", value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Where run reports go [default: ROOT/reports].
    #[arg(long, global = true)]
    pub reports: Option<PathBuf>,
    /// Log more (-v: debug, -vv: trace). Logs go to stderr; RUST_LOG also works. With -v,
    /// `run` and `demo` also list every pair under the allowlist line.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl Global {
    pub fn allowlist_path(&self) -> PathBuf {
        self.allowlist
            .clone()
            .unwrap_or_else(|| self.root.join("allowlist.json"))
    }

    pub fn reports_dir(&self) -> PathBuf {
        self.reports
            .clone()
            .unwrap_or_else(|| self.root.join("reports"))
    }

    pub fn paths(&self) -> conform_config::Paths {
        let mut paths = conform_config::Paths::under(&self.root);
        if let Some(trust) = &self.trust {
            paths.trust = trust.clone();
        }
        paths
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a project: provider files for a primary and its fallbacks, a suite (a
    /// starter, or your logged traffic), a README and a CI workflow.
    #[command(after_help = "Examples:\n  \
conform init --provider openai --model gpt-4.1-mini --fallback vllm:http://host:8000/v1\n  \
conform --root my-project init --fallback anthropic --fallback ollama:http://127.0.0.1:11434\n  \
conform init --fallback vllm:http://host:8000/v1 --traffic logged_requests.jsonl\n\n\
Nothing is overwritten: a folder that already holds a file init would write is refused. \
The commands it prints last take the project to a decision.\n\n\
Exit codes: 0 written, 2 usage error or a folder that is not new, 4 a file could not be written.")]
    Init(init::InitArgs),
    /// Replay every case through providers, check, report, and update the allowlist.
    #[command(after_help = "Examples:\n  \
conform run openai                      one provider, every suite\n  \
conform run vllm --suite ticket-triage  one provider, one suite\n  \
conform run openai --base-url http://127.0.0.1:8080   another address for one provider\n  \
conform run openai --record tapes       also keep the answers, sanitized\n  \
conform run openai --replay tapes       re-check them: no network, no key, no allowlist change\n  \
conform run openai --shard 2/4          one CI job's share; then `conform merge reports/shards`\n\n\
conform run fallback --reference openai judged against openai's own run-to-run agreement\n\n\
Exit codes: 0 every provider conformant, 1 a provider is not conformant, 2 usage or \
configuration error, 3 inconclusive (unreachable, auth failed, too many transport errors, \
interrupted): an inconclusive run changes nothing in the allowlist; 4 a report, record or the \
allowlist could not be written (a full disk, a read-only folder).")]
    Run(run::RunArgs),
    /// The embedded default: simulated providers on loopback, no keys, no network.
    #[command(
        after_help = "Runs from any folder: providers/'s simulations (kind = \"sim\") on the \
project's suites, or else those built into conform on its demo suites. Each declares the \
verdict it should earn (`[sim] expect`). The demo exits 0 when every verdict is the expected one: the drifting \
providers must be caught, the faithful ones allowlisted."
    )]
    Demo(run::DemoArgs),
    /// Join the shard reports of `run --shard K/N` into one run: verdicts over every call,
    /// every report, one allowlist update, one history line.
    #[command(after_help = "Examples:\n  \
conform run openai --shard 1/2 && conform run openai --shard 2/2\n  \
conform merge reports/shards                      every shard folder under it\n  \
conform merge shard-1-of-2 shard-2-of-2           folders downloaded from CI jobs\n\n\
The merge refuses (exit 3, nothing written, the allowlist untouched) when a shard is missing \
or given twice, was interrupted, or when the shards disagree on the conform version or the run \
plan (suite and provider digests, cases, repeats, options), or the workspace here plans another \
run. Shards replayed from tapes merge into a replayed run: the allowlist stays untouched and the \
one the evidence would write goes to REPORT_DIR/allowlist.replayed.json.\n\n\
Exit codes: as `conform run`: 0 conformant, 1 not conformant, 2 configuration error, 3 \
inconclusive or refused, 4 a file could not be written.")]
    Merge(merge::MergeArgs),
    /// What a run would send and cost: per provider and suite the calls, the exact prompt
    /// tokens, the output-token ceiling and the cost range from `[pricing]`. Sends nothing.
    #[command(after_help = "Examples:\n  \
conform plan                                every non-simulated provider, every suite\n  \
conform plan openai --suite ticket-triage --repeats 5\n  \
conform plan openai --format json           every case's prompt tokens and cost range\n  \
conform run openai --dry-run                the same, from `run`\n  \
conform run openai --budget 2.50            stop before the spend could pass $2.50\n\n\
Prices come from the provider file:\n  [pricing]\n  input_per_mtok = 0.15          # USD per million prompt tokens\n  \
output_per_mtok = 0.60\n  cached_input_per_mtok = 0.075  # where the vendor bills cached prompt tokens apart\n\n\
A call's range runs from every prompt token at the cheapest input price with no output, to the \
full input price plus max_tokens of output. Prompts no local tokenizer counts exactly are marked \
≈ and their range widened by 25%.")]
    Plan(plan::PlanArgs),
    /// For CI jobs: the pull-request comment body after a merged run (see docs/ci.md).
    Ci(ci::CiArgs),
    /// Validate every provider, suite, schema and case offline, listing every problem.
    Check(check::CheckArgs),
    /// Exit 0 if the allowlist permits failover to PROVIDER for SUITE, 1 with the reason if not.
    Gate(gate::GateArgs),
    /// Inspect the allowlist: its JSON Schema, what it permits, and why a provider is absent.
    Allowlist(allowlist::AllowlistArgs),
    /// Write the allowlist as the fallback config of a gateway (LiteLLM, Portkey, TensorZero).
    Export(export::ExportArgs),
    /// Pass rates over time with the served models, flagging a provider that slips.
    #[command(
        after_help = "Every `conform run` that finishes appends one line per (suite, provider) \
with a conclusive verdict to REPORTS/history.jsonl. A run is flagged when its failure rate (or that of it and the run \
before) is significantly above every earlier run's of the same suite and provider configuration \
(one-sided exact test, p < 0.005), and when the served model changes.\n\n\
Exit codes: 0 nothing flagged, 1 a slip or a served-model change is flagged, 2 no history."
    )]
    History(history::HistoryArgs),
    /// What changed between two runs: flipped cases, new finding codes, allowlist entries.
    #[command(after_help = "Examples:\n  \
conform diff 20261129T163000Z-1a2b 20261130T163000Z-9f01\n  \
conform diff reports/20261129T163000Z-1a2b reports/20261130T163000Z-9f01 --format json\n\n\
Exit codes: 0 nothing got worse, 1 a case now fails, a finding code is new or an entry would be \
revoked, 2 a run cannot be read.")]
    Diff(history::DiffArgs),
    /// Probe which JSON Schema keywords of the suites a provider enforces, rejects,
    /// strips or ignores; the cost is printed before anything is sent.
    #[command(after_help = "Examples:\n  \
conform probe gemini                       every keyword every suite uses\n  \
conform probe gemini --suite ticket-triage --dry-run   what it would cost\n  \
conform probe gemini --primary openai      findings against the primary\n\n\
Results go to reports/<run-id>/probe.json and to probes.json beside the allowlist, which \
`conform check` reads to warn (schema_keyword_ignored) when a keyword one provider enforces \
is ignored or stripped by another.\n\n\
Exit codes: 0 every keyword classified and no finding, 1 a keyword is enforced by one \
provider and ignored or stripped by another (schema_keyword_ignored), 2 usage or \
configuration error, 3 a keyword could not be classified.")]
    Probe(probe::ProbeArgs),
    /// Test an orchestrator against the contract (double clicks, key reuse, timeouts,
    /// races, cancels, the failover gate, crashes), or a gateway's failover (--gateway).
    #[command(after_help = conform_scenarios::gateway::HELP)]
    Scenarios(scenarios::ScenariosArgs),
    /// The reference orchestrator: one job per intent, on SQLite or PostgreSQL.
    #[command(
        after_help = "Implements docs/contract/ORCHESTRATOR.md (conform.orchestrator/v1). \
Failover to another provider is gated by the allowlist (--allowlist / CONFORM_ALLOWLIST), \
read at every decision. State changes are logged to stderr, one line each."
    )]
    Serve(serve::ServeArgs),
    /// Signing keys for the CI that makes evidence (docs/signing.md).
    Keys(keys::KeysArgs),
    /// Work with `conform run --record` tapes: turn the primary's into recorded references.
    Tape(tape::TapeArgs),
    /// Build a suite from logged traffic: OpenAI Batch files, chat JSONL, promptfoo tests,
    /// OpenTelemetry GenAI telemetry or LiteLLM logs; redacted, deduplicated, sampled.
    #[command(after_help = "Examples:\n  \
conform import openai-batch batch_input.jsonl --output batch_output.jsonl --suite support-traffic\n  \
conform import jsonl requests.jsonl --suite triage-traffic --sample 200 --seed 1\n  \
conform import promptfoo promptfooconfig.yaml --suite triage\n\n\
E-mail addresses, phone numbers and Luhn-valid card numbers are replaced on the way in by \
placeholders (<EMAIL_1>, <PHONE_1>, <CARD_1>) that are stable within a case; add your own \
with --redact-regex and --redact-path. The suite is written to ROOT/fixtures/NAME through a \
temporary folder: a failed import leaves nothing behind. What could not be carried over is \
printed and listed in fixtures/NAME/IMPORT_NOTES.md.\n\n\
Exit codes: 0 imported, 2 usage error, malformed input (FILE:LINE: field) or existing suite.")]
    Import(import::ImportArgs),
}

impl Command {
    /// The commands that send a run's calls: best on a single-threaded runtime (see
    /// `main`). Simulated providers then share the thread, as their latency is slept.
    pub fn runs_on_one_thread(&self) -> bool {
        matches!(self, Command::Run(_) | Command::Demo(_))
    }
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<Exit> {
    match cli.command {
        Command::Init(args) => init::init(&cli.global, args),
        Command::Run(args) => run::run(&cli.global, args).await,
        Command::Demo(args) => run::demo(&cli.global, args).await,
        Command::Merge(args) => merge::merge(&cli.global, args).await,
        Command::Plan(args) => plan::plan(&cli.global, args),
        Command::Ci(args) => ci::ci(&cli.global, args),
        Command::Check(args) => check::check(&cli.global, args),
        Command::Gate(args) => gate::gate(&cli.global, args),
        Command::Allowlist(args) => allowlist::allowlist(&cli.global, args),
        Command::Export(args) => export::export(&cli.global, args),
        Command::History(args) => history::history(&cli.global, args),
        Command::Diff(args) => history::diff(&cli.global, args),
        Command::Probe(args) => probe::probe(&cli.global, args).await,
        Command::Scenarios(args) => scenarios::scenarios(&cli.global, args).await,
        Command::Serve(args) => serve::serve(&cli.global, args).await,
        Command::Tape(args) => tape::tape(&cli.global, args),
        Command::Import(args) => import::import(&cli.global, args),
        Command::Keys(args) => keys::keys(args),
    }
}
