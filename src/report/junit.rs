//! `junit.xml` for CI test reporters: one test suite per (suite, provider), one test case
//! per call, failures carrying the first finding's code and message.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde_json::Value;

/// Writes `junit.xml` beside `results.jsonl`, reading the results back line by line.
pub fn write(dir: &Path, run_id: &str) -> io::Result<PathBuf> {
    let mut suites: BTreeMap<(String, String), TestSuite> = BTreeMap::new();
    let reader = BufReader::new(File::open(dir.join("results.jsonl"))?);
    for line in reader.lines() {
        let line = line?;
        let Ok(record) = serde_json::from_str::<Value>(&line) else {
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
    let path = dir.join("junit.xml");
    report
        .serialize(File::create(&path)?)
        .map_err(io::Error::other)?;
    Ok(path)
}

fn first_finding(record: &Value) -> Option<(String, String)> {
    record["checks"].as_array()?.iter().find_map(|check| {
        let f = check["findings"].as_array()?.first()?;
        Some((
            f["code"].as_str()?.to_string(),
            f["message"].as_str().unwrap_or_default().to_string(),
        ))
    })
}
