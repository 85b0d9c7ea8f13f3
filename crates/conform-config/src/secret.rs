//! A value that must never reach a report, a log or an error message.

use std::fmt;

/// An API key read from the environment.
///
/// `Debug` and `Display` print a fixed placeholder, so a key cannot leak through
/// formatting by accident. The only way to the bytes is [`Secret::expose`].
///
/// ```
/// let key = conform_config::secret::Secret::new("sk-live-123".to_string());
/// assert_eq!(format!("{key:?}"), "Secret(***)");
/// assert_eq!(key.expose(), "sk-live-123");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A value that never prints.
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The key itself; call this only where it goes on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `url` without its password, fit for an error message or a log: `postgres://u:***@h/db`.
/// The password ends at the last `@`, so one that holds an `@` is hidden whole.
///
/// ```
/// use conform_config::secret::redact_url;
/// assert_eq!(redact_url("postgres://app:s3@cret@db/jobs"), "postgres://app:***@db/jobs");
/// assert_eq!(redact_url("postgres://app@db/jobs"), "postgres://app@db/jobs");
/// ```
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}
