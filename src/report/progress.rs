//! Progress while a run goes: a bar on a terminal, plain periodic lines otherwise (CI).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const PLAIN_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    total: u64,
    done: u64,
    failed: u64,
    started: Instant,
    mode: Mode,
}

enum Mode {
    Off,
    Bar(ProgressBar),
    Plain { last: Instant },
}

impl Progress {
    /// `enabled = false` prints nothing at all.
    pub fn new(total: u64, enabled: bool) -> Self {
        let mode = if !enabled {
            Mode::Off
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} calls  {msg}  {per_sec}  eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Mode::Bar(bar)
        } else {
            Mode::Plain {
                last: Instant::now(),
            }
        };
        Progress {
            total,
            done: 0,
            failed: 0,
            started: Instant::now(),
            mode,
        }
    }

    pub fn record(&mut self, passed: bool) {
        self.done += 1;
        self.failed += u64::from(!passed);
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar(bar) => {
                bar.set_position(self.done);
                bar.set_message(format!("{} failed", self.failed));
            }
            Mode::Plain { last } => {
                if last.elapsed() >= PLAIN_EVERY {
                    *last = Instant::now();
                    eprintln!("{}", self.line());
                }
            }
        }
    }

    fn line(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let rate = self.done as f64 / secs;
        let eta = if rate > 0.0 {
            format!(
                "{:.0}s",
                (self.total.saturating_sub(self.done)) as f64 / rate
            )
        } else {
            "?".into()
        };
        format!(
            "conform: {}/{} calls, {} failed, {rate:.1}/s, eta {eta}",
            self.done, self.total, self.failed
        )
    }

    pub fn finish(self, complete: bool) {
        match self.mode {
            Mode::Off => {}
            Mode::Bar(bar) => bar.finish_and_clear(),
            Mode::Plain { .. } => {
                let status = if complete { "done" } else { "interrupted" };
                eprintln!("{} ({status})", self.line());
            }
        }
    }
}
