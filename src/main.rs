//! `conform`: the binary's edge. Parsing, exit codes and printing live here; the work
//! lives in the library.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    init_logging(args.global.verbose);
    // A run polls its calls on one thread either way (the runner is one stream, not
    // spawned tasks); on a multi-thread runtime the HTTP connections' tasks would run on
    // the other workers, and every request and its response would wake a thread across
    // cores: a third of a call's CPU went to those context switches. `serve` and the
    // scenarios spread their work over every core.
    let one_thread = args.command.runs_on_one_thread();
    let mut builder = if one_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return cli::Exit::Usage.into();
        }
    };
    let code = match runtime.block_on(cli::dispatch(args)) {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("error: {}", cli::describe(&e));
            cli::Exit::of_error(&e).into()
        }
    };
    if one_thread {
        // Everything a run writes is written and synced by now. Shutting the runtime
        // down would deregister and close each of the run's connections (64 by default)
        // one system call at a time, a few milliseconds; the process ends here, and its
        // end closes them all.
        std::mem::forget(runtime);
    }
    code
}

/// Logs go to stderr, so that stdout stays what a command prints.
fn init_logging(verbose: u8) {
    let default = match verbose {
        // The ledger's state changes are the operator's record: shown by default.
        0 => "warn,conform_serve::ledger=info,conform_serve::orchestrator=info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use conform_scenarios::gateway as gw;

    use crate::cli::{Cli, Command};

    /// `--gateway NAME` is the gateway of that name, and no other name is taken.
    #[test]
    fn each_gateway_argument_is_the_gateway_of_its_name() {
        let parse = |name: &str| Cli::try_parse_from(["conform", "scenarios", "--gateway", name]);
        for kind in gw::Kind::ALL {
            let Ok(Cli {
                command: Command::Scenarios(args),
                ..
            }) = parse(kind.name())
            else {
                panic!("--gateway {} is refused", kind.name())
            };
            assert_eq!(args.gateway, Some(kind));
        }
        let refused = parse("kong").map(|_| ()).unwrap_err().to_string();
        assert!(
            refused.contains("[possible values: litellm, portkey, tensorzero]"),
            "{refused}"
        );
    }
}
