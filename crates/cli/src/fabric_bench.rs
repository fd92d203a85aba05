//! `titus fabric-bench`: latency and bandwidth of the fabric between two ranks, next to
//! raw libfabric on the same endpoint in the same run (the node backend: next to raw CPU
//! atomics, loads and stores on the same mapping).
//!
//! Rank 0 measures; rank 1 is the target, serving operations from its progress thread
//! (as in a real run). Rank 0 runs no progress thread: its waits poll the completion queue
//! themselves, and the raw loop (C, in the shim) owns the queue while it runs. The raw
//! loop posts and spins on `fi_cq_read` with nothing around it: the floor our layer's
//! overhead is measured against.

use crate::UsageError;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use titus_fabric::bootstrap::{self, JobEnv};
use titus_fabric::mem::{self, MemOptions};
use titus_fabric::{
    Exposure, Fabric, FabricConfig, Loc, Piece, ProgressThread, SegmentId, SegmentSpec,
};
use titus_fabric_ofi::OfiFabric;

const SEG: SegmentId = SegmentId(0);
/// Remote words and buffers live in rank 1's segment; local ones in rank 0's.
const WORD: u64 = 0;
const BUF: u64 = 4096;
const MIB: u64 = 1 << 20;
const SEG_LEN: u64 = BUF + MIB;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// In-process: two ranks as threads.
    Mem,
    /// libfabric, under a launcher with 2 ranks (provider from --provider of `titus
    /// launch`, TITUS_PROVIDER or the default order).
    Ofi,
    /// Shared memory between the processes of one node, under a launcher with 2 ranks.
    Node,
}

#[derive(Debug, Args)]
pub struct FabricBenchArgs {
    /// Backend [default under a launcher: node, or ofi when TITUS_PROVIDER/FI_PROVIDER
    /// names a libfabric provider; mem otherwise].
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Timed operations per measurement (after as many warm-up ones, up to 200), 1 to
    /// 10,000,000.
    #[arg(long, default_value_t = 2000, allow_negative_numbers = true)]
    iters: u32,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Measure what a connection costs instead, under a launcher with any number of
    /// ranks ≥ 2: every rank opens with every other as a peer, connected on first
    /// contact; rank 0 then reads 8 bytes from each peer twice (first contact, then an
    /// established one) and reads its resident memory before and after; every other
    /// rank reads its own around rank 0's contacts. The simulator's presets take
    /// `first_contact_us`, `contact_us` and `connection_kib` from it.
    #[arg(long)]
    connections: bool,
    /// Measure against a busy target: rank 1 runs a spinning thread for each worker the
    /// runtime would start there by default, so its progress thread must win a core from
    /// them for every operation it serves (a victim whose workers all run tasks).
    #[arg(long)]
    busy_target: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    op: &'static str,
    bytes: u64,
    p50_us: f64,
    p99_us: f64,
    raw_p50_us: Option<f64>,
    raw_p99_us: Option<f64>,
    /// ours p50 / raw p50 − 1.
    overhead: Option<f64>,
    /// Ours at each of [`QUANTILES`] (µs): the tail beside p50 and p99.
    quantiles_us: Vec<f64>,
}

/// The quantiles each row reports in JSON.
pub const QUANTILES: [f64; 13] = [
    0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999,
];

#[derive(Debug, Serialize)]
struct Report {
    backend: &'static str,
    provider: String,
    iters: u32,
    connect_ms: f64,
    rows: Vec<Row>,
    read_bandwidth_gbs: f64,
    raw_read_bandwidth_gbs: Option<f64>,
    /// The backend's progress polls (libfabric's `shm`: no wait object): its software
    /// atomics and signals are served only when the target's progress turns.
    polled_progress: bool,
    /// The rank's workers drive its node between tasks
    /// ([`titus_fabric::Capabilities::workers_serve`]: the node backend, shm): what
    /// handling an input costs is a worker's time between tasks.
    workers_serve: bool,
    /// Spinning threads on rank 1 while rank 0 measured (`--busy-target`; 0 without).
    busy_target_threads: usize,
    /// Where the target's progress serves operations in software and blocks between them
    /// (libfabric with manual progress and a wait object: tcp, sockets), without
    /// `--busy-target`: rank 1's CPU time while rank 0 timed its small operations, over
    /// those operations (ours, raw and warm-up ones; a round trip's answer counted with
    /// it), µs.
    target_cpu_us_per_op: Option<f64>,
    /// The small operations rank 0 issued to rank 1.
    target_ops: u64,
}

/// What [`measure`] gives: rows, read bandwidth, raw read bandwidth, operations issued to
/// rank 1.
type Measured = (Vec<Row>, f64, Option<f64>, u64);

impl Report {
    fn new(
        backend: &'static str,
        fabric: &dyn Fabric,
        iters: u32,
        connect: Duration,
        (rows, bw, raw_bw, ops): Measured,
    ) -> Self {
        Self {
            backend,
            provider: fabric.caps().provider.clone(),
            iters,
            connect_ms: connect.as_secs_f64() * 1e3,
            rows,
            read_bandwidth_gbs: bw,
            raw_read_bandwidth_gbs: raw_bw,
            polled_progress: fabric.caps().polled_progress,
            workers_serve: fabric.caps().workers_serve(),
            busy_target_threads: 0,
            target_cpu_us_per_op: None,
            target_ops: ops,
        }
    }
}

fn config() -> FabricConfig {
    FabricConfig {
        segments: vec![SegmentSpec {
            name: "bench".into(),
            len: SEG_LEN,
            exposure: Exposure::All,
        }],
        peers: vec![0, 1],
        lazy: false,
        op_timeout: Duration::from_secs(10),
    }
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// p50, p99 and [`QUANTILES`] of `ns`, µs.
fn stats(mut ns: Vec<u64>) -> (f64, f64, Vec<f64>) {
    ns.sort_unstable();
    let qs = QUANTILES.iter().map(|&q| percentile(&ns, q)).collect();
    (percentile(&ns, 0.5), percentile(&ns, 0.99), qs)
}

/// A row of ours alone (no raw loop beside it) from its timings.
fn row(op: &'static str, bytes: u64, ns: Vec<u64>) -> Row {
    let (p50_us, p99_us, quantiles_us) = stats(ns);
    Row {
        op,
        bytes,
        p50_us,
        p99_us,
        raw_p50_us: None,
        raw_p99_us: None,
        overhead: None,
        quantiles_us,
    }
}

fn bench_err(e: impl std::fmt::Display) -> UsageError {
    UsageError(format!("fabric-bench: {e}"))
}

/// Times `iters` runs of `op` after `warmup` untimed ones.
fn time(
    warmup: u32,
    iters: u32,
    mut op: impl FnMut(u64) -> Result<(), UsageError>,
) -> Result<Vec<u64>, UsageError> {
    for i in 0..warmup {
        op(u64::from(i))?;
    }
    (0..iters)
        .map(|i| {
            let t = Instant::now();
            op(u64::from(i))?;
            Ok(t.elapsed().as_nanos() as u64)
        })
        .collect()
}

/// The raw libfabric loop: (kind, bytes, operations) to nanoseconds per operation.
type RawLoop<'a> = dyn Fn(i32, u64, usize) -> Result<Vec<u64>, UsageError> + 'a;

/// Rank 0's measurements. `raw` runs the shim's raw loop when the backend has one;
/// `between` runs after the small operations, before the bandwidth's 1 MiB reads (the
/// operations counted are the small ones).
fn measure(
    f: &dyn Fabric,
    iters: u32,
    raw: Option<&RawLoop<'_>>,
    between: &dyn Fn() -> Result<(), UsageError>,
) -> Result<Measured, UsageError> {
    let word = Loc::new(SEG, WORD);
    let local = Loc::new(SEG, BUF);
    let mut rows = Vec::new();
    // Operations issued to rank 1 (timed, warm-up and raw ones).
    let mut ops = 0u64;
    // Ours and raw alternate in blocks of 100, so drift on a noisy machine hits both alike.
    let mut pair = |op: &'static str,
                    bytes: u64,
                    kind: i32,
                    mut ours: Box<dyn FnMut(u64) -> Result<(), UsageError> + '_>|
     -> Result<(), UsageError> {
        // A negative kind: on rank 0's own memory, no raw loop and nothing served by rank 1.
        let raw = raw.filter(|_| kind >= 0);
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        let block = 100u32;
        let mut done = 0u32;
        let warmup = iters.min(200);
        while done < iters {
            let n = block.min(iters - done);
            mine.extend(time(if done == 0 { warmup } else { 0 }, n, |i| {
                ours(i + u64::from(done))
            })?);
            if let Some(r) = raw {
                theirs.extend(r(kind, bytes, n as usize)?);
            }
            done += n;
        }
        if kind >= 0 {
            ops += u64::from(warmup) + (mine.len() + theirs.len()) as u64;
        }
        let (p50, p99, quantiles_us) = stats(mine);
        let (raw_p50, raw_p99) = if raw.is_some() {
            let (a, b, _) = stats(theirs);
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        rows.push(Row {
            op,
            bytes,
            p50_us: p50,
            p99_us: p99,
            raw_p50_us: raw_p50,
            raw_p99_us: raw_p99,
            overhead: raw_p50.map(|r| p50 / r - 1.0),
            quantiles_us,
        });
        Ok(())
    };
    // The raw CAS loop swaps i -> i+1 from 0 in each block; ours swaps a word it owns alone.
    pair(
        "compare-swap",
        8,
        0,
        Box::new(|i| {
            f.compare_swap_sync(1, Loc::new(SEG, WORD + 8), i, i + 1)
                .map(drop)
                .map_err(bench_err)
        }),
    )?;
    pair(
        "fetch-add",
        8,
        1,
        Box::new(|_| f.fetch_add_sync(1, word, 1).map(drop).map_err(bench_err)),
    )?;
    // On this rank's own memory, through the fabric (the runtime's own atomics and reads
    // where CPU atomics are not coherent with the fabric's).
    pair(
        "compare-swap (self)",
        8,
        -1,
        Box::new(|i| {
            f.compare_swap_sync(0, Loc::new(SEG, WORD + 8), i, i + 1)
                .map(drop)
                .map_err(bench_err)
        }),
    )?;
    pair(
        "read (self)",
        8,
        -1,
        Box::new(|_| {
            f.read_sync(0, Loc::new(SEG, BUF + 8), local, 8)
                .map_err(bench_err)
        }),
    )?;
    for bytes in [8, 4096, 65_536] {
        pair(
            "read",
            bytes,
            2,
            Box::new(move |_| {
                f.read_sync(1, Loc::new(SEG, BUF), local, bytes)
                    .map_err(bench_err)
            }),
        )?;
    }
    for bytes in [8, 4096] {
        pair(
            "write",
            bytes,
            3,
            Box::new(move |_| {
                f.write_sync(1, Loc::new(SEG, BUF), local, bytes)
                    .map_err(bench_err)
            }),
        )?;
    }
    // A worker's poll between tasks (`Progress::poll`, nothing waiting): what each costs a
    // worker of a polled fabric (shm); nothing elsewhere.
    let polls = time(iters.min(200), iters, |_| {
        f.poll();
        Ok(())
    })?;
    rows.push(row("poll", 0, polls));
    // Write-then-signal, as a round trip: rank 1 answers each signal with one of its own.
    let mut sigs = Vec::new();
    let ping = time(iters.min(200), iters, |i| {
        let op = f
            .write_gather(1, Loc::new(SEG, BUF), &[Piece { local, len: 8 }], Some(i))
            .map_err(bench_err)?;
        let deadline = Instant::now() + f.op_timeout();
        loop {
            f.progress(Duration::from_millis(1), &mut sigs)
                .map_err(bench_err)?;
            if sigs.drain(..).any(|s| s.from == 1 && s.value == i) {
                break;
            }
            if Instant::now() > deadline {
                return Err(bench_err(format!("no answer to signal {i} from rank 1")));
            }
        }
        f.wait(op, f.op_timeout()).map(drop).map_err(bench_err)
    })?;
    ops += u64::from(iters.min(200)) + ping.len() as u64;
    rows.push(row("write-signal round trip", 8, ping));
    between()?;
    // Read bandwidth at 1 MiB, ours and raw alternating in blocks of 10 reads.
    let n = (iters / 10).clamp(20, 500);
    let (mut ours_ns, mut raw_ns) = (0u64, 0u64);
    let mut done = 0;
    while done < n {
        let k = 10.min(n - done);
        let t = Instant::now();
        for _ in 0..k {
            f.read_sync(1, Loc::new(SEG, BUF), local, MIB)
                .map_err(bench_err)?;
        }
        ours_ns += t.elapsed().as_nanos() as u64;
        if let Some(r) = raw {
            raw_ns += r(2, MIB, k as usize)?.iter().sum::<u64>();
        }
        done += k;
    }
    let gbs = |ns: u64| (u64::from(n) * MIB) as f64 / (ns as f64 / 1e9) / 1e9;
    let bw = gbs(ours_ns);
    let raw_bw = raw.map(|_| gbs(raw_ns));
    Ok((rows, bw, raw_bw, ops))
}

/// How often the target polls where its progress cannot block (shm): it serves every
/// operation of the benchmark, as a rank with work to share serves thieves.
const SERVING_NAP: Duration = Duration::from_micros(20);

/// Rank 1: answer every signal with a signal of the same value, until told to stop.
fn serve(f: Arc<dyn Fabric>) -> ProgressThread {
    f.set_progress_nap(SERVING_NAP);
    let g = f.clone();
    ProgressThread::spawn(f, move |s| {
        if s.from == 0 {
            let _ = g.write_gather(0, Loc::new(SEG, BUF), &[], Some(s.value));
        }
    })
}

/// Threads spinning on rank 1 (`--busy-target`) until dropped: as many as the workers
/// the runtime would start there by default.
struct Spinners {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    /// The threads `--busy-target` runs on rank 1 of a 2-rank job on one node.
    fn count() -> usize {
        // The runtime's rule (`titus_runtime::cores::workers_for`): the cores this
        // process may use over the ranks sharing them.
        let local = bootstrap::local_size_from_vars(|k| std::env::var(k).ok())
            .ok()
            .flatten()
            .unwrap_or(2);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / local.max(1) as usize).max(1)
    }

    fn start(on: bool) -> Spinners {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..if on { Self::count() } else { 0 })
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for _ in 0..1_000 {
                            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) | 1);
                        }
                    }
                })
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// This process's CPU time so far, ns: every thread's (`/proc/self/task/*/schedstat`);
/// None where it cannot be read.
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        // A thread that ended between the listing and the read counts for nothing.
        if let Ok(s) = std::fs::read_to_string(t.ok()?.path().join("schedstat")) {
            total += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(total)
}

/// Where rank 1 leaves its CPU time for rank 0 to read (a word nobody else touches).
const CPU_WORD: u64 = WORD + 40;

/// What `--connections` prints.
#[derive(Debug, Serialize)]
struct ConnectionReport {
    backend: &'static str,
    provider: String,
    ranks: u32,
    /// Opening the fabric on rank 0 (nothing connected yet where the backend connects
    /// lazily; the node backend maps every peer here).
    open_ms: f64,
    /// Rank 0's first 8-byte read from each peer, median and slowest (µs).
    first_contact_us: f64,
    first_contact_max_us: f64,
    /// The second read from each peer, median (µs).
    contact_us: f64,
    /// Rank 0's resident memory grown per peer contacted (KiB).
    connection_kib: f64,
    /// The contacted ranks' resident memory grown, mean (KiB; one connection each).
    peer_connection_kib: f64,
}

/// Resident memory of this process, KiB (`VmRSS` of /proc/self/status).
fn resident_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// `--connections`: the price of a connection on this backend (see the flag).
fn connections(args: &FabricBenchArgs, env: &JobEnv, backend: Backend) -> Result<(), UsageError> {
    if !env.launched() || env.size < 2 || backend == Backend::Mem {
        return Err(UsageError(
            "fabric-bench --connections runs under a launcher with 2 or more ranks: titus launch -n 8 [--provider P] -- titus fabric-bench --connections".into(),
        ));
    }
    let cfg = FabricConfig {
        segments: vec![SegmentSpec {
            name: "bench".into(),
            len: BUF + 4096,
            exposure: Exposure::All,
        }],
        peers: (0..env.size).collect(),
        lazy: true,
        op_timeout: Duration::from_secs(30),
    };
    let rv = bootstrap::join(env).map_err(bench_err)?;
    let t = Instant::now();
    let (fabric, mut exchange): (Arc<dyn Fabric>, Box<dyn titus_fabric::bootstrap::Exchange>) =
        match backend {
            Backend::Node => {
                let (f, x) =
                    titus_fabric_node::open(env.rank, env.size, rv, cfg).map_err(bench_err)?;
                (Arc::new(f), x.ok_or_else(|| bench_err("no rendezvous"))?)
            }
            _ => {
                if !titus_fabric_ofi::available() {
                    return Err(bench_err(titus_fabric_ofi::providers().unwrap_err()));
                }
                let f = OfiFabric::open(env.rank, env.size, rv, cfg, None).map_err(bench_err)?;
                let x = f
                    .take_rendezvous()
                    .ok_or_else(|| bench_err("no rendezvous"))?;
                (Arc::new(f), x)
            }
        };
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let server = (env.rank != 0).then(|| serve(fabric.clone()));
    let before = resident_kib();
    exchange.barrier().map_err(bench_err)?;
    let mut firsts = Vec::new();
    let mut seconds = Vec::new();
    let mut grown = 0.0;
    if env.rank == 0 {
        let local = Loc::new(SEG, BUF);
        for p in 1..env.size {
            let t = Instant::now();
            fabric
                .read_sync(p, Loc::new(SEG, 0), local, 8)
                .map_err(bench_err)?;
            firsts.push(t.elapsed().as_nanos() as u64);
            let t = Instant::now();
            fabric
                .read_sync(p, Loc::new(SEG, 0), local, 8)
                .map_err(bench_err)?;
            seconds.push(t.elapsed().as_nanos() as u64);
        }
        grown = (resident_kib() - before) / f64::from(env.size - 1);
    }
    exchange.barrier().map_err(bench_err)?;
    let mine = if env.rank == 0 {
        0.0
    } else {
        resident_kib() - before
    };
    let all = exchange
        .all_gather(&mine.to_le_bytes())
        .map_err(bench_err)?;
    if let Some(s) = server {
        s.stop();
    }
    if env.rank != 0 {
        return Ok(());
    }
    let peers: Vec<f64> = all[1..]
        .iter()
        .filter_map(|b| Some(f64::from_le_bytes(b.get(..8)?.try_into().ok()?)))
        .collect();
    let (first, _, _) = stats(firsts.clone());
    let report = ConnectionReport {
        backend: if backend == Backend::Node {
            "node"
        } else {
            "ofi"
        },
        provider: fabric.caps().provider.clone(),
        ranks: env.size,
        open_ms,
        first_contact_us: first,
        first_contact_max_us: firsts.iter().max().copied().unwrap_or(0) as f64 / 1e3,
        contact_us: stats(seconds).0,
        connection_kib: grown,
        peer_connection_kib: peers.iter().sum::<f64>() / peers.len().max(1) as f64,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report).map_err(bench_err)?);
    } else {
        println!(
            "fabric-bench --connections: {} ({}), {} ranks: open {:.1} ms; first contact {:.1} µs median, {:.1} µs slowest; then {:.1} µs; {:.1} KiB per connection on rank 0, {:.1} KiB on each peer",
            report.provider,
            report.backend,
            report.ranks,
            report.open_ms,
            report.first_contact_us,
            report.first_contact_max_us,
            report.contact_us,
            report.connection_kib,
            report.peer_connection_kib
        );
    }
    Ok(())
}

/// The most timed operations per measurement: each row keeps one 8-byte time per
/// operation (80 MB a row at this bound), and ten million operations of a few
/// microseconds already take a minute a row.
const ITERS_MAX: u32 = 10_000_000;

pub fn run(args: FabricBenchArgs) -> Result<(), UsageError> {
    if !(1..=ITERS_MAX).contains(&args.iters) {
        return Err(UsageError(format!(
            "--iters {}: expected 1..={ITERS_MAX}",
            args.iters
        )));
    }
    let env = JobEnv::from_env().map_err(bench_err)?;
    let forced = titus_fabric::backend::forced_transport(None);
    let backend = args.backend.unwrap_or(match forced.as_deref() {
        _ if !env.launched() => Backend::Mem,
        None | Some("node") => Backend::Node,
        Some(_) => Backend::Ofi,
    });
    if args.connections {
        return connections(&args, &env, backend);
    }
    if backend != Backend::Mem && env.launched() && env.size != 2 {
        return Err(UsageError(format!(
            "fabric-bench measures between 2 ranks (this job has {}): titus launch -n 2 [--provider P] -- titus fabric-bench",
            env.size
        )));
    }
    let mut report = match backend {
        Backend::Mem => {
            if env.launched() {
                return Err(UsageError(
                    "--backend mem runs both ranks in one process: start it without a launcher"
                        .into(),
                ));
            }
            let fabrics =
                mem::world(vec![config(), config()], MemOptions::default()).map_err(bench_err)?;
            let target: Arc<dyn Fabric> = fabrics[1].clone();
            let server = serve(target);
            let spinners = Spinners::start(args.busy_target);
            let measured = measure(&*fabrics[0], args.iters, None, &|| Ok(()))?;
            drop(spinners);
            server.stop();
            Report::new("mem", &*fabrics[0], args.iters, Duration::ZERO, measured)
        }
        Backend::Node => {
            let rv = bootstrap::join(&env).map_err(bench_err)?;
            let (fabric, exchange) =
                titus_fabric_node::open(env.rank, env.size, rv, config()).map_err(bench_err)?;
            let fabric = Arc::new(fabric);
            let mut exchange = exchange.ok_or_else(|| bench_err("no rendezvous"))?;
            if env.rank == 1 {
                let server = serve(fabric.clone());
                let spinners = Spinners::start(args.busy_target);
                exchange.barrier().map_err(bench_err)?; // rank 0 is done measuring
                drop(spinners);
                server.stop();
                return Ok(());
            }
            // Raw: the same operations as plain CPU work on rank 1's mapped segment.
            let target = fabric.peer_segment(1, SEG).map_err(bench_err)?;
            // Raw copies go word by word as ours do (the mapping is only ever touched
            // through atomics), between rank 1's segment and a private one.
            let scratch = titus_fabric::Segment::new("raw", MIB);
            let next = std::cell::Cell::new(0u64);
            let raw = |kind: i32, bytes: u64, n: usize| -> Result<Vec<u64>, UsageError> {
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    match kind {
                        0 => {
                            let prev = target
                                .compare_exchange(WORD + 16, next.get(), next.get() + 1)
                                .map_err(bench_err)?;
                            next.set(prev + 1);
                        }
                        1 => drop(target.fetch_add(WORD + 24, 1).map_err(bench_err)?),
                        2 => scratch
                            .copy_from(0, target, BUF, bytes)
                            .map_err(bench_err)?,
                        _ => target
                            .copy_from(BUF, &scratch, 0, bytes)
                            .map_err(bench_err)?,
                    }
                    out.push(t.elapsed().as_nanos() as u64);
                }
                Ok(out)
            };
            let measured = measure(&*fabric, args.iters, Some(&raw), &|| Ok(()))?;
            exchange.barrier().map_err(bench_err)?;
            Report::new(
                "node",
                &*fabric,
                args.iters,
                fabric.connect_time(),
                measured,
            )
        }
        Backend::Ofi => {
            if !titus_fabric_ofi::available() {
                // Say so before the rendezvous, which would otherwise wait for the others.
                return Err(bench_err(titus_fabric_ofi::providers().unwrap_err()));
            }
            let rv = bootstrap::join(&env).map_err(bench_err)?;
            let fabric = Arc::new(
                OfiFabric::open(env.rank, env.size, rv, config(), None).map_err(bench_err)?,
            );
            let barrier = |f: &OfiFabric| {
                f.with_rendezvous(|rv| rv.map_or(Ok(()), |rv| rv.barrier()))
                    .map_err(bench_err)
            };
            // Rank 1's CPU per operation served, where its progress serves them.
            let cpu_cost = fabric.caps().target_progress
                && !fabric.caps().polled_progress
                && !args.busy_target;
            if env.rank == 1 {
                let server = serve(fabric.clone());
                let spinners = Spinners::start(args.busy_target);
                let cpu0 = process_cpu_ns();
                if cpu_cost {
                    barrier(&fabric)?; // rank 0's small operations are done
                    let spent = cpu0
                        .zip(process_cpu_ns())
                        .map_or(u64::MAX, |(a, b)| b.saturating_sub(a));
                    fabric
                        .segment(SEG)
                        .and_then(|s| s.store(CPU_WORD, spent))
                        .map_err(bench_err)?;
                }
                barrier(&fabric)?; // rank 0 is done measuring (and the word is written)
                if cpu_cost {
                    barrier(&fabric)?; // rank 0 has read it
                }
                drop(spinners);
                server.stop();
                return Ok(());
            }
            let raw = |kind: i32, bytes: u64, n: usize| {
                fabric
                    .raw_latency(
                        kind,
                        1,
                        Loc::new(SEG, if kind < 2 { WORD } else { BUF }),
                        SEG,
                        bytes,
                        n,
                    )
                    .map_err(bench_err)
            };
            let between = || if cpu_cost { barrier(&fabric) } else { Ok(()) };
            let measured = measure(&*fabric, args.iters, Some(&raw), &between)?;
            barrier(&fabric)?;
            let ops = measured.3;
            let mut report =
                Report::new("ofi", &*fabric, args.iters, fabric.connect_time(), measured);
            if cpu_cost {
                let local = Loc::new(SEG, BUF);
                fabric
                    .read_sync(1, Loc::new(SEG, CPU_WORD), local, 8)
                    .map_err(bench_err)?;
                let spent = fabric
                    .segment(SEG)
                    .and_then(|s| s.load(BUF))
                    .map_err(bench_err)?;
                barrier(&fabric)?; // read: rank 1 may go
                // u64::MAX: rank 1 could not read its CPU time.
                report.target_cpu_us_per_op =
                    (spent != u64::MAX && ops > 0).then(|| spent as f64 / 1e3 / ops as f64);
            }
            report
        }
    };
    if args.busy_target {
        report.busy_target_threads = Spinners::count();
    }
    if args.json {
        println!("{}", serde_json::to_string(&report).map_err(bench_err)?);
        return Ok(());
    }
    println!(
        "fabric-bench: {} ({}), 2 ranks, {} timed operations each, connect {:.1} ms{}",
        report.provider,
        report.backend,
        report.iters,
        report.connect_ms,
        if args.busy_target {
            format!(
                ", rank 1 busy ({} spinning threads)",
                report.busy_target_threads
            )
        } else {
            String::new()
        }
    );
    println!(
        "{:<24} {:>7} {:>9} {:>9} {:>10} {:>10} {:>9}",
        "op", "bytes", "p50_us", "p99_us", "raw_p50", "raw_p99", "overhead"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for r in &report.rows {
        println!(
            "{:<24} {:>7} {:>9.2} {:>9.2} {:>10} {:>10} {:>9}",
            r.op,
            r.bytes,
            r.p50_us,
            r.p99_us,
            opt(r.raw_p50_us),
            opt(r.raw_p99_us),
            r.overhead
                .map_or("-".to_string(), |o| format!("{:+.1}%", o * 100.0))
        );
    }
    println!(
        "read bandwidth at 1 MiB: {:.2} GB/s (raw {})",
        report.read_bandwidth_gbs,
        report
            .raw_read_bandwidth_gbs
            .map_or("-".to_string(), |b| format!("{b:.2} GB/s"))
    );
    if let Some(c) = report.target_cpu_us_per_op {
        println!(
            "rank 1's CPU per operation it served: {c:.2} µs ({} operations)",
            report.target_ops
        );
    }
    Ok(())
}
