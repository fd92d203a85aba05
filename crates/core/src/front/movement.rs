//! How the job's costs moved between the last two epochs: the shift (the translation
//! along the key axis) and whether the axis is periodic. One policy, read off any cost
//! field ([`CostField`]): the whole job's densities where every rank's parts are at hand
//! ([`super::JobFront`]), or the bounded summary the epoch start reduces to its root
//! (`crate::start::front`).

use super::density::Period;

/// Keys sampled to score a shift.
pub const SAMPLES: usize = 512;
/// Candidates scored on each side of the centres' shift.
const CANDIDATES: i64 = 48;
/// A shift other than 0 must score below this fraction of 0's score.
const CLEAR: f64 = 0.7;
/// The centres' shift, exact by the moments, need only score below this fraction: the
/// score compares densities over parts whose bounds move with ownership, so even the exact
/// shift scores far from 0 where parts are coarse beside the band (16 ranks, a 160-key
/// band, 64-key parts as they were then, ownership re-cut between the epochs: 0.84–0.87
/// of 0's score).
const CLEAR_CENTRES: f64 = 0.9;

/// How the costs moved: every rank predicts its next costs from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Movement {
    /// The keys by which the costs moved (0: they did not, or nothing clear).
    pub shift: i64,
    /// Where they moved round a periodic key axis: sources are found round it.
    pub period: Option<Period>,
}

impl Movement {
    /// The source of key `k` on the last epoch's axis (round it where it is periodic).
    pub(crate) fn source(&self, k: u64) -> i128 {
        let j = i128::from(k) - i128::from(self.shift);
        self.period.map_or(j, |p| p.wrap(j))
    }

    /// The runs of last epoch's keys that the keys `lo..=hi` came from (one, or two where
    /// they wrap round the axis).
    pub fn sources(&self, lo: u64, hi: u64) -> [Option<(i128, i128)>; 2] {
        let a = i128::from(lo) - i128::from(self.shift);
        let b = i128::from(hi) - i128::from(self.shift);
        match self.period {
            Some(p) => p.pieces(a, b),
            None => [Some((a, b)), None],
        }
    }
}

/// A cost per key over an epoch's keys, as the movement's policy reads it.
pub(crate) trait CostField {
    /// The cost per key at `k`, where the field holds it.
    fn at(&self, k: i128) -> Option<f64>;
    /// [`CostField::at`] for keys in increasing order: a field may walk its samples
    /// instead of searching them for each key.
    fn ascending(&self) -> impl FnMut(i128) -> Option<f64> {
        |k| self.at(k)
    }
    /// The least and greatest key.
    fn range(&self) -> (u64, u64);
    /// The centre of the cost above the cheapest density, relative to `base`.
    fn centre(&self, base: u64) -> Option<f64>;
    /// The parts the ranks measured, over the whole job.
    fn parts(&self) -> u64;
    /// Σ over the parts of their keys' range × their cost per key: the cost of the whole
    /// axis with each part's gaps filled at its density.
    fn total(&self) -> f64;
}

/// The shift from `before` to `last` (module docs of `crate::front`).
pub(crate) fn shift(before: &impl CostField, last: &impl CostField) -> i64 {
    let base = before.range().0.min(last.range().0);
    let (Some(b), Some(l)) = (before.centre(base), last.centre(base)) else {
        return 0;
    };
    let c = (l - b).round();
    if !c.is_finite() || c.abs() > (1u64 << 52) as f64 {
        return 0;
    }
    let c = c as i64;
    let (lo, hi) = last.range();
    let step = ((hi - lo) as f64 + 1.0) / SAMPLES as f64;
    let samples: Vec<(i128, f64)> = (0..SAMPLES)
        .filter_map(|i| {
            let k = sample_key(lo, step, i);
            last.at(k).map(|d| (k, d))
        })
        .collect();
    let score_under = |s: i64, limit: f64| {
        // (~100 scores of 512 samples a start: a walk, not a search per key.)
        let mut at = before.ascending();
        let pairs = samples
            .iter()
            .map(|&(k, d)| at(k - i128::from(s)).map(|p| (d, p)));
        mean_error_under(pairs, samples.len(), limit)
    };
    let score = |s: i64| score_under(s, f64::INFINITY);
    // The centres' shift is exact for a translation whatever the ranks' granularity (the
    // moments place the cost inside each span): it wins where it is clear. Measured on
    // 128 ranks of a gaussian pile, a band moving 640 keys, with spans' middles for
    // centres: c = 592 and 634, where the best score at rank granularity lay at 792.
    let zero = score(0);
    if c != 0
        && let (Some(x), Some(z)) = (score(c), zero)
        && x < CLEAR_CENTRES * z
    {
        return c;
    }
    // Otherwise (a front that wrapped round the keys, say) around c, at steps that cover
    // ±(1/4 of c + a rank's width) with CANDIDATES a side.
    let width = ((hi - lo) / last.parts().max(1)).max(1);
    let reach = (c.unsigned_abs() / 4).saturating_add(width);
    let stride = i64::try_from((reach / CANDIDATES as u64).max(1)).unwrap_or(i64::MAX);
    // A candidate wins only under CLEAR × the zero shift's score and the best so far (or
    // level with it): the ~100 scores, a start's largest fixed cost at the root, stop as
    // soon as one cannot.
    let limit = zero.map_or(f64::INFINITY, |z| CLEAR * z);
    let mut best: Option<(f64, i64)> = None;
    for j in -CANDIDATES..=CANDIDATES {
        let s = c.saturating_add(j.saturating_mul(stride));
        if s == 0 {
            continue;
        }
        if let Some(x) = score_under(s, best.map_or(limit, |(y, _)| y.min(limit)))
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

/// A shift's score: the mean |a − b| over `len` samples, each a pair where both epochs
/// hold it (`None` where one does not); `None` where under half score, or where the mean
/// cannot come under `limit` (a sum so far over all `len` samples already above it: the
/// mean only rises from there, so a search stops a candidate that cannot win).
pub(crate) fn mean_error_under(
    pairs: impl Iterator<Item = Option<(f64, f64)>>,
    len: usize,
    limit: f64,
) -> Option<f64> {
    let (mut sum, mut n) = (0.0f64, 0usize);
    let most = limit * len as f64;
    for (i, pair) in pairs.enumerate() {
        if let Some((a, b)) = pair {
            sum += (a - b).abs();
            n += 1;
        }
        if i % 32 == 31 && sum > most {
            return None;
        }
    }
    (2 * n >= len && n > 0).then(|| sum / n as f64)
}

/// The `i`-th of [`SAMPLES`] keys spread over a range from `lo` in steps of `step`.
pub(crate) fn sample_key(lo: u64, step: f64, i: usize) -> i128 {
    i128::from(lo) + (step * (i as f64 + 0.5)) as i128
}

/// Whether the costs moved round a periodic key axis from `before` to `last` by `shift`:
/// the keys that entered the axis at one end cost what left it at the other cost (to
/// half the error of the job's mean cost there). Both epochs must hold the same keys.
pub(crate) fn wrapped_from(
    last: &impl CostField,
    before: &impl CostField,
    shift: i64,
) -> Option<Period> {
    let (lo, hi) = last.range();
    if before.range() != (lo, hi) || shift == 0 {
        return None;
    }
    let len = u128::from(hi - lo) + 1;
    if shift.unsigned_abs() as u128 >= len {
        return None;
    }
    let period = Period { lo, len };
    // The keys that entered: the first `shift` (moving up) or the last.
    let (elo, ehi) = if shift > 0 {
        (i128::from(lo), i128::from(lo) + i128::from(shift) - 1)
    } else {
        (i128::from(hi) + i128::from(shift) + 1, i128::from(hi))
    };
    let keys = (ehi - elo + 1) as f64;
    let step = (keys / SAMPLES as f64).max(1.0);
    let mut pairs = Vec::new();
    let mut at = 0.0f64;
    while at < keys && pairs.len() < SAMPLES {
        let k = elo + at as i128;
        if let (Some(d), Some(w)) = (last.at(k), before.at(period.wrap(k - i128::from(shift)))) {
            pairs.push((d, w));
        }
        at += step;
    }
    if pairs.is_empty() {
        return None;
    }
    let mean = last.total() / len as f64;
    let n = pairs.len() as f64;
    let wrap = pairs.iter().map(|(d, w)| (d - w).abs()).sum::<f64>() / n;
    let flat = pairs.iter().map(|(d, _)| (d - mean).abs()).sum::<f64>() / n;
    (wrap <= 0.5 * flat || wrap <= 0.02 * mean).then_some(period)
}

/// The movement from `before` to `last`.
pub(crate) fn movement(before: &impl CostField, last: &impl CostField) -> Movement {
    let shift = shift(before, last);
    Movement {
        shift,
        period: wrapped_from(last, before, shift),
    }
}
