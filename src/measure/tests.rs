use super::*;

/// The CPUs this thread may use are the kernel's own word for it, errors said.
#[test]
fn allowed_cpus_are_the_threads_own_mask() {
    let status = std::fs::read_to_string(format!(
        "/proc/self/task/{}/status",
        crate::affinity::own_tid()
    ))
    .unwrap();
    let listed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    assert_eq!(allowed_cpus().unwrap(), listed.parse::<CpuSet>().unwrap());
}
use crate::cpuset::set;

#[test]
fn select_cpus_defaults_and_errors() {
    let online = set("0-7");
    let isolated = set("6-7");
    let allowed = set("0-7");
    let (cpus, notes) = select_cpus(None, &online, &isolated, &allowed).unwrap();
    assert_eq!(cpus, set("0-5"));
    assert_eq!(
        notes,
        vec!["isolated CPUs 6-7 skipped (name them with --cpus to measure them)"]
    );
    // Named isolated CPUs are measured.
    let (cpus, notes) = select_cpus(Some(&set("5-7")), &online, &isolated, &allowed).unwrap();
    assert_eq!(cpus, set("5-7"));
    assert!(notes.is_empty());
    let e = select_cpus(Some(&CpuSet::new()), &online, &isolated, &allowed).unwrap_err();
    assert_eq!(e.to_string(), "no CPUs to measure: the CPU list is empty");
    let e = select_cpus(Some(&set("3")), &online, &isolated, &allowed).unwrap_err();
    assert_eq!(
        e.to_string(),
        "measuring needs at least two CPUs, got only CPU 3"
    );
    let e = select_cpus(Some(&set("0,8-9")), &online, &isolated, &allowed).unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPUs 8-9 are not online on this machine (online: 0-7)"
    );
    let e = select_cpus(Some(&set("0-2")), &online, &isolated, &set("0-1")).unwrap_err();
    assert!(e.to_string().starts_with("CPU 2 is outside"), "{e}");
    // Everything isolated but one: too few.
    let e = select_cpus(None, &set("0-1"), &set("1"), &allowed).unwrap_err();
    assert!(matches!(e, MeasureError::TooFewCpus { .. }), "{e}");
}

#[test]
fn run_rejects_fewer_than_two_cpus() {
    let e = run(&MeasureConfig::new(set("0")), |_| {}).unwrap_err();
    assert!(matches!(e, MeasureError::TooFewCpus { .. }), "{e}");
    let e = run(&MeasureConfig::new(CpuSet::new()), |_| {}).unwrap_err();
    assert!(matches!(e, MeasureError::EmptyCpuList), "{e}");
}
