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
    pub(crate) hungry: bool,
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
    /// epoch (each once), and whether each is idle (hungry).
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
    pub(crate) fn on_wait<P>(&mut self, cx: &Ctx<P>, from: Rank, epoch: u64, hungry: bool) {
        if epoch == cx.epoch & super::thief::EPOCH_MASK {
            self.add_waiter(from, hungry);
            self.offer_known = false;
            self.next_check = cx.now;
        }
    }

    fn add_waiter(&mut self, thief: Rank, hungry: bool) {
        match self.waiters.iter_mut().find(|w| w.0 == thief) {
            Some(w) => w.1 = hungry,
            None => self.waiters.push((thief, hungry)),
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
        let reclaim = (queue.hungry && queue.is_empty() && self.published) || self.retract(queue);
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
                    let back = area.read(mem, off, u64::from(expected.n - start), cx.rank)?;
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
    fn retract(&self, queue: &Queue) -> bool {
        self.published
            && queue
                .cheapest_sorted()
                .is_some_and(|c| c < self.published_costliest)
    }

    /// `claim`: the owner learned its claim word.
    fn claim_checked<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, w: u64, queue: &Queue) {
        let wd = ClaimWord::unpack(w);
        self.word = wd;
        let unclaimed = wd.ticket < claim_batches(wd.n);
        self.published = unclaimed;
        self.offer_known = true;
        self.told = 0;
        // Close the generation (taking its unclaimed batches back) when hungry, or reset a
        // ticket count heading for overflow.
        let retract = unclaimed && self.retract(queue);
        if retract {
            cx.stats.shares_retracted += 1;
            self.retracting = true;
        }
        if (queue.hungry && queue.is_empty() && unclaimed)
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
        let purpose = if queue.hungry && queue.is_empty() && self.published {
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
            hungry,
            rtype,
        }) = self.requests.pop_front()
        else {
            return;
        };
        // One answered: one more waiter may be told of what is left.
        self.told = self.told.saturating_sub(1);
        let demand = (hungry && super::thief::advertised(&cx.cfg)) || self.demand();
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
            self.add_waiter(thief, hungry);
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
mod tests {
    use super::*;
    use crate::Config;
    use crate::ctx::testing::Mem;

    fn queue(n: u32) -> Queue {
        let mut q = Queue::default();
        q.start(
            (0..n)
                .map(|index| Task {
                    owner: 0,
                    index,
                    kind: 0,
                    priority: 0,
                    cost_ns: 0,
                    payload: vec![],
                })
                .collect(),
            false,
        );
        q
    }

    #[test]
    fn request_answers_one_thief_at_a_time_and_stale_ones_with_nothing() {
        let cfg = Config {
            protocol: Protocol::Request,
            ..Config::default()
        };
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
        let mut o = Owner::new(area);
        let mut q = queue(8);
        o.on_request(
            &mut cx,
            Request {
                thief: 1,
                stale: false,
                seq: 5,
                hungry: false,
                rtype: 0,
            },
            &mut q,
            &mem,
            false,
        );
        o.on_request(
            &mut cx,
            Request {
                thief: 2,
                stale: true,
                seq: 6,
                hungry: false,
                rtype: 0,
            },
            &mut q,
            &mem,
            false,
        );
        let c = cx.poll_command().expect("a reply");
        assert!(cx.poll_command().is_none(), "one answer at a time");
        let reply = Signal::Reply {
            tasks: 4,
            seq: 5,
            unsupported: false,
        }
        .pack();
        assert!(
            matches!(&c.op, Op::Write { peer: 1, signal: Some(s), pieces, .. } if *s == reply && pieces.len() == 1),
            "{c:?}"
        );
        // Packed: the four tasks' headers and payloads, not four whole slots.
        let Op::Write { pieces, .. } = &c.op else {
            unreachable!()
        };
        assert!(pieces[0].1 < 4 * area.slot, "{} bytes", pieces[0].1);
        assert_eq!(q.len(), 4, "half the queue went");
        let p = cx.complete(c.token).unwrap();
        o.complete(&mut cx, p, 0, &mut q, &mem, false).unwrap();
        let c = cx.poll_command().expect("the stale request's answer");
        let empty = Signal::Reply {
            tasks: 0,
            seq: 6,
            unsupported: false,
        }
        .pack();
        assert!(
            matches!(&c.op, Op::Write { peer: 2, signal: Some(s), pieces, .. } if *s == empty && pieces.is_empty()),
            "{c:?}"
        );
        assert_eq!(q.len(), 4);
    }

    /// Per-type requests: a typed request gets only tasks of its type's
    /// kinds; a type none of this epoch's tasks here has is unsupported; one whose tasks
    /// are gone is "nothing now"; tasks the owner cannot run are not kept private.
    #[test]
    fn typed_requests_get_their_kinds_or_hear_unsupported() {
        let cfg = Config {
            protocol: Protocol::Request,
            resource_types: vec![None, Some(vec![1]), Some(vec![7])],
            ..Config::default()
        };
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
        let mut o = Owner::new(area);
        let mut q = Queue::default();
        q.start(
            (0..6)
                .map(|index| Task {
                    owner: 0,
                    index,
                    kind: (index % 2) as u16,
                    priority: 0,
                    cost_ns: 0,
                    payload: vec![],
                })
                .collect(),
            false,
        );
        // This rank's CPUs run kind 0 only: its kind-1 tasks keep nothing private.
        q.local = Some(vec![0]);
        let mut answer = |o: &mut Owner, q: &mut Queue, seq: u64, rtype: u16| {
            o.on_request(
                &mut cx,
                Request {
                    thief: 1,
                    stale: false,
                    seq,
                    hungry: false,
                    rtype,
                },
                q,
                &mem,
                false,
            );
            let c = cx.poll_command().expect("an answer");
            let Op::Write {
                signal: Some(s), ..
            } = &c.op
            else {
                panic!("{c:?}")
            };
            let sig = Signal::unpack(*s, 0).unwrap();
            let p = cx.complete(c.token).unwrap();
            o.complete(&mut cx, p, 0, q, &mem, false).unwrap();
            sig
        };
        // Type 1 (kind 1): half of the three, rounded up, then the last one.
        let r = answer(&mut o, &mut q, 1, 2);
        assert_eq!(
            r,
            Signal::Reply {
                tasks: 2,
                seq: 1,
                unsupported: false
            }
        );
        assert_eq!(q.count_of(&Some(vec![1])), 1);
        assert_eq!(q.count_of(&Some(vec![0])), 3, "kind 0 untouched");
        let r = answer(&mut o, &mut q, 2, 2);
        assert!(matches!(r, Signal::Reply { tasks: 1, .. }), "{r:?}");
        // Gone now, but it was here: nothing now, supported.
        let r = answer(&mut o, &mut q, 3, 2);
        assert_eq!(
            r,
            Signal::Reply {
                tasks: 0,
                seq: 3,
                unsupported: false
            }
        );
        // Kind 7 was never here; type 9 is no type of this job.
        for (seq, rtype) in [(4, 3), (5, 10)] {
            let r = answer(&mut o, &mut q, seq, rtype);
            assert_eq!(
                r,
                Signal::Reply {
                    tasks: 0,
                    seq,
                    unsupported: true
                }
            );
        }
        // Any work (type 0): half of the kind-0 tasks, one kept private.
        let r = answer(&mut o, &mut q, 6, 1);
        assert!(matches!(r, Signal::Reply { tasks: 2, .. }), "{r:?}");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn claim_publishes_once_the_region_is_free() {
        let cfg = Config::default();
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
        let mut o = Owner::new(area);
        let mut q = queue(8);
        assert_eq!(o.deadline(&q, &cx.cfg, None), Some(Time(0)));
        o.step(&mut cx, &mut q, &mem, false, None);
        let check = cx.poll_command().expect("word check");
        let p = cx.complete(check.token).unwrap();
        o.complete(&mut cx, p, ClaimWord::default().pack(), &mut q, &mem, false)
            .unwrap();
        let done = cx.poll_command().expect("done check of region 1");
        let p = cx.complete(done.token).unwrap();
        o.complete(&mut cx, p, 0, &mut q, &mem, false).unwrap();
        let swap = cx.poll_command().expect("generation swap");
        // Two thirds go: the first thief's batch (3) equals what the owner keeps (2)...
        let new = ClaimWord {
            generation: 1,
            n: 6,
            ticket: 0,
        };
        assert!(
            matches!(swap.op, Op::Cas { expected: 0, desired, .. } if desired == new.pack()),
            "{swap:?}"
        );
        assert_eq!(q.len(), 2);
        // A thief took a ticket meanwhile: the swap fails and the tasks come back.
        let p = cx.complete(swap.token).unwrap();
        o.complete(&mut cx, p, 1, &mut q, &mem, false).unwrap();
        assert_eq!(q.len(), 8);
        assert!(!o.is_sharing(&queue(0), &cx.cfg), "nothing was published");
    }

    /// Drives the owner's own operations (checks, swaps) with the given word values until
    /// it issues nothing more of its own; returns the other commands (signals).
    fn settle(
        o: &mut Owner,
        cx: &mut Ctx<Pending>,
        q: &mut Queue,
        mem: &Mem,
        word: &mut ClaimWord,
    ) -> Vec<Op> {
        let mut out = Vec::new();
        // As the node does: a step after every completion.
        o.step(cx, q, mem, false, None);
        while let Some(c) = cx.poll_command().or_else(|| {
            o.step(cx, q, mem, false, None);
            cx.poll_command()
        }) {
            let value = match &c.op {
                Op::FetchAdd { peer: 0, .. } if matches!(c.op, Op::FetchAdd { remote, .. } if remote == tasks_loc(tasks::CLAIM)) => {
                    word.pack()
                }
                Op::FetchAdd { peer: 0, .. } => 0,
                Op::Cas {
                    peer: 0, desired, ..
                } => {
                    let old = word.pack();
                    *word = ClaimWord::unpack(*desired);
                    old
                }
                _ => {
                    out.push(c.op.clone());
                    0
                }
            };
            let p = cx.complete(c.token).unwrap();
            o.complete(cx, p, value, q, mem, false).unwrap();
        }
        out
    }

    #[test]
    fn claim_takes_back_costly_tasks_published_before_cheaper_ones_came() {
        let cfg = Config::default();
        let area = TaskArea::new(&cfg, 4);
        let mem = Mem::new([area.bytes(), 64, 64]);
        let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 4);
        let mut o = Owner::new(area);
        let task = |index, cost_ns| Task {
            owner: 0,
            index,
            kind: 0,
            priority: 0,
            cost_ns,
            payload: vec![],
        };
        // A balanced start: six costly tasks in predicted order; four are published.
        let mut q = Queue::default();
        q.start((0..6).map(|i| task(i, 1_000_000)).collect(), true);
        let mut word = ClaimWord::default();
        assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
        assert_eq!((word.n, q.len()), (4, 2));
        // Cheap pushes join: the costly published tasks come back at once, and what is
        // published anew (at once) is the cheap end (with cost estimates, two thirds of
        // the work from the back: the cheap tasks and some costly ones); what stays for the
        // workers is costly, and nothing cheaper than it is published.
        let generation = word.generation;
        q.extend((6..26).map(|i| task(i, 10_000)));
        settle(&mut o, &mut cx, &mut q, &mem, &mut word);
        assert_eq!(
            word.generation,
            generation.wrapping_add(2),
            "closed, then anew"
        );
        assert_eq!(cx.stats.shares_retracted, 1);
        assert_eq!((word.n, q.len()), (24, 2));
        assert_eq!(q.cheapest_sorted(), Some(1_000_000));
        assert!(
            !o.retract(&q),
            "nothing cheaper came since: the generation stays"
        );
        let n = word.n;
        settle(&mut o, &mut cx, &mut q, &mem, &mut word);
        assert_eq!(word.n, n);
    }

    #[test]
    fn waiters_hear_of_new_work_as_many_as_can_get_some() {
        let cfg = Config::default();
        let area = TaskArea::new(&cfg, 8);
        let mem = Mem::new([area.bytes(), 64, 64]);
        let mut cx: Ctx<Pending> = Ctx::new(cfg, 0, 8);
        cx.epoch = 3;
        let mut o = Owner::new(area);
        let mut q = queue(0);
        let mut word = ClaimWord::default();
        // Four thieves found it empty (one of another epoch: ignored); nothing to offer.
        for t in 1..=4 {
            o.on_wait(&cx, t, 3, t == 2);
        }
        o.on_wait(&cx, 5, 2, true);
        assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
        // Work arrives: 4 tasks: 3 published (two thirds), in 2 batches (2, 1): the two
        // longest waiting thieves are told.
        q.extend(queue(4).take_front(4));
        o.work_arrived(cx.now);
        let sent = settle(&mut o, &mut cx, &mut q, &mem, &mut word);
        assert_eq!(word.n, 3, "{word:?}");
        let told: Vec<Rank> = sent
            .iter()
            .map(|op| match op {
                Op::Write {
                    peer,
                    signal: Some(s),
                    ..
                } => {
                    assert_eq!(
                        Signal::unpack(*s, 0),
                        Ok(Signal::Advert {
                            epoch: 3,
                            hops: 0,
                            tasks: 3
                        })
                    );
                    *peer
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(told, [1, 2]);
        assert_eq!(cx.stats.adverts_sent, 2);
        // Told once per offer: nothing more until it changes.
        assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
        // Both batches taken, the last queued task left: the waiters still here (3, 4)
        // have busy workers: it stays private.
        word.ticket = 2;
        o.on_refill(&cx);
        assert!(settle(&mut o, &mut cx, &mut q, &mem, &mut word).is_empty());
        assert_eq!(
            (q.len(), word.generation),
            (1, 1),
            "not published: {word:?}"
        );
        // Thief 3 runs dry and says so: the last task goes to it.
        o.on_wait(&cx, 3, 3, true);
        let sent = settle(&mut o, &mut cx, &mut q, &mem, &mut word);
        assert_eq!((q.len(), word.generation, word.n), (0, 2, 1), "{word:?}");
        assert!(matches!(sent[..], [Op::Write { peer: 3, .. }]), "{sent:?}");
        // A new epoch forgets the rest.
        o.start_epoch();
        assert!(o.waiters.is_empty());
    }
}
