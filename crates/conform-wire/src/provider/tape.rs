//! Recording sanitized exchanges and replaying them with no network.
//!
//! A tape is a folder holding `<provider>.jsonl`: one [`Exchange`] per HTTP response, in
//! the order the responses arrived. An exchange keeps the request body (which never holds
//! the key: keys travel in headers or the URL, and neither is kept), the status, the
//! response headers minus anything that could authenticate, and the body as text. Any
//! occurrence of the provider's key is replaced before a line is written.
//!
//! Replay answers each request with the next exchange recorded for the same request
//! digest, so retries and repeats come back in the order they were recorded. A request
//! the tape does not hold fails as `not_recorded`, a configuration error: the tape was
//! made for another suite or provider configuration.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use conform_config::diagnostic;
use conform_config::secret::Secret;

/// One recorded response and the request it answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exchange {
    /// The digest of the request, by which replay finds the answer.
    pub request_digest: String,
    /// The request body sent, key scrubbed (`null` when it was not JSON).
    pub request: Value,
    /// The response's status, replayed as it was.
    pub status: u16,
    /// The response headers, minus anything that could authenticate.
    pub headers: BTreeMap<String, String>,
    /// The response body as text.
    pub body: String,
}

/// Why a tape cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    /// The tape could not be written.
    #[error("cannot write the tape {path}: {source}")]
    Write {
        /// The tape file.
        path: PathBuf,
        /// What writing it failed with.
        source: io::Error,
    },
    /// The tape could not be read.
    #[error("cannot read the tape {path}: {source} (record one with `conform run --record DIR`)")]
    Read {
        /// The tape file.
        path: PathBuf,
        /// What reading it failed with.
        source: io::Error,
    },
    /// A line of the tape is not an exchange.
    #[error("{path}:{line}:{column}: not a recorded exchange: {message}")]
    Line {
        /// The tape file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
        /// What the JSON parser said.
        message: String,
    },
}

/// Writes the exchanges of one provider, in arrival order.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    key: Option<Secret>,
    out: Mutex<Option<BufWriter<File>>>,
    /// The first write error; the run reports it at the end instead of losing it.
    failed: Mutex<Option<io::Error>>,
}

impl Recorder {
    /// Starts `dir/<provider>.jsonl`, replacing an earlier tape of that provider.
    pub fn create(dir: &Path, provider: &str, key: Option<Secret>) -> Result<Recorder, TapeError> {
        let path = tape_path(dir, provider);
        let open = std::fs::create_dir_all(dir).and_then(|()| File::create(&path));
        let file = open.map_err(|source| TapeError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(Recorder {
            path,
            key,
            out: Mutex::new(Some(BufWriter::new(file))),
            failed: Mutex::new(None),
        })
    }

    /// Appends one exchange, its key scrubbed; a failure is kept for [`Recorder::finish`].
    pub fn record(
        &self,
        request_digest: &str,
        request: &[u8],
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
    ) {
        let scrub = |text: &str| match &self.key {
            Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "***"),
            _ => text.to_string(),
        };
        let exchange = Exchange {
            request_digest: request_digest.to_string(),
            request: serde_json::from_str(&scrub(&String::from_utf8_lossy(request)))
                .unwrap_or(Value::Null),
            status,
            headers: headers
                .iter()
                .filter(|(name, _)| !is_sensitive(name.as_str()))
                .filter_map(|(name, value)| Some((name.to_string(), scrub(value.to_str().ok()?))))
                .collect(),
            body: scrub(&String::from_utf8_lossy(body)),
        };
        let written = serde_json::to_string(&exchange)
            .map_err(io::Error::other)
            .and_then(|line| {
                let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
                match out.as_mut() {
                    Some(out) => writeln!(out, "{line}"),
                    None => Ok(()),
                }
            });
        if let Err(e) = written {
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
        }
    }

    /// Flushes the tape to disk; the first error of the whole recording, if any.
    pub fn finish(&self) -> Result<PathBuf, TapeError> {
        let fail = |source| TapeError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(e) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(fail(e));
        }
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(out) = out {
            let file = out.into_inner().map_err(|e| fail(e.into_error()))?;
            file.sync_all().map_err(fail)?;
        }
        Ok(self.path.clone())
    }
}

/// Serves the exchanges of one provider's tape.
#[derive(Debug)]
pub struct Replayer {
    path: PathBuf,
    exchanges: Mutex<HashMap<String, VecDeque<Exchange>>>,
}

impl Replayer {
    /// Reads `dir/<provider>.jsonl`.
    pub fn open(dir: &Path, provider: &str) -> Result<Replayer, TapeError> {
        let path = tape_path(dir, provider);
        let mut exchanges: HashMap<String, VecDeque<Exchange>> = HashMap::new();
        read(&path, |exchange| {
            exchanges
                .entry(exchange.request_digest.clone())
                .or_default()
                .push_back(exchange);
        })?;
        Ok(Replayer {
            path,
            exchanges: Mutex::new(exchanges),
        })
    }

    /// The next recorded answer to the request with this digest, if one is left.
    pub fn next(&self, request_digest: &str) -> Option<(u16, HeaderMap, Vec<u8>)> {
        let exchange = self
            .exchanges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(request_digest)?
            .pop_front()?;
        let headers = exchange
            .headers
            .iter()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::try_from(name.as_str()).ok()?,
                    HeaderValue::from_str(value).ok()?,
                ))
            })
            .collect();
        Some((exchange.status, headers, exchange.body.into_bytes()))
    }

    /// The tape file replayed.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The one reader of the tape format: every exchange of the tape at `path`, in the order
/// recorded, handed to `each`. A line that is not an exchange names its file, line and
/// column; blank lines are skipped.
pub fn read(path: &Path, mut each: impl FnMut(Exchange)) -> Result<(), TapeError> {
    let read_error = |source| TapeError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_error)?;
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(read_error)?;
        if line.trim().is_empty() {
            continue;
        }
        let exchange: Exchange = serde_json::from_str(&line).map_err(|error| TapeError::Line {
            path: path.to_path_buf(),
            line: n + 1,
            // One line of the tape, so serde's column is within it.
            column: diagnostic::json_error_at(line.as_bytes(), &error).1,
            message: diagnostic::json_error_message(&error),
        })?;
        each(exchange);
    }
    Ok(())
}

fn tape_path(dir: &Path, provider: &str) -> PathBuf {
    dir.join(format!("{provider}.jsonl"))
}

/// Response headers that could carry a credential or a session are never kept.
fn is_sensitive(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["auth", "key", "token", "cookie", "secret"]
        .iter()
        .any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recording_keeps_no_key_and_no_credential_header_and_replays_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let key = "sk-canary-123";
        let recorder = Recorder::create(dir.path(), "p", Some(Secret::new(key.into()))).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("set-cookie", HeaderValue::from_static("session=abc"));
        headers.insert("x-api-key-echo", HeaderValue::from_str(key).unwrap());
        headers.insert("retry-after", HeaderValue::from_static("1"));
        let request =
            serde_json::to_vec(&json!({"messages": [{"content": format!("echo {key}")}]})).unwrap();
        recorder.record("d1", &request, 429, &headers, b"slow down");
        recorder.record(
            "d1",
            &request,
            200,
            &HeaderMap::new(),
            format!("ok {key}").as_bytes(),
        );
        let path = recorder.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(key), "{text}");
        assert!(!text.contains("session=abc"), "{text}");
        assert!(text.contains("retry-after"), "{text}");

        let replayer = Replayer::open(dir.path(), "p").unwrap();
        let (status, headers, _) = replayer.next("d1").unwrap();
        assert_eq!(
            (
                status,
                headers.get("retry-after").unwrap().to_str().unwrap()
            ),
            (429, "1")
        );
        let (status, _, body) = replayer.next("d1").unwrap();
        assert_eq!((status, body.as_slice()), (200, b"ok ***".as_slice()));
        assert!(replayer.next("d1").is_none());
        assert!(replayer.next("other").is_none());
    }

    #[test]
    fn a_damaged_tape_names_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.jsonl"), "\n{\"request_digest\": 1}\n").unwrap();
        let err = Replayer::open(dir.path(), "p").unwrap_err().to_string();
        assert!(
            err.contains("p.jsonl:2:20: not a recorded exchange"),
            "{err}"
        );
        // A tape cut off in the middle of a line: where it stops.
        let cut =
            r#"{"request_digest": "d1", "request": {}, "status": 200, "headers": {}, "body": "o"#;
        std::fs::write(dir.path().join("p.jsonl"), format!("{cut}\n")).unwrap();
        let err = Replayer::open(dir.path(), "p").unwrap_err().to_string();
        let at = format!("p.jsonl:1:{}: not a recorded exchange: EOF", cut.len() + 1);
        assert!(err.contains(&at), "{err}");
        assert!(!err.contains("column"), "{err}");
        let err = Replayer::open(dir.path(), "missing")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing.jsonl") && err.contains("--record"),
            "{err}"
        );
    }
}
