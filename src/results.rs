//! `results.jsonl`, a run folder's call records: its one writer and its readers. The file
//! holds one [`CallRecord`] per line, written as each call completes (a run, or a merge
//! copying its shards) and read back by the reports, `--resume`, `conform merge` and
//! `conform diff`.
//!
//! The run's writer flushes as a group at most [`FLUSH_INTERVAL`] after the oldest
//! unflushed line, so a crash loses no call that finished more than that interval before
//! it, and an interrupt loses nothing (the run flushes and syncs before it ends). One
//! write per group instead of one per call is most of what the journal cost per call.
//!
//! Reading: [`Lines`] hands each line over as written (`report.json` copies them
//! verbatim, a line cut short by a crash too); [`Records`] parses them, naming the file
//! and the line of one that is not a record, and skips blank lines.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

pub use conform_check::check::record::CallRecord;

/// The file's name in a run folder.
pub const FILE: &str = "results.jsonl";

/// How long a finished call may wait in memory before it is written to the file.
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// Lines held before they are written whatever the time: about a hundred records. With
/// the default 8 KiB, a run without latency wrote every twelfth call.
const BUFFER: usize = 64 * 1024;

/// `results.jsonl` in the run folder `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Writes `results.jsonl`, one record a line.
pub struct Writer {
    out: BufWriter<File>,
}

impl Writer {
    /// Creates (or empties) the file at `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(Writer {
            out: BufWriter::with_capacity(BUFFER, File::create(path)?),
        })
    }

    /// Buffers one record; a run flushes within [`FLUSH_INTERVAL`].
    pub fn write(&mut self, record: &CallRecord) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and makes the file durable: reports and merges read it next.
    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// `results.jsonl` read back line by line into one buffer: the single pass `report.json`,
/// `junit.xml` and `report.html` are all fed from at the end of a run.
pub struct Lines {
    reader: BufReader<File>,
    line: String,
}

impl Lines {
    /// Opens `results.jsonl` in the run folder `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        Self::open_file(&path(dir))
    }

    /// Opens the records file at `path`.
    pub fn open_file(path: &Path) -> io::Result<Self> {
        Ok(Lines {
            reader: BufReader::with_capacity(BUFFER, File::open(path)?),
            line: String::new(),
        })
    }

    /// Hands every line of `results.jsonl` in the run folder `dir` to `each`, in order,
    /// stopping at the first error.
    pub fn each(dir: &Path, mut each: impl FnMut(&str) -> io::Result<()>) -> io::Result<()> {
        let mut lines = Self::open(dir)?;
        while let Some(line) = lines.next_line()? {
            each(line)?;
        }
        Ok(())
    }

    /// The next line without its line break, as `BufRead::lines` gives it; `None` at the
    /// end of the file.
    pub fn next_line(&mut self) -> io::Result<Option<&str>> {
        self.line.clear();
        if self.reader.read_line(&mut self.line)? == 0 {
            return Ok(None);
        }
        Ok(Some(match self.line.strip_suffix('\n') {
            Some(line) => line.strip_suffix('\r').unwrap_or(line),
            None => &self.line,
        }))
    }
}

/// A line of `results.jsonl` that could not be read as a record, or the file itself.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The line (from 1) is not a call record: cut short by a crash, or not conform's.
    #[error("{path}:{line}: not a call record: {source}")]
    Record {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
}

/// The records of one `results.jsonl`, streamed: one line in memory at a time. Blank
/// lines are skipped; a line that is not a record is an error naming the file and the
/// line, after which reading may go on. An I/O error ends the records.
pub struct Records {
    lines: Lines,
    path: PathBuf,
    /// The number of the line last read, from 1.
    number: usize,
    failed: bool,
}

impl Records {
    /// The records of `results.jsonl` in the run folder `dir`.
    pub fn open(dir: &Path) -> Result<Self, ReadError> {
        Self::open_file(&path(dir))
    }

    /// The records of the file at `path`.
    pub fn open_file(path: &Path) -> Result<Self, ReadError> {
        let lines = Lines::open_file(path).map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Records {
            lines,
            path: path.to_path_buf(),
            number: 0,
            failed: false,
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Iterator for Records {
    /// The line's number (from 1) and its record.
    type Item = Result<(usize, CallRecord), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let line = match self.lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(source) => {
                    self.failed = true;
                    let path = self.path.clone();
                    return Some(Err(ReadError::Io { path, source }));
                }
            };
            self.number += 1;
            if line.trim().is_empty() {
                continue;
            }
            let number = self.number;
            return Some(
                serde_json::from_str(line)
                    .map(|record| (number, record))
                    .map_err(|source| ReadError::Record {
                        path: self.path.clone(),
                        line: number,
                        source,
                    }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_the_lines_bufread_gives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = "{\"a\":1}\n\n{\"b\":2}\r\n{\"cut\r";
        std::fs::write(path(dir.path()), text).expect("results");
        let mut lines = Lines::open(dir.path()).expect("open");
        let mut read = Vec::new();
        while let Some(line) = lines.next_line().expect("line") {
            read.push(line.to_string());
        }
        let by_std: Vec<String> = text.as_bytes().lines().map(|l| l.expect("line")).collect();
        assert_eq!(read, by_std);
        assert_eq!(read.len(), 4);
    }

    #[test]
    fn records_read_back_what_was_written_and_name_the_line_that_is_not_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = CallRecord::new("s", "a", "p", 0);
        let second = CallRecord::not_run("s", "b", "p", 1, "why".into());
        let mut writer = Writer::create(&path(dir.path())).expect("create");
        writer.write(&first).expect("write");
        writer.finish().expect("finish");
        // A blank line, a record, then a line cut short by a crash.
        let mut text = std::fs::read_to_string(path(dir.path())).expect("read");
        text.push('\n');
        text.push_str(&serde_json::to_string(&second).expect("json"));
        text.push_str("\n{\"suite\": \"s\", \"ca");
        std::fs::write(path(dir.path()), text).expect("write");

        let mut records = Records::open(dir.path()).expect("open");
        let (line, read) = records.next().expect("first").expect("a record");
        assert_eq!((line, read), (1, first));
        let (line, read) = records.next().expect("second").expect("a record");
        assert_eq!((line, read), (3, second));
        let err = records.next().expect("third").expect_err("cut short");
        assert!(matches!(err, ReadError::Record { line: 4, .. }), "{err}");
        assert!(
            err.to_string()
                .contains("results.jsonl:4: not a call record: "),
            "{err}"
        );
        assert!(records.next().is_none());

        let missing = Records::open(&dir.path().join("none"))
            .err()
            .expect("no file");
        assert!(matches!(missing, ReadError::Io { .. }), "{missing}");
    }
}
