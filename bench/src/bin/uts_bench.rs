//! `uts-bench`: the UTS benchmark (`titus_workload::uts`) on Titus.
//!
//! The tree's flags are UTS's own (`-t -b -r -a -d -q -m -f -g`), so the published sample
//! trees paste as they are: T1 is `-t 1 -a 3 -d 10 -b 4 -r 19`. Rank 0 first traverses
//! the tree alone (the sequential baseline, one thread); then the job traverses it on
//! Titus, and the counts must equal the sequential traversal's, or the run fails.
//!
//! - `--mode spawn` (the default): rank 0's one task is the root. A task visits up to
//!   `--chunk` nodes depth first from the nodes in its payload, then spawns what is left
//!   on its stack as tasks of at most 8 nodes (the newest run next on
//!   the same rank; thieves take the oldest, nearest the root). The spawned tasks'
//!   counts are reduced over the job (nodes and leaves summed, the depth's maximum), or
//!   with `--results home` each travels home to rank 0, which sums them.
//! - `--mode static`: every rank expands the same top of the tree breadth first until it
//!   holds `--frontier` nodes, owns a contiguous block of them, and hands them to Titus
//!   as one epoch of tasks, each traversing its subtree. A deep narrow tree (a binomial
//!   one) shows the limit: a subtree larger than a rank's share cannot be split.
//!
//! In process: `uts-bench --ranks 2 -t 1 -a 3 -d 10 -b 4 -r 19`. Under a launcher
//! (`titus launch -n 2 -- uts-bench …`, srun, mpirun): the launcher sets the ranks; rank
//! 0 prints. The other ranks wait for rank 0's sequential traversal in the bootstrap's
//! all-gather: past a minute of it, raise `TITUS_BOOTSTRAP_TIMEOUT`.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::time::Instant;
use titus_fabric::bootstrap::JobEnv;
use titus_fabric::mem::MemOptions;
use titus_runtime::Balancing;
use titus_runtime::TaskCtx;
use titus_runtime::{Runtime, RuntimeConfig, TaskIn};
use titus_workload::dlb::fail;
use titus_workload::uts::{Counts, Node, Tree, TreeArgs};
use titus_workload::uts_task;

/// UTS: the unbalanced tree search benchmark, on Titus.
#[derive(Debug, clap::Parser)]
#[command(name = "uts-bench", version)]
struct Cli {
    #[command(flatten)]
    tree: TreeArgs,
    /// Ranks in this process (under a launcher, the launcher's).
    #[arg(long, default_value_t = 1)]
    ranks: u32,
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Balancer: none, smallworld, random, master or hierarchical.
    #[arg(long, default_value = "smallworld")]
    balancer: Balancing,
    /// Frontier nodes the top of the tree is expanded to: the tasks (0: 64 per worker of
    /// the job).
    #[arg(long, default_value_t = 0)]
    frontier: u32,
    /// How the tree becomes tasks: `spawn` (tasks spawn their subtrees' rest) or
    /// `static` (a frontier fixed before the epoch).
    #[arg(long, default_value = "spawn")]
    mode: Mode,
    /// Spawn mode: the nodes a task visits before it spawns the rest of its stack.
    #[arg(long, default_value_t = uts_task::CHUNK_DEFAULT)]
    chunk: u32,
    /// Spawn mode: the spawned tasks' counts `reduced` over the job, or each sent `home`
    /// to rank 0 (which owns the root) with its key.
    #[arg(long, value_enum, default_value_t = uts_task::SpawnResults::Reduced)]
    results: uts_task::SpawnResults,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// How the tree becomes tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Tasks spawn the rest of their subtrees.
    Spawn,
    /// A frontier fixed before the epoch.
    Static,
}

/// Most frontier nodes: each is a task of 24 bytes and its result.
const FRONTIER_MAX: u32 = 1 << 24;

/// The spawning task ([`uts_task::expand`]): an epoch task's counts go home as its
/// result; a spawned task's are the reduction's lanes.
fn spawning_task(
    tree: Tree,
    chunk: u32,
) -> impl Fn(&mut TaskCtx<'_>, &[u8]) -> Result<Vec<u8>, String> + Send + Sync {
    move |ctx, payload| {
        let queued = ctx.queued();
        let mut refused = None;
        let mut give = |_, payloads: Vec<Vec<u8>>| {
            for p in payloads {
                if let Err(e) = ctx.spawn(0, 0, p) {
                    refused = Some(e.to_string());
                }
            }
            ctx.hand_over();
        };
        let nodes = uts_task::decode_nodes(payload)?;
        let e = uts_task::expand(&tree, nodes, chunk, queued, &mut give);
        if let Some(e) = refused {
            return Err(e);
        }
        for p in e.spawn {
            ctx.spawn(0, 0, p).map_err(|e| e.to_string())?;
        }
        Ok(uts_task::encode_counts(&e.counts, 1))
    }
}

/// The top of the tree expanded breadth first until at least `want` nodes wait (or the
/// tree ends): the frontier, and the counts of the nodes above it.
fn frontier(tree: &Tree, want: usize) -> (Vec<Node>, Counts) {
    let mut above = Counts::default();
    let mut open = VecDeque::from([tree.root()]);
    while open.len() < want
        && let Some(n) = open.pop_front()
    {
        let k = tree.visit(&n, &mut above);
        open.extend((0..k).map(|i| tree.child(&n, i)));
    }
    (open.into(), above)
}

/// The job's figures, on rank 0: the traversal's, and the sequential one's counts.
struct Figures {
    traversal: uts_task::Traversal,
    sequential: Counts,
}

/// One rank's part: its block of the frontier as one epoch; on rank 0, the job's counts.
fn rank_main(
    rt: &Runtime,
    tree: &Tree,
    want: usize,
    mode: Mode,
    sequential: Option<(Counts, f64)>,
) -> Result<Option<Figures>, String> {
    let (rank, size) = (rt.rank() as usize, rt.size() as usize);
    // Rank 0's baseline, measured before anyone starts: every rank waits for it here.
    let base = match sequential {
        Some((c, s)) => [uts_task::encode_counts(&c, 0), s.to_le_bytes().to_vec()].concat(),
        None => Vec::new(),
    };
    let gathered = rt.all_gather(&base).map_err(|e| e.to_string())?;
    let b0 = gathered.first().ok_or("no rank 0")?;
    let (seq, seq_s) = match b0.len() {
        40 => (
            uts_task::decode_counts(&b0[..32])?.0,
            f64::from_le_bytes(b0[32..40].try_into().expect("8 bytes")),
        ),
        n => return Err(format!("rank 0 sent a {n}-byte baseline, not 40")),
    };
    let figures = |counts, tasks, seconds| Figures {
        traversal: uts_task::Traversal {
            counts,
            tasks,
            seconds,
            sequential_s: seq_s,
            ranks: size as u32,
            workers: rt.config().workers,
        },
        sequential: seq,
    };
    let t0 = Instant::now();
    if mode == Mode::Spawn {
        let tasks = if rank == 0 {
            vec![TaskIn {
                key: 0,
                kind: 0,
                payload: uts_task::encode_nodes(&[tree.root()]),
                priority: 0,
                cost_hint_ns: 0,
            }]
        } else {
            Vec::new()
        };
        let out = rt.run_epoch_keyed(tasks).map_err(|e| e.to_string())?;
        let seconds = t0.elapsed().as_secs_f64();
        if rank != 0 {
            return Ok(None);
        }
        let (counts, tasks) = uts_task::totals(&out.reduced, &out.results, &out.spawned)?;
        return Ok(Some(figures(counts, tasks, seconds)));
    }
    let (nodes, above) = frontier(tree, want);
    let block = nodes.len().div_ceil(size);
    let mine = nodes.iter().skip(rank * block).take(block);
    let tasks: Vec<TaskIn> = mine
        .enumerate()
        .map(|(i, n)| TaskIn {
            key: (rank * block + i) as u64,
            kind: 0,
            payload: uts_task::encode_nodes(std::slice::from_ref(n)),
            priority: 0,
            cost_hint_ns: 0,
        })
        .collect();
    let out = rt.run_epoch_keyed(tasks).map_err(|e| e.to_string())?;
    let (counts, tasks) = uts_task::totals(&[], &out.results, &[])?;
    let all = rt
        .all_gather(&uts_task::encode_counts(&counts, tasks))
        .map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    if rank != 0 {
        return Ok(None);
    }
    let mut total = above;
    for (r, b) in all.iter().enumerate() {
        let (c, _) = uts_task::decode_counts(b).map_err(|e| format!("rank {r}'s counts: {e}"))?;
        total.add(&c);
    }
    Ok(Some(figures(total, nodes.len() as u64, seconds)))
}

/// The task: traverse the subtree below the node in the payload.
fn traverse_task(tree: Tree) -> impl Fn(&[u8]) -> Result<Vec<u8>, String> + Send + Sync {
    move |payload| {
        let mut counts = Counts::default();
        for n in uts_task::decode_nodes(payload)? {
            counts.add(&tree.traverse(n));
        }
        Ok(uts_task::encode_counts(&counts, 1))
    }
}

fn sequential(tree: &Tree) -> (Counts, f64) {
    let t0 = Instant::now();
    let c = tree.traverse(tree.root());
    (c, t0.elapsed().as_secs_f64())
}

fn config(cli: &Cli, ranks: u32) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: cli.workers,
        ..RuntimeConfig::default()
    };
    cfg.balance(cli.balancer, ranks, None)
        .unwrap_or_else(|e| fail(2, &e.to_string()));
    if cli.mode == Mode::Spawn {
        cfg.core.spawning = Some(cli.results.spawning());
    }
    cfg
}

/// Registers the task of `cli`'s mode.
fn register(rt: &Runtime, cli: &Cli, tree: Tree) {
    match cli.mode {
        Mode::Spawn => rt.register_spawning(0, spawning_task(tree, cli.chunk)),
        Mode::Static => rt.register_fallible(0, traverse_task(tree)),
    }
}

fn main() {
    titus_workload::quiet_broken_pipe();
    let cli = titus_workload::dlb::parse_args_of::<Cli>("uts-bench");
    titus_workload::init_logging().unwrap_or_else(|e| fail(2, &e.to_string()));
    let tree = cli.tree.tree();
    tree.check().unwrap_or_else(|e| fail(2, &e.to_string()));
    if !(1..=64).contains(&cli.workers) {
        fail(2, &format!("--workers {}: 1 to 64", cli.workers));
    }
    if !(1..=uts_task::CHUNK_MAX).contains(&cli.chunk) {
        fail(
            2,
            &format!("--chunk {}: 1 to {}", cli.chunk, uts_task::CHUNK_MAX),
        );
    }
    if cli.frontier > FRONTIER_MAX {
        fail(
            2,
            &format!("--frontier {}: at most {FRONTIER_MAX}", cli.frontier),
        );
    }
    let env = Some(JobEnv::from_env().unwrap_or_else(|e| fail(2, &e.to_string())))
        .filter(JobEnv::launched);
    let ranks = env.as_ref().map_or(cli.ranks, |e| e.size);
    let ranks_max = (titus_runtime::LOCAL_THREADS_MAX / (cli.workers as u64 + 1)) as u32;
    if env.is_none() && !(1..=ranks_max).contains(&ranks) {
        fail(
            2,
            &format!(
                "--ranks {ranks}: 1 to {ranks_max} in one process of --workers {}",
                cli.workers
            ),
        );
    }
    let want = match cli.frontier {
        0 => 64 * ranks as usize * cli.workers,
        k => k as usize,
    };
    let figures = match &env {
        Some(env) => {
            let job = env.session(0).unwrap_or_else(|e| fail(2, &e.to_string()));
            let rt = Runtime::from_job(
                config(&cli, ranks),
                titus_runtime::Backend::default_fabric(None),
                job,
            )
            .unwrap_or_else(|e| fail(if e.is_usage() { 2 } else { 1 }, &e.to_string()));
            register(&rt, &cli, tree);
            let seq = (rt.rank() == 0).then(|| sequential(&tree));
            rank_main(&rt, &tree, want, cli.mode, seq).unwrap_or_else(|e| fail(1, &e))
        }
        None => {
            let seq = sequential(&tree);
            let rts = Runtime::local(ranks, config(&cli, ranks), MemOptions::default())
                .unwrap_or_else(|e| fail(2, &e.to_string()));
            let results: Vec<Result<Option<Figures>, String>> = std::thread::scope(|s| {
                let hs: Vec<_> = rts
                    .into_iter()
                    .map(|rt| {
                        register(&rt, &cli, tree);
                        let (tree, seq) = (&tree, (rt.rank() == 0).then_some(seq));
                        let mode = cli.mode;
                        s.spawn(move || rank_main(&rt, tree, want, mode, seq))
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("rank thread"))
                    .collect()
            });
            let mut figures = None;
            for r in results {
                match r {
                    Ok(Some(f)) => figures = Some(f),
                    Ok(None) => {}
                    Err(e) => fail(1, &e),
                }
            }
            figures
        }
    };
    let Some(f) = figures else { return };
    report(&cli, &f);
    if f.traversal.counts != f.sequential {
        fail(
            1,
            &format!(
                "the balanced traversal counted {:?}, the sequential one {:?}",
                f.traversal.counts, f.sequential
            ),
        );
    }
}

/// Prints the figures: nodes, leaves, depth, rates, and the efficiency against the
/// sequential traversal (its time over the job's threads' time).
fn report(cli: &Cli, f: &Figures) {
    let t = &f.traversal;
    let (nodes_per_s, efficiency) = (t.nodes_per_s(), t.efficiency());
    if cli.json {
        let mut v = t.json();
        v.insert(
            "sequential_nodes_per_s".into(),
            (f.sequential.nodes as f64 / t.sequential_s).into(),
        );
        v.insert("balancer".into(), cli.balancer.to_string().into());
        v.insert(
            "mode".into(),
            format!("{:?}", cli.mode).to_lowercase().into(),
        );
        if cli.mode == Mode::Static {
            v.insert("frontier".into(), t.tasks.into());
        } else {
            let results = format!("{:?}", cli.results).to_lowercase();
            v.insert("results".into(), results.into());
        }
        println!("{}", serde_json::Value::Object(v));
        return;
    }
    println!(
        "uts-bench: {} ranks × {} workers, {}, {} tasks ({:?})",
        t.ranks, t.workers, cli.balancer, t.tasks, cli.mode
    );
    println!(
        "nodes {}  leaves {}  max depth {}",
        t.counts.nodes, t.counts.leaves, t.counts.max_depth
    );
    println!(
        "{:.3} s, {:.3e} nodes/s ({:.3e} per rank); sequential {:.3} s ({:.3e} nodes/s); efficiency {:.3}",
        t.seconds,
        nodes_per_s,
        nodes_per_s / f64::from(t.ranks),
        t.sequential_s,
        f.sequential.nodes as f64 / t.sequential_s,
        efficiency
    );
}
