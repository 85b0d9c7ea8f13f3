//! Concurrent writers never lose an update: two `conform run` processes for different
//! providers, started together on one allowlist, end with both providers' entries; and
//! many writers at once in one process keep every entry.

use std::path::Path;
use std::process::{Command, Stdio};

use conform_gate::allowlist::{Allowlist, Change, Query, update};
use time::macros::datetime;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::common::{Mode, OpenAiMock, answer_book};
use super::support::{entry, project, validate};

/// Answers as the fixtures expect, a little slowly, so that the two runs overlap.
struct Slow(OpenAiMock);

impl Respond for Slow {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.0
            .respond(request)
            .set_delay(std::time::Duration::from_millis(15))
    }
}

#[test]
fn two_conform_runs_on_one_allowlist_keep_both_entries() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(Slow(OpenAiMock {
                book: answer_book(Path::new(env!("CARGO_MANIFEST_DIR"))),
                mode: Mode::Faithful,
            }))
            .mount(&server)
            .await;
        server
    });
    let suites = ["invoice-extraction", "ticket-triage"];
    for round in 0..3 {
        let dir = project();
        for provider in ["alpha", "beta"] {
            std::fs::write(
                dir.path().join("providers").join(format!("{provider}.toml")),
                format!(
                    "kind = \"openai-compatible\"\nmodel = \"{provider}-model\"\nbase_url = \"{}\"\n\n[limits]\nconcurrency = 4\n",
                    server.uri()
                ),
            )
            .unwrap();
        }
        let allowlist = dir.path().join("allowlist.json");
        let spawn = |provider: &str| {
            Command::new(assert_cmd::cargo::cargo_bin("conform"))
                .env_remove("CONFORM_ALLOWLIST")
                .env("CONFORM_ROOT", dir.path())
                .args(["run", provider, "--no-progress", "--repeats", "1"])
                .args(suites.iter().flat_map(|s| ["--suite", s]))
                .arg("--allowlist")
                .arg(&allowlist)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let alpha = spawn("alpha");
        let beta = spawn("beta");
        for (name, child) in [("alpha", alpha), ("beta", beta)] {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {name} exited {:?}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let list = Allowlist::load(&allowlist).unwrap();
        let mut pairs: Vec<(String, String)> = list
            .entries
            .iter()
            .map(|e| (e.suite.clone(), e.provider.clone()))
            .collect();
        pairs.sort();
        let mut expected: Vec<(String, String)> = suites
            .iter()
            .flat_map(|s| ["alpha", "beta"].map(|p| (s.to_string(), p.to_string())))
            .collect();
        expected.sort();
        assert_eq!(pairs, expected, "round {round}");
        // A real allowlist, written by real runs, validates against the published schema.
        validate(&allowlist).unwrap();
        let now = time::OffsetDateTime::now_utc();
        let paths = conform_config::Paths::under(dir.path());
        for e in &list.entries {
            let query = Query::new(&e.suite, &e.provider, now).project(&paths);
            assert!(
                conform_gate::allowlist::decide_query(&list, &query).is_ok(),
                "{e:?}"
            );
            assert!(!e.served_models.is_empty());
            assert!(e.evidence.checks.contains_key("schema"));
        }
    }
}

#[test]
fn many_writers_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowlist.json");
    let until = datetime!(2030-01-01 0:00 UTC);
    const WRITERS: usize = 8;
    const UPDATES: usize = 20;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let path = &path;
            s.spawn(move || {
                for u in 0..UPDATES {
                    let mut e = entry("invoices", &format!("provider-{w}"), until);
                    e.evidence.run_id = format!("run-{u}");
                    update(path, &[Change::Grant(Box::new(e))]).unwrap();
                }
            });
        }
    });
    let list = Allowlist::load(&path).unwrap();
    assert_eq!(list.entries.len(), WRITERS);
    for e in &list.entries {
        assert_eq!(e.evidence.run_id, format!("run-{}", UPDATES - 1));
    }
}
