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
//! text does). `cargo test --example doc_sample` tests the matching.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [expected, actual] = args.as_slice() else {
        eprintln!("usage: doc_sample EXPECTED ACTUAL");
        return ExitCode::from(2);
    };
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|e| eprintln!("doc_sample: {path}: {e}"))
    };
    let (Ok(expected), Ok(actual)) = (read(expected), read(actual)) else {
        return ExitCode::from(2);
    };
    match matches(&expected, &actual) {
        Ok(()) => ExitCode::SUCCESS,
        Err(difference) => {
            eprintln!("{difference}");
            ExitCode::from(1)
        }
    }
}

/// `Ok` when `actual` matches the sample `expected`, else the difference in words.
fn matches(expected: &str, actual: &str) -> Result<(), String> {
    let ends = |text: &str| format!("{}\n", text.trim_end_matches('\n'));
    snapbox::Assert::new()
        .action(snapbox::assert::Action::Verify)
        .try_eq(
            Some(&"the output"),
            snapbox::Data::text(ends(actual)),
            snapbox::Data::text(ends(expected)),
        )
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn elisions_stand_for_characters_and_lines() {
        let sample =
            "rules (1):\n  feed (priority 0): cpus [..]\n...\n  tid 4415: applied [..]\n...\n";
        assert_eq!(
            matches(
                sample,
                "rules (1):\n  feed (priority 0): cpus 0-1\n  tid 4415: applied 0-1\n"
            ),
            Ok(())
        );
        assert_eq!(
            matches(
                sample,
                "rules (1):\n  feed (priority 0): cpus 2-3\n    memory: not weighed\n  tid 4415: applied 2-3\n  in cpuset 0-7\n\n\n"
            ),
            Ok(())
        );
    }

    #[test]
    fn a_changed_line_is_a_difference_that_names_it() {
        let err = matches("ok: 1 file, 1 rule\n", "ok: 2 files, 1 rule\n").unwrap_err();
        assert!(err.contains("ok: 2 files, 1 rule"), "{err}");
        // `[..]` stays inside its line.
        assert!(matches("a [..]\nz\n", "a b\nc\nz\n").is_err());
    }
}
