//! `results.jsonl`: one [`CallRecord`] per line, flushed as each call completes, so a
//! crash or an interrupt loses nothing that finished.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::check::record::CallRecord;

pub struct ResultsWriter {
    out: BufWriter<File>,
}

impl ResultsWriter {
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(ResultsWriter {
            out: BufWriter::new(File::create(path)?),
        })
    }

    pub fn write(&mut self, record: &CallRecord) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}
