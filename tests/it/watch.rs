//! The event sources on the real kernel: proc connector, uevents, procfs.

use std::process::Command;
use std::time::{Duration, Instant};

use pinnerd::watch::{Connector, ProcMsg};

#[test]
fn the_connector_reports_fork_exec_and_exit_of_a_child() {
    let mut conn = Connector::open(Duration::from_secs(5), 4 << 20).expect("proc connector");
    let child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    let mut child = child;
    child.wait().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = Vec::new();
    while Instant::now() < deadline {
        if !conn.wait(Duration::from_millis(100)) {
            continue;
        }
        buf.clear();
        conn.read(&mut buf).unwrap();
        for m in buf.drain(..) {
            match m {
                ProcMsg::NewProcess { pid: p, .. } if p == pid => seen.push("fork"),
                ProcMsg::Exec { pid: p } if p == pid => seen.push("exec"),
                ProcMsg::Exit { pid: p, tid } if p == pid && tid == pid => seen.push("exit"),
                _ => {}
            }
        }
        if seen.contains(&"exit") {
            break;
        }
    }
    assert_eq!(seen, vec!["fork", "exec", "exit"]);
}
