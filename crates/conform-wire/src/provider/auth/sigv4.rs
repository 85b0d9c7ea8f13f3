//! AWS Signature Version 4 over the request as it is sent, with AWS's own `aws-sigv4`.
//!
//! Every attempt is signed at its own time: AWS refuses a signature more than five
//! minutes off its clock, and a retry after a long `Retry-After` would be. The settings
//! are the SDK's for Bedrock Runtime: the path's segments percent-encoded again in the
//! canonical request (a model id's `:` is `%3A` in the URL, `%253A` there), no
//! `x-amz-content-sha256` header, and a session token, where there is one, sent as
//! `X-Amz-Security-Token` and signed.

use std::time::SystemTime;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName};

use super::{Authorize, Outgoing, sensitive};
use crate::provider::error::{CallError, ErrorKind};
use conform_config::secret::Secret;

/// Long-term or temporary AWS credentials, for one region and service.
pub struct SigV4 {
    access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
    region: String,
    service: String,
}

impl SigV4 {
    /// Credentials that sign for `service` in `region`.
    pub fn new(
        access_key_id: String,
        secret_access_key: Secret,
        session_token: Option<Secret>,
        region: &str,
        service: &str,
    ) -> SigV4 {
        SigV4 {
            access_key_id,
            secret_access_key,
            session_token,
            region: region.to_string(),
            service: service.to_string(),
        }
    }

    /// The headers that sign `request`, sent with `method`, at `at`: `X-Amz-Date`,
    /// `Authorization`, and `X-Amz-Security-Token` with a session token.
    pub fn sign(
        &self,
        method: &str,
        request: Outgoing<'_>,
        at: SystemTime,
    ) -> Result<HeaderMap, CallError> {
        let unsignable = |what: String| {
            CallError::new(ErrorKind::Auth, format!("cannot sign the request: {what}"))
        };
        let credentials = aws_credential_types::Credentials::new(
            self.access_key_id.clone(),
            self.secret_access_key.expose().to_string(),
            self.session_token.as_ref().map(|t| t.expose().to_string()),
            None,
            "conform",
        );
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(at)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| unsignable(e.to_string()))?
            .into();
        let headers = (request.headers.iter())
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new(
            method,
            request.url.as_str(),
            headers,
            SignableBody::Bytes(request.body),
        )
        .map_err(|e| unsignable(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| unsignable(e.to_string()))?
            .into_parts();
        let mut signed = HeaderMap::new();
        for (name, value) in instructions.headers() {
            let (Ok(name), Some(value)) =
                (HeaderName::from_bytes(name.as_bytes()), sensitive(value))
            else {
                return Err(unsignable(format!(
                    "the signature's `{name}` is not a header"
                )));
            };
            signed.insert(name, value);
        }
        Ok(signed)
    }
}

impl Authorize for SigV4 {
    fn authorize<'a>(
        &'a self,
        request: Outgoing<'a>,
        _client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<HeaderMap, CallError>> {
        Box::pin(std::future::ready(self.sign(
            "POST",
            request,
            SystemTime::now(),
        )))
    }

    fn secrets(&self) -> Vec<Secret> {
        let mut secrets = vec![self.secret_access_key.clone()];
        secrets.extend(self.session_token.clone());
        secrets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// One case of AWS's SigV4 test suite (`tests/wire/sigv4_*`, see its README): its
    /// context, its request and the `Authorization` header it must be signed with.
    fn vector(context: &str, request: &str, signed: &str) -> (SigV4, String, String, String) {
        let context: Value = serde_json::from_str(context).unwrap();
        let credentials = &context["credentials"];
        let text = |v: &Value| v.as_str().unwrap().to_string();
        let signer = SigV4::new(
            text(&credentials["access_key_id"]),
            Secret::new(text(&credentials["secret_access_key"])),
            credentials.get("token").map(|t| Secret::new(text(t))),
            context["region"].as_str().unwrap(),
            context["service"].as_str().unwrap(),
        );
        let first = request.lines().next().unwrap();
        let mut parts = first.split(' ');
        let method = parts.next().unwrap().to_string();
        let path = parts.next().unwrap().to_string();
        let host = request
            .lines()
            .find_map(|l| l.strip_prefix("Host:"))
            .unwrap();
        let authorization = signed
            .lines()
            .find_map(|l| l.strip_prefix("Authorization:"))
            .unwrap()
            .to_string();
        (
            signer,
            method,
            format!("https://{host}{path}"),
            authorization,
        )
    }

    fn vector_time() -> SystemTime {
        // 2015-08-30T12:36:00Z, every vector's `timestamp`.
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_440_938_160)
    }

    #[test]
    fn signs_as_the_published_sigv4_test_suite_does() {
        let cases = [
            (
                include_str!("../../../../../tests/wire/sigv4_post_vanilla_context.json"),
                include_str!("../../../../../tests/wire/sigv4_post_vanilla_request.txt"),
                include_str!(
                    "../../../../../tests/wire/sigv4_post_vanilla_header-signed-request.txt"
                ),
            ),
            (
                include_str!(
                    "../../../../../tests/wire/sigv4_get_vanilla_with_session_token_context.json"
                ),
                include_str!(
                    "../../../../../tests/wire/sigv4_get_vanilla_with_session_token_request.txt"
                ),
                include_str!(
                    "../../../../../tests/wire/sigv4_get_vanilla_with_session_token_header-signed-request.txt"
                ),
            ),
        ];
        for (context, request, signed) in cases {
            let (signer, method, url, authorization) = vector(context, request, signed);
            let url = reqwest::Url::parse(&url).unwrap();
            let headers = HeaderMap::new();
            let outgoing = Outgoing {
                url: &url,
                headers: &headers,
                body: b"",
            };
            let added = signer.sign(&method, outgoing, vector_time()).unwrap();
            assert_eq!(added["authorization"], authorization.as_str(), "{url}");
            assert_eq!(added["x-amz-date"], "20150830T123600Z");
            assert!(added["authorization"].is_sensitive());
            let token = signer
                .session_token
                .as_ref()
                .map(|t| t.expose().to_string());
            assert_eq!(
                added
                    .get("x-amz-security-token")
                    .map(|v| v.to_str().unwrap().to_string()),
                token
            );
        }
    }
}
