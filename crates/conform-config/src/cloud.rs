//! What a cloud's provider file adds to the common fields: where the model is served
//! (`deployment`, `api_version`, `region`, `api`, `project`) and where the credentials
//! are found (`token_env`).
//!
//! A cloud kind says which of these it takes in its [`Cloud`], beside its `Description`;
//! this file checks a file against it, fills in `api`'s default, resolves the vendor's
//! address from its `region`, and names the authentication scheme the evidence records.
//! Each field that is set shapes what is sent (a deployment, a region, an API version is
//! another endpoint), so all of them, and the scheme, are part of the provider's identity;
//! none of them is a secret.

use serde::{Deserialize, Serialize};

use super::kind::Description;

/// Which Bedrock Runtime API carries the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloudApi {
    /// `Converse` and `ConverseStream`: one request shape for every model.
    Converse,
    /// `InvokeModel` and `InvokeModelWithResponseStream`: the model's own body (Anthropic
    /// Messages for Claude).
    Invoke,
}

/// A cloud field as a provider file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Azure's `deployment`: the name the model is deployed under.
    Deployment,
    /// Azure's `api_version`, sent as the `api-version` query parameter.
    ApiVersion,
    /// The variable that holds a bearer token, where the cloud takes one instead of a key.
    TokenEnv,
    /// The cloud region the endpoint is in (Bedrock, Vertex).
    Region,
    /// Bedrock's `api`: which request shape to speak.
    Api,
    /// Vertex's Google Cloud `project`.
    Project,
}

impl Field {
    /// Every cloud field, in the order a provider file's problems name them.
    pub const ALL: [Field; 6] = [
        Field::Deployment,
        Field::ApiVersion,
        Field::TokenEnv,
        Field::Region,
        Field::Api,
        Field::Project,
    ];

    /// The field's name in a provider file.
    pub fn name(self) -> &'static str {
        match self {
            Field::Deployment => "deployment",
            Field::ApiVersion => "api_version",
            Field::TokenEnv => "token_env",
            Field::Region => "region",
            Field::Api => "api",
            Field::Project => "project",
        }
    }

    /// A value to show in a message asking for the field.
    fn example(self) -> &'static str {
        match self {
            Field::Deployment => "\"gpt-4o-mini-prod\"",
            Field::ApiVersion => "\"2024-10-21\"",
            Field::TokenEnv => "\"AZURE_OPENAI_TOKEN\"",
            Field::Region => "\"us-east-1\"",
            Field::Api => "\"converse\"",
            Field::Project => "\"my-project\"",
        }
    }
}

/// What a cloud kind takes beyond the common fields, and how it authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cloud {
    /// Each field it takes, and whether a file must give it.
    pub fields: &'static [(Field, bool)],
    /// The authentication scheme when `token_env` is not set, as the evidence records it.
    pub auth: &'static str,
    /// Where the credentials are when the file names no variable: any one group of
    /// environment variables, each set. Empty: `api_key_env` or `token_env` names it.
    pub environment: &'static [&'static [&'static str]],
    /// `api` when the file gives none.
    pub default_api: Option<CloudApi>,
    /// The vendor sections (`[anthropic]`, `[gemini]`) it takes besides its own, for the
    /// model families it serves.
    pub sections: &'static [&'static str],
}

/// The scheme recorded for a provider whose file names `token_env`: a ready token, sent
/// as `Authorization: Bearer`.
pub const BEARER: &str = "bearer";

/// The cloud fields of a provider file, as given (`api` with its default filled in).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudSettings {
    /// See [`Field::Deployment`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// See [`Field::ApiVersion`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// See [`Field::TokenEnv`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// See [`Field::Region`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// See [`Field::Api`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<CloudApi>,
    /// See [`Field::Project`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

impl CloudSettings {
    fn given(&self, field: Field) -> Option<&str> {
        match field {
            Field::Deployment => self.deployment.as_deref(),
            Field::ApiVersion => self.api_version.as_deref(),
            Field::TokenEnv => self.token_env.as_deref(),
            Field::Region => self.region.as_deref(),
            Field::Api => self.api.map(|api| match api {
                CloudApi::Converse => "converse",
                CloudApi::Invoke => "invoke",
            }),
            Field::Project => self.project.as_deref(),
        }
    }

    /// The settings with the kind's defaults filled in.
    pub(super) fn completed(mut self, described: &Description) -> CloudSettings {
        if let Some(cloud) = described.cloud {
            self.api = self.api.or(cloud.default_api);
        }
        self
    }

    /// The authentication scheme a provider of `described` uses with these settings;
    /// `None` for a kind that is not a cloud's.
    pub fn auth(&self, described: &Description) -> Option<&'static str> {
        let cloud = described.cloud?;
        Some(match self.token_env {
            Some(_) => BEARER,
            None => cloud.auth,
        })
    }

    /// `template` (a kind's default address) with `{region}` filled in; `None` while a
    /// placeholder has no value. Google's `global` location has no regional host, so
    /// `{region}-` goes with it.
    pub fn address(&self, template: &str) -> Option<String> {
        let mut url = template.to_string();
        if let Some(region) = &self.region {
            if region == "global" {
                url = url.replace("{region}-", "");
            }
            url = url.replace("{region}", region);
        }
        (!url.contains('{')).then_some(url)
    }

    /// The environment variable that must hold a credential and does not, or, for a kind
    /// whose credentials are a set of variables, every group it looked for: `Ok` when
    /// the credentials are there. `var` reads the environment.
    pub fn missing_credentials(
        &self,
        described: &Description,
        var: impl Fn(&str) -> bool,
    ) -> Result<(), Vec<String>> {
        let Some(cloud) = described.cloud else {
            return Ok(());
        };
        if let Some(token) = &self.token_env {
            return if var(token) {
                Ok(())
            } else {
                Err(vec![token.clone()])
            };
        }
        if cloud.environment.is_empty()
            || (cloud.environment.iter()).any(|group| group.iter().all(|v| var(v)))
        {
            return Ok(());
        }
        Err(cloud.environment.iter().map(|g| g.join(" and ")).collect())
    }
}

/// One problem with a file's cloud fields: the field, the text to place it near, what to do.
pub(super) type Problem = (String, String, String);

/// Every problem with the cloud fields of a file of kind `described`: a field the kind
/// does not take, one it needs and lacks, a value that cannot be what it names, and the
/// credentials named twice or not at all.
pub(super) fn problems(
    described: &Description,
    settings: &CloudSettings,
    api_key_env: Option<&str>,
) -> Vec<Problem> {
    let mut found = Vec::new();
    let kind = described.name;
    let taken = described.cloud.map_or(&[][..], |c| c.fields);
    for field in Field::ALL {
        let rule = taken.iter().find(|(f, _)| *f == field);
        match (settings.given(field), rule) {
            (Some(_), None) => found.push(problem(
                field.name(),
                field.name(),
                format!("kind `{kind}` takes no `{}`", field.name()),
            )),
            (None, Some((_, true))) => found.push(problem(
                field.name(),
                "kind",
                format!(
                    "kind `{kind}` needs `{}`: add e.g. {} = {}",
                    field.name(),
                    field.name(),
                    field.example()
                ),
            )),
            (Some(value), Some(_)) => {
                if let Some(message) = malformed(field, value) {
                    found.push(problem(field.name(), field.name(), message));
                }
            }
            (None, _) => {}
        }
    }
    if let Some(cloud) = described.cloud {
        found.extend(credential_problems(kind, cloud, settings, api_key_env));
    }
    found
}

fn problem(field: &str, near: &str, message: String) -> Problem {
    (field.to_string(), near.to_string(), message)
}

/// Why `value` cannot be what `field` names; each of them goes into an address or a
/// header, so only the characters the vendors' own names use are taken.
fn malformed(field: Field, value: &str) -> Option<String> {
    let all = |ok: &dyn Fn(char) -> bool| !value.is_empty() && value.chars().all(ok);
    let fits = match field {
        Field::Region => all(&|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
        Field::Project => all(&|c| c.is_ascii_alphanumeric() || "-.:_".contains(c)),
        Field::ApiVersion => all(&|c| c.is_ascii_alphanumeric() || c == '-'),
        Field::Deployment => all(&|c| c.is_ascii_alphanumeric() || "-._".contains(c)),
        Field::TokenEnv => {
            all(&|c| c.is_ascii_alphanumeric() || c == '_')
                && !value.starts_with(|c: char| c.is_ascii_digit())
        }
        Field::Api => true,
    };
    (!fits).then(|| match field {
        Field::TokenEnv => "must name an environment variable (such as AZURE_OPENAI_TOKEN), never hold the token itself".to_string(),
        _ => format!("`{value}` is not a {} this vendor names", field.name().replace('_', " ")),
    })
}

/// The credentials a file names: for a kind whose file names them, exactly one of
/// `api_key_env` and `token_env`; for one whose credentials come from a cloud's own
/// environment variables, no `api_key_env`.
fn credential_problems(
    kind: &str,
    cloud: &Cloud,
    settings: &CloudSettings,
    api_key_env: Option<&str>,
) -> Vec<Problem> {
    let token_env = settings.token_env.as_deref();
    if !cloud.environment.is_empty() {
        return match api_key_env {
            Some(_) => vec![problem(
                "api_key_env",
                "api_key_env",
                format!(
                    "kind `{kind}` reads its credentials from {}{}: leave api_key_env out",
                    names(cloud.environment),
                    if taken(cloud, Field::TokenEnv) {
                        ", or from the variable `token_env` names"
                    } else {
                        ""
                    }
                ),
            )],
            None => Vec::new(),
        };
    }
    match (api_key_env, token_env) {
        (Some(_), Some(_)) => vec![problem(
            "token_env",
            "token_env",
            format!(
                "kind `{kind}` takes api_key_env (a key) or token_env (a bearer token), not both"
            ),
        )],
        (None, None) => vec![problem(
            "api_key_env",
            "kind",
            format!(
                "kind `{kind}` needs api_key_env (the variable holding the key, sent as `api-key`) or token_env (one holding a Microsoft Entra ID token, sent as a bearer)"
            ),
        )],
        _ => Vec::new(),
    }
}

fn taken(cloud: &Cloud, field: Field) -> bool {
    cloud.fields.iter().any(|(f, _)| *f == field)
}

/// `A, or B and C`: the groups of variables, for a message.
pub fn names(groups: &[&[&str]]) -> String {
    let groups: Vec<String> = groups.iter().map(|g| g.join(" and ")).collect();
    groups.join(", or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_fills_the_address_and_global_has_no_regional_host() {
        let at = |region: &str| CloudSettings {
            region: Some(region.into()),
            ..CloudSettings::default()
        };
        let vertex = "https://{region}-aiplatform.googleapis.com";
        assert_eq!(
            at("us-central1").address(vertex).as_deref(),
            Some("https://us-central1-aiplatform.googleapis.com")
        );
        assert_eq!(
            at("global").address(vertex).as_deref(),
            Some("https://aiplatform.googleapis.com")
        );
        assert_eq!(CloudSettings::default().address(vertex), None);
    }

    #[test]
    fn names_only_what_the_vendors_names_use() {
        assert!(malformed(Field::Region, "us-east-1").is_none());
        assert!(malformed(Field::Region, "us-east-1.evil.example/").is_some());
        assert!(malformed(Field::Deployment, "gpt-4o/../x").is_some());
        assert!(malformed(Field::TokenEnv, "eyJhbGciOi.x.y").is_some());
        assert!(malformed(Field::TokenEnv, "AZURE_OPENAI_TOKEN").is_none());
        assert!(malformed(Field::Project, "my-project-123").is_none());
        assert!(malformed(Field::Project, "").is_some());
    }
}
