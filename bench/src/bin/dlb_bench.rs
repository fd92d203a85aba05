//! `dlb-bench`: DLB_Bench, the synthetic dynamic-load-balancing benchmark.
//!
//! Each rank owns tasks of a workload (`titus_bench::workload`): real work over payloads
//! (`titus_bench::task`), calibrated on this machine to the drawn costs. One epoch runs
//! under the chosen balancer; then every result is recomputed sequentially and compared,
//! and a wrong, missing or duplicated result fails the run naming the task.
//!
//! In process: `dlb-bench --ranks 4 --profile quick`. Under a launcher (`titus launch -n 4
//! -- dlb-bench`, srun, mpirun): the launcher sets the ranks; rank 0 prints.
#![forbid(unsafe_code)]

use clap::{Parser, ValueEnum};
use serde::Serialize;
use titus_bench::workload::{self, Cost, Distribution, Spec};
use titus_bench::{decode_f64s, encode_f64s, task};
use titus_fabric::mem::MemOptions;
use titus_runtime::{Backend, Protocol, Runtime, RuntimeConfig};

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
    /// Centralised work sharing from rank 0 (not in this build yet).
    Master,
    /// Groups with a rotating master, as YALES2's balancer (not in this build yet).
    Hierarchical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtocolArg {
    Lock,
    Claim,
    Request,
}

/// DLB_Bench: synthetic dynamic load balancing runs.
#[derive(Debug, Parser)]
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
    /// Load balancer.
    #[arg(long, value_enum, default_value_t = Balancer::Smallworld)]
    balancer: Balancer,
    /// Steal protocol (smallworld and random).
    #[arg(long, value_enum, default_value_t = ProtocolArg::Claim)]
    protocol: ProtocolArg,
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    workers: usize,
    /// Seed of the workload, the overlay and victim choice.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    seed: u64,
    /// One JSON object on one line.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV: a header line and one row.
    #[arg(long)]
    csv: bool,
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

#[derive(Debug, Serialize)]
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
    busy_s: Vec<f64>,
    idle_s: Vec<f64>,
    steal_s: Vec<f64>,
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

fn config(args: &Args, ranks: u32, payload: u64) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: args.workers,
        ..RuntimeConfig::default()
    };
    cfg.core.protocol = match args.protocol {
        ProtocolArg::Lock => Protocol::Lock,
        ProtocolArg::Claim => Protocol::Claim,
        ProtocolArg::Request => Protocol::Request,
    };
    cfg.core.seed = args.seed;
    cfg.overlay.seed = args.seed;
    cfg.core.max_payload = (task::HEADER as u64 + payload) as u32;
    cfg.core.max_result = 8;
    // The shared set holds at most ~64 MiB of slots per region.
    let slot = task::HEADER as u64 + payload + 16;
    cfg.core.shared_capacity = ((64u64 << 20) / slot).clamp(2, 1024) as u32;
    match args.balancer {
        Balancer::None => cfg.core.steal_below = 0,
        Balancer::Random => {
            // Victims drawn uniformly over every other rank: the complete graph.
            cfg.overlay.shortcuts = ranks.saturating_sub(3);
            cfg.overlay.exponent = Some(0.0);
        }
        _ => {}
    }
    cfg
}

/// One rank's run: returns its figures (and the report on rank 0).
fn rank_main(rt: &Runtime, args: &Args, plan: &Plan) -> Result<Option<Report>, String> {
    let rank = rt.rank();
    let all = workload::generate(&plan.spec)?;
    let mine = &all[rank as usize];
    let per_round = task::seconds_per_round(plan.payload as usize);
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
    Ok(Some(Report {
        efficiency: busy.iter().sum::<f64>() / (f64::from(n) * workers * slowest),
        resolution_s: slowest,
        ideal_s: (total_cost / (f64::from(n) * workers)).max(longest),
        ranks: n,
        workers: args.workers,
        balancer: name(args.balancer),
        protocol: if args.balancer == Balancer::None {
            "none"
        } else {
            name(args.protocol)
        },
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
        busy_s: busy,
        idle_s: col(2),
        steal_s: col(3),
    }))
}

fn print(r: &Report, args: &Args) {
    if args.json {
        println!("{}", serde_json::to_string(r).expect("report serialises"));
        return;
    }
    if args.csv {
        println!(
            "efficiency,resolution_s,ideal_s,ranks,workers,balancer,protocol,seed,verified,profile,tasks,task_time_s,payload_bytes,cost,distribution,steals_ok,steals_empty,steals_locked,bytes_moved,result_hops_mean"
        );
        println!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
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
            r.result_hops_mean
        );
        return;
    }
    println!(
        "dlb-bench: {} ranks x {} workers, profile {}, {} tasks of {:.3} ms mean ({} cost, {} ownership), {} B payloads ({:.0} cycles/B), balancer {} ({}), seed {}",
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
        "{:>5} {:>9} {:>9} {:>9}",
        "rank", "busy_s", "idle_s", "steal_s"
    );
    for (i, ((b, idle), s)) in r
        .busy_s
        .iter()
        .zip(&r.idle_s)
        .zip(&r.steal_s)
        .enumerate()
        .take(64)
    {
        println!("{i:>5} {b:>9.3} {idle:>9.3} {s:>9.3}");
    }
}

fn main() {
    let args = Args::parse();
    if matches!(args.balancer, Balancer::Master | Balancer::Hierarchical) {
        fail(
            2,
            &format!(
                "balancer '{}' is not in this build yet (available: none, smallworld, random)",
                name(args.balancer)
            ),
        );
    }
    if args.workers == 0 {
        fail(2, "--workers must be at least 1");
    }
    let launched = std::env::var_os("TITUS_SIZE").is_some()
        || std::env::var_os("SLURM_NTASKS").is_some()
        || std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some()
        || std::env::var_os("PMI_SIZE").is_some();
    let report = if launched {
        let size: u32 = titus_fabric::bootstrap::JobEnv::from_env()
            .map(|e| e.size)
            .unwrap_or_else(|e| fail(2, &e.to_string()));
        let plan = plan(&args, size);
        let rt = Runtime::from_env(
            config(&args, size, plan.payload),
            Backend::Ofi { provider: None },
        )
        .unwrap_or_else(|e| fail(1, &e.to_string()));
        rt.register(0, task::run);
        rank_main(&rt, &args, &plan).unwrap_or_else(|e| fail(1, &e))
    } else {
        if args.ranks == 0 {
            fail(2, "--ranks must be at least 1");
        }
        let plan = plan(&args, args.ranks);
        let rts = Runtime::local(
            args.ranks,
            config(&args, args.ranks, plan.payload),
            MemOptions::default(),
        )
        .unwrap_or_else(|e| fail(2, &e.to_string()));
        let results: Vec<Result<Option<Report>, String>> = std::thread::scope(|s| {
            let hs: Vec<_> = rts
                .iter()
                .map(|rt| {
                    rt.register(0, task::run);
                    let (args, plan) = (&args, &plan);
                    s.spawn(move || rank_main(rt, args, plan))
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
    };
    if let Some(r) = report {
        print(&r, &args);
        if !r.verified {
            fail(1, "verification failed (see the messages above)");
        }
    }
}
