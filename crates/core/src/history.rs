//! The measured cost of each task key, kept across epochs by the driver, and the
//! prediction of the next epoch's costs from it.
//!
//! A time-stepping solver's costs look like the last step's, moved: a flame front crosses
//! a few cells per step, and cells are keyed in space order (a global cell index). So the
//! history keeps the last two epochs, and when the last is the one before translated
//! along the key axis (the front moved by s keys), it predicts the next epoch as the last
//! moved once more by s (constant speed); otherwise each key's last cost.
//!
//! Finding s: the centre of the keys, weighted by cost above the cheapest, moved by c between the two epochs; 0
//! and the shifts within ±(16 + |c|/8) of c are scored by the mean absolute difference
//! between last\[g\] and before\[g − s\] over up to 1,024 keys spread over the epoch's
//! keys (a shift is scored only where half of them are known in both epochs). A shift
//! other than 0 wins only when it scores below 0.7× the score of 0: a clear translation
//! (equal scores: the one nearest c). Candidates are first scored on an eighth of the
//! samples; the 16 best are scored on all.
//! Costs that stay put, or change at random, keep s = 0. Cost: O(keys) for the centres
//! plus a few hundred scores of 128 lookups and 16 of 1,024, once per epoch.

use crate::CoreError;
use crate::fasthash::IntMap;

/// Keys sampled to score a shift.
const SAMPLES: usize = 1024;
/// Shifts with the best coarse scores that are scored on every sample.
const FINALISTS: usize = 16;
/// Candidate shifts scanned one by one at most; a wider window is scanned by strides.
const WINDOW_MAX: u64 = 256;
/// A shift other than 0 must score below this fraction of 0's score.
const CLEAR: f64 = 0.7;

/// The last two epochs' measured cost per task key and the translation between them.
#[derive(Debug, Clone, Default)]
pub struct CostHistory {
    last: ByKey,
    before: ByKey,
    shift: i64,
    /// `last`'s profile, made when it was recorded: a driver records after its epoch, off
    /// the next start's path (a pass over every key, 0.8 ms at 131,072).
    measured: crate::Measured,
}

/// Costs by key, sorted by key, each key once. A solver's keys (cell indices, task
/// indices) mostly run without gaps, so a key is first looked for where a dense run
/// would hold it, then by bisection: lookups cost next to nothing and building it from
/// an epoch's keys in order is a copy — on the solver's critical path between two steps,
/// where a hash map of 8,192 keys took a millisecond to fill and read.
#[derive(Debug, Clone, Default)]
struct ByKey(Vec<(u64, u64)>);

impl ByKey {
    /// From an epoch's keys and costs, in `v` (emptied first: the buffer of an epoch
    /// dropped from the history); a key given twice keeps its last cost.
    fn of(mut v: Vec<(u64, u64)>, keys: &[u64], costs: &[u64]) -> Self {
        v.clear();
        v.extend(keys.iter().copied().zip(costs.iter().copied()));
        if !v.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable: of equal keys the last given is last, and kept.
            v.sort_by_key(|x| x.0);
            v.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    *kept = *later;
                }
                same
            });
        }
        Self(v)
    }

    fn get(&self, k: u64) -> Option<u64> {
        let first = self.0.first()?.0;
        // Outside the keys (a shifted key past this rank's end, when shifts are scored):
        // not there, without a bisection.
        if k < first || k > self.0[self.0.len() - 1].0 {
            return None;
        }
        let at = k
            .checked_sub(first)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.0.get(i));
        if let Some(&(key, c)) = at
            && key == k
        {
            return Some(c);
        }
        self.0
            .binary_search_by_key(&k, |x| x.0)
            .ok()
            .map(|i| self.0[i].1)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl CostHistory {
    /// Checks that `keys` holds no key twice (an epoch's task identities).
    pub fn check_keys(keys: &[u64]) -> Result<(), CoreError> {
        // Keys in increasing order (a solver's cells, task indices): none twice.
        if keys.is_sorted_by(|a, b| a < b) {
            return Ok(());
        }
        let mut seen: IntMap<u64, usize> = IntMap::default();
        seen.reserve(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&first) = seen.get(&k) {
                return Err(CoreError::DuplicateKey {
                    key: k,
                    first: first as u32,
                    second: i as u32,
                });
            }
            seen.insert(k, i);
        }
        Ok(())
    }

    /// The predicted cost of each task of `keys`, ns (0: unknown): the last cost of the
    /// key `shift()` below it (the key itself when the costs did not move).
    pub fn predict(&self, keys: &[u64]) -> Vec<u64> {
        keys.iter()
            .map(|&k| {
                k.checked_add_signed(-self.shift)
                    .and_then(|j| self.last.get(j))
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Takes this epoch's measured costs (keys that did not run drop out; the epoch
    /// before is kept to see how the costs moved) and finds the translation.
    pub fn record(&mut self, keys: &[u64], costs_ns: &[u64]) {
        let dropped = std::mem::replace(&mut self.before, std::mem::take(&mut self.last));
        self.last = ByKey::of(dropped.0, keys, costs_ns);
        self.shift = shift(&self.before, &self.last, keys);
        self.measured = crate::Measured::of_sorted(&self.last.0);
    }

    /// How far (in keys) the costs moved between the last two epochs, as predicted for
    /// the next one (0: they stay put, or nothing clear).
    pub fn shift(&self) -> i64 {
        self.shift
    }

    /// The last epoch's cost of `key`, where it ran here.
    pub fn last_cost(&self, key: u64) -> Option<u64> {
        self.last.get(key)
    }

    /// What the last epoch measured (what a rank tells the job for its front:
    /// [`crate::RankProfile`]).
    pub fn measured(&self) -> crate::Measured {
        self.measured.clone()
    }

    /// Keys with a known cost.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no key has a known cost.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// The centre of the keys weighted by cost above the cheapest, relative to `base`.
fn centre(m: &ByKey, base: u64) -> Option<f64> {
    let floor = m.0.iter().map(|x| x.1).min().unwrap_or(0);
    let (mut w, mut x) = (0.0f64, 0.0f64);
    for &(k, c) in &m.0 {
        let c = (c - floor) as f64;
        w += c;
        // (k − base through u64: an i128's conversion to f64 is a library call per key.)
        let off = if k >= base {
            (k - base) as f64
        } else {
            -((base - k) as f64)
        };
        x += c * off;
    }
    (w > 0.0).then(|| x / w)
}

/// The translation from `before` to `last` (module docs); `keys`: the epoch's keys.
fn shift(before: &ByKey, last: &ByKey, keys: &[u64]) -> i64 {
    if before.is_empty() || keys.is_empty() {
        return 0;
    }
    let base = keys[0];
    let (Some(b), Some(l)) = (centre(before, base), centre(last, base)) else {
        return 0;
    };
    let c = (l - b).round();
    if !c.is_finite() || c.abs() > (1u64 << 52) as f64 {
        return 0;
    }
    let c = c as i64;
    let step = keys.len().div_ceil(SAMPLES);
    let samples: Vec<(u64, u64)> = keys
        .iter()
        .step_by(step)
        .filter_map(|&k| last.get(k).map(|c| (k, c)))
        .collect();
    // Every candidate is scored on a coarse eighth of the samples first; the best few
    // are then scored on all of them (hundreds of candidates × 1,024 lookups took ~2 ms
    // per epoch at 8,192 keys, on the solver's critical path).
    let coarse: Vec<(u64, u64)> = samples.iter().step_by(8).copied().collect();
    let score_under = |samples: &[(u64, u64)], s: i64, limit: f64| {
        let pairs = samples.iter().map(|&(k, c)| {
            let p = k.checked_add_signed(-s).and_then(|j| before.get(j));
            p.map(|p| (c as f64, p as f64))
        });
        crate::front::mean_error_under(pairs, samples.len(), limit)
    };
    let score_on = |samples: &[(u64, u64)], s: i64| score_under(samples, s, f64::INFINITY);
    let w = 16 + c.unsigned_abs() / 8;
    let w = i64::try_from(w).unwrap_or(i64::MAX);
    // A wide window (a far move of the centre: thousands of keys on a rank of 65,536
    // cells) is scanned every `stride`-th candidate, then around the best of those: every
    // candidate of it took 29 ms at the end of a step.
    let span = w.unsigned_abs().saturating_mul(2).saturating_add(1);
    let stride = i64::try_from((span / WINDOW_MAX).max(1)).unwrap_or(i64::MAX);
    let coarse_of = |s: i64| score_on(&coarse, s).map(|x| (x, s.abs_diff(c), s));
    let by_score =
        |a: &(f64, u64, i64), b: &(f64, u64, i64)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    // (coarse score, distance from c, shift) of the candidates the coarse set can score.
    let mut first: Vec<(f64, u64, i64)> = (c.saturating_sub(w)..=c.saturating_add(w))
        .step_by(stride as usize)
        .filter(|&s| s != 0)
        .filter_map(coarse_of)
        .collect();
    first.sort_by(by_score);
    if stride > 1 {
        let mut near: Vec<(f64, u64, i64)> = first
            .iter()
            .take(FINALISTS)
            .flat_map(|&(_, _, s)| s.saturating_sub(stride - 1)..=s.saturating_add(stride - 1))
            .filter(|&s| s != 0)
            .collect::<std::collections::BTreeSet<i64>>()
            .into_iter()
            .filter_map(coarse_of)
            .collect();
        near.sort_by(by_score);
        first = near;
    }
    // A finalist wins only under CLEAR × the zero shift's score and under (or level with)
    // the best so far: its full score stops as soon as it cannot.
    let zero = score_on(&samples, 0);
    let limit = zero.map_or(f64::INFINITY, |z| CLEAR * z);
    let mut best: Option<(f64, i64)> = None;
    for &(_, _, s) in first.iter().take(FINALISTS) {
        let bound = best.map_or(limit, |(y, _)| y.min(limit));
        if let Some(x) = score_under(&samples, s, bound)
            && best.is_none_or(|(y, t)| x < y || (x == y && s.abs_diff(c) < t.abs_diff(c)))
        {
            best = Some((x, s));
        }
    }
    match (best, zero) {
        (Some((x, s)), Some(z)) if x < CLEAR * z => s,
        (Some((_, s)), None) => s,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(h: &mut CostHistory, keys: &[u64], cost: impl Fn(u64) -> u64) {
        let costs: Vec<u64> = keys.iter().map(|&k| cost(k)).collect();
        h.record(keys, &costs);
    }

    #[test]
    fn keeps_the_last_epoch_and_rejects_duplicates() {
        let mut h = CostHistory::default();
        assert_eq!(h.predict(&[1, 2]), [0, 0]);
        h.record(&[1, 2], &[5, 7]);
        assert_eq!(h.predict(&[2, 3]), [7, 0]);
        h.record(&[2, 3], &[8, 9]);
        assert_eq!(h.predict(&[1, 2, 3]), [0, 8, 9], "key 1 vanished");
        assert_eq!(h.len(), 2);
        let e = CostHistory::check_keys(&[4, 5, 4]).unwrap_err();
        assert_eq!(
            e,
            CoreError::DuplicateKey {
                key: 4,
                first: 0,
                second: 2
            }
        );
        assert!(e.to_string().contains("key 4"), "{e}");
        assert!(CostHistory::check_keys(&[1, 2, 3]).is_ok());
    }

    /// Keys in order, out of order, with gaps, given twice: each found, the last cost of
    /// a key given twice kept (`record` takes what `check_keys` refuses too).
    #[test]
    fn finds_keys_in_any_order_with_gaps() {
        let mut h = CostHistory::default();
        h.record(&[10, 11, 12, 13], &[1, 2, 3, 4]);
        assert_eq!(h.predict(&[9, 10, 13, 14]), [0, 1, 4, 0]);
        h.record(&[30, 5, 7, 6, 30, u64::MAX], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(h.len(), 5);
        assert_eq!(
            h.predict(&[5, 6, 7, 8, 30, u64::MAX, 0]),
            [2, 4, 3, 0, 5, 6, 0]
        );
        assert_eq!(h.last_cost(30), Some(5));
        assert_eq!(h.last_cost(29), None);
        assert!(CostHistory::check_keys(&[]).is_ok());
        assert!(CostHistory::check_keys(&[3, 1, 2]).is_ok());
        assert!(
            CostHistory::check_keys(&[1, 2, 2]).is_err(),
            "equal neighbours"
        );
    }

    #[test]
    fn follows_a_front_that_moves() {
        // 1,000 cells; a front of 20 costly cells moves 30 keys per step.
        let keys: Vec<u64> = (5_000..6_000).collect();
        let front = |at: u64| move |k: u64| if (at..at + 20).contains(&k) { 900 } else { 3 };
        let mut h = CostHistory::default();
        record(&mut h, &keys, front(5_100));
        assert_eq!(h.shift(), 0, "one epoch: nothing to compare");
        record(&mut h, &keys, front(5_130));
        assert_eq!(h.shift(), 30);
        let p = h.predict(&keys);
        let costly: Vec<u64> = keys
            .iter()
            .zip(&p)
            .filter(|x| *x.1 == 900)
            .map(|x| *x.0)
            .collect();
        assert_eq!(
            costly,
            (5_160..5_180).collect::<Vec<_>>(),
            "where the front goes next"
        );
        // It turns back: the next comparison sees that too.
        record(&mut h, &keys, front(5_110));
        assert_eq!(h.shift(), -20);
    }

    #[test]
    fn follows_a_far_move_over_many_keys() {
        // 65,536 cells (a rank of a 512 × 256 grid); a front of 400 costly cells with a
        // ramp moves 2,500 keys in a step: the window (~330 keys each side) is scanned
        // by strides, then around its best.
        let keys: Vec<u64> = (0..65_536).collect();
        let front = |at: u64| {
            move |k: u64| {
                if (at..at + 400).contains(&k) {
                    1_000 + (k - at) * 5
                } else {
                    4
                }
            }
        };
        let mut h = CostHistory::default();
        record(&mut h, &keys, front(10_000));
        record(&mut h, &keys, front(12_500));
        assert_eq!(h.shift(), 2_500);
        record(&mut h, &keys, front(12_500 - 1_703));
        assert_eq!(h.shift(), -1_703);
    }

    #[test]
    fn follows_random_costs_that_move_and_keeps_still_or_redrawn_ones() {
        // Bimodal i.i.d. costs over 100 keys, shifted by 4 per epoch (DLB_Bench's drift).
        let draw = |i: u64| {
            let z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
            if z.is_multiple_of(5) { 1_000 } else { 100 }
        };
        let keys: Vec<u64> = (200..300).collect();
        let mut h = CostHistory::default();
        record(&mut h, &keys, draw);
        record(&mut h, &keys, |k| draw(k - 4));
        assert_eq!(h.shift(), 4);
        let p = h.predict(&keys);
        let right = keys
            .iter()
            .zip(&p)
            .filter(|&(&k, &c)| c == draw(k - 8))
            .count();
        assert_eq!(right, 96, "every key whose source this rank saw");
        // Still costs: no shift.
        record(&mut h, &keys, |k| draw(k - 4));
        assert_eq!(h.shift(), 0);
        // Redrawn at random: no clear translation.
        record(&mut h, &keys, |k| draw(k * 7 + 1));
        assert_eq!(h.shift(), 0);
    }
}
