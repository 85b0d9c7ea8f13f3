//! LiteLLM: the `fallbacks` setting of the proxy's `config.yaml`, in the shape LiteLLM's
//! documentation gives it (docs.litellm.ai/docs/proxy/reliability):
//!
//! ```yaml
//! router_settings:
//!   fallbacks: [{"gpt-3.5-turbo": ["gpt-4"]}]
//! ```
//!
//! Keys and values are LiteLLM `model_name`s (model groups of `model_list`).

use serde_json::{Map, Value};

use super::{Chain, Names};

/// Where the setting goes: LiteLLM reads `fallbacks` from either section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Section {
    /// `router_settings`, where LiteLLM's docs put it.
    #[default]
    RouterSettings,
    /// `litellm_settings`, for a config that already keeps its settings there.
    LitellmSettings,
}

impl Section {
    /// The section's key in the config.
    pub fn key(self) -> &'static str {
        match self {
            Section::RouterSettings => "router_settings",
            Section::LitellmSettings => "litellm_settings",
        }
    }
}

/// The value of `fallbacks`: `[{"<primary>": ["<fallback>", …]}, …]`. A primary with no
/// permitted fallback maps to an empty list: failover from it stays off.
pub fn fallbacks(chains: &[Chain], names: &Names) -> Value {
    Value::Array(
        chains
            .iter()
            .map(|chain| {
                let mut one = Map::new();
                one.insert(
                    names.of(&chain.primary).to_string(),
                    chain
                        .fallbacks
                        .iter()
                        .map(|f| Value::String(names.of(&f.provider).to_string()))
                        .collect(),
                );
                Value::Object(one)
            })
            .collect(),
    )
}

/// The YAML fragment to merge into `config.yaml`: comments naming the evidence and the
/// exclusions, then the section with its `fallbacks` line. The value is written in
/// YAML's flow style, which is also JSON, as LiteLLM's own examples write it.
pub fn yaml(chains: &[Chain], names: &Names, section: Section, header: &[String]) -> String {
    let mut out = String::new();
    for line in comments(chains, names, header) {
        out.push_str(&format!("# {line}\n"));
    }
    out.push_str(&format!(
        "{}:\n  fallbacks: {}\n  num_retries: {NUM_RETRIES}\n",
        section.key(),
        flow(&fallbacks(chains, names))
    ));
    out
}

/// The comment lines an export starts with: `header`, then the evidence behind every
/// listed fallback and the reason for every excluded candidate, each on one line.
pub fn comments(chains: &[Chain], names: &Names, header: &[String]) -> Vec<String> {
    let mut comments: Vec<String> = header.to_vec();
    for chain in chains {
        let primary = names.of(&chain.primary);
        if chain.fallbacks.is_empty() {
            comments.push(format!("{primary}: no fallback is permitted"));
        }
        for f in &chain.fallbacks {
            let runs: Vec<String> = f
                .entries
                .iter()
                .map(|e| {
                    format!(
                        "{} run {} until {}",
                        e.suite, e.evidence.run_id, e.valid_until
                    )
                })
                .collect();
            comments.push(format!(
                "{primary} -> {} ({}): {}",
                names.of(&f.provider),
                f.model,
                runs.join("; ")
            ));
        }
        for x in &chain.excluded {
            comments.push(format!(
                "{primary} -/-> {}: {} ({})",
                names.of(&x.provider),
                x.reason,
                x.detail
            ));
        }
    }
    // A name or detail with a line break must not end the comment.
    comments
        .into_iter()
        .map(|line| line.replace(['\n', '\r'], " "))
        .collect()
}

/// The retries written with the fallbacks. With `fallbacks` alone, LiteLLM 1.108.7 sends
/// the primary three requests before it fails over (`conform scenarios --gateway litellm`
/// measured it): one intent, three executions. Zero is the setting the gateway scenarios
/// were run with; a retry belongs to whoever holds the job, not to the gateway.
pub const NUM_RETRIES: u32 = 0;

/// JSON with a space after `:` and `,`, as LiteLLM's examples are spelled.
fn flow(value: &Value) -> String {
    match value {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(flow).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}
