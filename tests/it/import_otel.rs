//! `conform import otel` and `conform import litellm`, on real instrumentation output:
//! tests/fixtures/otel/ and tests/fixtures/litellm/ were written by the scripts in
//! scripts/otel-fixtures/ and scripts/litellm-fixtures/, which drove the OpenAI Python SDK
//! (instrumented by opentelemetry-instrumentation-openai-v2) and LiteLLM against a
//! loopback mock that saved every request body they sent. The suites are compared with
//! those bodies.

use crate::common;

use std::path::{Path, PathBuf};

use common::Project;
use serde_json::{Value, json};

/// The four places instrumentation puts message content, one fixture each.
const PLACEMENTS: &[&str] = &["span", "event", "both", "legacy"];

/// What the default redaction makes of the personal data the scripts sent.
const PERSONAL: &[(&str, &str)] = &[
    ("ana.lind@example.com", "<EMAIL_1>"),
    ("+46 8 555 012 34", "<PHONE_1>"),
];

fn fixture(rel: &str) -> PathBuf {
    Path::new(common::REPO).join("tests/fixtures").join(rel)
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A project whose OpenAI provider asks for JSON mode (the suites carry no schema, which
/// strict mode would refuse).
fn project() -> Project {
    let project = Project::new(&[]);
    project.write(
        "providers/openai.toml",
        "kind = \"openai\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"OPENAI_API_KEY\"\n\
         temperature = 0\nstructured_output = \"json_object\"\n\n[tokenizer]\nkind = \"tiktoken\"\n\
         encoding = \"o200k_base\"\ncontext_window = 128000\n",
    );
    project
}

fn import(project: &Project, args: &[&str]) -> String {
    let out = project.cmd().arg("import").args(args).output().unwrap();
    let text = common::output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

fn check_is_clean(project: &Project) {
    let out = project.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::output_text(&out));
}

/// The case files of a suite, in file-name (input) order.
fn cases(project: &Project, suite: &str) -> Vec<Value> {
    let dir = project.path(&format!("fixtures/{suite}/cases"));
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths.iter().map(|p| common::read_json(p)).collect()
}

/// A message as the comparison sees it: role, text (with the placeholders redaction puts
/// in), the calls with their arguments parsed, and the call a tool result answers.
fn normal(m: &Value, redact: bool) -> Value {
    let content = match m.get("content") {
        Some(Value::String(s)) if redact => {
            let mut s = s.clone();
            for (from, to) in PERSONAL {
                s = s.replace(from, to);
            }
            Value::String(s)
        }
        Some(v) => v.clone(),
        None => Value::Null,
    };
    let calls: Vec<Value> = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let args = &c["function"]["arguments"];
            let args = match args {
                Value::String(s) => serde_json::from_str(s).unwrap(),
                other => other.clone(),
            };
            json!({"id": c["id"], "name": c["function"]["name"], "arguments": args})
        })
        .collect();
    json!({
        "role": m["role"],
        "content": content,
        "tool_calls": calls,
        "tool_call_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
    })
}

/// The distinct chat requests a client sent, in order, each with how often it was sent.
fn distinct_chat_requests(requests: &[Value]) -> Vec<(Value, usize)> {
    let mut out: Vec<(Value, usize)> = Vec::new();
    for r in requests
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
    {
        match out
            .iter_mut()
            .find(|(seen, _)| seen["messages"] == r["body"]["messages"])
        {
            Some((_, n)) => *n += 1,
            None => out.push((r["body"].clone(), 1)),
        }
    }
    out
}

fn tool_names(value: Option<&Value>) -> Vec<String> {
    let mut names: Vec<String> = value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Every file the import wrote, as text.
fn suite_text(project: &Project, suite: &str) -> String {
    let dir = project.path(&format!("fixtures/{suite}"));
    project
        .all_text()
        .into_iter()
        .filter(|(p, _)| p.starts_with(&dir))
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The suite holds exactly the distinct requests `sent`, in order: messages, tool calls
/// and results as sent (personal data redacted), a reference with one answer per time
/// the request was sent, and the tools it sent or called.
fn assert_suite_is_what_was_sent(
    project: &Project,
    suite: &str,
    sent: &[Value],
    exact_tools: bool,
) {
    let distinct = distinct_chat_requests(sent);
    let cases = cases(project, suite);
    assert_eq!(
        cases.len(),
        distinct.len(),
        "{suite}: one case per distinct request"
    );
    for (case, (body, times)) in cases.iter().zip(&distinct) {
        let ours: Vec<Value> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| normal(m, false))
            .collect();
        let theirs: Vec<Value> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| normal(m, true))
            .collect();
        assert_eq!(ours, theirs, "{suite}: {}", case["description"]);
        let answers = case["reference"]["answers"]
            .as_array()
            .unwrap_or_else(|| panic!("{suite}: no reference in {case}"));
        assert_eq!(
            answers.len(),
            *times,
            "{suite}: one answer per time it was sent: {case}"
        );
        assert_eq!(case["reference"]["model"], body["model"], "{suite}");
        // The tools: what was sent when the source records definitions, else at least
        // every tool called, declared by name.
        let mut wanted = tool_names(body.get("tools"));
        for m in body["messages"].as_array().unwrap() {
            for c in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                wanted.push(c["function"]["name"].as_str().unwrap().to_string());
            }
        }
        for a in answers {
            for c in a
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                wanted.push(c["name"].as_str().unwrap().to_string());
            }
        }
        wanted.sort();
        wanted.dedup();
        assert_eq!(tool_names(case.get("tools")), wanted, "{suite}: {case}");
        if exact_tools && let Some(tools) = body.get("tools") {
            assert_eq!(
                case["tools"], *tools,
                "{suite}: recorded definitions are kept as sent"
            );
            assert_eq!(case["tool_choice"], body["tool_choice"], "{suite}");
        }
    }
    // What the mock answered, as the reference records it.
    let answer_texts: Vec<&str> = cases
        .iter()
        .flat_map(|c| c["reference"]["answers"].as_array().unwrap())
        .filter_map(|a| a["text"].as_str())
        .collect();
    assert!(
        answer_texts.contains(&"It is 4 °C and cloudy in Oslo."),
        "{answer_texts:?}"
    );
    let calls: Vec<&Value> = cases
        .iter()
        .flat_map(|c| c["reference"]["answers"].as_array().unwrap())
        .filter_map(|a| a.get("tool_calls"))
        .collect();
    assert_eq!(
        calls,
        [&json!([{"name": "get_weather", "arguments": {"city": "Oslo"}}])],
        "{suite}"
    );

    let text = suite_text(project, suite);
    for (original, placeholder) in PERSONAL {
        assert!(!text.contains(original), "{suite}: {original} survived");
        assert!(text.contains(placeholder), "{suite}: {placeholder} missing");
    }
}

#[test]
fn each_content_placement_imports_the_requests_the_sdk_sent() {
    for placement in PLACEMENTS {
        let project = project();
        let export = fixture(&format!("otel/{placement}.otlp.jsonl"));
        let out = import(
            &project,
            &["otel", export.to_str().unwrap(), "--suite", placement],
        );
        let sent = jsonl(&fixture(&format!("otel/{placement}.requests.jsonl")));
        assert_suite_is_what_was_sent(&project, placement, &sent, false);
        check_is_clean(&project);

        // The application spans are counted, not imported; embeddings likewise where
        // the release instruments them.
        assert!(out.contains("3 spans are not GenAI operations"), "{out}");
        if *placement != "legacy" {
            assert!(
                out.contains("1 `embeddings` spans are not chat inferences"),
                "{out}"
            );
        }
        let notes =
            std::fs::read_to_string(project.path(&format!("fixtures/{placement}/IMPORT_NOTES.md")))
                .unwrap();
        for said in [
            "`tool_choice`",
            "JSON Schema",
            "tool `get_weather` is called in 2 requests but never defined",
            "`temperature`: 2 requests",
        ] {
            assert!(notes.contains(said), "{placement}: {said}\n{notes}");
        }
    }
}

/// Rewrites every span of `text` (OTLP JSON lines) with `edit`.
fn edit_spans(text: &str, mut edit: impl FnMut(&mut Value)) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        for rs in v
            .get_mut("resourceSpans")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for ss in rs["scopeSpans"].as_array_mut().unwrap() {
                for span in ss["spans"].as_array_mut().unwrap() {
                    edit(span);
                }
            }
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}

#[test]
fn a_span_whose_content_was_not_captured_is_listed_and_never_an_empty_case() {
    let project = project();
    // The streamed call's span, as it is exported without content capture.
    let mut stripped = String::new();
    let text = edit_spans(
        &std::fs::read_to_string(fixture("otel/span.otlp.jsonl")).unwrap(),
        |span| {
            let id = span["spanId"].as_str().unwrap().to_string();
            let Some(attrs) = span.get_mut("attributes").and_then(Value::as_array_mut) else {
                return;
            };
            let streamed = attrs.iter().any(|a| {
                a["key"] == "gen_ai.response.id" && a["value"]["stringValue"] == "chatcmpl-6"
            });
            if streamed {
                stripped = id;
                attrs.retain(|a| !a["key"].as_str().unwrap().ends_with(".messages"));
            }
        },
    );
    assert!(!stripped.is_empty());
    let path = project.path("export.jsonl");
    std::fs::write(&path, text).unwrap();
    let out = import(&project, &["otel", path.to_str().unwrap(), "--suite", "s"]);
    assert!(
        out.contains(&format!(
            "span {stripped}: `chat gpt-4o-mini`: no message content was captured"
        )),
        "{out}"
    );
    assert!(out.contains("1 skipped"), "{out}");
    let cases = cases(&project, "s");
    assert_eq!(cases.len(), 3);
    assert!(
        cases
            .iter()
            .all(|c| !c["messages"].as_array().unwrap().is_empty())
    );
    assert!(
        !suite_text(&project, "s").contains("<PHONE_1>"),
        "the uncaptured request left no trace"
    );
    check_is_clean(&project);
}

#[test]
fn spans_and_log_records_join_across_files_in_any_order() {
    let project = project();
    let lines: Vec<String> = std::fs::read_to_string(fixture("otel/event.otlp.jsonl"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let (logs, traces): (Vec<&String>, Vec<&String>) =
        lines.iter().partition(|l| l.contains("\"resourceLogs\""));
    assert!(!logs.is_empty() && !traces.is_empty());
    let (a, b) = (project.path("logs.jsonl"), project.path("traces.jsonl"));
    std::fs::write(
        &a,
        logs.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(
        &b,
        traces.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    // Logs first, then the traces: the records wait for their spans.
    import(
        &project,
        &[
            "otel",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--suite",
            "split",
        ],
    );
    let sent = jsonl(&fixture("otel/event.requests.jsonl"));
    assert_suite_is_what_was_sent(&project, "split", &sent, false);

    // The logs alone: a details record carries the model and the content, so each is an
    // inference of its own.
    let out = import(
        &project,
        &["otel", a.to_str().unwrap(), "--suite", "logs-only"],
    );
    assert_suite_is_what_was_sent(&project, "logs-only", &sent, false);
    assert!(!out.contains("application spans"), "{out}");
    check_is_clean(&project);

    // The traces alone carry no content in this placement: nothing to import, nothing
    // written, and no empty case.
    let out = project
        .cmd()
        .args(["import", "otel", b.to_str().unwrap(), "--suite", "alone"])
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("no request could be imported (5 skipped)"),
        "{text}"
    );
    assert!(!project.path("fixtures/alone").exists());
}

#[test]
fn the_litellm_standard_logging_payload_imports_the_requests_litellm_sent() {
    let project = project();
    let log = fixture("litellm/standard_logging.jsonl");
    let out = import(
        &project,
        &["litellm", log.to_str().unwrap(), "--suite", "gateway"],
    );
    let sent = jsonl(&fixture("litellm/requests.jsonl"));
    assert_suite_is_what_was_sent(&project, "gateway", &sent, true);
    check_is_clean(&project);
    assert!(
        out.contains("1 `embedding` calls are not chat completions"),
        "{out}"
    );
    assert!(
        out.contains("tool `get_weather` is called but not defined"),
        "{out}"
    );
}

#[test]
fn a_malformed_export_line_names_its_file_line_and_field_and_nothing_is_written() {
    let project = project();
    let good = std::fs::read_to_string(fixture("otel/span.otlp.jsonl")).unwrap();
    let cases: [(&str, &str); 3] = [
        ("{\"resourceSpans\": [", "bad.jsonl:2: (line): not JSON"),
        (
            "{\"resourceMetrics\": []}",
            "bad.jsonl:2: resourceSpans: missing",
        ),
        (
            "{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{\"traceId\": \"ab\", \"name\": \"x\"}]}]}]}",
            "bad.jsonl:2: resourceSpans[0].scopeSpans[0].spans[0].spanId: missing",
        ),
    ];
    for (line, said) in cases {
        let path = project.path("bad.jsonl");
        std::fs::write(&path, format!("{}\n{line}\n", good.trim_end())).unwrap();
        let out = project
            .cmd()
            .args(["import", "otel", path.to_str().unwrap(), "--suite", "bad"])
            .output()
            .unwrap();
        let text = common::output_text(&out);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains(said), "{said}\n{text}");
        assert!(text.contains("nothing was written"), "{text}");
        assert!(!project.path("fixtures/bad").exists());
    }
}

/// A primary that answers every chat request with text, reporting the usage OpenAI
/// would.
struct Primary;

impl wiremock::Respond for Primary {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let prompt = common::prompt_tokens_o200k(&body);
        wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1764900000,
            "model": "gpt-4o-mini-2026-01-01",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"ok\": true}"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": prompt + 4}
        }))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_the_imported_suite_sends_the_conversations_the_sdk_sent() {
    let project = project();
    let export = fixture("otel/event.otlp.jsonl");
    import(
        &project,
        &["otel", export.to_str().unwrap(), "--suite", "replayed"],
    );
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(Primary)
        .mount(&server)
        .await;
    let out = project
        .cmd()
        .env("OPENAI_API_KEY", common::TEST_KEY)
        .args([
            "run",
            "openai",
            "--suite",
            "replayed",
            "--no-progress",
            "--base-url",
        ])
        .arg(server.uri())
        .output()
        .unwrap();
    let text = common::output_text(&out);
    // Judged (conformant or not against the recorded answers), never a usage error or
    // inconclusive: every case was sent and answered.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{text}");

    let conversations = |bodies: Vec<Value>| {
        let mut seen: Vec<Vec<Value>> = Vec::new();
        for b in bodies {
            let m: Vec<Value> = b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| normal(m, true))
                .collect();
            if !seen.contains(&m) {
                seen.push(m);
            }
        }
        seen.sort_by_key(|m| m.to_vec().iter().map(Value::to_string).collect::<String>());
        seen
    };
    let received: Vec<Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let sent: Vec<Value> = jsonl(&fixture("otel/event.requests.jsonl"))
        .into_iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .map(|r| r["body"].clone())
        .collect();
    assert_eq!(conversations(received), conversations(sent), "{text}");
}

#[test]
fn a_sample_is_reproducible_and_the_case_cap_refuses_more() {
    let project = project();
    let export = fixture("otel/span.otlp.jsonl");
    let path = export.to_str().unwrap();
    import(
        &project,
        &["otel", path, "--suite", "a", "--sample", "2", "--seed", "7"],
    );
    import(
        &project,
        &["otel", path, "--suite", "b", "--sample", "2", "--seed", "7"],
    );
    let (a, b) = (cases(&project, "a"), cases(&project, "b"));
    assert_eq!(a.len(), 2);
    assert_eq!(a, b, "the same input, N and seed give the same cases");

    let out = project
        .cmd()
        .args([
            "import",
            "otel",
            path,
            "--suite",
            "capped",
            "--max-cases",
            "3",
        ])
        .output()
        .unwrap();
    let text = common::output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("more than 3 distinct requests"), "{text}");
    assert!(!project.path("fixtures/capped").exists());
}

#[test]
fn a_failed_litellm_call_keeps_its_request_and_a_redacted_payload_is_listed() {
    let project = project();
    let payloads = jsonl(&fixture("litellm/standard_logging.jsonl"));
    let mut failed = payloads[0].clone();
    failed["status"] = json!("failure");
    failed["response"] = Value::Null;
    failed["error_str"] = json!("litellm.RateLimitError: 429");
    let mut hidden = payloads[2].clone();
    hidden["messages"] = json!("redacted-by-litellm");
    let path = project.path("litellm.jsonl");
    std::fs::write(&path, format!("{failed}\n{hidden}\n")).unwrap();
    let out = import(
        &project,
        &["litellm", path.to_str().unwrap(), "--suite", "gw"],
    );
    assert!(
        out.contains("litellm.jsonl:1: the call did not succeed: no answer is recorded"),
        "{out}"
    );
    assert!(
        out.contains("litellm.jsonl:2: messages: not a list of chat messages"),
        "{out}"
    );
    let cases = cases(&project, "gw");
    assert_eq!(cases.len(), 1);
    assert!(cases[0].get("reference").is_none(), "{}", cases[0]);
    assert_eq!(
        cases[0]["messages"][1]["content"],
        "Please confirm booking BK-2291 and write to <EMAIL_1>."
    );
    check_is_clean(&project);
}
