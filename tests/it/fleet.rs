//! `pinnerd diff` and `pinnerd fleet` on real published matrices (`tests/fixtures/c2c-data/`),
//! changed the way a noisy re-measurement or a firmware setting would change them.

use std::path::{Path, PathBuf};
use std::process::Command;

use pinnerd::LatencyMatrix;
use serde_json::Value;

fn c2c(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/c2c-data/nviennot")
        .join(name)
}

/// A deterministic ±`amp` multiplicative noise (xorshift), different per `seed`.
fn noisy(m: &LatencyMatrix, amp: f64, seed: u64) -> LatencyMatrix {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let mut out = m.clone();
    let n = m.len();
    for i in 0..n {
        for j in 0..i {
            if let Some(v) = m.at(i, j) {
                let w = v * (1.0 + amp * next());
                out.latency_ns.set(i, j, Some(w));
            }
        }
    }
    out
}

/// Multiplies every pair between the two CPU sets by `factor`.
fn slow_between(m: &LatencyMatrix, x: &[u32], y: &[u32], factor: f64) -> LatencyMatrix {
    let mut out = m.clone();
    for &a in x {
        for &b in y {
            let (i, j) = (m.index_of(a).unwrap(), m.index_of(b).unwrap());
            let v = m.at(i, j).unwrap() * factor;
            out.latency_ns.set(i, j, Some(v));
        }
    }
    out
}

fn write(dir: &Path, name: &str, m: &LatencyMatrix) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(m).unwrap()).unwrap();
    p
}

fn pinnerd_json(args: &[&Path], cmd: &str) -> Value {
    let out = super::helper::pinnerd_command()
        .arg(cmd)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pinnerd {cmd} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Ryzen 9 5950X: CPUs 0-7,16-23 on one CCD, 8-15,24-31 on the other.
fn ccd(k: u32) -> Vec<u32> {
    (0..32).filter(|c| (c % 16) / 8 == k).collect()
}

#[test]
fn three_percent_noise_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let real = c2c("AMD_Ryzen_9_5950X_at_3.40_GHz.csv");
    let m = LatencyMatrix::load(&real).unwrap();
    let b = write(dir.path(), "noisy.json", &noisy(&m, 0.03, 7));
    let d = pinnerd_json(&[&real, &b], "diff");
    assert_eq!(d["verdict"], "same", "{d:#}");
    assert!(d["reason"].as_str().unwrap().starts_with("every level"));
    assert_eq!(d["cells_compared"], 496);
    assert_eq!(d["cells"].as_array().unwrap().len(), 0);
    let levels: Vec<&str> = d["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["smt", "llc", "machine"]);
    for l in d["levels"].as_array().unwrap() {
        let r = l["ratio"].as_f64().unwrap();
        assert!((0.97..=1.03).contains(&r), "{l}");
    }
}

#[test]
fn one_ccd_pair_slowed_twice_differs_at_that_level() {
    let dir = tempfile::tempdir().unwrap();
    let real = c2c("AMD_Ryzen_9_5950X_at_3.40_GHz.csv");
    let m = LatencyMatrix::load(&real).unwrap();
    let slowed = noisy(&slow_between(&m, &ccd(0), &ccd(1), 2.0), 0.03, 11);
    let b = write(dir.path(), "slowed.json", &slowed);
    let d = pinnerd_json(&[&real, &b], "diff");
    assert_eq!(d["verdict"], "differs", "{d:#}");
    let reason = d["reason"].as_str().unwrap();
    assert!(reason.starts_with("level machine: "), "{reason}");
    let machine = &d["levels"][2];
    assert_eq!(machine["level"], "machine");
    assert_eq!(machine["differs"], true);
    let r = machine["ratio"].as_f64().unwrap();
    assert!((1.9..=2.1).contains(&r), "{machine}");
    assert_eq!(d["levels"][0]["differs"], false);
    assert_eq!(d["levels"][1]["differs"], false);
    // Every cross-CCD cell moved, and only those.
    assert_eq!(d["cells"].as_array().unwrap().len(), 256);
    assert!(d["cells"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["level"] == "machine"));
}

/// On a two-socket EPYC, one pair of CCX inside one socket slowed: the socket level's
/// median does not move, the pair of groups does, and is named.
#[test]
fn one_ccx_pair_among_many_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let real = c2c("Dual_AMD_EPYC_7742_64-Core_Processor.csv");
    let m = LatencyMatrix::load(&real).unwrap();
    // Two CCX of socket 0 (whose cross-CCX pairs cost ~250 ns in this file: the line
    // lived in the other socket's memory; socket 1's cost ~132 ns).
    let x: Vec<u32> = (4..8).chain(132..136).collect();
    let y: Vec<u32> = (8..12).chain(136..140).collect();
    let a = write(dir.path(), "a.json", &m);
    let b = write(dir.path(), "b.json", &slow_between(&m, &x, &y, 2.0));
    let d = pinnerd_json(&[&a, &b], "diff");
    assert_eq!(d["verdict"], "differs", "{}", d["reasons"]);
    assert_eq!(
        d["reason"],
        "level group: the 64 pairs between 4-7,132-135 and 8-11,136-139 cost 248.6 ns in A, 497.2 ns in B (2.00x)",
        "{}",
        d["reasons"]
    );
    let group = d["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["level"] == "group")
        .unwrap();
    assert_eq!(group["differs"], false, "{group}");
    assert_eq!(d["groups"].as_array().unwrap().len(), 1);
}

#[test]
fn one_slowed_host_among_five_noisy_copies_is_the_only_outlier() {
    let dir = tempfile::tempdir().unwrap();
    let m = LatencyMatrix::load(&c2c("AMD_Ryzen_9_5950X_at_3.40_GHz.csv")).unwrap();
    let mut files = Vec::new();
    for k in 0..5 {
        files.push(write(
            dir.path(),
            &format!("host{k}.json"),
            &noisy(&m, 0.03, 100 + k),
        ));
    }
    let slowed = noisy(&slow_between(&m, &ccd(0), &ccd(1), 2.0), 0.03, 200);
    files.insert(3, write(dir.path(), "slow.json", &slowed));
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let f = pinnerd_json(&refs, "fleet");
    let hosts = f["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 6);
    for (h, file) in hosts.iter().zip(&files) {
        assert_eq!(h["file"], file.display().to_string());
        let slow = file.ends_with("slow.json");
        assert_eq!(h["outlier"], slow, "{h:#}");
        let reasons = h["reasons"].as_array().unwrap();
        assert!(!reasons.is_empty());
        if slow {
            let r = reasons[0].as_str().unwrap();
            assert!(r.starts_with("level machine: "), "{r}");
            assert!(r.contains("here (1.9") || r.contains("here (2.0"), "{r}");
        }
    }
    assert_eq!(f["outliers"], 1);
}

#[test]
fn bad_inputs_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // A cause is said once, not once more for each error that wraps it.
    let one = write(
        dir.path(),
        "one.json",
        &LatencyMatrix::from_fn(vec![0], |_, _| 0.0),
    );
    let out = super::helper::pinnerd_command()
        .args(["diff".as_ref(), one.as_os_str(), one.as_os_str()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.matches("at least 2 are needed").count(), 1, "{err}");
    let small = write(
        dir.path(),
        "small.json",
        &LatencyMatrix::from_fn(vec![0, 1, 2, 3], |_, _| 20.0),
    );
    let big = c2c("AMD_Ryzen_9_5950X_at_3.40_GHz.csv");
    let out = super::helper::pinnerd_command()
        .args(["diff".as_ref(), big.as_os_str(), small.as_os_str()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{} covers CPUs 0-3 but", small.display())),
        "{err}"
    );
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let out = super::helper::pinnerd_command()
        .args(["diff".as_ref(), big.as_os_str(), fifo.as_os_str()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fifo: refused: not a regular file but a FIFO"),
        "{err}"
    );
    let broken = dir.path().join("broken.csv");
    std::fs::write(&broken, ",,\n1,,\n2,x,\n").unwrap();
    let out = super::helper::pinnerd_command()
        .args([
            "fleet".as_ref(),
            big.as_os_str(),
            broken.as_os_str(),
            big.as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:3: cell 2", broken.display())),
        "{err}"
    );
}
