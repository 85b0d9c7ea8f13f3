//! The suite has teeth: run against `conform serve` as built, every scenario passes (this
//! is also CI's SQLite run); run against each deliberately broken variant, a scenario
//! that tests the broken rule fails. The robustness family's variants are run against
//! that family alone, and each must fail exactly its one scenario of it
//! (`CONFORM_TEETH_FULL=1` runs the whole suite against each instead, without
//! `--fail-fast`, and still wants exactly one).
//!
//! The variants are test code (`tests/broken/`): the orchestrator with one of the
//! library's seams (`conform_serve::orchestrator::Seams`) replaced by a decorator that breaks
//! one rule. The production build has none of them. This binary has its own `main` so
//! that it can also be that orchestrator: `scenarios_teeth serve-broken VARIANT` serves
//! as `conform serve --unverified-allowlist` would, with the variant applied, and the
//! suite `--spawn`s it, so the crash scenario can kill and restart it as it does
//! `conform serve`. The same command with `none` (every seam real) must pass the whole
//! suite too: a variant is caught for its broken seam, not for this harness.
//!
//! Each run has its own orchestrator, database, ports and working folder, so the runs go
//! [`suite::AT_ONCE`] at a time (issue 43: one after another they took five minutes of
//! CI), the longest first.

mod broken;
mod suite;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::{Command, ExitCode};

use conform_scenarios::robustness::FAMILY;
use libtest_mimic::{Arguments, Trial};
use suite::{assert_all_passed, at_once, run_suite, serve_command, with_status};

/// For each variant, the scenarios that catch it. Running with `--fail-fast`, the first
/// failure must be one of them: a failure elsewhere would be noise (a flaky margin),
/// not proof that the variant was caught.
const CAUGHT_BY: [(&str, &[&str]); 13] = [
    (
        "check-then-insert",
        &["double-click", "concurrent-mismatch"],
    ),
    ("ignored-fingerprint", &["key-reuse", "concurrent-mismatch"]),
    (
        "timeout-marked-failed",
        &[
            "timeout-is-unknown",
            "forward-order-finish",
            "three-way-race",
            "crash-restart",
        ],
    ),
    (
        "retry-after-timeout",
        &[
            // A job whose attempt timed out while pending gets its request sent again,
            // which a replay of the pending job may see first (.ci/run saw it once).
            "replay-in-every-state",
            "timeout-is-unknown",
            "reverse-order-finish",
            "forward-order-finish",
            "three-way-race",
            "late-result-after-job-cancel",
            "crash-restart",
        ],
    ),
    (
        "last-writer-wins",
        &[
            "reverse-order-finish",
            "forward-order-finish",
            "three-way-race",
            "late-result-after-job-cancel",
        ],
    ),
    (
        "no-open-attempt-guard",
        &[
            "outcome-classification",
            "cancel-releases",
            "read-only-polling",
            "failover-gate",
            "timeout-is-unknown",
            "crash-restart",
        ],
    ),
    (
        "allowlist-ignored",
        &["failover-gate", "allowlist-fail-closed"],
    ),
    ("allowlist-fails-open", &["allowlist-fail-closed"]),
    ("owner-leak", &["owner-scoping"]),
    (
        "hidden-retries",
        &[
            "owner-scoping",
            "outcome-classification",
            "no-hidden-retries",
            "cancel-releases",
            "read-only-polling",
            "failover-gate",
            "timeout-is-unknown",
            "allowlist-fail-closed",
        ],
    ),
    (
        "cancel-keeps-blocking",
        &[
            "replay-in-every-state",
            "cancel-releases",
            "reverse-order-finish",
            "forward-order-finish",
            "three-way-race",
        ],
    ),
    ("late-result-overwrites", &["late-result-after-job-cancel"]),
    ("replay-retries-idle", &["replay-in-every-state"]),
];

/// The robustness family's variants and the one scenario each must fail.
const ROBUSTNESS: [(&str, &str); 5] = [
    ("oversized-aborts", "oversized-body"),
    ("deep-nesting-panics", "deep-nesting"),
    ("lossy-utf8", "invalid-utf8"),
    ("serialized-body-reads", "stalled-connections"),
    ("plain-overload", "creation-burst"),
];

/// Variants that follow the contract but choose otherwise than `conform serve` where it
/// is silent (a 32 MiB body accepted; a non-ASCII `X-Owner-Id` accepted): a scenario
/// that failed them would be a false alarm.
const LENIENT: [&str; 2] = ["no-body-limit", "percent-encoded-owners"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SERVE) {
        return ExitCode::from(broken::serve(args.get(2).map(String::as_str)));
    }
    let trials = vec![
        Trial::test(
            "the_suite_passes_against_conform_serve_on_sqlite_and_catches_every_broken_variant",
            || {
                the_suite_passes_against_conform_serve_on_sqlite_and_catches_every_broken_variant();
                Ok(())
            },
        ),
        Trial::test(
            "lenient_but_conformant_variants_pass_every_scenario",
            || {
                lenient_but_conformant_variants_pass_every_scenario();
                Ok(())
            },
        ),
        Trial::test(
            "every_broken_variant_is_listed_and_an_unknown_one_is_refused",
            || {
                every_broken_variant_is_listed_and_an_unknown_one_is_refused();
                Ok(())
            },
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// The first argument that makes this binary the orchestrator (see `broken::serve`).
const SERVE: &str = "serve-broken";

/// `exec …/scenarios_teeth serve-broken VARIANT`: this very binary as the orchestrator.
fn broken_serve_command(variant: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    format!("exec '{}' {SERVE} {variant}", exe.display())
}

/// What one run of the suite showed: how the variant was caught, or what went wrong.
type Verdict = Result<String, String>;

/// A run of the suite, to be run beside others.
type Run<'a> = Box<dyn FnOnce() -> Verdict + Send + 'a>;

fn the_suite_passes_against_conform_serve_on_sqlite_and_catches_every_broken_variant() {
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let mut runs: Vec<Run> = vec![
        // The production orchestrator, as `cargo build` makes it.
        Box::new(|| passes_all("conform serve", &serve_command(), work)),
        // This harness's orchestrator with every seam real: a variant that fails below
        // fails for its broken seam, not for how it is served.
        Box::new(|| {
            passes_all(
                "serve-broken none",
                &broken_serve_command(broken::NONE),
                work,
            )
        }),
    ];
    // The variants caught late in the suite first: the longest runs start first.
    let mut caught_by = CAUGHT_BY.to_vec();
    caught_by.sort_by_key(|(_, catchers)| std::cmp::Reverse(first_position(catchers)));
    for (variant, catchers) in caught_by {
        runs.push(Box::new(move || caught_first(variant, catchers, work)));
    }
    for (variant, catcher) in ROBUSTNESS {
        runs.push(Box::new(move || caught_alone(variant, catcher, work)));
    }
    let verdicts = at_once(runs);
    for caught in verdicts.iter().flatten() {
        eprintln!("{caught}");
    }
    let missed: Vec<&str> = (verdicts.iter())
        .filter_map(|v| v.as_ref().err().map(String::as_str))
        .collect();
    assert!(
        missed.is_empty(),
        "runs that did not end as expected:\n{}",
        missed.join("\n")
    );
}

/// Where the first of `catchers` stands in the suite's order.
fn first_position(catchers: &[&str]) -> usize {
    let all = conform_scenarios::all();
    (all.iter())
        .position(|s| catchers.contains(&s.name()))
        .unwrap_or(all.len())
}

/// The whole suite against `spawn` passes; a failure is the verdict's error.
fn passes_all(what: &str, spawn: &str, work: &std::path::Path) -> Verdict {
    let (code, report) = run_suite(&["--spawn", spawn], &[], work);
    catch_unwind(AssertUnwindSafe(|| assert_all_passed(code, &report)))
        .map(|()| format!("{what}: every scenario passed"))
        .map_err(|panic| {
            let text = (panic.downcast_ref::<String>().cloned())
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("{what}: {text}")
        })
}

/// With `--fail-fast`, `variant`'s first failure is one of `catchers`.
fn caught_first(variant: &str, catchers: &[&str], work: &std::path::Path) -> Verdict {
    let spawn = broken_serve_command(variant);
    let (code, report) = run_suite(&["--spawn", &spawn, "--fail-fast"], &[], work);
    let failed = with_status(&report, "failed");
    let first = failed.first().map(|s| s["scenario"].as_str().unwrap());
    match first {
        Some(name) if catchers.contains(&name) && code == 1 => Ok(format!(
            "{variant}: caught by {name}: {}",
            failed[0]["outcome"]["reason"]
        )),
        _ => Err(format!(
            "{variant}: exit {code}, first failure {first:?}, expected one of {catchers:?}"
        )),
    }
}

/// Run against the robustness family alone (the whole suite with
/// `CONFORM_TEETH_FULL=1`), `variant` fails exactly `catcher`.
fn caught_alone(variant: &str, catcher: &str, work: &std::path::Path) -> Verdict {
    let full = std::env::var("CONFORM_TEETH_FULL").is_ok_and(|v| v == "1");
    let family = FAMILY.join(",");
    let spawn = broken_serve_command(variant);
    let mut args = vec!["--spawn", spawn.as_str()];
    if !full {
        args.extend(["--only", family.as_str()]);
    }
    let (code, report) = run_suite(&args, &[], work);
    let failed: Vec<&str> = with_status(&report, "failed")
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    if failed == [catcher] && code == 1 {
        let reason = &with_status(&report, "failed")[0]["outcome"]["reason"];
        Ok(format!("{variant}: caught by {catcher} alone: {reason}"))
    } else {
        Err(format!(
            "{variant}: exit {code}, failed {failed:?}, expected exactly [{catcher}]"
        ))
    }
}

fn lenient_but_conformant_variants_pass_every_scenario() {
    let work = tempfile::tempdir().unwrap();
    let runs: Vec<Box<dyn FnOnce() -> (i32, serde_json::Value) + Send>> = LENIENT
        .iter()
        .map(|variant| {
            let spawn = broken_serve_command(variant);
            let work = work.path().to_path_buf();
            let run: Box<dyn FnOnce() -> (i32, serde_json::Value) + Send> =
                Box::new(move || run_suite(&["--spawn", &spawn], &[], &work));
            run
        })
        .collect();
    for (variant, (code, report)) in LENIENT.into_iter().zip(at_once(runs)) {
        assert_all_passed(code, &report);
        // The choice is reported, not hidden: the scenario says it accepted.
        let accepted = |name: &str| {
            report["scenarios"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["scenario"] == name)
                .is_some_and(|s| s["notes"].to_string().contains("accepted ("))
        };
        let scenario = match variant {
            "no-body-limit" => "oversized-body",
            _ => "invalid-utf8",
        };
        assert!(
            accepted(scenario),
            "{variant}: {scenario} reports no acceptance"
        );
    }
}

fn every_broken_variant_is_listed_and_an_unknown_one_is_refused() {
    assert_eq!(
        CAUGHT_BY.len() + ROBUSTNESS.len() + LENIENT.len(),
        broken::ALL.len()
    );
    for name in broken::ALL {
        assert!(
            CAUGHT_BY.iter().any(|(v, _)| *v == name)
                || ROBUSTNESS.iter().any(|(v, _)| *v == name)
                || LENIENT.contains(&name),
            "{name} has no catcher"
        );
    }
    let scenarios: Vec<&str> = conform_scenarios::all().iter().map(|s| s.name()).collect();
    for (_, catchers) in CAUGHT_BY {
        for c in catchers {
            assert!(scenarios.contains(c), "{c} is not a scenario");
        }
    }
    let mut catchers: Vec<&str> = ROBUSTNESS.iter().map(|(_, c)| *c).collect();
    catchers.sort_unstable();
    let mut family = FAMILY.to_vec();
    family.sort_unstable();
    assert_eq!(
        catchers, family,
        "each robustness scenario catches one variant"
    );
    let output = Command::new(std::env::current_exe().unwrap())
        .args([SERVE, "nope"])
        .env("CONFORM_PROVIDERS", "primary=http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a broken variant"), "{stderr}");
}
