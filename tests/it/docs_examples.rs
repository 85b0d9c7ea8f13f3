//! The examples in README.md and docs/ are kept honest: every provider file shown parses
//! as conform reads one, and every command line shown names a command and options that
//! `conform` has (its own `--help` parser decides). README's tour is run whole by
//! `tests/readme_tour.rs`, and docs/providers.md's retry table is the code's
//! (`provider::policy`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use conform_config::ProviderConfig;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(REPO).join("README.md")];
    for entry in std::fs::read_dir(Path::new(REPO).join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// The fenced blocks of `text` in `language`, each with the line it starts on.
fn blocks(text: &str, language: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(lang)) if lang.trim() == language => current = Some((i + 2, String::new())),
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_provider_file_shown_parses() {
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, body) in blocks(&text, "toml") {
            if !body.trim_start().starts_with("kind = ") {
                continue;
            }
            seen += 1;
            if let Err(e) = ProviderConfig::parse(Path::new("providers/example.toml"), &body) {
                panic!(
                    "{}:{line}: the provider file shown does not parse: {e:?}",
                    page.display()
                );
            }
        }
    }
    assert!(seen >= 1, "no provider file found in the docs");
}

/// `conform SUB [SUB2]` of every command line shown in an `sh` block, with its options.
fn commands() -> BTreeSet<(String, Vec<String>)> {
    let mut out = BTreeSet::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (_, body) in blocks(&text, "sh") {
            for line in body.lines() {
                let line = line.split(" # ").next().unwrap_or_default();
                for part in line.split("&&").chain(line.split('|').skip(1)) {
                    let words: Vec<&str> = part.split_whitespace().collect();
                    let Some(at) = words.iter().position(|w| *w == "conform") else {
                        continue;
                    };
                    let words = &words[at + 1..];
                    let subcommand: Vec<String> = words
                        .iter()
                        .take_while(|w| !w.starts_with('-'))
                        .take(2)
                        .map(|w| w.to_string())
                        .collect();
                    let options: Vec<String> = words
                        .iter()
                        .filter(|w| w.starts_with("--"))
                        .map(|w| w.split('=').next().unwrap_or_default().to_string())
                        .collect();
                    if !subcommand.is_empty() {
                        out.insert((subcommand.join(" "), options));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_command_line_shown_names_a_command_and_options_conform_has() {
    let commands = commands();
    assert!(commands.len() >= 10, "{commands:?}");
    let mut help_of = std::collections::BTreeMap::<String, String>::new();
    for (subcommand, options) in &commands {
        // `conform run openai`: the second word may be an argument, not a subcommand.
        let help = help_of.entry(subcommand.clone()).or_insert_with(|| {
            let words: Vec<&str> = subcommand.split(' ').collect();
            let try_help = |words: &[&str]| {
                let out = assert_cmd::Command::cargo_bin("conform")
                    .unwrap()
                    .args(words)
                    .arg("--help")
                    .output()
                    .unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            };
            try_help(&words)
                .or_else(|| try_help(&words[..1]))
                .unwrap_or_else(|| panic!("`conform {subcommand}` is shown but is no command"))
        });
        let global = ["--root", "--allowlist", "--reports", "--verbose", "--help"];
        for option in options {
            assert!(
                global.contains(&option.as_str()) || help.contains(option.as_str()),
                "`conform {subcommand}` is shown with {option}, which its --help does not list"
            );
        }
    }
}

/// The gateways `scripts/gateways.sh` installs.
const GATEWAYS: [&str; 3] = ["litellm", "portkey", "tensorzero"];

/// Every `--spawn` docs/gateways.md shows in a command block runs what
/// `scripts/gateways.sh install` installed: the script's `spawn` command, which names the
/// executable its `path` prints (the install's place, not `PATH`).
#[test]
fn the_gateways_page_spawns_what_the_install_script_installs() {
    let page = std::fs::read_to_string(Path::new(REPO).join("docs/gateways.md")).unwrap();
    let mut spawned = BTreeSet::new();
    for (_, body) in blocks(&page, "sh") {
        for line in body.lines().filter(|l| l.contains("--spawn")) {
            let gateway = GATEWAYS
                .into_iter()
                .find(|g| line.contains(&format!("--spawn \"$(scripts/gateways.sh spawn {g})\"")));
            assert!(
                gateway.is_some(),
                "not the install script's command: {line}"
            );
            spawned.extend(gateway);
        }
    }
    assert_eq!(spawned, BTreeSet::from(GATEWAYS), "{page}");
    let cache = tempfile::tempdir().unwrap();
    let script = |args: &[&str]| {
        let out = std::process::Command::new(Path::new(REPO).join("scripts/gateways.sh"))
            .args(args)
            .env("CONFORM_CACHE", cache.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    for gateway in GATEWAYS {
        let (path, spawn) = (script(&["path", gateway]), script(&["spawn", gateway]));
        assert!(
            path.starts_with(&cache.path().display().to_string()),
            "{path}"
        );
        assert!(spawn.contains(&format!("'{path}'")), "{spawn}");
        assert!(
            spawn.contains("{config}") || gateway == "portkey",
            "{spawn}"
        );
        // TensorZero's gateway picks its own port and prints its URL, which conform reads.
        assert!(
            spawn.contains("{port}") || gateway == "tensorzero",
            "{spawn}"
        );
    }
}
