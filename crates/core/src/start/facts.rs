//! The job's facts at an epoch's start: what one reduce-and-broadcast tells every rank.

use super::wire::{BodyReader, BodyWriter, FieldError};
use super::{Combine, Wire};
use crate::Rank;

/// Cost classes (class b: tasks predicted at [2^b, 2^(b+1)) ns), as
/// [`crate::LoadClasses`].
const CLASSES: usize = 64;

/// What the whole job is at an epoch's start, summed over ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    /// Tasks in the job (saturating).
    pub tasks: u64,
    /// The lowest rank that refused its tasks (a key given twice), if any.
    pub refused_by: Option<Rank>,
    /// Ranks that predicted a load.
    pub predicting: u64,
    /// Their predicted loads, summed, ns.
    pub load: u128,
    /// Their predicted load per cost class, ns.
    pub classes: [u128; CLASSES],
}

impl Default for JobFacts {
    fn default() -> Self {
        Self {
            tasks: 0,
            refused_by: None,
            predicting: 0,
            load: 0,
            classes: [0; CLASSES],
        }
    }
}

impl JobFacts {
    /// One rank's: its task count, whether it refused them, its predicted load (`None`:
    /// none) and its load per class.
    pub fn of(
        rank: Rank,
        tasks: usize,
        refused: bool,
        load: Option<u64>,
        classes: &crate::LoadClasses,
    ) -> Self {
        let mut f = Self {
            tasks: tasks as u64,
            refused_by: refused.then_some(rank),
            predicting: u64::from(load.is_some()),
            load: load.map_or(0, u128::from),
            ..Self::default()
        };
        if load.is_some() {
            for &(b, l) in &classes.0 {
                f.classes[usize::from(b.min(63))] += u128::from(l);
            }
        }
        f
    }

    /// The mean load of the ranks that predicted (0: none did), as
    /// [`crate::StringLoads`] computes it.
    pub fn mean(&self) -> u64 {
        self.load
            .checked_div(u128::from(self.predicting))
            .map_or(0, |m| m.min(u128::from(u64::MAX)) as u64)
    }

    /// The class from which tasks count as costly in a split string plan
    /// ([`crate::split_class`] over the job's classes).
    pub fn split_class(&self) -> Option<u8> {
        crate::diffuse::split_class_of_totals(&self.classes, self.predicting as usize)
    }

    /// The (costly, cheap) means of a split at `class`: the job's load in classes from
    /// `class` up and below it, over the ranks that predicted.
    pub fn split_means(&self, class: u8) -> (u64, u64) {
        let n = u128::from(self.predicting);
        let (costly, cheap) = self.split_sums(class);
        let m = |x: u128| {
            x.checked_div(n)
                .map_or(0, |m| m.min(u128::from(u64::MAX)) as u64)
        };
        (m(costly), m(cheap))
    }

    /// The job's (costly, cheap) load of a split at `class`.
    pub fn split_sums(&self, class: u8) -> (u128, u128) {
        self.classes
            .iter()
            .enumerate()
            .fold((0u128, 0u128), |(d, c), (b, &l)| {
                if b >= usize::from(class) {
                    (d.saturating_add(l), c)
                } else {
                    (d, c.saturating_add(l))
                }
            })
    }
}

/// A remote sum above this is refused: no job's load reaches 2^96 ns.
const SUM_MAX: u128 = 1 << 96;

impl Combine for JobFacts {
    fn combine(&mut self, right: &Self) {
        self.tasks = self.tasks.saturating_add(right.tasks);
        self.refused_by = match (self.refused_by, right.refused_by) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.predicting += right.predicting;
        self.load = self.load.saturating_add(right.load);
        for (a, b) in self.classes.iter_mut().zip(right.classes) {
            *a = a.saturating_add(b);
        }
    }
}

impl Wire for JobFacts {
    fn encode(&self, w: &mut BodyWriter) {
        // Variable-length words: a class's load is a few bytes, not 16.
        w.varint(self.tasks);
        w.u32(self.refused_by.map_or(u32::MAX, |r| r));
        w.varint(self.predicting);
        w.varint_wide(self.load);
        let used: Vec<usize> = (0..CLASSES).filter(|&b| self.classes[b] > 0).collect();
        w.u8(used.len() as u8);
        for b in used {
            w.u8(b as u8);
            w.varint_wide(self.classes[b]);
        }
    }

    fn check(&self, size: u32) -> Result<(), FieldError> {
        if let Some(r) = self.refused_by.filter(|&r| r >= size) {
            return Err(FieldError::new("refused by", format!("rank {r} of {size}")));
        }
        if self.predicting > u64::from(size) {
            return Err(FieldError::new(
                "predicting ranks",
                format!("{} of {size} ranks", self.predicting),
            ));
        }
        Ok(())
    }

    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let mut f = Self {
            tasks: r.varint("tasks")?,
            refused_by: match r.u32("refused by")? {
                u32::MAX => None,
                rank => Some(rank),
            },
            predicting: r.varint("predicting ranks")?,
            load: r.varint_wide("load")?,
            ..Self::default()
        };
        if f.load > SUM_MAX {
            return Err(FieldError::new("load", format!("{} ns, over 2^96", f.load)));
        }
        let used = r.u8("classes")?;
        if usize::from(used) > CLASSES {
            return Err(FieldError::new(
                "classes",
                format!("{used} classes, at most {CLASSES}"),
            ));
        }
        let mut last = None;
        for _ in 0..used {
            let b = r.u8("class")?;
            if usize::from(b) >= CLASSES || last.is_some_and(|l| b <= l) {
                return Err(FieldError::new(
                    "class",
                    format!("class {b} out of order or over 63"),
                ));
            }
            let l = r.varint_wide("class load")?;
            if l == 0 || l > SUM_MAX {
                return Err(FieldError::new(
                    "class load",
                    format!("{l} ns in class {b}"),
                ));
            }
            f.classes[usize::from(b)] = l;
            last = Some(b);
        }
        Ok(f)
    }
}
