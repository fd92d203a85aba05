//! A rank's out-neighbours, listed or implicit, and the per-neighbour state that stays
//! sparse so that the complete graph (random stealing, work sharing) costs O(1) per rank
//! at any scale instead of a row of N − 1 entries.

use crate::{Rank, Time};
use titus_overlay::rng::Rng;

/// Targets from which [`Backoff::pick_ready`] first draws by rejection.
const REJECTION_MIN: usize = 128;
/// Rejected draws before the exact rule.
const REJECTION_TRIES: u32 = 8;

/// Out-neighbours in ascending rank order; indices `0..len()` name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Neighbours {
    /// An overlay row.
    List(Vec<Rank>),
    /// Every rank of `0..size` except `me` (the complete graph), never listed.
    All { size: u32, me: Rank },
}

impl Neighbours {
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::List(v) => v.len(),
            Self::All { size, .. } => size.saturating_sub(1) as usize,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rank at index `i` (< `len()`).
    pub(crate) fn at(&self, i: usize) -> Rank {
        match self {
            Self::List(v) => v[i],
            Self::All { size, me } => {
                assert!(i < self.len(), "neighbour {i} of {}", size - 1);
                let i = i as Rank;
                if i < *me { i } else { i + 1 }
            }
        }
    }

    /// The rank at index `i`, if there is one.
    pub(crate) fn get(&self, i: usize) -> Option<Rank> {
        (i < self.len()).then(|| self.at(i))
    }

    /// The index of `rank`, if it is a neighbour.
    pub(crate) fn index_of(&self, rank: Rank) -> Option<usize> {
        match self {
            Self::List(v) => v.binary_search(&rank).ok(),
            Self::All { size, me } => (rank < *size && rank != *me)
                .then(|| if rank < *me { rank } else { rank - 1 } as usize),
        }
    }

    /// Whether this is the implicit complete graph.
    pub(crate) fn is_all(&self) -> bool {
        matches!(self, Self::All { .. })
    }

    /// Every neighbour, ascending (O(N) for the complete graph).
    pub(crate) fn to_vec(&self) -> Vec<Rank> {
        match self {
            Self::List(v) => v.clone(),
            Self::All { .. } => (0..self.len()).map(|i| self.at(i)).collect(),
        }
    }

    /// Where an abort floods to: every listed neighbour, or for the complete graph the
    /// ranks at distances ±2^k around the ring (O(log N), diameter O(log N)).
    pub(crate) fn flood_targets(&self) -> Vec<Rank> {
        match self {
            Self::List(v) => v.clone(),
            Self::All { size, me } => {
                let n = u64::from(*size);
                let mut out = Vec::new();
                let mut d = 1u64;
                while d < n {
                    out.push(((u64::from(*me) + d) % n) as Rank);
                    out.push(((u64::from(*me) + n - d) % n) as Rank);
                    d *= 2;
                }
                out
            }
        }
    }
}

/// A thief over the complete graph paces itself in rounds of this many probes (the
/// default overlay row: 2 ring neighbours and 30 shortcuts).
pub(crate) const PACE_ROUND: u32 = 32;
/// Entries kept before the expired ones are forgotten.
const ENTRIES_MAX: usize = 256;
/// A blacklisted target's "backed off until": never, until its advertisement.
const BLACKLISTED: Time = Time(u64::MAX);

/// A thief's backoff.
///
/// Per target: an empty find doubles the target's backoff (from `backoff_base` to
/// `backoff_max`), Locked waits `backoff_base`, a success clears it; only targets that
/// failed are stored, so a thief over the complete graph of 100,000 ranks keeps a
/// handful of entries, not 100,000.
///
/// Per thief: among a row of targets, per-target backoff alone makes an idle thief sleep
/// (every target backed off: ~32 probes per `backoff_max`). Among every rank of the
/// complete graph it never would — each probe finds a fresh target — so there a thief
/// with more than [`PACE_ROUND`] targets pauses after each round of that many
/// consecutive empty finds, the pause doubling per round (from `backoff_base` to
/// `backoff_max`) until a success: the probe rate of a row, spread over every rank.
/// Beyond [`ENTRIES_MAX`] entries, expired ones are forgotten (their count only matters
/// to a target probed again soon). Overlay rows keep the dense rule exactly (no pacing,
/// no rejection draws), whatever their length.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    targets: usize,
    /// The targets are the implicit complete graph: pace, and draw by rejection.
    implicit: bool,
    /// Target index → (backed off until, consecutive empty finds). Absent: ready, no
    /// failures.
    entries: Entries,
    /// Consecutive empty finds over all targets.
    streak: u32,
    /// No probe before this (pacing).
    paused_until: Time,
}

/// Target index → (backed off until, consecutive empty finds), sorted by index: a row's
/// few dozen in a list take a third of a map's room (the simulator holds 100,000 rows'),
/// and the complete graph's stay under [`ENTRIES_MAX`] or so.
#[derive(Debug, Default)]
struct Entries(Vec<(u32, (Time, u32))>);

impl Entries {
    fn get(&self, i: &u32) -> Option<&(Time, u32)> {
        let at = self.0.binary_search_by_key(i, |e| e.0).ok()?;
        Some(&self.0[at].1)
    }

    fn insert(&mut self, i: u32, v: (Time, u32)) {
        match self.0.binary_search_by_key(&i, |e| e.0) {
            Ok(at) => self.0[at].1 = v,
            Err(at) => self.0.insert(at, (i, v)),
        }
    }

    fn remove(&mut self, i: &u32) {
        if let Ok(at) = self.0.binary_search_by_key(i, |e| e.0) {
            self.0.remove(at);
        }
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter(&self) -> impl Iterator<Item = (&u32, &(Time, u32))> {
        self.0.iter().map(|(i, v)| (i, v))
    }

    fn values(&self) -> impl Iterator<Item = &(Time, u32)> {
        self.0.iter().map(|(_, v)| v)
    }

    fn retain(&mut self, mut keep: impl FnMut(&u32, &(Time, u32)) -> bool) {
        self.0.retain(|(i, v)| keep(i, v));
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// `base` × 2^(n − 1), at most `max`.
fn doubled(base: std::time::Duration, n: u32, max: std::time::Duration) -> std::time::Duration {
    base.saturating_mul(1 << (n.clamp(1, 30) - 1)).min(max)
}

impl Backoff {
    pub(crate) fn new(targets: &Neighbours) -> Self {
        Self {
            targets: targets.len(),
            implicit: targets.is_all(),
            ..Self::default()
        }
    }

    /// Target `i` gave work.
    pub(crate) fn success(&mut self, i: usize) {
        self.entries.remove(&(i as u32));
        self.streak = 0;
        self.paused_until = Time(0);
    }

    /// Target `i` was found empty at `now`.
    pub(crate) fn empty(&mut self, i: usize, now: Time, cfg: &crate::Config) {
        let mut b = self.get(i);
        b.1 = (b.1 + 1).min(30);
        b.0 = now.plus(doubled(cfg.backoff_base, b.1, cfg.backoff_max));
        self.set(i, b, now);
        self.count_empty(now, cfg);
    }

    /// One more empty find in a row: over the complete graph, a pause after each round.
    fn count_empty(&mut self, now: Time, cfg: &crate::Config) {
        self.streak = self.streak.saturating_add(1);
        if self.implicit
            && self.targets > PACE_ROUND as usize
            && self.streak.is_multiple_of(PACE_ROUND)
        {
            let round = self.streak / PACE_ROUND;
            self.paused_until = now.plus(doubled(cfg.backoff_base, round, cfg.backoff_max));
        }
    }

    /// Target `i` is not probed before `until` (it is sending work here).
    pub(crate) fn hold(&mut self, i: usize, until: Time, now: Time) {
        let mut b = self.get(i);
        b.0 = b.0.max(until);
        self.set(i, b, now);
    }

    /// No target is ready before `until` (diffusion: pushed work is on its way here).
    pub(crate) fn pause_until(&mut self, until: Time) {
        self.paused_until = self.paused_until.max(until);
    }

    /// The pause ends now.
    pub(crate) fn unpause(&mut self) {
        self.paused_until = Time(0);
    }

    /// Target `i` is ready now, unless it was found empty (its backoff stands).
    pub(crate) fn release(&mut self, i: usize) {
        if self.entries.get(&(i as u32)).is_some_and(|b| b.1 == 0) {
            self.entries.remove(&(i as u32));
        }
    }

    /// Target `i` was found empty and is not probed again until it advertises
    /// ([`Backoff::advertised`]).
    pub(crate) fn blacklist(&mut self, i: usize, now: Time, cfg: &crate::Config) {
        let mut b = self.get(i);
        b.0 = BLACKLISTED;
        b.1 = b.1.saturating_add(1).min(30);
        self.set(i, b, now);
        self.count_empty(now, cfg);
    }

    /// Target `i` advertised work: off the blacklist (and out of any backoff).
    pub(crate) fn advertised(&mut self, i: usize) {
        self.entries.remove(&(i as u32));
        self.paused_until = Time(0);
    }

    /// Target `i`'s consecutive empty finds (0: it gave work last, or was never asked).
    pub(crate) fn failures(&self, i: usize) -> u32 {
        self.get(i).1
    }

    /// Whether target `i` is blacklisted.
    pub(crate) fn is_blacklisted(&self, i: usize) -> bool {
        self.get(i).0 == BLACKLISTED
    }

    /// The blacklisted targets, in index order.
    pub(crate) fn blacklisted_targets(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .entries
            .iter()
            .filter(|(_, b)| b.0 == BLACKLISTED)
            .map(|(&i, _)| i as usize)
            .collect();
        v.sort_unstable();
        v
    }

    /// Targets blacklisted now.
    pub(crate) fn blacklisted(&self) -> usize {
        self.entries.values().filter(|b| b.0 == BLACKLISTED).count()
    }

    /// Target `i` was locked at `now`.
    pub(crate) fn locked(&mut self, i: usize, now: Time, cfg: &crate::Config) {
        let mut b = self.get(i);
        b.0 = now.plus(cfg.backoff_base);
        self.set(i, b, now);
    }

    fn get(&self, i: usize) -> (Time, u32) {
        self.entries
            .get(&(i as u32))
            .copied()
            .unwrap_or((Time(0), 0))
    }

    fn set(&mut self, i: usize, b: (Time, u32), now: Time) {
        self.entries.insert(i as u32, b);
        if self.entries.len() > ENTRIES_MAX {
            self.entries.retain(|_, b| b.0 > now);
        }
    }

    pub(crate) fn reset(&mut self) {
        self.entries.clear();
        self.streak = 0;
        self.paused_until = Time(0);
    }

    /// The earliest time some target is ready (a target never backed off: `Time(0)`),
    /// not before the pause; `None` when every target is blacklisted (only an
    /// advertisement makes one ready).
    pub(crate) fn earliest(&self) -> Option<Time> {
        if self.targets == 0 {
            return None;
        }
        let t = if self.entries.len() < self.targets {
            Time(0)
        } else {
            self.entries.values().map(|b| b.0).min()?
        };
        (t != BLACKLISTED).then(|| t.max(self.paused_until))
    }

    /// Whether target `i` is ready at `now` (and the thief is not pausing).
    pub(crate) fn is_ready(&self, i: usize, now: Time) -> bool {
        now >= self.paused_until && self.get(i).0 <= now
    }

    /// A target drawn uniformly among the ready ones, or `None` when none is ready.
    ///
    /// Among many targets of the complete graph a few uniform draws over all of them, kept
    /// when ready, find one in O(1) while most are ready; otherwise (and for overlay rows,
    /// whose traces stay those of the dense rule) [`Backoff::kth_ready`].
    pub(crate) fn pick_ready(&self, now: Time, rng: &mut Rng) -> Option<usize> {
        if now < self.paused_until {
            return None;
        }
        if self.implicit && self.targets >= REJECTION_MIN {
            for _ in 0..REJECTION_TRIES {
                let i = rng.below(self.targets as u64) as usize;
                if self.get(i).0 <= now {
                    return Some(i);
                }
            }
        }
        self.kth_ready(now, |n| rng.below(n))
    }

    /// The `k`-th ready target in index order, k uniform below the number ready (one draw
    /// from `below`), or `None` when none is ready. O(B log B) for B targets backed off;
    /// no allocation up to [`BLOCKED_INLINE`] of them (a thief's every probe comes here).
    pub(crate) fn kth_ready(&self, now: Time, below: impl FnOnce(u64) -> u64) -> Option<usize> {
        let blocked = self
            .entries
            .iter()
            .filter(|(_, b)| b.0 > now)
            .map(|(&i, _)| i);
        let mut inline = [0u32; BLOCKED_INLINE];
        let mut spilled: Vec<u32>;
        let blocked: &mut [u32] = if self.entries.len() <= BLOCKED_INLINE {
            let mut n = 0;
            for i in blocked {
                inline[n] = i;
                n += 1;
            }
            &mut inline[..n]
        } else {
            spilled = blocked.collect();
            &mut spilled
        };
        let ready = self.targets - blocked.len();
        if ready == 0 {
            return None;
        }
        blocked.sort_unstable();
        let mut i = below(ready as u64) as usize;
        for &b in &*blocked {
            if b as usize <= i {
                i += 1;
            } else {
                break;
            }
        }
        Some(i)
    }
}

/// Backed-off targets that [`Backoff::kth_ready`] sorts on the stack (an overlay row has
/// ~60 targets).
const BLOCKED_INLINE: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implicit_complete_graph_indexes_every_other_rank() {
        for size in [1u32, 2, 5, 9] {
            for me in 0..size {
                let all = Neighbours::All { size, me };
                let list = Neighbours::List((0..size).filter(|&r| r != me).collect());
                assert_eq!(all.len(), list.len());
                assert_eq!(all.to_vec(), list.to_vec());
                for i in 0..all.len() {
                    assert_eq!(all.at(i), list.at(i));
                }
                for r in 0..size + 2 {
                    assert_eq!(
                        all.index_of(r),
                        list.index_of(r),
                        "size {size} me {me} r {r}"
                    );
                }
                let mut f = all.flood_targets();
                f.sort_unstable();
                f.dedup();
                assert!(f.iter().all(|&r| r < size));
                if size > 1 {
                    assert!(f.contains(&((me + 1) % size)));
                }
            }
        }
    }

    #[test]
    fn pick_ready_is_the_kth_ready_target() {
        // Against the dense rule: count the ready targets, take the k-th in index order.
        let mut rng = Rng::from_keys(&[7]);
        for round in 0..500 {
            let n = 1 + rng.below(40) as usize;
            let mut b = Backoff::new(&Neighbours::List((0..n as Rank).collect()));
            let mut dense = vec![(Time(0), 0u32); n];
            for _ in 0..rng.below(2 * n as u64) {
                let i = rng.below(n as u64) as usize;
                let v = (Time(rng.below(20)), rng.below(3) as u32);
                b.entries.insert(i as u32, v);
                dense[i] = v;
            }
            let now = Time(10);
            let ready: Vec<usize> = (0..n).filter(|&i| dense[i].0 <= now).collect();
            assert_eq!(
                b.earliest(),
                dense.iter().map(|d| d.0).min(),
                "round {round}"
            );
            for k in 0..ready.len() as u64 {
                assert_eq!(
                    b.kth_ready(now, |m| {
                        assert_eq!(m, ready.len() as u64);
                        k
                    }),
                    Some(ready[k as usize]),
                    "round {round} k {k}"
                );
            }
            if ready.is_empty() {
                assert_eq!(b.kth_ready(now, |_| unreachable!()), None);
            }
        }
    }

    #[test]
    fn a_thief_over_many_targets_pauses_after_each_round_of_empty_finds() {
        let cfg = crate::Config::default();
        let base = cfg.backoff_base;
        let mut rng = Rng::from_keys(&[3]);
        // The complete graph paces; an overlay row of any length does not.
        for (targets, paced) in [(1000usize, true), (PACE_ROUND as usize, false), (40, false)] {
            let mut b = Backoff::new(&if paced {
                Neighbours::All {
                    size: targets as u32 + 1,
                    me: 0,
                }
            } else {
                Neighbours::List((0..targets as Rank).collect())
            });
            let mut now = Time(1_000_000);
            for round in 1..=12u32 {
                for _ in 0..PACE_ROUND {
                    let i = match b.pick_ready(now, &mut rng) {
                        Some(i) => i,
                        None => {
                            // A row: wait for the first backoff to end (never a pause).
                            assert!(!paced, "round {round}: paced within a round");
                            assert_eq!(b.paused_until, Time(0));
                            now = b.earliest().expect("targets").max(now);
                            b.pick_ready(now, &mut rng).expect("ready at earliest()")
                        }
                    };
                    b.empty(i, now, &cfg);
                    now = now.plus(std::time::Duration::from_nanos(10));
                }
                let last = Time(now.0 - 10);
                if paced {
                    let pause = doubled(base, round, cfg.backoff_max);
                    assert_eq!(b.earliest(), Some(last.plus(pause)), "round {round}");
                    assert_eq!(b.pick_ready(now, &mut rng), None, "round {round}");
                    now = last.plus(pause);
                } else {
                    // Per-target backoff only: a row never pauses; a row of 32 has every
                    // target backed off after a round.
                    assert_eq!(b.paused_until, Time(0), "round {round}");
                    if targets == PACE_ROUND as usize {
                        assert_eq!(b.pick_ready(now, &mut rng), None);
                    }
                    now = b.earliest().expect("targets").max(now);
                }
                assert!(b.entries.len() <= ENTRIES_MAX.max(targets));
            }
            // A success ends the pause.
            let i = b.pick_ready(now, &mut rng).expect("ready after the pause");
            b.success(i);
            assert_eq!(b.streak, 0);
            assert!(b.earliest().expect("targets") <= now);
        }
    }

    #[test]
    fn pick_ready_draws_uniformly_among_ready_targets() {
        // 1,000 targets (the rejection path), 900 of them backed off: each of the 100
        // ready ones is drawn about 1% of the time, a backed-off one never.
        let mut rng = Rng::from_keys(&[11]);
        let mut b = Backoff::new(&Neighbours::All { size: 1001, me: 0 });
        for i in 0..900 {
            b.entries.insert((i * 1000 / 900) as u32, (Time(100), 1));
        }
        let now = Time(10);
        let draws = 200_000;
        let mut seen = vec![0u32; 1000];
        for _ in 0..draws {
            let i = b.pick_ready(now, &mut rng).expect("100 are ready");
            seen[i] += 1;
        }
        let ready: Vec<usize> = (0..1000).filter(|&i| b.get(i).0 <= now).collect();
        assert_eq!(ready.len(), 100);
        for (i, &n) in seen.iter().enumerate() {
            if b.get(i).0 > now {
                assert_eq!(n, 0, "target {i} is backed off");
            } else {
                let share = f64::from(n) / f64::from(draws);
                assert!((share - 0.01).abs() < 0.002, "target {i}: {share}");
            }
        }
        // None ready.
        let mut all = Backoff::new(&Neighbours::All { size: 201, me: 7 });
        for i in 0..200 {
            all.entries.insert(i as u32, (Time(50), 2));
        }
        assert_eq!(all.pick_ready(now, &mut rng), None);
        assert_eq!(all.earliest(), Some(Time(50)));
    }
}
