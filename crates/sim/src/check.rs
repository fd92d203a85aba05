//! Deterministic simulation testing: one seed draws a small job (ranks, balancer,
//! protocol, sizes tight enough to force inbox overflows and empty steals, workload,
//! fabric preset) and faults (jitter that reorders operations, slow ranks, a rank whose
//! progress stalls, ranks that exit right after the end, a resource that fails a
//! submission), runs it, and checks every invariant of [`crate::simulate`]. A run whose
//! injected failure stopped every rank with an error, no task run twice, passes.
//!
//! Two families of seeds:
//! - [`check_seed`] (`titus sim --check`): one epoch, every rank starting at once, the
//!   scheme drawn too;
//! - [`check_epochs_seed`] (`tests/epochs.rs`): the same draws from another key for a given
//!   scheme ([`EPOCH_SCHEMES`]: every steal protocol and both work-sharing schemes), then
//!   two or three epochs of tasks and ranks starting each one at different times, so
//!   requests of one epoch reach ranks already in, or not yet in, the next. Later epochs
//!   keep most tasks' costs (keys are indices: some vanish, some are new, most repeat), so
//!   ranks predict their loads and diffusion pushes batches (on in most seeds); pushed
//!   chunks race with steals, inbox overflows and ranks that have not started yet.

use crate::{
    Between, Faults, Job, Model, RankOutcome, SimTask, Violation, failed_everywhere, simulate_with,
};
use rand::RngExt as _;
use rand_distr::Exp1;
use std::time::Duration;
use titus_core::{Balancing, Config, Protocol, Routing};
use titus_overlay::rng::Rng;
use titus_overlay::{LatticeKind, OverlayParams, ShortcutDraw};

/// The result of a task in checks: a hash of its payload.
pub fn check_result(payload: &[u8]) -> Vec<u8> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in payload {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h.to_le_bytes().to_vec()
}

/// Levels of children a checker's spawning task may have below it.
const SPAWN_DEPTH: u8 = 3;

/// The checker's spawning tasks: every task spawns 0 to 2 children (drawn from its
/// payload's hash) while fewer than [`SPAWN_DEPTH`] levels lie above it; a child's
/// payload is `S`, its depth, its parent's hash and its place (11 bytes: within the
/// checker's 24-byte payloads), and its key is its payload's hash. A spawned task runs 1
/// to 200 µs and returns (1, its hash): summed over the job, its count and a checksum
/// that a lost or duplicated task changes.
pub fn check_spawn(payload: &[u8], _queued: usize) -> crate::Spawned {
    let h = hash_of(payload);
    crate::Spawned {
        result: titus_core::spawn::Spawning::encode(&[1, h]),
        ..check_spawn_home(payload, 0)
    }
}

/// [`check_spawn`] in a job that sends results home: a spawned task returns its hash,
/// its key.
fn check_spawn_home(payload: &[u8], _queued: usize) -> crate::Spawned {
    let h = u64::from_le_bytes(check_result(payload).try_into().expect("8 bytes"));
    let depth = match payload {
        [b'S', d, ..] if payload.len() == 11 => *d,
        _ => 0,
    };
    let k = if depth < SPAWN_DEPTH { (h >> 8) % 3 } else { 0 };
    crate::Spawned {
        cost_ns: 1_000 + (h >> 16) % 200_000,
        children: (0..k as u8)
            .map(|i| {
                let mut p = vec![b'S', depth + 1];
                p.extend_from_slice(&h.to_le_bytes());
                p.push(i);
                titus_core::NewTask {
                    key: hash_of(&p),
                    payload: p,
                    ..titus_core::NewTask::default()
                }
            })
            .collect(),
        result: h.to_le_bytes().to_vec(),
        early: None,
    }
}

fn hash_of(payload: &[u8]) -> u64 {
    u64::from_le_bytes(check_result(payload).try_into().expect("8 bytes"))
}

/// The hashes of the spawned tasks below an epoch task with `payload` (each spawned
/// task's key, and its result's second lane), in tree order.
fn hashes_below(payload: &[u8], out: &mut Vec<u64>) {
    for c in check_spawn(payload, 0).children {
        out.push(c.key);
        hashes_below(&c.payload, out);
    }
}

/// Checks one epoch's spawned results on every rank against the trees below its
/// `tasks`: the job's reduction on every rank, or each rank's results home, once each
/// with its key.
fn check_spawned(tasks: &[Vec<SimTask>], ranks: &[RankOutcome], home: bool) -> Result<(), String> {
    let below: Vec<Vec<u64>> = tasks
        .iter()
        .map(|ts| {
            let mut v = Vec::new();
            ts.iter().for_each(|t| hashes_below(&t.payload, &mut v));
            v.sort_unstable();
            v
        })
        .collect();
    let n = below.iter().map(Vec::len).sum::<usize>() as u64;
    let sum = below.iter().flatten().fold(0u64, |s, &h| s.wrapping_add(h));
    for (r, out) in ranks.iter().enumerate() {
        if home {
            let keys: Vec<u64> = out.spawned.iter().map(|s| s.key).collect();
            if keys != below[r] {
                return Err(format!(
                    "rank {r}: {} spawned results home, {} spawned below its tasks, or other keys",
                    keys.len(),
                    below[r].len()
                ));
            }
            if let Some(s) = out.spawned.iter().find(|s| s.data != s.key.to_le_bytes()) {
                return Err(format!(
                    "rank {r}: key {} came home with another task's result",
                    s.key
                ));
            }
        } else if out.reduced != [n, sum] {
            return Err(format!(
                "rank {r}: the reduction of spawned results is {:?}, the {n} tasks spawned give [{n}, {sum}]",
                out.reduced
            ));
        }
    }
    Ok(())
}

/// What a seed drew, in words.
#[derive(Debug, Clone)]
pub struct Drawn {
    /// One line describing the job.
    pub what: String,
    /// Events the run took.
    pub events: u64,
    /// The trace hash.
    pub trace: u64,
    /// What the run exercised, over every epoch and rank.
    pub exercised: Exercised,
}

/// Paths a run went through (a suite asserts that each was taken).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exercised {
    /// Successful steals (under work sharing: tasks handed out).
    pub steals_ok: u64,
    /// Steals that found the victim empty or locked.
    pub steals_failed: u64,
    /// Chunks that found an inbox full.
    pub inbox_overflows: u64,
    /// Result records passed on towards their owners.
    pub records_forwarded: u64,
    /// Result chunks received.
    pub chunks: u64,
    /// Tasks pushed to a neighbour by diffusion (and received there).
    pub pushed: u64,
    /// Pushed tasks passed on towards a rank that is not a neighbour (the string plan).
    pub pushed_forwarded: u64,
    /// Pushed tasks dealt along the costly string of a split string plan.
    pub pushed_costly: u64,
    /// `claim` generations taken back because cheaper tasks came after them.
    pub shares_retracted: u64,
    /// Operations to a rank that had ended and exited which left the epoch standing.
    pub gone_tolerated: u64,
    /// Runs whose injected resource failure stopped every rank with an error.
    pub failed_everywhere: u64,
    /// Tasks moved by repartition plans between epochs.
    pub repartitioned: u64,
    /// Ranks' repartition starts held to the whole job's plan.
    pub plans_checked: u64,
    /// Tasks spawned by running tasks.
    pub spawned: u64,
    /// Spawned results that travelled home with their keys.
    pub spawned_home: u64,
}

impl Exercised {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Exercised) {
        self.steals_ok += other.steals_ok;
        self.steals_failed += other.steals_failed;
        self.inbox_overflows += other.inbox_overflows;
        self.records_forwarded += other.records_forwarded;
        self.chunks += other.chunks;
        self.pushed += other.pushed;
        self.pushed_forwarded += other.pushed_forwarded;
        self.pushed_costly += other.pushed_costly;
        self.shares_retracted += other.shares_retracted;
        self.gone_tolerated += other.gone_tolerated;
        self.failed_everywhere += other.failed_everywhere;
        self.repartitioned += other.repartitioned;
        self.plans_checked += other.plans_checked;
        self.spawned += other.spawned;
        self.spawned_home += other.spawned_home;
    }
}

/// The schemes [`check_epochs_seed`] runs each seed with: each steal protocol over the
/// small-world overlay, and both work-sharing schemes (group sizes drawn).
pub const EPOCH_SCHEMES: [(Balancing, Protocol); 5] = [
    (Balancing::Smallworld, Protocol::Claim),
    (Balancing::Smallworld, Protocol::Lock),
    (Balancing::Smallworld, Protocol::Request),
    (Balancing::Master, Protocol::Request),
    (
        Balancing::Hierarchical { group_size: None },
        Protocol::Request,
    ),
];

/// Each rank's tasks of one epoch: skewed or not, costs from 1 µs to a few ms; each payload
/// names its epoch, owner and index (so a stale result cannot pass for a fresh one).
fn draw_tasks(rng: &mut Rng, ranks: u32, epoch: u64) -> Vec<Vec<SimTask>> {
    let skew = rng.chance(0.6);
    (0..ranks)
        .map(|r| {
            let count = if skew {
                if r == ranks / 2 {
                    20 + rng.below(200)
                } else {
                    rng.below(3)
                }
            } else {
                rng.below(30)
            };
            (0..count)
                .map(|i| {
                    let mut payload = (epoch << 56 | u64::from(r) << 32 | i)
                        .to_le_bytes()
                        .to_vec();
                    payload.extend((0..rng.below(16)).map(|_| rng.below(256) as u8));
                    SimTask {
                        kind: 0,
                        key: i,
                        cost_ns: 1_000 + (rng.sample::<f64, _>(Exp1) * 300_000.0) as u64,
                        payload,
                        hint_ns: 0,
                        priority: 0,
                    }
                })
                .collect()
        })
        .collect()
}

/// Makes every epoch's keys global task numbers in rank order (each rank's keys one
/// contiguous span) and moves each later epoch's costs `d` keys on from the epoch before's
/// (the key `d` below costs what it did, round the job), so the cost pattern crosses
/// ranks. Epoch 0's keys are numbered the same way where the job is drawn.
fn front_keys(first: &[Vec<SimTask>], later: &mut [Vec<Vec<SimTask>>], d: u64) {
    let number = |epoch: &mut [Vec<SimTask>]| {
        for (g, t) in epoch.iter_mut().flatten().enumerate() {
            t.key = g as u64;
        }
    };
    let mut prev: Vec<u64> = first.iter().flatten().map(|t| t.cost_ns).collect();
    for epoch in later.iter_mut() {
        number(epoch);
        if !prev.is_empty() {
            let n = prev.len() as u64;
            for t in epoch.iter_mut().flatten() {
                t.cost_ns = prev[((t.key + n - d % n) % n) as usize];
            }
        }
        prev = epoch.iter().flatten().map(|t| t.cost_ns).collect();
    }
}

/// The tasks of the epoch after `prev`: drawn afresh, then most tasks whose index existed
/// before keep their cost (a time step resembles the last), so predictions hold.
fn draw_later(rng: &mut Rng, prev: &[Vec<SimTask>], epoch: u64) -> Vec<Vec<SimTask>> {
    let mut next = draw_tasks(rng, prev.len() as u32, epoch);
    let same = rng.chance(0.5);
    for (r, tasks) in next.iter_mut().enumerate() {
        if same {
            // The same work again (drifted a little): counts and costs as before.
            tasks.truncate(prev[r].len());
            while tasks.len() < prev[r].len() {
                let i = tasks.len() as u64;
                let payload = (epoch << 56 | (r as u64) << 32 | i).to_le_bytes().to_vec();
                tasks.push(SimTask {
                    kind: 0,
                    key: i,
                    cost_ns: 0,
                    payload,
                    hint_ns: 0,
                    priority: 0,
                });
            }
        }
        for (i, t) in tasks.iter_mut().enumerate() {
            if let Some(p) = prev[r].get(i)
                && (same || rng.chance(0.7))
            {
                t.cost_ns = p.cost_ns + rng.below(p.cost_ns / 10 + 1);
            } else if t.cost_ns == 0 {
                t.cost_ns = 1_000 + rng.below(300_000);
            }
        }
    }
    next
}

/// Draws and runs the job of `seed` of the first family: one epoch, the scheme drawn.
pub fn check_seed(seed: u64) -> Result<Drawn, (String, Violation)> {
    draw_and_run(seed, 0x4348_4543_4b00, None)
}

/// Draws and runs the job of `seed` of the second family with `scheme` (one of
/// [`EPOCH_SCHEMES`]; a hierarchical group size is drawn): several epochs, staggered
/// starts.
pub fn check_epochs_seed(
    seed: u64,
    scheme: (Balancing, Protocol),
) -> Result<Drawn, (String, Violation)> {
    draw_and_run(seed, 0x4550_4f43_4800, Some(scheme))
}

/// Draws from `Rng::from_keys(&[seed, key])` and runs. Every draw of the first family
/// comes first and in its order (a new draw goes after them, or a new family's seeds would
/// not be the only ones to change); `epochs` forces the scheme and draws the later epochs.
fn draw_and_run(
    seed: u64,
    key: u64,
    epochs: Option<(Balancing, Protocol)>,
) -> Result<Drawn, (String, Violation)> {
    let mut rng = Rng::from_keys(&[seed, key]);
    let mut ranks = 1 + rng.below(40) as u32;
    let drawn_scheme = rng.below(7);
    let scheme = match epochs.map(|e| e.0) {
        None => drawn_scheme,
        Some(Balancing::Smallworld) => 0,
        Some(Balancing::Random) => 3,
        Some(Balancing::Master) => 4,
        Some(Balancing::Hierarchical { .. }) => 5,
        Some(Balancing::None) => 6,
    };
    if (3..=4).contains(&scheme) && rng.chance(0.4) {
        // The complete graph past a row's size: thieves pace themselves, victims are drawn
        // by rejection, OUTBOX slots are pooled, a master has a backlog.
        ranks = 41 + rng.below(160) as u32;
    }
    let drawn_protocol =
        [Protocol::Claim, Protocol::Lock, Protocol::Request][rng.below(3) as usize];
    let protocol = epochs.map_or(drawn_protocol, |e| e.1);
    let mut overlay = OverlayParams {
        ranks,
        lattice: if rng.chance(0.5) {
            LatticeKind::Ring
        } else {
            LatticeKind::Torus2
        },
        shortcuts: 1 + rng.below(6) as u32,
        seed,
        ..OverlayParams::default()
    };
    let mut core = Config {
        protocol,
        routing: if rng.chance(0.5) {
            Routing::Non
        } else {
            Routing::Greedy
        },
        max_payload: 24,
        max_result: 8,
        shared_capacity: 2 + rng.below(8) as u32,
        min_private: rng.below(3) as u32,
        steal_below: 1 + rng.below(3) as u32,
        inbox_bytes: 256 + rng.below(512),
        chunk_bytes: 64 + rng.below(128),
        // Few slots: chunks wait for one often (the pool runs dry).
        outbox_slots: if rng.chance(0.5) {
            1 + rng.below(3) as u32
        } else {
            64
        },
        flush_delay: Duration::from_micros(rng.below(50)),
        // The same as flush_delay, set below (not drawn: the seeds' draws stay).
        forward_delay: Duration::ZERO,
        backoff_base: Duration::from_micros(5),
        backoff_max: Duration::from_micros(200),
        check_interval: Duration::from_micros(10 + rng.below(40)),
        seed,
        sharing: None,
        diffusion: true,
        diffusion_plan: titus_core::DiffusionPlan::Neighbours,
        repartition_plan: titus_core::repartition::RepartitionPlan::Neighbours,
        // Fixed (not drawn): the seeds' draws, and so their digest, stay as they were.
        push_wait: Duration::from_micros(100),
        advertise: true,
        cost_aware: true,
        move_cost: Duration::from_micros(20),
        resource_types: Vec::new(),
        timeline: false,
        steal_log: true,
        spawning: None,
    };
    core.forward_delay = core.flush_delay;
    let mut tasks = draw_tasks(&mut rng, ranks, 0);
    // The scheme's balancer, applied as every front end applies it. Work sharing keeps
    // the drawn overlay and routing, though (real runs share over the complete graph):
    // results of shared tasks then travel hop by hop, a path the core supports, and every
    // seed's trace stays what it was before the balancers had one home.
    let balancing = match scheme {
        0..=2 => Balancing::Smallworld,
        3 => Balancing::Random,
        4 => Balancing::Master,
        5 => Balancing::Hierarchical {
            group_size: Some(1 + rng.below(u64::from(ranks)) as u32),
        },
        _ => Balancing::None,
    };
    let (drawn_overlay, drawn_routing) = (overlay.clone(), core.routing);
    let loads: Vec<u64> = tasks.iter().map(|t| t.len() as u64).collect();
    balancing
        .apply(&mut core, &mut overlay, ranks, Some(&loads))
        .map_err(|e| (format!("seed {seed}"), Violation::Job(e.to_string())))?;
    if core.sharing.is_some() {
        overlay = drawn_overlay;
        core.routing = drawn_routing;
    }
    let name = match balancing {
        b if b.steals() => format!("{b}/{}", core.protocol.name()),
        b @ Balancing::Hierarchical { .. } => format!("{b} (groups of {})", b.group_size(ranks)),
        b => b.to_string(),
    };
    let preset = crate::model::PRESETS[rng.below(4) as usize];
    let mut model = Model::preset(preset)
        .map_err(|e| (format!("seed {seed}"), Violation::Job(e.to_string())))?;
    // A third of the jobs are hybrid: nodes of consecutive ranks talk through the node
    // model, atomics through the fabric's (drawn apart, so the other draws stay the same).
    let mut mix = Rng::from_keys(&[seed, key, 0x6e6f_6465]); // "node"
    let per_node =
        (ranks > 1 && mix.chance(1.0 / 3.0)).then(|| 1 + mix.below(u64::from(ranks - 1)) as u32);
    if let Some(k) = per_node {
        let node = Model::preset("node")
            .map_err(|e| (format!("seed {seed}"), Violation::Job(e.to_string())))?;
        model = model.with_nodes(k, node);
        // A core per rank at least: the presets carry this 2-core machine's cores, and
        // 170 ranks of 3 workers on 2 modelled cores ran every task ~250× slower, while
        // the idle thieves polled every 200 µs until the event budget ran out (seed 3481).
        if let Some(cpu) = model.cpu.as_mut() {
            cpu.cores = cpu.cores.max(k);
        }
    }
    let mut faults = Faults {
        jitter: if rng.chance(0.7) {
            rng.unit() * 3.0
        } else {
            0.0
        },
        ..Faults::default()
    };
    for r in 0..ranks {
        if rng.chance(0.1) {
            faults.slow.push((r, 2.0 + rng.unit() * 3.0));
        }
    }
    if rng.chance(0.3) {
        faults.stall = Some((
            rng.below(u64::from(ranks)) as u32,
            rng.below(1_000_000),
            100_000 + rng.below(5_000_000),
        ));
    }
    // Half the jobs: ranks exit as soon as they ended the last epoch, with no collective
    // end (drawn apart, so every other draw is as before).
    faults.exit_after_end = Rng::from_keys(&[seed, key, 0x6578_6974]).chance(0.5); // "exit"
    let workers = 1 + rng.below(3) as usize;
    // The mapper's mechanisms, drawn apart too.
    let mut mech = Rng::from_keys(&[seed, key, 0x6d61_7070]); // "mapp"
    core.advertise = mech.chance(0.5);
    // Cost-aware batches, drawn apart too (after the mapper's draws, which stay as they
    // were), and the hints the tasks carry: none, exact, noisy, or hostile.
    let mut costs = Rng::from_keys(&[seed, key, 0x636f_7374]); // "cost"
    core.cost_aware = costs.chance(0.5);
    core.move_cost = Duration::from_micros(costs.below(40));
    let hints = costs.below(4);
    let policy = if mech.chance(0.5) {
        None
    } else {
        Some(match mech.below(4) {
            0 => Policy::RefuseAll,
            1 => Policy::Cap(1 + mech.below(3) as usize),
            2 => Policy::KeepOdd,
            _ => Policy::Reorder,
        })
    };
    let mut what = format!(
        "{ranks} ranks, {name}, {workers} workers, {} tasks, preset {}, jitter {:.2}, {} slow ranks, stall {:?}",
        tasks.iter().map(Vec::len).sum::<usize>(),
        match per_node {
            Some(k) => format!("{preset} between nodes of {k} ranks, node inside"),
            None => preset.to_string(),
        },
        faults.jitter,
        faults.slow.len(),
        faults.stall
    );
    if faults.exit_after_end {
        what += ", ranks exit after the end";
    }
    what += &format!(
        ", advertisement {}, mapper {}",
        if core.advertise { "on" } else { "off" },
        policy.map_or("default".to_string(), |p| format!("{p:?}"))
    );
    let make_mapper = move |rank: u32| -> Box<dyn titus_core::Mapper> {
        Box::new(TestMapper {
            policy: policy.expect("only made with a policy"),
            rank,
        })
    };
    let (mut later_epochs, mut start_skew_ns, mut front) = (Vec::new(), 0, false);
    if epochs.is_some() {
        let mut prev = &tasks;
        for e in 1..=1 + rng.below(2) {
            let next = draw_later(&mut rng, prev, e);
            later_epochs.push(next);
            prev = later_epochs.last().expect("just pushed");
        }
        // Ranks start each epoch up to three operation latencies apart.
        start_skew_ns = rng.below(3 * model.latency_ns as u64 + 1);
        // A quarter of the jobs: bimodal costs, a costly band of the middle fifth of each
        // epoch's tasks at 4× the rest, which the string plan splits into a costly and a
        // cheap string (`titus_core::split_class`). Drawn apart, so every other draw is
        // as before.
        let mut bimo = Rng::from_keys(&[seed, key, 0x6269_6d6f]); // "bimo"
        if bimo.chance(0.25) {
            for epoch in std::iter::once(&mut tasks).chain(later_epochs.iter_mut()) {
                let n = epoch.iter().map(Vec::len).sum::<usize>();
                for (g, t) in epoch.iter_mut().flatten().enumerate() {
                    let costly = (2 * n / 5..3 * n / 5).contains(&g);
                    t.cost_ns = if costly { 80_000 } else { 20_000 } + bimo.below(2_000);
                }
            }
            what += ", bimodal costs";
        }
        // A third of the jobs: a flame front over the whole job (keys in rank order, costs
        // moving across ranks), which the job's front follows (`titus_core::JobFront`).
        front = rng.chance(1.0 / 3.0);
        if front {
            let d = 1 + rng.below(12);
            front_keys(&tasks, &mut later_epochs, d);
            what += &format!(", a front moving {d} keys an epoch");
        }
        core.diffusion = rng.chance(0.85);
        if rng.chance(0.5) {
            core.diffusion_plan = titus_core::DiffusionPlan::String;
        }
        what += &format!(
            ", {} epochs starting up to {start_skew_ns} ns apart, diffusion {}",
            1 + later_epochs.len(),
            if core.diffusion {
                core.diffusion_plan.name()
            } else {
                "off"
            }
        );
    }
    if front {
        for (g, t) in tasks.iter_mut().flatten().enumerate() {
            t.key = g as u64;
        }
    }
    for t in tasks
        .iter_mut()
        .chain(later_epochs.iter_mut().flatten())
        .flatten()
    {
        t.hint_ns = match hints {
            0 => 0,
            1 => t.cost_ns,
            2 => t.cost_ns / 2 + costs.below(t.cost_ns + 1),
            _ => match costs.below(3) {
                0 => u64::MAX,
                1 => 1,
                _ => costs.below(u64::MAX),
            },
        };
    }
    what += &format!(
        ", cost-aware {} (move {} µs), hints {}",
        if core.cost_aware { "on" } else { "off" },
        core.move_cost.as_micros(),
        ["none", "exact", "noisy", "hostile"][hints as usize]
    );
    // A third of the jobs draw paired shortcuts (every edge both ways); drawn last, so
    // every draw above is as before.
    if rng.chance(1.0 / 3.0) {
        overlay.draw = ShortcutDraw::Paired;
        what += ", paired shortcuts";
    }
    // A quarter of the jobs run on mixed resources (drawn last, like the paired draw):
    // tasks of kinds 0–2, accelerators for some kinds on some ranks, CPUs that run only
    // some kinds (none, on some ranks) — rank 0's run every kind, so every task has a
    // runner — and per-type requests where the protocol serves them.
    let mut resources = crate::SimResources::default();
    // CPUs that cannot run some kinds need per-type requests (`request`: under `claim`
    // and `lock` such tasks pass from thief to thief at random) and a rank that can run
    // them among the holder's in-neighbours (a sparse overlay may have none; work sharing
    // brokers inside a group): drawn only for stealing by request over the complete graph.
    let complete = titus_overlay::Overlay::new(overlay.clone()).is_ok_and(|o| o.is_complete());
    let all_cpus = core.sharing.is_some() || !complete || core.protocol != Protocol::Request;
    if rng.chance(0.25) {
        for (i, t) in tasks
            .iter_mut()
            .chain(later_epochs.iter_mut().flatten())
            .flatten()
            .enumerate()
        {
            t.kind = ((i as u64 ^ seed) % 3) as u16;
        }
        let sets: [Option<Vec<u16>>; 5] = [
            None,
            Some(vec![0]),
            Some(vec![1, 2]),
            Some(vec![2]),
            Some(vec![]),
        ];
        resources.cpu_kinds = (0..ranks)
            .map(|r| {
                if r == 0 || all_cpus {
                    None
                } else {
                    sets[rng.below(5) as usize].clone()
                }
            })
            .collect();
        resources.per_rank = (0..ranks)
            .map(|_| {
                (0..rng.below(3))
                    .map(|a| titus_core::resources::ResourceSpec {
                        name: format!("accel{a}"),
                        capacity: 1 + rng.below(3) as u32,
                        variants: match rng.below(3) {
                            0 => titus_core::resources::Variants::All(0.5 + rng.unit() * 8.0),
                            1 => titus_core::resources::Variants::Kinds(vec![(1, 4.0)]),
                            _ => titus_core::resources::Variants::Kinds(vec![(0, 2.0), (2, 8.0)]),
                        },
                    })
                    .collect()
            })
            .collect();
        resources.dispatch = [
            titus_core::resources::Dispatch::LeastLoaded,
            titus_core::resources::Dispatch::RoundRobin,
            titus_core::resources::Dispatch::Fixed,
        ][rng.below(3) as usize];
        what += &format!(", mixed resources ({})", resources.dispatch.name());
        // A quarter of these: one accelerator fails one of its submissions (drawn apart,
        // so every other draw is as before); where it gets that many, the epoch must fail
        // on every rank, nothing run twice.
        let mut fail = Rng::from_keys(&[seed, key, 0x6661_696c]); // "fail"
        let with: Vec<u32> = (0..ranks)
            .filter(|&r| !resources.per_rank[r as usize].is_empty())
            .collect();
        if !with.is_empty() && fail.chance(0.25) {
            let r = with[fail.below(with.len() as u64) as usize];
            let res = 1 + fail.below(resources.per_rank[r as usize].len() as u64) as usize;
            let nth = 1 + fail.below(8);
            resources.fail = Some((r, res, nth));
            what += &format!(", resource {res} of rank {r} fails its submission {nth}");
        }
    }
    // Workers' grains: the runtime's default, one task at a time, or up to 0.5 ms.
    let worker_grain_ns = match rng.below(3) {
        0 => None,
        1 => Some(0),
        _ => Some(rng.below(500_000)),
    };
    if let Some(g) = worker_grain_ns {
        what += &format!(", worker grain {g} ns");
    }
    // Half the jobs with a front (keys unique over the job, so tasks may change owner):
    // every rank's repartition plan applied between epochs, by the neighbours' plan or the
    // re-cut. Drawn apart, so every other draw is as before.
    let mut repa = Rng::from_keys(&[seed, key, 0x7265_7061]); // "repa"
    let repartition = front && repa.chance(0.5);
    if repartition {
        if repa.chance(0.5) {
            core.repartition_plan = titus_core::repartition::RepartitionPlan::Recut;
        }
        what += &format!(
            ", repartitioned between epochs ({})",
            core.repartition_plan.name()
        );
    }
    // Half the jobs charge the runtime's planning CPU around each start (the epoch then
    // begins after its outcome, through its own event). Drawn apart too.
    let start_cpu = match Rng::from_keys(&[seed, key, 0x6370_7573]).chance(0.5) {
        // "cpus"
        true => {
            what += ", planning CPU charged";
            crate::StartCpu::RUNTIME
        }
        false => crate::StartCpu::NONE,
    };
    let job = Job {
        core,
        overlay,
        workers,
        model,
        faults,
        seed,
        tasks,
        later_epochs,
        later_epochs_supplied: 0,
        start_skew_ns,
        check_start: true,
        result: &check_result,
        task_bytes_scale: 1.0,
        max_events: 20_000_000,
        resources,
        mapper: policy
            .is_some()
            .then_some(&make_mapper as &crate::MapperFactory),
        worker_grain_ns,
        start_cpu,
        spawn: None,
        // A quarter of the jobs keep their timelines: recording must change no event
        // (decided by the seed, not drawn, so the other draws stay the same).
        trace: seed.is_multiple_of(4),
    };
    // A third of the jobs' tasks spawn trees of tasks below them (a reduction of their
    // results, termination by waves), mixed with the fixed bag. Decided apart from the
    // other draws, which stay as they were.
    let spawning = Rng::from_keys(&[seed, key, 0x7370_6177]).chance(1.0 / 3.0); // "spaw"
    // Half of those send each spawned result home with its key; the others reduce them.
    let home = spawning && Rng::from_keys(&[seed, key, 0x686f_6d65]).chance(0.5); // "home"
    let job = match spawning {
        true => {
            what += if home {
                ", tasks spawn trees (results home)"
            } else {
                ", tasks spawn trees (results reduced)"
            };
            let s = if home {
                titus_core::spawn::Spawning::home()
            } else {
                titus_core::spawn::Spawning::reduced(vec![
                    titus_core::spawn::ReduceOp::Sum,
                    titus_core::spawn::ReduceOp::Sum,
                ])
            };
            Job {
                core: Config {
                    spawning: Some(s),
                    ..job.core
                },
                spawn: Some(if home {
                    &check_spawn_home
                } else {
                    &check_spawn
                }),
                ..job
            }
        }
        false => job,
    };
    let repartitioned = std::cell::Cell::new(0u64);
    // Each later epoch's tasks as the plans moved them (where a rank's spawned results
    // go home follows its tasks).
    let moved = std::cell::RefCell::new(std::collections::BTreeMap::new());
    let mut between = |b: &Between<'_>| -> Result<Option<Vec<Vec<SimTask>>>, String> {
        if !repartition {
            return Ok(None);
        }
        let mut next = job.later_epochs[b.epoch].clone();
        let keys: Vec<Vec<u64>> = next
            .iter()
            .map(|ts| ts.iter().map(|t| t.key).collect())
            .collect();
        let plans = b.repartition_plan(&keys).map_err(|e| e.to_string())?;
        for (from, moves) in plans.iter().enumerate() {
            for m in moves {
                let at = next[from]
                    .iter()
                    .position(|t| t.key == m.key)
                    .ok_or_else(|| {
                        format!("rank {from}'s plan moves key {}, not its own", m.key)
                    })?;
                let t = next[from].remove(at);
                next[m.to as usize].push(t);
                repartitioned.set(repartitioned.get() + 1);
            }
        }
        // Each rank's tasks in string order again.
        next.iter_mut().for_each(|ts| ts.sort_by_key(|t| t.key));
        moved.borrow_mut().insert(b.epoch, next.clone());
        Ok(Some(next))
    };
    match simulate_with(&job, &mut between) {
        // The injected failure, told to every rank (each stopped with an error) before any
        // task ran twice: what the runtime promises.
        Err(v) if job.resources.fail.is_some() && v.to_string().contains("(injected)") => {
            match failed_everywhere(&v) {
                Some((events, trace)) => Ok(Drawn {
                    what,
                    events,
                    trace,
                    exercised: Exercised {
                        failed_everywhere: 1,
                        ..Exercised::default()
                    },
                }),
                None => Err((what, v)),
            }
        }
        Ok(o) => {
            if spawning {
                // Every epoch, on every rank: each spawned task's result once.
                let moved = moved.borrow();
                let later = (job.later_epochs.iter().enumerate())
                    .map(|(e, ts)| moved.get(&e).unwrap_or(ts));
                let epochs = std::iter::once(&job.tasks).chain(later);
                let outcomes = o.earlier.iter().chain(std::iter::once(&o.ranks));
                for (e, (tasks, ranks)) in epochs.zip(outcomes).enumerate() {
                    if let Err(why) = check_spawned(tasks, ranks, home) {
                        return Err((what, Violation::Broken(format!("epoch {e}, {why}"))));
                    }
                }
            }
            let mut exercised = Exercised::default();
            for r in o.earlier.iter().flatten().chain(&o.ranks) {
                let st = &r.stats.core;
                exercised.add(&Exercised {
                    steals_ok: st.steals_ok,
                    steals_failed: st.steals_empty + st.steals_locked,
                    inbox_overflows: st.inbox_overflows,
                    records_forwarded: st.records_forwarded,
                    chunks: st.chunks_received,
                    pushed: st.tasks_pushed_in,
                    pushed_forwarded: st.tasks_forwarded,
                    pushed_costly: st.tasks_pushed_costly,
                    shares_retracted: st.shares_retracted,
                    gone_tolerated: st.gone_tolerated,
                    failed_everywhere: 0,
                    repartitioned: 0,
                    plans_checked: 0,
                    spawned: st.tasks_spawned,
                    spawned_home: r.spawned.len() as u64,
                });
            }
            exercised.repartitioned = repartitioned.get();
            exercised.plans_checked = o.plans_checked;
            Ok(Drawn {
                what,
                events: o.events,
                trace: o.trace,
                exercised,
            })
        }
        Err(v) => Err((what, v)),
    }
}

/// A custom mapper of the checker's: every policy must keep exactly-once and termination.
#[derive(Debug, Clone, Copy)]
enum Policy {
    /// Refuses every steal: each owner runs its own tasks.
    RefuseAll,
    /// Lets at most this many tasks go per share.
    Cap(usize),
    /// Keeps tasks of odd index at their first rank (owners and thieves alike).
    KeepOdd,
    /// Priorities from the task's identity (higher first, lower shared first), and the
    /// highest-ranked ready target instead of a random one.
    Reorder,
}

#[derive(Debug)]
struct TestMapper {
    policy: Policy,
    rank: u32,
}

impl titus_core::Mapper for TestMapper {
    fn target_steal(&mut self, v: &mut titus_core::mapper::Victims<'_>) -> Option<usize> {
        match self.policy {
            Policy::Reorder => (0..v.len()).rev().find(|&i| v.is_ready(i)),
            _ => v.default_choice(),
        }
    }

    fn permit_steal(
        &mut self,
        _thief: Option<u32>,
        offered: &[titus_core::mapper::TaskInfo],
        permit: &mut [bool],
    ) {
        match self.policy {
            Policy::RefuseAll => permit.fill(false),
            Policy::Cap(n) => permit.iter_mut().skip(n).for_each(|p| *p = false),
            Policy::KeepOdd => {
                for (p, t) in permit.iter_mut().zip(offered) {
                    *p = t.index % 2 == 0 || t.owner != self.rank;
                }
            }
            Policy::Reorder => {}
        }
    }

    fn priority(&mut self, t: &titus_core::mapper::TaskInfo) -> i16 {
        match self.policy {
            Policy::Reorder => {
                ((t.owner.wrapping_mul(31) ^ t.index.wrapping_mul(7)) % 5) as i16 - 2
            }
            _ => t.priority,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI's share of deterministic simulation testing (`titus sim --check --seeds N` runs
    /// more): 200 seeds, every invariant.
    #[test]
    fn two_hundred_seeds_hold_every_invariant() {
        let range = titus_core::seed::seeds(0..200);
        let seeds = range.end - range.start;
        let (mut events, mut gone_tolerated, mut failed, mut spawned) = (0, 0, 0, 0);
        let mut spawned_home = 0;
        for seed in range {
            match check_seed(seed) {
                Ok(d) => {
                    events += d.events;
                    gone_tolerated += d.exercised.gone_tolerated;
                    failed += d.exercised.failed_everywhere;
                    spawned += d.exercised.spawned;
                    spawned_home += d.exercised.spawned_home;
                }
                Err((what, v)) => panic!(
                    "seed {seed} ({what}): {v}\nreproduce: titus sim --check --seed {seed} --seeds 1, or {} cargo test -p titus-sim --lib",
                    titus_core::seed::repeat(seed)
                ),
            }
        }
        assert!(events > 0);
        // Ranks that exit right after the end (half the jobs) were met by others' steals.
        assert!(
            seeds < 100 || gone_tolerated > 0,
            "no operation to an exited rank in {seeds} seeds"
        );
        // Resources that fail a submission (a sixteenth of the jobs) stopped every rank.
        assert!(
            seeds < 100 || failed > 0,
            "no injected failure stopped a run in {seeds} seeds"
        );
        // A third of the jobs' tasks spawn.
        assert!(
            seeds < 100 || spawned > 0,
            "no task spawned in {seeds} seeds"
        );
        // Half of those send their results home.
        assert!(
            seeds < 100 || spawned_home > 0,
            "no spawned result came home in {seeds} seeds"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        for seed in [3, 17, 40] {
            let a = check_seed(seed).map_err(|e| e.1).unwrap();
            let b = check_seed(seed).map_err(|e| e.1).unwrap();
            assert_eq!((a.trace, a.events), (b.trace, b.events), "seed {seed}");
        }
        // And different seeds differ.
        let (a, b) = (check_seed(1).unwrap(), check_seed(2).unwrap());
        assert_ne!(a.trace, b.trace);
    }
}
