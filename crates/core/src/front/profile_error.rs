//! Why a profile another rank sent cannot be used ([`super::KeySpan::check`],
//! [`super::Measured::check`], [`super::RankProfile::check`]). The epoch start names the
//! field at fault and wraps the message, so the wording is what users read.

use super::profile::PARTS_MAX;

/// A key span or measured profile from another rank that no rank could have sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// More keys than lie between the span's ends, or the ends reversed.
    #[error("{count} keys in the span {lo}..={hi}")]
    SpanKeys {
        /// Keys the span claims.
        count: u64,
        /// Its least key.
        lo: u64,
        /// Its greatest key.
        hi: u64,
    },
    /// Parts or a cost in a profile that measured no keys.
    #[error("parts or a cost without keys")]
    PartsWithoutKeys,
    /// No parts, or more than `PARTS_MAX` (256), for a span with keys.
    #[error("{parts} parts for {keys} keys (1 to {max})", max = PARTS_MAX)]
    PartCount {
        /// Parts sent.
        parts: usize,
        /// Keys in the span.
        keys: u64,
    },
    /// The first part does not start at the span's least key.
    #[error("the first part starts at key {first}, the span at {lo}")]
    FirstPart {
        /// Where the first part starts.
        first: u64,
        /// The span's least key.
        lo: u64,
    },
    /// A part that does not start after the one before, or starts past the span.
    #[error("part {part} starts at key {start}, after {after} in a span to {hi}")]
    PartOrder {
        /// The part's index.
        part: usize,
        /// Where it starts.
        start: u64,
        /// Where the part before starts.
        after: u64,
        /// The span's greatest key.
        hi: u64,
    },
    /// A part with no keys, or more than its range holds.
    #[error("part {part} holds {keys} keys in {lo}..={hi}")]
    PartKeys {
        /// The part's index.
        part: usize,
        /// Keys it claims.
        keys: u64,
        /// Its least key.
        lo: u64,
        /// Its greatest key.
        hi: u64,
    },
    /// Parts whose keys or costs do not add up to the span's.
    #[error("parts of {keys} keys and {cost} ns for {count} keys and {load} ns")]
    PartsSum {
        /// Keys in the parts, summed.
        keys: u128,
        /// Cost of the parts, summed, ns.
        cost: u128,
        /// Keys in the span.
        count: u64,
        /// The profile's cost, ns.
        load: u64,
    },
    /// A cost moment or key sum that is infinite or not a number.
    #[error("moments not finite")]
    MomentsNotFinite,
}
