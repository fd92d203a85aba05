//! `claim`: the thief's side.
//!
//! 1. Fetch-add 1 on the victim's claim word. The old word names the generation, its size
//!    and this thief's ticket, hence its batch ([`crate::layout::claim_batch`]); an empty
//!    batch is the outcome Empty.
//! 2. Read the batch's slots into the staging area.
//! 3. Fetch-add 1 on the region's *done* counter, after the read completed: the owner may
//!    now reuse the region. The thief that held the generation's last ticket then signals
//!    REFILL, so the owner publishes the next generation without waiting for its check.

use super::{ClaimedBatch, Outcome, Pending, Thief};
use crate::ctx::Ctx;
use crate::layout::signal::Signal;
use crate::layout::{ClaimWord, Task, claim_batch, claim_batches, seg, tasks};
use crate::steal::tasks_loc;
use crate::{CoreError, Loc, Memory, Op};

impl Thief {
    /// Step 1: one fetch-add takes a ticket and returns the generation.
    pub(super) fn claim_begin<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, victim: usize) {
        let peer = self.targets.at(victim);
        cx.issue(
            Op::FetchAdd {
                peer,
                remote: tasks_loc(tasks::CLAIM),
                delta: 1,
            },
            Pending::ClaimTicket { victim },
        );
    }

    /// Step 1 answered: the old claim word names this thief's batch, or none.
    pub(super) fn claim_ticket<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        value: u64,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let area = self.area;
        let w = ClaimWord::unpack(value);
        let (start, len) = claim_batch(w.n, w.ticket);
        if len == 0 {
            self.end_attempt(cx, victim, Outcome::Empty);
            return Ok(None);
        }
        if u32::from(w.n) > cx.cfg.shared_capacity {
            return Err(CoreError::Malformed {
                from: self.targets.at(victim),
                what: format!(
                    "claim word announces {} tasks (capacity {})",
                    w.n, cx.cfg.shared_capacity
                ),
            });
        }
        // Step 2: read the batch into the staging area.
        let region = w.region();
        let peer = self.targets.at(victim);
        let remote = area.region(region) + u64::from(start) * area.slot;
        cx.issue(
            Op::Read {
                peer,
                remote: Loc::new(seg::TASKS, remote),
                local: Loc::new(seg::TASKS, area.staging()),
                len: u64::from(len) * area.slot,
            },
            Pending::ClaimRead(ClaimedBatch {
                victim,
                region,
                len,
                last: w.ticket + 1 == claim_batches(w.n),
            }),
        );
        Ok(None)
    }

    /// Step 2 done: the batch is in the staging area.
    pub(super) fn claim_read<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        ClaimedBatch {
            victim,
            region,
            len,
            last,
        }: ClaimedBatch,
        mem: &dyn Memory,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let area = self.area;
        let peer = self.targets.at(victim);
        let tasks = area.take_staged(mem, u64::from(len), peer)?;
        // Step 3: the batch is read; the owner may reuse the region.
        cx.issue(
            Op::FetchAdd {
                peer,
                remote: tasks_loc(tasks::DONE[region]),
                delta: 1,
            },
            Pending::ClaimDone { victim, last },
        );
        let bytes = u64::from(len) * self.area.slot;
        self.end_attempt(cx, victim, Outcome::Got(u64::from(len), bytes));
        Ok(Some(tasks))
    }

    /// Step 3 done: the region's done count is up.
    pub(super) fn claim_done<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        last: bool,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        // The generation is exhausted and this thief's region released: tell the
        // owner to publish the next one now rather than at its next check.
        if last {
            let peer = self.targets.at(victim);
            cx.signal(peer, Signal::Refill, Pending::RefillHint { victim });
        }
        Ok(None)
    }
}
