//! Progress while a run goes: a bar on a terminal, plain periodic lines otherwise (CI).
//!
//! Both show the same status text, made by [`status`]: a person who watched the bar and
//! then reads a CI log sees the same numbers in the same form.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use conform_check::check::record::CallRecord;

const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Counts calls as they complete and shows them.
pub struct Progress {
    total: u64,
    done: u64,
    counts: Counts,
    started: Instant,
    mode: Mode,
    /// Each provider's pacer, shown once it has learnt a limit or met a 429.
    pacing: Vec<Arc<super::Target>>,
}

enum Mode {
    Off,
    Bar(ProgressBar),
    Plain {
        last: Instant,
        out: Box<dyn Write + Send>,
    },
}

impl Progress {
    /// `enabled = false` prints nothing at all.
    pub fn new(total: u64, enabled: bool) -> Self {
        let mode = if !enabled {
            Mode::Off
        } else if std::io::stderr().is_terminal() {
            Mode::bar(total, ProgressDrawTarget::stderr())
        } else {
            Mode::Plain {
                last: Instant::now(),
                out: Box::new(std::io::stderr()),
            }
        };
        Progress::with_mode(total, mode)
    }

    fn with_mode(total: u64, mode: Mode) -> Self {
        let progress = Progress {
            total,
            done: 0,
            counts: Counts::default(),
            started: Instant::now(),
            mode,
            pacing: Vec::new(),
        };
        if let Mode::Bar(bar) = &progress.mode {
            bar.set_message(progress.status());
        }
        progress
    }

    /// Shows how each of `targets` is paced (the rate it keeps to, the limit learnt).
    pub fn with_pacing(mut self, targets: &[Arc<super::Target>]) -> Self {
        self.pacing = targets.to_vec();
        self
    }

    /// One call ended as `record` says: answered (passed or failed), or never sent.
    pub fn record(&mut self, record: &CallRecord) {
        self.done += 1;
        self.counts.add(record);
        // The status is formatted only when it is shown: not at all with progress off,
        // once in five seconds in a pipe.
        let (done, total, counts, started) = (self.done, self.total, self.counts, self.started);
        let pacing = &self.pacing;
        let status = || status(done, total, counts, started.elapsed()) + &pacing_text(pacing);
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar(bar) => {
                bar.set_message(status());
                bar.set_position(done);
            }
            Mode::Plain { last, out } => {
                if last.elapsed() >= PLAIN_EVERY {
                    *last = Instant::now();
                    let _ = writeln!(out, "conform: {}", status());
                }
            }
        }
    }

    fn status(&self) -> String {
        status(self.done, self.total, self.counts, self.started.elapsed())
            + &pacing_text(&self.pacing)
    }

    /// The run ended, complete or interrupted.
    pub fn finish(self, complete: bool) {
        let status = self.status();
        match self.mode {
            Mode::Off => {}
            Mode::Bar(bar) => bar.finish_and_clear(),
            Mode::Plain { mut out, .. } => {
                let how = if complete { "done" } else { "interrupted" };
                let _ = writeln!(out, "conform: {status} ({how})");
            }
        }
    }
}

impl Mode {
    fn bar(total: u64, target: ProgressDrawTarget) -> Mode {
        let bar = ProgressBar::with_draw_target(Some(total), target);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Mode::Bar(bar)
    }
}

/// `; openai: 9.7 req/s (limit 10.0/s learnt), 4 in flight` for each provider whose
/// answers stated a limit or that answered 429; nothing for the others.
fn pacing_text(targets: &[Arc<super::Target>]) -> String {
    let mut out = String::new();
    for target in targets {
        let pace = target.endpoint.pace();
        if pace.requests.is_some() || pace.tokens.is_some() || pace.throttled > 0 {
            out.push_str(&format!("; {}: {pace}", target.endpoint.config.name));
        }
    }
    out
}

/// How the calls done so far ended, besides passing: a call never sent (its verdict
/// decided, its provider stopped, the budget) did not fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    failed: u64,
    saved: u64,
    not_sent: u64,
}

impl Counts {
    fn add(&mut self, record: &CallRecord) {
        if record.saved {
            self.saved += 1;
        } else if record.not_run.is_some() {
            self.not_sent += 1;
        } else if !record.passed {
            self.failed += 1;
        }
    }
}

/// `12/50 calls, 1 failed, 2.4/s, eta 16s` (and `, 30 saved` or `, 3 not sent` after the
/// failures when there are any): the one form of the status, on a terminal and in a log.
fn status(done: u64, total: u64, counts: Counts, elapsed: Duration) -> String {
    let rate = done as f64 / elapsed.as_secs_f64().max(1e-9);
    let eta = if rate > 0.0 {
        format!("{:.0}s", total.saturating_sub(done) as f64 / rate)
    } else {
        "?".into()
    };
    let mut text = format!("{done}/{total} calls, {} failed", counts.failed);
    if counts.saved > 0 {
        text.push_str(&format!(", {} saved", counts.saved));
    }
    if counts.not_sent > 0 {
        text.push_str(&format!(", {} not sent", counts.not_sent));
    }
    text + &format!(", {rate:.1}/s, eta {eta}")
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// A terminal that keeps what was drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.write_str(s)
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            if !s.trim().is_empty() {
                self.0.lock().unwrap().push(s.to_string());
            }
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A pipe that keeps what was written to it.
    #[derive(Clone, Default)]
    struct Pipe(Arc<Mutex<Vec<u8>>>);

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The status with every number replaced by `#`: the form, not the values, which
    /// depend on the clock.
    fn form(text: &str) -> String {
        let mut out = String::new();
        for c in text.chars() {
            if c.is_ascii_digit() {
                if !out.ends_with('#') {
                    out.push('#');
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    fn failed(failed: u64) -> Counts {
        Counts {
            failed,
            ..Counts::default()
        }
    }

    #[test]
    fn the_status_has_one_decimal_rate_and_whole_seconds() {
        let s = status(12, 50, failed(1), Duration::from_secs(5));
        assert_eq!(s, "12/50 calls, 1 failed, 2.4/s, eta 16s");
        assert_eq!(
            status(0, 50, failed(0), Duration::ZERO),
            "0/50 calls, 0 failed, 0.0/s, eta ?"
        );
    }

    /// A pair decided after one failure saves its other calls: they did not fail.
    #[test]
    fn calls_never_sent_are_not_counted_as_failed() {
        let mut counts = Counts::default();
        let mut failing = CallRecord::new("s", "c", "p", 0);
        failing.passed = false;
        counts.add(&failing);
        let mut passing = CallRecord::new("s", "c", "p", 1);
        passing.passed = true;
        counts.add(&passing);
        for repeat in 2..36 {
            let not_sent = CallRecord::not_run("s", "c", "p", repeat, "decided".into());
            counts.add(&CallRecord {
                saved: repeat < 34,
                ..not_sent
            });
        }
        assert_eq!(
            status(36, 36, counts, Duration::from_secs(1)),
            "36/36 calls, 1 failed, 32 saved, 2 not sent, 36.0/s, eta 0s"
        );
    }

    #[test]
    fn the_rate_reads_the_same_on_a_terminal_and_in_a_pipe() {
        let screen = Screen::default();
        let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
        let mut on_terminal = Progress::with_mode(10, Mode::bar(10, target));
        let pipe = Pipe::default();
        let mut in_pipe = Progress::with_mode(
            10,
            Mode::Plain {
                last: Instant::now(),
                out: Box::new(pipe.clone()),
            },
        );
        for passed in [true, false, true] {
            std::thread::sleep(Duration::from_millis(30));
            let mut record = CallRecord::new("s", "c", "p", 0);
            record.passed = passed;
            on_terminal.record(&record);
            in_pipe.record(&record);
        }
        if let Mode::Bar(bar) = &on_terminal.mode {
            bar.force_draw();
        }
        on_terminal.finish(true);
        in_pipe.finish(true);

        let drawn = screen.0.lock().unwrap().last().cloned().unwrap_or_default();
        let logged = String::from_utf8(pipe.0.lock().unwrap().clone()).unwrap();
        let logged = logged.trim_end();
        let on_bar = &drawn[drawn.find("3/10").expect(&drawn)..];
        let in_log = logged
            .strip_prefix("conform: ")
            .and_then(|l| l.strip_suffix(" (done)"))
            .expect(logged);
        assert!(on_bar.starts_with("3/10 calls, 1 failed, "), "{drawn}");
        assert_eq!(form(on_bar.trim_end()), form(in_log), "{drawn}\n{logged}");
        assert_eq!(form(in_log), "#/# calls, # failed, #.#/s, eta #s");
    }
}
