//! Reading case files one after another, as a pre-flight does: each name is looked up in
//! its folder, held open, and read into one buffer kept from case to case.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use super::CaseRef;

/// Reads cases into a buffer it reuses. For each case that is an open of its name in its
/// folder's descriptor, two reads and a close; `std::fs::read` also walked the path from
/// the working directory, asked the size (9 % of a pre-flight's time alone) and allocated.
#[derive(Debug, Default)]
pub(crate) struct CaseReader {
    /// The folder of the cases read last, and its descriptor.
    dir: Option<(Arc<PathBuf>, OwnedFd)>,
    name: String,
    buf: Vec<u8>,
}

impl CaseReader {
    /// The bytes of `case`'s file; an error is the one `std::fs::read` would give.
    pub(crate) fn read(&mut self, case: &CaseRef) -> io::Result<&[u8]> {
        self.buf.clear();
        if !matches!(&self.dir, Some((dir, _)) if Arc::ptr_eq(dir, &case.dir)) {
            self.dir = rustix::fs::open(
                case.dir.as_path(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()
            .map(|fd| (Arc::clone(&case.dir), fd));
        }
        let Some((_, dir)) = &self.dir else {
            // The folder cannot be opened as one: the path then says why, as it always did.
            self.buf = std::fs::read(case.path())?;
            return Ok(&self.buf);
        };
        self.name.clear();
        self.name.push_str(&case.id);
        self.name.push_str(".json");
        let file = rustix::fs::openat(
            dir,
            self.name.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // Read as a stream (not `File::read_to_end`, which asks the size first): with
        // room in the buffer, a case is one read and the read that finds the end.
        if self.buf.capacity() < 64 * 1024 {
            self.buf.reserve(64 * 1024);
        }
        io::Read::take(std::fs::File::from(file), u64::MAX).read_to_end(&mut self.buf)?;
        Ok(&self.buf)
    }
}
