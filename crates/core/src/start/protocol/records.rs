//! What the start's collectives carry and what a rank publishes for reads: the facts up
//! and down the tree, the strings' sums, a load record.

use super::*;

/// A rank's predicted load, published for its diffusion neighbours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadRecord {
    /// The start's number, modulo 2^32.
    pub seq: u32,
    /// Its load (`None`: none predicted).
    pub load: Option<u64>,
}

/// [`LoadRecord`]'s bytes.
pub const LOAD_RECORD_BYTES: usize = 16;

impl LoadRecord {
    /// Its bytes.
    pub fn encode(&self) -> [u8; LOAD_RECORD_BYTES] {
        let mut b = [0u8; LOAD_RECORD_BYTES];
        b[..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4] = u8::from(self.load.is_some());
        b[8..].copy_from_slice(&self.load.unwrap_or(0).to_le_bytes());
        b
    }

    /// A record read from another rank, checked.
    pub fn decode(b: &[u8]) -> Result<Self, FieldError> {
        let mut r = BodyReader::new(b);
        let seq = r.u32("start")?;
        let flag = r.u32("load")?;
        let load = r.u64("load")?;
        r.finish()?;
        match flag {
            0 if load == 0 => Ok(Self { seq, load: None }),
            1 => Ok(Self {
                seq,
                load: Some(load),
            }),
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
