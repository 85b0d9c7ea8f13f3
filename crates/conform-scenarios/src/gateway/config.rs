//! The gateway's own configuration, written with the code and the decision of `conform
//! export`: an allowlist that permits `fallback` and revokes `revoked` goes through
//! [`conform_gate::export::chains`], and the chain it gives is written by
//! [`conform_gate::export::litellm::yaml`] or [`conform_gate::export::portkey::config`]. Only what an
//! export leaves to the user is added here: where each model lives (the mock upstreams),
//! the gateway's timeout, and its key. The revoked candidate is in LiteLLM's model list
//! (a team's config lists every model it may call) but in no fallback list.

use std::path::Path;

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::gatefile;
use conform_gate::allowlist::{Allowlist, Revocation};
use conform_gate::export::{self, Chain, Names, Plan, SuiteRef, litellm, portkey};

/// The models behind the gateway, by conform provider name.
pub(crate) const PRIMARY: &str = "primary";
pub(crate) const FALLBACK: &str = "fallback";
pub(crate) const REVOKED: &str = "revoked";
pub(crate) const MODELS: [&str; 3] = [PRIMARY, FALLBACK, REVOKED];
/// A second primary whose upstream refuses connections (nothing listens on its port), for
/// failover when the request was never sent. It receives nothing, so it is not counted.
pub(crate) const UNREACHABLE: &str = "unreachable";
/// The primary's upstream again, reached on Anthropic's Messages wire: the gateway
/// translates the client's OpenAI request, and the same server answers as Anthropic does.
pub(crate) const ANTHROPIC_PRIMARY: &str = "primary-anthropic";

/// Every model the gateway's config names, in its model list's order.
pub(crate) const CONFIGURED: [&str; 5] =
    [PRIMARY, FALLBACK, REVOKED, UNREACHABLE, ANTHROPIC_PRIMARY];

/// The retries of one upstream per client request that the configs conform writes
/// allow: LiteLLM's `num_retries` from the export; Portkey's and TensorZero's configs
/// set none.
pub(crate) const RETRIES: usize = litellm::NUM_RETRIES as usize;

/// The key the client presents to the gateway (LiteLLM's master key).
pub(crate) const GATEWAY_KEY: &str = "sk-conform-gateway-scenarios";
/// The key the gateway presents to the mock upstreams.
pub(crate) const UPSTREAM_KEY: &str = "sk-conform-mock-upstream";

/// The upstream model name of a provider: what the gateway asks for, and what a genuine
/// answer's `model` names.
pub(crate) fn upstream_model(provider: &str) -> String {
    format!("{provider}-mock")
}

/// The file, in the run's working folder, that holds the allowlist behind the export:
/// the revocation's evidence, which the config's comment cites.
pub(crate) const ALLOWLIST_FILE: &str = "allowlist.json";

/// The allowlist behind the export: `fallback` permitted, `revoked` revoked, for the
/// scenarios' task. The revocation cites `evidence`, the file the run writes it to (no
/// run made it, so there is no run report to cite).
pub(crate) fn allowlist(evidence: &Path) -> Allowlist {
    let mut list = Allowlist::parse(&gatefile::standard()).unwrap_or_default();
    list.revocations.push(Revocation {
        suite: gatefile::TASK.to_string(),
        provider: REVOKED.to_string(),
        run_id: "conform-gateway-scenarios".to_string(),
        at: gatefile::in_seconds(-60),
        reasons: vec!["schema_additional_property".to_string()],
        report: evidence.display().to_string(),
        suite_digest: None,
        provider_digest: None,
        attestation: None,
    });
    list
}

/// The export's chains for the primaries, [`PRIMARY`], [`UNREACHABLE`] and
/// [`ANTHROPIC_PRIMARY`]: the decision `conform export` makes from `list`.
pub(crate) fn chains(list: &Allowlist) -> Vec<Chain> {
    let primaries = [PRIMARY, UNREACHABLE, ANTHROPIC_PRIMARY].map(str::to_string);
    chains_for(
        list,
        primaries.to_vec(),
        vec![REVOKED.into(), FALLBACK.into()],
    )
}

/// The export's chains for `primaries` over the candidate `fallbacks`, decided from `list`
/// for the scenarios' task, as [`chains`] are.
pub(crate) fn chains_for(
    list: &Allowlist,
    primaries: Vec<String>,
    fallbacks: Vec<String>,
) -> Vec<Chain> {
    let plan = Plan {
        primaries,
        fallbacks,
        suites: vec![SuiteRef {
            name: gatefile::TASK.to_string(),
            digest: Some("sha256:scenario-suite".to_string()),
        }],
        at: OffsetDateTime::now_utc(),
        project: None,
        seen: None,
    };
    export::chains(list, &plan)
}

/// Where each model's upstream listens: `(provider, base URL ending in /v1)`.
pub(crate) type Upstreams = Vec<(String, String)>;

fn base(upstreams: &Upstreams, provider: &str) -> String {
    let provider = if provider == ANTHROPIC_PRIMARY {
        PRIMARY
    } else {
        provider
    };
    upstreams
        .iter()
        .find(|(p, _)| p == provider)
        .map(|(_, u)| u.clone())
        .unwrap_or_default()
}

/// LiteLLM's `config.yaml`: the model list (every model, the revoked one included),
/// then the export's fragment as `conform export litellm` prints it.
pub(crate) fn litellm(chains: &[Chain], upstreams: &Upstreams, timeout_s: f64) -> String {
    let mut out = String::from("model_list:\n");
    for provider in CONFIGURED {
        // LiteLLM's Anthropic client adds `/v1/messages` to its base itself.
        let (model, api_base) = match provider {
            ANTHROPIC_PRIMARY => (
                format!("anthropic/{}", upstream_model(PRIMARY)),
                base(upstreams, provider)
                    .trim_end_matches("/v1")
                    .to_string(),
            ),
            _ => (
                format!("openai/{}", upstream_model(provider)),
                base(upstreams, provider),
            ),
        };
        let params = json!({
            "model": model,
            "api_base": api_base,
            "api_key": UPSTREAM_KEY,
            "timeout": timeout_s,
            "stream_timeout": timeout_s,
        });
        out.push_str(&format!(
            "  - model_name: {}\n    litellm_params: {params}\n",
            Value::String(provider.to_string())
        ));
    }
    let header = vec![format!(
        "Written by conform scenarios --gateway litellm from the export for {}",
        gatefile::TASK
    )];
    out.push_str(&litellm::yaml(
        chains,
        &Names::default(),
        litellm::Section::RouterSettings,
        &header,
    ));
    out.push_str(&format!(
        "general_settings:\n  master_key: {}\n",
        Value::String(GATEWAY_KEY.to_string())
    ));
    out
}

/// Portkey's config for one chain: the export's targets, each `@slug` resolved to the
/// mock upstream it stands for (the open-source gateway has no integrations to resolve
/// it), and the gateway's timeout.
pub(crate) fn portkey(chain: &Chain, upstreams: &Upstreams, timeout_ms: u64) -> Value {
    let primary = upstream_model(match chain.primary.as_str() {
        ANTHROPIC_PRIMARY => PRIMARY,
        other => other,
    });
    let mut config = portkey::config(chain, Some(&primary), &Names::default());
    if let Some(targets) = config.get_mut("targets").and_then(Value::as_array_mut) {
        for target in targets {
            let slug = target
                .get("provider")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim_start_matches('@')
                .to_string();
            let wire = if slug == ANTHROPIC_PRIMARY {
                "anthropic"
            } else {
                "openai"
            };
            target["provider"] = json!(wire);
            target["custom_host"] = json!(base(upstreams, &slug));
            target["api_key"] = json!(UPSTREAM_KEY);
            target["request_timeout"] = json!(timeout_ms);
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chains() -> Vec<Chain> {
        super::chains(&allowlist(Path::new("allowlist.json")))
    }

    fn upstreams() -> Upstreams {
        MODELS
            .iter()
            .chain(&[UNREACHABLE])
            .enumerate()
            .map(|(i, p)| (p.to_string(), format!("http://127.0.0.1:{}/v1", 40001 + i)))
            .collect()
    }

    #[test]
    fn the_export_lists_the_fallback_and_leaves_the_revoked_candidate_out() {
        let chains = chains();
        assert_eq!(chains.len(), 3);
        for chain in &chains {
            let listed: Vec<&str> = chain
                .fallbacks
                .iter()
                .map(|f| f.provider.as_str())
                .collect();
            assert_eq!(listed, [FALLBACK]);
            assert_eq!(chain.excluded.len(), 1);
            assert_eq!(chain.excluded[0].provider, REVOKED);
            assert_eq!(chain.excluded[0].reason, "revoked");
        }
    }

    #[test]
    fn litellm_lists_every_model_but_falls_back_only_to_the_permitted_one() {
        let yaml = litellm(&chains(), &upstreams(), 2.0);
        for p in CONFIGURED {
            assert!(yaml.contains(&format!("model_name: \"{p}\"")), "{yaml}");
        }
        assert!(
            yaml.contains(
                r#"fallbacks: [{"primary": ["fallback"]}, {"unreachable": ["fallback"]}, {"primary-anthropic": ["fallback"]}]"#
            ),
            "{yaml}"
        );
        assert!(yaml.contains("num_retries: 0"), "{yaml}");
        assert!(yaml.contains("http://127.0.0.1:40003/v1"), "{yaml}");
    }

    #[test]
    fn portkey_targets_are_the_primary_then_the_permitted_fallback() {
        let config = portkey(&chains()[0], &upstreams(), 2000);
        let hosts: Vec<&str> = config["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["custom_host"].as_str().unwrap())
            .collect();
        assert_eq!(
            hosts,
            ["http://127.0.0.1:40001/v1", "http://127.0.0.1:40002/v1"]
        );
        assert_eq!(
            config["targets"][0]["override_params"]["model"],
            "primary-mock"
        );
        assert_eq!(
            config["targets"][1]["override_params"]["model"],
            "fallback-mock"
        );
    }
}
