//! The clouds' deployments as the gateways name them, so that an exported fallback goes
//! to the deployment, region and project its evidence was made with, not merely to a
//! model of the same name.
//!
//! - LiteLLM (docs.litellm.ai/docs/providers/azure, /bedrock, /vertex): a `model_list`
//!   entry per cloud provider, its `model_name` the name the `fallbacks` use:
//!   `azure/{deployment}` with `api_base`, `api_version` (`v1` for the v1 API) and the
//!   key's or token's variable (`os.environ/…`); `bedrock/converse/{model}` or
//!   `bedrock/invoke/{model}` with `aws_region_name`; `vertex_ai/{model}` with
//!   `vertex_project` and `vertex_location`. Credentials are never written: LiteLLM reads
//!   AWS's and Google's from the environment as conform does.
//! - Portkey (portkey.ai/docs/api-reference/inference-api/config-object): a target's
//!   provider is Portkey's slug (`azure-openai`, `bedrock`, `vertex-ai`), unless `--name`
//!   gives an integration (`@slug`), with `resource_name`, `deployment_id` and
//!   `api_version`; `aws_region`; `vertex_project_id` and `vertex_region`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use conform_config::ProviderConfig;
use conform_config::cloud::CloudApi;

/// The provider files of an export's providers that are a cloud's, by conform name.
pub type Clouds = BTreeMap<String, ProviderConfig>;

/// `litellm_params` for a cloud provider; `None` for any other.
pub fn litellm_params(config: &ProviderConfig) -> Option<Map<String, Value>> {
    let cloud = &config.cloud;
    let mut params = Map::new();
    match config.kind.as_str() {
        "azure-openai" => {
            let deployment = cloud.deployment.as_deref().unwrap_or(&config.model);
            params.insert("model".into(), json!(format!("azure/{deployment}")));
            params.insert("api_base".into(), json!(config.base_url));
            let version = cloud.api_version.as_deref().unwrap_or("v1");
            params.insert("api_version".into(), json!(version));
            match (&config.api_key_env, &cloud.token_env) {
                (Some(var), _) => {
                    params.insert("api_key".into(), json!(format!("os.environ/{var}")))
                }
                (None, Some(var)) => {
                    params.insert("azure_ad_token".into(), json!(format!("os.environ/{var}")))
                }
                (None, None) => None,
            };
        }
        "bedrock" => {
            let api = match cloud.api {
                Some(CloudApi::Invoke) => "invoke",
                _ => "converse",
            };
            params.insert(
                "model".into(),
                json!(format!("bedrock/{api}/{}", config.model)),
            );
            params.insert("aws_region_name".into(), json!(cloud.region));
        }
        "vertex" => {
            params.insert("model".into(), json!(format!("vertex_ai/{}", config.model)));
            params.insert("vertex_project".into(), json!(cloud.project));
            params.insert("vertex_location".into(), json!(cloud.region));
        }
        _ => return None,
    }
    Some(params)
}

/// The `model_list` entries of the cloud providers among `names` (conform name, gateway
/// name), as YAML lines to merge; empty when none is a cloud's.
pub fn litellm_models(clouds: &Clouds, names: &[(&str, &str)]) -> String {
    let mut entries = Vec::new();
    for (provider, name) in names {
        let Some(params) = clouds.get(*provider).and_then(litellm_params) else {
            continue;
        };
        let mut entry = format!("  - model_name: {}\n    litellm_params:\n", json!(name));
        for (key, value) in params {
            entry.push_str(&format!("      {key}: {value}\n"));
        }
        entries.push(entry);
    }
    if entries.is_empty() {
        return String::new();
    }
    format!(
        "# The cloud deployments these names route to, as their evidence was made with them;\n# merge into model_list. Credentials are read from the environment, never written here.\nmodel_list:\n{}",
        entries.concat()
    )
}

/// A Portkey target for a cloud provider: Portkey's slug (or the integration `name`
/// gives) and the fields that pin its deployment; `None` for any other.
pub fn portkey_target(config: &ProviderConfig, name: &str) -> Option<Map<String, Value>> {
    let cloud = &config.cloud;
    let mut target = Map::new();
    let slug = match config.kind.as_str() {
        "azure-openai" => "azure-openai",
        "bedrock" => "bedrock",
        "vertex" => "vertex-ai",
        _ => return None,
    };
    let provider = if name.starts_with('@') { name } else { slug };
    target.insert("provider".into(), json!(provider));
    match slug {
        "azure-openai" => {
            if let Some(resource) = azure_resource(&config.base_url) {
                target.insert("resource_name".into(), json!(resource));
            } else {
                target.insert(
                    "custom_host".into(),
                    json!(format!("{}/openai", config.base_url)),
                );
            }
            let deployment = cloud.deployment.as_deref().unwrap_or(&config.model);
            target.insert("deployment_id".into(), json!(deployment));
            target.insert(
                "api_version".into(),
                json!(cloud.api_version.as_deref().unwrap_or("v1")),
            );
        }
        "bedrock" => {
            target.insert("aws_region".into(), json!(cloud.region));
        }
        _ => {
            target.insert("vertex_project_id".into(), json!(cloud.project));
            target.insert("vertex_region".into(), json!(cloud.region));
        }
    }
    target.insert("override_params".into(), json!({"model": config.model}));
    Some(target)
}

/// `my-resource` of `https://my-resource.openai.azure.com`.
fn azure_resource(base_url: &str) -> Option<String> {
    let host = url::Url::parse(base_url).ok()?.host_str()?.to_string();
    let resource = host.strip_suffix(".openai.azure.com")?;
    (!resource.contains('.')).then(|| resource.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> ProviderConfig {
        ProviderConfig::parse(std::path::Path::new("providers/p.toml"), src).unwrap()
    }

    #[test]
    fn each_cloud_is_named_as_the_gateways_name_it() {
        let azure = parse(
            "kind = \"azure-openai\"\nbase_url = \"https://contoso.openai.azure.com\"\ndeployment = \"prod\"\nmodel = \"gpt-4o-mini\"\napi_version = \"2024-10-21\"\napi_key_env = \"AZ\"\n",
        );
        let params = Value::Object(litellm_params(&azure).unwrap());
        assert_eq!(
            params,
            json!({"model": "azure/prod", "api_base": "https://contoso.openai.azure.com",
                "api_version": "2024-10-21", "api_key": "os.environ/AZ"})
        );
        let target = Value::Object(portkey_target(&azure, "az").unwrap());
        assert_eq!(
            target,
            json!({"provider": "azure-openai", "resource_name": "contoso", "deployment_id": "prod",
                "api_version": "2024-10-21", "override_params": {"model": "gpt-4o-mini"}})
        );
        let bedrock = parse(
            "kind = \"bedrock\"\nmodel = \"anthropic.claude-3-5-haiku-20241022-v1:0\"\nregion = \"eu-west-1\"\napi = \"invoke\"\n",
        );
        assert_eq!(
            Value::Object(litellm_params(&bedrock).unwrap()),
            json!({"model": "bedrock/invoke/anthropic.claude-3-5-haiku-20241022-v1:0", "aws_region_name": "eu-west-1"})
        );
        assert_eq!(
            portkey_target(&bedrock, "@aws-prod").unwrap()["provider"],
            "@aws-prod"
        );
        let vertex = parse(
            "kind = \"vertex\"\nmodel = \"gemini-2.0-flash-001\"\nproject = \"p1\"\nregion = \"us-central1\"\n",
        );
        assert_eq!(
            Value::Object(litellm_params(&vertex).unwrap()),
            json!({"model": "vertex_ai/gemini-2.0-flash-001", "vertex_project": "p1", "vertex_location": "us-central1"})
        );
        assert_eq!(
            portkey_target(&vertex, "v").unwrap()["vertex_region"],
            "us-central1"
        );
        let openai = parse("kind = \"openai\"\nmodel = \"m\"\n");
        assert!(litellm_params(&openai).is_none() && portkey_target(&openai, "o").is_none());
    }
}
