//! What the runtime's test files share (each uses a part of it).
#![allow(dead_code)]

use std::time::Duration;
use titus_fabric::mem::{DelayModel, MemOptions};

/// An in-process fabric whose operations arrive up to 100 µs late (drawn from `seed`),
/// with software progress for even seeds.
pub fn delayed(seed: u64) -> MemOptions {
    MemOptions {
        delay: Some(DelayModel {
            seed,
            max: Duration::from_micros(100),
        }),
        software_progress: seed.is_multiple_of(2),
        hang_posts_to: None,
    }
}

/// A task with real work: iterated hashing of the payload, `rounds` times (the first four
/// bytes).
pub fn checksum(payload: &[u8]) -> Vec<u8> {
    let rounds = u32::from_le_bytes(payload[..4].try_into().unwrap());
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..rounds {
        for &b in payload {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h.to_le_bytes().to_vec()
}
