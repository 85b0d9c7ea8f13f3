//! `kind` in a provider file: the wire a provider speaks, or a simulation of one.
//!
//! Everything a vendor does lives in its folder under `src/provider/` (its codec, streams,
//! errors, dialects, count endpoint, conversation rules, and the server side simulations
//! speak). What a provider file may ask of it is its [`Description`] here, because files
//! are checked below the provider layer: its own address, the structured-output modes it
//! lacks, its options section, whether it counts tokens at its own endpoint. This file
//! and the registration in `provider::wire_format` are the only places outside a vendor's
//! folder that name it (`tests/architecture.rs` holds that).

use serde::{Deserialize, Serialize};

use super::cloud::{Cloud, CloudApi, Field};
use super::provider::StructuredOutput;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// OpenAI Chat Completions.
    Openai,
    /// vLLM, llama.cpp and other servers that speak Chat Completions.
    OpenaiCompatible,
    /// Anthropic's own API.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
    /// Ollama's own API.
    Ollama,
    /// A simulated provider started in-process on loopback (see `conform_wire::sim`): not a
    /// wire of its own, but a simulation of the one its `[sim] wire` names.
    Sim,
    /// The OpenAI Responses API (`POST /v1/responses`).
    OpenaiResponses,
    /// OpenAI Chat Completions on Azure: a resource's deployment, `api-key` or Entra ID.
    AzureOpenai,
    /// AWS Bedrock Runtime: Converse, or InvokeModel with the model's own body; SigV4.
    Bedrock,
    /// Google Vertex AI: Gemini, or Claude with Anthropic's body; a service account.
    Vertex,
}

/// What a provider file may ask of one vendor's wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Description {
    /// `kind = "…"`.
    pub name: &'static str,
    /// The vendor's own address, when it has one (else `base_url` is required).
    pub default_base_url: Option<&'static str>,
    /// The structured-output modes it has not, each with what to use instead.
    pub lacks: &'static [(StructuredOutput, &'static str)],
    /// Its own section of options in a provider file (`[anthropic]`, `[gemini]`).
    pub section: Option<&'static str>,
    /// Its count endpoint, named, when `tokenizer.kind = "provider"` can count through it.
    pub count_endpoint: Option<&'static str>,
    /// Whether a simulation may speak it (`[sim] wire`).
    pub simulable: bool,
    /// The path the wire puts after `base_url` (`/v1`): a `base_url` that already ends in
    /// it, as SDKs and vLLM spell theirs (`http://host:8000/v1`), means the same server.
    pub api_paths: &'static [&'static str],
    /// The provider file the repository ships for this wire (`providers/*.toml`), which
    /// `conform init` starts a project's from; `None` where none ships.
    pub example: Option<&'static str>,
    /// A cloud's own fields and authentication (`super::cloud`); `None` for the others.
    pub cloud: Option<&'static Cloud>,
}

impl Description {
    /// `base_url` as the wire's paths extend it: without a trailing `/`, nor the API path
    /// the wire adds itself.
    /// The user-info and the query stay: they are part of the address (and of the
    /// evidence's identity), and requests carry them ([`super::provider::ProviderConfig::url`]).
    /// A fragment is never sent, so it goes.
    pub fn base_url(&self, url: &str) -> String {
        let url = url.split_once('#').map_or(url, |(url, _)| url);
        let (url, query) = match url.split_once('?') {
            Some((url, query)) => (url, Some(query)),
            None => (url, None),
        };
        let url = url.trim_end_matches('/');
        let url = (self.api_paths.iter())
            .find_map(|path| url.strip_suffix(path))
            .unwrap_or(url);
        match query.filter(|q| !q.is_empty()) {
            Some(query) => format!("{url}?{query}"),
            None => url.to_string(),
        }
    }
}

// Each wire's description: a table, one entry per kind.

const OPENAI: Description = Description {
    name: "openai",
    default_base_url: Some("https://api.openai.com"),
    lacks: &[],
    section: None,
    count_endpoint: None,
    simulable: true,
    api_paths: &["/v1"],
    example: Some(include_str!("../../../providers/openai.toml")),
    cloud: None,
};

const OPENAI_COMPATIBLE: Description = Description {
    name: "openai-compatible",
    default_base_url: None,
    lacks: &[],
    section: None,
    count_endpoint: Some("llama.cpp /apply-template + /tokenize"),
    simulable: true,
    api_paths: &["/v1"],
    example: Some(include_str!("../../../providers/vllm.toml")),
    cloud: None,
};

const OPENAI_RESPONSES: Description = Description {
    name: "openai-responses",
    default_base_url: Some("https://api.openai.com"),
    lacks: &[],
    section: None,
    count_endpoint: Some("OpenAI /v1/responses/input_tokens"),
    simulable: false,
    api_paths: &["/v1"],
    example: None,
    cloud: None,
};

const ANTHROPIC: Description = Description {
    name: "anthropic",
    default_base_url: Some("https://api.anthropic.com"),
    lacks: &[(
        StructuredOutput::JsonObject,
        "Anthropic has no JSON mode: use \"json_schema\" (output_config.format), \"tool\" (forced tool use) or \"prompt\"",
    )],
    section: Some("anthropic"),
    count_endpoint: Some("Anthropic /v1/messages/count_tokens"),
    simulable: true,
    api_paths: &["/v1"],
    example: Some(include_str!("../../../providers/anthropic.toml")),
    cloud: None,
};

const GEMINI: Description = Description {
    name: "gemini",
    default_base_url: Some("https://generativelanguage.googleapis.com"),
    lacks: &[],
    section: Some("gemini"),
    count_endpoint: Some("Gemini countTokens"),
    simulable: true,
    api_paths: &["/v1beta", "/v1"],
    example: Some(include_str!("../../../providers/gemini.toml")),
    cloud: None,
};

const OLLAMA: Description = Description {
    name: "ollama",
    default_base_url: Some("http://127.0.0.1:11434"),
    lacks: &[(
        StructuredOutput::Tool,
        "Ollama cannot force a tool call: use \"json_schema\" (format = the schema), \"json_object\" or \"prompt\"",
    )],
    section: None,
    count_endpoint: None,
    simulable: true,
    api_paths: &["/api"],
    example: Some(include_str!("../../../providers/ollama.toml")),
    cloud: None,
};

const AZURE_OPENAI: Description = Description {
    name: "azure-openai",
    // The resource's own endpoint: nothing to default to.
    default_base_url: None,
    lacks: &[],
    section: None,
    count_endpoint: None,
    simulable: false,
    // The deployment or `/v1` path is the wire's, after `/openai`.
    api_paths: &["/openai/v1", "/openai"],
    example: Some(include_str!("../../../providers/azure-openai.toml")),
    cloud: Some(&Cloud {
        fields: &[
            (Field::Deployment, true),
            (Field::ApiVersion, false),
            (Field::TokenEnv, false),
        ],
        auth: "api-key",
        environment: &[],
        default_api: None,
        sections: &[],
    }),
};

const BEDROCK: Description = Description {
    name: "bedrock",
    default_base_url: Some("https://bedrock-runtime.{region}.amazonaws.com"),
    lacks: &[(
        StructuredOutput::JsonObject,
        "Bedrock has no JSON mode: use \"json_schema\" (Converse outputConfig, or Anthropic's output_config with api = \"invoke\"), \"tool\" (a forced tool call) or \"prompt\"",
    )],
    section: None,
    count_endpoint: None,
    simulable: false,
    api_paths: &[],
    example: Some(include_str!("../../../providers/bedrock-claude.toml")),
    cloud: Some(&Cloud {
        fields: &[(Field::Region, true), (Field::Api, false)],
        // SigV4, or a Bedrock API key: AWS's own order, the key when it is set.
        auth: "aws",
        environment: &[
            &["AWS_BEARER_TOKEN_BEDROCK"],
            &["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
        ],
        default_api: Some(CloudApi::Converse),
        sections: &["anthropic"],
    }),
};

const VERTEX: Description = Description {
    name: "vertex",
    default_base_url: Some("https://{region}-aiplatform.googleapis.com"),
    lacks: &[],
    section: None,
    count_endpoint: None,
    simulable: false,
    api_paths: &["/v1"],
    example: Some(include_str!("../../../providers/vertex-gemini.toml")),
    cloud: Some(&Cloud {
        fields: &[
            (Field::Project, true),
            (Field::Region, true),
            (Field::TokenEnv, false),
        ],
        auth: "google-service-account",
        environment: &[&["GOOGLE_APPLICATION_CREDENTIALS"]],
        default_api: None,
        sections: &["gemini", "anthropic"],
    }),
};

const SIM: Description = Description {
    name: "sim",
    default_base_url: None,
    lacks: &[],
    section: None,
    count_endpoint: None,
    simulable: false,
    api_paths: &[],
    example: None,
    cloud: None,
};

impl Kind {
    /// Every kind, as a provider file names it.
    pub const ALL: [Kind; 10] = [
        Kind::Openai,
        Kind::OpenaiCompatible,
        Kind::OpenaiResponses,
        Kind::Anthropic,
        Kind::Gemini,
        Kind::Ollama,
        Kind::AzureOpenai,
        Kind::Bedrock,
        Kind::Vertex,
        Kind::Sim,
    ];

    /// The wire a simulation speaks when its `[sim] wire` names none: Chat Completions,
    /// as most fallbacks do.
    pub const SIMULATED_BY_DEFAULT: Kind = Kind::OpenaiCompatible;

    /// The wire of a server known only by its address (`conform init --fallback
    /// NAME:URL`): Chat Completions, as vLLM, llama.cpp and LiteLLM speak it.
    pub const ADDRESSED_BY_DEFAULT: Kind = Kind::OpenaiCompatible;

    /// What a provider file may ask of this wire.
    pub fn describe(self) -> &'static Description {
        match self {
            Kind::Openai => &OPENAI,
            Kind::OpenaiCompatible => &OPENAI_COMPATIBLE,
            Kind::OpenaiResponses => &OPENAI_RESPONSES,
            Kind::Anthropic => &ANTHROPIC,
            Kind::Gemini => &GEMINI,
            Kind::Ollama => &OLLAMA,
            Kind::AzureOpenai => &AZURE_OPENAI,
            Kind::Bedrock => &BEDROCK,
            Kind::Vertex => &VERTEX,
            Kind::Sim => &SIM,
        }
    }

    /// The kind as a provider file writes it.
    pub fn as_str(self) -> &'static str {
        self.describe().name
    }

    /// The wires a simulation may speak, by name, for a message.
    pub fn simulable_names() -> Vec<&'static str> {
        Kind::ALL
            .iter()
            .map(|k| k.describe())
            .filter(|d| d.simulable)
            .map(|d| d.name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_may_end_in_the_path_the_wire_adds() {
        let openai = Kind::OpenaiCompatible.describe();
        for url in [
            "http://h:8000",
            "http://h:8000/",
            "http://h:8000/v1",
            "http://h:8000/v1/",
        ] {
            assert_eq!(openai.base_url(url), "http://h:8000", "{url}");
        }
        // A gateway's own prefix stays: only the wire's path is the wire's.
        assert_eq!(
            openai.base_url("https://gw.example/openai/v1"),
            "https://gw.example/openai"
        );
        assert_eq!(openai.base_url("http://h/v10"), "http://h/v10");
        let gemini = Kind::Gemini.describe();
        assert_eq!(
            gemini.base_url("https://g.example/v1beta"),
            "https://g.example"
        );
        assert_eq!(
            Kind::Ollama.describe().base_url("http://h:11434/api"),
            "http://h:11434"
        );
    }

    #[test]
    fn every_kind_is_named_as_serde_names_it() {
        for kind in Kind::ALL {
            let named: Kind = serde_json::from_value(serde_json::json!(kind.as_str())).unwrap();
            assert_eq!(named, kind);
        }
    }
}
