//! `lock`: the thief's side.
//!
//! 1. CAS the lock word AVAILABLE → held by this thief (else Locked).
//! 2. Read the task count. 3. Read the tasks.
//! 4. CAS held → REFILL, which unlocks and tells the owner the set is gone (an empty set
//!    is released back to AVAILABLE instead), then signal REFILL as a hint.

use super::{Outcome, Pending, Thief};
use crate::ctx::Ctx;
use crate::layout::signal::Signal;
use crate::layout::{Task, lock, seg, tasks};
use crate::steal::tasks_loc;
use crate::{CoreError, Loc, Memory, Op};

impl Thief {
    /// Step 1: the lock, AVAILABLE -> held by this thief.
    pub(super) fn lock_begin<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, victim: usize) {
        let peer = self.targets.at(victim);
        cx.issue(
            Op::Cas {
                peer,
                remote: tasks_loc(tasks::LOCK),
                expected: lock::AVAILABLE,
                desired: lock::held_by(cx.rank),
            },
            Pending::LockAcquire { victim },
        );
    }

    /// Step 1 answered: the lock word before the compare-swap.
    pub(super) fn lock_acquired<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        value: u64,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let area = self.area;
        if value != lock::AVAILABLE {
            self.end_attempt(cx, victim, Outcome::Locked);
            return Ok(None);
        }
        // Step 2: the count.
        let peer = self.targets.at(victim);
        cx.issue(
            Op::Read {
                peer,
                remote: Loc::new(seg::TASKS, tasks::COUNT),
                local: Loc::new(seg::TASKS, area.staging()),
                len: 8,
            },
            Pending::LockCount { victim },
        );
        Ok(None)
    }

    /// Step 2 done: the count is in the staging area.
    pub(super) fn lock_counted<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        mem: &dyn Memory,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let area = self.area;
        let peer = self.targets.at(victim);
        let mut b = [0u8; 8];
        mem.read(Loc::new(seg::TASKS, area.staging()), &mut b);
        let n = u64::from_le_bytes(b);
        if n > u64::from(cx.cfg.shared_capacity) {
            return Err(CoreError::Malformed {
                from: peer,
                what: format!(
                    "shared count {n} over the capacity {}",
                    cx.cfg.shared_capacity
                ),
            });
        }
        if n == 0 {
            self.lock_release(cx, victim, lock::AVAILABLE, Outcome::Empty);
            return Ok(None);
        }
        // Step 3: the tasks.
        cx.issue(
            Op::Read {
                peer,
                remote: Loc::new(seg::TASKS, area.region(0)),
                local: Loc::new(seg::TASKS, area.staging()),
                len: n * area.slot,
            },
            Pending::LockRead {
                victim,
                n: n as u16,
            },
        );
        Ok(None)
    }

    /// Step 3 done: the tasks are in the staging area.
    pub(super) fn lock_read<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        n: u16,
        mem: &dyn Memory,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let area = self.area;
        let peer = self.targets.at(victim);
        let tasks = area.take_staged(mem, u64::from(n), peer)?;
        // Step 4: hand the lock to the owner for a refill.
        let bytes = u64::from(n) * area.slot;
        self.lock_release(cx, victim, lock::REFILL, Outcome::Got(u64::from(n), bytes));
        Ok(Some(tasks))
    }

    /// Step 4 answered: the lock word this thief released.
    pub(super) fn lock_released<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        outcome: Outcome,
        value: u64,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        if value != lock::held_by(cx.rank) {
            return Err(CoreError::Malformed {
                from: self.targets.at(victim),
                what: format!("lock word {value} while this rank held it"),
            });
        }
        if matches!(outcome, Outcome::Got(..)) {
            // The shared set is gone and the lock says REFILL: tell the owner now.
            let peer = self.targets.at(victim);
            cx.signal(peer, Signal::Refill, Pending::RefillHint { victim });
        }
        self.end_attempt(cx, victim, outcome);
        Ok(None)
    }

    /// Step 4: releases the lock to `to` (REFILL after a take, AVAILABLE for an empty set).
    pub(super) fn lock_release<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        to: u64,
        outcome: Outcome,
    ) {
        let peer = self.targets.at(victim);
        cx.issue(
            Op::Cas {
                peer,
                remote: tasks_loc(tasks::LOCK),
                expected: lock::held_by(cx.rank),
                desired: to,
            },
            Pending::LockRelease { victim, outcome },
        );
    }
}
