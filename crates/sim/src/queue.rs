//! The event queue: a radix heap (Ahuja, Mehlhorn, Orlin & Tarjan 1990) on (time,
//! sequence) keys.
//!
//! A discrete-event simulation only ever schedules at or after the present, so keys pushed
//! are never below the last key popped: the monotone case a radix heap serves in amortised
//! O(log range) per event with sequential vector pushes instead of a binary heap's
//! sift through cache-cold levels (at 100,000 ranks the heap holds millions of events and
//! its pops were a tenth of the simulator's time). Bucket i holds keys whose highest bit
//! differing from the last popped key is bit i − 1; bucket 0 the last key itself.

use std::collections::VecDeque;

/// A (time, sequence) key: time in the high half, so keys order by time, then sequence.
fn key(t: u64, seq: u64) -> u128 {
    u128::from(t) << 64 | u128::from(seq)
}

/// Events taken from the buckets ahead of need, so that the simulator can touch what the
/// next ones need while it handles this one (at 100,000 ranks each event's rank is cold).
pub(crate) const AHEAD: usize = 8;

/// A queued event: its key, its slot, and the rank whose state handling it touches.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    slot: u32,
    rank: u32,
}

/// A min-queue of (time, sequence, slot), for monotone use.
#[derive(Debug)]
pub(crate) struct EventQueue {
    /// The last key taken from the buckets (every key in them is at or above it).
    last: u128,
    buckets: Vec<Vec<Entry>>,
    len: usize,
    /// The next events, ascending: all below or at `last`. An event queued below the last
    /// of them goes in among them.
    front: VecDeque<Entry>,
    /// The last key popped: nothing may be queued below it.
    popped: u128,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self {
            last: 0,
            buckets: (0..=128).map(|_| Vec::new()).collect(),
            len: 0,
            front: VecDeque::with_capacity(2 * AHEAD),
            popped: 0,
        }
    }
}

impl EventQueue {
    fn bucket(&self, k: u128) -> usize {
        (128 - (k ^ self.last).leading_zeros()) as usize
    }

    /// Queues `slot` at (t, seq), for `rank`; (t, seq) must not be below the last popped
    /// key.
    pub(crate) fn push(&mut self, t: u64, seq: u64, slot: u32, rank: u32) {
        let k = key(t, seq);
        assert!(
            k >= self.popped,
            "event at {t} ns (seq {seq}) scheduled in the past"
        );
        let e = Entry { key: k, slot, rank };
        match self.front.back() {
            Some(b) if k < b.key => {
                let at = self.front.partition_point(|f| f.key < k);
                self.front.insert(at, e);
            }
            _ => {
                let b = self.bucket(k);
                self.buckets[b].push(e);
                self.len += 1;
            }
        }
    }

    /// The smallest (t, seq) and its slot.
    pub(crate) fn pop(&mut self) -> Option<(u64, u64, u32)> {
        while self.front.len() <= AHEAD {
            match self.take_min() {
                Some(e) => self.front.push_back(e),
                None => break,
            }
        }
        let e = self.front.pop_front()?;
        self.popped = e.key;
        Some(((e.key >> 64) as u64, e.key as u64, e.slot))
    }

    /// The slot and rank of the event `i` places after the last popped one (0: the next),
    /// if it is among those taken ahead.
    pub(crate) fn ahead(&self, i: usize) -> Option<(u32, u32)> {
        self.front.get(i).map(|e| (e.slot, e.rank))
    }

    /// Takes the smallest key out of the buckets.
    fn take_min(&mut self) -> Option<Entry> {
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
            self.last = items.iter().map(|e| e.key).min().expect("non-empty");
            for &e in &items {
                let b = self.bucket(e.key);
                self.buckets[b].push(e);
            }
            // Keep the bucket's allocation for later.
            let mut items = items;
            items.clear();
            self.buckets[i] = items;
        }
        let e = self.buckets[0].pop().expect("the minimum is in bucket 0");
        self.len -= 1;
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// Against a binary heap on random monotone schedules (seeded; the seed is printed),
    /// events queued among those taken ahead included.
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
                    q.push(now + dt, seq, step, 0);
                    h.push(Reverse((now + dt, seq, step)));
                } else {
                    let Reverse(want) = h.pop().unwrap();
                    assert_eq!(q.pop(), Some(want), "seed {seed}, step {step}");
                    now = want.0;
                    // What it shows ahead is what comes next.
                    if let Some((slot, _)) = q.ahead(0) {
                        let Some(Reverse(next)) = h.peek() else {
                            panic!("seed {seed}, step {step}: an event ahead of none");
                        };
                        assert_eq!(slot, next.2, "seed {seed}, step {step}: ahead");
                    }
                }
            }
            while let Some(Reverse(want)) = h.pop() {
                assert_eq!(q.pop(), Some(want), "seed {seed}, draining");
            }
            assert_eq!(q.pop(), None);
        }
    }
}
