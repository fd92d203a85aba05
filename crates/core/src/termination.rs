//! Termination: a non-blocking tree reduction over ranks.
//!
//! Ranks form a binary tree by number (parent of r is (r − 1)/2), depth ⌈log₂ N⌉. A rank
//! is *locally complete* once every result of its own tasks is home; results are never
//! lost or duplicated, so that stays true for the rest of the epoch.
//! 1. A rank that is locally complete and has heard UP from each child sends UP to its
//!    parent.
//! 2. The root, in the same state, knows every rank is complete: every task ran and every
//!    result is home. It sends DONE to its children, who forward it.
//! 3. Until DONE, complete ranks keep stealing and routing (other ranks' results may still
//!    pass through them). After DONE a rank issues nothing new and reports done once its
//!    last operations completed (a stale steal must not land in the next epoch).

use crate::ctx::Ctx;
use crate::layout::signal::Signal;
use crate::{CoreError, Rank, Time};
use std::time::Duration;

/// How long a rank whose subtree finished waits for DONE after it found a peer's process
/// gone (a liveness sweep, or a steal that failed): DONE travels down the tree, so a rank
/// of another subtree may have had it, ended its job and exited while this rank's DONE is
/// still on its way (a relay descheduled on a busy node takes milliseconds). A peer that
/// died before the epoch's end means no DONE ever comes: the epoch fails once this has
/// passed.
pub const DONE_GRACE: Duration = Duration::from_secs(2);

/// The tree parent of `r`.
pub(crate) fn tree_parent(r: Rank) -> Option<Rank> {
    (r > 0).then(|| (r - 1) / 2)
}

/// The tree children of `r` in a job of `size`.
pub(crate) fn tree_children(r: Rank, size: u32) -> impl Iterator<Item = Rank> {
    [2 * u64::from(r) + 1, 2 * u64::from(r) + 2]
        .into_iter()
        .filter(move |&c| c < u64::from(size))
        .map(|c| c as Rank)
}

/// Termination signals in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    Up,
    Done,
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Up => "termination UP",
            Self::Done => "termination DONE",
        }
    }
}

/// What a rank's termination waits for ([`Termination::waiting_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// The epoch ended here.
    Nothing,
    /// DONE from the parent: the whole job has not finished.
    Done(Rank),
    /// UP from these children (each for its subtree); empty: none, only this rank.
    Up(Vec<Rank>),
}

/// This rank's place in the reduction.
#[derive(Debug)]
pub(crate) struct Termination {
    children_up: u32,
    /// The children whose UP arrived (for [`Termination::waiting_for`]).
    up_from: Vec<Rank>,
    sent_up: bool,
    done: bool,
    /// A gone peer first seen while this rank awaited DONE, why, and when.
    gone_since: Option<(Rank, String, Time)>,
    /// That peer was reported by a failed operation ([`Termination::op_gone`]): a sweep
    /// that finds no peer gone does not clear it (the sweep may not see that host).
    gone_by_op: bool,
}

impl Default for Termination {
    /// Between epochs: done.
    fn default() -> Self {
        Self {
            children_up: 0,
            up_from: Vec::new(),
            sent_up: false,
            done: true,
            gone_since: None,
            gone_by_op: false,
        }
    }
}

impl Termination {
    /// A new epoch.
    pub(crate) fn start(&mut self) {
        self.done = false;
        self.children_up = 0;
        self.up_from.clear();
        self.sent_up = false;
        self.gone_since = None;
        self.gone_by_op = false;
    }

    /// Whether this rank learned that the epoch is over.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether this rank sent UP and waits only for DONE: its subtree finished, and the
    /// epoch's outcome is decided once every other subtree has too.
    pub(crate) fn awaits_done(&self) -> bool {
        self.sent_up && !self.done
    }

    /// A liveness sweep's finding at `now` (`gone`: a peer whose process is gone, and
    /// why): the peer to fail the epoch with, if it is time — at once, unless this rank
    /// waits only for DONE ([`Termination::awaits_done`]): then after [`DONE_GRACE`]
    /// without DONE, naming the first gone peer. A sweep that finds every peer alive
    /// starts the grace afresh, unless a failed operation reported the peer
    /// ([`Termination::op_gone`]).
    pub(crate) fn gone_verdict(
        &mut self,
        now: Time,
        gone: Option<(Rank, String)>,
    ) -> Option<(Rank, String)> {
        let Some((peer, why)) = gone else {
            if !self.gone_by_op {
                self.gone_since = None;
            }
            return self.grace_over(now);
        };
        if !self.awaits_done() {
            self.gone_since = None;
            self.gone_by_op = false;
            return Some((peer, why));
        }
        self.gone_since.get_or_insert((peer, why, now));
        self.grace_over(now)
    }

    /// An operation to `peer` failed at `now` because its process is gone (`why`),
    /// while this rank waits only for DONE: the grace starts, as a sweep's finding
    /// starts it (one already running goes on, naming its first peer), and lasts
    /// whatever later sweeps find.
    pub(crate) fn op_gone(&mut self, now: Time, peer: Rank, why: String) {
        self.gone_since.get_or_insert((peer, why, now));
        self.gone_by_op = true;
    }

    /// When the grace ends, if one runs (a deadline for the node's timer: a driver
    /// that never sweeps still ends the epoch).
    pub(crate) fn grace_deadline(&self) -> Option<Time> {
        self.gone_since
            .as_ref()
            .filter(|_| self.awaits_done())
            .map(|(_, _, at)| at.plus(DONE_GRACE))
    }

    /// The gone peer to fail the epoch with, and why, once the grace is over at `now`.
    pub(crate) fn grace_over(&self, now: Time) -> Option<(Rank, String)> {
        let (first, first_why, at) = self.gone_since.as_ref().filter(|_| self.awaits_done())?;
        (now.since(*at) >= DONE_GRACE).then(|| {
            (
                *first,
                format!(
                    "{first_why}, and this rank's subtree had finished the epoch but DONE did \
                     not come within {DONE_GRACE:?} (the job cannot end without that rank)"
                ),
            )
        })
    }

    pub(crate) fn summary(&self) -> String {
        format!("children_up {} sent_up {}", self.children_up, self.sent_up)
    }

    /// What this rank waits for before the epoch can end here: nothing (it ended), DONE
    /// from its parent (it sent UP), or UP from these children.
    pub(crate) fn waiting_for(&self, rank: Rank, size: u32) -> Waiting {
        if self.done {
            Waiting::Nothing
        } else if self.sent_up {
            Waiting::Done(tree_parent(rank).unwrap_or(0))
        } else {
            Waiting::Up(
                tree_children(rank, size)
                    .filter(|c| !self.up_from.contains(c))
                    .collect(),
            )
        }
    }

    /// Steps 1 and 2, once this rank is locally `complete`. Returns whether the epoch
    /// ended here now (the root).
    pub(crate) fn step<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, complete: bool) -> bool {
        if self.done || self.sent_up || !complete {
            return false;
        }
        let children = tree_children(cx.rank, cx.size).count() as u32;
        if self.children_up < children {
            return false;
        }
        match tree_parent(cx.rank) {
            Some(p) => {
                self.sent_up = true;
                cx.signal(p, Signal::Up, Pending::Up);
                false
            }
            None => self.finish(cx),
        }
    }

    /// UP from `from`, which must be a child.
    pub(crate) fn on_up<P>(&mut self, cx: &Ctx<P>, from: Rank) -> Result<(), CoreError> {
        if tree_children(cx.rank, cx.size).any(|c| c == from) {
            self.children_up += 1;
            self.up_from.push(from);
            Ok(())
        } else {
            Err(CoreError::Malformed {
                from,
                what: "termination UP from a rank that is not a child".into(),
            })
        }
    }

    /// DONE from `from`, which must be the parent. Returns whether the epoch ended here
    /// now.
    pub(crate) fn on_done<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        from: Rank,
    ) -> Result<bool, CoreError> {
        if tree_parent(cx.rank) == Some(from) {
            Ok(self.finish(cx))
        } else {
            Err(CoreError::Malformed {
                from,
                what: "termination DONE from a rank that is not the parent".into(),
            })
        }
    }

    /// Step 2 and 3: the epoch is over; DONE goes to the children.
    fn finish<P: From<Pending>>(&mut self, cx: &mut Ctx<P>) -> bool {
        if self.done {
            return false;
        }
        self.done = true;
        for c in tree_children(cx.rank, cx.size) {
            cx.signal(c, Signal::Done, Pending::Done);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn a_leaf_reports_up_once_and_stops_on_done() {
        // Rank 3 of 4: parent 1, no children.
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 3, 4);
        let mut t = Termination::default();
        t.start();
        assert!(!t.awaits_done());
        assert!(!t.step(&mut cx, false), "not complete: nothing");
        assert!(cx.poll_command().is_none());
        assert!(!t.step(&mut cx, true));
        let up = cx.poll_command().expect("UP");
        assert!(
            matches!(up.op, crate::Op::Write { peer: 1, signal: Some(s), .. } if s == Signal::Up.pack()),
            "{up:?}"
        );
        assert_eq!(t.waiting_for(3, 4), Waiting::Done(1));
        assert!(t.awaits_done(), "UP sent: only DONE is missing");
        assert!(!t.step(&mut cx, true), "UP is sent once");
        assert!(cx.poll_command().is_none());
        assert!(t.on_done(&mut cx, 2).is_err(), "DONE from a non-parent");
        assert!(t.on_done(&mut cx, 1).unwrap());
        assert!(t.is_done());
        assert!(!t.awaits_done());
        assert!(
            cx.poll_command().is_none(),
            "a leaf forwards DONE to nobody"
        );
    }

    #[test]
    fn the_root_ends_the_epoch_when_its_children_are_up() {
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 0, 3);
        let mut t = Termination::default();
        t.start();
        assert_eq!(t.waiting_for(0, 3), Waiting::Up(vec![1, 2]));
        assert!(t.on_up(&cx, 2).is_ok());
        assert!(!t.step(&mut cx, true), "one child is not up yet");
        assert_eq!(t.waiting_for(0, 3), Waiting::Up(vec![1]));
        assert!(t.on_up(&cx, 5).is_err(), "UP from a non-child");
        assert!(t.on_up(&cx, 1).is_ok());
        assert_eq!(t.waiting_for(0, 3), Waiting::Up(vec![]));
        assert!(t.step(&mut cx, true));
        assert!(!t.awaits_done(), "the root never waits for DONE");
        assert_eq!(t.waiting_for(0, 3), Waiting::Nothing);
        let to: Vec<Rank> = std::iter::from_fn(|| cx.poll_command())
            .map(|c| match c.op {
                crate::Op::Write { peer, signal, .. } => {
                    assert_eq!(signal, Some(Signal::Done.pack()));
                    peer
                }
                op => panic!("{op:?}"),
            })
            .collect();
        assert_eq!(to, [1, 2]);
    }

    /// A rank with UP sent (rank 3 of 4: a leaf) and one that has not.
    fn awaiting_done() -> Termination {
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 3, 4);
        let mut t = Termination::default();
        t.start();
        assert!(!t.step(&mut cx, true));
        assert!(t.awaits_done());
        t
    }

    #[test]
    fn a_gone_peer_fails_at_once_unless_this_rank_awaits_done() {
        let t0 = Time(1_000);
        let gone = || Some((3, "rank 3's process has exited".to_string()));
        let mut working = Termination::default();
        working.start();
        assert_eq!(working.gone_verdict(t0, None), None);
        // Working, or waiting for children: nothing can end the epoch without the peer.
        let (peer, why) = working.gone_verdict(t0, gone()).expect("at once");
        assert_eq!((peer, why.as_str()), (3, "rank 3's process has exited"));
        // Waiting only for DONE: the peer may have had it already; DONE gets its grace.
        let mut w = awaiting_done();
        assert_eq!(w.gone_verdict(t0, None), None);
        assert_eq!(w.gone_verdict(t0, gone()), None);
        let half = t0.plus(DONE_GRACE / 2);
        assert_eq!(w.gone_verdict(half, gone()), None);
        // Another gone peer does not restart the grace; the first one is named, with its
        // own reason.
        let other = || Some((5, "rank 5's process has exited".to_string()));
        assert_eq!(w.gone_verdict(half, other()), None);
        let (peer, why) = w
            .gone_verdict(t0.plus(DONE_GRACE), other())
            .expect("grace over");
        assert_eq!(peer, 3);
        assert!(why.starts_with("rank 3's process has exited"), "{why}");
        assert!(why.contains("DONE did not come within 2s"), "{why}");
    }

    #[test]
    fn the_grace_starts_afresh_after_an_epoch_or_a_clean_sweep() {
        let t0 = Time(1_000);
        let gone = || Some((1, "gone".to_string()));
        let mut w = awaiting_done();
        assert_eq!(w.gone_verdict(t0, gone()), None);
        // A new epoch, its subtree finished again.
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 3, 4);
        w.start();
        assert!(!w.step(&mut cx, true));
        let later = t0.plus(DONE_GRACE * 3);
        assert_eq!(w.gone_verdict(later, gone()), None, "a new epoch's grace");
        assert_eq!(w.gone_verdict(later.plus(DONE_GRACE / 2), None), None);
        assert_eq!(
            w.gone_verdict(later.plus(DONE_GRACE), gone()),
            None,
            "a sweep that found every peer alive restarts the grace"
        );
        assert!(w.gone_verdict(later.plus(DONE_GRACE * 2), gone()).is_some());
    }

    #[test]
    fn a_failed_operation_starts_a_grace_that_sweeps_do_not_clear() {
        let t0 = Time(1_000);
        let mut w = awaiting_done();
        assert_eq!(w.grace_deadline(), None);
        w.op_gone(t0, 6, "steal lock (compare-swap) failed: gone".into());
        assert_eq!(w.grace_deadline(), Some(t0.plus(DONE_GRACE)));
        let half = t0.plus(DONE_GRACE / 2);
        assert_eq!(w.gone_verdict(half, None), None);
        assert_eq!(w.grace_over(half), None);
        // A sweep that sees no gone peer (it may not see that host) keeps the grace; the
        // node's timer at the deadline fails the epoch, naming the operation's peer.
        let (peer, why) = w.grace_over(t0.plus(DONE_GRACE)).expect("grace over");
        assert_eq!(peer, 6);
        assert!(
            why.starts_with("steal lock (compare-swap) failed: gone"),
            "{why}"
        );
        assert!(w.gone_verdict(t0.plus(DONE_GRACE), None).is_some());
        // A later failure does not move the deadline; DONE ends the grace.
        w.op_gone(half, 7, "later".into());
        assert_eq!(w.grace_deadline(), Some(t0.plus(DONE_GRACE)));
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 3, 4);
        assert!(w.on_done(&mut cx, 1).expect("from the parent"));
        assert_eq!(w.grace_deadline(), None);
        assert_eq!(w.grace_over(t0.plus(DONE_GRACE * 2)), None);
        // A new epoch forgets it.
        w.start();
        assert!(!w.step(&mut cx, true));
        assert_eq!(w.grace_deadline(), None);
        // A failed operation during a sweep's grace makes that grace last too.
        assert_eq!(w.gone_verdict(t0, Some((2, "swept".into()))), None);
        w.op_gone(half, 6, "op".into());
        assert_eq!(w.gone_verdict(half, None), None, "not cleared");
        let (peer, why) = w.grace_over(t0.plus(DONE_GRACE)).expect("grace over");
        assert_eq!((peer, why.starts_with("swept")), (2, true));
    }
}
