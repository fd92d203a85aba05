//! A rank's queue of tasks: its workers run it from the front, its owner side shares
//! half of it (at most the shared capacity, never leaving fewer than `min_private`),
//! taken evenly spread over the queue's back part, and stolen or reclaimed tasks join it
//! at the back.
//!
//! Why spread: a solver's cells come in space order and its costly ones bunch together (a
//! flame front). Half of the queue by count taken from the back can hold all of the costly
//! work or none of it, and halving then ping-pongs small batches for the rest of the
//! epoch; every other task holds about half of the work wherever the front lies, without
//! knowing any cost.
//!
//! Cost-aware batches (`Config::cost_aware`): when tasks carry estimates, the share is
//! chosen by work instead — walking from the back, a task goes when giving it brings the
//! work given closer to the share's fraction of the work walked (error diffusion: equal
//! costs give every other task, as above; a bunch of costly tasks splits evenly), up to the
//! count limits — and under `claim` the published set is laid out so that each halving
//! batch holds its part of the work, not just of the count. A share of less estimated
//! work than `Config::move_cost` is not made. Tasks without an estimate count as the
//! mean of those with one; with none, the count rule.

use crate::Config;
use crate::Rank;
use crate::fasthash::IntMap;
use crate::layout::{COST_HINT_MAX_NS, Task, claim_batch, claim_batches};
use crate::mapper::{DefaultMapper, Mapper, TaskInfo};
use crate::resources::{KindSet, runs};
use std::collections::VecDeque;

/// The queue's back part that sharing spreads over (beyond it, twice the tasks shared),
/// which bounds a share's work to O(max(k, this)).
pub(crate) const SPREAD_WINDOW: usize = 1 << 14;

/// How far a stolen task's estimate may stray from the mapper's estimate for its kind,
/// either way, before it is bounded (remote data is not trusted blindly).
pub(crate) const REMOTE_ESTIMATE_FACTOR: u64 = 64;

/// Tasks to run or share, and whether the workers found it empty.
#[derive(Debug)]
pub(crate) struct Queue {
    /// Front: run next; back: share first.
    tasks: VecDeque<Task>,
    /// Workers asked for tasks and found none (cleared when work arrives or the epoch
    /// ends): the owner side then takes its published tasks back.
    pub(crate) workers_idle: bool,
    /// The epoch started with the tasks in predicted order, costliest first: shares come
    /// from the back (the cheapest, the end game's small change) instead of spread.
    sorted: bool,
    /// Some task this epoch has a priority other than 0: the queue is kept in priority
    /// order, highest first (stable: queue order among equals), and shares from the back.
    prioritized: bool,
    /// The rank's policy: priorities when tasks join, permits when they are shared.
    pub(crate) mapper: Box<dyn Mapper>,
    /// The sum of the queued tasks' estimates (those with one), ns, and how many have one.
    est_sum: u128,
    est_n: usize,
    /// Queued tasks per kind, and every kind queued this epoch (sorted): per-type work
    /// requests ask which types the queue can serve ([`Queue::holds_any`]).
    kinds: IntMap<u16, u32>,
    seen: Vec<u16>,
    /// The kinds this rank's own resources run (None: every kind, or not stated): the
    /// mapper cannot keep here what the rank cannot run, and a typed share keeps
    /// `min_private` tasks only of kinds it can.
    pub(crate) local: KindSet,
    /// [`Queue::order_buckets`].
    order_buckets: Vec<Vec<Task>>,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            tasks: VecDeque::new(),
            workers_idle: false,
            sorted: false,
            prioritized: false,
            mapper: Box::new(DefaultMapper::default()),
            est_sum: 0,
            est_n: 0,
            kinds: IntMap::default(),
            seen: Vec::new(),
            local: None,
            order_buckets: Vec::new(),
        }
    }
}

/// What the mapper sees of `t`.
fn info(t: &Task) -> TaskInfo {
    TaskInfo {
        owner: t.owner,
        index: t.index,
        kind: t.kind,
        priority: t.priority,
        cost_ns: t.cost_ns,
    }
}

/// A task's estimate once it joins: its own (bounded by [`COST_HINT_MAX_NS`], and when
/// it comes from another rank by the mapper's estimate `local` within
/// [`REMOTE_ESTIMATE_FACTOR`] either way), else the mapper's, else 0 (unknown).
fn bound(cost: u64, local: Option<u64>, remote: bool) -> u64 {
    let local = local.filter(|&l| l > 0).map(|l| l.min(COST_HINT_MAX_NS));
    match (cost.min(COST_HINT_MAX_NS), local) {
        (0, l) => l.unwrap_or(0),
        (c, Some(l)) if remote => c.clamp(
            (l / REMOTE_ESTIMATE_FACTOR).max(1),
            l.saturating_mul(REMOTE_ESTIMATE_FACTOR),
        ),
        (c, _) => c,
    }
}

/// Tasks of one kind come in runs (a step's cells): they are counted in and out of the
/// queue a run at a time, not a map lookup per task.
#[derive(Default)]
struct KindRun(Option<(u16, u32)>);

impl KindRun {
    /// One more task of `kind`; the run it ends, if it ends one.
    fn add(&mut self, kind: u16) -> Option<(u16, u32)> {
        match &mut self.0 {
            Some((k, n)) if *k == kind => {
                *n += 1;
                None
            }
            run => run.replace((kind, 1)),
        }
    }
}

/// `n` more tasks of `kind` queued: counted in `kinds`, and `kind` in `seen` (sorted).
fn count_kind(kinds: &mut IntMap<u16, u32>, seen: &mut Vec<u16>, kind: u16, n: u32) {
    *kinds.entry(kind).or_insert(0) += n;
    if let Err(at) = seen.binary_search(&kind) {
        seen.insert(at, kind);
    }
}

impl Queue {
    /// The buffers that put a new epoch in predicted order
    /// ([`crate::predicted_order::costliest_first`]), kept from epoch to epoch.
    pub(crate) fn order_buckets(&mut self) -> &mut Vec<Vec<Task>> {
        &mut self.order_buckets
    }

    /// The queue's buffer, empty, for the next epoch's tasks (the queue is empty between
    /// epochs: every task ran).
    pub(crate) fn spare(&mut self) -> Vec<Task> {
        let mut v = Vec::from(std::mem::take(&mut self.tasks));
        v.clear();
        v
    }

    /// Takes back the buffer of [`Queue::spare`], unused (a refused start).
    pub(crate) fn give_back(&mut self, spare: Vec<Task>) {
        self.tasks = spare.into();
    }

    /// A new epoch's queue; `sorted`: costliest first, by predicted cost.
    pub(crate) fn start(&mut self, tasks: VecDeque<Task>, sorted: bool) {
        self.tasks = tasks;
        self.workers_idle = false;
        self.sorted = sorted;
        self.prioritized = false;
        self.est_sum = 0;
        self.est_n = 0;
        self.kinds.clear();
        self.seen.clear();
        self.joined(0, false);
    }

    /// Tasks from `from` on just joined (`remote`: from other ranks, or back from the
    /// shared set): the mapper sets their priorities and fills in or bounds their
    /// estimates ([`bound`]); with any priority other than 0 (now or before, this epoch)
    /// the queue is put in priority order.
    fn joined(&mut self, from: usize, remote: bool) {
        self.account(from..self.tasks.len(), remote);
        self.reorder(from > 0 || remote);
    }

    /// Tasks spawned on this rank join at the front: its workers go depth first (a
    /// tree's frontier stays small), and thieves take the oldest, nearest the root, from
    /// the back. The first task of `tasks` runs first.
    pub(crate) fn push_front(&mut self, tasks: Vec<Task>) {
        let n = tasks.len();
        for t in tasks.into_iter().rev() {
            self.tasks.push_front(t);
        }
        self.account(0..n, false);
        self.reorder(n < self.tasks.len());
    }

    /// The mapper sets the priorities and estimates of the tasks at `range`, which count
    /// in the queue's sums from now on.
    fn account(&mut self, range: std::ops::Range<usize>, remote: bool) {
        let mapper = &mut self.mapper;
        let mut run = KindRun::default();
        for t in self.tasks.range_mut(range) {
            let i = info(t);
            t.priority = mapper.priority(&i);
            // The mapper's estimate is asked only where it counts: for a task without one,
            // or to bound a remote one (`Mapper::estimate_ns`).
            if t.cost_ns == 0 || remote {
                t.cost_ns = bound(t.cost_ns, mapper.estimate_ns(&i), remote);
            } else {
                t.cost_ns = t.cost_ns.min(COST_HINT_MAX_NS);
            }
            self.prioritized |= t.priority != 0;
            if t.cost_ns > 0 {
                self.est_sum += u128::from(t.cost_ns);
                self.est_n += 1;
            }
            if let Some((kind, n)) = run.add(t.kind) {
                count_kind(&mut self.kinds, &mut self.seen, kind, n);
            }
        }
        if let Some((kind, n)) = run.0 {
            count_kind(&mut self.kinds, &mut self.seen, kind, n);
        }
    }

    /// Puts the queue back in its order after tasks joined (`mixed`: beside others, or
    /// from another rank: a stolen batch comes in the victim's batch layout).
    fn reorder(&mut self, mixed: bool) {
        if self.sorted && mixed {
            // A queue in predicted order stays so: newcomers (pushed, stolen) join by
            // their estimate, so the costly ones run early wherever they came from and the
            // epoch ends on cheap tasks, which split finely (a costly task pushed to the
            // back ran last: one task's worth of imbalance no steal can undo).
            // (By cost class, as the epoch began: `crate::predicted_order`.)
            self.tasks
                .make_contiguous()
                .sort_by_key(|t| std::cmp::Reverse(crate::predicted_order::cost_class(t.cost_ns)));
        }
        if self.prioritized {
            // Two sorted runs (the queue, the newcomers): the stable sort merges them.
            self.tasks
                .make_contiguous()
                .sort_by_key(|t| std::cmp::Reverse(t.priority));
        }
    }

    /// A task left the queue.
    fn forget(&mut self, t: &Task) {
        self.forget_all(std::slice::from_ref(t));
    }

    /// [`Queue::forget`] for tasks that left together: their kinds counted out a run at a
    /// time ([`KindRun`]), as [`Queue::account`] counts them in.
    fn forget_all(&mut self, tasks: &[Task]) {
        let mut run = KindRun::default();
        for t in tasks {
            if t.cost_ns > 0 {
                self.est_sum -= u128::from(t.cost_ns);
                self.est_n -= 1;
            }
            if let Some((kind, n)) = run.add(t.kind) {
                self.uncount_kind(kind, n);
            }
        }
        if let Some((kind, n)) = run.0 {
            self.uncount_kind(kind, n);
        }
    }

    fn uncount_kind(&mut self, kind: u16, n: u32) {
        if let Some(c) = self.kinds.get_mut(&kind) {
            *c -= n;
            if *c == 0 {
                self.kinds.remove(&kind);
            }
        }
    }

    /// A task went back to the queue's back as it was (no new bounds).
    fn put_back(&mut self, t: Task) {
        if t.cost_ns > 0 {
            self.est_sum += u128::from(t.cost_ns);
            self.est_n += 1;
        }
        *self.kinds.entry(t.kind).or_insert(0) += 1;
        self.tasks.push_back(t);
    }

    /// Queued tasks with a variant on a resource of kinds `set`.
    pub(crate) fn count_of(&self, set: &KindSet) -> usize {
        match set {
            None => self.tasks.len(),
            Some(ks) => ks
                .iter()
                .map(|k| self.kinds.get(k).copied().unwrap_or(0) as usize)
                .sum(),
        }
    }

    /// Queued tasks of kinds in `set` that this rank's own resources can run.
    fn runnable_here(&self, set: &KindSet) -> usize {
        if self.local.is_none() {
            return self.count_of(set);
        }
        self.kinds
            .iter()
            .filter(|(k, _)| runs(set, **k) && runs(&self.local, **k))
            .map(|(_, &n)| n as usize)
            .sum()
    }

    /// Whether a queued task has a variant on a resource of kinds `set`.
    pub(crate) fn holds_any(&self, set: &KindSet) -> bool {
        self.count_of(set) > 0
    }

    /// Whether a task of a kind in `set` was queued here this epoch.
    pub(crate) fn has_seen(&self, set: &KindSet) -> bool {
        match set {
            None => !self.seen.is_empty(),
            Some(ks) => ks.iter().any(|k| self.seen.binary_search(k).is_ok()),
        }
    }

    /// Up to `max` tasks of kinds in `set` from the front (the others stay in order).
    pub(crate) fn take_front_of(&mut self, max: usize, set: &KindSet) -> Vec<Task> {
        if set.is_none() {
            return self.take_front(max);
        }
        let mut out = Vec::new();
        let mut i = 0;
        while out.len() < max && i < self.tasks.len() && self.holds_any(set) {
            if runs(set, self.tasks[i].kind) {
                let t = self.tasks.remove(i).expect("in range");
                self.forget(&t);
                out.push(t);
            } else {
                i += 1;
            }
        }
        out
    }

    /// A share for a thief asking for work of kinds `set` (a typed request): half of the
    /// queued tasks of those kinds, rounded up, from the back, within `min_private` (none
    /// kept with `demand`: an idle thief, or work the owner cannot run) and the shared
    /// capacity, less what the mapper keeps here.
    pub(crate) fn take_share_of(
        &mut self,
        set: &KindSet,
        cfg: &Config,
        demand: bool,
        thief: Option<Rank>,
    ) -> Vec<Task> {
        let c = self.count_of(set);
        let private = if demand {
            0
        } else {
            (cfg.min_private as usize).min(self.runnable_here(set))
        };
        // What stays private is of these kinds (at most those this rank runs itself).
        let k = (c - c / 2)
            .min(c.saturating_sub(private))
            .min(cfg.shared_capacity as usize);
        let mut offered = Vec::with_capacity(k);
        let mut i = self.tasks.len();
        while offered.len() < k && i > 0 {
            i -= 1;
            if runs(set, self.tasks[i].kind) {
                let t = self.tasks.remove(i).expect("in range");
                self.forget(&t);
                offered.push(t);
            }
        }
        offered.reverse();
        self.permitted(offered, thief)
    }

    /// Cost-aware sharing applies: the mean estimate of the tasks that have one. Not
    /// while the queue holds tasks this rank cannot run: those go by count, all of them
    /// shareable (whatever they cost, they cannot be finished here).
    fn mean_estimate(&self, cfg: &Config) -> Option<f64> {
        let foreign = self.local.is_some() && self.runnable_here(&None) < self.tasks.len();
        (cfg.cost_aware && self.est_n > 0 && !foreign)
            .then(|| self.est_sum as f64 / self.est_n as f64)
    }

    /// The queue's estimated work, ns (tasks without an estimate at `mean`).
    fn work(&self, mean: f64) -> f64 {
        self.est_sum as f64 + (self.tasks.len() - self.est_n) as f64 * mean
    }

    /// Tasks to share, in queue order — with cost estimates ([`Queue::take_by_cost`]) a
    /// fraction of the work; else `k` (≤ `len()`, from [`Queue::shareable`] with the same
    /// `demand`) tasks from the back of a queue in priority or predicted order (its lowest
    /// or cheapest), or spread ([`Queue::take_spread`]) — less those the mapper keeps
    /// here (`thief`: who asks, if known), which stay queued. Under `claim` with
    /// estimates, laid out for its batches ([`arrange_for_batches`]). Nothing if `k` is 0.
    pub(crate) fn take_share(
        &mut self,
        k: usize,
        cfg: &Config,
        demand: bool,
        thief: Option<Rank>,
    ) -> Vec<Task> {
        let mean = self.mean_estimate(cfg);
        let offered = if k == 0 {
            Vec::new()
        } else if let Some(mean) = mean {
            self.take_by_cost(cfg, demand, mean)
        } else if self.sorted || self.prioritized {
            let at = self.tasks.len() - k.min(self.tasks.len());
            let out: Vec<Task> = self.tasks.split_off(at).into();
            self.forget_all(&out);
            out
        } else {
            self.take_spread(k)
        };
        let mut out = self.permitted(offered, thief);
        if let Some(mean) = mean
            && cfg.protocol == crate::Protocol::Claim
        {
            arrange_for_batches(&mut out, mean);
        }
        out
    }

    /// `offered` less what the mapper keeps here (back in the queue).
    fn permitted(&mut self, offered: Vec<Task>, thief: Option<Rank>) -> Vec<Task> {
        if offered.is_empty() {
            return offered;
        }
        let infos: Vec<TaskInfo> = offered.iter().map(info).collect();
        let mut permit = vec![true; offered.len()];
        self.mapper.permit_steal(thief, &infos, &mut permit);
        // What this rank cannot run goes whatever the mapper says (it would stay forever).
        for (p, t) in permit.iter_mut().zip(&offered) {
            *p |= !runs(&self.local, t.kind);
        }
        if permit.iter().all(|&p| p) {
            return offered;
        }
        let mut out = Vec::with_capacity(offered.len());
        for (t, p) in offered.into_iter().zip(permit) {
            if p {
                out.push(t);
            } else {
                self.put_back(t);
            }
        }
        if self.prioritized {
            self.tasks
                .make_contiguous()
                .sort_by_key(|t| std::cmp::Reverse(t.priority));
        }
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Cost-aware: walking from the back, each task goes when giving it brings the work
    /// given closest to the share's fraction of the work walked (`claim`: two thirds,
    /// else half; in priority or predicted order, from the back while the work given stays
    /// nearest the fraction of the whole queue's), at most the count limits of
    /// [`Queue::shareable`]; nothing when that is less work than `move_cost` (the end
    /// game). Tasks without an estimate count as `mean`.
    fn take_by_cost(&mut self, cfg: &Config, demand: bool, mean: f64) -> Vec<Task> {
        let q = self.tasks.len();
        let frac = if cfg.protocol == crate::Protocol::Claim {
            2.0 / 3.0
        } else {
            0.5
        };
        let private = cfg.min_private.saturating_sub(u32::from(demand)) as usize;
        let cap = q.saturating_sub(private).min(cfg.shared_capacity as usize);
        let est = |t: &Task| {
            if t.cost_ns > 0 {
                t.cost_ns as f64
            } else {
                mean
            }
        };
        let target = self.work(mean) * frac;
        let ordered = self.sorted || self.prioritized;
        // Whether each task of the walked tail, from the back, goes.
        let mut give = Vec::new();
        let (mut given, mut walked, mut n) = (0.0f64, 0.0f64, 0usize);
        for t in self.tasks.iter().rev() {
            if n == cap {
                break;
            }
            let c = est(t);
            walked += c;
            let goes = if ordered {
                given + c / 2.0 <= target
            } else {
                given + c / 2.0 <= frac * walked
            };
            give.push(goes);
            if goes {
                given += c;
                n += 1;
            } else if ordered {
                break;
            }
        }
        if n == 0 || given < cfg.move_cost.as_nanos() as f64 {
            return Vec::new();
        }
        // Only the walked tail is split (a share of at most `shared_capacity` tasks from a
        // queue of 50,000 rebuilt the whole queue: 1–2 ms under the node's lock).
        let tail = self.tasks.split_off(q - give.len());
        let mut out = Vec::with_capacity(n);
        for (t, g) in tail.into_iter().zip(give.into_iter().rev()) {
            if g {
                out.push(t);
            } else {
                self.tasks.push_back(t);
            }
        }
        self.forget_all(&out);
        out
    }

    /// How many tasks the owner may share now: under `claim`, two thirds of the queue
    /// (the first thief's batch, half of what is published, then equals what the owner
    /// keeps), else half, rounded up; never leaving fewer than `min_private` — one fewer
    /// when idle thieves wait for work here (`demand`: the task a worker runs counts as
    /// private, so with the default of 1 even the last queued task goes); at most the
    /// shared capacity.
    ///
    /// Measured (`titus sim --profile w1-s4k`, 10,000 ranks, smallworld/claim): half
    /// rounded down, the rule before, 0.961; half rounded up 0.971; two thirds 0.980.
    pub(crate) fn shareable(&self, cfg: &Config, demand: bool) -> usize {
        let q = self.tasks.len();
        let keep = if cfg.protocol == crate::Protocol::Claim {
            q / 3
        } else {
            q / 2
        };
        // Tasks this rank cannot run itself are never private.
        let private = (cfg.min_private.saturating_sub(u32::from(demand)) as usize)
            .min(self.runnable_here(&None));
        let k = (q - keep)
            .min(q.saturating_sub(private))
            .min(cfg.shared_capacity as usize);
        // Cost-aware: the end game keeps what is cheaper to finish than to move.
        match self.mean_estimate(cfg) {
            Some(mean)
                if k > 0
                    && self.work(mean) * k as f64 / (q as f64)
                        < cfg.move_cost.as_nanos() as f64 =>
            {
                0
            }
            _ => k,
        }
    }

    /// In predicted order: the estimate of the cheapest task (the back's; 0: unknown).
    pub(crate) fn cheapest_sorted(&self) -> Option<u64> {
        self.tasks
            .back()
            .filter(|_| self.sorted && !self.prioritized)
            .map(|t| t.cost_ns)
    }

    /// A worker's grain: `min` tasks from the front (as many as there are), then more
    /// while their estimates sum within `budget_ns`, up to `max` in all. A task of
    /// unknown cost (estimate 0) counts at its kind's mean measured here so far (the
    /// mapper's estimate now); before any task of its kind ended, it is taken only among
    /// the first `min`: it may be long. (Without that, a first epoch, which has no
    /// predictions, took its tasks one at a time: at 131,072 cells of 0.2 µs its run
    /// took 1.5× a later epoch's.)
    pub(crate) fn take_front_within(
        &mut self,
        min: usize,
        max: usize,
        budget_ns: u64,
    ) -> Vec<Task> {
        let mut n = 0;
        let mut sum = 0u64;
        // The last kind asked and its mean (tasks of a kind come in runs).
        let mut asked: Option<(u16, u64)> = None;
        for t in self.tasks.iter().take(max.max(min)) {
            let cost = match (t.cost_ns, asked) {
                (0, Some((kind, mean))) if kind == t.kind => mean,
                (0, _) => {
                    let mean = self.mapper.estimate_ns(&info(t)).unwrap_or(0);
                    asked = Some((t.kind, mean));
                    mean
                }
                (c, _) => c,
            };
            if n >= min && (cost == 0 || sum.saturating_add(cost) > budget_ns) {
                break;
            }
            sum = sum.saturating_add(cost);
            n += 1;
        }
        self.take_front(n)
    }

    /// Up to `max` tasks from the front, for the workers.
    pub(crate) fn take_front(&mut self, max: usize) -> Vec<Task> {
        let n = max.min(self.tasks.len());
        let out: Vec<Task> = self.tasks.drain(..n).collect();
        self.forget_all(&out);
        out
    }

    /// `k` (≤ `len()`) tasks evenly spread over the back part of the queue — all of it
    /// up to [`SPREAD_WINDOW`] tasks, else the back `max(2k, SPREAD_WINDOW)` — in queue
    /// order: task i of that part goes when ⌊(i+1)·k/w⌋ steps, so the part's last task
    /// goes and, for k < w, its first stays (half of the queue: every other task, the
    /// front one kept for the workers).
    pub(crate) fn take_spread(&mut self, k: usize) -> Vec<Task> {
        let q = self.tasks.len();
        let k = k.min(q);
        if k == 0 {
            return Vec::new();
        }
        let w = q.min((2 * k).max(SPREAD_WINDOW));
        let part = self.tasks.split_off(q - w);
        let mut out = Vec::with_capacity(k);
        for (i, t) in part.into_iter().enumerate() {
            let step = |j: usize| (j as u128 * k as u128) / w as u128;
            if step(i + 1) > step(i) {
                out.push(t);
            } else {
                self.tasks.push_back(t);
            }
        }
        self.forget_all(&out);
        out
    }

    /// Tasks join at the back (in priority order, when priorities are in use).
    pub(crate) fn extend(&mut self, tasks: impl IntoIterator<Item = Task>) {
        let from = self.tasks.len();
        self.tasks.extend(tasks);
        self.joined(from, true);
    }
}

/// Lays out a `claim` share of `tasks` so that each of its halving batches
/// ([`claim_batch`]) holds about its part of the estimated work (tasks without an
/// estimate count as `mean`): costliest first, each task goes to the batch furthest below
/// its part (its count's share of the work) that has room; batch by batch, queue order
/// within each. A thief's batch then takes about half of what is published by work too.
fn arrange_for_batches(tasks: &mut Vec<Task>, mean: f64) {
    let n = tasks.len();
    if n < 3 || n > usize::from(u16::MAX) {
        return;
    }
    let est: Vec<f64> = tasks
        .iter()
        .map(|t| {
            if t.cost_ns > 0 {
                t.cost_ns as f64
            } else {
                mean
            }
        })
        .collect();
    let total: f64 = est.iter().sum();
    let nb = claim_batches(n as u16) as usize;
    let mut room: Vec<usize> = (0..nb)
        .map(|b| usize::from(claim_batch(n as u16, b as u32).1))
        .collect();
    let part: Vec<f64> = room.iter().map(|&r| total * r as f64 / n as f64).collect();
    let mut got = vec![0.0f64; nb];
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| est[b].total_cmp(&est[a]));
    let mut batch = vec![0usize; n];
    for i in order {
        let b = (0..nb)
            .filter(|&b| room[b] > 0)
            .max_by(|&x, &y| {
                (part[x] - got[x])
                    .total_cmp(&(part[y] - got[y]))
                    .then(y.cmp(&x))
            })
            .expect("room for every task");
        batch[i] = b;
        room[b] -= 1;
        got[b] += est[i];
    }
    let mut slots: Vec<(usize, Task)> = batch.into_iter().zip(tasks.drain(..)).collect();
    slots.sort_by_key(|&(b, _)| b);
    tasks.extend(slots.into_iter().map(|(_, t)| t));
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn task(index: u32) -> Task {
        Task {
            key: 0,
            owner: 0,
            index,
            kind: 0,
            priority: 0,
            cost_ns: 0,
            payload: Vec::new(),
        }
    }

    pub(super) fn costed(index: u32, cost_ns: u64) -> Task {
        Task {
            cost_ns,
            ..task(index)
        }
    }

    fn indices(v: Vec<Task>) -> Vec<u32> {
        v.iter().map(|t| t.index).collect()
    }

    #[test]
    fn a_grain_sums_estimates_within_its_budget() {
        let mut q = Queue::default();
        let costs = [10, 20, 30, 5, 40, 100, 1, 1];
        q.start(
            (0..8).map(|i| costed(i, costs[i as usize])).collect(),
            false,
        );
        // 10 + 20 + 30 within 60; 5 more would pass it.
        assert_eq!(indices(q.take_front_within(1, 64, 60)), [0, 1, 2]);
        // The first task goes whatever its cost; `min` tasks whatever theirs.
        assert_eq!(indices(q.take_front_within(1, 64, 10)), [3]);
        assert_eq!(indices(q.take_front_within(1, 64, 10)), [4]);
        assert_eq!(indices(q.take_front_within(2, 64, 10)), [5, 6]);
        // `max` bounds the count.
        q.extend((8..20).map(|i| costed(i, 1)));
        assert_eq!(indices(q.take_front_within(1, 4, 1_000)), [7, 8, 9, 10]);
        assert_eq!(q.take_front_within(1, 64, 1_000).len(), 9, "the rest");
        assert!(q.take_front_within(1, 64, 1_000).is_empty());
        // Nothing known (no estimate, no kind mean): one at a time beyond `min`.
        q.start((0..5).map(task).collect(), false);
        assert_eq!(indices(q.take_front_within(1, 64, 1_000)), [0]);
        assert_eq!(indices(q.take_front_within(3, 64, 1_000)), [1, 2, 3]);
        // Once a task of their kind ended here, unknown tasks count at its mean: 100 ns
        // each, three within 350.
        q.start((0..6).map(task).collect(), false);
        q.mapper.task_finished(&crate::mapper::Profile {
            kind: task(0).kind,
            owner: 0,
            index: 9,
            rank: 0,
            duration_ns: 100,
        });
        assert_eq!(indices(q.take_front_within(1, 64, 350)), [0, 1, 2]);
        // A known estimate counts as it is; the unknown after it at the mean.
        q.extend([costed(6, 300)]);
        assert_eq!(indices(q.take_front_within(1, 64, 350)), [3, 4, 5]);
        assert_eq!(indices(q.take_front_within(1, 64, 350)), [6]);
        // A zero budget (no grain): `min` tasks, as take_front.
        q.start((0..5).map(|i| costed(i, 1)).collect(), false);
        assert_eq!(indices(q.take_front_within(2, 64, 0)), [0, 1]);
    }

    #[test]
    fn tasks_joining_an_empty_queue_in_predicted_order_run_costliest_first() {
        // A receiver that stole before its pushes came: the stolen batch (laid out for
        // the victim's halving batches) must run costliest first, as a queue in
        // predicted order does, or a costly task runs last (a tail of one task).
        let mut q = Queue::default();
        let batch = || {
            [5_000, 80_000, 1_000, 40_000]
                .into_iter()
                .zip(0..)
                .map(|(c, i)| costed(i, c))
        };
        q.start(VecDeque::new(), true);
        q.extend(batch());
        assert_eq!(indices(q.take_front(4)), [1, 3, 0, 2]);
        // Not in predicted order: as they came.
        q.start(VecDeque::new(), false);
        q.extend(batch());
        assert_eq!(indices(q.take_front(4)), [0, 1, 2, 3]);
    }

    #[test]
    fn spreads_what_it_shares() {
        let mut q = Queue::default();
        q.start((0..10).map(task).collect(), false);
        let got: Vec<u32> = q.take_spread(5).iter().map(|t| t.index).collect();
        assert_eq!(got, [1, 3, 5, 7, 9], "every other task, the front one kept");
        let left: Vec<u32> = q.take_front(10).iter().map(|t| t.index).collect();
        assert_eq!(left, [0, 2, 4, 6, 8]);
        // A long queue: only the back window, twice the tasks shared at least.
        let n = SPREAD_WINDOW + 100;
        q.start((0..n as u32).map(task).collect(), false);
        let got = q.take_spread(3);
        assert_eq!(got.len(), 3);
        assert!(
            got.iter().all(|t| t.index as usize >= 100),
            "within the back window"
        );
        assert_eq!(q.len(), n - 3);
        assert_eq!(q.take_spread(0).len(), 0);
        q.start((0..4).map(task).collect(), false);
        assert_eq!(q.take_spread(9).len(), 4, "at most what there is");
        // In predicted order (costliest first): the cheapest, from the back.
        q.start((0..6).map(task).collect(), true);
        let got: Vec<u32> = q
            .take_share(2, &Config::default(), false, None)
            .iter()
            .map(|t| t.index)
            .collect();
        assert_eq!(got, [4, 5]);
    }

    #[test]
    fn shares_half_within_the_limits() {
        let cfg = Config {
            min_private: 3,
            shared_capacity: 2,
            ..Config::default()
        };
        let mut q = Queue::default();
        q.start((0..5).map(task).collect(), false);
        // Half of 5 is 3, 5 − 3 private is 2, the capacity 2.
        assert_eq!(q.shareable(&cfg, false), 2);
        let back = q.take_share(2, &Config::default(), false, None);
        assert_eq!(back.iter().map(|t| t.index).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(q.shareable(&cfg, false), 0, "3 tasks stay private");
        assert_eq!(
            q.shareable(&cfg, true),
            1,
            "one fewer when idle thieves wait"
        );
        assert_eq!(q.take_front(2).len(), 2);
        q.extend(back);
        assert_eq!(q.len(), 3);
    }

    #[derive(Debug)]
    struct KeepEven;
    impl Mapper for KeepEven {
        fn permit_steal(&mut self, _: Option<Rank>, offered: &[TaskInfo], permit: &mut [bool]) {
            for (p, t) in permit.iter_mut().zip(offered) {
                *p = t.index % 2 == 1;
            }
        }
        fn priority(&mut self, t: &TaskInfo) -> i16 {
            // Task 3 is urgent whatever its submitter said.
            if t.index == 3 { 100 } else { t.priority }
        }
    }

    #[test]
    fn higher_priorities_run_first_lower_are_shared_first() {
        let mut q = Queue::default();
        let prio = [0i16, -5, 7, 0, 7, -1];
        q.start(
            (0..6)
                .map(|i| Task {
                    priority: prio[i as usize],
                    cost_ns: 0,
                    ..task(i)
                })
                .collect(),
            false,
        );
        // Stable: equal priorities keep queue order.
        let order = |q: &Queue| q.tasks.iter().map(|t| t.index).collect::<Vec<_>>();
        assert_eq!(order(&q), [2, 4, 0, 3, 5, 1]);
        // Shares come from the low end.
        let got: Vec<u32> = q
            .take_share(2, &Config::default(), false, None)
            .iter()
            .map(|t| t.index)
            .collect();
        assert_eq!(got, [5, 1]);
        // Stolen tasks join in priority order.
        q.extend([
            Task {
                priority: 3,
                cost_ns: 0,
                ..task(10)
            },
            task(11),
        ]);
        assert_eq!(order(&q), [2, 4, 10, 0, 3, 11]);
        assert_eq!(q.take_front(2).len(), 2);
        // Without priorities the order is the plain one.
        q.start((0..4).map(task).collect(), false);
        assert_eq!(order(&q), [0, 1, 2, 3]);
    }

    #[test]
    fn the_mapper_sets_priorities_and_keeps_what_it_refuses() {
        let mut q = Queue {
            mapper: Box::new(KeepEven),
            ..Queue::default()
        };
        q.start((0..8).map(task).collect(), false);
        assert_eq!(q.tasks[0].index, 3, "re-prioritised on arrival");
        // The 4 lowest are offered (7, 6, 5, 4 from the back): the even ones stay.
        let got: Vec<u32> = q
            .take_share(4, &Config::default(), false, Some(2))
            .iter()
            .map(|t| t.index)
            .collect();
        assert_eq!(got, [5, 7]);
        assert_eq!(q.len(), 6);
        let mut left: Vec<u32> = q.take_front(6).iter().map(|t| t.index).collect();
        left.sort_unstable();
        assert_eq!(left, [0, 1, 2, 3, 4, 6]);
    }
}

#[cfg(test)]
mod cost_tests {
    use super::tests::costed;
    use super::*;
    use crate::Protocol;
    use crate::mapper::Profile;

    /// 100 tasks of 1 ms, a contiguous band of 10 costly ones (30×) at `at`.
    fn bimodal(at: u32) -> VecDeque<Task> {
        (0..100)
            .map(|i| {
                let costly = (at..at + 10).contains(&i);
                costed(i, if costly { 30_000_000 } else { 1_000_000 })
            })
            .collect()
    }

    fn work(ts: &[Task]) -> u64 {
        ts.iter().map(|t| t.cost_ns).sum()
    }

    #[test]
    fn a_bimodal_queue_shares_about_half_of_its_work() {
        // Total: 90 ms + 300 ms = 390 ms, wherever the costly band lies.
        for protocol in [Protocol::Request, Protocol::Lock] {
            let cfg = Config {
                protocol,
                ..Config::default()
            };
            for at in [0, 45, 90] {
                let mut q = Queue::default();
                q.start(bimodal(at), false);
                let k = q.shareable(&cfg, false);
                let got = q.take_share(k, &cfg, false, None);
                let w = work(&got);
                assert!(
                    (190_000_000..=200_000_000).contains(&w),
                    "{protocol:?}, band at {at}: {w} ns shared"
                );
                // The band splits: half of the costly tasks go.
                assert_eq!(got.iter().filter(|t| t.cost_ns > 1_000_000).count(), 5);
                assert_eq!(q.len() + got.len(), 100);
                assert_eq!(q.est_sum, 390_000_000 - u128::from(w));
            }
        }
        // Claim: two thirds published, laid out so that the first batch holds half of it.
        let cfg = Config::default();
        let mut q = Queue::default();
        q.start(bimodal(90), false);
        let got = q.take_share(q.shareable(&cfg, false), &cfg, false, None);
        let w = work(&got);
        assert!((255_000_000..=265_000_000).contains(&w), "{w}");
        let (_, first) = claim_batch(got.len() as u16, 0);
        let w0 = work(&got[..usize::from(first)]);
        assert!(
            (w0 as f64 - w as f64 / 2.0).abs() <= 30e6,
            "first batch {w0} of {w}"
        );
        // Without cost-aware batches: the count rule, whatever the estimates.
        let off = Config {
            cost_aware: false,
            ..Config::default()
        };
        let mut q = Queue::default();
        q.start(bimodal(90), false);
        assert_eq!(q.shareable(&off, false), 67);
        assert_eq!(q.take_share(67, &off, false, None).len(), 67);
    }

    #[test]
    fn the_end_game_keeps_what_is_cheaper_to_finish_than_to_move() {
        let cfg = Config {
            move_cost: std::time::Duration::from_micros(20),
            ..Config::default()
        };
        let mut q = Queue::default();
        // Six tasks of 5 µs: two thirds of 30 µs is 20 µs, just worth moving.
        q.start((0..6).map(|i| costed(i, 5_000)).collect(), false);
        assert_eq!(q.shareable(&cfg, false), 4);
        assert_eq!(work(&q.take_share(4, &cfg, false, None)), 20_000);
        // Two left (10 µs): kept, even for idle thieves.
        assert_eq!(q.shareable(&cfg, true), 0);
        assert!(q.take_share(1, &cfg, true, None).is_empty());
        assert_eq!(q.len(), 2);
        // One costly task among cheap ones still goes.
        q.start(
            [costed(0, 1_000), costed(1, 1_000), costed(2, 50_000)].into(),
            false,
        );
        let got = q.take_share(q.shareable(&cfg, false), &cfg, false, None);
        assert_eq!(got.iter().map(|t| t.index).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn unknown_costs_fall_back_to_counts() {
        let cfg = Config::default();
        let mut q = Queue::default();
        q.start((0..10).map(|i| costed(i, 0)).collect(), false);
        assert_eq!(q.shareable(&cfg, false), 7);
        let mut spread = Queue::default();
        spread.start((0..10).map(|i| costed(i, 0)).collect(), false);
        let want: Vec<u32> = spread.take_spread(7).iter().map(|t| t.index).collect();
        let got: Vec<u32> = q
            .take_share(7, &cfg, false, None)
            .iter()
            .map(|t| t.index)
            .collect();
        assert_eq!(got, want);
        // Mixed: unknown tasks count as the mean of the known ones.
        q.start(
            [
                costed(0, 0),
                costed(1, 0),
                costed(2, 4_000_000),
                costed(3, 0),
            ]
            .into(),
            false,
        );
        assert_eq!(q.work(q.mean_estimate(&cfg).unwrap()), 16e6);
    }

    #[test]
    fn hostile_estimates_are_bounded() {
        let mut q = Queue::default();
        // No local estimate: a remote one is capped at a day.
        q.start(VecDeque::new(), false);
        q.extend([costed(0, u64::MAX)]);
        assert_eq!(q.tasks[0].cost_ns, COST_HINT_MAX_NS);
        // With the kind's measured mean (1 ms), within 64× of it either way.
        let mut m = DefaultMapper::default();
        m.costs.record(&Profile {
            kind: 0,
            owner: 0,
            index: 0,
            rank: 0,
            duration_ns: 1_000_000,
        });
        let mut q = Queue {
            mapper: Box::new(m),
            ..Queue::default()
        };
        q.start([costed(9, 5_000_000_000)].into(), false);
        assert_eq!(q.tasks[0].cost_ns, 5_000_000_000, "a local hint stands");
        q.extend([
            costed(0, u64::MAX),
            costed(1, 1),
            costed(2, 0),
            costed(3, 3_000),
        ]);
        let got: Vec<u64> = q.tasks.iter().skip(1).map(|t| t.cost_ns).collect();
        assert_eq!(got, [64_000_000, 15_625, 1_000_000, 15_625]);
        assert_eq!(q.est_n, 5);
        // Taking them all leaves the sums at zero.
        q.take_front(10);
        assert_eq!((q.est_sum, q.est_n), (0, 0));
    }
}
