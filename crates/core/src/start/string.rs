//! The string plan at scale: each rank's part of [`crate::StringLoads`] without any rank
//! holding every load.
//!
//! The global plan lays every rank's excess over the mean end to end in rank order, and
//! every deficit likewise; a giver sends to the receivers whose deficit intervals its
//! excess interval meets. A rank needs three things for its part, and each comes from one
//! collective:
//! 1. the mean: the job's summed load over the ranks that predicted one, by
//!    [`super::TreeReduce`] ([`super::JobFacts`]);
//! 2. where its own intervals begin: the excesses and deficits of the ranks before it,
//!    by [`super::ExclusiveScan`] of [`Prefix`];
//! 3. a giver, who receives: every rank publishes its deficit interval ([`Published`])
//!    in its own segment, and a giver finds the receivers its interval meets by binary
//!    search over ranks ([`ReceiverSearch`]: the deficits' prefix sums only grow along
//!    the string), reading ⌈log₂ N⌉ records for the first receiver and as many for each
//!    further one. A receiver learns what comes from its own interval and the job's
//!    total excess; nobody reads a record that is not on a giver's search path.
//!
//! The result is exactly the global plan's ([`RankString`], checked against
//! [`crate::StringLoads`] in the tests), in O(log N) messages and reads a rank, plus
//! O(log N) reads per receiver a giver sends to.

use super::search::Gallop;
use super::wire::{BodyReader, BodyWriter, FieldError, seal, torn};
use super::{Combine, Wire};
use crate::Rank;

/// The strings of a plan: one (the whole load), or two when split (costly, cheap).
pub const STRINGS: usize = 2;

/// A rank's excess and deficit against each string's mean, summed over a run of ranks:
/// what the scan carries. Unsplit plans use string 0 only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prefix {
    /// (excess, deficit) per string, ns.
    pub strings: [(u128, u128); STRINGS],
}

impl Prefix {
    /// One rank's: its loads per string against the means (`None`: it takes no part).
    pub fn of(loads: [Option<u64>; STRINGS], means: [u64; STRINGS]) -> Self {
        let mut p = Self::default();
        for (s, (l, m)) in loads.into_iter().zip(means).enumerate() {
            if let Some(l) = l {
                p.strings[s] = (
                    u128::from(l.saturating_sub(m)),
                    u128::from(m.saturating_sub(l)),
                );
            }
        }
        p
    }
}

/// No rank's excess or deficit can pass this: 2^64 ranks of 2^64 ns would (a remote
/// prefix above it is refused, so sums never overflow).
pub(crate) const PREFIX_MAX: u128 = 1 << 96;

impl Combine for Prefix {
    fn combine(&mut self, right: &Self) {
        for (a, b) in self.strings.iter_mut().zip(right.strings) {
            a.0 = a.0.saturating_add(b.0);
            a.1 = a.1.saturating_add(b.1);
        }
    }
}

impl Wire for Prefix {
    fn encode(&self, w: &mut BodyWriter) {
        for (e, d) in self.strings {
            w.u128(e);
            w.u128(d);
        }
    }

    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let mut p = Self::default();
        for s in &mut p.strings {
            for (v, field) in [(&mut s.0, "excess"), (&mut s.1, "deficit")] {
                *v = r.u128(field)?;
                if *v > PREFIX_MAX {
                    return Err(FieldError::new(field, format!("{v} ns, over 2^96")));
                }
            }
        }
        Ok(p)
    }
}

/// What a rank publishes for givers to read: per string, where its deficit interval
/// begins and how long it is, and the epoch it belongs to (a record of another epoch is
/// stale: read again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    /// The epoch, modulo 2^32.
    pub epoch: u32,
    /// Per string: (the deficits of the ranks before it, its own deficit).
    pub deficit: [(u128, u128); STRINGS],
}

/// [`Published`]'s bytes: epoch (4), a zero byte, a check of the record (3,
/// `wire::seal`), then two 128-bit words per string.
pub const PUBLISHED_BYTES: usize = 8 + 32 * STRINGS;

impl Published {
    /// Its bytes in the segment.
    pub fn encode(&self) -> [u8; PUBLISHED_BYTES] {
        let mut b = [0u8; PUBLISHED_BYTES];
        b[..4].copy_from_slice(&self.epoch.to_le_bytes());
        for (i, (before, own)) in self.deficit.iter().enumerate() {
            let at = 8 + 32 * i;
            b[at..at + 16].copy_from_slice(&before.to_le_bytes());
            b[at + 16..at + 32].copy_from_slice(&own.to_le_bytes());
        }
        seal(&mut b);
        b
    }

    /// A record read from another rank's segment, checked; `None` where it did not read
    /// whole (caught half written, or never written: `wire::torn`), to be read again.
    pub fn decode(bytes: &[u8]) -> Result<Option<Self>, FieldError> {
        // Whole first: a torn read's fields may each pass, or not.
        if torn(bytes, PUBLISHED_BYTES) {
            return Ok(None);
        }
        let mut r = BodyReader::new(bytes);
        let mut p = Self {
            epoch: r.u32("epoch")?,
            ..Self::default()
        };
        if r.u8("reserved")? != 0 {
            return Err(FieldError::new("reserved", "bits set"));
        }
        // (The check's three bytes.)
        for _ in 0..3 {
            r.u8("check")?;
        }
        for s in &mut p.deficit {
            s.0 = r.u128("deficit before")?;
            s.1 = r.u128("deficit")?;
            if s.0 > PREFIX_MAX || s.1 > PREFIX_MAX {
                return Err(FieldError::new("deficit", "over 2^96 ns"));
            }
        }
        r.finish()?;
        Ok(Some(p))
    }

    /// The end of its deficit interval on string `s`.
    fn end(&self, s: usize) -> u128 {
        self.deficit[s].0 + self.deficit[s].1
    }
}

/// What one rank does in a string plan: the same as [`crate::StringLoads::sends`] and
/// [`crate::StringLoads::receives`] say of it, however it was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankString {
    /// What it sends, ns of predicted work per receiver, in rank order (unsplit).
    pub sends: Vec<(Rank, u64)>,
    /// What it receives, ns (both strings together when split).
    pub receives: u64,
    /// The split plan's part, where it is split.
    pub split: Option<RankSplit>,
}

/// A rank's part of a split string plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankSplit {
    /// Tasks predicted at 2^class ns or more are costly.
    pub class: u8,
    /// What it sends along the costly string.
    pub costly_sends: Vec<(Rank, u64)>,
    /// What it sends along the cheap string.
    pub cheap_sends: Vec<(Rank, u64)>,
}

impl RankString {
    /// The class from which tasks are costly, where the plan is split.
    pub fn split_class(&self) -> Option<u8> {
        self.split.as_ref().map(|s| s.class)
    }
}

/// The receivers one giver's excess interval `[a, b)` meets on one string, found over
/// the ranks' published records by a search from the giver's own place
/// ([`Gallop`]). Sans-IO: [`Self::poll_read`] names the rank whose record it needs
/// next, [`Self::handle_record`] takes it.
#[derive(Debug, Clone)]
pub struct ReceiverSearch {
    string: usize,
    size: u32,
    a: u128,
    b: u128,
    search: Gallop,
    /// The record of the first rank known to satisfy the search, once read.
    hi_record: Option<Published>,
    /// The end of the last receiver's interval.
    last_end: Option<u128>,
    sends: Vec<(Rank, u64)>,
    reads: u64,
    done: bool,
}

impl ReceiverSearch {
    /// A search by rank `me` on string `string` of a job of `size` ranks for its interval
    /// `[a, b)`.
    pub fn new(string: usize, size: u32, me: Rank, a: u128, b: u128) -> Self {
        Self {
            string,
            size,
            a,
            b,
            search: Gallop::new(size, 0, me),
            hi_record: None,
            last_end: None,
            sends: Vec::new(),
            reads: 0,
            done: a >= b || size == 0,
        }
    }

    /// The rank whose record the search needs next (`None`: done).
    pub fn poll_read(&self) -> Option<Rank> {
        if self.done {
            return None;
        }
        self.search.poll_probe()
    }

    /// The record of `rank`, the one [`Self::poll_read`] named.
    pub fn handle_record(&mut self, rank: Rank, p: &Published) {
        self.reads += 1;
        // The first rank whose deficit interval ends after `from` (the interval's start,
        // then the end of the receiver found last): the ends only grow along the string.
        let from = self.last_end.unwrap_or(self.a);
        let holds = p.end(self.string) > from;
        if holds {
            self.hi_record = Some(*p);
        }
        self.search.handle_probe(rank, holds);
        let Some(found) = self.search.found() else {
            return;
        };
        let (Some(j), Some(rec)) = (found, self.hi_record.take()) else {
            // No rank's interval ends after it: the excess beyond the job's deficit stays.
            self.done = true;
            return;
        };
        let (before, own) = rec.deficit[self.string];
        let x = self.b.min(before + own) - self.a.max(before);
        if x > 0 {
            self.sends.push((j, x.min(u128::from(u64::MAX)) as u64));
        }
        if before + own >= self.b || j + 1 >= self.size {
            self.done = true;
            return;
        }
        self.last_end = Some(before + own);
        self.search = Gallop::new(self.size, j + 1, j + 1);
    }

    /// Whether the search walks on from a receiver it found (the next is likely next
    /// door).
    pub fn walking(&self) -> bool {
        self.last_end.is_some()
    }

    /// While its search bisects: the bracket of ranks the next receiver lies in.
    pub fn bisecting(&self) -> Option<(u32, u32)> {
        (!self.done).then(|| self.search.bisecting()).flatten()
    }

    /// Walking on from a receiver and galloping `far` ranks or more: the probes of the
    /// gallop's next `n` steps.
    pub fn far_gallop(&self, far: u64, n: u32) -> Option<Vec<Rank>> {
        match self.walking() && self.search.galloping().is_some_and(|d| d >= far) {
            true => Some(self.search.gallop_ahead(n)),
            false => None,
        }
    }

    /// The first rank its search has not ruled out.
    pub fn frontier(&self) -> u32 {
        self.search.lo()
    }

    /// Walking on: how many more ranks the rest of the interval likely spans, at the
    /// rate the walk so far placed it (excess per rank walked, the ranks between its
    /// receivers included): what a read-ahead should cover.
    pub fn ranks_ahead(&self) -> u64 {
        let (Some(first), Some(last)) = (self.sends.first(), self.sends.last()) else {
            return 0;
        };
        let placed: u128 = self.sends.iter().map(|s| u128::from(s.1)).sum();
        let rest = (self.b - self.a).saturating_sub(placed);
        let walked = u128::from(last.0 - first.0) + 1;
        (rest.saturating_mul(walked).div_ceil(placed.max(1))).min(u128::from(u64::MAX)) as u64
    }

    /// How many ranks at least the rest of the interval still spans: each receiver takes
    /// at most the string's `mean` (its deficit is the mean less its load), so a read
    /// ahead of this many is never wasted.
    pub fn ranks_at_least(&self, mean: u64) -> u64 {
        let rest = self.rest();
        match mean {
            0 => 0,
            m => rest.div_ceil(u128::from(m)).min(u128::from(u64::MAX)) as u64,
        }
    }

    /// Of its interval, what it has not yet placed with a receiver.
    pub fn rest(&self) -> u128 {
        let placed: u128 = self.sends.iter().map(|s| u128::from(s.1)).sum();
        (self.b - self.a).saturating_sub(placed)
    }

    /// The string it searches.
    pub fn string(&self) -> usize {
        self.string
    }

    /// The receivers found, in rank order, once done.
    pub fn sends(&self) -> Option<&[(Rank, u64)]> {
        self.done.then_some(&self.sends[..])
    }

    /// Records read so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }
}

/// What a rank receives on string `s`: its whole deficit. The excesses always cover
/// the deficits — Σ excess − Σ deficit = Σ (L − mean) = Σ L mod n ≥ 0 — so no receiver
/// needs the job's total excess.
pub fn receives(own: &Prefix, s: usize) -> u64 {
    own.strings[s].1.min(u128::from(u64::MAX)) as u64
}
