//! A simulated job: its tasks, faults and resources, and what a run gives back.

use crate::check;
use crate::model::Model;
use std::collections::BTreeMap;
use titus_core::resources::{Dispatch, KindSet, ResourceSpec};
use titus_core::{Config, NewTask};
use titus_overlay::OverlayParams;

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
    /// Further epochs whose tasks the driver supplies between epochs ([`simulate_with`])
    /// instead of [`Job::later_epochs`] holding them all before the run: the job runs
    /// `1 + max(later_epochs.len(), later_epochs_supplied)` epochs, and a supplied epoch
    /// the driver gives no tasks for is a violation. At 100,000 ranks, four epochs of
    /// tasks held at once took more memory than the simulation itself.
    pub later_epochs_supplied: usize,
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
    /// Keep each CPU task's span ([`RankOutcome::spans`]) for a timeline (`titus sim
    /// --trace`), and the core's steal and chunk logs (`Config::timeline`): memory per
    /// task run.
    pub trace: bool,
    /// Tasks that spawn tasks (with `core.spawning` set): what each task spawns, and a
    /// spawned task's cost and result ([`SpawnModel`]); `None`: a fixed bag.
    pub spawn: Option<&'a SpawnModel>,
}

/// What a task of a spawning job does, from its payload and the tasks its rank held
/// queued when it started (the runtime's `TaskCtx::queued`). Its cost and lanes count
/// for a spawned task; an epoch task's come from its [`SimTask`] and [`Job::result`].
pub type SpawnModel = dyn Fn(&[u8], usize) -> Spawned + Sync;

/// What one task of a spawning job does ([`SpawnModel`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spawned {
    /// How long it runs on a CPU worker, ns (a spawned task's; ignored for an epoch task).
    pub cost_ns: u64,
    /// The children it spawns, each with its key, kind and payload.
    pub children: Vec<NewTask>,
    /// Its result (a spawned task's): where the job reduces, one little-endian u64 per
    /// lane (`Spawning::encode`); else it travels home with its key.
    pub result: Vec<u8>,
    /// Children it hands over while it runs (`TaskCtx::hand_over`), and how far into its
    /// cost, ns: stealable before it ends.
    pub early: Option<(u64, Vec<NewTask>)>,
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

    pub(crate) fn of(per_task_ns: f64, tasks: usize) -> u64 {
        (per_task_ns * tasks as f64) as u64
    }
}

/// The ranks' resources beside their CPU workers (`titus_core::resources`).
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
    /// Epochs after the first: held ([`Job::later_epochs`]) or supplied by the driver
    /// ([`Job::later_epochs_supplied`]).
    pub fn later_count(&self) -> usize {
        self.later_epochs.len().max(self.later_epochs_supplied)
    }

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
            later_epochs_supplied: 0,
            start_skew_ns: 0,
            check_start: false,
            result: &check::check_result,
            task_bytes_scale: 1.0,
            max_events: 50_000_000,
            mapper: None,
            resources: SimResources::default(),
            worker_grain_ns: None,
            start_cpu: StartCpu::RUNTIME,
            trace: false,
            spawn: None,
        }
    }

    /// A worker's grain in ns ([`Job::worker_grain_ns`]).
    pub fn grain_ns(&self) -> u64 {
        self.worker_grain_ns
            .unwrap_or_else(|| titus_core::default_worker_grain(self.workers).as_nanos() as u64)
    }

    /// The policy its workers follow: the runtime's, with its grain and one task at least
    /// per take (the runtime's default `worker_batch`).
    pub fn worker_policy(&self) -> titus_core::WorkerPolicy {
        titus_core::WorkerPolicy::new(std::time::Duration::from_nanos(self.grain_ns()), 1)
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
    /// Its figures, in the runtime's shape. `busy` counts the CPU workers' tasks;
    /// `between` is the node model's time around each task (none without it);
    /// `progress_cpu` the node model's progress share of a core over the session plus
    /// the operations it issued and served (`op_issue_ns`, `op_serve_ns`); `steal` the
    /// summed steal latencies.
    pub stats: titus_core::EpochStats,
    /// When this rank called the epoch (virtual ns): its start, then its tasks from
    /// `stats.start` on, to its end `stats.session` after it.
    pub called_ns: u64,
    /// With [`Job::trace`]: each CPU task it ran, [start, length, owner, index, kind,
    /// worker] (virtual ns; the worker a lane of its own, first free first).
    pub spans: Vec<[u64; 6]>,
    /// With [`Job::trace`]: its own tasks' keys this epoch, by index.
    pub keys: Vec<u64>,
    /// This rank's results, in task order.
    pub results: Vec<Vec<u8>>,
    /// A spawning job's reduction of its spawned tasks' results (empty otherwise).
    pub reduced: Vec<u64>,
    /// A job that routes spawned results home: those below this rank's tasks, ordered
    /// by key.
    pub spawned: Vec<titus_core::SpawnedResult>,
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

/// Why a simulated run did not end as a run must: the job could not run as given, an
/// invariant did not hold, or every rank stopped with an error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Violation {
    /// The job cannot run as given (no worker, an overlay or a resource description
    /// that cannot be built): nothing was simulated.
    #[error("{0}")]
    Job(String),
    /// The job would make virtual time pass what the simulator can count.
    #[error(transparent)]
    Time(#[from] crate::time::TimeError),
    /// An invariant of the protocol did not hold (a task run twice, a result lost, a
    /// start that disagrees with the whole job's plan), or the run did not end: what, in
    /// words, for whoever reads the failing seed.
    #[error("{0}")]
    Broken(String),
    /// A rank failed and every rank stopped with an error, told the first failure — the
    /// runtime's promise — with no task run twice up to then.
    #[error("{first}; {FAILED_EVERYWHERE} by {at_ms:.3} ms ({events} events, trace {trace:016x})")]
    FailedEverywhere {
        /// The first failure, naming its rank.
        first: String,
        /// When the last rank stopped, virtual ms.
        at_ms: f64,
        /// Events simulated.
        events: u64,
        /// The run's trace hash.
        trace: u64,
    },
}

/// How a run that failed on every rank ends its violation's message: the failure was
/// told to every rank, each stopped with an error, and no task ran twice up to then.
pub const FAILED_EVERYWHERE: &str = "every rank stopped with an error";

/// A run that failed on every rank ([`Violation::FailedEverywhere`]): the events it took
/// and its trace hash; None for any other violation.
pub fn failed_everywhere(v: &Violation) -> Option<(u64, u64)> {
    match v {
        Violation::FailedEverywhere { events, trace, .. } => Some((*events, *trace)),
        _ => None,
    }
}
