//! Deficit blocks: one record that holds the deficit intervals of [`BLOCK_RANKS`]
//! consecutive ranks, so a giver walking through a pile's receivers reads one record per
//! block, not one per rank.
//!
//! A pile's owner gives to hundreds of ranks in a row (408 at 3,584 simulated ranks).
//! Read one rank at a time, each of those reads is a first contact (1 ms under ib-hdr),
//! 64 at a time: eleven waves, 11 ms of a 16 ms start. Read by block, the same walk
//! is 13 reads, one wave, and an eighth of the bytes.
//!
//! The block's lowest rank, its leader, is the root of the block's binomial subtree, so
//! its members' own deficits reach it up that subtree ([`DeficitRun`], five rounds,
//! over the facts' tree edges: no new connection), while the string scan runs. With the
//! scan's deficits before it, the leader knows every member's interval exactly, and
//! publishes them ([`BlockRecord`], a section per string); a member's interval read from
//! a block equals the one it published itself.

use super::string::{PREFIX_MAX, STRINGS};
use super::wire::{BodyReader, BodyWriter, FieldError, seal, torn};
use super::{Combine, Wire};
use crate::Rank;

/// Ranks in a block: a power of two, the span of one binomial subtree.
pub const BLOCK_RANKS: u32 = 1 << BLOCK_LEVELS;
/// The levels of a block's subtree, the rounds of its gather.
pub const BLOCK_LEVELS: u32 = 5;

/// Blocks a giver reads at once (each into a landing of its own): 16 cover a walk of 512
/// ranks.
pub const BLOCK_READS_AT_ONCE: u32 = 16;

/// The leader of the block `rank` lies in.
pub fn block_leader(rank: Rank) -> Rank {
    rank & !(BLOCK_RANKS - 1)
}

/// The ranks in the block led by `leader`, in a job of `size`.
pub fn block_members(leader: Rank, size: u32) -> u32 {
    BLOCK_RANKS.min(size.saturating_sub(leader))
}

/// The ranks of `sender`'s subtree inside its block: what its part of a gather covers.
fn subtree_members(sender: Rank, size: u32) -> u32 {
    let levels = sender.trailing_zeros().min(BLOCK_LEVELS);
    (1u32 << levels).min(size.saturating_sub(sender))
}

/// The own deficits, per string, of a run of consecutive ranks in rank order: what a
/// block's gather carries up its subtree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeficitRun(pub Vec<[u64; STRINGS]>);

impl Combine for DeficitRun {
    fn combine(&mut self, right: &Self) {
        self.0.extend_from_slice(&right.0);
    }
}

impl Wire for DeficitRun {
    fn encode(&self, w: &mut BodyWriter) {
        w.varint(self.0.len() as u64);
        for d in self.0.iter().flatten() {
            w.varint(*d);
        }
    }

    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let n = r.varint("block members")?;
        if n > u64::from(BLOCK_RANKS) {
            return Err(FieldError::new(
                "block members",
                format!("{n}, over {BLOCK_RANKS}"),
            ));
        }
        let mut run = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut d = [0u64; STRINGS];
            for v in &mut d {
                *v = r.varint("deficit")?;
            }
            run.push(d);
        }
        Ok(Self(run))
    }

    fn check_sender(&self, sender: Rank, size: u32) -> Result<(), FieldError> {
        let want = subtree_members(sender, size);
        match self.0.len() as u32 == want {
            true => Ok(()),
            false => Err(FieldError::new(
                "block members",
                format!("{} for a subtree of {want}", self.0.len()),
            )),
        }
    }
}

/// What a block's leader publishes, one section per string (a giver reads only its
/// string's): the deficits of the ranks before the block, and each member's own
/// deficit, in the start it belongs to (a record of another start is stale: read again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockRecord {
    /// The start's number, modulo 2^32.
    pub epoch: u32,
    /// The deficits of the ranks before the leader.
    pub before: u128,
    /// The members' own deficits, leader first.
    pub deficits: Vec<u64>,
}

/// [`BlockRecord`]'s bytes: epoch (4), members (1), a check of the record (3,
/// `wire::seal`), the deficits before (16), then 8 a member, the members past the block's
/// end zero.
pub const BLOCK_RECORD_BYTES: usize = 8 + 16 + 8 * BLOCK_RANKS as usize;

impl BlockRecord {
    /// Its bytes in the segment.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = BodyWriter::default();
        w.u32(self.epoch);
        w.u32(self.deficits.len() as u32);
        w.u128(self.before);
        for d in &self.deficits {
            w.u64(*d);
        }
        w.0.resize(BLOCK_RECORD_BYTES, 0);
        seal(&mut w.0);
        w.0
    }

    /// The record of the block led by `leader` in a job of `size`, read from the
    /// leader's segment in start `epoch`, checked: its members' count, and sums that stay
    /// under 2^96. `None`: the leader has not published this start's yet (the record is
    /// another start's, or none), or the read caught it half written (`wire::torn`).
    pub fn decode(
        bytes: &[u8],
        leader: Rank,
        size: u32,
        epoch: u32,
    ) -> Result<Option<Self>, FieldError> {
        if torn(bytes, BLOCK_RECORD_BYTES) {
            return Ok(None);
        }
        let mut r = BodyReader::new(bytes);
        if r.u32("start")? != epoch {
            return Ok(None);
        }
        let n = u32::from(r.u8("block members")?);
        for _ in 0..3 {
            r.u8("check")?;
        }
        let want = block_members(leader, size);
        if n != want {
            return Err(FieldError::new(
                "block members",
                format!("{n} in the block of rank {leader}, which has {want}"),
            ));
        }
        let before = r.u128("deficit before")?;
        if before > PREFIX_MAX {
            return Err(FieldError::new("deficit before", "over 2^96 ns"));
        }
        let mut rec = Self {
            epoch,
            before,
            deficits: Vec::with_capacity(n as usize),
        };
        let mut end = before;
        for _ in 0..n {
            let d = r.u64("deficit")?;
            end += u128::from(d);
            rec.deficits.push(d);
        }
        if end > PREFIX_MAX {
            return Err(FieldError::new("deficit", "the block's end over 2^96 ns"));
        }
        for _ in n..BLOCK_RANKS {
            if r.u64("unused member")? != 0 {
                return Err(FieldError::new("unused member", "bits set"));
            }
        }
        r.finish()?;
        Ok(Some(rec))
    }

    /// Each member's deficit interval (the deficits before it, its own), as the member
    /// published it, the block led by `leader`.
    pub fn intervals(&self, leader: Rank) -> impl Iterator<Item = (Rank, (u128, u128))> + '_ {
        let mut before = self.before;
        self.deficits.iter().enumerate().map(move |(i, &own)| {
            let at = before;
            before += u128::from(own);
            (leader + i as Rank, (at, u128::from(own)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(leader: Rank, size: u32) -> BlockRecord {
        BlockRecord {
            epoch: 9,
            before: 1_000,
            deficits: (0..block_members(leader, size))
                .map(|i| u64::from(i) * 3)
                .collect(),
        }
    }

    #[test]
    fn a_block_record_round_trips_and_gives_each_member_its_interval() {
        for (leader, size) in [(0, 1), (0, 32), (32, 40), (64, 1_000)] {
            let rec = record(leader, size);
            let bytes = rec.encode();
            assert_eq!(bytes.len(), BLOCK_RECORD_BYTES);
            assert_eq!(
                BlockRecord::decode(&bytes, leader, size, 9),
                Ok(Some(rec.clone()))
            );
            assert_eq!(BlockRecord::decode(&bytes, leader, size, 10), Ok(None));
            let never = vec![0; BLOCK_RECORD_BYTES];
            assert_eq!(BlockRecord::decode(&never, leader, size, 9), Ok(None));
            let got: Vec<_> = rec.intervals(leader).collect();
            assert_eq!(got.len() as u32, block_members(leader, size));
            let mut before = 1_000;
            for (i, (r, d)) in got.iter().enumerate() {
                assert_eq!(*r, leader + i as Rank);
                assert_eq!(*d, (before, 3 * i as u128));
                before += 3 * i as u128;
            }
        }
    }

    #[test]
    fn a_malformed_block_record_is_refused_naming_its_field() {
        // Each malformed record sealed again, as its writer would have: what is refused
        // is the field, not a torn read.
        let rec = record(32, 40);
        let mut b = rec.encode();
        b[4] = 9;
        seal(&mut b);
        let e = BlockRecord::decode(&b, 32, 40, 9).unwrap_err();
        assert_eq!(e.field, "block members", "{e:?}");
        let mut b = rec.encode();
        *b.last_mut().unwrap() = 1;
        seal(&mut b);
        let e = BlockRecord::decode(&b, 32, 40, 9).unwrap_err();
        assert_eq!(e.field, "unused member", "{e:?}");
        // Unsealed, the same bytes are a read to make again.
        *b.last_mut().unwrap() = 2;
        assert_eq!(BlockRecord::decode(&b, 32, 40, 9), Ok(None));
        let mut b = rec.encode();
        b[8..24].copy_from_slice(&(PREFIX_MAX + 1).to_le_bytes());
        seal(&mut b);
        let e = BlockRecord::decode(&b, 32, 40, 9).unwrap_err();
        assert_eq!(e.field, "deficit before", "{e:?}");
        let mut big = record(0, 32);
        big.before = PREFIX_MAX;
        let e = BlockRecord::decode(&big.encode(), 0, 32, 9).unwrap_err();
        assert_eq!(e.field, "deficit", "{e:?}");
        let e = BlockRecord::decode(&rec.encode()[..60], 32, 40, 9).unwrap_err();
        assert_eq!(e.field, "deficit", "{e:?}");
    }

    #[test]
    fn a_gathered_run_must_cover_its_sender_s_subtree() {
        let run = |n: usize| DeficitRun(vec![[1, 0]; n]);
        // Rank 4's subtree in its block: 4 to 7; rank 33's: itself; rank 48's at 50
        // ranks: 48 and 49.
        assert!(run(4).check_sender(4, 1_000).is_ok());
        assert!(run(3).check_sender(4, 1_000).is_err());
        assert!(run(1).check_sender(33, 1_000).is_ok());
        assert!(run(2).check_sender(48, 50).is_ok());
        assert!(run(16).check_sender(48, 50).is_err());
        let mut w = BodyWriter::default();
        w.varint(33);
        let e = DeficitRun::decode(&mut BodyReader::new(&w.0)).unwrap_err();
        assert_eq!(e.field, "block members");
    }
}
