//! The workspace's shape, kept (as rust-analyzer's tidy tests keep theirs).
//!
//! ARCHITECTURE.md writes the order once. The fenced block after `<!-- layers -->` lists
//! the workspace's crates, lowest first, one line per layer: a crate may depend only on
//! crates on lower lines, which Cargo's metadata shows. The block after `<!-- modules -->`
//! does the same for the top-level modules inside a crate (`crate: a / b c / d`, layers
//! separated by `/`): a module may name (`crate::x`) only modules of lower layers.
//! Beside those: vendor wire words stay in the provider adapters, no function grows past
//! 100 lines, the binary stays thin, the reader crate stays lean, and every test an
//! invariant names exists.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// The lines of the fenced block after `marker` in `page`.
fn block<'a>(page: &'a str, marker: &str) -> Result<Vec<&'a str>, String> {
    let after = page
        .split_once(marker)
        .ok_or(format!("ARCHITECTURE.md has no `{marker}` marker"))?
        .1;
    let text = after
        .trim_start()
        .strip_prefix("```")
        .and_then(|rest| rest.split_once('\n'))
        .and_then(|(_, rest)| rest.split_once("```"))
        .ok_or(format!(
            "the `{marker}` marker must be followed by a fenced block"
        ))?
        .0;
    Ok(text.lines().filter(|l| !l.trim().is_empty()).collect())
}

/// Each crate's layer, lowest 0, from the `<!-- layers -->` block.
fn crate_layers(page: &str) -> Result<BTreeMap<String, usize>, String> {
    let mut order = BTreeMap::new();
    for (layer, line) in block(page, "<!-- layers -->")?.iter().enumerate() {
        for name in line.split_whitespace() {
            if order.insert(name.to_string(), layer).is_some() {
                return Err(format!("`{name}` is listed twice in the layers"));
            }
        }
    }
    Ok(order)
}

/// A workspace crate and the workspace crates it depends on (normal and build edges).
#[derive(Debug, Clone)]
struct Member {
    name: String,
    depends_on: Vec<String>,
}

/// The workspace's crates, as `cargo metadata` describes them.
fn members() -> Vec<Member> {
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(root())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeSet<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Member {
            name: p["name"].as_str().unwrap().to_string(),
            depends_on: p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(*d))
                .map(str::to_string)
                .collect(),
        })
        .collect()
}

/// Every dependency against the crate layers, and every crate the layers do not place.
fn graph_violations(members: &[Member], order: &BTreeMap<String, usize>) -> Vec<String> {
    let mut found = Vec::new();
    for member in members {
        let Some(&own) = order.get(&member.name) else {
            found.push(format!(
                "crate `{}` is not in ARCHITECTURE.md's layers; add it to the line it belongs on",
                member.name
            ));
            continue;
        };
        for dep in &member.depends_on {
            let verdict = match order.get(dep) {
                None => continue, // reported as a crate of its own
                Some(&layer) if layer < own => continue,
                Some(&layer) if layer == own => "beside it on the same layer",
                Some(_) => "above it",
            };
            found.push(format!(
                "crates: `{}` depends on `{dep}`, which is {verdict} in ARCHITECTURE.md's layers (its Cargo.toml)",
                member.name
            ));
        }
    }
    found
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let order = crate_layers(&architecture()).unwrap();
    let found = graph_violations(&members(), &order);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The crate graph checker has teeth: an upward and a sideways dependency and an
/// unplaced crate are each caught, naming the crates.
#[test]
fn the_graph_checker_catches_an_upward_dependency() {
    let order = crate_layers("<!-- layers -->\n```text\nlow\nmid side\nhigh\n```\n").unwrap();
    let member = |name: &str, deps: &[&str]| Member {
        name: name.into(),
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
    };
    let found = graph_violations(
        &[
            member("low", &["high"]),
            member("mid", &["low", "side"]),
            member("high", &["mid", "low"]),
            member("stray", &[]),
        ],
        &order,
    );
    assert_eq!(
        found,
        [
            "crates: `low` depends on `high`, which is above it in ARCHITECTURE.md's layers (its Cargo.toml)",
            "crates: `mid` depends on `side`, which is beside it on the same layer in ARCHITECTURE.md's layers (its Cargo.toml)",
            "crate `stray` is not in ARCHITECTURE.md's layers; add it to the line it belongs on",
        ]
    );
}

/// Every library crate states its public API on purpose: each public item documented,
/// nothing `pub` that no caller can reach (the compiler holds both once they are denied).
#[test]
fn every_library_crate_denies_missing_docs_and_unreachable_pub() {
    let loose: Vec<String> = (members().into_iter())
        .filter(|m| m.name != "conform")
        .filter_map(|m| {
            let lib = source_dir(&m.name).join("lib.rs");
            let text = std::fs::read_to_string(&lib).unwrap_or_default();
            let missing: Vec<&str> = ["#![deny(missing_docs)]", "#![deny(unreachable_pub)]"]
                .into_iter()
                .filter(|lint| !text.lines().any(|l| l.trim() == *lint))
                .collect();
            (!missing.is_empty()).then(|| format!("{}: {}", lib.display(), missing.join(", ")))
        })
        .collect();
    assert!(
        loose.is_empty(),
        "library crates without the lints:\n{}",
        loose.join("\n")
    );
}

/// Where each crate's sources are.
fn source_dir(krate: &str) -> PathBuf {
    match krate {
        "conform" => root().join("src"),
        other => root().join("crates").join(other).join("src"),
    }
}

/// `crate: a / b c / d` lines: each crate's modules, layer by layer.
fn module_layers(page: &str) -> Result<BTreeMap<String, BTreeMap<String, usize>>, String> {
    let mut crates = BTreeMap::new();
    for line in block(page, "<!-- modules -->")? {
        let (krate, layers) = line
            .split_once(':')
            .ok_or(format!("`{line}`: write `crate: a / b c / d`"))?;
        let mut order = BTreeMap::new();
        for (layer, names) in layers.split('/').enumerate() {
            for name in names.split_whitespace() {
                order.insert(name.to_string(), layer);
            }
        }
        crates.insert(krate.trim().to_string(), order);
    }
    Ok(crates)
}

/// The top-level module a file of a crate's `src/` belongs to; `None` for the crate
/// root and the binary.
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

/// Every import in `src` that breaks `order`, as `file:line: message` (`shown` is how
/// the folder is named in messages).
fn module_violations(src: &Path, shown: &str, order: &BTreeMap<String, usize>) -> Vec<String> {
    let mut found = Vec::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let Some(module) = module_of(relative) else {
            continue;
        };
        let at = format!("{shown}/{}", relative.display());
        let Some(&own) = order.get(&module) else {
            found.push(format!(
                "{at}: module `{module}` is not in ARCHITECTURE.md's modules; add it to the layer it belongs on"
            ));
            continue;
        };
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in text.lines().enumerate() {
            for named in named_modules(line) {
                let verdict = match order.get(named) {
                    _ if named == module => continue,
                    None => continue, // a crate-root item (a macro or type in lib.rs)
                    Some(&layer) if layer < own => continue,
                    Some(&layer) if layer == own => "beside it on the same layer",
                    Some(_) => "above it",
                };
                found.push(format!(
                    "{at}:{}: `{module}` names `crate::{named}`, which is {verdict} in ARCHITECTURE.md's modules",
                    number + 1
                ));
            }
        }
    }
    found
}

#[test]
fn every_import_inside_a_crate_points_down_its_modules() {
    let mut found = Vec::new();
    for (krate, order) in module_layers(&architecture()).unwrap() {
        let shown = source_dir(&krate)
            .strip_prefix(root())
            .unwrap()
            .display()
            .to_string();
        found.extend(module_violations(&source_dir(&krate), &shown, &order));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The module checker has teeth: an upward import, a sideways one and an unlisted module
/// are each caught, with the file and line; a downward one and a comment are not.
#[test]
fn the_module_checker_catches_an_upward_import() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir_all(src.join("config")).unwrap();
    fs::write(
        src.join("config/provider.rs"),
        "use std::fmt;\n// see crate::report for why\npub x: crate::report::Table,\n",
    )
    .unwrap();
    fs::write(src.join("report.rs"), "use conform_config::Provider;\n").unwrap();
    fs::write(src.join("export.rs"), "use crate::history::Run;\n").unwrap();
    fs::write(src.join("history.rs"), "fn f() {}\n").unwrap();
    fs::write(src.join("stray.rs"), "fn f() {}\n").unwrap();
    fs::write(src.join("lib.rs"), "pub mod config;\n").unwrap();
    let layers =
        module_layers("<!-- modules -->\n```text\nc: config / report / export history\n```\n")
            .unwrap();
    let found = module_violations(src, "src", &layers["c"]);
    assert_eq!(
        found,
        [
            "src/config/provider.rs:3: `config` names `crate::report`, which is above it in ARCHITECTURE.md's modules",
            "src/export.rs:1: `export` names `crate::history`, which is beside it on the same layer in ARCHITECTURE.md's modules",
            "src/stray.rs: module `stray` is not in ARCHITECTURE.md's modules; add it to the layer it belongs on",
        ]
    );
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
}

/// Every crate's sources: `(shown path, file)`.
fn workspace_sources() -> Vec<(String, PathBuf)> {
    let mut dirs = vec![root().join("src")];
    for entry in fs::read_dir(root().join("crates")).unwrap().flatten() {
        dirs.push(entry.path().join("src"));
    }
    dirs.iter()
        .flat_map(|dir| rust_files(dir))
        .map(|file| {
            let shown = file.strip_prefix(root()).unwrap().display().to_string();
            (shown.replace('\\', "/"), file)
        })
        .collect()
}

/// Words only a vendor's own wire uses: its event types, error types, field names.
const WIRE_WORDS: &[&str] = &[
    "message_start",
    "content_block_delta",
    "overloaded_error",
    "chat.completion.chunk",
    "generateContent",
    "functionCall",
    "thoughtSignature",
];

/// Where a vendor's wire is spoken: its adapter's folder, and nowhere else.
const WIRE_HOME: &str = "crates/conform-wire/src/provider/";

/// The wire words a line of code (not its comment) uses.
fn wire_words(line: &str) -> Vec<&'static str> {
    let code = code(line);
    WIRE_WORDS
        .iter()
        .copied()
        .filter(|w| code.contains(w))
        .collect()
}

fn wire_word_violations(sources: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (shown, text) in sources {
        if shown.starts_with(WIRE_HOME) {
            continue;
        }
        for (number, line) in text.lines().enumerate() {
            for word in wire_words(line) {
                found.push(format!(
                    "{shown}:{}: `{word}` is a vendor's wire word, whose home is {WIRE_HOME}: ask the vendor's adapter or its server (`WireServer`) instead",
                    number + 1
                ));
            }
        }
    }
    found
}

#[test]
fn vendor_wire_words_appear_only_in_the_provider_adapters() {
    let sources: Vec<(String, String)> = workspace_sources()
        .into_iter()
        .map(|(shown, file)| (shown, fs::read_to_string(file).unwrap_or_default()))
        .collect();
    let found = wire_word_violations(&sources);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_wire_word_rule_sees_what_it_must() {
    let sources = [
        (
            "crates/conform-scenarios/src/gateway/upstream.rs".to_string(),
            "let t = \"message_start\";\n// content_block_delta in a comment\n".to_string(),
        ),
        (
            "crates/conform-wire/src/provider/anthropic/stream.rs".to_string(),
            "let t = \"message_start\";\n".to_string(),
        ),
    ];
    assert_eq!(
        wire_word_violations(&sources),
        [
            "crates/conform-scenarios/src/gateway/upstream.rs:1: `message_start` is a vendor's wire word, whose home is crates/conform-wire/src/provider/: ask the vendor's adapter or its server (`WireServer`) instead"
        ]
    );
}

/// The longest a function may be, in lines from its `fn` to its closing brace. A table
/// is data: a `const` or a `static`, not a function.
const MAX_FUNCTION_LINES: usize = 100;

/// The text with comments, strings and character literals blanked out (their line breaks
/// kept), so that braces can be counted.
fn blanked(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let skip_to = |end: usize, out: &mut String| {
            for &c in &chars[i..end.min(chars.len())] {
                out.push(blank(c));
            }
            end
        };
        i = match (c, next) {
            ('/', Some('/')) => {
                let end = (i..chars.len())
                    .find(|&j| chars[j] == '\n')
                    .unwrap_or(chars.len());
                skip_to(end, &mut out)
            }
            ('/', Some('*')) => {
                let end = (i + 2..chars.len())
                    .find(|&j| chars[j - 1] == '*' && chars[j] == '/')
                    .map_or(chars.len(), |j| j + 1);
                skip_to(end, &mut out)
            }
            ('r', Some('#' | '"')) if i == 0 || !chars[i - 1].is_alphanumeric() => {
                let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
                if chars.get(i + 1 + hashes) == Some(&'"') {
                    let close: String = std::iter::once('"')
                        .chain(std::iter::repeat_n('#', hashes))
                        .collect();
                    let rest: String = chars[i + 2 + hashes..].iter().collect();
                    let end = rest.find(&close).map_or(chars.len(), |at| {
                        i + 2 + hashes + rest[..at].chars().count() + close.len()
                    });
                    skip_to(end, &mut out)
                } else {
                    out.push(c);
                    i + 1
                }
            }
            ('"', _) => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                skip_to(j + 1, &mut out)
            }
            ('\'', Some('\\')) => {
                let end = (i + 2..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .map_or(chars.len(), |j| j + 1);
                skip_to(end, &mut out)
            }
            ('\'', Some(_)) if chars.get(i + 2) == Some(&'\'') => skip_to(i + 3, &mut out),
            _ => {
                out.push(c);
                i + 1
            }
        };
    }
    out
}

/// Each function of `text` (not in a `#[cfg(test)]` module) longer than `max` lines:
/// `(line of its fn, its name, its length)`.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let code = blanked(text);
    let bytes = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let tests = code.find("#[cfg(test)]").unwrap_or(code.len());
    let mut found = Vec::new();
    let mut search = 0;
    while let Some(offset) = code[search..tests].find("fn ") {
        let at = search + offset;
        search = at + 3;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body opens at the first `{` before any `;` (a declaration has none).
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            continue;
        };
        if bytes[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (j, b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = line_of(close) - line_of(at) + 1;
        if lines > max {
            found.push((line_of(at), name, lines));
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_a_screen() {
    let mut found = Vec::new();
    for (shown, file) in workspace_sources() {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (line, name, lines) in long_functions(&text, MAX_FUNCTION_LINES) {
            found.push(format!(
                "{shown}:{line}: `{name}` is {lines} lines, more than {MAX_FUNCTION_LINES}: split it by what each part decides (a table is data: a `const` or a `static`)"
            ));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_length_rule_counts_bodies_and_skips_what_is_not_code() {
    let body = "    let x = 1;\n".repeat(5);
    let text = format!(
        "fn short() {{\n{body}}}\n\
         fn tricky() {{\n    let s = \"}} {{ }}\";\n    let c = '}}';\n    // }}\n{body}{body}}}\n\
         trait T {{ fn declared(&self); }}\n\
         #[cfg(test)]\nmod tests {{ fn long_test() {{\n{body}{body}{body}}} }}\n"
    );
    assert_eq!(long_functions(&text, 8), [(8, "tricky".to_string(), 15)]);
}

/// The binary's budget: ARCHITECTURE.md says `src/cli/` parses, calls the library, prints
/// and exits. A command that grows past this is deciding or rendering something a Rust
/// caller would want too, which belongs in a library.
const CLI_MAX_LINES: usize = 2_000;

#[test]
fn the_binary_stays_thin() {
    let cli = root().join("src/cli");
    let mut counted: Vec<(usize, String)> = rust_files(&cli)
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
         rendering into a library (typed outputs, `Display`); the biggest files: {}",
        biggest.join(", ")
    );
}

/// Each vendor's `Kind` variant and the folder that is its one home.
const VENDORS: &[(&str, &str)] = &[
    ("Openai", "crates/conform-wire/src/provider/openai/"),
    (
        "OpenaiCompatible",
        "crates/conform-wire/src/provider/openai/",
    ),
    (
        "OpenaiResponses",
        "crates/conform-wire/src/provider/openai_responses/",
    ),
    ("Anthropic", "crates/conform-wire/src/provider/anthropic/"),
    ("Gemini", "crates/conform-wire/src/provider/gemini/"),
    ("Ollama", "crates/conform-wire/src/provider/ollama/"),
    ("AzureOpenai", "crates/conform-wire/src/provider/azure/"),
    ("Bedrock", "crates/conform-wire/src/provider/bedrock/"),
    ("Vertex", "crates/conform-wire/src/provider/vertex/"),
];

/// Where any vendor may be named: its description beside the `Kind` it describes, and the
/// one registration of every vendor's wire.
const NAMING_EVERY_VENDOR: &[&str] = &[
    "crates/conform-config/src/kind.rs",
    "crates/conform-wire/src/provider/mod.rs",
];

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
    let mut found = Vec::new();
    for (shown, file) in workspace_sources() {
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
                        "{shown}:{}: names `Kind::{named}`, whose home is {home}: ask the vendor (a `WireFormat` method, its `Description`) instead",
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
    rust_files(dir)
        .iter()
        .map(|f| fs::read_to_string(f).unwrap_or_default())
        .collect()
}

/// The text of the test module or binary `name` (a file `name.rs` or a folder `name/`
/// anywhere under `tests/`), if there is one.
fn test_module(name: &str) -> Option<String> {
    let mut dirs = vec![root().join("tests")];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let stem = path.file_stem().and_then(|s| s.to_str());
            if path.is_dir() {
                if stem == Some(name) {
                    return Some(texts_under(&path));
                }
                dirs.push(path);
            } else if stem == Some(name) && path.extension().is_some_and(|e| e == "rs") {
                return fs::read_to_string(&path).ok();
            }
        }
    }
    None
}

/// An invariant in ARCHITECTURE.md names the test that holds it, in parentheses: a test
/// file (`signing`), a test in it (`cli_run::a_name`) or a unit test's module path
/// (`sign::tests`). Each must exist, so the page cannot claim a check that is gone.
#[test]
fn every_test_an_invariant_names_exists() {
    let page = architecture();
    let src = texts_under(&root().join("src")) + &texts_under(&root().join("crates"));
    let mut named = 0;
    let mut missing = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("- ")) {
        let Some(open) = line.rfind(" (`") else {
            continue;
        };
        for token in line[open..].split('`').skip(1).step_by(2) {
            named += 1;
            let token = token.trim_start_matches("tests/");
            let first = token.split("::").next().unwrap_or_default();
            let last = token.rsplit("::").next().unwrap_or_default();
            let in_tests = test_module(first);
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
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(root())
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
    let crates: BTreeSet<&str> = tree
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
    let readme = fs::read_to_string(root().join("crates/conform-allowlist/README.md")).unwrap();
    let stated = format!("It builds {} crates besides itself", crates.len());
    assert!(
        readme.contains(&stated),
        "crates/conform-allowlist/README.md must say `{stated}`: {crates:?}"
    );
}
