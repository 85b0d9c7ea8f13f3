//! Signed evidence end to end: `conform keys new`, a run signing what it grants with the
//! key from `CONFORM_SIGNING_KEY`, `trust.toml`, and `allowlist verify` and `gate`
//! denying an entry edited after signing. The private key reaches no output and no file
//! but its own.

mod common;

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
    let schema: Value = serde_json::from_str(conform::allowlist::SCHEMA).unwrap();
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
    let key = conform::sign::SigningKey::generate().unwrap();
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
