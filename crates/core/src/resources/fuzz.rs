//! Property test of the resource-description parser (`dlb-bench --resources`, the
//! simulator's): descriptions built from its own tokens and hostile numbers must parse to
//! resources within every bound, or to an error, never panic or allocate past the
//! bounds. Cases: `PROPTEST_CASES` (64; 1,000,000 by hand).

use super::*;
use crate::ctx::testing::proptest_config;
use proptest::prelude::*;

/// Numbers a user mistypes: zero, negatives, the edges of every integer type, floats
/// past any range, and words.
const NUMBERS: [&str; 16] = [
    "0",
    "1",
    "3",
    "-1",
    "1024",
    "1025",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "1e-300",
    "1e300",
    "nan",
    "inf",
    "x",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(&NUMBERS[..]).prop_map(str::to_string),
        4 => proptest::sample::select(
            &["ranks=", "accel=", "speed=", "capacity=", "kinds=", "name="][..]
        )
        .prop_map(str::to_string),
        3 => proptest::sample::select(&[":", ";", ",", "-", "=", " ", ""][..]).prop_map(str::to_string),
        1 => "[ -~]{0,6}",
    ]
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn any_description_parses_within_bounds_or_is_refused(
        parts in proptest::collection::vec(token(), 0..24),
        ranks in 1u32..=8,
    ) {
        let text = parts.concat();
        if let Ok(per_rank) = parse_description(&text, ranks) {
            prop_assert_eq!(per_rank.len(), ranks as usize);
            for specs in &per_rank {
                prop_assert!(specs.len() as u64 <= ACCELS_MAX, "{text:?}");
                for s in specs {
                    prop_assert!(s.validate().is_ok(), "{text:?}: {s:?}");
                }
            }
        }
    }
}
