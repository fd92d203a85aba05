//! The job's front: how the cost pattern moved along the key axis, seen by every rank at
//! once.
//!
//! A rank's own history ([`crate::CostHistory`]) sees a front move only while the front
//! stays inside its own keys. In a job of thousands of ranks the front crosses ranks: a
//! drift of 2% of the tasks per epoch moves it by dozens of ranks' keys, onto keys whose
//! last cost only their owners know, and every rank's own prediction is wrong where it
//! matters. So each rank tells the job, at an epoch's start (the runtime's all-gather, the
//! simulator's shared table), the key span it measured in the epoch before and the cost
//! it measured there, and the key span it owns now. Every rank then sees the job's cost
//! per key at rank granularity (a rank's cost spread evenly over its span) for the last
//! two epochs, finds the translation between them (the centre of the costs above the
//! cheapest moved by c: c itself where it scores below 0.9× the score of 0, by the mean
//! difference at keys spread over the job; else the best-scoring shift around c where it
//! scores below 0.7×), and predicts the next epoch as the last moved once
//! more: each rank's load (the string plan's input, identical on every rank) and, on
//! each rank, its tasks' costs (its own last cost of the key `s` below where it knows it,
//! the job's density there otherwise). Keys whose source lies off the job's keys (the
//! first `s` where the costs move up) have none — unless the axis is periodic (a
//! periodic domain, or DLB_Bench's drift, which moves costs round the tasks): where the
//! keys that entered at one end cost what left the other end the epoch before, sources
//! are found round the axis. At 3,584 simulated ranks under a 2% drift that took the
//! re-cut plan's epoch from 0.84 to 0.97: its first ranks had been cut by a guess.
//!
//! Only where the spans of the ranks are disjoint (keys in space order, each rank a
//! contiguous piece: a domain decomposition) is there a job front; keys drawn at random,
//! or spans that overlap, give none and the ranks predict alone.

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

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Checks what another rank sent: keys inside the span, no more than it holds.
    pub fn check(&self) -> Result<(), String> {
        if self.count > 0
            && (self.hi < self.lo || u128::from(self.count) > u128::from(self.hi - self.lo) + 1)
        {
            return Err(format!(
                "{} keys in the span {}..={}",
                self.count, self.lo, self.hi
            ));
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
/// part's cost per key is what the split string plan classes as dear or cheap: with 64
/// keys (equal parts), a dear band's edge blurred over a part, and ranks kept dear tasks
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
    fn part_span(&self, i: usize) -> (u64, u64) {
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
    pub fn check(&self) -> Result<(), String> {
        let s = self.span;
        if s.count == 0 {
            return match self.parts.is_empty() && self.load == 0 {
                true => Ok(()),
                false => Err("parts or a cost without keys".into()),
            };
        }
        s.check()?;
        if self.parts.is_empty() || self.parts.len() > PARTS_MAX {
            return Err(format!(
                "{} parts for {} keys (1 to {PARTS_MAX})",
                self.parts.len(),
                s.count
            ));
        }
        if self.parts[0].0 != s.lo {
            return Err(format!(
                "the first part starts at key {}, the span at {}",
                self.parts[0].0, s.lo
            ));
        }
        for (i, p) in self.parts.iter().enumerate() {
            let end = match self.parts.get(i + 1) {
                Some(next) if next.0 > p.0 && next.0 <= s.hi => next.0 - 1,
                Some(next) => {
                    return Err(format!(
                        "part {} starts at key {}, after {} in a span to {}",
                        i + 1,
                        next.0,
                        p.0,
                        s.hi
                    ));
                }
                None => s.hi,
            };
            if p.1 == 0 || u128::from(p.1) > u128::from(end - p.0) + 1 {
                return Err(format!("part {i} holds {} keys in {}..={end}", p.1, p.0));
            }
        }
        let keys: u128 = self.parts.iter().map(|p| u128::from(p.1)).sum();
        let cost: u128 = self.parts.iter().map(|p| u128::from(p.2)).sum();
        if keys != u128::from(s.count) || cost.min(u128::from(u64::MAX)) != u128::from(self.load) {
            return Err(format!(
                "parts of {keys} keys and {cost} ns for {} keys and {} ns",
                s.count, self.load
            ));
        }
        if !(self.moment.is_finite() && self.key_sum.is_finite()) {
            return Err("moments not finite".into());
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
    pub fn check(&self) -> Result<(), String> {
        self.now.check()?;
        self.last.check()
    }
}

/// Keys sampled to score a shift.
const SAMPLES: usize = 512;
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

/// The job's cost per key at the granularity of the ranks' parts: disjoint spans (least
/// key, greatest key, cost per key in ns) sorted by key, and each rank's moments (least
/// key, keys, cost, Σ cost·(key − least), Σ (key − least)) for the centre of cost.
#[derive(Debug, Clone, Default, PartialEq)]
struct Density {
    spans: Vec<(u64, u64, f64)>,
    moments: Vec<(u64, u64, u64, f64, f64)>,
}

impl Density {
    /// From every rank's measured span and cost; `None` where spans overlap.
    fn new(profiles: &[RankProfile]) -> Option<Self> {
        let mut all: Vec<&Measured> = profiles
            .iter()
            .map(|p| &p.last)
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
    fn at(&self, k: i128) -> Option<f64> {
        let k = u64::try_from(k).ok()?;
        let i = self.spans.partition_point(|s| s.0 <= k).checked_sub(1)?;
        let (_, hi, d) = self.spans[i];
        (k <= hi).then_some(d)
    }

    /// [`Self::at`] for a run of keys: walks on from the last key's span while keys
    /// increase (8,192 keys a rank per step, each bisecting the spans before), bisects
    /// where one goes back.
    fn walker(&self) -> impl FnMut(i128) -> Option<f64> + '_ {
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
    fn over(&self, span: KeySpan, shift: i64, period: Option<Period>) -> Option<u64> {
        self.over_parts(span, shift, f64::INFINITY, period)
            .map(|(d, c)| (d + c) as u64)
    }

    /// [`Self::over`] in two: (the cost of spans whose density is `dear` or more, the
    /// rest).
    fn over_parts(
        &self,
        span: KeySpan,
        shift: i64,
        dear: f64,
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
                if d >= dear {
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
    fn range(&self) -> (u64, u64) {
        (self.spans[0].0, self.spans[self.spans.len() - 1].1)
    }

    /// Whether the costs moved round a periodic key axis from `before` to `self` by
    /// `shift`: the keys that entered the axis at one end cost what left it at the other
    /// cost (to half the error of the job's mean cost there). Both epochs must hold the
    /// same keys.
    fn wrapped_from(&self, before: &Self, shift: i64) -> Option<Period> {
        let (lo, hi) = self.range();
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
            if let (Some(d), Some(w)) = (self.at(k), before.at(period.wrap(k - i128::from(shift))))
            {
                pairs.push((d, w));
            }
            at += step;
        }
        if pairs.is_empty() {
            return None;
        }
        let total: f64 = self
            .spans
            .iter()
            .map(|s| (s.1 - s.0 + 1) as f64 * s.2)
            .sum();
        let mean = total / len as f64;
        let n = pairs.len() as f64;
        let wrap = pairs.iter().map(|(d, w)| (d - w).abs()).sum::<f64>() / n;
        let flat = pairs.iter().map(|(d, _)| (d - mean).abs()).sum::<f64>() / n;
        (wrap <= 0.5 * flat || wrap <= 0.02 * mean).then_some(period)
    }

    /// The centre of the cost above the cheapest density (a key, relative to `base`):
    /// exact, from each rank's moments, not its span's middle.
    fn centre(&self, base: u64) -> Option<f64> {
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
struct Period {
    lo: u64,
    len: u128,
}

impl Period {
    /// Key `k` brought onto the axis.
    fn wrap(&self, k: i128) -> i128 {
        let lo = i128::from(self.lo);
        lo + (k - lo).rem_euclid(self.len as i128)
    }

    /// The keys `lo..=hi` (fewer than the axis holds) as at most two runs on the axis.
    fn pieces(&self, lo: i128, hi: i128) -> [Option<(i128, i128)>; 2] {
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

/// The translation of the job's costs between the last two epochs, as every rank sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFront {
    before: Option<Density>,
    last: Option<Density>,
    shift: i64,
    /// Where the costs moved round the key axis ([`Density::wrapped_from`]): sources are
    /// found round it.
    period: Option<Period>,
}

impl JobFront {
    /// Takes an epoch's profiles (every rank's, in rank order) and finds the shift between
    /// the costs measured in the epoch before and those measured in the one before that.
    pub fn update(&mut self, profiles: &[RankProfile]) {
        self.before = self.last.take();
        self.last = Density::new(profiles);
        self.shift = match (&self.before, &self.last) {
            (Some(b), Some(l)) => shift(b, l),
            _ => 0,
        };
        self.period = match (&self.before, &self.last) {
            (Some(b), Some(l)) => l.wrapped_from(b, self.shift),
            _ => None,
        };
    }

    /// The source of key `k` on the last epoch's axis (round it where it is periodic).
    fn source(&self, k: u64) -> i128 {
        let j = i128::from(k) - i128::from(self.shift);
        self.period.map_or(j, |p| p.wrap(j))
    }

    /// The keys by which the costs moved (0: they did not, or nothing clear).
    pub fn shift(&self) -> i64 {
        self.shift
    }

    /// Every rank's predicted load (ns) for its keys now, from the last epoch's costs moved
    /// by the shift; `None` without a shift (each rank predicts alone then) or for a rank
    /// whose keys' sources nobody measured.
    pub fn loads(&self, profiles: &[RankProfile]) -> Option<Vec<Option<u64>>> {
        let last = self.last.as_ref().filter(|_| self.shift != 0)?;
        Some(
            profiles
                .iter()
                .map(|p| last.over(p.now, self.shift, self.period))
                .collect(),
        )
    }

    /// The loads to plan with: the job's prediction where it has one, each rank's own
    /// (`own`, in rank order) elsewhere; `None` without a shift.
    pub fn plan_loads(
        &self,
        profiles: &[RankProfile],
        own: &[Option<u64>],
    ) -> Option<Vec<Option<u64>>> {
        let job = self.loads(profiles)?;
        Some(job.into_iter().zip(own).map(|(j, &o)| j.or(o)).collect())
    }

    /// The string plan's loads ([`crate::StringLoads`]) from every rank's own predicted
    /// load and cost classes (`own`, `classes`; in rank order): split where the job's
    /// classes allow ([`crate::split_class`]), each rank's (dear, cheap) load from the
    /// job's density where it has a shift (a part dear where its cost per key is dear),
    /// its own classes elsewhere; one string otherwise, of [`Self::plan_loads`]'s loads.
    /// The simulator and the runtime both plan with it.
    pub fn string_loads(
        &self,
        profiles: &[RankProfile],
        own: &[Option<u64>],
        classes: &[crate::LoadClasses],
    ) -> crate::StringLoads {
        let ranks = own.iter().flatten().count();
        let Some(class) = crate::split_class(classes, ranks) else {
            return crate::StringLoads::new(
                &self.plan_loads(profiles, own).unwrap_or(own.to_vec()),
            );
        };
        let dear = (1u64 << class) as f64;
        let job = self.last.as_ref().filter(|_| self.shift != 0).map(|last| {
            profiles
                .iter()
                .map(|p| {
                    last.over_parts(p.now, self.shift, dear, self.period)
                        .map(|(d, c)| (d as u64, c as u64))
                })
                .collect::<Vec<_>>()
        });
        let split: Vec<Option<(u64, u64)>> = own
            .iter()
            .zip(classes)
            .enumerate()
            .map(|(r, (l, c))| {
                let mine = l.map(|_| c.split(class));
                job.as_ref()
                    .and_then(|j| j.get(r).copied().flatten())
                    .or(mine)
            })
            .collect();
        crate::StringLoads::with_split(&split, class)
    }

    /// For the split string plan of [`Self::string_loads`] (`class`: its
    /// [`crate::StringLoads::split_class`]): whether each of `keys` counts dear, as that
    /// plan counted the rank's load — by the job's density where its key came from;
    /// `None` where the density does not hold it (its predicted cost says). Empty without
    /// a shift or a split.
    pub fn dear_keys(&self, keys: &[u64], class: Option<u8>) -> Vec<Option<bool>> {
        let (Some(last), Some(class)) = (self.last.as_ref().filter(|_| self.shift != 0), class)
        else {
            return Vec::new();
        };
        let dear = (1u64 << class.min(63)) as f64;
        let mut at = last.walker();
        keys.iter()
            .map(|&k| at(self.source(k)).map(|d| d >= dear))
            .collect()
    }

    /// The predicted cost (ns; 0: unknown) of each of `keys`: `own(k − shift)` where the
    /// rank knows it, the job's density there otherwise. `None` without a shift.
    pub fn predict(&self, keys: &[u64], own: impl Fn(u64) -> Option<u64>) -> Option<Vec<u64>> {
        let last = self.last.as_ref().filter(|_| self.shift != 0)?;
        let mut at = last.walker();
        Some(
            keys.iter()
                .map(|&k| {
                    let j = self.source(k);
                    u64::try_from(j)
                        .ok()
                        .and_then(&own)
                        .or_else(|| at(j).map(|d| d.round() as u64))
                        .unwrap_or(0)
                })
                .collect(),
        )
    }
}

/// The translation from `before` to `last` (module docs).
fn shift(before: &Density, last: &Density) -> i64 {
    let base = before.spans[0].0.min(last.spans[0].0);
    let (Some(b), Some(l)) = (before.centre(base), last.centre(base)) else {
        return 0;
    };
    let c = (l - b).round();
    if !c.is_finite() || c.abs() > (1u64 << 52) as f64 {
        return 0;
    }
    let c = c as i64;
    let lo = last.spans[0].0;
    let hi = last.spans[last.spans.len() - 1].1;
    let step = ((hi - lo) as f64 + 1.0) / SAMPLES as f64;
    let samples: Vec<(i128, f64)> = (0..SAMPLES)
        .filter_map(|i| {
            let k = i128::from(lo) + (step * (i as f64 + 0.5)) as i128;
            last.at(k).map(|d| (k, d))
        })
        .collect();
    let score = |s: i64| -> Option<f64> {
        let (mut sum, mut n) = (0.0f64, 0usize);
        for &(k, d) in &samples {
            if let Some(p) = before.at(k - i128::from(s)) {
                sum += (d - p).abs();
                n += 1;
            }
        }
        (2 * n >= samples.len() && n > 0).then(|| sum / n as f64)
    };
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
    let width = ((hi - lo) / last.spans.len() as u64).max(1);
    let reach = (c.unsigned_abs() / 4).saturating_add(width);
    let stride = i64::try_from((reach / CANDIDATES as u64).max(1)).unwrap_or(i64::MAX);
    let mut best: Option<(f64, i64)> = None;
    for j in -CANDIDATES..=CANDIDATES {
        let s = c.saturating_add(j.saturating_mul(stride));
        if s == 0 {
            continue;
        }
        if let Some(x) = score(s)
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

    /// `ranks` ranks of `per` keys each from key 1,000; a band of dear keys
    /// `[at, at + band)` (cost 1,000 a key, else 10).
    fn profiles(ranks: u64, per: u64, at: u64, band: u64) -> Vec<RankProfile> {
        (0..ranks)
            .map(|r| {
                let span = KeySpan {
                    lo: 1_000 + r * per,
                    hi: 1_000 + (r + 1) * per - 1,
                    count: per,
                };
                let cost = |k: u64| {
                    if (at..at + band).contains(&k) {
                        1_000
                    } else {
                        10
                    }
                };
                RankProfile {
                    now: span,
                    last: Measured::of((span.lo..=span.hi).map(|k| (k, cost(k)))),
                }
            })
            .collect()
    }

    #[test]
    fn sees_a_front_that_crosses_ranks() {
        // 200 ranks of 50 keys; a band of 400 keys moving 700 keys (14 ranks) an epoch.
        let mut f = JobFront::default();
        f.update(&profiles(200, 50, 3_000, 400));
        assert_eq!(f.shift(), 0, "one epoch: nothing to compare");
        assert!(f.loads(&profiles(200, 50, 0, 0)).is_none());
        let now = profiles(200, 50, 3_700, 400);
        f.update(&now);
        assert!(f.shift().abs_diff(700) <= 10, "shift {}", f.shift());
        // The next epoch's loads: the band at 4,400..4,800.
        let want = profiles(200, 50, 4_400, 400);
        let got = f.loads(&now).expect("a shift");
        assert_eq!(f.shift(), 700, "the moments make the centres exact");
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            // The first 14 ranks' sources lie before the job's keys: found round the
            // axis, which moved as a periodic one (below).
            let Some(g) = g else {
                panic!("rank {r}: no prediction");
            };
            let (g, w) = (*g as f64, w.last.load as f64);
            assert!((g - w).abs() <= 0.25 * w, "rank {r}: {g} vs {w}");
        }
        // A rank's own keys: its own cost where it knows the source, the density elsewhere.
        let keys: Vec<u64> = (4_400..4_450).collect();
        let p = f.predict(&keys, |_| None).expect("a shift");
        let dear = p.iter().filter(|&&c| c >= 900).count();
        assert!(dear >= 40, "{p:?}");
        let p = f.predict(&keys, Some).expect("a shift");
        assert_eq!(p[0], 4_400 - f.shift() as u64, "own knowledge first");
    }

    #[test]
    fn finds_sources_round_a_periodic_axis() {
        // The band moves 700 keys; the 700 keys that enter at the axis's start cost what
        // the last 700 cost an epoch before (cheap): a periodic domain.
        let mut f = JobFront::default();
        f.update(&profiles(200, 50, 3_000, 400));
        let now = profiles(200, 50, 3_700, 400);
        f.update(&now);
        assert_eq!(f.shift(), 700);
        assert!(f.period.is_some());
        let got = f.loads(&now).expect("a shift");
        for (r, g) in got.iter().enumerate().take(14) {
            assert_eq!(
                *g,
                Some(500),
                "rank {r}: 50 cheap keys, found round the axis"
            );
        }
        let keys: Vec<u64> = (1_000..1_050).collect();
        let p = f.predict(&keys, |_| None).expect("a shift");
        assert!(p.iter().all(|&c| c == 10), "{p:?}");
        // The same move, but what entered does not match what left: no period, and the
        // entering ranks' sources are unknown again.
        let mut f = JobFront::default();
        f.update(&profiles(200, 50, 3_000, 400));
        let mut entered = profiles(200, 50, 3_700, 400);
        for p in entered.iter_mut().take(14) {
            let span = p.last.span;
            p.last = Measured::of((span.lo..=span.hi).map(|k| (k, 30)));
        }
        f.update(&entered);
        assert!(f.shift() > 500, "shift {}", f.shift());
        assert!(f.period.is_none());
        let got = f.loads(&entered).expect("a shift");
        assert!(got.iter().take(10).all(Option::is_none), "{got:?}");
    }

    #[test]
    fn keeps_still_costs_and_overlapping_spans_to_the_ranks() {
        let mut f = JobFront::default();
        f.update(&profiles(50, 20, 1_300, 100));
        f.update(&profiles(50, 20, 1_300, 100));
        assert_eq!(f.shift(), 0, "the band stayed");
        assert!(f.predict(&[1_300], |_| None).is_none());
        // Random keys: spans that overlap give no density, hence no shift.
        let span = KeySpan {
            lo: 0,
            hi: u64::MAX,
            count: 4,
        };
        let p = RankProfile {
            now: span,
            last: Measured {
                span,
                load: 100,
                parts: vec![(0, 4, 100)],
                ..Measured::default()
            },
        };
        assert_eq!(p.last.check(), Ok(()));
        let two = [p.clone(), p];
        let mut f = JobFront::default();
        f.update(&two);
        f.update(&two);
        assert_eq!(f.shift(), 0);
    }

    #[test]
    fn parts_resolve_a_rank_finer_and_remote_profiles_are_checked() {
        // One rank of 1,000 keys whose keys 302..397 are dear: parts of 8 keys (half the
        // budget by length), split where the cost jumps; of 2,000 keys or more, at most
        // 256 parts.
        let dear = |k: u64| (302..397).contains(&k);
        let m = Measured::of(
            (0..1_000u64)
                .rev()
                .map(|k| (k, if dear(k) { 100 } else { 1 })),
        );
        assert!(m.parts.len() <= 128 + 2, "{}", m.parts.len());
        assert_eq!(m.parts.iter().map(|p| p.1).sum::<u64>(), 1_000);
        let spans: Vec<(u64, u64)> = (0..m.parts.len()).map(|i| m.part_span(i)).collect();
        assert_eq!((spans[0].0, spans[spans.len() - 1].1), (0, 999));
        assert!(spans.windows(2).all(|w| w[1].0 == w[0].1 + 1), "{spans:?}");
        assert!(spans.iter().all(|s| s.1 - s.0 < 8), "{spans:?}");
        for n in [2_000u64, 100_000] {
            let long = Measured::of((0..n).map(|k| (k, 1 + k % 3 * 1_000)));
            let n_parts = long.parts.len();
            assert!(
                (PARTS_MAX - 2..=PARTS_MAX).contains(&n_parts),
                "{n} keys: {n_parts}"
            );
            let widest = (0..n_parts)
                .map(|i| long.part_span(i))
                .map(|s| s.1 - s.0 + 1);
            assert!(
                widest.max().unwrap() <= n.div_ceil(128),
                "{n} keys: the budget kept"
            );
            assert_eq!(long.check(), Ok(()));
        }
        let d = Density::new(&[RankProfile {
            now: m.span,
            last: m.clone(),
        }])
        .unwrap();
        assert_eq!(d.at(350), Some(100.0), "inside the dear keys");
        assert_eq!(
            [d.at(301), d.at(302), d.at(396), d.at(397)],
            [Some(1.0), Some(100.0), Some(100.0), Some(1.0)],
            "the band's edges to the key, wherever the parts' lengths put them"
        );
        assert_eq!(d.at(700), Some(1.0));
        assert_eq!(m.check(), Ok(()));
        // What a remote rank sent is checked.
        let mut bad = m.clone();
        bad.parts[3].1 += 1;
        assert!(
            bad.check().unwrap_err().contains("keys in"),
            "{:?}",
            bad.check()
        );
        let mut bad = m.clone();
        bad.parts[3].2 += 1;
        assert!(bad.check().unwrap_err().contains("parts of 1000 keys and"));
        let mut bad = m.clone();
        bad.parts = (0..=PARTS_MAX as u64).map(|k| (k, 1, 1)).collect();
        assert!(bad.check().unwrap_err().contains("257 parts for 1000 keys"));
        let mut bad = m.clone();
        bad.parts[0].0 = 1;
        assert!(
            bad.check()
                .unwrap_err()
                .contains("first part starts at key 1")
        );
        let mut bad = m.clone();
        bad.parts.swap(4, 5);
        assert!(bad.check().unwrap_err().contains("part 5 starts at key"));
        let mut bad = m.clone();
        bad.parts.last_mut().unwrap().0 = 1_000;
        assert!(bad.check().is_err(), "a part past the span");
        // More keys than a part's range holds would put keys outside it.
        let one = Measured {
            span: KeySpan {
                lo: 10,
                hi: 11,
                count: 2,
            },
            load: 5,
            parts: vec![(10, 0, 0), (11, 2, 5)],
            ..Measured::default()
        };
        assert!(one.check().unwrap_err().contains("part 0 holds 0 keys"));
        let backwards = RankProfile {
            now: KeySpan {
                lo: 9,
                hi: 3,
                count: 2,
            },
            last: Measured::default(),
        };
        assert!(
            backwards
                .check()
                .unwrap_err()
                .contains("2 keys in the span 9..=3")
        );
        let mut bad = m;
        bad.span.count = 5_000;
        assert!(bad.check().unwrap_err().contains("5000 keys in the span"));
        assert_eq!(Measured::default().check(), Ok(()));
    }

    #[test]
    fn densities_cover_gaps_and_spans() {
        let span = |lo, hi, count| KeySpan { lo, hi, count };
        let rank = |lo: u64, cost: u64| RankProfile {
            now: KeySpan::default(),
            last: Measured::of((lo..lo + 10).map(|k| (k, cost))),
        };
        let d = Density::new(&[rank(20, 30), rank(0, 10)]).unwrap();
        assert_eq!(
            d.centre(0),
            Some(24.5),
            "all above the floor lies in 20..=29"
        );
        assert_eq!(d.at(5), Some(10.0));
        assert_eq!(d.at(15), None);
        assert_eq!(d.at(-1), None);
        // The walk finds what a bisection does, keys rising or going back.
        let mut walk = d.walker();
        for k in [-1, 0, 5, 9, 15, 20, 29, 30, 3, 25, 2, 40, 0] {
            assert_eq!(walk(k), d.at(k), "key {k}");
        }
        // Keys 5..=24 moved by 0: 5 keys at 10, 5 at 30 covered (gap 10..20 unknown): the
        // covered mean, 20 a key, over 20 keys.
        assert_eq!(d.over(span(5, 24, 20), 0, None), Some(400));
        assert_eq!(d.over(span(40, 49, 10), 0, None), None);
        assert_eq!(d.over(span(40, 49, 10), 20, None), Some(300));
        assert_eq!(d.over(KeySpan::default(), 0, None), Some(0));
        assert_eq!(KeySpan::of(&[7, 3, 9]), span(3, 9, 3));
    }
}
