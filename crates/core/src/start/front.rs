//! The job's front at scale: what it really needs, and how the start brings it.
//!
//! The front ([`crate::JobFront`]) finds how the job's costs moved between the last two
//! epochs (the shift, and whether the key axis is periodic), then predicts each rank's
//! next costs from the last epoch's costs at its keys' sources. Two different needs:
//! 1. **The movement is global but small.** It is decided from the centres of cost
//!    (exact sums over the ranks) and a score over [`crate::front::SAMPLES`] sampled
//!    densities. Each rank adds its sums and the samples whose keys it measured
//!    ([`FrontSums`]); they reduce up the tree to the root, which keeps the summary of
//!    the epoch before and decides the movement with the same policy as the whole-job
//!    front (`front::movement`, over [`SampledField`]). Only the decision comes down.
//!    Bytes a rank: the samples of its subtree on the way up (a few KB at the root at
//!    most), a few words down — bounded, whatever N is.
//! 2. **A rank's predictions are local.** Its load, its tasks' costs and which count
//!    costly depend only on the last densities over its own keys' sources (one run of
//!    keys, two where they wrap). It reads the parts of the ranks that measured them:
//!    it finds the first by binary search over the records every rank publishes
//!    ([`WindowSearch`]: the spans must rise along the rank string, the domain
//!    decomposition Titus's time steps come from), then the ranks after it while their
//!    spans meet the sources. Its predictions are then exactly the whole-job front's
//!    for the same movement (checked in the tests).
//!
//! The approximation: the root scores shifts on samples, with the epoch before's
//! density read at the sample below a key (within one sample step) instead of at the
//! key. For a translating band that keeps the centres' shift, exact by the moments; a
//! shift found by the search around it may differ from the whole-job front's by up to
//! one candidate stride (tests assert that bound). Spans that are disjoint but do not rise
//! along the string (a permuted decomposition) give no front here: the ranks predict
//! alone, as where spans overlap.

use super::search::Gallop;
use super::wire::{BodyReader, BodyWriter, FieldError, VARINT_BYTES_MAX};
use super::{Combine, Wire};
use crate::Rank;
use crate::front::{
    CostField, Density, FrontWindow, KeySpan, Measured, Movement, PARTS_MAX, SAMPLES,
    movement_between, sample_key,
};

/// The keys the summary samples: [`SAMPLES`] keys spread over the last epoch's keys, as
/// the start before found them (its ranks' keys then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    /// The least key.
    pub lo: u64,
    /// The greatest key.
    pub hi: u64,
}

impl Grid {
    fn step(&self) -> f64 {
        ((self.hi - self.lo) as f64 + 1.0) / SAMPLES as f64
    }

    /// The `i`-th sampled key.
    fn key(&self, i: usize) -> i128 {
        sample_key(self.lo, self.step(), i)
    }

    /// The first sample whose key is `k` or more ([`SAMPLES`]: none).
    fn first_from(&self, k: i128) -> usize {
        let (mut lo, mut hi) = (0, SAMPLES);
        while lo < hi {
            let m = (lo + hi) / 2;
            if self.key(m) < k {
                lo = m + 1;
            } else {
                hi = m;
            }
        }
        lo
    }

    /// The samples whose keys lie in `lo..=hi`.
    fn indices(&self, lo: u64, hi: u64) -> std::ops::Range<usize> {
        self.first_from(i128::from(lo))..self.first_from(i128::from(hi) + 1)
    }

    /// Every sampled key, in order.
    fn keys(&self) -> Vec<i128> {
        let step = self.step();
        (0..SAMPLES).map(|i| sample_key(self.lo, step, i)).collect()
    }
}

/// A density as a sample carries it: rounded to the nearest bfloat16 (f32's range, 8
/// bits of mantissa), so that a sample is 2 bytes on the wire and the same value wherever
/// it is read. The root only scores shifts on samples: 0.4% on a density moves no score
/// that decides between candidates a sample step apart.
fn sampled(density: f64) -> f32 {
    f32::from_bits(u32::from(sample_bits(density as f32)) << 16)
}

/// `x`'s bfloat16 bits, to nearest (ties to even), at most the greatest finite one.
fn sample_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b + 0x7fff + ((b >> 16) & 1)) >> 16;
    rounded.min(0x7f7f) as u16
}

/// Runs of sampled densities: (first sample, densities in ns a key), in sample order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples(pub Vec<(u16, Vec<f32>)>);

impl Samples {
    fn merge(&mut self, right: &Self) {
        self.0.extend(right.0.iter().cloned());
        self.0.sort_by_key(|r| r.0);
        let mut out: Vec<(u16, Vec<f32>)> = Vec::with_capacity(self.0.len());
        for (start, v) in self.0.drain(..) {
            match out.last_mut() {
                Some(last) if usize::from(last.0) + last.1.len() == usize::from(start) => {
                    last.1.extend(v)
                }
                _ => out.push((start, v)),
            }
        }
        self.0 = out;
    }

    /// Every sample, `None` where no rank measured its key.
    fn dense(&self) -> Vec<Option<f64>> {
        let mut d = vec![None; SAMPLES];
        for (start, v) in &self.0 {
            for (i, &x) in v.iter().enumerate() {
                d[usize::from(*start) + i] = Some(f64::from(x));
            }
        }
        d
    }
}

/// A rank's share of the front's summary, and the job's once reduced.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontSums {
    /// Whether every rank's last span lay after every earlier rank's ([`SpanOrder`]).
    pub rising: bool,
    /// The least and greatest key measured in the epoch before.
    pub last_range: Option<(u64, u64)>,
    /// The least and greatest key now: the next start's grid.
    pub now_range: Option<(u64, u64)>,
    /// Keys measured.
    pub count: u128,
    /// Their cost, ns.
    pub load: u128,
    /// Σ cost · (key − the rank's least key).
    pub moment: f64,
    /// Σ (key − the rank's least key).
    pub key_sum: f64,
    /// Σ over ranks of (least key − the grid's least) · cost.
    pub off_load: f64,
    /// Σ over ranks of (least key − the grid's least) · keys.
    pub off_count: f64,
    /// The cheapest part's cost per key.
    pub floor: f64,
    /// Parts measured.
    pub parts: u64,
    /// Σ over parts of their keys' range × cost per key.
    pub total: f64,
    /// The sampled densities.
    pub samples: Samples,
}

impl Default for FrontSums {
    fn default() -> Self {
        Self {
            rising: true,
            last_range: None,
            now_range: None,
            count: 0,
            load: 0,
            moment: 0.0,
            key_sum: 0.0,
            off_load: 0.0,
            off_count: 0.0,
            floor: f64::INFINITY,
            parts: 0,
            total: 0.0,
            samples: Samples::default(),
        }
    }
}

impl FrontSums {
    /// One rank's: its keys `now`, what it measured `last`, whether its span lies after
    /// every earlier rank's (`rising`), sampled on `grid` (the start before's).
    pub fn of(now: KeySpan, last: &Measured, rising: bool, grid: Option<Grid>) -> Self {
        let mut f = Self {
            rising,
            now_range: (now.count > 0).then_some((now.lo, now.hi)),
            ..Self::default()
        };
        let s = last.span;
        if s.count == 0 {
            return f;
        }
        let base = grid.map_or(0, |g| g.lo);
        let off = s.lo as f64 - base as f64;
        f.last_range = Some((s.lo, s.hi));
        f.count = u128::from(s.count);
        f.load = u128::from(last.load);
        f.moment = last.moment;
        f.key_sum = last.key_sum;
        f.off_load = off * last.load as f64;
        f.off_count = off * s.count as f64;
        f.parts = last.parts.len() as u64;
        for (i, p) in last.parts.iter().enumerate() {
            let (lo, hi) = last.part_span(i);
            let d = p.2 as f64 / p.1 as f64;
            f.floor = f.floor.min(d);
            f.total += (hi - lo + 1) as f64 * d;
        }
        // Only a rank whose span rises samples: the rising spans are disjoint, so their
        // samples' runs are too (spans that do not rise void the front anyway).
        if let Some(g) = grid.filter(|_| rising) {
            let at = g.indices(s.lo, s.hi);
            if !at.is_empty() {
                let mut part = 0usize;
                let v = at
                    .clone()
                    .map(|i| {
                        let k = g.key(i) as u64;
                        while part + 1 < last.parts.len() && last.parts[part + 1].0 <= k {
                            part += 1;
                        }
                        let p = last.parts[part];
                        sampled(p.2 as f64 / p.1 as f64)
                    })
                    .collect();
                f.samples = Samples(vec![(at.start as u16, v)]);
            }
        }
        f
    }
}

fn range_union(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    }
}

impl Combine for FrontSums {
    fn combine(&mut self, r: &Self) {
        self.rising &= r.rising;
        self.last_range = range_union(self.last_range, r.last_range);
        self.now_range = range_union(self.now_range, r.now_range);
        self.count = self.count.saturating_add(r.count);
        self.load = self.load.saturating_add(r.load);
        self.moment += r.moment;
        self.key_sum += r.key_sum;
        self.off_load += r.off_load;
        self.off_count += r.off_count;
        self.floor = self.floor.min(r.floor);
        self.parts = self.parts.saturating_add(r.parts);
        self.total += r.total;
        self.samples.merge(&r.samples);
    }
}

impl Wire for FrontSums {
    fn encode(&self, w: &mut BodyWriter) {
        w.u8(u8::from(self.rising));
        for r in [self.last_range, self.now_range] {
            w.u8(u8::from(r.is_some()));
            let (lo, hi) = r.unwrap_or_default();
            w.u64(lo);
            w.u64(hi);
        }
        w.u128(self.count);
        w.u128(self.load);
        for x in [
            self.moment,
            self.key_sum,
            self.off_load,
            self.off_count,
            self.floor,
            self.total,
        ] {
            w.u64(x.to_bits());
        }
        w.u64(self.parts);
        w.u16(self.samples.0.len() as u16);
        for (start, v) in &self.samples.0 {
            w.u16(*start);
            w.u16(v.len() as u16);
            for &x in v {
                w.u16(sample_bits(x));
            }
        }
    }

    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let flag = |r: &mut BodyReader<'_>, field| match r.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(FieldError::new(field, format!("{b}, not 0 or 1"))),
        };
        let rising = flag(r, "rising")?;
        let range = |r: &mut BodyReader<'_>, field| -> Result<Option<(u64, u64)>, FieldError> {
            let some = flag(r, field)?;
            let (lo, hi) = (r.u64(field)?, r.u64(field)?);
            if some && hi < lo {
                return Err(FieldError::new(field, format!("{lo}..={hi}")));
            }
            Ok(some.then_some((lo, hi)))
        };
        let last_range = range(r, "last range")?;
        let now_range = range(r, "now range")?;
        let count = r.u128("keys")?;
        let load = r.u128("load")?;
        let mut f = [0.0f64; 6];
        for (x, field) in f.iter_mut().zip([
            "moment",
            "key sum",
            "offset load",
            "offset keys",
            "floor",
            "total",
        ]) {
            *x = f64::from_bits(r.u64(field)?);
            if x.is_nan() || (field != "floor" && x.is_infinite()) {
                return Err(FieldError::new(field, format!("{x}")));
            }
        }
        let parts = r.u64("parts")?;
        let runs = usize::from(r.u16("sample runs")?);
        if runs > SAMPLES {
            return Err(FieldError::new(
                "sample runs",
                format!("{runs}, at most {SAMPLES}"),
            ));
        }
        let mut samples = Vec::with_capacity(runs);
        let mut next = 0usize;
        for _ in 0..runs {
            let start = usize::from(r.u16("sample run")?);
            let len = usize::from(r.u16("sample run")?);
            if start < next || len == 0 || start + len > SAMPLES {
                return Err(FieldError::new(
                    "sample run",
                    format!("{len} samples from {start} (after {next}, of {SAMPLES})"),
                ));
            }
            let v = (0..len)
                .map(|_| {
                    let x = f32::from_bits(u32::from(r.u16("sample")?) << 16);
                    match x.is_finite() && x >= 0.0 {
                        true => Ok(x),
                        false => Err(FieldError::new("sample", format!("{x} ns a key"))),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            samples.push((start as u16, v));
            next = start + len;
        }
        Ok(Self {
            rising,
            last_range,
            now_range,
            count,
            load,
            moment: f[0],
            key_sum: f[1],
            off_load: f[2],
            off_count: f[3],
            floor: f[4],
            total: f[5],
            parts,
            samples: Samples(samples),
        })
    }
}

/// The job's last densities as the root holds them: sampled on a grid, with the sums
/// that make the centre of cost exact.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledField {
    grid: Grid,
    /// The grid's keys, computed once: the root's shift scores look up ~50,000 keys a
    /// start, and computing each (a float to i128 conversion) cost ~20 ms a step.
    keys: Vec<i128>,
    samples: Vec<Option<f64>>,
    /// Σ (cost − floor · keys) over the ranks.
    w: f64,
    /// Σ (cost − floor · keys) · (key − grid.lo).
    x: f64,
    parts: u64,
    total: f64,
}

impl SampledField {
    /// The job's summary, on the grid its ranks sampled; `None` where it has no front:
    /// nothing measured, spans that do not rise along the string, or keys measured
    /// outside the grid the start before announced.
    pub fn of(sums: &FrontSums, grid: Option<Grid>) -> Option<Self> {
        let grid = grid?;
        if !sums.rising || sums.last_range != Some((grid.lo, grid.hi)) || sums.count == 0 {
            return None;
        }
        let floor = sums.floor;
        let w = sums.load as f64 - floor * sums.count as f64;
        let x = sums.moment - floor * sums.key_sum + sums.off_load - floor * sums.off_count;
        Some(Self {
            grid,
            keys: grid.keys(),
            samples: sums.samples.dense(),
            w,
            x,
            parts: sums.parts,
            total: sums.total,
        })
    }
}

impl SampledField {
    /// The last sample at or below key `k` (the first, below it), where `k` is on the grid.
    fn at_or_below(&self, k: i128) -> Option<usize> {
        let (lo, hi) = (self.grid.lo, self.grid.hi);
        if k < i128::from(lo) || k > i128::from(hi) {
            return None;
        }
        // The guess only says where the walk starts.
        let guess = ((k - i128::from(lo)) as u64 as f64 / self.grid.step()) as usize;
        let mut i = guess.min(SAMPLES - 1);
        while i > 0 && self.keys[i] > k {
            i -= 1;
        }
        while i + 1 < SAMPLES && self.keys[i + 1] <= k {
            i += 1;
        }
        Some(i)
    }
}

impl CostField for SampledField {
    fn at(&self, k: i128) -> Option<f64> {
        self.samples[self.at_or_below(k)?]
    }
    fn ascending(&self) -> impl FnMut(i128) -> Option<f64> {
        // The last sample at or below the keys so far: it only moves up.
        let mut i = None;
        move |k| {
            if k < i128::from(self.grid.lo) || k > i128::from(self.grid.hi) {
                return None;
            }
            let mut j = match i {
                Some(j) => j,
                None => self.at_or_below(k)?,
            };
            while j + 1 < SAMPLES && self.keys[j + 1] <= k {
                j += 1;
            }
            i = Some(j);
            self.samples[j]
        }
    }
    fn range(&self) -> (u64, u64) {
        (self.grid.lo, self.grid.hi)
    }
    fn centre(&self, base: u64) -> Option<f64> {
        (self.w > 0.0).then(|| (self.x + (self.grid.lo as f64 - base as f64) * self.w) / self.w)
    }
    fn parts(&self) -> u64 {
        self.parts
    }
    fn total(&self) -> f64 {
        self.total
    }
}

/// What the root keeps across epochs: the summary of the epoch before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrontRoot {
    before: Option<SampledField>,
}

impl FrontRoot {
    /// The movement from the epoch before to the last, from the job's summed `sums` on
    /// `grid`; the last becomes the epoch before.
    pub fn decide(&mut self, sums: &FrontSums, grid: Option<Grid>) -> Movement {
        let last = SampledField::of(sums, grid);
        let m = match (&self.before, &last) {
            (Some(b), Some(l)) => movement_between(b, l),
            _ => Movement::default(),
        };
        self.before = last;
        m
    }
}

/// The exclusive scan that tells a rank whether its last span rises: the greatest key
/// measured by the ranks before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanOrder {
    /// The greatest key measured so far (`None`: none).
    pub reach: Option<u64>,
}

impl Combine for SpanOrder {
    fn combine(&mut self, r: &Self) {
        self.reach = self.reach.max(r.reach);
    }
}

impl Wire for SpanOrder {
    fn encode(&self, w: &mut BodyWriter) {
        w.u8(u8::from(self.reach.is_some()));
        w.u64(self.reach.unwrap_or(0));
    }
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let some = r.u8("reach")?;
        let v = r.u64("reach")?;
        match some {
            0 if v == 0 => Ok(Self { reach: None }),
            1 => Ok(Self { reach: Some(v) }),
            _ => Err(FieldError::new("reach", format!("flag {some}, key {v}"))),
        }
    }
}

/// What a rank publishes of its last span for others' window searches: the span, the
/// greatest key measured by it and every rank before it (so the search is monotone over
/// ranks that measured nothing), and its parts' count (read next, where it is in a
/// window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanRecord {
    /// The epoch, modulo 2^32.
    pub epoch: u32,
    /// Its last span.
    pub span: KeySpan,
    /// The greatest key measured up to it.
    pub reach: Option<u64>,
    /// Its parts.
    pub parts: u32,
    /// Their bytes as published ([`encode_parts`]): what a window reads.
    pub parts_bytes: u32,
}

/// [`SpanRecord`]'s bytes.
pub const SPAN_RECORD_BYTES: usize = 48;
/// A part's bytes at most: its three words, each in at most [`VARINT_BYTES_MAX`].
pub const PART_BYTES_MAX: usize = 3 * VARINT_BYTES_MAX;
/// The most parts' bytes a span record announces.
pub const PARTS_BYTES_MAX: usize = PARTS_MAX * PART_BYTES_MAX;

impl SpanRecord {
    /// The record and parts' bytes a rank publishes for what it measured, `m`.
    pub fn published(epoch: u32, reach: Option<u64>, m: &Measured) -> (Self, Vec<u8>) {
        let parts = encode_parts(m.span.lo, &m.parts);
        let rec = Self {
            epoch,
            span: m.span,
            reach,
            parts: m.parts.len() as u32,
            parts_bytes: parts.len() as u32,
        };
        (rec, parts)
    }

    /// Its bytes.
    pub fn encode(&self) -> [u8; SPAN_RECORD_BYTES] {
        let mut w = BodyWriter::default();
        w.u32(self.epoch);
        w.u32(self.parts);
        w.u64(self.span.lo);
        w.u64(self.span.hi);
        w.u64(self.span.count);
        w.u32(u32::from(self.reach.is_some()));
        w.u32(self.parts_bytes);
        w.u64(self.reach.unwrap_or(0));
        w.0.try_into().expect("48 bytes")
    }

    /// A record read from another rank, checked.
    pub fn decode(b: &[u8]) -> Result<Self, FieldError> {
        let mut r = BodyReader::new(b);
        let epoch = r.u32("epoch")?;
        let parts = r.u32("parts")?;
        let span = KeySpan {
            lo: r.u64("span")?,
            hi: r.u64("span")?,
            count: r.u64("span")?,
        };
        span.check()
            .map_err(|e| FieldError::new("span", e.to_string()))?;
        let flag = r.u32("reach")?;
        let parts_bytes = r.u32("parts' bytes")?;
        let reach = match (flag, r.u64("reach")?) {
            (0, 0) => None,
            (1, k) => Some(k),
            (f, k) => return Err(FieldError::new("reach", format!("flag {f}, key {k}"))),
        };
        r.finish()?;
        if parts as usize > PARTS_MAX || (span.count == 0) != (parts == 0) {
            return Err(FieldError::new(
                "parts",
                format!(
                    "{parts} parts for {} keys (at most {PARTS_MAX})",
                    span.count
                ),
            ));
        }
        // Each part takes 3 to PART_BYTES_MAX bytes.
        let room = 3 * u64::from(parts)..=PART_BYTES_MAX as u64 * u64::from(parts);
        if !room.contains(&u64::from(parts_bytes)) {
            return Err(FieldError::new(
                "parts' bytes",
                format!("{parts_bytes} bytes for {parts} parts (3 to {PART_BYTES_MAX} a part)"),
            ));
        }
        Ok(Self {
            epoch,
            span,
            reach,
            parts,
            parts_bytes,
        })
    }
}

/// Parts' bytes, as published: each part's least key after the one before's (the first
/// after the span's `lo`), its keys and its cost, as variable-length words. A part's
/// words are small (a few keys apart, a few keys, microseconds of cost), so a part takes
/// about 5 bytes instead of 24 and a window's reads are a quarter of their plain size.
pub fn encode_parts(lo: u64, parts: &[(u64, u64, u64)]) -> Vec<u8> {
    let mut w = BodyWriter::default();
    let mut before = lo;
    for &(first, keys, cost) in parts {
        w.varint(first.wrapping_sub(before));
        w.varint(keys);
        w.varint(cost);
        before = first;
    }
    w.0
}

/// A rank's measured span and parts from what it published, checked as a remote profile
/// is ([`Measured::check`]); the moments are not carried (a window's densities need none).
pub fn decode_measured(rec: &SpanRecord, parts: &[u8]) -> Result<Measured, FieldError> {
    if parts.len() != rec.parts_bytes as usize {
        return Err(FieldError::new(
            "parts' bytes",
            format!("{} bytes read, {} announced", parts.len(), rec.parts_bytes),
        ));
    }
    let mut r = BodyReader::new(parts);
    let mut before = rec.span.lo;
    let mut decoded = Vec::with_capacity(rec.parts as usize);
    for _ in 0..rec.parts {
        let first = before.checked_add(r.varint("part")?).ok_or_else(|| {
            FieldError::new("part", format!("a part's key past 2^64 after key {before}"))
        })?;
        decoded.push((first, r.varint("part")?, r.varint("part")?));
        before = first;
    }
    r.finish()?;
    let load = decoded.iter().fold(0u64, |s, p| s.saturating_add(p.2));
    let m = Measured {
        span: rec.span,
        load,
        moment: 0.0,
        key_sum: 0.0,
        parts: decoded,
    };
    m.check()
        .map_err(|e| FieldError::new("parts", e.to_string()))?;
    Ok(m)
}

/// Which record a window search reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowRead {
    /// A rank's [`SpanRecord`].
    Record(Rank),
    /// A rank's parts, this many bytes.
    Parts(Rank, u32),
}

/// Ranks a window may span before the rank predicts alone: the sources of one rank's keys
/// lie on a few ranks' spans, unless ownership was cut much finer there.
pub const WINDOW_RANKS_MAX: u32 = 32;

/// A rank's search for the parts its keys' sources lie in: for each run of source keys,
/// a search from the rank's own place over the ranks' [`SpanRecord`]s for the first rank
/// whose reach meets the run ([`Gallop`]), then the ranks after it while their spans start
/// inside it.
#[derive(Debug, Clone)]
pub struct WindowSearch {
    size: u32,
    me: Rank,
    runs: Vec<(i128, i128)>,
    run: usize,
    search: Gallop,
    /// Walking on from this rank (the search done).
    walk: Option<u32>,
    /// A record read whose parts are wanted next.
    wanted: Option<SpanRecord>,
    found: Vec<(Rank, Measured)>,
    ranks_read: u32,
    /// Walking: how many more ranks the run likely spans, at the width of the last span
    /// read.
    ranks_left: u32,
    reads: u64,
    gave_up: bool,
}

impl WindowSearch {
    /// Rank `me`'s search for the source runs of `movement` for its keys `now`, in a job
    /// of `size`.
    pub fn new(size: u32, me: Rank, now: KeySpan, movement: Movement) -> Self {
        let runs: Vec<(i128, i128)> = match now.count {
            0 => Vec::new(),
            _ => movement
                .sources(now.lo, now.hi)
                .into_iter()
                .flatten()
                .collect(),
        };
        Self {
            size,
            me,
            runs,
            run: 0,
            search: Gallop::new(size, 0, me),
            walk: None,
            wanted: None,
            found: Vec::new(),
            ranks_read: 0,
            ranks_left: 0,
            reads: 0,
            gave_up: false,
        }
    }

    /// The next read, or `None`: done.
    pub fn poll_read(&self) -> Option<WindowRead> {
        if let Some(rec) = self.wanted {
            return Some(WindowRead::Parts(
                self.walk.expect("walking"),
                rec.parts_bytes,
            ));
        }
        if self.run >= self.runs.len() || self.gave_up {
            return None;
        }
        match self.walk {
            Some(j) => Some(WindowRead::Record(j)),
            None => self.search.poll_probe().map(WindowRead::Record),
        }
    }

    fn next_run(&mut self) {
        self.run += 1;
        self.search = Gallop::new(self.size, 0, self.me);
        self.walk = None;
        self.ranks_left = 0;
    }

    /// The record of the rank [`Self::poll_read`] named.
    pub fn handle_record(&mut self, rank: Rank, rec: &SpanRecord) {
        self.reads += 1;
        let (a, b) = self.runs[self.run];
        match self.walk {
            None => {
                self.search
                    .handle_probe(rank, rec.reach.is_some_and(|h| i128::from(h) >= a));
                match self.search.found() {
                    None => {}
                    Some(None) => self.next_run(),
                    Some(Some(first)) => self.walk = Some(first),
                }
            }
            Some(j) => {
                let s = rec.span;
                if s.count > 0 && i128::from(s.lo) > b {
                    self.next_run();
                    return;
                }
                self.ranks_read += 1;
                if self.ranks_read > WINDOW_RANKS_MAX {
                    self.gave_up = true;
                    return;
                }
                if s.count > 0 {
                    let width = i128::from(s.hi - s.lo) + 1;
                    let left = (b - i128::from(s.hi)).max(0) / width + 1;
                    self.ranks_left = left.min(i128::from(WINDOW_RANKS_MAX)) as u32;
                }
                if s.count > 0 && i128::from(s.hi) >= a && !self.found.iter().any(|f| f.0 == j) {
                    self.wanted = Some(*rec);
                    return;
                }
                self.step_walk(j);
            }
        }
    }

    fn step_walk(&mut self, j: u32) {
        if j + 1 >= self.size {
            self.next_run();
        } else {
            self.walk = Some(j + 1);
        }
    }

    /// The parts of the rank whose record was wanted.
    pub fn handle_parts(&mut self, rank: Rank, m: Measured) {
        self.reads += 1;
        self.wanted = None;
        self.found.push((rank, m));
        self.step_walk(rank);
    }

    /// Reads so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// The span records worth reading with the one [`Self::poll_read`] names: while its
    /// search bisects, the next rounds' probes; while it walks, as many ranks as the run
    /// likely spans at the width of the last span read, and at least `walk` (its reads
    /// one after another are first contacts: at 1,024 simulated ranks a window's walk
    /// over 36 ranks took 36 ms). Never past the ranks a window may span.
    pub fn read_ahead(&self, bisection_levels: u32, walk: u32) -> Vec<Rank> {
        if self.wanted.is_some() || self.run >= self.runs.len() || self.gave_up {
            return Vec::new();
        }
        match self.walk {
            Some(j) => {
                let room = WINDOW_RANKS_MAX.saturating_sub(self.ranks_read);
                let n = (self.ranks_left + self.ranks_left / 4).max(walk).min(room);
                (j + 1..j.saturating_add(n).min(self.size)).collect()
            }
            None => self.search.bisecting().map_or_else(Vec::new, |(lo, hi)| {
                super::search::bisection_points(lo, hi, bisection_levels)
            }),
        }
    }

    /// The record whose parts the search reads next.
    pub fn wanted(&self) -> Option<SpanRecord> {
        self.wanted
    }

    /// The densities over the sources, once done; `None` where the sources span more
    /// than [`WINDOW_RANKS_MAX`] ranks (the rank predicts alone).
    pub fn window(&self) -> Option<FrontWindow> {
        if self.gave_up {
            return None;
        }
        let mut found: Vec<&(Rank, Measured)> = self.found.iter().collect();
        found.sort_by_key(|f| f.0);
        // No source measured: an empty density (a rank without keys still predicts 0).
        let d = Density::of(found.into_iter().map(|f| &f.1)).unwrap_or_default();
        Some(FrontWindow(Some(d)))
    }
}

/// Which ranks predict alone with `movement`: those whose callers gave cost hints
/// (`hinted`, by rank; they search no window: [`crate::start::StartInput::hinted`]) and
/// those whose windows give up (the sources of their keys span more than
/// [`WINDOW_RANKS_MAX`] ranks), each rank's window searched over the records every rank of
/// `profiles` publishes: the design's departures from the whole-job front, for a checker
/// holding the start to it.
pub fn predicting_alone(
    profiles: &[crate::RankProfile],
    movement: Movement,
    hinted: &[bool],
) -> Vec<bool> {
    let n = profiles.len();
    if movement.shift == 0 {
        return vec![false; n];
    }
    let mut reach: Option<u64> = None;
    let records: Vec<SpanRecord> = profiles
        .iter()
        .map(|p| {
            let span = p.last.span;
            if span.count > 0 {
                reach = reach.max(Some(span.hi));
            }
            SpanRecord {
                epoch: 0,
                span,
                reach,
                parts: p.last.parts.len() as u32,
                parts_bytes: 0,
            }
        })
        .collect();
    (0..n)
        .map(|r| {
            if hinted[r] {
                return true;
            }
            let mut w = WindowSearch::new(n as u32, r as Rank, profiles[r].now, movement);
            while let Some(read) = w.poll_read() {
                match read {
                    WindowRead::Record(j) => w.handle_record(j, &records[j as usize]),
                    WindowRead::Parts(j, _) => w.handle_parts(j, profiles[j as usize].last.clone()),
                }
            }
            w.window().is_none()
        })
        .collect()
}

/// What the root sends down of the front: how the costs moved, and the grid the next
/// start samples on (the keys every rank holds now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontDecision {
    /// How the costs moved.
    pub movement: Movement,
    /// The next start's grid.
    pub grid: Option<Grid>,
}

impl Wire for FrontDecision {
    fn encode(&self, w: &mut BodyWriter) {
        w.u64(self.movement.shift as u64);
        let p = self.movement.period;
        w.u8(u8::from(p.is_some()));
        w.u64(p.map_or(0, |p| p.lo));
        w.u128(p.map_or(0, |p| p.len));
        w.u8(u8::from(self.grid.is_some()));
        w.u64(self.grid.map_or(0, |g| g.lo));
        w.u64(self.grid.map_or(0, |g| g.hi));
    }

    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let shift = r.u64("shift")? as i64;
        let period = match (r.u8("period")?, r.u64("period")?, r.u128("period")?) {
            (0, 0, 0) => None,
            (1, lo, len) if len > 0 && len <= u128::from(u64::MAX) + 1 => {
                Some(crate::front::Period { lo, len })
            }
            (f, lo, len) => {
                return Err(FieldError::new(
                    "period",
                    format!("flag {f}, {len} keys from {lo}"),
                ));
            }
        };
        if period.is_some_and(|p| shift.unsigned_abs() as u128 >= p.len) {
            return Err(FieldError::new(
                "shift",
                format!("{shift} on a shorter periodic axis"),
            ));
        }
        let grid = match (r.u8("grid")?, r.u64("grid")?, r.u64("grid")?) {
            (0, 0, 0) => None,
            (1, lo, hi) if lo <= hi => Some(Grid { lo, hi }),
            (f, lo, hi) => return Err(FieldError::new("grid", format!("flag {f}, {lo}..={hi}"))),
        };
        Ok(Self {
            movement: Movement { shift, period },
            grid,
        })
    }
}

#[cfg(test)]
mod ascending_tests {
    use super::*;

    #[test]
    fn a_walk_over_ascending_keys_reads_what_a_search_reads() {
        // Grids wider and narrower than the samples, keys from below the grid to past
        // it, in seeded ascending sequences with repeats.
        for seed in 1..=30u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let lo = next() % 1_000;
            let grid = Grid {
                lo,
                hi: lo + next() % 5_000,
            };
            let field = SampledField {
                grid,
                keys: grid.keys(),
                samples: (0..SAMPLES)
                    .map(|i| (next() % 5 != 0).then_some(i as f64))
                    .collect(),
                w: 0.0,
                x: 0.0,
                parts: 1,
                total: 0.0,
            };
            let mut walk = field.ascending();
            let mut k = i128::from(lo) - 50;
            while k < i128::from(grid.hi) + 50 {
                assert_eq!(walk(k), field.at(k), "seed {seed}, key {k}");
                k += (next() % 12) as i128;
            }
        }
    }
}
