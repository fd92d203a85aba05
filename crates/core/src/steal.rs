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
/// generations), and region 2, the staging area where a thief's reads land. Public for
/// `titus sim --calibrate`, which times its slot encoding and decoding on this machine's
/// segments.
#[derive(Debug, Clone, Copy)]
pub struct TaskArea {
    /// Bytes of a task slot.
    pub(crate) slot: u64,
    /// Slots per region (the shared capacity).
    capacity: u64,
    /// Ranks in the job (a task's owner must be one).
    size: u32,
    /// Largest payload a slot may announce.
    max_payload: u32,
    /// The job spawns: its slots may hold spawned tasks.
    spawning: bool,
}

impl TaskArea {
    /// The geometry of `cfg`'s TASKS segment in a job of `size` ranks.
    pub fn new(cfg: &Config, size: u32) -> Self {
        Self {
            slot: layout::slot_size_of(cfg),
            capacity: u64::from(cfg.shared_capacity),
            size,
            max_payload: cfg.max_payload,
            spawning: cfg.spawning.is_some(),
        }
    }

    /// Bytes of the segment.
    pub fn bytes(&self) -> u64 {
        tasks::HEADER + 3 * self.capacity * self.slot
    }

    /// Where region `region` (0, 1, or 2 for staging) starts.
    pub fn region(&self, region: usize) -> u64 {
        tasks::HEADER + region as u64 * self.capacity * self.slot
    }

    /// Where stolen tasks land.
    pub(crate) fn staging(&self) -> u64 {
        self.region(2)
    }

    /// Writes `tasks` into `region` (this rank's memory).
    pub fn write(&self, mem: &dyn Memory, region: usize, tasks: &[Task]) {
        // One write of the slots back to back (a write per slot looked up the segment
        // each time).
        let slot = self.slot as usize;
        let mut buf = vec![0u8; tasks.len() * slot];
        for (t, s) in tasks.iter().zip(buf.chunks_exact_mut(slot)) {
            layout::encode_task(t, s);
        }
        mem.write(Loc::new(seg::TASKS, self.region(region)), &buf);
    }

    /// Writes `tasks` packed into `region` (this rank's memory): each task's slot header
    /// and payload, 8-aligned, back to back — a `request` reply moves these bytes, not
    /// whole slots (48-byte payloads in 1 KiB slots made a 1,024-task reply 1 MiB).
    /// Returns the bytes written; they fit the region (a record is at most a slot).
    pub(crate) fn write_packed(&self, mem: &dyn Memory, region: usize, tasks: &[Task]) -> u64 {
        let mut buf = Vec::with_capacity(tasks.len() * 32);
        for t in tasks {
            let at = buf.len();
            buf.resize(at + packed_len(t.wire_len()), 0);
            layout::encode_task(t, &mut buf[at..]);
        }
        mem.write(Loc::new(seg::TASKS, self.region(region)), &buf);
        buf.len() as u64
    }

    /// Decodes `n` packed tasks ([`TaskArea::write_packed`]) at `offset` of this rank's
    /// TASKS, written by `from`: every length is checked against the payload limit and
    /// the region's end. Returns the tasks and the bytes they took.
    pub(crate) fn read_packed(
        &self,
        mem: &dyn Memory,
        offset: u64,
        n: u64,
        from: Rank,
    ) -> Result<(Vec<Task>, u64), CoreError> {
        let end = offset + self.capacity * self.slot;
        let mut at = offset;
        let mut out = Vec::with_capacity(n as usize);
        let mut header = [0u8; layout::SLOT_HEADER as usize];
        for i in 0..n {
            if at + layout::SLOT_HEADER > end {
                return Err(CoreError::Malformed {
                    from,
                    what: format!("steal reply: task {i} of {n} starts past the staging area"),
                });
            }
            mem.read(Loc::new(seg::TASKS, at), &mut header);
            let len = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
            // (A spawned task's key travels inside the length: `layout::KEY_BYTES`.)
            let limit = self.max_payload as usize + layout::KEY_BYTES;
            if len as usize > limit {
                return Err(CoreError::Malformed {
                    from,
                    what: format!("steal reply: task payload of {len} bytes (limit {limit})"),
                });
            }
            let record = packed_len(len as usize) as u64;
            if at + record > end {
                return Err(CoreError::Malformed {
                    from,
                    what: format!("steal reply: task {i} of {n} ends past the staging area"),
                });
            }
            let mut buf = vec![0u8; record as usize];
            mem.read(Loc::new(seg::TASKS, at), &mut buf);
            let t = layout::decode_task(&buf, from, self.size, self.max_payload)?;
            layout::refuse_spawned(t.index, from, self.spawning)?;
            out.push(t);
            at += record;
        }
        Ok((out, at - offset))
    }

    /// Decodes `n` slots that landed in the staging area from `from`
    /// ([`TaskArea::read`]), then discards them: the staging area is dead until this
    /// rank's next steal lands there (the simulator frees its pages).
    pub(crate) fn take_staged(
        &self,
        mem: &dyn Memory,
        n: u64,
        from: Rank,
    ) -> Result<Vec<Task>, CoreError> {
        let tasks = self.read(mem, self.staging(), n, from);
        mem.discard(Loc::new(seg::TASKS, self.staging()), n * self.slot);
        tasks
    }

    /// [`TaskArea::take_staged`] for packed tasks ([`TaskArea::read_packed`]).
    pub(crate) fn take_staged_packed(
        &self,
        mem: &dyn Memory,
        n: u64,
        from: Rank,
    ) -> Result<(Vec<Task>, u64), CoreError> {
        let got = self.read_packed(mem, self.staging(), n, from);
        // (A malformed reply fails the epoch: its bytes go with the whole area.)
        let len = got
            .as_ref()
            .map_or(self.capacity * self.slot, |&(_, bytes)| bytes);
        mem.discard(Loc::new(seg::TASKS, self.staging()), len);
        got
    }

    /// Decodes `n` slots at `offset` of this rank's TASKS, written by `from`.
    pub fn read(
        &self,
        mem: &dyn Memory,
        offset: u64,
        n: u64,
        from: Rank,
    ) -> Result<Vec<Task>, CoreError> {
        let mut buf = vec![0u8; (n * self.slot) as usize];
        mem.read(Loc::new(seg::TASKS, offset), &mut buf);
        buf.chunks(self.slot as usize)
            .map(|s| {
                let t = layout::decode_task(s, from, self.size, self.max_payload)?;
                layout::refuse_spawned(t.index, from, self.spawning)?;
                Ok(t)
            })
            .collect()
    }
}

/// Bytes of a packed task record: the slot header and the payload (with a spawned task's
/// key), 8-aligned.
fn packed_len(payload: usize) -> usize {
    (layout::SLOT_HEADER as usize + payload).next_multiple_of(8)
}

/// A word of TASKS, as the fabric addresses it.
pub(crate) fn tasks_loc(offset: u64) -> Loc {
    Loc::new(seg::TASKS, offset)
}

/// A word's bytes.
pub(crate) fn word(w: u64) -> [u8; 8] {
    w.to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::testing::Mem;

    fn task(index: u32, len: usize) -> Task {
        Task {
            key: 0,
            owner: 1,
            index,
            kind: 3,
            priority: -2,
            cost_ns: 900,
            payload: (0..len).map(|i| i as u8).collect(),
        }
    }

    #[test]
    fn packed_tasks_round_trip_and_move_only_their_bytes() {
        let cfg = Config {
            max_payload: 1024,
            shared_capacity: 8,
            ..Config::default()
        };
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        let tasks: Vec<Task> = [48, 0, 1024, 5]
            .iter()
            .enumerate()
            .map(|(i, &l)| task(i as u32, l))
            .collect();
        let bytes = area.write_packed(&mem, 2, &tasks);
        assert_eq!(bytes, 72 + 24 + 1048 + 32);
        assert!(bytes < 4 * area.slot);
        let (back, read) = area.read_packed(&mem, area.staging(), 4, 1).unwrap();
        assert_eq!((back, read), (tasks, bytes));
    }

    /// Once a steal's tasks are decoded the staging area is dead until the next steal
    /// lands there: discarded (memory that costs what it holds frees it), a malformed
    /// reply's whole area with it.
    #[test]
    fn staged_tasks_are_discarded_once_decoded() {
        use crate::ctx::testing::Discards;
        let cfg = Config {
            max_payload: 64,
            shared_capacity: 4,
            ..Config::default()
        };
        let area = TaskArea::new(&cfg, 4);
        let mem = Discards::new(Mem::new([area.bytes(), 64, 64]));
        let staged = Loc::new(seg::TASKS, area.staging());
        let tasks: Vec<Task> = (0..3).map(|i| task(i, 10)).collect();
        let bytes = area.write_packed(&mem, 2, &tasks);
        assert!(mem.1.borrow().is_empty(), "nothing dead before it is read");
        let got = area.take_staged_packed(&mem, 3, 1).unwrap();
        assert_eq!(got, (tasks.clone(), bytes));
        assert_eq!(mem.1.take(), [(staged, bytes)], "the packed bytes, once");
        area.write(&mem, 2, &tasks);
        assert_eq!(area.take_staged(&mem, 3, 1).unwrap(), tasks);
        assert_eq!(mem.1.take(), [(staged, 3 * area.slot)], "three slots");
        // A record over the payload limit: refused, and the whole area is dead.
        mem.write(staged, &[0xff; layout::SLOT_HEADER as usize]);
        assert!(area.take_staged_packed(&mem, 1, 1).is_err());
        assert_eq!(mem.1.take(), [(staged, area.capacity * area.slot)]);
    }

    #[test]
    fn packed_records_from_a_peer_are_bounded() {
        let cfg = Config {
            max_payload: 64,
            shared_capacity: 2,
            ..Config::default()
        };
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        // A length over the payload limit.
        let mut rec = vec![0u8; 24];
        rec[12..16].copy_from_slice(&65u32.to_le_bytes());
        mem.write(Loc::new(seg::TASKS, area.staging()), &rec);
        let e = area.read_packed(&mem, area.staging(), 1, 2).unwrap_err();
        assert!(e.to_string().contains("65 bytes (limit 64)"), "{e}");
        // More records announced than the staging area holds: refused, never read past.
        area.write_packed(&mem, 2, &[task(0, 64), task(1, 64)]);
        let e = area.read_packed(&mem, area.staging(), 3, 2).unwrap_err();
        assert!(e.to_string().contains("past the staging area"), "{e}");
        // An owner outside the job.
        let mut t = task(0, 8);
        t.owner = 9;
        area.write_packed(&mem, 2, &[t]);
        assert!(area.read_packed(&mem, area.staging(), 1, 2).is_err());
    }
}
