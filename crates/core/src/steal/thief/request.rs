//! `request`: the thief's side.
//!
//! Signal REQUEST; the victim answers REPLY(n) behind the tasks it wrote into the staging
//! area. A thief that learns of the epoch's end stops waiting, so requests and replies can
//! outlive their epoch: requests carry the epoch (a victim answers another epoch's request
//! with nothing) and a sequence number (a thief ignores a reply that is not its attempt's).
//! Only empty replies can be stale — a reply with tasks keeps its epoch alive.

use super::{EPOCH_MASK, Outcome, Pending, Thief};
use crate::ctx::Ctx;
use crate::layout::Task;
use crate::layout::seg;
use crate::layout::signal::{SEQ_MASK, Signal};
use crate::{CoreError, Loc, Memory, Op, Rank};

impl Thief {
    /// `request`: REQUEST to target `victim`. The epoch (20 bits) rides along: a request
    /// that arrives in another epoch is answered with nothing.
    pub(super) fn send_request<P: From<Pending>>(
        &self,
        cx: &mut Ctx<P>,
        victim: usize,
        seq: u64,
        rtype: u16,
    ) {
        cx.issue(
            Op::Write {
                peer: self.targets.at(victim),
                remote: Loc::new(seg::INBOX, 0),
                pieces: Vec::new(),
                signal: Some(
                    Signal::Request {
                        epoch: cx.epoch & EPOCH_MASK,
                        seq: seq & SEQ_MASK,
                        workers_idle: self.workers_idle,
                        rtype,
                    }
                    .pack(),
                ),
            },
            Pending::RequestSent { victim },
        );
    }

    /// `request`: REPLY(`n`, `seq`) from `from`. Returns the tasks it brought if it
    /// answers this thief's attempt (possibly none), `None` if it is stale.
    pub(crate) fn on_reply<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        from: Rank,
        n: u64,
        seq: u64,
        unsupported: bool,
        mem: &dyn Memory,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let Some(a) = self.attempt else {
            return Ok(None);
        };
        // Under work sharing the master may pass the request on: any rank answers.
        let from_target = cx.cfg.sharing.is_some() || self.targets.get(a.victim) == Some(from);
        if !from_target || seq != a.seq & SEQ_MASK {
            // A stale, empty answer (module doc): nothing to do.
            return Ok(None);
        }
        if n > u64::from(cx.cfg.shared_capacity) {
            return Err(CoreError::Malformed {
                from,
                what: format!(
                    "steal reply of {n} tasks (capacity {})",
                    cx.cfg.shared_capacity
                ),
            });
        }
        let (tasks, bytes) = self.area.take_staged_packed(mem, n, from)?;
        let outcome = if n > 0 {
            // Packed: the bytes that moved, not whole slots.
            Outcome::Got(n, bytes)
        } else if unsupported && a.rtype > 0 {
            Outcome::Unsupported
        } else {
            Outcome::Empty
        };
        if a.rtype > 0 && n > 0 {
            // The debt: estimated CPU time fetched from this victim (1 µs a task without
            // an estimate).
            let work: f64 = tasks.iter().map(|t| t.cost_ns.max(1_000) as f64).sum();
            *self.typed.fetched.entry(from).or_insert(0.0) += work;
            self.typed.total += work;
        }
        self.end_attempt_from(cx, a.victim, outcome, from);
        Ok(Some(tasks))
    }
}
