//! The layer order of `src/`, kept (as rust-analyzer's tidy tests keep theirs).
//!
//! ARCHITECTURE.md writes the order once, in the fenced block after `<!-- layers -->`:
//! one line per layer, lowest first, the top-level modules of `src/` on it separated by
//! spaces. A module may name (`crate::x`) only modules on lower lines: never one above
//! it, never one beside it, so no cycle between folders can form. The binary
//! (`main.rs`, `cli/`) sits on top of everything and is not listed.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Each module's layer, lowest 0, read from ARCHITECTURE.md.
fn layers(architecture: &str) -> Result<BTreeMap<String, usize>, String> {
    let after = architecture
        .split_once("<!-- layers -->")
        .ok_or("ARCHITECTURE.md has no `<!-- layers -->` marker")?
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```")
        .and_then(|rest| rest.split_once('\n'))
        .and_then(|(_, rest)| rest.split_once("```"))
        .ok_or("the `<!-- layers -->` marker must be followed by a fenced block")?
        .0;
    let mut order = BTreeMap::new();
    for (layer, line) in block.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        for module in line.split_whitespace() {
            if order.insert(module.to_string(), layer).is_some() {
                return Err(format!("`{module}` is listed twice in the layers"));
            }
        }
    }
    Ok(order)
}

/// The top-level module a file of `src/` belongs to; `None` for the crate root and the
/// binary.
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    match name {
        "lib" | "main" | "cli" => None,
        _ => Some(name.to_string()),
    }
}

/// The code of a line, without what a `//` comment says.
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// Every `crate::NAME` a line of code names (in `use`, a path, or a macro).
fn named_modules(line: &str) -> impl Iterator<Item = &str> {
    code(line).match_indices("crate::").filter_map(|(at, _)| {
        let rest = &line[at + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// Every import that breaks the order, as `file:line: message`.
fn violations(src: &Path, order: &BTreeMap<String, usize>) -> Vec<String> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    collect(src, &mut files);
    files.sort();
    for file in files {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let Some(module) = module_of(relative) else {
            continue;
        };
        let Some(&own) = order.get(&module) else {
            found.push(format!(
                "src/{}: module `{module}` is not in ARCHITECTURE.md's layers; add it to the line it belongs on",
                relative.display()
            ));
            continue;
        };
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in text.lines().enumerate() {
            for named in named_modules(line) {
                if named == module {
                    continue;
                }
                let verdict = match order.get(named) {
                    None => continue, // a crate-root item (a macro or type in lib.rs)
                    Some(&layer) if layer < own => continue,
                    Some(&layer) if layer == own => "beside it on the same layer",
                    Some(_) => "above it",
                };
                found.push(format!(
                    "src/{}:{}: `{module}` names `crate::{named}`, which is {verdict} in ARCHITECTURE.md's layers",
                    relative.display(),
                    number + 1
                ));
            }
        }
    }
    found
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn every_import_points_down_the_documented_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let order = layers(&architecture).unwrap();
    let found = violations(&root.join("src"), &order);
    assert!(
        found.is_empty(),
        "imports against the layer order:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_of_src_is_placed_on_a_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let order = layers(&fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap()).unwrap();
    for entry in fs::read_dir(root.join("src")).unwrap().flatten() {
        if let Some(module) = module_of(Path::new(&entry.file_name())) {
            assert!(
                order.contains_key(&module),
                "src/{module} is not in the layers"
            );
        }
    }
}

/// The checker itself has teeth: an upward import, a sideways one and an unlisted module
/// are each caught, with the file and line; a downward one and a comment are not.
#[test]
fn the_checker_catches_an_upward_import() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir_all(src.join("config")).unwrap();
    fs::write(
        src.join("config/provider.rs"),
        "use std::fmt;\n// see crate::report for why\npub x: crate::report::Table,\n",
    )
    .unwrap();
    fs::write(src.join("report.rs"), "use crate::config::Provider;\n").unwrap();
    fs::write(src.join("export.rs"), "use crate::history::Run;\n").unwrap();
    fs::write(src.join("history.rs"), "fn f() {}\n").unwrap();
    fs::write(src.join("stray.rs"), "fn f() {}\n").unwrap();
    fs::write(src.join("lib.rs"), "pub mod config;\n").unwrap();
    let order = layers("<!-- layers -->\n```text\nconfig\nreport\nexport history\n```\n").unwrap();
    let found = violations(src, &order);
    assert_eq!(
        found,
        [
            "src/config/provider.rs:3: `config` names `crate::report`, which is above it in ARCHITECTURE.md's layers",
            "src/export.rs:1: `export` names `crate::history`, which is beside it on the same layer in ARCHITECTURE.md's layers",
            "src/stray.rs: module `stray` is not in ARCHITECTURE.md's layers; add it to the line it belongs on",
        ]
    );
}

/// The binary's budget: ARCHITECTURE.md's cli row says `src/cli/` parses, calls the
/// library, prints and exits. A command that grows past this is deciding or rendering
/// something a Rust caller would want too, which belongs in the library.
const CLI_MAX_LINES: usize = 2_000;

#[test]
fn the_binary_stays_thin() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let mut files = Vec::new();
    collect(&cli, &mut files);
    let mut counted: Vec<(usize, String)> = files
        .iter()
        .map(|file| {
            let lines = fs::read_to_string(file).unwrap().lines().count();
            let shown = file
                .strip_prefix(&cli)
                .unwrap_or(file)
                .display()
                .to_string();
            (lines, format!("src/cli/{shown}"))
        })
        .collect();
    counted.sort_by(|a, b| b.cmp(a));
    let total: usize = counted.iter().map(|(n, _)| n).sum();
    let biggest: Vec<String> = (counted.iter().take(5))
        .map(|(n, file)| format!("{file} ({n})"))
        .collect();
    assert!(
        total <= CLI_MAX_LINES,
        "src/cli/ has {total} lines, more than {CLI_MAX_LINES}: move the decisions, JSON and \
         rendering into the library (typed outputs, `Display`); the biggest files: {}",
        biggest.join(", ")
    );
}

/// Each vendor's `Kind` variant and the folder that is its one home.
const VENDORS: &[(&str, &str)] = &[
    ("Openai", "provider/openai/"),
    ("OpenaiCompatible", "provider/openai/"),
    ("OpenaiResponses", "provider/openai_responses/"),
    ("Anthropic", "provider/anthropic/"),
    ("Gemini", "provider/gemini/"),
    ("Ollama", "provider/ollama/"),
    ("AzureOpenai", "provider/azure/"),
    ("Bedrock", "provider/bedrock/"),
    ("Vertex", "provider/vertex/"),
];

/// Where any vendor may be named: its description beside the `Kind` it describes, and the
/// one registration of every vendor's wire.
const NAMING_EVERY_VENDOR: &[&str] = &["config/kind.rs", "provider/mod.rs"];

/// Every `Kind::Variant` a line of code names (not `ErrorKind::…` or `FinishKind::…`).
fn kinds_named(line: &str) -> Vec<&str> {
    let code = code(line);
    code.match_indices("Kind::")
        .filter(|(at, _)| {
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .filter_map(|(at, _)| {
            let rest = &code[at + "Kind::".len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
        .collect()
}

#[test]
fn a_vendor_is_named_only_in_its_folder_its_description_and_the_registration() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let shown = relative.to_string_lossy().replace('\\', "/");
        if NAMING_EVERY_VENDOR.contains(&shown.as_str()) {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in text.lines().enumerate() {
            for named in kinds_named(line) {
                let Some((_, home)) = VENDORS.iter().find(|(v, _)| *v == named) else {
                    continue;
                };
                if !shown.starts_with(home) {
                    found.push(format!(
                        "src/{shown}:{}: names `Kind::{named}`, whose home is src/{home}: ask the vendor (a `WireFormat` method, its `Description`) instead",
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_tidy_rule_sees_what_it_must() {
    assert_eq!(kinds_named("match k { Kind::Gemini => 1 }"), ["Gemini"]);
    assert!(kinds_named("ErrorKind::Auth | FinishKind::Stop").is_empty());
    assert!(kinds_named("// Kind::Anthropic in a comment").is_empty());
}

/// Every source file under `dir`, as text.
fn texts_under(dir: &Path) -> String {
    let mut files = Vec::new();
    collect_all(dir, &mut files);
    files
        .iter()
        .map(|f| fs::read_to_string(f).unwrap_or_default())
        .collect()
}

fn collect_all(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_all(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// An invariant in ARCHITECTURE.md names the test that holds it, in parentheses: a test
/// file (`signing`), a test in it (`cli_run::a_name`) or a unit test's module path
/// (`sign::tests`). Each must exist, so the page cannot claim a check that is gone.
#[test]
fn every_test_an_invariant_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let src = texts_under(&root.join("src")) + &texts_under(&root.join("crates"));
    let mut named = 0;
    let mut missing = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("- ")) {
        let Some(open) = line.rfind(" (`") else {
            continue;
        };
        for token in line[open..].split('`').skip(1).step_by(2) {
            named += 1;
            let token = token.trim_start_matches("tests/");
            let mut parts = token.split("::");
            let first = parts.next().unwrap_or_default();
            let last = token.rsplit("::").next().unwrap_or_default();
            let file = root.join("tests").join(format!("{first}.rs"));
            let folder = root.join("tests").join(first);
            let in_tests = if file.is_file() {
                Some(fs::read_to_string(&file).unwrap())
            } else if folder.is_dir() {
                Some(texts_under(&folder))
            } else {
                None
            };
            // A unit test's path: its module holds `mod tests`, or the test itself.
            let in_src = token.contains("::")
                && (src.contains(&format!("fn {last}("))
                    || (last == "tests" && src.contains("mod tests")));
            let found = in_src
                || match (in_tests, token.contains("::")) {
                    (Some(_), false) => true,
                    (Some(text), true) => text.contains(&format!("fn {last}(")),
                    (None, _) => false,
                };
            if !found {
                missing.push(format!("`{token}` in: {line}"));
            }
        }
    }
    assert!(
        named >= 20,
        "only {named} tests named: is the page's format still read?"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The reader crate is what an orchestrator embeds: none of conform's heavy dependencies
/// may reach it, and its README states how many crates it builds, so the count is true.
#[test]
fn the_reader_crate_stays_lean_and_says_how_lean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["tree", "--offline", "--locked", "-p", "conform-allowlist"])
        .args(["-e", "normal,build", "--prefix", "none"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let crates: std::collections::BTreeSet<&str> = tree
        .lines()
        .filter(|l| !l.starts_with("conform-allowlist "))
        // A crate built in two versions is built twice: name and version.
        .filter_map(|l| l.split(" (").next())
        .collect();
    for heavy in [
        "sqlx",
        "axum",
        "hyper",
        "reqwest",
        "tokio",
        "tokenizers",
        "jsonschema",
        "minijinja",
    ] {
        assert!(
            !crates.iter().any(|c| c.split(' ').next() == Some(heavy)),
            "the reader crate now builds {heavy}"
        );
    }
    let readme = fs::read_to_string(root.join("crates/conform-allowlist/README.md")).unwrap();
    let stated = format!("It builds {} crates besides itself", crates.len());
    assert!(
        readme.contains(&stated),
        "crates/conform-allowlist/README.md must say `{stated}`: {crates:?}"
    );
}
