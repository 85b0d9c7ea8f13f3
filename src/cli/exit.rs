//! Exit codes: one kind of ending each, the same in every command, so a CI step can
//! branch on them.

use std::process::ExitCode;

use conform::run::Overall;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Every selected provider is conformant (for `gate`, failover is permitted).
    Ok = 0,
    /// A provider is not conformant (for `gate`, failover is denied).
    Failed = 1,
    /// A usage or configuration error.
    Usage = 2,
    /// Inconclusive: a provider could not be reached or authenticated, too many
    /// transport errors, or the run was interrupted. Nothing was allowlisted.
    Inconclusive = 3,
    /// A file could not be read or written (a full disk, a folder without write
    /// permission): what was concluded may not all be on disk.
    Io = 4,
}

impl Exit {
    /// The exit of a command that stopped on `error`: an I/O failure anywhere in its
    /// chain is [`Exit::Io`], anything else a usage or configuration error.
    pub fn of_error(error: &anyhow::Error) -> Exit {
        if conform::error::caused_by_io(error.as_ref()) {
            Exit::Io
        } else {
            Exit::Usage
        }
    }
}

/// An error and its causes in one line, each cause once ([`conform::error::describe`]).
pub fn describe(error: &anyhow::Error) -> String {
    conform::error::describe(error.as_ref())
}

impl From<Overall> for Exit {
    fn from(overall: Overall) -> Exit {
        match overall {
            Overall::Conformant | Overall::Recorded => Exit::Ok,
            Overall::Nonconformant => Exit::Failed,
            Overall::Misconfigured => Exit::Usage,
            Overall::Inconclusive => Exit::Inconclusive,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_failure_under_any_context_is_its_own_exit() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device");
        let error = anyhow::Error::new(io).context("cannot write reports/x/report.json");
        assert_eq!(Exit::of_error(&error), Exit::Io);
        assert_eq!(Exit::of_error(&anyhow::anyhow!("bad flag")), Exit::Usage);
    }
}
