//! `conform import` on a large log: 100,000 logged requests (an OpenAI Batch input file
//! and its output file, answers in reverse order; and a JSONL of request/response pairs)
//! imported through the library, with the wall time, the CPU time and the peak resident
//! memory of each import (the kernel's high-water mark, reset before each one; each import
//! in a process of its own), at 10,000 and at 100,000 requests, so any growth per request
//! is visible.
//!
//! `cargo bench --bench import` (release) measures 10,000 and 100,000 requests; numbers
//! given after `--` replace those sizes, and `--batch-only` measures the Batch import
//! alone (the JSONL imports of a million pairs take far longer than the Batch one):
//! `cargo bench --bench import -- --batch-only 1000000`.
//!
//! `cargo bench --bench import -- --otel 100 1000` measures `conform import otel` on OTLP
//! JSON exports of about 100 MB and 1,000 MB instead: batches of 256 chat inferences in the
//! shape the OpenAI instrumentation exports (tests/fixtures/otel/), each inside an
//! application span, every other batch with its content in
//! `gen_ai.client.inference.operation.details` log records written before the spans (so
//! that every record waits for its span in the scratch index), the others with the content
//! on the spans. Up to 200 MB (at any size with `--whole`) the whole export is imported, a
//! case file per inference; every size is also imported with `--sample 1000`, which reads
//! and joins all of it.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use conform_import::{Options, Redaction, Summary};
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

fn batch_paths(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("batch_input_{n}.jsonl")),
        dir.join(format!("batch_output_{n}.jsonl")),
    )
}

fn pairs_path(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("pairs_{n}.jsonl"))
}

fn write_batch(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    let (input, output) = batch_paths(dir, n);
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

fn write_pairs(dir: &Path, n: usize) -> PathBuf {
    let path = pairs_path(dir, n);
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

fn otel_path(dir: &Path, mb: usize) -> PathBuf {
    dir.join(format!("otel_{mb}mb.jsonl"))
}

fn any(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::String(s) => json!({"stringValue": s}),
        serde_json::Value::Number(n) => json!({"intValue": n.to_string()}),
        serde_json::Value::Array(a) => {
            json!({"arrayValue": {"values": a.iter().map(any).collect::<Vec<_>>()}})
        }
        serde_json::Value::Object(o) => {
            json!({"kvlistValue": {"values": o.iter().map(|(k, v)| json!({"key": k, "value": any(v)})).collect::<Vec<_>>()}})
        }
        other => json!({"stringValue": other.to_string()}),
    }
}

/// An OTLP JSON export of about `mb` MB; how many chat inferences it holds.
fn write_otel(dir: &Path, mb: usize) -> (PathBuf, usize) {
    let path = otel_path(dir, mb);
    let mut w = BufWriter::new(std::fs::File::create(&path).unwrap());
    let (mut written, mut n, mut batch) = (0usize, 0usize, 0usize);
    while written < mb * 1_000_000 {
        let events = batch % 2 == 1;
        let trace = |i: usize| format!("{:032x}", i + 1);
        let (mut app, mut chat, mut records) = (Vec::new(), Vec::new(), Vec::new());
        for i in n..n + 256 {
            let (parent, id) = (format!("{:016x}", 2 * i + 1), format!("{:016x}", 2 * i + 2));
            let body = request(i);
            let input: Vec<serde_json::Value> = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| json!({"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]}))
                .collect();
            let answer = response(i)["choices"][0]["message"]["content"].clone();
            let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]);
            let mut attrs = vec![
                json!({"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}),
                json!({"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o-mini"}}),
                json!({"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}}),
                json!({"key": "gen_ai.request.temperature", "value": {"intValue": "0"}}),
                json!({"key": "gen_ai.response.model", "value": {"stringValue": "gpt-4o-mini-2024-07-18"}}),
                json!({"key": "gen_ai.response.id", "value": {"stringValue": format!("chatcmpl-{i}")}}),
            ];
            let content = [
                ("gen_ai.input.messages", json!(input)),
                ("gen_ai.output.messages", output),
            ];
            if events {
                let mut r = attrs.clone();
                r.extend(
                    content
                        .iter()
                        .map(|(k, v)| json!({"key": k, "value": any(v)})),
                );
                records.push(json!({"timeUnixNano": "1796440688611423257", "eventName": "gen_ai.client.inference.operation.details",
                    "traceId": trace(i), "spanId": id, "body": {}, "attributes": r}));
            } else {
                attrs.extend(
                    content
                        .iter()
                        .map(|(k, v)| json!({"key": k, "value": {"stringValue": v.to_string()}})),
                );
            }
            let time = (1_796_440_687_333_371_849u64 + i as u64 * 1000).to_string();
            app.push(
                json!({"traceId": trace(i), "spanId": parent, "name": "POST /tickets", "kind": 2,
                "startTimeUnixNano": time, "endTimeUnixNano": time, "status": {}}),
            );
            chat.push(json!({"traceId": trace(i), "spanId": id, "parentSpanId": parent, "name": "chat gpt-4o-mini",
                "kind": 3, "startTimeUnixNano": time, "endTimeUnixNano": time, "attributes": attrs, "status": {}}));
        }
        let resource = json!({"attributes": [{"key": "service.name", "value": {"stringValue": "support-desk"}}]});
        if events {
            let logs = json!({"resourceLogs": [{"resource": resource, "scopeLogs": [{"scope": {"name": "opentelemetry.util.genai.handler"}, "logRecords": records}]}]});
            let line = logs.to_string();
            written += line.len() + 1;
            writeln!(w, "{line}").unwrap();
        }
        let traces = json!({"resourceSpans": [{"resource": resource, "scopeSpans": [
            {"scope": {"name": "support-desk"}, "spans": app},
            {"scope": {"name": "opentelemetry.util.genai.handler"}, "spans": chat}]}]});
        let line = traces.to_string();
        written += line.len() + 1;
        writeln!(w, "{line}").unwrap();
        n += 256;
        batch += 1;
    }
    w.flush().unwrap();
    (path, n)
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

/// The CPU time this process has used, user and system, in seconds: the wall time of an
/// import on a busy machine says little, its CPU time what the import itself costs.
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th, in clock ticks of 1/100 s on Linux.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    (ticks(11), ticks(12))
}

fn options(fixtures: &Path, suite: &str, sample: Option<(usize, u64)>) -> Options {
    Options {
        suite: suite.into(),
        fixtures: fixtures.to_path_buf(),
        force: true,
        sample,
        max_cases: 2_000_000,
        max_line_bytes: conform_import::DEFAULT_MAX_LINE_BYTES,
        redaction: Redaction::new(true, &[], &[]).unwrap(),
    }
}

fn measure(label: &str, run: impl FnOnce() -> Summary) {
    let reset = reset_peak();
    let before = current_kib();
    let (user0, sys0) = cpu_seconds();
    let started = Instant::now();
    let summary = run();
    let took = started.elapsed();
    let (user1, sys1) = cpu_seconds();
    let peak = peak_kib();
    // What was read, not what was asked: an OTLP export is sized in bytes.
    let n = summary.read;
    println!(
        "{label:<44} {n:>7} requests: {:>6.2} s ({:>7.0} requests/s; CPU {:.2} s user + {:.2} s system), {} cases written, peak RSS {:>6.1} MiB ({:+.1} MiB over the {:.1} MiB before){}",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        user1 - user0,
        sys1 - sys0,
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

/// Runs one import in this process, on the files the parent process wrote in `dir`, and
/// prints its line.
fn one(kind: &str, n: usize, dir: &Path) {
    let fixtures = dir.join("fixtures");
    match kind {
        "batch" => measure("openai-batch (input + output, redacted)", || {
            let (input, output) = batch_paths(dir, n);
            conform_import::openai_batch::import(
                &input,
                std::slice::from_ref(&output),
                &options(&fixtures, kind, None),
            )
            .unwrap()
        }),
        "pairs" => measure("jsonl (request/response pairs, redacted)", || {
            conform_import::jsonl::import(&pairs_path(dir, n), &options(&fixtures, kind, None))
                .unwrap()
        }),
        "sample" => measure("jsonl --sample 1000 --seed 1", || {
            conform_import::jsonl::import(
                &pairs_path(dir, n),
                &options(&fixtures, kind, Some((1000, 1))),
            )
            .unwrap()
        }),
        "otel" | "otel-sample" => {
            let sample = (kind == "otel-sample").then_some((1000, 1));
            let label = if sample.is_some() {
                "otel --sample 1000 --seed 1"
            } else {
                "otel (OTLP JSON, spans + log records)"
            };
            // `n` is the export's size in MB here.
            measure(label, || {
                conform_import::otel::import(
                    &[otel_path(dir, n)],
                    &options(&fixtures, kind, sample),
                )
                .unwrap()
            })
        }
        other => panic!("no import {other}"),
    }
    std::fs::remove_dir_all(fixtures.join(kind)).unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, kind, n, dir] = &args[..]
        && flag == "--import"
    {
        one(kind, n.parse().unwrap(), Path::new(dir));
        return;
    }
    // `cargo bench` passes `--bench` to a bench without the libtest harness: flags this
    // bench does not know are ignored.
    let batch_only = args.iter().any(|a| a == "--batch-only");
    let mut sizes: Vec<usize> = args
        .iter()
        .filter_map(|a| a.replace(['_', ','], "").parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000];
    }
    let dir = tempfile::tempdir_in(
        std::env::var_os("CONFORM_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
    )
    .unwrap();
    // Each import runs in a process of its own: in one process, what the allocator kept
    // from an earlier import would be the next one's resident set before it starts, and
    // its peak would hide a smaller one.
    let run = |kind: &str, n: usize| {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--import", kind, &n.to_string()])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "the {kind} import of {n} requests failed");
    };
    if args.iter().any(|a| a == "--otel") {
        for mb in sizes {
            let (path, n) = write_otel(dir.path(), mb);
            let bytes = std::fs::metadata(&path).unwrap().len();
            println!(
                "OTLP export: {:.0} MB, {n} chat inferences",
                bytes as f64 / 1e6
            );
            if mb <= 200 || args.iter().any(|a| a == "--whole") {
                run("otel", mb);
            }
            run("otel-sample", mb);
            std::fs::remove_file(path).unwrap();
        }
        return;
    }
    for n in sizes {
        let (input, output) = write_batch(dir.path(), n);
        run("batch", n);
        for f in [input, output] {
            std::fs::remove_file(f).unwrap();
        }
        if batch_only {
            continue;
        }
        let pairs = write_pairs(dir.path(), n);
        run("pairs", n);
        run("sample", n);
        std::fs::remove_file(pairs).unwrap();
    }
}
