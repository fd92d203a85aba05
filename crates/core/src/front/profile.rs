//! What a rank tells the job of its keys and costs: its span now, and what it measured
//! in the epoch before.

use super::ProfileError;

/// A rank's keys: the least, the greatest, and how many (0: none; then `lo` and `hi` are
/// meaningless).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeySpan {
    /// Least key.
    pub lo: u64,
    /// Greatest key.
    pub hi: u64,
    /// Keys in the span.
    pub count: u64,
}

impl KeySpan {
    /// The span of `keys` (any order).
    pub fn of(keys: &[u64]) -> Self {
        match (keys.iter().min(), keys.iter().max()) {
            (Some(&lo), Some(&hi)) => Self {
                lo,
                hi,
                count: keys.len() as u64,
            },
            _ => Self::default(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Checks what another rank sent: keys inside the span, no more than it holds.
    pub fn check(&self) -> Result<(), ProfileError> {
        if self.count > 0
            && (self.hi < self.lo || u128::from(self.count) > u128::from(self.hi - self.lo) + 1)
        {
            return Err(ProfileError::SpanKeys {
                count: self.count,
                lo: self.lo,
                hi: self.hi,
            });
        }
        Ok(())
    }
}

/// What a rank measured in an epoch: the keys, their summed cost, where the cost lies
/// inside the span (so that the job's centre of cost is exact, not the spans' middles),
/// and the cost per part of the span (so that the job's cost per key is known finer than
/// a rank: a rank of a gaussian pile owns dozens of ranks' worth of keys).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// The keys measured (0 keys: none).
    pub span: KeySpan,
    /// Their cost, ns.
    pub load: u64,
    /// Σ cost × (key − `span.lo`) over them.
    pub moment: f64,
    /// Σ (key − `span.lo`) over them.
    pub key_sum: f64,
    /// The span in parts, in key order: (least key, keys, cost in ns) — a part ends where
    /// the cost per key jumps (at least 2× either way) or at [`KEYS_PER_PART`] keys (more
    /// where the span is long: at most half of [`PARTS_MAX`] parts by length), at most
    /// [`PARTS_MAX`] in all (none without keys).
    pub parts: Vec<(u64, u64, u64)>,
}

/// Keys per part of a rank's measured span, where its costs do not jump. Fine, because a
/// part's cost per key is what the split string plan classes as costly or cheap: with 64
/// keys (equal parts), a costly band's edge blurred over a part, and ranks kept costly tasks
/// predicted cheap (`w1-s4k`, 512 ranks: 0.931 in some epochs against 0.997 with 4).
pub const KEYS_PER_PART: u64 = 4;
/// Parts of one rank's span at most (a remote profile with more is refused): 256 cost up
/// to 6 KB a rank in the all-gather.
pub const PARTS_MAX: usize = 256;

impl Measured {
    /// Of `(key, cost in ns)` pairs (any order, each key once).
    pub fn of<I: Iterator<Item = (u64, u64)> + Clone>(costs: I) -> Self {
        let mut all: Vec<(u64, u64)> = costs.collect();
        all.sort_unstable();
        Self::of_sorted(&all)
    }

    /// Of `(key, cost in ns)` pairs in increasing key order (each key once): without a
    /// copy (a history's measured costs are kept so).
    pub fn of_sorted(all: &[(u64, u64)]) -> Self {
        debug_assert!(all.is_sorted());
        let Some(&(lo, _)) = all.first() else {
            return Self::default();
        };
        let mut m = Self {
            span: KeySpan {
                lo,
                hi: all[all.len() - 1].0,
                count: all.len() as u64,
            },
            ..Self::default()
        };
        for &(k, c) in all {
            let off = (k - lo) as f64;
            m.load = m.load.saturating_add(c);
            m.moment += c as f64 * off;
            m.key_sum += off;
        }
        // Parts by length use at most half the budget; a jump may split a part while the
        // keys left still fit the rest of the budget at that length.
        let n = all.len() as u64;
        let width = KEYS_PER_PART.max(n.div_ceil(PARTS_MAX as u64 / 2));
        let mut cur = (lo, 0u64, 0u64);
        for (i, &(k, c)) in all.iter().enumerate() {
            if cur.1 > 0 {
                // c against twice and half the part's mean (cur.2 / cur.1), without a
                // division per key.
                let (c2, n2, sum) = (u128::from(c), u128::from(cur.1), u128::from(cur.2));
                let cn = c2.saturating_mul(n2);
                let jump = cn > 2 * sum || cn.saturating_mul(2) < sum;
                let left = n - i as u64;
                let room = m.parts.len() as u64 + 1 + left.div_ceil(width) < PARTS_MAX as u64;
                if (cur.1 >= width && m.parts.len() + 1 < PARTS_MAX) || (jump && room) {
                    m.parts.push(cur);
                    cur = (k, 0, 0);
                }
            }
            cur.1 += 1;
            cur.2 = cur.2.saturating_add(c);
        }
        m.parts.push(cur);
        m
    }

    /// Part `i`'s keys: the least and the greatest.
    pub(crate) fn part_span(&self, i: usize) -> (u64, u64) {
        let hi = match self.parts.get(i + 1) {
            Some(next) => next.0 - 1,
            None => self.span.hi,
        };
        (self.parts[i].0, hi)
    }

    /// Checks what another rank sent: a span with keys has 1 to [`PARTS_MAX`] parts, the
    /// first at the span's least key, each inside the span after the one before, with
    /// no more keys than its range holds, keys and costs adding up to the span's; one
    /// without keys has none.
    pub fn check(&self) -> Result<(), ProfileError> {
        let s = self.span;
        if s.count == 0 {
            return match self.parts.is_empty() && self.load == 0 {
                true => Ok(()),
                false => Err(ProfileError::PartsWithoutKeys),
            };
        }
        s.check()?;
        if self.parts.is_empty() || self.parts.len() > PARTS_MAX {
            return Err(ProfileError::PartCount {
                parts: self.parts.len(),
                keys: s.count,
            });
        }
        if self.parts[0].0 != s.lo {
            return Err(ProfileError::FirstPart {
                first: self.parts[0].0,
                lo: s.lo,
            });
        }
        for (i, p) in self.parts.iter().enumerate() {
            let end = match self.parts.get(i + 1) {
                Some(next) if next.0 > p.0 && next.0 <= s.hi => next.0 - 1,
                Some(next) => {
                    return Err(ProfileError::PartOrder {
                        part: i + 1,
                        start: next.0,
                        after: p.0,
                        hi: s.hi,
                    });
                }
                None => s.hi,
            };
            if p.1 == 0 || u128::from(p.1) > u128::from(end - p.0) + 1 {
                return Err(ProfileError::PartKeys {
                    part: i,
                    keys: p.1,
                    lo: p.0,
                    hi: end,
                });
            }
        }
        let keys: u128 = self.parts.iter().map(|p| u128::from(p.1)).sum();
        let cost: u128 = self.parts.iter().map(|p| u128::from(p.2)).sum();
        if keys != u128::from(s.count) || cost.min(u128::from(u64::MAX)) != u128::from(self.load) {
            return Err(ProfileError::PartsSum {
                keys,
                cost,
                count: s.count,
                load: self.load,
            });
        }
        if !(self.moment.is_finite() && self.key_sum.is_finite()) {
            return Err(ProfileError::MomentsNotFinite);
        }
        Ok(())
    }
}

/// What a rank tells the job at an epoch's start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankProfile {
    /// The keys of its tasks now.
    pub now: KeySpan,
    /// What it measured in the epoch before.
    pub last: Measured,
}

impl RankProfile {
    /// Checks what another rank sent (both spans, the parts).
    pub fn check(&self) -> Result<(), ProfileError> {
        self.now.check()?;
        self.last.check()
    }
}
