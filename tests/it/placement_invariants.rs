//! Placement invariants on published matrices and an emulated layout: every request gets
//! a valid placement or a reason, never a panic.

use pinnerd::domains::Domains;
use pinnerd::placement::{place, Policy, Request, SmtPolicy};

use super::domains::qemu_layout;
use super::placement::{all, load};
use pinnerd::placement::PlacementError;
use proptest::prelude::*;

fn domains() -> &'static [Domains] {
    static D: std::sync::OnceLock<Vec<Domains>> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        vec![
            Domains::from_matrix(&load("AMD_Ryzen_9_5950X_at_3.40_GHz.csv")).unwrap(),
            Domains::from_matrix(&load("Dual_Intel_Xeon_Gold_6242_at_2.8GHz.csv")).unwrap(),
            Domains::from_matrix(&load("Intel_Core_i9-12900K.csv")).unwrap(),
            Domains::from_layout(&qemu_layout()).unwrap(),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_request_gives_a_valid_answer_or_a_reason(
        which in 0usize..4,
        count in 0usize..70,
        policy in prop_oneof![Just(Policy::Compact), Just(Policy::Spread)],
        smt in prop_oneof![Just(SmtPolicy::Allow), Just(SmtPolicy::Avoid), Just(SmtPolicy::PreferSiblings)],
        exclusive in any::<bool>(),
        taken in proptest::collection::btree_set(0u32..64, 0..40),
        excluded in proptest::collection::btree_set(0u32..64, 0..10),
    ) {
        let d = &domains()[which];
        let avail = all(d).difference(&taken.iter().copied().collect());
        let req = Request {
            count,
            policy,
            smt,
            exclusive,
            exclude: excluded.iter().copied().collect(),
            cpus: None,
        };
        match place(d, &req, &avail) {
            Ok(p) => {
                prop_assert_eq!(p.cpus.len(), count);
                prop_assert!(p.cpus.is_subset(&avail));
                prop_assert!(p.cpus.is_disjoint(&req.exclude));
                prop_assert!(p.cpus.is_subset(&p.reserved));
                if let Some(smt_level) = d.smt_level() {
                    let core = |c: u32| d.group_of(smt_level, d.index_of(c).unwrap());
                    if smt == SmtPolicy::Avoid {
                        let mut cores: Vec<usize> = p.cpus.iter().map(core).collect();
                        cores.sort_unstable();
                        cores.dedup();
                        prop_assert_eq!(cores.len(), count);
                    }
                    if exclusive {
                        // Whole cores, all free, reserved.
                        for c in p.cpus.iter() {
                            for s in d.levels()[smt_level].groups[core(c)].iter() {
                                prop_assert!(avail.contains(s) && !req.exclude.contains(s));
                                prop_assert!(p.reserved.contains(s));
                            }
                        }
                    }
                }
                prop_assert_eq!(place(d, &req, &avail).unwrap(), p, "deterministic");
            }
            Err(PlacementError::ZeroCount) => prop_assert_eq!(count, 0),
            Err(PlacementError::NotEnough { wanted, usable, .. }) => {
                prop_assert_eq!(wanted, count);
                prop_assert!(usable < count);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}
