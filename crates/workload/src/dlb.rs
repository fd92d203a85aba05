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
    /// Named profile: quick, w1-s4k, w5-s1m, w10-s21m (per-rank work W/n and size S/n).
    #[arg(long, default_value = "quick")]
    pub profile: String,
    /// Tasks over all ranks [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub tasks: Option<u64>,
    /// Mean task duration, seconds [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub task_time: Option<f64>,
    /// Task cost distribution.
    #[arg(long, value_enum, default_value_t = CostArg::Constant)]
    pub cost: CostArg,
    /// Initial ownership of the tasks.
    #[arg(long, value_enum, default_value_t = DistArg::Gaussian)]
    pub distribution: DistArg,
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
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub workers: usize,
    /// Seed of the workload, the overlay and victim choice.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// One JSON object on one line.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV: a header line and one row per run.
    #[arg(long)]
    pub csv: bool,
    /// Draw plots (PNG and SVG) into this directory: efficiency per run, per-rank busy and
    /// idle time before and after balancing, a timeline of steals.
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
}

/// A profile: per-rank work W/n (s), per-rank problem size S/n (bytes), tasks per rank.
pub fn profile(name: &str) -> Option<(f64, u64, u64)> {
    match name {
        "quick" => Some((0.25, 64 << 10, 100)),
        "w1-s4k" => Some((1.0, 4_000, 100)),
        "w5-s1m" => Some((5.0, 1_000_000, 100)),
        "w10-s21m" => Some((10.0, 21_000_000, 100)),
        _ => None,
    }
}

/// One run's figures; the fields are the JSON keys (README, `dlb-bench`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub efficiency: f64,
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
    pub bytes_moved: u64,
    pub result_hops_mean: f64,
    pub group_size: u32,
    pub calibration_s: f64,
    pub results_digest: String,
    pub busy_s: Vec<f64>,
    pub idle_s: Vec<f64>,
    pub steal_s: Vec<f64>,
    /// Seconds of work each rank owned at the start (its busy time without balancing).
    pub owned_s: Vec<f64>,
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
}

/// The workload of a run (exit 2 on bad flags).
pub fn plan(args: &BenchArgs, ranks: u32) -> Plan {
    let Some((wn, sn, per_rank)) = profile(&args.profile) else {
        fail(
            2,
            &format!(
                "unknown --profile '{}' (expected quick, w1-s4k, w5-s1m or w10-s21m)",
                args.profile
            ),
        );
    };
    let tasks = args.tasks.unwrap_or(u64::from(ranks) * per_rank);
    let task_time = args.task_time.unwrap_or(wn / per_rank as f64);
    if !(task_time.is_finite() && task_time >= 0.0) {
        fail(
            2,
            &format!("--task-time {task_time} is not a non-negative number of seconds"),
        );
    }
    let payload = args.payload.unwrap_or(sn / per_rank);
    if payload > 64 << 20 {
        fail(
            2,
            &format!("--payload {payload} is over the 64 MiB a task slot may hold"),
        );
    }
    let distribution = match args.distribution {
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
    let cost = match args.cost {
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
}

impl Run {
    /// `balancer` or `balancer/protocol`.
    pub fn label(&self) -> String {
        let mut l = self.balancer.to_string();
        if self.balancer.steals() {
            l = format!("{l}/{}", name(self.protocol));
        }
        l
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

/// The runs a command line asks for, in order: sweep points, then balancers, then
/// protocols.
pub fn runs(args: &BenchArgs) -> Vec<Run> {
    let balancers: Vec<Balancing> = expand(
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
            for &p in ps {
                out.push(Run {
                    args: a.clone(),
                    balancer: b,
                    protocol: p,
                    sweep_value: v.clone(),
                });
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
    if let Some(m) = args.min_private {
        core.min_private = m;
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
    RunConfig { core, overlay }
}

/// The `--csv` header.
pub const CSV_HEADER: &str = "efficiency,resolution_s,ideal_s,ranks,workers,balancer,protocol,seed,verified,profile,tasks,task_time_s,payload_bytes,cost,distribution,steals_ok,steals_empty,steals_locked,bytes_moved,result_hops_mean,group_size";

/// One `--csv` row.
pub fn csv_row(r: &Report) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
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
        r.group_size
    )
}

/// Prints one run as it ends (the CSV header before the first row).
pub fn print(r: &Report, args: &BenchArgs, first: bool) {
    if args.json {
        println!("{}", serde_json::to_string(r).expect("report serialises"));
        return;
    }
    if args.csv {
        if first {
            println!("{CSV_HEADER}");
        }
        println!("{}", csv_row(r));
        return;
    }
    println!(
        "dlb-bench: {} ranks x {} workers, profile {}, {} tasks of {:.3} ms mean ({} cost, {} ownership), {} B payloads ({:.0} cycles/B), balancer {} ({}{}), seed {}",
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
        r.seed
    );
    println!(
        "efficiency {:.3}   resolution {:.3} s   ideal {:.3} s   verified {}",
        r.efficiency, r.resolution_s, r.ideal_s, r.verified
    );
    println!(
        "steals {} ok, {} empty, {} locked   bytes moved {}   result hops {:.2} mean",
        r.steals_ok, r.steals_empty, r.steals_locked, r.bytes_moved, r.result_hops_mean
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

/// The side-by-side table after several runs.
pub fn print_summary(reports: &[(String, Report)]) {
    println!(
        "{:<22} {:>8} {:>6} {:>10} {:>12} {:>9} {:>9} {:>9} {:>8}",
        "run",
        "sweep",
        "ranks",
        "efficiency",
        "resolution_s",
        "ideal_s",
        "steals",
        "empty",
        "verified"
    );
    for (label, r) in reports {
        println!(
            "{:<22} {:>8} {:>6} {:>10.3} {:>12.3} {:>9.3} {:>9} {:>9} {:>8}",
            label,
            r.sweep_value.as_deref().unwrap_or("-"),
            r.ranks,
            r.efficiency,
            r.resolution_s,
            r.ideal_s,
            r.steals_ok,
            r.steals_empty,
            r.verified
        );
    }
}

/// Rejects impossible flags (exit 2).
pub fn check_args(args: &BenchArgs) {
    if args.workers == 0 {
        fail(2, "--workers must be at least 1");
    }
    if let Some(c) = args.calibration
        && !(c.is_finite() && c > 0.0)
    {
        fail(
            2,
            &format!("--calibration {c} is not a positive number of seconds"),
        );
    }
    if let Some(b) = args.backoff_max_ms
        && !(b.is_finite() && b >= 0.0)
    {
        fail(
            2,
            &format!("--backoff-max-ms {b} is not a non-negative number"),
        );
    }
    if args.group_size == Some(0) {
        fail(2, "--group-size must be at least 1");
    }
    if let Some(dir) = &args.plot
        && dir.exists()
        && !dir.is_dir()
    {
        fail(
            2,
            &format!("--plot '{}' exists and is not a directory", dir.display()),
        );
    }
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
    /// Steal outcomes.
    pub steals_ok: u64,
    /// Steals that found nothing.
    pub steals_empty: u64,
    /// Steals that found the victim locked.
    pub steals_locked: u64,
    /// Task and result bytes moved.
    pub bytes: u64,
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
}

impl RankFigures {
    /// As numbers, for a job-wide all-gather (the steal log travels separately).
    pub fn encode(&self) -> Vec<u8> {
        encode_f64s(&[
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
        ])
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
            steal_log: Vec::new(),
        }
    }
}

/// Encodes numbers for a job-wide all-gather of figures.
pub fn encode_f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`encode_f64s`]; a malformed blob gives what it holds of whole numbers.
pub fn decode_f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
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

/// The report of `run` from every rank's figures; `all` is the workload (per rank),
/// `calibration` the seconds per round the tasks were made with (0: virtual tasks).
pub fn report(
    run: &Run,
    plan: &Plan,
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
    Report {
        efficiency: busy.iter().sum::<f64>() / (f64::from(n) * workers * slowest).max(1e-12),
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
        cost: name(args.cost),
        distribution: name(args.distribution),
        // TITUS's arithmetic intensity: compute seconds × 3·10⁹ / bytes.
        cycles_per_byte: total_cost * 3e9
            / (plan.payload as f64 * plan.spec.tasks.max(1) as f64).max(1.0),
        steals_ok: figs.iter().map(|f| f.steals_ok).sum(),
        steals_empty: figs.iter().map(|f| f.steals_empty).sum(),
        steals_locked: figs.iter().map(|f| f.steals_locked).sum(),
        bytes_moved: figs.iter().map(|f| f.bytes).sum(),
        result_hops_mean: figs.iter().map(|f| f.hops).sum::<u64>() as f64 / homed.max(1) as f64,
        group_size: run.balancer.group_size(n),
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
        owned_s: all
            .iter()
            .map(|ts| ts.iter().map(|t| t.cost).fold(0.0, |a, c| a + c))
            .collect(),
        steals,
        sweep_value: run.sweep_value.clone(),
    }
}
