//! Authentication as a step of its own, taken by the transport for every attempt.
//!
//! Most vendors' wire formats put their key in a header as they encode a request
//! ([`super::WireFormat::encode`] takes it). The clouds cannot: AWS signs the final
//! request (method, URL, headers, a digest of the body, the time) with SigV4, and Google
//! wants an OAuth access token exchanged from a service account's signed JWT, fetched over
//! the network and kept until shortly before it expires. So a wire format may instead
//! name an [`Authorize`] ([`super::WireFormat::credentials`]), and the transport asks it,
//! once per attempt and after the request is encoded, for the headers that authenticate
//! that attempt: a retry is signed again, at its own time.
//!
//! Each scheme is one implementation: a fixed credential in a header ([`InHeader`]:
//! Azure's `api-key`, a bearer token from `token_env` or a Bedrock API key), SigV4
//! ([`sigv4::SigV4`]) and a Google service account ([`google::ServiceAccount`]). What they
//! hold is a [`Secret`]: the headers they add are marked sensitive, and every error a call
//! ends with is scrubbed of each of their [`Authorize::secrets`].

pub mod google;
pub mod sigv4;

use std::sync::Arc;

use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use super::error::{CallError, ErrorKind};
use conform_config::secret::Secret;

/// A request as it is about to be sent: what a signature is computed over.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// Where it goes.
    pub url: &'a reqwest::Url,
    /// The headers the wire format set (not the credentials: those are what is computed).
    pub headers: &'a HeaderMap,
    /// The body, as the bytes sent.
    pub body: &'a [u8],
}

/// One authentication scheme: the headers that authenticate one attempt.
pub trait Authorize: Send + Sync {
    /// The headers to add to `request`, marked sensitive. `client` is the transport's,
    /// for a scheme that fetches a token. A failure is the call's: [`ErrorKind::Auth`]
    /// when the credentials are refused or unusable, which stops the provider and leaves
    /// its verdict inconclusive, never a failure of its model.
    fn authorize<'a>(
        &'a self,
        request: Outgoing<'a>,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<HeaderMap, CallError>>;

    /// Every secret it holds or has fetched, so that no error quotes one.
    fn secrets(&self) -> Vec<Secret>;
}

/// What an endpoint authenticates with: `None` when its wire format puts the key in the
/// request itself (or it needs none).
pub type Credentials = Option<Arc<dyn Authorize>>;

/// Why a provider's credentials cannot be used: a variable not set, a key file that does
/// not read. It names the variable or the file, never what is in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialError(pub String);

impl CredentialError {
    /// The error every call of a provider whose credentials could not be set up ends with.
    pub fn call_error(&self) -> CallError {
        CallError::new(ErrorKind::Auth, self.0.clone())
    }
}

/// Where credentials are read from: the process's environment, or a test's.
pub trait Environment {
    /// The variable's value; `None` when it is unset or empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's own environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl<F: Fn(&str) -> Option<String>> Environment for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name).filter(|v| !v.is_empty())
    }
}

/// A fixed credential in one header: `api-key: KEY`, or `Authorization: Bearer TOKEN`.
pub struct InHeader {
    name: HeaderName,
    prefix: &'static str,
    value: Secret,
}

impl InHeader {
    /// The key as the whole value of header `name`.
    pub fn key(name: &'static str, key: Secret) -> InHeader {
        InHeader {
            name: HeaderName::from_static(name),
            prefix: "",
            value: key,
        }
    }

    /// The token as `Authorization: Bearer TOKEN`.
    pub fn bearer(token: Secret) -> InHeader {
        InHeader {
            name: AUTHORIZATION,
            prefix: "Bearer ",
            value: token,
        }
    }
}

impl Authorize for InHeader {
    fn authorize<'a>(
        &'a self,
        _request: Outgoing<'a>,
        _client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<HeaderMap, CallError>> {
        let mut headers = HeaderMap::new();
        let value = format!("{}{}", self.prefix, self.value.expose());
        let added = match sensitive(&value) {
            Some(value) => {
                headers.insert(self.name.clone(), value);
                Ok(headers)
            }
            None => Err(CallError::new(
                ErrorKind::Auth,
                format!(
                    "the credential for `{}` is not a valid header value (a line break or control character in the variable?)",
                    self.name
                ),
            )),
        };
        Box::pin(std::future::ready(added))
    }

    fn secrets(&self) -> Vec<Secret> {
        vec![self.value.clone()]
    }
}

/// `value` as a header value no debug print or log shows.
pub(crate) fn sensitive(value: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `message` with every secret of `secrets` replaced by `***`.
pub(crate) fn scrub(mut error: CallError, secrets: &[Secret]) -> CallError {
    for secret in secrets {
        error = error.scrub(Some(secret));
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_header_credential_is_sensitive_and_scrubbed() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let url = reqwest::Url::parse("https://r.example/x").unwrap();
        let headers = HeaderMap::new();
        let request = Outgoing {
            url: &url,
            headers: &headers,
            body: b"{}",
        };
        let bearer = InHeader::bearer(Secret::new("tok-123".into()));
        let added = bearer.authorize(request, &client).await.unwrap();
        let value = &added[AUTHORIZATION];
        assert_eq!(value, "Bearer tok-123");
        assert!(value.is_sensitive());
        assert!(!format!("{added:?}").contains("tok-123"));
        let error = scrub(
            CallError::new(ErrorKind::Auth, "bad token tok-123"),
            &bearer.secrets(),
        );
        assert_eq!(error.message, "bad token ***");
        let broken = InHeader::key("api-key", Secret::new("a\nb".into()));
        let refused = broken.authorize(request, &client).await.unwrap_err();
        assert_eq!(refused.kind, ErrorKind::Auth);
        assert!(!refused.message.contains("a\nb"));
    }
}
