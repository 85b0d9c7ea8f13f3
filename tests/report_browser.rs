//! `report.html` of a real demo run, rendered by headless Chromium: the screenshot is a
//! real picture, and the DOM Chromium builds holds the matrix (one cell per pair, with
//! its reason codes), the allowlist line, and no script.
//!
//! Without `chromium` on PATH the test is reported as ignored, with a line saying it did
//! not run; with `CONFORM_REQUIRE_CHROMIUM` set (CI) it fails instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Project;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

const INSTALL: &str = "install Debian's package: `apt-get install -y chromium` (.ci/run does this)";

fn main() {
    let args = Arguments::from_args();
    let chromium = on_path("chromium");
    let required = std::env::var_os("CONFORM_REQUIRE_CHROMIUM").is_some_and(|v| !v.is_empty());
    let missing = chromium.is_none();
    let trial = Trial::test(
        "report_html_renders_in_headless_chromium",
        move || match &chromium {
            Some(chromium) => renders(chromium),
            None => Err(format!(
                "CONFORM_REQUIRE_CHROMIUM is set but `chromium` is not on PATH: {INSTALL}"
            )
            .into()),
        },
    );
    let trial = if missing && !required {
        eprintln!(
            "report_browser: NOT RUN: `chromium` is not on PATH, so report.html was not \
             rendered in a browser; {INSTALL}"
        );
        trial.with_ignored_flag(true)
    } else {
        trial
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), Failed> {
    if ok { Ok(()) } else { Err(what().into()) }
}

fn renders(chromium: &Path) -> Result<(), Failed> {
    // The demo: simulated providers with a mix of verdicts, the real binary.
    let sims: Vec<String> = std::fs::read_dir(Path::new(common::REPO).join("providers"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with("sim-"))
        .map(|n| n.trim_end_matches(".toml").to_string())
        .collect();
    let names: Vec<&str> = sims.iter().map(String::as_str).collect();
    let project = Project::new(&names);
    let out = project.cmd().args(["demo", "--no-progress"]).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    check(out.status.code() == Some(0), || {
        format!(
            "demo failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .ok_or_else(|| format!("no report line in {stdout}"))?;
    let (json, page) = line
        .strip_suffix(')')
        .and_then(|l| l.split_once(" (for people: "))
        .ok_or_else(|| format!("unexpected report line {line}"))?;
    let report: Value = serde_json::from_slice(&std::fs::read(json)?)?;
    let verdicts = report["verdicts"].as_array().ok_or("no verdicts")?;
    let page = std::fs::canonicalize(page)?;
    let url = format!("file://{}", page.display());

    let scratch = tempfile::tempdir()?;
    let png = scratch.path().join("report.png");
    let (_, shot) = browse(
        chromium,
        scratch.path(),
        "shot",
        &[&format!("--screenshot={}", png.display())],
        &url,
    )?;
    check(png.is_file(), || {
        format!("no screenshot; chromium said: {shot}")
    })?;
    let (dom, _) = browse(chromium, scratch.path(), "dom", &["--dump-dom"], &url)?;

    // Chromium built the page: the matrix has one cell per pair, coloured by its
    // verdict, holding exactly its reason codes.
    check(dom.contains("<table class=\"matrix\">"), || {
        format!("no matrix in {dom}")
    })?;
    check(
        dom.matches("<td class=\"cell ").count() == verdicts.len(),
        || {
            format!(
                "{} cells for {} pairs in {dom}",
                dom.matches("<td class=\"cell ").count(),
                verdicts.len()
            )
        },
    )?;
    let (mut granted, mut revoked, mut unchanged) = (0, 0, 0);
    for v in verdicts {
        let (suite, provider, verdict) = (
            v["suite"].as_str().unwrap_or_default(),
            v["provider"].as_str().unwrap_or_default(),
            v["verdict"].as_str().unwrap_or_default(),
        );
        match verdict {
            "conformant" => granted += 1,
            "nonconformant" => revoked += 1,
            _ => unchanged += 1,
        }
        let open = format!(
            "<td class=\"cell {verdict}\" data-suite=\"{suite}\" data-provider=\"{provider}\">"
        );
        let start = dom
            .find(&open)
            .ok_or_else(|| format!("no cell {open} in {dom}"))?;
        let cell = &dom[start..];
        let cell = &cell[..cell.find("</td>").unwrap_or(cell.len())];
        let shown: Vec<&str> = cell
            .split("<code class=\"reason\">")
            .skip(1)
            .filter_map(|s| s.split_once("</code>").map(|(code, _)| code))
            .collect();
        let reasons: Vec<&str> = v["reasons"]
            .as_array()
            .ok_or("no reasons")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        check(shown == reasons, || {
            format!("{suite} × {provider}: the cell shows {shown:?}, the verdict says {reasons:?}")
        })?;
        check(verdict == "conformant" || !reasons.is_empty(), || {
            format!("{suite} × {provider} is {verdict} without a reason")
        })?;
    }
    check(granted > 0 && revoked > 0, || {
        format!("the demo should mix verdicts: {granted} conformant, {revoked} not")
    })?;

    // The allowlist line says what the run granted, revoked and left, like the terminal.
    let counts = format!("granted {granted}, revoked {revoked}, unchanged {unchanged}");
    check(
        dom.contains(&format!("<span class=\"counts\">{counts}</span>")),
        || format!("no allowlist line `{counts}` in {dom}"),
    )?;
    check(
        stdout
            .lines()
            .any(|l| l.starts_with("allowlist: ") && l.ends_with(&format!(": {counts}"))),
        || format!("no terminal line ending `{counts}` in {stdout}"),
    )?;
    // The demo's grants are simulated: the page says so, with their end, and never
    // calls them a permitted failover.
    check(dom.contains("simulated grant until "), || {
        format!("no end date for the grants in {dom}")
    })?;
    check(
        dom.contains("permit no real failover") && !dom.contains("the grants permit failover"),
        || format!("the demo's grants are not marked simulated in {dom}"),
    )?;

    // Nothing runs and nothing is fetched.
    for forbidden in ["<script", " src=", "href=\"http", "url("] {
        check(!dom.contains(forbidden), || {
            format!("`{forbidden}` in the page: {dom}")
        })?;
    }

    // The screenshot is a real picture of the whole window, not an empty canvas.
    let bytes = std::fs::read(&png)?;
    check(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), || {
        "the screenshot is not a PNG".into()
    })?;
    let dimension = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes)
    };
    check(
        dimension(16) == Some(1280) && dimension(20) == Some(2000),
        || {
            format!(
                "the screenshot is {:?}×{:?}, not the 1280×2000 window",
                dimension(16),
                dimension(20)
            )
        },
    )?;
    check(bytes.len() > 60_000, || {
        format!(
            "the screenshot is {} bytes: too small to hold the rendered page",
            bytes.len()
        )
    })?;
    Ok(())
}

/// Runs headless Chromium on `url` with `extra` flags and a fresh profile, and returns
/// its standard output and error; gives up after two minutes.
fn browse(
    chromium: &Path,
    scratch: &Path,
    name: &str,
    extra: &[&str],
    url: &str,
) -> Result<(String, String), Failed> {
    let profile = scratch.join(format!("profile-{name}"));
    let home = scratch.join(format!("home-{name}"));
    std::fs::create_dir_all(&home)?;
    let stdout_path = scratch.join(format!("{name}.out"));
    let stderr_path = scratch.join(format!("{name}.err"));
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .current_dir(scratch)
        // Chromium writes caches and settings under these: keep them in the scratch folder.
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path)?)
        .stderr(std::fs::File::create(&stderr_path)?)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", chromium.display()))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("chromium ({name}) did not finish within two minutes").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&stdout_path)?;
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    check(status.success(), || {
        format!("chromium ({name}) exited with {status}: {stderr}")
    })?;
    Ok((stdout, stderr))
}
