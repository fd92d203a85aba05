//! The seeds a randomized test runs, from one environment variable, `TITUS_SEED`, for
//! every crate's tests:
//! - unset: the test's own seeds (its default range);
//! - `TITUS_SEED=N`: seed N alone, to repeat a failure;
//! - `TITUS_SEED=A..B`: seeds A to B − 1, a longer hunt by hand.
//!
//! A failing randomized test prints [`repeat`]'s words with the seed that failed.

use std::ops::Range;

/// The variable's name.
pub const VAR: &str = "TITUS_SEED";

/// A `TITUS_SEED` value that names no seeds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// Neither a number nor `A..B` of numbers.
    #[error("{VAR}={0:?} is not a seed (N) or a range of seeds (A..B)")]
    Malformed(String),
    /// A range whose end is not past its start.
    #[error("{VAR}={0:?} names no seed: the range's end must be past its start")]
    Empty(String),
}

/// Reads a `TITUS_SEED` value: `N` or `A..B`.
pub fn parse(value: &str) -> Result<Range<u64>, SeedError> {
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| SeedError::Malformed(value.into()))
    };
    match value.split_once("..") {
        None => {
            let n = number(value)?;
            n.checked_add(1)
                .map(|end| n..end)
                .ok_or_else(|| SeedError::Malformed(value.into()))
        }
        Some((a, b)) => {
            let (a, b) = (number(a)?, number(b)?);
            if b <= a {
                return Err(SeedError::Empty(value.into()));
            }
            Ok(a..b)
        }
    }
}

/// The seeds to run: `TITUS_SEED`'s where it is set, else `default`. A value that cannot
/// be read stops the test naming it: a typo must not quietly run the default seeds.
pub fn seeds(default: Range<u64>) -> Range<u64> {
    match std::env::var(VAR) {
        Ok(v) => parse(&v).unwrap_or_else(|e| panic!("{e}")),
        Err(std::env::VarError::NotPresent) => default,
        Err(std::env::VarError::NotUnicode(_)) => panic!("{VAR} is not UTF-8"),
    }
}

/// The one seed of a test that runs one: the first of [`seeds`].
pub fn one(default: u64) -> u64 {
    seeds(default..default.saturating_add(1)).start
}

/// How to repeat `seed` alone: `TITUS_SEED=17`, for a failure's message.
pub fn repeat(seed: u64) -> String {
    format!("{VAR}={seed}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_a_range_and_what_is_refused() {
        assert_eq!(parse("17"), Ok(17..18));
        assert_eq!(parse("0..10000"), Ok(0..10_000));
        assert_eq!(parse(" 3 .. 5 "), Ok(3..5));
        assert!(matches!(parse("5..5"), Err(SeedError::Empty(_))));
        assert!(matches!(parse("x"), Err(SeedError::Malformed(_))));
        assert!(matches!(parse("1..x"), Err(SeedError::Malformed(_))));
        assert!(matches!(parse(""), Err(SeedError::Malformed(_))));
        // The last seed has no end past it.
        assert!(matches!(
            parse(&u64::MAX.to_string()),
            Err(SeedError::Malformed(_))
        ));
        assert!(
            parse("x")
                .unwrap_err()
                .to_string()
                .contains("TITUS_SEED=\"x\"")
        );
        assert_eq!(repeat(9), "TITUS_SEED=9");
    }
}
