//! The VM test's runner without a VM (`tests/vm/run.sh` needs root, qemu and minutes):
//! what ended a boot, read from canned serial consoles (`tests/vm/consoles/`) by
//! `tests/vm/boots.sh`; the boots and their summary with a fake boot in qemu's place;
//! and which checks a resumed boot runs (`tests/vm/guest/resume.sh`), against the
//! checks `tests/vm/guest/checks.sh` really runs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `script` with bash in the repository, `set -euo pipefail` and `lib` sourced;
/// returns its standard output, failing the test on a non-zero exit.
fn bash(lib: &str, script: &str, env: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new("bash");
    cmd.current_dir(repo())
        .arg("-c")
        .arg(format!("set -euo pipefail\n. {lib}\n{script}"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bash");
    assert!(
        out.status.success(),
        "bash failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn verdict_of(file: &Path) -> String {
    bash(
        "tests/vm/boots.sh",
        r#"vm_console_verdict "$CONSOLE""#,
        &[("CONSOLE", file)],
    )
    .trim_end()
    .to_string()
}

fn console(name: &str) -> PathBuf {
    repo().join("tests/vm/consoles").join(name)
}

#[test]
fn the_emulators_int3_oops_is_told_from_every_real_kernel_failure() {
    let cases = [
        // The emulator's: the int3 is gone from the code (the patch was finished).
        (
            "int3-get-page-from-freelist-6.12.log",
            "int3 at 184.307152 s in get_page_from_freelist+0x1a6/0x1530 (task bash[2957])",
        ),
        (
            "int3-sched-clock-cpu-early-6.12.log",
            "int3 at 2.918406 s in sched_clock_cpu+0x9/0x1c0 (task swapper/0[1])",
        ),
        // Two vCPUs ran into the same stale int3 at once: two oopses, one panic.
        (
            "two-int3-6.12.log",
            "int3 at 223.189738 s in __alloc_pages_noprof+0xe4/0x310 (task sleep[3330])",
        ),
        // Debian 12's kernel prints the header without "Oops: ".
        (
            "int3-6.1.log",
            "int3 at 211.504733 s in cgroup_bpf_enabled+0x5/0x20 (task systemd[1873])",
        ),
        // Real failures.
        (
            "int3-in-code-6.12.log",
            "kernel Oops: int3: 0000 [#1] PREEMPT SMP NOPTI (the int3 is in the kernel's code: Code: … cc <..>)",
        ),
        (
            "list-add-corruption-6.12.log",
            "kernel list_add corruption. next->prev should be prev (ffff8c4b41a3e6a8), but was ffff8c4b4236c0a8. (next=ffff8c4b4236c0a8).",
        ),
        (
            "soft-lockup-6.12.log",
            "kernel watchdog: BUG: soft lockup - CPU#3 stuck for 26s! [pinnerd-hold:1187]",
        ),
        (
            "cpuset-warning-then-int3-6.12.log",
            "kernel WARNING: CPU: 5 PID: 2410 at kernel/cgroup/cpuset.c:1476 remote_partition_disable+0x11d/0x130",
        ),
        (
            "int3-then-bug-6.12.log",
            "kernel BUG: kernel NULL pointer dereference, address: 0000000000000008",
        ),
        (
            "gpf-6.12.log",
            "kernel Oops: general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] PREEMPT SMP NOPTI",
        ),
        (
            "panic-no-root-6.12.log",
            "kernel Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)",
        ),
        ("clean-6.12.log", "clean"),
    ];
    for (file, want) in cases {
        assert_eq!(verdict_of(&console(file)), want, "{file}");
    }
}

#[test]
fn console_lines_end_as_the_serial_port_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let crlf = dir.path().join("crlf.log");
    let text = std::fs::read_to_string(console("int3-get-page-from-freelist-6.12.log")).unwrap();
    // As clean-6.12.log shows: lines end in \r\r\n, and systemd's status line can put
    // its escapes and a carriage return before a kernel line.
    let serial = text.replace('\n', "\r\r\n").replace(
        "[  184.307152] Oops: int3",
        "\x1b[M\r\x1b[K[  184.307152] Oops: int3",
    );
    assert_ne!(serial, text);
    std::fs::write(&crlf, serial).unwrap();
    assert_eq!(
        verdict_of(&crlf),
        "int3 at 184.307152 s in get_page_from_freelist+0x1a6/0x1530 (task bash[2957])"
    );
    // The same oops with its code bytes cut off proves nothing: a failure.
    let cut = dir.path().join("cut.log");
    let no_code: String = text
        .lines()
        .filter(|l| !l.contains("] Code: "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&cut, no_code).unwrap();
    assert!(
        verdict_of(&cut).starts_with("kernel Oops: int3: 0000 [#1]"),
        "{}",
        verdict_of(&cut)
    );
}

#[test]
fn only_kernel_lines_count() {
    // What user space writes on the console carries no printk time stamp.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("user.log");
    std::fs::write(
        &f,
        "[  OK  ] Started pinnerd.service - pinnerd.\n\
         Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
         kernel BUG at lib/list_debug.c:29!\n\
         WARNING: CPU: 1 PID: 1 at kernel/cgroup/cpuset.c:1 f+0x0/0x1\n\
         [   12.000001] systemd[1]: Started pinnerd-vm-checks.service.\n",
    )
    .unwrap();
    assert_eq!(verdict_of(&f), "clean");
}

/// One boot of the fake VM: its serial console (a file of tests/vm/consoles/) and what
/// the guest wrote on its results port.
#[derive(Clone, Copy)]
struct Boot {
    console: &'static str,
    results: &'static [&'static str],
}

/// What the runner made of a series of boots.
#[derive(Debug)]
struct Outcome {
    /// The extra kernel arguments each boot was given, in order.
    cmdlines: Vec<String>,
    /// `VM_…` variables after the boots and the summary, as `key=value` lines.
    vars: Vec<String>,
    /// The summary the runner printed.
    summary: String,
    /// boots.txt: one line per boot that ended early.
    boots: String,
    /// What `vm_timing` printed: where the time in the VM went.
    timing: String,
}

impl Outcome {
    fn var(&self, key: &str) -> &str {
        let prefix = format!("{key}=");
        self.vars
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.vars))
    }
}

fn run_boots(boots: &[Boot], max_reboots: u32) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake");
    let run = dir.path().join("run");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    for (i, b) in boots.iter().enumerate() {
        std::fs::copy(console(b.console), fake.join(format!("console-{}", i + 1))).unwrap();
        // The serial port writes \r\n.
        let results: String = b
            .results
            .iter()
            .map(|l| format!("PINNERD-VM {l}\r\n"))
            .collect();
        std::fs::write(fake.join(format!("results-{}", i + 1)), results).unwrap();
    }
    let script = format!(
        r#"run=$RUN
VM_MAX_REBOOTS={max_reboots}
fake_boots=0
vm_boot() {{
    fake_boots=$((fake_boots + 1))
    printf '[%s]\n' "$1" >>"$RUN/cmdlines"
    cp "$FAKE/console-$fake_boots" "$run/console.log"
    cp "$FAKE/results-$fake_boots" "$run/results.log"
}}
vm_boots
vm_summary >"$RUN/summary"
vm_timing "$run/results.txt" >"$RUN/timing"
echo "boots=$VM_BOOTS"
echo "kernel=$VM_KERNEL"
echo "in_flight=$VM_IN_FLIGHT"
echo "emulator=$VM_EMULATOR"
echo "pass=$VM_PASS"
echo "fail=$VM_FAIL"
echo "skip=$VM_SKIP"
echo "failed=${{VM_FAILED[*]}}""#
    );
    let out = bash(
        "tests/vm/boots.sh",
        &script,
        &[("RUN", &run), ("FAKE", &fake)],
    );
    let read = |name: &str| std::fs::read_to_string(run.join(name)).unwrap_or_default();
    Outcome {
        cmdlines: read("cmdlines")
            .lines()
            .map(|l| l.trim_matches(['[', ']']).to_string())
            .collect(),
        vars: out.lines().map(str::to_string).collect(),
        summary: read("summary"),
        boots: read("boots.txt"),
        timing: read("timing"),
    }
}

const CLEAN: &str = "clean-6.12.log";
const INT3: &str = "int3-get-page-from-freelist-6.12.log";
const BUG: &str = "list-add-corruption-6.12.log";

#[test]
fn a_boot_the_emulator_ended_is_resumed_with_the_checks_not_finished() {
    let o = run_boots(
        &[
            Boot {
                console: INT3,
                results: &[
                    "START kernel 6.12",
                    "BEGIN service-active",
                    "CHECK service-active PASS active",
                    "BEGIN topology",
                    "CHECK topology FAIL packages differ",
                    "BEGIN rule-explicit-pins",
                ],
            },
            Boot {
                console: CLEAN,
                results: &[
                    "START kernel 6.12, resumed: 2 checks finished in earlier boots",
                    "BEGIN service-active",
                    "SETUP service-active PASS active",
                    "BEGIN rule-explicit-pins",
                    "CHECK rule-explicit-pins PASS on 2,5",
                    "BEGIN hotplug-explicit",
                    "CHECK hotplug-explicit PASS on 6",
                    "DONE passed=2 failed=0 skipped=0",
                ],
            },
        ],
        3,
    );
    // The second boot is told what the first finished, the failed check included.
    assert_eq!(o.cmdlines, ["", "pinnerd_vm.done=service-active,topology"]);
    assert_eq!(o.var("boots"), "2");
    assert_eq!(o.var("kernel"), "");
    assert_eq!(o.var("emulator"), "");
    // Each check once; the failure before the oops stays a failure.
    assert_eq!(o.var("pass"), "3", "{}", o.summary);
    assert_eq!(o.var("fail"), "1");
    assert_eq!(o.var("failed"), "topology");
    let names: Vec<&str> = o
        .summary
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        names[..4],
        [
            "service-active",
            "topology",
            "rule-explicit-pins",
            "hotplug-explicit"
        ],
        "{}",
        o.summary
    );
    // The reboot and its reason are in the summary.
    assert_eq!(
        o.boots,
        "boot 1: the emulated kernel oopsed on an int3 at 184.307152 s in get_page_from_freelist+0x1a6/0x1530 (task bash[2957]) during rule-explicit-pins, 2 checks finished in this boot; booting again for the rest\n"
    );
    assert!(
        o.summary
            .contains("boots: 2\n  boot 1: the emulated kernel oopsed"),
        "{}",
        o.summary
    );
}

#[test]
fn the_time_in_the_vm_is_told_check_by_check_and_a_check_cut_off_is_named() {
    let o = run_boots(
        &[
            Boot {
                console: INT3,
                results: &[
                    "START kernel 6.12",
                    "BEGIN service-active 10.00",
                    "END service-active 12.40",
                    "CHECK service-active PASS active",
                    "BEGIN isolate-churn-no-leak 12.50",
                    "END isolate-churn-no-leak 60.10",
                    "CHECK isolate-churn-no-leak PASS nothing left",
                    "BEGIN topology 60.20",
                ],
            },
            Boot {
                console: CLEAN,
                results: &[
                    "START kernel 6.12",
                    "BEGIN topology 11.00",
                    "END topology 14.60",
                    "CHECK topology PASS 8 CPUs",
                    "BEGIN hotplug-compact 14.70",
                ],
            },
        ],
        3,
    );
    assert_eq!(
        o.timing,
        "time in the VM: 3 checks, 54 s; slowest: isolate-churn-no-leak 48 s, \
         topology 4 s, service-active 2 s\n\
         cut off: topology, begun at 60.20 s in boot 1\n\
         cut off: hotplug-compact, begun at 14.70 s in boot 2\n"
    );
}

#[test]
fn a_real_kernel_failure_is_never_booted_past() {
    let o = run_boots(
        &[
            Boot {
                console: BUG,
                results: &[
                    "START kernel 6.12",
                    "BEGIN service-active",
                    "CHECK service-active PASS active",
                    "BEGIN isolate-keeps-others-off",
                ],
            },
            Boot {
                console: CLEAN,
                results: &[
                    "CHECK isolate-keeps-others-off PASS",
                    "DONE passed=1 failed=0 skipped=0",
                ],
            },
        ],
        3,
    );
    assert_eq!(o.cmdlines, [""], "booted again after a kernel BUG");
    assert_eq!(o.var("in_flight"), "isolate-keeps-others-off");
    assert!(
        o.var("kernel").starts_with("list_add corruption."),
        "{:?}",
        o.vars
    );
    assert_eq!(o.var("fail"), "1");
    assert_eq!(o.var("failed"), "isolate-keeps-others-off");
    assert!(
        o.summary.contains("isolate-keeps-others-off     FAIL  the guest kernel failed during it: list_add corruption."),
        "{}",
        o.summary
    );
}

#[test]
fn a_check_that_crashes_the_kernel_after_an_int3_resume_fails() {
    let o = run_boots(
        &[
            Boot {
                console: INT3,
                results: &["START", "BEGIN isolate-keeps-others-off"],
            },
            Boot {
                console: BUG,
                results: &[
                    "START",
                    "BEGIN service-active",
                    "SETUP service-active PASS",
                    "BEGIN isolate-keeps-others-off",
                ],
            },
            Boot {
                console: CLEAN,
                results: &[
                    "CHECK isolate-keeps-others-off PASS",
                    "DONE passed=1 failed=0 skipped=0",
                ],
            },
        ],
        3,
    );
    assert_eq!(o.cmdlines.len(), 2, "{:?}", o.cmdlines);
    assert_eq!(o.var("pass"), "0");
    assert_eq!(o.var("failed"), "isolate-keeps-others-off");
    assert!(
        o.boots.lines().nth(1).unwrap().starts_with(
            "boot 2: the guest kernel failed during isolate-keeps-others-off: list_add corruption."
        ),
        "{}",
        o.boots
    );
}

#[test]
fn reboots_are_bounded() {
    let oops = Boot {
        console: INT3,
        results: &["START", "BEGIN state-ready"],
    };
    let clean = Boot {
        console: CLEAN,
        results: &["DONE"],
    };
    let o = run_boots(&[oops, oops, oops, oops, clean], 3);
    assert_eq!(o.cmdlines.len(), 4);
    assert_eq!(o.var("emulator"), "1");
    assert_eq!(o.boots.lines().count(), 4, "{}", o.boots);
    assert!(
        o.boots
            .lines()
            .last()
            .unwrap()
            .ends_with("no reboot left (3 spent)"),
        "{}",
        o.boots
    );
}

#[test]
fn a_check_run_again_as_setup_that_fails_is_a_failure() {
    let o = run_boots(
        &[
            Boot {
                console: INT3,
                results: &[
                    "BEGIN rule-compact-smt-avoid",
                    "CHECK rule-compact-smt-avoid PASS",
                    "BEGIN restart-keeps-pinned",
                ],
            },
            Boot {
                console: CLEAN,
                results: &[
                    "BEGIN rule-compact-smt-avoid",
                    "SETUP rule-compact-smt-avoid FAIL threads differ",
                    "BEGIN restart-keeps-pinned",
                    "CHECK restart-keeps-pinned FAIL vmwork-cmp after restart",
                    "DONE passed=0 failed=2 skipped=0",
                ],
            },
        ],
        3,
    );
    assert_eq!(o.var("pass"), "1");
    assert_eq!(
        o.var("failed"),
        "rule-compact-smt-avoid restart-keeps-pinned"
    );
    assert!(
        o.summary
            .contains("run again for a later check after a reboot, it failed: threads differ"),
        "{}",
        o.summary
    );
}

#[test]
fn an_int3_oops_after_the_checks_finished_costs_nothing() {
    let o = run_boots(
        &[
            Boot {
                console: INT3,
                results: &[
                    "BEGIN package-purge-restores",
                    "CHECK package-purge-restores PASS",
                    "DONE passed=1 failed=0 skipped=0",
                ],
            },
            Boot {
                console: CLEAN,
                results: &[],
            },
        ],
        3,
    );
    assert_eq!(o.cmdlines, [""]);
    assert_eq!(o.var("pass"), "1");
    assert_eq!(o.var("fail"), "0");
    assert!(
        o.boots
            .contains("after the checks finished; nothing to run again"),
        "{}",
        o.boots
    );
}

/// The checks of tests/vm/guest/checks.sh, in the order it runs them.
fn guest_checks() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("tests/vm/guest/checks.sh")).unwrap();
    let names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("run_check "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert!(names.len() > 30, "{names:?}");
    names
}

/// check_role for every check of checks.sh: "name role" lines.
fn roles(done: &[&str], selected: &str) -> Vec<(String, String)> {
    let script = format!(
        r#"for n in {}; do echo "$n $(check_role "$n" "{}" "{selected}")"; done"#,
        guest_checks().join(" "),
        done.join(",")
    );
    bash("tests/vm/guest/resume.sh", &script, &[])
        .lines()
        .map(|l| {
            let (n, r) = l.split_once(' ').unwrap();
            (n.to_string(), r.to_string())
        })
        .collect()
}

/// Every check before `name` in checks.sh's order.
fn before(name: &str) -> Vec<String> {
    let all = guest_checks();
    let i = all
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no check {name}"));
    all[..i].to_vec()
}

fn role_of<'a>(roles: &'a [(String, String)], name: &str) -> &'a str {
    &roles
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no check {name}"))
        .1
}

#[test]
fn a_first_boot_runs_every_check() {
    assert!(roles(&[], "").iter().all(|(_, r)| r == "check"));
    let sel = roles(&[], "topology,hardening");
    assert_eq!(role_of(&sel, "topology"), "check");
    assert_eq!(role_of(&sel, "rule-explicit-pins"), "skip");
}

#[test]
fn a_resumed_boot_runs_again_what_the_checks_left_stand_on() {
    // Cut off in restore-after-crash: the compact workload and the crash before it again,
    // through kill9-keeps-pinned's own needs.
    let done = before("restore-after-crash");
    let done: Vec<&str> = done.iter().map(String::as_str).collect();
    let r = roles(&done, "");
    for setup in [
        "service-active",
        "state-ready",
        "sparse-then-complete",
        "rule-compact-smt-avoid",
        "restart-keeps-pinned",
        "kill9-keeps-pinned",
    ] {
        assert_eq!(role_of(&r, setup), "setup", "{setup}");
    }
    for finished in [
        "package-installed-enabled",
        "topology",
        "rule-explicit-pins",
        "bad-rule-keeps-old",
        "polkit-own-process",
    ] {
        assert_eq!(role_of(&r, finished), "done", "{finished}");
    }
    for to_run in [
        "restore-after-crash",
        "isolate-keeps-others-off",
        "hotplug-explicit",
        "package-purge-restores",
    ] {
        assert_eq!(role_of(&r, to_run), "check", "{to_run}");
    }

    // Cut off in the last check: the hotplug and isolation workloads it stands on.
    let done = before("package-purge-restores");
    let done: Vec<&str> = done.iter().map(String::as_str).collect();
    let r = roles(&done, "");
    assert_eq!(role_of(&r, "hotplug-explicit"), "setup");
    assert_eq!(role_of(&r, "isolate-keeps-others-off"), "setup");
    assert_eq!(role_of(&r, "isolate-survives-restart"), "done");
    assert_eq!(role_of(&r, "rule-compact-smt-avoid"), "done");
    assert_eq!(role_of(&r, "package-purge-restores"), "check");
}

#[test]
fn every_need_names_an_earlier_check() {
    let all = guest_checks();
    let out = bash(
        "tests/vm/guest/resume.sh",
        r#"echo "BASE ${BASE[*]}"; for k in "${!NEEDS[@]}"; do echo "$k ${NEEDS[$k]}"; done"#,
        &[],
    );
    let pos = |n: &str| {
        all.iter()
            .position(|c| c == n)
            .unwrap_or_else(|| panic!("resume.sh names {n}, which checks.sh does not run"))
    };
    for line in out.lines() {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap();
        let needs: Vec<&str> = words.collect();
        assert!(!needs.is_empty(), "{line}");
        if key == "BASE" {
            let at: Vec<usize> = needs.iter().map(|n| pos(n)).collect();
            assert!(
                at.windows(2).all(|w| w[0] < w[1]),
                "BASE out of order: {line}"
            );
            continue;
        }
        for n in needs {
            assert!(pos(n) < pos(key), "{key} needs {n}, which runs after it");
        }
    }
}
