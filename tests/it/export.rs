//! `conform export litellm | portkey | tensorzero`: the configs have the shapes the gateways document
//! (stored examples in this folder, sources in README.md), and name only fallbacks whose
//! allowlist entries are valid now for every suite.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common;

use common::{Mode, OpenAiMock, answer_book, copy_dir};
use conform_gate::allowlist::{Allowlist, Entry, Evidence, Revocation};
use conform_gate::export::{self, Names, Plan, SuiteRef, litellm, portkey, tensorzero};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::datetime;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const NOW: OffsetDateTime = datetime!(2026-03-01 12:00 UTC);
const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OTHER_DIGEST: &str =
    "sha256:9999999999999999999999999999999999999999999999999999999999999999";

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/export")
            .join(name),
    )
    .unwrap()
}

fn entry(suite: &str, provider: &str, model: &str, until: OffsetDateTime, digest: &str) -> Entry {
    Entry {
        suite: suite.into(),
        provider: provider.into(),
        model: model.into(),
        served_models: vec![format!("{model}-2026")],
        system_fingerprints: Vec::new(),
        suite_digest: digest.into(),
        provider_digest: DIGEST.into(),
        suite_identity: None,
        provider_identity: None,
        tokenizer: "none".into(),
        evidence: Evidence {
            run_id: format!("run-{provider}-{suite}"),
            report: "reports/r/report.json".into(),
            conform_version: "0.1.0".into(),
            first_call_at: Some((until - time::Duration::days(7)).format(&Rfc3339).unwrap()),
            cases: 10,
            repeats: 3,
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
        generated_at: (until - time::Duration::days(7)).format(&Rfc3339).unwrap(),
        valid_until: until.format(&Rfc3339).unwrap(),
        simulated: false,
        contract_only: false,
        attestation: None,
    }
}

/// Fallback candidates in every state an entry can be in, for suites `a` and `b`.
fn allowlist() -> Allowlist {
    let later = NOW + time::Duration::days(3);
    let gone = NOW - time::Duration::seconds(1);
    let mut list = Allowlist::default();
    for suite in ["a", "b"] {
        // Valid for both suites: the only ones an export may name.
        list.entries
            .push(entry(suite, "mistral", "mistral-small", later, DIGEST));
        list.entries
            .push(entry(suite, "groq", "llama-3.3-70b", later, DIGEST));
    }
    // Valid for one suite, expired one second ago for the other.
    list.entries.push(entry("a", "vllm", "qwen", later, DIGEST));
    list.entries.push(entry("b", "vllm", "qwen", gone, DIGEST));
    // Valid, but proven on another version of suite b.
    list.entries.push(entry("a", "drifted", "m", later, DIGEST));
    list.entries
        .push(entry("b", "drifted", "m", later, OTHER_DIGEST));
    // Proven with a different model for each suite.
    list.entries.push(entry("a", "mixed", "m-1", later, DIGEST));
    list.entries.push(entry("b", "mixed", "m-2", later, DIGEST));
    // Only ever proven for suite a.
    list.entries.push(entry("a", "partial", "p", later, DIGEST));
    // Revoked.
    list.revocations.push(Revocation {
        suite: "a".into(),
        provider: "fenced".into(),
        run_id: "run-9".into(),
        at: "2026-02-28T00:00:00Z".into(),
        reasons: vec!["not_pure_json".into()],
        report: "reports/run-9/report.json".into(),
        suite_digest: None,
        provider_digest: None,
        attestation: None,
    });
    list.entries
        .sort_by(|x, y| (&x.suite, &x.provider).cmp(&(&y.suite, &y.provider)));
    list
}

fn plan(primaries: &[&str], fallbacks: &[&str]) -> Plan {
    Plan {
        primaries: primaries.iter().map(|s| s.to_string()).collect(),
        fallbacks: fallbacks.iter().map(|s| s.to_string()).collect(),
        suites: ["a", "b"]
            .iter()
            .map(|s| SuiteRef {
                name: s.to_string(),
                digest: Some(DIGEST.into()),
            })
            .collect(),
        at: NOW,
        project: None,
        seen: None,
    }
}

/// The `fallbacks` value of a LiteLLM config.yaml, read the way YAML reads this subset:
/// the top-level `section:` line, then its `  fallbacks:` line, whose flow value is JSON.
/// Comments (whole-line or trailing) are dropped.
fn litellm_fallbacks(yaml: &str, section: &str) -> Value {
    let mut in_section = false;
    for line in yaml.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            in_section = line.trim_end() == format!("{section}:");
            continue;
        }
        if in_section && let Some(value) = line.strip_prefix("  fallbacks: ") {
            let value = match value.find(" #") {
                Some(i) => &value[..i],
                None => value,
            };
            return serde_json::from_str(value.trim()).unwrap();
        }
    }
    panic!("no {section}.fallbacks in\n{yaml}");
}

/// LiteLLM's shape: a list of one-key maps from a model_name to a list of model_names.
fn litellm_pairs(value: &Value) -> Vec<(String, Vec<String>)> {
    value
        .as_array()
        .expect("fallbacks is a list")
        .iter()
        .map(|item| {
            let map = item.as_object().expect("each item is a map");
            assert_eq!(map.len(), 1, "each item maps one model_name: {item}");
            let (primary, list) = map.iter().next().unwrap();
            let names = list
                .as_array()
                .expect("fallbacks of a model_name are a list")
                .iter()
                .map(|n| n.as_str().expect("a model_name").to_string())
                .collect();
            (primary.clone(), names)
        })
        .collect()
}

#[test]
fn the_stored_litellm_examples_have_the_shape_we_write() {
    let router = litellm_fallbacks(&example("litellm_router_settings.yaml"), "router_settings");
    assert_eq!(
        litellm_pairs(&router),
        [("gpt-3.5-turbo".to_string(), vec!["gpt-4".to_string()])]
    );
    let settings = litellm_fallbacks(
        &example("litellm_litellm_settings.yaml"),
        "litellm_settings",
    );
    assert_eq!(
        litellm_pairs(&settings),
        [("zephyr-beta".to_string(), vec!["gpt-3.5-turbo".to_string()])]
    );
}

#[test]
fn litellm_lists_only_fallbacks_valid_for_every_suite() {
    let list = allowlist();
    let chains = export::chains(&list, &plan(&["openai", "mistral"], &[]));
    let names = Names(
        [("openai".to_string(), "gpt-4o".to_string())]
            .into_iter()
            .collect(),
    );
    for (section, key) in [
        (litellm::Section::RouterSettings, "router_settings"),
        (litellm::Section::LitellmSettings, "litellm_settings"),
    ] {
        let yaml = litellm::yaml(&chains, &names, section, &["header".into()]);
        let pairs = litellm_pairs(&litellm_fallbacks(&yaml, key));
        assert_eq!(
            pairs,
            [
                (
                    "gpt-4o".to_string(),
                    vec!["groq".to_string(), "mistral".to_string()]
                ),
                // A primary is never its own fallback.
                ("mistral".to_string(), vec!["groq".to_string()]),
            ]
        );
        // Written in the documentation's spelling: the same key line and flow style.
        let line = yaml
            .lines()
            .find(|l| l.starts_with("  fallbacks: "))
            .unwrap();
        assert_eq!(
            line,
            r#"  fallbacks: [{"gpt-4o": ["groq", "mistral"]}, {"mistral": ["groq"]}]"#
        );
        // Every non-comment line is the section, its fallbacks, or the retries the
        // gateway scenarios were run with (none).
        let body: Vec<&str> = yaml.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(body, [format!("{key}:").as_str(), line, "  num_retries: 0"]);
    }
}

#[test]
fn every_exclusion_has_its_reason() {
    let list = allowlist();
    let chains = export::chains(&list, &plan(&["openai"], &[]));
    let reasons: BTreeMap<&str, &str> = chains[0]
        .excluded
        .iter()
        .map(|x| (x.provider.as_str(), x.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("drifted", "suite_changed"),
            ("fenced", "revoked"),
            ("mixed", "model_differs"),
            ("partial", "no_entry"),
            ("vllm", "expired"),
        ]
        .into_iter()
        .collect()
    );
    let yaml = litellm::yaml(
        &chains,
        &Names::default(),
        litellm::Section::RouterSettings,
        &[],
    );
    assert!(yaml.contains("# openai -/-> vllm: expired"), "{yaml}");
    assert!(yaml.contains("# openai -> mistral (mistral-small): a run run-mistral-a"));
}

#[test]
fn preference_order_is_kept_and_unknown_candidates_are_excluded() {
    let list = allowlist();
    let chains = export::chains(
        &list,
        &plan(&["openai"], &["mistral", "nobody", "vllm", "groq"]),
    );
    let names: Vec<&str> = chains[0]
        .fallbacks
        .iter()
        .map(|f| f.provider.as_str())
        .collect();
    assert_eq!(names, ["mistral", "groq"]);
    assert_eq!(chains[0].excluded.len(), 2);
}

#[test]
fn no_suite_or_a_later_instant_lists_nothing() {
    let list = allowlist();
    let mut p = plan(&["openai"], &[]);
    p.suites.clear();
    assert!(export::chains(&list, &p)[0].fallbacks.is_empty());

    let mut p = plan(&["openai"], &[]);
    p.at = NOW + time::Duration::days(3);
    let chains = export::chains(&list, &p);
    assert!(chains[0].fallbacks.is_empty());
    let yaml = litellm::yaml(
        &chains,
        &Names::default(),
        litellm::Section::RouterSettings,
        &[],
    );
    // Failover stays off, explicitly.
    assert_eq!(
        litellm_pairs(&litellm_fallbacks(&yaml, "router_settings")),
        [("openai".to_string(), Vec::<String>::new())]
    );
    assert!(yaml.contains("# openai: no fallback is permitted"));
}

/// The structure of a JSON value: object keys with the structure of their values, the
/// structures an array's items take, and the type of a scalar.
fn shape(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut fields: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}: {}", shape(v)))
                .collect();
            fields.sort();
            format!("{{{}}}", fields.join(", "))
        }
        Value::Array(items) => {
            let mut kinds: Vec<String> = items.iter().map(shape).collect();
            kinds.sort();
            kinds.dedup();
            format!("[{}]", kinds.join(" | "))
        }
        Value::String(_) => "string".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => "null".into(),
    }
}

#[test]
fn portkey_config_has_the_documented_shape_and_only_valid_fallbacks() {
    let documented: Value = serde_json::from_str(&example("portkey_fallback.json")).unwrap();
    let list = allowlist();
    let chains = export::chains(&list, &plan(&["openai"], &[]));
    let names = Names(
        [("openai".to_string(), "openai-prod".to_string())]
            .into_iter()
            .collect(),
    );
    let config = portkey::config(&chains[0], Some("gpt-4o"), &names);
    assert_eq!(shape(&config), shape(&documented));
    assert_eq!(config["strategy"], documented["strategy"]);
    let targets: Vec<(&str, &str)> = config["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["provider"].as_str().unwrap(),
                t["override_params"]["model"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        targets,
        [
            ("@openai-prod", "gpt-4o"),
            ("@groq", "llama-3.3-70b"),
            ("@mistral", "mistral-small"),
        ]
    );
}

#[test]
fn portkey_target_without_a_known_model_has_the_documented_shape() {
    let documented: Value =
        serde_json::from_str(&example("portkey_fallback_status_codes.json")).unwrap();
    let list = allowlist();
    let chains = export::chains(&list, &plan(&["openai"], &[]));
    let config = portkey::config(&chains[0], None, &Names::default());
    // The primary with no model pinned is the documented `{"provider": "@slug"}` target.
    assert_eq!(
        shape(&config["targets"][0]),
        shape(&documented["targets"][0])
    );
    assert_eq!(config["targets"][0]["provider"], "@openai");
    assert_eq!(config["targets"].as_array().unwrap().len(), 3);
}

/// The `models` table of a TensorZero config.
fn tensorzero_models(text: &str) -> toml::Table {
    let config: toml::Table = text.parse().unwrap();
    config["models"].as_table().unwrap().clone()
}

/// Each model's `routing`, in the config's order of models (by name).
fn tensorzero_routing(models: &toml::Table) -> Vec<(String, Vec<String>)> {
    models
        .iter()
        .map(|(model, m)| {
            let routing = m["routing"].as_array().unwrap();
            let names = routing.iter().map(|p| p.as_str().unwrap().to_string());
            (model.clone(), names.collect())
        })
        .collect()
}

/// The lines of a config that are not comments.
fn uncommented(text: &str) -> String {
    let lines = text.lines().filter(|l| !l.trim_start().starts_with('#'));
    lines.collect::<Vec<_>>().join("\n")
}

#[test]
fn tensorzero_routes_only_fallbacks_valid_for_every_suite_in_the_documented_shape() {
    let documented = tensorzero_models(&example("tensorzero_routing.toml"));
    let list = allowlist();
    let chains = export::chains(&list, &plan(&["openai", "mistral"], &[]));
    let names = Names(
        [("openai".to_string(), "gpt-4o".to_string())]
            .into_iter()
            .collect(),
    );
    let primary_model = |p: &str| (p == "openai").then(|| "gpt-4o-mini".to_string());
    let timeouts = tensorzero::Timeouts::both(2000);
    let text = tensorzero::toml(
        &chains,
        &names,
        &["header".into()],
        &primary_model,
        timeouts,
    );
    let models = tensorzero_models(&text);
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        tensorzero_routing(&models),
        [
            (
                "gpt-4o".to_string(),
                strings(&["gpt-4o", "groq", "mistral"])
            ),
            // A primary is never its own fallback, and routes to itself first.
            ("mistral".to_string(), strings(&["mistral", "groq"])),
        ]
    );
    // The timeouts are written with the documented keys, each provider's, at the value
    // asked; each fallback is pinned to the model its evidence was made with.
    let keys = |t: &toml::Value| -> Vec<String> {
        let t = t["timeouts"].as_table().unwrap();
        t.iter()
            .flat_map(|(k, v)| {
                let inner = v.as_table().unwrap().keys();
                inner.map(move |i| format!("{k}.{i}"))
            })
            .collect()
    };
    let documented_keys = keys(&documented["gpt-4o"]["providers"]["openai"]);
    for (model, routing) in tensorzero_routing(&models) {
        let providers = models[&model]["providers"].as_table().unwrap();
        assert_eq!(
            providers.keys().collect::<std::collections::BTreeSet<_>>(),
            routing.iter().collect(),
            "{text}"
        );
        for provider in providers.values() {
            let ours = keys(provider);
            assert!(ours.iter().all(|k| documented_keys.contains(k)), "{ours:?}");
            assert_eq!(ours, ["non_streaming.total_ms", "streaming.ttft_ms"]);
            assert_eq!(
                provider["timeouts"]["non_streaming"]["total_ms"].as_integer(),
                Some(2000)
            );
            assert_eq!(
                provider["timeouts"]["streaming"]["ttft_ms"].as_integer(),
                Some(2000)
            );
        }
    }
    let gpt = &models["gpt-4o"]["providers"];
    assert_eq!(gpt["gpt-4o"]["model_name"].as_str(), Some("gpt-4o-mini"));
    assert_eq!(gpt["groq"]["model_name"].as_str(), Some("llama-3.3-70b"));
    assert_eq!(gpt["mistral"]["model_name"].as_str(), Some("mistral-small"));
    // Revoked, expired for one suite, proven on another suite version, with two models,
    // for one suite only: named only in a comment, never in a routing list or a table.
    let config = uncommented(&text);
    for candidate in ["fenced", "vllm", "drifted", "mixed", "partial"] {
        assert!(!config.contains(candidate), "{candidate}:\n{text}");
        assert!(text.contains(&format!("-/-> {candidate}: ")), "{text}");
    }
}

/// A provider file for an OpenAI-compatible server at `uri`.
fn compatible(model: &str, uri: &str) -> String {
    format!("kind = \"openai-compatible\"\nmodel = \"{model}\"\nbase_url = \"{uri}\"\n")
}

/// End to end on real runs against providers speaking OpenAI's wire format: a
/// conformant provider is exported, a drifting one is not, a simulated one never is.
#[test]
fn export_commands_on_a_real_allowlist() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mock = |mode: Mode| {
        runtime.block_on(async {
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .and(path("/v1/chat/completions"))
                .respond_with(OpenAiMock {
                    book: answer_book(repo),
                    mode,
                })
                .mount(&server)
                .await;
            server
        })
    };
    let (faithful, fenced) = (mock(Mode::Faithful), mock(Mode::Fenced));
    let dir = tempfile::tempdir().unwrap();
    for suite in ["invoice-extraction", "ticket-triage"] {
        copy_dir(
            &repo.join("fixtures").join(suite),
            &dir.path().join("fixtures").join(suite),
        );
    }
    let providers = dir.path().join("providers");
    std::fs::create_dir_all(&providers).unwrap();
    for name in ["openai", "vllm", "sim-steady"] {
        std::fs::copy(
            repo.join("providers").join(format!("{name}.toml")),
            providers.join(format!("{name}.toml")),
        )
        .unwrap();
    }
    std::fs::write(
        providers.join("steady.toml"),
        compatible("steady", &faithful.uri()),
    )
    .unwrap();
    std::fs::write(
        providers.join("fenced.toml"),
        compatible("fenced", &fenced.uri()),
    )
    .unwrap();
    let allowlist = dir.path().join("allowlist.json");
    let conform = || {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.env_remove("CONFORM_ALLOWLIST")
            .env("CONFORM_ROOT", dir.path())
            .arg("--allowlist")
            .arg(&allowlist);
        cmd
    };
    let steady = conform()
        .args(["run", "steady", "--no-progress", "--repeats", "1"])
        .output()
        .unwrap();
    assert_eq!(steady.status.code(), Some(0), "{steady:?}");
    let fenced = conform()
        .args(["run", "fenced", "--no-progress", "--repeats", "1"])
        .output()
        .unwrap();
    assert_eq!(fenced.status.code(), Some(1), "{fenced:?}");
    // A simulated provider's entry, as an older demo wrote it into this very file, is
    // never exported.
    let mut list = Allowlist::load(&allowlist).unwrap();
    let mut sim = list.entries[0].clone();
    sim.provider = "sim-steady".into();
    list.entries.push(sim);
    std::fs::write(&allowlist, serde_json::to_vec_pretty(&list).unwrap()).unwrap();

    let out = conform()
        .args([
            "export",
            "litellm",
            "--primary",
            "openai",
            "--name",
            "openai=gpt-4o",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        litellm_pairs(&litellm_fallbacks(&yaml, "router_settings")),
        [("gpt-4o".to_string(), vec!["steady".to_string()])]
    );
    assert!(yaml.contains("-/-> fenced: revoked"), "{yaml}");
    assert!(yaml.contains("-/-> sim-steady: simulated"), "{yaml}");

    let out = conform()
        .args(["export", "portkey", "--primary", "openai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    let documented: Value = serde_json::from_str(&example("portkey_fallback.json")).unwrap();
    assert_eq!(shape(&config), shape(&documented));
    assert_eq!(
        config["targets"],
        serde_json::json!([
            {"provider": "@openai", "override_params": {"model": "gpt-4o-mini"}},
            {"provider": "@steady", "override_params": {"model": "steady"}},
        ])
    );

    let out = conform()
        .args(["export", "tensorzero", "--primary", "openai"])
        .args(["--name", "openai=gpt-4o", "--timeout", "5s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let models = tensorzero_models(&text);
    assert_eq!(
        tensorzero_routing(&models),
        [(
            "gpt-4o".to_string(),
            vec!["gpt-4o".to_string(), "steady".to_string()]
        )]
    );
    let providers = &models["gpt-4o"]["providers"];
    assert_eq!(
        providers["gpt-4o"]["model_name"].as_str(),
        Some("gpt-4o-mini")
    );
    assert_eq!(providers["steady"]["model_name"].as_str(), Some("steady"));
    assert_eq!(
        providers["steady"]["timeouts"]["non_streaming"]["total_ms"].as_integer(),
        Some(5000)
    );
    let config = uncommented(&text);
    assert!(
        !config.contains("fenced") && !config.contains("sim-steady"),
        "{text}"
    );
    assert!(text.contains("-/-> fenced: revoked"), "{text}");

    // No fallback for the primary: the config is still printed, failover off, exit 1.
    let out = conform()
        .args([
            "export",
            "portkey",
            "--primary",
            "openai",
            "--fallback",
            "fenced",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(config["targets"].as_array().unwrap().len(), 1);

    // Two primaries make no single Portkey config.
    let out = conform()
        .args([
            "export",
            "portkey",
            "--primary",
            "openai",
            "--primary",
            "vllm",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // The team's own gateway config held to this allowlist, as `conform scenarios
    // --gateway-config` holds it: the permitted fallback passes, the revoked one is named.
    let team = dir.path().join("team.yaml");
    let mut yaml = String::from("model_list:\n");
    for name in ["openai", "steady", "fenced"] {
        yaml += &format!("  - model_name: {name}\n    litellm_params: {{model: openai/{name}}}\n");
    }
    yaml += "router_settings:\n  fallbacks: [{\"openai\": [\"steady\", \"fenced\"]}]\n";
    std::fs::write(&team, yaml).unwrap();
    runtime.block_on(
        Mock::given(method("GET"))
            .and(path("/health/liveliness"))
            .respond_with(wiremock::ResponseTemplate::new(200))
            .mount(&faithful),
    );
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let ports = format!(
        "primary={},fallback={},revoked={},unreachable={}",
        port(),
        port(),
        port(),
        port()
    );
    let out = conform()
        .args(["scenarios", "--gateway", "litellm", "--gateway-config"])
        .arg(&team)
        .args(["--target", &faithful.uri(), "--mock-ports", &ports])
        .args(["--only", "primary-answers", "--format", "json"])
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gate = &report["scenarios"][0];
    assert_eq!(gate["scenario"], "config-fallbacks-permitted", "{report:#}");
    let checks = gate["checks"].to_string();
    assert!(
        checks.contains("the allowlist permits failing over from openai to steady"),
        "{checks}"
    );
    let reason = gate["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "fails over from openai to fenced, which the allowlist does not permit: revoked"
        ),
        "{reason}"
    );

    // No allowlist: nothing is exported.
    let out = assert_cmd::Command::cargo_bin("conform")
        .unwrap()
        .env("CONFORM_ROOT", dir.path())
        .arg("--allowlist")
        .arg(dir.path().join("absent.json"))
        .args(["export", "litellm", "--primary", "openai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}
