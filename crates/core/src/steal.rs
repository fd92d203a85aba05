//! Stealing: victim choice and the three steal protocols, thief and owner sides.
//!
//! Every rank is both: an *owner* that exposes part of its queue (the *shared set*, in
//! its TASKS segment) and, when its queue runs low, a *thief* that takes batches from its
//! overlay out-neighbours. Stolen tasks join the thief's queue, from which it shares in
//! turn, so work spreads along the overlay (TITUS_DLB §4.1). The owner runs its queue from
//! the front and shares from the back; it shares half of its queue (at most the shared
//! capacity), never leaving itself fewer than `min_private` tasks.
//!
//! # `claim` (the default: two round trips, the victim never blocks)
//!
//! The owner publishes a *generation*: n tasks in region g mod 2 of TASKS, then the claim
//! word (g, n, ticket 0). Batches are fixed by (n, ticket): the first thief gets ⌈n/2⌉
//! tasks, the next half of the rest, and so on.
//! 1. Thief: fetch-add 1 on the claim word. The old word names the generation, its size
//!    and the thief's ticket, hence its batch; an empty batch is the outcome Empty.
//! 2. Thief: read the batch's slots into its staging area.
//! 3. Thief: fetch-add 1 on the region's *done* counter, after the read completed: the
//!    owner may now reuse the region.
//!
//! The owner changes the claim word only by compare-and-swap (a thief's ticket makes the
//! swap fail and is then seen). Publishing generation g+1 closes g: the swap's old value
//! holds g's final ticket, so the owner knows which batches were claimed (their thieves
//! will count themselves done) and takes the unclaimed ones back. It writes region r again
//! only once done[r] equals the batches claimed from r so far. Reclaiming for itself is a
//! swap to an empty generation. Each task is thus taken by exactly one ticket or by the
//! owner, never both.
//!
//! When to look: the owner reads its word when there is news — the thief holding the
//! generation's last ticket signals REFILL after step 3, stolen work arrives while nothing
//! is published, a region still being read is rechecked after `backoff_base` — and every
//! `check_interval` otherwise (a fallback; polling at 200 µs was most of a simulated
//! job's events). Under `lock`, the thief that hands the lock over as REFILL signals too.
//!
//! # `lock` (TITUS: four round trips, the victim's shared set is locked meanwhile)
//!
//! 1. Thief: CAS the lock word AVAILABLE → held by the thief (else Locked).
//! 2. Thief: read the task count. 3. Thief: read the tasks.
//! 4. Thief: CAS held → REFILL, which unlocks and tells the owner the set is gone (an
//!    empty set is released back to AVAILABLE instead).
//!
//! The owner refills on REFILL, publishes or reclaims under its own lock, and changes the
//! word through atomics too (fabric atomics to itself where CPU atomics are not coherent).
//!
//! # `request` (one round trip; the victim's progress thread answers)
//!
//! The thief signals REQUEST; the victim takes tasks from its queue with local operations
//! only, writes them into the thief's staging area and signals REPLY(n) behind the data.
//! A thief that learns of the epoch's end stops waiting, so requests and replies can
//! outlive their epoch: requests carry the epoch (a victim answers another epoch's request
//! with nothing) and a sequence number (a thief ignores a reply that is not its attempt's).
//! Only empty replies can be stale — a reply with tasks keeps its epoch alive.
//!
//! # Victim choice
//!
//! The victim of the last successful steal first, while it is not found empty (a loaded
//! victim is drained by its in-neighbours alone, so they should keep at it); otherwise
//! uniform among out-neighbours not in backoff. Empty doubles a victim's backoff (from
//! `backoff_base` to `backoff_max`); Locked waits `backoff_base`; a success clears it. A
//! thief with every victim backed off sleeps until the first backoff ends; a thief over
//! the complete graph also pauses after each round of empty finds
//! ([`crate::neighbours::Backoff`]).

use crate::layout::signal::Signal;
use crate::layout::{self, ClaimWord, Task, claim_batch, claim_batches, lock, seg, tasks};
use crate::neighbours::{Backoff, Neighbours};
use crate::node::{Node, Pending as NodePending};
use crate::{CoreError, Loc, Memory, Op, Protocol, Rank, Time};
use std::collections::VecDeque;

/// An attempt in progress.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    victim: usize,
    started: Time,
    seq: u64,
}

/// Thief-side state.
#[derive(Debug)]
pub(crate) struct Thief {
    attempt: Option<Attempt>,
    /// Per victim: backed off until, consecutive empty finds.
    backoff: Backoff,
    seq: u64,
    /// The victim of the last successful steal: asked first while it has work.
    last_ok: Option<usize>,
}

impl Thief {
    pub(crate) fn new(victims: &Neighbours) -> Self {
        Self {
            attempt: None,
            backoff: Backoff::new(victims),
            seq: 0,
            last_ok: None,
        }
    }

    /// Number of targets changed (work sharing: the master rotates).
    pub(crate) fn resize(&mut self, targets: &Neighbours) {
        self.backoff = Backoff::new(targets);
        self.last_ok = None;
    }

    pub(crate) fn reset_backoff(&mut self) {
        self.backoff.reset();
        self.last_ok = None;
    }
}

/// Owner-side state; it persists across epochs (generations and counters continue).
#[derive(Debug, Default)]
pub(crate) struct Owner {
    /// `claim`: the last claim word this owner saw or wrote.
    word: ClaimWord,
    /// A generation (or, for `lock`, a shared set) may still hold tasks.
    published: bool,
    /// `claim`: batches claimed from each region, cumulative.
    expected_done: [u64; 2],
    /// An owner operation is in flight.
    busy: bool,
    next_check: Time,
    /// `request`: thieves waiting for an answer (thief, stale, sequence number), and
    /// whether one is being written.
    pub(crate) requests: VecDeque<(Rank, bool, u64)>,
    serving: bool,
}

/// What the owner does with its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockPurpose {
    Publish,
    Reclaim,
}

/// Outcome of an attempt: a victim found locked or empty is information for victim
/// choice, not an error.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Got(u64),
    Empty,
    Locked,
}

/// Steal commands in flight.
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
    OwnCheck,
    OwnDoneCheck {
        region: usize,
    },
    OwnSwap {
        expected: ClaimWord,
        new: ClaimWord,
        tasks: Vec<Task>,
    },
    OwnLock {
        purpose: LockPurpose,
    },
    OwnUnlock,
    Reply,
}

impl Pending {
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
            Self::OwnCheck => "shared set check",
            Self::OwnDoneCheck { .. } => "region done check",
            Self::OwnSwap { .. } => "generation swap",
            Self::OwnLock { .. } => "owner lock",
            Self::OwnUnlock => "owner unlock",
            Self::Reply => "steal reply",
        }
    }

    pub(crate) fn peer(&self, victims: &Neighbours, me: Rank) -> Rank {
        match self {
            Self::ClaimTicket { victim }
            | Self::ClaimRead { victim, .. }
            | Self::ClaimDone { victim, .. }
            | Self::LockAcquire { victim }
            | Self::LockCount { victim }
            | Self::LockRead { victim, .. }
            | Self::LockRelease { victim, .. }
            | Self::RequestSent { victim } => victims.at(*victim),
            _ => me,
        }
    }
}

use crate::share::{Decision, SEQ_MASK};

/// A REQUEST carries the thief's epoch modulo 2^20.
const EPOCH_MASK: u64 = (1 << layout::signal::EPOCH_BITS) - 1;

fn word(w: u64) -> [u8; 8] {
    w.to_le_bytes()
}

impl Node {
    fn region_offset(&self, region: usize) -> u64 {
        tasks::HEADER + region as u64 * u64::from(self.cfg.shared_capacity) * self.slot
    }

    fn staging(&self) -> u64 {
        self.region_offset(2)
    }

    /// How many tasks the owner may share now.
    pub(crate) fn shareable(&self) -> usize {
        let q = self.queue.len();
        (q / 2)
            .min(q.saturating_sub(self.cfg.min_private as usize))
            .min(self.cfg.shared_capacity as usize)
    }

    /// Takes `k` tasks from the back of the queue, in queue order.
    fn take_back(&mut self, k: usize) -> Vec<Task> {
        let at = self.queue.len() - k;
        self.queue.split_off(at).into()
    }

    /// Writes `tasks` into `region` (this rank's memory).
    fn write_slots(&self, mem: &dyn Memory, region: usize, tasks: &[Task]) {
        let mut buf = vec![0u8; self.slot as usize];
        let base = self.region_offset(region);
        for (i, t) in tasks.iter().enumerate() {
            buf.fill(0);
            layout::encode_task(t, &mut buf);
            mem.write(Loc::new(seg::TASKS, base + i as u64 * self.slot), &buf);
        }
    }

    /// Decodes `n` slots at `offset` of this rank's TASKS, written by `from`.
    fn read_slots(
        &self,
        mem: &dyn Memory,
        offset: u64,
        n: u64,
        from: Rank,
    ) -> Result<Vec<Task>, CoreError> {
        let mut buf = vec![0u8; (n * self.slot) as usize];
        mem.read(Loc::new(seg::TASKS, offset), &mut buf);
        buf.chunks(self.slot as usize)
            .map(|s| layout::decode_task(s, from, self.size, self.cfg.max_payload))
            .collect()
    }

    fn tasks_loc(&self, offset: u64) -> Loc {
        Loc::new(seg::TASKS, offset)
    }

    pub(crate) fn thief_summary(&self) -> String {
        format!(
            "thief {:?} ",
            self.thief
                .attempt
                .map(|a| (self.targets.at(a.victim), a.seq))
        )
    }

    pub(crate) fn owner_summary(&self) -> String {
        let o = &self.owner;
        format!(
            "owner word {:?} published {} busy {} expected_done {:?} requests {:?} serving {}",
            o.word, o.published, o.busy, o.expected_done, o.requests, o.serving
        )
    }

    /// Whether other ranks may be operating on this rank's memory for work: it shares
    /// tasks, or thieves wait for answers.
    pub(crate) fn sharing(&self) -> bool {
        self.owner.published
            || self.shareable() > 0
            || !self.owner.requests.is_empty()
            || self.owner.serving
            || self.is_master()
    }

    // ----- deadlines -----------------------------------------------------------------

    fn wants_to_steal(&self) -> bool {
        self.thief.attempt.is_none()
            && !self.targets.is_empty()
            && self.queue.len() < self.cfg.steal_below as usize
    }

    pub(crate) fn thief_deadline(&self) -> Option<Time> {
        if !self.wants_to_steal() {
            return None;
        }
        self.thief.backoff.earliest()
    }

    pub(crate) fn owner_deadline(&self) -> Option<Time> {
        if self.cfg.protocol == Protocol::Request || self.owner.busy {
            return None;
        }
        (self.owner.published || self.shareable() > 0).then_some(self.owner.next_check)
    }

    // ----- thief ---------------------------------------------------------------------

    pub(crate) fn thief_step(&mut self) -> Result<(), CoreError> {
        if !self.wants_to_steal() {
            return Ok(());
        }
        let now = self.now;
        // A victim that just gave work probably has more: ask it again first (it leaves
        // the favour when it is found empty). Otherwise uniform among the ready ones.
        let victim = match self.thief.last_ok {
            Some(v) if self.thief.backoff.is_ready(v, now) => v,
            _ => match self.thief.backoff.pick_ready(now, &mut self.rng) {
                Some(v) => v,
                None => return Ok(()),
            },
        };
        let peer = self.targets.at(victim);
        self.thief.seq += 1;
        let seq = self.thief.seq;
        self.thief.attempt = Some(Attempt {
            victim,
            started: now,
            seq,
        });
        self.stats.steal_attempts += 1;
        match self.cfg.protocol {
            Protocol::Claim => {
                // Step 1: one fetch-add takes a ticket and returns the generation.
                self.issue(
                    Op::FetchAdd {
                        peer,
                        remote: self.tasks_loc(tasks::CLAIM),
                        delta: 1,
                    },
                    NodePending::Steal(Pending::ClaimTicket { victim }),
                );
            }
            Protocol::Lock => {
                // Step 1: the lock, AVAILABLE -> held by this thief.
                self.issue(
                    Op::Cas {
                        peer,
                        remote: self.tasks_loc(tasks::LOCK),
                        expected: lock::AVAILABLE,
                        desired: lock::held_by(self.rank),
                    },
                    NodePending::Steal(Pending::LockAcquire { victim }),
                );
            }
            Protocol::Request if peer == self.rank => {
                // Work sharing: this rank is the master and brokers its own request;
                // nobody to ask ends the attempt at once.
                if self.broker(self.rank, seq) != Decision::Forwarded {
                    self.end_attempt(victim, Outcome::Empty);
                }
            }
            Protocol::Request => {
                self.issue(
                    Op::Write {
                        peer,
                        remote: Loc::new(seg::INBOX, 0),
                        pieces: Vec::new(),
                        // The epoch (20 bits) rides along: a request that arrives in another
                        // epoch is answered with nothing.
                        signal: Some(
                            Signal::Request {
                                epoch: self.epoch & EPOCH_MASK,
                                seq: seq & SEQ_MASK,
                            }
                            .pack(),
                        ),
                    },
                    NodePending::Steal(Pending::RequestSent { victim }),
                );
            }
        }
        Ok(())
    }

    fn end_attempt(&mut self, victim: usize, outcome: Outcome) {
        let from = self.targets.at(victim);
        self.end_attempt_from(victim, outcome, from);
    }

    /// Ends the attempt on target `victim`, answered by rank `from` (under work sharing
    /// the master's choice, not the master).
    fn end_attempt_from(&mut self, victim: usize, outcome: Outcome, from: Rank) {
        let now = self.now;
        if let Some(a) = self.thief.attempt.take() {
            self.stats
                .steal_latency_ns
                .push(now.since(a.started).as_nanos() as u64);
        }
        match outcome {
            Outcome::Got(n) => {
                self.thief.backoff.success(victim);
                self.thief.last_ok = Some(victim);
                self.stats.steals_ok += 1;
                self.stats.tasks_stolen += n;
                if self.stats.steal_log.len() < crate::node::STEAL_LOG_MAX {
                    self.stats.steal_log.push(crate::node::StealEvent {
                        at_ns: now.since(self.started).as_nanos() as u64,
                        victim: from,
                        tasks: n as u32,
                    });
                }
                self.stats.bytes_stolen += n * self.slot;
            }
            Outcome::Empty => {
                if self.thief.last_ok == Some(victim) {
                    self.thief.last_ok = None;
                }
                self.thief.backoff.empty(victim, now, &self.cfg);
                self.stats.steals_empty += 1;
            }
            Outcome::Locked => {
                self.thief.backoff.locked(victim, now, &self.cfg);
                self.stats.steals_locked += 1;
            }
        }
    }

    /// Stolen tasks join the queue; the owner side will share half of them on.
    fn take_stolen(&mut self, tasks: Vec<Task>) {
        self.queue.extend(tasks);
        self.hungry = false;
        if !self.owner.published {
            // Work to share and nothing published: look at the shared set now.
            self.owner.next_check = self.now;
        }
    }

    // ----- owner ---------------------------------------------------------------------

    pub(crate) fn owner_step(&mut self, mem: &dyn Memory) -> Result<(), CoreError> {
        if self.cfg.protocol == Protocol::Request {
            self.serve_requests(mem);
            return Ok(());
        }
        if self.owner.busy {
            return Ok(());
        }
        let reclaim = self.hungry && self.queue.is_empty() && self.owner.published;
        let due =
            self.now >= self.owner.next_check && (self.owner.published || self.shareable() > 0);
        if !(reclaim || due) {
            return Ok(());
        }
        self.owner.next_check = self.now.plus(self.cfg.check_interval);
        self.owner.busy = true;
        // Read this rank's own word through the fabric (remote atomics change it).
        let at = if self.cfg.protocol == Protocol::Claim {
            tasks::CLAIM
        } else {
            tasks::LOCK
        };
        self.issue(
            Op::FetchAdd {
                peer: self.rank,
                remote: self.tasks_loc(at),
                delta: 0,
            },
            NodePending::Steal(Pending::OwnCheck),
        );
        Ok(())
    }

    /// `claim`: the owner learned its claim word.
    fn claim_checked(&mut self, w: u64) {
        let wd = ClaimWord::unpack(w);
        self.owner.word = wd;
        let unclaimed = wd.ticket < claim_batches(wd.n);
        self.owner.published = unclaimed;
        // Close the generation (taking its unclaimed batches back) when hungry, or reset a
        // ticket count heading for overflow.
        if (self.hungry && self.queue.is_empty() && unclaimed)
            || (!unclaimed && wd.ticket > 1 << 31)
        {
            self.claim_swap(wd, Vec::new());
            return;
        }
        if !unclaimed && self.shareable() > 0 {
            // Publishing reuses region g+1 mod 2: first check its readers are done.
            let region = usize::from(wd.generation.wrapping_add(1) % 2);
            self.issue(
                Op::FetchAdd {
                    peer: self.rank,
                    remote: self.tasks_loc(tasks::DONE[region]),
                    delta: 0,
                },
                NodePending::Steal(Pending::OwnDoneCheck { region }),
            );
            return;
        }
        self.owner.busy = false;
    }

    fn claim_swap(&mut self, expected: ClaimWord, tasks: Vec<Task>) {
        let new = ClaimWord {
            generation: expected.generation.wrapping_add(1),
            n: tasks.len() as u16,
            ticket: 0,
        };
        self.issue(
            Op::Cas {
                peer: self.rank,
                remote: self.tasks_loc(tasks::CLAIM),
                expected: expected.pack(),
                desired: new.pack(),
            },
            NodePending::Steal(Pending::OwnSwap {
                expected,
                new,
                tasks,
            }),
        );
    }

    pub(crate) fn steal_completion(
        &mut self,
        p: Pending,
        value: u64,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        match p {
            // ----- claim, thief ------------------------------------------------------
            Pending::ClaimTicket { victim } => {
                let w = ClaimWord::unpack(value);
                let (start, len) = claim_batch(w.n, w.ticket);
                if len == 0 {
                    self.end_attempt(victim, Outcome::Empty);
                    return Ok(());
                }
                if u32::from(w.n) > self.cfg.shared_capacity {
                    return Err(CoreError::Malformed {
                        from: self.targets.at(victim),
                        what: format!(
                            "claim word announces {} tasks (capacity {})",
                            w.n, self.cfg.shared_capacity
                        ),
                    });
                }
                // Step 2: read the batch into the staging area.
                let region = w.region();
                let peer = self.targets.at(victim);
                let remote = self.region_offset(region) + u64::from(start) * self.slot;
                self.issue(
                    Op::Read {
                        peer,
                        remote: Loc::new(seg::TASKS, remote),
                        local: Loc::new(seg::TASKS, self.staging()),
                        len: u64::from(len) * self.slot,
                    },
                    NodePending::Steal(Pending::ClaimRead {
                        victim,
                        region,
                        len,
                        last: w.ticket + 1 == claim_batches(w.n),
                    }),
                );
            }
            Pending::ClaimRead {
                victim,
                region,
                len,
                last,
            } => {
                let peer = self.targets.at(victim);
                let tasks = self.read_slots(mem, self.staging(), u64::from(len), peer)?;
                // Step 3: the batch is read; the owner may reuse the region.
                self.issue(
                    Op::FetchAdd {
                        peer,
                        remote: self.tasks_loc(tasks::DONE[region]),
                        delta: 1,
                    },
                    NodePending::Steal(Pending::ClaimDone { victim, last }),
                );
                self.take_stolen(tasks);
                self.end_attempt(victim, Outcome::Got(u64::from(len)));
            }
            Pending::ClaimDone { victim, last } => {
                // The generation is exhausted and this thief's region released: tell the
                // owner to publish the next one now rather than at its next check.
                if last {
                    let peer = self.targets.at(victim);
                    self.send_signal(peer, Signal::Refill.pack(), "refill hint");
                }
            }
            // ----- claim, owner ------------------------------------------------------
            Pending::OwnCheck if self.cfg.protocol == Protocol::Claim => self.claim_checked(value),
            Pending::OwnDoneCheck { region } => {
                let expected = self.owner.expected_done[region];
                if value > expected {
                    return Err(CoreError::Malformed {
                        from: self.rank,
                        what: format!(
                            "region {region} counts {value} finished batch reads, only {expected} were claimed"
                        ),
                    });
                }
                let k = self.shareable();
                if value < expected || k == 0 {
                    // Thieves are still reading the region (or nothing to share): later,
                    // soon if only the readers hold it up.
                    self.owner.busy = false;
                    if value < expected {
                        self.owner.next_check = self.now.plus(self.cfg.backoff_base);
                    }
                    return Ok(());
                }
                let tasks = self.take_back(k);
                self.write_slots(mem, region, &tasks);
                self.claim_swap(self.owner.word, tasks);
            }
            Pending::OwnSwap {
                expected,
                new,
                tasks,
            } => {
                if value != expected.pack() {
                    // Tickets moved since the check: nothing was published; retry now.
                    self.queue.extend(tasks);
                    self.owner.word = ClaimWord::unpack(value);
                    self.owner.busy = false;
                    self.owner.next_check = self.now;
                    return Ok(());
                }
                // `expected` is closed with its final ticket: claimed batches will be counted
                // done by their thieves; unclaimed ones come back.
                let batches = claim_batches(expected.n);
                let claimed = expected.ticket.min(batches);
                self.owner.expected_done[expected.region()] += u64::from(claimed);
                if claimed < batches {
                    let (start, _) = claim_batch(expected.n, claimed);
                    let off = self.region_offset(expected.region()) + u64::from(start) * self.slot;
                    let back =
                        self.read_slots(mem, off, u64::from(expected.n - start), self.rank)?;
                    self.queue.extend(back);
                }
                self.owner.word = new;
                self.owner.published = new.n > 0;
                self.owner.busy = false;
            }
            // ----- lock, thief -------------------------------------------------------
            Pending::LockAcquire { victim } => {
                if value != lock::AVAILABLE {
                    self.end_attempt(victim, Outcome::Locked);
                    return Ok(());
                }
                // Step 2: the count.
                let peer = self.targets.at(victim);
                self.issue(
                    Op::Read {
                        peer,
                        remote: Loc::new(seg::TASKS, tasks::COUNT),
                        local: Loc::new(seg::TASKS, self.staging()),
                        len: 8,
                    },
                    NodePending::Steal(Pending::LockCount { victim }),
                );
            }
            Pending::LockCount { victim } => {
                let peer = self.targets.at(victim);
                let mut b = [0u8; 8];
                mem.read(Loc::new(seg::TASKS, self.staging()), &mut b);
                let n = u64::from_le_bytes(b);
                if n > u64::from(self.cfg.shared_capacity) {
                    return Err(CoreError::Malformed {
                        from: peer,
                        what: format!(
                            "shared count {n} over the capacity {}",
                            self.cfg.shared_capacity
                        ),
                    });
                }
                if n == 0 {
                    self.lock_release(victim, lock::AVAILABLE, Outcome::Empty);
                    return Ok(());
                }
                // Step 3: the tasks.
                self.issue(
                    Op::Read {
                        peer,
                        remote: Loc::new(seg::TASKS, self.region_offset(0)),
                        local: Loc::new(seg::TASKS, self.staging()),
                        len: n * self.slot,
                    },
                    NodePending::Steal(Pending::LockRead {
                        victim,
                        n: n as u16,
                    }),
                );
            }
            Pending::LockRead { victim, n } => {
                let peer = self.targets.at(victim);
                let tasks = self.read_slots(mem, self.staging(), u64::from(n), peer)?;
                self.take_stolen(tasks);
                // Step 4: hand the lock to the owner for a refill.
                self.lock_release(victim, lock::REFILL, Outcome::Got(u64::from(n)));
            }
            Pending::LockRelease { victim, outcome } => {
                if value != lock::held_by(self.rank) {
                    return Err(CoreError::Malformed {
                        from: self.targets.at(victim),
                        what: format!("lock word {value} while this rank held it"),
                    });
                }
                if matches!(outcome, Outcome::Got(_)) {
                    // The shared set is gone and the lock says REFILL: tell the owner now.
                    let peer = self.targets.at(victim);
                    self.send_signal(peer, Signal::Refill.pack(), "refill hint");
                }
                self.end_attempt(victim, outcome);
            }
            // ----- lock, owner -------------------------------------------------------
            Pending::OwnCheck => self.lock_checked(value, mem)?,
            Pending::OwnLock { purpose } => {
                if value != lock::AVAILABLE {
                    // A thief holds it: try again soon.
                    self.owner.busy = false;
                    self.owner.next_check = self.now.plus(self.cfg.backoff_base);
                    return Ok(());
                }
                if purpose == LockPurpose::Reclaim {
                    let mut b = [0u8; 8];
                    mem.read(Loc::new(seg::TASKS, tasks::COUNT), &mut b);
                    let n = u64::from_le_bytes(b).min(u64::from(self.cfg.shared_capacity));
                    let back = self.read_slots(mem, self.region_offset(0), n, self.rank)?;
                    self.queue.extend(back);
                    mem.write(Loc::new(seg::TASKS, tasks::COUNT), &word(0));
                    self.owner.published = false;
                } else {
                    self.publish_locked(mem);
                }
                self.owner_unlock(lock::held_by(self.rank));
            }
            Pending::OwnUnlock => {
                self.owner.busy = false;
            }
            // ----- request -----------------------------------------------------------
            Pending::RequestSent { .. } => {}
            Pending::Reply => {
                self.owner.serving = false;
                self.serve_requests(mem);
            }
        }
        Ok(())
    }

    fn lock_release(&mut self, victim: usize, to: u64, outcome: Outcome) {
        let peer = self.targets.at(victim);
        self.issue(
            Op::Cas {
                peer,
                remote: self.tasks_loc(tasks::LOCK),
                expected: lock::held_by(self.rank),
                desired: to,
            },
            NodePending::Steal(Pending::LockRelease { victim, outcome }),
        );
    }

    /// `lock`: the owner learned its lock word.
    fn lock_checked(&mut self, v: u64, mem: &dyn Memory) -> Result<(), CoreError> {
        if v == lock::REFILL {
            // A thief took the whole shared set and handed the lock over: refill, unlock.
            self.publish_locked(mem);
            self.owner_unlock(lock::REFILL);
            return Ok(());
        }
        if v != lock::AVAILABLE {
            self.owner.busy = false; // A thief is at work; look again later.
            return Ok(());
        }
        let purpose = if self.hungry && self.queue.is_empty() && self.owner.published {
            LockPurpose::Reclaim
        } else if !self.owner.published && self.shareable() > 0 {
            LockPurpose::Publish
        } else {
            self.owner.busy = false;
            return Ok(());
        };
        self.issue(
            Op::Cas {
                peer: self.rank,
                remote: self.tasks_loc(tasks::LOCK),
                expected: lock::AVAILABLE,
                desired: lock::held_by(self.rank),
            },
            NodePending::Steal(Pending::OwnLock { purpose }),
        );
        Ok(())
    }

    /// With the lock held: fills region 0 with a share of the queue and sets the count.
    fn publish_locked(&mut self, mem: &dyn Memory) {
        let k = self.shareable();
        let tasks = self.take_back(k);
        self.write_slots(mem, 0, &tasks);
        mem.write(Loc::new(seg::TASKS, tasks::COUNT), &word(k as u64));
        self.owner.published = k > 0;
    }

    fn owner_unlock(&mut self, from: u64) {
        self.issue(
            Op::Cas {
                peer: self.rank,
                remote: self.tasks_loc(tasks::LOCK),
                expected: from,
                desired: lock::AVAILABLE,
            },
            NodePending::Steal(Pending::OwnUnlock),
        );
    }

    /// `request`: answers waiting thieves one at a time (region 0 holds the reply).
    fn serve_requests(&mut self, mem: &dyn Memory) {
        if self.owner.serving {
            return;
        }
        let Some((thief, stale, seq)) = self.owner.requests.pop_front() else {
            return;
        };
        let k = if stale || self.failed_or_done() {
            0
        } else {
            self.shareable()
        };
        let tasks = self.take_back(k);
        self.write_slots(mem, 0, &tasks);
        let pieces = if k > 0 {
            vec![(
                Loc::new(seg::TASKS, self.region_offset(0)),
                k as u64 * self.slot,
            )]
        } else {
            Vec::new()
        };
        self.owner.serving = true;
        self.issue(
            Op::Write {
                peer: thief,
                remote: Loc::new(seg::TASKS, self.staging()),
                pieces,
                signal: Some(
                    Signal::Reply {
                        tasks: k as u64,
                        seq,
                    }
                    .pack(),
                ),
            },
            NodePending::Steal(Pending::Reply),
        );
    }

    pub(crate) fn steal_signal(
        &mut self,
        from: Rank,
        sig: Signal,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        match sig {
            Signal::Request { epoch, seq } => {
                let stale = epoch != self.epoch & EPOCH_MASK;
                if self.cfg.sharing.is_some() && !stale {
                    if !self.is_master() {
                        return Err(CoreError::Malformed {
                            from,
                            what: "a steal request to a rank that is not its group's master".into(),
                        });
                    }
                    if self.broker(from, seq) == Decision::Forwarded {
                        return Ok(());
                    }
                }
                self.owner.requests.push_back((from, stale, seq));
                self.serve_requests(mem);
            }
            Signal::Refill if self.cfg.protocol != Protocol::Request => {
                // A thief emptied the shared set: check it now (a hint; harmless if stale).
                self.owner.next_check = self.now;
            }
            Signal::Load { .. } | Signal::Forward { .. } => {
                if let Some(r) = self.share_signal(from, sig)? {
                    self.owner.requests.push_back(r);
                    self.serve_requests(mem);
                }
            }
            Signal::Reply { tasks: n, seq } => {
                let Some(a) = self.thief.attempt else {
                    return Ok(());
                };
                // Under work sharing the master may pass the request on: any rank answers.
                let from_target =
                    self.cfg.sharing.is_some() || self.targets.get(a.victim) == Some(from);
                if !from_target || seq != a.seq & SEQ_MASK {
                    // A stale, empty answer (module doc): nothing to do.
                    return Ok(());
                }
                if n > u64::from(self.cfg.shared_capacity) {
                    return Err(CoreError::Malformed {
                        from,
                        what: format!(
                            "steal reply of {n} tasks (capacity {})",
                            self.cfg.shared_capacity
                        ),
                    });
                }
                let tasks = self.read_slots(mem, self.staging(), n, from)?;
                self.take_stolen(tasks);
                self.end_attempt_from(
                    a.victim,
                    if n > 0 {
                        Outcome::Got(n)
                    } else {
                        Outcome::Empty
                    },
                    from,
                );
            }
            // Results and termination signals go elsewhere (`Node::handle_signal`).
            _ => {}
        }
        Ok(())
    }
}
