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
//! # `claim`
//!
//! 1. Fetch-add 1 on the victim's claim word. The old word names the generation, its size
//!    and this thief's ticket, hence its batch ([`crate::layout::claim_batch`]); an empty
//!    batch is the outcome Empty.
//! 2. Read the batch's slots into the staging area.
//! 3. Fetch-add 1 on the region's *done* counter, after the read completed: the owner may
//!    now reuse the region. The thief that held the generation's last ticket then signals
//!    REFILL, so the owner publishes the next generation without waiting for its check.
//!
//! # `lock`
//!
//! 1. CAS the lock word AVAILABLE → held by this thief (else Locked).
//! 2. Read the task count. 3. Read the tasks.
//! 4. CAS held → REFILL, which unlocks and tells the owner the set is gone (an empty set
//!    is released back to AVAILABLE instead), then signal REFILL as a hint.
//!
//! # `request`
//!
//! Signal REQUEST; the victim answers REPLY(n) behind the tasks it wrote into the staging
//! area. A thief that learns of the epoch's end stops waiting, so requests and replies can
//! outlive their epoch: requests carry the epoch (a victim answers another epoch's request
//! with nothing) and a sequence number (a thief ignores a reply that is not its attempt's).
//! Only empty replies can be stale — a reply with tasks keeps its epoch alive.
//!
//! # Per-type requests (`Config::resource_types`, issue #16)
//!
//! Under `request` (stealing, no work sharing) a rank with resource types asks for work
//! of a *short* type only — one whose idle instances find nothing runnable in the queue
//! (the node computes it), accelerators before the CPU (the highest type first, as
//! BOINC's work fetch asks for its coprocessors first, then the short types in turn) — and
//! the REQUEST carries the type.
//! The victim answers with tasks of that type's kinds, nothing, or *unsupported* (no task
//! of those kinds was ever queued there this epoch). Backoff is kept per (victim, type):
//! nothing doubles it, unsupported holds the victim off for that type for 16 × the longest
//! backoff (not for good: work of the type may still reach it), work clears it. Among the
//! victims ready for the type the thief asks one that gave last time (or was never
//! asked), else one with the fewest nothing-answers in a row, and among those the one it
//! owes most: its *debt* is an equal share of all the work this thief fetched this epoch
//! less what it fetched from that victim, counted in estimated CPU time — instance-seconds
//! weighted by speed, since a task's estimate is its cost on a CPU worker wherever it
//! runs (BOINC's long-term debt summed over resources by speed). A victim that has
//! supplied nothing yet is owed most. Rows of more than [`DEBT_SCAN_MAX`] targets (the
//! complete graph at scale) draw a ready victim instead.
//!
//! A thief whose queue is dry and whose short types have no ready victim left (each
//! answered nothing or unsupported) steals any work, as without types: over a sparse
//! overlay a task may sit on ranks none of whose in-neighbours can run it, and such
//! relays carry it on until a rank that can run it asks (the victim keeps no task
//! private that it cannot run itself, and its mapper cannot keep one either).

use super::{TaskArea, tasks_loc};
use crate::ctx::Ctx;
use crate::layout::signal::{SEQ_MASK, Signal};
use crate::layout::{ClaimWord, Task, claim_batch, claim_batches, lock, seg, tasks};
use crate::mapper::{Mapper, Victims};
use crate::neighbours::{Backoff, Neighbours};
use crate::{CoreError, Loc, Memory, Op, Protocol, Rank, STEAL_LOG_MAX, StealEvent, Time};
use titus_overlay::rng::Rng;

/// A REQUEST carries the thief's epoch modulo 2^20.
pub(crate) const EPOCH_MASK: u64 = (1 << crate::layout::signal::EPOCH_BITS) - 1;

/// Whether thieves blacklist empty victims and wait for their advertisements
/// ([`crate::Config::advertise`]; stealing only: a work-sharing master is never
/// blacklisted).
pub(crate) fn advertised(cfg: &crate::Config) -> bool {
    cfg.advertise && cfg.sharing.is_none()
}

/// Per-type requests scan at most this many targets for the most owed one.
pub(crate) const DEBT_SCAN_MAX: usize = 256;

/// An attempt in progress.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    victim: usize,
    started: Time,
    seq: u64,
    /// A typed request: resource type + 1 (0: any work).
    rtype: u16,
}

/// Per-type requests: per type, each target's backoff; the work fetched per victim.
#[derive(Debug, Default)]
struct Typed {
    backoff: Vec<Backoff>,
    /// Estimated work fetched this epoch per victim, and in all (ns).
    fetched: crate::fasthash::IntMap<Rank, f64>,
    total: f64,
    /// The type asked for last.
    last: Option<usize>,
}

impl Typed {
    /// What this thief owes `victim`: an equal share of the work fetched less its part.
    fn debt(&self, victim: Rank) -> f64 {
        let n = self.fetched.len().max(1) as f64;
        self.total / n - self.fetched.get(&victim).copied().unwrap_or(0.0)
    }
}

/// Whether this job's thieves make per-type requests.
pub(crate) fn typed(cfg: &crate::Config) -> bool {
    !cfg.resource_types.is_empty() && cfg.protocol == Protocol::Request && cfg.sharing.is_none()
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

/// The thief's operations in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    ClaimTicket {
        victim: usize,
    },
    ClaimRead {
        victim: usize,
        region: usize,
        len: u16,
        /// This thief took the generation's last batch.
        last: bool,
    },
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
            | Self::ClaimRead { victim, .. }
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
            Self::ClaimRead { .. } => "claimed batch read",
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
    /// This rank's workers have nothing to run ([`Thief::set_hungry`]): a WAIT says so,
    /// which lets the victim share its last queued task.
    hungry: bool,
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
            hungry: false,
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

    /// Diffusion: `ranks` push tasks here this epoch; leave them alone until `until`,
    /// and while their pushes keep arriving ([`Thief::push_arrived`]): a steal meanwhile
    /// would take half of what the giver kept on top of what it sends.
    pub(crate) fn hold_for_push(&mut self, ranks: &[Rank], now: Time, until: Time) {
        self.push_givers = ranks.len();
        self.push_until = until;
        for &r in ranks {
            if let Some(i) = self.targets.index_of(r) {
                self.backoff.hold(i, until, now);
            }
        }
    }

    /// Diffusion: a chunk of `rank`'s push arrived at `now`: after its `last`, the giver
    /// may be stolen from at once; before, it stays alone for another `push_wait` (the
    /// bound, should the rest never come).
    pub(crate) fn push_arrived(&mut self, rank: Rank, last: bool, now: Time, cfg: &crate::Config) {
        if last {
            self.push_givers = self.push_givers.saturating_sub(1);
        } else {
            self.push_until = self.push_until.max(now.plus(cfg.push_wait));
        }
        if let Some(i) = self.targets.index_of(rank) {
            if last {
                self.backoff.release(i);
            } else {
                self.backoff.hold(i, now.plus(cfg.push_wait), now);
            }
        }
    }

    /// The string plan: `ns` of predicted work is pushed here this epoch, routed through
    /// the overlay from ranks that need not be neighbours: steal from nobody until all
    /// but an eighth of it arrived, or `push_wait` passed since the last chunk came (the
    /// bound, should the rest never come).
    pub(crate) fn expect_push(&mut self, ns: u64, now: Time, cfg: &crate::Config) {
        self.push_expected = ns;
        self.push_left = ns;
        if ns > 0 {
            self.push_until = now.plus(cfg.push_wait);
            self.backoff.pause_until(self.push_until);
        }
    }

    /// The string plan: tasks of `ns` predicted work, pushed here, arrived at `now`.
    pub(crate) fn pushed_here(&mut self, ns: u64, now: Time, cfg: &crate::Config) {
        if self.push_left == 0 {
            return;
        }
        self.push_left = self.push_left.saturating_sub(ns);
        if self.push_left <= self.push_expected / 8 {
            self.push_left = 0;
            self.backoff.unpause();
        } else {
            self.push_until = now.plus(cfg.push_wait);
            self.backoff.pause_until(self.push_until);
        }
    }

    /// Diffusion: while pushes are still coming here (the string plan: more than an
    /// eighth of what is owed; the neighbours': a giver's last chunk), until when at most
    /// (`push_wait` after the last chunk). `None`: nothing is awaited.
    pub(crate) fn push_hold(&self, now: Time) -> Option<Time> {
        (now < self.push_until && (self.push_left > 0 || self.push_givers > 0))
            .then_some(self.push_until)
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
        // Under `claim` and `lock` (no typed requests) a short type alone would take any
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

    /// A typed request for the first short type with a ready target, to the target owed
    /// most (module doc). False if no short type has one.
    fn step_typed<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, short: u64) -> bool {
        let now = cx.now;
        let types = self.typed.backoff.len();
        // The highest short type first, then in turn (one type whose victims keep
        // answering nothing must not starve the others).
        let start = self.typed.last.map_or(types, |l| l.min(types));
        let order = (0..start).rev().chain((start..types).rev());
        for t in order.filter(|t| short >> t & 1 == 1) {
            let b = &self.typed.backoff[t];
            let victim = if self.targets.len() <= DEBT_SCAN_MAX {
                // A victim whose last answer for the type was nothing ranks below any
                // that gave (BOINC's D(P, R) flag): one that never supplies is owed
                // most, and must not crowd out one with work. Among those that answered
                // nothing, fewer such answers in a row first: two victims owed most that
                // keep answering nothing would otherwise take every request (each ready
                // again by the time the other answered) while a third, owed less, holds
                // the only work of the type.
                let mut best: Option<((std::cmp::Reverse<u32>, f64), usize)> = None;
                let mut ties = 0u64;
                for i in (0..self.targets.len()).filter(|&i| b.is_ready(i, now)) {
                    let d = (
                        std::cmp::Reverse(b.failures(i)),
                        self.typed.debt(self.targets.at(i)),
                    );
                    match best {
                        Some((bd, _)) if d < bd => {}
                        Some((bd, _)) if d == bd => {
                            ties += 1;
                            if self.rng.below(ties) == 0 {
                                best = Some((d, i));
                            }
                        }
                        _ => {
                            best = Some((d, i));
                            ties = 1;
                        }
                    }
                }
                best.map(|(_, i)| i)
            } else {
                b.pick_ready(now, &mut self.rng)
            };
            let Some(victim) = victim else { continue };
            self.typed.last = Some(t);
            let rtype = t as u16 + 1;
            let seq = self.begin(cx, victim, rtype);
            self.send_request(cx, victim, seq, rtype);
            return true;
        }
        false
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

    /// `request`: REQUEST to target `victim`. The epoch (20 bits) rides along: a request
    /// that arrives in another epoch is answered with nothing.
    fn send_request<P: From<Pending>>(&self, cx: &mut Ctx<P>, victim: usize, seq: u64, rtype: u16) {
        cx.issue(
            Op::Write {
                peer: self.targets.at(victim),
                remote: Loc::new(seg::INBOX, 0),
                pieces: Vec::new(),
                signal: Some(
                    Signal::Request {
                        epoch: cx.epoch & EPOCH_MASK,
                        seq: seq & SEQ_MASK,
                        hungry: self.hungry,
                        rtype,
                    }
                    .pack(),
                ),
            },
            Pending::RequestSent { victim },
        );
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
            Protocol::Claim => {
                // Step 1: one fetch-add takes a ticket and returns the generation.
                cx.issue(
                    Op::FetchAdd {
                        peer,
                        remote: tasks_loc(tasks::CLAIM),
                        delta: 1,
                    },
                    Pending::ClaimTicket { victim },
                );
            }
            Protocol::Lock => {
                // Step 1: the lock, AVAILABLE -> held by this thief.
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
        let mut rtype = 0;
        if let Some(a) = self.attempt.take() {
            stats
                .steal_latency_ns
                .push(now.since(a.started).as_nanos() as u64);
            rtype = a.rtype;
        }
        if let Outcome::Got(n, bytes) = outcome {
            stats.steals_ok += 1;
            stats.tasks_stolen += n;
            stats.bytes_stolen += bytes;
            if stats.steal_log.len() < STEAL_LOG_MAX {
                stats.steal_log.push(StealEvent {
                    at_ns: now.since(cx.started).as_nanos() as u64,
                    victim: from,
                    tasks: n as u32,
                });
            }
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
                            hungry: self.hungry,
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
    /// stole (the node queues them).
    pub(crate) fn complete<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        p: Pending,
        value: u64,
        mem: &dyn Memory,
    ) -> Result<Option<Vec<Task>>, CoreError> {
        let area = self.area;
        match p {
            // ----- claim -------------------------------------------------------------
            Pending::ClaimTicket { victim } => {
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
                    Pending::ClaimRead {
                        victim,
                        region,
                        len,
                        last: w.ticket + 1 == claim_batches(w.n),
                    },
                );
                Ok(None)
            }
            Pending::ClaimRead {
                victim,
                region,
                len,
                last,
            } => {
                let peer = self.targets.at(victim);
                let tasks = area.read(mem, area.staging(), u64::from(len), peer)?;
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
            Pending::ClaimDone { victim, last } => {
                // The generation is exhausted and this thief's region released: tell the
                // owner to publish the next one now rather than at its next check.
                if last {
                    let peer = self.targets.at(victim);
                    cx.signal(peer, Signal::Refill, Pending::RefillHint { victim });
                }
                Ok(None)
            }
            // ----- lock --------------------------------------------------------------
            Pending::LockAcquire { victim } => {
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
            Pending::LockCount { victim } => {
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
            Pending::LockRead { victim, n } => {
                let peer = self.targets.at(victim);
                let tasks = area.read(mem, area.staging(), u64::from(n), peer)?;
                // Step 4: hand the lock to the owner for a refill.
                let bytes = u64::from(n) * area.slot;
                self.lock_release(cx, victim, lock::REFILL, Outcome::Got(u64::from(n), bytes));
                Ok(Some(tasks))
            }
            Pending::LockRelease { victim, outcome } => {
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
            // ----- request -----------------------------------------------------------
            Pending::RequestSent { .. } | Pending::RefillHint { .. } | Pending::WaitSent { .. } => {
                Ok(None)
            }
        }
    }

    fn lock_release<P: From<Pending>>(
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

    /// The node's workers ran out (`hungry`) or got work. Running out while victims
    /// hold this rank as a waiter with busy workers, it tells them it is idle now (a WAIT
    /// again): their last queued tasks may come here.
    pub(crate) fn set_hungry<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, hungry: bool) {
        let was = std::mem::replace(&mut self.hungry, hungry);
        if !hungry || was || !advertised(&cx.cfg) {
            return;
        }
        let epoch = cx.epoch & EPOCH_MASK;
        for victim in self.backoff.blacklisted_targets() {
            let peer = self.targets.at(victim);
            cx.signal(
                peer,
                Signal::Wait {
                    epoch,
                    hungry: true,
                },
                Pending::WaitSent { victim },
            );
        }
    }

    /// ADVERT from `from`: it has work again. Off the blacklist, and asked first if this
    /// thief has no favourite. An advertisement of another epoch is stale: ignored.
    pub(crate) fn on_advert<P>(&mut self, cx: &mut Ctx<P>, from: Rank, epoch: u64) {
        if epoch != cx.epoch & EPOCH_MASK {
            return;
        }
        if let Some(i) = self.targets.index_of(from) {
            cx.stats.adverts_received += 1;
            self.backoff.advertised(i);
            if self.last_ok.is_none() {
                self.last_ok = Some(i);
            }
        }
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
        let (tasks, bytes) = self.area.read_packed(mem, self.area.staging(), n, from)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use crate::ctx::testing::Mem;
    use crate::layout::encode_task;

    #[test]
    fn awaits_pushes_until_they_came_or_push_wait_passed() {
        let cfg = Config::default();
        let (mut t, _) = thief(&cfg);
        let at = |ms: u64| Time(ms * 1_000_000);
        let wait = cfg.push_wait.as_nanos() as u64;
        assert_eq!(t.push_hold(at(0)), None, "nothing expected");
        // The string plan: 800 ns owed; a chunk of 500 extends the wait, then the rest.
        t.expect_push(800, at(0), &cfg);
        assert_eq!(t.push_hold(at(0)), Some(Time(wait)));
        t.pushed_here(500, at(1), &cfg);
        assert_eq!(t.push_hold(at(1)), Some(Time(at(1).0 + wait)));
        assert_eq!(t.push_hold(Time(at(1).0 + wait)), None, "the bound");
        t.pushed_here(250, at(1), &cfg);
        assert_eq!(t.push_hold(at(1)), None, "all but an eighth came");
        // The neighbours' plan: two givers, until each one's last chunk.
        t.start_epoch(Rng::from_keys(&[2]));
        t.hold_for_push(&[2, 3], at(0), at(2));
        t.push_arrived(2, true, at(1), &cfg);
        assert_eq!(t.push_hold(at(1)), Some(at(2)));
        t.push_arrived(3, true, at(1), &cfg);
        assert_eq!(t.push_hold(at(1)), None);
    }

    /// The (sequence, resource type) of the REQUEST a command sends to rank 2.
    fn request_to_2(op: &Op) -> (u64, u16) {
        let Op::Write {
            peer: 2,
            signal: Some(s),
            ..
        } = op
        else {
            panic!("{op:?}")
        };
        let Ok(Signal::Request { seq, rtype, .. }) = Signal::unpack(*s, 0) else {
            panic!("{s:#x}")
        };
        (seq, rtype)
    }

    fn thief(cfg: &Config) -> (Thief, Ctx<Pending>) {
        let area = TaskArea::new(cfg, 4);
        let t = Thief::new(
            Neighbours::List(vec![2]),
            area,
            Rng::from_keys(&[1]),
            cfg.resource_types.len(),
        );
        (t, Ctx::new(cfg.clone(), 0, 4))
    }

    #[test]
    fn claim_takes_a_ticket_reads_its_batch_and_counts_itself_done() {
        let cfg = Config::default();
        let (mut t, mut cx) = thief(&cfg);
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        assert_eq!(
            t.deadline(0, 0, &cx.cfg),
            Some(Time(0)),
            "an idle thief steals now"
        );
        assert_eq!(t.deadline(1, 0, &cx.cfg), None, "a fed one does not");
        assert_eq!(
            t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
            None
        );
        let c = cx.poll_command().expect("step 1");
        assert!(
            matches!(
                c.op,
                Op::FetchAdd {
                    peer: 2,
                    delta: 1,
                    ..
                }
            ),
            "{c:?}"
        );
        // Step 1 answered: generation 1 of 3 tasks, ticket 0 → batch (0, 2).
        let word = ClaimWord {
            generation: 1,
            n: 3,
            ticket: 0,
        };
        let p = cx.complete(c.token).unwrap();
        assert_eq!(t.complete(&mut cx, p, word.pack(), &mem), Ok(None));
        let c = cx.poll_command().expect("step 2");
        let Op::Read { peer: 2, len, .. } = c.op else {
            panic!("{c:?}")
        };
        assert_eq!(len, 2 * area.slot);
        // The batch lands in the staging area.
        let mut slot = vec![0u8; area.slot as usize];
        for i in 0..2u32 {
            let task = Task {
                owner: 2,
                index: i,
                kind: 0,
                priority: 0,
                cost_ns: 0,
                payload: vec![],
            };
            encode_task(&task, &mut slot);
            mem.write(
                Loc::new(seg::TASKS, area.staging() + u64::from(i) * area.slot),
                &slot,
            );
        }
        let p = cx.complete(c.token).unwrap();
        let got = t.complete(&mut cx, p, 0, &mem).unwrap().expect("stolen");
        assert_eq!(got.len(), 2);
        let c = cx.poll_command().expect("step 3");
        assert!(matches!(
            c.op,
            Op::FetchAdd {
                peer: 2,
                delta: 1,
                ..
            }
        ));
        assert_eq!((cx.stats.steals_ok, cx.stats.tasks_stolen), (1, 2));
        assert_eq!(cx.stats.steal_log[0].victim, 2);
    }

    /// Per-type requests: the REQUEST names the short type (accelerators first, then in
    /// turn); an unsupported answer holds that victim off for that type only; a thief
    /// whose queue is not dry asks for nothing else.
    #[test]
    fn typed_requests_name_the_short_type_and_back_off_per_type() {
        let cfg = Config {
            protocol: Protocol::Request,
            resource_types: vec![None, Some(vec![1])],
            ..Config::default()
        };
        let (mut t, mut cx) = thief(&cfg);
        let mem = Mem::new([TaskArea::new(&cfg, 4).bytes(), 64, 64]);
        let ask = |t: &mut Thief, cx: &mut Ctx<Pending>, queued: usize, short: u64| {
            t.step(
                cx,
                queued,
                short,
                &mut crate::mapper::DefaultMapper::default(),
            );
            cx.poll_command().map(|c| request_to_2(&c.op))
        };
        // Both types short: the accelerator's (type 1, sent as 2) first.
        let (seq, rtype) = ask(&mut t, &mut cx, 0, 0b11).expect("a request");
        assert_eq!(rtype, 2);
        assert_eq!(t.on_reply(&mut cx, 2, 0, seq, true, &mem), Ok(Some(vec![])));
        // Unsupported: type 1 waits a long time for this victim; type 0 is asked now.
        let (seq, rtype) = ask(&mut t, &mut cx, 1, 0b11).expect("a request");
        assert_eq!(rtype, 1);
        assert_eq!(
            t.on_reply(&mut cx, 2, 0, seq, false, &mem),
            Ok(Some(vec![]))
        );
        assert!(
            t.deadline(1, 0b10, &cx.cfg).unwrap() >= Time(0).plus(cfg.backoff_max * 16),
            "type 1 held off"
        );
        assert_eq!(
            t.deadline(1, 0b01, &cx.cfg),
            Some(Time(0).plus(cfg.backoff_base)),
            "type 0 backed off once"
        );
        // Nothing short and the queue not dry: no request.
        assert_eq!(ask(&mut t, &mut cx, 1, 0), None);
        assert_eq!(cx.stats.steals_empty, 2);
    }

    /// Two victims owed most that keep answering nothing (each ready again by the time
    /// the other answered) do not take every request: the one owed less, that answered
    /// nothing fewer times in a row, is asked (it may hold the type's only work).
    #[test]
    fn typed_victims_that_keep_answering_nothing_yield_to_one_that_did_less_often() {
        let cfg = Config {
            protocol: Protocol::Request,
            resource_types: vec![None],
            ..Config::default()
        };
        let mut t = Thief::new(
            Neighbours::List(vec![1, 2, 3]),
            TaskArea::new(&cfg, 4),
            Rng::from_keys(&[1]),
            1,
        );
        let mut cx = Ctx::new(cfg.clone(), 0, 4);
        // Rank 1 supplied work earlier (owed least), then answered nothing once; ranks 2
        // and 3 never supplied (owed most) and answered nothing five times each.
        t.typed.fetched.insert(1, 1e9);
        t.typed.total = 1e9;
        let b = &mut t.typed.backoff[0];
        b.empty(0, Time(0), &cfg);
        for _ in 0..5 {
            b.empty(1, Time(0), &cfg);
            b.empty(2, Time(0), &cfg);
        }
        cx.now = Time(0).plus(cfg.backoff_max * 2);
        let peer_asked = |t: &mut Thief, cx: &mut Ctx<Pending>| {
            t.step(cx, 0, 1, &mut crate::mapper::DefaultMapper::default());
            match cx.poll_command().map(|c| c.op) {
                Some(Op::Write { peer, .. }) => peer,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(peer_asked(&mut t, &mut cx), 1);
        // Rank 1 answers nothing again (2 in a row), then 3 more times: with equal runs
        // of nothing the debt decides, rank 2 or 3 (owed most).
        t.end_unanswered(&mut cx);
        assert_eq!(t.typed.backoff[0].failures(0), 2);
        for _ in 0..3 {
            t.typed.backoff[0].empty(0, cx.now, &cfg);
        }
        cx.now = cx.now.plus(cfg.backoff_max * 2);
        let p = peer_asked(&mut t, &mut cx);
        assert!(p == 2 || p == 3, "asked {p}");
    }

    #[test]
    fn an_empty_victim_is_backed_off_and_a_stale_reply_ignored() {
        let cfg = Config {
            protocol: Protocol::Request,
            advertise: false,
            ..Config::default()
        };
        let (mut t, mut cx) = thief(&cfg);
        let mem = Mem::new([TaskArea::new(&cfg, 4).bytes(), 64, 64]);
        assert_eq!(
            t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
            None
        );
        let c = cx.poll_command().expect("REQUEST");
        let (seq, _) = request_to_2(&c.op);
        // A reply to another attempt, or from another rank: nothing.
        assert_eq!(t.on_reply(&mut cx, 2, 0, seq + 1, false, &mem), Ok(None));
        assert_eq!(t.on_reply(&mut cx, 3, 0, seq, false, &mem), Ok(None));
        assert!(
            t.on_reply(&mut cx, 2, 1 << 17, seq, false, &mem).is_err(),
            "over capacity"
        );
        assert_eq!(
            t.on_reply(&mut cx, 2, 0, seq, false, &mem),
            Ok(Some(vec![]))
        );
        assert_eq!(cx.stats.steals_empty, 1);
        // Its only victim is backed off: the next attempt waits.
        assert_eq!(
            t.deadline(0, 0, &cx.cfg),
            Some(Time(0).plus(cfg.backoff_base))
        );
        assert_eq!(
            t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
            None
        );
        assert!(cx.poll_command().is_none());
    }

    #[test]
    fn an_empty_victim_is_blacklisted_until_it_advertises() {
        for protocol in [Protocol::Claim, Protocol::Request] {
            let cfg = Config {
                protocol,
                ..Config::default()
            };
            let (mut t, mut cx) = thief(&cfg);
            let mem = Mem::new([TaskArea::new(&cfg, 4).bytes(), 64, 64]);
            assert_eq!(
                t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
                None
            );
            let c = cx.poll_command().expect("first operation");
            let p = cx.complete(c.token).unwrap();
            if protocol == Protocol::Claim {
                // An empty generation: the ticket names no batch.
                assert_eq!(t.complete(&mut cx, p, 0, &mem), Ok(None));
                // The victim saw nothing: the thief tells it to advertise here.
                let c = cx.poll_command().expect("WAIT");
                let Op::Write {
                    peer: 2,
                    signal: Some(s),
                    ..
                } = c.op
                else {
                    panic!("{c:?}")
                };
                assert_eq!(
                    Signal::unpack(s, 0),
                    Ok(Signal::Wait {
                        epoch: 0,
                        hungry: false
                    })
                );
            } else {
                let (seq, _) = request_to_2(&c.op);
                let _ = p;
                assert_eq!(
                    t.on_reply(&mut cx, 2, 0, seq, false, &mem),
                    Ok(Some(vec![]))
                );
                assert!(
                    cx.poll_command().is_none(),
                    "a request victim needs no WAIT"
                );
            }
            assert_eq!(cx.stats.steals_empty, 1);
            // Blacklisted: no deadline, no attempt, however late.
            assert_eq!(t.deadline(0, 0, &cx.cfg), None, "{protocol:?}");
            cx.now = Time(u64::MAX / 2);
            assert_eq!(
                t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
                None
            );
            assert!(cx.poll_command().is_none());
            // Another epoch's advertisement, or another rank's, changes nothing.
            t.on_advert(&mut cx, 2, 1);
            t.on_advert(&mut cx, 3, 0);
            assert_eq!(t.deadline(0, 0, &cx.cfg), None);
            // Its own: probed at once.
            t.on_advert(&mut cx, 2, 0);
            assert_eq!(t.deadline(0, 0, &cx.cfg), Some(Time(0)));
            assert_eq!(
                t.step(&mut cx, 0, 0, &mut crate::mapper::DefaultMapper::default()),
                None
            );
            assert!(cx.poll_command().is_some(), "{protocol:?}: probes again");
        }
    }
}
