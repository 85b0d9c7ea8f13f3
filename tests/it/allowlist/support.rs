//! Builders shared by the allowlist tests.

use std::collections::BTreeMap;
use std::path::Path;

use conform_check::verdict::CheckCount;
use conform_gate::allowlist::{Entry, Evidence, Revocation};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub const SUITE_DIGEST: &str =
    "sha256:1111111111111111111111111111111111111111111111111111111111111111";
pub const PROVIDER_DIGEST: &str =
    "sha256:2222222222222222222222222222222222222222222222222222222222222222";

pub fn stamp(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

/// A conformant entry, as a run would make it, valid until `until`.
pub fn entry(suite: &str, provider: &str, until: OffsetDateTime) -> Entry {
    let mut checks = BTreeMap::new();
    for name in ["transport", "json", "schema", "agree"] {
        checks.insert(
            name.to_string(),
            CheckCount {
                passed: 75,
                failed: 0,
            },
        );
    }
    Entry {
        suite: suite.into(),
        provider: provider.into(),
        model: format!("{provider}-model"),
        served_models: vec![format!("{provider}-model-2026-01-01")],
        system_fingerprints: vec!["fp_1".into()],
        suite_digest: SUITE_DIGEST.into(),
        provider_digest: PROVIDER_DIGEST.into(),
        suite_identity: None,
        provider_identity: None,
        tokenizer: "tiktoken:o200k_base".into(),
        evidence: Evidence {
            run_id: "20260101T000000Z-abcd".into(),
            report: "reports/20260101T000000Z-abcd/report.json".into(),
            conform_version: "0.1.0".into(),
            first_call_at: Some(stamp(until - time::Duration::days(7))),
            cases: 25,
            repeats: 3,
            calls: 75,
            passed: 75,
            pass_rate: 1.0,
            first_attempt_pass_rate: 0.96,
            checks,
            rules_out: None,
            latency: None,
            tool_calls: None,
            differential: None,
        },
        generated_at: stamp(until - time::Duration::days(7)),
        valid_until: stamp(until),
        simulated: false,
        contract_only: false,
        attestation: None,
    }
}

pub fn revocation(suite: &str, provider: &str, run_id: &str) -> Revocation {
    Revocation {
        suite: suite.into(),
        provider: provider.into(),
        run_id: run_id.into(),
        at: "2026-01-01T00:00:00Z".into(),
        reasons: vec!["schema_additional_property".into(), "not_pure_json".into()],
        report: format!("reports/{run_id}/report.json"),
        suite_digest: None,
        provider_digest: None,
        attestation: None,
    }
}

/// The `conform` binary, with the repository as its root.
pub fn conform() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
    cmd.env_remove("CONFORM_ALLOWLIST")
        .env("CONFORM_ROOT", env!("CARGO_MANIFEST_DIR"));
    cmd
}

/// A project of its own: the shipped invoice and ticket suites, and provider files for
/// `mistral`, `fenced` and `openai` (the names the CLI tests ask about).
pub fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for suite in ["invoice-extraction", "ticket-triage"] {
        copy_dir(
            &repo.join("fixtures").join(suite),
            &dir.path().join("fixtures").join(suite),
        );
    }
    std::fs::create_dir_all(dir.path().join("providers")).unwrap();
    for provider in ["mistral", "fenced", "openai"] {
        std::fs::write(
            dir.path().join("providers").join(format!("{provider}.toml")),
            format!("kind = \"openai-compatible\"\nmodel = \"{provider}-model\"\nbase_url = \"http://127.0.0.1:9\"\n"),
        )
        .unwrap();
    }
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if item.path().is_dir() {
            copy_dir(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), target).unwrap();
        }
    }
}

/// [`entry`] with the digests the project at `root` has now, as a run there would write it.
pub fn current_entry(root: &Path, suite: &str, provider: &str, until: OffsetDateTime) -> Entry {
    let local = conform_gate::allowlist::Local::observe(
        &conform_config::Paths::under(root),
        suite,
        provider,
    )
    .unwrap();
    Entry {
        suite_digest: local.suite_digest,
        provider_digest: local.provider_digest,
        suite_identity: Some(local.suite_identity),
        provider_identity: Some(local.provider_identity),
        ..entry(suite, provider, until)
    }
}

/// The `conform` binary, with `root` as its project.
pub fn conform_at(root: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
    cmd.env_remove("CONFORM_ALLOWLIST")
        .env("CONFORM_ROOT", root);
    cmd
}

/// The published schema, compiled.
pub fn schema() -> jsonschema::Validator {
    let schema: serde_json::Value = serde_json::from_str(conform_gate::allowlist::SCHEMA).unwrap();
    jsonschema::draft202012::new(&schema).unwrap()
}

pub fn validate(path: &Path) -> Result<(), Vec<String>> {
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let errors: Vec<String> = schema()
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
