//! Titus's work-stealing protocol as a sans-IO state machine: one [`Node`] per rank.
//!
//! No threads, no clock, no IO. The driver (the runtime over a real fabric, or the
//! simulator over virtual time) feeds inputs in — the time, completions of the remote
//! operations the node asked for, signals from other ranks, task results — and carries
//! commands out: remote operations to perform ([`Command`]). Local segment memory is
//! reached through the [`Memory`] trait the driver passes in.
//!
//! A [`Node`] composes parts that each own their state and logic (design notes beside
//! the code); none imports the node, and each works through a small context (`ctx.rs`:
//! configuration, rank, time, epoch, figures, and the commands it issues):
//! - stealing (`steal.rs`): the thief (`steal/thief.rs`: victim choice over overlay
//!   out-neighbours with per-victim exponential backoff, and the thief's steps) and the
//!   owner (`steal/owner.rs`: the shared set, answering requests) of three protocols —
//!   `claim` (one remote fetch-add finds and claims a batch, one read fetches it; the
//!   victim never blocks), `lock` (TITUS: CAS lock, read, hand the lock back for a
//!   refill) and `request` (a signal answered by the victim's progress);
//! - work sharing (`share.rs`): the `master` and `hierarchical` balancers, over
//!   `request`;
//! - results (`results.rs`): routed to their owners hop by hop along the overlay
//!   (`router.rs`), aggregated per next hop (`results/outbound.rs`: one fetch-add
//!   reservation in the next hop's inbox, one gathered write, one signal); the receiving
//!   inbox (`results/inbox.rs`) pushes back when full, nothing is dropped;
//! - termination (`termination/`): a binary tree over ranks reduces "all my results
//!   are home" and broadcasts the end of the epoch; a job whose tasks spawn tasks
//!   (`spawn.rs`) runs waves of created and completed counts over it instead;
//! - diffusion (`diffuse.rs`): at an epoch's start, a rank that predicts more load than
//!   a neighbour (from the costs measured last epoch, [`CostHistory`]) pushes tasks to
//!   it through the results channel before its workers start;
//! - the mapper ([`mapper`]): the policy — whom a thief probes, what an owner lets go,
//!   task priorities, the profiling feed — replaceable per rank, today's behaviour by
//!   default;
//! - the task queue (`queue.rs`), the figures ([`Stats`]).
//!
//! What travels between ranks is defined in [`layout`]: segment layouts, task slots,
//! result chunks, and every signal's payload ([`layout::signal::Signal`]); the error codes
//! an ABORT carries are [`error_code`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod balancing;
mod config_error;
mod ctx;
mod diffuse;
mod epoch_stats;
mod error;
pub mod fasthash;
mod front;
mod history;
pub mod layout;
pub mod mapper;
mod neighbours;
mod node;
mod predicted_order;
mod queue;
pub mod repartition;
pub mod resources;
mod results;
mod router;
pub mod seed;
mod share;
pub mod spawn;
pub mod start;
mod stats;
mod steal;
mod termination;
mod worker_policy;

pub use balancing::{Balancing, EAGER_RANKS_MAX, connects_lazily, default_group_size};
pub use config_error::ConfigError;
pub use diffuse::{ClassesError, LoadClasses, StringLoads, predicted_load, split_class};
pub use epoch_stats::EpochStats;
pub use error::{CoreError, error_code};
pub use front::{
    FrontView, FrontWindow, JobFront, KeySpan, Measured, Movement, Period, ProfileError,
    RankProfile,
};
pub use history::CostHistory;
pub use layout::{ResultRecord, Task, TaskId};
pub use mapper::{DefaultMapper, Mapper};
pub use node::{DriverHints, EpochResults, NewTask, Node, Prediction, SpawnedResult};
pub use share::Sharing;
pub use stats::{
    OP_KINDS, OpLatency, STEAL_LOG_MAX, Stats, StealEvent, StealOutcome, TRANSFER_LOG_MAX,
    Transfer, TransferEvent,
};
pub use steal::TaskArea;
pub use termination::DONE_GRACE;
pub use titus_overlay::Routing;
pub use worker_policy::{
    BUSY_NAP_NS, COSTLY_TASK_NS, GRAIN_TASKS_MAX, GrainTake, HeldResults, IDLE_NAP_NS,
    IDLE_WAIT_FIRST_NS, IDLE_WAIT_MAX_NS, IdleWait, MAX_WAIT_NS, NapView, OPEN_OPS_WAIT_NS,
    POLL_EVERY_NS, ProgressNap, WorkerPolicy, default_worker_grain,
};

use std::time::Duration;

/// A rank number.
pub type Rank = u32;

/// A point in time, in nanoseconds from the driver's origin (real or virtual).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

impl Time {
    /// This time plus `d`.
    pub fn plus(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64),
        )
    }
    /// Time from `earlier` to this one (zero if earlier is later).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// A registered segment's number, the same on every rank ([`layout::seg`] names the
/// node's). The vocabulary of one-sided operations lives here, in the crate without IO,
/// and the fabric crates speak it: one `Rank`, one `Loc` in the whole workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId(pub u16);

/// A place in one of this or another rank's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// The segment.
    pub segment: SegmentId,
    /// Byte offset in it.
    pub offset: u64,
}

impl Loc {
    /// `offset` in `segment`.
    pub fn new(segment: SegmentId, offset: u64) -> Self {
        Self { segment, offset }
    }
}

/// Identifies a command's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// A remote operation the node asks the driver to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Copy `len` bytes of `peer`'s `remote` into this rank's `local`.
    Read {
        /// Target rank.
        peer: Rank,
        /// Where to read.
        remote: Loc,
        /// Where the bytes go.
        local: Loc,
        /// How many.
        len: u64,
    },
    /// Copy local pieces back to back to `peer`'s `remote`, then signal (if any) once they
    /// are there.
    Write {
        /// Target rank.
        peer: Rank,
        /// Where to write.
        remote: Loc,
        /// Local (place, length) pieces.
        pieces: Vec<(Loc, u64)>,
        /// Signal value delivered after the data.
        signal: Option<u64>,
    },
    /// 64-bit compare-and-swap; completes with the previous value.
    Cas {
        /// Target rank (may be this rank).
        peer: Rank,
        /// The word.
        remote: Loc,
        /// Expected value.
        expected: u64,
        /// New value.
        desired: u64,
    },
    /// 64-bit fetch-and-add; completes with the previous value.
    FetchAdd {
        /// Target rank (may be this rank).
        peer: Rank,
        /// The word.
        remote: Loc,
        /// Addend (wrapping).
        delta: u64,
    },
}

/// An operation to perform, and the token its completion must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Hand it back with the completion.
    pub token: Token,
    /// The operation.
    pub op: Op,
}

/// Why a remote operation failed, as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpFailure {
    /// The peer is gone (or the driver's timeout expired).
    pub peer_gone: bool,
    /// What the transport said.
    pub detail: String,
}

/// This rank's segment memory.
pub trait Memory {
    /// Copies `buf.len()` bytes at `loc` into `buf`.
    fn read(&self, loc: Loc, buf: &mut [u8]);
    /// Copies `data` to `loc`.
    fn write(&self, loc: Loc, data: &[u8]);
    /// The `len` bytes at `loc` are dead: this rank reads them again only after they are
    /// written again (a result chunk once decoded). A hint for memory that costs what it
    /// holds — the simulator's, where they then read as zero; registered segments ignore
    /// it.
    fn discard(&self, _loc: Loc, _len: u64) {}
}

/// Which steal protocol a run uses (every rank the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// TITUS's lock protocol.
    Lock,
    /// One fetch-add claims a batch, one read fetches it (the default).
    #[default]
    Claim,
    /// A request signal answered by the victim.
    Request,
}

impl Protocol {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Claim => "claim",
            Self::Request => "request",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lock" => Ok(Self::Lock),
            "claim" => Ok(Self::Claim),
            "request" => Ok(Self::Request),
            o => Err(format!(
                "unknown steal protocol '{o}' (expected lock, claim or request)"
            )),
        }
    }
}

/// Tunables of a node. Every rank of a job must use the same values.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Steal protocol.
    pub protocol: Protocol,
    /// Routing of results.
    pub routing: Routing,
    /// Largest task payload, bytes (fixes the task slot size).
    pub max_payload: u32,
    /// Largest task result, bytes.
    pub max_result: u32,
    /// Tasks the shared set holds at most (≤ 65535: the claim word's count field).
    pub shared_capacity: u32,
    /// The owner keeps at least this many tasks private when it refills its shared set.
    pub min_private: u32,
    /// A rank steals while it holds fewer than this many tasks (its workers' appetite).
    pub steal_below: u32,
    /// Bytes of the results inbox (a chunk larger than this cannot travel).
    pub inbox_bytes: u64,
    /// Largest result chunk sent to one next hop, bytes.
    pub chunk_bytes: u64,
    /// Chunks in flight at once, each in an OUTBOX slot of `chunk_bytes` (at most one per
    /// next hop; records for a next hop wait when every slot is in flight). The OUTBOX
    /// registers min(next hops, this) × `chunk_bytes`.
    pub outbox_slots: u32,
    /// How long the results of tasks this rank ran wait for company before their chunk
    /// leaves (a chunk also leaves when half full, and at once when this rank's queue is
    /// empty: this rank's own end is never later than theirs).
    pub flush_delay: Duration,
    /// How long records passed on for other ranks wait for company: a busy rank on their
    /// way home holds them, and the epoch's end may wait for them.
    pub forward_delay: Duration,
    /// First backoff after a victim was found empty; doubles per failure.
    pub backoff_base: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
    /// How often an owner checks its shared set (claim, lock) when nothing prompts it.
    pub check_interval: Duration,
    /// Seed of victim choice (combined with rank and epoch).
    pub seed: u64,
    /// Work sharing through masters (`master`, `hierarchical`) instead of stealing from
    /// overlay neighbours; needs the `request` protocol. `None`: stealing.
    pub sharing: Option<Sharing>,
    /// Diffusion before stealing: at an epoch's start, push tasks to diffusion neighbours
    /// that predict less load (`diffuse.rs`). Off under `steal_below` = 0 (no balancing)
    /// whatever this says; an epoch without predictions pushes nothing.
    pub diffusion: bool,
    /// Diffusion: where pushed work goes ([`DiffusionPlan`]).
    pub diffusion_plan: DiffusionPlan,
    /// How a repartition plan moves tasks for good ([`repartition::RepartitionPlan`]).
    pub repartition_plan: repartition::RepartitionPlan,
    /// Diffusion: how long a thief leaves alone a neighbour that predicted more load than
    /// this rank — it is pushing tasks here — unless the push's last chunk arrives first;
    /// each earlier chunk extends it by as much. A steal meanwhile takes half of what the
    /// giver kept on top of what it sends, and that comes back by stealing.
    pub push_wait: Duration,
    /// Blacklist and advertisement (Legion's, over one-sided operations): a thief that
    /// finds a victim empty stops probing it and tells it so (a WAIT signal; a `request`
    /// victim learns it from the request itself); the victim, once it has work to share
    /// again, sends ADVERT to the thieves that wait, which clears it from their
    /// blacklists. Idle thieves then sleep instead of probing empty victims on a backoff,
    /// and learn of work the moment it arrives next door. Stealing only (not work sharing).
    pub advertise: bool,
    /// Cost-aware batches: when the queue's tasks have cost estimates (a hint from the
    /// submitter, diffusion's prediction, or the mapper's measured mean of the kind), a
    /// share holds about the fraction of the queue's estimated *work* that the count rule
    /// gives of its tasks (`claim`: two thirds, published in batches that each hold their
    /// part of the work; else half), spread over the queue; and a share whose estimated
    /// work is below [`Config::move_cost`] is not made (the end game: cheaper to finish
    /// than to move). Without estimates, the count rule.
    pub cost_aware: bool,
    /// Cost-aware batches: the estimated cost of moving a share, a steal's round trip and
    /// its transfer; 20 µs by default (a loopback steal takes 20–80 µs; `titus sim` sets
    /// it from its fabric model). A share of less estimated work stays with its owner.
    pub move_cost: Duration,
    /// The job's resource types for per-type work requests (index: the type's
    /// id; [`resources::type_table`]). Empty (the default): none — a thief asks for any
    /// work when its queue runs dry. With types, each rank's driver tells its node which
    /// it has and which have an idle instance ([`Node::set_resource_types`]); under
    /// `request` (stealing, no work sharing) a thief then asks for work of a starved type
    /// only, victims answer with tasks of its kinds or say the type is not supported, and
    /// backoff is kept per (victim, type); `claim` and `lock` (one-sided: a victim cannot
    /// filter) steal as without types, when the queue runs dry.
    pub resource_types: Vec<resources::KindSet>,
    /// Keep the steals that found nothing or a locked victim in the stats' steal log too,
    /// and every chunk sent or received in its transfer log, for a timeline (the
    /// runtime's `trace`): memory per event, so off by default.
    pub timeline: bool,
    /// Keep every steal attempt's latency ([`Stats::steal_latency_ns`]) and every
    /// successful steal ([`Stats::steal_log`]); [`Stats::steal_ns`] sums the latencies
    /// either way. On by default; a simulation of 100,000 ranks that plots nothing turns
    /// it off (6 KB a rank).
    pub steal_log: bool,
    /// Tasks may spawn tasks, and how their results combine (`spawn.rs`); `None`: the
    /// bag is fixed when the epoch starts, and a spawn is refused.
    pub spawning: Option<spawn::Spawning>,
}

/// Where diffusion sends a rank's excess of predicted load (`diffuse.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiffusionPlan {
    /// First-order diffusion, one round: to each diffusion neighbour (overlay row; the
    /// rank string under the complete graph) that predicts less, α·(L_i − L_j). Work moves
    /// one hop per epoch: a pile far wider than a neighbourhood spreads slowly.
    Neighbours,
    /// RankDLB's string (the default): every rank's excess over the mean and every rank's
    /// deficit under it laid end to end in rank order (from the loads the epoch-start
    /// all-gather brings), split into a costly and a cheap string where the job's costs
    /// allow; each excess goes to the ranks whose deficits it covers, routed through the
    /// overlay like results. One epoch balances the prediction whatever its shape.
    #[default]
    String,
}

impl DiffusionPlan {
    /// Its name in options and reports: `neighbours`, `string`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Neighbours => "neighbours",
            Self::String => "string",
        }
    }
}

impl std::str::FromStr for DiffusionPlan {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "neighbours" | "neighbors" => Ok(Self::Neighbours),
            "string" => Ok(Self::String),
            _ => Err(format!(
                "diffusion plan '{s}': expected neighbours or string"
            )),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            protocol: Protocol::Claim,
            routing: Routing::Non,
            max_payload: 256,
            max_result: 256,
            shared_capacity: 1024,
            min_private: 1,
            steal_below: 1,
            inbox_bytes: 1 << 20,
            chunk_bytes: 64 << 10,
            outbox_slots: 64,
            // Every chunk costs its receiver's progress thread a wake-up or two on a core a
            // worker needs; results only matter at the epoch's end, which an empty queue
            // flushes at once. Chemistry 256 × 64 over tcp;ofi_rxm, nominal efficiency:
            // 0.71–0.75 at 200 µs (~100 chunks a step), 0.78–0.81 at 3 ms, 0.83 at 10 ms.
            flush_delay: Duration::from_millis(20),
            // 20 ms here ended a 3,584-rank simulated epoch 28 ms after its last task.
            forward_delay: Duration::from_micros(200),
            // Loopback steals take 20–80 µs: a first retry after 50 µs, doubling to 10 ms,
            // keeps an idle rank's attempts (and CPU) low while work is far away.
            backoff_base: Duration::from_micros(50),
            backoff_max: Duration::from_millis(10),
            // Owners look at their shared set when there is news — a thief emptied it
            // (REFILL), stolen work arrived while nothing is published, regions still being
            // read (rechecked after `backoff_base`) — so the periodic check is only a
            // fallback: 10 ms.
            check_interval: Duration::from_millis(10),
            seed: 1,
            sharing: None,
            diffusion: true,
            diffusion_plan: DiffusionPlan::String,
            repartition_plan: repartition::RepartitionPlan::Neighbours,
            push_wait: Duration::from_millis(2),
            advertise: true,
            cost_aware: true,
            move_cost: Duration::from_micros(20),
            resource_types: Vec::new(),
            timeline: false,
            steal_log: true,
            spawning: None,
        }
    }
}

impl Config {
    /// Whether ranks balance at all: steal (`steal_below` > 0) or share through masters.
    /// `Balancing::None` sets neither.
    pub fn balances(&self) -> bool {
        self.steal_below > 0 || self.sharing.is_some()
    }
}
