//! Every case's bytes as a run's pre-flight read them, for the calls to send.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

/// The bytes of a suite's cases as its pre-flight read them: the first ones, up to
/// [`HeldCases::LIMIT`] in all, in one buffer, and the rest in an unnamed temporary file,
/// which lives in the page cache rather than in the process. A run sends every case
/// without opening its file again (a read from the temporary file is one system call; a
/// case file's open, size, two reads and close are five), and sends exactly the bytes the
/// suite's digest was made of, even if a case file changes while the run goes on.
///
/// A case the pre-flight could not read, or could not keep (no temporary file could be
/// made or written), is not held, nor is any after it: those are read from their files
/// when their turn comes.
#[derive(Debug, Default)]
pub struct HeldCases {
    bytes: Vec<u8>,
    spill: Spill,
    /// Where each held case ends, counted through `bytes` and on through the spill file:
    /// case `i` is held when `i < ends.len()`. Four bytes a case: cases past the first
    /// 4 GiB are not held.
    ends: Vec<u32>,
    /// A case was not held: none after it is.
    full: bool,
}

#[derive(Debug, Default)]
enum Spill {
    /// Nothing past the buffer yet.
    #[default]
    None,
    Writing(BufWriter<File>),
    Written(File),
}

impl HeldCases {
    /// At most this many bytes of cases are held in memory (about 3,500 cases of 150
    /// bytes); the rest go to the spill file. A run's peak memory with a simulated
    /// provider at 100,000 calls stays under 32 MiB.
    pub const LIMIT: usize = 512 * 1024;

    /// Room for where `cases` more cases end, made once: grown by doubling, the list
    /// of 100,000 cases took 512 KiB for 400 KB.
    pub(crate) fn expect(&mut self, cases: usize) {
        self.ends.reserve_exact(cases);
    }

    /// Holds the next case's bytes.
    pub(crate) fn hold(&mut self, case: &[u8]) {
        if self.full {
            return;
        }
        let start = self.ends.last().copied().unwrap_or(0);
        let Some(end) = u32::try_from(case.len())
            .ok()
            .and_then(|len| start.checked_add(len))
        else {
            return self.skip();
        };
        if matches!(self.spill, Spill::None) {
            if end as usize <= Self::LIMIT {
                self.bytes.extend_from_slice(case);
                self.ends.push(end);
                return;
            }
            // 64 KiB between writes: a few hundred system calls for 100,000 cases.
            match tempfile::tempfile() {
                Ok(file) => self.spill = Spill::Writing(BufWriter::with_capacity(1 << 16, file)),
                Err(e) => return self.stop(&e),
            }
        }
        if let Spill::Writing(out) = &mut self.spill {
            match out.write_all(case) {
                Ok(()) => self.ends.push(end),
                Err(e) => self.stop(&e),
            }
        }
    }

    /// The next case could not be read: none from here on is held.
    pub(crate) fn skip(&mut self) {
        self.full = true;
    }

    /// The spill file could not be made or written: no case from here on is held, nor
    /// any in the file.
    fn stop(&mut self, why: &std::io::Error) {
        tracing::debug!(error = %why, "cases past the first ones are read from their files again");
        self.full = true;
        self.ends.retain(|&end| end as usize <= self.bytes.len());
        self.spill = Spill::None;
    }

    /// Ends the pre-flight's writing: the spill file is read from now on.
    pub(crate) fn finish(&mut self) {
        if let Spill::Writing(out) = std::mem::take(&mut self.spill) {
            match out.into_inner() {
                Ok(file) => self.spill = Spill::Written(file),
                Err(e) => self.stop(e.error()),
            }
        }
    }

    /// Case `index`'s bytes, when they are held. `None` also when reading the spill file
    /// back fails: the case is then read from its own file.
    pub fn get(&self, index: usize) -> Option<Cow<'_, [u8]>> {
        let end = *self.ends.get(index)?;
        let start = match index.checked_sub(1) {
            Some(before) => self.ends[before],
            None => 0,
        };
        let (start, end) = (u64::from(start), u64::from(end));
        let in_memory = self.bytes.len() as u64;
        if end <= in_memory {
            return self
                .bytes
                .get(start as usize..end as usize)
                .map(Cow::Borrowed);
        }
        let Spill::Written(file) = &self.spill else {
            return None;
        };
        let mut case = vec![0; usize::try_from(end - start).ok()?];
        file.read_exact_at(&mut case, start - in_memory).ok()?;
        Some(Cow::Owned(case))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(cases: &[&[u8]]) -> HeldCases {
        let mut held = HeldCases::default();
        for case in cases {
            held.hold(case);
        }
        held.finish();
        held
    }

    #[test]
    fn cases_past_the_limit_are_held_in_the_spill_file_in_order() {
        let big = vec![b'a'; HeldCases::LIMIT / 2 - 10];
        let bigger = vec![b'b'; HeldCases::LIMIT];
        let cases: [&[u8]; 5] = [&big, &big, &bigger, b"{}", b""];
        let held = held(&cases);
        for (i, case) in cases.iter().enumerate() {
            assert_eq!(held.get(i).as_deref(), Some(*case), "case {i}");
        }
        assert_eq!(held.get(cases.len()), None);
        assert!(held.bytes.len() <= HeldCases::LIMIT);
        assert!(
            matches!(held.spill, Spill::Written(_)),
            "the cases past the limit are in the file"
        );
    }

    #[test]
    fn a_case_that_fits_after_one_that_did_not_is_not_put_in_memory_out_of_order() {
        let big = vec![b'a'; HeldCases::LIMIT - 10];
        let held = held(&[&big, &[b'b'; 20], b"{}"]);
        assert_eq!(
            held.bytes.len(),
            big.len(),
            "the small case went to the file"
        );
        assert_eq!(held.get(2).as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn after_a_case_that_was_not_held_none_is() {
        let mut held = HeldCases::default();
        held.hold(&vec![b'a'; HeldCases::LIMIT]);
        held.hold(b"in the file");
        held.skip();
        held.hold(b"after the one not read");
        held.finish();
        assert_eq!(held.get(1).as_deref(), Some(&b"in the file"[..]));
        assert_eq!(held.get(2), None);
    }

    #[test]
    fn a_spill_that_cannot_be_written_holds_nothing_from_it() {
        let mut held = HeldCases::default();
        held.hold(&vec![b'a'; HeldCases::LIMIT]);
        held.hold(b"in the file");
        held.stop(&std::io::Error::other("disk full"));
        held.finish();
        assert!(held.get(0).is_some(), "the buffer stays");
        assert_eq!(held.get(1), None, "read from its own file instead");
    }
}
