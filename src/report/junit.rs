//! `junit.xml` for CI test reporters: one test suite per (suite, provider), one test case
//! per call, failures carrying the first finding's code and message.
//!
//! Written streamed, in memory bounded by the number of pairs, not calls: each call's
//! `<testcase>` goes to its pair's spool as the results are read back, and the spools are
//! then joined under each pair's `<testsuite>` (whose counts head it, so they must be known
//! before its test cases are written). The spools stay in memory up to `SPOOL_MEMORY`
//! bytes in all (about 7,000 passing calls) and go to files under the run's folder past
//! that: a run of a few thousand calls creates no file but `junit.xml`. The output is what
//! quick-junit would serialize for the same test cases, byte for byte.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where the per-pair spools go once they outgrow memory; removed afterwards.
const SPOOL_DIR: &str = ".junit-spool";

/// The spools' bytes held in memory, all pairs together, before they go to files.
const SPOOL_MEMORY: usize = 512 * 1024;

/// One (suite, provider)'s counts and the spool its test cases go to.
struct Pair {
    tests: u64,
    failures: u64,
    skipped: u64,
    spool: Spool,
}

enum Spool {
    Memory(Vec<u8>),
    File { path: PathBuf, out: BufWriter<File> },
}

/// Every pair's spool, and where they go once memory is full.
struct Spools {
    dir: PathBuf,
    /// Bytes in memory spools, all pairs together.
    in_memory: usize,
    limit: usize,
    /// Spool files made so far: once there is one, every spool is a file.
    files: usize,
}

impl Spools {
    fn new_spool(&mut self) -> io::Result<Spool> {
        if self.files > 0 {
            self.file()
        } else {
            Ok(Spool::Memory(Vec::new()))
        }
    }

    fn file(&mut self) -> io::Result<Spool> {
        if self.files == 0 {
            std::fs::create_dir_all(&self.dir)?;
        }
        let path = self.dir.join(format!("{}.xml", self.files));
        self.files += 1;
        let out = BufWriter::new(File::create(&path)?);
        Ok(Spool::File { path, out })
    }

    /// Appends `bytes` to `pair`'s spool; past the limit, every spool goes to a file.
    fn append(
        &mut self,
        pairs: &mut [((String, String), Pair)],
        index: usize,
        bytes: &[u8],
    ) -> io::Result<()> {
        if self.files == 0 && self.in_memory + bytes.len() > self.limit {
            // `index`'s pair is among them: it was made before its first test case.
            for (_, pair) in pairs.iter_mut() {
                if let Spool::Memory(held) = &mut pair.spool {
                    let held = std::mem::take(held);
                    let mut spool = self.file()?;
                    spool.write_all(&held)?;
                    pair.spool = spool;
                }
            }
        }
        let Some((_, pair)) = pairs.get_mut(index) else {
            return Ok(());
        };
        if matches!(pair.spool, Spool::Memory(_)) {
            self.in_memory += bytes.len();
        }
        pair.spool.write_all(bytes)
    }
}

impl Spool {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Spool::Memory(held) => {
                held.extend_from_slice(bytes);
                Ok(())
            }
            Spool::File { out, .. } => out.write_all(bytes),
        }
    }
}

/// Writes `junit.xml` beside `results.jsonl`, reading the results back line by line.
pub fn write(dir: &Path, run_id: &str) -> io::Result<PathBuf> {
    write_within(dir, run_id, SPOOL_MEMORY).map(|(path, _)| path)
}

/// [`write`], with the spools held in `limit` bytes of memory; also says how many spool
/// files it made.
fn write_within(dir: &Path, run_id: &str, limit: usize) -> io::Result<(PathBuf, usize)> {
    let mut report = JunitReport::within(dir, limit);
    crate::results::Lines::each(dir, |line| report.call(line).map(drop))?;
    let files = report.spools.files;
    Ok((report.finish(run_id)?, files))
}

/// `junit.xml` as it is written: each call's `<testcase>` goes to its pair's spool as the
/// results are read, and [`JunitReport::finish`] joins the spools under their pairs.
/// The spools are scratch: dropped, written or not, it removes any it put on disk.
pub struct JunitReport {
    dir: PathBuf,
    // Few pairs, and most lines belong to the pair of the line before: found by a scan,
    // without making a key for each line. Sorted by (suite, provider) before writing.
    pairs: Vec<((String, String), Pair)>,
    spools: Spools,
    /// One call's `<testcase>`, reused from call to call.
    case_xml: String,
}

impl JunitReport {
    /// A report for the run folder `dir`, nothing written yet.
    pub fn start(dir: &Path) -> Self {
        Self::within(dir, SPOOL_MEMORY)
    }

    fn within(dir: &Path, limit: usize) -> Self {
        JunitReport {
            dir: dir.to_path_buf(),
            pairs: Vec::new(),
            spools: Spools {
                dir: dir.join(SPOOL_DIR),
                in_memory: 0,
                limit,
                files: 0,
            },
            case_xml: String::new(),
        }
    }

    /// Adds the test case of one `results.jsonl` line, and says whether the call passed;
    /// `None` for a line that is not a record (one cut short by a crash: skipped here,
    /// report.json keeps it verbatim).
    pub fn call(&mut self, line: &str) -> io::Result<Option<bool>> {
        let Ok(record) = serde_json::from_str::<Line>(line) else {
            return Ok(None);
        };
        let (suite, provider) = (&*record.suite, &*record.provider);
        let index = match self
            .pairs
            .iter()
            .position(|((s, p), _)| s == suite && p == provider)
        {
            Some(index) => index,
            None => {
                let spool = self.spools.new_spool()?;
                let pair = Pair {
                    tests: 0,
                    failures: 0,
                    skipped: 0,
                    spool,
                };
                self.pairs
                    .push(((suite.to_string(), provider.to_string()), pair));
                self.pairs.len() - 1
            }
        };
        self.case_xml.clear();
        let outcome = test_case(&record, suite, provider, &mut self.case_xml);
        let pair = &mut self.pairs[index].1;
        pair.tests += 1;
        match outcome {
            Outcome::Passed => {}
            Outcome::Failed => pair.failures += 1,
            Outcome::Skipped => pair.skipped += 1,
        }
        self.spools
            .append(&mut self.pairs, index, self.case_xml.as_bytes())?;
        Ok(Some(matches!(outcome, Outcome::Passed)))
    }

    /// Writes `junit.xml` from the spools, makes it durable, and returns its path.
    pub fn finish(mut self, run_id: &str) -> io::Result<PathBuf> {
        let mut pairs = std::mem::take(&mut self.pairs);
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let path = self.dir.join("junit.xml");
        let mut out = BufWriter::new(File::create(&path)?);
        let (tests, failures, skipped) = pairs
            .iter()
            .map(|(_, pair)| pair)
            .fold((0, 0, 0), |(t, f, s), p| {
                (t + p.tests, f + p.failures, s + p.skipped)
            });
        write!(
            out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{tests}\" skipped=\"{skipped}\" failures=\"{failures}\" errors=\"0\">",
            escape(&format!("conform run {run_id}"))
        )?;
        for ((suite, provider), pair) in pairs {
            write!(
                out,
                "\n    <testsuite name=\"{}\" tests=\"{}\" skipped=\"{}\" errors=\"0\" failures=\"{}\">",
                escape(&format!("{suite} × {provider}")),
                pair.tests,
                pair.skipped,
                pair.failures
            )?;
            match pair.spool {
                Spool::Memory(held) => out.write_all(&held)?,
                Spool::File { path, out: spool } => {
                    drop(spool.into_inner().map_err(|e| e.into_error())?);
                    io::copy(&mut File::open(&path)?, &mut out)?;
                }
            }
            out.write_all(b"\n    </testsuite>")?;
        }
        out.write_all(b"\n</testsuites>\n")?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(path)
    }
}

impl Drop for JunitReport {
    fn drop(&mut self) {
        if self.spools.files > 0 {
            // Scratch in the run's folder: a spool left behind is only clutter.
            let _ = std::fs::remove_dir_all(&self.spools.dir);
        }
    }
}

/// The part of a `results.jsonl` line a test case shows, borrowed from the line.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default)]
    suite: Cow<'a, str>,
    #[serde(borrow, default)]
    provider: Cow<'a, str>,
    #[serde(borrow, default)]
    case: Cow<'a, str>,
    #[serde(default)]
    repeat: u64,
    #[serde(default)]
    latency_ms: Option<f64>,
    #[serde(default)]
    passed: Option<bool>,
    #[serde(borrow, default)]
    not_run: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    checks: Vec<LineCheck<'a>>,
}

#[derive(Deserialize)]
struct LineCheck<'a> {
    #[serde(borrow, default)]
    findings: Vec<LineFinding<'a>>,
}

#[derive(Deserialize)]
struct LineFinding<'a> {
    #[serde(borrow, default)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// Appends one call's `<testcase>` (each line after a line break, indented as in the
/// file) to `out`.
fn test_case(record: &Line<'_>, suite: &str, provider: &str, out: &mut String) -> Outcome {
    let case = &record.case;
    let repeat = record.repeat;
    // Escaping maps each character on its own, and `#` and `.` are left as they are: the
    // parts are escaped straight into `out`, with no copy of each joined name first.
    out.push_str("\n        <testcase name=\"");
    escape_into(out, case);
    // Writing to a String cannot fail.
    let _ = write!(out, "#{repeat}\" classname=\"");
    escape_into(out, suite);
    out.push('.');
    escape_into(out, provider);
    out.push('"');
    if let Some(ms) = record.latency_ms {
        let _ = write!(out, " time=\"{:.3}\"", ms / 1000.0);
    }
    let (outcome, tag, message, ty) = if record.passed == Some(true) {
        out.push_str("/>");
        return Outcome::Passed;
    } else if let Some(why) = &record.not_run {
        (Outcome::Skipped, "skipped", Some(why.to_string()), None)
    } else {
        match first_finding(record) {
            Some((code, message)) => (
                Outcome::Failed,
                "failure",
                Some(format!("{code}: {message}")),
                Some(code),
            ),
            None => (Outcome::Failed, "failure", None, None),
        }
    };
    let _ = write!(out, ">\n            <{tag}");
    if let Some(message) = message {
        let _ = write!(out, " message=\"{}\"", escape(&message));
    }
    if let Some(ty) = ty {
        let _ = write!(out, " type=\"{}\"", escape(&ty));
    }
    out.push_str("/>\n        </testcase>");
    outcome
}

/// An attribute value as quick-junit writes it: control characters XML cannot hold
/// dropped, then the five XML specials escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape_into(&mut out, text);
    out
}

/// [`escape`], appended to `out`.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\x00'..='\x08' | '\x0b' | '\x0c' | '\x0e'..='\x1f' => {}
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

fn first_finding(record: &Line<'_>) -> Option<(String, String)> {
    record.checks.iter().find_map(|check| {
        let f = check.findings.first()?;
        Some((
            f.code.as_deref()?.to_string(),
            f.message.as_deref().unwrap_or_default().to_string(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    use serde_json::{Value, json};
    use std::collections::BTreeMap;
    use std::time::Duration;

    /// The oracle's own reading of a line's first finding.
    fn first_finding(record: &Value) -> Option<(String, String)> {
        record["checks"].as_array()?.iter().find_map(|check| {
            let f = check["findings"].as_array()?.first()?;
            Some((
                f["code"].as_str()?.to_string(),
                f["message"].as_str().unwrap_or_default().to_string(),
            ))
        })
    }

    /// The in-memory writer this module replaced, kept as the oracle of the format.
    fn quick_junit(dir: &Path, run_id: &str) -> String {
        let mut suites: BTreeMap<(String, String), TestSuite> = BTreeMap::new();
        let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let text = |k: &str| record[k].as_str().unwrap_or_default().to_string();
            let (suite, provider, case) = (text("suite"), text("provider"), text("case"));
            let name = format!("{case}#{}", record["repeat"].as_u64().unwrap_or(0));
            let status = if record["passed"].as_bool() == Some(true) {
                TestCaseStatus::success()
            } else if let Some(why) = record["not_run"].as_str() {
                let mut s = TestCaseStatus::skipped();
                s.set_message(why);
                s
            } else {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                if let Some((code, message)) = first_finding(&record) {
                    s.set_type(code.clone());
                    s.set_message(format!("{code}: {message}"));
                }
                s
            };
            let mut test = TestCase::new(name, status);
            test.set_classname(format!("{suite}.{provider}"));
            if let Some(ms) = record["latency_ms"].as_f64() {
                test.set_time(Duration::from_secs_f64(ms / 1000.0));
            }
            suites
                .entry((suite.clone(), provider.clone()))
                .or_insert_with(|| TestSuite::new(format!("{suite} × {provider}")))
                .add_test_case(test);
        }
        let mut report = Report::new(format!("conform run {run_id}"));
        report.add_test_suites(suites.into_values());
        report.to_string().unwrap()
    }

    /// `junit.xml` for `records` with the spools held in `limit` bytes of memory, and
    /// quick-junit's for the same.
    fn written_within(records: &[Value], limit: usize) -> (String, String, usize) {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = records.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(dir.path().join("results.jsonl"), lines + "{cut").unwrap();
        let (path, files) = write_within(dir.path(), "r<1>", limit).unwrap();
        assert!(
            !dir.path().join(SPOOL_DIR).exists(),
            "the spools are removed"
        );
        (
            std::fs::read_to_string(path).unwrap(),
            quick_junit(dir.path(), "r<1>"),
            files,
        )
    }

    fn written(records: &[Value]) -> (String, String) {
        let (streamed, oracle, files) = written_within(records, SPOOL_MEMORY);
        assert_eq!(files, 0, "a small run's spools stay in memory");
        (streamed, oracle)
    }

    #[test]
    fn streamed_junit_is_what_quick_junit_writes_byte_for_byte() {
        let failed = |case: &str, code: &str, message: &str| {
            json!({"suite": "tickets", "provider": "b&c", "case": case, "repeat": 1,
                   "passed": false, "latency_ms": 12.5,
                   "checks": [{"findings": []},
                              {"findings": [{"code": code, "message": message}]}]})
        };
        let records = vec![
            json!({"suite": "tickets", "provider": "b&c", "case": "001", "repeat": 0,
                   "passed": true, "latency_ms": 1234.5678}),
            json!({"suite": "invoices", "provider": "a", "case": "x\"y'", "repeat": 0,
                   "passed": true}),
            failed(
                "002",
                "not_pure_json",
                "the answer has <prose> & \u{1}a fence",
            ),
            json!({"suite": "tickets", "provider": "b&c", "case": "003", "repeat": 0,
                   "passed": false, "not_run": "provider stopped: auth"}),
            json!({"suite": "tickets", "provider": "b&c", "case": "004", "repeat": 0,
                   "passed": false, "checks": []}),
            json!({"suite": "invoices", "provider": "a", "case": "é > 1", "repeat": 2,
                   "passed": true, "latency_ms": 0.4}),
        ];
        let (streamed, oracle) = written(&records);
        assert_eq!(streamed, oracle);
        assert_eq!(streamed.matches("<failure").count(), 2);
        assert!(streamed.contains("type=\"not_pure_json\""), "{streamed}");
        // Spooled to files: from the start, after the third call, and after the fifth
        // (the spools held so far move to files, the pairs seen later start in one).
        for limit in [0, 300, 600] {
            let (spilled, oracle, files) = written_within(&records, limit);
            assert_eq!(spilled, oracle, "spilled past {limit} bytes");
            assert_eq!(files, 2, "one file per pair past {limit} bytes");
        }
    }

    #[test]
    fn an_empty_run_writes_what_quick_junit_writes() {
        let (streamed, oracle) = written(&[]);
        assert_eq!(streamed, oracle);
    }
}
