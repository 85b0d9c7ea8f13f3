//! TensorZero: a model's `routing` in the gateway's `tensorzero.toml`, in the shape
//! TensorZero's configuration reference gives it
//! (tensorzero.com/docs/gateway/configuration-reference):
//!
//! ```toml
//! [models.gpt-4o]
//! routing = ["openai", "azure"]
//!
//! [models.gpt-4o.providers.openai]
//! timeouts = { non_streaming.total_ms = 15000, streaming.ttft_ms = 3000 }
//! ```
//!
//! One model per primary, named as the primary; its routing is the primary, then the
//! permitted fallbacks in order, each a provider of that model. TensorZero refuses a
//! provider that is in no routing list, so an excluded candidate is left out altogether.

use serde_json::Value;

use super::{Chain, Names};

/// Each provider's timeouts, as TensorZero spells them: the time a whole non-streamed
/// answer, and the first token of a stream, may take before it moves to the next provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long a whole non-streamed answer may take, in milliseconds.
    pub non_streaming_total_ms: u64,
    /// How long the first token of a stream may take, in milliseconds.
    pub streaming_ttft_ms: u64,
}

impl Timeouts {
    /// Both timeouts at `ms`.
    pub fn both(ms: u64) -> Timeouts {
        Timeouts {
            non_streaming_total_ms: ms,
            streaming_ttft_ms: ms,
        }
    }

    fn inline(self) -> String {
        format!(
            "{{ non_streaming.total_ms = {}, streaming.ttft_ms = {} }}",
            self.non_streaming_total_ms, self.streaming_ttft_ms
        )
    }
}

/// What a provider table holds besides its timeouts: `(model, provider)` to its other
/// lines (`type`, `api_base`, …), for a config that is complete rather than merged.
pub type Extra<'a> = &'a dyn Fn(&str, &str) -> Vec<String>;

/// The TOML to merge into `tensorzero.toml`: comments naming the evidence and the
/// exclusions, then one `[models.M]` per chain. `primary_model` pins the primary's
/// `model_name` when known; each fallback is pinned to the model its evidence was made
/// with.
pub fn toml(
    chains: &[Chain],
    names: &Names,
    header: &[String],
    primary_model: &dyn Fn(&str) -> Option<String>,
    timeouts: Timeouts,
) -> String {
    toml_with(chains, names, header, primary_model, timeouts, &|_, _| {
        Vec::new()
    })
}

/// As [`toml`], each provider table with the lines `extra` gives it.
pub fn toml_with(
    chains: &[Chain],
    names: &Names,
    header: &[String],
    primary_model: &dyn Fn(&str) -> Option<String>,
    timeouts: Timeouts,
    extra: Extra<'_>,
) -> String {
    let mut out = String::new();
    for line in super::litellm::comments(chains, names, header) {
        out.push_str(&format!("# {line}\n"));
    }
    for chain in chains {
        let model = names.of(&chain.primary);
        let mut routed = vec![(chain.primary.as_str(), primary_model(&chain.primary))];
        routed
            .extend((chain.fallbacks.iter()).map(|f| (f.provider.as_str(), Some(f.model.clone()))));
        let routing: Vec<String> = (routed.iter()).map(|(p, _)| quoted(names.of(p))).collect();
        out.push_str(&format!(
            "\n[models.{}]\nrouting = [{}]\n",
            quoted(model),
            routing.join(", ")
        ));
        for (provider, pinned) in routed {
            let name = names.of(provider);
            out.push_str(&format!(
                "\n[models.{}.providers.{}]\n",
                quoted(model),
                quoted(name)
            ));
            for line in extra(model, name) {
                out.push_str(&line);
                out.push('\n');
            }
            if let Some(pinned) = pinned {
                out.push_str(&format!("model_name = {}\n", quoted(&pinned)));
            }
            out.push_str(&format!("timeouts = {}\n", timeouts.inline()));
        }
    }
    out
}

/// A TOML basic string: JSON's escapes are TOML's (`\"`, `\\`, `\n`, `\uXXXX` …).
pub fn quoted(text: &str) -> String {
    // JSON leaves DEL as it is; TOML wants it escaped.
    Value::String(text.to_string())
        .to_string()
        .replace('\u{7f}', "\\u007F")
}

impl super::request::Export {
    /// The `tensorzero.toml` fragment of every chain, each primary's `model_name` pinned
    /// as its provider file names it (when the file reads), as the Portkey config pins it.
    pub fn tensorzero(
        &self,
        paths: &conform_config::Paths,
        timeout: std::time::Duration,
    ) -> String {
        let primary_model = |provider: &str| {
            let file = paths.providers.join(format!("{provider}.toml"));
            conform_config::ProviderConfig::load(&file)
                .ok()
                .map(|c| c.model)
        };
        toml(
            &self.chains,
            &self.names,
            &self.header,
            &primary_model,
            Timeouts::both(timeout.as_millis() as u64),
        )
    }
}
