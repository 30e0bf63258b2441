//! Counted nouns in what pinnerd prints: "1 pair", "2 pairs", "1 process", "3 processes".
//!
//! Owns: the English plural of the few nouns messages count. Must not touch: what is
//! counted.

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
}
