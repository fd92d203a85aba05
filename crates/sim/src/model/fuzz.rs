//! Property test of preset files (`titus sim --preset-file`, what `titus sim --calibrate`
//! writes): a shipped preset with any of its numbers replaced by hostile values, or
//! removed, must give a model whose every delay lies within what the simulator accepts
//! ([`crate::time`]), or an error naming the preset, never a panic. Cases:
//! `PROPTEST_CASES` (64; 1,000,000 by hand).

use super::*;
use proptest::prelude::*;

const HOSTILE: [f64; 12] = [
    0.0,
    -1.0,
    1e-300,
    1e-7,
    1e6,
    1.000001e6,
    1e7,
    1e300,
    4294967296.0,
    18446744073709551616.0,
    f64::MAX,
    0.5,
];

/// Every number's place in `v` (object keys and array indices from the root).
fn number_paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Number(_) | Value::Bool(_) => out.push(at.clone()),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| {
            at.push(i.to_string());
            number_paths(x, at, out);
            at.pop();
        }),
        Value::Object(o) => o.iter().for_each(|(k, x)| {
            at.push(k.clone());
            number_paths(x, at, out);
            at.pop();
        }),
        _ => {}
    }
}

fn leaf<'v>(v: &'v mut Value, path: &[String]) -> &'v mut Value {
    path.iter().fold(v, |v, k| match v {
        Value::Array(a) => &mut a[k.parse::<usize>().expect("an index")],
        o => &mut o[k.as_str()],
    })
}

proptest! {
    // (proptest's default reads PROPTEST_CASES, which CI sets.)
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_preset_file_gives_a_model_within_virtual_time_or_an_error(
        preset in proptest::sample::select(&["tcp-loopback", "shm", "node", "mem"][..]),
        edits in proptest::collection::vec(
            (any::<proptest::sample::Index>(), proptest::option::of(proptest::sample::select(&HOSTILE[..]))),
            1..6,
        ),
    ) {
        let text = match preset {
            "tcp-loopback" => include_str!("../../presets/tcp-loopback.json"),
            "shm" => include_str!("../../presets/shm.json"),
            "node" => include_str!("../../presets/node.json"),
            _ => include_str!("../../presets/mem.json"),
        };
        let mut v: Value = serde_json::from_str(text).expect("a shipped preset is JSON");
        let mut paths = Vec::new();
        number_paths(&v, &mut Vec::new(), &mut paths);
        for (i, x) in &edits {
            let path = i.get(&paths);
            *leaf(&mut v, path) = match x {
                // (JSON has no NaN or infinity: a number past f64's range reads as one.)
                Some(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
                None => Value::Null,
            };
        }
        match Model::from_fabric_bench(&v.to_string(), "fuzzed") {
            Ok(m) => {
                let limit = crate::time::DELAY_MAX_NS as f64;
                for ns in [m.latency_ns, m.signal_ns, m.atomic_ns, m.event_ns, m.connect_ns] {
                    prop_assert!(ns.is_finite() && (0.0..=limit).contains(&ns), "{m:?}");
                }
                prop_assert!(m.bandwidth >= 1e3 && m.bandwidth.is_finite(), "{m:?}");
                if let Some(c) = &m.cpu {
                    prop_assert!(c.cores >= 1 && c.busy_slowdown.is_finite(), "{c:?}");
                }
            }
            Err(e) => prop_assert!(e.to_string().starts_with("preset 'fuzzed'"), "{e}"),
        }
    }
}
