//! What the start's collectives carry and what a rank publishes for reads: the facts up
//! and down the tree, the strings' sums, a load record.

use super::*;
use crate::start::wire::{seal, torn};

/// A rank's predicted load, published for its diffusion neighbours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadRecord {
    /// The start's number, modulo 2^32.
    pub seq: u32,
    /// Its load (`None`: none predicted).
    pub load: Option<u64>,
}

/// [`LoadRecord`]'s bytes: the start (4), whether a load is predicted (1), a check of
/// the record (3), the load (8).
pub const LOAD_RECORD_BYTES: usize = 16;

impl LoadRecord {
    /// Its bytes.
    pub fn encode(&self) -> [u8; LOAD_RECORD_BYTES] {
        let mut b = [0u8; LOAD_RECORD_BYTES];
        b[..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4] = u8::from(self.load.is_some());
        b[8..].copy_from_slice(&self.load.unwrap_or(0).to_le_bytes());
        seal(&mut b);
        b
    }

    /// A record read from another rank, checked; `None` where its check does not match
    /// the rest: a read that caught the record half written (a one-sided read is not
    /// atomic against its owner's write: the new start beside the last one's load) or
    /// never written, to be read again.
    pub fn decode(b: &[u8]) -> Result<Option<Self>, FieldError> {
        if torn(b, LOAD_RECORD_BYTES) {
            return Ok(None);
        }
        let mut r = BodyReader::new(b);
        let seq = r.u32("start")?;
        let flag = r.u32("load")?;
        let load = r.u64("load")?;
        r.finish()?;
        match (flag & 0xff, load) {
            (0, 0) => Ok(Some(Self { seq, load: None })),
            (1, _) => Ok(Some(Self {
                seq,
                load: Some(load),
            })),
            _ => Err(FieldError::new("load", format!("flag {flag}, {load} ns"))),
        }
    }
}

/// The facts' reduce value: the job's facts and the front's sums.
#[derive(Debug, Clone, PartialEq)]
pub struct FactsUp {
    pub(crate) facts: JobFacts,
    pub(crate) front: FrontSums,
}

impl Combine for FactsUp {
    fn combine(&mut self, r: &Self) {
        self.facts.combine(&r.facts);
        self.front.combine(&r.front);
    }
}

impl Wire for FactsUp {
    fn encode(&self, w: &mut BodyWriter) {
        self.facts.encode(w);
        self.front.encode(w);
    }
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        Ok(Self {
            facts: JobFacts::decode(r)?,
            front: FrontSums::decode(r)?,
        })
    }
    fn check(&self, size: u32) -> Result<(), FieldError> {
        self.facts.check(size)
    }
}

/// What comes down with the facts: the job's facts and the root's front decision.
#[derive(Debug, Clone, PartialEq)]
pub struct FactsDown {
    pub(crate) facts: JobFacts,
    pub(crate) front: FrontDecision,
}

impl Wire for FactsDown {
    fn encode(&self, w: &mut BodyWriter) {
        self.facts.encode(w);
        self.front.encode(w);
    }
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        Ok(Self {
            facts: JobFacts::decode(r)?,
            front: FrontDecision::decode(r)?,
        })
    }
    fn check(&self, size: u32) -> Result<(), FieldError> {
        self.facts.check(size)
    }
}

/// The loads' reduce after the front: ranks that predicted, and their loads per string.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StringSums {
    /// Ranks that predicted.
    pub predicting: u64,
    /// Their loads: the whole, then (costly, cheap) where split.
    pub loads: [u128; 3],
}

impl Combine for StringSums {
    fn combine(&mut self, r: &Self) {
        self.predicting += r.predicting;
        for (a, b) in self.loads.iter_mut().zip(r.loads) {
            *a = a.saturating_add(b);
        }
    }
}

impl Wire for StringSums {
    fn encode(&self, w: &mut BodyWriter) {
        w.u64(self.predicting);
        for l in self.loads {
            w.u128(l);
        }
    }
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let predicting = r.u64("predicting ranks")?;
        let mut loads = [0u128; 3];
        for l in &mut loads {
            *l = r.u128("load")?;
            if *l > 1 << 96 {
                return Err(FieldError::new("load", format!("{l} ns, over 2^96")));
            }
        }
        Ok(Self { predicting, loads })
    }
    fn check(&self, size: u32) -> Result<(), FieldError> {
        match self.predicting <= u64::from(size) {
            true => Ok(()),
            false => Err(FieldError::new(
                "predicting ranks",
                format!("{} of {size}", self.predicting),
            )),
        }
    }
}

/// A repartition's load summed over a run of ranks, ns: what the plan scan carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadSum(pub u128);

impl Combine for LoadSum {
    fn combine(&mut self, r: &Self) {
        self.0 = self.0.saturating_add(r.0);
    }
}

impl Wire for LoadSum {
    fn encode(&self, w: &mut BodyWriter) {
        w.u128(self.0);
    }
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let l = r.u128("load")?;
        match l <= 1 << 96 {
            true => Ok(Self(l)),
            false => Err(FieldError::new("load", format!("{l} ns, over 2^96"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load record read whole is taken; one caught half written (this start's number
    /// over the last start's load, as a read racing its owner's write lands) or never
    /// written reads as none, to be read again; a whole record with a flag out of range
    /// is refused, naming the field.
    #[test]
    fn a_load_record_caught_half_written_is_read_again() {
        let old = LoadRecord { seq: 4, load: None };
        let new = LoadRecord {
            seq: 5,
            load: Some(69_356),
        };
        for rec in [old, new] {
            assert_eq!(LoadRecord::decode(&rec.encode()), Ok(Some(rec)));
        }
        let (o, n) = (old.encode(), new.encode());
        // Every split of the write: the new bytes up to `k`, the old ones after.
        for k in 1..LOAD_RECORD_BYTES {
            let mut torn = o;
            torn[..k].copy_from_slice(&n[..k]);
            if torn == n || torn == o {
                continue;
            }
            assert_eq!(LoadRecord::decode(&torn), Ok(None), "new bytes up to {k}");
            let mut torn = n;
            torn[..k].copy_from_slice(&o[..k]);
            assert_eq!(LoadRecord::decode(&torn), Ok(None), "old bytes up to {k}");
        }
        assert_eq!(LoadRecord::decode(&[0; LOAD_RECORD_BYTES]), Ok(None));
        let mut bad = new.encode();
        bad[4] = 7;
        seal(&mut bad);
        let e = LoadRecord::decode(&bad).unwrap_err();
        assert_eq!(e.field, "load");
        assert!(LoadRecord::decode(&n[..12]).is_err(), "a short record");
    }
}
