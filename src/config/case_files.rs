//! A case file, read as the small file it is: without asking its size first.
//!
//! Every call of a run may read its case (past the bytes the pre-flight holds), and the
//! pre-flight reads every case, so a read is on the hot path: `std::fs::read` asks the
//! file's size before reading (a `statx`), one system call of five, though a case is a few
//! hundred bytes that one `read` into a buffer of [`FIRST_READ`] bytes takes whole
//! (100,000 cases: 4.1 → 3.7 µs a file).
//!
//! The pre-flight reads its cases on the calling thread, not ahead on a second one: from
//! the first thread a process starts, glibc's malloc takes its locked path for every
//! allocation that follows, and a run's calls then cost more than the reads saved
//! (BENCHMARKS.md, "Reading the cases").

use std::io::{self, Read};
use std::path::Path;

/// The first read's buffer: most cases fit, and a larger one is read on in larger reads.
const FIRST_READ: usize = 4096;

/// The bytes of the file at `path`, as `std::fs::read` gives them, without asking the
/// file's size first.
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    /// Reads through `File::read` alone: `File`'s own `read_to_end` asks the size first.
    struct Unsized(std::fs::File);
    impl Read for Unsized {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }
    }
    let mut bytes = Vec::with_capacity(FIRST_READ);
    Unsized(std::fs::File::open(path)?).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_as_std_reads_it_at_every_size_around_the_first_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("case.json");
        for size in [
            0,
            1,
            FIRST_READ - 1,
            FIRST_READ,
            FIRST_READ + 1,
            3 * FIRST_READ + 7,
        ] {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            std::fs::write(&file, &bytes).expect("case");
            assert_eq!(read(&file).expect("read"), bytes, "{size} bytes");
        }
        let missing = read(&dir.path().join("missing.json")).map_err(|e| e.kind());
        assert_eq!(missing, Err(io::ErrorKind::NotFound));
    }
}
