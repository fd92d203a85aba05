//! The owner: publishes part of its queue as the shared set and answers requests; its
//! state persists across epochs (generations and counters continue).
//!
//! # `claim`
//!
//! The owner publishes a *generation*: n tasks in region g mod 2 of TASKS, then the claim
//! word (g, n, ticket 0). Batches are fixed by (n, ticket): the first thief gets ⌈n/2⌉
//! tasks, the next half of the rest, and so on (the thief's steps: `super::thief`).
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
//! generation's last ticket signals REFILL after its step 3, stolen work arrives while
//! nothing is published, a region still being read is rechecked after `backoff_base` —
//! and every `check_interval` otherwise (a fallback; polling at 200 µs was most of a
//! simulated job's events). Under `lock`, the thief that hands the lock over as REFILL
//! signals too.
//!
//! # `lock`
//!
//! The owner refills on REFILL, publishes or reclaims under its own lock, and changes the
//! word through atomics too (fabric atomics to itself where CPU atomics are not coherent).
//!
//! # `request`
//!
//! The victim takes tasks from its queue with local operations only, writes them into
//! the thief's staging area and signals REPLY(n) behind the data; one answer at a time
//! (region 0 holds it). A request of another epoch, or one arriving after this rank
//! learned of the end, is answered with nothing.

use super::{TaskArea, tasks_loc, word};
use crate::ctx::Ctx;
use crate::layout::signal::Signal;
use crate::layout::{ClaimWord, Task, claim_batch, claim_batches, lock, seg, tasks};
use crate::queue::Queue;
use crate::{CoreError, Loc, Memory, Op, Protocol, Rank, Time};
use std::collections::VecDeque;

/// A steal request to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    /// The thief that asked.
    pub(crate) thief: Rank,
    /// It was sent in another epoch: answered with nothing.
    pub(crate) stale: bool,
    /// The thief's sequence number, which the reply carries back.
    pub(crate) seq: u64,
    /// The thief's workers have nothing to run: it may take the last queued task.
    pub(crate) workers_idle: bool,
    /// The resource type asked for, + 1 (0: any work).
    pub(crate) rtype: u16,
}

/// What the owner does with its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockPurpose {
    Publish,
    Reclaim,
}

/// The owner's operations in flight (all on this rank's own words, or a reply).
#[derive(Debug)]
pub(crate) enum Pending {
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
    /// The answer to `thief`'s request.
    Reply {
        thief: Rank,
    },
    /// ADVERT, to a thief that waits for work here.
    Advert {
        thief: Rank,
    },
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::OwnCheck => "shared set check",
            Self::OwnDoneCheck { .. } => "region done check",
            Self::OwnSwap { .. } => "generation swap",
            Self::OwnLock { .. } => "owner lock",
            Self::OwnUnlock => "owner unlock",
            Self::Reply { .. } => "steal reply",
            Self::Advert { .. } => "advertisement",
        }
    }

    /// The rank the operation went to (`me`: this rank's own memory).
    pub(crate) fn peer(&self, me: Rank) -> Rank {
        match self {
            Self::Reply { thief } | Self::Advert { thief } => *thief,
            _ => me,
        }
    }
}

/// Owner-side state.
#[derive(Debug)]
pub(crate) struct Owner {
    area: TaskArea,
    /// `claim`: the last claim word this owner saw or wrote.
    word: ClaimWord,
    /// A generation (or, for `lock`, a shared set) may still hold tasks.
    published: bool,
    /// `claim`: batches claimed from each region, cumulative.
    expected_done: [u64; 2],
    /// An owner operation is in flight.
    busy: bool,
    next_check: Time,
    /// `request`: thieves waiting for an answer, and whether one is being written.
    requests: VecDeque<Request>,
    serving: bool,
    /// Advertisement: thieves that found this rank empty and wait for its ADVERT, this
    /// epoch (each once), and whether each is idle (workers_idle).
    waiters: Vec<(Rank, bool)>,
    /// `claim`, `lock`: `published` is known true or false since the last WAIT (a WAIT
    /// says a thief found the set empty, which this rank may not have seen yet).
    offer_known: bool,
    /// Thieves told of the current offer (reset when the offer changes).
    told: usize,
    /// The mapper refused every task this rank offered: no advertisement until work
    /// arrives (thieves would come back empty, and be told again, without end).
    refusing: bool,
    /// `claim`: the costliest estimate among the tasks of the current generation (0: none
    /// or unknown), and whether the generation being closed is taken back to publish
    /// anew at once ([`Owner::retract`]).
    published_costliest: u64,
    retracting: bool,
}

impl Owner {
    pub(crate) fn new(area: TaskArea) -> Self {
        Self {
            area,
            word: ClaimWord::default(),
            published: false,
            expected_done: [0; 2],
            busy: false,
            next_check: Time(0),
            requests: VecDeque::new(),
            serving: false,
            waiters: Vec::new(),
            offer_known: true,
            told: 0,
            refusing: false,
            published_costliest: 0,
            retracting: false,
        }
    }

    /// A new epoch: last epoch's waiters forgot this rank's blacklisting.
    pub(crate) fn start_epoch(&mut self) {
        self.waiters.clear();
        self.told = 0;
        self.refusing = false;
    }

    /// WAIT from `from` (`claim`, `lock`): it found this rank empty. Stale (another
    /// epoch's): ignored.
    /// The thief saw the set empty, which this rank may not know yet: it looks at its
    /// word now and advertises once it knows it has work on offer.
    pub(crate) fn on_wait<P>(&mut self, cx: &Ctx<P>, from: Rank, epoch: u64, workers_idle: bool) {
        if epoch == cx.epoch & super::thief::EPOCH_MASK {
            self.add_waiter(from, workers_idle);
            self.offer_known = false;
            self.next_check = cx.now;
        }
    }

    fn add_waiter(&mut self, thief: Rank, workers_idle: bool) {
        match self.waiters.iter_mut().find(|w| w.0 == thief) {
            Some(w) => w.1 = workers_idle,
            None => self.waiters.push((thief, workers_idle)),
        }
    }

    /// How many tasks it may share now ([`Queue::shareable`]): idle thieves waiting here
    /// are demand for even its last queued task. (Thieves that wait with workers still
    /// busy are not: the task would hop from queue to queue — measured, 7× the steals.)
    fn shareable(&self, queue: &Queue, cfg: &crate::Config) -> usize {
        queue.shareable(cfg, self.demand())
    }

    /// Idle thieves wait for work here.
    fn demand(&self) -> bool {
        self.waiters.iter().any(|w| w.1)
    }

    /// Tasks this rank offers thieves now, and how many thieves can get some: its
    /// published set (`claim`: the count it last wrote or saw, in its batches; `lock`:
    /// one thief takes it all), or what it would answer (`request`: each answer takes
    /// half of what is left).
    fn offer(&self, queue: &Queue, cfg: &crate::Config) -> (u64, usize) {
        match cfg.protocol {
            Protocol::Request => {
                let k = self.shareable(queue, cfg);
                (k as u64, (usize::BITS - k.leading_zeros()) as usize)
            }
            _ if !(self.published && self.offer_known) => (0, 0),
            Protocol::Claim => {
                let left = claim_batches(self.word.n).saturating_sub(self.word.ticket);
                (u64::from(self.word.n), left.max(1) as usize)
            }
            Protocol::Lock => (u64::from(self.word.n.max(1)), 1),
        }
    }

    /// Advertisement: with work on offer, tells as many waiting thieves as can get some,
    /// longest waiting first (telling them all would send the rest back empty).
    fn advertise<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, queue: &Queue, closed: bool) {
        if self.waiters.is_empty() || closed || self.refusing {
            return;
        }
        let (tasks, thieves) = self.offer(queue, &cx.cfg);
        if tasks == 0 {
            return;
        }
        let epoch = cx.epoch & super::thief::EPOCH_MASK;
        let n = thieves.saturating_sub(self.told).min(self.waiters.len());
        self.told += n;
        for (thief, _) in self.waiters.drain(..n).collect::<Vec<_>>() {
            cx.stats.adverts_sent += 1;
            cx.signal(
                thief,
                Signal::Advert {
                    epoch,
                    hops: 0,
                    tasks,
                },
                Pending::Advert { thief },
            );
        }
    }

    pub(crate) fn summary(&self) -> String {
        format!(
            "owner word {:?} published {} busy {} expected_done {:?} requests {:?} serving {} waiters {:?}",
            self.word,
            self.published,
            self.busy,
            self.expected_done,
            self.requests,
            self.serving,
            self.waiters
        )
    }

    /// Whether tasks of this rank's own may still be published (`claim`, `lock`): a
    /// rank that runs dry takes those back before it steals from others.
    pub(crate) fn has_published(&self) -> bool {
        self.published
    }

    /// Whether other ranks may be operating on this rank's memory for work: it shares
    /// tasks, or thieves wait for answers.
    pub(crate) fn is_sharing(&self, queue: &Queue, cx_cfg: &crate::Config) -> bool {
        self.published
            || self.shareable(queue, cx_cfg) > 0
            || !self.requests.is_empty()
            || self.serving
    }

    pub(crate) fn deadline(
        &self,
        queue: &Queue,
        cfg: &crate::Config,
        hold: Option<Time>,
    ) -> Option<Time> {
        if cfg.protocol == Protocol::Request || self.busy {
            return None;
        }
        let at = hold.map_or(self.next_check, |t| t.max(self.next_check));
        (self.published || self.shareable(queue, cfg) > 0).then_some(at)
    }

    /// Stolen work joined the queue: with nothing published, look at the shared set now.
    pub(crate) fn work_arrived(&mut self, now: Time) {
        self.refusing = false;
        if !self.published {
            self.next_check = now;
        }
    }

    /// REFILL: a thief emptied the shared set: check it now (a hint; harmless if stale).
    pub(crate) fn on_refill<P>(&mut self, cx: &Ctx<P>) {
        if cx.cfg.protocol != Protocol::Request {
            self.next_check = cx.now;
        }
    }

    /// `request`: a thief asks (directly, or forwarded by its master). `closed`: the
    /// epoch failed or ended here.
    pub(crate) fn on_request<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        request: Request,
        queue: &mut Queue,
        mem: &dyn Memory,
        closed: bool,
    ) {
        self.requests.push_back(request);
        self.serve_requests(cx, queue, mem, closed);
    }

    /// After any input: answer requests (`request`), or look at the shared set when it
    /// is due (`claim`, `lock`).
    /// `hold`: pushes are still coming here until then (`claim`, `lock`: publish nothing
    /// before: what is published from the back of a queue in predicted order before its
    /// pushes came would be costly, and pushes arriving chunk by chunk made the owner take
    /// its generation back and publish anew at each: 0.926 against 0.959 on two processes).
    pub(crate) fn step<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        queue: &mut Queue,
        mem: &dyn Memory,
        closed: bool,
        hold: Option<Time>,
    ) {
        self.advertise(cx, queue, closed);
        if cx.cfg.protocol == Protocol::Request {
            self.serve_requests(cx, queue, mem, closed);
            return;
        }
        if self.busy {
            return;
        }
        let reclaim =
            (queue.workers_idle && queue.is_empty() && self.published) || self.retract(queue);
        let due = hold.is_none()
            && cx.now >= self.next_check
            && (self.published || self.shareable(queue, &cx.cfg) > 0);
        if !(reclaim || due) {
            return;
        }
        self.next_check = cx.now.plus(cx.cfg.check_interval);
        self.busy = true;
        // Read this rank's own word through the fabric (remote atomics change it).
        let at = if cx.cfg.protocol == Protocol::Claim {
            tasks::CLAIM
        } else {
            tasks::LOCK
        };
        cx.issue(
            Op::FetchAdd {
                peer: cx.rank,
                remote: tasks_loc(at),
                delta: 0,
            },
            Pending::OwnCheck,
        );
    }

    /// One of its operations completed with `value`.
    pub(crate) fn complete<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        p: Pending,
        value: u64,
        queue: &mut Queue,
        mem: &dyn Memory,
        closed: bool,
    ) -> Result<(), CoreError> {
        let area = self.area;
        match p {
            // ----- claim -------------------------------------------------------------
            Pending::OwnCheck if cx.cfg.protocol == Protocol::Claim => {
                self.claim_checked(cx, value, queue)
            }
            Pending::OwnDoneCheck { region } => {
                let expected = self.expected_done[region];
                if value > expected {
                    return Err(CoreError::Malformed {
                        from: cx.rank,
                        what: format!(
                            "region {region} counts {value} finished batch reads, only {expected} were claimed"
                        ),
                    });
                }
                let k = self.shareable(queue, &cx.cfg);
                if value < expected || k == 0 {
                    // Thieves are still reading the region (or nothing to share): later,
                    // soon if only the readers hold it up.
                    self.busy = false;
                    if value < expected {
                        self.next_check = cx.now.plus(cx.cfg.backoff_base);
                    }
                    return Ok(());
                }
                let tasks = queue.take_share(k, &cx.cfg, self.demand(), None);
                self.refusing = tasks.is_empty();
                area.write(mem, region, &tasks);
                self.claim_swap(cx, self.word, tasks);
            }
            Pending::OwnSwap {
                expected,
                new,
                tasks,
            } => {
                if value != expected.pack() {
                    // Tickets moved since the check: nothing was published; retry now.
                    self.retracting = false;
                    queue.extend(tasks);
                    self.word = ClaimWord::unpack(value);
                    self.busy = false;
                    self.next_check = cx.now;
                    return Ok(());
                }
                // `expected` is closed with its final ticket: claimed batches will be counted
                // done by their thieves; unclaimed ones come back.
                let batches = claim_batches(expected.n);
                let claimed = expected.ticket.min(batches);
                self.expected_done[expected.region()] += u64::from(claimed);
                if claimed < batches {
                    let (start, _) = claim_batch(expected.n, claimed);
                    let off = area.region(expected.region()) + u64::from(start) * area.slot;
                    let len = u64::from(expected.n - start);
                    let back = area.read(mem, off, len, cx.rank)?;
                    // No thief reads them now (the generation closed before its ticket
                    // reached them): the simulator frees their pages.
                    mem.discard(Loc::new(seg::TASKS, off), len * area.slot);
                    queue.extend(back);
                }
                self.word = new;
                self.published = new.n > 0;
                self.published_costliest = tasks.iter().map(|t| t.cost_ns).max().unwrap_or(0);
                if std::mem::take(&mut self.retracting) {
                    // Taken back to publish from the cheap end: now, not a check later.
                    self.next_check = cx.now;
                }
                self.offer_known = true;
                self.told = 0;
                self.busy = false;
            }
            // ----- lock --------------------------------------------------------------
            Pending::OwnCheck => self.lock_checked(cx, value, queue, mem),
            Pending::OwnLock { purpose } => {
                if value != lock::AVAILABLE {
                    // A thief holds it: try again soon.
                    self.busy = false;
                    self.next_check = cx.now.plus(cx.cfg.backoff_base);
                    return Ok(());
                }
                if purpose == LockPurpose::Reclaim {
                    let mut b = [0u8; 8];
                    mem.read(Loc::new(seg::TASKS, tasks::COUNT), &mut b);
                    let n = u64::from_le_bytes(b).min(u64::from(cx.cfg.shared_capacity));
                    let back = area.read(mem, area.region(0), n, cx.rank)?;
                    queue.extend(back);
                    mem.write(Loc::new(seg::TASKS, tasks::COUNT), &word(0));
                    self.published = false;
                    self.offer_known = true;
                } else {
                    self.publish_locked(cx, queue, mem);
                }
                self.unlock(cx, lock::held_by(cx.rank));
            }
            Pending::OwnUnlock => {
                self.busy = false;
            }
            Pending::Advert { .. } => {}
            // ----- request -----------------------------------------------------------
            Pending::Reply { .. } => {
                self.serving = false;
                self.serve_requests(cx, queue, mem, closed);
            }
        }
        Ok(())
    }

    /// `claim`: the published generation should be taken back and published anew, from
    /// the cheap end: the queue is in predicted order (a balanced start) and tasks
    /// cheaper than some published one joined it since (pushes, the string plan's cheap
    /// part to a rank that gave costly tasks). The workers run the queue first and the
    /// published set last, so a costly task published at the start ran at the end, or was
    /// stolen there — one costly task's worth of imbalance (measured: 0.931 at 512 ranks).
    /// Cheaper by cost class, the queue's order: within a class the queue is in no order,
    /// so by exact costs its back was often cheaper than a task just published from it,
    /// and the owner took its set back and published it again without end (measured
    /// costs, which vary within a class: a 2-rank job ran 50× its ideal time).
    fn retract(&self, queue: &Queue) -> bool {
        use crate::predicted_order::cost_class;
        self.published
            && queue
                .cheapest_sorted()
                .is_some_and(|c| cost_class(c) < cost_class(self.published_costliest))
    }

    /// `claim`: the owner learned its claim word.
    fn claim_checked<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, w: u64, queue: &Queue) {
        let wd = ClaimWord::unpack(w);
        self.word = wd;
        let unclaimed = wd.ticket < claim_batches(wd.n);
        self.published = unclaimed;
        self.offer_known = true;
        self.told = 0;
        // Close the generation (taking its unclaimed batches back) when workers_idle, or reset a
        // ticket count heading for overflow.
        let retract = unclaimed && self.retract(queue);
        if retract {
            cx.stats.shares_retracted += 1;
            self.retracting = true;
        }
        if (queue.workers_idle && queue.is_empty() && unclaimed)
            || retract
            || (!unclaimed && wd.ticket > 1 << 31)
        {
            self.claim_swap(cx, wd, Vec::new());
            return;
        }
        if !unclaimed && self.shareable(queue, &cx.cfg) > 0 {
            // Publishing reuses region g+1 mod 2: first check its readers are done.
            let region = usize::from(wd.generation.wrapping_add(1) % 2);
            cx.issue(
                Op::FetchAdd {
                    peer: cx.rank,
                    remote: tasks_loc(tasks::DONE[region]),
                    delta: 0,
                },
                Pending::OwnDoneCheck { region },
            );
            return;
        }
        self.busy = false;
    }

    fn claim_swap<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        expected: ClaimWord,
        tasks: Vec<Task>,
    ) {
        let new = ClaimWord {
            generation: expected.generation.wrapping_add(1),
            n: tasks.len() as u16,
            ticket: 0,
        };
        cx.issue(
            Op::Cas {
                peer: cx.rank,
                remote: tasks_loc(tasks::CLAIM),
                expected: expected.pack(),
                desired: new.pack(),
            },
            Pending::OwnSwap {
                expected,
                new,
                tasks,
            },
        );
    }

    /// `lock`: the owner learned its lock word.
    fn lock_checked<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        v: u64,
        queue: &mut Queue,
        mem: &dyn Memory,
    ) {
        if v == lock::REFILL {
            // A thief took the whole shared set and handed the lock over: refill, unlock.
            self.publish_locked(cx, queue, mem);
            self.unlock(cx, lock::REFILL);
            return;
        }
        if v != lock::AVAILABLE {
            self.busy = false; // A thief is at work; look again later.
            return;
        }
        // Available, not handed over: a published set is still whole (a thief takes all).
        self.offer_known = true;
        let purpose = if queue.workers_idle && queue.is_empty() && self.published {
            LockPurpose::Reclaim
        } else if !self.published && self.shareable(queue, &cx.cfg) > 0 {
            LockPurpose::Publish
        } else {
            self.busy = false;
            return;
        };
        cx.issue(
            Op::Cas {
                peer: cx.rank,
                remote: tasks_loc(tasks::LOCK),
                expected: lock::AVAILABLE,
                desired: lock::held_by(cx.rank),
            },
            Pending::OwnLock { purpose },
        );
    }

    /// With the lock held: fills region 0 with a share of the queue and sets the count.
    fn publish_locked<P>(&mut self, cx: &Ctx<P>, queue: &mut Queue, mem: &dyn Memory) {
        let k = self.shareable(queue, &cx.cfg);
        let tasks = queue.take_share(k, &cx.cfg, self.demand(), None);
        self.refusing = k > 0 && tasks.is_empty();
        let k = tasks.len();
        self.area.write(mem, 0, &tasks);
        mem.write(Loc::new(seg::TASKS, tasks::COUNT), &word(k as u64));
        self.published = k > 0;
        self.offer_known = true;
        self.told = 0;
    }

    fn unlock<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, from: u64) {
        cx.issue(
            Op::Cas {
                peer: cx.rank,
                remote: tasks_loc(tasks::LOCK),
                expected: from,
                desired: lock::AVAILABLE,
            },
            Pending::OwnUnlock,
        );
    }

    /// `request`: answers waiting thieves one at a time (region 0 holds the reply).
    fn serve_requests<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        queue: &mut Queue,
        mem: &dyn Memory,
        closed: bool,
    ) {
        if self.serving {
            return;
        }
        let Some(Request {
            thief,
            stale,
            seq,
            workers_idle,
            rtype,
        }) = self.requests.pop_front()
        else {
            return;
        };
        // One answered: one more waiter may be told of what is left.
        self.told = self.told.saturating_sub(1);
        let demand = (workers_idle && super::thief::advertised(&cx.cfg)) || self.demand();
        let mut unsupported = false;
        let tasks = if rtype > 0 {
            // A typed request: only tasks with a variant on the type; a type none of this
            // epoch's tasks here has (or one this job does not declare) is unsupported.
            match cx.cfg.resource_types.get(usize::from(rtype) - 1) {
                _ if stale || closed => Vec::new(),
                Some(set) => {
                    let set = set.clone();
                    // Work this rank cannot run itself keeps nothing private.
                    let mine = match (&set, &queue.local) {
                        (Some(ks), Some(local)) => ks.iter().any(|k| local.contains(k)),
                        _ => true,
                    };
                    let t = queue.take_share_of(&set, &cx.cfg, demand || !mine, Some(thief));
                    unsupported = t.is_empty() && !queue.has_seen(&set);
                    t
                }
                None => {
                    unsupported = true;
                    Vec::new()
                }
            }
        } else {
            let k = if stale || closed {
                0
            } else {
                queue.shareable(&cx.cfg, demand)
            };
            let t = queue.take_share(k, &cx.cfg, demand, Some(thief));
            if k > 0 && t.is_empty() {
                // The mapper keeps this work here: no advertisement until more arrives.
                self.refusing = true;
            }
            t
        };
        let k = tasks.len();
        let bytes = self.area.write_packed(mem, 0, &tasks);
        // A typed thief keeps its own per-type backoff: it waits for no advertisement.
        if k == 0 && rtype == 0 && !stale && !closed && super::thief::advertised(&cx.cfg) {
            // The thief blacklists this rank on its empty reply: advertise there later.
            self.add_waiter(thief, workers_idle);
        }
        let pieces = if k > 0 {
            vec![(Loc::new(seg::TASKS, self.area.region(0)), bytes)]
        } else {
            Vec::new()
        };
        self.serving = true;
        cx.issue(
            Op::Write {
                peer: thief,
                remote: Loc::new(seg::TASKS, self.area.staging()),
                pieces,
                signal: Some(
                    Signal::Reply {
                        tasks: k as u64,
                        seq,
                        unsupported,
                    }
                    .pack(),
                ),
            },
            Pending::Reply { thief },
        );
    }
}

#[cfg(test)]
mod tests;
