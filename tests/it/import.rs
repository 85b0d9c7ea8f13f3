//! `conform import`: suites from logged traffic, through the real binary and real files.

use crate::common;

use std::path::{Path, PathBuf};

use common::Project;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn data(name: &str) -> PathBuf {
    Path::new(common::REPO).join("tests/import").join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The case files of a suite, by file name, in order.
fn cases(project: &Project, suite: &str) -> Vec<(String, Value)> {
    let dir = project.path(&format!("fixtures/{suite}/cases"));
    let mut out: Vec<(String, Value)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                read_json(&p),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn import(project: &Project, args: &[&str]) -> std::process::Output {
    project.cmd().arg("import").args(args).output().unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Nothing but the shipped suites in fixtures/: no suite, no temporary folder.
fn only_shipped_suites(project: &Project) {
    let mut names: Vec<String> = std::fs::read_dir(project.path("fixtures"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "invoice-extraction",
            "smollm2-smoke",
            "support-agent",
            "ticket-triage"
        ]
    );
}

#[test]
fn the_batch_guides_input_and_output_become_cases_with_recorded_references() {
    let project = Project::new(&[]);
    let input = data("openai_batch_input_file.jsonl");
    let output = data("openai_batch_output_file.jsonl");
    let errors = data("openai_batch_error_file_expired.jsonl");
    let out = import(
        &project,
        &[
            "openai-batch",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--output",
            errors.to_str().unwrap(),
            "--suite",
            "batch-guide",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("2 cases from 2 requests (2 with recorded answers)"),
        "{stdout}"
    );

    let cases = cases(&project, "batch-guide");
    let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["000001-request-1.json", "000002-request-2.json"]);
    let (_, first) = &cases[0];
    assert_eq!(
        first["messages"],
        json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello world!"}
        ])
    );
    // The output file lists request-2 first: answers are joined by custom_id.
    assert_eq!(
        first["reference"],
        json!({
            "model": "gpt-3.5-turbo-0125",
            "served_model": "gpt-3.5-turbo-0125",
            "recorded_at": "2024-03-28T19:06:29Z",
            "source": "openai_batch_output_file.jsonl:2",
            "answers": [{"text": "Hello! How can I assist you today?"}]
        })
    );
    assert_eq!(
        cases[1].1["reference"]["answers"],
        json!([{"text": "Hello."}])
    );
    // The agreed format, read by the type that `conform check` uses.
    for (name, case) in &cases {
        let reference: conform_config::Reference =
            serde_json::from_value(case["reference"].clone()).unwrap();
        assert!(reference.problems().is_empty(), "{name}");
        assert_eq!(reference.kind(), conform_config::ReferenceKind::Text);
        assert!(case.get("expected").is_none() && case.get("expect").is_none());
    }
    // What a case cannot carry is said, not silently lost.
    let notes =
        std::fs::read_to_string(project.path("fixtures/batch-guide/IMPORT_NOTES.md")).unwrap();
    assert!(notes.contains("- `max_tokens`: 2 requests"), "{notes}");
    assert!(
        notes.contains(
            "openai_batch_input_file.jsonl: 2 answers in the output files match no request of this input"
        ),
        "{notes}"
    );
    let suite = std::fs::read_to_string(project.path("fixtures/batch-guide/suite.toml")).unwrap();
    assert!(suite.contains("schema = \"schema.json\""), "{suite}");
    assert_eq!(
        read_json(&project.path("fixtures/batch-guide/schema.json")),
        json!({})
    );
}

/// A chat completion answering with the text the batch output recorded for the same
/// conversation, and the usage OpenAI would report.
struct Primary;

impl Respond for Primary {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        let text = if system.contains("unhelpful") {
            "Hello."
        } else {
            "Hello! How can I assist you today?"
        };
        let prompt = common::prompt_tokens_o200k(&body);
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1711652795,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
        }))
    }
}

/// `conform check` accepts the suite, and `conform run --record` then `--replay` runs it,
/// each ending with exit code `code` (and, when given, naming `reason`).
fn check_record_and_replay(
    project: &Project,
    suite: &str,
    server: &MockServer,
    code: i32,
    reason: Option<&str>,
) {
    let check = project.cmd().arg("check").output().unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
    let run = |extra: &[&str], key: bool| {
        let mut cmd = project.cmd();
        if key {
            cmd.env("OPENAI_API_KEY", common::TEST_KEY);
        }
        cmd.args([
            "run",
            "openai",
            "--suite",
            suite,
            "--no-progress",
            "--base-url",
        ])
        .arg(server.uri())
        .args(extra)
        .output()
        .unwrap()
    };
    let recorded = run(&["--record", "tapes"], true);
    assert_eq!(
        recorded.status.code(),
        Some(code),
        "{}",
        text(&recorded.stdout)
    );
    if let Some(reason) = reason {
        assert!(
            text(&recorded.stdout).contains(reason),
            "{}",
            text(&recorded.stdout)
        );
    }
    if reason == Some("insufficient_evidence") {
        // Why says what the calls rule out and what to do, not the bare code.
        let why = text(&recorded.stdout);
        assert!(
            why.contains("which rules out a failure rate above")
                && why.contains("add cases or repeats"),
            "{why}"
        );
    }
    let replayed = run(&["--replay", "tapes"], false);
    let stdout = text(&replayed.stdout);
    assert_eq!(
        replayed.status.code(),
        Some(code),
        "{stdout}{}",
        text(&replayed.stderr)
    );
    if let Some(reason) = reason {
        assert!(stdout.contains(reason), "{stdout}");
    }
    assert!(
        stdout.contains("the answers were replayed from tapes"),
        "{stdout}"
    );
}

/// A project with an OpenAI provider asking for JSON mode, which sends no schema: the
/// imported suites below carry none (`{}`), which OpenAI's strict mode would refuse.
fn project_with_openai() -> Project {
    let project = Project::new(&[]);
    project.write(
        "providers/openai.toml",
        "kind = \"openai\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"OPENAI_API_KEY\"\n\
         temperature = 0\nstructured_output = \"json_object\"\n\n[tokenizer]\nkind = \"tiktoken\"\n\
         encoding = \"o200k_base\"\ncontext_window = 128000\n",
    );
    project
}

async fn primary() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Primary)
        .mount(&server)
        .await;
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn an_imported_batch_input_passes_check_and_replays() {
    let project = project_with_openai();
    let input = data("openai_batch_input_file.jsonl");
    let out = import(
        &project,
        &[
            "openai-batch",
            input.to_str().unwrap(),
            "--suite",
            "batch-requests",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // With no recorded answer, a request that asked for no JSON and no tools is answered
    // in text.
    for (_, case) in cases(&project, "batch-requests") {
        assert_eq!(case["expect"], json!({"tool_calls": "none"}));
    }
    let server = primary().await;
    // Two passed calls rule out only a 77.6 % failure rate, not the default 10 %: the run
    // is inconclusive and grants nothing, live and replayed alike.
    check_record_and_replay(
        &project,
        "batch-requests",
        &server,
        3,
        Some("insufficient_evidence"),
    );
}

/// Needs the `reference` field of a case (`Case::reference` and its answer-kind
/// inference in src/config/suite.rs, branch i14-ref): on this branch a case file with
/// `reference` is refused as an unknown field.
#[tokio::test(flavor = "multi_thread")]
async fn an_imported_batch_with_its_answers_passes_check_and_replays() {
    let project = project_with_openai();
    let input = data("openai_batch_input_file.jsonl");
    let output = data("openai_batch_output_file.jsonl");
    let out = import(
        &project,
        &[
            "openai-batch",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--suite",
            "batch-guide",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let server = primary().await;
    // One recorded answer per request is no floor for the primary's own noise: the run
    // is inconclusive (exit 3) and grants nothing, live and replayed alike.
    check_record_and_replay(
        &project,
        "batch-guide",
        &server,
        3,
        Some("reference_no_floor"),
    );
}

const EMAIL: &str = "Maren.Holm@example.org";
const PHONE: &str = "+46 8 555 012 34";
const CARD: &str = "4111 1111 1111 1111";

#[test]
fn no_original_email_phone_or_card_survives_in_any_file_written() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    let request = |id: &str, user: &str| {
        json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions", "body": {
            "model": "gpt-4o", "temperature": 0,
            "messages": [
                {"role": "system", "content": "Support agent. Escalations go to ops@brightwell.example."},
                {"role": "user", "content": user}
            ],
            "tools": [{"type": "function", "function": {"name": "lookup_customer",
                "description": "Find a customer by e-mail or phone",
                "parameters": {"type": "object", "properties": {"email": {"type": "string"}}}}}]
        }})
    };
    let lines = [
        request(
            &format!("ticket {EMAIL}"),
            &format!(
                "I'm {EMAIL}, call me on {PHONE}. My card {CARD} was charged twice. Again: {}",
                EMAIL.to_lowercase()
            ),
        ),
        request(
            "ticket-2",
            "My number is (555) 123-4567 and card 5500-0055-5555-5559.",
        ),
    ];
    std::fs::write(
        &input,
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let answer = json!({"custom_id": format!("ticket {EMAIL}"), "response": {"status_code": 200, "body": {
        "created": 1764590400, "model": "gpt-4o-2024-08-06",
        "choices": [{"message": {"content": null, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "lookup_customer", "arguments": format!("{{\"email\": \"{EMAIL}\"}}")}}]}}]
    }}, "error": null});
    std::fs::write(&output, answer.to_string() + "\n").unwrap();

    let out = import(
        &project,
        &[
            "openai-batch",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--suite",
            "pii",
            "--redact-regex",
            r"brightwell\.example",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));

    // Every byte of every file written, and what was printed.
    let mut written = Vec::new();
    walk(&project.path("fixtures/pii"), &mut written);
    assert!(written.len() >= 5, "{written:?}");
    let secrets = [
        EMAIL.to_string(),
        EMAIL.to_lowercase(),
        "maren.holm".into(),
        PHONE.into(),
        "555 012 34".into(),
        "46855501234".into(),
        CARD.into(),
        "4111111111111111".into(),
        "1111 1111".into(),
        "123-4567".into(),
        "5500-0055".into(),
        "5500005555555559".into(),
        "brightwell.example".into(),
    ];
    for (file, bytes) in written
        .iter()
        .chain([(PathBuf::from("stdout"), out.stdout.clone())].iter())
    {
        let lower = String::from_utf8_lossy(bytes).to_lowercase();
        // JSON escapes nothing in these values, but compare unescaped text too.
        let unescaped = lower.replace("\\\"", "\"");
        for s in &secrets {
            let s = s.to_lowercase();
            assert!(
                !lower.contains(&s) && !unescaped.contains(&s),
                "{} holds `{s}`",
                file.display()
            );
        }
    }
    // Stable within a case: the address in the question, in any case, and in the
    // recorded call are one placeholder.
    let cases = cases(&project, "pii");
    let first = &cases[0].1;
    let user = first["messages"][1]["content"].as_str().unwrap();
    assert_eq!(
        user,
        "I'm <EMAIL_1>, call me on <PHONE_1>. My card <CARD_1> was charged twice. Again: <EMAIL_1>"
    );
    assert_eq!(
        first["reference"]["answers"][0]["tool_calls"][0]["arguments"],
        json!({"email": "<EMAIL_1>"})
    );
    assert_eq!(
        first["messages"][0]["content"],
        "Support agent. Escalations go to ops@<REDACTED_1>."
    );
    assert!(
        cases[0].0.starts_with("000001-ticket-email-1"),
        "{}",
        cases[0].0
    );
    assert_eq!(
        cases[1].1["messages"][1]["content"],
        "My number is <PHONE_1> and card <CARD_1>."
    );
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
}

fn chat_line(user: &str) -> String {
    json!({"model": "gpt-4o", "messages": [{"role": "user", "content": user}]}).to_string() + "\n"
}

#[test]
fn a_malformed_line_is_an_error_naming_it_and_nothing_is_left_behind() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("requests.jsonl");

    let cases = [
        (
            format!("{}{}{{\"messages\": [\n", chat_line("a"), chat_line("b")),
            "requests.jsonl:3: (line): not JSON at column",
        ),
        (
            format!("{}{{\"model\": \"m\"}}\n", chat_line("a")),
            "requests.jsonl:2: messages: missing",
        ),
        (
            format!(
                "{}{{\"messages\": [{{\"role\": \"user\", \"content\": 7}}]}}\n",
                chat_line("a")
            ),
            "requests.jsonl:2: messages[0].content: must be a string",
        ),
    ];
    for (text_in, expected) in cases {
        std::fs::write(&input, text_in).unwrap();
        let out = import(
            &project,
            &["jsonl", input.to_str().unwrap(), "--suite", "broken"],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{expected}\n{stderr}");
        assert!(stderr.contains("nothing was written"), "{stderr}");
        only_shipped_suites(&project);
    }

    // A Batch line without its body names the field.
    std::fs::write(
        &input,
        "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\"}\n",
    )
    .unwrap();
    let out = import(
        &project,
        &["openai-batch", input.to_str().unwrap(), "--suite", "broken"],
    );
    assert!(
        text(&out.stderr).contains("requests.jsonl:1: body: missing"),
        "{}",
        text(&out.stderr)
    );
    only_shipped_suites(&project);

    // A line over the cap is refused by its number, without reading it whole.
    std::fs::write(
        &input,
        format!("{}{}", chat_line("a"), chat_line(&"x".repeat(500))),
    )
    .unwrap();
    let out = import(
        &project,
        &[
            "jsonl",
            input.to_str().unwrap(),
            "--suite",
            "big",
            "--max-line-bytes",
            "200",
        ],
    );
    assert!(
        text(&out.stderr).contains("requests.jsonl:2: the line is longer than 200 bytes"),
        "{}",
        text(&out.stderr)
    );
    only_shipped_suites(&project);

    // More distinct requests than --max-cases.
    std::fs::write(
        &input,
        (0..5)
            .map(|i| chat_line(&format!("q{i}")))
            .collect::<String>(),
    )
    .unwrap();
    let out = import(
        &project,
        &[
            "jsonl",
            input.to_str().unwrap(),
            "--suite",
            "many",
            "--max-cases",
            "4",
        ],
    );
    assert!(
        text(&out.stderr).contains("more than 4 distinct requests"),
        "{}",
        text(&out.stderr)
    );
    only_shipped_suites(&project);

    // An existing suite is never replaced without --force.
    let out = import(
        &project,
        &["jsonl", input.to_str().unwrap(), "--suite", "ticket-triage"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("pass --force"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        project
            .path("fixtures/ticket-triage/cases/001-leaked-api-keys-on-github.json")
            .exists()
    );
}

#[test]
fn duplicates_are_dropped_and_a_sample_is_reproducible() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("traffic.jsonl");
    // 60 lines, 40 distinct requests: every third line repeats an earlier request, with
    // other sampling settings and keys in another order (the same canonical request).
    let mut lines = String::new();
    let mut distinct = 0;
    for i in 0..60 {
        if i % 3 == 2 {
            let q = format!("question {}", i - 2);
            lines.push_str(
                &(json!({"messages": [{"content": q, "role": "user"}], "temperature": 0.7})
                    .to_string()
                    + "\n"),
            );
        } else {
            lines.push_str(&chat_line(&format!("question {i}")));
            distinct += 1;
        }
    }
    assert_eq!(distinct, 40);
    std::fs::write(&input, lines).unwrap();

    let all = import(
        &project,
        &["jsonl", input.to_str().unwrap(), "--suite", "all"],
    );
    let stdout = text(&all.stdout);
    assert_eq!(all.status.code(), Some(0), "{stdout}{}", text(&all.stderr));
    assert!(stdout.contains("40 cases from 60 requests"), "{stdout}");
    assert!(stdout.contains("20 duplicates dropped"), "{stdout}");
    assert_eq!(cases(&project, "all").len(), 40);

    let sample = |suite: &str, seed: &str| {
        let out = import(
            &project,
            &[
                "jsonl",
                input.to_str().unwrap(),
                "--suite",
                suite,
                "--sample",
                "10",
                "--seed",
                seed,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("10 cases from 60 requests"),
            "{}",
            text(&out.stdout)
        );
        assert!(
            text(&out.stdout).contains("30 left out by --sample"),
            "{}",
            text(&out.stdout)
        );
        cases(project_ref(&project), suite)
    };
    let a = sample("s1", "7");
    let b = sample("s2", "7");
    let c = sample("s3", "8");
    assert_eq!(a, b, "the same seed picks the same cases");
    assert_ne!(
        a.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        c.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    // Sampled cases are the requests as they were, named by their line.
    let (name, case) = &a[0];
    let line: usize = name[..6].parse().unwrap();
    assert_eq!(
        case["messages"][0]["content"],
        format!("question {}", line - 1)
    );
}

fn project_ref(p: &Project) -> &Project {
    p
}

#[test]
fn responses_api_pairs_become_cases_with_their_schema() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pairs.jsonl");
    let schema = json!({"type": "object", "properties": {"category": {"type": "string", "enum": ["billing", "bug"]}},
        "required": ["category"], "additionalProperties": false});
    let line = |q: &str, a: &str| {
        json!({
            "request": {"model": "gpt-4.1", "instructions": "Classify the ticket.", "input": q,
                "text": {"format": {"type": "json_schema", "name": "triage", "schema": schema, "strict": true}}},
            "response": {"id": "resp_1", "object": "response", "created_at": 1764590400, "model": "gpt-4.1-2025-04-14",
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": a}]}]}
        })
        .to_string()
            + "\n"
    };
    std::fs::write(
        &input,
        line("I was charged twice", "{\"category\":\"billing\"}")
            + &line("The app crashes", "{\"category\":\"bug\"}"),
    )
    .unwrap();
    let out = import(
        &project,
        &["jsonl", input.to_str().unwrap(), "--suite", "triage"],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("schema.json: the one JSON Schema all 2 requests asked for"),
        "{stdout}"
    );
    assert_eq!(
        read_json(&project.path("fixtures/triage/schema.json")),
        schema
    );
    let cases = cases(&project, "triage");
    assert_eq!(
        cases[0].1["messages"],
        json!([{"role": "system", "content": "Classify the ticket."}, {"role": "user", "content": "I was charged twice"}])
    );
    assert_eq!(cases[0].1["reference"]["source"], "pairs.jsonl:1");
    assert_eq!(
        cases[0].1["reference"]["recorded_at"],
        "2025-12-01T12:00:00Z"
    );
    let reference: conform_config::Reference =
        serde_json::from_value(cases[1].1["reference"].clone()).unwrap();
    assert_eq!(reference.kind(), conform_config::ReferenceKind::Json);
}

#[test]
fn a_promptfoo_config_becomes_a_suite_and_says_what_it_left_behind() {
    let project = Project::new(&["sim-steady"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("promptfooconfig.yaml"),
        r#"description: Ticket triage
prompts:
  - |
    Classify this support ticket as JSON.
    Subject: {{subject}}
    Body: {{body}}
providers:
  - openai:gpt-4o-mini
defaultTest:
  assert:
    - type: is-json
      value:
        type: object
        required: [category]
        properties:
          category: {type: string, enum: [billing, bug, other]}
tests:
  - description: Double charge
    vars:
      subject: Charged twice
      body: "My card was charged twice, reach me at ana@example.com"
    assert:
      - type: javascript
        value: JSON.parse(output).category === 'billing'
  - vars:
      subject: Crash
      body: The app crashes on start
    options:
      transform: output.trim()
  - file://more.csv
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("more.csv"),
        "subject,body,__expected,__description\nRefund,\"Where is my refund, \"\"please\"\"?\",llm-rubric: is polite,Refund status\n",
    )
    .unwrap();
    let config = dir.path().join("promptfooconfig.yaml");
    let out = import(
        &project,
        &["promptfoo", config.to_str().unwrap(), "--suite", "pf"],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("3 cases from 3 requests"), "{stdout}");
    for expected in [
        "promptfooconfig.yaml: providers: not carried over",
        "promptfooconfig.yaml: tests[0]: assertion `javascript` not carried over",
        "promptfooconfig.yaml: tests[1]: `options` not carried over",
        "more.csv:2: assertion `llm-rubric` not carried over",
    ] {
        assert!(stdout.contains(expected), "{expected}\n{stdout}");
    }
    let notes = std::fs::read_to_string(project.path("fixtures/pf/IMPORT_NOTES.md")).unwrap();
    assert!(
        notes.contains("more.csv:2: assertion `llm-rubric` not carried over"),
        "{notes}"
    );
    assert_eq!(
        read_json(&project.path("fixtures/pf/schema.json"))["properties"]["category"]["enum"],
        json!(["billing", "bug", "other"])
    );
    let cases = cases(&project, "pf");
    assert_eq!(cases[0].1["description"], "Double charge");
    assert_eq!(
        cases[0].1["vars"]["body"],
        "My card was charged twice, reach me at <EMAIL_1>"
    );
    assert_eq!(
        cases[2].1["vars"]["body"],
        "Where is my refund, \"please\"?"
    );
    assert_eq!(cases[2].1["description"], "Refund status");
    // Every case renders through the suite's template, offline.
    let check = project.cmd().arg("check").output().unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
    let suite = conform_config::Suite::load(&project.path("fixtures/pf")).unwrap();
    let case = suite.cases[1].load().unwrap();
    let prompt = suite.render(&case, &suite.cases[1].path()).unwrap();
    assert_eq!(
        prompt.user,
        "Classify this support ticket as JSON.\nSubject: Crash\nBody: The app crashes on start"
    );
}

#[test]
fn logged_template_syntax_is_sent_as_it_was() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("code.jsonl");
    let question = "Why does {{ user.name }} print nothing in my {% for %} loop?\n";
    std::fs::write(&input, chat_line(question)).unwrap();
    let out = import(
        &project,
        &["jsonl", input.to_str().unwrap(), "--suite", "code"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let suite = conform_config::Suite::load(&project.path("fixtures/code")).unwrap();
    let case = suite.cases[0].load().unwrap();
    let rendered = suite.request(&case, &suite.cases[0].path()).unwrap();
    let conversation = rendered.conversation.unwrap();
    assert_eq!(conversation.messages[0].content.as_deref(), Some(question));
}

#[test]
fn a_request_logged_again_adds_its_answer_as_a_repeat() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pairs.jsonl");
    let pair = |q: &str, a: &str, model: &str| {
        json!({
            "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": q}]},
            "response": {"created": 1764590400, "model": model,
                "choices": [{"message": {"role": "assistant", "content": a}}]}
        })
        .to_string()
            + "\n"
    };
    let lines = [
        pair(
            "Classify: refund please",
            "{\"category\":\"billing\"}",
            "gpt-4o-2024-08-06",
        ),
        pair(
            "Classify: app crashes",
            "{\"category\":\"bug\"}",
            "gpt-4o-2024-08-06",
        ),
        pair(
            "Classify: refund please",
            "{\"category\":\"refund\"}",
            "gpt-4o-2024-08-06",
        ),
        // Another served model: not the same noise, left out.
        pair(
            "Classify: refund please",
            "{\"category\":\"billing\"}",
            "gpt-4o-2024-11-20",
        ),
    ];
    std::fs::write(&input, lines.concat()).unwrap();
    for extra in [&[][..], &["--sample", "5", "--seed", "1"][..]] {
        let out = project
            .cmd()
            .args([
                "import",
                "jsonl",
                input.to_str().unwrap(),
                "--suite",
                "repeats",
                "--force",
            ])
            .args(extra)
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        assert!(
            stdout.contains("2 duplicates dropped (1 answers kept as repeats)"),
            "{stdout}"
        );
        let cases = cases(&project, "repeats");
        assert_eq!(
            cases[0].1["reference"]["answers"],
            json!([{"text": "{\"category\":\"billing\"}"}, {"text": "{\"category\":\"refund\"}"}]),
            "{extra:?}"
        );
        assert_eq!(
            cases[1].1["reference"]["answers"].as_array().unwrap().len(),
            1
        );
    }
}

/// The Batch output index (on disk, in the import's staging folder): a second answer to
/// a custom_id replaces the first and is noted, a skipped request's answer is not counted
/// as unmatched, an answer to no request is; and the scratch file does not reach the
/// suite.
#[test]
fn the_batch_output_index_keeps_the_last_answer_and_leaves_nothing_in_the_suite() {
    let project = Project::new(&[]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    let request = |id: &str, url: &str, user: &str| {
        json!({"custom_id": id, "method": "POST", "url": url,
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": user}]}})
        .to_string()
            + "\n"
    };
    let answer = |id: &str, text: &str| {
        json!({"id": format!("batch_req_{id}"), "custom_id": id, "error": null,
            "response": {"status_code": 200, "body": {"created": 1764590400, "model": "gpt-4o-mini-2024-07-18",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}}})
        .to_string()
            + "\n"
    };
    std::fs::write(
        &input,
        [
            request("a", "/v1/chat/completions", "First question"),
            request("b", "/v1/embeddings", "Embed me"),
            request("c", "/v1/chat/completions", "Unanswered question"),
        ]
        .concat(),
    )
    .unwrap();
    std::fs::write(
        &output,
        [
            answer("a", "first answer"),
            answer("b", "an answer to a skipped request"),
            answer("a", "second answer"),
            answer("z", "an answer to no request"),
        ]
        .concat(),
    )
    .unwrap();
    let out = import(
        &project,
        &[
            "openai-batch",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--suite",
            "indexed",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));

    let cases = cases(&project, "indexed");
    let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["000001-a.json", "000003-c.json"]);
    assert_eq!(
        cases[0].1["reference"]["answers"],
        json!([{"text": "second answer"}])
    );
    assert_eq!(cases[0].1["reference"]["source"], "out.jsonl:3");
    assert!(cases[1].1.get("reference").is_none());

    let notes = std::fs::read_to_string(project.path("fixtures/indexed/IMPORT_NOTES.md")).unwrap();
    for note in [
        "out.jsonl:3: a second answer to the same custom_id: the last one is kept",
        "in.jsonl:2: `url` /v1/embeddings: only /v1/chat/completions and /v1/responses requests become cases",
        "in.jsonl:3: no line of the output files answers this custom_id: the case has no reference",
        "in.jsonl: 1 answers in the output files match no request of this input",
    ] {
        assert!(notes.contains(note), "{note}\n{notes}");
    }

    let mut files: Vec<String> = std::fs::read_dir(project.path("fixtures/indexed"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["IMPORT_NOTES.md", "cases", "schema.json", "suite.toml"]
    );
    only_shipped_suites_and(&project, &["indexed"]);
}

/// Nothing in fixtures/ but the shipped suites and `more`: no temporary folder left.
fn only_shipped_suites_and(project: &Project, more: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(project.path("fixtures"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = [
        "invoice-extraction",
        "smollm2-smoke",
        "support-agent",
        "ticket-triage",
    ]
    .iter()
    .chain(more)
    .map(|s| s.to_string())
    .collect();
    expected.sort();
    assert_eq!(names, expected);
}
