//! The event queue: a radix heap (Ahuja, Mehlhorn, Orlin & Tarjan 1990) on (time,
//! sequence) keys.
//!
//! A discrete-event simulation only ever schedules at or after the present, so keys pushed
//! are never below the last key popped: the monotone case a radix heap serves in amortised
//! O(log range) per event with sequential vector pushes instead of a binary heap's
//! sift through cache-cold levels (at 100,000 ranks the heap holds millions of events and
//! its pops were a tenth of the simulator's time). Bucket i holds keys whose highest bit
//! differing from the last popped key is bit i − 1; bucket 0 the last key itself.

/// A (time, sequence) key: time in the high half, so keys order by time, then sequence.
fn key(t: u64, seq: u64) -> u128 {
    u128::from(t) << 64 | u128::from(seq)
}

/// A min-queue of (time, sequence, slot), for monotone use.
#[derive(Debug)]
pub(crate) struct EventQueue {
    last: u128,
    buckets: Vec<Vec<(u128, u32)>>,
    len: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self {
            last: 0,
            buckets: (0..=128).map(|_| Vec::new()).collect(),
            len: 0,
        }
    }
}

impl EventQueue {
    fn bucket(&self, k: u128) -> usize {
        (128 - (k ^ self.last).leading_zeros()) as usize
    }

    /// Queues `slot` at (t, seq); (t, seq) must not be below the last popped key.
    pub(crate) fn push(&mut self, t: u64, seq: u64, slot: u32) {
        let k = key(t, seq);
        assert!(
            k >= self.last,
            "event at {t} ns (seq {seq}) scheduled in the past"
        );
        let b = self.bucket(k);
        self.buckets[b].push((k, slot));
        self.len += 1;
    }

    /// The smallest (t, seq) and its slot.
    pub(crate) fn pop(&mut self) -> Option<(u64, u64, u32)> {
        if self.len == 0 {
            return None;
        }
        if self.buckets[0].is_empty() {
            // The first non-empty bucket holds the minimum: make it the new reference and
            // spread the bucket's keys over lower buckets (each moves down at least one).
            let i = (1..self.buckets.len())
                .find(|&i| !self.buckets[i].is_empty())
                .expect("len > 0");
            let items = std::mem::take(&mut self.buckets[i]);
            self.last = items.iter().map(|&(k, _)| k).min().expect("non-empty");
            for &(k, s) in &items {
                let b = self.bucket(k);
                self.buckets[b].push((k, s));
            }
            // Keep the bucket's allocation for later.
            let mut items = items;
            items.clear();
            self.buckets[i] = items;
        }
        let (k, slot) = self.buckets[0].pop().expect("the minimum is in bucket 0");
        self.len -= 1;
        Some(((k >> 64) as u64, k as u64, slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// Against a binary heap on random monotone schedules (seeded; the seed is printed).
    #[test]
    fn pops_in_time_then_sequence_order() {
        for seed in 1..=20u64 {
            let mut x = seed;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let (mut q, mut h) = (EventQueue::default(), BinaryHeap::new());
            let (mut now, mut seq) = (0u64, 0u64);
            for step in 0..20_000u32 {
                if next() % 3 != 0 || h.is_empty() {
                    // Often the same time (ties broken by sequence), sometimes far ahead.
                    let dt = match next() % 4 {
                        0 => 0,
                        1 => next() % 100,
                        2 => next() % 1_000_000,
                        _ => next() % (1 << 40),
                    };
                    seq += 1;
                    q.push(now + dt, seq, step);
                    h.push(Reverse((now + dt, seq, step)));
                } else {
                    let Reverse(want) = h.pop().unwrap();
                    assert_eq!(q.pop(), Some(want), "seed {seed}, step {step}");
                    now = want.0;
                }
            }
            while let Some(Reverse(want)) = h.pop() {
                assert_eq!(q.pop(), Some(want), "seed {seed}, draining");
            }
            assert_eq!(q.pop(), None);
        }
    }
}
