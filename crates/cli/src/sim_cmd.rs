//! `titus sim`: DLB_Bench's runs on the simulator (same flags, same report), and
//! deterministic simulation testing (`--check`).
//!
//! A run of several epochs (`--epochs`, `--drift`) is one simulated job whose later
//! epochs hold the same tasks with the drifted costs, each made as it begins
//! ([`Job::later_epochs_supplied`]); the simulator checks every epoch's results. With `--repartition K`, as in `dlb-bench`,
//! every K epochs the ranks' repartition plan (from the costs each simulated rank
//! measured, computed as the runtime computes it) moves tasks for good between
//! rank-string neighbours: the following epochs' tasks come from the new ownership (each
//! task keeps its number, which is its key, and its drifted cost). A simulated task runs
//! for its drawn cost, so the efficiency and the nominal efficiency coincide except on
//! ranks slowed by `--slow` (their tasks take longer than drawn: the nominal efficiency
//! does not count that).

use crate::UsageError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use titus_core::layout;
use titus_sim::{Faults, Job, Model, SimTask, check};
use titus_workload::dlb::{self, BenchArgs, RankFigures, Report, Run};
use titus_workload::task;

/// `titus sim` flags: DLB_Bench's, and the simulator's own.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    #[command(flatten)]
    pub(crate) bench: BenchArgs,
    /// Fabric model: ib-hdr, tcp-loopback, shm, node or mem.
    #[arg(long, default_value = "ib-hdr")]
    preset: String,
    /// A hybrid job: nodes of this many consecutive ranks, which reach each other through
    /// the node backend (reads, writes and signals; atomics keep --preset's costs).
    #[arg(long, value_name = "K")]
    ranks_per_node: Option<u32>,
    /// A fabric model from `titus fabric-bench --json` output (instead of --preset).
    #[arg(long, value_name = "FILE")]
    preset_file: Option<PathBuf>,
    /// What a first contact adds to its operation, µs [default: the preset's; ib-hdr
    /// 1,000]. Over the complete graph (`random`, `master`, `hierarchical`) ranks connect
    /// on first contact, inside the epoch; over an overlay at open, outside it.
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    connect_us: Option<f64>,
    /// Memory one connection holds on each end, KiB [default: the preset's; ib-hdr 64].
    #[arg(long, value_name = "KIB", allow_negative_numbers = true)]
    connection_kib: Option<f64>,
    /// Deterministic simulation testing: --seeds random small jobs with faults, from
    /// --seed on, every invariant checked; a failure prints the command repeating it.
    #[arg(long)]
    check: bool,
    /// Seeds of --check.
    #[arg(long, default_value_t = 200, allow_negative_numbers = true)]
    seeds: u64,
    /// Latency jitter: each operation's latency × (1 + U(0, J)), so operations overtake.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    jitter: f64,
    /// Write each simulated rank's timeline to DIR, as the runtime's `TITUS_TRACE` does
    /// (`titus trace DIR` merges them); one run of at most 4,096 ranks.
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,
    /// Slow ranks, RANK:FACTOR[,RANK:FACTOR...]: their tasks take FACTOR times longer.
    #[arg(long, value_name = "LIST")]
    slow: Option<String>,
    /// RANK:FROM_S:FOR_S: this rank's progress stops serving for a while.
    #[arg(long, value_name = "SPEC")]
    stall: Option<String>,
    /// The node model (the preset's cores: tasks slower while cores are shared, workers
    /// that wake, progress threads' CPU), where the preset has one: on or off.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    node_model: String,
    /// The node model of another preset (node, shm, tcp-loopback: this machine's
    /// calibration) on this one's fabric, e.g. `--preset ib-hdr --node-preset node
    /// --node-cores 28` for TITUS's 28-core nodes at this machine's per-core costs.
    #[arg(long, value_name = "PRESET")]
    node_preset: Option<String>,
    /// Cores per node of the node model [default: the preset's].
    #[arg(long, value_name = "C")]
    node_cores: Option<u32>,
    /// Ranks per node of the node model, sharing its cores: e.g. every rank of a job that
    /// ran on one machine, more processes than cores included [default: as many as the
    /// cores hold at --workers each].
    #[arg(long, value_name = "K")]
    node_ranks: Option<u32>,
    /// Measure this machine over PROVIDER (node, shm, tcp;ofi_rxm, sockets, verbs;ofi_rxm)
    /// and write a preset file for --preset-file: the fabric's costs (fabric-bench) and
    /// the node's cores (a task's slowdown with every core busy, wake-up latency, the
    /// progress threads' share of a core, from two ranks of runtime-bench). Needs `titus
    /// launch` and runtime-bench next to this program.
    #[arg(long, value_name = "PROVIDER")]
    pub calibrate: Option<String>,
    /// Where --calibrate writes its preset [default: standard output].
    #[arg(long, value_name = "FILE", requires = "calibrate")]
    pub out: Option<PathBuf>,
    /// Run DLB_Bench's real tasks (payloads and checksums, with --calibration) instead of
    /// virtual ones: the results equal dlb-bench's. Small runs only.
    #[arg(long)]
    real_tasks: bool,
    /// A UTS tree instead of DLB_Bench, in UTS's own flags (as uts-bench takes them), e.g.
    /// --uts '-t 1 -a 3 -d 15 -b 4 -r 29' (T1XL): tasks that spawn tasks, rank 0 holding
    /// the root; --ranks, --workers, --balancer, --seed and --json apply.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub(crate) uts: Option<String>,
    /// --uts: virtual time per node, ns (this machine's SHA-1 node: ~100 ns).
    #[arg(long, default_value_t = 100)]
    pub(crate) uts_node_ns: u64,
    /// --uts: the nodes a task visits before it spawns the rest of its stack.
    #[arg(long, default_value_t = titus_workload::uts_task::CHUNK_DEFAULT)]
    pub(crate) uts_chunk: u32,
    /// --uts: the spawned tasks' counts `reduced` over the job, or each sent `home` to
    /// rank 0 with its key.
    #[arg(long, value_enum, default_value_t = titus_workload::uts_task::SpawnResults::Reduced)]
    pub(crate) uts_results: titus_workload::uts_task::SpawnResults,
}

pub(crate) fn parse_faults(a: &SimArgs) -> Result<Faults, UsageError> {
    if !(a.jitter.is_finite() && a.jitter >= 0.0) {
        return Err(UsageError(format!(
            "--jitter {} is not a non-negative number",
            a.jitter
        )));
    }
    let mut f = Faults {
        jitter: a.jitter,
        ..Faults::default()
    };
    if let Some(list) = &a.slow {
        for item in list.split(',') {
            let bad = || UsageError(format!("--slow '{item}': expected RANK:FACTOR"));
            let (r, x) = item.split_once(':').ok_or_else(bad)?;
            let r: u32 = r.trim().parse().map_err(|_| bad())?;
            let x: f64 = x.trim().parse().map_err(|_| bad())?;
            // Past a million times slower, a task's virtual time leaves u64's range.
            if !(x.is_finite() && x > 0.0 && x <= 1e6) {
                return Err(UsageError(format!(
                    "--slow '{item}': FACTOR must be a number in (0, 1e6]"
                )));
            }
            f.slow.push((r, x));
        }
    }
    if let Some(s) = &a.stall {
        let bad = || UsageError(format!("--stall '{s}': expected RANK:FROM_S:FOR_S"));
        let p: Vec<&str> = s.split(':').collect();
        if p.len() != 3 {
            return Err(bad());
        }
        let r: u32 = p[0].parse().map_err(|_| bad())?;
        let from: f64 = p[1].parse().map_err(|_| bad())?;
        let len: f64 = p[2].parse().map_err(|_| bad())?;
        // Within a simulated million seconds (virtual nanoseconds stay inside u64).
        if !((0.0..=1e6).contains(&from) && (0.0..=1e6).contains(&len)) {
            return Err(UsageError(format!(
                "--stall '{s}': FROM_S and FOR_S must be seconds in [0, 1e6]"
            )));
        }
        f.stall = Some((r, (from * 1e9) as u64, (len * 1e9) as u64));
    }
    Ok(f)
}

pub(crate) fn model(a: &SimArgs) -> Result<Model, UsageError> {
    match &a.preset_file {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                UsageError(format!("cannot read --preset-file '{}': {e}", p.display()))
            })?;
            Model::from_fabric_bench(&text, &p.display().to_string()).map_err(UsageError::from)
        }
        None => Model::preset(&a.preset).map_err(UsageError::from),
    }
    .and_then(|mut m| {
        let check = |flag: &str, v: f64| {
            if v.is_finite() && (0.0..=1e9).contains(&v) {
                Ok(v)
            } else {
                Err(UsageError(format!(
                    "{flag} {v}: expected a non-negative number up to 1e9"
                )))
            }
        };
        if let Some(us) = a.connect_us {
            m.connect_ns = check("--connect-us", us)? * 1e3;
        }
        if let Some(kib) = a.connection_kib {
            m.connection_bytes = check("--connection-kib", kib)? * 1024.0;
        }
        Ok(m)
    })
    .and_then(|mut m| {
        if let Some(p) = &a.node_preset {
            let mut cpu = Model::preset(p)
                .map_err(UsageError::from)?
                .cpu
                .ok_or_else(|| UsageError(format!("--node-preset {p}: it has no node model")))?;
            // The per-core costs travel; what an operation waits on a busy target and one
            // on the issuer's own memory take are that preset's provider's (measured
            // through it), not this fabric's.
            cpu.busy_op_ns = 0.0;
            cpu.own_op_ns = titus_sim::model::OWN_OP_NS;
            m.cpu = Some(cpu);
        }
        if let Some(c) = a.node_cores {
            if c == 0 || c > 65_536 {
                return Err(UsageError(format!("--node-cores {c}: expected 1..=65536")));
            }
            node_model(&mut m, "--node-cores")?.cores = c;
        }
        if let Some(k) = a.node_ranks {
            if a.ranks_per_node.is_some() {
                return Err(UsageError(
                    "--node-ranks and --ranks-per-node both say which ranks share a node: give one"
                        .into(),
                ));
            }
            if k == 0 || k > 1 << 20 {
                return Err(UsageError(format!(
                    "--node-ranks {k}: expected 1..=1048576"
                )));
            }
            node_model(&mut m, "--node-ranks")?.ranks = Some(k);
        }
        if a.node_model == "off" {
            m.cpu = None;
        }
        Ok(m)
    })
    .and_then(|m| match a.ranks_per_node {
        None => Ok(m),
        Some(0) => Err(UsageError("--ranks-per-node must be at least 1".into())),
        Some(k) => Ok(m.with_nodes(
            k,
            Model::preset("node").expect("the node preset is built in"),
        )),
    })
}

/// The node model that `flag` changes: the preset must have one.
fn node_model<'m>(
    m: &'m mut Model,
    flag: &str,
) -> Result<&'m mut titus_sim::model::Cpu, UsageError> {
    m.cpu.as_mut().ok_or_else(|| {
        UsageError(format!(
            "{flag}: preset {} has no node model (add --node-preset)",
            m.name
        ))
    })
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

type ResultFn = dyn Fn(&[u8]) -> Vec<u8> + Sync;

struct Simulated {
    /// One report per epoch.
    reports: Vec<Report>,
    events: u64,
    wall_s: f64,
    /// With --resources: per epoch, the efficiency against the heterogeneous ideal (total
    /// work over total capacity, a resource counting capacity × speed workers) and the
    /// tasks run on accelerators.
    hetero: Vec<(f64, u64)>,
}

/// What a fabric peer connected at open costs a simulated rank beyond those of the
/// default overlay, which the per-rank figure holds (its connection, contact and peer
/// entries). Measured: 1,000 ranks of 990 shortcuts peaked 0.9 GB above 1,000 of 30,
/// about 0.95 KiB for each of a rank's extra peers — and more as the run goes on.
const PEER_BYTES: u64 = 1 << 10;

/// The peers of a rank of the default overlay (30 shortcuts, as many in-neighbours, the
/// ring's): already in the per-rank figure.
const DEFAULT_PEERS: u64 = 2 * titus_overlay::DEFAULT_SHORTCUTS as u64 + 6;

/// The fabric peers each rank of a job over `params` connects at open, at most: its
/// overlay row and as many in-neighbours, bounded by the job; none where the overlay is a
/// complete graph that connects on first contact.
fn eager_peers(params: &titus_overlay::OverlayParams, ranks: u32) -> u64 {
    let params = titus_overlay::OverlayParams {
        ranks,
        ..params.clone()
    };
    match titus_overlay::Overlay::new(params) {
        Ok(o) if !titus_core::connects_lazily(&o) => {
            (2 * u64::from(o.shortcuts()) + 6).min(u64::from(ranks.saturating_sub(1)))
        }
        _ => 0,
    }
}

/// Why a simulated run did not end: the job asks for what the simulator refuses (bad
/// input: exit 2), or the run failed (an invariant or a workload error: exit 1).
enum RunError {
    Refused(String),
    Failed(String),
}

impl From<String> for RunError {
    fn from(e: String) -> Self {
        Self::Failed(e)
    }
}

impl From<dlb::UsageError> for RunError {
    fn from(e: dlb::UsageError) -> Self {
        Self::Refused(e.0)
    }
}

impl From<titus_workload::WorkloadError> for RunError {
    fn from(e: titus_workload::WorkloadError) -> Self {
        Self::Failed(e.to_string())
    }
}

impl From<&str> for RunError {
    fn from(e: &str) -> Self {
        Self::Failed(e.into())
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(e) | Self::Failed(e) => f.write_str(e),
        }
    }
}

fn simulate(
    a: &SimArgs,
    run: &Run,
    plan: &dlb::Plan,
    model: &Model,
    faults: &Faults,
) -> Result<Simulated, RunError> {
    let ranks = run.args.ranks;
    let mut cfg = dlb::config(run, ranks, plan)?;
    cfg.overlay.ranks = ranks;
    // Each steal's latency and event are kept only for plots (and traces: the engine).
    cfg.core.steal_log = run.args.plot.is_some();
    // Moving a share: a claim's fetch-add and read, two round trips and an atomic.
    cfg.core.move_cost =
        std::time::Duration::from_nanos((4.0 * model.latency_ns + model.atomic_ns) as u64);
    let base = titus_workload::generate(&plan.spec)?;
    let nominal_slot = layout::slot_size(cfg.core.max_payload);
    // Real DLB_Bench payloads, or (at scale) each task's number charged at the nominal
    // payload size, its result a hash of it.
    let real = if a.real_tasks {
        Some(
            run.args
                .calibration
                .ok_or("--real-tasks needs --calibration (a dlb-bench report's calibration_s)")?,
        )
    } else {
        None
    };
    let (scale, result, calibration): (f64, &ResultFn, f64) = match real {
        Some(per_round) => (1.0, &task::run, per_round),
        None => {
            cfg.core.max_payload = 8;
            let scale = nominal_slot as f64 / layout::slot_size(8) as f64;
            (scale, &check::check_result, 0.0)
        }
    };
    // An epoch's simulated tasks: each keyed by its number (as dlb-bench keys them), with
    // that epoch's cost.
    let sim_tasks = |owned: &[Vec<titus_workload::TaskSpec>], epoch: u32| -> Vec<Vec<SimTask>> {
        let costs = titus_workload::EpochCosts::new(owned, epoch, plan.drift);
        owned
            .iter()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        let t = &costs.task(t);
                        let (hint_ns, priority) =
                            dlb::hint_and_priority(&run.args, t, plan.spec.task_time);
                        SimTask {
                            kind: 0,
                            key: t.global,
                            cost_ns: (t.cost * 1e9) as u64,
                            payload: match real {
                                Some(per_round) => dlb::task_payload(plan, t, per_round),
                                None => t.global.to_le_bytes().to_vec(),
                            },
                            hint_ns,
                            priority,
                        }
                    })
                    .collect()
            })
            .collect()
    };
    // Every epoch the same tasks (owner, index, payload data), with that epoch's costs
    // (until a repartition plan moves some). Each later epoch's tasks are made when it
    // begins (`later_epochs_supplied`): held all at once, 100,000 ranks' four epochs took
    // more memory than the simulation itself. The drift rotates the costs, so every
    // epoch has the first's costliest task, which the virtual-time check reads.
    let tasks = sim_tasks(&base, 0);
    let (described, dispatch) = dlb::resources(&run.args, ranks)?;
    let resources = titus_sim::SimResources {
        per_rank: described.unwrap_or_default(),
        dispatch,
        ..titus_sim::SimResources::default()
    };
    let capacity = dlb::hetero_capacity(ranks, run.args.workers, &resources.per_rank);
    let job = Job {
        core: cfg.core,
        overlay: cfg.overlay,
        workers: run.args.workers,
        model: model.clone(),
        faults: faults.clone(),
        seed: run.args.seed,
        tasks,
        later_epochs: Vec::new(),
        later_epochs_supplied: plan.epochs.saturating_sub(1) as usize,
        start_skew_ns: 0,
        check_start: false,
        result,
        task_bytes_scale: scale,
        max_events: u64::MAX,
        resources,
        mapper: None,
        // (Checked with the other flags before any run.)
        worker_grain_ns: dlb::worker_grain(&run.args)
            .unwrap_or(None)
            .map(|g| g.as_nanos() as u64),
        // The runtime's serial work around each start, on each rank.
        start_cpu: titus_sim::StartCpu::RUNTIME,
        spawn: None,
        trace: a.trace.is_some(),
    };
    titus_sim::time::check(&job).map_err(|e| RunError::Refused(e.to_string()))?;
    let t0 = Instant::now();
    // Ownership as it stands: a repartition plan between two epochs changes it for the
    // next. Each epoch is reported as it ends, on the ownership it ran on (its tasks made
    // again: the same draw), and dropped: every epoch's results and figures held to the
    // end were most of a 100,000-rank run's memory.
    let owned = std::cell::RefCell::new(base);
    let mut reports = Vec::new();
    let mut hetero = Vec::new();
    let mut kept: Vec<Vec<titus_sim::RankOutcome>> = Vec::new();
    let mut between = |b: &titus_sim::Between<'_>| {
        let next = b.epoch as u32 + 1;
        let mut owned = owned.borrow_mut();
        // As dlb-bench: after epoch e with e + 1 a multiple of K, every rank's plan (keys:
        // the tasks' numbers, string order) moves tasks for good; the following epochs
        // run on the new ownership.
        if let Some(k) = run.args.repartition
            && next.is_multiple_of(k)
        {
            let keys: Vec<Vec<u64>> = owned
                .iter()
                .map(|ts| ts.iter().map(|t| t.global).collect())
                .collect();
            let moves = b.repartition_plan(&keys).map_err(|e| e.to_string())?;
            titus_workload::apply_plans(&mut owned, &moves, run.args.repartition_plan.plan())
                .map_err(|e| e.to_string())?;
        }
        Ok(Some(sim_tasks(&owned, next)))
    };
    let mut each = |e: usize, outcome: Vec<titus_sim::RankOutcome>| {
        let all = titus_workload::epoch_tasks(&owned.borrow(), e as u32, plan.drift);
        let work_ns: f64 = all.iter().flatten().map(|t| t.cost * 1e9).sum();
        let makespan = outcome
            .iter()
            .map(|o| o.stats.session.as_nanos())
            .max()
            .unwrap_or(0) as f64;
        let accel: u64 = outcome
            .iter()
            .flat_map(|o| o.stats.resources.iter().skip(1))
            .map(|c| c.completed)
            .sum();
        hetero.push((work_ns / (capacity * makespan.max(1.0)), accel));
        let figs = figures(&outcome, scale, run.args.plot.is_some());
        reports.push(dlb::report(run, plan, e as u32, &all, &figs, calibration));
        if a.trace.is_some() {
            kept.push(outcome);
        }
        Ok(())
    };
    let out = titus_sim::simulate_each(job, &mut between, &mut each)
        .map_err(|v| format!("{}: {v}", run.label()))?;
    let wall_s = t0.elapsed().as_secs_f64();
    if let Some(dir) = &a.trace {
        write_trace(dir, &kept, run.args.workers).map_err(RunError::Refused)?;
    }
    Ok(Simulated {
        reports,
        events: out.events,
        wall_s,
        hetero,
    })
}

/// The simulator's DLB_Bench runs of `flags` (dlb-bench's and `titus sim`'s, as on the
/// command line) over `model` as it is given (`--preset` and the node flags are not
/// read): every run's reports, one per epoch. For `titus sim --calibrate`, which fits
/// what the model leaves of a real run.
pub(crate) fn reports(flags: &[&str], model: &Model) -> Result<Vec<Report>, String> {
    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        a: SimArgs,
    }
    use clap::Parser;
    let a = Cmd::try_parse_from(std::iter::once("titus sim").chain(flags.iter().copied()))
        .map_err(|e| format!("titus sim {}: {e}", flags.join(" ")))?
        .a;
    let mut out = Vec::new();
    for run in dlb::runs(&a.bench).map_err(|e| e.0)? {
        let plan = dlb::plan(&run.args, run.args.ranks).map_err(|e| e.0)?;
        out.extend(
            simulate(&a, &run, &plan, model, &Faults::default())
                .map_err(|e| e.to_string())?
                .reports,
        );
    }
    Ok(out)
}

/// Each rank's figures of one simulated epoch (task bytes charged `scale` times; the
/// steal log kept for plots).
fn figures(ranks: &[titus_sim::RankOutcome], scale: f64, log: bool) -> Vec<RankFigures> {
    ranks
        .iter()
        .map(|r| {
            let st = &r.stats.core;
            RankFigures {
                bytes: (st.bytes_stolen as f64 * scale) as u64 + st.bytes_results,
                links: dlb::Links {
                    peers: r.peers,
                    connect_s: r.connect_ns as f64 * 1e-9,
                    bytes: r.connection_bytes,
                },
                ..RankFigures::of(&r.stats, dlb::digest(&r.results), true, log)
            }
        })
        .collect()
}

/// Most ranks `--trace` writes: a file each, and every task's span in memory.
const TRACE_RANKS_MAX: u32 = 4096;

/// Writes each rank's epochs to `dir/titus-trace-rank<R>.jsonl`, as the runtime's trace
/// does, in virtual ns: a worker's spans are its lane's, and its idle time the gaps
/// between them within the epoch.
fn write_trace(
    dir: &Path,
    epochs: &[Vec<titus_sim::RankOutcome>],
    workers: usize,
) -> Result<(), String> {
    use titus_runtime::trace::{EpochRecord, PhasesRecord, append, file_of};
    let io = |e: std::io::Error| format!("--trace '{}': {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(io)?;
    for r in 0..epochs.last().map_or(0, Vec::len) {
        let mut file =
            std::io::BufWriter::new(std::fs::File::create(file_of(dir, r as u32)).map_err(io)?);
        for (e, ranks) in epochs.iter().enumerate() {
            let o = &ranks[r];
            let st = &o.stats;
            let tasks_from = o.called_ns + st.start.as_nanos() as u64;
            let end = o.called_ns + st.session.as_nanos() as u64;
            let lanes = o.spans.iter().map(|s| s[5] as usize + 1).max().unwrap_or(0);
            let mut tasks = vec![Vec::new(); lanes.max(workers)];
            for s in &o.spans {
                tasks[s[5] as usize].push([s[0], s[1], s[2], s[3], s[4]]);
            }
            let mut idle = Vec::new();
            for (w, spans) in tasks.iter_mut().enumerate() {
                spans.sort_unstable();
                let mut free = tasks_from;
                for s in spans.iter().chain(std::iter::once(&[end, 0, 0, 0, 0])) {
                    if s[0] > free {
                        idle.push([w as u64, free, s[0] - free]);
                    }
                    free = free.max(s[0] + s[1]);
                }
            }
            let record = EpochRecord {
                workers: tasks.len(),
                call_ns: o.called_ns,
                end_ns: end,
                phases_ns: PhasesRecord {
                    collectives: st.start.as_nanos() as u64,
                    collective_phases: st.start_figures.phase_ns,
                    ..PhasesRecord::default()
                },
                tasks,
                keys: o.keys.clone(),
                idle,
                ..EpochRecord::of(r as u32, e as u64, st, tasks_from)
            };
            append(&mut file, &record).map_err(io)?;
        }
        file.flush().map_err(io)?;
    }
    Ok(())
}

/// The most seeds one `--check` runs: 10,000 take about two minutes here, so this is
/// some hours — a number past it is a typo, not a plan.
const CHECK_SEEDS_MAX: u64 = 1_000_000;

fn run_check(a: &SimArgs) -> Result<u8, UsageError> {
    if !(1..=CHECK_SEEDS_MAX).contains(&a.seeds) {
        return Err(UsageError(format!(
            "--seeds {}: expected 1..={CHECK_SEEDS_MAX} (0 would check nothing)",
            a.seeds
        )));
    }
    let first = a.bench.seed;
    // The seeds run are first..=last: refused, not cut short, where last passes u64.
    let Some(last) = first.checked_add(a.seeds - 1) else {
        return Err(UsageError(format!(
            "--seed {first} --seeds {}: the seeds would run past {} (from this --seed, \
             --seeds at most {})",
            a.seeds,
            u64::MAX,
            u64::MAX - first + 1
        )));
    };
    let t0 = Instant::now();
    let (mut events, mut failed) = (0u64, 0u64);
    // Every seed's trace hash folded in order: two builds that simulate identically print
    // the same digest (a refactoring's proof that behaviour did not change).
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for seed in first..=last {
        match check::check_seed(seed) {
            Ok(d) => {
                events += d.events;
                failed += d.exercised.failed_everywhere;
                digest = (digest ^ d.trace).wrapping_mul(0x100_0000_01b3);
            }
            Err((what, v)) => {
                println!("titus sim --check: seed {seed} FAILED ({what}): {v}");
                println!("reproduce: titus sim --check --seed {seed} --seeds 1");
                return Ok(1);
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "titus sim --check: {} seeds from {first}, every invariant held ({events} events, trace digest {digest:016x}, {:.1} s, {:.0} events/s; {failed} runs stopped on every rank by an injected resource failure)",
        a.seeds,
        wall,
        events as f64 / wall.max(1e-9)
    );
    Ok(0)
}

/// Simulations of this many ranks or more ask for huge pages ([`huge_pages_for_the_heap`]).
const HUGE_PAGES_FROM: u32 = 10_000;

/// A simulation of tens of thousands of ranks touches gigabytes at random (each event a
/// different rank's state): with 4 KiB pages most of its time goes to TLB misses. glibc
/// puts its heap on transparent huge pages only when told at start-up
/// (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, where the kernel's THP mode is `madvise`):
/// unless the variable is set already, `titus sim` runs itself again with it (and
/// [`HEAP_TUNABLES`]' other two), the same arguments, once. 31,623 ranks here: 315.6 →
/// 281.7 s, the same events and results. Where it cannot, the run goes on as it is.
fn huge_pages_for_the_heap() {
    use std::os::unix::process::CommandExt;
    if !cfg!(all(target_os = "linux", target_env = "gnu"))
        || std::env::var_os("GLIBC_TUNABLES").is_some()
    {
        return;
    }
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    // `exec` returns only if it failed: then this process simply goes on.
    let _ = std::process::Command::new(me)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", HEAP_TUNABLES)
        .exec();
}

/// The heap on huge pages; freed memory kept (not trimmed from the heap's top or
/// unmapped, large blocks too): what a run frees it takes again soon, and each huge page
/// given back and faulted in again is 2 MiB zeroed — 3% of a 31,623-rank run's time.
const HEAP_TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.trim_threshold=4294967296:\
                             glibc.malloc.mmap_threshold=33554432";

/// Checks `titus sim`'s flags, every sweep point's included, before anything runs
/// (`--calibrate` as well as a simulation).
pub fn check(a: &SimArgs) -> Result<(), UsageError> {
    dlb::set_program("titus sim");
    dlb::check_args(&a.bench)?;
    // A sweep point's value replaces a flag checked above: every point gets the same
    // checks, before any run (`--sweep workers=5000` is refused as `--workers 5000` is).
    if let Some(spec) = &a.bench.sweep {
        for (point, _) in dlb::sweep_points(&a.bench, spec)? {
            dlb::check_args(&point)?;
        }
    }
    Ok(())
}

/// Runs `titus sim` once [`check`] passed, but for `--calibrate` (`crate::calibrate`).
pub fn run(a: SimArgs) -> Result<u8, UsageError> {
    if a.check {
        return run_check(&a);
    }
    if let Some(spec) = &a.uts {
        return crate::sim_uts::run(&a, spec);
    }
    let model = model(&a)?;
    let faults = parse_faults(&a)?;
    if a.real_tasks && a.bench.calibration.is_none() {
        return Err(UsageError(
            "--real-tasks needs --calibration (a dlb-bench report's calibration_s)".into(),
        ));
    }
    let mut reports: Vec<(String, Report)> = Vec::new();
    let runs = dlb::runs(&a.bench)?;
    if a.trace.is_some() {
        if runs.len() != 1 {
            return Err(UsageError(format!(
                "--trace takes one run, not {} (one balancer, no --sweep)",
                runs.len()
            )));
        }
        if runs[0].args.ranks > TRACE_RANKS_MAX {
            return Err(UsageError(format!(
                "--trace: at most {TRACE_RANKS_MAX} ranks (a file each, every task's span kept), not {}",
                runs[0].args.ranks
            )));
        }
    }
    // Before any run: every sweep point must fit in memory. Measured: 100,000 simulated
    // ranks peaked at 6.96 GiB (~70 KiB a rank with its events, segments and overlay
    // rows), plus a task's record and events.
    let mut plans = Vec::with_capacity(runs.len());
    for run in &runs {
        let ranks = run.args.ranks;
        if ranks == 0 {
            return Err(UsageError("--ranks must be at least 1".into()));
        }
        let named = faults.slow.iter().map(|s| ("--slow", s.0));
        if let Some((flag, r)) = named
            .chain(faults.stall.map(|s| ("--stall", s.0)))
            .find(|&(_, r)| r >= ranks)
        {
            return Err(UsageError(format!(
                "{flag} names rank {r}, but the job has {ranks} ranks (0..={})",
                ranks - 1
            )));
        }
        // The ranks alone, before the plan: it holds a count per rank (and a counts
        // file's per rank) before any other check could refuse the job.
        crate::limits::check_fits(
            &format!("simulating {ranks} ranks"),
            u64::from(ranks).saturating_mul(72 << 10),
        )?;
        let plan = dlb::plan(&run.args, ranks)?;
        let peers = eager_peers(&dlb::config(run, ranks, &plan)?.overlay, ranks);
        crate::limits::check_fits(
            &format!("simulating {ranks} ranks"),
            u64::from(ranks)
                .saturating_mul(
                    (72 << 10)
                        + peers
                            .saturating_sub(DEFAULT_PEERS)
                            .saturating_mul(PEER_BYTES),
                )
                // Three copies of an epoch's tasks: the generated ones, the simulator's
                // (one epoch's at a time) and the ranks' queues.
                .saturating_add(
                    plan.spec
                        .tasks
                        .saturating_mul(96)
                        .saturating_mul(u64::from(plan.epochs.min(3))),
                ),
        )?;
        plans.push(plan);
    }
    if plans.iter().any(|p| p.spec.ranks >= HUGE_PAGES_FROM) {
        huge_pages_for_the_heap();
    }
    for (run, plan) in runs.into_iter().zip(&plans) {
        let s = match simulate(&a, &run, plan, &model, &faults) {
            Ok(s) => s,
            Err(RunError::Refused(e)) => return Err(UsageError(e)),
            Err(RunError::Failed(e)) => {
                // An invariant that failed is a bug, not bad input: say so and exit 1.
                eprintln!("titus sim: error: {e}");
                std::process::exit(1)
            }
        };
        let rss = peak_rss_mib();
        let eps = s.events as f64 / s.wall_s.max(1e-9);
        let mut run_reports = s.reports;
        for r in &mut run_reports {
            r.speedup = dlb::speedup(&reports, r);
        }
        // Only with --resources: the reports without stay as they were.
        let hetero = a.bench.resources.is_some().then_some(&s.hetero);
        if a.bench.json {
            // One line per epoch; the simulator's figures are the whole job's.
            for (e, r) in run_reports.iter().enumerate() {
                let mut v = serde_json::to_value(r).map_err(|e| UsageError(e.to_string()))?;
                if let Some(o) = v.as_object_mut() {
                    if let Some(&(h, accel)) = hetero.and_then(|h| h.get(e)) {
                        o.insert("hetero_efficiency".into(), h.into());
                        o.insert("accel_tasks".into(), accel.into());
                        o.insert("dispatch".into(), a.bench.dispatch.clone().into());
                    }
                    o.insert("preset".into(), model.name.clone().into());
                    o.insert("node_model".into(), model.cpu.is_some().into());
                    // The grain the simulated workers took (--worker-grain-us or the
                    // runtime's default for the run's workers).
                    let grain = dlb::worker_grain(&a.bench)
                        .unwrap_or(None)
                        .unwrap_or_else(|| titus_core::default_worker_grain(r.workers));
                    o.insert(
                        "worker_grain_us".into(),
                        (grain.as_nanos() as f64 / 1e3).into(),
                    );
                    o.insert("sim_events".into(), s.events.into());
                    o.insert("sim_wall_s".into(), s.wall_s.into());
                    o.insert("events_per_s".into(), eps.into());
                    o.insert("peak_rss_mib".into(), rss.into());
                }
                println!("{v}");
            }
        } else {
            dlb::print(&run_reports, &a.bench, reports.is_empty());
            for (e, (h, accel)) in hetero.into_iter().flatten().enumerate() {
                println!(
                    "epoch {e}: efficiency against the heterogeneous ideal {h:.3} ({} dispatch, {accel} tasks on accelerators)",
                    a.bench.dispatch
                );
            }
            if !a.bench.csv {
                println!(
                    "simulated on {}: {} events in {:.2} s ({:.0} events/s), peak RSS {:.0} MiB\n",
                    model.name, s.events, s.wall_s, eps, rss
                );
            }
        }
        reports.extend(run_reports.into_iter().map(|r| (run.label(), r)));
    }
    if reports.len() > 1 && !a.bench.json && !a.bench.csv {
        dlb::print_summary(&reports);
    }
    if a.bench.plot.is_some() || a.bench.sweep.is_some() {
        for f in titus_plot::plots(&a.bench, &reports)? {
            eprintln!("titus sim: wrote {}", f.display());
        }
    }
    Ok(0)
}
