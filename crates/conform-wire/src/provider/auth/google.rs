//! A Google service account's access token: an RS256 JWT signed with the account's key
//! and exchanged at its `token_uri` (RFC 7523's `jwt-bearer` grant), as Google's own
//! libraries do, with ring (already built for rustls) and the PEM reader of
//! rustls-pki-types rather than a JWT crate with a crypto stack of its own.
//!
//! The token is kept and reused by every call until shortly before it expires (Google's
//! libraries refresh five minutes ahead; a short-lived token at half its life), then one
//! call fetches the next while the others wait for it. Neither the key, the assertion nor
//! the token is ever logged or put in a message: an error names the key file, the
//! account's e-mail, the token endpoint and what it answered.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

use super::{Authorize, CredentialError, Outgoing, sensitive};
use crate::provider::error::{self, CallError, ErrorKind};
use conform_config::secret::Secret;

/// The scope Vertex AI needs.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The OAuth grant a signed assertion is exchanged with.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// Where a key file that names no `token_uri` exchanges its assertions.
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// How long an assertion is valid: Google's maximum.
const ASSERTION_LIFETIME: u64 = 3600;

/// How long before its expiry a token is replaced (Google's libraries: five minutes).
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// How long the exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// One service account, and the token it last obtained.
pub struct ServiceAccount {
    email: String,
    key_id: Option<String>,
    key: RsaKeyPair,
    token_uri: String,
    cached: tokio::sync::Mutex<Option<Token>>,
    /// Every token obtained, to scrub from errors (a call may fail after a refresh).
    obtained: std::sync::Mutex<Vec<Secret>>,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("email", &self.email)
            .field("token_uri", &self.token_uri)
            .finish_non_exhaustive()
    }
}

/// An access token and how long it is good for.
struct Token {
    value: Secret,
    expires: Instant,
    lifetime: Duration,
}

impl Token {
    /// Whether the token may still be sent at `now`: not within its refresh margin.
    fn fresh_at(&self, now: Instant) -> bool {
        let margin = REFRESH_BEFORE.min(self.lifetime / 2);
        now + margin < self.expires
    }
}

/// The fields of a key file that are read.
#[derive(serde::Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
}

impl ServiceAccount {
    /// The account in the key file at `path` (what `GOOGLE_APPLICATION_CREDENTIALS` names).
    pub fn from_file(path: &Path) -> Result<ServiceAccount, CredentialError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CredentialError(format!(
                "cannot read the service account key file {}: {e}",
                path.display()
            ))
        })?;
        ServiceAccount::from_json(&text, &path.display().to_string())
    }

    /// The account in a key file's text; `origin` names the file in messages.
    pub fn from_json(text: &str, origin: &str) -> Result<ServiceAccount, CredentialError> {
        let bad = |what: &str| {
            CredentialError(format!(
                "{origin} is not a service account key file: {what} (create one with `gcloud iam service-accounts keys create`)"
            ))
        };
        let file: KeyFile = serde_json::from_str(text).map_err(|_| bad("it is not JSON"))?;
        if let Some(kind) = file.kind.as_deref().filter(|k| *k != "service_account") {
            return Err(bad(&format!(
                "its type is `{kind}`, not `service_account` (user credentials from `gcloud auth application-default login` hold no key: set token_env to a variable holding `gcloud auth print-access-token` instead)"
            )));
        }
        let email = file
            .client_email
            .ok_or_else(|| bad("it has no client_email"))?;
        let pem = file
            .private_key
            .ok_or_else(|| bad("it has no private_key"))?;
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|_| bad("its private_key is not a PKCS#8 PEM key"))?;
        let key = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
            .map_err(|_| bad("its private_key is not an RSA key ring accepts"))?;
        Ok(ServiceAccount {
            email,
            key_id: file.private_key_id,
            key,
            token_uri: file.token_uri.unwrap_or_else(|| DEFAULT_TOKEN_URI.into()),
            cached: tokio::sync::Mutex::new(None),
            obtained: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The account's e-mail, which names it in messages.
    pub fn email(&self) -> &str {
        &self.email
    }

    /// The signed JWT that asserts this account at `now`, for the `jwt-bearer` grant:
    /// issued by the account, for its token endpoint, with Vertex's scope, for an hour.
    pub fn assertion(&self, now: SystemTime) -> Result<String, CredentialError> {
        let iat = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_err(|_| CredentialError("the clock is before 1970".into()))?
            .as_secs();
        let mut header = json!({"alg": "RS256", "typ": "JWT"});
        if let Some(id) = &self.key_id {
            header["kid"] = json!(id);
        }
        let claims = json!({"iss": self.email, "scope": SCOPE, "aud": self.token_uri,
            "iat": iat, "exp": iat + ASSERTION_LIFETIME});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signed.as_bytes(),
                &mut signature,
            )
            .map_err(|_| CredentialError(format!("cannot sign as {}", self.email)))?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    /// A token to send now: the one kept while it is fresh, else a new one.
    pub async fn token(&self, client: &reqwest::Client) -> Result<Secret, CallError> {
        let mut cached = self.cached.lock().await;
        if let Some(token) = cached.as_ref().filter(|t| t.fresh_at(Instant::now())) {
            return Ok(token.value.clone());
        }
        let token = self.exchange(client).await?;
        let value = token.value.clone();
        self.obtained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(value.clone());
        *cached = Some(token);
        Ok(value)
    }

    /// One exchange of a fresh assertion for a token at the token endpoint.
    async fn exchange(&self, client: &reqwest::Client) -> Result<Token, CallError> {
        let refused = |what: String| {
            CallError::new(
                ErrorKind::Auth,
                format!(
                    "no access token for {} from {}: {what}",
                    self.email, self.token_uri
                ),
            )
        };
        let assertion = self
            .assertion(SystemTime::now())
            .map_err(|e| refused(e.0))?;
        let asked = Instant::now();
        let response = client
            .post(&self.token_uri)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!(
                "grant_type={}&assertion={assertion}",
                GRANT_TYPE.replace(':', "%3A")
            ))
            .timeout(EXCHANGE_TIMEOUT)
            .send()
            .await
            .map_err(|e| {
                let kind = if e.is_timeout() {
                    ErrorKind::Timeout
                } else {
                    ErrorKind::ConnectionRefused
                };
                CallError::new(
                    kind,
                    format!("the token endpoint {} did not answer", self.token_uri),
                )
            })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        let answer: Option<Value> = serde_json::from_slice(&body).ok();
        let text = |name: &str| {
            answer
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        if !(200..300).contains(&status) {
            let said = match (text("error"), text("error_description")) {
                (Some(code), Some(description)) => format!("{code}: {description}"),
                (Some(code), None) => code,
                _ => error::excerpt(&body),
            };
            return Err(refused(format!("HTTP {status} ({said})")).status(status));
        }
        let value = text("access_token")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| refused("the answer holds no access_token".into()))?;
        let lifetime = answer
            .as_ref()
            .and_then(|a| a.get("expires_in"))
            .and_then(Value::as_u64)
            .map_or(Duration::from_secs(ASSERTION_LIFETIME), Duration::from_secs);
        Ok(Token {
            value: Secret::new(value),
            expires: asked + lifetime,
            lifetime,
        })
    }
}

impl Authorize for ServiceAccount {
    fn authorize<'a>(
        &'a self,
        _request: Outgoing<'a>,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<HeaderMap, CallError>> {
        Box::pin(async move {
            let token = self.token(client).await?;
            let mut headers = HeaderMap::new();
            let value = sensitive(&format!("Bearer {}", token.expose())).ok_or_else(|| {
                CallError::new(
                    ErrorKind::Auth,
                    format!(
                        "the token endpoint {} sent an unusable token",
                        self.token_uri
                    ),
                )
            })?;
            headers.insert(AUTHORIZATION, value);
            Ok(headers)
        })
    }

    fn secrets(&self) -> Vec<Secret> {
        self.obtained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    const KEY_FILE: &str =
        include_str!("../../../../../tests/wire/vertex_service_account_test_key.json");
    const PUBLIC: &str =
        include_str!("../../../../../tests/wire/vertex_service_account_test_key_public.pem");

    /// The public half, as the PKCS#1 `RSAPublicKey` ring verifies with.
    fn public_key() -> Vec<u8> {
        let body: String = PUBLIC.lines().filter(|l| !l.starts_with("-----")).collect();
        STANDARD.decode(body).unwrap()
    }

    #[test]
    fn the_assertion_verifies_with_the_keys_public_half_and_says_what_google_checks() {
        let account = ServiceAccount::from_json(KEY_FILE, "test.json").unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let jwt = account.assertion(at).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let signed = format!("{}.{}", parts[0], parts[1]);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            public_key(),
        );
        public.verify(signed.as_bytes(), &signature).unwrap();
        // One changed byte of the claims no longer verifies.
        let forged = signed.replacen('e', "f", 1);
        assert!(public.verify(forged.as_bytes(), &signature).is_err());
        let decode = |part: &str| -> Value {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
        };
        let header = decode(parts[0]);
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], "0123456789abcdef0123456789abcdef01234567");
        let claims = decode(parts[1]);
        assert_eq!(
            claims["iss"],
            "conform-test@conform-test-project.iam.gserviceaccount.com"
        );
        assert_eq!(claims["aud"], "https://oauth2.googleapis.com/token");
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(claims["iat"], 1_700_000_000);
        assert_eq!(claims["exp"], 1_700_003_600);
    }

    #[test]
    fn a_token_is_replaced_before_it_expires() {
        let now = Instant::now();
        let token = |lifetime: u64| Token {
            value: Secret::new("t".into()),
            expires: now + Duration::from_secs(lifetime),
            lifetime: Duration::from_secs(lifetime),
        };
        let hour = token(3600);
        assert!(hour.fresh_at(now));
        assert!(hour.fresh_at(now + Duration::from_secs(3600 - 301)));
        assert!(!hour.fresh_at(now + Duration::from_secs(3600 - 299)));
        // A short-lived token is replaced at half its life.
        let short = token(10);
        assert!(short.fresh_at(now + Duration::from_secs(4)));
        assert!(!short.fresh_at(now + Duration::from_secs(6)));
    }

    #[test]
    fn a_bad_key_file_is_named_without_its_contents() {
        for text in [
            "not json".to_string(),
            KEY_FILE.replace("service_account", "authorized_user"),
            KEY_FILE.replace("BEGIN PRIVATE KEY", "BEGIN NOTHING"),
            r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#.to_string(),
        ] {
            let error = ServiceAccount::from_json(&text, "/keys/sa.json").unwrap_err();
            assert!(error.0.starts_with("/keys/sa.json is not a service account key file"), "{error}");
            assert!(!error.0.contains("MII"), "{error}");
        }
        let account = ServiceAccount::from_json(KEY_FILE, "k.json").unwrap();
        assert!(!format!("{account:?}").contains("PRIVATE"));
    }
}
