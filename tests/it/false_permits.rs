//! The false-permit hunter (issue 32): a project is proven on loopback providers, then
//! random changes from a catalogue are applied to it (a byte of any suite file, a
//! provider field, command-line overrides, the clock, shard manifests and records,
//! replay flags, allowlist fields, the project's settings), and every reader is asked:
//! `conform gate`, `conform export`, `conform allowlist explain`, the Rust reader and
//! `conform serve`'s gate. The property: they all answer alike, and a permit stands only
//! where a fresh run on exactly the current inputs grants an entry with the same pins
//! (suite and provider digests), within its validity.
//!
//! The providers are loopback mocks that keep the contract only for exactly the requests
//! they were proven with (`Fidelity`): any change in what is sent gets a wrong answer, so
//! a reader that let a change slip past its pins would be caught by the fresh run. An
//! edit that recomputes every pin of an entry for another provider is a forgery only a
//! signature exposes (issue 34); the catalogue edits one field at a time.
//!
//! CI runs 32 cases; the benchmark machine runs more:
//! `PROPTEST_CASES=2000 cargo test --release --test it false_permits::` (BENCHMARKS.md).

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use conform_config::Paths;
use conform_gate::allowlist::{Query, decide};
use proptest::prelude::*;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use wiremock::{Request, Respond, ResponseTemplate};

const SUITE: &str = "triage";
const PROVIDERS: [&str; 2] = ["good", "drifting"];
const CATEGORIES: [&str; 3] = ["billing", "security", "shipping"];
const KEY: &str = "sk-test-false-permits-0123456789";
/// Cases of the suite, sent twice each: 30 calls, what a pass needs to rule out the
/// default 10 % failure rate (docs/evidence.md).
const CASES: usize = 15;

fn answer(i: usize) -> Value {
    json!({"category": CATEGORIES[i % 3], "priority": if i % 3 == 1 { "p1" } else { "p3" }})
}

/// What no valid answer is: another category, and a key the schema forbids.
fn wrong(i: usize) -> Value {
    json!({"category": CATEGORIES[(i + 1) % 3], "priority": "p2", "confidence": 0.9})
}

fn write_project(root: &Path, good: &str, drifting: &str) {
    let w = |rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    w(
        "fixtures/triage/suite.toml",
        "description = \"tickets\"\nsystem = \"Classify the ticket. Answer with JSON only.\"\n\
         user = \"Ticket {{ id }}: {{ text }}\"\nrepeats = 2\nagree = [\"/category\", \"/priority\"]\n\n\
         [[rules]]\nname = \"p1_is_security\"\nexpr = '.priority != \"p1\" or .category == \"security\"'\n\
         message = \"p1 is for security\"\n",
    );
    w(
        "fixtures/triage/schema.json",
        &json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {"category": {"enum": CATEGORIES}, "priority": {"enum": ["p1", "p2", "p3"]}},
            "required": ["category", "priority"], "additionalProperties": false})
        .to_string(),
    );
    for i in 0..CASES {
        w(
            &format!("fixtures/triage/cases/c{i:02}.json"),
            &serde_json::to_string_pretty(&json!({
                "vars": {"id": format!("T-{i}"), "text": format!("the problem number {i}")},
                "expected": answer(i)
            }))
            .unwrap(),
        );
    }
    for (name, url) in [("good", good), ("drifting", drifting), ("primary", good)] {
        w(
            &format!("providers/{name}.toml"),
            &format!(
                "kind = \"openai-compatible\"\nmodel = \"{name}-model\"\nbase_url = \"{url}\"\n\
                 api_key_env = \"OPENAI_API_KEY\"\ntemperature = 0\nseed = 7\nmax_output_tokens = 200\n\
                 timeout = \"10s\"\nstructured_output = \"json_schema\"\n\n[limits]\nconcurrency = 4\n\
                 max_retries = 0\n"
            ),
        );
    }
}

/// Keeps the contract only for the requests it was proven with: while learning, it
/// answers each case right and pins the request (its path and canonical body); after,
/// any other request gets a wrong answer.
struct Fidelity {
    learning: AtomicBool,
    pinned: Mutex<HashMap<String, String>>,
}

/// The case a request is about, from its last user message (`Ticket T-1: …`).
fn case_of(body: &Value) -> Option<usize> {
    let user = body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?;
    let text = user["content"].as_str()?;
    text.strip_prefix("Ticket T-")?
        .split(':')
        .next()?
        .parse()
        .ok()
}

fn reply(content: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-fp", "object": "chat.completion", "created": 1, "model": "served-model-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content.to_string()},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}
    }))
}

struct Faithful(Arc<Fidelity>);

impl Respond for Faithful {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return ResponseTemplate::new(400);
        };
        let Some(i) = case_of(&body) else {
            return reply(json!({"nothing": true}));
        };
        let seen = format!(
            "{} {}",
            request.url.path(),
            conform_config::digest::canonical(&body)
        );
        let key = format!("case {i}");
        let mut pinned = self.0.pinned.lock().unwrap();
        if self.0.learning.load(Ordering::SeqCst) {
            pinned.insert(key, seen);
            return reply(answer(i));
        }
        match pinned.get(&key) {
            Some(p) if *p == seen => reply(answer(i)),
            _ => reply(wrong(i)),
        }
    }
}

/// The good provider's answers, except for the cases this divides (`/break-K/…`): those
/// it breaks on its own, an unreadable 2xx or a 5xx (no retry is allowed), by the case,
/// so that a run meets the same breakage whatever else runs beside it.
struct Breaking(usize);

/// The divisors the `Breaks` changes use, each served at `/break-K/v1/chat/completions`.
const BREAKS: [usize; 3] = [2, 4, 15];

impl Respond for Breaking {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let i = case_of(&body).unwrap_or(0);
        match (i % self.0, i / self.0 % 2) {
            (0, 0) => ResponseTemplate::new(200).set_body_raw(
                "{\"id\": \"chatcmpl-fp\", \"choices\": [",
                "application/json",
            ),
            (0, _) => ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "boom", "type": "server_error"}})),
            _ => reply(answer(i)),
        }
    }
}

struct Drifting;

impl Respond for Drifting {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        reply(wrong(case_of(&body).unwrap_or(0)))
    }
}

/// The proven project, the mocks it runs against, kept for the whole test process.
struct World {
    template: tempfile::TempDir,
    good: String,
    drifting: String,
    _runtime: tokio::runtime::Runtime,
    _servers: Vec<wiremock::MockServer>,
}

fn conform(root: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
    cmd.current_dir(root)
        .arg("--root")
        .arg(root)
        .env("OPENAI_API_KEY", KEY)
        .env_remove("CONFORM_ALLOWLIST")
        .env_remove("CONFORM_ROOT")
        .env_remove("RUST_LOG");
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(root: &Path, extra: &[&str]) -> Output {
    conform(root)
        .args(["run", "good", "drifting", "--suite", SUITE, "--no-progress"])
        .args(extra)
        .output()
        .unwrap()
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let fidelity = Arc::new(Fidelity {
            learning: AtomicBool::new(true),
            pinned: Mutex::new(HashMap::new()),
        });
        let (good, drifting) = runtime.block_on(async {
            let good = wiremock::MockServer::start().await;
            wiremock::Mock::given(wiremock::matchers::path("/v1/chat/completions"))
                .respond_with(Faithful(Arc::clone(&fidelity)))
                .mount(&good)
                .await;
            for k in BREAKS {
                let path = format!("/break-{k}/v1/chat/completions");
                wiremock::Mock::given(wiremock::matchers::path(path))
                    .respond_with(Breaking(k))
                    .mount(&good)
                    .await;
            }
            let drifting = wiremock::MockServer::start().await;
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .respond_with(Drifting)
                .mount(&drifting)
                .await;
            (good, drifting)
        });
        let template = tempfile::tempdir().unwrap();
        let root = template.path();
        write_project(root, &good.uri(), &drifting.uri());
        let out = run(root, &["--record", "tapes"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        fidelity.learning.store(false, Ordering::SeqCst);
        // Proven again against the strict mock, and as two shards: the material the
        // shard mutations work on.
        let out = run(root, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        for k in ["1/2", "2/2"] {
            let out = run(root, &["--shard", k]);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        }
        let list = allowlist(root);
        assert_eq!(list["entries"].as_array().unwrap().len(), 1, "{list}");
        assert_eq!(list["entries"][0]["provider"], "good");
        World {
            good: good.uri(),
            drifting: drifting.uri(),
            template,
            _runtime: runtime,
            _servers: vec![good, drifting],
        }
    })
}

fn allowlist(root: &Path) -> Value {
    std::fs::read(root.join("allowlist.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

fn write_allowlist(root: &Path, list: &Value) {
    std::fs::write(root.join("allowlist.json"), list.to_string()).unwrap();
}

/// One change from the catalogue.
#[derive(Debug, Clone)]
enum Mutation {
    /// A byte of a suite file replaced (index into the suite's files, offset, byte).
    SuiteByte(usize, usize, u8),
    /// A provider field set (provider, TOML line that replaces or adds the field).
    ProviderField(usize, &'static str),
    /// `providers/good.toml` pointed somewhere else.
    GoodAt(Address),
    /// Another run with command-line overrides.
    Rerun(Vec<Flag>),
    /// The clock moved on: every time in the allowlist moved back by this many hours.
    Clock(i64),
    /// One field of one allowlist entry edited.
    Field(Edit),
    /// The baseline's shards changed, then merged.
    Shards(Forge),
    /// `conform.toml` written.
    Settings(&'static str),
    /// The good provider breaks the answers to the cases this divides on its own (an
    /// unreadable 2xx, a 5xx), and is run again: more breakage must revoke, never leave
    /// it open.
    Breaks(usize),
}

#[derive(Debug, Clone, Copy)]
enum Address {
    Drifting,
    WithV1,
    TrailingSlash,
    /// Another account on the same server: `http://acct2:secret@…`.
    UserInfo,
    /// Another address on the same server: `…?x=1`.
    Query,
}

#[derive(Debug, Clone, Copy)]
enum Flag {
    /// `conform run good --base-url` the drifting server, or the good one itself.
    BaseUrl(bool),
    Repeats(u32),
    Stream,
    ValidFor(u32),
}

#[derive(Debug, Clone)]
enum Edit {
    ValidUntilPlusDays(i64),
    FirstCallPlusDays(i64),
    Repeats(u64),
    Provider(&'static str),
    Suite(&'static str),
    SuiteDigest,
    ProviderDigest,
    SchemaFileDigest,
    Endpoint,
    Model,
    ContractOnly,
    NoRevocations,
    Duplicate,
}

#[derive(Debug, Clone, Copy)]
enum Forge {
    Merge,
    DriftingPassed,
    ShiftManifests(i64),
    DropRecord,
    RelabelReplay,
    SameShardTwice,
}

const PROVIDER_FIELDS: &[&str] = &[
    "model = \"good-model-2\"",
    "temperature = 0.7",
    "seed = 8",
    "max_output_tokens = 201",
    "structured_output = \"json_object\"",
    "stream = true",
    "api_key_env = \"OTHER_KEY\"",
    "max_p95_latency = \"30s\"",
    "timeout = \"20s\"",
    "[limits]\nconcurrency = 2",
    "[pricing]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0",
    "[tokenizer]\nkind = \"tiktoken\"\nencoding = \"o200k_base\"",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    let flag = prop_oneof![
        any::<bool>().prop_map(Flag::BaseUrl),
        (1u32..4).prop_map(Flag::Repeats),
        Just(Flag::Stream),
        prop_oneof![Just(1u32), Just(7), Just(30), Just(31), Just(36500)].prop_map(Flag::ValidFor),
    ];
    let edit = prop_oneof![
        (-10i64..3650).prop_map(Edit::ValidUntilPlusDays),
        (-40i64..40).prop_map(Edit::FirstCallPlusDays),
        (0u64..4).prop_map(Edit::Repeats),
        prop_oneof![Just("drifting"), Just("primary"), Just("ghost")].prop_map(Edit::Provider),
        prop_oneof![Just("other"), Just("Triage")].prop_map(Edit::Suite),
        Just(Edit::SuiteDigest),
        Just(Edit::ProviderDigest),
        Just(Edit::SchemaFileDigest),
        Just(Edit::Endpoint),
        Just(Edit::Model),
        Just(Edit::ContractOnly),
        Just(Edit::NoRevocations),
        Just(Edit::Duplicate),
    ];
    let forge = prop_oneof![
        Just(Forge::Merge),
        Just(Forge::DriftingPassed),
        prop_oneof![Just(-1i64), Just(-6), Just(-8), Just(-30), Just(1)]
            .prop_map(Forge::ShiftManifests),
        Just(Forge::DropRecord),
        Just(Forge::RelabelReplay),
        Just(Forge::SameShardTwice),
    ];
    prop_oneof![
        2 => (0usize..5, 0usize..4096, any::<u8>()).prop_map(|(f, o, b)| Mutation::SuiteByte(f, o, b)),
        3 => (0usize..2, prop::sample::select(PROVIDER_FIELDS)).prop_map(|(p, f)| Mutation::ProviderField(p, f)),
        1 => prop_oneof![
            Just(Address::Drifting),
            Just(Address::WithV1),
            Just(Address::TrailingSlash),
            Just(Address::UserInfo),
            Just(Address::Query),
        ]
        .prop_map(Mutation::GoodAt),
        1 => prop::sample::select(BREAKS.to_vec()).prop_map(Mutation::Breaks),
        2 => prop::collection::vec(flag, 1..3).prop_map(Mutation::Rerun),
        2 => (0i64..24 * 10).prop_map(Mutation::Clock),
        3 => edit.prop_map(Mutation::Field),
        2 => forge.prop_map(Mutation::Shards),
        1 => prop_oneof![
            Just("[evidence]\nmax_valid_for = \"1d\"\n"),
            Just("[evidence]\nmax_valid_for = \"90d\"\n"),
            Just("[evidence]\nmax_undetected_failure_rate = 0.05\n"),
            Just("[evidence]\nmax_undetected_failure_rate = 0.9\n"),
        ]
        .prop_map(Mutation::Settings),
    ]
}

fn suite_files(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("fixtures").join(SUITE);
    let mut files = vec![dir.join("suite.toml"), dir.join("schema.json")];
    for i in 0..3 {
        files.push(dir.join(format!("cases/c{i:02}.json")));
    }
    files
}

/// Sets `line` (a `key = value`, or a `[table]` with its lines) in `providers/NAME.toml`.
fn set_field(root: &Path, provider: &str, line: &str) {
    let path = root.join(format!("providers/{provider}.toml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let out = if let Some(table) = line.strip_prefix('[') {
        let name = table.split(']').next().unwrap();
        let body = line.split_once('\n').map(|(_, b)| b).unwrap_or("");
        match text.find(&format!("[{name}]\n")) {
            Some(at) => {
                let head = at + name.len() + 3;
                let key = body.split('=').next().unwrap().trim();
                let rest: String = text[head..]
                    .lines()
                    .filter(|l| !l.starts_with(key))
                    .map(|l| format!("{l}\n"))
                    .collect();
                format!("{}{body}\n{rest}", &text[..head])
            }
            None => format!("{text}\n{line}\n"),
        }
    } else {
        let key = line.split('=').next().unwrap().trim();
        let (top, tables) = text.split_at(text.find("\n[").map_or(text.len(), |i| i + 1));
        let kept: String = top
            .lines()
            .filter(|l| l.split('=').next().map(str::trim) != Some(key))
            .map(|l| format!("{l}\n"))
            .collect();
        format!("{kept}{line}\n{tables}")
    };
    std::fs::write(path, out).unwrap();
}

fn shift(stamp: &Value, hours: i64) -> Value {
    match stamp
        .as_str()
        .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
    {
        Some(t) => json!((t + time::Duration::hours(hours)).format(&Rfc3339).unwrap()),
        None => stamp.clone(),
    }
}

fn apply(root: &Path, world: &World, m: &Mutation) {
    match m {
        Mutation::SuiteByte(file, offset, byte) => {
            let files = suite_files(root);
            let path = &files[file % files.len()];
            let mut bytes = std::fs::read(path).unwrap();
            let at = offset % bytes.len();
            bytes[at] = *byte;
            std::fs::write(path, bytes).unwrap();
        }
        Mutation::ProviderField(p, line) => set_field(root, PROVIDERS[*p], line),
        Mutation::GoodAt(address) => {
            let url = match address {
                Address::Drifting => world.drifting.clone(),
                Address::WithV1 => format!("{}/v1", world.good),
                Address::TrailingSlash => format!("{}/", world.good),
                Address::UserInfo => world.good.replacen("://", "://acct2:secret@", 1),
                Address::Query => format!("{}/v1?x=1", world.good),
            };
            set_field(root, "good", &format!("base_url = \"{url}\""));
        }
        Mutation::Rerun(flags) => {
            let mut args: Vec<String> = Vec::new();
            for flag in flags {
                match flag {
                    Flag::BaseUrl(drifting) => {
                        // One provider only, as the flag requires.
                        let url = if *drifting {
                            &world.drifting
                        } else {
                            &world.good
                        };
                        args = vec!["--base-url".into(), url.clone()];
                        let out = conform(root)
                            .args(["run", "good", "--suite", SUITE, "--no-progress"])
                            .args(&args)
                            .output()
                            .unwrap();
                        assert_ne!(out.status.code(), None);
                        args.clear();
                    }
                    Flag::Repeats(n) => args.extend(["--repeats".into(), n.to_string()]),
                    Flag::Stream => args.push("--stream".into()),
                    Flag::ValidFor(d) => args.extend(["--valid-for".into(), format!("{d}d")]),
                }
            }
            if !args.is_empty() {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                run(root, &refs);
            }
        }
        Mutation::Clock(hours) => {
            let mut list = allowlist(root);
            if let Some(entries) = list["entries"].as_array_mut() {
                for e in entries {
                    for field in ["valid_until", "generated_at"] {
                        e[field] = shift(&e[field], -hours);
                    }
                    e["evidence"]["first_call_at"] = shift(&e["evidence"]["first_call_at"], -hours);
                }
                write_allowlist(root, &list);
            }
        }
        Mutation::Field(edit) => {
            let mut list = allowlist(root);
            let Some(entries) = list["entries"].as_array_mut() else {
                return;
            };
            let Some(e) = entries.first_mut() else {
                return;
            };
            let hex = json!(format!("sha256:{}", "ab".repeat(32)));
            match edit {
                Edit::ValidUntilPlusDays(d) => e["valid_until"] = shift(&e["valid_until"], d * 24),
                Edit::FirstCallPlusDays(d) => {
                    e["evidence"]["first_call_at"] = shift(&e["evidence"]["first_call_at"], d * 24)
                }
                Edit::Repeats(n) => e["evidence"]["repeats"] = json!(n),
                Edit::Provider(p) => e["provider"] = json!(p),
                Edit::Suite(s) => e["suite"] = json!(s),
                Edit::SuiteDigest => e["suite_digest"] = hex,
                Edit::ProviderDigest => e["provider_digest"] = hex,
                Edit::SchemaFileDigest => e["suite_identity"]["files"]["schema.json"] = hex,
                Edit::Endpoint => e["provider_identity"]["endpoint"] = json!(world.drifting),
                Edit::Model => e["provider_identity"]["model"] = json!("drifting-model"),
                Edit::ContractOnly => {
                    *e = json!({"suite": e["suite"], "provider": e["provider"],
                        "valid_until": e["valid_until"]});
                }
                Edit::NoRevocations => {}
                Edit::Duplicate => {
                    let mut copy = e.clone();
                    copy["provider"] = json!("drifting");
                    entries.push(copy);
                }
            }
            if matches!(
                edit,
                Edit::NoRevocations | Edit::Duplicate | Edit::Provider(_)
            ) {
                list["revocations"] = json!([]);
            }
            write_allowlist(root, &list);
        }
        Mutation::Shards(forge) => forge_and_merge(root, *forge),
        Mutation::Breaks(every) => {
            // Sent where the same provider breaks some answers on its own: the run grants
            // nothing (`--base-url`), and must revoke.
            let url = format!("{}/break-{every}", world.good);
            let out = conform(root)
                .args([
                    "run",
                    "good",
                    "--suite",
                    SUITE,
                    "--no-progress",
                    "--base-url",
                    &url,
                ])
                .output()
                .unwrap();
            // Its own failures fail it (exit 1), or the files no longer load (exit 2):
            // never a pass, and never an open verdict that leaves a permit standing.
            assert!(
                matches!(out.status.code(), Some(1 | 2)),
                "a provider breaking the cases {every} divides: {}",
                text(&out)
            );
        }
        Mutation::Settings(text) => std::fs::write(root.join("conform.toml"), text).unwrap(),
    }
}

fn forge_and_merge(root: &Path, forge: Forge) {
    let shards = root.join("reports/shards");
    let dirs = [shards.join("shard-1-of-2"), shards.join("shard-2-of-2")];
    let mut merge_args: Vec<PathBuf> = vec![shards.clone()];
    match forge {
        Forge::Merge => {}
        Forge::DriftingPassed => {
            for dir in &dirs {
                let path = dir.join("results.jsonl");
                let forged: String = std::fs::read_to_string(&path)
                    .unwrap()
                    .lines()
                    .map(|l| {
                        let mut r: Value = serde_json::from_str(l).unwrap();
                        if r["provider"] == "drifting" {
                            r["passed"] = json!(true);
                            for o in r["checks"].as_array_mut().unwrap() {
                                o["status"] = json!("pass");
                            }
                        }
                        format!("{r}\n")
                    })
                    .collect();
                std::fs::write(path, forged).unwrap();
            }
        }
        Forge::ShiftManifests(days) => {
            for dir in &dirs {
                let path = dir.join("shard.json");
                let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                m["started_at"] = shift(&m["started_at"], days * 24);
                m["finished_at"] = shift(&m["finished_at"], days * 24);
                std::fs::write(path, m.to_string()).unwrap();
            }
        }
        Forge::DropRecord => {
            let path = dirs[0].join("results.jsonl");
            let kept: String = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .skip(1)
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(path, kept).unwrap();
        }
        Forge::RelabelReplay => {
            let replays = root.join("replays");
            let out = conform(root)
                .arg("--reports")
                .arg(&replays)
                .args(["run", "good", "drifting", "--suite", SUITE, "--no-progress"])
                .args(["--replay", "tapes", "--shard", "1/1"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            let path = replays.join("shards/shard-1-of-1/shard.json");
            let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            m["replayed_from"] = Value::Null;
            std::fs::write(path, m.to_string()).unwrap();
            merge_args = vec![replays.join("shards")];
        }
        Forge::SameShardTwice => {
            merge_args = vec![dirs[0].clone(), dirs[0].clone()];
        }
    }
    let out = conform(root)
        .arg("merge")
        .args(&merge_args)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), None, "{}", text(&out));
}

/// What a fresh run on exactly the project's current inputs grants: (provider, suite
/// digest, provider digest) of each entry it writes.
fn fresh_grants(root: &Path) -> Vec<(String, String, String)> {
    let fresh = tempfile::tempdir().unwrap();
    for dir in ["fixtures", "providers"] {
        common::copy_dir(&root.join(dir), &fresh.path().join(dir));
    }
    if root.join("conform.toml").is_file() {
        std::fs::copy(root.join("conform.toml"), fresh.path().join("conform.toml")).unwrap();
    }
    // Each provider on its own, with any key it asks for: one provider's broken file
    // stops a run of both, and says nothing of the other.
    for provider in PROVIDERS {
        conform(fresh.path())
            .env("OTHER_KEY", KEY)
            .args(["run", provider, "--suite", SUITE, "--no-progress"])
            .output()
            .unwrap();
    }
    let list = allowlist(fresh.path());
    list["entries"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e["suite"] == SUITE)
                .map(|e| {
                    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                    (s("provider"), s("suite_digest"), s("provider_digest"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Asks every reader about every provider, and holds their answers to the oracle; the
/// number of permits.
fn check(root: &Path) -> Result<usize, String> {
    let mut permits = 0;
    let now = OffsetDateTime::now_utc();
    let paths = Paths::under(root);
    let path = root.join("allowlist.json");
    let grants = fresh_grants(root);
    for provider in PROVIDERS {
        let query = Query::new(SUITE, provider, now).project(&paths);
        let rust = decide(&path, &query);
        let serve =
            conform_serve::orchestrator::gate::permits(&path, SUITE, provider, now, Some(&paths));
        let gate = conform(root)
            .args([
                "gate",
                "--suite",
                SUITE,
                "--provider",
                provider,
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        let gate_json: Value = serde_json::from_slice(&gate.stdout).unwrap_or(Value::Null);
        let explain = conform(root)
            .args([
                "allowlist",
                "explain",
                provider,
                "--suite",
                SUITE,
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        let explain_json: Value = serde_json::from_slice(&explain.stdout).unwrap_or(Value::Null);
        let export = conform(root)
            .args([
                "export",
                "portkey",
                "--primary",
                "primary",
                "--fallback",
                provider,
            ])
            .args([
                "--suite",
                SUITE,
                "--name",
                &format!("{provider}=@{provider}-slug"),
            ])
            .output()
            .unwrap();
        let answers = [
            ("rust", rust.is_ok()),
            ("serve", serve.is_ok()),
            (
                "gate",
                gate.status.code() == Some(0) && gate_json["permitted"] == true,
            ),
            (
                "explain",
                explain_json["suites"][0]["status"] == "permitted",
            ),
            (
                "export",
                export.status.code() == Some(0)
                    && String::from_utf8_lossy(&export.stdout)
                        .contains(&format!("@{provider}-slug")),
            ),
        ];
        if answers.iter().any(|(_, a)| *a != answers[0].1) {
            return Err(format!(
                "{provider}: readers disagree: {answers:?}\ngate: {}\nexplain: {explain_json}\nexport: {}",
                text(&gate),
                text(&export)
            ));
        }
        let Ok(permit) = rust else { continue };
        permits += 1;
        let e = &permit.entry;
        let same = grants
            .iter()
            .any(|(p, s, d)| p == provider && *s == e.suite_digest && *d == e.provider_digest);
        if !same {
            return Err(format!(
                "false permit for {provider}: a fresh run grants {grants:?}; the permit rests on suite {} provider {}",
                e.suite_digest, e.provider_digest
            ));
        }
        let first = e
            .evidence
            .first_call_at
            .as_deref()
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok());
        let until = OffsetDateTime::parse(&e.valid_until, &Rfc3339).ok();
        let max = conform_config::Settings::load(&paths.settings)
            .map(|s| s.max_valid_for)
            .unwrap_or_default();
        match (first, until) {
            (Some(first), Some(until))
                if now < until
                    && until - first <= max
                    && first <= now + time::Duration::minutes(5) => {}
            _ => {
                return Err(format!(
                    "permit for {provider} outside its validity: first call {:?}, until {}",
                    e.evidence.first_call_at, e.valid_until
                ));
            }
        }
    }
    Ok(permits)
}

/// A copy of the proven project with `mutations` applied, checked; the number of permits.
fn hunt(mutations: &[Mutation]) -> Result<usize, String> {
    let world = world();
    let dir = tempfile::tempdir().unwrap();
    common::copy_dir(world.template.path(), dir.path());
    for m in mutations {
        apply(dir.path(), world, m);
    }
    check(dir.path()).map_err(|e| format!("{mutations:?}: {e}"))
}

/// The number of cases the property runs: 32 in CI, `PROPTEST_CASES` for a longer hunt.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(32)
}

#[test]
fn no_reader_permits_what_a_fresh_run_would_not_grant() {
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let permits = AtomicUsize::new(0);
    // CI draws the same cases every time; a longer hunt draws new ones.
    let mut runner = if std::env::var_os("PROPTEST_CASES").is_some() {
        proptest::test_runner::TestRunner::new(config)
    } else {
        proptest::test_runner::TestRunner::new_with_rng(
            config,
            proptest::test_runner::TestRng::deterministic_rng(
                proptest::test_runner::RngAlgorithm::ChaCha,
            ),
        )
    };
    let result = runner.run(&prop::collection::vec(mutation(), 1..4), |mutations| {
        let n = hunt(&mutations).map_err(TestCaseError::fail)?;
        permits.fetch_add(n, Ordering::Relaxed);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // Not met by denying everything: many changes leave the proof standing.
    let permits = permits.load(Ordering::Relaxed);
    eprintln!("{permits} permits held to the oracle in {} cases", cases());
    assert!(permits > 0, "no permit in {} cases", cases());
}

/// Each path of the issue, as a named case of the same property; and the changes that
/// must keep the permit, so the property is never met by denying everything.
#[test]
fn the_issues_paths_and_the_operational_changes() {
    let permitted = |mutations: &[Mutation]| -> bool {
        hunt(mutations).unwrap();
        let world = world();
        let dir = tempfile::tempdir().unwrap();
        common::copy_dir(world.template.path(), dir.path());
        for m in mutations {
            apply(dir.path(), world, m);
        }
        let paths = Paths::under(dir.path());
        decide(
            &dir.path().join("allowlist.json"),
            &Query::new(SUITE, "good", OffsetDateTime::now_utc()).project(&paths),
        )
        .is_ok()
    };
    assert!(permitted(&[]), "the proven project permits");
    // Operational settings are outside the identity.
    assert!(permitted(&[Mutation::ProviderField(
        0,
        "timeout = \"20s\""
    )]));
    assert!(permitted(&[Mutation::ProviderField(
        0,
        "[limits]\nconcurrency = 2"
    )]));
    assert!(permitted(&[Mutation::GoodAt(Address::TrailingSlash)]));
    // The SDKs' spelling (`…/v1`) names the same endpoint: the wire adds `/v1` once.
    assert!(permitted(&[Mutation::GoodAt(Address::WithV1)]));
    assert!(permitted(&[Mutation::Shards(Forge::Merge)]));
    // 1. Endpoint swapped, in the file or on the command line.
    assert!(!permitted(&[Mutation::GoodAt(Address::Drifting)]));
    // A conformant run elsewhere grants nothing; a failing one revokes (fail closed).
    assert!(permitted(&[Mutation::Rerun(vec![Flag::BaseUrl(false)])]));
    assert!(!permitted(&[Mutation::Rerun(vec![Flag::BaseUrl(true)])]));
    // 2. A check silently off: a pointer the schema cannot produce stops the run.
    // (tests/permit_proof.rs runs `conform check`.) A changed schema denies.
    assert!(!permitted(&[Mutation::SuiteByte(1, 60, b' ')]));
    // 3. Evidence renewed without calls: stale shards, the same shards again.
    assert!(!permitted(&[
        Mutation::Clock(24 * 8),
        Mutation::Shards(Forge::ShiftManifests(-8))
    ]));
    assert!(permitted(&[
        Mutation::Shards(Forge::Merge),
        Mutation::Shards(Forge::Merge)
    ]));
    // 5. Hand-edited entries: a bare one, a renamed provider, a century of validity.
    assert!(!permitted(&[Mutation::Field(Edit::ContractOnly)]));
    assert!(!permitted(&[Mutation::Field(Edit::ValidUntilPlusDays(
        36500
    ))]));
    hunt(&[Mutation::Field(Edit::Provider("drifting"))]).unwrap();
    // 6. Lowered effort.
    assert!(!permitted(&[Mutation::Field(Edit::Repeats(1))]));
    hunt(&[Mutation::Rerun(vec![Flag::Repeats(1)])]).unwrap();
    hunt(&[Mutation::Rerun(vec![Flag::ValidFor(36500)])]).unwrap();
    // 7. Forged or relabelled shard records.
    hunt(&[Mutation::Shards(Forge::DriftingPassed)]).unwrap();
    hunt(&[
        Mutation::Clock(24 * 8),
        Mutation::Shards(Forge::RelabelReplay),
    ])
    .unwrap();
    // Issue 42: the endpoint is the whole address (another account, another query).
    assert!(!permitted(&[Mutation::GoodAt(Address::UserInfo)]));
    assert!(!permitted(&[Mutation::GoodAt(Address::Query)]));
    // More breakage never gives a weaker verdict: a provider that then breaks one case in
    // 15, or every other one, is revoked, never left standing as inconclusive.
    assert!(!permitted(&[Mutation::Breaks(15)]));
    assert!(!permitted(&[Mutation::Breaks(2)]));
    // A default minimum: the same pass on too few calls permits nothing.
    assert!(!permitted(&[Mutation::Settings(
        "[evidence]\nmax_undetected_failure_rate = 0.05\n"
    )]));
}

/// A server that answers every case of the triage suite as [`answer`] says, whatever
/// else the request holds: a primary and a fallback that agree.
struct Agreeing;

impl Respond for Agreeing {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        reply(answer(case_of(&body).unwrap_or(0)))
    }
}

/// Issue 42: the reference is part of the evidence. A fallback judged only against the
/// primary (cases without `expected`) keeps its permit while the primary is as it was,
/// and loses it (`reference_changed`, naming the field) when the primary's file changes
/// what the primary is: another model, another endpoint. An operational change to the
/// primary keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_primary_denies_the_fallback_judged_against_it() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Agreeing)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_project(root, &server.uri(), &server.uri());
    // Judged against the primary alone: no `expected` left in the cases.
    for i in 0..CASES {
        let path = root.join(format!("fixtures/triage/cases/c{i:02}.json"));
        let mut case: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        case.as_object_mut().unwrap().remove("expected");
        std::fs::write(&path, case.to_string()).unwrap();
    }
    let suite = root.join("fixtures/triage/suite.toml");
    let toml = std::fs::read_to_string(&suite).unwrap();
    std::fs::write(&suite, format!("reference = \"primary\"\n{toml}")).unwrap();
    let root = root.to_path_buf();
    let gate = move |root: &Path| {
        let out = conform(root)
            .args([
                "gate",
                "--suite",
                SUITE,
                "--provider",
                "good",
                "--format",
                "json",
            ])
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.code(), answer)
    };
    let (code, ran) = tokio::task::spawn_blocking({
        let root = root.clone();
        move || {
            let out = conform(&root)
                .args(["run", "good", "--suite", SUITE, "--no-progress"])
                .output()
                .unwrap();
            (out.status.code(), text(&out))
        }
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{ran}");
    let permitted = gate(&root);
    assert_eq!(permitted.0, Some(0), "{}", permitted.1);
    // The permit states the comparison's power beside its own bound.
    assert!(
        permitted.1["drift_rules_out"]["drift_above"]
            .as_f64()
            .is_some(),
        "{}",
        permitted.1
    );
    set_field(&root, "primary", "timeout = \"20s\"");
    assert_eq!(
        gate(&root).0,
        Some(0),
        "an operational change keeps the permit"
    );
    for change in ["model = \"primary-model-2\"", "temperature = 0.7"] {
        let copy = tempfile::tempdir().unwrap();
        common::copy_dir(&root, copy.path());
        set_field(copy.path(), "primary", change);
        let (code, denied) = gate(copy.path());
        assert_eq!(code, Some(1), "{change}: {denied}");
        assert_eq!(denied["reason"], "reference_changed", "{change}: {denied}");
        let field = change.split(' ').next().unwrap();
        assert!(
            denied["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("{field}: ")),
            "{change}: {denied}"
        );
    }
    let copy = tempfile::tempdir().unwrap();
    common::copy_dir(&root, copy.path());
    std::fs::remove_file(copy.path().join("providers/primary.toml")).unwrap();
    let (code, denied) = gate(copy.path());
    assert_eq!(
        (code, &denied["reason"]),
        (Some(1), &json!("reference_changed")),
        "{denied}"
    );
}
