//! The thief: whom to ask, and the thief's side of each steal protocol.
//!
//! # Victim choice
//!
//! The victim of the last successful steal first, while it is not found empty (a loaded
//! victim is drained by its in-neighbours alone, so they should keep at it); otherwise
//! uniform among targets not in backoff. Empty doubles a victim's backoff (from
//! `backoff_base` to `backoff_max`); Locked waits `backoff_base`; a success clears it. A
//! thief with every victim backed off sleeps until the first backoff ends; a thief over
//! the complete graph also pauses after each round of empty finds
//! ([`crate::neighbours::Backoff`]). The targets are the overlay out-neighbours, or under
//! work sharing this epoch's master (`crate::share`).
//!
//! # The protocols, one file each
//!
//! - [`claim`](self::claim): a ticket, a batch read, a done count;
//! - [`lock`](self::lock): a lock, a count and the tasks read, the lock handed back;
//! - [`request`](self::request): REQUEST and REPLY, the victim copying;
//! - per-type requests ([`typed`](self::typed)), pushes awaited ([`push`](self::push)),
//!   the blacklist and advertisements ([`blacklist`](self::blacklist)).

mod blacklist;
mod claim;
mod lock;
mod push;
mod request;
#[cfg(test)]
mod tests;
mod typed;

pub(crate) use blacklist::advertised;
use typed::Typed;
pub(crate) use typed::typed;

use super::TaskArea;
use crate::ctx::Ctx;
use crate::layout::Task;
use crate::layout::signal::Signal;
use crate::mapper::{Mapper, Victims};
use crate::neighbours::{Backoff, Neighbours};
use crate::{CoreError, Memory, Protocol, Rank, STEAL_LOG_MAX, StealEvent, StealOutcome, Time};
use titus_overlay::rng::Rng;

/// A REQUEST carries the thief's epoch modulo 2^20.
pub(crate) const EPOCH_MASK: u64 = (1 << crate::layout::signal::EPOCH_BITS) - 1;

/// An attempt in progress.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    victim: usize,
    started: Time,
    seq: u64,
    /// A typed request: resource type + 1 (0: any work).
    rtype: u16,
}

/// Outcome of an attempt: a victim found locked or empty is information for victim
/// choice, not an error.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Tasks, and the bytes that moved for them.
    Got(u64, u64),
    Empty,
    Locked,
    /// A typed request's victim has no task of the type this epoch.
    Unsupported,
}

/// A `claim` batch being read: from which target, which region, how many slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimedBatch {
    pub(crate) victim: usize,
    pub(crate) region: usize,
    pub(crate) len: u16,
    /// This thief took the generation's last batch.
    pub(crate) last: bool,
}

/// The thief's operations in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    ClaimTicket {
        victim: usize,
    },
    ClaimRead(ClaimedBatch),
    ClaimDone {
        victim: usize,
        last: bool,
    },
    LockAcquire {
        victim: usize,
    },
    LockCount {
        victim: usize,
    },
    LockRead {
        victim: usize,
        n: u16,
    },
    LockRelease {
        victim: usize,
        outcome: Outcome,
    },
    RequestSent {
        victim: usize,
    },
    /// REFILL, to the owner whose shared set this thief emptied.
    RefillHint {
        victim: usize,
    },
    /// WAIT, to a victim this thief found empty and blacklisted.
    WaitSent {
        victim: usize,
    },
}

impl Pending {
    /// The target (index) the operation went to.
    fn victim(&self) -> usize {
        match self {
            Self::ClaimTicket { victim }
            | Self::ClaimRead(ClaimedBatch { victim, .. })
            | Self::ClaimDone { victim, .. }
            | Self::LockAcquire { victim }
            | Self::LockCount { victim }
            | Self::LockRead { victim, .. }
            | Self::LockRelease { victim, .. }
            | Self::RequestSent { victim }
            | Self::RefillHint { victim }
            | Self::WaitSent { victim } => *victim,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::ClaimTicket { .. } => "claim ticket (fetch-add)",
            Self::ClaimRead(_) => "claimed batch read",
            Self::ClaimDone { .. } => "claim done count (fetch-add)",
            Self::LockAcquire { .. } => "steal lock (compare-swap)",
            Self::LockCount { .. } => "shared count read",
            Self::LockRead { .. } => "shared tasks read",
            Self::LockRelease { .. } => "steal unlock (compare-swap)",
            Self::RequestSent { .. } => "steal request",
            Self::RefillHint { .. } => "refill hint",
            Self::WaitSent { .. } => "wait for advertisement",
        }
    }
}

/// Thief-side state.
#[derive(Debug)]
pub(crate) struct Thief {
    /// Whom it asks: the victims, or (work sharing) this epoch's master.
    targets: Neighbours,
    attempt: Option<Attempt>,
    /// Per target: backed off until, consecutive empty finds.
    backoff: Backoff,
    seq: u64,
    /// The victim of the last successful steal: asked first while it has work.
    last_ok: Option<usize>,
    /// Victim choice (seeded per rank and epoch).
    rng: Rng,
    area: TaskArea,
    /// This rank's workers have nothing to run ([`Thief::set_workers_idle`]): a WAIT says so,
    /// which lets the victim share its last queued task.
    workers_idle: bool,
    /// The string plan: predicted work pushed here this epoch ([`Thief::expect_push`]),
    /// ns, and how much of it has not arrived.
    push_expected: u64,
    push_left: u64,
    /// Diffusion: givers whose last chunk has not come (the neighbours' plan), and when
    /// this rank stops waiting for pushes ([`Thief::push_hold`]).
    push_givers: usize,
    push_until: Time,
    typed: Typed,
}

impl Thief {
    /// A thief of `targets` for a job of `types` resource types (per-type backoffs).
    pub(crate) fn new(targets: Neighbours, area: TaskArea, rng: Rng, types: usize) -> Self {
        Self {
            backoff: Backoff::new(&targets),
            typed: Typed {
                backoff: (0..types).map(|_| Backoff::new(&targets)).collect(),
                ..Typed::default()
            },
            targets,
            attempt: None,
            seq: 0,
            last_ok: None,
            rng,
            area,
            workers_idle: false,
            push_expected: 0,
            push_left: 0,
            push_givers: 0,
            push_until: Time(0),
        }
    }

    /// A new epoch: its victim-choice stream, backoffs forgotten.
    pub(crate) fn start_epoch(&mut self, rng: Rng) {
        self.rng = rng;
        self.backoff.reset();
        self.last_ok = None;
        self.push_expected = 0;
        self.push_left = 0;
        self.push_givers = 0;
        self.push_until = Time(0);
        self.typed.backoff.iter_mut().for_each(Backoff::reset);
        self.typed.fetched.clear();
        self.typed.total = 0.0;
        self.typed.last = None;
    }

    /// A steal is under way.
    pub(crate) fn is_stealing(&self) -> bool {
        self.attempt.is_some()
    }

    /// New targets (work sharing: the master rotates).
    pub(crate) fn set_targets(&mut self, targets: Neighbours) {
        self.backoff = Backoff::new(&targets);
        for b in &mut self.typed.backoff {
            *b = Backoff::new(&targets);
        }
        self.targets = targets;
        self.last_ok = None;
    }

    /// Whether it has anyone to ask.
    pub(crate) fn has_targets(&self) -> bool {
        !self.targets.is_empty()
    }

    /// The rank an operation went to.
    pub(crate) fn peer(&self, p: &Pending) -> Rank {
        self.targets.at(p.victim())
    }

    /// An operation of this thief failed because its peer's process is gone, and the
    /// epoch may end without that peer (`Node::gone_tolerated`): the attempt on it ends
    /// empty, and it is not asked again before the grace is over.
    pub(crate) fn abandon<P>(&mut self, cx: &mut Ctx<P>, p: &Pending) {
        let victim = p.victim();
        let now = cx.now;
        if let Some(a) = self.attempt.filter(|a| a.victim == victim) {
            self.attempt = None;
            cx.stats
                .steal_latency_ns
                .push(now.since(a.started).as_nanos() as u64);
            cx.stats.steals_empty += 1;
        }
        if self.last_ok == Some(victim) {
            self.last_ok = None;
        }
        let until = now.plus(crate::DONE_GRACE);
        self.backoff.hold(victim, until, now);
        for b in &mut self.typed.backoff {
            b.hold(victim, until, now);
        }
    }

    pub(crate) fn summary(&self) -> String {
        format!(
            "thief {:?} blacklisted {} ",
            self.attempt.map(|a| (self.targets.at(a.victim), a.seq)),
            self.backoff.blacklisted()
        )
    }

    /// Whether it steals now: no attempt running, someone to ask, and fewer than
    /// `steal_below` tasks queued or (per-type requests) a resource type short (`short`,
    /// a mask of types).
    fn wants_to_steal(&self, queued: usize, short: u64, cfg: &crate::Config) -> bool {
        // Under `claim` and `lock` (no typed requests) a starved type alone would take any
        // work, to hold what it cannot run: only a dry queue steals there.
        let want = queued < cfg.steal_below as usize || (typed(cfg) && short != 0);
        self.attempt.is_none() && !self.targets.is_empty() && want
    }

    pub(crate) fn deadline(&self, queued: usize, short: u64, cfg: &crate::Config) -> Option<Time> {
        if !self.wants_to_steal(queued, short, cfg) {
            return None;
        }
        if typed(cfg) {
            let typed = (0..self.typed.backoff.len())
                .filter(|t| short >> t & 1 == 1)
                .filter_map(|t| self.typed.backoff[t].earliest())
                .min();
            // A dry queue also relays any work (module doc).
            let dry = (queued < cfg.steal_below as usize)
                .then(|| self.backoff.earliest())
                .flatten();
            return typed.into_iter().chain(dry).min();
        }
        self.backoff.earliest()
    }

    /// Starts an attempt on target `victim` (typed: `rtype` > 0); returns its sequence
    /// number.
    fn begin<P>(&mut self, cx: &mut Ctx<P>, victim: usize, rtype: u16) -> u64 {
        self.seq += 1;
        self.attempt = Some(Attempt {
            victim,
            started: cx.now,
            seq: self.seq,
            rtype,
        });
        cx.stats.steal_attempts += 1;
        self.seq
    }

    /// Starts an attempt if the thief wants one and a target is ready. Returns the
    /// attempt's sequence number when this rank is its own target (work sharing's
    /// master): the node brokers that request and calls [`Thief::end_unanswered`] unless
    /// it was forwarded.
    pub(crate) fn step<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        queued: usize,
        short: u64,
        mapper: &mut dyn Mapper,
    ) -> Option<u64> {
        if !self.wants_to_steal(queued, short, &cx.cfg) {
            return None;
        }
        if typed(&cx.cfg) && (self.step_typed(cx, short) || queued >= cx.cfg.steal_below as usize) {
            return None;
        }
        let now = cx.now;
        // The mapper's choice; by default a victim that just gave work (or advertised) is
        // asked again first (it leaves the favour when it is found empty), otherwise
        // uniform among the ready ones.
        let mut victims = Victims {
            targets: &self.targets,
            backoff: &self.backoff,
            now,
            favourite: self.last_ok,
            rng: &mut self.rng,
        };
        let victim = mapper
            .target_steal(&mut victims)
            .filter(|&v| v < self.targets.len())?;
        let peer = self.targets.at(victim);
        let seq = self.begin(cx, victim, 0);
        match cx.cfg.protocol {
            Protocol::Claim => self.claim_begin(cx, victim),
            Protocol::Lock => self.lock_begin(cx, victim),
            // Work sharing: this rank is the master and brokers its own request.
            Protocol::Request if peer == cx.rank => return Some(seq),
            Protocol::Request => self.send_request(cx, victim, seq, 0),
        }
        None
    }

    /// The master's own request found nobody to forward it to: the attempt ends empty.
    pub(crate) fn end_unanswered<P: From<Pending>>(&mut self, cx: &mut Ctx<P>) {
        if let Some(a) = self.attempt {
            self.end_attempt(cx, a.victim, Outcome::Empty);
        }
    }

    fn end_attempt<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, victim: usize, outcome: Outcome) {
        let from = self.targets.at(victim);
        self.end_attempt_from(cx, victim, outcome, from);
    }

    /// Ends the attempt on target `victim`, answered by rank `from` (under work sharing
    /// the master's choice, not the master).
    fn end_attempt_from<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victim: usize,
        outcome: Outcome,
        from: Rank,
    ) {
        let now = cx.now;
        let stats = &mut cx.stats;
        let (mut rtype, mut latency_ns) = (0, 0);
        if let Some(a) = self.attempt.take() {
            latency_ns = now.since(a.started).as_nanos() as u64;
            stats.steal_ns += latency_ns;
            if cx.cfg.steal_log {
                stats.steal_latency_ns.push(latency_ns);
            }
            rtype = a.rtype;
        }
        let logged = match outcome {
            Outcome::Got(n, bytes) => {
                stats.steals_ok += 1;
                stats.tasks_stolen += n;
                stats.bytes_stolen += bytes;
                Some((n as u32, StealOutcome::Got))
            }
            Outcome::Empty if cx.cfg.timeline => Some((0, StealOutcome::Empty)),
            Outcome::Locked if cx.cfg.timeline => Some((0, StealOutcome::Locked)),
            _ => None,
        };
        if let Some((tasks, outcome)) = logged
            && cx.cfg.steal_log
            && stats.steal_log.len() < STEAL_LOG_MAX
        {
            stats.steal_log.push(StealEvent {
                at_ns: now.since(cx.started).as_nanos() as u64,
                victim: from,
                tasks,
                latency_ns,
                outcome,
            });
        }
        if rtype > 0 {
            // A typed attempt: its own backoff; no favourite, blacklist or WAIT.
            let b = &mut self.typed.backoff[usize::from(rtype) - 1];
            match outcome {
                Outcome::Got(..) => b.success(victim),
                Outcome::Empty | Outcome::Locked => {
                    b.empty(victim, now, &cx.cfg);
                    stats.steals_empty += 1;
                }
                Outcome::Unsupported => {
                    // Not asked for this type again for the longest backoff: work it has
                    // never held may still reach it (relays), so not for the epoch.
                    b.empty(victim, now, &cx.cfg);
                    b.hold(victim, now.plus(cx.cfg.backoff_max.saturating_mul(16)), now);
                    stats.steals_empty += 1;
                }
            }
            return;
        }
        match outcome {
            Outcome::Got(..) => {
                self.backoff.success(victim);
                self.last_ok = Some(victim);
            }
            Outcome::Empty => {
                if self.last_ok == Some(victim) {
                    self.last_ok = None;
                }
                stats.steals_empty += 1;
                if advertised(&cx.cfg) {
                    // Not again until it advertises. Under `claim` and `lock` the victim
                    // saw nothing of this attempt: tell it to advertise here.
                    self.backoff.blacklist(victim, now, &cx.cfg);
                    if cx.cfg.protocol != Protocol::Request {
                        let wait = Signal::Wait {
                            epoch: cx.epoch & EPOCH_MASK,
                            workers_idle: self.workers_idle,
                        };
                        cx.signal(from, wait, Pending::WaitSent { victim });
                    }
                } else {
                    self.backoff.empty(victim, now, &cx.cfg);
                }
            }
            Outcome::Locked => {
                self.backoff.locked(victim, now, &cx.cfg);
                stats.steals_locked += 1;
            }
            Outcome::Unsupported => {
                self.backoff.empty(victim, now, &cx.cfg);
                stats.steals_empty += 1;
            }
        }
    }

    /// One of its operations completed with `value`. Returns the tasks it stole, if it
    /// stole (the node queues them). Each protocol's steps are in its own file.
    pub(crate) fn complete<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        p: Pending,
        value: u64,
        mem: &dyn Memory,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        match p {
            Pending::ClaimTicket { victim } => self.claim_ticket(cx, victim, value),
            Pending::ClaimRead(batch) => self.claim_read(cx, batch, mem),
            Pending::ClaimDone { victim, last } => self.claim_done(cx, victim, last),
            Pending::LockAcquire { victim } => self.lock_acquired(cx, victim, value),
            Pending::LockCount { victim } => self.lock_counted(cx, victim, mem),
            Pending::LockRead { victim, n } => self.lock_read(cx, victim, n, mem),
            Pending::LockRelease { victim, outcome } => {
                self.lock_released(cx, victim, outcome, value)
            }
            // Signals: nothing to do once delivered.
            Pending::RequestSent { .. } | Pending::RefillHint { .. } | Pending::WaitSent { .. } => {
                Ok(None)
            }
        }
    }
}
