//! `conform`: the binary's edge. Parsing, exit codes and printing live here; the work
//! lives in the library.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.global.verbose);
    // A run polls its calls on one thread either way (the runner is one stream, not
    // spawned tasks); on a multi-thread runtime the HTTP connections' tasks would run on
    // the other workers, and every request and its response would wake a thread across
    // cores: a third of a call's CPU went to those context switches. `serve` and the
    // scenarios spread their work over every core.
    let mut builder = if args.command.runs_on_one_thread() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(cli::EXIT_CONFIG);
        }
    };
    match runtime.block_on(cli::dispatch(args)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(cli::EXIT_CONFIG)
        }
    }
}
