//! The job's cost per key, as the ranks' parts measured it, and the periodic key axis.

use super::movement::CostField;
use super::{KeySpan, Measured, RankProfile};

/// The job's cost per key at the granularity of the ranks' parts: disjoint spans (least
/// key, greatest key, cost per key in ns) sorted by key, and each rank's moments (least
/// key, keys, cost, Σ cost·(key − least), Σ (key − least)) for the centre of cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Density {
    pub(crate) spans: Vec<(u64, u64, f64)>,
    pub(crate) moments: Vec<(u64, u64, u64, f64, f64)>,
}

impl Density {
    /// From every rank's measured span and cost; `None` where spans overlap.
    pub(crate) fn new(profiles: &[RankProfile]) -> Option<Self> {
        Self::of(profiles.iter().map(|p| &p.last))
    }

    /// From what some ranks measured (all, or those around a rank's sources); `None`
    /// where spans overlap or none holds a key.
    pub(crate) fn of<'a>(measured: impl Iterator<Item = &'a Measured>) -> Option<Self> {
        let mut all: Vec<&Measured> = measured
            .filter(|m| !m.span.is_empty() && m.span.hi >= m.span.lo)
            .collect();
        all.sort_by_key(|m| m.span.lo);
        if all.windows(2).any(|w| w[1].span.lo <= w[0].span.hi) || all.is_empty() {
            return None;
        }
        let spans = all
            .iter()
            .flat_map(|m| {
                m.parts
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.1 > 0)
                    .map(|(i, p)| {
                        let (lo, hi) = m.part_span(i);
                        (lo, hi, p.2 as f64 / p.1 as f64)
                    })
            })
            .collect();
        let moments = all
            .iter()
            .map(|m| (m.span.lo, m.span.count, m.load, m.moment, m.key_sum))
            .collect();
        Some(Self { spans, moments })
    }

    /// Cost per key at `k`, where a span holds it.
    pub(crate) fn at(&self, k: i128) -> Option<f64> {
        let k = u64::try_from(k).ok()?;
        let i = self.spans.partition_point(|s| s.0 <= k).checked_sub(1)?;
        let (_, hi, d) = self.spans[i];
        (k <= hi).then_some(d)
    }

    /// [`Self::at`] for a run of keys: walks on from the last key's span while keys
    /// increase (8,192 keys a rank per step, each bisecting the spans before), bisects
    /// where one goes back.
    pub(crate) fn walker(&self) -> impl FnMut(i128) -> Option<f64> + '_ {
        let mut i = 0usize;
        move |k| {
            let k = u64::try_from(k).ok()?;
            if self.spans.get(i).is_some_and(|s| s.0 > k) {
                i = self.spans.partition_point(|s| s.0 <= k).saturating_sub(1);
            }
            while i + 1 < self.spans.len() && self.spans[i + 1].0 <= k {
                i += 1;
            }
            let &(lo, hi, d) = self.spans.get(i)?;
            (lo <= k && k <= hi).then_some(d)
        }
    }

    /// The cost over keys `[lo, hi]` (inclusive, `count` keys spread evenly) moved by
    /// `shift`: the sum of each source span's density over the overlap, scaled to the
    /// count. `None` where no source span overlaps.
    pub(crate) fn over(&self, span: KeySpan, shift: i64, period: Option<Period>) -> Option<u64> {
        self.over_parts(span, shift, f64::INFINITY, period)
            .map(|(d, c)| (d + c) as u64)
    }

    /// [`Self::over`] in two: (the cost of spans whose density is `costly` or more, the
    /// rest).
    pub(crate) fn over_parts(
        &self,
        span: KeySpan,
        shift: i64,
        costly: f64,
        period: Option<Period>,
    ) -> Option<(f64, f64)> {
        if span.is_empty() {
            return Some((0.0, 0.0));
        }
        let lo = i128::from(span.lo) - i128::from(shift);
        let hi = i128::from(span.hi) - i128::from(shift);
        let (mut above, mut below, mut covered) = (0.0f64, 0.0f64, 0.0f64);
        // On a periodic key axis the sources that left it at one end are at the other.
        let pieces = match period {
            Some(p) => p.pieces(lo, hi),
            None => [Some((lo, hi)), None],
        };
        for (lo, hi) in pieces.into_iter().flatten() {
            let first = self
                .spans
                .partition_point(|s| i128::from(s.1) < lo)
                .min(self.spans.len());
            for &(a, b, d) in &self.spans[first..] {
                if i128::from(a) > hi {
                    break;
                }
                let o = (i128::from(b).min(hi) - i128::from(a).max(lo) + 1) as f64;
                if d >= costly {
                    above += o * d;
                } else {
                    below += o * d;
                }
                covered += o;
            }
        }
        // Keys whose source no rank measured cost what the covered ones cost on average.
        let scale = span.count as f64 / covered;
        (covered > 0.0).then_some((above * scale, below * scale))
    }

    /// The job's keys, least to greatest.
    pub(crate) fn range(&self) -> (u64, u64) {
        (self.spans[0].0, self.spans[self.spans.len() - 1].1)
    }

    /// The centre of the cost above the cheapest density (a key, relative to `base`):
    /// exact, from each rank's moments, not its span's middle.
    pub(crate) fn centre(&self, base: u64) -> Option<f64> {
        let floor = self.spans.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
        let (mut w, mut x) = (0.0f64, 0.0f64);
        for &(lo, count, load, moment, key_sum) in &self.moments {
            // Σ (c − floor) and Σ (c − floor)·(k − base) over the rank's keys.
            let off = lo as f64 - base as f64;
            let above = load as f64 - floor * count as f64;
            w += above;
            x += moment - floor * key_sum + off * above;
        }
        (w > 0.0).then(|| x / w)
    }
}

/// A periodic key axis: `len` keys from `lo`, the greatest followed by the least (a
/// periodic domain: what leaves at one end enters at the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// The least key.
    pub lo: u64,
    /// Keys on the axis.
    pub len: u128,
}

impl Period {
    /// Key `k` brought onto the axis.
    pub(crate) fn wrap(&self, k: i128) -> i128 {
        let lo = i128::from(self.lo);
        lo + (k - lo).rem_euclid(self.len as i128)
    }

    /// The keys `lo..=hi` (fewer than the axis holds) as at most two runs on the axis.
    pub(crate) fn pieces(&self, lo: i128, hi: i128) -> [Option<(i128, i128)>; 2] {
        let a = self.wrap(lo);
        let b = a + (hi - lo);
        let end = i128::from(self.lo) + self.len as i128 - 1;
        if b <= end {
            [Some((a, b)), None]
        } else {
            [
                Some((a, end)),
                Some((i128::from(self.lo), b - self.len as i128)),
            ]
        }
    }
}

impl CostField for Density {
    fn at(&self, k: i128) -> Option<f64> {
        Density::at(self, k)
    }
    fn range(&self) -> (u64, u64) {
        Density::range(self)
    }
    fn centre(&self, base: u64) -> Option<f64> {
        Density::centre(self, base)
    }
    fn parts(&self) -> u64 {
        self.spans.len() as u64
    }
    fn total(&self) -> f64 {
        self.spans
            .iter()
            .map(|s| (s.1 - s.0 + 1) as f64 * s.2)
            .sum()
    }
}
