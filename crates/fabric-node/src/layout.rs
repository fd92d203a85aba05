//! What a rank's shared-memory object holds, in words: a header, the ring of signals to
//! the rank, then its segments. Every rank computes a peer's layout from the segment
//! lengths the peer announced, and checks it against the object's real size.

use std::sync::atomic::{AtomicU64, Ordering};

/// "TITUSNOD", little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"TITUSNOD");
/// Layout version.
pub(crate) const VERSION: u64 = 2;
/// Header words.
pub(crate) const W_MAGIC: usize = 0;
pub(crate) const W_VERSION: usize = 1;
pub(crate) const W_RANK: usize = 2;
pub(crate) const W_SIZE: usize = 3;
/// The owner's futex word (low 32 bits used): bumped by every signal and wake.
pub(crate) const W_FUTEX: usize = 5;
/// Threads of the owner sleeping on the futex.
pub(crate) const W_WAITERS: usize = 6;
/// The ring's tail: the next ticket a producer takes.
pub(crate) const W_TAIL: usize = 7;
/// The owner's beat: its beat thread advances it every 100 ms (`crate::life`).
pub(crate) const W_BEAT: usize = 8;
/// Slots of the signal ring (a power of two).
pub(crate) const RING: u64 = 4096;
/// Words per slot: sequence, sender, value (and padding).
const SLOT_WORDS: usize = 4;
/// Where the ring starts (word index: byte 4096).
const RING_START: usize = 512;
/// Where the segments start (bytes).
const SEGMENTS_AT: u64 = 4096 + RING * SLOT_WORDS as u64 * 8;
/// Most bytes one rank's object may hold (a bound on what a peer may announce).
pub(crate) const MAX_OBJECT: u64 = 1 << 40;

/// Byte offsets of the segments of lengths `lens` (each rounded up to a cache line) and
/// the object's total size (a multiple of the page size); None when it would exceed
/// [`MAX_OBJECT`].
pub(crate) fn place(lens: &[u64]) -> Option<(Vec<u64>, u64)> {
    let mut at = SEGMENTS_AT;
    let mut offsets = Vec::with_capacity(lens.len());
    for &len in lens {
        offsets.push(at);
        at = at.checked_add(len.checked_add(63)? & !63)?;
    }
    let total = at.checked_add(4095)? & !4095;
    (total <= MAX_OBJECT).then_some((offsets, total))
}

/// Writes a fresh object's header and ring (the rest is zero already).
pub(crate) fn init(w: &[AtomicU64], rank: u32, size: u32) {
    for i in 0..RING as usize {
        w[RING_START + i * SLOT_WORDS].store(i as u64, Ordering::Relaxed);
    }
    w[W_VERSION].store(VERSION, Ordering::Relaxed);
    w[W_RANK].store(u64::from(rank), Ordering::Relaxed);
    w[W_SIZE].store(u64::from(size), Ordering::Relaxed);
    w[W_MAGIC].store(MAGIC, Ordering::Release);
}

/// Whether an object's header says it is rank `rank`'s of a job of `size` ranks.
pub(crate) fn header_ok(w: &[AtomicU64], rank: u32, size: u32) -> Result<(), String> {
    let got = |i: usize| w[i].load(Ordering::Acquire);
    if got(W_MAGIC) != MAGIC || got(W_VERSION) != VERSION {
        return Err(format!(
            "not a Titus node object of layout {VERSION} (magic {:#x}, version {})",
            got(W_MAGIC),
            got(W_VERSION)
        ));
    }
    if got(W_RANK) != u64::from(rank) || got(W_SIZE) != u64::from(size) {
        return Err(format!(
            "it says rank {} of {}, expected rank {rank} of {size}",
            got(W_RANK),
            got(W_SIZE)
        ));
    }
    Ok(())
}

/// Producer side of a rank's signal ring (a bounded multi-producer queue; each slot's
/// sequence word says whose turn it is). Returns false when the ring is full.
pub(crate) fn push(w: &[AtomicU64], from: u32, value: u64) -> bool {
    let tail = &w[W_TAIL];
    let mut pos = tail.load(Ordering::Relaxed);
    loop {
        let slot = RING_START + (pos % RING) as usize * SLOT_WORDS;
        let seq = w[slot].load(Ordering::Acquire);
        let diff = seq.wrapping_sub(pos) as i64;
        if diff == 0 {
            match tail.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    w[slot + 1].store(u64::from(from), Ordering::Relaxed);
                    w[slot + 2].store(value, Ordering::Relaxed);
                    w[slot + 3].store(0, Ordering::Relaxed);
                    w[slot].store(pos.wrapping_add(1), Ordering::Release);
                    return true;
                }
                Err(now) => pos = now,
            }
        } else if diff < 0 {
            return false;
        } else {
            pos = tail.load(Ordering::Relaxed);
        }
    }
}

/// Consumer side (the owner, one thread at a time): the next signal at ticket `head`, if
/// it was published; the slot is handed back to producers.
pub(crate) fn pop(w: &[AtomicU64], head: u64) -> Option<(u64, u64)> {
    let slot = RING_START + (head % RING) as usize * SLOT_WORDS;
    if w[slot].load(Ordering::Acquire) != head.wrapping_add(1) {
        return None;
    }
    let from = w[slot + 1].load(Ordering::Relaxed);
    let value = w[slot + 2].load(Ordering::Relaxed);
    w[slot].store(head.wrapping_add(RING), Ordering::Release);
    Some((from, value))
}

/// Whether a signal waits at ticket `head`.
pub(crate) fn ready(w: &[AtomicU64], head: u64) -> bool {
    let slot = RING_START + (head % RING) as usize * SLOT_WORDS;
    w[slot].load(Ordering::Acquire) == head.wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn segments_are_placed_after_the_ring_on_cache_lines() {
        let (off, total) = place(&[8, 100, 0, 4096]).unwrap();
        assert_eq!(
            off,
            vec![
                SEGMENTS_AT,
                SEGMENTS_AT + 64,
                SEGMENTS_AT + 192,
                SEGMENTS_AT + 192
            ]
        );
        assert_eq!(total, (SEGMENTS_AT + 192 + 4096).div_ceil(4096) * 4096);
        assert!(place(&[u64::MAX]).is_none());
        assert!(place(&[MAX_OBJECT]).is_none());
    }

    #[test]
    fn the_ring_keeps_order_reports_full_and_reuses_slots() {
        let w = words((SEGMENTS_AT / 8) as usize);
        init(&w, 3, 4);
        header_ok(&w, 3, 4).unwrap();
        assert!(header_ok(&w, 2, 4).unwrap_err().contains("rank 3 of 4"));
        let mut head = 0u64;
        for round in 0..3u64 {
            for i in 0..RING {
                assert!(push(&w, 1, round * RING + i), "push {i} of round {round}");
            }
            assert!(!push(&w, 1, 0), "a full ring refuses");
            for i in 0..RING {
                assert_eq!(pop(&w, head), Some((1, round * RING + i)));
                head += 1;
            }
            assert_eq!(pop(&w, head), None);
            assert!(!ready(&w, head));
        }
    }

    #[test]
    fn concurrent_producers_lose_and_duplicate_nothing() {
        let w = words((SEGMENTS_AT / 8) as usize);
        init(&w, 0, 5);
        let per = 20_000u64;
        let mut seen = vec![0u8; (4 * per) as usize];
        std::thread::scope(|s| {
            for p in 1..=4u32 {
                let w = &w;
                s.spawn(move || {
                    for i in 0..per {
                        while !push(w, p, u64::from(p - 1) * per + i) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut head = 0;
            let mut got = 0;
            while got < 4 * per {
                if let Some((from, v)) = pop(&w, head) {
                    assert_eq!((v / per) + 1, from);
                    seen[v as usize] += 1;
                    head += 1;
                    got += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        assert!(seen.iter().all(|&c| c == 1));
    }
}
