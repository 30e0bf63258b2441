use super::*;

use crate::cpuset::set;

#[test]
fn a_hold_let_go_gives_back_only_the_masks_it_left() {
    let ops = FakeOps::new();
    let held = set("2-3");
    ops.add_task(10, &held); // left on the held CPUs, no original: the fallback
    ops.add_task(11, &set("3")); // its original 1,3 narrowed to the held CPUs
    ops.add_task(12, &set("0-1")); // moved elsewhere since: left alone
    ops.add_task(13, &held); // its original is the held set itself: nothing to do
    let originals = BTreeMap::from([(11, set("1,3")), (13, held.clone())]);
    let n = give_back(&ops, [10, 11, 12, 13, 99], &held, &originals, &set("0-7"));
    assert_eq!(n, 2);
    assert_eq!(ops.mask(10), Some(set("0-7")));
    assert_eq!(ops.mask(11), Some(set("1,3")));
    assert_eq!(ops.mask(12), Some(set("0-1")));
    assert_eq!(ops.mask(13), Some(held));
}

#[test]
fn outcomes_are_classified() {
    let ops = FakeOps::new();
    let online = set("0-3");
    ops.add_process(10, 1, &[11, 12, 13], &set("0-3"));
    assert_eq!(
        apply(&ops, 10, &set("1"), &online),
        Outcome::Applied {
            effective: set("1")
        }
    );
    ops.set_cpuset(11, &set("0-1"));
    assert_eq!(
        apply(&ops, 11, &set("1-2"), &online),
        Outcome::Narrowed {
            requested: set("1-2"),
            effective: set("1")
        }
    );
    assert_eq!(
        apply(&ops, 11, &set("3"), &online),
        Outcome::Refused {
            requested: set("3")
        }
    );
    ops.remove_task(12);
    assert_eq!(apply(&ops, 12, &set("1"), &online), Outcome::Gone);
    ops.deny(13);
    assert_eq!(apply(&ops, 13, &set("1"), &online), Outcome::Permission);
}

#[test]
fn offline_cpus_do_not_count_as_narrowing() {
    let ops = FakeOps::new();
    ops.add_process(10, 1, &[], &set("0-3"));
    // CPU 3 is offline: the kernel reports 2 for a request of 2-3.
    ops.set_cpuset(10, &set("0-2"));
    assert_eq!(
        apply(&ops, 10, &set("2-3"), &set("0-2")),
        Outcome::Applied {
            effective: set("2")
        }
    );
}

#[test]
fn a_correct_mask_is_only_read() {
    let ops = FakeOps::new();
    ops.add_process(10, 1, &[], &set("2"));
    assert_eq!(
        apply(&ops, 10, &set("2"), &set("0-3")),
        Outcome::Applied {
            effective: set("2")
        }
    );
    assert!(ops.sets().is_empty());
}

#[test]
fn stat_lines_with_odd_comms_parse() {
    let line =
        "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 98765 1000 10 \
                18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
    let s = parse_stat(line).unwrap();
    assert_eq!(s.comm, "a b) c)");
    assert_eq!(s.ppid, 1);
    assert_eq!(s.flags, 4194560);
    assert_eq!(s.num_threads, 3);
    assert_eq!(s.start_time, 98765);
    assert_eq!(s.state, 'S');
    assert!(!s.has_exited());
    assert!(parse_stat("garbage").is_none());

    let zombie = line
        .replacen(" S ", " Z ", 1)
        .replacen(" 3 0 98765", " 1 0 98765", 1);
    assert!(parse_stat(&zombie).unwrap().has_exited());
    // Its leader exited, two threads (the leader counted) still run.
    let leader_gone = line
        .replacen(" S ", " Z ", 1)
        .replacen(" 3 0 98765", " 2 0 98765", 1);
    assert!(!parse_stat(&leader_gone).unwrap().has_exited());
}

#[test]
fn system_ops_read_and_write_our_own_thread() {
    let ops = SystemOps::default();
    let me = own_tid();
    let before = ops.get_affinity(me).unwrap();
    assert!(!before.is_empty());
    let one: CpuSet = std::iter::once(before.first().unwrap()).collect();
    assert_eq!(
        apply(&ops, me, &one, &before),
        Outcome::Applied {
            effective: one.clone()
        }
    );
    ops.set_affinity(me, &before).unwrap();
    assert_eq!(ops.get_affinity(me).unwrap(), before);
    assert!(matches!(
        ops.set_affinity(me, &set("8000")),
        Err(AffinityError::Invalid { .. })
    ));
}
