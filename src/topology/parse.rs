//! Parsing sysfs values: numbers, lists and sizes, with errors naming the file, line
//! and column.

use std::path::Path;
use std::str::FromStr;

use crate::cpuset::CpuSet;
use crate::sysroot::FileError;

use super::model::TopologyError;

/// A parse error pointing at `token` inside `text` (1-based line and column).
pub(super) fn parse_error(path: &Path, text: &str, token: &str, message: &str) -> TopologyError {
    let offset = if token.is_empty() {
        if text.trim().is_empty() {
            0
        } else {
            text.len() - text.trim_start().len()
        }
    } else {
        text.find(token).unwrap_or(0)
    };
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = offset - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    TopologyError::File(FileError::Parse {
        path: path.to_path_buf(),
        line,
        column,
        message: if token.is_empty() {
            message.to_string()
        } else {
            format!("{token:?}: {message}")
        },
    })
}

/// A kernel CPU list file (`0-3,8`), errors located at the offending token.
pub(crate) fn parse_list(path: &Path, text: &str) -> Result<CpuSet, TopologyError> {
    text.parse::<CpuSet>().map_err(|e| {
        let token = e.token.trim();
        let token = if token.is_empty() { "" } else { token };
        // An empty token (`1,,2`) is located at its comma.
        if token.is_empty() && text.contains(",,") {
            let mut err = parse_error(path, text, ",,", e.reason);
            if let TopologyError::File(FileError::Parse {
                column, message, ..
            }) = &mut err
            {
                *column += 1;
                *message = e.reason.to_string();
            }
            return err;
        }
        parse_error(path, text, token, e.reason)
    })
}

/// A file holding one number.
pub(super) fn parse_one<T: FromStr>(path: &Path, text: &str) -> Result<T, TopologyError> {
    let token = text.trim();
    token.parse().map_err(|_| {
        parse_error(
            path,
            text,
            token,
            if token.is_empty() {
                "empty file, expected a number"
            } else {
                "expected a number"
            },
        )
    })
}

/// Whitespace-separated numbers (`node/nodeN/distance`).
pub(super) fn parse_numbers<T: FromStr>(path: &Path, text: &str) -> Result<Vec<T>, TopologyError> {
    let mut out = Vec::new();
    let mut rest = 0;
    for token in text.split_whitespace() {
        let at = rest + text[rest..].find(token).unwrap_or(0);
        rest = at + token.len();
        match token.parse() {
            Ok(v) => out.push(v),
            Err(_) => {
                let mut err = parse_error(path, text, token, "expected a number");
                if let TopologyError::File(FileError::Parse { line, column, .. }) = &mut err {
                    let before = &text[..at];
                    *line = before.matches('\n').count() + 1;
                    *column = at - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                }
                return Err(err);
            }
        }
    }
    Ok(out)
}

/// A cache size as sysfs prints it: `32K`, `1024K`, `32768K`, `8M`, or plain bytes.
pub(super) fn parse_size(path: &Path, text: &str) -> Result<u64, TopologyError> {
    let token = text.trim();
    let (digits, unit) = match token.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => token.split_at(i),
        None => (token, ""),
    };
    let mult = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => 0,
    };
    match digits.parse::<u64>() {
        Ok(n) if mult != 0 => n
            .checked_mul(mult)
            .ok_or_else(|| parse_error(path, text, token, "cache size too large")),
        _ => Err(parse_error(
            path,
            text,
            token,
            "expected a cache size such as 32K or 8M",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    fn err_at(result: Result<impl fmt::Debug, TopologyError>) -> (usize, usize, String) {
        match result.unwrap_err() {
            TopologyError::File(FileError::Parse {
                line,
                column,
                message,
                ..
            }) => (line, column, message),
            other => panic!("not a parse error: {other}"),
        }
    }

    #[test]
    fn sizes() {
        let p = Path::new("size");
        assert_eq!(parse_size(p, "32K\n").unwrap(), 32 * 1024);
        assert_eq!(parse_size(p, "8M").unwrap(), 8 << 20);
        assert_eq!(parse_size(p, "512").unwrap(), 512);
        let (line, col, msg) = err_at(parse_size(p, "  12Q\n"));
        assert_eq!((line, col), (1, 3));
        assert!(msg.contains("12Q"), "{msg}");
    }

    #[test]
    fn list_errors_name_line_and_column() {
        let p = Path::new("online");
        assert_eq!(parse_list(p, "0-3,8\n").unwrap().to_string(), "0-3,8");
        let (line, col, msg) = err_at(parse_list(p, "0-3,x\n"));
        assert_eq!((line, col), (1, 5));
        assert!(msg.contains("\"x\""), "{msg}");
        let (_, col, _) = err_at(parse_list(p, "0,,2"));
        assert_eq!(col, 3);
        let (_, col, msg) = err_at(parse_list(p, "0,7-3"));
        assert_eq!(col, 3);
        assert!(msg.contains("reversed"), "{msg}");
    }

    #[test]
    fn numbers_errors_point_at_the_token() {
        let p = Path::new("distance");
        assert_eq!(parse_numbers::<u32>(p, "10 21\n").unwrap(), vec![10, 21]);
        let (line, col, _) = err_at(parse_numbers::<u32>(p, "10 1 1x\n"));
        assert_eq!((line, col), (1, 6));
        let (line, col, msg) = err_at(parse_one::<u32>(p, "\n"));
        assert_eq!((line, col), (1, 1));
        assert!(msg.contains("empty"), "{msg}");
    }
}
