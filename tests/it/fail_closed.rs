//! Fail closed everywhere: one failover decision, asked by every caller alike; the
//! demo's evidence kept out of the allowlist production reads; nothing to test is never
//! a pass.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{Mode, Project};
use conform_allowlist::DifferentialEvidence;
use conform_config::Paths;
use conform_gate::allowlist::state::{self, State};
use conform_gate::allowlist::{
    Allowlist, Change, Entry, Evidence, Local, Observed, Query, Required, Revocation, decide,
    update,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const SUITE: &str = "ticket-triage";

fn stamp(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

/// A provider file that speaks OpenAI's Chat Completions at an address nothing listens on:
/// the decision never calls a provider.
fn compatible(model: &str) -> String {
    format!(
        "kind = \"openai-compatible\"\nmodel = \"{model}\"\nbase_url = \"http://127.0.0.1:9\"\n\n[tokenizer]\nkind = \"none\"\n"
    )
}

/// A project with the shipped suites, two real providers and a simulated one.
fn project() -> Project {
    let project = Project::new(&["sim-steady"]);
    project.write("providers/primary.toml", &compatible("primary-model"));
    project.write("providers/fallback.toml", &compatible("fallback-model"));
    project
}

/// An entry as a conformant run of `provider` on the project's suite would write it now.
fn entry(project: &Project, provider: &str) -> Entry {
    let local = Local::observe(&Paths::under(project.root()), SUITE, provider).unwrap();
    let now = OffsetDateTime::now_utc();
    Entry {
        suite: SUITE.into(),
        provider: provider.into(),
        model: format!("{provider}-model"),
        served_models: vec![format!("{provider}-model-1")],
        system_fingerprints: Vec::new(),
        suite_digest: local.suite_digest,
        provider_digest: local.provider_digest,
        suite_identity: Some(local.suite_identity),
        provider_identity: Some(local.provider_identity),
        tokenizer: "none".into(),
        evidence: Evidence {
            run_id: "run-1".into(),
            report: "reports/run-1/report.json".into(),
            conform_version: "0.1.0".into(),
            first_call_at: Some(stamp(now - time::Duration::hours(2))),
            cases: 30,
            repeats: 1,
            calls: 30,
            passed: 30,
            pass_rate: 1.0,
            first_attempt_pass_rate: 1.0,
            checks: BTreeMap::new(),
            rules_out: None,
            latency: None,
            tool_calls: None,
            differential: None,
        },
        generated_at: stamp(now - time::Duration::hours(1)),
        valid_until: stamp(now + time::Duration::days(3)),
        simulated: false,
        contract_only: false,
        attestation: None,
    }
}

fn revocation(provider: &str, at: OffsetDateTime) -> Revocation {
    Revocation {
        suite: SUITE.into(),
        provider: provider.into(),
        run_id: "run-bad".into(),
        at: stamp(at),
        reasons: vec!["schema_violation".into(), "not_pure_json".into()],
        report: "reports/run-bad/report.json".into(),
        suite_digest: None,
        provider_digest: None,
        attestation: None,
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Where every reader keeps what it has seen (`--state`).
fn state_file(project: &Project) -> PathBuf {
    project.path("state.json")
}

/// `conform serve`'s gate on a ledger in the project that remembers what the state file
/// does: the same newest statement seen per pair as every other reader.
fn serve_answer(
    project: &Project,
    path: &Path,
    provider: &str,
) -> Result<(), conform_gate::allowlist::Denial> {
    use conform_serve::orchestrator::gate::{AllowlistGate, FailoverGate};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let url = format!("sqlite://{}", project.path("ledger.db").display());
        let ledger = conform_serve::ledger::Ledger::connect(&url, &Default::default())
            .await
            .unwrap();
        let seen = State::load(&state_file(project)).unwrap();
        let stated: Vec<_> = (seen.seen().iter())
            .map(|(suite, provider, at)| conform_allowlist::Stated {
                suite: suite.into(),
                provider: provider.into(),
                at,
            })
            .collect();
        ledger.remember_statements(&stated).await.unwrap();
        let paths = Paths::under(project.root());
        let gate = AllowlistGate::new(path.to_path_buf(), Some(paths), Some(ledger.clone()));
        let answer = gate.permits(SUITE, provider, now()).await;
        ledger.close().await;
        answer
    })
}

fn write_list(path: &Path, list: &Allowlist) {
    std::fs::write(path, serde_json::to_vec_pretty(list).unwrap()).unwrap();
}

fn with_entries(path: &Path, entries: Vec<Entry>, revocations: Vec<Revocation>) {
    write_list(
        path,
        &Allowlist {
            entries,
            revocations,
            ..Allowlist::default()
        },
    );
}

/// A new key, listed in the project's `trust.toml`.
fn trusted(project: &Project) -> conform_allowlist::sign::SigningKey {
    let key = conform_allowlist::sign::SigningKey::generate().unwrap();
    project.write(
        "trust.toml",
        &format!(
            "[[keys]]\nname = \"ci\"\npublic_key = \"{}\"\n",
            key.public()
        ),
    );
    key
}

fn signed(mut entry: Entry, key: &conform_allowlist::sign::SigningKey) -> Entry {
    conform_gate::allowlist::attest::sign(&mut entry, key);
    entry
}

/// One row of the table: how to set the project and the file up, which provider to ask
/// about, and the answer every caller must give.
struct Case {
    name: &'static str,
    provider: &'static str,
    setup: fn(&Project, &Path),
    expected: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "no file",
        provider: "fallback",
        setup: |_, _| {},
        expected: "missing",
    },
    Case {
        name: "not JSON",
        provider: "fallback",
        setup: |_, path| {
            std::fs::write(path, "{\"format\": \"conform.allowlist/v1\", \"entr").unwrap()
        },
        expected: "unreadable",
    },
    Case {
        name: "another format",
        provider: "fallback",
        setup: |_, path| {
            std::fs::write(path, r#"{"format": "conform.allowlist/v2", "entries": []}"#).unwrap()
        },
        expected: "unknown_format",
    },
    Case {
        name: "valid and fresh",
        provider: "fallback",
        setup: |p, path| with_entries(path, vec![entry(p, "fallback")], vec![]),
        expected: "permitted",
    },
    Case {
        name: "never run",
        provider: "fallback",
        setup: |p, path| with_entries(path, vec![entry(p, "primary")], vec![]),
        expected: "no_entry",
    },
    Case {
        name: "revoked by the last run",
        provider: "fallback",
        setup: |_, path| {
            with_entries(
                path,
                vec![],
                vec![revocation("fallback", OffsetDateTime::now_utc())],
            )
        },
        expected: "revoked",
    },
    Case {
        name: "an entry with a later revocation beside it",
        provider: "fallback",
        setup: |p, path| {
            with_entries(
                path,
                vec![entry(p, "fallback")],
                vec![revocation("fallback", OffsetDateTime::now_utc())],
            )
        },
        expected: "revoked",
    },
    Case {
        name: "expired",
        provider: "fallback",
        setup: |p, path| {
            let mut e = entry(p, "fallback");
            e.valid_until = stamp(OffsetDateTime::now_utc() - time::Duration::seconds(5));
            with_entries(path, vec![e], vec![])
        },
        expected: "expired",
    },
    Case {
        name: "a pass on four calls, no bound set: the default 10 % is not ruled out",
        provider: "fallback",
        setup: |p, path| {
            let mut e = entry(p, "fallback");
            (e.evidence.calls, e.evidence.passed) = (4, 4);
            with_entries(path, vec![e], vec![])
        },
        expected: "insufficient_evidence",
    },
    Case {
        name: "a pass on four calls, the project asking for no more than that",
        provider: "fallback",
        setup: |p, path| {
            let mut e = entry(p, "fallback");
            (e.evidence.calls, e.evidence.passed) = (4, 4);
            p.write(
                "conform.toml",
                "[evidence]\nmax_undetected_failure_rate = 0.6\n",
            );
            with_entries(path, vec![e], vec![])
        },
        expected: "permitted",
    },
    Case {
        name: "judged against a primary whose file changed since",
        provider: "fallback",
        setup: |p, path| {
            let mut e = entry(p, "fallback");
            let primary = Local::observe(&Paths::under(p.root()), SUITE, "primary").unwrap();
            let mut then = primary.provider_identity.clone();
            then.0.insert("model".into(), json!("primary-model-0"));
            e.evidence.differential = Some(DifferentialEvidence {
                reference: "primary".into(),
                reference_digest: Some(then.digest()),
                reference_identity: Some(then),
                ..DifferentialEvidence::default()
            });
            with_entries(path, vec![e], vec![])
        },
        expected: "reference_changed",
    },
    Case {
        name: "a case's expected answer edited after the run",
        provider: "fallback",
        setup: |p, path| {
            with_entries(path, vec![entry(p, "fallback")], vec![]);
            edit_a_case(p);
        },
        expected: "suite_changed",
    },
    Case {
        name: "a rule edited after the run",
        provider: "fallback",
        setup: |p, path| {
            with_entries(path, vec![entry(p, "fallback")], vec![]);
            let toml = p.path(&format!("fixtures/{SUITE}/suite.toml"));
            let text = std::fs::read_to_string(&toml).unwrap();
            std::fs::write(&toml, format!("{text}\n# tightened after the run\n")).unwrap();
        },
        expected: "suite_changed",
    },
    Case {
        name: "the provider's model changed after the run",
        provider: "fallback",
        setup: |p, path| {
            with_entries(path, vec![entry(p, "fallback")], vec![]);
            p.write("providers/fallback.toml", &compatible("another-model"));
        },
        expected: "provider_changed",
    },
    Case {
        name: "evidence marked simulated",
        provider: "fallback",
        setup: |p, path| {
            let mut e = entry(p, "fallback");
            e.simulated = true;
            with_entries(path, vec![e], vec![])
        },
        expected: "simulated",
    },
    Case {
        name: "an old demo's unmarked entry for a simulated provider",
        provider: "sim-steady",
        setup: |p, path| with_entries(path, vec![entry(p, "sim-steady")], vec![]),
        expected: "simulated",
    },
    Case {
        name: "a signed entry, the project trusting its key",
        provider: "fallback",
        setup: |p, path| {
            let key = trusted(p);
            with_entries(path, vec![signed(entry(p, "fallback"), &key)], vec![]);
        },
        expected: "permitted",
    },
    Case {
        name: "an unsigned entry where the project trusts a key",
        provider: "fallback",
        setup: |p, path| {
            trusted(p);
            with_entries(path, vec![entry(p, "fallback")], vec![]);
        },
        expected: "unsigned",
    },
    Case {
        name: "a signed entry whose validity was moved by hand",
        provider: "fallback",
        setup: |p, path| {
            let key = trusted(p);
            let mut e = signed(entry(p, "fallback"), &key);
            e.valid_until = stamp(OffsetDateTime::now_utc() + time::Duration::days(20));
            with_entries(path, vec![e], vec![]);
        },
        expected: "signature_invalid",
    },
    Case {
        name: "another provider's signed entry renamed",
        provider: "fallback",
        setup: |p, path| {
            let key = trusted(p);
            let mut e = signed(entry(p, "primary"), &key);
            e.provider = "fallback".into();
            with_entries(path, vec![e], vec![]);
        },
        expected: "signature_invalid",
    },
    Case {
        name: "an entry signed by a key the project does not list",
        provider: "fallback",
        setup: |p, path| {
            trusted(p);
            let stranger = conform_allowlist::sign::SigningKey::generate().unwrap();
            with_entries(path, vec![signed(entry(p, "fallback"), &stranger)], vec![]);
        },
        expected: "untrusted_key",
    },
    Case {
        name: "an older signed entry put back after a signed revocation was read",
        provider: "fallback",
        setup: |p, path| {
            let key = trusted(p);
            let granted = signed(entry(p, "fallback"), &key);
            let mut revoked = revocation("fallback", OffsetDateTime::now_utc());
            conform_gate::allowlist::attest::sign(&mut revoked, &key);
            // Every reader read the revocation before (serve's ledger is primed from the
            // same state), then the older file is put back.
            with_entries(path, vec![], vec![revoked]);
            let trust = p.path("trust.toml");
            let kept = state::keeping(Some(&state_file(p)), path, Some(&trust), now(), |_| ());
            kept.unwrap();
            with_entries(path, vec![granted], vec![]);
        },
        expected: "superseded",
    },
    Case {
        name: "an entry with only the contract's members",
        provider: "fallback",
        setup: |_, path| {
            let until = stamp(OffsetDateTime::now_utc() + time::Duration::days(1));
            let file = json!({"format": "conform.allowlist/v1", "entries": [
                {"suite": SUITE, "provider": "fallback", "valid_until": until}]});
            std::fs::write(path, file.to_string()).unwrap();
        },
        expected: "suite_changed",
    },
];

fn edit_a_case(project: &Project) {
    let cases = project.path(&format!("fixtures/{SUITE}/cases"));
    let first = std::fs::read_dir(&cases)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let mut case: Value = serde_json::from_slice(&std::fs::read(&first).unwrap()).unwrap();
    case["expected"]["priority"] = json!("p0-edited");
    std::fs::write(&first, serde_json::to_vec_pretty(&case).unwrap()).unwrap();
}

/// What each caller answers, as a status code (`permitted` or the denial's reason).
fn answers(project: &Project, path: &Path, provider: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let paths = Paths::under(project.root());
    let now = OffsetDateTime::now_utc();
    let code = |d: Result<(), conform_gate::allowlist::Denial>| match d {
        Ok(()) => "permitted".to_string(),
        Err(d) => d.reason.code().to_string(),
    };

    // The library's one function, and the Rust reader with what the project says, each
    // keeping what it has seen in the state file, as every caller below does.
    let (kept, trust) = (state_file(project), paths.trust.clone());
    let keeping = |read: &dyn Fn(Option<&conform_gate::allowlist::Seen>) -> String| {
        state::keeping(Some(&kept), path, Some(&trust), now, read).unwrap()
    };
    let query = Query::new(SUITE, provider, now).project(&paths);
    let decided = keeping(&|seen| code(decide(path, &query.seen(seen)).map(|_| ())));
    out.insert("decide", decided);
    let local = Local::observe(&paths, SUITE, provider).unwrap();
    let permitted = keeping(&|seen| {
        let observed = Observed {
            seen: seen.and_then(|s| s.get(SUITE, provider)),
            ..local.observed(Observed::default())
        };
        let required = Required::default().or_defaults(local.settings.bounds());
        let list = Allowlist::load(path);
        code(list.and_then(|l| {
            l.decide_with(SUITE, provider, now, &observed, &required)
                .map(|_| ())
        }))
    });
    out.insert("permits", permitted);
    // `conform serve`'s gate, holding the evidence to the same project and remembering in
    // its ledger.
    out.insert("serve", code(serve_answer(project, path, provider)));

    let run = |args: &[&str]| {
        let output = project
            .cmd()
            .arg("--allowlist")
            .arg(path)
            .arg("--state")
            .arg(state_file(project))
            .args(args)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };

    let (exit, stdout, _) = run(&[
        "gate",
        "--suite",
        SUITE,
        "--provider",
        provider,
        "--format",
        "json",
    ]);
    let gate: Value = serde_json::from_str(&stdout).unwrap();
    let gate_code = if gate["permitted"] == true {
        assert_eq!(exit, Some(0), "{gate}");
        "permitted".to_string()
    } else {
        assert_eq!(exit, Some(1), "{gate}");
        gate["reason"].as_str().unwrap().to_string()
    };
    out.insert("gate", gate_code);

    let (_, stdout, _) = run(&[
        "allowlist",
        "explain",
        provider,
        "--suite",
        SUITE,
        "--format",
        "json",
    ]);
    let explain: Value = serde_json::from_str(&stdout).unwrap();
    out.insert(
        "explain",
        explain["suites"][0]["status"].as_str().unwrap().to_string(),
    );

    let (exit, stdout, stderr) = run(&[
        "export",
        "litellm",
        "--primary",
        "primary",
        "--fallback",
        provider,
        "--suite",
        SUITE,
    ]);
    let export = if exit == Some(0) {
        assert!(
            stdout.contains(&format!("primary -> {provider}")),
            "{stdout}"
        );
        "permitted".to_string()
    } else if let Some(rest) = stdout
        .lines()
        .find_map(|l| l.split_once(&format!("primary -/-> {provider}: ")))
    {
        rest.1.split_whitespace().next().unwrap().to_string()
    } else {
        // No file to export from: the command refuses with the reader's reason.
        let (_, rest) = stderr
            .split_once("no fallback can be exported (")
            .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
        rest.split(')').next().unwrap().to_string()
    };
    out.insert("export", export);

    let (_, stdout, _) = run(&["allowlist", "show", "--format", "json"]);
    if let Ok(show) = serde_json::from_str::<Value>(&stdout)
        && let Some(entry) = show["entries"]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["provider"] == provider))
    {
        out.insert("show", entry["status"].as_str().unwrap().to_string());
    }
    out
}

#[test]
fn every_caller_gives_the_same_answer_for_the_same_file_suite_and_time() {
    for case in CASES {
        let project = project();
        let path = project.path("allowlist.json");
        (case.setup)(&project, &path);
        let answers = answers(&project, &path, case.provider);
        for (caller, answer) in &answers {
            assert_eq!(
                answer, case.expected,
                "{}: {caller} answered {answer}, expected {}; all: {answers:?}",
                case.name, case.expected
            );
        }
        assert!(answers.len() >= 6, "{}: {answers:?}", case.name);
    }
}

#[test]
fn a_revoked_provider_is_reported_with_its_finding_codes() {
    let project = project();
    let path = project.path("allowlist.json");
    update(
        &path,
        &[Change::Revoke(revocation(
            "fallback",
            OffsetDateTime::now_utc(),
        ))],
    )
    .unwrap();
    let out = project
        .cmd()
        .args(["gate", "--suite", SUITE, "--provider", "fallback"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("denied (revoked): revoked by run run-bad"),
        "{text}"
    );
    assert!(text.contains("schema_violation, not_pure_json"), "{text}");

    let out = project
        .cmd()
        .args([
            "gate",
            "--suite",
            SUITE,
            "--provider",
            "fallback",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["reason"], "revoked");
    assert_eq!(
        json["findings"],
        json!(["schema_violation", "not_pure_json"])
    );
}

#[test]
fn the_suite_digest_flag_overrides_the_project_only_when_given() {
    let project = project();
    let path = project.path("allowlist.json");
    with_entries(&path, vec![entry(&project, "fallback")], vec![]);
    let gate = |extra: &[&str]| {
        project
            .cmd()
            .args(["gate", "--suite", SUITE, "--provider", "fallback"])
            .args(extra)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(gate(&[]), Some(0));
    assert_eq!(gate(&["--suite-digest", "sha256:00"]), Some(1));
    edit_a_case(&project);
    assert_eq!(gate(&[]), Some(1));
}

/// The end-to-end version of the defect: a real run against a provider speaking OpenAI's
/// wire format, then an edited case. Before, `gate` kept saying `permitted`.
#[tokio::test(flavor = "multi_thread")]
async fn gate_sees_a_suite_edited_after_a_real_run() {
    let project = Project::new(&[]);
    let _server = project.chat_mock("local", Mode::Faithful).await;
    let root = project.root().to_path_buf();
    let ran = tokio::task::spawn_blocking(move || {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(&root)
            .arg("--root")
            .arg(&root)
            .env_remove("CONFORM_ALLOWLIST")
            .args(["run", "local", "--suite", SUITE, "--no-progress"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let gate = |project: &Project| {
        let out = project
            .cmd()
            .args(["gate", "--suite", SUITE, "--provider", "local"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, text) = gate(&project);
    assert_eq!(code, Some(0), "{text}");
    edit_a_case(&project);
    let (code, text) = gate(&project);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.starts_with("denied (suite_changed)"), "{text}");
    // It names what changed, not two digests.
    assert!(
        text.contains(
            "the suite changed since the evidence was made: cases/: the content or names"
        ),
        "{text}"
    );
    let toml = project.path(&format!("fixtures/{SUITE}/suite.toml"));
    let rules = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{rules}\n# tightened\n")).unwrap();
    let (_, text) = gate(&project);
    assert!(text.contains("suite.toml changed"), "{text}");
}

fn output(cmd: &mut assert_cmd::Command) -> (Option<i32>, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn gate_and_export_refuse_a_suite_or_provider_the_project_does_not_have() {
    let project = project();
    with_entries(
        &project.path("allowlist.json"),
        vec![entry(&project, "fallback")],
        vec![],
    );
    let (code, text) =
        output(
            project
                .cmd()
                .args(["gate", "--suite", "ticket-triag", "--provider", "fallback"]),
        );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no suite named `ticket-triag`"), "{text}");
    assert!(
        text.contains("known: invoice-extraction, smollm2-smoke, support-agent, ticket-triage"),
        "{text}"
    );

    let (code, text) =
        output(
            project
                .cmd()
                .args(["gate", "--suite", SUITE, "--provider", "fallbak"]),
        );
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("no provider named `fallbak`")
            && text.contains("known: fallback, primary, sim-steady"),
        "{text}"
    );

    for args in [
        &[
            "export",
            "litellm",
            "--primary",
            "primary",
            "--suite",
            "ticket-triag",
        ][..],
        &["export", "litellm", "--primary", "primry"][..],
        &[
            "export",
            "portkey",
            "--primary",
            "primary",
            "--fallback",
            "fallbak",
        ][..],
    ] {
        let (code, text) = output(project.cmd().args(args));
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains("known: "), "{args:?}: {text}");
    }
}

#[test]
fn nothing_to_test_is_a_usage_error_naming_the_folder() {
    // No suites.
    let project = project();
    std::fs::remove_dir_all(project.path("fixtures")).unwrap();
    std::fs::create_dir_all(project.path("fixtures")).unwrap();
    for args in [&["check"][..], &["run", "fallback", "--no-progress"][..]] {
        let (code, text) = output(project.cmd().args(args));
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains("no suites"), "{args:?}: {text}");
        assert!(
            text.contains(&project.path("fixtures").display().to_string()),
            "{args:?}: {text}"
        );
    }

    // No providers.
    let project = Project::new(&[]);
    for args in [&["check"][..], &["run", "--no-progress"][..]] {
        let (code, text) = output(project.cmd().args(args));
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(
            text.contains(&project.path("providers").display().to_string()),
            "{args:?}: {text}"
        );
    }
    // The demo needs none of the project's (issue 46): it names the folder it found no
    // simulation in and runs those built into conform.
    let demo = ["demo", "--no-progress", "--suite", "ticket-triage"];
    let (code, text) = output(project.cmd().args(demo));
    assert_eq!(code, Some(0), "{text}");
    let providers = project.path("providers").display().to_string();
    assert!(
        text.contains(&format!(
            "no simulated provider (kind = \"sim\") in {providers}"
        )),
        "{text}"
    );

    // A suite without cases.
    let project = project_with_empty_suite();
    for args in [&["check"][..], &["run", "fallback", "--no-progress"][..]] {
        let (code, text) = output(project.cmd().args(args));
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains("no cases"), "{args:?}: {text}");
        assert!(text.contains("cases"), "{args:?}: {text}");
    }
    assert!(!project.path("allowlist.json").exists());
}

fn project_with_empty_suite() -> Project {
    let project = project();
    let cases = project.path(&format!("fixtures/{SUITE}/cases"));
    std::fs::remove_dir_all(&cases).unwrap();
    std::fs::create_dir_all(&cases).unwrap();
    project
}

/// A real run that names a simulated provider writes nothing for it into the allowlist
/// production reads; the demo keeps its own allowlist beside its report.
#[test]
fn simulated_evidence_never_reaches_the_real_allowlist() {
    let project = Project::new(&["sim-steady", "sim-rate-limited"]);
    let (code, text) =
        output(
            project
                .cmd()
                .args(["run", "sim-steady", "--suite", SUITE, "--no-progress"]),
        );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("simulated providers never enter"), "{text}");
    assert!(!project.path("allowlist.json").exists(), "{text}");

    let (code, text) = output(
        project
            .cmd()
            .args(["demo", "--suite", SUITE, "--no-progress"]),
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(!project.path("allowlist.json").exists(), "{text}");
    // The path the demo printed: two runs may start within the same second, so the
    // newest report folder is not necessarily the demo's.
    let printed = text
        .lines()
        .find_map(|l| l.strip_prefix("allowlist: "))
        .and_then(|l| l.split(": granted").next())
        .unwrap_or_else(|| panic!("no allowlist line in {text}"));
    let demo_list: PathBuf = project.root().join(printed);
    let list: Value = serde_json::from_slice(&std::fs::read(&demo_list).unwrap()).unwrap();
    let entries = list["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{list}");
    assert!(entries.iter().all(|e| e["simulated"] == true), "{list}");
    assert!(text.contains(&demo_list.display().to_string()), "{text}");
    // The page for people does not call a simulated grant a permitted failover.
    let page = std::fs::read_to_string(demo_list.with_file_name("report.html")).unwrap();
    assert!(page.contains("permit no real failover"), "{page}");
    assert!(!page.contains("the grants permit failover until"), "{page}");

    // Even pointed at the demo's allowlist, nothing is exported or permitted.
    let (code, text) = output(project.cmd().arg("--allowlist").arg(&demo_list).args([
        "export",
        "litellm",
        "--primary",
        "sim-steady",
        "--suite",
        SUITE,
    ]));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("sim-steady -/-> sim-rate-limited: simulated"),
        "{text}"
    );
    let (code, text) = output(project.cmd().arg("--allowlist").arg(&demo_list).args([
        "gate",
        "--suite",
        SUITE,
        "--provider",
        "sim-steady",
    ]));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("denied (simulated)"), "{text}");
}

/// A provider stopped by an error in its first suite never sends the calls of the others:
/// those suites are inconclusive too (never nonconformant with no reason, never revoked),
/// and the allowlist keeps what it held.
#[test]
fn a_provider_stopped_in_one_suite_is_inconclusive_in_every_suite() {
    let project = project();
    project.write(
        "providers/down.toml",
        "kind = \"openai-compatible\"\nmodel = \"down-model\"\nbase_url = \"http://127.0.0.1:9\"\n\n[limits]\nmax_retries = 0\n\n[tokenizer]\nkind = \"none\"\n",
    );
    let path = project.path("allowlist.json");
    let mut earlier = entry(&project, "down");
    earlier.suite = "invoice-extraction".into();
    with_entries(&path, vec![earlier], vec![]);
    let before = std::fs::read(&path).unwrap();

    let (code, text) = output(project.cmd().args([
        "run",
        "down",
        "--suite",
        "ticket-triage",
        "--suite",
        "invoice-extraction",
        "--no-progress",
    ]));
    assert_eq!(code, Some(3), "{text}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(project.last_run().join("report.json")).unwrap())
            .unwrap();
    let verdicts = report["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2, "{report}");
    for v in verdicts {
        assert_eq!(v["verdict"], "inconclusive", "{v}");
        assert!(!v["reasons"].as_array().unwrap().is_empty(), "{v}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "{text}");
}
