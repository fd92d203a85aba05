//! The start's messages on the wire: a fixed header, then the body of one collective's
//! value. Little-endian plain integers, as every layout in the core.
//!
//! | bytes | field      | checked against                                        |
//! |-------|------------|--------------------------------------------------------|
//! | 0–1   | magic      | [`MAGIC`] ("TS")                                        |
//! | 2     | version    | [`VERSION`]                                             |
//! | 3     | step       | one the receiver runs ([`Step`])                        |
//! | 4     | round      | the step's: a child's place, or a scan's round          |
//! | 5–7   | zero       | 0                                                       |
//! | 8–11  | start      | the receiver's start number, modulo 2^32                |
//! | 12–15 | sender     | the rank the signal came from                           |
//! | 16–19 | length     | the body's bytes: what follows, at most the slot's room |
//!
//! The bytes come from another rank, so [`Message::decode`] trusts nothing: every
//! mismatch is a [`StartError`] naming the sender and the field.

use super::StartError;
use crate::Rank;

/// "TS": a Titus start message.
pub const MAGIC: u16 = 0x5354;
/// The format's version (a rank running another one is named, not misread).
pub const VERSION: u8 = 3;
/// Header bytes.
pub const HEADER: usize = 20;

/// Which part of the start a message belongs to, and so which slot it lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The greatest key measured before each rank (`round`: the scan's round).
    SpanScan,
    /// The job's facts and the front's sums, up the tree (`round`: the child's place).
    FactsUp,
    /// The job's facts and the front's movement, down the tree from the root.
    FactsDown,
    /// The job's loads after the front, up the tree (`round`: the child's place).
    LoadsUp,
    /// The job's loads after the front, down the tree.
    LoadsDown,
    /// The string plan's prefix sums (`round`: the scan's round).
    StringScan,
    /// The own deficits of a block's ranks, up to its leader (`round`: the child's place).
    DeficitsUp,
    /// A repartition plan's loads before each rank (`round`: the scan's round).
    PlanScan,
}

/// Every step, in the order a start runs them.
pub const STEPS: [Step; 8] = [
    Step::SpanScan,
    Step::FactsUp,
    Step::FactsDown,
    Step::LoadsUp,
    Step::LoadsDown,
    Step::StringScan,
    Step::DeficitsUp,
    Step::PlanScan,
];

impl Step {
    /// Its code on the wire (and its place in [`STEPS`], from 1).
    pub fn code(self) -> u8 {
        match self {
            Self::SpanScan => 1,
            Self::FactsUp => 2,
            Self::FactsDown => 3,
            Self::LoadsUp => 4,
            Self::LoadsDown => 5,
            Self::StringScan => 6,
            Self::DeficitsUp => 7,
            Self::PlanScan => 8,
        }
    }

    /// The step of a code.
    pub fn of(code: u8) -> Option<Self> {
        STEPS.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// A short name for errors and the debug log.
    pub fn name(self) -> &'static str {
        match self {
            Self::SpanScan => "span scan",
            Self::FactsUp => "facts up",
            Self::FactsDown => "facts down",
            Self::LoadsUp => "loads up",
            Self::LoadsDown => "loads down",
            Self::StringScan => "string scan",
            Self::DeficitsUp => "deficits up",
            Self::PlanScan => "plan scan",
        }
    }
}

/// A decoded header and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// The step.
    pub step: Step,
    /// The child's place or the scan's round.
    pub round: u8,
    /// The sender's epoch, modulo 2^32.
    pub epoch: u32,
    /// The sender, as it says.
    pub sender: Rank,
    /// The body.
    pub body: &'a [u8],
}

impl Message<'_> {
    /// The header for a body of `len` bytes, then the body, as one buffer.
    pub fn encode(step: Step, round: u8, epoch: u64, sender: Rank, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + body.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(step.code());
        out.push(round);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&(epoch as u32).to_le_bytes());
        out.extend_from_slice(&sender.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
        out
    }
}

impl<'a> Message<'a> {
    /// Decodes what rank `from` wrote (`bytes`: the slot's bytes as far as its signal
    /// said), checking the header against the receiver's `epoch` and the sender.
    pub fn decode(from: Rank, epoch: u64, bytes: &'a [u8]) -> Result<Self, StartError> {
        let bad = |field: &'static str, detail: String| StartError::Malformed {
            from,
            field,
            detail,
        };
        if bytes.len() < HEADER {
            return Err(bad(
                "length",
                format!("{} bytes, under the {HEADER}-byte header", bytes.len()),
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let magic = u16::from_le_bytes([bytes[0], bytes[1]]);
        if magic != MAGIC {
            return Err(bad("tag", format!("{magic:#06x}, not a start message")));
        }
        if bytes[2] != VERSION {
            return Err(bad(
                "version",
                format!("version {} (this rank runs {VERSION})", bytes[2]),
            ));
        }
        let step = Step::of(bytes[3]).ok_or_else(|| bad("step", format!("step {}", bytes[3])))?;
        if bytes[5..8] != [0; 3] {
            return Err(bad("reserved", "bits set in the reserved bytes".into()));
        }
        let sent_epoch = u32_at(8);
        if sent_epoch != epoch as u32 {
            return Err(bad(
                "epoch",
                format!("epoch {sent_epoch}, this rank starts {}", epoch as u32),
            ));
        }
        let sender = u32_at(12);
        if sender != from {
            return Err(bad("sender", format!("it names rank {sender}")));
        }
        let len = u32_at(16) as usize;
        if len != bytes.len() - HEADER {
            return Err(bad(
                "length",
                format!(
                    "a body of {len} bytes in a message of {} after the header",
                    bytes.len() - HEADER
                ),
            ));
        }
        Ok(Self {
            step,
            round: bytes[4],
            epoch: sent_epoch,
            sender,
            body: &bytes[HEADER..],
        })
    }
}

/// Where a sealed record keeps its check: bytes 5..8, after its start (4) and one byte.
const CHECK_AT: usize = 5;

/// A published record's 24-bit check, over its bytes but those of the check itself. A
/// one-sided read is not atomic against its owner's write: a read racing the write can
/// land the new start's number beside the last start's values, which every field check
/// passes. Such a read fails the check and is read again. Never 0, so a record never
/// written fails it too.
fn check24(bytes: &[u8]) -> [u8; 3] {
    let mut h = 0x243f_6a88_85a3_08d3u64 ^ bytes.len() as u64;
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        let mut word = u64::from_le_bytes(w);
        if i == 0 {
            // The check's own bytes count as zero.
            word &= (1 << (8 * CHECK_AT)) - 1;
        }
        h = (h ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    let c = ((h & 0xff_ffff) as u32).max(1).to_le_bytes();
    [c[0], c[1], c[2]]
}

/// Writes a record's check into its bytes 5..8 ([`check24`]); the record is at least 8
/// bytes.
pub(crate) fn seal(bytes: &mut [u8]) {
    let c = check24(bytes);
    bytes[CHECK_AT..CHECK_AT + 3].copy_from_slice(&c);
}

/// Whether a record of `len` bytes, read as `bytes`, was caught half written or never
/// written: its check does not match ([`check24`]). A read of another length is left to
/// the record's field checks.
pub(crate) fn torn(bytes: &[u8], len: usize) -> bool {
    bytes.len() == len && bytes[CHECK_AT..CHECK_AT + 3] != check24(bytes)
}

/// Writes a body: plain little-endian words.
#[derive(Debug, Default)]
pub struct BodyWriter(pub Vec<u8>);

impl BodyWriter {
    /// A byte.
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// A 16-bit word.
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A 32-bit word.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A 64-bit word.
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A 128-bit word.
    pub fn u128(&mut self, v: u128) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A 64-bit word in 1 to [`VARINT_BYTES_MAX`] bytes: seven bits a byte, low first, the
    /// top bit set on every byte but the last (small values, as a part's, take one or two).
    pub fn varint(&mut self, v: u64) {
        self.varint_wide(u128::from(v));
    }
    /// A 128-bit word the same way, in 1 to 19 bytes (sums of loads take six or seven).
    pub fn varint_wide(&mut self, mut v: u128) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
}

/// The most bytes [`BodyWriter::varint`] writes: ⌈64 / 7⌉.
pub const VARINT_BYTES_MAX: usize = 10;

/// Reads a body, refusing to run past its end: each read names the field it wanted.
#[derive(Debug)]
pub struct BodyReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// What a body's read found wrong: the field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field.
    pub field: &'static str,
    /// Why.
    pub detail: String,
}

impl FieldError {
    /// `field` is wrong: `detail`.
    pub fn new(field: &'static str, detail: impl Into<String>) -> Self {
        Self {
            field,
            detail: detail.into(),
        }
    }
}

impl<'a> BodyReader<'a> {
    /// Reads `bytes` from the start.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FieldError> {
        let end = self.at + N;
        let b = self.bytes.get(self.at..end).ok_or_else(|| {
            FieldError::new(
                field,
                format!("the body ends at byte {} before it", self.bytes.len()),
            )
        })?;
        self.at = end;
        Ok(b.try_into().expect("N bytes"))
    }

    /// A byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, FieldError> {
        Ok(self.take::<1>(field)?[0])
    }
    /// A 16-bit word.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, FieldError> {
        Ok(u16::from_le_bytes(self.take(field)?))
    }
    /// A 32-bit word.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, FieldError> {
        Ok(u32::from_le_bytes(self.take(field)?))
    }
    /// A 64-bit word.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, FieldError> {
        Ok(u64::from_le_bytes(self.take(field)?))
    }
    /// A 128-bit word.
    pub fn u128(&mut self, field: &'static str) -> Result<u128, FieldError> {
        Ok(u128::from_le_bytes(self.take(field)?))
    }

    /// A word written by [`BodyWriter::varint`]: refused where it runs past the body,
    /// past 64 bits, or is written longer than it needs (one value, one encoding).
    pub fn varint(&mut self, field: &'static str) -> Result<u64, FieldError> {
        let v = self.varint_wide(field)?;
        u64::try_from(v).map_err(|_| FieldError::new(field, "a variable-length word past 64 bits"))
    }

    /// A word written by [`BodyWriter::varint_wide`], refused as [`Self::varint`] is past
    /// 128 bits.
    pub fn varint_wide(&mut self, field: &'static str) -> Result<u128, FieldError> {
        const BYTES_MAX: usize = 128_usize.div_ceil(7);
        let mut v = 0u128;
        for i in 0..BYTES_MAX {
            let b = self.take::<1>(field)?[0];
            // The last byte holds the top 2 bits.
            if i == BYTES_MAX - 1 && b > 0x03 {
                return Err(FieldError::new(
                    field,
                    "a variable-length word past 128 bits",
                ));
            }
            v |= u128::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(FieldError::new(
                        field,
                        "a variable-length word written long",
                    ));
                }
                return Ok(v);
            }
        }
        unreachable!("the last byte ends the word or is refused")
    }

    /// The body was read to its end (bytes left over are an error: another format).
    pub fn finish(self) -> Result<(), FieldError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(FieldError::new(
                "length",
                format!("{n} bytes left after the last field"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every published record that a read may race with its owner's write (a string's
    /// deficits, a block's, a load) reads whole or not at all: each split of the old
    /// record's bytes with the new one's reads as none, never as a mix.
    #[test]
    fn a_record_caught_half_written_reads_as_none() {
        use super::super::block::{BLOCK_RECORD_BYTES, BlockRecord};
        use super::super::string::{PUBLISHED_BYTES, Published};
        let published = |epoch: u32, d: u128| {
            Published {
                epoch,
                deficit: [(d, 3 * d), (2 * d, d)],
            }
            .encode()
            .to_vec()
        };
        let block = |epoch: u32, d: u64| {
            BlockRecord {
                epoch,
                before: u128::from(d) * 7,
                deficits: (0..32).map(|i| d + i).collect(),
            }
            .encode()
        };
        let pairs = [
            (published(4, 1_000), published(5, 2_345)),
            (block(4, 10), block(5, 99)),
        ];
        for (old, new) in pairs {
            let n = old.len();
            assert!(n == PUBLISHED_BYTES || n == BLOCK_RECORD_BYTES);
            let read = |b: &[u8]| match n {
                PUBLISHED_BYTES => Published::decode(b).map(|p| p.is_some()),
                _ => BlockRecord::decode(b, 0, 1_000, 5).map(|p| p.is_some()),
            };
            assert_eq!(read(&new), Ok(true));
            for k in 1..n {
                for (first, then) in [(&new, &old), (&old, &new)] {
                    let mut torn = then.clone();
                    torn[..k].copy_from_slice(&first[..k]);
                    // (A split past the last differing byte is a whole record.)
                    if torn == new || torn == old {
                        continue;
                    }
                    assert_eq!(read(&torn), Ok(false), "{n}-byte record split at {k}");
                }
            }
        }
    }

    #[test]
    fn a_message_round_trips_and_every_header_field_is_checked() {
        let m = Message::encode(Step::StringScan, 3, 7, 5, &[1, 2, 3]);
        let d = Message::decode(5, 7, &m).expect("decodes");
        assert_eq!(
            (d.step, d.round, d.epoch, d.sender, d.body),
            (Step::StringScan, 3, 7, 5, &[1u8, 2, 3][..])
        );
        let field = |bytes: &[u8], from: Rank, epoch: u64| match Message::decode(from, epoch, bytes)
        {
            Err(StartError::Malformed { field, from: f, .. }) => {
                assert_eq!(f, from, "names the sender");
                field
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(field(&m[..10], 5, 7), "length");
        let mut bad = m.clone();
        bad[0] ^= 1;
        assert_eq!(field(&bad, 5, 7), "tag");
        let mut bad = m.clone();
        bad[2] = 9;
        assert_eq!(field(&bad, 5, 7), "version");
        let mut bad = m.clone();
        bad[3] = 77;
        assert_eq!(field(&bad, 5, 7), "step");
        let mut bad = m.clone();
        bad[6] = 1;
        assert_eq!(field(&bad, 5, 7), "reserved");
        assert_eq!(field(&m, 5, 8), "epoch");
        assert_eq!(field(&m, 4, 7), "sender");
        let mut bad = m.clone();
        bad.push(0);
        assert_eq!(field(&bad, 5, 7), "length");
    }

    #[test]
    fn a_varint_round_trips_and_refuses_overflow_overlong_and_truncation() {
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let mut w = BodyWriter::default();
            w.varint(v);
            assert!(w.0.len() <= VARINT_BYTES_MAX);
            let mut r = BodyReader::new(&w.0);
            assert_eq!(r.varint("part"), Ok(v), "{v}");
            r.finish().expect("read to its end");
        }
        let err = |b: &[u8]| BodyReader::new(b).varint("part").unwrap_err();
        assert!(err(&[0x80; 10]).detail.contains("ends"));
        assert!(err(&[0x80; 19]).detail.contains("128 bits"));
        let mut w = BodyWriter::default();
        w.varint_wide(u128::MAX);
        assert_eq!(BodyReader::new(&w.0).varint_wide("load"), Ok(u128::MAX));
        assert!(
            err(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02])
                .detail
                .contains("64 bits")
        );
        assert!(err(&[0x80, 0x00]).detail.contains("long"));
        assert!(err(&[0x80, 0x80]).detail.contains("ends"));
        assert_eq!(err(&[]).field, "part");
    }

    #[test]
    fn a_body_refuses_to_read_past_its_end_or_stop_short() {
        let mut w = BodyWriter::default();
        w.u64(9);
        w.u8(1);
        let mut r = BodyReader::new(&w.0);
        assert_eq!(r.u64("load"), Ok(9));
        assert_eq!(r.u32("count").unwrap_err().field, "count");
        let mut r = BodyReader::new(&w.0);
        r.u64("load").unwrap();
        assert_eq!(r.finish().unwrap_err().field, "length");
    }
}
