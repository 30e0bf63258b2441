//! The `placement` dict of `PinProcessWith` and `PlanWith` (`a{sv}`): the vocabulary of a
//! rule's `[rule.place]` on the bus, read into the loop's [`PlaceSpec`] and written from
//! it for clients; checked before anything reaches the loop.

use std::collections::HashMap;

use super::admission::{check_len, MAX_STRING};
use super::error::{MethodError, Result};
use crate::api::{PlaceParts, PlaceSpec};

/// The keys of a `placement` dict (`PinProcessWith`, `PlanWith`).
pub const PLACEMENT_KEYS: [&str; 13] = [
    "count",
    "policy",
    "smt",
    "within",
    "cpus",
    "rule",
    "core-type",
    "prefer",
    "near",
    "memory",
    "sched-policy",
    "sched-priority",
    "nice",
];

/// The keys of a placement dict that are not about CPUs: `rule` may come with them.
const NOT_CPU_KEYS: [&str; 4] = ["memory", "sched-policy", "sched-priority", "nice"];

/// The `sched-policy` (s), `sched-priority` and `nice` (x, or any integer type) keys of
/// a placement dict, checked as a rule's keys are; `None` without any.
pub fn sched_of(
    dict: &HashMap<String, zbus::OwnedVariant>,
) -> Result<Option<crate::affinity::sched::Sched>> {
    let invalid = |m: String| MethodError::InvalidArgs(format!("placement: {m}"));
    let policy = match dict.get("sched-policy") {
        None => None,
        Some(v) => {
            let s = String::try_from(&**v)
                .map_err(|_| invalid("sched-policy: a string (s) is expected".into()))?;
            check_len("sched-policy", &s)?;
            parse_word(Some(s)).map_err(invalid)?
        }
    };
    let int = |key: &str| -> Result<Option<i64>> {
        let Some(v) = dict.get(key) else {
            return Ok(None);
        };
        let n = match &**v {
            zbus::Variant::I64(n) => *n,
            zbus::Variant::I32(n) => i64::from(*n),
            zbus::Variant::U32(n) => i64::from(*n),
            zbus::Variant::I16(n) => i64::from(*n),
            zbus::Variant::U16(n) => i64::from(*n),
            zbus::Variant::U8(n) => i64::from(*n),
            _ => return Err(invalid(format!("{key}: an integer (x) is expected"))),
        };
        Ok(Some(n))
    };
    crate::affinity::sched::Sched::checked(policy, int("sched-priority")?, int("nice")?, "")
        .map_err(invalid)
}

/// The `memory` key of a placement dict: `"follow"` (true) or `"leave"` (false, also
/// when absent).
pub fn memory_follow(dict: &HashMap<String, zbus::OwnedVariant>) -> Result<bool> {
    let Some(v) = dict.get("memory") else {
        return Ok(false);
    };
    match String::try_from(&**v).as_deref() {
        Ok("follow") => Ok(true),
        Ok("leave") => Ok(false),
        Ok(other) => {
            let other: String = other.chars().take(MAX_STRING).collect();
            Err(MethodError::InvalidArgs(format!(
                "placement: memory: {other:?}; expected follow or leave"
            )))
        }
        Err(_) => Err(MethodError::InvalidArgs(
            "placement: memory: a string (s) is expected".into(),
        )),
    }
}

/// A `placement` dict as the loop's [`PlaceSpec`], checked as a rule's `[rule.place]`
/// is: known keys of the right types, strings of at most [`MAX_STRING`] bytes, `rule`
/// alone, `cpus` without the count keys.
pub fn place_spec(dict: &HashMap<String, zbus::OwnedVariant>) -> Result<PlaceSpec> {
    let invalid = |m: String| MethodError::InvalidArgs(format!("placement: {m}"));
    let mut keys: Vec<&str> = dict.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if let Some(k) = keys.iter().find(|k| !PLACEMENT_KEYS.contains(k)) {
        let k: String = k.chars().take(MAX_STRING).collect();
        return Err(invalid(format!(
            "unknown key {k:?}; expected {}",
            PLACEMENT_KEYS.join(", ")
        )));
    }
    let text = |key: &str| -> Result<Option<String>> {
        let Some(v) = dict.get(key) else {
            return Ok(None);
        };
        let s = String::try_from(&**v)
            .map_err(|_| invalid(format!("{key}: a string (s) is expected")))?;
        check_len(key, &s)?;
        Ok(Some(s))
    };
    let list = |key: &str| -> Result<Option<crate::cpuset::CpuSet>> {
        text(key)?
            .map(|s| s.parse().map_err(|e| invalid(format!("{key}: {e}"))))
            .transpose()
    };
    if let Some(rule) = text("rule")? {
        if keys
            .iter()
            .any(|k| *k != "rule" && !NOT_CPU_KEYS.contains(k))
        {
            return Err(invalid("`rule` cannot be given with other keys".into()));
        }
        if rule.is_empty() {
            return Err(invalid("rule: a rule name cannot be empty".into()));
        }
        return Ok(PlaceSpec::Rule(rule));
    }
    let count = match dict.get("count") {
        Some(v) => Some(
            u32::try_from(&**v)
                .map_err(|_| invalid("count: an unsigned integer (u) is expected".into()))?,
        ),
        None => None,
    };
    let parts = PlaceParts {
        count,
        policy: parse_word(text("policy")?).map_err(invalid)?,
        smt: parse_word(text("smt")?).map_err(invalid)?,
        cpus: list("cpus")?,
        within: list("within")?,
        rule: None,
        shape: crate::shape::Shape {
            core_type: parse_word(text("core-type")?).map_err(invalid)?,
            prefer: parse_word(text("prefer")?).map_err(invalid)?,
            near: text("near")?,
        },
    };
    if parts.cpus.is_some() {
        if let Some(k) = [
            "count",
            "policy",
            "smt",
            "within",
            "core-type",
            "prefer",
            "near",
        ]
        .into_iter()
        .find(|k| dict.contains_key(*k))
        {
            return Err(invalid(format!("`cpus` and `{k}` cannot both be given")));
        }
    }
    parts.spec("").map_err(invalid)
}

/// A word (`policy`, `smt`, `core-type`, `prefer`) of a placement dict, parsed.
fn parse_word<T>(text: Option<String>) -> std::result::Result<Option<T>, String>
where
    T: std::str::FromStr<Err = crate::placement::UnknownWord>,
{
    text.map(|t| {
        t.parse()
            .map_err(|e: crate::placement::UnknownWord| e.to_string())
    })
    .transpose()
}

/// A [`PlaceSpec`] as the `placement` dict of `PinProcessWith` and `PlanWith`.
pub fn placement_dict(spec: &PlaceSpec) -> HashMap<&'static str, zbus::Variant<'static>> {
    placement_dict_with(spec, false)
}

/// [`placement_dict`], with `memory = "follow"` when `follow`.
pub fn placement_dict_with(
    spec: &PlaceSpec,
    follow: bool,
) -> HashMap<&'static str, zbus::Variant<'static>> {
    use crate::rules::CpuTarget;
    let mut d = HashMap::new();
    if follow {
        d.insert("memory", zbus::Variant::from("follow".to_string()));
    }
    match spec {
        PlaceSpec::Rule(name) => {
            d.insert("rule", zbus::Variant::from(name.clone()));
        }
        PlaceSpec::Request(r) => match &r.target {
            CpuTarget::Cpus(c) => {
                d.insert("cpus", zbus::Variant::from(c.to_string()));
            }
            CpuTarget::Count(n) => {
                d.insert("count", zbus::Variant::from(*n));
                d.insert("policy", zbus::Variant::from(r.policy.to_string()));
                d.insert("smt", zbus::Variant::from(r.smt.to_string()));
                if let Some(w) = &r.within {
                    d.insert("within", zbus::Variant::from(w.to_string()));
                }
                if let Some(k) = r.shape.core_type {
                    // The key's word, not the display form (`P`, `E`).
                    d.insert("core-type", zbus::Variant::from(crate::shape::kind_word(k)));
                }
                if let Some(p) = r.shape.prefer {
                    d.insert("prefer", zbus::Variant::from(p.to_string()));
                }
                if let Some(n) = &r.shape.near {
                    d.insert("near", zbus::Variant::from(n.clone()));
                }
            }
        },
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{Policy, SmtPolicy};

    fn dict(entries: &[(&str, zbus::Variant<'static>)]) -> HashMap<String, zbus::OwnedVariant> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), zbus::OwnedVariant::try_from(v).unwrap()))
            .collect()
    }

    #[test]
    fn a_placement_dict_is_checked_as_a_rule_place_is() {
        use crate::rules::CpuTarget;
        use zbus::Variant as V;
        let spec = PlaceSpec::Request(crate::rules::PlacementRequest {
            target: CpuTarget::Count(2),
            within: Some("0-3".parse().unwrap()),
            policy: Policy::Spread,
            smt: SmtPolicy::Avoid,
            exclusive: false,
            shape: Default::default(),
        });
        // What a client sends reads back as what it meant, with every key set.
        for shape in [
            crate::shape::Shape {
                core_type: Some(crate::topology::CoreType::Performance),
                prefer: Some(crate::shape::Prefer::Cache),
                near: Some("ens1f0".into()),
            },
            crate::shape::Shape {
                core_type: Some(crate::topology::CoreType::Efficiency),
                prefer: Some(crate::shape::Prefer::Frequency),
                near: None,
            },
        ] {
            let PlaceSpec::Request(mut r) = spec.clone() else {
                unreachable!()
            };
            r.shape = shape;
            let full = PlaceSpec::Request(r);
            let sent: HashMap<String, zbus::OwnedVariant> = placement_dict(&full)
                .into_iter()
                .map(|(k, v)| (k.to_string(), zbus::OwnedVariant::try_from(&v).unwrap()))
                .collect();
            assert_eq!(place_spec(&sent).unwrap(), full);
        }
        let sent: HashMap<String, zbus::OwnedVariant> = placement_dict(&spec)
            .into_iter()
            .map(|(k, v)| (k.to_string(), zbus::OwnedVariant::try_from(&v).unwrap()))
            .collect();
        assert_eq!(place_spec(&sent).unwrap(), spec);
        let rule = PlaceSpec::Rule("feed".into());
        let sent: HashMap<String, zbus::OwnedVariant> = placement_dict(&rule)
            .into_iter()
            .map(|(k, v)| (k.to_string(), zbus::OwnedVariant::try_from(&v).unwrap()))
            .collect();
        assert_eq!(place_spec(&sent).unwrap(), rule);
        assert!(matches!(
            place_spec(&dict(&[])).unwrap(),
            PlaceSpec::Request(r) if r.target == CpuTarget::Count(1)
        ));
        for (d, want) in [
            (
                dict(&[("colour", V::from("red"))]),
                "unknown key \"colour\"",
            ),
            (
                dict(&[("count", V::from("2"))]),
                "count: an unsigned integer",
            ),
            (dict(&[("cpus", V::from(3u32))]), "cpus: a string"),
            (
                dict(&[("rule", V::from("x")), ("count", V::from(1u32))]),
                "`rule` cannot be given with other keys",
            ),
            (
                dict(&[("cpus", V::from("1")), ("smt", V::from("avoid"))]),
                "`cpus` and `smt` cannot both be given",
            ),
            (
                dict(&[("count", V::from(0u32))]),
                "placement: count 0: at least one CPU",
            ),
            (dict(&[("within", V::from("3-"))]), "within:"),
            (dict(&[("policy", V::from("tight"))]), "unknown policy"),
            (
                dict(&[("within", V::from("x".repeat(65)))]),
                "within: longer than 64 bytes",
            ),
        ] {
            let e = place_spec(&d).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
