//! The `pinnerd` binary: parses arguments, sets up logging, runs the command and maps
//! errors to exit codes. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

use std::io::Write as _;

fn main() -> ExitCode {
    // The partition helper unit runs the binary under another name (`ExecStart=@`): one
    // argument, no command line of its own, nothing a user is offered.
    let mut args = std::env::args_os();
    let helper = args.next().is_some_and(|a| {
        std::path::Path::new(&a).file_name() == Some(pinnerd::cli::partition::HELPER_NAME.as_ref())
    });
    let result = if helper {
        pinnerd::cli::partition::run_helper(args.collect())
    } else {
        let cli = pinnerd::cli::Cli::parse();
        pinnerd::cli::init_logging(&cli);
        pinnerd::cli::run(cli)
    };
    // What is still buffered is written here, so that a closed or full standard output
    // is said, not lost at exit.
    let result = result.and_then(|code| {
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
