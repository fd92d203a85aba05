//! `runtime-bench`: the work-stealing runtime's figures.
//!
//! Rank 0 owns every task (`--tasks` of `--task-ms` each: real work, a hash loop
//! calibrated on this machine, no sleep); the other ranks start empty and must steal.
//! Prints, per steal protocol: efficiency (Σ task time / (ranks × workers × slowest
//! session)), nominal efficiency (tasks × task-ms / (ranks × workers × slowest session):
//! each task at its calibrated duration, so tasks slowed by the runtime do not flatter
//! it; JSON `nominal_efficiency`, also kept as `efficiency_calibrated`), the resolution
//! time, steal attempts by outcome, steal latency p50/p99
//! next to the fabric's CAS and read latency measured in the same run (and their ratio),
//! and each rank's CPU use. Results are checked: every one present (the core refuses
//! duplicates), a sample recomputed.
//!
//! In-process: `runtime-bench --ranks 2`. Multi-process:
//! `titus launch -n 2 --provider P -- runtime-bench`.
//! `--no-share`: rank 0 shares nothing, so the others stay idle and only try: the CPU an
//! idle rank burns.
#![forbid(unsafe_code)]

use clap::Parser;
use serde::Serialize;
use std::time::Instant;
use titus_fabric::bootstrap::JobEnv;
use titus_fabric::mem::MemOptions;
use titus_fabric::{Fabric, Loc, SegmentId};
use titus_runtime::{Backend, Protocol, Runtime, RuntimeConfig};

/// In-process ranks without `--ranks`.
const DEFAULT_RANKS: u32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "runtime-bench",
    version,
    about = "Efficiency and steal latency of the Titus runtime"
)]
struct Args {
    /// In-process ranks [default: 2]. Under a launcher the launcher sets the rank count,
    /// and a `--ranks` that differs from it is refused.
    #[arg(long)]
    ranks: Option<u32>,
    /// Tasks, all owned by rank 0.
    #[arg(long, default_value_t = 10_000)]
    tasks: u32,
    /// Duration of one task, milliseconds (calibrated real work).
    #[arg(long, default_value_t = 1.0)]
    task_ms: f64,
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Steal protocol: lock, claim, request, or all (one runtime each; in-process only).
    #[arg(long, default_value = "all")]
    protocol: String,
    /// Rank 0 shares nothing: the others only try to steal (idle CPU figure).
    #[arg(long)]
    no_share: bool,
    /// Progress-thread nap during epochs on fabrics that must poll (shm), microseconds,
    /// 0 to 1,000,000.
    #[arg(long, default_value_t = 200)]
    epoch_nap_us: u64,
    /// How long the results of a rank's tasks wait for company before they travel home,
    /// milliseconds [default: the core's, 20].
    #[arg(long)]
    flush_delay_ms: Option<f64>,
    /// Fault injection: this rank exits abruptly (no cleanup, like a crash) after running
    /// `--kill-after` tasks; the others must fail with an error, not hang.
    #[arg(long)]
    kill_rank: Option<u32>,
    /// Tasks the killed rank runs before it exits (0: it exits as it would call the
    /// epoch, so the others wait for it in the epoch's start).
    #[arg(long, default_value_t = 10)]
    kill_after: u64,
    /// Fault injection: this rank stops itself (SIGSTOP, as a debugger or the shell's
    /// Ctrl-Z would) after running `--freeze-after` tasks, its pid alive; the others must
    /// name it, not hang.
    #[arg(long)]
    freeze_rank: Option<u32>,
    /// Tasks the frozen rank runs before it stops.
    #[arg(long, default_value_t = 10)]
    freeze_after: u64,
    /// Timeout of each remote operation, seconds (a silent peer fails the epoch after it).
    #[arg(long, default_value_t = 30.0)]
    op_timeout: f64,
    /// Seed of the overlay and victim choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object per protocol instead of the table.
    #[arg(long)]
    json: bool,
}

/// The task: `iters` rounds of a 64-bit mixing function seeded by the index.
fn work(payload: &[u8]) -> Vec<u8> {
    let iters = u64::from_le_bytes(payload[..8].try_into().expect("8-byte count"));
    let mut x = u64::from_le_bytes(payload[8..16].try_into().expect("8-byte seed")) | 1;
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x.to_le_bytes().to_vec()
}

/// Iterations of `work` per millisecond on this machine (best of 5 runs of ~20 ms).
fn calibrate() -> f64 {
    let probe = 2_000_000u64;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let mut p = probe.to_le_bytes().to_vec();
        p.extend_from_slice(&7u64.to_le_bytes());
        let t = Instant::now();
        std::hint::black_box(work(&p));
        best = best.min(t.elapsed().as_secs_f64());
    }
    probe as f64 / (best * 1e3)
}

fn payload(iters: u64, index: u64) -> Vec<u8> {
    let mut p = iters.to_le_bytes().to_vec();
    p.extend_from_slice(&(index.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes());
    p
}

fn cpu_seconds() -> f64 {
    titus_fabric::conformance::process_cpu_seconds().unwrap_or(0.0)
}

fn percentile(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1e3
}

/// One rank's figures, exchanged through the runtime's all-gather.
#[derive(Debug, Default, Clone)]
struct RankFigures {
    busy_s: f64,
    session_s: f64,
    cpu_s: f64,
    steals_ok: u64,
    steals_empty: u64,
    steals_locked: u64,
    tasks_run: u64,
    latencies: Vec<u64>,
}

impl RankFigures {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for f in [self.busy_s, self.session_s, self.cpu_s] {
            b.extend_from_slice(&f.to_le_bytes());
        }
        for u in [
            self.steals_ok,
            self.steals_empty,
            self.steals_locked,
            self.tasks_run,
            self.latencies.len() as u64,
        ] {
            b.extend_from_slice(&u.to_le_bytes());
        }
        for l in &self.latencies {
            b.extend_from_slice(&l.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Self {
        let f = |i: usize| f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let n = u(7) as usize;
        Self {
            busy_s: f(0),
            session_s: f(1),
            cpu_s: f(2),
            steals_ok: u(3),
            steals_empty: u(4),
            steals_locked: u(5),
            tasks_run: u(6),
            latencies: (0..n).map(|i| u(8 + i)).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
struct Report {
    protocol: &'static str,
    backend: String,
    ranks: u32,
    workers: usize,
    tasks: u32,
    task_ms: f64,
    efficiency: f64,
    /// The same with each task counted at its calibrated duration: lower when tasks ran
    /// slower than calibrated (CPU taken by progress threads, oversubscription).
    efficiency_calibrated: f64,
    /// Tasks × task-ms / (ranks × workers × resolution): the efficiency against the
    /// nominal work (the same figure as `efficiency_calibrated`, under the name every
    /// Titus report uses).
    nominal_efficiency: f64,
    resolution_s: f64,
    ideal_s: f64,
    steals_ok: u64,
    steals_empty: u64,
    steals_locked: u64,
    steal_p50_us: f64,
    steal_p99_us: f64,
    fabric_cas_p50_us: f64,
    fabric_read_p50_us: f64,
    steal_over_read: f64,
    cpu_per_rank: Vec<f64>,
    verified: bool,
}

/// Median latency of `n` CAS and 8-byte reads from this rank to rank 0's TASKS header.
fn fabric_latency(f: &dyn Fabric, n: usize) -> (f64, f64) {
    let word = Loc::new(SegmentId(0), 48); // a reserved header word, touched by nobody
    let local = Loc::new(SegmentId(0), 56);
    let mut cas = Vec::with_capacity(n);
    let mut read = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        let _ = f.compare_swap_sync(0, word, i, i);
        cas.push(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        let _ = f.read_sync(0, word, local, 8);
        read.push(t.elapsed().as_nanos() as u64);
    }
    (percentile(&mut cas, 0.5), percentile(&mut read, 0.5))
}

/// What every rank does for one protocol; rank 0 returns the report.
fn rank_main(
    rt: &Runtime,
    args: &Args,
    protocol: Protocol,
    iters_per_ms: f64,
    backend: &str,
) -> Result<Option<Report>, String> {
    let rank = rt.rank();
    let iters = (args.task_ms * iters_per_ms).round() as u64;
    // The fabric's own latency, from rank 1 to rank 0, in this run.
    let (cas, read) = if rank == 1 {
        fabric_latency(&**rt.fabric(), 300)
    } else {
        (0.0, 0.0)
    };
    let tasks: Vec<(u16, Vec<u8>)> = if rank == 0 {
        (0..args.tasks)
            .map(|i| (0, payload(iters, u64::from(i))))
            .collect()
    } else {
        Vec::new()
    };
    if args.kill_rank == Some(rank) && args.kill_after == 0 {
        eprintln!(
            "runtime-bench: fault injection: this rank (pid {}) exits before its epoch starts",
            std::process::id()
        );
        std::process::exit(0);
    }
    let cpu0 = cpu_seconds();
    let out = rt
        .run_epoch(tasks.clone())
        .map_err(|e| format!("rank {rank}: {e}"))?;
    let cpu = cpu_seconds() - cpu0;
    // Results: all present (the runtime refuses duplicates), a sample recomputed.
    let mine = RankFigures {
        busy_s: out.stats.busy.as_secs_f64(),
        session_s: out.stats.session.as_secs_f64(),
        cpu_s: cpu,
        steals_ok: out.stats.core.steals_ok,
        steals_empty: out.stats.core.steals_empty,
        steals_locked: out.stats.core.steals_locked,
        tasks_run: out.stats.core.tasks_run,
        latencies: out
            .stats
            .core
            .steal_latency_ns
            .iter()
            .copied()
            .take(20_000)
            .collect(),
    };
    let mut blob = mine.encode();
    blob.extend_from_slice(&cas.to_le_bytes());
    blob.extend_from_slice(&read.to_le_bytes());
    let all = rt.all_gather(&blob).map_err(|e| e.to_string())?;
    if rank != 0 {
        return Ok(None);
    }
    // Only rank 0 owns tasks. Recomputed after the figures' all-gather, which would
    // otherwise wait out a sample of long tasks (two of 60 s passed the bootstrap's
    // timeout on the other ranks).
    let mut verified = out.results.len() == tasks.len();
    for i in (0..tasks.len()).step_by((tasks.len() / 50).max(1)) {
        verified &= out.results[i] == work(&tasks[i].1);
    }
    let figs: Vec<RankFigures> = all
        .iter()
        .map(|b| RankFigures::decode(&b[..b.len() - 16]))
        .collect();
    let tail = |b: &Vec<u8>, i: usize| {
        f64::from_le_bytes(
            b[b.len() - 16 + i * 8..b.len() - 8 + i * 8]
                .try_into()
                .expect("8 bytes"),
        )
    };
    let (cas, read) = if all.len() > 1 {
        (tail(&all[1], 0), tail(&all[1], 1))
    } else {
        (0.0, 0.0)
    };
    let n = rt.size();
    let busy: f64 = figs.iter().map(|f| f.busy_s).sum();
    let slowest = figs.iter().map(|f| f.session_s).fold(0.0, f64::max);
    let mut lat: Vec<u64> = figs
        .iter()
        .flat_map(|f| f.latencies.iter().copied())
        .collect();
    let p50 = percentile(&mut lat, 0.5);
    let p99 = percentile(&mut lat, 0.99);
    let workers = args.workers;
    let ideal = (busy / f64::from(n) / workers as f64).max(args.task_ms / 1e3);
    let nominal =
        f64::from(args.tasks) * args.task_ms / 1e3 / (f64::from(n) * workers as f64 * slowest);
    Ok(Some(Report {
        protocol: protocol.name(),
        backend: backend.into(),
        ranks: n,
        workers,
        tasks: args.tasks,
        task_ms: args.task_ms,
        efficiency: busy / (f64::from(n) * workers as f64 * slowest),
        efficiency_calibrated: nominal,
        nominal_efficiency: nominal,
        resolution_s: slowest,
        ideal_s: ideal,
        steals_ok: figs.iter().map(|f| f.steals_ok).sum(),
        steals_empty: figs.iter().map(|f| f.steals_empty).sum(),
        steals_locked: figs.iter().map(|f| f.steals_locked).sum(),
        steal_p50_us: p50,
        steal_p99_us: p99,
        fabric_cas_p50_us: cas,
        fabric_read_p50_us: read,
        steal_over_read: if read > 0.0 { p50 / read } else { 0.0 },
        cpu_per_rank: figs
            .iter()
            .map(|f| {
                if f.session_s > 0.0 {
                    f.cpu_s / f.session_s
                } else {
                    0.0
                }
            })
            .collect(),
        verified: verified
            && figs.iter().map(|f| f.tasks_run).sum::<u64>() == u64::from(args.tasks),
    }))
}

fn config(args: &Args, protocol: Protocol) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: args.workers,
        ..RuntimeConfig::default()
    };
    cfg.epoch_nap = std::time::Duration::from_micros(args.epoch_nap_us);
    cfg.op_timeout = std::time::Duration::from_secs_f64(args.op_timeout);
    if let Some(f) = args.flush_delay_ms {
        cfg.core.flush_delay = std::time::Duration::from_secs_f64(f / 1e3);
    }
    cfg.core.protocol = protocol;
    cfg.core.seed = args.seed;
    cfg.core.max_payload = 16;
    cfg.core.max_result = 8;
    if args.no_share {
        cfg.core.min_private = u32::MAX;
    }
    cfg.overlay.seed = args.seed;
    cfg
}

fn print(r: &Report, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).expect("report serialises"));
        return;
    }
    let cpu: Vec<String> = r
        .cpu_per_rank
        .iter()
        .map(|c| format!("{:.1}%", c * 100.0))
        .collect();
    println!(
        "{:<8} {:<12} {:>2}x{:<2} {:>6} {:>5.2} {:>6.3} {:>7.3} {:>7.3} {:>7.3} {:>6}/{:<6}/{:<5} {:>8.1} {:>8.1} {:>7.1} {:>7.1} {:>6.2} {:<5} cpu {}",
        r.protocol,
        r.backend,
        r.ranks,
        r.workers,
        r.tasks,
        r.task_ms,
        r.efficiency,
        r.nominal_efficiency,
        r.resolution_s,
        r.ideal_s,
        r.steals_ok,
        r.steals_empty,
        r.steals_locked,
        r.steal_p50_us,
        r.steal_p99_us,
        r.fabric_cas_p50_us,
        r.fabric_read_p50_us,
        r.steal_over_read,
        r.verified,
        cpu.join(" ")
    );
}

/// The longest progress-thread nap: a second between polls already stalls every steal
/// from the rank for that long.
const EPOCH_NAP_US_MAX: u64 = 1_000_000;

/// Bytes one task holds while the bench runs: rank 0's list and the copy it hands the
/// runtime (a 16-byte payload in a vector each), the runtime's record of it and its
/// result. Measured: the slope of peak RSS between in-process runs of 10^5 and 10^6 tasks
/// (2 ranks, each protocol) is ~223 B; rounded up.
const TASK_BYTES: u64 = 256;

/// Whether `tasks` fit in the memory available to this process: rank 0 builds every
/// payload before the epoch, and in process every rank's share lives here too.
fn tasks_fit(tasks: u32) -> Result<(), String> {
    let need = u64::from(tasks) * TASK_BYTES;
    match titus_fabric::mem::available_memory() {
        Some(have) if need > have => {
            let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
            Err(format!(
                "--tasks {tasks} need about {:.1} GiB of memory ({TASK_BYTES} B a task); this \
                 process has {:.1} GiB available (free memory within its cgroup's limit)",
                gib(need),
                gib(have)
            ))
        }
        _ => Ok(()),
    }
}

fn main() {
    titus_workload::quiet_broken_pipe();
    let args = titus_workload::dlb::parse_args_of::<Args>("runtime-bench");
    if let Err(e) = titus_workload::init_logging() {
        eprintln!("runtime-bench: error: {e}");
        std::process::exit(2);
    }
    let protocols: Vec<Protocol> = if args.protocol == "all" {
        vec![Protocol::Lock, Protocol::Claim, Protocol::Request]
    } else {
        match args.protocol.parse() {
            Ok(p) => vec![p],
            Err(e) => {
                eprintln!("runtime-bench: error: {e}");
                std::process::exit(2);
            }
        }
    };
    // Numbers first, before anything starts: each bad value is one line and exit 2.
    let bad = |what: String| -> ! {
        eprintln!("runtime-bench: error: {what}");
        std::process::exit(2);
    };
    if args.tasks == 0 {
        bad("--tasks must be at least 1".into());
    }
    if !(args.task_ms > 0.0 && args.task_ms <= 3.6e6) {
        bad(format!(
            "--task-ms must be a number of milliseconds in (0, 3600000] (got {})",
            titus_workload::show_number(args.task_ms)
        ));
    }
    if !(args.op_timeout > 0.0 && args.op_timeout <= 86_400.0) {
        bad(format!(
            "--op-timeout must be a number of seconds in (0, 86400] (got {})",
            titus_workload::show_number(args.op_timeout)
        ));
    }
    if let Err(e) = titus_workload::check_millis("--flush-delay-ms", args.flush_delay_ms) {
        bad(e.to_string());
    }
    if args.workers == 0 || args.workers > 1024 {
        bad(format!(
            "--workers must be in 1..=1024 (got {})",
            args.workers
        ));
    }
    // In process: given or 2; under a launcher only checked against the job's size below.
    let local_ranks = args.ranks.unwrap_or(DEFAULT_RANKS);
    if local_ranks == 0 || u64::from(local_ranks) * (args.workers as u64 + 1) > 4096 {
        bad(format!(
            "--ranks {local_ranks} × (--workers {} + a progress thread) is over 4096 threads in one process",
            args.workers
        ));
    }
    if args.epoch_nap_us > EPOCH_NAP_US_MAX {
        bad(format!(
            "--epoch-nap-us {}: expected 0..={EPOCH_NAP_US_MAX}",
            args.epoch_nap_us
        ));
    }
    // A fault after more tasks than the job has never strikes: the run would pass having
    // checked nothing.
    for (flag, rank, after) in [
        ("--kill-after", args.kill_rank, args.kill_after),
        ("--freeze-after", args.freeze_rank, args.freeze_after),
    ] {
        if rank.is_some() && after > u64::from(args.tasks) {
            bad(format!(
                "{flag} {after}: the job has {} tasks, so the fault would never strike",
                args.tasks
            ));
        }
    }
    // One rank gets one fault: with both on one rank the kill would silently win.
    if let (Some(k), Some(f)) = (args.kill_rank, args.freeze_rank)
        && k == f
    {
        bad(format!(
            "--kill-rank {k} and --freeze-rank {f} name the same rank: give each fault its own rank"
        ));
    }
    if let Err(e) = tasks_fit(args.tasks) {
        bad(e);
    }
    // Under a launcher (any that JobEnv knows), this process is one rank of the job.
    let env = JobEnv::from_env().unwrap_or_else(|e| {
        eprintln!("runtime-bench: error: {e}");
        std::process::exit(2);
    });
    let launched = env.launched();
    // The launcher sets the job's size: a `--ranks` that says otherwise was meant for an
    // in-process run, and ignoring it would measure another job than asked.
    if let Some(r) = args.ranks
        && launched
        && r != env.size
    {
        bad(format!(
            "--ranks {r}, but the launcher started {} rank{} (drop --ranks under a launcher)",
            env.size,
            if env.size == 1 { "" } else { "s" }
        ));
    }
    let iters_per_ms = calibrate();
    let header = || {
        if !args.json {
            println!(
                "{:<8} {:<12} {:>5} {:>6} {:>5} {:>6} {:>7} {:>7} {:>7} {:>20} {:>8} {:>8} {:>7} {:>7} {:>6} {:<5}",
                "protocol",
                "backend",
                "NxW",
                "tasks",
                "ms",
                "eff",
                "nominal",
                "res_s",
                "ideal_s",
                "steals ok/empty/lock",
                "p50_us",
                "p99_us",
                "cas_us",
                "read_us",
                "/read",
                "ok"
            );
        }
    };
    let mut failed = false;
    if launched && protocols.len() > 1 {
        eprintln!(
            "runtime-bench: error: under a launcher, one job is one runtime: pick one --protocol (lock, claim or request) per launch"
        );
        std::process::exit(2);
    }
    let faulty = [
        ("--kill-rank", args.kill_rank),
        ("--freeze-rank", args.freeze_rank),
    ];
    if !launched && let Some((flag, _)) = faulty.iter().find(|f| f.1.is_some()) {
        eprintln!(
            "runtime-bench: error: {flag} needs ranks that are processes: run under a launcher (titus launch -n N -- runtime-bench ...)"
        );
        std::process::exit(2);
    }
    if launched {
        let mut first = true;
        for &p in &protocols {
            let rt = match Runtime::from_job(
                config(&args, p),
                Backend::default_fabric(None),
                env.clone(),
            ) {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("runtime-bench: {e}");
                    std::process::exit(if e.is_usage() { 2 } else { 1 });
                }
            };
            for (flag, r) in faulty {
                if let Some(r) = r.filter(|&r| r >= rt.size()) {
                    eprintln!(
                        "runtime-bench: error: {flag} {r}: the job has {} ranks (0..={})",
                        rt.size(),
                        rt.size() - 1
                    );
                    std::process::exit(2);
                }
            }
            if args.kill_rank == Some(rt.rank()) {
                let left = std::sync::atomic::AtomicU64::new(args.kill_after);
                rt.register(0, move |p: &[u8]| {
                    if left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) <= 1 {
                        eprintln!(
                            "runtime-bench: fault injection: this rank (pid {}) exits now",
                            std::process::id()
                        );
                        std::process::exit(0);
                    }
                    work(p)
                });
            } else if args.freeze_rank == Some(rt.rank()) {
                let left = std::sync::atomic::AtomicU64::new(args.freeze_after);
                rt.register(0, move |p: &[u8]| {
                    if left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                        eprintln!(
                            "runtime-bench: fault injection: this rank (pid {}) stops itself now",
                            std::process::id()
                        );
                        let _ = rustix::process::kill_process(
                            rustix::process::getpid(),
                            rustix::process::Signal::STOP,
                        );
                    }
                    work(p)
                });
            } else {
                rt.register(0, work);
            }
            let backend = rt.fabric().caps().provider.clone();
            if rt.rank() == 0 && first {
                header();
                first = false;
            }
            match rank_main(&rt, &args, p, iters_per_ms, &backend) {
                Ok(Some(r)) => {
                    failed |= !r.verified;
                    print(&r, args.json);
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("runtime-bench: {e}");
                    std::process::exit(1);
                }
            }
        }
    } else {
        header();
        for &p in &protocols {
            let rts = match Runtime::local(local_ranks, config(&args, p), MemOptions::default()) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("runtime-bench: {e}");
                    std::process::exit(2);
                }
            };
            let reports: Vec<Result<Option<Report>, String>> = std::thread::scope(|s| {
                // Each rank's thread owns its runtime: one that fails drops it on
                // return, and the others' next all-gather fails naming it.
                let hs: Vec<_> = rts
                    .into_iter()
                    .map(|rt| {
                        rt.register(0, work);
                        let args = &args;
                        s.spawn(move || rank_main(&rt, args, p, iters_per_ms, "mem"))
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("rank thread"))
                    .collect()
            });
            for r in reports {
                match r {
                    Ok(Some(r)) => {
                        failed |= !r.verified;
                        print(&r, args.json);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        eprintln!("runtime-bench: {e}");
                        failed = true;
                    }
                }
            }
        }
    }
    if failed {
        eprintln!("runtime-bench: verification failed");
        std::process::exit(1);
    }
}
