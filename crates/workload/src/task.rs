//! DLB_Bench's task: real work over its payload, calibrated to a duration, whose result is
//! a checksum of that work — so every result can be checked by recomputing it.
//!
//! Payload: `rounds` (u32), reserved (u32), a seed (u64), then the data bytes. The task
//! runs `rounds` passes of a 64-bit mixing function over the data; the result is the
//! final 8-byte state.

use rand::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;
use std::time::Instant;

/// Bytes before the data.
pub const HEADER: usize = 16;

/// Runs a task: `rounds` passes over the data. Malformed payloads (too short) are hashed
/// as they are, so a bad payload gives a wrong result, which verification reports.
pub fn run(payload: &[u8]) -> Vec<u8> {
    if payload.len() < HEADER {
        return vec![0; 8];
    }
    let rounds = u32::from_le_bytes(payload[0..4].try_into().expect("4 bytes"));
    let mut h = u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes")) | 1;
    let data = &payload[HEADER..];
    for _ in 0..rounds {
        for chunk in data.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h ^= u64::from_le_bytes(w);
            h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
        }
        // A data-independent step keeps rounds meaningful for tiny payloads.
        h ^= h >> 31;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    }
    h.to_le_bytes().to_vec()
}

/// A payload of `data_len` bytes derived from `seed`, with `rounds` passes.
pub fn payload(rounds: u32, seed: u64, data_len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(HEADER + data_len);
    p.extend_from_slice(&rounds.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&seed.to_le_bytes());
    // SplitMix64 (value-stable in `rand_xoshiro`): the bytes are part of what a run
    // verifies, so they must not change with a dependency version.
    let mut g = SplitMix64::seed_from_u64(seed ^ 0x5DEE_CE66_D1CE_4E5B);
    while p.len() < HEADER + data_len {
        let z = g.next_u64();
        let take = (HEADER + data_len - p.len()).min(8);
        p.extend_from_slice(&z.to_le_bytes()[..take]);
    }
    p
}

/// Seconds one round over `data_len` bytes takes on this machine (best of several runs
/// of ~10 ms each, so a busy moment does not inflate it).
pub fn seconds_per_round(data_len: usize) -> f64 {
    let probe = payload(1, 7, data_len);
    // Rounds for ~10 ms: first estimate from one round.
    let t = Instant::now();
    std::hint::black_box(run(&probe));
    let one = t.elapsed().as_secs_f64().max(1e-8);
    let rounds = ((0.01 / one) as u32).clamp(1, 1 << 24);
    let p = payload(rounds, 7, data_len);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        std::hint::black_box(run(&p));
        best = best.min(t.elapsed().as_secs_f64() / f64::from(rounds));
    }
    best
}

/// Rounds that make a task over `data_len` bytes last `seconds` (at least one).
pub fn rounds_for(seconds: f64, per_round: f64) -> u32 {
    ((seconds / per_round).round() as u64).clamp(1, u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_depend_on_every_part_of_the_payload() {
        let p = payload(3, 42, 100);
        assert_eq!(p.len(), HEADER + 100);
        let r = run(&p);
        assert_eq!(r, run(&p), "deterministic");
        for i in [0, 9, HEADER, HEADER + 99] {
            let mut q = p.clone();
            q[i] ^= 1;
            assert_ne!(run(&q), r, "byte {i} must matter");
        }
        assert_ne!(run(&payload(3, 43, 100)), r);
    }

    #[test]
    fn payload_bytes_are_pinned() {
        // SplitMix64 from seed 7 ^ 0x5DEE_CE66_D1CE_4E5B: a dependency update that changed
        // the stream would change what every run verifies.
        let p = payload(1, 7, 12);
        assert_eq!(
            p[HEADER..HEADER + 8],
            0xd814_e58a_040f_45a8u64.to_le_bytes()
        );
        assert_eq!(p[HEADER + 8..], 0x0c9d_2ae6_cb41_9e52u64.to_le_bytes()[..4]);
    }

    #[test]
    fn rounds_follow_the_calibration() {
        assert_eq!(rounds_for(1.0, 0.001), 1000);
        assert_eq!(rounds_for(0.0, 0.001), 1, "at least one round");
        assert!(seconds_per_round(64) > 0.0);
    }
}
