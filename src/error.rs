//! Errors for people: an error and its causes in one line, each cause said once, and
//! whether a failure to read or write a file is among them (a full disk is not a
//! configuration error, and a CI step branches on the difference).

use std::error::Error;

/// `error` and its causes in one line. The library's errors already quote their source
/// (`cannot write X: No space left on device`), which printing every cause would say a
/// second time: a cause the line already holds is left out.
pub fn describe(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// An I/O failure is `error` or one of its causes.
pub fn caused_by_io(error: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(c) = cause {
        if c.is::<std::io::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full")
    }

    #[test]
    fn a_cause_already_quoted_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot write x: {source}")]
        struct Quoting {
            source: std::io::Error,
        }
        #[derive(Debug, thiserror::Error)]
        #[error("cannot write y")]
        struct Wrapping {
            source: std::io::Error,
        }
        assert_eq!(
            describe(&Quoting { source: io() }),
            "cannot write x: disk full"
        );
        assert_eq!(
            describe(&Wrapping { source: io() }),
            "cannot write y: disk full"
        );
        assert!(caused_by_io(&Wrapping { source: io() }));
        assert!(!caused_by_io(&std::fmt::Error));
    }
}
