//! The worker and progress policy that the runtime's threads and the simulator's model of
//! them both apply: what a worker takes from its rank's queue, when it reports the
//! results it holds, how an idle worker waits, and how long and how deeply the progress
//! thread naps. [`WorkerPolicy`] decides from what a driver observed and does no I/O; the
//! constants live beside the decisions that read them, so the two drivers cannot drift
//! apart. How the runtime's threads apply them is narrated in
//! `crates/runtime/src/serve_and_idle.md`.

use std::time::Duration;

/// Most tasks a worker takes from its rank's queue at once (its grain): the runtime's
/// workers and the simulator's alike.
pub const GRAIN_TASKS_MAX: usize = 64;

/// A task predicted to take at least this long (ns) is "costly": a worker reports what it
/// holds before running it, and on the node backend (whose workers serve signals between
/// tasks) the progress thread serves them meanwhile.
pub const COSTLY_TASK_NS: u64 = 200_000;

/// A polling fabric's progress-thread nap while every worker of its rank runs tasks and
/// serves the fabric between them (`polled_progress`): what arrives meanwhile waits for a
/// task's end or this nap's (the runtime's driver; the simulator's model of it), ns. Each
/// of the progress thread's wake-ups takes a busy core from a worker: at 1 ms, two ranks'
/// progress threads on two cores took ~2,500 each in a 1.5 s run with no balancing at all
/// (libfabric's shm).
pub const BUSY_NAP_NS: u64 = 10_000_000;

/// A polling fabric's progress-thread nap while nobody needs this rank's progress soon,
/// ns.
pub const IDLE_NAP_NS: u64 = 1_000_000;

/// The longest wait of a rank's progress thread while operations of its own are in
/// flight, ns: it then polls its fabric at least this often whatever else it waits for (a
/// completion dispatched just before a wait starts would not end it). The runtime's
/// driver; the simulator serves a polled target's atomics no later.
pub const OPEN_OPS_WAIT_NS: u64 = 1_000_000;

/// Longest wait of a rank's progress thread in one turn, ns: the bound on noticing
/// shutdown.
pub const MAX_WAIT_NS: u64 = 50_000_000;

/// How often a worker polls a fabric whose progress must poll, between tasks, ns.
pub const POLL_EVERY_NS: u64 = 20_000;

/// An idle worker's first wait for news, and the longest (the safety net under the
/// progress thread's notifications), ns.
pub const IDLE_WAIT_FIRST_NS: u64 = 1_000_000;
/// See [`IDLE_WAIT_FIRST_NS`].
pub const IDLE_WAIT_MAX_NS: u64 = 16_000_000;

/// A worker's grain by default with `workers` workers per rank: seconds of estimated work
/// it takes from the rank's queue at once — 25 µs per worker (up to 8), at most 200 µs.
/// The more workers share a rank's queue, the less often each may take it (measured on 16
/// cores: 2 ranks of 8 workers ran the chemistry example's steps ~1.4× faster with 200 µs
/// than without; one worker per rank the same at 50 µs, worse at 200 µs).
pub fn default_worker_grain(workers: usize) -> Duration {
    (Duration::from_micros(25) * workers.min(8) as u32).min(Duration::from_micros(200))
}

/// What a worker asks its rank's queue for at once ([`crate::Node::take_grain`]): at
/// least `min` tasks, more while their estimated costs sum within `budget_ns`, at most
/// `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrainTake {
    /// Fewest tasks taken where the queue has them.
    pub min: usize,
    /// Most tasks taken.
    pub max: usize,
    /// Estimated ns of work beyond `min` (zero: `min` tasks exactly).
    pub budget_ns: u64,
}

/// The progress thread's nap on a fabric whose progress must poll
/// (`Progress::set_progress_nap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressNap {
    /// The configured short nap (`RuntimeConfig::epoch_nap`): others operate on this
    /// rank, or it waits for its own operations.
    Short,
    /// [`BUSY_NAP_NS`]: every worker runs tasks and polls between them.
    Busy,
    /// [`IDLE_NAP_NS`]: nobody needs this rank's progress soon.
    Idle,
}

/// What the progress thread sees of its rank when it chooses its nap
/// ([`WorkerPolicy::progress_nap`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct NapView {
    /// The fabric's progress must poll and an epoch runs.
    pub polling_epoch: bool,
    /// Every worker runs tasks (and so polls between them).
    pub all_workers_busy: bool,
    /// No worker runs a task: the end game (results coming home, the termination tree).
    pub no_worker_busy: bool,
    /// The workers serve the node between tasks ([`WorkerPolicy::progress_wait_ns`]).
    pub workers_serve: bool,
    /// Others are expected to operate on this rank ([`crate::DriverHints`]).
    pub expects_remote_ops: bool,
    /// This rank awaits a remote answer ([`crate::DriverHints`]).
    pub awaits_remote: bool,
    /// The epoch's start runs.
    pub starting: bool,
    /// Operations of this rank's own are in flight.
    pub own_ops_in_flight: bool,
}

/// The policy of one rank's workers and progress thread: the decisions, given what a
/// driver observed. The runtime's threads and the simulator's model of them apply them
/// and decide nothing of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerPolicy {
    /// A worker's grain: estimated ns of work it takes from the queue, and holds results
    /// for, at once (zero: one task, one report, at a time).
    grain_ns: u64,
    /// Fewest tasks a worker takes at once.
    batch_min: usize,
}

impl WorkerPolicy {
    /// The policy of workers whose grain is `grain` (see [`default_worker_grain`]) and
    /// that take at least `batch_min` tasks at once (at least 1).
    pub fn new(grain: Duration, batch_min: usize) -> Self {
        Self {
            grain_ns: grain.as_nanos().min(u128::from(u64::MAX)) as u64,
            batch_min: batch_min.max(1),
        }
    }

    /// The grain, ns.
    pub fn grain_ns(&self) -> u64 {
        self.grain_ns
    }

    /// What a worker whose grain is used up asks the queue for.
    pub fn take(&self) -> GrainTake {
        GrainTake {
            min: self.batch_min,
            max: GRAIN_TASKS_MAX.max(self.batch_min),
            budget_ns: self.grain_ns,
        }
    }

    /// Whether a task predicted at `cost_ns` is costly: its worker will not serve the
    /// node for long, so the progress thread serves it meanwhile.
    pub fn is_costly(&self, cost_ns: u64) -> bool {
        cost_ns >= COSTLY_TASK_NS
    }

    /// Whether a worker that finished a task of its grain and has `next_cost_ns` to run
    /// reports the `held` results it holds now (the oldest ended `held_for_ns` ago)
    /// rather than with its next take from the queue: before a costly task, at
    /// [`GRAIN_TASKS_MAX`] results, or once the oldest is a grain old (a zero grain: at
    /// once).
    pub fn report_now(&self, next_cost_ns: u64, held: usize, held_for_ns: u64) -> bool {
        self.is_costly(next_cost_ns) || held >= GRAIN_TASKS_MAX || held_for_ns >= self.grain_ns
    }

    /// Whether a worker polls a polling fabric after a task, `since_poll_ns` after its
    /// last poll.
    pub fn polls_now(&self, since_poll_ns: u64) -> bool {
        since_poll_ns >= POLL_EVERY_NS
    }

    /// How long a rank's progress thread waits before its next turn, ns: until the
    /// node's next deadline (`until_deadline_ns`, none: [`MAX_WAIT_NS`]), at most
    /// [`BUSY_NAP_NS`] while its workers serve the node between tasks (what arrives
    /// waits for a task's end or this), not at all with commands to submit, and at most
    /// [`OPEN_OPS_WAIT_NS`] with operations of its own in flight (a completion dispatched
    /// just before the wait starts would not end it). The simulator serves a busy target
    /// no later.
    pub fn progress_wait_ns(
        &self,
        until_deadline_ns: Option<u64>,
        workers_serve: bool,
        has_commands: bool,
        own_ops_in_flight: bool,
    ) -> u64 {
        let mut wait = until_deadline_ns.unwrap_or(MAX_WAIT_NS).min(MAX_WAIT_NS);
        if workers_serve {
            wait = wait.min(BUSY_NAP_NS);
        }
        if has_commands {
            0
        } else if own_ops_in_flight {
            wait.min(OPEN_OPS_WAIT_NS)
        } else {
            wait
        }
    }

    /// The progress thread's nap on a polling fabric. Short while others operate on this
    /// rank or it waits for its own operations, unless every worker runs tasks and
    /// serves the node between them: they poll, so the long nap. A rank whose workers all
    /// wait during a running epoch is in the end game (others operate on it and its own
    /// core is free), so its naps stay short too.
    pub fn progress_nap(&self, v: &NapView) -> ProgressNap {
        let workers_poll = v.polling_epoch && v.all_workers_busy;
        let waiting = v.polling_epoch && v.no_worker_busy;
        let short = !(v.workers_serve && workers_poll)
            && ((v.expects_remote_ops && !workers_poll)
                || v.awaits_remote
                || v.starting
                || waiting
                || v.own_ops_in_flight);
        if short {
            ProgressNap::Short
        } else if workers_poll {
            ProgressNap::Busy
        } else {
            ProgressNap::Idle
        }
    }
}

/// The results a worker holds between reports (its grain's), and when the oldest of them
/// ended, ns on the driver's clock.
#[derive(Debug)]
pub struct HeldResults<R> {
    done: Vec<R>,
    oldest_end_ns: Option<u64>,
}

impl<R> Default for HeldResults<R> {
    fn default() -> Self {
        Self {
            done: Vec::new(),
            oldest_end_ns: None,
        }
    }
}

impl<R> HeldResults<R> {
    /// Holds `result`, whose task ended at `ended_ns`, while its worker goes on with a
    /// task of its grain predicted at `next_cost_ns`. True: report everything held now
    /// ([`WorkerPolicy::report_now`]; [`HeldResults::drain`]).
    pub fn hold(
        &mut self,
        result: R,
        ended_ns: u64,
        next_cost_ns: u64,
        policy: &WorkerPolicy,
    ) -> bool {
        self.done.push(result);
        let oldest = *self.oldest_end_ns.get_or_insert(ended_ns);
        policy.report_now(
            next_cost_ns,
            self.done.len(),
            ended_ns.saturating_sub(oldest),
        )
    }

    /// Takes every held result, to report.
    pub fn drain(&mut self) -> std::vec::Drain<'_, R> {
        self.oldest_end_ns = None;
        self.done.drain(..)
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }
}

/// An idle worker's wait for news: [`IDLE_WAIT_FIRST_NS`], twice as long after each wait
/// that ended with nothing (up to [`IDLE_WAIT_MAX_NS`]), so a rank without work costs next
/// to no CPU; news or a task starts it over.
#[derive(Debug, Clone, Copy)]
pub struct IdleWait {
    ns: u64,
}

impl Default for IdleWait {
    fn default() -> Self {
        Self {
            ns: IDLE_WAIT_FIRST_NS,
        }
    }
}

impl IdleWait {
    /// The next wait.
    pub fn next(&self) -> Duration {
        Duration::from_nanos(self.ns)
    }

    /// After a wait: `timed_out` (nothing came) doubles the next one; news starts over.
    pub fn waited(&mut self, timed_out: bool) {
        self.ns = if timed_out {
            (self.ns * 2).min(IDLE_WAIT_MAX_NS)
        } else {
            IDLE_WAIT_FIRST_NS
        };
    }

    /// The worker found a task: its next idle wait starts over.
    pub fn reset(&mut self) {
        self.ns = IDLE_WAIT_FIRST_NS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(grain_ns: u64) -> WorkerPolicy {
        WorkerPolicy::new(Duration::from_nanos(grain_ns), 1)
    }

    #[test]
    fn the_progress_wait_takes_the_nearest_bound() {
        let p = policy(0);
        assert_eq!(p.progress_wait_ns(None, false, false, false), MAX_WAIT_NS);
        assert_eq!(p.progress_wait_ns(Some(5), false, false, false), 5);
        assert_eq!(p.progress_wait_ns(None, true, false, false), BUSY_NAP_NS);
        assert_eq!(
            p.progress_wait_ns(None, true, false, true),
            OPEN_OPS_WAIT_NS
        );
        assert_eq!(p.progress_wait_ns(Some(500), true, false, true), 500);
        assert_eq!(p.progress_wait_ns(Some(500), true, true, true), 0);
        assert_eq!(
            p.progress_wait_ns(Some(u64::MAX), false, false, false),
            MAX_WAIT_NS
        );
    }

    #[test]
    fn a_take_asks_for_at_least_the_batch() {
        let t = WorkerPolicy::new(Duration::from_micros(25), 100).take();
        assert_eq!((t.min, t.max, t.budget_ns), (100, 100, 25_000));
        let t = WorkerPolicy::new(Duration::ZERO, 0).take();
        assert_eq!((t.min, t.max, t.budget_ns), (1, GRAIN_TASKS_MAX, 0));
    }

    #[test]
    fn held_results_go_before_a_costly_task_at_the_cap_or_a_grain_old() {
        let p = policy(1_000);
        let mut held = HeldResults::default();
        assert!(!held.hold(0, 100, 10, &p), "young, few, cheap next: held");
        assert!(!held.hold(1, 1_099, 10, &p));
        assert!(held.hold(2, 1_100, 10, &p), "the oldest is a grain old");
        assert_eq!(held.drain().collect::<Vec<_>>(), [0, 1, 2]);
        assert!(
            held.hold(3, 5_000, COSTLY_TASK_NS, &p),
            "a costly task next"
        );
        held.drain();
        let all = (0..GRAIN_TASKS_MAX).map(|r| held.hold(r, 9_000, 10, &p));
        assert_eq!(
            all.filter(|&now| now).count(),
            1,
            "only the last reaches the cap"
        );
        assert!(
            policy(0).report_now(0, 1, 0),
            "a zero grain reports at once"
        );
    }

    #[test]
    fn the_nap_is_long_only_while_every_worker_polls() {
        let p = policy(0);
        let busy = NapView {
            polling_epoch: true,
            all_workers_busy: true,
            workers_serve: true,
            expects_remote_ops: true,
            ..NapView::default()
        };
        assert_eq!(p.progress_nap(&busy), ProgressNap::Busy);
        let serving_elsewhere = NapView {
            workers_serve: false,
            own_ops_in_flight: true,
            ..busy
        };
        assert_eq!(p.progress_nap(&serving_elsewhere), ProgressNap::Short);
        let end_game = NapView {
            polling_epoch: true,
            no_worker_busy: true,
            ..NapView::default()
        };
        assert_eq!(p.progress_nap(&end_game), ProgressNap::Short);
        assert_eq!(p.progress_nap(&NapView::default()), ProgressNap::Idle);
    }

    #[test]
    fn an_idle_wait_doubles_to_its_cap_and_starts_over_on_news() {
        let mut w = IdleWait::default();
        for _ in 0..10 {
            w.waited(true);
        }
        assert_eq!(w.next(), Duration::from_nanos(IDLE_WAIT_MAX_NS));
        w.waited(false);
        assert_eq!(w.next(), Duration::from_nanos(IDLE_WAIT_FIRST_NS));
    }
}
