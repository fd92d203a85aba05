//! A discrete-event simulator of a Titus job: the unchanged sans-IO core
//! ([`titus_core::Node`]) of every rank, driven on virtual time over a modelled fabric
//! ([`model::Model`]), with workers that "run" each task for its drawn duration.
//!
//! The driver does what the runtime's progress thread and workers do: it hands the
//! node's commands to the (simulated) fabric, feeds completions, signals and timers back,
//! gives idle workers tasks — a grain at a time through `take_grain`, as the runtime's
//! workers take them (a rank with resources: one at a time through `take_tasks_for`) —
//! and reports results with `task_done`, a grain's together as the runtime's workers do.
//! Nothing of the protocol lives here: if the simulator needed a path the runtime lacks,
//! the boundary would be wrong.
//!
//! Every run checks invariants (see [`Violation`]): every task runs exactly once to
//! completion, every result reaches its owner exactly once and is right, a thief reads a
//! locked shared set only while it holds the lock, termination is declared only when
//! every result is home, and the run ends (routes end, nothing stalls). Faults
//! ([`Faults`]) — jittered (hence reordered) operations, slow ranks, a rank whose
//! progress stops for a while, ranks that exit as soon as they ended the last epoch —
//! are drawn from the seed. The same seed gives the same
//! event trace ([`Outcome::trace`]).
//!
//! A job may run several epochs ([`Job::later_epochs`]), each starting once every rank
//! ended the one before. As the runtime does, each rank keeps the measured cost of each
//! of its tasks (by [`SimTask::key`], which a job keeps with the task across epochs;
//! measured cost: its simulated duration, carried home in the result record) and hands
//! the next epoch's predictions and its diffusion neighbours' predicted loads to its node
//! (diffusion, `titus_core::Config::diffusion`); the first epoch has no history. Between
//! epochs a driver may change the next epoch's tasks ([`simulate_with`]), e.g. apply
//! every rank's repartition plan ([`Between::repartition_plan`]: a repartition start
//! over the simulated fabric, as the runtime's). Ranks may start each epoch at different times
//! ([`Job::start_skew_ns`]), as after a real barrier. At the end of every epoch nothing of
//! it may still be travelling but what the core leaves to the next one: steal requests
//! and empty replies, load reports, forwarded requests and refill hints (a thief that
//! learned of the end does not wait for them); the next epoch must answer them with
//! nothing and ignore the answers.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
mod mem;
pub mod model;
mod queue;
pub mod time;

use mem::SparseMem;
pub use model::Model;
use queue::EventQueue;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use titus_core::layout::signal::Signal;
use titus_core::layout::{self, seg, tasks};
use titus_core::repartition::Move;
use titus_core::resources::{
    Dispatch, KindSet, ResourceCounts, ResourceSpec, Resources, Variants, type_bits, type_table,
};
use titus_core::{Config, CostHistory, Node, Op, Protocol, Stats, Time, Token};
use titus_overlay::rng::Rng;
use titus_overlay::{Overlay, OverlayParams};

/// One task of the simulated workload.
#[derive(Debug, Clone, PartialEq)]
pub struct SimTask {
    /// Its identity across epochs (the runtime's `TaskIn::key`; unique among its owner's
    /// tasks): its measured cost is remembered under it for the next epoch's prediction.
    pub key: u64,
    /// Its kind (which resources have a variant of it; 0 unless resources say otherwise).
    pub kind: u16,
    /// How long it runs on a CPU worker, ns (on a resource of speed s: cost / s).
    pub cost_ns: u64,
    /// Its payload (travels through the core like a real one).
    pub payload: Vec<u8>,
    /// The cost hint its submitter gives, ns (0: none; `NewTask::cost_hint_ns`).
    pub hint_ns: u64,
    /// Its priority (`NewTask::priority`).
    pub priority: i16,
}

/// Faults to inject.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Each latency is multiplied by 1 + U(0, jitter): operations overtake each other.
    pub jitter: f64,
    /// (rank, factor): these ranks run their tasks `factor` times slower.
    pub slow: Vec<(u32, f64)>,
    /// (rank, from ns, for ns): this rank's progress stops serving for a while.
    pub stall: Option<(u32, u64, u64)>,
    /// Each rank's process exits as soon as it ended the last epoch (no collective end,
    /// as a program that returns without `finalize`): an operation that reaches it
    /// afterwards fails at its issuer as one to a gone process.
    pub exit_after_end: bool,
    /// This rank's first message of an epoch start arrives with a wrong format version
    /// (its wire header's byte 2), as from a rank running another build: the receiver
    /// must refuse it naming the sender and the field, and every rank stop.
    pub corrupt_start: Option<u32>,
}

/// A simulated job.
pub struct Job<'a> {
    /// Protocol configuration (every rank).
    pub core: Config,
    /// Overlay parameters (`ranks` is the job size).
    pub overlay: OverlayParams,
    /// Worker threads per rank.
    pub workers: usize,
    /// Fabric model.
    pub model: Model,
    /// Faults.
    pub faults: Faults,
    /// Seed of the jitter.
    pub seed: u64,
    /// Each rank's tasks (of the first epoch).
    pub tasks: Vec<Vec<SimTask>>,
    /// Each rank's tasks of every further epoch (empty: one epoch); [`simulate_with`] may
    /// replace each between epochs.
    pub later_epochs: Vec<Vec<Vec<SimTask>>>,
    /// Each rank starts each epoch up to this many ns late (drawn per rank and epoch; 0:
    /// every rank at once).
    pub start_skew_ns: u64,
    /// Holds every rank's epoch start to the whole job's plan (the runtime's all-gather
    /// once computed it): its load and its part of the string plan must be the same
    /// wherever the start found the same movement (a check; O(N) an epoch).
    pub check_start: bool,
    /// A task's result from its payload (checked against what comes home).
    pub result: &'a (dyn Fn(&[u8]) -> Vec<u8> + Sync),
    /// Bytes moved in the TASKS segment are charged this many times (payloads can be
    /// simulated small and charged at their nominal size).
    pub task_bytes_scale: f64,
    /// Give up after this many events.
    pub max_events: u64,
    /// Each rank's mapper (`None`: the core's default), as the runtime's
    /// `RuntimeConfig::mapper` gives one to each process.
    pub mapper: Option<&'a MapperFactory>,
    /// The ranks' resources beside their CPU workers (default: none).
    pub resources: SimResources,
    /// A worker's grain, ns of estimated work it takes from its rank's queue at once (the
    /// runtime's `worker_grain`); `None`: the runtime's default for [`Job::workers`]
    /// ([`titus_core::default_worker_grain`]); 0: one task at a time.
    pub worker_grain_ns: Option<u64>,
    /// Each rank's CPU per task of its own around an epoch's start, charged on that rank.
    pub start_cpu: StartCpu,
}

/// A rank's CPU per task of its own around an epoch's start, outside the start's messages:
/// the runtime's serial work of a time step, which delays the rank's own start and first
/// task as it delays the runtime's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartCpu {
    /// Its history read into the start's input and its keys checked, before its first
    /// message (inside `start_s`), ns.
    pub input_ns: f64,
    /// Its costs predicted, its pushes planned and its queue built, after the start's
    /// outcome and before its first task (inside `start_s`), ns.
    pub plan_ns: f64,
    /// The epoch's measured costs recorded, after its end and before its next call, ns.
    pub history_ns: f64,
}

impl StartCpu {
    /// The runtime's, measured: the chemistry example's 131,072 cells a step on one rank
    /// (`TITUS_LOG=titus_runtime=debug`: the start's input 11 ms, the pushes' planning
    /// 12 ms with nothing pushed, the history 14-20 ms; a 2-core VM, docs/results.md).
    pub const RUNTIME: StartCpu = StartCpu {
        input_ns: 85.0,
        plan_ns: 95.0,
        history_ns: 120.0,
    };
    /// None: the start's messages alone.
    pub const NONE: StartCpu = StartCpu {
        input_ns: 0.0,
        plan_ns: 0.0,
        history_ns: 0.0,
    };

    fn of(per_task_ns: f64, tasks: usize) -> u64 {
        (per_task_ns * tasks as f64) as u64
    }
}

/// The ranks' resources beside their CPU workers (issue #16; `titus_core::resources`).
/// Default: none anywhere — every task runs on a CPU worker, exactly as without them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimResources {
    /// Each rank's accelerators (empty, or shorter than the job: the missing ranks have
    /// none), e.g. from `titus_core::resources::parse_description`.
    pub per_rank: Vec<Vec<ResourceSpec>>,
    /// The dispatch policy of every rank.
    pub dispatch: Dispatch,
    /// (rank, resource, n): that resource of that rank fails its n-th submission (counted
    /// from 1, over the whole run), as a failing launch or test callback would.
    pub fail: Option<(u32, usize, u64)>,
    /// Each rank's CPU workers' kinds (empty, or shorter than the job: every kind; None:
    /// every kind), e.g. a rank whose CPUs cannot run an accelerator-only kind. Its tasks
    /// of other kinds wait in its queue for ranks that can run them.
    pub cpu_kinds: Vec<KindSet>,
    /// Keep each resource rank's dispatches ([`RankOutcome::dispatches`]).
    pub log_dispatches: bool,
}

/// Makes rank r's mapper.
pub type MapperFactory = dyn Fn(u32) -> Box<dyn titus_core::Mapper> + Sync;

impl Job<'_> {
    /// A job of `tasks` with the plain rest: one worker per rank, no faults, seed 1, one
    /// epoch started together, [`check::check_result`] as the task, task bytes charged as
    /// they are, 50 M events at most, the default mapper, no resources beyond the workers.
    pub fn new(
        core: Config,
        overlay: OverlayParams,
        model: Model,
        tasks: Vec<Vec<SimTask>>,
    ) -> Self {
        Job {
            core,
            overlay,
            workers: 1,
            model,
            faults: Faults::default(),
            seed: 1,
            tasks,
            later_epochs: Vec::new(),
            start_skew_ns: 0,
            check_start: false,
            result: &check::check_result,
            task_bytes_scale: 1.0,
            max_events: 50_000_000,
            mapper: None,
            resources: SimResources::default(),
            worker_grain_ns: None,
            start_cpu: StartCpu::RUNTIME,
        }
    }

    /// A worker's grain in ns ([`Job::worker_grain_ns`]).
    pub fn grain_ns(&self) -> u64 {
        self.worker_grain_ns
            .unwrap_or_else(|| titus_core::default_worker_grain(self.workers).as_nanos() as u64)
    }
}

impl std::fmt::Debug for Job<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("ranks", &self.overlay.ranks)
            .field("protocol", &self.core.protocol)
            .field("model", &self.model.name)
            .finish_non_exhaustive()
    }
}

/// What one rank did.
#[derive(Debug, Clone, Default)]
pub struct RankOutcome {
    /// The core's figures.
    pub stats: Stats,
    /// Worker time running tasks, ns.
    pub busy_ns: u64,
    /// Its progress thread's CPU for operations this epoch, issued and served, ns (the
    /// node model's `op_serve_ns` and `op_issue_ns`; 0 without).
    pub op_cpu_ns: u64,
    /// Its workers' time from a task's end to their next task's start where they went
    /// straight on, ns, and how many such gaps (the node model's time around each task;
    /// none without it): the runtime's `EpochStats::between`.
    pub between: (u64, u64),
    /// From the epoch call (its start's beginning) to this rank's end of the epoch, ns.
    pub session_ns: u64,
    /// From the epoch call to its tasks' start: the epoch start, ns.
    pub start_ns: u64,
    /// The epoch start's bytes, messages and rounds.
    pub start: titus_core::start::StartFigures,
    /// This rank's results, in task order.
    pub results: Vec<Vec<u8>>,
    /// Each of its tasks' measured (simulated) cost, ns, in task order, as it came home.
    pub costs_ns: Vec<u64>,
    /// Ranks it exchanged operations with so far (either way), since the job began.
    pub peers: u32,
    /// Connections it holds: its fabric peers where they connect at open, the ranks it
    /// exchanged operations with where they connect on first contact.
    pub connections: u32,
    /// Connection time charged to it so far, ns (see [`model`]).
    pub connect_ns: u64,
    /// Memory its connections hold, bytes.
    pub connection_bytes: f64,
    /// Submissions and completions per resource, the CPU workers first (empty for a
    /// rank without resources beside its workers).
    pub resources: Vec<ResourceCounts>,
    /// Time its resources other than the CPU workers spent on tasks, ns.
    pub accel_busy_ns: u64,
    /// Time each of its resources (0: the CPU workers) spent on each owner's tasks, ns:
    /// (resource, owner) → ns (empty for a rank without resources beside its workers).
    pub busy_by_owner: BTreeMap<(usize, u32), u64>,
    /// With [`SimResources::log_dispatches`]: each task it dispatched, in order:
    /// (when, ns from the epoch's start; resource; owner; cost there, ns).
    pub dispatches: Vec<(u64, usize, u32, u64)>,
}

/// What a simulated run produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Per rank, in the last epoch.
    pub ranks: Vec<RankOutcome>,
    /// Per rank, in each epoch before the last (empty for one epoch).
    pub earlier: Vec<Vec<RankOutcome>>,
    /// Events handled.
    pub events: u64,
    /// Virtual time at the end of the last epoch, ns.
    pub end_ns: u64,
    /// A hash of every event handled, in order (same seed, same trace).
    pub trace: u64,
    /// Ranks' repartition starts held to the whole job's plan ([`Job::check_start`]):
    /// those whose root found the whole-job front's movement.
    pub plans_checked: u64,
}

/// An invariant that did not hold, or a run that did not end.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation(pub String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug)]
enum Ev {
    Start {
        node: u32,
    },
    /// `node`'s start ended and its planning CPU ([`StartCpu::plan_ns`]) is spent: its
    /// epoch begins from the outcome it keeps.
    Begin {
        node: u32,
    },
    Arrive {
        from: u32,
        token: Token,
        op: Op,
    },
    Complete {
        node: u32,
        token: Token,
        value: u64,
    },
    /// `node`'s operation `token` failed: its target's process is gone.
    Failed {
        node: u32,
        token: Token,
        peer: u32,
    },
    Signal {
        node: u32,
        from: u32,
        value: u64,
    },
    Timer {
        node: u32,
    },
    TaskDone {
        node: u32,
        owner: u32,
        index: u32,
        kind: u16,
        result: Result<Vec<u8>, String>,
        cost: u64,
        /// The resource that ran it (0: a CPU worker).
        res: usize,
    },
}

impl Ev {
    /// The rank whose progress handles it (None: the fabric's).
    fn node(&self) -> Option<u32> {
        match self {
            Ev::Arrive { .. } => None,
            Ev::Start { node }
            | Ev::Begin { node }
            | Ev::Complete { node, .. }
            | Ev::Failed { node, .. }
            | Ev::Signal { node, .. }
            | Ev::Timer { node }
            | Ev::TaskDone { node, .. } => Some(*node),
        }
    }
}

fn mix(h: u64, x: u64) -> u64 {
    let mut z = (h ^ x).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Each rank's fabric peers, sorted, in one table (a rank's list is a slice of it), and
/// which of them it operated on (the entry's top bit: one cache line less per operation
/// than a table of flags beside it).
struct Peers {
    /// Rank r's peers are `list[at[r]..at[r + 1]]`.
    at: Vec<u32>,
    list: Vec<u32>,
}

/// The top bit of a `Peers::list` entry: the rank operated on that peer.
const USED: u32 = 1 << 31;

impl Peers {
    fn new(lists: Vec<Vec<u32>>) -> Self {
        let mut at = Vec::with_capacity(lists.len() + 1);
        at.push(0);
        let mut list = Vec::with_capacity(lists.iter().map(Vec::len).sum());
        for l in lists {
            list.extend_from_slice(&l);
            at.push(u32::try_from(list.len()).expect("fewer than 2^32 peer entries"));
        }
        assert!(list.iter().all(|&p| p & USED == 0), "ranks below 2^31");
        Self { at, list }
    }

    fn range(&self, r: u32) -> std::ops::Range<usize> {
        self.at[r as usize] as usize..self.at[r as usize + 1] as usize
    }

    /// Rank `r`'s peers, with the used bit.
    fn entries(&self, r: u32) -> &[u32] {
        &self.list[self.range(r)]
    }

    /// Rank `r`'s peers.
    fn of(&self, r: u32) -> impl Iterator<Item = u32> + '_ {
        self.entries(r).iter().map(|&p| p & !USED)
    }

    /// Where `peer` is in `r`'s list.
    fn find(&self, r: u32, peer: u32) -> Option<usize> {
        let range = self.range(r);
        let i = self.list[range.clone()]
            .binary_search_by(|&p| (p & !USED).cmp(&peer))
            .ok()?;
        Some(range.start + i)
    }

    /// `from` operates on `peer`: false if `peer` is not its peer.
    fn mark(&mut self, from: u32, peer: u32) -> bool {
        match self.find(from, peer) {
            Some(i) => {
                self.list[i] |= USED;
                true
            }
            None => false,
        }
    }

    /// The ranks `r` exchanged operations with, either way (the lists are symmetric).
    fn used(&self, r: u32) -> u32 {
        self.entries(r)
            .iter()
            .filter(|&&e| {
                e & USED != 0
                    || self
                        .find(e & !USED, r)
                        .is_some_and(|j| self.list[j] & USED != 0)
            })
            .count() as u32
    }
}

/// One rank's state in the simulator that (nearly) every event of the rank touches.
#[derive(Default)]
struct PerRank {
    /// When its progress thread is free again.
    cpu_free: u64,
    /// Workers with nothing to run.
    idle: u32,
    /// The last rank it operated on, known to be its fabric peer (`u32::MAX`: none yet):
    /// consecutive operations mostly go to one peer (a steal's ticket and read, a chunk's
    /// reservation, write and signal), which then need no search of its list.
    peer_checked: u32,
    /// Results of its own tasks home so far (this epoch).
    home_seen: u32,
    /// Its timer's deadline, when set.
    timer_at: Option<u64>,
    /// When it started and ended the epoch.
    start: Option<u64>,
    end: Option<u64>,
    /// Events that arrived while its progress thread was busy, by sequence number, and
    /// the key of the one queue entry (a *marker*, slot `MARKER | rank`) that stands for
    /// the earliest of them. Re-queueing each waiting event at every busy end instead
    /// cost O(backlog²) at a loaded rank (a master serving 10,000 ranks).
    wake: Option<(u64, u64)>,
    deferred: BinaryHeap<Reverse<(u64, u32)>>,
    /// One event that found it busy while none waited waits in the queue itself, at the
    /// time the rank is free, in its own place in the order (slot `PARKED | slot`): the
    /// same order as a marker's, without the heap and the marker (a fifth of all events
    /// wait so, nearly all of them alone).
    parked: bool,
    /// Without resources: its workers' grains, tasks taken from the node and not yet
    /// started (the runtime's workers' deques, which siblings may take from).
    grain: VecDeque<titus_core::Task>,
    /// A task taken while none of its capable resources had room (it goes first when
    /// one has).
    held: Option<titus_core::Task>,
    /// Without resources: results its workers hold to report with their next take from
    /// the node (the runtime's `Unreported`), and when the first of them ended.
    unreported: Vec<Unreported>,
    unreported_since: Option<u64>,
    /// The resource types it has (bits of `Config::resource_types`; 0 where the job has
    /// none).
    types_mine: u64,
    /// Timers in a row that did nothing and left its deadline at once (a rank that would
    /// spin in the runtime, its progress thread burning a core).
    idle_wakes: u32,
    /// When its workers last came free from a task, and how many then (they take their
    /// next task awake; any other worker sleeps and needs `Cpu::wake_ns`).
    freed: (u64, u32),
    /// When its memory's atomics are served again (one at a time).
    atomic_free: u64,
    /// Time its workers spent on tasks this epoch, ns.
    busy: u64,
    /// The node model's CPU per operation served and issued ([`model::Cpu::op_serve_ns`]):
    /// charged to it this epoch, and owed by its next task (charged while its workers all
    /// ran tasks).
    op_cpu: u64,
    op_debt: u64,
    /// Where its workers serve its node ([`Model::workers_serve`]): the CPU for the bytes
    /// its handlers moved while every worker ran a task, which the next task's worker
    /// spends before it starts, ns.
    serve_debt: u64,
    /// Its workers' time from a task's end to their next task's start where they went
    /// straight on (the node model's time around a task), ns, and how many such gaps.
    between: (u64, u64),
}

struct Sim<'a> {
    job: &'a Job<'a>,
    nodes: Vec<Node>,
    mems: Vec<SparseMem>,
    /// Events by (time, sequence); the events themselves wait in the slab.
    queue: EventQueue,
    slab: Vec<Option<Ev>>,
    free: Vec<u32>,
    /// Per rank: what each event touches, side by side (one rank's state in a few cache
    /// lines, not one line in each of seventeen arrays: at 100,000 ranks they missed).
    per: Vec<PerRank>,
    seq: u64,
    rng: Rng,
    /// The epoch running (0: the first), each rank's tasks in it (the job's, or what the
    /// driver gave between epochs) and their keys, and when each rank started it.
    epoch: usize,
    current: Cow<'a, [Vec<SimTask>]>,
    keys: Vec<Vec<u64>>,
    done_count: usize,
    /// Each rank's fabric peers; `None` under the complete graph, where every rank is
    /// every rank's peer (listing them would take N² entries).
    peers: Option<Peers>,
    /// Under the complete graph: each rank's ranks it exchanged operations with (either
    /// way), sorted (with fabric peers, [`Peers::used`] keeps it).
    contacts: Vec<Vec<u32>>,
    /// Connection time charged to each rank, ns.
    connect_ns: Vec<u64>,
    runs: Vec<Vec<u8>>,
    home_total: u64,
    own_total: u64,
    slow: Vec<f64>,
    events: u64,
    trace: u64,
    /// Commands issued and tasks taken, all ranks: a timer that changed neither did
    /// nothing.
    activity: u64,
    lock_check: bool,
    stats: Vec<Stats>,
    results: Vec<Vec<Vec<u8>>>,
    costs: Vec<Vec<u64>>,
    /// Per rank: the last measured cost of each task (by key), across epochs.
    history: Vec<CostHistory>,
    /// Per rank, while its epoch start is under way: its own prediction (the start's
    /// outcome completes it), and when it called the epoch.
    own: Vec<Option<titus_core::start::OwnPrediction>>,
    began: Vec<u64>,
    /// Per rank: a start's outcome waiting for its planning CPU ([`Ev::Begin`]), and the
    /// history CPU its last epoch's end owes its next call.
    beginning: Vec<Option<titus_core::start::StartOutcome>>,
    history_owed: Vec<u64>,
    /// With [`Job::check_start`]: the whole job's front, and this epoch's plan from it.
    reference_front: titus_core::JobFront,
    reference: Option<WholeJobPlan>,
    /// Per rank: its last start's time (from the epoch call to its tasks' start, ns) and
    /// figures.
    start_figures: Vec<(u64, titus_core::start::StartFigures)>,
    /// A repartition start under way ([`Between::repartition_plan`]): each rank's keys,
    /// and each rank's outcome once its start ended, with its own prediction.
    plan_keys: Option<Vec<Vec<u64>>>,
    planned: Vec<Option<PlanOutcome>>,
    /// With [`Job::check_start`]: the whole job's front as the repartition plans follow it.
    reference_plan_front: titus_core::JobFront,
    /// Virtual time between epochs: when the last epoch (or repartition start) ended.
    clock: u64,
    /// [`Faults::corrupt_start`] struck.
    corrupted: bool,
    /// [`Outcome::plans_checked`].
    plans_checked: u64,
    /// Per rank: its resource table, where it has resources beside its workers; empty
    /// where no rank has any, so that the common job's events do not touch it (a cache
    /// miss each at 100,000 ranks).
    res: Vec<Option<Resources>>,
    /// Per rank: time its other resources spent on tasks this epoch, ns.
    accel_busy: Vec<u64>,
    busy_by_owner: Vec<BTreeMap<(usize, u32), u64>>,
    dispatches: Vec<Vec<(u64, usize, u32, u64)>>,
    /// Per rank: each resource's type bit (its own types: [`PerRank::types_mine`]).
    types_of: Vec<Vec<u64>>,
    /// Submissions to the failing resource so far.
    fail_count: u64,
    /// The cost each task ran for where it ran (by owner and index): what must come home.
    ran_for: Vec<Vec<u64>>,
    /// The node model's (`Model::cpu`): ranks per node, and each node's workers running
    /// tasks.
    cpu_ranks: u32,
    node_busy: Vec<u32>,
    /// On a polled fabric with the node model ([`Model::polled`]): per rank, when each of
    /// its workers' running tasks ends, and which task it is (owner, index) — its
    /// `TaskDone` may be handled later, when the rank's progress is free (empty otherwise).
    task_ends: Vec<Vec<(u64, u32, u32)>>,
    /// Ranks whose epoch failed (a task's or resource's error, or the ABORT flood that
    /// follows it), and the first failure, in words: the run goes on until every rank
    /// has stopped with an error ([`FAILED_EVERYWHERE`]) — the runtime's promise — or
    /// ends in a violation naming those that never learned.
    failed: Vec<bool>,
    failed_count: usize,
    /// The first failure: its rank, its code, in words.
    first_failure: Option<(u32, u32, String)>,
}

/// How a run that failed on every rank ends its violation's message: the failure was
/// told to every rank, each stopped with an error, and no task ran twice up to then.
pub const FAILED_EVERYWHERE: &str = "every rank stopped with an error";

/// A run that failed on every rank ([`FAILED_EVERYWHERE`]): the events it took and its
/// trace hash, which its violation's message ends with; None for any other violation.
pub fn failed_everywhere(v: &Violation) -> Option<(u64, u64)> {
    if !v.0.contains(FAILED_EVERYWHERE) {
        return None;
    }
    // "… (N events, trace T)"
    let tail = v.0.rsplit('(').next()?;
    let mut words = tail.trim_end_matches(')').split_whitespace();
    let events = words.next()?.parse().ok()?;
    let trace = u64::from_str_radix(words.nth(2)?, 16).ok()?;
    Some((events, trace))
}

/// The rank an operation acts on.
fn target(op: &Op) -> u32 {
    match op {
        Op::Read { peer, .. }
        | Op::Write { peer, .. }
        | Op::Cas { peer, .. }
        | Op::FetchAdd { peer, .. } => *peer,
    }
}

/// Timers in a row that may do nothing and leave a rank's deadline at once before the
/// checker calls it a spin.
const SPIN_MAX: u32 = 1;

/// Queue slots with this bit are markers ([`Sim::mark`]); events' slots stay below it.
const MARKER: u32 = 1 << 31;

/// Queue slots with this bit are parked events ([`PerRank::parked`]).
const PARKED: u32 = 1 << 30;

impl<'a> Sim<'a> {
    /// Each rank's tasks in the epoch running.
    fn tasks(&self) -> &[Vec<SimTask>] {
        &self.current
    }

    /// Each rank calls the epoch at `now` plus its skew: its start (`titus_core::start`)
    /// then runs over the simulated fabric like any other operation. A rank given one key
    /// twice fails the run, as it fails the runtime's epoch.
    fn start_epoch(&mut self, now: u64) -> Result<(), Violation> {
        if self.current.len() != self.nodes.len() {
            return Err(Violation(format!(
                "epoch {}: {} task lists for {} ranks",
                self.epoch + 1,
                self.current.len(),
                self.nodes.len()
            )));
        }
        for r in 0..self.nodes.len() {
            let keys: Vec<u64> = self.current[r].iter().map(|t| t.key).collect();
            CostHistory::check_keys(&keys)
                .map_err(|e| Violation(format!("epoch {}, rank {r}: {e}", self.epoch + 1)))?;
            self.keys[r] = keys;
        }
        if self.job.check_start {
            self.reference = Some(self.whole_job_plan());
        }
        for r in 0..self.nodes.len() as u32 {
            let skew = match self.job.start_skew_ns {
                0 => 0,
                s => self.rng.below(s + 1),
            };
            // The rank calls the epoch once its last epoch's history is recorded, and
            // sends its first message once its input is built.
            let i = r as usize;
            let call = now + skew + std::mem::take(&mut self.history_owed[i]);
            self.began[i] = call;
            let input = StartCpu::of(self.job.start_cpu.input_ns, self.keys[i].len());
            self.at(call + input, Ev::Start { node: r });
        }
        Ok(())
    }

    /// The whole job's plan from every rank's profile and prediction (the reference).
    fn whole_job_plan(&mut self) -> WholeJobPlan {
        let keys = std::mem::take(&mut self.keys);
        let job = WholeJob::of(&keys, &self.history, &mut self.reference_front);
        self.keys = keys;
        let front = &self.reference_front;
        WholeJobPlan {
            movement: job.movement,
            loads: front.plan_loads(&job.profiles, &job.own, &job.alone),
            string: front.string_loads(&job.profiles, &job.own, &job.classes, &job.alone),
        }
    }

    /// Rank `n`'s start ended at `now` with `outcome`: its tasks start from the
    /// prediction the outcome completes.
    fn begin_epoch(
        &mut self,
        n: u32,
        now: u64,
        outcome: Result<titus_core::start::StartOutcome, titus_core::CoreError>,
    ) -> Result<(), Violation> {
        let i = n as usize;
        let own = self.own[i].take().expect("a start under way");
        // A failed start failed the node: `after` reports it.
        let Ok(out) = outcome else {
            return Ok(());
        };
        out.runs(&own, false)
            .map_err(|e| Violation(format!("epoch {}, rank {n}: {e}", self.epoch + 1)))?;
        let tasks: Vec<titus_core::NewTask> = self.tasks()[i]
            .iter()
            .map(|t| titus_core::NewTask {
                kind: t.kind,
                payload: t.payload.clone(),
                priority: t.priority,
                cost_hint_ns: t.hint_ns,
            })
            .collect();
        let prediction = out.prediction(&self.keys[i], own, &self.history[i]);
        self.nodes[i]
            .start_epoch_predicted(Time(now), tasks, prediction.as_ref(), &self.mems[i])
            .map_err(|e| Violation(format!("rank {n}: start: {e}")))?;
        self.per[i].start = Some(now);
        self.per[i].home_seen = self.nodes[i].results_home().0;
        self.start_figures[i] = (now - self.began[i], out.figures);
        if let Some(r) = &self.reference {
            // The start's plan is the all-gather's wherever the root found the whole-job
            // front's movement (its summary may miss a shift under two sample steps).
            if out.movement == r.movement {
                let (load, string) = (&r.loads[i], r.string.rank_string(n));
                let string_used = out.string.is_some();
                if out.load != *load || (string_used && out.string.as_ref() != Some(&string)) {
                    return Err(Violation(format!(
                        "epoch {}, rank {n}: the start planned load {:?} and {:?}, the whole job's plan {load:?} and {string:?}",
                        self.epoch + 1,
                        out.load,
                        out.string
                    )));
                }
            }
        }
        Ok(())
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        let rank = match &ev {
            Ev::Arrive { op, .. } => target(op),
            ev => ev.node().expect("every other event is a rank's"),
        };
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(ev);
                i
            }
            None => {
                assert!(self.slab.len() < PARKED as usize, "2^30 events waiting");
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        self.queue.push(t, self.seq, slot, rank);
    }

    /// The next event in time order.
    fn pop(&mut self) -> Option<(u64, u64, u32)> {
        self.queue.pop()
    }

    /// The ranks (up to 8) that did not stop after another's failure.
    fn unfailed(&self) -> String {
        let left: Vec<String> = (0..self.nodes.len())
            .filter(|&r| !self.failed[r])
            .map(|r| r.to_string())
            .collect();
        let more = if left.len() > 8 { ", …" } else { "" };
        format!("rank {}{more}", left[..left.len().min(8)].join(", "))
    }

    /// The state of the first rank not done, for a failed run's message.
    fn stuck(&self) -> String {
        let first = self
            .per
            .iter()
            .position(|p| p.end.is_none())
            .map(|r| self.nodes[r].debug_summary())
            .unwrap_or_default();
        // Where the work waits: ranks with queued tasks, and their resources' state.
        let holding: Vec<String> = (0..self.nodes.len())
            .filter(|&r| self.nodes[r].queued() > 0)
            .take(8)
            .map(|r| {
                let room = self.res(r).map_or(String::new(), |t| {
                    format!(", room for kinds {:?}", t.room_kinds(0))
                });
                format!(
                    "rank {r}: {} queued, {} idle workers{room} [{}]",
                    self.nodes[r].queued(),
                    self.per[r].idle,
                    self.nodes[r].debug_summary()
                )
            })
            .collect();
        // Work and results the workers hold (their grains).
        let grains: Vec<String> = (0..self.nodes.len())
            .filter(|&r| !self.per[r].grain.is_empty() || !self.per[r].unreported.is_empty())
            .take(8)
            .map(|r| {
                format!(
                    "rank {r}: {} tasks in grains, {} results held, {} idle workers",
                    self.per[r].grain.len(),
                    self.per[r].unreported.len(),
                    self.per[r].idle
                )
            })
            .collect();
        format!(
            "{first}; holding work: [{}]; in workers' grains: [{}]",
            holding.join("; "),
            grains.join("; ")
        )
    }

    /// Makes rank `node`'s marker stand for its earliest waiting event at time `t`.
    fn mark(&mut self, node: u32, t: u64) {
        let Some(&Reverse((seq, _))) = self.per[node as usize].deferred.peek() else {
            return;
        };
        if self.per[node as usize].wake != Some((t, seq)) {
            self.per[node as usize].wake = Some((t, seq));
            self.queue.push(t, seq, MARKER | node, node);
        }
    }

    /// How many connections rank `r` holds to `peers`, and their bytes.
    fn held(&self, r: usize, peers: impl Iterator<Item = u32>) -> (u32, f64) {
        peers.fold((0, 0.0), |(n, bytes), p| {
            (
                n + 1,
                bytes + self.model(r as u32, p, false).connection_bytes,
            )
        })
    }

    /// Rank `i`'s resource table, if it has one.
    fn res(&self, i: usize) -> Option<&Resources> {
        self.res.get(i).and_then(Option::as_ref)
    }

    /// [`Sim::res`], to change.
    fn res_mut(&mut self, i: usize) -> Option<&mut Resources> {
        self.res.get_mut(i).and_then(Option::as_mut)
    }

    /// When rank `node`'s progress thread can handle an event that is due at `t`: once
    /// it is free, and after a stall (a fault) that covers `t`.
    fn ready(&self, node: u32, t: u64, stall: Option<(u32, u64, u64)>) -> u64 {
        let free = self.per[node as usize].cpu_free.max(t);
        match stall {
            Some((r, from, len)) if r == node && t >= from && t < from + len => {
                free.max(from + len)
            }
            _ => free,
        }
    }

    /// Loads what handling a later event will need first (its rank's state, the event),
    /// so that those cache misses overlap with this event's work instead of following it.
    fn touch(&self, slot: u32, rank: u32) {
        let r = rank as usize;
        let p = &self.per[r];
        std::hint::black_box((
            p.cpu_free,
            p.wake,
            p.timer_at,
            p.grain.len(),
            p.unreported.len(),
        ));
        std::hint::black_box(self.mems[r].touch());
        std::hint::black_box(self.nodes[r].touch());
        if slot & MARKER == 0 {
            std::hint::black_box(self.slab[(slot & !PARKED) as usize].is_some());
        }
    }

    fn take(&mut self, slot: u32) -> Ev {
        self.free.push(slot);
        self.slab[slot as usize].take().expect("a queued event")
    }

    /// The model between `from` and `peer`: the node model between ranks of one node
    /// (a hybrid job), except for atomics, which the hybrid sends through the fabric.
    fn model(&self, from: u32, peer: u32, atomic: bool) -> &Model {
        self.job.model.between(from, peer, atomic)
    }

    fn latency(&mut self, from: u32, peer: u32, atomic: bool) -> u64 {
        let j = if self.job.faults.jitter > 0.0 {
            1.0 + self.rng.unit() * self.job.faults.jitter
        } else {
            1.0
        };
        (self.model(from, peer, atomic).latency_ns * j) as u64
    }

    fn transfer(&self, from: u32, peer: u32, bytes: u64, tasks_segment: bool) -> u64 {
        if self.own_whole(from, peer) {
            return 0;
        }
        let b = if tasks_segment {
            bytes as f64 * self.job.task_bytes_scale
        } else {
            bytes as f64
        };
        (b / self.model(from, peer, false).bandwidth * 1e9) as u64
    }

    /// Records that `a` and `b` exchange an operation (complete graph); true the first
    /// time.
    fn contact(&mut self, a: u32, b: u32) -> bool {
        let Err(i) = self.contacts[a as usize].binary_search(&b) else {
            return false;
        };
        self.contacts[a as usize].insert(i, b);
        if let Err(j) = self.contacts[b as usize].binary_search(&a) {
            self.contacts[b as usize].insert(j, a);
        }
        true
    }

    /// Issues `op` from `from` at `t`.
    fn issue(&mut self, from: u32, t: u64, token: Token, op: Op) -> Result<(), Violation> {
        self.activity += 1;
        let peer = target(&op);
        let mut t = t;
        if peer != from {
            let lazy = match &mut self.peers {
                Some(peers) => {
                    let checked = &mut self.per[from as usize].peer_checked;
                    let known = *checked == peer || peers.mark(from, peer);
                    if known {
                        *checked = peer;
                    } else if !on_start_segment(&op) {
                        return Err(Violation(format!(
                            "rank {from} operated on rank {peer}, which is not among its fabric peers (the runtime has no address for it): {op:?}"
                        )));
                    }
                    // The start's searches read where their data leads: first contact
                    // connects.
                    !known
                }
                // Over the complete graph, the first operation between two ranks connects.
                None => true,
            };
            if lazy {
                {
                    if self.contact(from, peer) {
                        let c = self.model(from, peer, false).connect_ns as u64;
                        t += c;
                        self.connect_ns[from as usize] += c;
                        self.connect_ns[peer as usize] += c;
                    }
                }
            }
            t += self.latency(
                from,
                peer,
                matches!(op, Op::Cas { .. } | Op::FetchAdd { .. }),
            );
        } else {
            // CPU atomics and copies on this rank's own memory, or the node model's
            // measured time through the provider ([`Self::own_whole`]).
            t += self
                .job
                .model
                .cpu
                .as_ref()
                .map_or(model::OWN_OP_NS, |c| c.own_op_ns) as u64;
        }
        if let Op::Write { remote, pieces, .. } = &op {
            let bytes: u64 = pieces.iter().map(|p| p.1).sum();
            t += self.transfer(from, peer, bytes, remote.segment == seg::TASKS);
        }
        self.at(t, Ev::Arrive { from, token, op });
        Ok(())
    }

    fn arrive(&mut self, now: u64, from: u32, token: Token, op: Op) -> Result<(), Violation> {
        let peer = target(&op);
        if self.job.faults.exit_after_end
            && self.epoch == self.job.later_epochs.len()
            && peer != from
            && self.per[peer as usize].end.is_some()
        {
            // The target's process exited: nothing happens there, the issuer learns it
            // after a round trip.
            let d = self.back(from, peer, false);
            self.at(
                now + d,
                Ev::Failed {
                    node: from,
                    token,
                    peer,
                },
            );
            return Ok(());
        }
        // The target's progress serves it — an operation on a rank's own memory too: over
        // libfabric it goes through the provider. (The calibration, on two ranks, cannot
        // tell those apart: it counts each of a rank's operations as the other's to serve.)
        self.op_cpu(peer, |c| c.op_serve_ns);
        let late = self.busy_op_ns(
            from,
            peer,
            matches!(op, Op::Cas { .. } | Op::FetchAdd { .. }),
        );
        match op {
            Op::Read {
                peer,
                remote,
                local,
                len,
            } => {
                if self.lock_check && peer != from && remote.segment == seg::TASKS {
                    let mut w = [0u8; 8];
                    self.mems[peer as usize].copy_out(layout_loc(tasks::LOCK), &mut w);
                    if remote.offset >= tasks::COUNT
                        && u64::from_le_bytes(w) != layout::lock::held_by(from)
                    {
                        return Err(Violation(format!(
                            "rank {from} read rank {peer}'s shared set at offset {} without holding its lock (word {})",
                            remote.offset,
                            u64::from_le_bytes(w)
                        )));
                    }
                }
                let mut buf = vec![0u8; len as usize];
                self.mems[peer as usize].copy_out(remote, &mut buf);
                self.mems[from as usize].copy_in(local, &buf);
                let d = self.back(from, peer, false)
                    + self.transfer(from, peer, len, remote.segment == seg::TASKS);
                self.complete(now + late + d, from, token, 0);
            }
            Op::Write {
                peer,
                remote,
                pieces,
                signal,
            } => {
                let mut at = remote.offset;
                for (l, len) in pieces {
                    let mut buf = vec![0u8; len as usize];
                    self.mems[from as usize].copy_out(l, &mut buf);
                    self.mems[peer as usize]
                        .copy_in(titus_core::Loc::new(remote.segment, at), &buf);
                    at += len;
                }
                if remote.segment == seg::START
                    && signal.is_some()
                    && self.job.faults.corrupt_start == Some(from)
                    && !std::mem::replace(&mut self.corrupted, true)
                {
                    // The message lands with another format version (its header's byte 2).
                    let version = titus_core::Loc::new(seg::START, remote.offset + 2);
                    let mut v = [0u8];
                    self.mems[peer as usize].copy_out(version, &mut v);
                    self.mems[peer as usize].copy_in(version, &[v[0].wrapping_add(1)]);
                }
                if let Some(value) = signal {
                    let s = self.model(from, peer, false).signal_ns as u64;
                    self.at(
                        now + s,
                        Ev::Signal {
                            node: peer,
                            from,
                            value,
                        },
                    );
                }
                let d = self.back(from, peer, false);
                self.complete(now + late + d, from, token, 0);
            }
            Op::Cas {
                peer,
                remote,
                expected,
                desired,
            } => {
                let old = self.mems[peer as usize].word(remote);
                if old == expected {
                    self.mems[peer as usize].copy_in(remote, &desired.to_le_bytes());
                }
                self.atomic_done(now, late, from, peer, token, old);
            }
            Op::FetchAdd {
                peer,
                remote,
                delta,
            } => {
                let old = self.mems[peer as usize].word(remote);
                self.mems[peer as usize].copy_in(remote, &old.wrapping_add(delta).to_le_bytes());
                self.atomic_done(now, late, from, peer, token, old);
            }
        }
        Ok(())
    }

    /// An operation's CPU on `rank`'s progress thread (the node model's `op_serve_ns` or
    /// `op_issue_ns`), owed by its next task while its workers all run tasks (their cores
    /// are taken: the runtime binds a rank's threads to its cores).
    fn op_cpu(&mut self, rank: u32, ns: fn(&model::Cpu) -> f64) {
        let Some(ns) = self.job.model.cpu.as_ref().map(|c| ns(c) as u64) else {
            return;
        };
        let p = &mut self.per[rank as usize];
        p.op_cpu += ns;
        if p.idle == 0 {
            p.op_debt += ns;
        }
    }

    /// The node model's CPU for the bytes rank `i`'s node moved through its segments since
    /// the last call ([`model::Cpu::byte_ns`]): while its workers all run tasks, owed by
    /// its next task (the progress thread takes it from one) — or, where the workers serve
    /// the node ([`Model::workers_serve`]), spent by the next task's worker before that
    /// task starts —; else returned: the thread that drives the node does it before the
    /// node's next commands and tasks start.
    fn byte_cpu(&mut self, i: usize) -> u64 {
        let (slots, other) = self.mems[i].take_moved();
        let Some(c) = self.job.model.cpu.as_ref() else {
            return 0;
        };
        let bytes = slots as f64 * self.job.task_bytes_scale + other as f64;
        let ns = (bytes * c.byte_ns) as u64;
        let p = &mut self.per[i];
        if p.idle > 0 {
            ns
        } else if self.job.model.workers_serve {
            p.serve_debt += ns;
            0
        } else {
            p.op_debt += ns;
            0
        }
    }

    /// Whether an operation from `from` on `peer` is on the issuer's own memory and the
    /// node model's measured [`model::Cpu::own_op_ns`], charged at issue, is its whole
    /// time: no atomic's service and no bytes' transfer on top.
    fn own_whole(&self, from: u32, peer: u32) -> bool {
        from == peer && self.job.model.cpu.is_some()
    }

    /// What an operation from `from` waits at `peer` beyond the fabric's cost, with the
    /// node model on: the [`model::Cpu::busy_op_ns`] of the fabric between them where
    /// `peer`'s workers all run tasks and its progress does not poll (a polled target's
    /// wait is [`Self::atomic_done`]'s).
    fn busy_op_ns(&self, from: u32, peer: u32, atomic: bool) -> u64 {
        let m = self.model(from, peer, atomic);
        match &m.cpu {
            Some(c)
                if self.job.model.cpu.is_some()
                    && peer != from
                    && !m.polled
                    && self.per[peer as usize].idle == 0 =>
            {
                c.busy_op_ns as u64
            }
            _ => 0,
        }
    }

    /// The time a completion takes back to the issuer: none on its own memory.
    fn back(&mut self, from: u32, peer: u32, atomic: bool) -> u64 {
        if peer == from {
            0
        } else {
            self.latency(from, peer, atomic)
        }
    }

    /// `node`'s operation `token` completes at `t` with `value`.
    fn complete(&mut self, t: u64, node: u32, token: Token, value: u64) {
        self.at(t, Ev::Complete { node, token, value });
    }

    /// An atomic's service at its target: one at a time, `atomic_ns` each (the measured
    /// cost, an idle target's progress naps included). On a polled fabric a target whose
    /// workers all run tasks (they serve its node between tasks while its progress thread
    /// takes the long nap: the runtime's driver) serves it in the first worker's poll at
    /// its task's end — or when that nap ends ([`titus_core::BUSY_NAP_NS`];
    /// [`titus_core::OPEN_OPS_WAIT_NS`] with operations of its own in flight; sooner at
    /// the rank's deadline) —, at the cost of handling an input; `late`
    /// ([`Self::busy_op_ns`]) delays its completion, not the unit. (The runtime's
    /// worker polls at a task's end only 20 µs after its last poll: tasks shorter than
    /// that may hold the atomic one task longer than here.)
    fn atomic_done(&mut self, now: u64, late: u64, from: u32, peer: u32, token: Token, value: u64) {
        let p = peer as usize;
        let busy_until = match self.task_ends.get(p) {
            Some(ends) if peer != from && self.per[p].idle == 0 => {
                // With operations of its own in flight its progress thread turns sooner.
                let nap = now
                    + if self.nodes[p].in_flight() > 0 {
                        titus_core::OPEN_OPS_WAIT_NS
                    } else {
                        titus_core::BUSY_NAP_NS
                    };
                let nap = self.nodes[p]
                    .poll_timeout()
                    .map_or(nap, |t| t.0.max(now).min(nap));
                ends.iter().map(|e| e.0).min().map(|end| end.min(nap))
            }
            _ => None,
        };
        let start = now.max(self.per[p].atomic_free);
        let served = match busy_until {
            Some(end) => start.max(end) + self.job.model.event_ns as u64,
            None if self.own_whole(from, peer) => start,
            None => start + self.job.model.atomic_ns as u64,
        };
        self.per[p].atomic_free = served;
        let d = self.back(from, peer, true);
        self.complete(served + late + d, from, token, value);
    }

    /// After `node` handled an input at `now`: workers, commands, timer, checks.
    fn after(&mut self, n: u32, now: u64) -> Result<(), Violation> {
        let i = n as usize;
        if self.own[i].is_some()
            && let Some(outcome) = self.nodes[i].poll_start()
        {
            match self.plan_keys.is_some() {
                true => {
                    let own = self.own[i].take().expect("checked");
                    self.planned[i] = Some((outcome, own));
                    self.done_count += 1;
                }
                false => {
                    // Its planning CPU first: the epoch begins after it.
                    let plan = StartCpu::of(self.job.start_cpu.plan_ns, self.keys[i].len());
                    match outcome {
                        Ok(out) if plan > 0 => {
                            self.beginning[i] = Some(out);
                            self.at(now + plan, Ev::Begin { node: n });
                        }
                        outcome => self.begin_epoch(n, now, outcome)?,
                    }
                }
            }
        }
        // The bytes the handler moved through the rank's segments: the thread that drove
        // it did that first.
        let lag = self.byte_cpu(i);
        // Idle workers take tasks (a grain from the node when their rank's grains are used
        // up, as the runtime's workers do); on a rank with resources, every resource with
        // room does, one task at a time (the runtime's workers and its resource thread),
        // and a task none of its capable resources has room for waits.
        loop {
            let room = match self.res(i) {
                None => self.per[i].idle > 0,
                Some(t) => t.any_room(),
            };
            if !room {
                break;
            }
            // `local`: the next task of the worker's grain, taken from its own deque (the
            // runtime starts its clock at the last task's end: no time between them);
            // `took`: the tasks of the take from the node that gave it (1 where none).
            let mut took = 1;
            let (task, local) = match self.per[i].held.take() {
                Some(t) => (t, false),
                None if self.res(i).is_none() => {
                    match self.per[i].grain.pop_front() {
                        Some(t) => (t, true),
                        None => {
                            // What the workers hold is reported with their take from the node.
                            self.flush(i, now);
                            let mut got = self.nodes[i]
                                .take_grain(
                                    Time(now),
                                    1,
                                    titus_core::GRAIN_TASKS_MAX,
                                    self.job.grain_ns(),
                                    &self.mems[i],
                                )
                                .into_iter();
                            let Some(first) = got.next() else {
                                break;
                            };
                            took = 1 + got.len();
                            self.per[i].grain.extend(got);
                            (first, false)
                        }
                    }
                }
                None => {
                    // A task some resource with room can run; the others stay queued (for
                    // thieves that can run them).
                    let set = self.res(i).and_then(|t| t.room_kinds(0));
                    let got = self.nodes[i].take_tasks_for(Time(now), 1, &set, &self.mems[i]);
                    let Some(task) = got.into_iter().next() else {
                        break;
                    };
                    (task, false)
                }
            };
            if let Some(t) = self.res(i)
                && t.select(task.kind).is_none()
            {
                if !t.can_run(task.kind) {
                    return Err(Violation(format!(
                        "rank {n}: task kind {} has no variant on its resources",
                        task.kind
                    )));
                }
                self.per[i].held = Some(task);
                break;
            }
            let (o, x) = (task.owner as usize, task.index as usize);
            let count = self
                .runs
                .get_mut(o)
                .and_then(|r| r.get_mut(x))
                .ok_or_else(|| {
                    Violation(format!(
                        "rank {n} got task {x} of rank {o}, which does not exist"
                    ))
                })?;
            *count += 1;
            self.activity += 1;
            if *count > 1 {
                return Err(Violation(format!(
                    "task {x} of rank {o} ran twice (second time on rank {n})"
                )));
            }
            let drawn = self.tasks()[o][x].cost_ns;
            let mut result = Ok((self.job.result)(&task.payload));
            // A rank with resources dispatches through the core's policy (the CPU workers,
            // resource 0, have room: a worker is idle); one without runs it on the worker.
            let (res, f) = match self.res_mut(i) {
                None => (0, self.slow[i]),
                Some(table) => {
                    let id = table.dispatch_task(task.kind).expect("selected above");
                    let speed = table.specs()[id].speed(task.kind).unwrap_or(1.0);
                    (id, if id == 0 { self.slow[i] } else { 1.0 / speed })
                }
            };
            // The node's cores: a CPU task runs slower while its node's other cores run
            // tasks or its ranks' progress threads want them; a worker that did not just
            // finish a task sleeps and wakes first.
            let (f, delay) = match (&self.job.model.cpu, res) {
                (Some(cpu), 0) => {
                    let k = i / self.cpu_ranks as usize;
                    self.node_busy[k] += 1;
                    let on_node = (self.nodes.len() - k * self.cpu_ranks as usize)
                        .min(self.cpu_ranks as usize) as u32;
                    let awake = self.per[i].freed.0 == now && self.per[i].freed.1 > 0;
                    if awake {
                        self.per[i].freed.1 -= 1;
                    }
                    // The worker's own time around the task delays its end, not its cost;
                    // it is CPU work like the task, so time-sharing stretches it alike.
                    let wake = if awake { 0 } else { cpu.wake_ns as u64 };
                    let shared = cpu.factor(self.node_busy[k], on_node);
                    // A take from the node: the worker's time around a task (another rank's
                    // costs more: its result goes home), and its grain's other tasks' share
                    // of it; a task of its grain: none.
                    let own = match (local, task.owner != n) {
                        (true, _) => 0.0,
                        (false, foreign) => {
                            cpu.task_overhead_ns
                                + if foreign { cpu.foreign_task_ns } else { 0.0 }
                                + if self.job.core.balances() {
                                    cpu.balanced_take_ns
                                } else {
                                    0.0
                                }
                                + (took - 1) as f64 * cpu.grain_task_ns
                        }
                    };
                    // (What its handlers moved while it ran its last task, where workers
                    // serve the node: done before this one.)
                    let served = std::mem::take(&mut self.per[i].serve_debt);
                    let around = lag + served + (own * shared) as u64;
                    if awake {
                        let b = &mut self.per[i].between;
                        *b = (b.0 + around, b.1 + 1);
                    }
                    (f * shared, wake + around)
                }
                _ => (f, 0),
            };
            // What its progress thread took from the core while every worker ran tasks —
            // at most as much again as the task (the scheduler shares a core between
            // the two: what the progress thread wants beyond that waits, unmodelled).
            // (Below the longest delay [`time::check`] let the job make: a backstop.)
            let cost = ((drawn as f64 * f) as u64).min(time::DELAY_MAX_NS);
            let owed = if res == 0 {
                std::mem::take(&mut self.per[i].op_debt).min(cost)
            } else {
                0
            };
            let cost = cost + owed;
            self.ran_for[o][x] = cost;
            if let Some((fr, fres, nth)) = self.job.resources.fail
                && fr == n
                && fres == res
            {
                self.fail_count += 1;
                if self.fail_count == nth {
                    result = Err(format!(
                        "resource {res} of rank {n} failed its submission {nth} (injected)"
                    ));
                }
            }
            if res == 0 {
                self.per[i].idle -= 1;
                self.per[i].busy += cost;
            } else {
                self.accel_busy[i] += cost;
            }
            if self.res(i).is_some() {
                *self.busy_by_owner[i].entry((res, task.owner)).or_insert(0) += cost;
                if self.job.resources.log_dispatches {
                    let t0 = self.per[i].start.unwrap_or(now);
                    self.dispatches[i].push((now.saturating_sub(t0), res, task.owner, cost));
                }
            }
            if res == 0
                && let Some(ends) = self.task_ends.get_mut(i)
            {
                ends.push((now + delay + cost, task.owner, task.index));
                debug_assert!(ends.len() <= self.job.workers, "rank {n}: {ends:?}");
            }
            self.at(
                now + delay + cost,
                Ev::TaskDone {
                    node: n,
                    owner: task.owner,
                    index: task.index,
                    kind: task.kind,
                    result,
                    cost,
                    res,
                },
            );
        }
        if self.per[i].types_mine != 0 {
            // Which of its types have an idle instance: the node asks for their work when
            // its queue holds none they can run.
            let idle = match self.res(i) {
                None if self.per[i].idle > 0 => self.per[i].types_mine,
                None => 0,
                Some(t) => t.room_types(&self.types_of[i], 0),
            };
            self.nodes[i].set_resource_types(
                Time(now),
                self.per[i].types_mine,
                idle,
                &self.mems[i],
            );
        }
        let lag = lag + self.byte_cpu(i);
        let issue_at = now + lag + self.job.model.event_ns as u64;
        while let Some(c) = self.nodes[i].poll_command() {
            self.issue(n, issue_at, c.token, c.op)?;
        }
        self.per[i].cpu_free = issue_at;
        if let Some(d) = self.nodes[i].poll_timeout() {
            let d = d.0.max(now);
            if self.per[i].timer_at.is_none_or(|t| d < t) {
                self.per[i].timer_at = Some(d);
                self.at(d, Ev::Timer { node: n });
            }
        }
        if let Some(e) = self.nodes[i].error() {
            if !self.failed[i] {
                self.failed[i] = true;
                self.failed_count += 1;
                match &self.first_failure {
                    None => {
                        self.first_failure = Some((n, e.code(), format!("rank {n} failed: {e}")))
                    }
                    // Every other rank stops with the first failure, passed on by ABORT:
                    // anything else is a second failure of its own.
                    Some((origin, code, first)) => {
                        let told = titus_core::CoreError::Aborted {
                            rank: *origin,
                            code: *code,
                        };
                        if *e != told {
                            return Err(Violation(format!(
                                "{first}; then rank {n} failed otherwise: {e}"
                            )));
                        }
                    }
                }
            }
            if self.failed_count == self.nodes.len() {
                // Its tail is read back by `failed_everywhere`.
                return Err(Violation(format!(
                    "{}; {FAILED_EVERYWHERE} by {:.3} ms ({} events, trace {:016x})",
                    self.first_failure.as_ref().map_or("", |f| f.2.as_str()),
                    now as f64 / 1e6,
                    self.events,
                    self.trace
                )));
            }
            return Ok(());
        }
        if self.per[i].start.is_none() {
            // Not in this epoch yet (a request of the next epoch's early starter, or one
            // left over from the last): nothing of the epoch to check.
            return Ok(());
        }
        let (home, _) = self.nodes[i].results_home();
        self.home_total += u64::from(home - self.per[i].home_seen);
        self.per[i].home_seen = home;
        if self.nodes[i].termination_detected() && self.home_total != self.own_total {
            return Err(Violation(format!(
                "rank {n} declared the end with {} of {} results home",
                self.home_total, self.own_total
            )));
        }
        if self.per[i].end.is_none() && self.nodes[i].is_done() {
            // As the runtime does: the epoch ends here now; later signals wait for the
            // next epoch.
            self.per[i].end = Some(now);
            self.done_count += 1;
            self.stats[i] = self.nodes[i].stats().clone();
            let out = self.nodes[i]
                .take_epoch_results()
                .map_err(|e| Violation(format!("rank {n}: {e}")))?;
            // The measured costs, as they came home, are the next epoch's predictions;
            // recording them delays the rank's next call.
            self.history[i].record(&self.keys[i], &out.costs_ns);
            self.history_owed[i] = StartCpu::of(self.job.start_cpu.history_ns, self.keys[i].len());
            self.results[i] = out.results;
            self.costs[i] = out.costs_ns;
        }
        Ok(())
    }

    fn handle(&mut self, now: u64, ev: Ev) -> Result<(), Violation> {
        let (kind, a, b) = match &ev {
            Ev::Start { node } => (1, *node as u64, 0),
            Ev::Begin { node } => (8, *node as u64, 0),
            Ev::Arrive { from, token, .. } => (2, *from as u64, token.0),
            Ev::Complete { node, token, value } => (3, *node as u64, token.0 ^ value),
            Ev::Failed { node, token, peer } => (7, *node as u64, token.0 ^ u64::from(*peer)),
            Ev::Signal { node, from, value } => (4, *node as u64, (*from as u64) << 32 ^ value),
            Ev::Timer { node } => (5, *node as u64, 0),
            Ev::TaskDone {
                node, owner, index, ..
            } => (6, *node as u64, (*owner as u64) << 32 | *index as u64),
        };
        self.trace = mix(mix(mix(self.trace, now), kind), mix(a, b));
        self.events += 1;
        match ev {
            Ev::Arrive { from, token, op } => return self.arrive(now, from, token, op),
            Ev::Start { node } => {
                let i = node as usize;
                if self.nodes[i].error().is_some() {
                    // Told of another rank's failure before it started: it stops with
                    // that error (the runtime's start returns it).
                    return self.after(node, now);
                }
                let (input, own) = match &self.plan_keys {
                    Some(keys) => titus_core::start::StartInput::for_repartition(
                        &self.nodes[i],
                        &keys[i],
                        &self.history[i],
                        true,
                        None,
                    ),
                    None => titus_core::start::StartInput::of(
                        &self.nodes[i],
                        &self.keys[i],
                        &self.history[i],
                        None,
                    ),
                };
                self.nodes[i]
                    .begin_start(Time(now), input, &self.mems[i])
                    .map_err(|e| Violation(format!("rank {node}: start: {e}")))?;
                self.own[i] = Some(own);
                self.after(node, now)?;
            }
            Ev::Begin { node } => {
                let i = node as usize;
                let out = self.beginning[i].take().expect("a start's outcome waits");
                // Told of another rank's failure while it planned: it stops with that
                // error, as the runtime's epoch does.
                if self.nodes[i].error().is_none() {
                    self.begin_epoch(node, now, Ok(out))?;
                } else {
                    self.own[i] = None;
                }
                self.after(node, now)?;
            }
            Ev::Complete { node, token, value } => {
                let i = node as usize;
                // The issuer's progress thread wakes for the completion.
                self.op_cpu(node, |c| c.op_issue_ns);
                self.nodes[i].handle_completion(Time(now), token, Ok(value), &self.mems[i]);
                self.after(node, now)?;
            }
            Ev::Failed { node, token, peer } => {
                let i = node as usize;
                let failure = titus_core::OpFailure {
                    peer_gone: true,
                    detail: format!("rank {peer}'s process exited"),
                };
                self.nodes[i].handle_completion(Time(now), token, Err(failure), &self.mems[i]);
                self.after(node, now)?;
            }
            Ev::Signal { node, from, value } => {
                let i = node as usize;
                self.nodes[i].handle_signal(Time(now), from, value, &self.mems[i]);
                self.after(node, now)?;
            }
            Ev::Timer { node } => {
                let i = node as usize;
                if self.per[i].timer_at != Some(now) {
                    return Ok(()); // Superseded.
                }
                self.per[i].timer_at = None;
                let before = self.activity;
                self.nodes[i].handle_timeout(Time(now), &self.mems[i]);
                self.after(node, now)?;
                // `after` set the timer again: at `now` when the deadline is already due.
                if self.activity == before && self.per[i].timer_at == Some(now) {
                    self.per[i].idle_wakes += 1;
                    if self.per[i].idle_wakes > SPIN_MAX {
                        return Err(Violation(format!(
                            "rank {node} spins: {} timers in a row did nothing and left its deadline at once",
                            self.per[i].idle_wakes
                        )));
                    }
                } else {
                    self.per[i].idle_wakes = 0;
                }
            }
            Ev::TaskDone {
                node,
                owner,
                index,
                kind,
                result,
                cost,
                res,
            } => {
                let i = node as usize;
                if let Some(table) = self.res_mut(i) {
                    table.complete(res);
                }
                if res == 0 {
                    self.per[i].idle += 1;
                    if let Some(ends) = self.task_ends.get_mut(i)
                        && let Some(k) = ends.iter().position(|e| (e.1, e.2) == (owner, index))
                    {
                        ends.swap_remove(k);
                    }
                    if self.job.model.cpu.is_some() {
                        self.node_busy[i / self.cpu_ranks as usize] -= 1;
                        self.per[i].freed = match self.per[i].freed {
                            (t, c) if t == now => (t, c + 1),
                            _ => (now, 1),
                        };
                    }
                }
                let task = (owner, index, kind);
                match self.per[i].grain.front() {
                    // More of the grains to run (no resources here): the result waits to
                    // be reported with the next take from the node — or before a dear
                    // task, or once the oldest held result is a grain old (the runtime's
                    // `report_and_take`).
                    Some(next) if res == 0 => {
                        let next_cost = next.cost_ns;
                        self.per[i].unreported.push((task, result, cost));
                        let since = *self.per[i].unreported_since.get_or_insert(now);
                        if titus_core::report_held_now(
                            next_cost,
                            self.per[i].unreported.len(),
                            now - since,
                            self.job.grain_ns(),
                        ) {
                            self.flush(i, now);
                        }
                    }
                    _ => {
                        self.flush(i, now);
                        self.nodes[i].task_done(Time(now), task, result, cost, &self.mems[i]);
                    }
                }
                self.after(node, now)?;
            }
        }
        Ok(())
    }
}

/// A result a worker holds: the task (owner, index, kind), its result, its cost (ns).
type Unreported = ((u32, u32, u16), Result<Vec<u8>, String>, u64);

impl Sim<'_> {
    /// Reports every result rank `i`'s workers hold.
    fn flush(&mut self, i: usize, now: u64) {
        self.per[i].unreported_since = None;
        for (task, result, cost) in std::mem::take(&mut self.per[i].unreported) {
            self.nodes[i].task_done(Time(now), task, result, cost, &self.mems[i]);
        }
    }

    /// Runs the epoch until every rank ended it; returns the time of its last event.
    fn run_epoch(&mut self, stall: Option<(u32, u64, u64)>) -> Result<u64, Violation> {
        let n = self.nodes.len();
        let mut last = 0;
        while self.done_count < n {
            let Some((t, seq, slot)) = self.pop() else {
                if let Some((_, _, first)) = &self.first_failure {
                    return Err(Violation(format!(
                        "{first}; but {} of {n} ranks never stopped: {}",
                        n - self.failed_count,
                        self.unfailed()
                    )));
                }
                let stuck = self.stuck();
                return Err(Violation(format!(
                    "the run stalled: nothing left to happen with {} of {n} ranks done; {stuck}",
                    self.done_count
                )));
            };
            if t > time::HORIZON_NS {
                return Err(Violation(format!(
                    "virtual time passed {} s ({} ns) with {} of {n} ranks done",
                    time::HORIZON_NS / 1_000_000_000,
                    time::HORIZON_NS,
                    self.done_count
                )));
            }
            last = t;
            if let Some((slot, rank)) = self.queue.ahead(queue::AHEAD - 1) {
                self.touch(slot, rank);
            }
            // A marker: the rank's earliest waiting event, in that event's place in the order
            // (the same order as if the event itself had been queued again).
            let (seq, slot, marked) = if slot & MARKER != 0 {
                let r = (slot & !MARKER) as usize;
                if self.per[r].wake != Some((t, seq)) {
                    continue; // Superseded by a marker for an earlier waiting event.
                }
                self.per[r].wake = None;
                let Reverse((seq, slot)) =
                    *self.per[r].deferred.peek().expect("a marker has events");
                (seq, slot, true)
            } else {
                (seq, slot, false)
            };
            let (slot, parked) = (slot & !PARKED, slot & PARKED != 0);
            let node = self.slab[slot as usize].as_ref().and_then(Ev::node);
            if let Some(node) = node {
                if parked {
                    self.per[node as usize].parked = false;
                }
                // The rank's progress thread is busy, or stalled by a fault: later.
                let ready = self.ready(node, t, stall);
                if ready > t {
                    if let Some(Ev::Timer { node }) = self.slab[slot as usize] {
                        // At most one live timer per rank: it waits in the queue itself.
                        if self.per[node as usize].timer_at == Some(t) {
                            self.per[node as usize].timer_at = Some(ready);
                        }
                        self.queue.push(ready, seq, slot, node);
                    } else if !marked
                        && !self.per[node as usize].parked
                        && self.per[node as usize].deferred.is_empty()
                    {
                        self.per[node as usize].parked = true;
                        self.queue.push(ready, seq, slot | PARKED, node);
                    } else {
                        if !marked {
                            self.per[node as usize].deferred.push(Reverse((seq, slot)));
                        }
                        self.mark(node, ready);
                    }
                    continue;
                }
                if marked {
                    self.per[node as usize].deferred.pop();
                }
            }
            let ev = self.take(slot);
            self.handle(t, ev)?;
            if let Some(node) = node
                && self.per[node as usize].wake.is_none()
            {
                // Its earliest waiting event, when the progress thread is free for it (a
                // marker at `t` would only come back to be queued again there).
                let ready = self.ready(node, t, stall);
                self.mark(node, ready);
            }
            if self.events > self.job.max_events {
                if let Some((_, _, first)) = &self.first_failure {
                    return Err(Violation(format!(
                        "{first}; but {} of {n} ranks had not stopped after {} events: {}",
                        n - self.failed_count,
                        self.events,
                        self.unfailed()
                    )));
                }
                let stuck = self.stuck();
                return Err(Violation(format!(
                    "no end after {} events ({} of {n} ranks done); {stuck}",
                    self.events, self.done_count
                )));
            }
        }
        Ok(last)
    }

    /// Checks the epoch that just ended (`epoch`, from 0): every task ran exactly once,
    /// every result is home and right, and nothing of it still travels but what the next
    /// epoch must answer with nothing (module doc). Returns each rank's outcome.
    fn finish_epoch(&mut self, epoch: usize) -> Result<Vec<RankOutcome>, Violation> {
        let tasks = std::mem::take(&mut self.current);
        let out = self.check_epoch(epoch, &tasks);
        self.current = tasks;
        out
    }

    fn check_epoch(
        &mut self,
        epoch: usize,
        tasks: &[Vec<SimTask>],
    ) -> Result<Vec<RankOutcome>, Violation> {
        let n = self.nodes.len();
        for (o, r) in self.runs.iter().enumerate() {
            if let Some(x) = r.iter().position(|&c| c != 1) {
                return Err(Violation(format!(
                    "task {x} of rank {o} ran {} times",
                    r[x]
                )));
            }
        }
        let mut out = Vec::with_capacity(n);
        for (r, tasks) in tasks.iter().enumerate() {
            let stats = std::mem::take(&mut self.stats[r]);
            let results = std::mem::take(&mut self.results[r]);
            let costs_ns = std::mem::take(&mut self.costs[r]);
            if costs_ns.len() != tasks.len() {
                return Err(Violation(format!(
                    "rank {r} got {} costs for {} tasks",
                    costs_ns.len(),
                    tasks.len()
                )));
            }
            for (x, &c) in costs_ns.iter().enumerate() {
                // The cost that came home is the one the task ran for where it ran.
                let ran = self.ran_for[r][x];
                if c != ran {
                    return Err(Violation(format!(
                        "task {x} of rank {r} came home with cost {c} ns, ran for {ran} ns \
                         (drawn {} ns)",
                        tasks[x].cost_ns
                    )));
                }
            }
            if results.len() != tasks.len() {
                return Err(Violation(format!(
                    "rank {r} got {} results for {} tasks",
                    results.len(),
                    tasks.len()
                )));
            }
            for (x, res) in results.iter().enumerate() {
                if *res != (self.job.result)(&tasks[x].payload) {
                    return Err(Violation(format!("task {x} of rank {r} came home wrong")));
                }
            }
            let max_hops = stats.result_hops.len().saturating_sub(1);
            if max_hops > n {
                return Err(Violation(format!(
                    "a result of rank {r} took {max_hops} hops in a job of {n}"
                )));
            }
            // Connections held (and their bytes), ranks exchanged operations with.
            let ((connections, connection_bytes), contacts) = match &self.peers {
                Some(p) => (self.held(r, p.of(r as u32)), p.used(r as u32)),
                None => (
                    self.held(r, self.contacts[r].iter().copied()),
                    self.contacts[r].len() as u32,
                ),
            };
            out.push(RankOutcome {
                stats,
                busy_ns: self.per[r].busy,
                op_cpu_ns: self.per[r].op_cpu,
                between: self.per[r].between,
                session_ns: self.per[r].end.unwrap_or(0) - self.began[r],
                start_ns: self.start_figures[r].0,
                start: self.start_figures[r].1,
                results,
                costs_ns,
                peers: contacts,
                connections,
                connect_ns: self.connect_ns[r],
                connection_bytes,
                resources: self.res(r).map(Resources::counts).unwrap_or_default(),
                accel_busy_ns: self.accel_busy[r],
                busy_by_owner: std::mem::take(&mut self.busy_by_owner[r]),
                dispatches: std::mem::take(&mut self.dispatches[r]),
            });
            if let Some(t) = self.res_mut(r) {
                t.reset_counts();
            }
        }
        for ev in self.slab.iter().flatten() {
            let leftover = match ev {
                Ev::Timer { .. } => true,
                // Requests, load reports, refill hints and advertisement's WAIT and ADVERT
                // may outlive the epoch (they are dropped as stale in the next one), and so
                // may an empty answer.
                Ev::Signal { value, from, .. } => matches!(
                    Signal::unpack(*value, *from),
                    Ok(Signal::Request { .. }
                        | Signal::Load { .. }
                        | Signal::Forward { .. }
                        | Signal::Refill
                        | Signal::Wait { .. }
                        | Signal::Advert { .. }
                        | Signal::Reply { tasks: 0, .. })
                ),
                _ => false,
            };
            if !leftover {
                return Err(Violation(format!(
                    "epoch {}: {ev:?} still in flight after every rank ended it",
                    epoch + 1
                )));
            }
        }
        Ok(out)
    }

    /// Makes ready for the next epoch (every rank ended this one): its tasks are the job's
    /// unless the driver gave others (`tasks`).
    fn next_epoch(&mut self, tasks: Option<Vec<Vec<SimTask>>>) {
        self.epoch += 1;
        self.current = match tasks {
            Some(t) => Cow::Owned(t),
            None => Cow::Borrowed(&self.job.later_epochs[self.epoch - 1]),
        };
        let tasks = &self.current;
        self.runs = tasks.iter().map(|t| vec![0; t.len()]).collect();
        self.ran_for = tasks.iter().map(|t| vec![0; t.len()]).collect();
        self.own_total = tasks.iter().map(|t| t.len() as u64).sum();
        self.home_total = 0;
        self.done_count = 0;
        self.per.iter_mut().for_each(|p| p.start = None);
        self.per.iter_mut().for_each(|p| p.end = None);
        self.per.iter_mut().for_each(|p| {
            p.busy = 0;
            p.op_cpu = 0;
            p.op_debt = 0;
            p.serve_debt = 0;
            p.between = (0, 0);
        });
        self.accel_busy.iter_mut().for_each(|b| *b = 0);
        self.busy_by_owner.iter_mut().for_each(BTreeMap::clear);
        self.dispatches.iter_mut().for_each(Vec::clear);
        // Timers of the last epoch are void (the nodes arm new ones).
        self.per.iter_mut().for_each(|p| p.timer_at = None);
    }
}

/// The whole job's plan of an epoch's start, as the runtime computed it from an all-gather
/// of every rank's record: the reference [`Job::check_start`] holds each rank's start to.
#[derive(Debug)]
struct WholeJobPlan {
    movement: titus_core::Movement,
    loads: Vec<Option<u64>>,
    string: titus_core::StringLoads,
}

/// Whether `op` reads or writes a START segment (the epoch start's, `titus_core::start`).
fn on_start_segment(op: &Op) -> bool {
    match op {
        Op::Read { remote, .. } | Op::Write { remote, .. } => remote.segment == seg::START,
        _ => false,
    }
}

fn layout_loc(offset: u64) -> titus_core::Loc {
    titus_core::Loc::new(seg::TASKS, offset)
}

/// A rank's repartition start's outcome, with its own prediction.
type PlanOutcome = (
    Result<titus_core::start::StartOutcome, titus_core::CoreError>,
    titus_core::start::OwnPrediction,
);

/// What the driver of a time-stepping job sees between two epochs of [`simulate_with`],
/// as an application between two of its runtime's epochs: which epoch ended, and every
/// rank's repartition plan from the costs measured so far.
pub struct Between<'s> {
    /// The epoch that just ended (0: the first).
    pub epoch: usize,
    sim: std::cell::RefCell<&'s mut dyn RepartitionStart>,
}

impl std::fmt::Debug for Between<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Between")
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// What [`Between`] drives: the simulated job between two epochs.
trait RepartitionStart {
    fn repartition_plan(&mut self, keys: &[Vec<u64>]) -> Result<Vec<Vec<Move>>, String>;
}

impl Between<'_> {
    /// Every rank's repartition plan (RankDLB's step 4), as each rank's
    /// `Runtime::repartition_plan(&keys[r])` gives it: every rank runs a repartition
    /// start (`titus_core::start`) over the simulated fabric, charged in virtual time
    /// before the next epoch, and plans from its place in the string as the job's
    /// `repartition_plan` says. `keys[r]`: the tasks rank r owns, in string order. A key
    /// given twice, or a list per rank missing, fails naming why.
    pub fn repartition_plan(&self, keys: &[Vec<u64>]) -> Result<Vec<Vec<Move>>, String> {
        self.sim.borrow_mut().repartition_plan(keys)
    }
}

impl RepartitionStart for Sim<'_> {
    fn repartition_plan(&mut self, keys: &[Vec<u64>]) -> Result<Vec<Vec<Move>>, String> {
        let n = self.nodes.len();
        if keys.len() != n {
            return Err(format!(
                "{} key lists for a repartition plan of {n} ranks",
                keys.len()
            ));
        }
        let reference = self.job.check_start.then(|| self.whole_job_positions(keys));
        self.plan_keys = Some(keys.to_vec());
        self.done_count = 0;
        for r in 0..n as u32 {
            let skew = match self.job.start_skew_ns {
                0 => 0,
                s => self.rng.below(s + 1),
            };
            self.began[r as usize] = self.clock + skew;
            self.at(self.clock + skew, Ev::Start { node: r });
        }
        let ended = self.run_epoch(self.job.faults.stall);
        self.plan_keys = None;
        self.clock = self.clock.max(ended.map_err(|e| e.0)?);
        let mut plans = Vec::with_capacity(n);
        for (r, k) in keys.iter().enumerate() {
            let (outcome, own) = self.planned[r].take().expect("every rank's start ended");
            let out = outcome.map_err(|e| format!("rank {r}: {e}"))?;
            if let Some((movement, positions)) = &reference
                && out.movement == *movement
            {
                if out.position != positions[r] {
                    return Err(format!(
                        "rank {r}: the repartition start placed it at {:?}, the whole job's plan at {:?}",
                        out.position, positions[r]
                    ));
                }
                self.plans_checked += 1;
            }
            let plan = out
                .repartition_plan(k, own, &self.history[r], self.job.core.repartition_plan)
                .map_err(|e| format!("rank {r}: {e}"))?;
            plans.push(plan);
        }
        Ok(plans)
    }
}

impl Sim<'_> {
    /// The whole job's places in the string for a repartition plan of `keys`, from every
    /// rank's load and profile as the runtime computed them from an all-gather: the
    /// reference [`Job::check_start`] holds each rank's repartition start to.
    fn whole_job_positions(
        &mut self,
        keys: &[Vec<u64>],
    ) -> (
        titus_core::Movement,
        Vec<Option<titus_core::repartition::StringPosition>>,
    ) {
        let job = WholeJob::of(keys, &self.history, &mut self.reference_plan_front);
        let loads: Vec<u64> = self
            .reference_plan_front
            .plan_loads(&job.profiles, &job.own, &job.alone)
            .into_iter()
            .map(|l| l.unwrap_or(0))
            .collect();
        let empty = keys.iter().all(Vec::is_empty);
        let positions = (0..keys.len() as u32)
            .map(|r| {
                (!empty).then(|| {
                    titus_core::repartition::StringPosition::of(&loads, r).expect("in the job")
                })
            })
            .collect();
        (job.movement, positions)
    }
}

/// What the whole job brings a start, as an all-gather of every rank's record would have
/// it: each rank's profile, own load and cost classes, the front (`front`, updated with
/// them) and its movement, and the ranks that predict alone by design.
struct WholeJob {
    profiles: Vec<titus_core::RankProfile>,
    own: Vec<Option<u64>>,
    classes: Vec<titus_core::LoadClasses>,
    movement: titus_core::Movement,
    alone: Vec<bool>,
}

impl WholeJob {
    fn of(keys: &[Vec<u64>], history: &[CostHistory], front: &mut titus_core::JobFront) -> Self {
        let profiles: Vec<titus_core::RankProfile> = keys
            .iter()
            .zip(history)
            .map(|(k, h)| titus_core::RankProfile {
                now: titus_core::KeySpan::of(k),
                last: h.measured(),
            })
            .collect();
        let predicted: Vec<Vec<u64>> = keys
            .iter()
            .zip(history)
            .map(|(k, h)| h.predict(k))
            .collect();
        front.update(&profiles);
        let movement = front.movement();
        Self {
            own: predicted
                .iter()
                .map(|p| titus_core::predicted_load(p))
                .collect(),
            classes: predicted
                .iter()
                .map(|p| titus_core::LoadClasses::of(p))
                .collect(),
            alone: titus_core::start::front::predicting_alone(&profiles, movement),
            profiles,
            movement,
        }
    }
}

/// What a driver does between epochs ([`simulate_with`]): given [`Between`], the next
/// epoch's task lists (one per rank) to run instead of the job's, or `None` to run the
/// job's; an error ends the run.
pub type BetweenEpochs<'f> =
    dyn FnMut(&Between<'_>) -> Result<Option<Vec<Vec<SimTask>>>, String> + 'f;

/// Runs every epoch of `job` to its end and checks every invariant.
pub fn simulate(job: &Job<'_>) -> Result<Outcome, Violation> {
    simulate_with(job, &mut |_| Ok(None))
}

/// [`simulate`], calling `between` after every epoch but the last (before the next one
/// starts): a time-stepping driver may then change the next epoch's tasks, e.g. apply a
/// repartition plan ([`Between::repartition_plan`]) as `dlb-bench --repartition` does
/// with the runtime's. The epochs' count is the job's.
pub fn simulate_with(job: &Job<'_>, between: &mut BetweenEpochs<'_>) -> Result<Outcome, Violation> {
    let ranks = job.overlay.ranks;
    if job.tasks.len() != ranks as usize {
        return Err(Violation(format!(
            "{} task lists for {ranks} ranks",
            job.tasks.len()
        )));
    }
    if job.workers == 0 {
        return Err(Violation("a rank needs at least one worker".into()));
    }
    time::check(job).map_err(Violation)?;
    let n = ranks as usize;
    let mut res = vec![None; n];
    let described = &job.resources.per_rank;
    let cpu_kinds = &job.resources.cpu_kinds;
    if described.len() > n || cpu_kinds.len() > n {
        return Err(Violation(format!(
            "resources described for {} ranks in a job of {n}",
            described.len().max(cpu_kinds.len())
        )));
    }
    // Each rank's resources: a table where it has accelerators or CPUs that do not run
    // every kind.
    let mut specs_of: Vec<Vec<ResourceSpec>> = Vec::with_capacity(n);
    for (r, slot) in res.iter_mut().enumerate() {
        let mut cpu = ResourceSpec::cpu(job.workers as u32);
        if let Some(Some(kinds)) = cpu_kinds.get(r) {
            cpu.variants = Variants::Kinds(kinds.iter().map(|&k| (k, 1.0)).collect());
        }
        let accels = described.get(r).map_or(&[][..], Vec::as_slice);
        let mut specs = vec![cpu];
        specs.extend(accels.iter().cloned());
        if specs.len() > 1 || specs[0].variants != Variants::All(1.0) {
            *slot = Some(
                Resources::new(specs.clone(), job.resources.dispatch)
                    .map_err(|e| Violation(format!("rank {r}: {e}")))?,
            );
        }
        specs_of.push(specs);
    }
    // Per-type requests where the ranks' resources run different kind sets (one set for
    // all: a short type is an empty queue, as without types).
    let mut core = job.core.clone();
    let mut types_mine = vec![0u64; n];
    let mut types_of: Vec<Vec<u64>> = vec![Vec::new(); n];
    if res.iter().any(Option::is_some) {
        let table = type_table(specs_of.iter().map(Vec::as_slice)).map_err(|e| Violation(e.0))?;
        if table.len() > 1 && core.resource_types.is_empty() {
            core.resource_types = table;
        }
        for (r, specs) in specs_of.iter().enumerate() {
            types_of[r] = type_bits(specs, &core.resource_types);
            types_mine[r] = types_of[r].iter().fold(0, |a, b| a | b);
        }
    }
    if res.iter().all(Option::is_none) {
        res = Vec::new();
    }
    let overlay = Overlay::new(job.overlay.clone()).map_err(|e| Violation(e.to_string()))?;
    let mut nodes = Vec::with_capacity(ranks as usize);
    let mut mems = Vec::with_capacity(ranks as usize);
    for r in 0..ranks {
        let mut n = Node::new(core.clone(), overlay.clone(), r)
            .map_err(|e| Violation(format!("rank {r}: {e}")))?;
        if let Some(make) = job.mapper {
            n.set_mapper(make(r));
        }
        let m = SparseMem::default();
        n.init_memory(&m);
        // Setting the segments up is not the epoch's work.
        m.take_moved();
        nodes.push(n);
        mems.push(m);
    }
    // Ranks per node of the node model: the hybrid's nodes, else as many as its cores
    // hold at the job's workers.
    let cpu_ranks = match (&job.model.node, &job.model.cpu) {
        (Some((k, _)), _) => *k,
        (None, Some(cpu)) => cpu.ranks_per_node(job.workers),
        (None, None) => 1,
    };
    let mut slow = vec![1.0; n];
    for &(r, f) in &job.faults.slow {
        if let Some(s) = slow.get_mut(r as usize) {
            *s = f;
        }
    }
    let mut sim = Sim {
        job,
        nodes,
        mems,
        queue: EventQueue::default(),
        slab: Vec::new(),
        free: Vec::new(),
        per: types_mine
            .iter()
            .map(|&types_mine| PerRank {
                idle: job.workers as u32,
                peer_checked: u32::MAX,
                types_mine,
                freed: (u64::MAX, 0),
                ..PerRank::default()
            })
            .collect(),
        seq: 0,
        rng: Rng::from_keys(&[job.seed, 0x5349_4d00]),
        epoch: 0,
        current: Cow::Borrowed(&job.tasks),
        keys: vec![Vec::new(); n],
        done_count: 0,
        peers: None,
        contacts: vec![Vec::new(); n],
        connect_ns: vec![0; n],
        runs: job.tasks.iter().map(|t| vec![0; t.len()]).collect(),
        home_total: 0,
        own_total: job.tasks.iter().map(|t| t.len() as u64).sum(),
        slow,
        events: 0,
        activity: 0,
        trace: job.seed,
        lock_check: job.core.protocol == Protocol::Lock && job.core.sharing.is_none(),
        stats: vec![Stats::default(); n],
        results: vec![Vec::new(); n],
        costs: vec![Vec::new(); n],
        history: vec![CostHistory::default(); n],
        own: vec![None; n],
        began: vec![0; n],
        beginning: vec![None; n],
        history_owed: vec![0; n],
        reference_front: titus_core::JobFront::default(),
        reference: None,
        start_figures: vec![(0, titus_core::start::StartFigures::default()); n],
        plan_keys: None,
        planned: vec![None; n],
        reference_plan_front: titus_core::JobFront::default(),
        clock: 0,
        corrupted: false,
        plans_checked: 0,
        res,
        accel_busy: vec![0; n],
        busy_by_owner: vec![BTreeMap::new(); n],
        dispatches: vec![Vec::new(); n],
        types_of,
        fail_count: 0,
        ran_for: job.tasks.iter().map(|t| vec![0; t.len()]).collect(),
        cpu_ranks,
        node_busy: vec![0; n.div_ceil(cpu_ranks as usize)],
        task_ends: if job.model.polled && job.model.cpu.is_some() {
            vec![Vec::new(); n]
        } else {
            Vec::new()
        },
        failed: vec![false; n],
        failed_count: 0,
        first_failure: None,
    };
    // Each rank's fabric peers, as the runtime configures them (`Node::peers` with its
    // in-neighbours, which are the ranks naming it as a peer here): the runtime
    // connects to all of them when the fabric opens, before the epoch, so no operation
    // pays a connection in it; an operation to any other rank is a violation (the real
    // fabric has no address for it). Over a large complete graph they connect on first
    // contact instead (`titus_core::connects_lazily`).
    if !titus_core::connects_lazily(&overlay) {
        let mut peers: Vec<Vec<u32>> = sim.nodes.iter().map(|n| n.peers(&[])).collect();
        let outs = peers.clone();
        for (r, out) in outs.iter().enumerate() {
            for &p in out {
                peers[p as usize].push(r as u32);
            }
        }
        for p in &mut peers {
            p.sort_unstable();
            p.dedup();
        }
        let peers = Peers::new(peers);
        // Connected at open, each connection charged to both ends (the lists are
        // symmetric: each names the ranks naming it).
        for r in 0..sim.nodes.len() {
            sim.connect_ns[r] = peers
                .of(r as u32)
                .map(|p| sim.model(r as u32, p, false).connect_ns as u64)
                .sum();
        }
        sim.peers = Some(peers);
    }
    let stall = job.faults.stall;
    let mut out = Outcome::default();
    let mut now = 0;
    for epoch in 0..=job.later_epochs.len() {
        sim.start_epoch(now)?;
        now = sim.run_epoch(stall)?;
        let ranks = sim.finish_epoch(epoch)?;
        if epoch > 0 {
            out.earlier.push(std::mem::replace(&mut out.ranks, ranks));
        } else {
            out.ranks = ranks;
        }
        out.end_ns = sim.per.iter().filter_map(|p| p.end).max().unwrap_or(0);
        if epoch < job.later_epochs.len() {
            sim.clock = now;
            let tasks = between(&Between {
                epoch,
                sim: std::cell::RefCell::new(&mut sim),
            });
            now = sim.clock;
            let tasks = tasks.map_err(|e| {
                Violation(format!(
                    "between epochs {} and {}: {e}",
                    epoch + 1,
                    epoch + 2
                ))
            })?;
            sim.next_epoch(tasks);
        }
    }
    out.events = sim.events;
    out.trace = sim.trace;
    out.plans_checked = sim.plans_checked;
    Ok(out)
}
