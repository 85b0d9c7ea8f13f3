//! Portkey: a gateway config in fallback mode, in the shape Portkey's documentation
//! gives it (portkey.ai/docs/product/ai-gateway/fallbacks):
//!
//! ```json
//! {"strategy": {"mode": "fallback"},
//!  "targets": [{"provider": "@openai-prod", "override_params": {"model": "gpt-4o"}}, …]}
//! ```
//!
//! The first target is the primary; the rest are the permitted fallbacks in order, each
//! pinned to the model its evidence was made with.

use serde_json::{Value, json};

use super::{Chain, Names};

/// The config for one chain. `primary_model` pins the primary's model when known.
pub fn config(chain: &Chain, primary_model: Option<&str>, names: &Names) -> Value {
    let mut targets = vec![target(names.of(&chain.primary), primary_model)];
    targets.extend(
        chain
            .fallbacks
            .iter()
            .map(|f| target(names.of(&f.provider), Some(&f.model))),
    );
    json!({
        "strategy": {"mode": "fallback"},
        "targets": targets,
    })
}

/// Portkey names an integration by its slug, written with a leading `@`.
fn target(name: &str, model: Option<&str>) -> Value {
    let provider = if name.starts_with('@') {
        name.to_string()
    } else {
        format!("@{name}")
    };
    match model {
        Some(model) => json!({"provider": provider, "override_params": {"model": model}}),
        None => json!({ "provider": provider }),
    }
}
