//! A hasher for integer keys (tokens, ranks): one multiply-and-fold instead of SipHash.
//! Keys come from this rank (tokens) or are bounded rank numbers, never chosen by a
//! remote peer, so flooding resistance is not needed.

use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-fold hasher for integers.
#[derive(Debug, Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        let z = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z ^ (z >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9)
            .rotate_left(23);
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// A `HashMap` keyed by integers.
pub type IntMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IntHasher>>;
/// A `HashSet` of integers.
pub type IntSet<K> = std::collections::HashSet<K, BuildHasherDefault<IntHasher>>;
