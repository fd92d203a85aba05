//! The event loop: the simulated job's state, its queue of events, and each event's
//! handling.

mod epoch;
mod fabric;
mod peers;
mod repartition;
mod workers;

use crate::job::*;
use crate::mem::SparseMem;
use crate::model::{self, Model};
use crate::queue::{self, EventQueue};
use crate::time;
use crate::{BetweenEpochs, EachEpoch};
use epoch::{WholeJobPlan, layout_loc, on_start_segment};
use peers::Peers;
pub use repartition::Between;
use repartition::{PlanOutcome, WholeJob};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use titus_core::layout::signal::Signal;
use titus_core::layout::{self, seg, tasks};
use titus_core::repartition::Move;
use titus_core::resources::{ResourceSpec, Resources, Variants, type_bits, type_table};
use titus_core::{
    CostHistory, HeldResults, NewTask, Node, Op, Protocol, Stats, TaskId, Time, Token,
};
use titus_overlay::Overlay;
use titus_overlay::rng::Rng;
use workers::Unreported;

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
        task: TaskId,
        result: Result<Vec<u8>, String>,
        cost: u64,
        /// The resource that ran it (0: a CPU worker).
        res: usize,
        /// The children it spawns (a spawning job), handed over before its result.
        children: Vec<NewTask>,
    },
    /// A running task hands children to its rank before it ends (`TaskCtx::hand_over`).
    Spawn {
        node: u32,
        parent: TaskId,
        children: Vec<NewTask>,
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
            | Ev::TaskDone { node, .. }
            | Ev::Spawn { node, .. } => Some(*node),
        }
    }
}

fn mix(h: u64, x: u64) -> u64 {
    let mut z = (h ^ x).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
    /// the node (as the runtime's workers hold theirs).
    unreported: HeldResults<Unreported>,
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
    /// With [`Job::trace`], per rank: this epoch's task spans, and when each of its
    /// workers' lanes is free (empty without).
    spans: Vec<Vec<[u64; 6]>>,
    lanes: Vec<Vec<u64>>,
    /// What its workers take, hold and report, and its progress threads' waits.
    policy: titus_core::WorkerPolicy,
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
    /// Per rank: its last epoch's reduction of spawned results (a spawning job).
    reduced: Vec<Vec<u64>>,
    /// Per rank: its last epoch's spawned results home (a job that routes them home).
    spawned: Vec<Vec<titus_core::SpawnedResult>>,
    costs: Vec<Vec<u64>>,
    /// Per rank: the last measured cost of each task (by key), across epochs.
    history: Vec<CostHistory>,
    /// Per rank, while its epoch start is under way: its own prediction (the start's
    /// outcome completes it), and when it called the epoch.
    own: Vec<Option<titus_core::start::OwnPrediction>>,
    began: Vec<u64>,
    /// Per rank: a start's outcome waiting for its planning CPU ([`Ev::Begin`]), and the
    /// history CPU its last epoch's end owes its next call.
    /// (Boxed, as `planned`: an outcome is kilobytes, held by few ranks at a time.)
    beginning: Vec<Option<Box<titus_core::start::StartOutcome>>>,
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
    planned: Vec<Option<Box<PlanOutcome>>>,
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

    /// The task `parent` on rank `node` hands the children it spawned to its rank.
    fn hand_spawned(
        &mut self,
        node: u32,
        now: u64,
        parent: TaskId,
        children: Vec<NewTask>,
    ) -> Result<(), Violation> {
        if children.is_empty() {
            return Ok(());
        }
        let i = node as usize;
        match self.nodes[i].spawned(Time(now), parent, children, &self.mems[i]) {
            Ok(()) | Err(titus_core::spawn::SpawnError::Failed(_)) => Ok(()),
            Err(e) => Err(Violation::Broken(format!("rank {node}: {e}"))),
        }
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
            Ev::TaskDone { node, task, .. } => (
                6,
                *node as u64,
                (task.owner as u64) << 32 | task.index as u64,
            ),
            Ev::Spawn { node, children, .. } => (9, *node as u64, children.len() as u64),
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
                        self.tasks()[i].iter().map(|t| t.hint_ns),
                        &self.history[i],
                        None,
                    ),
                };
                self.nodes[i]
                    .begin_start(Time(now), input, &self.mems[i])
                    .map_err(|e| Violation::Broken(format!("rank {node}: start: {e}")))?;
                self.own[i] = Some(own);
                self.after(node, now)?;
            }
            Ev::Begin { node } => {
                let i = node as usize;
                let out = self.beginning[i].take().expect("a start's outcome waits");
                // Told of another rank's failure while it planned: it stops with that
                // error, as the runtime's epoch does.
                if self.nodes[i].error().is_none() {
                    self.begin_epoch(node, now, Ok(*out))?;
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
                        return Err(Violation::Broken(format!(
                            "rank {node} spins: {} timers in a row did nothing and left its deadline at once",
                            self.per[i].idle_wakes
                        )));
                    }
                } else {
                    self.per[i].idle_wakes = 0;
                }
            }
            Ev::Spawn {
                node,
                parent,
                children,
            } => {
                self.hand_spawned(node, now, parent, children)?;
                self.after(node, now)?;
            }
            Ev::TaskDone {
                node,
                task,
                result,
                cost,
                res,
                children,
            } => {
                let i = node as usize;
                if let Some(table) = self.res_mut(i) {
                    table.complete(res);
                }
                // Before its result, as the runtime's workers hand them over.
                self.hand_spawned(node, now, task, children)?;
                if res == 0 {
                    self.per[i].idle += 1;
                    if let Some(ends) = self.task_ends.get_mut(i)
                        && let Some(k) = ends
                            .iter()
                            .position(|e| (e.1, e.2) == (task.owner, task.index))
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
                match self.per[i].grain.front() {
                    // More of the grains to run (no resources here): the result waits to
                    // be reported with the next take from the node — or before a costly
                    // task, or once the oldest held result is a grain old (the runtime's
                    // `report_and_take`).
                    Some(next) if res == 0 => {
                        let next_cost = next.cost_ns;
                        let p = &self.policy;
                        if self.per[i]
                            .unreported
                            .hold((task, result, cost), now, next_cost, p)
                        {
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

/// [`simulate`], calling `between` after every epoch but the last (before the next one
/// starts): a time-stepping driver may then change the next epoch's tasks, e.g. apply a
/// repartition plan ([`Between::repartition_plan`]) as `dlb-bench --repartition` does
/// with the runtime's. The epochs' count is the job's.
pub fn simulate_with(job: &Job<'_>, between: &mut BetweenEpochs<'_>) -> Result<Outcome, Violation> {
    time::check(job)?;
    run_job(job, Cow::Borrowed(&job.tasks), between, None)
}

/// [`simulate_with`], handing each epoch's outcome to `each` as the epoch ends instead of
/// keeping it: [`Outcome::ranks`] and [`Outcome::earlier`] come back empty. A driver that
/// reports an epoch at a time holds one epoch's results, not every epoch's (at 100,000
/// ranks an epoch's results and figures are about a GiB). It takes the job: the first
/// epoch's tasks are dropped once it ends, as every later epoch's are.
pub fn simulate_each(
    mut job: Job<'_>,
    between: &mut BetweenEpochs<'_>,
    each: &mut EachEpoch<'_>,
) -> Result<Outcome, Violation> {
    time::check(&job)?;
    let first = std::mem::take(&mut job.tasks);
    run_job(&job, Cow::Owned(first), between, Some(each))
}

/// Runs `job` with `first` as its first epoch's tasks (the job's own, or taken from it),
/// once its virtual times were checked with them.
fn run_job<'a>(
    job: &'a Job<'a>,
    first: Cow<'a, [Vec<SimTask>]>,
    between: &mut BetweenEpochs<'_>,
    mut each: Option<&mut EachEpoch<'_>>,
) -> Result<Outcome, Violation> {
    let ranks = job.overlay.ranks;
    if first.len() != ranks as usize {
        return Err(Violation::Broken(format!(
            "{} task lists for {ranks} ranks",
            first.len()
        )));
    }
    if job.workers == 0 {
        return Err(Violation::Job("a rank needs at least one worker".into()));
    }
    let n = ranks as usize;
    let mut res = vec![None; n];
    let described = &job.resources.per_rank;
    let cpu_kinds = &job.resources.cpu_kinds;
    if described.len() > n || cpu_kinds.len() > n {
        return Err(Violation::Broken(format!(
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
                    .map_err(|e| Violation::Broken(format!("rank {r}: {e}")))?,
            );
        }
        specs_of.push(specs);
    }
    // Per-type requests where the ranks' resources run different kind sets (one set for
    // all: a starved type is an empty queue, as without types).
    let mut core = job.core.clone();
    // Tracing keeps the failed steals and the chunks too, as the runtime's does (the
    // logs only: no event changes).
    core.timeline |= job.trace;
    core.steal_log |= job.trace;
    let mut types_mine = vec![0u64; n];
    let mut types_of: Vec<Vec<u64>> = vec![Vec::new(); n];
    if res.iter().any(Option::is_some) {
        let table =
            type_table(specs_of.iter().map(Vec::as_slice)).map_err(|e| Violation::Job(e.0))?;
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
    let overlay = Overlay::new(job.overlay.clone()).map_err(|e| Violation::Job(e.to_string()))?;
    let mut nodes = Vec::with_capacity(ranks as usize);
    let mut mems = Vec::with_capacity(ranks as usize);
    for r in 0..ranks {
        let mut n = Node::new(core.clone(), overlay.clone(), r)
            .map_err(|e| Violation::Broken(format!("rank {r}: {e}")))?;
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
    let traced = if job.trace { n } else { 0 };
    let mut sim = Sim {
        job,
        spans: vec![Vec::new(); traced],
        lanes: vec![Vec::new(); traced],
        policy: job.worker_policy(),
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
        runs: first.iter().map(|t| vec![0; t.len()]).collect(),
        own_total: first.iter().map(|t| t.len() as u64).sum(),
        ran_for: first.iter().map(|t| vec![0; t.len()]).collect(),
        current: first,
        keys: vec![Vec::new(); n],
        done_count: 0,
        peers: None,
        contacts: vec![Vec::new(); n],
        connect_ns: vec![0; n],
        home_total: 0,
        slow,
        events: 0,
        activity: 0,
        trace: job.seed,
        lock_check: job.core.protocol == Protocol::Lock && job.core.sharing.is_none(),
        stats: vec![Stats::default(); n],
        results: vec![Vec::new(); n],
        reduced: vec![Vec::new(); n],
        spawned: vec![Vec::new(); n],
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
    for epoch in 0..=job.later_count() {
        sim.start_epoch(now)?;
        now = sim.run_epoch(stall)?;
        let ranks = sim.finish_epoch(epoch)?;
        if let Some(each) = each.as_deref_mut() {
            each(epoch, ranks)
                .map_err(|e| Violation::Broken(format!("after epoch {}: {e}", epoch + 1)))?;
        } else if epoch > 0 {
            out.earlier.push(std::mem::replace(&mut out.ranks, ranks));
        } else {
            out.ranks = ranks;
        }
        out.end_ns = sim.per.iter().filter_map(|p| p.end).max().unwrap_or(0);
        if epoch < job.later_count() {
            sim.clock = now;
            let tasks = between(&Between {
                epoch,
                sim: std::cell::RefCell::new(&mut sim),
            });
            now = sim.clock;
            let tasks = tasks.map_err(|e| {
                Violation::Broken(format!(
                    "between epochs {} and {}: {e}",
                    epoch + 1,
                    epoch + 2
                ))
            })?;
            if tasks.is_none() && epoch >= job.later_epochs.len() {
                return Err(Violation::Broken(format!(
                    "epoch {}: the driver supplied no tasks (Job::later_epochs_supplied)",
                    epoch + 2
                )));
            }
            sim.next_epoch(tasks);
        }
    }
    out.events = sim.events;
    out.trace = sim.trace;
    out.plans_checked = sim.plans_checked;
    Ok(out)
}
