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
//! # Failure
//!
//! A rank that fails floods ABORT over the tree and its overlay neighbours; every rank
//! stops with an error within O(log N) signal hops.

use crate::ctx::Ctx;
use crate::diffuse;
use crate::layout::signal::Signal;
use crate::layout::{self, PushedTask, Task, seg, tasks};
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
    /// For a split string plan: whether each task (in task order) counts dear, where the
    /// loads of the string say ([`crate::JobFront::dear_keys`]: the job's density its key
    /// came from); empty, or `None` for a task, where its predicted cost says.
    pub dear: Vec<Option<bool>>,
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
}

impl From<(u16, Vec<u8>)> for NewTask {
    fn from((kind, payload): (u16, Vec<u8>)) -> Self {
        Self {
            kind,
            payload,
            priority: 0,
            cost_hint_ns: 0,
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
}

impl Node {
    /// A node for `rank` of `overlay`'s ranks.
    pub fn new(cfg: Config, overlay: Overlay, rank: Rank) -> Result<Self, CoreError> {
        let size = overlay.ranks();
        if rank >= size {
            return Err(CoreError::Config(format!(
                "rank {rank} outside a job of {size}"
            )));
        }
        for (what, bytes) in [
            ("max_payload", cfg.max_payload),
            ("max_result", cfg.max_result),
        ] {
            if bytes > layout::PAYLOAD_MAX {
                return Err(CoreError::Config(format!(
                    "{what} {bytes} is over the {} bytes (64 MiB) a task slot or result may hold",
                    layout::PAYLOAD_MAX
                )));
            }
        }
        if cfg.shared_capacity == 0 || cfg.shared_capacity > u32::from(u16::MAX) {
            return Err(CoreError::Config(format!(
                "shared_capacity {} outside 1..=65535",
                cfg.shared_capacity
            )));
        }
        let chunk_floor =
            (layout::CHUNK_HEADER + layout::record_len(cfg.max_result as usize)) as u64;
        if cfg.chunk_bytes < chunk_floor {
            return Err(CoreError::Config(format!(
                "chunk_bytes {} cannot hold one {}-byte result ({chunk_floor} bytes with headers)",
                cfg.chunk_bytes, cfg.max_result
            )));
        }
        // A CHUNK signal carries the chunk's offset and length in 30 bits each.
        if cfg.inbox_bytes < cfg.chunk_bytes || cfg.inbox_bytes >= 1 << 30 {
            return Err(CoreError::Config(format!(
                "inbox_bytes {} must hold a chunk ({} bytes) and stay below 2^30",
                cfg.inbox_bytes, cfg.chunk_bytes
            )));
        }
        if cfg.outbox_slots == 0 {
            return Err(CoreError::Config("outbox_slots must be at least 1".into()));
        }
        if cfg.resource_types.len() > crate::resources::TYPES_MAX {
            return Err(CoreError::Config(format!(
                "{} resource types; at most {}",
                cfg.resource_types.len(),
                crate::resources::TYPES_MAX
            )));
        }
        // Types are compared with resources' kind sets, which are sorted and distinct.
        if let Some((t, k)) = cfg.resource_types.iter().enumerate().find_map(|(t, k)| {
            k.as_ref()
                .filter(|k| !k.is_sorted_by(|a, b| a < b))
                .map(|k| (t, k))
        }) {
            return Err(CoreError::Config(format!(
                "resource type {t} lists kinds {k:?}: give each type's kinds in ascending order, without repeats"
            )));
        }
        if let Some(sh) = &cfg.sharing {
            sh.check(size)?;
            if cfg.protocol != Protocol::Request {
                return Err(CoreError::Config(
                    "work sharing needs the request protocol".into(),
                ));
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
        })
    }

    /// Replaces this rank's mapper (its stealing policy: [`crate::mapper`]); the default
    /// is [`crate::mapper::DefaultMapper`]. Between epochs.
    pub fn set_mapper(&mut self, mapper: Box<dyn Mapper>) {
        self.queue.mapper = mapper;
    }

    /// This rank's mapper.
    pub fn mapper(&self) -> &dyn Mapper {
        &*self.queue.mapper
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.cx.rank
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cx.cfg
    }

    /// The ranks this rank sends operations to: out-neighbours, its tree parent and
    /// children, the epoch start's partners (`crate::start::partners`: the ranks 2^i
    /// before and after it), and the ranks that steal from it or send it results, `in_neighbours`
    /// (`request` victims answer their thieves; an inbox reset is signalled to the senders
    /// that overflowed it, under every protocol) — which the driver computes once
    /// (`Overlay::in_neighbours`, O(N·k)) and also uses for segment exposure.
    pub fn peers(&self, in_neighbours: &[Rank]) -> Vec<Rank> {
        let (rank, size) = (self.cx.rank, self.cx.size);
        let mut p: Vec<Rank> = self.router.victims.to_vec();
        p.extend(tree_parent(rank));
        p.extend(tree_children(rank, size));
        p.extend(crate::start::partners(rank, size));
        p.extend_from_slice(in_neighbours);
        if let Some(sh) = &self.cx.cfg.sharing {
            p.extend_from_slice(sh.members(rank));
        }
        p.sort_unstable();
        p.dedup();
        p.retain(|&r| r != rank);
        p
    }

    /// Bytes of each segment, in [`layout::seg`] order.
    pub fn segment_sizes(&self) -> [u64; 4] {
        [
            self.area.bytes(),
            inbox::INBOX_DATA + self.cx.cfg.inbox_bytes,
            self.results.out.slots() as u64 * self.cx.cfg.chunk_bytes,
            self.start.bytes(),
        ]
    }

    /// Begins the epoch start (`crate::start`): the collectives that tell this rank what
    /// it needs of the others before its tasks run. Every rank calls it, after the epoch
    /// before ended here; its operations leave through [`Node::poll_command`] and its
    /// inputs come in as every other (signals, completions, timeouts) until
    /// [`Node::poll_start`] has the outcome. Then the driver predicts and calls
    /// [`Node::start_epoch_predicted`].
    pub fn begin_start(
        &mut self,
        now: Time,
        input: crate::start::StartInput,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        if self.running {
            return Err(CoreError::Usage("an epoch start while an epoch is running"));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.cx.now = now;
        let mut out = Vec::new();
        let r = self
            .start
            .begin(now, self.cx.rank, self.cx.size, input, mem, &mut out);
        self.issue_start(out);
        r
    }

    /// The epoch start's outcome, once it ended (once): what the epoch is to start from,
    /// or why the start failed (here, or on the rank whose ABORT reached this one).
    pub fn poll_start(&mut self) -> Option<Result<crate::start::StartOutcome, CoreError>> {
        if let Some(e) = &self.failed
            && self.start.is_running()
        {
            self.start.fail(e.clone());
        }
        self.start.take_outcome()
    }

    /// Whether an epoch start is under way.
    pub fn starting(&self) -> bool {
        self.start.is_running()
    }

    fn issue_start(&mut self, out: Vec<crate::start::part::Issue>) {
        for (op, p) in out {
            self.cx.issue(op, Pending::Start(p));
        }
        self.end_failed_start();
    }

    /// A start that failed here fails the node (its ABORT tells the others).
    fn end_failed_start(&mut self) {
        if let Some(Err(e)) = self.start.peek_outcome() {
            let e = e.clone();
            if self.failed.is_none() {
                self.fail(e);
            }
        }
    }

    /// Writes the layout's version word; call once before the first epoch, on every rank,
    /// and let every rank finish before any starts (the driver's barrier).
    pub fn init_memory(&self, mem: &dyn Memory) {
        mem.write(
            Loc::new(seg::TASKS, tasks::MAGIC),
            &layout::LAYOUT_MAGIC.to_le_bytes(),
        );
    }

    /// Whether this node diffuses: `Config::diffusion`, with balancing on (`steal_below`
    /// > 0).
    pub fn diffusion_enabled(&self) -> bool {
        self.cx.cfg.diffusion && self.cx.cfg.steal_below > 0
    }

    /// The ranks whose predicted loads [`Node::start_epoch_predicted`] needs: the overlay
    /// row, or the rank-string neighbours i±1 under the complete graph (O(1)); none when
    /// diffusion is off.
    pub fn diffusion_neighbours(&self) -> Vec<Rank> {
        if !self.diffusion_enabled() {
            return Vec::new();
        }
        diffuse::neighbours(&self.router.victims, self.cx.rank, self.cx.size)
    }

    /// Starts an epoch with this rank's tasks (kind, payload), without predictions (no
    /// diffusion). See [`Node::start_epoch_predicted`].
    pub fn start_epoch<T: Into<NewTask>>(
        &mut self,
        now: Time,
        tasks: Vec<T>,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        self.start_epoch_predicted(now, tasks, None, mem)
    }

    /// Starts an epoch with this rank's tasks ([`NewTask`]: kind, payload, priority; or
    /// `(kind, payload)`) and, for diffusion, their predicted costs and the neighbours'
    /// predicted loads: tasks pushed to neighbours leave before any worker takes one.
    /// Every rank calls it, after a barrier that follows the previous epoch's end on every
    /// rank. Signals that arrived since the previous epoch ended are handled now, in the
    /// new epoch.
    pub fn start_epoch_predicted<T: Into<NewTask>>(
        &mut self,
        now: Time,
        tasks: Vec<T>,
        prediction: Option<&Prediction>,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        if self.running {
            return Err(CoreError::Usage("start_epoch while an epoch is running"));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let tasks: Vec<NewTask> = tasks.into_iter().map(Into::into).collect();
        if let Some((i, t)) = tasks
            .iter()
            .enumerate()
            .find(|(_, t)| t.payload.len() > self.cx.cfg.max_payload as usize)
        {
            return Err(CoreError::PayloadTooLarge {
                index: i as u32,
                len: t.payload.len(),
                limit: self.cx.cfg.max_payload,
            });
        }
        if let Some(p) = prediction
            && (p.costs_ns.len() != tasks.len()
                || !(p.dear.is_empty() || p.dear.len() == tasks.len()))
        {
            return Err(CoreError::Config(format!(
                "{} predicted costs and {} dear flags for {} tasks",
                p.costs_ns.len(),
                p.dear.len(),
                tasks.len()
            )));
        }
        let diffusion = self.diffusion_enabled();
        let neighbours = if diffusion && prediction.is_some() {
            self.diffusion_neighbours()
        } else {
            Vec::new()
        };
        let cx = &mut self.cx;
        cx.now = now;
        cx.started = now;
        cx.epoch += 1;
        self.running = true;
        self.term.start();
        self.results.home.start(tasks.len());
        cx.stats = Stats {
            tasks_owned: tasks.len() as u64,
            ..Stats::default()
        };
        self.thief
            .start_epoch(steal_rng(cx.cfg.seed, cx.rank, Some(cx.epoch)));
        self.owner.start_epoch();
        if let Some(targets) = self.share.start_epoch(cx) {
            self.thief.set_targets(targets);
        }
        let rank = cx.rank;
        self.balanced_start = false;
        let mut tasks: Vec<Task> = tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| Task {
                owner: rank,
                index: i as u32,
                kind: t.kind,
                priority: t.priority,
                cost_ns: if t.cost_hint_ns > 0 {
                    t.cost_hint_ns
                } else {
                    prediction.map_or(0, |p| p.costs_ns[i])
                },
                payload: t.payload,
            })
            .collect();
        if let Some(p) = prediction
            && diffusion
        {
            let predicted = diffuse::predicted_load(&p.costs_ns);
            let costs = diffuse::filled(&p.costs_ns);
            cx.stats.predicted_ns = predicted.unwrap_or(0);
            // A rank whose own tasks were predicted, or that gets pushes (an empty one
            // without either shares on what it steals, as before).
            self.balanced_start = costs.is_some();
            // Only loads of diffusion neighbours count (a driver's extra entries do not).
            let loads: Vec<(Rank, u64)> = p
                .neighbour_loads
                .iter()
                .copied()
                .filter(|(r, _)| neighbours.binary_search(r).is_ok())
                .collect();
            let string = p
                .string
                .as_ref()
                .filter(|_| cx.cfg.diffusion_plan == DiffusionPlan::String);
            // Neighbours that predicted more push here: leave them alone until then.
            if let Some(s) = string {
                let coming = s.receives;
                self.balanced_start |= coming > 0;
                self.thief.expect_push(coming, now, &cx.cfg);
            } else if let Some(mine) = predicted
                && cx.cfg.sharing.is_none()
            {
                let givers: Vec<Rank> = loads
                    .iter()
                    .filter(|&&(_, l)| l > mine)
                    .map(|&(r, _)| r)
                    .collect();
                self.balanced_start |= !givers.is_empty();
                self.thief
                    .hold_for_push(&givers, now, now.plus(cx.cfg.push_wait));
            }
            let max_record = outbound::max_record(&cx.cfg);
            let plan = match string {
                Some(s) => {
                    let (plan, dear) =
                        diffuse::string_plan(&mut tasks, &p.costs_ns, &p.dear, s, max_record);
                    cx.stats.tasks_pushed_dear = dear as u64;
                    plan
                }
                None => diffuse::plan(
                    &mut tasks,
                    &p.costs_ns,
                    &loads,
                    neighbours.len(),
                    max_record,
                ),
            };
            for (to, batch) in plan {
                // A diffusion neighbour is an out-neighbour; the string plan's receivers
                // are reached through the overlay, as results are.
                let Some(hop) = self.router.next_hop(cx.cfg.routing, rank, to) else {
                    return Err(CoreError::Config(format!(
                        "no route from rank {rank} to rank {to}"
                    )));
                };
                cx.stats.tasks_pushed += batch.len() as u64;
                cx.stats.pushed_ns = batch
                    .iter()
                    .fold(cx.stats.pushed_ns, |s, t| s.saturating_add(t.predicted_ns));
                self.results.out.push_tasks(hop, &batch);
            }
            // Dear tasks first (longest processing time first): the end of the epoch is
            // then made of cheap tasks, which split finely between the ranks that finish.
            // By the best estimate: the caller's hint where it gave one, else the
            // prediction.
            // (Unstable, ties by index: the same order as a stable sort of tasks in index
            // order, without its buffer; 8,192 tasks a step on the solver's critical path.)
            if let Some(costs) = costs {
                tasks.sort_unstable_by_key(|t| {
                    let c = if t.cost_ns > 0 {
                        t.cost_ns
                    } else {
                        costs[t.index as usize]
                    };
                    (std::cmp::Reverse(c), t.index)
                });
            }
        }
        // After a balanced start the queue (or the pushes it receives) is in predicted
        // order, dearest first: it shares its cheap end.
        self.queue.start(tasks.into(), self.balanced_start);
        for (from, value) in std::mem::take(&mut self.early) {
            self.handle_signal(now, from, value, mem);
        }
        self.drive(mem);
        Ok(())
    }

    /// The next command to perform, if any.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.cx.poll_command()
    }

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.failed.is_none() && self.start.is_running() {
            return self.start.poll_timeout();
        }
        if !self.running || self.failed.is_some() || self.term.is_done() {
            return None;
        }
        let cfg = &self.cx.cfg;
        [
            self.steals()
                .then(|| {
                    self.thief
                        .deadline(self.queue.len(), self.short_types(), cfg)
                })
                .flatten(),
            self.owner
                .deadline(&self.queue, cfg, self.thief.push_hold(self.cx.now)),
            self.results.deadline(),
            self.term.grace_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether the epoch is over here: termination was detected and this rank's last
    /// operations completed (or the epoch failed).
    pub fn is_done(&self) -> bool {
        self.failed.is_some()
            || (self.term.is_done() && self.cx.in_flight() == 0 && !self.cx.has_commands())
    }

    /// A liveness sweep's finding at `now` (`gone`: a peer whose process is gone, and
    /// why; `None`: every peer alive), after the signals that arrived were fed (a peer
    /// that sent the end and exited is not a failure). A rank that has DONE, or the root
    /// that decided it, ignores it: what is left is forwarding DONE. One that waits only
    /// for DONE gives it [`crate::DONE_GRACE`]: the peer may have had DONE already (it
    /// travels down the tree, to other subtrees first). Any other fails the epoch now.
    pub fn peers_swept(&mut self, now: Time, gone: Option<(Rank, String)>) {
        if self.start.is_running() {
            // Every peer takes part in a start: one gone fails it.
            if let Some((peer, why)) = gone {
                self.fail_peer_gone(peer, why);
            }
            return;
        }
        if self.is_done() || self.termination_detected() {
            return;
        }
        if let Some((peer, why)) = self.term.gone_verdict(now, gone) {
            self.fail_peer_gone(peer, why);
        }
    }

    /// Whether this rank learned that the epoch is over (DONE reached it, or it is the
    /// root and saw every rank complete); its last operations may still be in flight.
    pub fn termination_detected(&self) -> bool {
        self.running && self.term.is_done()
    }

    /// Results of this rank's own tasks that are home, and how many tasks it owns.
    pub fn results_home(&self) -> (u32, u32) {
        self.results.home.counts()
    }

    /// The error that ended the epoch, if one did.
    pub fn error(&self) -> Option<&CoreError> {
        self.failed.as_ref()
    }

    /// This epoch's figures so far.
    pub fn stats(&self) -> &Stats {
        &self.cx.stats
    }

    /// One sentence for a user whose epoch did not end: what this rank still waits for
    /// (its own tasks' results, its termination-tree children's reports, the end announced
    /// by rank 0, or its last remote operations). [`Node::debug_summary`] has the details.
    pub fn stall(&self) -> String {
        use crate::termination::Waiting;
        let me = self.cx.rank;
        if let Some(e) = &self.failed {
            return format!("rank {me} failed: {e}");
        }
        if let Some(s) = self.start.describe() {
            return s;
        }
        if !self.running {
            return format!("rank {me} is not in an epoch");
        }
        let (home, own) = self.results.home.counts();
        let ops: Vec<&str> = self.cx.pending().map(|p| self.describe(p).0).collect();
        let ops = if ops.is_empty() {
            String::new()
        } else {
            let mut names = ops.clone();
            names.sort_unstable();
            names.dedup();
            format!(
                "; {} of its remote operations are in flight ({})",
                ops.len(),
                names.join(", ")
            )
        };
        let waiting = self.term.waiting_for(me, self.cx.size);
        let what = if home < own {
            format!(
                "rank {me} waits for the results of {} of its {own} tasks (not run yet, or run elsewhere and not home)",
                own - home
            )
        } else {
            match waiting {
                Waiting::Nothing => {
                    format!("rank {me} saw the epoch end and waits for its last remote operations")
                }
                Waiting::Done(p) => format!(
                    "rank {me} and the ranks below it have finished; it waits for the end to reach it through rank {p}, so other ranks have not finished"
                ),
                Waiting::Up(c) if c.is_empty() => {
                    format!("rank {me} has all its results and is about to report")
                }
                Waiting::Up(c) => format!(
                    "rank {me} has all its results but waits for {} {} to report finishing (each for the ranks below it in the termination tree)",
                    if c.len() == 1 { "rank" } else { "ranks" },
                    c.iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            }
        };
        format!("{what}{ops}")
    }

    /// Loads the state that handling an input reads first, for a driver that holds many
    /// nodes and knows which comes next (the simulator: at 100,000 ranks each event's node
    /// is out of the cache, and touching it an event or two early overlaps the misses with
    /// other work). The value means nothing.
    pub fn touch(&self) -> usize {
        self.cx.touch()
            + self.queue.len()
            + usize::from(self.running)
            + usize::from(self.term.is_done())
            + self.results.home.counts().0 as usize
    }

    /// One line of state, for diagnosing a stalled epoch.
    pub fn debug_summary(&self) -> String {
        let (home, own) = self.results.home.counts();
        format!(
            "rank {}: epoch {} running {} done {} failed {} home {}/{} queue {} hungry {} {} in-flight {:?} {}{} outs [{}] inbox {}",
            self.cx.rank,
            self.cx.epoch,
            self.running,
            self.term.is_done(),
            self.failed.is_some(),
            home,
            own,
            self.queue.len(),
            self.queue.hungry,
            self.term.summary(),
            self.cx
                .pending()
                .map(|p| self.describe(p).0)
                .collect::<Vec<_>>(),
            self.thief.summary(),
            self.owner.summary(),
            self.results.out.summary(&self.router.victims),
            self.results.inbox.summary(),
        )
    }

    /// Whether this rank expects remote operations soon (it shares work during an epoch):
    /// a driver polling a fabric keeps its naps short then.
    pub fn expects_remote_ops(&self) -> bool {
        self.running
            && !self.term.is_done()
            && self.failed.is_none()
            && (self.owner.is_sharing(&self.queue, &self.cx.cfg) || self.share.is_master(&self.cx))
    }

    /// Whether this rank waits for another's answer (a steal is under way): a driver
    /// polling a fabric keeps its naps short then.
    pub fn awaits_remote(&self) -> bool {
        self.running && !self.term.is_done() && self.failed.is_none() && self.thief.is_stealing()
    }

    /// Whether commands wait to be polled.
    pub fn has_commands(&self) -> bool {
        self.cx.has_commands()
    }

    /// The driver failed (its fabric broke): fail the epoch with `detail`.
    pub fn fail_from_driver(&mut self, detail: String) {
        self.fail(CoreError::Remote {
            op: "progress",
            peer: self.cx.rank,
            detail,
        });
    }

    /// The driver learnt that `peer`'s process is gone (in words: `detail`) while this rank
    /// waited: the epoch fails, naming it.
    pub fn fail_peer_gone(&mut self, peer: Rank, detail: String) {
        self.fail(CoreError::Remote {
            op: "liveness",
            peer,
            detail,
        });
    }

    /// Operations in flight.
    pub fn in_flight(&self) -> usize {
        self.cx.in_flight()
    }

    /// Ends the epoch: this rank's results, in task order.
    pub fn take_results(&mut self) -> Result<Vec<Vec<u8>>, CoreError> {
        self.take_epoch_results().map(|r| r.results)
    }

    /// Ends the epoch: this rank's results and their tasks' measured costs, in task order.
    pub fn take_epoch_results(&mut self) -> Result<EpochResults, CoreError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.is_done() {
            return Err(CoreError::Usage("take_results before the epoch ended"));
        }
        self.running = false;
        let (results, costs_ns) = self.results.home.take()?;
        Ok(EpochResults { results, costs_ns })
    }

    /// Tasks queued here now.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// A worker's grain of tasks: `min` from the front, then more while their estimated
    /// costs sum within `budget_ns`, at most `max` (tasks of unknown cost one at a time
    /// beyond `min`: they may be long, and what a worker holds no other rank can steal).
    pub fn take_grain(
        &mut self,
        now: Time,
        min: usize,
        max: usize,
        budget_ns: u64,
        mem: &dyn Memory,
    ) -> Vec<Task> {
        let out = self.take_with(now, true, mem, |q| q.take_front_within(min, max, budget_ns));
        if !out.is_empty() {
            self.cx.stats.grains += 1;
        }
        out
    }

    /// Up to `max` tasks of the kinds in `set` (a resource's variants; None: any) from the
    /// front of the queue; tasks of other kinds keep their places.
    pub fn take_tasks_for(
        &mut self,
        now: Time,
        max: usize,
        set: &crate::resources::KindSet,
        mem: &dyn Memory,
    ) -> Vec<Task> {
        self.take_with(now, set.is_none(), mem, |q| q.take_front_of(max, set))
    }

    /// Takes what `take` takes from the queue for this rank's workers or resources, then
    /// drives the node. Hungry: the workers found nothing at all (`any`: they could run
    /// any kind) — not a resource that found nothing of its kinds while other work waits.
    fn take_with(
        &mut self,
        now: Time,
        any: bool,
        mem: &dyn Memory,
        take: impl FnOnce(&mut Queue) -> Vec<Task>,
    ) -> Vec<Task> {
        self.cx.now = now;
        if !self.running || self.failed.is_some() {
            return Vec::new();
        }
        let out = take(&mut self.queue);
        self.queue.hungry =
            out.is_empty() && (any || self.queue.is_empty()) && !self.term.is_done();
        self.drive(mem);
        out
    }

    /// The resource types (bits of `Config::resource_types`) this rank has (`mine`) and
    /// those with an idle instance now (`idle`): the driver states them whenever they
    /// change. A type whose idle instances find no queued task of its kinds — or, once
    /// the queue runs dry, any type of this rank's — is short, and the thief asks for its
    /// work. Without a statement (`mine` 0) a thief asks for any work, as without types.
    pub fn set_resource_types(&mut self, now: Time, mine: u64, idle: u64, mem: &dyn Memory) {
        self.cx.now = now;
        if (mine, idle) == (self.types_mine, self.types_idle) {
            return;
        }
        self.types_mine = mine;
        self.types_idle = idle & mine;
        // What this rank's own resources run: the union of its types' kinds.
        let types = &self.cx.cfg.resource_types;
        let mut local = Some(Vec::new());
        // (At most TYPES_MAX types: `Node::new` checked.)
        for (t, set) in types.iter().enumerate() {
            if mine >> t & 1 == 1 {
                match (set, &mut local) {
                    (None, _) => local = None,
                    (Some(ks), Some(l)) => l.extend(ks),
                    _ => {}
                }
            }
        }
        self.queue.local = if mine == 0 { None } else { local };
        self.drive(mem);
    }

    /// The short resource types ([`Node::set_resource_types`]), as a mask.
    fn short_types(&self) -> u64 {
        let types = &self.cx.cfg.resource_types;
        if types.is_empty() || self.types_mine == 0 {
            return 0;
        }
        let dry = self.queue.len() < self.cx.cfg.steal_below as usize;
        let mut short = 0;
        for (t, set) in types.iter().enumerate() {
            let bit = 1u64 << t;
            let wants = self.types_idle & bit != 0 || (dry && self.types_mine & bit != 0);
            // A type that runs nothing (CPUs that run no kind here) never asks.
            let runs_something = set.as_ref().is_none_or(|k| !k.is_empty());
            if wants && runs_something && !self.queue.holds_any(set) {
                short |= bit;
            }
        }
        short
    }

    /// A worker finished `task` (owner, index, kind) with `result` (or failed it with a
    /// message); it ran for `cost_ns` (measured by the driver; it travels home with the
    /// result, and the mapper hears of it).
    pub fn task_done(
        &mut self,
        now: Time,
        (owner, index, kind): (Rank, u32, u16),
        result: Result<Vec<u8>, String>,
        cost_ns: u64,
        mem: &dyn Memory,
    ) {
        self.cx.now = now;
        if self.failed.is_some() {
            return;
        }
        let rank = self.cx.rank;
        self.queue.mapper.task_finished(&Profile {
            kind,
            owner,
            index,
            rank,
            duration_ns: cost_ns,
        });
        self.cx.stats.tasks_run += 1;
        if owner != rank {
            self.cx.stats.tasks_run_for_others += 1;
        }
        match result {
            Err(detail) => self.fail(CoreError::TaskFailed {
                owner,
                index,
                ran_on: rank,
                detail,
            }),
            Ok(data) if data.len() > self.cx.cfg.max_result as usize => {
                self.fail(CoreError::ResultTooLarge {
                    index,
                    len: data.len(),
                    limit: self.cx.cfg.max_result,
                })
            }
            Ok(data) => {
                let rec = layout::ResultRecord {
                    owner,
                    index,
                    cost_ns,
                    data,
                };
                if let Err(e) = self
                    .results
                    .route(&mut self.cx, &mut self.router, rec, 0, rank)
                {
                    self.fail(e);
                }
            }
        }
        self.drive(mem);
    }

    /// A command completed: `Ok(value)` (an atomic's previous value, else 0) or a failure.
    pub fn handle_completion(
        &mut self,
        now: Time,
        token: Token,
        result: Result<u64, OpFailure>,
        mem: &dyn Memory,
    ) {
        self.cx.now = now;
        let Some(p) = self.cx.complete(token) else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let value = match result {
            Ok(v) => v,
            Err(f) if f.peer_gone && self.gone_tolerated(&p, &f.detail, mem) => {
                self.drive(mem);
                return;
            }
            Err(f) => {
                let (op, peer) = self.describe(&p);
                self.fail(CoreError::Remote {
                    op,
                    peer,
                    detail: f.detail,
                });
                return;
            }
        };
        if let Pending::Start(p) = p {
            let mut out = Vec::new();
            self.start.on_complete(now, p, mem, &mut out);
            self.issue_start(out);
            return;
        }
        let closed = self.closed();
        let cx = &mut self.cx;
        let r = match p {
            Pending::Thief(t) => match self.thief.complete(cx, t, value, mem) {
                Ok(Some(stolen)) => {
                    self.take_stolen(stolen);
                    Ok(())
                }
                other => other.map(drop),
            },
            Pending::Owner(o) => self
                .owner
                .complete(cx, o, value, &mut self.queue, mem, closed),
            Pending::Out(o) => {
                self.results
                    .out
                    .complete(cx, &self.router.victims, o, value);
                Ok(())
            }
            Pending::Inbox(i) => {
                self.results.inbox.complete(cx, i, value);
                Ok(())
            }
            // Signals: nothing to do once they are delivered.
            Pending::Share(_) | Pending::Term(_) | Pending::Abort => Ok(()),
            Pending::Start(_) => unreachable!("handled above"),
        };
        if let Err(e) = r {
            self.fail(e);
        }
        self.drive(mem);
    }

    /// A signal from `from` arrived.
    pub fn handle_signal(&mut self, now: Time, from: Rank, value: u64, mem: &dyn Memory) {
        self.cx.now = now;
        if from >= self.cx.size {
            return; // Not a rank: dropped (the transport already checks).
        }
        // Decoded before anything else only to let an ABORT through at any time; a word
        // that does not decode fails the epoch it belongs to.
        let sig = match Signal::unpack(value, from) {
            Ok(Signal::Abort { origin, code }) => {
                self.on_abort(from, origin, code);
                return;
            }
            other => other,
        };
        if self.failed.is_some() {
            return;
        }
        if let Ok(Signal::Start {
            start,
            step,
            round,
            len,
        }) = sig
        {
            let mut out = Vec::new();
            let r = self
                .start
                .on_signal(now, from, start, step, round, len, mem, &mut out);
            self.issue_start(out);
            if let Err(e) = r {
                self.fail(e);
            }
            return;
        }
        if !self.running {
            self.early.push((from, value));
            return;
        }
        let r = sig.and_then(|sig| self.dispatch_signal(from, sig, mem));
        if let Err(e) = r {
            self.fail(e);
        }
        self.drive(mem);
    }

    /// Timers: call when [`Node::poll_timeout`] has passed.
    pub fn handle_timeout(&mut self, now: Time, mem: &dyn Memory) {
        self.cx.now = now;
        if self.start.is_running() && self.failed.is_none() {
            let mut out = Vec::new();
            self.start.on_timeout(now, mem, &mut out);
            self.issue_start(out);
            return;
        }
        if self.failed.is_none()
            && let Some((peer, why)) = self.term.grace_over(now)
        {
            self.fail_peer_gone(peer, why);
        }
        self.drive(mem);
    }

    /// Hands a decoded signal to the part it concerns.
    fn dispatch_signal(
        &mut self,
        from: Rank,
        sig: Signal,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        let closed = self.closed();
        let cx = &mut self.cx;
        match sig {
            Signal::Start { .. } => unreachable!("the start's signals are handled first"),
            Signal::Chunk { .. } | Signal::Overflow { .. } | Signal::Reset => {
                let (pushed, last) =
                    self.results
                        .on_signal(cx, &mut self.router, from, sig, mem)?;
                if !pushed.is_empty() {
                    if self.term.is_done() {
                        // Termination needs every result home: a task cannot still travel.
                        return Err(CoreError::Malformed {
                            from,
                            what: format!("{} tasks pushed after the epoch ended", pushed.len()),
                        });
                    }
                    // The neighbours' plan holds its givers until their last chunk; under
                    // the string plan `from` may be a rank passing tasks on (below).
                    if cx.cfg.diffusion_plan == DiffusionPlan::Neighbours {
                        self.thief.push_arrived(from, last, cx.now, &cx.cfg);
                    }
                    // Tasks for other ranks (the string plan) go on towards them.
                    let (mine, on): (Vec<PushedTask>, Vec<PushedTask>) =
                        pushed.into_iter().partition(|p| p.dest == cx.rank);
                    for p in on {
                        let Some(hop) = self.router.next_hop(cx.cfg.routing, cx.rank, p.dest)
                        else {
                            return Err(CoreError::Config(format!(
                                "no route from rank {} to rank {}",
                                cx.rank, p.dest
                            )));
                        };
                        cx.stats.tasks_forwarded += 1;
                        self.results.out.push_tasks(hop, std::slice::from_ref(&p));
                    }
                    if !mine.is_empty() {
                        if cx.stats.tasks_pushed_in == 0 {
                            cx.stats.pushed_in_at_ns = cx.now.since(cx.started).as_nanos() as u64;
                        }
                        cx.stats.tasks_pushed_in += mine.len() as u64;
                        // Estimates read from another rank: summed without trusting them.
                        let ns = mine
                            .iter()
                            .fold(0u64, |s, p| s.saturating_add(p.predicted_ns));
                        self.thief.pushed_here(ns, cx.now, &cx.cfg);
                        self.take_stolen(mine.into_iter().map(|p| p.task).collect());
                    }
                }
                Ok(())
            }
            Signal::Request {
                epoch,
                seq,
                hungry,
                rtype,
            } => {
                let stale = epoch != cx.epoch & EPOCH_MASK;
                if cx.cfg.sharing.is_some() && !stale {
                    if !self.share.is_master(cx) {
                        return Err(CoreError::Malformed {
                            from,
                            what: "a steal request to a rank that is not its group's master".into(),
                        });
                    }
                    if self.share.broker(cx, from, seq, &self.queue) == Decision::Forwarded {
                        return Ok(());
                    }
                }
                self.owner.on_request(
                    cx,
                    (from, stale, seq, hungry, rtype),
                    &mut self.queue,
                    mem,
                    closed,
                );
                Ok(())
            }
            Signal::Reply {
                tasks,
                seq,
                unsupported,
            } => {
                if let Some(stolen) = self
                    .thief
                    .on_reply(cx, from, tasks, seq, unsupported, mem)?
                {
                    self.take_stolen(stolen);
                }
                Ok(())
            }
            Signal::Load { .. } | Signal::Forward { .. } => {
                if let Some(r) = self.share.on_signal(cx, from, sig)? {
                    self.owner.on_request(cx, r, &mut self.queue, mem, closed);
                }
                Ok(())
            }
            Signal::Refill => {
                self.owner.on_refill(cx);
                Ok(())
            }
            Signal::Wait { epoch, hungry } => {
                self.owner.on_wait(cx, from, epoch, hungry);
                Ok(())
            }
            Signal::Advert { epoch, .. } => {
                self.thief.on_advert(cx, from, epoch);
                Ok(())
            }
            Signal::Up => self.term.on_up(cx, from),
            Signal::Done => {
                if self.term.on_done(cx, from)? {
                    self.queue.hungry = false;
                }
                Ok(())
            }
            Signal::Abort { .. } => Ok(()), // Handled in `handle_signal`.
        }
    }

    /// Stolen tasks join the queue; the owner side will share half of them on.
    fn take_stolen(&mut self, tasks: Vec<Task>) {
        self.queue.extend(tasks);
        self.queue.hungry = false;
        self.owner.work_arrived(self.cx.now);
    }

    /// An operation's name and target, for an error.
    fn describe(&self, p: &Pending) -> (&'static str, Rank) {
        let me = self.cx.rank;
        match p {
            Pending::Thief(t) => (t.name(), self.thief.peer(t)),
            Pending::Owner(o) => (o.name(), o.peer(me)),
            Pending::Share(s) => (s.name(), me),
            Pending::Out(o) => (o.name(), o.peer(&self.router.victims, me)),
            Pending::Inbox(i) => (i.name(), me),
            Pending::Term(t) => (t.name(), me),
            Pending::Start(s) => (s.name(), s.peer()),
            Pending::Abort => ("abort", me),
        }
    }

    /// Whether an operation that failed because its peer's process is gone (`detail`)
    /// may leave the epoch standing. Once this rank learned the end (DONE, or the root's
    /// decision: every result is home) nothing of the epoch needs the peer. While it
    /// waits only for DONE, the thief it stole from, answered or advertised to, or the
    /// rank of work sharing it reported to, may have had DONE already and exited (DONE
    /// travels down the tree, other subtrees first; a program may return without a
    /// collective end): a steal ends empty and its victim is asked no more, and DONE gets
    /// [`crate::DONE_GRACE`] — if it does not come the epoch fails naming the peer. A
    /// peer that died holding tasks or results never lets DONE come, so nothing is lost.
    /// Any other failure (results on their way, UP to the parent: that peer cannot have
    /// had DONE) fails the epoch now.
    fn gone_tolerated(&mut self, p: &Pending, detail: &str, mem: &dyn Memory) -> bool {
        if self.term.is_done() {
            self.cx.stats.gone_tolerated += 1;
            return true;
        }
        if !self.term.awaits_done() {
            return false;
        }
        let (op, peer) = self.describe(p);
        match p {
            Pending::Thief(t) => self.thief.abandon(&mut self.cx, t),
            Pending::Owner(owner::Pending::Reply { thief }) => {
                // Its tasks, if any, are lost with the thief (then DONE cannot come):
                // on to the next request.
                let closed = self.closed();
                let o = owner::Pending::Reply { thief: *thief };
                if let Err(e) =
                    self.owner
                        .complete(&mut self.cx, o, 0, &mut self.queue, mem, closed)
                {
                    self.fail(e);
                }
            }
            Pending::Owner(owner::Pending::Advert { .. }) | Pending::Share(_) => {}
            _ => return false,
        }
        self.term
            .op_gone(self.cx.now, peer, format!("{op} failed: {detail}"));
        self.cx.stats.gone_tolerated += 1;
        true
    }

    /// The epoch failed, ended here, or is not running: no new work to hand out.
    fn closed(&self) -> bool {
        self.failed.is_some() || self.term.is_done() || !self.running
    }

    /// Stops the epoch with `e` and tells the other ranks.
    fn fail(&mut self, e: CoreError) {
        if self.failed.is_some() {
            return;
        }
        let code = e.code();
        let origin = match &e {
            CoreError::Aborted { rank, .. } => *rank,
            _ => self.cx.rank,
        };
        self.start.fail(e.clone());
        self.failed = Some(e);
        self.flood_abort(origin, code, None);
    }

    fn flood_abort(&mut self, origin: Rank, code: u32, except: Option<Rank>) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        let (rank, size) = (self.cx.rank, self.cx.size);
        self.cx.drop_commands();
        let mut to: Vec<Rank> = tree_children(rank, size)
            .chain(tree_parent(rank))
            .chain(self.router.victims.flood_targets())
            .collect();
        to.sort_unstable();
        to.dedup();
        let sig = Signal::Abort {
            origin,
            code: (code & 0xffff) as u16,
        };
        for r in to {
            if Some(r) != except && r != rank {
                self.cx.signal(r, sig, Pending::Abort);
            }
        }
    }

    fn on_abort(&mut self, from: Rank, origin: Rank, code: u16) {
        // A rank outside the job is not trusted, but the epoch fails all the same.
        let origin = origin.min(self.cx.size.saturating_sub(1));
        let code = u32::from(code);
        if self.failed.is_none() {
            let e = CoreError::Aborted { rank: origin, code };
            self.start.fail(e.clone());
            self.failed = Some(e);
        }
        self.flood_abort(origin, code, Some(from));
    }

    /// Decides what to do next after any input.
    fn drive(&mut self, mem: &dyn Memory) {
        if self.failed.is_some() || !self.running {
            return;
        }
        self.termination_step();
        if self.term.is_done() {
            return;
        }
        let closed = self.closed();
        let cx = &mut self.cx;
        self.thief.set_hungry(cx, self.queue.hungry);
        let hold = self.thief.push_hold(cx.now);
        self.owner.step(cx, &mut self.queue, mem, closed, hold);
        let steals = self.steals();
        let short = self.short_types();
        let cx = &mut self.cx;
        if steals
            && let Some(seq) = self
                .thief
                .step(cx, self.queue.len(), short, &mut *self.queue.mapper)
        {
            // This rank is its group's master and brokers its own request; nobody to ask
            // ends the attempt at once.
            if self.share.broker(cx, cx.rank, seq, &self.queue) != Decision::Forwarded {
                self.thief.end_unanswered(cx);
            }
        }
        // A rank whose queue ran dry while a steal is under way is not idle yet: its
        // results wait for the answer (flushing now, a thief sent a chunk per batch it
        // stole, and each chunk's three operations cost a tcp victim's core ~50 µs).
        let idle = self.queue.is_empty() && !self.thief.is_stealing();
        self.results.step(cx, &self.router, mem, idle);
        self.share
            .step(cx, self.queue.len(), self.thief.has_targets());
        self.termination_step();
    }

    /// Whether the thief may look for work now. After a balanced start (diffusion from
    /// predictions) its own published tasks are this rank's reserve: it takes them back
    /// when its workers run dry, and steals only once they are gone — two ranks with
    /// equal work would otherwise trade their published halves. Without predictions it
    /// steals ahead as before: a loaded owner's set is mostly claimed by then, and
    /// waiting for its next look at the word cost 1% at 3,584 simulated ranks. Its
    /// deadline counts only when it may ([`Node::poll_timeout`]): a thief that would
    /// steal but may not must not wake the rank over and over.
    fn steals(&self) -> bool {
        !(self.balanced_start && self.owner.has_published())
    }

    fn termination_step(&mut self) {
        if self.term.step(&mut self.cx, self.results.home.complete()) {
            self.queue.hungry = false;
        }
    }
}
