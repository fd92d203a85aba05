//! DLB_Bench's command line, runs and reports, shared by `dlb-bench` (runs on the real
//! runtime) and `titus sim` (the same runs on the simulator): the flags, the profiles, the
//! list of runs (balancers × protocols × sweep points), the core and overlay
//! configuration of each run, and the report with its table, JSON and CSV (the plots of
//! the reports: `titus-plot`).

use crate::{Cost, Distribution, Spec, TaskSpec, task};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use serde::Serialize;
use std::path::PathBuf;
use titus_core::{Balancing, Config, Protocol};
use titus_overlay::OverlayParams;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// Task cost distribution.
pub enum CostArg {
    /// Every task costs the mean (TITUS).
    Constant,
    /// Exponential around the mean.
    Exponential,
    /// Lognormal (σ = 1) with the mean.
    Lognormal,
    /// A contiguous 10% reaction zone of tasks 30× dearer.
    Bimodal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// Initial ownership of the tasks.
pub enum DistArg {
    /// TITUS: 10% of the ranks hold ~70% of the tasks.
    Gaussian,
    /// Even counts.
    Uniform,
    /// Everything on rank 0.
    One,
    /// Counts per rank from --counts FILE.
    File,
}

/// A `--balancer` value: one balancer (named as [`Balancing`] names them), or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancerArg {
    /// One balancer.
    One(Balancing),
    /// Every balancer, one after the other.
    All,
}

impl ValueEnum for BalancerArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [BalancerArg; 6] = [
            BalancerArg::One(Balancing::ALL[0]),
            BalancerArg::One(Balancing::ALL[1]),
            BalancerArg::One(Balancing::ALL[2]),
            BalancerArg::One(Balancing::ALL[3]),
            BalancerArg::One(Balancing::ALL[4]),
            BalancerArg::All,
        ];
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::One(b) => PossibleValue::new(b.name()).help(b.about()),
            Self::All => {
                PossibleValue::new("all").help("Every balancer above, one after the other")
            }
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// A mechanism's switch (`--diffusion`, `--advertise`, ...).
pub enum Switch {
    /// The mechanism runs.
    On,
    /// It does not.
    Off,
}

/// Whether a run's switch is on: a run's arguments hold one value (the first of a list).
pub fn on(switch: &[Switch]) -> bool {
    switch.first() == Some(&Switch::On)
}

/// A switch's values, duplicates dropped, order kept (none given: `default`).
fn parse_draw(s: &str) -> Result<titus_overlay::ShortcutDraw, String> {
    titus_overlay::ShortcutDraw::parse(s).map_err(|e| e.to_string())
}

fn switch_values(list: &[Switch], default: Switch) -> Vec<Switch> {
    let mut out = Vec::new();
    for &x in list {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    if out.is_empty() {
        out.push(default);
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// Where diffusion sends excess predicted load (`--diffusion-plan`,
/// `titus_core::DiffusionPlan`).
pub enum PlanArg {
    /// One round of first-order diffusion to overlay neighbours.
    Neighbours,
    /// RankDLB's string: excess matched to deficits in rank order, routed through the
    /// overlay.
    String,
}

impl PlanArg {
    /// The core's plan.
    pub fn plan(self) -> titus_core::DiffusionPlan {
        match self {
            Self::Neighbours => titus_core::DiffusionPlan::Neighbours,
            Self::String => titus_core::DiffusionPlan::String,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// How `--repartition` moves tasks (`titus_core::repartition::RepartitionPlan`).
pub enum RepartitionArg {
    /// Only to string neighbours, by the flows across each border.
    Neighbours,
    /// The string cut anew by predicted cost: contiguous ownership, any rank.
    Recut,
}

impl RepartitionArg {
    /// The core's plan.
    pub fn plan(self) -> titus_core::repartition::RepartitionPlan {
        match self {
            Self::Neighbours => titus_core::repartition::RepartitionPlan::Neighbours,
            Self::Recut => titus_core::repartition::RepartitionPlan::Recut,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// A steal protocol.
pub enum ProtocolArg {
    /// TITUS's lock protocol.
    Lock,
    /// One fetch-add claims a batch (the default).
    Claim,
    /// A request answered by the victim.
    Request,
    /// Every protocol, one after the other.
    All,
}

/// DLB_Bench's flags (shared by `dlb-bench` and `titus sim`).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Ranks of an in-process run (under a launcher the launcher sets them).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    pub ranks: u32,
    /// Named profile: quick, w1-s4k, w5-s1m, w10-s21m (per-rank work W/n and size S/n),
    /// or chem (a combustion code's time steps: 4,096 tasks of 12 µs mean and 48 B per
    /// rank, a bimodal front 10% wide and 30× dearer, uniform slabs, 8 epochs, drift 0.03).
    #[arg(long, default_value = "quick")]
    pub profile: String,
    /// Tasks over all ranks [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub tasks: Option<u64>,
    /// Mean task duration, seconds [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub task_time: Option<f64>,
    /// Task cost distribution [default: the profile's; constant but chem's bimodal].
    #[arg(long, value_enum)]
    pub cost: Option<CostArg>,
    /// Initial ownership of the tasks [default: the profile's; gaussian but chem's
    /// uniform].
    #[arg(long, value_enum)]
    pub distribution: Option<DistArg>,
    /// Epochs (time steps) each run makes, every task in each: same owner, index and
    /// payload data; its cost moves with --drift. Every epoch is verified and reported
    /// [default: the profile's; 1 but chem's 8].
    #[arg(long, value_name = "E", allow_negative_numbers = true)]
    pub epochs: Option<u32>,
    /// Drift of the cost pattern per epoch, a fraction D in [0, 1) of the global task
    /// list (tasks numbered rank by rank): epoch e's cost of task g is epoch 0's cost of
    /// task (g − round(e·D·T)) mod T over T tasks, so a bimodal reaction zone moves like a
    /// flame front over the ranks; ownership never changes [default: the profile's; 0
    /// but chem's 0.03].
    #[arg(long, value_name = "D", allow_negative_numbers = true)]
    pub drift: Option<f64>,
    /// Diffusion before stealing, from the last epoch's measured costs: on or off, or
    /// on,off to run each balancer both ways side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub diffusion: Vec<Switch>,
    /// Where diffusion sends a rank's excess: `neighbours` (one round of first-order
    /// diffusion to overlay neighbours) or `string` (RankDLB's rank string: every excess
    /// matched to deficits in rank order, routed through the overlay; the default); a list
    /// runs each.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "string")]
    pub diffusion_plan: Vec<PlanArg>,
    /// Blacklist and advertisement: a thief that finds a victim empty stops probing it
    /// until the victim advertises new work (`titus_core::Config::advertise`); off: the
    /// per-victim exponential backoff alone; on,off runs each balancer both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub advertise: Vec<Switch>,
    /// Cost-aware batches: each task carries its drawn cost as a hint, and a steal takes
    /// about half of the victim's estimated work instead of half of its tasks; what is
    /// cheaper to finish than to move stays (`titus_core::Config::cost_aware`); off: the
    /// count rule (the hints are ignored); on,off runs each balancer both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub cost_aware: Vec<Switch>,
    /// Priorities: tasks dearer than the mean (bimodal's reaction zone; the dear tail of
    /// the others) get priority 1, so each rank runs them first and shares its cheap ones
    /// first (longest first, as diffusion's predicted order does); off: all 0; on,off
    /// runs each balancer both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub priorities: Vec<Switch>,
    /// Every K epochs, hand tasks for good to rank-string neighbours as the runtime's
    /// repartition plan says (RankDLB's step 4: what a solver would do with its cells);
    /// ownership changes from the next epoch on (dlb-bench only).
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub repartition: Option<u32>,
    /// How `--repartition` moves tasks: `neighbours` (only to string neighbours, by the
    /// flows across each border) or `recut` (the string cut anew by predicted cost: each
    /// rank's tasks stay contiguous, but may go to any rank).
    #[arg(long, value_enum, default_value = "neighbours")]
    pub repartition_plan: RepartitionArg,
    /// Task counts per rank for `--distribution file` (COUNT or RANK COUNT per line).
    #[arg(long, value_name = "FILE")]
    pub counts: Option<std::path::PathBuf>,
    /// Payload bytes per task [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub payload: Option<u64>,
    /// Load balancers, comma-separated (or `all`): each runs in turn, side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "smallworld")]
    pub balancer: Vec<BalancerArg>,
    /// Steal protocols of smallworld and random, comma-separated (or `all`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "claim")]
    pub protocol: Vec<ProtocolArg>,
    /// Ranks per group of the hierarchical balancer [default: ⌈√ranks⌉].
    #[arg(long, allow_negative_numbers = true)]
    pub group_size: Option<u32>,
    /// Shortcuts per rank of the smallworld overlay [default: 30]: fewer bound each
    /// rank's peers (about twice this plus the lattice's), more shorten the routes.
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub shortcuts: Option<u32>,
    /// How the smallworld overlay draws its shortcuts: kleinberg (each rank its own; a
    /// rank's in-neighbours as chance gives them) or paired (rounds of matchings: every
    /// shortcut goes both ways, so a rank's peers are at most 2 + the shortcuts).
    #[arg(long, value_name = "DRAW", default_value = "kleinberg", value_parser = parse_draw)]
    pub shortcut_draw: titus_overlay::ShortcutDraw,
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub workers: usize,
    /// Accelerators beside the workers (issue #16): GROUP[;GROUP...], GROUP =
    /// ranks=A-B:accel=N[:speed=S][:capacity=C][:kinds=K,...], e.g.
    /// `ranks=0-895:accel=1:speed=8:capacity=1` (N accelerators on each of ranks A..=B, S
    /// times a worker, C tasks at once). The runtime emulates each with a thread that runs
    /// the task and then sleeps to take cost/S; the simulator charges cost/S.
    #[arg(long, value_name = "SPEC")]
    pub resources: Option<String>,
    /// Which resource a ready task goes to: least-loaded (fewest unfinished submissions),
    /// round-robin or fixed (the accelerator whenever it has room).
    #[arg(long, value_name = "POLICY", default_value = "least-loaded")]
    pub dispatch: String,
    /// Seed of the workload, the overlay and victim choice.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// One JSON object on one line per run and epoch (key `epoch`, 0-based).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV: a header line and one row per run and epoch.
    #[arg(long)]
    pub csv: bool,
    /// Draw plots (PNG and SVG) into this directory: efficiency per run, per-rank busy and
    /// idle time before and after balancing, a timeline of steals (of each run's last
    /// epoch); with --epochs over 1, efficiency and steals per epoch, a line per run
    /// (epochs-efficiency, epochs-steals).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Repeat the runs over values of one parameter: PARAM=V1,V2,... with PARAM one of
    /// ranks, tasks, task-time, payload, workers, seed, group-size. Writes sweep.csv and
    /// sweep-efficiency.{png,svg} into the --plot directory (default: dlb-sweep).
    #[arg(long, value_name = "PARAM=LIST")]
    pub sweep: Option<String>,
    /// No progress bar (it shows only on a terminal, on runs longer than 2 s).
    #[arg(long)]
    pub no_progress: bool,
    /// Seconds per round of the task's work instead of measuring it at start-up: the same
    /// value gives the same tasks and results on any machine (the report's
    /// `calibration_s` of an earlier run repeats it).
    #[arg(long, value_name = "SECONDS")]
    pub calibration: Option<f64>,
    /// Tuning: tasks an owner keeps private when it shares [default: the core's, 1].
    #[arg(long, allow_negative_numbers = true)]
    pub min_private: Option<u32>,
    /// Tuning: longest backoff of a thief from an empty victim, ms [default: 10].
    #[arg(long, allow_negative_numbers = true)]
    pub backoff_max_ms: Option<f64>,
    /// Tuning: how long results wait for company before their chunk travels home, ms
    /// (a chunk also leaves half full, and at once when its rank's queue is empty)
    /// [default: the core's, 20].
    #[arg(long, allow_negative_numbers = true)]
    pub flush_delay_ms: Option<f64>,
    /// Tuning: a worker's grain, µs of estimated work it takes from its rank's queue at
    /// once and runs before it reports the results (0: one task at a time) [default: 25 ×
    /// workers, at most 200]. The simulator's workers take the same grains.
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub worker_grain_us: Option<f64>,
}

/// A named workload: its per-rank shape and the defaults of the flags it sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Per-rank work W/n, seconds.
    pub work_s: f64,
    /// Per-rank problem size S/n, bytes.
    pub size_bytes: u64,
    /// Tasks per rank.
    pub tasks_per_rank: u64,
    /// Cost distribution.
    pub cost: CostArg,
    /// Ownership.
    pub distribution: DistArg,
    /// Epochs.
    pub epochs: u32,
    /// Drift per epoch (`--drift`).
    pub drift: f64,
}

/// The names of the profiles.
pub const PROFILES: [&str; 5] = ["quick", "w1-s4k", "w5-s1m", "w10-s21m", "chem"];

/// A profile by name. `chem` is a combustion code's time steps, shaped after
/// examples/chemistry (a 64 × 32 grid in slabs over 2 ranks, ~12 µs per cell on average,
/// cells in the flame front ~100× cold ones, 48-byte cell records): 4,096 tasks of 12 µs
/// mean and 48 B per rank, owned in slabs (uniform), a contiguous front of 10% of the
/// tasks 30× dearer (bimodal), 8 epochs, the front moving 3% of the tasks per epoch.
pub fn profile(name: &str) -> Option<Profile> {
    let titus = |work_s, size_bytes| Profile {
        work_s,
        size_bytes,
        tasks_per_rank: 100,
        cost: CostArg::Constant,
        distribution: DistArg::Gaussian,
        epochs: 1,
        drift: 0.0,
    };
    match name {
        "quick" => Some(titus(0.25, 64 << 10)),
        "w1-s4k" => Some(titus(1.0, 4_000)),
        "w5-s1m" => Some(titus(5.0, 1_000_000)),
        "w10-s21m" => Some(titus(10.0, 21_000_000)),
        "chem" => Some(Profile {
            work_s: 4096.0 * 12e-6,
            size_bytes: 4096 * 48,
            tasks_per_rank: 4096,
            cost: CostArg::Bimodal,
            distribution: DistArg::Uniform,
            epochs: 8,
            drift: 0.03,
        }),
        _ => None,
    }
}

/// A task's cost hint (its drawn cost, ns: the caller knows what it asks for) and its
/// priority (`--priorities on`: 1 for a task dearer than the mean `task_time` seconds,
/// else 0).
pub fn hint_and_priority(args: &BenchArgs, t: &TaskSpec, task_time: f64) -> (u64, i16) {
    let hint = (t.cost * 1e9) as u64;
    let dear = on(&args.priorities) && t.cost > task_time;
    (hint, i16::from(dear))
}

/// Sets the core's diffusion switch (`--diffusion on|off`): with it on, from the second
/// epoch each rank pushes part of its predicted excess to lighter overlay neighbours
/// before stealing starts (`titus_core::Config::diffusion`).
pub fn apply_diffusion(core: &mut Config, on: bool) {
    core.diffusion = on;
}

/// One run's figures; the fields are the JSON keys (README, `dlb-bench`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub efficiency: f64,
    /// Σ drawn (calibrated) task cost / (ranks × workers × resolution): the efficiency
    /// tasks running slower than calibrated cannot flatter.
    pub nominal_efficiency: f64,
    /// Resolution time of `none` over this run's, when `none` ran the same workload (and
    /// epoch) in the same invocation; null otherwise.
    pub speedup: Option<f64>,
    /// The epoch (0-based) this row reports.
    pub epoch: u32,
    /// Epochs of the run.
    pub epochs: u32,
    /// Drift of the cost pattern per epoch (fraction of the tasks).
    pub drift: f64,
    /// Diffusion before stealing was asked for.
    pub diffusion: bool,
    /// Repartition every this many epochs (0: never).
    pub repartition: u32,
    /// How the repartition plan moved tasks (`--repartition-plan`): `neighbours` or `recut`.
    pub repartition_plan: &'static str,
    /// Where diffusion sent excess load (`--diffusion-plan`): `neighbours` or `string`.
    pub diffusion_plan: &'static str,
    /// Blacklist and advertisement were on (`--advertise`).
    pub advertise: bool,
    /// Cost-aware batches were on (`--cost-aware`).
    pub cost_aware: bool,
    /// Dear tasks had priority 1 (`--priorities`).
    pub priorities: bool,
    /// How the smallworld overlay drew its shortcuts (`--shortcut-draw`).
    pub shortcut_draw: &'static str,
    pub resolution_s: f64,
    pub ideal_s: f64,
    pub ranks: u32,
    pub workers: usize,
    pub balancer: &'static str,
    pub protocol: &'static str,
    pub seed: u64,
    pub verified: bool,
    pub profile: String,
    pub tasks: u64,
    pub task_time_s: f64,
    pub payload_bytes: u64,
    pub cost: &'static str,
    pub distribution: &'static str,
    pub cycles_per_byte: f64,
    pub steals_ok: u64,
    pub steals_empty: u64,
    pub steals_locked: u64,
    /// Tasks taken by thieves.
    pub tasks_stolen: u64,
    /// Tasks pushed to lighter neighbours before stealing (diffusion, from the second
    /// epoch).
    pub tasks_pushed: u64,
    pub bytes_moved: u64,
    pub result_hops_mean: f64,
    pub group_size: u32,
    /// Most distinct ranks one rank exchanged operations with (either way), since the
    /// job began.
    pub peers_max: u32,
    /// Mean distinct ranks a rank exchanged operations with.
    pub peers_mean: f64,
    /// Connection time charged on the slowest rank (opening's and first contacts'), s.
    pub connect_s: f64,
    /// Memory the connections of the fullest rank hold, MiB.
    pub connection_mib: f64,
    /// The epoch start, slowest rank: from the epoch call to its first task, s (counted
    /// in `resolution_s` and the efficiencies).
    pub start_s: f64,
    /// The epoch start's bytes sent, received and read, the most of any rank.
    pub start_bytes: u64,
    /// The epoch start's messages sent and records read, the most of any rank.
    pub start_messages: u64,
    /// The epoch start's rounds on the longest chain.
    pub start_rounds: u64,
    pub calibration_s: f64,
    pub results_digest: String,
    pub busy_s: Vec<f64>,
    pub idle_s: Vec<f64>,
    pub steal_s: Vec<f64>,
    /// Each rank's progress thread's CPU time (s; the simulator: its node model's share).
    pub progress_cpu_s: Vec<f64>,
    /// Each rank's mean time between tasks, µs: from a worker's task's end to its next
    /// task's start where it went straight on (reporting, taking, serving the node; a
    /// task taken from the worker's own grain with nothing reported starts its clock at
    /// the last one's end and counts 0); the simulator: its node model's time around a
    /// task. 0 where no worker went straight on.
    pub between_tasks_us: Vec<f64>,
    /// Each rank's takes from its queue by its workers (a grain of tasks each): tasks
    /// run over grains is the mean grain.
    pub grains: Vec<u64>,
    /// Remote operations each rank issued (reads, writes, atomics; each costs its target's
    /// progress thread where the target serves them in software).
    pub ops: Vec<u64>,
    /// Each rank's completed operations by kind (`read`, `write`, `signal`, `cas`,
    /// `fetch-add` on other ranks; `own`: on its own memory): how many, and their mean
    /// time from issue to completion (µs). Kinds it did not issue are left out.
    pub op_latency: Vec<std::collections::BTreeMap<String, OpFigure>>,
    /// Seconds of work each rank owned at the start (its busy time without balancing).
    pub owned_s: Vec<f64>,
    /// With `--resources` (dlb-bench): tasks each resource completed this epoch over every
    /// rank, by name (`cpu`, `accel0`, ...), and those not run on a CPU worker.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub resource_tasks: std::collections::BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accel_tasks: Option<u64>,
    /// With `--resources`: calibrated work over (every rank's workers + Σ accelerator
    /// capacity × speed) × makespan — the efficiency against the heterogeneous ideal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hetero_efficiency: Option<f64>,
    /// Successful steals: (seconds from the thief's start, thief, victim, tasks).
    #[serde(skip)]
    pub steals: Vec<(f64, u32, u32, u32)>,
    /// The swept parameter's value, if any.
    #[serde(skip)]
    pub sweep_value: Option<String>,
}

static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the program in error messages (default `dlb-bench`).
pub fn set_program(name: &'static str) {
    let _ = PROGRAM.set(name);
}

/// Prints `msg` as one line on stderr and exits with `code` (2: bad input; 1: failure).
pub fn fail(code: i32, msg: &str) -> ! {
    eprintln!(
        "{}: error: {msg}",
        PROGRAM.get().copied().unwrap_or("dlb-bench")
    );
    std::process::exit(code)
}

/// clap's error on one line: its message and hints, without the usage block.
pub fn clap_error_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line.trim_start_matches("error:").trim());
        }
    }
    parts.join(" ")
}

/// [`parse_args`] for `program`, which then names itself in every error ([`fail`]).
pub fn parse_args_of<T: clap::Parser>(program: &'static str) -> T {
    set_program(program);
    parse_args()
}

/// Parses the command line: help and version print and exit 0; an error prints one line
/// ([`clap_error_line`]) and exits 2.
pub fn parse_args<T: clap::Parser>() -> T {
    match T::try_parse() {
        Ok(t) => t,
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                let _ = e.print();
                std::process::exit(0)
            }
            _ => fail(2, &clap_error_line(&e)),
        },
    }
}

/// The command-line name of a value.
pub fn name<T: ValueEnum>(v: T) -> &'static str {
    // ValueEnum names are 'static in practice; leak the short string once per run.
    let s = v.to_possible_value().expect("value").get_name().to_string();
    Box::leak(s.into_boxed_str())
}

/// A run's workload.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The workload generator's input.
    pub spec: Spec,
    /// Payload bytes per task.
    pub payload: u64,
    /// Profile name.
    pub profile: String,
    /// Cost distribution (the flag's, else the profile's).
    pub cost: CostArg,
    /// Ownership (the flag's, else the profile's).
    pub distribution: DistArg,
    /// Epochs (the flag's, else the profile's).
    pub epochs: u32,
    /// Drift per epoch (the flag's, else the profile's).
    pub drift: f64,
}

/// The longest mean task time, seconds (a day).
pub const TASK_TIME_MAX_S: f64 = 86_400.0;
/// The most work a job may hold, seconds (~30 CPU-years: costs in ns stay far inside u64).
pub const JOB_WORK_MAX_S: f64 = 1e9;

/// The workload of a run (exit 2 on bad flags).
pub fn plan(args: &BenchArgs, ranks: u32) -> Plan {
    let Some(prof) = profile(&args.profile) else {
        fail(
            2,
            &format!(
                "unknown --profile '{}' (expected one of {})",
                args.profile,
                PROFILES.join(", ")
            ),
        );
    };
    let (wn, sn, per_rank) = (prof.work_s, prof.size_bytes, prof.tasks_per_rank);
    let cost_arg = args.cost.unwrap_or(prof.cost);
    let dist_arg = args.distribution.unwrap_or(prof.distribution);
    let epochs = args.epochs.unwrap_or(prof.epochs);
    let drift = args.drift.unwrap_or(prof.drift);
    let tasks = args.tasks.unwrap_or(u64::from(ranks) * per_rank);
    let task_time = args.task_time.unwrap_or(wn / per_rank as f64);
    // A task of at most a day, a job of at most ~30 CPU-years and 2^32 tasks (a task's
    // index is 32 bits on the wire; nanosecond costs and virtual times stay in u64).
    if !(task_time.is_finite() && (0.0..=TASK_TIME_MAX_S).contains(&task_time)) {
        fail(
            2,
            &format!(
                "--task-time {} is not a number of seconds in [0, {TASK_TIME_MAX_S}]",
                crate::show_number(task_time)
            ),
        );
    }
    let payload = args.payload.unwrap_or(sn / per_rank);
    // A task slot holds the payload behind DLB_Bench's task header.
    let payload_max = u64::from(titus_core::layout::PAYLOAD_MAX) - task::HEADER as u64;
    if payload > payload_max {
        fail(
            2,
            &format!("--payload {payload} is over the {payload_max} bytes a task slot may hold"),
        );
    }
    if args.counts.is_some() && dist_arg != DistArg::File {
        fail(
            2,
            "--counts FILE is read only with --distribution file (add it, or drop --counts)",
        );
    }
    let distribution = match dist_arg {
        DistArg::Gaussian => Distribution::Gaussian,
        DistArg::Uniform => Distribution::Uniform,
        DistArg::One => Distribution::One,
        DistArg::File => {
            let Some(path) = &args.counts else {
                fail(2, "--distribution file needs --counts FILE")
            };
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
                fail(
                    2,
                    &format!("cannot read --counts '{}': {e}", path.display()),
                )
            });
            Distribution::File(crate::parse_counts(&text, ranks).unwrap_or_else(|e| fail(2, &e)))
        }
    };
    let total = match &distribution {
        Distribution::File(c) => c
            .iter()
            .try_fold(0u64, |a, &x| a.checked_add(x))
            .unwrap_or(u64::MAX),
        _ => tasks,
    };
    if total > u64::from(u32::MAX) {
        fail(2, &format!("{total} tasks: at most {} per job", u32::MAX));
    }
    if total as f64 * task_time > JOB_WORK_MAX_S {
        fail(
            2,
            &format!(
                "{total} tasks of {task_time} s are {:.3e} s of work, over the {JOB_WORK_MAX_S:e} s a job may hold",
                total as f64 * task_time
            ),
        );
    }
    let cost = match cost_arg {
        CostArg::Constant => Cost::Constant,
        CostArg::Exponential => Cost::Exponential,
        CostArg::Lognormal => Cost::Lognormal,
        CostArg::Bimodal => Cost::Bimodal,
    };
    Plan {
        spec: Spec {
            ranks,
            tasks,
            task_time,
            cost,
            distribution,
            seed: args.seed,
        },
        payload,
        profile: args.profile.clone(),
        cost: cost_arg,
        distribution: dist_arg,
        epochs,
        drift,
    }
}

/// Bookkeeping bytes per task a dlb-bench process holds besides its payloads (the plan's
/// spec, the runtime's task and result, queue and slot headers): measured as the slope of
/// in-process runs' peak RSS over 400,000 tasks at 8 B and 1 KiB payloads (~440 B, and
/// payload bytes twice).
const TASK_OVERHEAD_BYTES: u64 = 480;

/// Refuses (exit 2, one line) a run whose tasks cannot fit in this machine's available
/// memory: `held` is `None` in process (every rank's tasks here), else this rank's
/// under a launcher. Each task holds its payload about twice (the plan's copy and the
/// slot or queue it runs from) besides its bookkeeping; every process generates the
/// whole job's specs.
pub fn check_memory(plan: &Plan, held: Option<u32>) {
    let total = match &plan.spec.distribution {
        Distribution::File(c) => c.iter().fold(0u64, |a, &x| a.saturating_add(x)),
        _ => plan.spec.tasks,
    };
    // This rank's share needs the draw of every rank's counts (which it makes anyway).
    let mine = match held {
        None => total,
        Some(r) => match crate::counts(&plan.spec) {
            Ok(c) => c.get(r as usize).copied().unwrap_or(0),
            Err(_) => return,
        },
    };
    let per_task = TASK_OVERHEAD_BYTES + 2 * (task::HEADER as u64 + plan.payload);
    // Every rank generates the whole job's specs and copies them for its epochs: twice
    // per rank, and every rank is in this process when in process.
    let copies = 2 * held.map_or(u64::from(plan.spec.ranks), |_| 1);
    let need = mine.saturating_mul(per_task).saturating_add(
        total
            .saturating_mul(std::mem::size_of::<TaskSpec>() as u64)
            .saturating_mul(copies),
    );
    if let Some(have) = titus_fabric::mem::available_memory()
        && need > have
    {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        fail(
            2,
            &format!(
                "{mine} tasks of {} B payload here need about {:.1} GiB of memory; this \
                 process has {:.1} GiB available (free memory within its cgroup's limit; \
                 fewer tasks, smaller --payload, or more \
                 ranks on more nodes)",
                plan.payload,
                gib(need),
                gib(have)
            ),
        );
    }
}

/// One run: a balancer (and its protocol) over one sweep point's arguments.
#[derive(Debug, Clone)]
pub struct Run {
    /// The arguments of this run (a sweep point's).
    pub args: BenchArgs,
    /// Its balancer (hierarchical with the point's `--group-size`).
    pub balancer: Balancing,
    /// Its protocol (smallworld and random).
    pub protocol: ProtocolArg,
    /// The swept parameter's value.
    pub sweep_value: Option<String>,
    /// Diffusion before stealing ([`apply_diffusion`]).
    pub diffusion: bool,
    /// Label suffixes of the mechanism switches given more than one value
    /// (`/advertise-off`, `/cost-aware-on`, ...).
    pub switches: String,
}

impl Run {
    /// `balancer` or `balancer/protocol`, and `/no-diffusion` when a balancer runs with
    /// diffusion off.
    pub fn label(&self) -> String {
        let mut l = self.balancer.to_string();
        if self.balancer.steals() {
            l = format!("{l}/{}", name(self.protocol));
        }
        if !self.diffusion && self.balancer != Balancing::None {
            l += "/no-diffusion";
        }
        l + &self.switches
    }

    /// The protocol as reported.
    pub fn protocol_name(&self) -> &'static str {
        match self.balancer {
            Balancing::None => "none",
            b if b.steals() => name(self.protocol),
            // Work sharing answers requests through the request protocol's serving path.
            _ => "request",
        }
    }
}

/// The runs a command line asks for, in order: sweep points, then balancers (`none`
/// first, so the others can report their speed-up over it), then diffusion on/off, then
/// the other switches' values (`--advertise`, `--cost-aware`, `--priorities`), then
/// protocols. `none` runs once per point (with each switch's first value).
pub fn runs(args: &BenchArgs) -> Vec<Run> {
    let mut balancers: Vec<Balancing> = expand(
        &args.balancer,
        BalancerArg::All,
        &Balancing::ALL.map(BalancerArg::One),
    )
    .into_iter()
    .filter_map(|b| match b {
        BalancerArg::One(b) => Some(b),
        BalancerArg::All => None,
    })
    .collect();
    if let Some(i) = balancers.iter().position(|&b| b == Balancing::None) {
        let none = balancers.remove(i);
        balancers.insert(0, none);
    }
    let diffusion: Vec<bool> = switch_values(&args.diffusion, Switch::On)
        .into_iter()
        .map(|d| d == Switch::On)
        .collect();
    let advertise = switch_values(&args.advertise, Switch::On);
    let cost_aware = switch_values(&args.cost_aware, Switch::On);
    let priorities = switch_values(&args.priorities, Switch::Off);
    let mut plans = Vec::new();
    for &p in &args.diffusion_plan {
        if !plans.contains(&p) {
            plans.push(p);
        }
    }
    if plans.is_empty() {
        plans.push(PlanArg::String);
    }
    let mut switches = Vec::new();
    for &x in &advertise {
        for &y in &cost_aware {
            for &z in &priorities {
                for &w in &plans {
                    switches.push((x, y, z, w));
                }
            }
        }
    }
    let protocols = expand(
        &args.protocol,
        ProtocolArg::All,
        &[ProtocolArg::Lock, ProtocolArg::Claim, ProtocolArg::Request],
    );
    let points: Vec<(BenchArgs, Option<String>)> = match &args.sweep {
        None => vec![(args.clone(), None)],
        Some(spec) => sweep_points(args, spec).unwrap_or_else(|e| fail(2, &e)),
    };
    let mut out = Vec::new();
    for (a, v) in points {
        for &b in &balancers {
            let b = match b {
                Balancing::Hierarchical { .. } => Balancing::Hierarchical {
                    group_size: a.group_size,
                },
                b => b,
            };
            let ps: &[ProtocolArg] = if b.steals() {
                &protocols
            } else {
                &[ProtocolArg::Request]
            };
            let ds = if b == Balancing::None {
                &diffusion[..1]
            } else {
                &diffusion[..]
            };
            let combos = if b == Balancing::None {
                &switches[..1]
            } else {
                &switches[..]
            };
            for &d in ds {
                for (adv, cost, prio, plan) in combos {
                    if !d && *plan != plans[0] {
                        continue; // Without diffusion the plan does not matter.
                    }
                    let mut a = a.clone();
                    a.advertise = vec![*adv];
                    a.cost_aware = vec![*cost];
                    a.priorities = vec![*prio];
                    a.diffusion_plan = vec![*plan];
                    let mut suffix = String::new();
                    if plans.len() > 1 && b != Balancing::None && d {
                        suffix += if *plan == PlanArg::String {
                            "/plan-string"
                        } else {
                            "/plan-neighbours"
                        };
                    }
                    for (name, list, x) in [
                        ("advertise", &advertise, adv),
                        ("cost-aware", &cost_aware, cost),
                        ("priorities", &priorities, prio),
                    ] {
                        if list.len() > 1 && b != Balancing::None {
                            let word = if *x == Switch::On { "on" } else { "off" };
                            suffix += &format!("/{name}-{word}");
                        }
                    }
                    for &p in ps {
                        out.push(Run {
                            args: a.clone(),
                            balancer: b,
                            protocol: p,
                            sweep_value: v.clone(),
                            diffusion: d,
                            switches: suffix.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// `list` with `all` replaced by `every`, duplicates dropped, order kept.
pub fn expand<T: Copy + PartialEq>(list: &[T], all: T, every: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    for &x in list {
        let xs: &[T] = if x == all {
            every
        } else {
            std::slice::from_ref(&x)
        };
        for &y in xs {
            if !out.contains(&y) {
                out.push(y);
            }
        }
    }
    out
}

/// The swept parameter's name and the arguments of each point.
pub fn sweep_points(
    args: &BenchArgs,
    spec: &str,
) -> Result<Vec<(BenchArgs, Option<String>)>, String> {
    let (param, values) = spec
        .split_once('=')
        .ok_or_else(|| format!("--sweep '{spec}': expected PARAM=V1,V2,..."))?;
    let values: Vec<&str> = values
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Err(format!("--sweep '{spec}': no values"));
    }
    let mut out = Vec::new();
    for v in values {
        let mut a = args.clone();
        a.sweep = None;
        let bad = |what: &str| format!("--sweep {param}: '{v}' is not {what}");
        match param {
            "ranks" => a.ranks = v.parse().map_err(|_| bad("a rank count"))?,
            "tasks" => a.tasks = Some(v.parse().map_err(|_| bad("a task count"))?),
            "task-time" => a.task_time = Some(v.parse().map_err(|_| bad("seconds"))?),
            "payload" => a.payload = Some(v.parse().map_err(|_| bad("a byte count"))?),
            "workers" => a.workers = v.parse().map_err(|_| bad("a worker count"))?,
            "seed" => a.seed = v.parse().map_err(|_| bad("a seed"))?,
            "group-size" => a.group_size = Some(v.parse().map_err(|_| bad("a group size"))?),
            p => {
                return Err(format!(
                    "--sweep: unknown parameter '{p}' (expected ranks, tasks, task-time, payload, workers, seed or group-size)"
                ));
            }
        }
        out.push((a, Some(v.to_string())));
    }
    Ok(out)
}

/// A run's protocol and overlay configuration (every rank the same): the runtime's and
/// the simulator's `core` and `overlay`.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Protocol tunables.
    pub core: Config,
    /// Overlay parameters (`ranks` is set by the front end).
    pub overlay: OverlayParams,
}

/// The configuration of `run` at `ranks` ranks (exit 2 on a bad one).
pub fn config(run: &Run, ranks: u32, plan: &Plan) -> RunConfig {
    let args = &run.args;
    let payload = plan.payload;
    let mut core = Config::default();
    let mut overlay = OverlayParams::default();
    core.protocol = match run.protocol {
        ProtocolArg::Lock => Protocol::Lock,
        ProtocolArg::Claim | ProtocolArg::All => Protocol::Claim,
        ProtocolArg::Request => Protocol::Request,
    };
    core.seed = args.seed;
    overlay.seed = args.seed;
    core.advertise = on(&args.advertise);
    core.cost_aware = on(&args.cost_aware);
    core.repartition_plan = args.repartition_plan.plan();
    if let Some(m) = args.min_private {
        core.min_private = m;
    }
    if let Some(f) = args.flush_delay_ms {
        core.flush_delay = std::time::Duration::from_secs_f64(f / 1e3);
    }
    if let Some(b) = args.backoff_max_ms {
        core.backoff_max = std::time::Duration::from_secs_f64(b / 1e3).max(core.backoff_base);
    }
    core.max_payload = (task::HEADER as u64 + payload) as u32;
    core.max_result = 8;
    // The shared set holds at most ~64 MiB of slots per region.
    let slot = task::HEADER as u64 + payload + 16;
    core.shared_capacity = ((64u64 << 20) / slot).clamp(2, 1024) as u32;
    // Groups from load estimates, as YALES2 forms them from previous iterations; here the
    // estimate is the task count (costs are not known in advance).
    let loads = match run.balancer {
        Balancing::Hierarchical { .. } => {
            Some(crate::counts(&plan.spec).unwrap_or_else(|e| fail(2, &e)))
        }
        _ => None,
    };
    run.balancer
        .apply(&mut core, &mut overlay, ranks, loads.as_deref())
        .unwrap_or_else(|e| fail(2, &e.to_string()));
    if run.balancer == Balancing::Smallworld {
        if let Some(k) = args.shortcuts {
            overlay.shortcuts = k;
        }
        overlay.draw = args.shortcut_draw;
    }
    apply_diffusion(&mut core, run.diffusion);
    core.diffusion_plan = args
        .diffusion_plan
        .first()
        .map_or(titus_core::DiffusionPlan::String, |p| p.plan());
    RunConfig { core, overlay }
}

/// `--worker-grain-us` as a duration (None: the runtime's default): 0 to 1 s (the
/// runtime's own bound on `worker_grain`).
pub fn worker_grain(args: &BenchArgs) -> Result<Option<std::time::Duration>, String> {
    match args.worker_grain_us {
        None => Ok(None),
        Some(us) if us.is_finite() && (0.0..=1e6).contains(&us) => Ok(Some(
            std::time::Duration::from_nanos((us * 1e3).round() as u64),
        )),
        Some(us) => Err(format!(
            "--worker-grain-us {}: expected microseconds in [0, 1000000]",
            crate::show_number(us)
        )),
    }
}

/// The `--csv` header.
pub const CSV_HEADER: &str = "efficiency,resolution_s,ideal_s,ranks,workers,balancer,protocol,seed,verified,profile,tasks,task_time_s,payload_bytes,cost,distribution,steals_ok,steals_empty,steals_locked,bytes_moved,result_hops_mean,group_size,epoch,nominal_efficiency,speedup,tasks_stolen,epochs,drift,diffusion,start_s,start_bytes,start_messages,start_rounds";

/// One `--csv` row.
pub fn csv_row(r: &Report) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        r.efficiency,
        r.resolution_s,
        r.ideal_s,
        r.ranks,
        r.workers,
        r.balancer,
        r.protocol,
        r.seed,
        r.verified,
        r.profile,
        r.tasks,
        r.task_time_s,
        r.payload_bytes,
        r.cost,
        r.distribution,
        r.steals_ok,
        r.steals_empty,
        r.steals_locked,
        r.bytes_moved,
        r.result_hops_mean,
        r.group_size,
        r.epoch,
        r.nominal_efficiency,
        r.speedup.map_or(String::new(), |x| x.to_string()),
        r.tasks_stolen,
        r.epochs,
        r.drift,
        r.diffusion,
        r.start_s,
        r.start_bytes,
        r.start_messages,
        r.start_rounds
    )
}

/// Prints one run as it ends, every epoch of it (the CSV header before the first row):
/// JSON, one line per epoch; CSV, one row per epoch; else the run's description and, for
/// one epoch, its figures and per-rank table, for several a row per epoch and a summary
/// over epochs ≥ 1.
pub fn print(run: &[Report], args: &BenchArgs, first: bool) {
    let Some(r) = run.first() else { return };
    if args.json {
        for r in run {
            println!("{}", serde_json::to_string(r).expect("report serialises"));
        }
        return;
    }
    if args.csv {
        if first {
            println!("{CSV_HEADER}");
        }
        for r in run {
            println!("{}", csv_row(r));
        }
        return;
    }
    println!(
        "dlb-bench: {} ranks x {} workers, profile {}, {} tasks of {:.3} ms mean ({} cost, {} ownership), {} B payloads ({:.0} cycles/B), balancer {} ({}{}), seed {}{}",
        r.ranks,
        r.workers,
        r.profile,
        r.tasks,
        r.task_time_s * 1e3,
        r.cost,
        r.distribution,
        r.payload_bytes,
        r.cycles_per_byte,
        r.balancer,
        r.protocol,
        if r.group_size > 0 {
            format!(", groups of {}", r.group_size)
        } else {
            String::new()
        },
        r.seed,
        if r.epochs > 1 {
            format!(
                ", {} epochs, drift {}, diffusion {}",
                r.epochs,
                r.drift,
                if r.diffusion { "on" } else { "off" }
            )
        } else {
            String::new()
        }
    );
    if run.len() > 1 {
        println!(
            "{:>5} {:>10} {:>8} {:>8} {:>12} {:>9} {:>9} {:>9} {:>12} {:>8}",
            "epoch",
            "efficiency",
            "nominal",
            "speedup",
            "resolution_s",
            "steals",
            "empty",
            "stolen",
            "bytes_moved",
            "verified"
        );
        for r in run {
            println!(
                "{:>5} {:>10.3} {:>8.3} {:>8} {:>12.4} {:>9} {:>9} {:>9} {:>12} {:>8}",
                r.epoch,
                r.efficiency,
                r.nominal_efficiency,
                speedup_cell(r.speedup),
                r.resolution_s,
                r.steals_ok,
                r.steals_empty,
                r.tasks_stolen,
                r.bytes_moved,
                r.verified
            );
        }
        if let Some(line) = epoch_summary(run) {
            println!("{line}");
        }
        println!();
        return;
    }
    println!(
        "efficiency {:.3}   nominal {:.3}   resolution {:.3} s   ideal {:.3} s   verified {}{}",
        r.efficiency,
        r.nominal_efficiency,
        r.resolution_s,
        r.ideal_s,
        r.verified,
        r.speedup
            .map_or(String::new(), |x| format!("   speed-up {x:.2}x over none"))
    );
    println!(
        "steals {} ok, {} empty, {} locked   tasks stolen {}   bytes moved {}   result hops {:.2} mean",
        r.steals_ok,
        r.steals_empty,
        r.steals_locked,
        r.tasks_stolen,
        r.bytes_moved,
        r.result_hops_mean
    );
    println!(
        "{:>5} {:>9} {:>9} {:>9} {:>9}",
        "rank", "owned_s", "busy_s", "idle_s", "steal_s"
    );
    for (i, (((o, b), idle), s)) in r
        .owned_s
        .iter()
        .zip(&r.busy_s)
        .zip(&r.idle_s)
        .zip(&r.steal_s)
        .enumerate()
        .take(64)
    {
        println!("{i:>5} {o:>9.3} {b:>9.3} {idle:>9.3} {s:>9.3}");
    }
    if r.busy_s.len() > 64 {
        println!(
            "  ... {} more ranks (--json has them all)",
            r.busy_s.len() - 64
        );
    }
    println!();
}

fn speedup_cell(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

/// Figures of a run over its epochs ≥ 1 (the steady state of a time-stepping job, once
/// the first epoch has shown the costs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochSummary {
    /// Epochs summed (epochs ≥ 1).
    pub epochs: u32,
    /// Mean efficiency.
    pub efficiency: f64,
    /// Mean nominal efficiency.
    pub nominal_efficiency: f64,
    /// Successful steals per epoch.
    pub steals_per_epoch: f64,
    /// Tasks stolen per epoch.
    pub stolen_per_epoch: f64,
    /// Mean speed-up over `none` (when every epoch has one).
    pub speedup: Option<f64>,
}

/// The summary of one run's epoch rows over epochs ≥ 1 (None with a single epoch).
pub fn summarize(run: &[Report]) -> Option<EpochSummary> {
    let later: Vec<&Report> = run.iter().filter(|r| r.epoch >= 1).collect();
    if later.is_empty() {
        return None;
    }
    let k = later.len() as f64;
    let mean = |f: &dyn Fn(&Report) -> f64| later.iter().map(|r| f(r)).sum::<f64>() / k;
    Some(EpochSummary {
        epochs: later.len() as u32,
        efficiency: mean(&|r| r.efficiency),
        nominal_efficiency: mean(&|r| r.nominal_efficiency),
        steals_per_epoch: mean(&|r| r.steals_ok as f64),
        stolen_per_epoch: mean(&|r| r.tasks_stolen as f64),
        speedup: later
            .iter()
            .map(|r| r.speedup)
            .sum::<Option<f64>>()
            .map(|s| s / k),
    })
}

/// The summary line of one run's epoch rows (None with a single epoch).
pub fn epoch_summary(run: &[Report]) -> Option<String> {
    let s = summarize(run)?;
    Some(format!(
        "epochs 1..{}: efficiency {:.3} mean, nominal {:.3} mean, {:.1} steals and {:.1} tasks stolen per epoch{}",
        s.epochs,
        s.efficiency,
        s.nominal_efficiency,
        s.steals_per_epoch,
        s.stolen_per_epoch,
        s.speedup
            .map_or(String::new(), |x| format!(", speed-up {x:.2}x over none"))
    ))
}

/// The resolution time of `none` over `r`'s, if `none` ran the same workload (same sweep
/// point, epoch, ranks, workers, tasks, costs and seed) among `earlier`.
pub fn speedup(earlier: &[(String, Report)], r: &Report) -> Option<f64> {
    let none = earlier.iter().map(|e| &e.1).find(|n| {
        n.balancer == "none"
            && n.sweep_value == r.sweep_value
            && n.epoch == r.epoch
            && n.ranks == r.ranks
            && n.workers == r.workers
            && n.tasks == r.tasks
            && n.task_time_s == r.task_time_s
            && n.cost == r.cost
            && n.distribution == r.distribution
            && n.drift == r.drift
            && n.seed == r.seed
            && n.profile == r.profile
    })?;
    (r.resolution_s > 0.0).then(|| none.resolution_s / r.resolution_s)
}

/// The side-by-side table after several runs (a row per run, or per run and epoch), and
/// a summary line per run over epochs ≥ 1.
pub fn print_summary(reports: &[(String, Report)]) {
    let epochs = reports.iter().any(|(_, r)| r.epochs > 1);
    // The run column as wide as its longest label (switch suffixes make long ones).
    let w = reports
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(22);
    println!(
        "{:<w$} {:>8} {:>6}{} {:>10} {:>8} {:>8} {:>12} {:>9} {:>9} {:>9} {:>8}",
        "run",
        "sweep",
        "ranks",
        if epochs {
            format!(" {:>5}", "epoch")
        } else {
            String::new()
        },
        "efficiency",
        "nominal",
        "speedup",
        "resolution_s",
        "ideal_s",
        "steals",
        "empty",
        "verified"
    );
    for (label, r) in reports {
        println!(
            "{:<w$} {:>8} {:>6}{} {:>10.3} {:>8.3} {:>8} {:>12.3} {:>9.3} {:>9} {:>9} {:>8}",
            label,
            r.sweep_value.as_deref().unwrap_or("-"),
            r.ranks,
            if epochs {
                format!(" {:>5}", r.epoch)
            } else {
                String::new()
            },
            r.efficiency,
            r.nominal_efficiency,
            speedup_cell(r.speedup),
            r.resolution_s,
            r.ideal_s,
            r.steals_ok,
            r.steals_empty,
            r.verified
        );
    }
    if epochs {
        let mut i = 0;
        while i < reports.len() {
            let n = reports[i].1.epochs.max(1) as usize;
            let run: Vec<Report> = reports[i..(i + n).min(reports.len())]
                .iter()
                .map(|x| x.1.clone())
                .collect();
            if let Some(line) = epoch_summary(&run) {
                println!("{:<w$} {line}", reports[i].0);
            }
            i += n;
        }
    }
}

/// Each rank's accelerators from `--resources` (None without it) and the `--dispatch`
/// policy, for a job of `ranks` ranks; bad input exits 2 naming what is wrong.
pub fn resources(
    args: &BenchArgs,
    ranks: u32,
) -> (
    Option<Vec<Vec<titus_core::resources::ResourceSpec>>>,
    titus_core::resources::Dispatch,
) {
    use titus_core::resources::{Dispatch, parse_description};
    let dispatch =
        Dispatch::parse(&args.dispatch).unwrap_or_else(|e| fail(2, &format!("--dispatch: {e}")));
    let per_rank = args.resources.as_ref().map(|s| {
        parse_description(s, ranks).unwrap_or_else(|e| fail(2, &format!("--resources: {e}")))
    });
    (per_rank, dispatch)
}

/// The heterogeneous ideal's capacity in worker equivalents: every rank's `workers` and
/// the accelerators' capacity × speed for kind 0 (the kind of every DLB_Bench task).
pub fn hetero_capacity(
    ranks: u32,
    workers: usize,
    described: &[Vec<titus_core::resources::ResourceSpec>],
) -> f64 {
    f64::from(ranks) * workers as f64
        + described
            .iter()
            .flatten()
            .map(|s| f64::from(s.capacity) * s.speed(0).unwrap_or(0.0))
            .sum::<f64>()
}

/// Epochs one run may make: a million time steps (a run's reports and the simulator's
/// epochs are held per epoch).
pub const EPOCHS_MAX: u32 = 1_000_000;

/// Rejects impossible flags (exit 2).
pub fn check_args(args: &BenchArgs) {
    if let Err(e) = titus_core::resources::Dispatch::parse(&args.dispatch) {
        fail(2, &format!("--dispatch: {e}"));
    }
    // Threads per rank: past 1024 a rank only oversubscribes its node.
    if args.workers == 0 || args.workers > 1024 {
        fail(
            2,
            &format!("--workers must be in 1..=1024 (got {})", args.workers),
        );
    }
    if let Some(c) = args.calibration
        && !(c > 0.0 && c <= 3600.0)
    {
        fail(
            2,
            &format!(
                "--calibration {} is not a number of seconds in (0, 3600]",
                crate::show_number(c)
            ),
        );
    }
    for (flag, value) in [
        ("--flush-delay-ms", args.flush_delay_ms),
        ("--backoff-max-ms", args.backoff_max_ms),
    ] {
        if let Err(e) = crate::check_millis(flag, value) {
            fail(2, &e);
        }
    }
    if let Err(e) = worker_grain(args) {
        fail(2, &e);
    }
    if args.group_size == Some(0) {
        fail(2, "--group-size must be at least 1");
    }
    if let Some(e) = args.epochs
        && !(1..=EPOCHS_MAX).contains(&e)
    {
        fail(2, &format!("--epochs {e}: expected 1..={EPOCHS_MAX}"));
    }
    if let Some(k) = args.shortcuts
        && k > titus_overlay::SHORTCUTS_MAX
    {
        fail(
            2,
            &format!(
                "--shortcuts {k}: expected 0..={}",
                titus_overlay::SHORTCUTS_MAX
            ),
        );
    }
    if args.repartition == Some(0) {
        fail(2, "--repartition must be at least 1 (epochs between plans)");
    }
    if let Some(d) = args.drift
        && !(d.is_finite() && (0.0..1.0).contains(&d))
    {
        fail(
            2,
            &format!("--drift {d} is not a fraction of the tasks in [0, 1)"),
        );
    }
    if let Some(dir) = &args.plot
        && let Err(e) = check_plot_dir(dir)
    {
        fail(2, &format!("--plot '{}': {e}", dir.display()));
    }
}

/// Whether plots can be written into `dir` once the runs are over: an existing directory
/// this process may write into, or a new one whose parent is such a directory (a missing
/// parent is refused as a likely typo). Checked before any run starts; the probe file it
/// writes is removed at once.
pub fn check_plot_dir(dir: &std::path::Path) -> Result<(), String> {
    let target = if dir.exists() {
        if !dir.is_dir() {
            return Err("exists and is not a directory".into());
        }
        dir.to_path_buf()
    } else {
        let parent = match dir.parent() {
            Some(p) if p.as_os_str().is_empty() => std::path::PathBuf::from("."),
            Some(p) => p.to_path_buf(),
            None => return Err("is not a directory name".into()),
        };
        if !parent.is_dir() {
            return Err(format!(
                "its parent directory '{}' does not exist",
                parent.display()
            ));
        }
        parent
    };
    let probe = target.join(format!(".titus-plot-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| format!("cannot write into '{}': {e}", target.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// One rank's figures of a run, as the report needs them.
#[derive(Debug, Clone, Default)]
pub struct RankFigures {
    /// Worker time running tasks (s).
    pub busy: f64,
    /// The rank's session: start to its end of the epoch (s).
    pub session: f64,
    /// Worker time not running tasks (s).
    pub idle: f64,
    /// Time in steal attempts (s).
    pub steal: f64,
    /// The progress thread's CPU time (s): the runtime's measurement (0 where the OS does
    /// not say); the simulator's node model's share of a core over the session.
    pub progress_cpu: f64,
    /// Remote operations this rank issued.
    pub ops: u64,
    /// Its completed operations by kind ([`titus_core::OP_KINDS`]).
    pub op_latency: [titus_core::OpLatency; titus_core::OP_KINDS.len()],
    /// Its workers' time between tasks where they went straight on (s), and how many
    /// such gaps (`titus_runtime::EpochStats::between`).
    pub between: f64,
    /// Gaps counted in [`RankFigures::between`].
    pub betweens: u64,
    /// Its workers' takes from its queue (`titus_core::CoreStats::grains`).
    pub grains: u64,
    /// Steal outcomes.
    pub steals_ok: u64,
    /// Steals that found nothing.
    pub steals_empty: u64,
    /// Steals that found the victim locked.
    pub steals_locked: u64,
    /// Task and result bytes moved.
    pub bytes: u64,
    /// Tasks this rank took from victims.
    pub tasks_stolen: u64,
    /// Tasks this rank pushed to lighter neighbours before stealing (diffusion).
    pub tasks_pushed: u64,
    /// Sum of the hops of this rank's results, and how many came home.
    pub hops: u64,
    /// Results home.
    pub homed: u64,
    /// Every result of this rank checked out.
    pub verified: bool,
    /// [`digest`] of this rank's results.
    pub digest: u64,
    /// (seconds from the start, victim, tasks) of each successful steal.
    pub steal_log: Vec<(f64, u32, u32)>,
    /// Connections so far ([`connection_figures`] where they come from a real job).
    pub links: Links,
    /// Its epoch start: from the epoch call to its tasks' start (s), bytes sent,
    /// received and read, messages sent and records read, rounds on its longest chain.
    pub start: f64,
    /// See [`RankFigures::start`].
    pub start_bytes: u64,
    /// See [`RankFigures::start`].
    pub start_messages: u64,
    /// See [`RankFigures::start`].
    pub start_rounds: u64,
}

/// Completed operations of one kind on one rank (a report's `op_latency`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpFigure {
    /// How many completed.
    pub count: u64,
    /// Their mean time from issue to completion, µs.
    pub mean_us: f64,
}

/// `f`'s operations by kind, those it issued.
fn op_figures(f: &RankFigures) -> std::collections::BTreeMap<String, OpFigure> {
    titus_core::OP_KINDS
        .iter()
        .zip(&f.op_latency)
        .filter(|(_, l)| l.count > 0)
        .map(|(k, l)| {
            let fig = OpFigure {
                count: l.count,
                mean_us: l.mean_ns() * 1e-3,
            };
            (k.to_string(), fig)
        })
        .collect()
}

/// One rank's connections and their price, since the job began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Links {
    /// Distinct ranks it exchanged operations with, either way.
    pub peers: u32,
    /// Connection time charged to it, s.
    pub connect_s: f64,
    /// Memory its connections hold, bytes.
    pub bytes: f64,
}

/// What a rank of a real job knows of its connections ([`connection_figures`] joins
/// every rank's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankConnections {
    /// Ranks it operated on (operations are one-sided: only the initiator knows).
    pub contacted: Vec<u32>,
    /// Ranks connected when its fabric opened.
    pub opened: Vec<u32>,
    /// Connection time, s.
    pub connect_s: f64,
    /// Whether peers connect on first contact.
    pub lazy: bool,
    /// Memory per connection, bytes.
    pub bytes_per_connection: f64,
}

impl RankConnections {
    /// As numbers, for a job-wide all-gather.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![
            self.connect_s,
            f64::from(u8::from(self.lazy)),
            self.bytes_per_connection,
            self.contacted.len() as f64,
        ];
        v.extend(self.contacted.iter().map(|&r| f64::from(r)));
        v.extend(self.opened.iter().map(|&r| f64::from(r)));
        encode_f64s(&v)
    }

    /// Decodes [`RankConnections::encode`]; ranks at or above `size` are dropped (a
    /// malformed blob cannot make a rank up).
    pub fn decode(b: &[u8], size: u32) -> Self {
        let v = decode_f64s(b);
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        let n = (g(3).max(0.0) as usize).min(v.len().saturating_sub(4));
        let ranks = |s: &[f64]| -> Vec<u32> {
            s.iter()
                .filter(|x| x.is_finite() && **x >= 0.0 && **x < f64::from(size))
                .map(|&x| x as u32)
                .collect()
        };
        Self {
            connect_s: g(0),
            lazy: g(1) == 1.0,
            bytes_per_connection: g(2),
            contacted: ranks(v.get(4..4 + n).unwrap_or(&[])),
            opened: ranks(v.get(4 + n..).unwrap_or(&[])),
        }
    }
}

/// Each rank's [`Links`] from every rank's connections: the ranks it exchanged operations
/// with are those it contacted and those that contacted it; it holds a connection to each
/// of them, and where its fabric connected at open, to each opened peer as well.
pub fn connection_figures(all: &[RankConnections]) -> Vec<Links> {
    let n = all.len();
    let mut exchanged: Vec<Vec<u32>> = all.iter().map(|c| c.contacted.clone()).collect();
    for (r, c) in all.iter().enumerate() {
        for &p in &c.contacted {
            if let Some(e) = exchanged.get_mut(p as usize) {
                e.push(r as u32);
            }
        }
    }
    (0..n)
        .map(|r| {
            let mut e = std::mem::take(&mut exchanged[r]);
            e.retain(|&p| p as usize != r);
            e.sort_unstable();
            e.dedup();
            let peers = e.len() as u32;
            let c = &all[r];
            if !c.lazy {
                e.extend(c.opened.iter().filter(|&&p| p as usize != r));
                e.sort_unstable();
                e.dedup();
            }
            Links {
                peers,
                connect_s: c.connect_s,
                bytes: e.len() as f64 * c.bytes_per_connection,
            }
        })
        .collect()
}

impl RankFigures {
    /// As numbers, for a job-wide all-gather (the steal log travels separately).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![
            self.busy,
            self.session,
            self.idle,
            self.steal,
            self.steals_ok as f64,
            self.steals_empty as f64,
            self.steals_locked as f64,
            self.bytes as f64,
            self.hops as f64,
            self.homed as f64,
            f64::from(u8::from(self.verified)),
            (self.digest >> 32) as f64,
            (self.digest & 0xffff_ffff) as f64,
            self.tasks_stolen as f64,
            self.tasks_pushed as f64,
            self.progress_cpu,
            self.ops as f64,
        ];
        for l in &self.op_latency {
            v.extend([l.count as f64, l.ns as f64]);
        }
        v.extend([self.between, self.betweens as f64, self.grains as f64]);
        v.extend([
            self.start,
            self.start_bytes as f64,
            self.start_messages as f64,
            self.start_rounds as f64,
        ]);
        encode_f64s(&v)
    }

    /// Decodes [`RankFigures::encode`] (missing numbers read as 0).
    pub fn decode(b: &[u8]) -> Self {
        let v = decode_f64s(b);
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Self {
            busy: g(0),
            session: g(1),
            idle: g(2),
            steal: g(3),
            steals_ok: g(4) as u64,
            steals_empty: g(5) as u64,
            steals_locked: g(6) as u64,
            bytes: g(7) as u64,
            hops: g(8) as u64,
            homed: g(9) as u64,
            verified: g(10) == 1.0,
            digest: (g(11) as u64) << 32 | g(12) as u64,
            tasks_stolen: g(13) as u64,
            tasks_pushed: g(14) as u64,
            progress_cpu: g(15),
            ops: g(16) as u64,
            op_latency: std::array::from_fn(|k| titus_core::OpLatency {
                count: g(17 + 2 * k) as u64,
                ns: g(18 + 2 * k) as u64,
            }),
            between: g(17 + 2 * titus_core::OP_KINDS.len()),
            betweens: g(18 + 2 * titus_core::OP_KINDS.len()) as u64,
            grains: g(19 + 2 * titus_core::OP_KINDS.len()) as u64,
            steal_log: Vec::new(),
            links: Links::default(),
            start: g(20 + 2 * titus_core::OP_KINDS.len()),
            start_bytes: g(21 + 2 * titus_core::OP_KINDS.len()) as u64,
            start_messages: g(22 + 2 * titus_core::OP_KINDS.len()) as u64,
            start_rounds: g(23 + 2 * titus_core::OP_KINDS.len()) as u64,
        }
    }
}

/// The tag of a job-wide all-gather of figures: format and version.
const F64S: &[u8] = b"TF64v1";

/// Encodes numbers for a job-wide all-gather of figures (a versioned postcard value,
/// `titus_fabric::versioned`).
pub fn encode_f64s(v: &[f64]) -> Vec<u8> {
    titus_fabric::versioned::encode(F64S, &v)
}

/// Decodes [`encode_f64s`]; a blob that does not decode (another version, cut short)
/// gives no numbers, which every reader takes as zeros.
pub fn decode_f64s(b: &[u8]) -> Vec<f64> {
    titus_fabric::versioned::decode(F64S, b).unwrap_or_default()
}

/// A hash of one rank's results, in task order.
pub fn digest(results: &[Vec<u8>]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for r in results {
        for &b in r.iter().chain(&(r.len() as u64).to_le_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// The payload of task `t` (its work: `rounds` passes over `plan.payload` bytes seeded by
/// the task), with `per_round` seconds per round.
pub fn task_payload(plan: &Plan, t: &TaskSpec, per_round: f64) -> Vec<u8> {
    task::payload(
        task::rounds_for(t.cost, per_round),
        plan.spec.seed ^ t.global.wrapping_mul(0x9E37_79B9),
        plan.payload as usize,
    )
}

/// The report of `run`'s epoch `epoch` from every rank's figures; `all` is that epoch's
/// workload (per rank), `calibration` the seconds per round the tasks were made with (0:
/// virtual tasks). `speedup` is left to the front end ([`speedup`]).
pub fn report(
    run: &Run,
    plan: &Plan,
    epoch: u32,
    all: &[Vec<TaskSpec>],
    figs: &[RankFigures],
    calibration: f64,
) -> Report {
    let args = &run.args;
    let n = figs.len() as u32;
    let slowest = figs.iter().map(|f| f.session).fold(0.0, f64::max);
    let total_cost: f64 = all.iter().flatten().map(|t| t.cost).sum();
    let longest = all.iter().flatten().map(|t| t.cost).fold(0.0, f64::max);
    let workers = args.workers as f64;
    let busy: Vec<f64> = figs.iter().map(|f| f.busy).collect();
    let homed: u64 = figs.iter().map(|f| f.homed).sum();
    let mut steals = Vec::new();
    for (thief, f) in figs.iter().enumerate() {
        for &(t, victim, k) in &f.steal_log {
            steals.push((t, thief as u32, victim, k));
        }
    }
    let capacity = (f64::from(n) * workers * slowest).max(1e-12);
    Report {
        efficiency: busy.iter().sum::<f64>() / capacity,
        nominal_efficiency: total_cost / capacity,
        speedup: None,
        epoch,
        epochs: plan.epochs,
        drift: plan.drift,
        diffusion: run.diffusion,
        repartition: run.args.repartition.unwrap_or(0),
        repartition_plan: run.args.repartition_plan.plan().name(),
        diffusion_plan: run
            .args
            .diffusion_plan
            .first()
            .map_or("string", |p| p.plan().name()),
        advertise: on(&run.args.advertise),
        cost_aware: on(&run.args.cost_aware),
        priorities: on(&run.args.priorities),
        shortcut_draw: run.args.shortcut_draw.name(),
        resolution_s: slowest,
        ideal_s: (total_cost / (f64::from(n) * workers)).max(longest),
        ranks: n,
        workers: args.workers,
        balancer: run.balancer.name(),
        protocol: run.protocol_name(),
        seed: args.seed,
        verified: figs.iter().all(|f| f.verified),
        profile: plan.profile.clone(),
        tasks: plan.spec.tasks,
        task_time_s: plan.spec.task_time,
        payload_bytes: plan.payload,
        cost: name(plan.cost),
        distribution: name(plan.distribution),
        // TITUS's arithmetic intensity: compute seconds × 3·10⁹ / bytes.
        cycles_per_byte: total_cost * 3e9
            / (plan.payload as f64 * plan.spec.tasks.max(1) as f64).max(1.0),
        steals_ok: figs.iter().map(|f| f.steals_ok).sum(),
        steals_empty: figs.iter().map(|f| f.steals_empty).sum(),
        steals_locked: figs.iter().map(|f| f.steals_locked).sum(),
        tasks_stolen: figs.iter().map(|f| f.tasks_stolen).sum(),
        tasks_pushed: figs.iter().map(|f| f.tasks_pushed).sum(),
        bytes_moved: figs.iter().map(|f| f.bytes).sum(),
        result_hops_mean: figs.iter().map(|f| f.hops).sum::<u64>() as f64 / homed.max(1) as f64,
        group_size: run.balancer.group_size(n),
        peers_max: figs.iter().map(|f| f.links.peers).max().unwrap_or(0),
        peers_mean: figs.iter().map(|f| f64::from(f.links.peers)).sum::<f64>()
            / f64::from(n.max(1)),
        connect_s: figs.iter().map(|f| f.links.connect_s).fold(0.0, f64::max),
        connection_mib: figs.iter().map(|f| f.links.bytes).fold(0.0, f64::max) / (1024.0 * 1024.0),
        start_s: figs.iter().map(|f| f.start).fold(0.0, f64::max),
        start_bytes: figs.iter().map(|f| f.start_bytes).max().unwrap_or(0),
        start_messages: figs.iter().map(|f| f.start_messages).max().unwrap_or(0),
        start_rounds: figs.iter().map(|f| f.start_rounds).max().unwrap_or(0),
        calibration_s: calibration,
        results_digest: format!(
            "{:016x}",
            figs.iter().fold(0x0054_4954_5553_u64, |h, f| {
                (h ^ f.digest).wrapping_mul(0x100_0000_01b3).rotate_left(17)
            })
        ),
        busy_s: busy,
        idle_s: figs.iter().map(|f| f.idle).collect(),
        steal_s: figs.iter().map(|f| f.steal).collect(),
        progress_cpu_s: figs.iter().map(|f| f.progress_cpu).collect(),
        between_tasks_us: figs
            .iter()
            .map(|f| f.between * 1e6 / (f.betweens.max(1) as f64))
            .collect(),
        grains: figs.iter().map(|f| f.grains).collect(),
        ops: figs.iter().map(|f| f.ops).collect(),
        op_latency: figs.iter().map(op_figures).collect(),
        owned_s: all
            .iter()
            .map(|ts| ts.iter().map(|t| t.cost).fold(0.0, |a, c| a + c))
            .collect(),
        steals,
        sweep_value: run.sweep_value.clone(),
        resource_tasks: Default::default(),
        accel_tasks: None,
        hetero_efficiency: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(a: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("dlb-bench").chain(a.iter().copied()))
            .unwrap()
            .bench
    }

    #[test]
    fn none_runs_first_and_diffusion_doubles_the_balancers() {
        let rs = runs(&args(&[
            "--balancer",
            "master,none,smallworld",
            "--diffusion",
            "on,off",
        ]));
        let labels: Vec<String> = rs.iter().map(Run::label).collect();
        assert_eq!(
            labels,
            [
                "none",
                "master",
                "master/no-diffusion",
                "smallworld/claim",
                "smallworld/claim/no-diffusion"
            ]
        );
        assert_eq!(
            rs.iter().map(|r| r.diffusion).collect::<Vec<_>>(),
            [true, true, false, true, false]
        );
        assert!(runs(&args(&[])).iter().all(|r| r.diffusion));
    }

    #[test]
    fn profiles_set_defaults_and_flags_override_them() {
        let p = plan(&args(&["--profile", "chem"]), 2);
        assert_eq!((p.epochs, p.drift, p.payload), (8, 0.03, 48));
        assert_eq!(
            (p.cost, p.distribution),
            (CostArg::Bimodal, DistArg::Uniform)
        );
        assert_eq!(p.spec.tasks, 8192);
        assert!((p.spec.task_time - 12e-6).abs() < 1e-15);
        let p = plan(
            &args(&["--profile", "chem", "--epochs", "3", "--cost", "constant"]),
            2,
        );
        assert_eq!((p.epochs, p.cost), (3, CostArg::Constant));
        let q = plan(&args(&[]), 4);
        assert_eq!((q.epochs, q.drift, q.cost), (1, 0.0, CostArg::Constant));
    }

    fn row(balancer: &'static str, epoch: u32, resolution_s: f64) -> Report {
        let run = runs(&args(&[]))[0].clone();
        let plan = plan(&run.args, 2);
        let all = crate::generate(&plan.spec).unwrap();
        let figs = vec![
            RankFigures {
                busy: resolution_s,
                session: resolution_s,
                ..RankFigures::default()
            };
            2
        ];
        let mut r = report(&run, &plan, epoch, &all, &figs, 0.0);
        r.balancer = balancer;
        r
    }

    #[test]
    fn speedup_is_over_none_on_the_same_epoch_and_the_summary_skips_epoch_0() {
        let none: Vec<(String, Report)> = (0..3)
            .map(|e| ("none".to_string(), row("none", e, 2.0 + f64::from(e))))
            .collect();
        let sw = row("smallworld", 1, 1.5);
        assert_eq!(speedup(&none, &sw), Some(2.0), "3.0 s / 1.5 s");
        assert_eq!(speedup(&none[..1], &sw), None, "no epoch 1 of none");
        assert_eq!(speedup(&[], &sw), None);
        // Nominal efficiency: the drawn costs (the quick profile at 2 ranks: 200 tasks of
        // 2.5 ms) over ranks × resolution.
        let total: f64 = 200.0 * 0.0025;
        assert!((sw.nominal_efficiency - total / (2.0 * 1.5)).abs() < 1e-9);
        assert!((sw.efficiency - 1.0).abs() < 1e-12, "busy = session");
        let mut rows: Vec<Report> = (0..3).map(|e| row("smallworld", e, 1.0)).collect();
        rows[0].steals_ok = 100;
        rows[1].steals_ok = 4;
        rows[2].steals_ok = 6;
        let s = summarize(&rows).unwrap();
        assert_eq!((s.epochs, s.steals_per_epoch), (2, 5.0));
        assert_eq!(s.speedup, None);
        assert!(summarize(&rows[..1]).is_none(), "one epoch, no summary");
        assert!(epoch_summary(&rows).unwrap().contains("5.0 steals"));
    }

    #[test]
    fn connections_join_both_directions_and_count_opened_peers() {
        // Rank 0 contacted 1 and 2 lazily; rank 2 contacted 3 lazily; rank 3 opened
        // eagerly to 1 and 2 and contacted nobody.
        let lazy = |c: Vec<u32>| RankConnections {
            contacted: c,
            opened: Vec::new(),
            connect_s: 0.5,
            lazy: true,
            bytes_per_connection: 1024.0,
        };
        let all = vec![
            lazy(vec![1, 2]),
            lazy(vec![]),
            lazy(vec![3, 2]),
            RankConnections {
                opened: vec![1, 2],
                lazy: false,
                ..lazy(vec![])
            },
        ];
        let back: Vec<RankConnections> = all
            .iter()
            .map(|c| RankConnections::decode(&c.encode(), 4))
            .collect();
        assert_eq!(back, all);
        let l = connection_figures(&back);
        let peers: Vec<u32> = l.iter().map(|x| x.peers).collect();
        assert_eq!(peers, [2, 1, 2, 1], "2 itself is not a peer of 2");
        // Rank 3 holds its opened peers 1 and 2 (2 also exchanged): two connections.
        assert_eq!(l[3].bytes, 2048.0);
        assert_eq!(l[0].bytes, 2048.0);
        // A blob naming ranks outside the job loses them.
        let mut bad = all[0].clone();
        bad.contacted = vec![1, 99];
        assert_eq!(RankConnections::decode(&bad.encode(), 4).contacted, [1]);
    }

    #[test]
    fn a_rank_s_operations_by_kind_travel_and_reach_the_report() {
        let mut f = RankFigures {
            busy: 1.0,
            session: 1.0,
            ops: 7,
            ..RankFigures::default()
        };
        f.op_latency[0] = titus_core::OpLatency {
            count: 4,
            ns: 100_000,
        };
        f.op_latency[4] = titus_core::OpLatency {
            count: 3,
            ns: 90_000,
        };
        f.between = 0.004;
        f.betweens = 2_000;
        f.grains = 700;
        let back = RankFigures::decode(&f.encode());
        assert_eq!((back.ops, back.op_latency), (7, f.op_latency));
        assert_eq!(
            (back.between, back.betweens, back.grains),
            (0.004, 2_000, 700)
        );
        // A blob of an older encoding (no kinds) reads as none completed.
        let old = encode_f64s(&decode_f64s(&f.encode())[..17]);
        assert_eq!(
            RankFigures::decode(&old).op_latency,
            [titus_core::OpLatency::default(); 6]
        );
        let run = runs(&args(&[]))[0].clone();
        let plan = plan(&run.args, 2);
        let all = crate::generate(&plan.spec).unwrap();
        let r = report(&run, &plan, 0, &all, &[back, RankFigures::default()], 0.0);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["op_latency"][0]["read"]["count"], 4);
        assert_eq!(v["op_latency"][0]["read"]["mean_us"], 25.0);
        assert_eq!(v["op_latency"][0]["fetch-add"]["mean_us"], 30.0);
        assert!(
            v["op_latency"][0].get("cas").is_none(),
            "kinds not issued are left out"
        );
        assert_eq!(v["op_latency"][1], serde_json::json!({}));
        // The time between tasks: 4 ms over 2,000 gaps; none where no gap was counted.
        assert_eq!(v["between_tasks_us"], serde_json::json!([2.0, 0.0]));
        assert_eq!(v["grains"], serde_json::json!([700, 0]));
    }
}
