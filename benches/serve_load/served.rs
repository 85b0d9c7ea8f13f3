//! `conform serve` as a child process, and what the kernel says it costs: resident memory
//! (now and at its peak) and open file descriptors, read from `/proc`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The binary under test: `CONFORM_SERVE_BIN`, else the one this build made.
pub fn serve_bin() -> PathBuf {
    std::env::var_os("CONFORM_SERVE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_conform")))
}

/// One running `conform serve`, killed when dropped.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// Starts `bin serve` on a free loopback port with `providers` and `database_url`,
    /// plus `env`, and waits until it says where it listens.
    pub fn start(
        bin: &Path,
        dir: &Path,
        providers: &str,
        database_url: &str,
        env: &[(&str, String)],
    ) -> Served {
        let mut command = Command::new(bin);
        command
            .args(["serve", "--unverified-allowlist"])
            .env("CONFORM_LISTEN", "127.0.0.1:0")
            .env("CONFORM_PROVIDERS", providers)
            .env("CONFORM_DATABASE_URL", database_url)
            .env("CONFORM_ALLOWLIST", dir.join("allowlist.json"))
            .env("CONFORM_ROOT", dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start conform serve");
        let stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        // Drains stderr for the process's whole life, so it never blocks on a full pipe;
        // keeps the last lines for a failure message.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("conform serve: listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                if log.len() > 200 {
                    log.remove(0);
                }
                log.push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "conform serve did not start: {:?}",
                    log.lock().unwrap_or_else(|p| p.into_inner())
                )
            });
        Served {
            child,
            base: format!("http://{addr}"),
            addr,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the process wrote to stderr.
    pub fn log_tail(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Resident memory now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        status_kib(self.pid(), "VmRSS:")
    }

    /// The peak resident memory since the process started, in KiB (`VmHWM`).
    pub fn peak_kib(&self) -> u64 {
        status_kib(self.pid(), "VmHWM:")
    }

    /// Open file descriptors.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// KiB as MiB, for tables.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
