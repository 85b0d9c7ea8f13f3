//! Reports out: `results.jsonl` (streamed during the run), `report.json` (written at
//! the end by streaming the results back, so memory stays flat), `junit.xml` for CI
//! test reporters, `summary.md` for a CI job summary, `report.html` for people, and the
//! terminal summary with a progress display.

pub mod cost;
pub mod differential;
pub mod evidence;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod terminal;

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// `results.jsonl` read back line by line into one buffer: the single pass `report.json`,
/// `junit.xml` and `report.html` are all fed from at the end of a run.
pub struct ResultLines {
    reader: BufReader<File>,
    line: String,
}

impl ResultLines {
    /// `results.jsonl` in the run folder `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("results.jsonl")
    }

    /// Opens `results.jsonl` in the run folder `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        Ok(ResultLines {
            reader: BufReader::with_capacity(64 * 1024, File::open(Self::path(dir))?),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_the_lines_bufread_gives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = "{\"a\":1}\n\n{\"b\":2}\r\n{\"cut\r";
        std::fs::write(dir.path().join("results.jsonl"), text).expect("results");
        let mut lines = ResultLines::open(dir.path()).expect("open");
        let mut read = Vec::new();
        while let Some(line) = lines.next_line().expect("line") {
            read.push(line.to_string());
        }
        let by_std: Vec<String> = text.as_bytes().lines().map(|l| l.expect("line")).collect();
        assert_eq!(read, by_std);
        assert_eq!(read.len(), 4);
    }
}
