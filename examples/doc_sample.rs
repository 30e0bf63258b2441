//! Does a command's output match a document's sample? The same matching trycmd gives the
//! documents' ```` ```console ```` samples in `tests/it/docs.rs` (snapbox's: `[..]` in a
//! line stands for any characters, `...` on a line of its own for any lines), for the
//! samples only a live machine can show: the VM test copies this program into the guest
//! and its check `readme-walkthrough` (`tests/vm/guest/checks.sh`) runs the README's
//! walk-through there and compares each output with the README's sample.
//!
//! `doc_sample EXPECTED ACTUAL` (two files): exit 0 when ACTUAL matches EXPECTED, 1 with
//! the difference on standard error when it does not, 2 when a file cannot be read.
//! Blank lines at the end of either are not compared (a document's block ends where its
//! text does).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [expected, actual] = args.as_slice() else {
        eprintln!("usage: doc_sample EXPECTED ACTUAL");
        return ExitCode::from(2);
    };
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|text| format!("{}\n", text.trim_end_matches('\n')))
            .map_err(|e| eprintln!("doc_sample: {path}: {e}"))
    };
    let (Ok(expected), Ok(actual)) = (read(expected), read(actual)) else {
        return ExitCode::from(2);
    };
    let assert = snapbox::Assert::new().action(snapbox::assert::Action::Verify);
    match assert.try_eq(
        Some(&"the output"),
        snapbox::Data::text(actual),
        snapbox::Data::text(expected),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
