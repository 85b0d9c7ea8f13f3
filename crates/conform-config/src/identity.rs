//! What a piece of evidence is about: a suite as its files, a provider as the fields that
//! shape what is sent to it and how its answers are read.
//!
//! An allowlist entry pins both, and a reader compares them with the project as it is
//! now, naming the file or field that differs (`docs/evidence.md`). Operational settings
//! (how hard conform pushes a provider, how long it waits) are left out: they change how
//! fast evidence is gathered, never what it proves.

/// Fields of a provider file that are operational and so outside its identity: the
/// `[limits]` table (concurrency, request and token rates, retries and their waits), the
/// per-call `timeout`, and `[pricing]`.
pub const OPERATIONAL: &[&str] = &["limits", "timeout", "pricing"];

pub use conform_allowlist::{CasesIdentity, ProviderIdentity, SuiteIdentity};

/// The address a `base_url` names, as identity compares it: the whole address a request
/// goes to, spelled one way. Scheme, user-info, host, port (the scheme's default written
/// out), path without a trailing slash, and query: `https://api.openai.com/` and
/// `https://api.openai.com:443` are one endpoint; `http://host:8000/v1` another than
/// `http://host:8000` (a provider file's `base_url` has its wire's own `/v1` taken off
/// before it gets here, so for the file both spellings are one endpoint);
/// `http://acct2:pw@host` another account than `http://host`; `…?x=1` another address.
///
/// Secrets stay out: a password is kept as a digest (`acct2:[sha256:…]@`), and so is the
/// value of a query parameter that names a credential (`key`, `token`, `sig` …), so the
/// identity tells one account from another without holding either. A text that is not a
/// URL is kept as it is.
pub fn endpoint(base_url: &str) -> String {
    let Ok(url) = url::Url::parse(base_url) else {
        return base_url.to_string();
    };
    let user = match (url.username(), url.password()) {
        ("", None) => String::new(),
        (user, None) => format!("{user}@"),
        (user, Some(password)) => format!("{user}:[{}]@", secret_digest(password)),
    };
    let host = url.host_str().unwrap_or_default();
    let port = url
        .port_or_known_default()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    let path = url.path().trim_end_matches('/');
    let query = match url.query().filter(|q| !q.is_empty()) {
        Some(query) => format!("?{}", query_without_secrets(query)),
        None => String::new(),
    };
    format!("{}://{user}{host}{port}{path}{query}", url.scheme())
}

/// Query parameters whose value is a credential, by the names vendors and proxies use.
const CREDENTIAL_PARAMETERS: &[&str] = &[
    "key",
    "api_key",
    "api-key",
    "apikey",
    "token",
    "access_token",
    "auth",
    "sig",
    "signature",
    "secret",
    "password",
    "code",
];

fn query_without_secrets(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value))
                if CREDENTIAL_PARAMETERS.contains(&name.to_lowercase().as_str()) =>
            {
                format!("{name}=[{}]", secret_digest(value))
            }
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A short digest of a secret: enough to tell two apart, never the secret.
fn secret_digest(secret: &str) -> String {
    let digest = crate::digest::bytes_hex(secret.as_bytes());
    digest.chars().take("sha256:".len() + 16).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints_compare_by_address_not_spelling() {
        assert_eq!(
            endpoint("https://api.openai.com"),
            "https://api.openai.com:443"
        );
        assert_eq!(
            endpoint("https://API.openai.com:443/"),
            "https://api.openai.com:443"
        );
        assert_eq!(
            endpoint("http://10.0.0.5:8000/v1/"),
            "http://10.0.0.5:8000/v1"
        );
        assert_ne!(
            endpoint("http://10.0.0.5:8000"),
            endpoint("http://10.0.0.6:8000")
        );
        assert_ne!(endpoint("http://h:8000"), endpoint("http://h:8000/v1"));
        assert_ne!(endpoint("http://h:8000"), endpoint("https://h:8000"));
        assert_eq!(endpoint("not a url"), "not a url");
    }

    #[test]
    fn the_account_and_the_query_are_part_of_the_address_and_no_secret_is() {
        let plain = endpoint("http://127.0.0.1:9105/v1");
        let account = endpoint("http://acct2:secret@127.0.0.1:9105/v1");
        assert_ne!(account, plain);
        assert!(account.starts_with("http://acct2:[sha256:"), "{account}");
        assert!(!account.contains("secret"), "{account}");
        assert_ne!(account, endpoint("http://acct2:other@127.0.0.1:9105/v1"));
        assert_ne!(endpoint("http://acct2@h"), endpoint("http://h"));
        assert_eq!(
            endpoint("http://127.0.0.1:9105/v1?x=1"),
            "http://127.0.0.1:9105/v1?x=1"
        );
        assert_ne!(endpoint("http://h/v1?x=1"), endpoint("http://h/v1"));
        let keyed = endpoint("https://g.example/v1beta?key=AIza-SECRET&alt=sse");
        assert!(!keyed.contains("AIza-SECRET"), "{keyed}");
        assert!(keyed.contains("&alt=sse"), "{keyed}");
        assert_ne!(
            keyed,
            endpoint("https://g.example/v1beta?key=AIza-OTHER&alt=sse")
        );
    }

    #[test]
    fn provider_changes_name_each_field_with_both_values() {
        let then = ProviderIdentity(
            [
                ("model".to_string(), json!("m")),
                ("endpoint".to_string(), json!("http://a:1")),
                ("seed".to_string(), json!(7)),
            ]
            .into(),
        );
        let mut now = then.clone();
        assert!(now.changes_since(&then).is_empty());
        now.0.insert("endpoint".into(), json!("http://b:1"));
        now.0.remove("seed");
        assert_eq!(
            now.changes_since(&then),
            [
                "endpoint: http://a:1 then, http://b:1 now (the host differs)",
                "seed: 7 then, unset now"
            ]
        );
        assert_ne!(now.digest(), then.digest());
    }

    #[test]
    fn suite_changes_name_each_file() {
        let then = SuiteIdentity {
            files: [
                ("suite.toml".to_string(), "sha256:a".to_string()),
                ("schema.json".to_string(), "sha256:b".to_string()),
            ]
            .into(),
            cases: CasesIdentity {
                count: 2,
                digest: "sha256:c".into(),
            },
        };
        let mut now = then.clone();
        assert!(now.changes_since(&then).is_empty());
        now.files.insert("schema.json".into(), "sha256:x".into());
        now.files.insert("tools.json".into(), "sha256:t".into());
        now.cases.digest = "sha256:d".into();
        assert_eq!(
            now.changes_since(&then),
            [
                "schema.json changed",
                "tools.json added",
                "cases/: the content or names of the 2 case files changed"
            ]
        );
        now.cases.count = 3;
        assert!(
            now.changes_since(&then)[2].contains("2 case files when the evidence was made, 3 now")
        );
    }
}
