//! Property test of the options string (`titus_init`, `TITUS_OPTIONS`, and Python's
//! keyword options once they exist): any text built from its keys and hostile values
//! must give options within their bounds, or an error naming the option, never a panic.
//! Cases: `PROPTEST_CASES` (64; 1,000,000 by hand).

use super::*;
use proptest::prelude::*;

const KEYS: [&str; 31] = [
    "workers",
    "worker_grain",
    "balancer",
    "protocol",
    "backend",
    "provider",
    "log",
    "max_payload",
    "max_result",
    "seed",
    "group_size",
    "op_timeout",
    "epoch_timeout",
    "min_private",
    "check_interval",
    "flush_delay",
    "push_wait",
    "steal_below",
    "shared_capacity",
    "diffusion",
    "diffusion_plan",
    "repartition_plan",
    "advertise",
    "cost_aware",
    "shortcuts",
    "resource_types",
    "dispatch",
    "shortcut_draw",
    "backoff_max",
    "bogus",
    "",
];

const VALUES: [&str; 24] = [
    "0",
    "1",
    "-1",
    "0.5",
    "1024",
    "1025",
    "65535",
    "65536",
    "67108865",
    "4294967295",
    "4294967296",
    "1e300",
    "-1e300",
    "nan",
    "inf",
    "on",
    "off",
    "all/1/2+3",
    "1+1",
    "70000",
    "claim",
    "smallworld",
    "",
    "=",
];

fn pair() -> impl Strategy<Value = String> {
    (
        proptest::sample::select(&KEYS[..]),
        proptest::sample::select(&VALUES[..]),
        proptest::sample::select(&["=", "", "=="][..]),
    )
        .prop_map(|(k, v, eq)| format!("{k}{eq}{v}"))
}

proptest! {
    // (proptest's default reads PROPTEST_CASES, which CI sets.)
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_options_string_is_within_bounds_or_refused(
        pairs in proptest::collection::vec(pair(), 0..6),
        sep in proptest::sample::select(&[",", " ", ",,", "\t"][..]),
        env in proptest::option::of(pair()),
    ) {
        let text = pairs.join(sep);
        match Options::parse(&text, env.as_deref()) {
            Ok(o) => {
                let c = &o.cfg;
                prop_assert!((1..=WORKERS_MAX as usize).contains(&c.workers) || c.workers == 0);
                prop_assert!(c.core.max_payload <= titus_runtime::PAYLOAD_MAX);
                prop_assert!(c.core.max_result <= titus_runtime::PAYLOAD_MAX);
                prop_assert!(c.overlay.shortcuts <= titus_runtime::SHORTCUTS_MAX);
                prop_assert!(c.op_timeout <= Duration::from_secs(86_400));
                prop_assert!(c.core.resource_types.len() <= 64);
                // Applying them to a job is checked too (group sizes, the balancer).
                let _ = o.config(4);
            }
            Err(e) => prop_assert!(
                e.starts_with("options: ") || e.starts_with("TITUS_OPTIONS: "),
                "{text:?}: {e}"
            ),
        }
    }
}
