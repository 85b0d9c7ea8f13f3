//! README's tour, run literally: every line of its `sh` block, in an empty folder, with
//! two mock servers at the addresses it names (one faithful, one that wraps its JSON in
//! markdown fences). Each line exits as its `# exit N` comment says (0 when it says
//! nothing), and the tour ends with `gate` permitting one fallback and denying the other.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Mode, OpenAiMock, answer_book};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// The `sh` block after README's `<!-- tour` marker, as (command, expected exit) lines.
fn tour() -> Vec<(String, i32)> {
    let readme = std::fs::read_to_string(Path::new(common::REPO).join("README.md")).unwrap();
    let after = &readme[readme.find("<!-- tour").expect("README has a tour")..];
    let block = after
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (command, comment) = line.split_once(" #").unwrap_or((line, ""));
            let exit = comment
                .trim()
                .strip_prefix("exit ")
                .and_then(|rest| rest.split(':').next())
                .map_or(0, |n| n.trim().parse().unwrap());
            (command.trim().to_string(), exit)
        })
        .collect()
}

async fn mock(mode: Mode) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(OpenAiMock {
            book: answer_book(Path::new(common::REPO)),
            mode,
        })
        .mount(&server)
        .await;
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_tour_ends_with_gate_permitting_the_good_fallback_and_denying_the_other() {
    let faithful = mock(Mode::Faithful).await;
    let fenced = mock(Mode::Fenced).await;
    let empty = tempfile::tempdir().unwrap();
    let mut here: PathBuf = empty.path().to_path_buf();
    let lines = tour();
    assert!(lines.len() >= 5, "{lines:?}");
    let mut gates = Vec::new();
    for (line, expected) in &lines {
        let line = line
            .replace("http://localhost:8000", &faithful.uri())
            .replace("http://localhost:8001", &fenced.uri());
        for step in line.split(" && ") {
            let words: Vec<&str> = step.split_whitespace().collect();
            match words.as_slice() {
                ["mkdir", dir] => std::fs::create_dir_all(here.join(dir)).unwrap(),
                ["cd", dir] => here = here.join(dir),
                ["conform", args @ ..] => {
                    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                    let dir = here.clone();
                    let out = tokio::task::spawn_blocking(move || {
                        assert_cmd::Command::cargo_bin("conform")
                            .unwrap()
                            .current_dir(dir)
                            .env_remove("CONFORM_ROOT")
                            .env_remove("CONFORM_ALLOWLIST")
                            .env_remove("OPENAI_API_KEY")
                            .args(&args)
                            .output()
                            .unwrap()
                    })
                    .await
                    .unwrap();
                    assert_eq!(
                        out.status.code(),
                        Some(*expected),
                        "`{step}`:\n{}\n{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    if words.get(1) == Some(&"gate") {
                        gates.push((words.last().unwrap().to_string(), *expected));
                    }
                }
                other => panic!("the tour runs a command this test does not know: {other:?}"),
            }
        }
    }
    assert_eq!(
        gates,
        [("vllm".to_string(), 0), ("llamacpp".to_string(), 1)],
        "the tour must end with gate permitting the good fallback and denying the drifting one"
    );
    assert!(!fenced.received_requests().await.unwrap().is_empty());
}
