//! What the user thread, the progress thread and the workers share, and the node's memory
//! through the fabric's segments.

use super::*;

/// The node's memory, through the fabric's segments.
pub(crate) struct SegMem<'a>(pub(crate) &'a dyn Fabric);

impl Memory for SegMem<'_> {
    fn read(&self, loc: Loc, buf: &mut [u8]) {
        // The node only names its own segments, at offsets inside them (its layout).
        self.0
            .segment(loc.segment)
            .and_then(|s| s.read(loc.offset, buf))
            .expect("the node reads inside its own segments");
    }
    fn write(&self, loc: Loc, data: &[u8]) {
        self.0
            .segment(loc.segment)
            .and_then(|s| s.write(loc.offset, data))
            .expect("the node writes inside its own segments");
    }
}

impl Shared {
    /// Wakes the workers that wait for tasks (none waiting: no system call).
    pub(crate) fn wake_workers(&self) {
        self.node.wake_workers();
    }

    /// Wakes as many waiting workers as `queued` tasks can feed (all of them where
    /// resources take tasks their own way). Every thread that drives the node wakes idle
    /// workers after it.
    pub(crate) fn wake_workers_for(&self, queued: usize) {
        self.node
            .wake_workers_for(queued, self.res.added.load(Ordering::Acquire));
    }

    /// Hands the children of the running task `parent` to the locked `node` before its
    /// result, waking idle workers for them ([`crate::node_lock::NodeLock::hand_over`]).
    pub(crate) fn hand_over(
        &self,
        node: &mut Node,
        now: Time,
        parent: titus_core::TaskId,
        children: &mut Vec<titus_core::NewTask>,
        mem: &SegMem<'_>,
    ) {
        let all = self.res.added.load(Ordering::Acquire);
        self.node.hand_over(node, now, parent, children, mem, all);
    }
}

/// What the threads share, split by who writes it: what is fixed at open, the workers'
/// sleep, the registered task functions, the progress thread's, the resource thread's,
/// and the epoch's figures. The node itself sits behind its own lock.
pub(crate) struct Shared {
    pub(crate) fabric: Arc<dyn Fabric>,
    /// The node, its lock, the workers' wait for tasks and the user thread's for the end
    /// (woken only when the epoch may be over: woken on every progress turn, the user
    /// thread took a core's worth of futex calls from the workers of a 2-core node).
    pub(crate) node: crate::node_lock::NodeLock,
    pub(crate) origin: Instant,
    /// The CPU's cycle counter, where it keeps time, and its reading at `origin`
    /// (`crate::task_clock`).
    pub(crate) cycle_origin: Option<(titus_proc::Cycles, u64)>,
    pub(crate) cfg: RuntimeConfig,
    /// What the workers take, hold and report, and the progress thread's waits and naps
    /// (from `cfg`'s grain and batch).
    pub(crate) policy: titus_core::WorkerPolicy,
    /// The fabric completes operations inside their call (`immediate`).
    pub(crate) inline: bool,
    /// Workers drive the node themselves between tasks — the signals that arrived, its
    /// timers, its operations' completions, and where operations are immediate (the node
    /// backend) its commands — and the progress thread naps while they all run tasks:
    /// on the node backend, and where libfabric's progress polls (shm: the workers poll
    /// it between tasks anyway, and a progress thread woken for each step waited for a
    /// core on a node whose cores all ran workers).
    pub(crate) serve: bool,
    /// The timeline's recorder, where tracing is on ([`crate::RuntimeConfig::trace`]).
    pub(crate) trace: Option<crate::trace::Recorder>,
    /// This rank's fabric peers: whose liveness an idle rank checks.
    pub(crate) peers: Vec<u32>,
    /// Whether the fabric connects peers on first contact.
    pub(crate) lazy: bool,
    /// An epoch runs: workers may take tasks from the node.
    pub(crate) epoch_running: AtomicBool,
    /// An epoch start runs (`titus_core::start`): the progress thread keeps its naps short
    /// and sweeps its peers' liveness, as in an epoch.
    pub(crate) starting: AtomicBool,
    pub(crate) workers: WorkerSleep,
    pub(crate) kinds: Registered,
    pub(crate) progress: ProgressSide,
    pub(crate) res: ResourceSide,
    pub(crate) figures: Figures,
}

/// The workers' sleep: who runs tasks (who waits for them: `node`).
pub(crate) struct WorkerSleep {
    /// Workers between their first task and running out of tasks: while all are, they
    /// serve signals and timers themselves where workers serve (`Shared::serve`).
    pub(crate) busy: std::sync::atomic::AtomicUsize,
}

/// The registered task functions, and a version every registration bumps: a worker keeps
/// its own copy while the version stands still (a lock and a reference count per task
/// cost tens of ns).
pub(crate) struct Registered {
    pub(crate) fns: RwLock<Vec<Option<TaskFn>>>,
    pub(crate) version: std::sync::atomic::AtomicU64,
}

/// What the progress thread publishes, and what whoever drives the node shares with it.
pub(crate) struct ProgressSide {
    /// When the progress thread's current wait ends (node time, ns): a worker that makes
    /// the node want something earlier wakes it.
    pub(crate) deadline: std::sync::atomic::AtomicU64,
    /// This rank's operations in flight: whoever drives the node (the progress thread,
    /// a worker between tasks) collects their completions ([`driver::drive_inline`]).
    pub(crate) open: Mutex<driver::OpenOps>,
    /// When (`now()` + 1, ns) the progress thread entered the fabric call it is in to post
    /// an operation, 0 outside one, and to which peer: a provider that never returns (shm
    /// spinning on a lock in memory a dead peer held) is noticed by the waiting user
    /// thread instead of hanging the job.
    pub(crate) submitting: std::sync::atomic::AtomicU64,
    pub(crate) submitting_peer: std::sync::atomic::AtomicU32,
    /// The ranks operated on, and their first contacts' cost.
    pub(crate) contacts: contacts::Contacts,
}

/// The resource thread's: accelerators beside the CPU workers.
pub(crate) struct ResourceSide {
    /// Their state (None: none added).
    pub(crate) state: Mutex<Option<resources::State>>,
    /// Whether resources were added (workers dispatch through the policy).
    pub(crate) added: AtomicBool,
    /// Wakes the resource thread (an executor completed something).
    pub(crate) cv: Condvar,
    pub(crate) wake: Mutex<bool>,
    /// Epochs started: completions of an earlier (failed) epoch's submissions are dropped.
    pub(crate) epoch: std::sync::atomic::AtomicU64,
}

/// A worker's share of the figures not yet added to the rank's ([`Figures`]): added
/// before each report of its results, so the epoch's end, which comes with its last
/// result, finds them all. (Three shared counters written per task were cache lines that
/// every worker of the rank wrote in turn.)
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) busy_ns: u64,
    pub(crate) between_ns: u64,
    pub(crate) betweens: u64,
}

impl Tally {
    /// Adds this tally to `figures` and starts again from zero.
    pub(crate) fn add_to(&mut self, figures: &Figures) {
        let t = std::mem::take(self);
        if t.busy_ns > 0 {
            figures.busy_ns.fetch_add(t.busy_ns, Ordering::Relaxed);
        }
        if t.betweens > 0 {
            figures
                .between_ns
                .fetch_add(t.between_ns, Ordering::Relaxed);
            figures.betweens.fetch_add(t.betweens, Ordering::Relaxed);
        }
    }
}

/// The epoch's figures, gathered by the workers and read by the user thread.
pub(crate) struct Figures {
    /// Nanoseconds workers spent in tasks this epoch.
    pub(crate) busy_ns: std::sync::atomic::AtomicU64,
    /// Nanoseconds workers spent from a task's end to their next task's start where they
    /// went straight on, and how many times ([`EpochStats::between`]).
    pub(crate) between_ns: std::sync::atomic::AtomicU64,
    pub(crate) betweens: std::sync::atomic::AtomicU64,
    /// When this rank's last task of the epoch ended ([`Shared::now`], ns): the log's
    /// epoch timings show what the epoch's end waited for after it. Kept only while the
    /// debug log is on (`timings`): one more shared atomic per task otherwise.
    pub(crate) last_task_end: std::sync::atomic::AtomicU64,
    /// Idle spans of this epoch's workers that ended in a task (start, length; `now()`
    /// nanoseconds), kept only with `timings`: the debug log names the longest.
    pub(crate) idle_spans: Mutex<Vec<(u64, u64)>>,
    pub(crate) timings: bool,
    /// Where the progress thread's CPU time is read (set as it starts).
    pub(crate) progress_cpu: std::sync::OnceLock<thread_cpu::ThreadCpu>,
}

impl Shared {
    /// The peer and the time the progress thread has been inside one fabric call posting
    /// an operation, when that is longer than the operation timeout.
    pub(crate) fn stuck_in_fabric(&self) -> Option<(titus_core::Rank, Duration)> {
        let since = self.progress.submitting.load(Ordering::Acquire);
        let stuck = Duration::from_nanos(self.now().0.saturating_sub(since.saturating_sub(1)));
        (since != 0 && stuck > self.cfg.op_timeout)
            .then(|| (self.progress.submitting_peer.load(Ordering::Acquire), stuck))
    }

    /// `e`, or where another rank aborted the epoch for a peer it lost and a peer of this
    /// rank is gone too (within the frozen bound: call it without the node's lock), that
    /// peer named: the ABORT signal carries only the aborting
    /// rank and its code, and the dead rank is what the user needs.
    pub(crate) fn with_own_look(&self, e: CoreError) -> CoreError {
        let CoreError::Aborted { rank, code } = e else {
            return e;
        };
        if code != titus_core::error_code::REMOTE {
            return e;
        }
        // The aborting rank itself may be gone by now: it exits on its error. A peer that
        // froze is named only once this rank too has watched it stand still for the
        // frozen bound, so look again for that long (bounded: the epoch has failed).
        let give_up = Instant::now()
            + titus_fabric::process::frozen_after(self.cfg.op_timeout)
            + Duration::from_secs(1);
        // The aborter counts only where its host stopped answering: then it is the peer
        // this rank lost (its own host cut off, it hears the abort but cannot answer).
        let gone = loop {
            let gone = driver::gone_peers(self)
                .into_iter()
                .find(|g| g.0 != rank || self.fabric.peer_host_silent(rank));
            if gone.is_some() || Instant::now() >= give_up {
                break gone;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        match gone {
            Some((peer, why)) => CoreError::Remote {
                op: "the epoch",
                peer,
                detail: format!("{why} (rank {rank} aborted the epoch for a peer it lost)"),
            },
            None => e,
        }
    }

    /// Fails `node`, naming the peer, where the progress thread is stuck in the fabric
    /// ([`Self::stuck_in_fabric`]): it cannot fail the node from inside a provider call
    /// that never returns. Whether it did.
    pub(crate) fn fail_if_stuck(&self, node: &mut Node) -> bool {
        let Some((peer, stuck)) = self.stuck_in_fabric() else {
            return false;
        };
        let why = self
            .fabric
            .peer_gone(peer)
            .map_or_else(String::new, |w| format!("{w}; "));
        node.fail_peer_gone(
            peer,
            format!(
                "{why}the fabric provider has not returned from posting an operation to rank {peer} for {:.1} s",
                stuck.as_secs_f64()
            ),
        );
        true
    }
}

impl Shared {
    /// Whether the workers serve the node now ([`Shared::serve`]): an epoch runs and
    /// every worker runs tasks (one going idle lowers the count before it wakes the
    /// progress thread).
    pub(crate) fn workers_serving(&self) -> bool {
        self.serve
            && self.epoch_running.load(Ordering::Acquire)
            && self.workers.busy.load(Ordering::Acquire) >= self.cfg.workers
    }

    pub(crate) fn now(&self) -> Time {
        Time(self.origin.elapsed().as_nanos() as u64)
    }

    /// `at` on the node's clock (no clock reading).
    pub(crate) fn time_of(&self, at: Instant) -> Time {
        Time(at.saturating_duration_since(self.origin).as_nanos() as u64)
    }

    pub(crate) fn lock_node(&self) -> crate::sync::MutexGuard<'_, Node> {
        self.node.lock()
    }

    /// The runtime is closing: every thread leaves.
    pub(crate) fn closing(&self) -> bool {
        self.node.closing()
    }
}

/// Locks `m`, recovering from a poisoned lock (every update under the runtime's small
/// locks is one step).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
