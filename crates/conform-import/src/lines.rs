//! Reading an input file line by line with a cap on each line, so memory stays bounded
//! whatever a file holds, and every line is known by its number and byte offset.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::ImportError;

/// One line of an input file.
#[derive(Debug)]
pub struct Line<'a> {
    /// 1-based.
    pub number: usize,
    /// Where the line starts in the file.
    pub offset: u64,
    /// The line, without its ending.
    pub text: &'a str,
}

/// The lines of one file, each at most `max` bytes.
pub struct Lines {
    path: PathBuf,
    reader: BufReader<File>,
    max: usize,
    number: usize,
    offset: u64,
    buf: Vec<u8>,
}

impl Lines {
    /// Opens `path`, whose lines may be at most `max` bytes.
    pub fn open(path: &Path, max: usize) -> Result<Lines, ImportError> {
        let file = File::open(path).map_err(|source| ImportError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Lines {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(64 * 1024, file),
            max,
            number: 0,
            offset: 0,
            buf: Vec::new(),
        })
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next line without its line ending; `None` at the end of the file. A line
    /// longer than the cap, or not UTF-8, is an error naming it.
    pub fn next_line(&mut self) -> Result<Option<Line<'_>>, ImportError> {
        self.buf.clear();
        let start = self.offset;
        let read = read_capped(&mut self.reader, &mut self.buf, self.max).map_err(|source| {
            ImportError::Read {
                path: self.path.clone(),
                source,
            }
        })?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        self.offset += read as u64;
        let text = trim_ending(&self.buf);
        if text.len() > self.max {
            return Err(ImportError::LineTooLong {
                path: self.path.clone(),
                line: self.number,
                max: self.max,
            });
        }
        let text = std::str::from_utf8(text).map_err(|e| ImportError::Malformed {
            path: self.path.clone(),
            line: self.number,
            field: "(line)".into(),
            message: format!("not UTF-8 at byte {}", e.valid_up_to() + 1),
        })?;
        Ok(Some(Line {
            number: self.number,
            offset: start,
            text,
        }))
    }
}

/// Reads one line into `buf`, keeping at most `max + 2` bytes of it (enough to tell an
/// over-long line from one of exactly `max` bytes and its CR LF); the rest of an
/// over-long line is consumed and dropped, so the offset stays right. The bytes read.
fn read_capped<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match memchr(available) {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let room = (max + 2).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        reader.consume(used);
        total += used;
        if done {
            return Ok(total);
        }
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

fn trim_ending(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

/// Reads the line starting at `offset` of `file` (an offset [`Lines`] gave).
pub fn line_at(
    file: &mut File,
    path: &Path,
    offset: u64,
    max: usize,
) -> Result<String, ImportError> {
    let io = |source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    };
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut reader = BufReader::new(file.by_ref());
    let mut buf = Vec::new();
    read_capped(&mut reader, &mut buf, max).map_err(io)?;
    Ok(String::from_utf8_lossy(trim_ending(&buf)).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_with_offsets_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "ab\r\n\ncdef\n0123456789\nxy").unwrap();
        let mut lines = Lines::open(&path, 5).unwrap();
        let a = lines.next_line().unwrap().unwrap();
        assert_eq!((a.number, a.offset, a.text), (1, 0, "ab"));
        let b = lines.next_line().unwrap().unwrap();
        assert_eq!((b.number, b.offset, b.text), (2, 4, ""));
        let c = lines.next_line().unwrap().unwrap();
        assert_eq!((c.number, c.offset, c.text), (3, 5, "cdef"));
        match lines.next_line() {
            Err(ImportError::LineTooLong {
                line: 4, max: 5, ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let e = lines.next_line().unwrap().unwrap();
        assert_eq!((e.number, e.offset, e.text), (5, 21, "xy"));
        assert!(lines.next_line().unwrap().is_none());
        let mut file = File::open(&path).unwrap();
        assert_eq!(line_at(&mut file, &path, 5, 5).unwrap(), "cdef");
    }
}
