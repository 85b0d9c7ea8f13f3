//! `results.jsonl`: one [`CallRecord`] per line, written as each call completes and
//! flushed as a group at most [`FLUSH_INTERVAL`] after the oldest unflushed line, so a
//! crash loses no call that finished more than that interval before it, and an interrupt
//! loses nothing (the run flushes and syncs before it ends). One write per group instead
//! of one per call is most of what the journal cost per call.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use conform_check::check::record::CallRecord;

/// How long a finished call may wait in memory before it is written to the file.
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// Lines held before they are written whatever the time: about a hundred records. With
/// the default 8 KiB, a run without latency wrote every twelfth call.
const BUFFER: usize = 64 * 1024;

pub struct ResultsWriter {
    out: BufWriter<File>,
}

impl ResultsWriter {
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(ResultsWriter {
            out: BufWriter::with_capacity(BUFFER, File::create(path)?),
        })
    }

    /// Buffers one record; the caller flushes within [`FLUSH_INTERVAL`].
    pub fn write(&mut self, record: &CallRecord) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}
