//! One rank of the protocol: the public API, and the dispatch of each input to the parts
//! that own the state it concerns.
//!
//! A `Node` composes:
//! - [`Ctx`]: configuration, rank, time, epoch, figures, and the commands it issues;
//! - [`Queue`]: the tasks to run or share;
//! - [`Thief`] and [`Owner`]: the two sides of stealing (`crate::steal`);
//! - [`ShareState`]: work sharing through masters (`crate::share`);
//! - [`Router`] and [`Results`]: results routing and the inbox (`crate::results`);
//! - [`Termination`]: the tree reduction that ends an epoch (`crate::termination`);
//! - diffusion (`crate::diffuse`): no state of its own; `start_epoch_predicted` plans the
//!   pushes and hands them to the results' outbound side, and a chunk of pushed tasks
//!   joins the queue like stolen work.
//!
//! Each part owns its state and its logic and knows only the context and the data the
//! node hands it; what one part learns that another needs (stolen work arrived, a request
//! to answer, the epoch ended) passes through the node. Each operation a part issues is
//! tagged with that part's own `Pending`, and its completion goes back to that part.
//!
//! After every input the node *drives*: termination, then the owner, the thief, results,
//! sharing, termination again — in that order, which fixes the order of the operations
//! issued (and so the simulator's traces).
//!
//! # The driver's contract
//!
//! A driver (the runtime's progress thread and workers, or the simulator) calls, in this
//! order, and passes `now` with every input:
//! 1. **An epoch** (`epoch.rs`): [`Node::begin_start`], then inputs until
//!    [`Node::poll_start`] gives the start's outcome, then
//!    [`Node::start_epoch_predicted`]; once [`Node::is_done`],
//!    [`Node::take_epoch_results`].
//! 2. **Inputs** (`handle.rs`): [`Node::handle_completion`], [`Node::handle_signal`],
//!    [`Node::handle_timeout`], a worker's [`Node::task_done`], and the driver's own
//!    findings ([`Node::peers_swept`], [`Node::fail_peer_gone`],
//!    [`Node::fail_from_driver`]).
//! 3. **Outputs** (`poll.rs`), after every input: [`Node::poll_command`] until it gives
//!    nothing, each command submitted to the fabric; then [`Node::poll_timeout`], the
//!    deadline of the next [`Node::handle_timeout`].
//! 4. **Work** (`work.rs`): workers take a grain ([`Node::take_grain`]) or a resource's
//!    tasks ([`Node::take_tasks_for`]), and report each back through `task_done`.
//!
//! Getters (`getters.rs`) change nothing and may be called at any time; what the node
//! asks of its driver's naps comes out as one value, [`Node::hints`].
//!
//! # Failure
//!
//! A rank that fails floods ABORT over the tree and its overlay neighbours; every rank
//! stops with an error within O(log N) signal hops.

use crate::ConfigError;
use crate::ctx::Ctx;
use crate::diffuse;
use crate::layout::signal::Signal;
use crate::layout::{self, PushedTask, Task, TaskId, seg, tasks};
use crate::mapper::{Mapper, Profile};
use crate::queue::Queue;
use crate::results::{Results, inbox, outbound};
use crate::router::Router;
use crate::share::{self, Decision, ShareState};
use crate::steal::TaskArea;
use crate::steal::owner::{self, Owner};
use crate::steal::thief::{self, EPOCH_MASK, Thief};
use crate::termination::{self, Termination, tree_children, tree_parent};
use crate::{
    Command, Config, CoreError, DiffusionPlan, Loc, Memory, OpFailure, Protocol, Rank, Stats, Time,
    Token,
};
use titus_overlay::Overlay;
use titus_overlay::rng::Rng;

mod epoch;
mod getters;
mod handle;
mod poll;
mod spawn;
mod work;

/// What a command's completion means, by the part that issued it.
#[derive(Debug)]
enum Pending {
    Thief(thief::Pending),
    Owner(owner::Pending),
    Share(share::Pending),
    Out(outbound::Pending),
    Inbox(inbox::Pending),
    Term(termination::Pending),
    /// The epoch start's messages and reads.
    Start(crate::start::part::Pending),
    /// ABORT, flooded.
    Abort,
}

macro_rules! tag {
    ($($part:ident => $variant:ident),*) => {$(
        impl From<$part::Pending> for Pending {
            fn from(p: $part::Pending) -> Self {
                Self::$variant(p)
            }
        }
    )*};
}
tag!(thief => Thief, owner => Owner, share => Share, outbound => Out, inbox => Inbox, termination => Term);

/// The victim-choice stream of `rank` (and `epoch`, once epochs run).
fn steal_rng(seed: u64, rank: Rank, epoch: Option<u64>) -> Rng {
    match epoch {
        None => Rng::from_keys(&[seed, 0x5354_4541_4c00, u64::from(rank)]),
        Some(e) => Rng::from_keys(&[seed, 0x5354_4541_4c00, u64::from(rank), e]),
    }
}

/// What a driver predicts for an epoch, for diffusion (`diffuse.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prediction {
    /// Each task's predicted cost, ns (0: unknown), in task order.
    pub costs_ns: Vec<u64>,
    /// The predicted loads (ns; 0: no tasks) of this rank's diffusion neighbours
    /// ([`Node::diffusion_neighbours`]) that predicted one; others are left out.
    pub neighbour_loads: Vec<(Rank, u64)>,
    /// This rank's part of the string plan ([`crate::DiffusionPlan::String`]; without it
    /// that plan falls back to the neighbours'), as the epoch start found it.
    pub string: Option<crate::start::string::RankString>,
    /// For a split string plan: whether each task (in task order) counts costly, where the
    /// loads of the string say ([`crate::JobFront::costly_keys`]: the job's density its key
    /// came from); empty, or `None` for a task, where its predicted cost says.
    pub costly: Vec<Option<bool>>,
}

/// A task a rank submits for an epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewTask {
    /// Its kind (the function that runs it).
    pub kind: u16,
    /// Its input.
    pub payload: Vec<u8>,
    /// Its priority: higher runs first, lower is shared first (0: the default).
    pub priority: i16,
    /// Its estimated cost, ns (0: unknown): cost-aware sharing splits the queue by
    /// estimates (`Config::cost_aware`) — this hint, else diffusion's prediction, else the
    /// mapper's ([`crate::Mapper::estimate_ns`]: the measured mean of the kind). At most
    /// [`crate::layout::COST_HINT_MAX_NS`] (larger is taken as that).
    pub cost_hint_ns: u64,
    /// A spawned task's key: its result reaches its owner with it (`crate::spawn`).
    /// Epoch tasks are named by their place in the list, and their key is ignored.
    pub key: u64,
}

impl From<(u16, Vec<u8>)> for NewTask {
    fn from((kind, payload): (u16, Vec<u8>)) -> Self {
        Self {
            kind,
            payload,
            ..Self::default()
        }
    }
}

/// An epoch's outcome for this rank's own tasks, in task order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochResults {
    /// The results.
    pub results: Vec<Vec<u8>>,
    /// Each task's cost measured where it ran, ns.
    pub costs_ns: Vec<u64>,
    /// A spawning job's reduction of its spawned tasks' results over every rank, lane by
    /// lane (`crate::spawn`); empty when the job does not spawn or routes them home.
    pub reduced: Vec<u64>,
    /// A job that routes spawned results home: those of the spawned tasks descended from
    /// this rank's own tasks, each once, ordered by key (then by data).
    pub spawned: Vec<SpawnedResult>,
}

/// A spawned task's result, home at the owner of the epoch task it descends from.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SpawnedResult {
    /// The key its spawner gave it.
    pub key: u64,
    /// Its result.
    pub data: Vec<u8>,
}

/// What a node's remote activity asks of its driver ([`Node::hints`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriverHints {
    /// It expects remote operations soon: it shares work during an epoch.
    pub expects_remote_ops: bool,
    /// It waits for another rank's answer: a steal is under way.
    pub awaits_remote: bool,
}

/// One rank of the protocol. See the crate documentation.
#[derive(Debug)]
pub struct Node {
    cx: Ctx<Pending>,
    area: TaskArea,
    router: Router,
    queue: Queue,
    thief: Thief,
    owner: Owner,
    share: ShareState,
    results: Results,
    term: Termination,
    running: bool,
    failed: Option<CoreError>,
    aborted: bool,
    /// Signals that arrived between epochs: they belong to the next one (a rank that
    /// started it a little earlier already steals, routes and reports), replayed by
    /// `start_epoch`.
    early: Vec<(Rank, u64)>,
    /// The epoch start (`crate::start`): its segment, the start under way, its outcome.
    start: crate::start::part::StartPart,
    /// This epoch started from predictions (diffusion balanced it before any task ran).
    balanced_start: bool,
    /// Resource types (`Config::resource_types`): those this rank has, and those with an
    /// idle instance ([`Node::set_resource_types`]).
    types_mine: u64,
    types_idle: u64,
    /// Spawned tasks this epoch (a spawning job: `crate::spawn`).
    spawn: crate::spawn::Counts,
}

impl Node {
    /// A node for `rank` of `overlay`'s ranks.
    pub fn new(cfg: Config, overlay: Overlay, rank: Rank) -> Result<Self, CoreError> {
        let size = overlay.ranks();
        if rank >= size {
            return Err(ConfigError::RankOutsideJob { rank, size }.into());
        }
        for (what, bytes) in [
            ("max_payload", cfg.max_payload),
            ("max_result", cfg.max_result),
        ] {
            if bytes > layout::PAYLOAD_MAX {
                return Err(ConfigError::PayloadMax {
                    what,
                    bytes,
                    max: layout::PAYLOAD_MAX,
                }
                .into());
            }
        }
        if cfg.shared_capacity == 0 || cfg.shared_capacity > u32::from(u16::MAX) {
            return Err(ConfigError::SharedCapacity(cfg.shared_capacity).into());
        }
        // A spawned result carries its key (`layout::KEY_BYTES`).
        let keyed = if cfg.spawning.is_some() {
            layout::KEY_BYTES
        } else {
            0
        };
        let chunk_floor =
            (layout::CHUNK_HEADER + layout::record_len(cfg.max_result as usize + keyed)) as u64;
        if cfg.chunk_bytes < chunk_floor {
            return Err(ConfigError::ChunkTooSmall {
                chunk_bytes: cfg.chunk_bytes,
                max_result: cfg.max_result,
                floor: chunk_floor,
            }
            .into());
        }
        // A CHUNK signal carries the chunk's offset and length in 30 bits each.
        if cfg.inbox_bytes < cfg.chunk_bytes || cfg.inbox_bytes >= 1 << 30 {
            return Err(ConfigError::InboxBytes {
                inbox_bytes: cfg.inbox_bytes,
                chunk_bytes: cfg.chunk_bytes,
            }
            .into());
        }
        if cfg.outbox_slots == 0 {
            return Err(ConfigError::NoOutboxSlots.into());
        }
        if cfg.resource_types.len() > crate::resources::TYPES_MAX {
            return Err(ConfigError::ResourceTypes {
                types: cfg.resource_types.len(),
                max: crate::resources::TYPES_MAX,
            }
            .into());
        }
        // Types are compared with resources' kind sets, which are sorted and distinct.
        if let Some((t, k)) = cfg.resource_types.iter().enumerate().find_map(|(t, k)| {
            k.as_ref()
                .filter(|k| !k.is_sorted_by(|a, b| a < b))
                .map(|k| (t, k))
        }) {
            return Err(ConfigError::ResourceKinds {
                rtype: t,
                kinds: k.to_vec(),
            }
            .into());
        }
        if let Some(sp) = &cfg.spawning
            && (sp.lanes.len() > crate::spawn::LANES_MAX || sp.queued_max == 0)
        {
            return Err(ConfigError::Spawning {
                lanes: sp.lanes.len(),
                max: crate::spawn::LANES_MAX,
                queued_max: sp.queued_max,
            }
            .into());
        }
        if let Some(sp) = &cfg.spawning {
            sp.check_lanes().map_err(ConfigError::Reduction)?;
        }
        if let Some(sh) = &cfg.sharing {
            sh.check(size)?;
            if cfg.protocol != Protocol::Request {
                return Err(ConfigError::SharingNeedsRequest.into());
            }
        }
        let router = Router::new(overlay, rank, &cfg);
        let area = TaskArea::new(&cfg, size);
        // Under work sharing the targets are set per epoch (the master rotates).
        let targets = if cfg.sharing.is_some() {
            crate::neighbours::Neighbours::List(Vec::new())
        } else {
            router.victims.clone()
        };
        Ok(Self {
            thief: Thief::new(
                targets,
                area,
                steal_rng(cfg.seed, rank, None),
                cfg.resource_types.len(),
            ),
            owner: Owner::new(area),
            results: Results::new(&router, &cfg),
            cx: Ctx::new(cfg, rank, size),
            area,
            router,
            queue: Queue::default(),
            share: ShareState::default(),
            term: Termination::default(),
            running: false,
            failed: None,
            aborted: false,
            early: Vec::new(),
            start: crate::start::part::StartPart::new(size),
            balanced_start: false,
            types_mine: 0,
            types_idle: 0,
            spawn: crate::spawn::Counts::default(),
        })
    }
}
