//! Signed evidence end to end: `conform keys new`, a run signing what it grants with the
//! key from `CONFORM_SIGNING_KEY`, `trust.toml`, and `allowlist verify` and `gate`
//! denying an entry edited after signing. The private key reaches no output and no file
//! but its own.

use crate::common;

use std::path::Path;

use common::{Mode, Project};
use serde_json::Value;

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under `dir` but `except`, as text.
fn every_file(dir: &Path, except: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            every_file(&path, except, out);
        } else if !path.starts_with(except) {
            let bytes = std::fs::read(&path).unwrap();
            out.push((
                path.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_run_is_verified_by_every_reader_and_an_edit_after_it_is_denied() {
    let project = Project::new(&[]);
    let server = project.chat_mock("local", Mode::Faithful).await;
    let keys = tempfile::tempdir().unwrap();
    let out = project
        .cmd()
        .args(["keys", "new", "--name", "ci", "--out"])
        .arg(keys.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let public = std::fs::read_to_string(keys.path().join("ci.pub")).unwrap();
    let secret = std::fs::read_to_string(keys.path().join("ci.key")).unwrap();
    let secret = secret.trim().to_string();
    assert!(!printed.contains(&secret));
    // What `keys new` prints is the trust file's entry.
    let trust = printed[printed.find("[[keys]]").unwrap()..].to_string();
    assert!(trust.contains(public.trim()), "{printed}");
    project.write("trust.toml", &trust);

    let root = project.root().to_path_buf();
    let secret_env = secret.clone();
    let conform = move |args: Vec<&'static str>| {
        let (root, secret) = (root.clone(), secret_env.clone());
        tokio::task::spawn_blocking(move || {
            assert_cmd::Command::cargo_bin("conform")
                .unwrap()
                .current_dir(&root)
                .arg("--root")
                .arg(&root)
                .env_remove("CONFORM_ALLOWLIST")
                .env("CONFORM_SIGNING_KEY", secret)
                .args(&args)
                .output()
                .unwrap()
        })
    };
    let gate = vec!["gate", "--suite", "ticket-triage", "--provider", "local"];
    let out = conform(vec![
        "run",
        "local",
        "--suite",
        "ticket-triage",
        "--no-progress",
    ])
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = conform(gate.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains(", signed by sha256:"), "{}", text(&out));
    assert!(!text(&out).contains("no trust file"), "{}", text(&out));
    let out = conform(vec!["allowlist", "verify"]).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("signed by ci (sha256:"),
        "{}",
        text(&out)
    );
    // People reading the file see who signed each entry.
    let out = conform(vec!["allowlist", "show"]).await.unwrap();
    assert!(
        text(&out).contains("    signed by key sha256:"),
        "{}",
        text(&out)
    );

    let list: Value =
        serde_json::from_str(&std::fs::read_to_string(project.path("allowlist.json")).unwrap())
            .unwrap();
    let envelope = &list["entries"][0]["attestation"];
    assert_eq!(envelope["payloadType"], "application/vnd.in-toto+json");
    // A signed file is still the published format.
    let schema: Value = serde_json::from_str(conform_gate::allowlist::SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&list)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // Standard tooling agrees: docs/signing.md's script (Python and OpenSSL).
    let outside = |list: &Path| {
        let doc = std::fs::read_to_string(Path::new(common::REPO).join("docs/signing.md")).unwrap();
        let after = &doc[doc.find("<!-- verify-outside -->").unwrap()..];
        let script = after
            .split("```python\n")
            .nth(1)
            .unwrap()
            .split("```")
            .next()
            .unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), script).unwrap();
        let out = std::process::Command::new("python3")
            .arg(file.path())
            .arg(list)
            .arg(public.trim())
            .output()
            .expect("python3 (and openssl) run docs/signing.md's verification");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let said = outside(&project.path("allowlist.json"));
    assert_eq!(said.trim(), "ticket-triage local verified", "{said}");

    // The key is in no report, record, allowlist or log.
    let mut files = Vec::new();
    every_file(project.root(), keys.path(), &mut files);
    for (file, content) in &files {
        assert!(!content.contains(&secret), "the signing key is in {file}");
    }

    // Moved by a week by hand: every reader denies it, naming the member edited.
    let mut edited = list.clone();
    edited["entries"][0]["valid_until"] = Value::String("2099-01-01T00:00:00Z".into());
    project.write("allowlist.json", &edited.to_string());
    let out = conform(gate.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("signature_invalid"), "{}", text(&out));
    let said = outside(&project.path("allowlist.json"));
    assert_eq!(said.trim(), "ticket-triage local NOT VERIFIED", "{said}");
    let out = conform(vec!["allowlist", "verify"]).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("`valid_until`"), "{}", text(&out));

    // A key that is not a key stops a run before anything is sent.
    let sent = server.received_requests().await.unwrap().len();
    let out = assert_cmd::Command::cargo_bin("conform")
        .unwrap()
        .current_dir(project.root())
        .args(["run", "local", "--no-progress"])
        .env("CONFORM_SIGNING_KEY", "conform-ed25519-secret:not-base64")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("CONFORM_SIGNING_KEY"), "{}", text(&out));
    assert!(!text(&out).contains("not-base64"), "{}", text(&out));
    assert_eq!(server.received_requests().await.unwrap().len(), sent);

    // Without a trust file, verify is a usage error that says what to do.
    std::fs::remove_file(project.path("trust.toml")).unwrap();
    let out = conform(vec!["allowlist", "verify"]).await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("conform keys new"), "{}", text(&out));
}

/// Shards are signed too: a merge under a trust file takes only shards whose manifest
/// and records are what the CI job signed.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_refuses_a_shard_changed_after_it_was_signed() {
    let project = Project::new(&[]);
    let _server = project.chat_mock("local", Mode::Faithful).await;
    let key = conform_allowlist::sign::SigningKey::generate().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let (secret, _) = key.write_pair(keys.path(), "ci").unwrap();
    project.write(
        "trust.toml",
        &format!(
            "[[keys]]\nname = \"ci\"\npublic_key = \"{}\"\n",
            key.public()
        ),
    );
    let root = project.root().to_path_buf();
    let conform = move |args: Vec<String>, signed: bool| {
        let (root, secret) = (root.clone(), secret.clone());
        tokio::task::spawn_blocking(move || {
            let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
            cmd.current_dir(&root).env_remove("CONFORM_ALLOWLIST");
            if signed {
                cmd.env("CONFORM_SIGNING_KEY", &secret);
            } else {
                cmd.env_remove("CONFORM_SIGNING_KEY");
            }
            cmd.args(&args).output().unwrap()
        })
    };
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    for k in 1..=2 {
        let out = conform(
            args(&format!(
                "run local --suite ticket-triage --no-progress --shard {k}/2"
            )),
            true,
        )
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            project
                .path(&format!("reports/shards/shard-{k}-of-2/shard.sig.json"))
                .is_file()
        );
    }
    // A copy with one record edited, and one whose signature was dropped.
    for (copy, edit) in [("edited", true), ("unsigned", false)] {
        let dir = project.path(copy);
        common::copy_dir(&project.path("reports/shards/shard-2-of-2"), &dir);
        if edit {
            let records = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
            std::fs::write(
                dir.join("results.jsonl"),
                records.replacen("\"case\"", "\"case\" ", 1),
            )
            .unwrap();
        } else {
            std::fs::remove_file(dir.join("shard.sig.json")).unwrap();
        }
        let out = conform(
            vec![
                "merge".into(),
                "reports/shards/shard-1-of-2".into(),
                copy.to_string(),
            ],
            false,
        )
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(3), "{copy}: {}", text(&out));
        let said = text(&out);
        match edit {
            true => assert!(
                said.contains("results.jsonl changed after the shard was signed"),
                "{said}"
            ),
            false => assert!(said.contains("not signed"), "{said}"),
        }
        assert!(!project.path("allowlist.json").exists(), "{said}");
    }
    let out = conform(args("merge reports/shards"), true).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = conform(args("allowlist verify"), false).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// A project that trusts a new key: the key's file, for `CONFORM_SIGNING_KEY`.
fn trusting(
    project: &Project,
    keys: &Path,
) -> (conform_allowlist::sign::SigningKey, std::path::PathBuf) {
    let key = conform_allowlist::sign::SigningKey::generate().unwrap();
    let (secret, _) = key.write_pair(keys, "ci").unwrap();
    project.write(
        "trust.toml",
        &format!(
            "[[keys]]\nname = \"ci\"\npublic_key = \"{}\"\n",
            key.public()
        ),
    );
    (key, secret)
}

/// `conform ARGS` in `project`, with the signing key when `key` names its file.
async fn conform_in(project: &Project, args: &[&str], key: Option<&Path>) -> std::process::Output {
    let mut cmd = project.cmd();
    cmd.env_remove("CONFORM_STATE").args(args);
    match key {
        Some(key) => cmd.env("CONFORM_SIGNING_KEY", key),
        None => cmd.env_remove("CONFORM_SIGNING_KEY"),
    };
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn exit(out: &std::process::Output) -> (Option<i32>, String) {
    (out.status.code(), text(out))
}

/// Issue 42, item 7: a signed grant, then a signed revocation by a failing run, then the
/// older file put back. Every reader that keeps state denies it (`superseded`); without
/// state the file alone cannot show it is older. A newer signed grant permits again.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_signed_allowlist_put_back_after_a_signed_revocation_is_superseded() {
    let project = Project::new(&[]);
    let faithful = project.chat_mock("local", Mode::Faithful).await;
    project.chat_provider("primary", "http://127.0.0.1:9");
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = trusting(&project, keys.path());
    let key = Some(secret.as_path());
    let run = ["run", "local", "--suite", "ticket-triage", "--no-progress"];
    let state = project.path("ci-state/state.json");
    let state_arg = state.to_str().unwrap();
    let gate = ["gate", "--suite", "ticket-triage", "--provider", "local"];
    let kept = |args: &[&'static str]| {
        let mut args: Vec<&str> = args.to_vec();
        args.extend(["--state", state_arg]);
        args
    };

    let (code, said) = exit(&conform_in(&project, &run, key).await);
    assert_eq!(code, Some(0), "{said}");
    let granted = std::fs::read(project.path("allowlist.json")).unwrap();
    // Read twice with the state: the same file keeps its permit.
    for _ in 0..2 {
        let (code, said) = exit(&conform_in(&project, &kept(&gate), None).await);
        assert_eq!(code, Some(0), "{said}");
    }
    let remembered = common::read_json(&state);
    assert_eq!(remembered["format"], "conform.state/v1", "{remembered}");
    assert_eq!(remembered["pairs"][0]["provider"], "local", "{remembered}");

    // A failing run, signed: its revocation is a signed statement too.
    let _fenced = project.chat_mock("local", Mode::Fenced).await;
    let (code, said) = exit(&conform_in(&project, &run, key).await);
    assert_eq!(code, Some(1), "{said}");
    let list = project.allowlist();
    let revocation = &list["revocations"][0];
    assert!(revocation["attestation"]["payload"].is_string(), "{list}");
    assert!(revocation["suite_digest"].is_string(), "{list}");
    let (code, said) = exit(&conform_in(&project, &kept(&gate), None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("denied (revoked)"), "{said}");
    let (code, said) = exit(&conform_in(&project, &["allowlist", "verify"], None).await);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("local (revocation): signed by ci"), "{said}");

    // The older signed file put back, the provider as it was when granted.
    project.chat_provider("local", &faithful.uri());
    std::fs::write(project.path("allowlist.json"), &granted).unwrap();
    let before = std::fs::read(&state).unwrap();
    // Without state nothing tells this file from the newest one: it permits.
    let (code, said) = exit(&conform_in(&project, &gate, None).await);
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = exit(&conform_in(&project, &kept(&gate), None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.starts_with("denied (superseded)"), "{said}");
    let verify = kept(&["allowlist", "verify"]);
    let (code, said) = exit(&conform_in(&project, &verify, None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("superseded ticket-triage × local"), "{said}");
    let export = [
        "export",
        "litellm",
        "--primary",
        "primary",
        "--fallback",
        "local",
        "--suite",
        "ticket-triage",
    ];
    let (code, said) = exit(&conform_in(&project, &kept(&export), None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("primary -/-> local: superseded"), "{said}");
    let explain = kept(&["allowlist", "explain", "local", "--suite", "ticket-triage"]);
    let (code, said) = exit(&conform_in(&project, &explain, None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("ticket-triage: superseded"), "{said}");
    // Reading an older file moves nothing back.
    assert_eq!(std::fs::read(&state).unwrap(), before);

    // Control: a newer signed grant permits, and the state moves on.
    let (code, said) = exit(&conform_in(&project, &run, key).await);
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = exit(&conform_in(&project, &kept(&gate), None).await);
    assert_eq!(code, Some(0), "{said}");
    let newest = |bytes: &[u8]| {
        let state: Value = serde_json::from_slice(bytes).unwrap();
        let at = state["pairs"][0]["newest_statement_at"]
            .as_str()
            .unwrap()
            .to_string();
        time::OffsetDateTime::parse(&at, &time::format_description::well_known::Rfc3339).unwrap()
    };
    assert!(
        newest(&std::fs::read(&state).unwrap()) > newest(&before),
        "the state did not move on"
    );

    // A state file that cannot be read is an error naming it, never an empty state.
    std::fs::write(&state, "{\"format\": \"conform.state/v1\", \"pai").unwrap();
    let (code, said) = exit(&conform_in(&project, &kept(&gate), None).await);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains(state_arg), "{said}");
}

/// Under a trust file, a run without the key refuses to replace a signed entry (exit 2,
/// the file as it was, saying how to sign); `--allow-unsigned` replaces it, and says what
/// readers will make of it. A failing run without the key still revokes, and says so.
#[tokio::test(flavor = "multi_thread")]
async fn an_unsigned_run_does_not_silently_replace_a_signed_entry() {
    let project = Project::new(&[]);
    let _faithful = project.chat_mock("local", Mode::Faithful).await;
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = trusting(&project, keys.path());
    let run = ["run", "local", "--suite", "ticket-triage", "--no-progress"];
    let (code, said) = exit(&conform_in(&project, &run, Some(&secret)).await);
    assert_eq!(code, Some(0), "{said}");
    let signed = std::fs::read(project.path("allowlist.json")).unwrap();

    let (code, said) = exit(&conform_in(&project, &run, None).await);
    assert_eq!(code, Some(2), "{said}");
    for needed in [
        "refused",
        "CONFORM_SIGNING_KEY",
        "docs/signing.md",
        "--allow-unsigned",
    ] {
        assert!(said.contains(needed), "{needed}: {said}");
    }
    assert!(!said.contains("granted 1"), "{said}");
    assert_eq!(
        std::fs::read(project.path("allowlist.json")).unwrap(),
        signed
    );
    let gate = ["gate", "--suite", "ticket-triage", "--provider", "local"];
    let (code, said) = exit(&conform_in(&project, &gate, None).await);
    assert_eq!(code, Some(0), "the signed permit was lost: {said}");

    // Told to, it replaces it, and warns that every reader will deny it.
    let mut anyway = run.to_vec();
    anyway.push("--allow-unsigned");
    let (code, said) = exit(&conform_in(&project, &anyway, None).await);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("warning: ticket-triage × local was granted unsigned"),
        "{said}"
    );
    let (code, said) = exit(&conform_in(&project, &gate, None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("denied (unsigned)"), "{said}");

    // A failing run without the key revokes a signed grant all the same, and says so.
    let (code, said) = exit(&conform_in(&project, &run, Some(&secret)).await);
    assert_eq!(code, Some(0), "{said}");
    let _fenced = project.chat_mock("local", Mode::Fenced).await;
    let (code, said) = exit(&conform_in(&project, &run, None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("was revoked unsigned, replacing a signed entry"),
        "{said}"
    );
    let (code, said) = exit(&conform_in(&project, &gate, None).await);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("denied (revoked)"), "{said}");
}

/// `conform serve` in `project`, on a SQLite ledger in it, until dropped.
struct Serve {
    child: std::process::Child,
    base: String,
}

impl Serve {
    fn start(project: &Project, providers: &str) -> Serve {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_conform"))
            .arg("serve")
            .current_dir(project.root())
            .env("CONFORM_ROOT", project.root())
            .env("CONFORM_LISTEN", "127.0.0.1:0")
            .env("CONFORM_PROVIDERS", providers)
            .env("CONFORM_ALLOWLIST", project.path("allowlist.json"))
            .env(
                "CONFORM_DATABASE_URL",
                format!("sqlite://{}", project.path("ledger.db").display()),
            )
            .env_remove("CONFORM_UNVERIFIED_ALLOWLIST")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("conform serve exited").unwrap();
            if let Some(addr) = line.strip_prefix("conform serve: listening on ") {
                break addr.to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Serve { child, base }
    }

    /// A job on `primary` (which answers 400: it fails at once), then failover to
    /// `local`: the status and the body.
    async fn failover(&self, key: &str) -> (u16, Value) {
        let http = reqwest::Client::new();
        let job = |path: String| {
            http.get(format!("{}{path}", self.base))
                .header("x-owner-id", "o")
        };
        let created: Value = http
            .post(format!("{}/v1/jobs", self.base))
            .header("x-owner-id", "o")
            .header("idempotency-key", key)
            .json(
                &serde_json::json!({"task": "ticket-triage", "provider": "primary",
                "input": {"messages": [{"role": "user", "content": key}]}}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = created["id"].as_str().unwrap().to_string();
        for _ in 0..200 {
            let now: Value = job(format!("/v1/jobs/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if now["state"] == "failed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let answer = http
            .post(format!("{}/v1/jobs/{id}/attempts", self.base))
            .header("x-owner-id", "o")
            .json(&serde_json::json!({"provider": "local"}))
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A statement about `ticket-triage × local` as a signed run in `project` makes it,
/// `hours` ago: a grant, or a revocation.
fn signed_file(
    project: &Project,
    key: &conform_allowlist::sign::SigningKey,
    hours: i64,
    revoke: bool,
) -> String {
    use conform_gate::allowlist::{Allowlist, Entry, Evidence, Local, Revocation, attest};
    let paths = conform_config::Paths::under(project.root());
    let local = Local::observe(&paths, "ticket-triage", "local").unwrap();
    let now = time::OffsetDateTime::now_utc();
    let stamp = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let made = stamp(now - time::Duration::hours(hours));
    let mut list = Allowlist::default();
    if revoke {
        let mut r = Revocation {
            suite: "ticket-triage".into(),
            provider: "local".into(),
            run_id: format!("run-{hours}h"),
            at: made,
            reasons: vec!["not_pure_json".into()],
            report: "reports/r/report.json".into(),
            suite_digest: Some(local.suite_digest),
            provider_digest: Some(local.provider_digest),
            attestation: None,
        };
        attest::sign(&mut r, key);
        list.revocations.push(r);
    } else {
        let mut e = Entry {
            suite: "ticket-triage".into(),
            provider: "local".into(),
            model: "local-model".into(),
            served_models: vec!["local-model".into()],
            system_fingerprints: Vec::new(),
            suite_digest: local.suite_digest,
            provider_digest: local.provider_digest,
            suite_identity: Some(local.suite_identity),
            provider_identity: Some(local.provider_identity),
            tokenizer: "none".into(),
            evidence: Evidence {
                run_id: format!("run-{hours}h"),
                report: "reports/r/report.json".into(),
                conform_version: "0.1.0".into(),
                first_call_at: Some(stamp(now - time::Duration::hours(hours + 1))),
                cases: 30,
                repeats: 1,
                calls: 30,
                passed: 30,
                pass_rate: 1.0,
                first_attempt_pass_rate: 1.0,
                ..Evidence::default()
            },
            generated_at: made,
            valid_until: stamp(now + time::Duration::days(3)),
            simulated: false,
            contract_only: false,
            attestation: None,
        };
        attest::sign(&mut e, key);
        list.entries.push(e);
    }
    serde_json::to_string_pretty(&list).unwrap()
}

/// `conform serve` remembers in its ledger the newest signed statement it read: an older
/// allowlist put back after it read a revocation is answered 403 `superseded`, after a
/// restart too; a newer signed grant is answered 202.
#[tokio::test(flavor = "multi_thread")]
async fn serve_remembers_a_revocation_in_its_ledger_and_refuses_the_older_file() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let project = Project::new(&[]);
    let refusing = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(400)
                .set_body_json(serde_json::json!({"error": {"message": "no"}})),
        )
        .mount(&refusing)
        .await;
    project.chat_provider("local", &refusing.uri());
    let keys = tempfile::tempdir().unwrap();
    let (key, _) = trusting(&project, keys.path());
    let providers = format!("primary={0},local={0}", refusing.uri());
    let (older, revoked, newer) = (
        signed_file(&project, &key, 3, false),
        signed_file(&project, &key, 2, true),
        signed_file(&project, &key, 1, false),
    );

    project.write("allowlist.json", &older);
    let serve = Serve::start(&project, &providers);
    let (status, body) = serve.failover("granted").await;
    assert_eq!(status, 202, "{body}");
    project.write("allowlist.json", &revoked);
    let (status, body) = serve.failover("revoked").await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (403, Some("revoked")),
        "{body}"
    );
    project.write("allowlist.json", &older);
    let (status, body) = serve.failover("put-back").await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (403, Some("superseded")),
        "{body}"
    );
    drop(serve);

    // Remembered by the ledger, not the process.
    let serve = Serve::start(&project, &providers);
    let (status, body) = serve.failover("after-restart").await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (403, Some("superseded")),
        "{body}"
    );
    // Control: a newer signed grant permits, read once or twice.
    project.write("allowlist.json", &newer);
    for key in ["newer", "newer-again"] {
        let (status, body) = serve.failover(key).await;
        assert_eq!(status, 202, "{key}: {body}");
    }
}
