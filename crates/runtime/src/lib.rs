//! The Titus runtime: one per rank (node, socket or core).
//!
//! ```text
//!  user thread ── run_epoch(tasks) ──┐          ┌── worker 0 ─ deque ─┐
//!                                    ▼          │   worker 1 ─ deque ─┤ steal from
//!                      ┌──────── Node (core) ◄──┤   ...               │ each other
//!                      │  queue, shared set,    │   (take batches, run, report)
//!                      │  results, termination  └──────────────────────┘
//!                      ▼
//!            progress thread: commands → fabric; completions, signals, timers → node
//! ```
//!
//! The protocol is the sans-IO [`titus_core::Node`]; the runtime only drives it. The
//! progress thread serves everything remote — steals from this rank's shared set,
//! results passing through, the termination tree — so none of it waits for a task to
//! end, and it blocks in the fabric while idle. Workers hold a few tasks each in
//! crossbeam deques, steal from each other inside the process first, and take more from
//! the node's queue (the rank's private set) only when the process runs dry.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod contacts;
pub mod cores;
mod driver;
mod report;
pub mod resources;
mod thread_cpu;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use titus_core::{Config as CoreConfig, Loc, Mapper, Memory, NewTask, Node, Time};
use titus_fabric::backend::{Opened, Opener};
use titus_fabric::bootstrap::{self, Exchange, JobEnv};
use titus_fabric::mem::{self, MemOptions};
use titus_fabric::{Exposure, Fabric, FabricConfig, FabricError, SegmentSpec};
use titus_overlay::Overlay;

pub use backend::{AUTO, AUTO_NAME, Auto, BACKENDS, Backend, MEM, backend_names};
pub use resources::{Completions, Emulated, Executor, Waker};
pub use titus_core::layout::PAYLOAD_MAX;
pub use titus_core::resources::{Dispatch, ResourceCounts, Variants};
pub use titus_core::{
    Balancing, CoreError, CostHistory, DONE_GRACE, DiffusionPlan, Protocol, Routing, Sharing,
    Stats as CoreStats, repartition::RepartitionPlan,
};
pub use titus_overlay::{OverlayParams, SHORTCUTS_MAX, ShortcutDraw};

/// A task function: payload in, result out, or why the task failed (which fails the
/// epoch on every rank with [`CoreError::TaskFailed`] carrying that text).
pub type TaskFn = Arc<dyn Fn(&[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// Runtime configuration; every rank of a job must agree on `core` and `overlay`.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Worker threads; 0 (the default): this rank's share of the node,
    /// `max(1, cores this process may use / ranks on this node)` ([`cores`]), where the
    /// ranks on this node are the launcher's count for a launched rank and all of them for
    /// [`Runtime::local`].
    pub workers: usize,
    /// Protocol tunables.
    pub core: CoreConfig,
    /// Overlay parameters (`ranks` is set from the job).
    pub overlay: OverlayParams,
    /// Timeout of every remote operation: a peer that does not answer within it fails the
    /// epoch on every rank.
    pub op_timeout: Duration,
    /// An epoch that lasts longer fails (None: no limit).
    pub epoch_timeout: Option<Duration>,
    /// Tasks a worker takes from the node at once (at least).
    pub worker_batch: usize,
    /// A worker's grain: beyond `worker_batch`, it takes more tasks while their estimated
    /// costs sum within this, and reports its results once per grain — one lock of the
    /// node per grain instead of one per task (zero: one task, one report, at a time).
    /// Tasks of unknown cost are taken one at a time beyond `worker_batch`. None: 25 µs
    /// per worker of the rank, at most 200 µs ([`RuntimeConfig::grain`]).
    pub worker_grain: Option<Duration>,
    /// The longest nap of the progress thread on fabrics that must poll (libfabric shm)
    /// while this rank shares work or waits for its operations (1 ms otherwise): it bounds
    /// the latency of remote operations on this rank, and each nap costs CPU that workers
    /// would use (`Fabric::set_progress_nap`).
    pub epoch_nap: Duration,
    /// Each rank's mapper (its stealing policy, [`titus_core::mapper`]); `None`: the
    /// core's default.
    pub mapper: Option<Mappers>,
    /// Connect each fabric peer on first contact (`true`) or all when the fabric opens
    /// (`false`); `None`: on first contact exactly where the overlay is the complete
    /// graph (`random`, `master`, `hierarchical`: every rank a peer, few ever contacted)
    /// of more than [`titus_core::EAGER_RANKS_MAX`] ranks ([`titus_core::connects_lazily`]).
    pub lazy_connect: Option<bool>,
}

/// Makes the mapper of each rank this process runs (one for a launched rank, every rank
/// of [`Runtime::local`]).
#[derive(Clone)]
pub struct Mappers(pub Arc<dyn Fn(u32) -> Box<dyn Mapper> + Send + Sync>);

impl std::fmt::Debug for Mappers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mappers(..)")
    }
}

impl Mappers {
    /// Rank `rank`'s mapper.
    fn make(&self, rank: u32) -> Box<dyn Mapper> {
        (self.0)(rank)
    }
}

/// Gives `node` the configured mapper, if any.
fn with_mapper(mut node: Node, cfg: &RuntimeConfig) -> Node {
    if let Some(m) = &cfg.mapper {
        node.set_mapper(m.make(node.rank()));
    }
    node
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            workers: 0,
            core: CoreConfig::default(),
            overlay: OverlayParams::default(),
            op_timeout: Duration::from_secs(30),
            epoch_timeout: None,
            worker_batch: 1,
            worker_grain: None,
            epoch_nap: Duration::from_micros(200),
            mapper: None,
            lazy_connect: None,
        }
    }
}

/// Why a runtime call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// The protocol failed (a dead peer, a malformed message, a failed task, ...).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The fabric could not be set up.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A bad configuration.
    #[error("bad runtime configuration: {0}")]
    Config(String),
    /// The epoch exceeded `epoch_timeout`; with what this rank waits for, in one sentence
    /// (`Node::stall`; its full protocol state goes to the log at debug level).
    #[error(
        "the epoch did not end within {0:?}: {1} (this rank's state is logged at debug level: TITUS_LOG=titus_runtime=debug)"
    )]
    EpochTimeout(Duration, String),
    /// The barrier between epochs failed.
    #[error("the barrier between epochs failed: {0}")]
    Barrier(String),
}

impl RuntimeError {
    /// The user asked for something this job cannot have (a bad configuration, a
    /// provider not offered on every rank, a rendezvous missing): a program exits 2 on it,
    /// as on any bad input, rather than 1 (a failure while running).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Config(_) | Self::Fabric(FabricError::Unsupported(_))
        )
    }
}

/// Figures of one epoch on this rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpochStats {
    /// The protocol's figures (tasks, steals by outcome, bytes, chunks, hops, ...).
    pub core: CoreStats,
    /// Time workers spent running tasks, summed over workers.
    pub busy: Duration,
    /// Worker time not spent running tasks: session × workers − busy.
    pub idle: Duration,
    /// Of it, the workers' time from a task's end to their next task's start where they
    /// went straight on (reporting the result, taking the next task, serving the node
    /// between tasks), summed, and how many such gaps: the runtime's own time per task.
    pub between: Duration,
    /// Gaps counted in [`EpochStats::between`].
    pub betweens: u64,
    /// Time from the epoch call to this rank's end of the epoch: its start included.
    pub session: Duration,
    /// Time from the epoch call to its tasks' start: the epoch start
    /// (`titus_core::start`), with its bytes, messages and rounds.
    pub start: Duration,
    /// The epoch start's figures.
    pub start_figures: titus_core::start::StartFigures,
    /// What the epoch start found (the job's facts, this rank's load after the front, its
    /// neighbours' loads, its part of the string plan) and what the rank brought to it:
    /// what its pushes were planned from.
    pub start_view: titus_core::start::StartOutcome,
    /// Time spent in steal attempts (first operation to outcome), summed.
    pub steal: Duration,
    /// CPU time of the rank's progress thread during the epoch (Linux; zero elsewhere):
    /// serving the fabric and driving the protocol. Where every core runs a worker, it
    /// comes out of the tasks' time.
    pub progress_cpu: Duration,
    /// Steal protocol in use.
    pub protocol: &'static str,
    /// Workers.
    pub workers: usize,
    /// Submissions and completions per resource, the CPU workers first (empty without
    /// resources beside them, [`Runtime::add_resource`]).
    pub resources: Vec<ResourceCounts>,
}

/// The connections a rank made and their price, since it started
/// ([`Runtime::connections`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Connections {
    /// Ranks this rank operated on, ascending. Operations are one-sided: which ranks
    /// operated on this one only they know (a job's report joins both directions).
    pub contacted: Vec<u32>,
    /// Ranks connected when the fabric opened, ascending (none where it connects on
    /// first contact).
    pub opened: Vec<u32>,
    /// Connection time: opening's where the fabric connects at open; where it connects
    /// lazily, every first contact's (submission to completion of the first operation
    /// to each rank).
    pub connect: Duration,
    /// Whether peers are connected on first contact.
    pub lazy: bool,
    /// Memory one connection holds on this fabric, bytes ([`Fabric::connection_bytes`]).
    pub bytes_per_connection: u64,
}

/// One task of [`Runtime::run_epoch_keyed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIn {
    /// The task's identity across epochs: its measured cost is remembered under this key
    /// and predicts its cost next epoch (diffusion). Unique within an epoch.
    pub key: u64,
    /// Task kind (registered function).
    pub kind: u16,
    /// Input bytes.
    pub payload: Vec<u8>,
    /// Priority: higher runs first, lower is shared first (0: the default).
    pub priority: i16,
    /// Estimated cost, ns (0: unknown): a hint for cost-aware sharing
    /// (`titus_core::Config::cost_aware`; `NewTask::cost_hint_ns`).
    pub cost_hint_ns: u64,
}

/// An epoch's outcome on this rank.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochOutput {
    /// This rank's results, in task order.
    pub results: Vec<Vec<u8>>,
    /// Each task's duration measured where it ran (ns), in task order.
    pub costs_ns: Vec<u64>,
    /// Figures.
    pub stats: EpochStats,
}

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
        if self.idle_workers.load(Ordering::Acquire) > 0 {
            self.cv.notify_all();
        }
    }

    /// Wakes as many waiting workers as `queued` tasks can feed (all of them where
    /// resources take tasks their own way). Every thread that drives the node wakes idle
    /// workers after it: waking all of them each time had a rank's idle workers queue for
    /// the node's lock to find nothing, on every task of its busy ones.
    pub(crate) fn wake_workers_for(&self, queued: usize) {
        let idle = self.idle_workers.load(Ordering::Acquire);
        if idle == 0 {
            return;
        }
        if queued >= idle || self.has_res.load(Ordering::Acquire) {
            self.cv.notify_all();
        } else {
            for _ in 0..queued {
                self.cv.notify_one();
            }
        }
    }
}

/// What the threads share.
pub(crate) struct Shared {
    pub(crate) fabric: Arc<dyn Fabric>,
    pub(crate) node: Mutex<Node>,
    /// Wakes idle workers (tasks may be available); notified only while one waits.
    pub(crate) cv: Condvar,
    /// Workers waiting on `cv` (changed under the node's lock).
    pub(crate) idle_workers: std::sync::atomic::AtomicUsize,
    /// Workers between their first task and running out of tasks: while all are, they
    /// serve signals and timers themselves on inline fabrics.
    pub(crate) busy_workers: std::sync::atomic::AtomicUsize,
    /// Wakes the user thread when the epoch may be over — only then: woken on every
    /// progress turn, it took a core's worth of futex calls from the workers of a
    /// 2-core node (170 ms of system time in a 1.2 s chemistry run).
    pub(crate) done_cv: Condvar,
    pub(crate) kinds: RwLock<Vec<Option<TaskFn>>>,
    /// Bumped by every registration: a worker keeps its own copy of `kinds` while this
    /// stands still (a lock and a reference count per task cost tens of ns).
    pub(crate) kinds_version: std::sync::atomic::AtomicU64,
    pub(crate) origin: Instant,
    pub(crate) shutdown: AtomicBool,
    pub(crate) cfg: RuntimeConfig,
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
    /// An epoch runs: workers may take tasks from the node.
    pub(crate) epoch_running: AtomicBool,
    /// An epoch start runs (`titus_core::start`): the progress thread keeps its naps short
    /// and sweeps its peers' liveness, as in an epoch.
    pub(crate) starting: AtomicBool,
    /// When the progress thread's current wait ends (node time, ns): a worker that makes
    /// the node want something earlier wakes it.
    pub(crate) driver_deadline: std::sync::atomic::AtomicU64,
    /// This rank's operations in flight: whoever drives the node (the progress thread,
    /// a worker between tasks) collects their completions ([`driver::drive_inline`]).
    pub(crate) open: Mutex<driver::OpenOps>,
    /// The fabric completes operations inside their call (`immediate`).
    pub(crate) inline: bool,
    /// Workers drive the node themselves between tasks — the signals that arrived, its
    /// timers, its operations' completions, and where operations are immediate (the node
    /// backend) its commands — and the progress thread naps while they all run tasks:
    /// on the node backend, and where libfabric's progress polls (shm: the workers poll
    /// it between tasks anyway, and a progress thread woken for each step waited
    /// 0.5–2.5 ms for a core on a node whose cores all ran workers).
    pub(crate) serve: bool,
    /// This rank's fabric peers: whose liveness an idle rank checks.
    pub(crate) peers: Vec<u32>,
    /// The ranks operated on, and their first contacts' cost.
    pub(crate) contacts: contacts::Contacts,
    /// Whether the fabric connects peers on first contact.
    pub(crate) lazy: bool,
    /// Resources beside the CPU workers (None: none added).
    pub(crate) resources: Mutex<Option<resources::State>>,
    /// Whether resources were added (workers dispatch through the policy).
    pub(crate) has_res: AtomicBool,
    /// Wakes the resource thread (an executor completed something).
    pub(crate) res_cv: Condvar,
    pub(crate) res_wake: Mutex<bool>,
    /// Epochs started: completions of an earlier (failed) epoch's submissions are dropped.
    pub(crate) res_epoch: std::sync::atomic::AtomicU64,
    /// When (`now()` + 1, ns) the progress thread entered the fabric call it is in to post
    /// an operation, 0 outside one, and to which peer: a provider that never returns (shm
    /// spinning on a lock in memory a dead peer held) is noticed by the waiting user
    /// thread instead of hanging the job.
    pub(crate) submitting: std::sync::atomic::AtomicU64,
    pub(crate) submitting_peer: std::sync::atomic::AtomicU32,
}

impl Shared {
    /// The peer and the time the progress thread has been inside one fabric call posting
    /// an operation, when that is longer than the operation timeout.
    pub(crate) fn stuck_in_fabric(&self) -> Option<(titus_core::Rank, Duration)> {
        let since = self.submitting.load(Ordering::Acquire);
        let stuck = Duration::from_nanos(self.now().0.saturating_sub(since.saturating_sub(1)));
        (since != 0 && stuck > self.cfg.op_timeout)
            .then(|| (self.submitting_peer.load(Ordering::Acquire), stuck))
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
            && self.busy_workers.load(Ordering::Acquire) >= self.cfg.workers
    }

    pub(crate) fn now(&self) -> Time {
        Time(self.origin.elapsed().as_nanos() as u64)
    }

    pub(crate) fn lock_node(&self) -> MutexGuard<'_, Node> {
        self.node.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Locks `m`, recovering from a poisoned lock (every update under the runtime's small
/// locks is one step).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An all-gather across the job's ranks (a barrier when the blobs are empty).
pub type AllGatherFn = Box<dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>, String> + Send + Sync>;

/// All-gather among the in-process ranks of one world. A rank whose runtime is dropped
/// has left it ([`LocalMember`]): a round that waits for it fails, naming it, where it
/// would otherwise wait forever (the rendezvous's ranks fail the same way when a process
/// goes).
struct LocalGather {
    state: Mutex<GatherState>,
    cv: Condvar,
}

struct GatherState {
    /// Rounds completed.
    round: u64,
    /// Ranks that gave their blob to the round under way.
    arrived: usize,
    /// One per rank: the world's size.
    slots: Vec<Vec<u8>>,
    /// The last completed round's blobs (a rank woken late still finds its round's).
    last: Vec<Vec<u8>>,
    /// The first rank that left.
    left: Option<u32>,
}

impl LocalGather {
    fn new(size: usize) -> Self {
        Self {
            state: Mutex::new(GatherState {
                round: 0,
                arrived: 0,
                slots: vec![Vec::new(); size],
                last: Vec::new(),
                left: None,
            }),
            cv: Condvar::new(),
        }
    }

    fn gather(&self, rank: u32, blob: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let gone = |r: u32| format!("rank {r} left the job (its runtime was dropped)");
        let mut st = lock(&self.state);
        if let Some(r) = st.left {
            return Err(gone(r));
        }
        st.slots[rank as usize] = blob.to_vec();
        st.arrived += 1;
        let size = st.slots.len();
        if st.arrived == size {
            st.last = std::mem::replace(&mut st.slots, vec![Vec::new(); size]);
            st.arrived = 0;
            st.round += 1;
            self.cv.notify_all();
            return Ok(st.last.clone());
        }
        // The next round cannot complete without this rank: `last` stays this round's.
        let mine = st.round;
        while st.round == mine && st.left.is_none() {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match st.left {
            Some(r) if st.round == mine => Err(gone(r)),
            _ => Ok(st.last.clone()),
        }
    }

    fn leave(&self, rank: u32) {
        lock(&self.state).left.get_or_insert(rank);
        self.cv.notify_all();
    }
}

/// A rank's membership of its in-process world's all-gather, held by its runtime: the
/// rank leaves when the runtime is dropped.
struct LocalMember {
    gather: Arc<LocalGather>,
    rank: u32,
}

impl Drop for LocalMember {
    fn drop(&mut self) {
        self.gather.leave(self.rank);
    }
}

/// One rank's runtime.
pub struct Runtime {
    shared: Arc<Shared>,
    gather: AllGatherFn,
    /// The last measured cost of each task key (diffusion's predictions).
    history: Mutex<CostHistory>,
    /// Whether an epoch has run to its end here (a repartition plan needs its costs).
    measured: std::sync::atomic::AtomicBool,
    threads: Vec<JoinHandle<()>>,
    /// The resource thread, once a resource is added.
    res_thread: Mutex<Option<JoinHandle<()>>>,
    rank: u32,
    size: u32,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

/// The fabric configuration for `node`: TASKS and INBOX exposed to every rank this one
/// talks to — its out- and in-neighbours (thieves, result senders and next hops, which
/// also signal back, e.g. an inbox reset), its tree neighbours and (work sharing) its
/// group — the same set it connects to; OUTBOX private.
fn fabric_config(node: &Node, overlay: &Overlay, cfg: &RuntimeConfig) -> FabricConfig {
    let sizes = node.segment_sizes();
    let in_neighbours = overlay.in_neighbours(node.rank());
    let readers = node.peers(&in_neighbours);
    // The epoch start's searches read the records of whichever ranks their data leads
    // to (`titus_core::start`): every rank is addressable. Beyond the eager size every
    // connection is made on first contact.
    let size = overlay.ranks();
    let peers: Vec<u32> = (0..size).filter(|&r| r != node.rank()).collect();
    let spec = |name: &str, len: u64, exposure: Exposure| SegmentSpec {
        name: name.into(),
        len,
        exposure,
    };
    FabricConfig {
        segments: vec![
            spec("tasks", sizes[0], Exposure::Peers(readers.clone())),
            spec("inbox", sizes[1], Exposure::Peers(readers)),
            spec("outbox", sizes[2], Exposure::Peers(Vec::new())),
            spec("start", sizes[3], Exposure::All),
        ],
        peers,
        lazy: cfg.lazy_connect.unwrap_or_else(|| {
            titus_core::connects_lazily(overlay) || size > titus_core::EAGER_RANKS_MAX
        }),
        op_timeout: cfg.op_timeout,
    }
}

/// Refuses a rank whose segments need more memory than the process has: their sizes come
/// from options (a payload's room × the shared slots), and a segment past the memory
/// ends in an allocation abort or, in `/dev/shm`, a SIGBUS once written.
fn segments_fit(fcfg: &FabricConfig) -> Result<(), RuntimeError> {
    titus_fabric::mem::segments_fit(&fcfg.segments).map_err(|(need, have)| {
        let sizes: Vec<String> = fcfg
            .segments
            .iter()
            .map(|s| format!("{} {:.2} GiB", s.name, s.len as f64 / f64::from(1u32 << 30)))
            .collect();
        RuntimeError::Config(format!(
            "this rank's segments need {need:.1} GiB ({}), more than the {have:.1} GiB of \
             memory available (a smaller max_payload or shared_capacity)",
            sizes.join(", ")
        ))
    })
}

impl RuntimeConfig {
    /// A worker's grain ([`RuntimeConfig::worker_grain`]): by default
    /// [`titus_core::default_worker_grain`] of the rank's workers (the simulator's rule too).
    pub fn grain(&self) -> Duration {
        self.worker_grain
            .unwrap_or_else(|| titus_core::default_worker_grain(self.workers))
    }

    /// Sets the overlay, routing, protocol and sharing that `balancing` needs in a job of
    /// `ranks` ranks ([`Balancing::apply`]); hierarchical groups are balanced over `loads`
    /// (None: every rank the same).
    pub fn balance(
        &mut self,
        balancing: Balancing,
        ranks: u32,
        loads: Option<&[u64]>,
    ) -> Result<(), RuntimeError> {
        balancing.apply(&mut self.core, &mut self.overlay, ranks, loads)?;
        Ok(())
    }
}

fn validate(cfg: &RuntimeConfig) -> Result<(), RuntimeError> {
    if cfg.worker_batch == 0 {
        return Err(RuntimeError::Config(
            "worker_batch must be at least 1".into(),
        ));
    }
    if let Some(g) = cfg.worker_grain
        && g > Duration::from_secs(1)
    {
        return Err(RuntimeError::Config(format!(
            "worker_grain {g:?} is above 1 s: what a worker holds, no other rank can steal"
        )));
    }
    Ok(())
}

/// Threads [`Runtime::local`] starts at most (every rank's workers and progress thread):
/// past this an in-process job only oversubscribes the machine — thousands of ranks are
/// the simulator's (`titus sim`) or processes' (`titus launch`).
pub const LOCAL_THREADS_MAX: u64 = 4096;

impl Runtime {
    /// A job of `ranks` ranks in this process over the in-process fabric (the laptop
    /// default and the test double): one runtime per rank, to be driven from one thread
    /// each (`run_epoch` is collective).
    ///
    /// Fails (a configuration error) past [`LOCAL_THREADS_MAX`] threads, or where the
    /// ranks' segments would not fit in the memory available.
    pub fn local(
        ranks: u32,
        mut cfg: RuntimeConfig,
        options: MemOptions,
    ) -> Result<Vec<Runtime>, RuntimeError> {
        validate(&cfg)?;
        if cfg.workers == 0 {
            cfg.workers = cores::default_workers(ranks);
        }
        // Each rank runs its workers and a progress thread in this process.
        let threads = u64::from(ranks) * (cfg.workers as u64 + 1);
        if threads > LOCAL_THREADS_MAX {
            return Err(RuntimeError::Config(format!(
                "{ranks} in-process ranks × ({} workers + a progress thread) = {threads} \
                 threads, more than {LOCAL_THREADS_MAX} in one process (fewer ranks or \
                 workers; ranks as processes: titus launch; thousands of ranks: titus sim)",
                cfg.workers
            )));
        }
        cfg.overlay.ranks = ranks;
        let overlay =
            Overlay::new(cfg.overlay.clone()).map_err(|e| RuntimeError::Config(e.to_string()))?;
        let nodes: Vec<Node> = (0..ranks)
            .map(|r| {
                Ok(with_mapper(
                    Node::new(cfg.core.clone(), overlay.clone(), r)?,
                    &cfg,
                ))
            })
            .collect::<Result<_, CoreError>>()?;
        let configs = nodes
            .iter()
            .map(|n| fabric_config(n, &overlay, &cfg))
            .collect();
        let fabrics = mem::world(configs, options)?;
        let gather = Arc::new(LocalGather::new(ranks as usize));
        // Every rank's layout is written before any rank starts (no barrier needed here).
        for (node, fabric) in nodes.iter().zip(&fabrics) {
            node.init_memory(&SegMem(&**fabric));
        }
        nodes
            .into_iter()
            .zip(fabrics)
            .map(|(node, fabric)| {
                let member = LocalMember {
                    gather: gather.clone(),
                    rank: node.rank(),
                };
                let gather: AllGatherFn =
                    Box::new(move |blob| member.gather.gather(member.rank, blob));
                Self::start(fabric, node, cfg.clone(), gather, Vec::new(), false)
            })
            .collect()
    }

    /// This process's rank of a job started by a launcher (any of
    /// [`titus_fabric::bootstrap::LAUNCHERS`]: `titus launch`, srun, mpirun, Hydra), over
    /// the multi-process `backend`; with [`Backend::Mem`], a single rank without a launcher
    /// runs alone over the in-process fabric. Collective: every rank calls it.
    pub fn from_env(cfg: RuntimeConfig, backend: Backend) -> Result<Runtime, RuntimeError> {
        let env = JobEnv::from_env().map_err(FabricError::from)?;
        Self::from_job(cfg, backend, env)
    }

    /// [`Runtime::from_env`] for a job described by `env` (for example
    /// [`JobEnv::session`] for a second runtime in the same processes).
    pub fn from_job(
        mut cfg: RuntimeConfig,
        backend: Backend,
        env: JobEnv,
    ) -> Result<Runtime, RuntimeError> {
        validate(&cfg)?;
        let local_ranks = env.ranks_on_node();
        cfg.overlay.ranks = env.size;
        let (opener, provider) = match backend {
            Backend::Mem if env.size == 1 => {
                let mut v = Self::local(1, cfg, MemOptions::default())?;
                return Ok(v.remove(0));
            }
            Backend::Mem => {
                return Err(RuntimeError::Config(
                    "the mem backend runs every rank in one process: use Runtime::local, or the ofi backend under a launcher".into(),
                ));
            }
            Backend::Fabric { name, provider } => (backend::opener(&name)?, provider),
        };
        let exchange = bootstrap::join(&env).map_err(FabricError::from)?;
        Self::over_fabric(
            cfg,
            env.rank,
            env.size,
            exchange,
            opener,
            provider.as_deref(),
            local_ranks,
        )
    }

    /// This rank of a job whose ranks exchange addresses through `exchange` (for example
    /// an MPI solver's own communicator), over the multi-process `backend` (for example
    /// [`Backend::ofi`]`(None)`: libfabric, automatic provider); rank and size are the
    /// exchange's. No rendezvous and no launcher variables are needed. Collective: every
    /// rank calls it. The exchange is also the barrier between epochs, called from the
    /// thread that calls [`Runtime::run_epoch`].
    pub fn from_exchange(
        mut cfg: RuntimeConfig,
        backend: Backend,
        exchange: Box<dyn Exchange>,
    ) -> Result<Runtime, RuntimeError> {
        validate(&cfg)?;
        let local_ranks = cores::ranks_on_node_from_env()?;
        let Backend::Fabric { name, provider } = backend else {
            return Err(RuntimeError::Config(
                "the mem backend runs every rank in one process: an exchange joins ranks of separate processes".into(),
            ));
        };
        let opener = backend::opener(&name)?;
        let (rank, size) = (exchange.rank(), exchange.size());
        if size == 0 || rank >= size {
            return Err(RuntimeError::Config(format!(
                "the exchange says rank {rank} of {size} ranks"
            )));
        }
        cfg.overlay.ranks = size;
        Self::over_fabric(
            cfg,
            rank,
            size,
            Some(exchange),
            opener,
            provider.as_deref(),
            local_ranks,
        )
    }

    /// Opens this rank over a multi-process backend and starts it; `local_ranks`: the
    /// ranks on this node as the launcher says, for the default worker count where the
    /// CPU masks cannot be read ([`cores`]).
    fn over_fabric(
        mut cfg: RuntimeConfig,
        rank: u32,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        opener: &dyn Opener,
        provider: Option<&str>,
        local_ranks: u32,
    ) -> Result<Runtime, RuntimeError> {
        let overlay =
            Overlay::new(cfg.overlay.clone()).map_err(|e| RuntimeError::Config(e.to_string()))?;
        let node = with_mapper(Node::new(cfg.core.clone(), overlay.clone(), rank)?, &cfg);
        let fcfg = fabric_config(&node, &overlay, &cfg);
        segments_fit(&fcfg)?;
        // Whose liveness it watches: the ranks it works with (every rank is addressable
        // for the start's searches, but a sweep of all would cost O(N)).
        let peers = node.peers(&overlay.in_neighbours(rank));
        let lazy = fcfg.lazy;
        let Opened { fabric, all_gather } = opener.open(rank, size, exchange, fcfg, provider)?;
        let gather: AllGatherFn = Box::new(move |blob| all_gather(blob).map_err(|e| e.to_string()));
        node.init_memory(&SegMem(&*fabric));
        // The start-up barrier (every rank wrote its layout before anyone may touch it)
        // carries every rank's node and CPUs, for the default worker count: gathered
        // whether or not this rank needs them (the ranks' options may differ).
        let mine = cores::placement(
            &titus_fabric::bootstrap::node_identity(),
            &titus_fabric::bootstrap::cpu_affinity().unwrap_or_default(),
        );
        let placements = gather(&mine).map_err(RuntimeError::Barrier)?;
        if cfg.workers == 0 {
            cfg.workers = cores::workers_among(rank as usize, &placements, local_ranks)?;
        }
        Self::start(fabric, node, cfg, gather, peers, lazy)
    }

    /// Starts the threads (every rank's layout is written).
    fn start(
        fabric: Arc<dyn Fabric>,
        node: Node,
        cfg: RuntimeConfig,
        gather: AllGatherFn,
        peers: Vec<u32>,
        lazy: bool,
    ) -> Result<Runtime, RuntimeError> {
        let rank = fabric.rank();
        let size = fabric.size();
        let shared = Arc::new(Shared {
            node: Mutex::new(node),
            cv: Condvar::new(),
            idle_workers: std::sync::atomic::AtomicUsize::new(0),
            busy_workers: std::sync::atomic::AtomicUsize::new(0),
            done_cv: Condvar::new(),
            kinds: RwLock::new(Vec::new()),
            kinds_version: std::sync::atomic::AtomicU64::new(0),
            origin: Instant::now(),
            shutdown: AtomicBool::new(false),
            cfg: cfg.clone(),
            busy_ns: std::sync::atomic::AtomicU64::new(0),
            between_ns: std::sync::atomic::AtomicU64::new(0),
            betweens: std::sync::atomic::AtomicU64::new(0),
            last_task_end: std::sync::atomic::AtomicU64::new(0),
            idle_spans: Mutex::new(Vec::new()),
            timings: tracing::enabled!(tracing::Level::DEBUG),
            progress_cpu: std::sync::OnceLock::new(),
            epoch_running: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            driver_deadline: std::sync::atomic::AtomicU64::new(0),
            open: Mutex::new(Default::default()),
            inline: fabric.caps().immediate,
            serve: fabric.caps().workers_serve(),
            contacts: contacts::Contacts::new(rank, size),
            lazy: lazy && fabric.connects_lazily(),
            fabric,
            peers,
            resources: Mutex::new(None),
            has_res: AtomicBool::new(false),
            res_cv: Condvar::new(),
            res_wake: Mutex::new(false),
            res_epoch: std::sync::atomic::AtomicU64::new(0),
            submitting: std::sync::atomic::AtomicU64::new(0),
            submitting_peer: std::sync::atomic::AtomicU32::new(0),
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("titus-progress-{rank}"))
                .spawn(move || driver::run(&s))
                .map_err(|e| {
                    RuntimeError::Config(format!("cannot start the progress thread: {e}"))
                })?,
        );
        threads.extend(worker::spawn(&shared, cfg.workers, rank)?);
        Ok(Runtime {
            shared,
            gather,
            history: Mutex::new(CostHistory::default()),
            measured: std::sync::atomic::AtomicBool::new(false),
            threads,
            res_thread: Mutex::new(None),
            rank,
            size,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The fabric's description (backend and provider).
    pub fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.shared.fabric
    }

    /// Every rank contributes `blob`; returns all blobs by rank (collective). For small
    /// job-wide exchanges such as gathering statistics, not for the data path.
    pub fn all_gather(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>, RuntimeError> {
        (self.gather)(blob).map_err(RuntimeError::Barrier)
    }

    /// Ends this rank's runtime collectively, as the C ABI's `titus_finalize` does: a
    /// barrier first, so no rank's process leaves (and its memory goes away) while another
    /// still finishes its last epoch or reads it. Dropping a runtime alone is not
    /// collective: a rank that exits right after its last epoch may be seen gone by a peer
    /// whose end of that epoch is still on its way (the peer waits [`DONE_GRACE`] for it,
    /// whether its liveness sweep or a failed steal found this rank gone; a peer whose
    /// end is delayed longer fails its epoch).
    pub fn finalize(self) -> Result<(), RuntimeError> {
        self.all_gather(&[]).map(drop)
    }

    /// Registers the function of task kind `kind` (every rank registers the same kinds:
    /// a stolen task runs wherever it lands).
    pub fn register<F>(&self, kind: u16, f: F)
    where
        F: Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static,
    {
        self.register_fallible(kind, move |p| Ok(f(p)));
    }

    /// [`Runtime::register`] for a function that can fail: its `Err` fails the epoch on
    /// every rank as [`CoreError::TaskFailed`] with that text, quietly (a panic fails it
    /// too, but the panic hook prints it).
    pub fn register_fallible<F>(&self, kind: u16, f: F)
    where
        F: Fn(&[u8]) -> Result<Vec<u8>, String> + Send + Sync + 'static,
    {
        let mut k = self.shared.kinds.write().unwrap_or_else(|p| p.into_inner());
        if k.len() <= kind as usize {
            k.resize(kind as usize + 1, None);
        }
        k[kind as usize] = Some(Arc::new(f));
        self.shared.kinds_version.fetch_add(1, Ordering::Release);
    }

    /// Adds a resource beside the CPU workers (issue #16): `executor` takes up to
    /// `capacity` tasks at once of the kinds `variants` names (with their speeds relative
    /// to a worker); each ready task goes to the capable resource the `dispatch` policy
    /// picks (the policy of the first call holds for all). Between epochs only; the name
    /// appears in errors and in [`EpochStats::resources`]. With per-type work requests
    /// (`cfg.core.resource_types`, the same on every rank) its kind set must be one of the
    /// types; the resource thread then tells the node which types have room, so an idle
    /// executor asks victims for its kinds while the workers are busy. Bad input
    /// (capacity 0, a speed ≤ 0, a kind set that is no type) is a [`RuntimeError::Config`]
    /// naming it.
    pub fn add_resource(
        &self,
        name: &str,
        capacity: u32,
        variants: Variants,
        dispatch: Dispatch,
        mut executor: Box<dyn Executor>,
    ) -> Result<(), RuntimeError> {
        let spec = resources::spec(name, capacity, variants);
        spec.validate()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let sh = &self.shared;
        let types = &sh.cfg.core.resource_types;
        if !types.is_empty() && !types.contains(&None) {
            return Err(RuntimeError::Config(format!(
                "the job's resource types {types:?} (core.resource_types) leave out the CPU workers' (every kind: None)"
            )));
        }
        if !types.is_empty() && !types.contains(&spec.kind_set()) {
            return Err(RuntimeError::Config(format!(
                "resource {name:?} runs kinds {:?}, which is none of the job's resource types {types:?} (core.resource_types)",
                spec.kind_set()
            )));
        }
        if sh.epoch_running.load(Ordering::Acquire) {
            return Err(RuntimeError::Config(format!(
                "resource {name:?} added while an epoch runs"
            )));
        }
        executor.set_waker(resources::waker(sh));
        {
            let mut g = lock(&sh.resources);
            let st = g.get_or_insert_with(|| {
                resources::State::new(
                    titus_core::resources::Resources::new(
                        vec![titus_core::resources::ResourceSpec::cpu(
                            sh.cfg.workers as u32,
                        )],
                        dispatch,
                    )
                    .expect("the CPU workers are a valid resource"),
                )
            });
            let mut specs = st.table.specs().to_vec();
            specs.push(spec);
            st.table = titus_core::resources::Resources::new(specs, st.table.dispatch())
                .map_err(|e| RuntimeError::Config(e.to_string()))?;
            st.bits = titus_core::resources::type_bits(st.table.specs(), types);
            st.executors.push(executor);
        }
        sh.has_res.store(true, Ordering::Release);
        let mut t = lock(&self.res_thread);
        if t.is_none() {
            let s = sh.clone();
            *t = Some(
                std::thread::Builder::new()
                    .name(format!("titus-resources-{}", self.rank))
                    .spawn(move || resources::run(&s))
                    .map_err(|e| {
                        RuntimeError::Config(format!("cannot start the resource thread: {e}"))
                    })?,
            );
        }
        Ok(())
    }

    /// Adds an emulated accelerator ([`Emulated`]: a thread running the registered CPU
    /// variants, its time scaled to `speed` where it can be — documented emulation, for
    /// trying resources without a device) of `capacity` for every kind.
    pub fn add_emulated(
        &self,
        name: &str,
        capacity: u32,
        speed: f64,
        dispatch: Dispatch,
    ) -> Result<(), RuntimeError> {
        resources::spec(name, capacity, Variants::All(speed))
            .validate()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        // Weak: the executor lives in the shared state.
        let weak = Arc::downgrade(&self.shared);
        let f: resources::KindFn = Arc::new(move |kind, payload| {
            let sh = weak
                .upgrade()
                .ok_or_else(|| "the runtime is gone".to_string())?;
            let f = {
                let kinds = sh.kinds.read().unwrap_or_else(|p| p.into_inner());
                kinds.get(kind as usize).cloned().flatten()
            };
            match f {
                Some(f) => f(payload),
                None => Err(format!("no function registered for task kind {kind}")),
            }
        });
        let e = Emulated::new(name, speed, f).map_err(RuntimeError::Config)?;
        self.add_resource(name, capacity, Variants::All(speed), dispatch, Box::new(e))
    }

    /// The connections this rank made so far and their price ([`Connections`]).
    pub fn connections(&self) -> Connections {
        let sh = &self.shared;
        // Lazily, opening connected nobody (its time is the closing barrier's wait).
        let connect = if sh.lazy {
            sh.contacts.connect_time()
        } else {
            sh.fabric.connect_time()
        };
        Connections {
            contacted: sh.contacts.peers(),
            opened: if sh.lazy {
                Vec::new()
            } else {
                sh.peers.clone()
            },
            connect,
            lazy: sh.lazy,
            bytes_per_connection: sh.fabric.connection_bytes(),
        }
    }

    /// The configuration this runtime runs with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.cfg
    }

    /// Whether task kind `kind` has a registered function.
    pub fn has_kind(&self, kind: u16) -> bool {
        let k = self.shared.kinds.read().unwrap_or_else(|p| p.into_inner());
        k.get(kind as usize).is_some_and(Option::is_some)
    }

    /// Runs one epoch: this rank's tasks (kind, payload) go in, this rank's results come
    /// out in task order once every rank's results are home. Collective: every rank calls
    /// it (with its own tasks, possibly none). A task's key is its index in this list
    /// (see [`Runtime::run_epoch_keyed`]).
    pub fn run_epoch(&self, tasks: Vec<(u16, Vec<u8>)>) -> Result<EpochOutput, RuntimeError> {
        self.epoch(indexed(tasks), false)
            .map(|out| out.expect("an epoch always runs"))
    }

    /// [`Runtime::run_epoch`] with a caller-given identity per task: a task's measured cost
    /// is remembered under its key until the next epoch, which predicts its cost from it
    /// and pushes work to less-loaded neighbours before the workers start (diffusion,
    /// `Config::diffusion`). Keys that vanish drop out of the history; new keys have none.
    /// Two tasks with one key fail the epoch on every rank before anything runs
    /// ([`CoreError::DuplicateKey`] here, [`CoreError::Aborted`] elsewhere).
    pub fn run_epoch_keyed(&self, tasks: Vec<TaskIn>) -> Result<EpochOutput, RuntimeError> {
        self.epoch(tasks, false)
            .map(|out| out.expect("an epoch always runs"))
    }

    /// [`Runtime::run_epoch`], unless no rank has any task: then `None` on every rank, and
    /// nothing ran (the same one barrier decides it).
    pub fn run_epoch_if_any(
        &self,
        tasks: Vec<(u16, Vec<u8>)>,
    ) -> Result<Option<EpochOutput>, RuntimeError> {
        self.epoch(indexed(tasks), true)
    }

    /// [`Runtime::run_epoch_keyed`], unless no rank has any task (as
    /// [`Runtime::run_epoch_if_any`]).
    pub fn run_epoch_if_any_keyed(
        &self,
        tasks: Vec<TaskIn>,
    ) -> Result<Option<EpochOutput>, RuntimeError> {
        self.epoch(tasks, true)
    }

    /// A repartition plan (RankDLB's step 4; `titus_core::repartition`): which of this
    /// rank's tasks should move permanently to which neighbour in the rank string so that
    /// the loads predicted from the last epoch's measured costs even out. `keys` are the
    /// tasks this rank will own, in string order (a task without a measured cost counts at
    /// the mean of those with one). Collective: every rank calls it, after at least one
    /// epoch (before, or with a key given twice, it fails naming why).
    pub fn repartition_plan(
        &self,
        keys: &[u64],
    ) -> Result<Vec<titus_core::repartition::Move>, RuntimeError> {
        // A repartition start (`titus_core::start`): the facts, the front and a scan of
        // the loads over the job's own fabric, as the epoch's start.
        let sh = &self.shared;
        let own = {
            let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
            let measured = self.measured.load(Ordering::Acquire);
            let node = sh.lock_node();
            let (input, own) = titus_core::start::StartInput::for_repartition(
                &node,
                keys,
                &h,
                measured,
                sh.cfg.epoch_timeout,
            );
            self.begin_start(node, input)?;
            own
        };
        let outcome = self.finish_start()?;
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        // What fails here is the plan's input, on this rank or another (a refusal).
        outcome
            .repartition_plan(keys, own, &h, sh.cfg.core.repartition_plan)
            .map_err(|e| RuntimeError::Config(e.to_string()))
    }

    /// Begins a start (an epoch's or a repartition's) with `input` on the locked `node`.
    fn begin_start(
        &self,
        mut node: std::sync::MutexGuard<'_, Node>,
        input: titus_core::start::StartInput,
    ) -> Result<(), RuntimeError> {
        let sh = &self.shared;
        sh.starting.store(true, Ordering::Release);
        if let Err(e) = node.begin_start(sh.now(), input, &SegMem(&*sh.fabric)) {
            sh.starting.store(false, Ordering::Release);
            return Err(e.into());
        }
        drop(node);
        sh.fabric.wake();
        Ok(())
    }

    /// Waits for the start under way, driven by the progress thread, to end: its
    /// outcome, or why it failed (a peer gone names it).
    fn finish_start(&self) -> Result<titus_core::start::StartOutcome, RuntimeError> {
        let sh = &self.shared;
        let mut node = sh.lock_node();
        let outcome = loop {
            if let Some(o) = node.poll_start() {
                break o;
            }
            if sh.fail_if_stuck(&mut node) {
                continue;
            }
            node = sh
                .done_cv
                .wait_timeout(node, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        sh.starting.store(false, Ordering::Release);
        // (Its own look may wait for a frozen peer: not under the node's lock, which the
        // progress thread needs to pass the ABORT on.)
        drop(node);
        outcome.map_err(|e| sh.with_own_look(e).into())
    }

    /// Forgets every measured cost: the next epoch has no history (no diffusion).
    pub fn clear_history(&self) {
        *self.history.lock().unwrap_or_else(|p| p.into_inner()) = CostHistory::default();
    }

    fn epoch(
        &self,
        tasks: Vec<TaskIn>,
        skip_if_none: bool,
    ) -> Result<Option<EpochOutput>, RuntimeError> {
        let call = Instant::now();
        let keys: Vec<u64> = tasks.iter().map(|t| t.key).collect();
        let tasks: Vec<NewTask> = tasks
            .into_iter()
            .map(|t| NewTask {
                kind: t.kind,
                payload: t.payload,
                priority: t.priority,
                cost_hint_ns: t.cost_hint_ns,
            })
            .collect();
        let sh = &self.shared;
        // The epoch start (`titus_core::start`): collectives over the job's own fabric,
        // driven by the progress thread like every other operation.
        let own = {
            let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
            let node = sh.lock_node();
            let (input, own) =
                titus_core::start::StartInput::of(&node, &keys, &h, sh.cfg.epoch_timeout);
            self.begin_start(node, input)?;
            own
        };
        let prepare_time = call.elapsed();
        let outcome = self.finish_start()?;
        let gather_time = call.elapsed() - prepare_time;
        let t_plan = Instant::now();
        if !outcome.runs(&own, skip_if_none)? {
            return Ok(None);
        }
        let prediction = {
            let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
            outcome.prediction(&keys, own, &h)
        };
        let plan_time = t_plan.elapsed();
        sh.busy_ns.store(0, Ordering::Relaxed);
        sh.between_ns.store(0, Ordering::Relaxed);
        sh.betweens.store(0, Ordering::Relaxed);
        sh.res_epoch.fetch_add(1, Ordering::AcqRel);
        if let Some(st) = lock(&sh.resources).as_mut() {
            // What a failed epoch left behind is void.
            st.ready.clear();
            st.table.reset_counts();
        }
        let start = Instant::now();
        let start_now = sh.now();
        let read_progress_cpu = || sh.progress_cpu.get().and_then(thread_cpu::ThreadCpu::ns);
        let cpu_start = read_progress_cpu();
        let locked;
        {
            let mut node = sh.lock_node();
            locked = start.elapsed();
            node.start_epoch_predicted(sh.now(), tasks, prediction.as_ref(), &SegMem(&*sh.fabric))?;
            sh.epoch_running.store(true, Ordering::Release);
        }
        let start_time = start.elapsed();
        let start_total = call.elapsed();
        sh.wake_workers();
        sh.fabric.wake();
        let deadline = sh.cfg.epoch_timeout.map(|t| start + t);
        let mut node = sh.lock_node();
        while !node.is_done() {
            if deadline.is_some_and(|d| Instant::now() > d) {
                sh.epoch_running.store(false, Ordering::Release);
                tracing::debug!("epoch timeout: {}", node.debug_summary());
                return Err(RuntimeError::EpochTimeout(
                    sh.cfg.epoch_timeout.unwrap_or_default(),
                    node.stall(),
                ));
            }
            node = sh
                .done_cv
                .wait_timeout(node, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            sh.fail_if_stuck(&mut node);
        }
        sh.epoch_running.store(false, Ordering::Release);
        // From the epoch call: the start is part of the epoch's time.
        let session = call.elapsed();
        let progress_cpu = Duration::from_nanos(
            cpu_start
                .zip(read_progress_cpu())
                .map_or(0, |(a, b)| b.saturating_sub(a)),
        );
        let core = node.stats().clone();
        let steal = Duration::from_nanos(core.steal_latency_ns.iter().sum());
        let out = node.take_epoch_results();
        drop(node);
        let out = out.map_err(|e| RuntimeError::from(sh.with_own_look(e)))?;
        let t_record = Instant::now();
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(&keys, &out.costs_ns);
        let last_end = Duration::from_nanos(
            sh.last_task_end
                .load(Ordering::Relaxed)
                .saturating_sub(start_now.0),
        );
        let (idle_note, steal_note) = if sh.timings {
            let spans = std::mem::take(&mut *lock(&sh.idle_spans));
            (idle_summary(spans, start_now.0), steal_summary(&core))
        } else {
            Default::default()
        };
        tracing::debug!(
            "epoch: {} tasks; progress thread CPU {progress_cpu:?}; idle {idle_note}; steal timeline {steal_note}; start: input {:?}, collectives {:?}, prediction {:?}, pushes {:?} (node lock {:?}); run {:?} (last task ended at {:?}), results {:?}, history {:?}; steals {} ok {} empty ({} tasks), pushed {} ({} ms of predicted {} ms, out at {:.2} ms), pushed in {} (at {:.2} ms), busy {:?} in {} grains, ran {} for others; {} operations, result chunks {} sent {} received",
            keys.len(),
            prepare_time,
            gather_time,
            plan_time,
            start_time,
            locked,
            session,
            last_end,
            start.elapsed().saturating_sub(session + t_record.elapsed()),
            t_record.elapsed(),
            core.steals_ok,
            core.steals_empty,
            core.tasks_stolen,
            core.tasks_pushed,
            core.pushed_ns / 1_000_000,
            core.predicted_ns / 1_000_000,
            core.pushed_out_at_ns as f64 / 1e6,
            core.tasks_pushed_in,
            core.pushed_in_at_ns as f64 / 1e6,
            Duration::from_nanos(sh.busy_ns.load(Ordering::Relaxed)),
            core.grains,
            core.tasks_run_for_others,
            core.ops,
            core.chunks_sent,
            core.chunks_received,
        );
        self.measured.store(true, Ordering::Release);
        let busy = Duration::from_nanos(sh.busy_ns.load(Ordering::Relaxed));
        let resources = lock(&sh.resources)
            .as_ref()
            .map(|st| st.table.counts())
            .unwrap_or_default();
        let workers = sh.cfg.workers;
        Ok(Some(EpochOutput {
            results: out.results,
            costs_ns: out.costs_ns,
            stats: EpochStats {
                core,
                busy,
                idle: (session * workers as u32).saturating_sub(busy),
                between: Duration::from_nanos(sh.between_ns.load(Ordering::Relaxed)),
                betweens: sh.betweens.load(Ordering::Relaxed),
                session,
                start: start_total,
                start_figures: outcome.figures,
                start_view: outcome,
                steal,
                progress_cpu,
                protocol: sh.cfg.core.protocol.name(),
                workers,
                resources,
            },
        }))
    }
}

/// The debug log's account of the workers' idle time in an epoch that started at
/// `start` (`now()` ns): the spans that ended in a task (clipped to the start), their sum,
/// and the longest four with when each began (ms from the start).
fn idle_summary(spans: Vec<(u64, u64)>, start: u64) -> String {
    let mut spans: Vec<(u64, u64)> = spans
        .into_iter()
        .filter(|&(s, l)| s + l > start)
        .map(|(s, l)| {
            let from = s.max(start);
            (from - start, l - (from - s))
        })
        .collect();
    let total: u64 = spans.iter().map(|s| s.1).sum();
    spans.sort_by_key(|s| std::cmp::Reverse(s.1));
    let longest: Vec<String> = spans
        .iter()
        .take(4)
        .map(|(s, l)| format!("{:.2} ms at {:.2}", *l as f64 / 1e6, *s as f64 / 1e6))
        .collect();
    format!(
        "{} spans, {:.2} ms ({})",
        spans.len(),
        total as f64 / 1e6,
        longest.join(", ")
    )
}

/// The debug log's account of an epoch's first steals: each attempt's latency and each
/// success's end, victim and tasks (ms from the epoch's start).
fn steal_summary(core: &titus_core::Stats) -> String {
    let ms = |ns: u64| format!("{:.2}", ns as f64 / 1e6);
    let latency: Vec<String> = core
        .steal_latency_ns
        .iter()
        .take(4)
        .map(|&l| ms(l))
        .collect();
    let got: Vec<String> = core
        .steal_log
        .iter()
        .take(4)
        .map(|e| format!("{} tasks from {} at {}", e.tasks, e.victim, ms(e.at_ns)))
        .collect();
    format!(
        "first latencies [{}] ms, first successes [{}], adverts {} sent {} received",
        latency.join(", "),
        got.join("; "),
        core.adverts_sent,
        core.adverts_received
    )
}

/// Tasks keyed by their index.
fn indexed(tasks: Vec<(u16, Vec<u8>)>) -> Vec<TaskIn> {
    tasks
        .into_iter()
        .enumerate()
        .map(|(i, (kind, payload))| TaskIn {
            key: i as u64,
            kind,
            payload,
            priority: 0,
            cost_hint_ns: 0,
        })
        .collect()
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.cv.notify_all();
        self.shared.done_cv.notify_all();
        self.shared.res_cv.notify_all();
        if let Some(t) = lock(&self.res_thread).take() {
            let _ = t.join();
        }
        // The executors end their threads.
        drop(lock(&self.shared.resources).take());
        // A progress thread inside a provider call that does not return within the
        // operation timeout is left behind (detached): joining it would hang the process.
        let give_up = Instant::now() + self.shared.cfg.op_timeout;
        while self.shared.submitting.load(Ordering::Acquire) != 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stuck = self.shared.submitting.load(Ordering::Acquire) != 0;
        for (i, t) in self.threads.drain(..).enumerate() {
            if i == 0 && stuck {
                tracing::warn!("the progress thread is stuck in the fabric provider: left behind");
                continue;
            }
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use titus_fabric::{Exposure, SegmentSpec};

    /// Options that size a segment past the memory (`max_payload` × `shared_capacity`)
    /// are refused at open, naming the segments, not left to abort an allocation.
    #[test]
    fn segments_past_the_memory_are_refused_naming_them() {
        let fcfg = |len: u64| FabricConfig {
            segments: vec![SegmentSpec {
                name: "tasks".into(),
                len,
                exposure: Exposure::Peers(Vec::new()),
            }],
            peers: Vec::new(),
            lazy: false,
            op_timeout: Duration::from_secs(1),
        };
        assert!(segments_fit(&fcfg(1 << 20)).is_ok());
        if titus_fabric::mem::available_memory().is_some() {
            let e = segments_fit(&fcfg(1 << 60)).unwrap_err().to_string();
            assert!(e.contains("segments need") && e.contains("tasks"), "{e}");
        }
    }
}
