//! A rank's queue of tasks: its workers run it from the front, its owner side shares
//! half of it (at most the shared capacity, never leaving fewer than `min_private`),
//! taken evenly spread over the queue's back part, and stolen or reclaimed tasks join it
//! at the back.
//!
//! Why spread: a solver's cells come in space order and its dear ones bunch together (a
//! flame front). Half of the queue by count taken from the back can hold all of the dear
//! work or none of it, and halving then ping-pongs small batches for the rest of the
//! epoch; every other task holds about half of the work wherever the front lies, without
//! knowing any cost.

use crate::Config;
use crate::Rank;
use crate::layout::Task;
use crate::mapper::{DefaultMapper, Mapper, TaskInfo};
use std::collections::VecDeque;

/// The queue's back part that sharing spreads over (beyond it, twice the tasks shared),
/// which bounds a share's work to O(max(k, this)).
pub(crate) const SPREAD_WINDOW: usize = 1 << 14;

/// Tasks to run or share, and whether the workers found it empty.
#[derive(Debug)]
pub(crate) struct Queue {
    /// Front: run next; back: share first.
    tasks: VecDeque<Task>,
    /// Workers asked for tasks and found none (cleared when work arrives or the epoch
    /// ends): the owner side then takes its published tasks back.
    pub(crate) hungry: bool,
    /// The epoch started with the tasks in predicted order, dearest first: shares come
    /// from the back (the cheapest, the end game's small change) instead of spread.
    sorted: bool,
    /// Some task this epoch has a priority other than 0: the queue is kept in priority
    /// order, highest first (stable: queue order among equals), and shares from the back.
    prioritized: bool,
    /// The rank's policy: priorities when tasks join, permits when they are shared.
    pub(crate) mapper: Box<dyn Mapper>,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            tasks: VecDeque::new(),
            hungry: false,
            sorted: false,
            prioritized: false,
            mapper: Box::new(DefaultMapper::default()),
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
    }
}

impl Queue {
    /// A new epoch's queue; `sorted`: dearest first, by predicted cost.
    pub(crate) fn start(&mut self, tasks: VecDeque<Task>, sorted: bool) {
        self.tasks = tasks;
        self.hungry = false;
        self.sorted = sorted;
        self.prioritized = false;
        self.prioritize(0);
    }

    /// Tasks from `from` on just joined: the mapper sets their priorities; with any
    /// other than 0 (now or before, this epoch) the queue is put in priority order.
    fn prioritize(&mut self, from: usize) {
        let mapper = &mut self.mapper;
        for t in self.tasks.range_mut(from..) {
            t.priority = mapper.priority(&info(t));
            self.prioritized |= t.priority != 0;
        }
        if self.prioritized {
            // Two sorted runs (the queue, the newcomers): the stable sort merges them.
            self.tasks
                .make_contiguous()
                .sort_by_key(|t| std::cmp::Reverse(t.priority));
        }
    }

    /// Up to `k` (≤ `len()`) tasks to share, in queue order — from the back of a queue in
    /// priority or predicted order (its lowest or cheapest), else spread
    /// ([`Queue::take_spread`]) — less those the mapper keeps here (`thief`: who asks,
    /// if known), which stay queued.
    pub(crate) fn take_share(&mut self, k: usize, thief: Option<Rank>) -> Vec<Task> {
        let offered = if self.sorted || self.prioritized {
            let at = self.tasks.len() - k.min(self.tasks.len());
            self.tasks.split_off(at).into()
        } else {
            self.take_spread(k)
        };
        if offered.is_empty() {
            return offered;
        }
        let infos: Vec<TaskInfo> = offered.iter().map(info).collect();
        let mut permit = vec![true; offered.len()];
        self.mapper.permit_steal(thief, &infos, &mut permit);
        if permit.iter().all(|&p| p) {
            return offered;
        }
        let mut out = Vec::with_capacity(offered.len());
        for (t, p) in offered.into_iter().zip(permit) {
            if p {
                out.push(t);
            } else {
                self.tasks.push_back(t);
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
        let private = cfg.min_private.saturating_sub(u32::from(demand)) as usize;
        (q - keep)
            .min(q.saturating_sub(private))
            .min(cfg.shared_capacity as usize)
    }

    /// Up to `max` tasks from the front, for the workers.
    pub(crate) fn take_front(&mut self, max: usize) -> Vec<Task> {
        let n = max.min(self.tasks.len());
        self.tasks.drain(..n).collect()
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
        out
    }

    /// Tasks join at the back (in priority order, when priorities are in use).
    pub(crate) fn extend(&mut self, tasks: impl IntoIterator<Item = Task>) {
        let from = self.tasks.len();
        self.tasks.extend(tasks);
        self.prioritize(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(index: u32) -> Task {
        Task {
            owner: 0,
            index,
            kind: 0,
            priority: 0,
            payload: Vec::new(),
        }
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
        // In predicted order (dearest first): the cheapest, from the back.
        q.start((0..6).map(task).collect(), true);
        let got: Vec<u32> = q.take_share(2, None).iter().map(|t| t.index).collect();
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
        let back = q.take_share(2, None);
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
                    ..task(i)
                })
                .collect(),
            false,
        );
        // Stable: equal priorities keep queue order.
        let order = |q: &Queue| q.tasks.iter().map(|t| t.index).collect::<Vec<_>>();
        assert_eq!(order(&q), [2, 4, 0, 3, 5, 1]);
        // Shares come from the low end.
        let got: Vec<u32> = q.take_share(2, None).iter().map(|t| t.index).collect();
        assert_eq!(got, [5, 1]);
        // Stolen tasks join in priority order.
        q.extend([
            Task {
                priority: 3,
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
        let got: Vec<u32> = q.take_share(4, Some(2)).iter().map(|t| t.index).collect();
        assert_eq!(got, [5, 7]);
        assert_eq!(q.len(), 6);
        let mut left: Vec<u32> = q.take_front(6).iter().map(|t| t.index).collect();
        left.sort_unstable();
        assert_eq!(left, [0, 1, 2, 3, 4, 6]);
    }
}
