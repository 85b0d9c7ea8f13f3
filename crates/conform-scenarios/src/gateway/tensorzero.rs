//! TensorZero's `tensorzero.toml` for the scenarios, written by `conform export
//! tensorzero`'s code ([`conform_gate::export::tensorzero::toml_with`]) from the same
//! chains as the other gateways' configs: one model per primary whose `routing` is the
//! primary and the permitted fallback. Only what an export leaves to the user is added:
//! each provider's `type`, `api_base` (the mock upstreams) and key. TensorZero refuses a
//! provider that is in no routing list, so the revoked candidate is a model of its own,
//! `revoked`, configured and reachable but in no primary's routing.
//!
//! The client names a model as TensorZero's OpenAI-compatible endpoint asks:
//! `tensorzero::model_name::M` ([`MODEL_PREFIX`]).

use conform_gate::export::tensorzero::{Timeouts, quoted, toml_with};
use conform_gate::export::{Chain, Names};

use super::config::{ANTHROPIC_PRIMARY, PRIMARY, REVOKED, Upstreams, upstream_model};

/// What the client puts before a model's name.
pub(crate) const MODEL_PREFIX: &str = "tensorzero::model_name::";

/// The path of TensorZero's OpenAI-compatible chat completions.
pub(crate) const CHAT_PATH: &str = "/openai/v1/chat/completions";

/// What a GET of [`CHAT_PATH`] answers once the gateway is up: it serves no health
/// route, and a route that exists answers a wrong method with 405.
pub(crate) const HEALTH_STATUS: u16 = 405;

/// The variable the gateway reads the upstreams' key from.
pub(crate) const KEY_VARIABLE: &str = "CONFORM_UPSTREAM_KEY";

/// The provider `provider` stands for: its upstream (the Anthropic primary is the
/// primary's server on another wire) and the wire TensorZero speaks to it.
fn upstream(provider: &str) -> (&str, &'static str) {
    match provider {
        ANTHROPIC_PRIMARY => (PRIMARY, "anthropic"),
        other => (other, "openai"),
    }
}

fn lines(upstreams: &Upstreams, provider: &str) -> Vec<String> {
    let (server, wire) = upstream(provider);
    let base = (upstreams.iter())
        .find(|(p, _)| p == server)
        .map(|(_, u)| u.as_str())
        .unwrap_or_default();
    vec![
        format!("type = {}", quoted(wire)),
        format!("api_base = {}", quoted(base)),
        format!(
            "api_key_location = {}",
            quoted(&format!("env::{KEY_VARIABLE}"))
        ),
    ]
}

/// The Anthropic primary's model name: Anthropic's wire requires `max_tokens`, and
/// TensorZero fills it in only for a model whose output limit it knows (for `primary-mock`
/// it refuses before sending, and fails over). The mock answers whatever model is asked.
const ANTHROPIC_MODEL: &str = "claude-haiku-4-5";

/// The whole config: the export's models with their providers completed, then the
/// revoked candidate's own model.
pub(crate) fn config(chains: &[Chain], upstreams: &Upstreams, timeout_ms: u64) -> String {
    let header = vec![format!(
        "Written by conform scenarios --gateway tensorzero from the export for {}",
        crate::gatefile::TASK
    )];
    let primary_model = |p: &str| match p {
        ANTHROPIC_PRIMARY => Some(ANTHROPIC_MODEL.to_string()),
        other => Some(upstream_model(other)),
    };
    let timeouts = Timeouts::both(timeout_ms);
    let extra = |_: &str, provider: &str| lines(upstreams, provider);
    let mut out = toml_with(
        chains,
        &Names::default(),
        &header,
        &primary_model,
        timeouts,
        &extra,
    );
    out.push_str(&format!(
        "\n# Configured, and in no primary's routing: revoked for the task.\n\
         [models.{revoked}]\nrouting = [{revoked}]\n\n[models.{revoked}.providers.{revoked}]\n{}\n\
         model_name = {}\n",
        lines(upstreams, REVOKED).join("\n"),
        quoted(&upstream_model(REVOKED)),
        revoked = quoted(REVOKED),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::{FALLBACK, MODELS, UNREACHABLE, allowlist, chains};

    fn upstreams() -> Upstreams {
        MODELS
            .iter()
            .chain(&[UNREACHABLE])
            .enumerate()
            .map(|(i, p)| (p.to_string(), format!("http://127.0.0.1:{}/v1", 40001 + i)))
            .collect()
    }

    #[test]
    fn each_primary_routes_to_the_permitted_fallback_and_the_revoked_model_is_in_no_routing() {
        let list = allowlist(std::path::Path::new("allowlist.json"));
        let text = config(&chains(&list), &upstreams(), 2000);
        for primary in [PRIMARY, UNREACHABLE, ANTHROPIC_PRIMARY] {
            assert!(
                text.contains(&format!(
                    "[models.\"{primary}\"]\nrouting = [\"{primary}\", \"{FALLBACK}\"]\n"
                )),
                "{text}"
            );
        }
        let routings: Vec<&str> = text.lines().filter(|l| l.starts_with("routing")).collect();
        assert_eq!(routings.len(), 4, "{text}");
        let with_revoked: Vec<&&str> = routings.iter().filter(|l| l.contains(REVOKED)).collect();
        assert_eq!(with_revoked, [&"routing = [\"revoked\"]"], "{text}");
        assert!(text.contains("[models.\"revoked\".providers.\"revoked\"]\ntype = \"openai\"\napi_base = \"http://127.0.0.1:40003/v1\""), "{text}");
        assert!(
            text.contains(
                "[models.\"primary-anthropic\".providers.\"primary-anthropic\"]\ntype = \"anthropic\"\napi_base = \"http://127.0.0.1:40001/v1\""
            ),
            "{text}"
        );
        assert!(
            text.contains("timeouts = { non_streaming.total_ms = 2000, streaming.ttft_ms = 2000 }"),
            "{text}"
        );
    }
}
