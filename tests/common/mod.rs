//! Shared helpers for the integration tests: a throwaway project directory and a
//! wiremock responder that speaks OpenAI Chat Completions with the fixtures' answers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conform::config::Suite;
use conform::sim::AnswerBook;
use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A temporary project: the shipped fixtures and the named provider files.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new(providers: &[&str]) -> Project {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &Path::new(REPO).join("fixtures"),
            &dir.path().join("fixtures"),
        );
        std::fs::create_dir_all(dir.path().join("providers")).unwrap();
        for p in providers {
            let name = format!("{p}.toml");
            std::fs::copy(
                Path::new(REPO).join("providers").join(&name),
                dir.path().join("providers").join(&name),
            )
            .unwrap();
        }
        Project { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub fn cmd(&self) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::cargo_bin("conform").unwrap();
        cmd.current_dir(self.root()).arg("--root").arg(self.root());
        cmd.env_remove("OPENAI_API_KEY")
            .env_remove("CONFORM_ALLOWLIST")
            .env_remove("RUST_LOG");
        cmd
    }

    pub fn allowlist(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path("allowlist.json")).unwrap()).unwrap()
    }

    /// The newest run directory under reports/.
    pub fn last_run(&self) -> PathBuf {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(self.path("reports"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        runs.pop().expect("a run directory")
    }

    /// Every file under the project, as text (lossy), with its path.
    pub fn all_text(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        walk(self.root(), &mut out);
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The expected answers of the shipped suites.
pub fn answer_book(root: &Path) -> Arc<AnswerBook> {
    let suites: Vec<Suite> = ["invoice-extraction", "ticket-triage"]
        .iter()
        .map(|s| Suite::load(&root.join("fixtures").join(s)).unwrap())
        .collect();
    let refs: Vec<&Suite> = suites.iter().collect();
    Arc::new(AnswerBook::from_suites(&refs).unwrap())
}

/// How the mock OpenAI answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// The expected answer, as a recorded gpt-4o response would carry it.
    Faithful,
    /// The expected answer in markdown fences.
    Fenced,
    /// 401 with a body that echoes the bearer token back.
    EchoKey401,
}

/// Answers Chat Completions with the fixtures' expected answers; checks nothing itself,
/// so the tests can inspect the received requests.
pub struct OpenAiMock {
    pub book: Arc<AnswerBook>,
    pub mode: Mode,
}

impl Respond for OpenAiMock {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if self.mode == Mode::EchoKey401 {
            let auth = request
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            return ResponseTemplate::new(401).set_body_json(json!({"error": {
                "message": format!("Incorrect API key provided: {auth}."),
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}));
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let user = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string();
        let expected = self.book.answer(&user).cloned().unwrap_or(Value::Null);
        let content = match self.mode {
            Mode::Fenced => format!("```json\n{expected}\n```"),
            _ => expected.to_string(),
        };
        // As OpenAI does: the prompt tokens of gpt-4o-mini's encoding, billed per message.
        let prompt_tokens = prompt_tokens_o200k(&body);
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-test", "object": "chat.completion", "created": 1727346143,
            "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_test0001",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 60, "total_tokens": prompt_tokens + 60}
        }))
    }
}

/// The request's prompt tokens as OpenAI counts them for an o200k_base model.
pub fn prompt_tokens_o200k(body: &Value) -> u64 {
    use conform::tokenize::{Message, Tokenizer, tiktoken::Tiktoken};
    let messages: Vec<Message<'_>> = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| Message {
            role: m["role"].as_str().unwrap_or_default(),
            content: m["content"].as_str().unwrap_or_default(),
            name: m["name"].as_str(),
        })
        .collect();
    Tiktoken::shared("o200k_base")
        .unwrap()
        .count_messages(&messages)
        .unwrap()
}
