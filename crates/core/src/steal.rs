//! Stealing: every rank is both an *owner* ([`owner`]) that exposes part of its queue —
//! the *shared set*, in its TASKS segment — and, when its queue runs low, a *thief*
//! ([`thief`]) that takes batches from its overlay out-neighbours. Stolen tasks join the
//! thief's queue, from which it shares in turn, so work spreads along the overlay
//! (TITUS_DLB §4.1). The owner runs its queue from the front and shares from the back; it
//! shares half of its queue (at most the shared capacity), never leaving itself fewer
//! than `min_private` tasks.
//!
//! Three protocols, every rank the same ([`crate::Protocol`]); each side's numbered steps
//! are beside its code:
//! - `claim` (the default: two round trips, the victim never blocks): the owner publishes
//!   a *generation* of n tasks behind a claim word; a thief's fetch-add on the word takes a
//!   ticket, which names its batch; it reads the batch and counts itself done.
//! - `lock` (TITUS: four round trips, the victim's shared set is locked meanwhile): a
//!   thief takes the lock word by compare-and-swap, reads the count and the tasks, and
//!   hands the lock to the owner for a refill.
//! - `request` (one round trip; the victim's progress thread answers): the thief signals
//!   REQUEST, the victim writes tasks into the thief's staging area and signals REPLY.
//!
//! The thief and the owner share no state: what one learns that the other needs (stolen
//! work arrived, a request to answer) the node passes between them. Both address the same
//! TASKS geometry, [`TaskArea`].

pub(crate) mod owner;
pub(crate) mod thief;

use crate::layout::{self, Task, seg, tasks};
use crate::{Config, CoreError, Loc, Memory, Rank};

/// The TASKS segment's geometry: the header, regions 0 and 1 (the shared set's
/// generations), and region 2, the staging area where a thief's reads land.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskArea {
    /// Bytes of a task slot.
    pub(crate) slot: u64,
    /// Slots per region (the shared capacity).
    capacity: u64,
    /// Ranks in the job (a task's owner must be one).
    size: u32,
    /// Largest payload a slot may announce.
    max_payload: u32,
}

impl TaskArea {
    pub(crate) fn new(cfg: &Config, size: u32) -> Self {
        Self {
            slot: layout::slot_size(cfg.max_payload),
            capacity: u64::from(cfg.shared_capacity),
            size,
            max_payload: cfg.max_payload,
        }
    }

    /// Bytes of the segment.
    pub(crate) fn bytes(&self) -> u64 {
        tasks::HEADER + 3 * self.capacity * self.slot
    }

    /// Where region `region` (0, 1, or 2 for staging) starts.
    pub(crate) fn region(&self, region: usize) -> u64 {
        tasks::HEADER + region as u64 * self.capacity * self.slot
    }

    /// Where stolen tasks land.
    pub(crate) fn staging(&self) -> u64 {
        self.region(2)
    }

    /// Writes `tasks` into `region` (this rank's memory).
    pub(crate) fn write(&self, mem: &dyn Memory, region: usize, tasks: &[Task]) {
        let mut buf = vec![0u8; self.slot as usize];
        let base = self.region(region);
        for (i, t) in tasks.iter().enumerate() {
            buf.fill(0);
            layout::encode_task(t, &mut buf);
            mem.write(Loc::new(seg::TASKS, base + i as u64 * self.slot), &buf);
        }
    }

    /// Decodes `n` slots at `offset` of this rank's TASKS, written by `from`.
    pub(crate) fn read(
        &self,
        mem: &dyn Memory,
        offset: u64,
        n: u64,
        from: Rank,
    ) -> Result<Vec<Task>, CoreError> {
        let mut buf = vec![0u8; (n * self.slot) as usize];
        mem.read(Loc::new(seg::TASKS, offset), &mut buf);
        buf.chunks(self.slot as usize)
            .map(|s| layout::decode_task(s, from, self.size, self.max_payload))
            .collect()
    }
}

/// A word of TASKS, as the fabric addresses it.
pub(crate) fn tasks_loc(offset: u64) -> Loc {
    Loc::new(seg::TASKS, offset)
}

/// A word's bytes.
pub(crate) fn word(w: u64) -> [u8; 8] {
    w.to_le_bytes()
}
