//! Mock clouds that check what the real services check before they answer: Azure's key
//! or bearer token, an AWS SigV4 signature recomputed here with the test's credentials
//! (not with the signer under test), and a Google access token that the mock token
//! endpoint issued for a JWT whose signature, audience, scope, issuer and expiry it
//! verified with the service account key's public half.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::{digest, hmac};
use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

/// What a gate answers once the request passed its checks.
pub type Answer = Arc<dyn Fn(&Request) -> ResponseTemplate + Send + Sync>;

/// A check the service makes before it answers: its refusal, if it refuses.
pub type Check = Arc<dyn Fn(&Request) -> Option<ResponseTemplate> + Send + Sync>;

/// A mock endpoint: the service's checks, then its answer. It counts both.
#[derive(Clone)]
pub struct Gate {
    pub check: Check,
    pub answer: Answer,
    pub passed: Arc<AtomicUsize>,
    pub refused: Arc<AtomicUsize>,
}

impl Gate {
    pub fn new(check: Check, answer: Answer) -> Gate {
        Gate {
            check,
            answer,
            passed: Arc::new(AtomicUsize::new(0)),
            refused: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn passed(&self) -> usize {
        self.passed.load(Ordering::SeqCst)
    }

    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Respond for Gate {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        match (self.check)(request) {
            None => {
                self.passed.fetch_add(1, Ordering::SeqCst);
                (self.answer)(request)
            }
            Some(refusal) => {
                self.refused.fetch_add(1, Ordering::SeqCst);
                refusal
            }
        }
    }
}

/// Always the same answer.
pub fn fixed(template: ResponseTemplate) -> Answer {
    Arc::new(move |_| template.clone())
}

pub fn header(request: &Request, name: &str) -> Option<String> {
    request
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

// ---------------------------------------------------------------- Azure

/// Azure's check: the key in `api-key`, or the token as a bearer, else its 401.
pub fn azure_key(key: &'static str, bearer: bool) -> Check {
    Arc::new(move |request| {
        let sent = match bearer {
            true => header(request, "authorization"),
            false => header(request, "api-key"),
        };
        let wanted = match bearer {
            true => format!("Bearer {key}"),
            false => key.to_string(),
        };
        match sent == Some(wanted) {
            true => None,
            false => Some(ResponseTemplate::new(401).set_body_json(json!({"error": {"code": "401",
                "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}))),
        }
    })
}

// ---------------------------------------------------------------- AWS SigV4

/// AWS credentials as a test holds them.
#[derive(Debug, Clone)]
pub struct AwsAccount {
    pub access_key_id: &'static str,
    pub secret_access_key: &'static str,
    pub session_token: Option<&'static str>,
    pub region: &'static str,
    pub service: &'static str,
}

pub const AWS: AwsAccount = AwsAccount {
    access_key_id: "AKIAIOSFODNN7EXAMPLE",
    secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    session_token: Some("IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN//////////wEaCXVzLWVhc3QtMSJHMEUCIQ"),
    region: "us-east-1",
    service: "bedrock",
};

/// A request as a verifier reads it.
#[derive(Debug, Clone)]
pub struct Signed {
    pub method: String,
    /// The path as it arrived (percent-encoded once, by the client).
    pub path: String,
    pub query: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Signed {
    pub fn of(request: &Request) -> Signed {
        Signed {
            method: request.method.to_string(),
            path: request.url.path().to_string(),
            query: request.url.query().unwrap_or_default().to_string(),
            headers: (request.headers.iter())
                .map(|(n, v)| {
                    (
                        n.as_str().to_ascii_lowercase(),
                        v.to_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
            body: request.body.clone(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// AWS's URI encoding: every byte but the unreserved ones.
fn uri_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

fn hmac_sha256(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// Verifies the SigV4 `Authorization` of `request` as AWS does: the credential scope,
/// the session token, the time (within five minutes of `now`, when given), and the
/// signature recomputed over the canonical request (each path segment encoded again, as
/// every service but S3 signs it). `Err` names what failed, as AWS's exception does.
pub fn verify_sigv4(
    request: &Signed,
    account: &AwsAccount,
    now: Option<SystemTime>,
) -> Result<(), String> {
    let authorization = request
        .header("authorization")
        .ok_or("MissingAuthenticationTokenException")?;
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("IncompleteSignatureException: not AWS4-HMAC-SHA256")?;
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|part| part.strip_prefix(name))
            .ok_or(format!("IncompleteSignatureException: no {name}"))
    };
    let credential = field("Credential=")?;
    let signed_headers = field("SignedHeaders=")?;
    let signature = field("Signature=")?;
    let scope: Vec<&str> = credential.split('/').collect();
    if scope.len() != 5 || scope[4] != "aws4_request" {
        return Err("IncompleteSignatureException: a malformed credential scope".into());
    }
    if scope[0] != account.access_key_id {
        return Err(
            "UnrecognizedClientException: The security token included in the request is invalid."
                .into(),
        );
    }
    if scope[2] != account.region || scope[3] != account.service {
        return Err(format!(
            "InvalidSignatureException: scope {}/{} is not {}/{}",
            scope[2], scope[3], account.region, account.service
        ));
    }
    let amz_date = request
        .header("x-amz-date")
        .ok_or("IncompleteSignatureException: no X-Amz-Date")?;
    if !amz_date.starts_with(scope[1]) {
        return Err("InvalidSignatureException: the scope's date is not X-Amz-Date's".into());
    }
    if let Some(now) = now {
        let at = time::PrimitiveDateTime::parse(
            amz_date,
            time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"),
        )
        .map_err(|_| "IncompleteSignatureException: X-Amz-Date".to_string())?
        .assume_utc();
        let now = time::OffsetDateTime::from(now);
        if (now - at).abs() > time::Duration::minutes(5) {
            return Err("InvalidSignatureException: Signature expired".into());
        }
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    match (
        account.session_token,
        request.header("x-amz-security-token"),
    ) {
        (Some(token), Some(sent)) if token == sent && names.contains(&"x-amz-security-token") => {}
        (None, None) => {}
        _ => return Err(
            "UnrecognizedClientException: The security token included in the request is invalid."
                .into(),
        ),
    }
    let canonical = canonical_request(request, &names, signed_headers)?;
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}/{}/{}/aws4_request\n{}",
        scope[1],
        scope[2],
        scope[3],
        sha256_hex(canonical.as_bytes())
    );
    let mut key = hmac_sha256(
        format!("AWS4{}", account.secret_access_key).as_bytes(),
        scope[1],
    );
    for part in [scope[2], scope[3], "aws4_request"] {
        key = hmac_sha256(&key, part);
    }
    let expected = hex(&hmac_sha256(&key, &string_to_sign));
    match expected == signature {
        true => Ok(()),
        false => Err("InvalidSignatureException: The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.".into()),
    }
}

/// The canonical request AWS signs: method, path (each segment encoded again), sorted
/// query, the signed headers with their values trimmed, their names, the body's digest.
fn canonical_request(
    request: &Signed,
    names: &[&str],
    signed_headers: &str,
) -> Result<String, String> {
    let canonical_uri = match request.path.as_str() {
        "" | "/" => "/".to_string(),
        path => path
            .split('/')
            .map(uri_encode)
            .collect::<Vec<_>>()
            .join("/"),
    };
    let mut query: Vec<(String, String)> = (request.query.split('&'))
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (uri_encode(k), uri_encode(v))
        })
        .collect();
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in names {
        let value = request.header(name).ok_or(format!(
            "InvalidSignatureException: signed header {name} not sent"
        ))?;
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    Ok(format!(
        "{}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        sha256_hex(&request.body)
    ))
}

/// Bedrock's check: a valid SigV4 signature with `account`, or its 403.
pub fn aws_signature(account: AwsAccount) -> Check {
    Arc::new(move |request| {
        verify_sigv4(&Signed::of(request), &account, Some(SystemTime::now()))
            .err()
            .map(|why| {
                let (exception, message) = why.split_once(": ").unwrap_or((why.as_str(), ""));
                aws_error(403, exception, message)
            })
    })
}

/// A Bedrock error as the service sends one.
pub fn aws_error(status: u16, exception: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header(
            "x-amzn-errortype",
            format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/").as_str(),
        )
        .insert_header("x-amzn-requestid", "3b7e4a5f-0000-4000-8000-000000000000")
        .set_body_json(json!({ "message": message }))
}

/// Bedrock's check with a bearer API key.
pub fn aws_bearer(key: &'static str) -> Check {
    Arc::new(move |request| {
        match header(request, "authorization") == Some(format!("Bearer {key}")) {
            true => None,
            false => Some(aws_error(
                403,
                "AccessDeniedException",
                "Authentication failed: Please make sure your API Key is valid.",
            )),
        }
    })
}

/// The environment a test's AWS account is in.
pub fn aws_environment(account: &AwsAccount) -> impl Fn(&str) -> Option<String> + use<> {
    let account = account.clone();
    move |name| match name {
        "AWS_ACCESS_KEY_ID" => Some(account.access_key_id.to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some(account.secret_access_key.to_string()),
        "AWS_SESSION_TOKEN" => account.session_token.map(str::to_string),
        _ => None,
    }
}

// ---------------------------------------------------------------- Google

pub const SERVICE_ACCOUNT: &str = "conform-test@conform-test-project.iam.gserviceaccount.com";

/// The service account key file of the tests, with its `token_uri` at `token_uri`,
/// written under `dir`.
pub fn service_account_file(dir: &Path, token_uri: &str) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/wire/vertex_service_account_test_key.json"),
    )
    .unwrap();
    let mut file: Value = serde_json::from_str(&text).unwrap();
    file["token_uri"] = json!(token_uri);
    let path = dir.join("service-account.json");
    std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
    path
}

/// The key file's private key, to look for where it must never be.
pub fn service_account_private_key() -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/wire/vertex_service_account_test_key.json"),
    )
    .unwrap();
    let file: Value = serde_json::from_str(&text).unwrap();
    file["private_key"].as_str().unwrap().to_string()
}

/// The public half of the key, as ring verifies with it (PKCS#1 `RSAPublicKey`).
fn public_key() -> Vec<u8> {
    let pem = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/wire/vertex_service_account_test_key_public.pem"),
    )
    .unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(body).unwrap()
}

/// A Google token endpoint: verifies the `jwt-bearer` grant's assertion (signature with
/// the key's public half, `iss`, `aud` = this endpoint, `scope`, `iat`, `exp`) and issues
/// `ya29.conform-test-N`, good for `lifetime`.
#[derive(Clone)]
pub struct TokenEndpoint {
    /// Where the endpoint is (`aud` must be this).
    pub uri: Arc<Mutex<String>>,
    pub lifetime: u64,
    /// Each token issued, and when.
    pub issued: Arc<Mutex<Vec<(String, std::time::Instant)>>>,
    pub refused: Arc<Mutex<Vec<String>>>,
}

impl TokenEndpoint {
    pub fn new(lifetime: u64) -> TokenEndpoint {
        TokenEndpoint {
            uri: Arc::new(Mutex::new(String::new())),
            lifetime,
            issued: Arc::new(Mutex::new(Vec::new())),
            refused: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn exchanges(&self) -> usize {
        self.issued.lock().unwrap().len()
    }

    fn verify(&self, body: &str) -> Result<(), String> {
        let form: Vec<(&str, &str)> = body.split('&').filter_map(|p| p.split_once('=')).collect();
        let field = |name: &str| form.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        if field("grant_type") != Some("urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer") {
            return Err("unsupported_grant_type".into());
        }
        let assertion = field("assertion").ok_or("no assertion")?;
        let parts: Vec<&str> = assertion.split('.').collect();
        if parts.len() != 3 {
            return Err("a malformed JWT".into());
        }
        let signature = URL_SAFE_NO_PAD
            .decode(parts[2])
            .map_err(|_| "a malformed signature")?;
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            public_key(),
        )
        .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
        .map_err(|_| "Invalid JWT Signature.")?;
        let decode = |part: &str| -> Result<Value, String> {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).map_err(|_| "base64")?)
                .map_err(|_| "JSON".to_string())
        };
        let header = decode(parts[0])?;
        let claims = decode(parts[1])?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let (iat, exp) = (
            claims["iat"].as_u64().unwrap_or(0),
            claims["exp"].as_u64().unwrap_or(0),
        );
        let checks = [
            (header["alg"] == "RS256", "alg"),
            (claims["iss"] == SERVICE_ACCOUNT, "iss"),
            (claims["aud"] == json!(*self.uri.lock().unwrap()), "aud"),
            (
                claims["scope"] == "https://www.googleapis.com/auth/cloud-platform",
                "scope",
            ),
            (iat <= now + 60 && now <= iat + 60, "iat"),
            (exp > now && exp <= iat + 3600, "exp"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, claim)) => Err(format!("Invalid JWT: bad {claim}")),
            None => Ok(()),
        }
    }
}

impl Respond for TokenEndpoint {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body = String::from_utf8_lossy(&request.body).into_owned();
        match self.verify(&body) {
            Ok(()) => {
                let mut issued = self.issued.lock().unwrap();
                let token = format!("ya29.conform-test-{}", issued.len() + 1);
                issued.push((token.clone(), std::time::Instant::now()));
                // Google's answer (tests/wire/vertex_oauth_token_response.json), this token's.
                let mut answer = recorded_json("vertex_oauth_token_response.json");
                answer["access_token"] = json!(token);
                answer["expires_in"] = json!(self.lifetime);
                ResponseTemplate::new(200).set_body_json(answer)
            }
            Err(why) => {
                self.refused.lock().unwrap().push(why.clone());
                let mut answer =
                    recorded_json("vertex_oauth_error_invalid_grant.json")["body"].clone();
                answer["error_description"] = json!(why);
                ResponseTemplate::new(400).set_body_json(answer)
            }
        }
    }
}

fn recorded_json(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/wire")
        .join(file);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Vertex's check: a bearer token the token endpoint issued and that has not expired,
/// else Google's 401.
pub fn google_token(tokens: &TokenEndpoint) -> Check {
    let issued = Arc::clone(&tokens.issued);
    let lifetime = Duration::from_secs(tokens.lifetime);
    Arc::new(move |request| {
        let sent = header(request, "authorization").unwrap_or_default();
        let known = (issued.lock().unwrap().iter())
            .any(|(t, at)| sent == format!("Bearer {t}") && at.elapsed() < lifetime);
        match known {
            true => None,
            false => Some(ResponseTemplate::new(401).set_body_json(json!({"error": {"code": 401,
                "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                "status": "UNAUTHENTICATED"}}))),
        }
    })
}

/// Vertex's check of a ready token.
pub fn google_ready_token(token: &'static str) -> Check {
    Arc::new(move |request| {
        match header(request, "authorization") == Some(format!("Bearer {token}")) {
        true => None,
        false => Some(ResponseTemplate::new(401).set_body_json(json!({"error": {"code": 401,
            "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED"}}))),
    }
    })
}

/// The environment naming the key file.
pub fn google_environment(file: &Path) -> impl Fn(&str) -> Option<String> + use<> {
    let file = file.display().to_string();
    move |name| (name == "GOOGLE_APPLICATION_CREDENTIALS").then(|| file.clone())
}

/// Waits a little past `seconds`.
pub async fn sleep_past(seconds: f64) {
    tokio::time::sleep(Duration::from_secs_f64(seconds + 0.1)).await;
}

/// A server that answers every request with `200`, an event-stream content type and
/// `bytes` as one chunk of a chunked body, then drops the connection without ending it:
/// a stream that broke off after `bytes`. Returns its address.
pub async fn cut_stream_server(bytes: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let bytes = Arc::new(bytes);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let bytes = Arc::clone(&bytes);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let length: usize = (text.lines())
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                if stream.read_exact(&mut body).await.is_err() {
                    return;
                }
                let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
                out.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
                out.extend_from_slice(&bytes);
                out.extend_from_slice(b"\r\n");
                let _ = stream.write_all(&out).await;
                let _ = stream.flush().await;
                let _ = stream.shutdown().await;
            });
        }
    });
    address
}
