//! The URL a child announces on stdout, when it picks its own port (TensorZero's gateway
//! started from Python does): every line it prints is kept in its log, and the origin of
//! the first `http://` or `https://` URL among them is where it is reached.

use std::fs::File;
use std::io::Write;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStdout;
use tokio::sync::oneshot;

/// The announced URL, once it comes.
pub(crate) struct Url(oneshot::Receiver<String>);

impl Url {
    /// The URL's origin, if it was announced since the last look.
    pub(crate) fn take(&mut self) -> Option<String> {
        self.0.try_recv().ok()
    }
}

/// Reads `out` to its end, copying every line into `log`.
pub(crate) fn read(out: ChildStdout, mut log: File) -> Url {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = writeln!(log, "{line}");
            if let Some(url) = origin(&line)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(url);
            }
        }
    });
    Url(rx)
}

/// The origin (`scheme://host:port`) of the first http(s) URL with a host in `line`.
pub(crate) fn origin(line: &str) -> Option<String> {
    line.split_whitespace()
        .filter_map(|word| {
            let start = word.find("http://").or_else(|| word.find("https://"))?;
            let url = word[start..].trim_end_matches(['"', '\'', ')', ',', '.', ';']);
            reqwest::Url::parse(url).ok()
        })
        .find(|url| url.host().is_some())
        .map(|url| url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn the_first_url_on_a_line_gives_its_origin_and_a_line_without_one_nothing() {
        assert_eq!(
            origin("http://127.0.0.1:41053/openai/v1").as_deref(),
            Some("http://127.0.0.1:41053")
        );
        assert_eq!(
            origin("listening on \"https://[::1]:8443/\", ready.").as_deref(),
            Some("https://[::1]:8443")
        );
        assert_eq!(origin("starting the gateway on port 3000"), None);
        assert_eq!(origin("http:// is not a URL"), None);
    }
}
