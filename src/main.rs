//! The `pinnerd` binary: parses arguments, sets up logging, runs the command and maps
//! errors to exit codes. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pinnerd::cli::Cli::parse();
    pinnerd::cli::init_logging(&cli);
    match pinnerd::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("pinnerd: {err:#}");
            ExitCode::from(pinnerd::cli::exit_code_for(&err))
        }
    }
}
