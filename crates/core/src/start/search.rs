//! A search over ranks for the first that satisfies a predicate which, along the rank
//! string, is false and then true (the prefix sums the start's records hold only grow):
//! galloping out from the searching rank's own place, then bisecting the bracket found.
//!
//! Why gallop rather than bisect 0..N: a plain bisection makes every rank's first probe
//! rank N/2, so one rank would serve the whole job's reads each start. From its own
//! place a rank probes ranks at distances 1, 2, 4, … and then inside the last step: the
//! probes spread over the job like a hypercube's edges, and a target d ranks away costs
//! O(log d) reads (a front that moved a few ranks, a receiver next door).
//!
//! The gallop's probes are the searching rank's scan partners, connected when the fabric
//! opened; the bisection's are not, and each pays a first contact (a connection set-up,
//! about a millisecond on InfiniBand). A caller may read the next few levels of the
//! bisection at once ([`bisection_points`]): those first contacts overlap.

use crate::Rank;

/// The search's state (sans-IO: [`Self::poll_probe`] names the next rank to read,
/// [`Self::handle_probe`] takes the predicate's value there).
#[derive(Debug, Clone)]
pub struct Gallop {
    size: u32,
    /// Every rank below `lo` is false.
    lo: u32,
    /// Every rank from `hi` is true (`size`: none known).
    hi: u32,
    /// Where the search started, and the next distance from it (while galloping).
    start: u32,
    step: Option<u64>,
    /// Galloping up (the start was false) or down (true).
    up: bool,
    probes: u64,
}

impl Gallop {
    /// A search over ranks `lo..size` of a job of `size`, from `start`.
    pub fn new(size: u32, lo: u32, start: u32) -> Self {
        let start = start.clamp(lo, size.saturating_sub(1).max(lo));
        Self {
            size,
            lo,
            hi: size,
            start,
            step: Some(0),
            up: true,
            probes: 0,
        }
    }

    /// The rank to read next; `None`: done.
    pub fn poll_probe(&self) -> Option<Rank> {
        if self.lo >= self.hi {
            return None;
        }
        match self.step {
            Some(0) => Some(self.start),
            Some(d) => {
                let at = match self.up {
                    true => u64::from(self.start) + d,
                    false => u64::from(self.start).saturating_sub(d),
                };
                Some(at.clamp(u64::from(self.lo), u64::from(self.hi) - 1) as Rank)
            }
            None => Some(self.lo + (self.hi - self.lo) / 2),
        }
    }

    /// The predicate's value at `rank`, the rank [`Self::poll_probe`] named.
    pub fn handle_probe(&mut self, rank: Rank, holds: bool) {
        debug_assert_eq!(Some(rank), self.poll_probe());
        self.probes += 1;
        if holds {
            self.hi = self.hi.min(rank);
        } else {
            self.lo = self.lo.max(rank + 1);
        }
        self.step = match self.step {
            Some(0) => {
                self.up = !holds;
                Some(1)
            }
            // Galloping on while the bracket is open on the far side.
            Some(d) if self.up && !holds && self.hi == self.size => Some(2 * d),
            Some(d) if !self.up && holds && rank > self.lo => Some(2 * d),
            _ => None,
        };
    }

    /// While galloping: the probes of its next `n` steps, nearest first, should the
    /// predicate keep failing (or, galloping down, holding); only the first, its own
    /// place, before it knows which way to go.
    pub fn gallop_ahead(&self, n: u32) -> Vec<Rank> {
        let mut out = Vec::new();
        let (Some(mut d), false) = (self.step, self.lo >= self.hi) else {
            return out;
        };
        if d == 0 {
            // Its first probe, its own place: which way it goes on depends on it.
            out.push(self.start);
            return out;
        }
        for _ in 0..n {
            let at = match self.up {
                true => u64::from(self.start) + d,
                false => u64::from(self.start).saturating_sub(d),
            };
            let probe = at.clamp(u64::from(self.lo), u64::from(self.hi) - 1);
            out.push(probe as Rank);
            if probe != at {
                break;
            }
            d *= 2;
        }
        out
    }

    /// While galloping: the distance of its next probe from where it started.
    pub fn galloping(&self) -> Option<u64> {
        self.step.filter(|_| self.lo < self.hi)
    }

    /// The first rank not yet known to fail the predicate.
    pub fn lo(&self) -> u32 {
        self.lo
    }

    /// While bisecting: the bracket `(lo, hi)` the answer lies in (`hi`: a rank known
    /// to satisfy the predicate, or the end).
    pub fn bisecting(&self) -> Option<(u32, u32)> {
        (self.step.is_none() && self.lo < self.hi).then_some((self.lo, self.hi))
    }

    /// Once done: the first rank that satisfies the predicate (`None`: none does).
    pub fn found(&self) -> Option<Option<Rank>> {
        (self.lo >= self.hi).then(|| (self.hi < self.size).then_some(self.hi))
    }

    /// Ranks read so far.
    #[cfg(test)]
    pub fn probes(&self) -> u64 {
        self.probes
    }
}

/// The ranks the next `levels` rounds of a bisection of `lo..hi` may probe, nearest
/// rounds first: read together, the bisection then waits for one round trip per
/// `levels` of its rounds instead of one per round.
pub fn bisection_points(lo: u32, hi: u32, levels: u32) -> Vec<Rank> {
    let mut out = Vec::new();
    let mut level = vec![(lo, hi)];
    for _ in 0..levels {
        let mut next = Vec::new();
        for (lo, hi) in level {
            if lo >= hi {
                continue;
            }
            let mid = lo + (hi - lo) / 2;
            out.push(mid);
            // The predicate holds at `mid`: the answer is in lo..=mid, and mid is known;
            // else it is in mid+1..hi.
            next.push((lo, mid));
            next.push((mid + 1, hi));
        }
        level = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use titus_overlay::rng::Rng;

    #[test]
    fn finds_the_first_true_rank_in_logarithmic_reads_of_its_distance() {
        let mut rng = Rng::from_keys(&[crate::start::tests::seed(31)]);
        for _ in 0..5_000 {
            let size = 1 + rng.below(5_000) as u32;
            let first = rng.below(u64::from(size) + 1) as u32; // size: none
            let lo = rng.below(u64::from(first) + 1) as u32;
            let start = lo + rng.below(u64::from(size - lo).max(1)) as u32;
            let mut g = Gallop::new(size, lo, start);
            // The probes of three rounds, as the points named at a round's start said.
            let mut named: Vec<Rank> = Vec::new();
            let mut rounds_left = 0;
            while let Some(j) = g.poll_probe() {
                assert!(j >= lo && j < size, "probe {j} outside {lo}..{size}");
                // Galloping, the look-ahead names this probe first and, should the
                // gallop go on, the next one second.
                let ahead = g.gallop_ahead(3);
                assert_eq!(ahead.is_empty(), g.galloping().is_none());
                if let Some(&first) = ahead.first() {
                    assert_eq!(first, j, "size {size} lo {lo} start {start}");
                }
                if let Some((blo, bhi)) = g.bisecting() {
                    if rounds_left == 0 {
                        named = bisection_points(blo, bhi, 3);
                        rounds_left = 3;
                    }
                    assert!(named.contains(&j), "probe {j} not among {named:?}");
                    rounds_left -= 1;
                }
                g.handle_probe(j, j >= first);
                if g.galloping().is_some_and(|d| d > 1) {
                    assert_eq!(
                        g.poll_probe(),
                        ahead.get(1).copied(),
                        "after {j}: {ahead:?}"
                    );
                }
            }
            assert_eq!(g.bisecting(), None);
            let want = (first < size).then_some(first);
            assert_eq!(g.found(), Some(want), "size {size} lo {lo} start {start}");
            let d = u64::from(start.abs_diff(first)) + 2;
            let bound = 2 * (64 - d.leading_zeros()) as u64 + 2;
            assert!(
                g.probes() <= bound,
                "{} probes for distance {d}: size {size} lo {lo} start {start} first {first}",
                g.probes()
            );
        }
    }
}
