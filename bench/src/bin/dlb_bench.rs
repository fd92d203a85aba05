//! `dlb-bench`: DLB_Bench, the synthetic dynamic-load-balancing benchmark.
//!
//! Each rank owns tasks of a workload (`titus_bench::workload`): real work over payloads
//! (`titus_bench::task`), calibrated on this machine to the drawn costs. One epoch runs
//! under the chosen balancer; then every result is recomputed sequentially and compared,
//! and a wrong, missing or duplicated result fails the run naming the task.
//!
//! In process: `dlb-bench --ranks 4 --profile quick`. Under a launcher (`titus launch -n 4
//! -- dlb-bench`, srun, mpirun): the launcher sets the ranks; rank 0 prints.
//!
//! Several balancers (`--balancer none,smallworld,master` or `all`), protocols and sweep
//! points (`--sweep ranks=2,4,8`) run one after the other in the same processes, each
//! with a fresh runtime, and are reported side by side; `--plot DIR` draws them.
#![forbid(unsafe_code)]

use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use titus_bench::plot;
use titus_bench::workload::{self, Cost, Distribution, Spec};
use titus_bench::{decode_f64s, encode_f64s, task};
use titus_fabric::bootstrap::JobEnv;
use titus_fabric::mem::MemOptions;
use titus_runtime::{Backend, Protocol, Runtime, RuntimeConfig, Sharing};

/// Tasks run in this process (the progress bar's count).
static TASKS_RUN: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CostArg {
    Constant,
    Exponential,
    Lognormal,
    Bimodal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DistArg {
    Gaussian,
    Uniform,
    One,
    File,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Balancer {
    /// No balancing: every rank runs its own tasks.
    None,
    /// Titus: work stealing over the small-world overlay.
    Smallworld,
    /// Work stealing from random victims over all ranks (the complete graph).
    Random,
    /// Centralised work sharing: rank 0 brokers every request.
    Master,
    /// Groups formed from load estimates, each with a master rotating per epoch
    /// (YALES2's built-in balancer).
    Hierarchical,
    /// Every balancer above, one after the other.
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtocolArg {
    Lock,
    Claim,
    Request,
    /// Every protocol, one after the other.
    All,
}

/// DLB_Bench: synthetic dynamic load balancing runs.
#[derive(Debug, Clone, Parser)]
#[command(name = "dlb-bench", version)]
struct Args {
    /// Ranks of an in-process run (under a launcher the launcher sets them).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    ranks: u32,
    /// Named profile: quick, w1-s4k, w5-s1m, w10-s21m (per-rank work W/n and size S/n).
    #[arg(long, default_value = "quick")]
    profile: String,
    /// Tasks over all ranks [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    tasks: Option<u64>,
    /// Mean task duration, seconds [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    task_time: Option<f64>,
    /// Task cost distribution.
    #[arg(long, value_enum, default_value_t = CostArg::Constant)]
    cost: CostArg,
    /// Initial ownership of the tasks.
    #[arg(long, value_enum, default_value_t = DistArg::Gaussian)]
    distribution: DistArg,
    /// Task counts per rank for `--distribution file` (COUNT or RANK COUNT per line).
    #[arg(long, value_name = "FILE")]
    counts: Option<std::path::PathBuf>,
    /// Payload bytes per task [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    payload: Option<u64>,
    /// Load balancers, comma-separated (or `all`): each runs in turn, side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "smallworld")]
    balancer: Vec<Balancer>,
    /// Steal protocols of smallworld and random, comma-separated (or `all`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "claim")]
    protocol: Vec<ProtocolArg>,
    /// Ranks per group of the hierarchical balancer [default: ⌈√ranks⌉].
    #[arg(long, allow_negative_numbers = true)]
    group_size: Option<u32>,
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    workers: usize,
    /// Seed of the workload, the overlay and victim choice.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    seed: u64,
    /// One JSON object on one line.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV: a header line and one row per run.
    #[arg(long)]
    csv: bool,
    /// Draw plots (PNG and SVG) into this directory: efficiency per run, per-rank busy and
    /// idle time before and after balancing, a timeline of steals.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Repeat the runs over values of one parameter: PARAM=V1,V2,... with PARAM one of
    /// ranks, tasks, task-time, payload, workers, seed, group-size. Writes sweep.csv and
    /// sweep-efficiency.{png,svg} into the --plot directory (default: dlb-sweep).
    #[arg(long, value_name = "PARAM=LIST")]
    sweep: Option<String>,
    /// No progress bar (it shows only on a terminal, on runs longer than 2 s).
    #[arg(long)]
    no_progress: bool,
}

/// A profile: per-rank work W/n (s), per-rank problem size S/n (bytes), tasks per rank.
fn profile(name: &str) -> Option<(f64, u64, u64)> {
    match name {
        "quick" => Some((0.25, 64 << 10, 100)),
        "w1-s4k" => Some((1.0, 4_000, 100)),
        "w5-s1m" => Some((5.0, 1_000_000, 100)),
        "w10-s21m" => Some((10.0, 21_000_000, 100)),
        _ => None,
    }
}

#[derive(Debug, Clone, Serialize)]
struct Report {
    efficiency: f64,
    resolution_s: f64,
    ideal_s: f64,
    ranks: u32,
    workers: usize,
    balancer: &'static str,
    protocol: &'static str,
    seed: u64,
    verified: bool,
    profile: String,
    tasks: u64,
    task_time_s: f64,
    payload_bytes: u64,
    cost: &'static str,
    distribution: &'static str,
    cycles_per_byte: f64,
    steals_ok: u64,
    steals_empty: u64,
    steals_locked: u64,
    bytes_moved: u64,
    result_hops_mean: f64,
    group_size: u32,
    busy_s: Vec<f64>,
    idle_s: Vec<f64>,
    steal_s: Vec<f64>,
    /// Seconds of work each rank owned at the start (its busy time without balancing).
    owned_s: Vec<f64>,
    /// Successful steals: (seconds from the thief's start, thief, victim, tasks).
    #[serde(skip)]
    steals: Vec<(f64, u32, u32, u32)>,
    /// The swept parameter's value, if any.
    #[serde(skip)]
    sweep_value: Option<String>,
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("dlb-bench: error: {msg}");
    std::process::exit(code)
}

fn name<T: ValueEnum>(v: T) -> &'static str {
    // ValueEnum names are 'static in practice; leak the short string once per run.
    let s = v.to_possible_value().expect("value").get_name().to_string();
    Box::leak(s.into_boxed_str())
}

struct Plan {
    spec: Spec,
    payload: u64,
    profile: String,
}

fn plan(args: &Args, ranks: u32) -> Plan {
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
            Distribution::File(workload::parse_counts(&text, ranks).unwrap_or_else(|e| fail(2, &e)))
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
struct Run {
    args: Args,
    balancer: Balancer,
    protocol: ProtocolArg,
    sweep_value: Option<String>,
}

impl Run {
    fn label(&self) -> String {
        let mut l = name(self.balancer).to_string();
        if matches!(self.balancer, Balancer::Smallworld | Balancer::Random) {
            l = format!("{l}/{}", name(self.protocol));
        }
        l
    }

    fn protocol_name(&self) -> &'static str {
        match self.balancer {
            Balancer::None => "none",
            // Work sharing answers requests through the request protocol's serving path.
            Balancer::Master | Balancer::Hierarchical => "request",
            _ => name(self.protocol),
        }
    }
}

/// The runs a command line asks for, in order: sweep points, then balancers, then
/// protocols.
fn runs(args: &Args) -> Vec<Run> {
    let balancers: Vec<Balancer> = expand(
        &args.balancer,
        Balancer::All,
        &[
            Balancer::None,
            Balancer::Smallworld,
            Balancer::Random,
            Balancer::Master,
            Balancer::Hierarchical,
        ],
    );
    let protocols = expand(
        &args.protocol,
        ProtocolArg::All,
        &[ProtocolArg::Lock, ProtocolArg::Claim, ProtocolArg::Request],
    );
    let points: Vec<(Args, Option<String>)> = match &args.sweep {
        None => vec![(args.clone(), None)],
        Some(spec) => sweep_points(args, spec).unwrap_or_else(|e| fail(2, &e)),
    };
    let mut out = Vec::new();
    for (a, v) in points {
        for &b in &balancers {
            let ps: &[ProtocolArg] = if matches!(b, Balancer::Smallworld | Balancer::Random) {
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
fn expand<T: Copy + PartialEq>(list: &[T], all: T, every: &[T]) -> Vec<T> {
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
fn sweep_points(args: &Args, spec: &str) -> Result<Vec<(Args, Option<String>)>, String> {
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

fn group_size(args: &Args, ranks: u32) -> u32 {
    args.group_size
        .unwrap_or_else(|| (f64::from(ranks).sqrt().ceil() as u32).max(1))
}

fn config(run: &Run, ranks: u32, plan: &Plan) -> RuntimeConfig {
    let args = &run.args;
    let payload = plan.payload;
    let mut cfg = RuntimeConfig {
        workers: args.workers,
        ..RuntimeConfig::default()
    };
    cfg.core.protocol = match run.protocol {
        ProtocolArg::Lock => Protocol::Lock,
        ProtocolArg::Claim | ProtocolArg::All => Protocol::Claim,
        ProtocolArg::Request => Protocol::Request,
    };
    cfg.core.seed = args.seed;
    cfg.overlay.seed = args.seed;
    cfg.core.max_payload = (task::HEADER as u64 + payload) as u32;
    cfg.core.max_result = 8;
    // The shared set holds at most ~64 MiB of slots per region.
    let slot = task::HEADER as u64 + payload + 16;
    cfg.core.shared_capacity = ((64u64 << 20) / slot).clamp(2, 1024) as u32;
    // Victims drawn uniformly over every other rank: the complete graph (random); work
    // sharing returns results straight to their owners over it too.
    let complete = |cfg: &mut RuntimeConfig| {
        cfg.overlay.shortcuts = ranks.saturating_sub(3);
        cfg.overlay.exponent = Some(0.0);
    };
    match run.balancer {
        Balancer::None => cfg.core.steal_below = 0,
        Balancer::Random => complete(&mut cfg),
        Balancer::Master => {
            complete(&mut cfg);
            cfg.core.protocol = Protocol::Request;
            cfg.core.sharing = Some(Sharing::master(ranks));
        }
        Balancer::Hierarchical => {
            complete(&mut cfg);
            cfg.core.protocol = Protocol::Request;
            // Groups from load estimates, as YALES2 forms them from previous iterations;
            // here the estimate is the task count (costs are not known in advance).
            let counts = workload::counts(&plan.spec).unwrap_or_else(|e| fail(2, &e));
            let groups = Sharing::balanced_groups(&counts, group_size(args, ranks));
            cfg.core.sharing = Some(
                Sharing::groups(groups, ranks, true).unwrap_or_else(|e| fail(2, &e.to_string())),
            );
        }
        Balancer::Smallworld | Balancer::All => {}
    }
    cfg
}

/// One rank's run: returns its figures (and the report on rank 0).
fn rank_main(rt: &Runtime, run: &Run, plan: &Plan) -> Result<Option<Report>, String> {
    let args = &run.args;
    let rank = rt.rank();
    let all = workload::generate(&plan.spec)?;
    let mine = &all[rank as usize];
    // Every rank uses rank 0's calibration, so a task is the same work wherever it runs.
    let per_round = rt
        .all_gather(&encode_f64s(&[calibration(plan.payload)]))
        .map_err(|e| e.to_string())?
        .first()
        .and_then(|b| decode_f64s(b).first().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or("rank 0 sent no calibration")?;
    let tasks: Vec<(u16, Vec<u8>)> = mine
        .iter()
        .map(|t| {
            (
                0,
                task::payload(
                    task::rounds_for(t.cost, per_round),
                    plan.spec.seed ^ t.global.wrapping_mul(0x9E37_79B9),
                    plan.payload as usize,
                ),
            )
        })
        .collect();
    let out = rt
        .run_epoch(tasks.clone())
        .map_err(|e| format!("rank {rank}: {e}"))?;
    // Verification: every result against a sequential recomputation (not timed).
    let mut bad = None;
    if out.results.len() != tasks.len() {
        bad = Some(format!(
            "rank {rank}: {} results for {} tasks",
            out.results.len(),
            tasks.len()
        ));
    }
    for (i, (r, (_, p))) in out.results.iter().zip(&tasks).enumerate() {
        if bad.is_none() && *r != task::run(p) {
            bad = Some(format!(
                "rank {rank}: task {i} (global {}) has a wrong result",
                mine[i].global
            ));
        }
    }
    if let Some(b) = &bad {
        eprintln!("dlb-bench: verification failed: {b}");
    }
    let st = &out.stats;
    let hops: u64 = st
        .core
        .result_hops
        .iter()
        .enumerate()
        .map(|(h, c)| h as u64 * c)
        .sum();
    let homed: u64 = st.core.result_hops.iter().sum();
    let figures = [
        st.busy.as_secs_f64(),
        st.session.as_secs_f64(),
        st.idle.as_secs_f64(),
        st.steal.as_secs_f64(),
        st.core.steals_ok as f64,
        st.core.steals_empty as f64,
        st.core.steals_locked as f64,
        (st.core.bytes_stolen + st.core.bytes_results) as f64,
        hops as f64,
        homed as f64,
        f64::from(u8::from(bad.is_none())),
    ];
    let gathered = rt
        .all_gather(&encode_f64s(&figures))
        .map_err(|e| e.to_string())?;
    // The steal timeline (only drawn with --plot).
    let log: Vec<f64> = if args.plot.is_some() {
        st.core
            .steal_log
            .iter()
            .flat_map(|e| {
                [
                    e.at_ns as f64 * 1e-9,
                    f64::from(e.victim),
                    f64::from(e.tasks),
                ]
            })
            .collect()
    } else {
        Vec::new()
    };
    let logs = rt
        .all_gather(&encode_f64s(&log))
        .map_err(|e| e.to_string())?;
    if rank != 0 {
        return Ok(None);
    }
    let f: Vec<Vec<f64>> = gathered.iter().map(|b| decode_f64s(b)).collect();
    let col =
        |i: usize| -> Vec<f64> { f.iter().map(|v| v.get(i).copied().unwrap_or(0.0)).collect() };
    let n = rt.size();
    let busy = col(0);
    let slowest = col(1).into_iter().fold(0.0, f64::max);
    let total_cost: f64 = all.iter().flatten().map(|t| t.cost).sum();
    let longest = all.iter().flatten().map(|t| t.cost).fold(0.0, f64::max);
    let workers = args.workers as f64;
    let sum = |i: usize| col(i).iter().sum::<f64>();
    let mut steals = Vec::new();
    for (thief, blob) in logs.iter().enumerate() {
        for e in decode_f64s(blob).chunks_exact(3) {
            steals.push((e[0], thief as u32, e[1] as u32, e[2] as u32));
        }
    }
    Ok(Some(Report {
        efficiency: busy.iter().sum::<f64>() / (f64::from(n) * workers * slowest),
        resolution_s: slowest,
        ideal_s: (total_cost / (f64::from(n) * workers)).max(longest),
        ranks: n,
        workers: args.workers,
        balancer: name(run.balancer),
        protocol: run.protocol_name(),
        seed: args.seed,
        verified: col(10).iter().all(|&v| v == 1.0),
        profile: plan.profile.clone(),
        tasks: plan.spec.tasks,
        task_time_s: plan.spec.task_time,
        payload_bytes: plan.payload,
        cost: name(args.cost),
        distribution: name(args.distribution),
        // TITUS's arithmetic intensity: compute seconds × 3·10⁹ / bytes.
        cycles_per_byte: total_cost * 3e9
            / (plan.payload as f64 * plan.spec.tasks.max(1) as f64).max(1.0),
        steals_ok: sum(4) as u64,
        steals_empty: sum(5) as u64,
        steals_locked: sum(6) as u64,
        bytes_moved: sum(7) as u64,
        result_hops_mean: sum(8) / sum(9).max(1.0),
        group_size: if run.balancer == Balancer::Hierarchical {
            group_size(args, n)
        } else {
            0
        },
        busy_s: busy,
        idle_s: col(2),
        steal_s: col(3),
        owned_s: all
            .iter()
            .map(|ts| ts.iter().map(|t| t.cost).fold(0.0, |a, c| a + c))
            .collect(),
        steals,
        sweep_value: run.sweep_value.clone(),
    }))
}

const CSV_HEADER: &str = "efficiency,resolution_s,ideal_s,ranks,workers,balancer,protocol,seed,verified,profile,tasks,task_time_s,payload_bytes,cost,distribution,steals_ok,steals_empty,steals_locked,bytes_moved,result_hops_mean,group_size";

fn csv_row(r: &Report) -> String {
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
fn print(r: &Report, args: &Args, first: bool) {
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
fn print_summary(reports: &[(String, Report)]) {
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

/// Writes the plots of the runs (and the sweep's CSV and plot); returns the files.
fn plots(args: &Args, reports: &[(String, Report)]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let label = |l: &str, r: &Report| match &r.sweep_value {
        Some(v) => format!("{l} {v}"),
        None => l.to_string(),
    };
    if let Some(dir) = &args.plot {
        let first = &reports[0].1;
        let shape = format!(
            "{} ranks, {} ({} tasks, {} ownership)",
            first.ranks, first.profile, first.tasks, first.distribution
        );
        files.extend(plot::save(
            &plot::Bars {
                title: format!("DLB_Bench efficiency: {shape}"),
                y_label: "efficiency".into(),
                labels: reports.iter().map(|(l, r)| label(l, r)).collect(),
                values: reports.iter().map(|(_, r)| r.efficiency).collect(),
                y_max: Some(1.1),
            },
            dir,
            "efficiency",
        )?);
        if args.sweep.is_none() {
            files.extend(plot::save(
                &plot::RankLoads {
                    title: format!("Per-rank load: {shape}"),
                    before: first.owned_s.clone(),
                    after: reports
                        .iter()
                        .map(|(l, r)| (l.clone(), r.busy_s.clone(), r.idle_s.clone()))
                        .collect(),
                },
                dir,
                "ranks",
            )?);
        }
        for (l, r) in reports {
            if r.steals.is_empty() {
                continue;
            }
            let stem = format!("steals-{}", label(l, r).replace(['/', ' '], "-"));
            files.extend(plot::save(
                &plot::Timeline {
                    title: format!("Steals over time: {} ({} ranks)", label(l, r), r.ranks),
                    ranks: r.ranks,
                    span_s: r.resolution_s,
                    steals: r.steals.clone(),
                },
                dir,
                &stem,
            )?);
        }
    }
    if let Some(spec) = &args.sweep {
        let dir = args
            .plot
            .clone()
            .unwrap_or_else(|| PathBuf::from("dlb-sweep"));
        let param = spec.split_once('=').map_or(spec.as_str(), |p| p.0);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
        let csv = dir.join("sweep.csv");
        let mut text = format!("{param},run,{CSV_HEADER}\n");
        for (l, r) in reports {
            text += &format!(
                "{},{l},{}\n",
                r.sweep_value.as_deref().unwrap_or(""),
                csv_row(r)
            );
        }
        std::fs::write(&csv, text).map_err(|e| format!("cannot write '{}': {e}", csv.display()))?;
        files.push(csv);
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (l, r) in reports {
            let x: f64 = r
                .sweep_value
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN);
            match series.iter_mut().find(|s| &s.0 == l) {
                Some(s) => s.1.push((x, r.efficiency)),
                None => series.push((l.clone(), vec![(x, r.efficiency)])),
            }
        }
        let log_x = ["ranks", "tasks", "payload"].contains(&param);
        files.extend(plot::save(
            &plot::Lines {
                title: format!("DLB_Bench efficiency versus {param}"),
                x_label: param.to_string(),
                y_label: "efficiency".into(),
                series,
                log_x,
                y_max: Some(1.1),
            },
            &dir,
            "sweep-efficiency",
        )?);
    }
    Ok(files)
}

/// A progress bar on stderr for runs longer than 2 s, when stderr is a terminal.
struct Progress {
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(enabled: bool, label: String, total: Option<u64>) -> Self {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let thread = (enabled && std::io::stderr().is_terminal()).then(|| {
            let stop = stop.clone();
            let base = TASKS_RUN.load(Ordering::Relaxed);
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_secs(2) {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let bar = match total {
                    Some(t) => indicatif::ProgressBar::new(t).with_style(
                        indicatif::ProgressStyle::with_template(
                            "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} tasks",
                        )
                        .expect("template"),
                    ),
                    None => indicatif::ProgressBar::new_spinner().with_style(
                        indicatif::ProgressStyle::with_template(
                            "{msg} [{elapsed_precise}] {spinner} {pos} tasks run here",
                        )
                        .expect("template"),
                    ),
                };
                bar.set_message(label);
                while !stop.load(Ordering::Acquire) {
                    bar.set_position(TASKS_RUN.load(Ordering::Relaxed) - base);
                    bar.tick();
                    std::thread::sleep(Duration::from_millis(100));
                }
                bar.finish_and_clear();
            })
        });
        Self { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Seconds per round of the task over `payload` bytes on this machine, measured once per
/// process and size (before any rank starts: ranks calibrating at once on shared cores
/// would measure each other).
fn calibration(payload: u64) -> f64 {
    static CACHE: std::sync::Mutex<Vec<(u64, f64)>> = std::sync::Mutex::new(Vec::new());
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, v)) = c.iter().find(|e| e.0 == payload) {
        return v;
    }
    let v = task::seconds_per_round(payload as usize);
    c.push((payload, v));
    v
}

fn counted_task(payload: &[u8]) -> Vec<u8> {
    let r = task::run(payload);
    TASKS_RUN.fetch_add(1, Ordering::Relaxed);
    r
}

fn check_args(args: &Args) {
    if args.workers == 0 {
        fail(2, "--workers must be at least 1");
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

fn main() {
    let args = Args::parse();
    check_args(&args);
    let launched = std::env::var_os("TITUS_SIZE").is_some()
        || std::env::var_os("SLURM_NTASKS").is_some()
        || std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some()
        || std::env::var_os("PMI_SIZE").is_some();
    let runs = runs(&args);
    let env = launched.then(|| JobEnv::from_env().unwrap_or_else(|e| fail(2, &e.to_string())));
    if env.is_some()
        && args
            .sweep
            .as_deref()
            .is_some_and(|s| s.starts_with("ranks="))
    {
        fail(
            2,
            "--sweep ranks needs the in-process mode (under a launcher the launcher sets the ranks)",
        );
    }
    let mut reports: Vec<(String, Report)> = Vec::new();
    for (k, run) in runs.iter().enumerate() {
        check_args(&run.args);
        let report = match &env {
            Some(env) => {
                let plan = plan(&run.args, env.size);
                calibration(plan.payload);
                let job = u16::try_from(k)
                    .map_err(|_| "too many runs for one job".to_string())
                    .and_then(|k| env.session(k).map_err(|e| e.to_string()))
                    .unwrap_or_else(|e| fail(2, &e));
                let rt = Runtime::from_job(
                    config(run, env.size, &plan),
                    Backend::Ofi { provider: None },
                    job,
                )
                .unwrap_or_else(|e| fail(1, &e.to_string()));
                rt.register(0, counted_task);
                let _bar = Progress::start(
                    !args.no_progress && rt.rank() == 0 && !args.json && !args.csv,
                    run.label(),
                    None,
                );
                rank_main(&rt, run, &plan).unwrap_or_else(|e| fail(1, &e))
            }
            None => {
                let ranks = run.args.ranks;
                if ranks == 0 {
                    fail(2, "--ranks must be at least 1");
                }
                let plan = plan(&run.args, ranks);
                calibration(plan.payload);
                let rts = Runtime::local(ranks, config(run, ranks, &plan), MemOptions::default())
                    .unwrap_or_else(|e| fail(2, &e.to_string()));
                let _bar = Progress::start(
                    !args.no_progress && !args.json && !args.csv,
                    run.label(),
                    Some(plan.spec.tasks),
                );
                let results: Vec<Result<Option<Report>, String>> = std::thread::scope(|s| {
                    let hs: Vec<_> = rts
                        .iter()
                        .map(|rt| {
                            rt.register(0, counted_task);
                            let plan = &plan;
                            s.spawn(move || rank_main(rt, run, plan))
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().expect("rank thread"))
                        .collect()
                });
                let mut report = None;
                for r in results {
                    match r {
                        Ok(Some(rep)) => report = Some(rep),
                        Ok(None) => {}
                        Err(e) => fail(1, &e),
                    }
                }
                report
            }
        };
        if let Some(r) = report {
            print(&r, &args, reports.is_empty());
            reports.push((run.label(), r));
        }
    }
    if reports.is_empty() {
        return; // Not rank 0.
    }
    if reports.len() > 1 && !args.json && !args.csv {
        print_summary(&reports);
    }
    if args.plot.is_some() || args.sweep.is_some() {
        match plots(&args, &reports) {
            Ok(files) => {
                for f in files {
                    eprintln!("dlb-bench: wrote {}", f.display());
                }
            }
            Err(e) => fail(1, &e),
        }
    }
    if let Some((l, _)) = reports.iter().find(|(_, r)| !r.verified) {
        fail(
            1,
            &format!("verification failed in run {l} (see the messages above)"),
        );
    }
}
