//! `conform init`: a new project from a primary, fallbacks and, optionally, logged
//! traffic; never over an existing one.

use std::path::Path;

use serde_json::json;

fn conform(dir: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("conform")
        .unwrap()
        .current_dir(dir)
        .env_remove("CONFORM_ROOT")
        .env_remove("CONFORM_ALLOWLIST")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn logged_traffic_becomes_the_suite_and_the_printed_commands_work() {
    let dir = tempfile::tempdir().unwrap();
    let traffic = dir.path().join("logged.jsonl");
    let line = |q: &str, a: &str| {
        json!({
            "request": {"model": "gpt-4o", "messages": [
                {"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": q}]},
            "response": {"id": "x", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": a}}]}
        })
        .to_string()
            + "\n"
    };
    std::fs::write(
        &traffic,
        line("Capital of France?", "Paris") + &line("2+2?", "4"),
    )
    .unwrap();
    let root = dir.path().join("project");
    let out = conform(
        dir.path(),
        &[
            "--root",
            "project",
            "init",
            "--fallback",
            "vllm:http://127.0.0.1:8000/v1",
            "--traffic",
            traffic.to_str().unwrap(),
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        root.join("fixtures/traffic/suite.toml").is_file(),
        "{stdout}"
    );
    assert!(!root.join("fixtures/ticket-triage").exists());
    let vllm = std::fs::read_to_string(root.join("providers/vllm.toml")).unwrap();
    assert!(
        vllm.contains("base_url = \"http://127.0.0.1:8000/v1\""),
        "{vllm}"
    );
    assert!(vllm.contains("kind = \"openai-compatible\""), "{vllm}");
    let workflow = std::fs::read_to_string(root.join(".github/workflows/conform.yml")).unwrap();
    assert!(
        workflow.contains("OPENAI_API_KEY: ${{ secrets.OPENAI_API_KEY }}"),
        "{workflow}"
    );
    assert!(workflow.contains("- run: conform run vllm"), "{workflow}");
    // The next commands, as printed: `cd`, then `conform check` passes on what was written.
    let next: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "next:")
        .skip(1)
        .map(str::trim)
        .collect();
    assert_eq!(
        next,
        [
            "cd project",
            "conform check",
            "conform run vllm",
            "conform gate --suite traffic --provider vllm"
        ]
    );
    let check = conform(&root, &["check"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
}

#[test]
fn a_folder_that_holds_a_project_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("providers")).unwrap();
    std::fs::write(
        dir.path().join("providers/openai.toml"),
        "kind = \"openai\"\n",
    )
    .unwrap();
    let out = conform(dir.path(), &["init", "--fallback", "anthropic"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("providers/openai.toml"), "{stderr}");
    assert!(stderr.contains("never overwrites"), "{stderr}");
    assert!(!dir.path().join("README.md").exists());
    assert!(!dir.path().join("providers/anthropic.toml").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("providers/openai.toml")).unwrap(),
        "kind = \"openai\"\n"
    );
}

#[test]
fn a_fallback_that_is_neither_an_address_nor_a_vendor_says_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["vllm:host:8000", "vllm", "my server:http://h"] {
        let out = conform(dir.path(), &["init", "--fallback", bad]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("NAME:URL"), "{bad}: {stderr}");
    }
    let out = conform(dir.path(), &["init", "--provider", "openai-responses"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("docs/providers.md"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A fallback called `llamacpp` is written as a llama.cpp server serving a model llama.cpp
/// serves, at the address given: not "A vLLM server" serving Qwen.
#[test]
fn a_llamacpp_fallback_is_written_as_a_llama_cpp_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = conform(
        dir.path(),
        &["init", "--fallback", "llamacpp:http://127.0.0.1:8090"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let file = std::fs::read_to_string(dir.path().join("providers/llamacpp.toml")).unwrap();
    assert!(file.starts_with("# llama.cpp's llama-server."), "{file}");
    assert!(file.contains("model = \"SmolLM2-135M-Instruct\""), "{file}");
    assert!(
        file.contains("base_url = \"http://127.0.0.1:8090\""),
        "{file}"
    );
    assert!(!file.contains("vLLM") && !file.contains("Qwen"), "{file}");
    // Any other server is still written from the shipped vLLM file.
    let other = tempfile::tempdir().unwrap();
    let out = conform(
        other.path(),
        &["init", "--fallback", "vllm:http://h:8000/v1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let file = std::fs::read_to_string(other.path().join("providers/vllm.toml")).unwrap();
    assert!(file.contains("vLLM"), "{file}");
}
