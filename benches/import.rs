//! `conform import` on a large log: 100,000 logged requests (an OpenAI Batch input file
//! and its output file, answers in reverse order; and a JSONL of request/response pairs)
//! imported through the library, with the wall time and the peak resident memory of each
//! import (the kernel's high-water mark, reset before each one), at 10,000 and at 100,000
//! requests, so the growth per request is visible.
//!
//! `cargo bench --bench import` (release) measures 10,000 and 100,000 requests; numbers
//! given after `--` replace those sizes, and `--batch-only` measures the Batch import
//! alone (the JSONL imports of a million pairs take far longer than the Batch one):
//! `cargo bench --bench import -- --batch-only 1000000`.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use conform::import::{self, Options, Redaction, Summary};
use serde_json::json;

fn request(i: usize) -> serde_json::Value {
    // One request in ten carries an address to redact; one in five declares a tool.
    let mut user = format!(
        "Ticket {i}: my order BR-{:05} has not arrived and the tracking page has not changed since Monday. Can you check where it is?",
        i % 100_000
    );
    if i.is_multiple_of(10) {
        user.push_str(&format!(" Reach me at customer{i}@example.com."));
    }
    let mut body = json!({
        "model": "gpt-4o-mini", "temperature": 0, "max_tokens": 400,
        "messages": [
            {"role": "system", "content": "You are the support assistant of an online homeware shop. Answer briefly."},
            {"role": "user", "content": user}
        ]
    });
    if i.is_multiple_of(5) {
        body["tools"] = json!([{"type": "function", "function": {"name": "lookup_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]);
    }
    body
}

fn response(i: usize) -> serde_json::Value {
    json!({"id": format!("chatcmpl-{i}"), "object": "chat.completion", "created": 1764590400 + i as i64,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant",
            "content": format!("I have looked up BR-{:05}: it left our warehouse on Tuesday and should arrive within two days.", i % 100_000)},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 60, "completion_tokens": 25, "total_tokens": 85}})
}

fn write_batch(dir: &Path, n: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let input = dir.join(format!("batch_input_{n}.jsonl"));
    let output = dir.join(format!("batch_output_{n}.jsonl"));
    let mut w = BufWriter::new(std::fs::File::create(&input).unwrap());
    for i in 0..n {
        let line = json!({"custom_id": format!("request-{i}"), "method": "POST", "url": "/v1/chat/completions", "body": request(i)});
        writeln!(w, "{line}").unwrap();
    }
    w.flush().unwrap();
    let mut w = BufWriter::new(std::fs::File::create(&output).unwrap());
    for i in (0..n).rev() {
        let line = json!({"id": format!("batch_req_{i}"), "custom_id": format!("request-{i}"),
            "response": {"status_code": 200, "request_id": format!("req_{i}"), "body": response(i)}, "error": null});
        writeln!(w, "{line}").unwrap();
    }
    w.flush().unwrap();
    (input, output)
}

fn write_pairs(dir: &Path, n: usize) -> std::path::PathBuf {
    let path = dir.join(format!("pairs_{n}.jsonl"));
    let mut w = BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..n {
        writeln!(
            w,
            "{}",
            json!({"request": request(i), "response": response(i)})
        )
        .unwrap();
    }
    w.flush().unwrap();
    path
}

/// The process's peak resident set since the last reset, in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Resets the high-water mark to the current resident set (Linux ≥ 4.0).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn current_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn options(fixtures: &Path, suite: &str, sample: Option<(usize, u64)>) -> Options {
    Options {
        suite: suite.into(),
        fixtures: fixtures.to_path_buf(),
        force: true,
        sample,
        max_cases: 2_000_000,
        max_line_bytes: import::DEFAULT_MAX_LINE_BYTES,
        redaction: Redaction::new(true, &[], &[]).unwrap(),
    }
}

fn measure(label: &str, n: usize, run: impl FnOnce() -> Summary) {
    let reset = reset_peak();
    let before = current_kib();
    let started = Instant::now();
    let summary = run();
    let took = started.elapsed();
    let peak = peak_kib();
    println!(
        "{label:<44} {n:>7} requests: {:>6.2} s ({:>7.0} requests/s), {} cases written, peak RSS {:>6.1} MiB ({:+.1} MiB over the {:.1} MiB before){}",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        summary.written,
        peak as f64 / 1024.0,
        (peak as f64 - before as f64) / 1024.0,
        before as f64 / 1024.0,
        if reset {
            ""
        } else {
            " [peak not reset: cumulative]"
        }
    );
}

fn main() {
    // `cargo bench` passes `--bench` to a bench without the libtest harness: flags this
    // bench does not know are ignored.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let batch_only = args.iter().any(|a| a == "--batch-only");
    let mut sizes: Vec<usize> = args
        .iter()
        .filter_map(|a| a.replace(['_', ','], "").parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000];
    }
    let dir = tempfile::tempdir().unwrap();
    let fixtures = dir.path().join("fixtures");
    for n in sizes {
        let (input, output) = write_batch(dir.path(), n);
        measure("openai-batch (input + output, redacted)", n, || {
            import::openai_batch::import(
                &input,
                std::slice::from_ref(&output),
                &options(&fixtures, "batch", None),
            )
            .unwrap()
        });
        std::fs::remove_dir_all(fixtures.join("batch")).unwrap();
        if batch_only {
            for f in [input, output] {
                std::fs::remove_file(f).unwrap();
            }
            continue;
        }
        let pairs = write_pairs(dir.path(), n);
        measure("jsonl (request/response pairs, redacted)", n, || {
            import::jsonl::import(&pairs, &options(&fixtures, "pairs", None)).unwrap()
        });
        std::fs::remove_dir_all(fixtures.join("pairs")).unwrap();
        measure("jsonl --sample 1000 --seed 1", n, || {
            import::jsonl::import(&pairs, &options(&fixtures, "sample", Some((1000, 1)))).unwrap()
        });
        std::fs::remove_dir_all(fixtures.join("sample")).unwrap();
        for f in [input, output, pairs] {
            std::fs::remove_file(f).unwrap();
        }
    }
}
