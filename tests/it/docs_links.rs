//! What a newcomer reads points at files that are in the repository: every relative link
//! in README.md, ARCHITECTURE.md, BENCHMARKS.md and docs/ resolves, every `#anchor` names
//! a heading, and every Markdown file named in `code` is there too.

use std::path::{Path, PathBuf};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"]
        .iter()
        .map(|p| Path::new(REPO).join(p))
        .collect();
    let mut dirs = vec![Path::new(REPO).join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// `[text](target)` targets, in order.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_string());
        }
    }
    out
}

/// Paths to Markdown files written as code: `docs/x.md`.
fn code_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            span.ends_with(".md")
                && span.contains('/')
                && !span.contains(char::is_whitespace)
                && !span.contains('<')
        })
        .map(str::to_string)
        .collect()
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_link_and_named_document_is_in_the_repository() {
    let mut broken = Vec::new();
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        let name = page.strip_prefix(REPO).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            if file.is_empty() {
                if !anchors(&text).contains(&anchor.to_string()) {
                    broken.push(format!("{name}: #{anchor} is no heading of this page"));
                }
            } else if !dir.join(file).exists() {
                broken.push(format!(
                    "{name}: link to {file}, which is not in the repository"
                ));
            } else if !anchor.is_empty() && file.ends_with(".md") {
                // A section that moved to another page leaves its old links behind.
                let other = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
                if !anchors(&other).contains(&anchor.to_string()) {
                    broken.push(format!("{name}: {file}#{anchor} is no heading of {file}"));
                }
            }
        }
        for path in code_paths(&text) {
            if !dir.join(&path).exists() && !Path::new(REPO).join(&path).exists() {
                broken.push(format!(
                    "{name}: names `{path}`, which is not in the repository"
                ));
            }
        }
    }
    assert!(links > 3, "no links found: the scan is broken");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_orchestrator_contract_is_linked_from_the_readme_and_kept_here() {
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    assert!(
        link_targets(&readme)
            .iter()
            .any(|t| t == "docs/contract/ORCHESTRATOR.md"),
        "README does not link the contract"
    );
    let contract =
        std::fs::read_to_string(Path::new(REPO).join("docs/contract/ORCHESTRATOR.md")).unwrap();
    assert!(contract.contains("conform.orchestrator/v1"));
}

#[test]
fn the_scan_finds_what_it_must() {
    assert_eq!(
        link_targets("see [a](docs/a.md) and [b](#set-up)."),
        ["docs/a.md", "#set-up"]
    );
    assert_eq!(
        code_paths("`contract/X.md` and `summary.md` and `a b/c.md`"),
        ["contract/X.md"]
    );
    assert_eq!(
        slug(" A real model on loopback"),
        "a-real-model-on-loopback"
    );
    assert_eq!(
        slug(" Gateway exports: LiteLLM and Portkey"),
        "gateway-exports-litellm-and-portkey"
    );
}
