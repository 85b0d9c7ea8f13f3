//! Running the orchestrator under test: `sh -c COMMAND` in its own process group with
//! the contract's `CONFORM_*` variables, its output appended to a log file, ready once
//! `/healthz` answers 200. A child that picks its own port announces where it listens: it
//! prints its URL on stdout ([`Launch::announces_url`]), which is read, kept in the log,
//! and becomes the address the health check asks. A restart kills the whole group with
//! SIGKILL, the way a crash would, and starts the same command again. Every way out (a
//! stop, a restart, a drop on an error or a panic) signals the whole group, by the id it
//! was started with: the server `sh` started may outlive `sh`, and a reaped `sh` has no id
//! left to ask.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use super::api::Api;

mod announce;

/// Why the orchestrator could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot open the orchestrator's log {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run `sh -c {command:?}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the process exited ({status}) before its health check answered 200; the end of its log ({log}):\n{tail}"
    )]
    Exited {
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error(
        "the process printed no http:// URL on stdout within {seconds} s; the end of its log ({log}):\n{tail}"
    )]
    NoUrl {
        seconds: u64,
        log: PathBuf,
        tail: String,
    },
    #[error("{url} did not answer 200 within {seconds} s; the end of its log ({log}):\n{tail}")]
    Unhealthy {
        url: String,
        seconds: u64,
        log: PathBuf,
        tail: String,
    },
}

/// How to start the orchestrator.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Run through `sh -c`.
    pub command: String,
    /// The `CONFORM_*` variables (added to the inherited environment).
    pub vars: Vec<(String, String)>,
    /// Where its stdout and stderr go (appended, across restarts).
    pub log: PathBuf,
    /// How long it may take to answer `/healthz`.
    pub startup: Duration,
    /// It chooses its own port and prints its URL on stdout: the first `http://` or
    /// `https://` URL printed is where it is reached (its origin; the health path kept).
    pub announces_url: bool,
}

/// A running orchestrator that the suite started.
pub struct Spawned {
    launch: Launch,
    /// Where it is reached; replaced when the child announces its URL.
    api: std::sync::Mutex<Api>,
    child: Mutex<Option<Running>>,
}

/// The `sh` started, and its process group's id (its pid when it started).
struct Running {
    child: Child,
    group: Option<u32>,
}

impl Spawned {
    /// Starts the orchestrator and waits until it is healthy.
    pub async fn start(launch: Launch, api: Api) -> Result<Spawned, SpawnError> {
        let spawned = Spawned {
            launch,
            api: std::sync::Mutex::new(api),
            child: Mutex::new(None),
        };
        spawned.launch().await?;
        Ok(spawned)
    }

    pub fn log(&self) -> &PathBuf {
        &self.launch.log
    }

    /// Where it is reached now (the announced URL's origin, when it announces one).
    pub fn url(&self) -> String {
        self.api().base().to_string()
    }

    fn api(&self) -> Api {
        self.api.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn launch(&self) -> Result<Duration, SpawnError> {
        let started = Instant::now();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.launch.log)
            .map_err(|source| SpawnError::Log {
                path: self.launch.log.clone(),
                source,
            })?;
        let log_error = |source| SpawnError::Log {
            path: self.launch.log.clone(),
            source,
        };
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(&self.launch.command)
            .envs(self.launch.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(if self.launch.announces_url {
                Stdio::piped()
            } else {
                Stdio::from(log.try_clone().map_err(log_error)?)
            })
            .stderr(log.try_clone().map_err(log_error)?)
            // Its own group, so that SIGKILL reaches the orchestrator even when `sh`
            // does not exec it.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| SpawnError::Spawn {
            command: self.launch.command.clone(),
            source,
        })?;
        let group = child.id();
        let mut announced = (child.stdout.take()).map(|out| announce::read(out, log));
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                signal_group(group, "KILL");
                return Err(SpawnError::Exited {
                    status: status.to_string(),
                    log: self.launch.log.clone(),
                    tail: self.log_tail(),
                });
            }
            if let Some(url) = announced.as_mut().and_then(announce::Url::take) {
                let api = self.api().at(&url);
                *self.api.lock().unwrap_or_else(|e| e.into_inner()) = api;
                announced = None;
            }
            if announced.is_none() && self.api().healthy().await {
                break;
            }
            if started.elapsed() > self.launch.startup {
                signal_group(group, "KILL");
                let _ = child.wait().await;
                if announced.is_some() {
                    return Err(SpawnError::NoUrl {
                        seconds: self.launch.startup.as_secs(),
                        log: self.launch.log.clone(),
                        tail: self.log_tail(),
                    });
                }
                return Err(SpawnError::Unhealthy {
                    url: self.api().health_url(),
                    seconds: self.launch.startup.as_secs(),
                    log: self.launch.log.clone(),
                    tail: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        *self.child.lock().await = Some(Running { child, group });
        Ok(started.elapsed())
    }

    /// Kills the orchestrator with SIGKILL (a crash, not a shutdown), starts it again
    /// and waits until it is healthy; answers how long that took.
    pub async fn restart(&self) -> Result<Duration, SpawnError> {
        let started = Instant::now();
        self.kill("KILL").await;
        self.launch().await?;
        Ok(started.elapsed())
    }

    /// If the orchestrator has exited on its own, how.
    pub async fn exited(&self) -> Option<ExitStatus> {
        let mut guard = self.child.lock().await;
        let running = guard.as_mut()?;
        running.child.try_wait().ok().flatten()
    }

    /// Starts it again after it exited on its own.
    pub async fn relaunch(&self) -> Result<Duration, SpawnError> {
        self.kill("KILL").await;
        self.launch().await
    }

    /// Stops it: SIGTERM to the group, then SIGKILL to whatever of the group is still
    /// there after three seconds (`sh` may be gone while the server it started is not).
    pub async fn stop(&self) {
        let mut guard = self.child.lock().await;
        if let Some(mut running) = guard.take() {
            signal_group(running.group, "TERM");
            let deadline = Instant::now() + Duration::from_secs(3);
            let _ = tokio::time::timeout(Duration::from_secs(3), running.child.wait()).await;
            while group_alive(running.group) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            signal_group(running.group, "KILL");
            let _ = running.child.wait().await;
        }
    }

    async fn kill(&self, signal: &str) {
        let mut guard = self.child.lock().await;
        if let Some(mut running) = guard.take() {
            signal_group(running.group, signal);
            let _ = running.child.wait().await;
        }
    }

    /// The last lines of the orchestrator's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.launch.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Spawned {
    /// A suite that stops unexpectedly (a panic) must not leave the orchestrator running.
    fn drop(&mut self) {
        if let Ok(guard) = self.child.try_lock()
            && let Some(running) = guard.as_ref()
        {
            signal_group(running.group, "KILL");
        }
    }
}

/// Sends `signal` to the whole process group `group` (the child's pid when it started,
/// since it was started with `process_group(0)`); whether any process received it.
fn signal_group(group: Option<u32>, signal: &str) -> bool {
    let Some(group) = group else { return false };
    std::process::Command::new("kill")
        .arg("-s")
        .arg(signal)
        .arg("--")
        .arg(format!("-{group}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether any process of `group` is left.
fn group_alive(group: Option<u32>) -> bool {
    signal_group(group, "0")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A health check that answers 200 to anything.
    async fn healthy_api() -> Api {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                    let _ = stream.write_all(ok).await;
                });
            }
        });
        Api::new(&format!("http://{addr}")).unwrap()
    }

    /// Whether `pid` is a live process (a zombie nobody reaped yet is not).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
            !state.starts_with('Z')
        })
    }

    /// Starts `sh -c` running, in the background, a server that ignores SIGTERM (as a
    /// gateway busy shutting down does), then `then`; answers the server's pid.
    async fn start(dir: &Path, then: &str) -> (Spawned, u32) {
        let pidfile = dir.join("server.pid");
        let _ = std::fs::remove_file(&pidfile);
        let launch = Launch {
            command: format!(
                "sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 300' & {then}",
                pidfile.display()
            ),
            vars: Vec::new(),
            log: dir.join("log"),
            startup: Duration::from_secs(10),
            announces_url: false,
        };
        let spawned = Spawned::start(launch, healthy_api().await).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pid = std::fs::read_to_string(&pidfile).unwrap_or_default();
            if let Ok(pid) = pid.trim().parse::<u32>() {
                assert!(alive(pid));
                return (spawned, pid);
            }
            assert!(Instant::now() < deadline, "the server never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn gone(pid: u32) -> bool {
        for _ in 0..100 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn no_process_of_the_group_survives_a_stop_a_drop_or_its_shell() {
        let dir = tempfile::tempdir().unwrap();
        // A stop: `sh` dies of SIGTERM at once, the server ignores it.
        let (spawned, pid) = start(dir.path(), "wait").await;
        spawned.stop().await;
        assert!(gone(pid).await, "a stop left {pid} running");

        // A drop without a stop: an error or a panic on the way out.
        let (spawned, pid) = start(dir.path(), "wait").await;
        drop(spawned);
        assert!(gone(pid).await, "a drop left {pid} running");

        // `sh` exits on its own (and is reaped), the server it started does not.
        let (spawned, pid) = start(dir.path(), "sleep 0.3").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while spawned.exited().await.is_none() {
            assert!(Instant::now() < deadline, "sh never exited");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(alive(pid));
        spawned.stop().await;
        assert!(gone(pid).await, "a stop after sh exited left {pid} running");
    }
}
