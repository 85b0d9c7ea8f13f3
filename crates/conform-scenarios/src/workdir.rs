//! The folder a `conform scenarios` run works in: the database, the allowlist and the
//! orchestrator's log.

use std::io;
use std::path::{Path, PathBuf};

/// A fresh directory for the database, the allowlist and the orchestrator's log. It is
/// removed when dropped unless kept, so that no way out of a run (an early error
/// included) leaves a `conform-scenarios-*` folder behind that nobody was told about.
pub(crate) struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A new folder under `parent` (the temporary directory by default); with `keep`,
    /// it stays after the run.
    pub(crate) fn create(parent: Option<&Path>, keep: bool) -> io::Result<WorkDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let path = parent.join(format!(
            "conform-scenarios-{}-{nanos:09}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
        })?;
        Ok(WorkDir { path, keep })
    }

    /// Keeps it, for a person to look into; the caller prints where.
    pub(crate) fn keep(&mut self) -> &Path {
        self.keep = true;
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!(
                "warning: cannot remove the working directory {}: {e}",
                self.path.display()
            );
        }
    }
}

/// A loopback address no one listens on now, for the orchestrator under test.
pub(crate) fn free_port() -> std::io::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}
