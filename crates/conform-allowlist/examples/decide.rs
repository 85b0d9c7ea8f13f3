//! The failover gate of an orchestrator, whole: may it fail over to PROVIDER for SUITE now?
//!
//! ```text
//! cargo run -p conform-allowlist --example decide -- allowlist.json SUITE PROVIDER [SERVED_MODEL] [trust.toml]
//! ```
//!
//! Exit status 0 when failover is permitted, 1 when it is not (with the stable reason code),
//! 2 when the question itself is malformed. Give the trust file to require signed evidence.

use std::path::Path;
use std::process::ExitCode;

use conform_allowlist::sign::Trust;
use conform_allowlist::{Allowlist, Observed};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, suite, provider) = match args.as_slice() {
        [file, suite, provider, ..] => (file, suite, provider),
        _ => {
            eprintln!("usage: decide ALLOWLIST SUITE PROVIDER [SERVED_MODEL] [TRUST_TOML]");
            return ExitCode::from(2);
        }
    };
    // No trust file named: entries are read unsigned, as conform reads a project without one.
    let trust = match args.get(4).map(|path| Trust::load(Path::new(path))) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(trust))) => Some(trust),
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let observed = Observed {
        // The model the provider's last answer named: a model swapped behind the same
        // name was never proven.
        served_model: args.get(3).map(String::as_str).filter(|m| !m.is_empty()),
        trust: trust.as_ref(),
        ..Observed::default()
    };
    // Read at the moment of deciding: conform replaces the file atomically.
    let now = time::OffsetDateTime::now_utc();
    let decision = Allowlist::load(Path::new(file))
        .and_then(|list| list.decide(suite, provider, now, &observed));
    match decision {
        Ok(permit) => {
            println!(
                "permitted until {} (run {}, {} calls)",
                permit.entry.valid_until, permit.entry.evidence.run_id, permit.entry.evidence.calls
            );
            ExitCode::SUCCESS
        }
        Err(denial) => {
            println!("denied ({}): {}", denial.reason.code(), denial.detail);
            ExitCode::from(1)
        }
    }
}
