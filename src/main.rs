//! The `pinnerd` binary: parses arguments, sets up logging, runs the command and maps
//! errors to exit codes. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

use std::io::Write as _;

fn main() -> ExitCode {
    let cli = pinnerd::cli::Cli::parse();
    pinnerd::cli::init_logging(&cli);
    // What is still buffered is written here, so that a closed or full standard output
    // is said, not lost at exit.
    let result = pinnerd::cli::run(cli).and_then(|code| {
        std::io::stdout()
            .flush()
            .map_err(pinnerd::cli::StdoutError)?;
        Ok(code)
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            // Not `eprintln!`: a closed standard error is no reason to panic either.
            let _ = writeln!(
                std::io::stderr(),
                "pinnerd: {}",
                pinnerd::cli::describe_error(&err)
            );
            ExitCode::from(pinnerd::cli::exit_code_for(&err))
        }
    }
}
