//! Unit names pinnerd makes: scopes for adopted processes, the partition helper's
//! instances, and systemd's escaping of both (`systemd-escape`, `--path`).

use super::systemd::UNIT_NAME_MAX;

/// A valid scope name for a process `pid` adopted for `rule`:
/// `pinnerd-<rule, escaped as systemd-escape does>-<pid>.scope`, at most 255 bytes (a long
/// rule name is cut, never inside an escape).
pub fn scope_name(rule: &str, pid: u32) -> String {
    let tail = format!("-{pid}.scope");
    let budget = UNIT_NAME_MAX - "pinnerd-".len() - tail.len();
    let mut escaped = String::new();
    for (i, &byte) in rule.as_bytes().iter().enumerate() {
        let piece = escape_byte(byte, i == 0);
        if escaped.len() + piece.len() > budget {
            break;
        }
        escaped.push_str(&piece);
    }
    format!("pinnerd-{escaped}{tail}")
}

/// One byte of a name as `systemd-escape` writes it: `/` becomes `-`; bytes outside
/// `[A-Za-z0-9:_.]`, and a leading `.`, become `\xNN`.
fn escape_byte(byte: u8, first: bool) -> String {
    let plain = byte.is_ascii_alphanumeric() || matches!(byte, b':' | b'_' | b'.');
    match byte {
        b'/' => "-".to_string(),
        b'.' if first => format!("\\x{byte:02x}"),
        _ if plain => char::from(byte).to_string(),
        _ => format!("\\x{byte:02x}"),
    }
}

/// The template that writes a cpuset partition file for the daemon (see
/// `systemd/pinnerd-partition@.service`): enabling a remote partition takes
/// `CAP_SYS_ADMIN`, which the daemon's own unit does not have.
pub const PARTITION_HELPER: &str = "pinnerd-partition@";

/// `/system.slice/x.service` as `systemd-escape --path` writes it:
/// `system.slice-x.service`.
pub fn escape_path(path: &str) -> String {
    path.trim_matches('/')
        .bytes()
        .enumerate()
        .map(|(i, b)| escape_byte(b, i == 0))
        .collect()
}

/// The inverse of [`escape_path`], with the leading `/`; `None` for text that is not
/// an escaped path (a bad escape, not UTF-8).
pub fn unescape_path(escaped: &str) -> Option<String> {
    let bytes = escaped.as_bytes();
    let mut out = vec![b'/'];
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' => {
                out.push(b'/');
                i += 1;
            }
            b'\\' => {
                let hex = escaped
                    .get(i + 2..i + 4)
                    .filter(|_| bytes.get(i + 1) == Some(&b'x'))?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 4;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The helper unit that writes `mode` (`isolated`, `member`) into `cgroup`'s
/// `cpuset.cpus.partition`: `pinnerd-partition@MODE:ESCAPED-PATH.service`; `None`
/// when the name would be longer than a unit name may be.
pub fn partition_helper_unit(mode: &str, cgroup: &str) -> Option<String> {
    let name = format!("{PARTITION_HELPER}{mode}:{}.service", escape_path(cgroup));
    (name.len() <= UNIT_NAME_MAX).then_some(name)
}
