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
//!
//! A job whose tasks spawn tasks runs waves of counts over the same tree instead
//! ([`waves`]): local completeness no longer says that a subtree is finished.

use crate::ctx::Ctx;
use crate::layout::signal::Signal;
use crate::{CoreError, Memory, Op, Rank, Time};
use std::time::Duration;

/// How long a rank whose subtree finished waits for DONE after it found a peer's process
/// gone (a liveness sweep, or a steal that failed): DONE travels down the tree, so a rank
/// of another subtree may have had it, ended its job and exited while this rank's DONE is
/// still on its way (a relay descheduled on a busy node takes milliseconds). A peer that
/// died before the epoch's end means no DONE ever comes: the epoch fails once this has
/// passed.
pub const DONE_GRACE: Duration = Duration::from_secs(2);

pub(crate) mod waves;

#[cfg(test)]
mod model_check;

pub(crate) use waves::{Report, Waves};

/// This rank's subtree is complete as far as it knows: the moment its timeline shows the
/// barrier from ([`crate::Stats::barrier_at_ns`]).
fn entered_barrier<P>(cx: &mut Ctx<P>) {
    cx.stats.barrier_at_ns = Some(cx.now.since(cx.started).as_nanos() as u64);
}

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
    /// A fixed bag's UP went up (waves keep their own: [`Waves::sent`]).
    sent_up: bool,
    done: bool,
    /// A gone peer first seen while this rank awaited DONE, why, and when.
    gone_since: Option<(Rank, String, Time)>,
    /// That peer was reported by a failed operation ([`Termination::op_gone`]): a sweep
    /// that finds no peer gone does not clear it (the sweep may not see that host).
    gone_by_op: bool,
    /// A spawning job's waves (`None`: a fixed bag, one pass up the tree).
    waves: Option<Waves>,
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
            waves: None,
        }
    }
}

impl Termination {
    /// A new epoch: a fixed bag (`waves` None) or a spawning job's waves.
    pub(crate) fn start(&mut self, waves: Option<Waves>) {
        self.done = false;
        self.children_up = 0;
        self.up_from.clear();
        self.sent_up = false;
        self.gone_since = None;
        self.gone_by_op = false;
        self.waves = waves;
    }

    /// Whether this epoch ends by waves (a spawning job).
    pub(crate) fn has_waves(&self) -> bool {
        self.waves.is_some()
    }

    /// The job's reduction of spawned results, once a spawning epoch ended.
    pub(crate) fn reduced(&self) -> Option<&[u64]> {
        self.waves.as_ref().and_then(Waves::total)
    }

    /// Whether this rank learned that the epoch is over.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether this rank sent its UP: once a fixed bag, for the current wave in waves.
    fn reported(&self) -> bool {
        self.waves.as_ref().map_or(self.sent_up, Waves::sent)
    }

    /// Whether this rank sent UP and waits only for DONE: its subtree finished, and the
    /// epoch's outcome is decided once every other subtree has too.
    pub(crate) fn awaits_done(&self) -> bool {
        self.reported() && !self.done
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
        match &self.waves {
            Some(w) => format!(
                "wave {} sent {} reports [{}, {}]",
                w.wave(),
                w.sent(),
                w.has_report(0),
                w.has_report(1)
            ),
            None => format!("children_up {} sent_up {}", self.children_up, self.sent_up),
        }
    }

    /// What this rank waits for before the epoch can end here: nothing (it ended), DONE
    /// from its parent (it sent UP), or UP from these children.
    pub(crate) fn waiting_for(&self, rank: Rank, size: u32) -> Waiting {
        if self.done {
            Waiting::Nothing
        } else if self.reported() {
            Waiting::Done(tree_parent(rank).unwrap_or(0))
        } else if let Some(w) = &self.waves {
            Waiting::Up(
                tree_children(rank, size)
                    .enumerate()
                    .filter(|&(place, _)| !w.has_report(place))
                    .map(|(_, c)| c)
                    .collect(),
            )
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
        entered_barrier(cx);
        match tree_parent(cx.rank) {
            Some(p) => {
                self.sent_up = true;
                cx.signal(p, Signal::Up { wave: 0 }, Pending::Up);
                false
            }
            None => self.finish(cx, None),
        }
    }

    /// A spawning job's step ([`waves`]): this rank is `ready` (locally complete, its
    /// queue empty, its workers idle), with its `own` counts. Returns whether the epoch
    /// ended here now (the root).
    pub(crate) fn step_wave<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        mem: &dyn Memory,
        ready: bool,
        own: impl FnOnce() -> Report,
    ) -> Result<bool, CoreError> {
        let Some(w) = self.waves.as_mut().filter(|_| !self.done) else {
            return Ok(false);
        };
        let children: Vec<Rank> = tree_children(cx.rank, cx.size).collect();
        let parent = tree_parent(cx.rank);
        let place = (cx.rank + 1) as usize % 2;
        match w.step(mem, ready, own, &children, parent.is_some(), place)? {
            waves::Next::Wait => Ok(false),
            waves::Next::Report {
                from,
                to,
                len,
                wave,
            } => {
                entered_barrier(cx);
                cx.issue(
                    Op::Write {
                        peer: parent.expect("a rank that reports has a parent"),
                        remote: to,
                        pieces: vec![(from, len)],
                        signal: Some(Signal::Up { wave }.pack()),
                    },
                    Pending::Up,
                );
                Ok(false)
            }
            waves::Next::Again { wave } => {
                for c in children {
                    cx.signal(c, Signal::Done { again: true, wave }, Pending::Done);
                }
                Ok(false)
            }
            waves::Next::End => {
                entered_barrier(cx);
                Ok(self.finish(cx, Some(mem)))
            }
        }
    }

    /// UP(`wave`) from `from`, which must be a child.
    pub(crate) fn on_up<P>(
        &mut self,
        cx: &Ctx<P>,
        from: Rank,
        wave: u32,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        if let Some(place) = tree_children(cx.rank, cx.size).position(|c| c == from) {
            if let Some(w) = &mut self.waves {
                return w.on_up(mem, from, place, wave);
            }
            if wave != 0 || self.up_from.contains(&from) {
                return Err(CoreError::Malformed {
                    from,
                    what: format!("termination UP (wave {wave}) sent twice or in a fixed bag"),
                });
            }
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

    /// DONE from `from`, which must be the parent: the end, or (`again`, waves only)
    /// wave `wave` begins. Returns whether the epoch ended here now.
    pub(crate) fn on_done<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        from: Rank,
        again: bool,
        wave: u32,
        mem: &dyn Memory,
    ) -> Result<bool, CoreError> {
        if tree_parent(cx.rank) == Some(from) {
            match &mut self.waves {
                Some(_) if self.done => Err(CoreError::Malformed {
                    from,
                    what: "termination DONE after the end".into(),
                }),
                Some(w) if again => {
                    w.on_again(from, wave)?;
                    for c in tree_children(cx.rank, cx.size) {
                        cx.signal(c, Signal::Done { again, wave }, Pending::Done);
                    }
                    Ok(false)
                }
                Some(w) => {
                    w.on_end(mem, from)?;
                    Ok(self.finish(cx, Some(mem)))
                }
                None if again || wave != 0 => Err(CoreError::Malformed {
                    from,
                    what: format!("termination DONE (again {again}, wave {wave}) in a fixed bag"),
                }),
                None => Ok(self.finish(cx, None)),
            }
        } else {
            Err(CoreError::Malformed {
                from,
                what: "termination DONE from a rank that is not the parent".into(),
            })
        }
    }

    /// Step 2 and 3: the epoch is over; DONE goes to the children (with the job's
    /// reduction, in waves: `mem` stages it).
    fn finish<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, mem: Option<&dyn Memory>) -> bool {
        if self.done {
            return false;
        }
        self.done = true;
        let done = Signal::Done {
            again: false,
            wave: 0,
        };
        let staged = self
            .waves
            .as_ref()
            .zip(mem)
            .map(|(w, mem)| w.stage_end(mem));
        for c in tree_children(cx.rank, cx.size) {
            match staged {
                Some((from, to, len)) => {
                    let wave = self.waves.as_ref().map_or(0, Waves::wave) & waves::WAVE_MASK;
                    cx.issue(
                        Op::Write {
                            peer: c,
                            remote: to,
                            pieces: vec![(from, len)],
                            signal: Some(Signal::Done { again: false, wave }.pack()),
                        },
                        Pending::Done,
                    );
                }
                None => cx.signal(c, done, Pending::Done),
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use crate::ctx::testing::Mem;

    fn mem() -> Mem {
        Mem::new([0, 0, 0, 4096])
    }

    #[test]
    fn a_leaf_reports_up_once_and_stops_on_done() {
        // Rank 3 of 4: parent 1, no children.
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 3, 4);
        let mut t = Termination::default();
        t.start(None);
        assert!(!t.awaits_done());
        assert!(!t.step(&mut cx, false), "not complete: nothing");
        assert!(cx.poll_command().is_none());
        assert!(!t.step(&mut cx, true));
        let up = cx.poll_command().expect("UP");
        assert!(
            matches!(up.op, crate::Op::Write { peer: 1, signal: Some(s), .. } if s == Signal::Up { wave: 0 }.pack()),
            "{up:?}"
        );
        assert_eq!(t.waiting_for(3, 4), Waiting::Done(1));
        assert!(t.awaits_done(), "UP sent: only DONE is missing");
        assert!(!t.step(&mut cx, true), "UP is sent once");
        assert!(cx.poll_command().is_none());
        assert!(
            t.on_done(&mut cx, 2, false, 0, &mem()).is_err(),
            "DONE from a non-parent"
        );
        assert!(t.on_done(&mut cx, 1, false, 0, &mem()).unwrap());
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
        t.start(None);
        assert_eq!(t.waiting_for(0, 3), Waiting::Up(vec![1, 2]));
        assert!(t.on_up(&cx, 2, 0, &mem()).is_ok());
        assert!(!t.step(&mut cx, true), "one child is not up yet");
        assert_eq!(t.waiting_for(0, 3), Waiting::Up(vec![1]));
        assert!(t.on_up(&cx, 5, 0, &mem()).is_err(), "UP from a non-child");
        assert!(t.on_up(&cx, 1, 0, &mem()).is_ok());
        assert_eq!(t.waiting_for(0, 3), Waiting::Up(vec![]));
        assert!(t.step(&mut cx, true));
        assert!(!t.awaits_done(), "the root never waits for DONE");
        assert_eq!(t.waiting_for(0, 3), Waiting::Nothing);
        let to: Vec<Rank> = std::iter::from_fn(|| cx.poll_command())
            .map(|c| match c.op {
                crate::Op::Write { peer, signal, .. } => {
                    assert_eq!(
                        signal,
                        Some(
                            Signal::Done {
                                again: false,
                                wave: 0
                            }
                            .pack()
                        )
                    );
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
        t.start(None);
        assert!(!t.step(&mut cx, true));
        assert!(t.awaits_done());
        t
    }

    #[test]
    fn a_gone_peer_fails_at_once_unless_this_rank_awaits_done() {
        let t0 = Time(1_000);
        let gone = || Some((3, "rank 3's process has exited".to_string()));
        let mut working = Termination::default();
        working.start(None);
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
        w.start(None);
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
        assert!(
            w.on_done(&mut cx, 1, false, 0, &mem())
                .expect("from the parent")
        );
        assert_eq!(w.grace_deadline(), None);
        assert_eq!(w.grace_over(t0.plus(DONE_GRACE * 2)), None);
        // A new epoch forgets it.
        w.start(None);
        assert!(!w.step(&mut cx, true));
        assert_eq!(w.grace_deadline(), None);
        // A failed operation during a sweep's grace makes that grace last too.
        assert_eq!(w.gone_verdict(t0, Some((2, "swept".into()))), None);
        w.op_gone(half, 6, "op".into());
        assert_eq!(w.gone_verdict(half, None), None, "not cleared");
        let (peer, why) = w.grace_over(t0.plus(DONE_GRACE)).expect("grace over");
        assert_eq!((peer, why.starts_with("swept")), (2, true));
    }

    /// Three ranks (0 the root, 1 and 2 its children) running waves: each with its
    /// context, termination and memory; writes are delivered by hand.
    struct Job {
        cx: Vec<Ctx<Pending>>,
        t: Vec<Termination>,
        mem: Vec<Mem>,
    }

    fn sum_max() -> crate::spawn::Spawning {
        use crate::spawn::ReduceOp;
        crate::spawn::Spawning::reduced(vec![ReduceOp::Sum, ReduceOp::Max])
    }

    impl Job {
        fn new() -> Self {
            let mut j = Job {
                cx: (0..3).map(|r| Ctx::new(Config::default(), r, 3)).collect(),
                t: (0..3).map(|_| Termination::default()).collect(),
                mem: (0..3).map(|_| Mem::new([0, 0, 0, waves::REGION])).collect(),
            };
            for t in &mut j.t {
                t.start(Some(Waves::new(sum_max(), 0)));
            }
            j
        }

        /// Rank `r` steps with these counts; returns whether the epoch ended there.
        fn step(&mut self, r: usize, created: u64, completed: u64, lanes: [u64; 2]) -> bool {
            let own = || Report {
                created,
                completed,
                delivered: 0,
                lanes: lanes.to_vec(),
            };
            self.t[r]
                .step_wave(&mut self.cx[r], &self.mem[r], true, own)
                .expect("a step")
        }

        /// Delivers every command rank `r` issued; returns how many.
        fn deliver(&mut self, r: usize) -> Result<usize, CoreError> {
            let mut n = 0;
            while let Some(c) = self.cx[r].poll_command() {
                let w = Landing::of(&self.mem[r], c.op);
                let p = w.peer as usize;
                w.land(r as Rank, &mut self.cx[p], &mut self.t[p], &self.mem[p])?;
                n += 1;
            }
            Ok(n)
        }
    }

    /// A wave's write, its bytes gathered from the sender's memory: what lands where.
    pub(super) struct Landing {
        pub(super) peer: Rank,
        remote: crate::Loc,
        bytes: Vec<u8>,
        signal: u64,
    }

    impl Landing {
        /// The write `op`, its pieces read from `mem`.
        pub(super) fn of(mem: &Mem, op: crate::Op) -> Self {
            let crate::Op::Write {
                peer,
                remote,
                pieces,
                signal,
            } = op
            else {
                panic!("a wave sends writes, not {op:?}")
            };
            let mut bytes = Vec::new();
            for (loc, len) in pieces {
                let mut buf = vec![0; len as usize];
                mem.read(loc, &mut buf);
                bytes.extend(buf);
            }
            Self {
                peer,
                remote,
                bytes,
                signal: signal.expect("a wave's write signals"),
            }
        }

        /// It lands at the receiver (its context, termination, memory): the bytes, then
        /// the signal from `from`.
        pub(super) fn land(
            &self,
            from: Rank,
            cx: &mut Ctx<Pending>,
            t: &mut Termination,
            mem: &Mem,
        ) -> Result<(), CoreError> {
            mem.write(self.remote, &self.bytes);
            match Signal::unpack(self.signal, from)? {
                Signal::Up { wave } => t.on_up(cx, from, wave, mem),
                Signal::Done { again, wave } => t.on_done(cx, from, again, wave, mem).map(drop),
                s => panic!("{s:?}"),
            }
        }
    }

    #[test]
    fn waves_end_after_two_equal_balanced_waves_with_the_reduction() {
        let mut j = Job::new();
        // Wave 0: rank 1 spawned 2 tasks; rank 2 completed both (stolen).
        assert!(!j.step(1, 2, 0, [5, 1]));
        assert!(!j.step(2, 0, 2, [7, 9]));
        assert_eq!(j.deliver(1).unwrap() + j.deliver(2).unwrap(), 2);
        assert!(!j.step(0, 0, 0, [1, 3]), "one wave proves nothing");
        assert_eq!(j.deliver(0).unwrap(), 2, "the next wave begins");
        assert_eq!(j.t[1].waves.as_ref().unwrap().wave(), 1);
        // Wave 1: nothing moved; the root ends the epoch with the reduction.
        assert!(!j.step(1, 2, 0, [5, 1]));
        assert!(!j.step(2, 0, 2, [7, 9]));
        j.deliver(1).unwrap();
        j.deliver(2).unwrap();
        assert!(j.step(0, 0, 0, [1, 3]));
        assert_eq!(j.t[0].reduced(), Some(&[13, 9][..]));
        assert_eq!(j.deliver(0).unwrap(), 2);
        for r in 1..3 {
            assert!(j.t[r].is_done());
            assert_eq!(j.t[r].reduced(), Some(&[13, 9][..]), "rank {r}");
        }
    }

    #[test]
    fn a_wave_that_saw_work_move_or_a_task_missing_starts_another() {
        let mut j = Job::new();
        // Wave 0: a created task is not complete.
        j.step(1, 1, 0, [0, 0]);
        j.step(2, 0, 0, [0, 0]);
        j.deliver(1).unwrap();
        j.deliver(2).unwrap();
        assert!(!j.step(0, 0, 0, [0, 0]));
        j.deliver(0).unwrap();
        // Wave 1: balanced now, but it differs from wave 0: one more wave.
        j.step(1, 1, 0, [0, 0]);
        j.step(2, 0, 1, [4, 0]);
        j.deliver(1).unwrap();
        j.deliver(2).unwrap();
        assert!(
            !j.step(0, 0, 0, [0, 0]),
            "the sums moved since the last wave"
        );
        j.deliver(0).unwrap();
        // Wave 2: the same again: the end.
        j.step(1, 1, 0, [0, 0]);
        j.step(2, 0, 1, [4, 0]);
        j.deliver(1).unwrap();
        j.deliver(2).unwrap();
        assert!(j.step(0, 0, 0, [0, 0]));
        assert_eq!(j.t[0].reduced(), Some(&[4, 0][..]));
    }

    #[test]
    fn a_rank_not_ready_holds_the_wave() {
        let mut j = Job::new();
        let own = || Report {
            created: 0,
            completed: 0,
            delivered: 0,
            lanes: vec![0, 0],
        };
        assert!(
            !j.t[1]
                .step_wave(&mut j.cx[1], &j.mem[1], false, own)
                .unwrap()
        );
        assert_eq!(j.deliver(1).unwrap(), 0, "no report while busy");
        j.step(2, 0, 0, [0, 0]);
        j.deliver(2).unwrap();
        assert!(!j.step(0, 0, 0, [0, 0]), "rank 1 has not reported");
        assert_eq!(j.t[0].waiting_for(0, 3), Waiting::Up(vec![1]));
    }

    #[test]
    fn out_of_turn_wave_signals_are_refused_naming_the_sender() {
        let mut j = Job::new();
        let (cx, t, mem) = (&mut j.cx[0], &mut j.t[0], &j.mem[0]);
        let e = t.on_up(cx, 1, 3, mem).unwrap_err();
        assert!(
            e.to_string().contains("rank 1") && e.to_string().contains("wave 3"),
            "{e}"
        );
        // A DONE(again) before this rank reported.
        let (cx, t) = (&mut j.cx[1], &mut j.t[1]);
        let e = t.on_done(cx, 0, true, 1, &j.mem[1]).unwrap_err();
        assert!(e.to_string().contains("had not yet reported"), "{e}");
        // A report whose slot names another wave than its signal.
        j.step(1, 0, 0, [0, 0]);
        j.deliver(1).unwrap();
        j.step(2, 0, 0, [0, 0]);
        let mut c = j.cx[2].poll_command().unwrap();
        if let crate::Op::Write { signal, .. } = &mut c.op {
            *signal = Some(Signal::Up { wave: 0 }.pack());
        }
        j.mem[0].write(
            crate::Loc::new(crate::layout::seg::START, waves::SLOT),
            &5u64.to_le_bytes(),
        );
        let e = j.t[0].on_up(&j.cx[0], 2, 0, &j.mem[0]).unwrap_err();
        assert!(e.to_string().contains("the slot names wave 5"), "{e}");
    }
}
