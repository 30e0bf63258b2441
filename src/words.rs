//! Counted nouns in what pinnerd prints: "1 pair", "2 pairs", "1 process", "3 processes";
//! an error and its causes said as one line.
//!
//! Owns: the English plural of the few nouns messages count, and how a chain of causes
//! reads. Must not touch: what is counted, what failed.

/// `n` and `noun`, the noun in the plural unless `n` is 1: `count(1, "pair")` is
/// "1 pair", `count(2, "process")` is "2 processes", `count(0, "CPU")` is "0 CPUs".
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {}", plural(n, noun))
}

/// `noun` as `n` of them are said: itself for 1, else its plural.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        noun.to_string()
    } else if noun.ends_with('s') || noun.ends_with('x') || noun.ends_with("ch") {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

/// `err` and its causes as one line, `outer: cause: root`, each cause said once.
///
/// Many errors put their source in their own message as well as exposing it as
/// `source()` (`"{path}: {source}"`), so the plain `{:#}` chain would print such a cause
/// twice; a cause whose text already ends the line so far is left out.
pub fn describe_error(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "pair"), "1 pair");
        assert_eq!(count(0, "pair"), "0 pairs");
        assert_eq!(count(2, "process"), "2 processes");
        assert_eq!(count(1, "process"), "1 process");
        assert_eq!(count(8, "CPU"), "8 CPUs");
        assert_eq!(count(1, "CPU"), "1 CPU");
        assert_eq!(count(3, "error"), "3 errors");
        assert_eq!(plural(2, "match"), "matches");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Read {
        path: &'static str,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_in_the_message_is_said_once_and_others_are_kept() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let err = anyhow::Error::new(Read {
            path: "m.json",
            source: io,
        })
        .context("loading");
        assert_eq!(
            describe_error(&err),
            "loading: m.json: No such file or directory (os error 2)"
        );
        let plain = anyhow::anyhow!("root").context("middle").context("outer");
        assert_eq!(describe_error(&plain), "outer: middle: root");
    }
}
