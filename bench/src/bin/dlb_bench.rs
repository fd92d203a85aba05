//! `dlb-bench`: DLB_Bench, the synthetic dynamic-load-balancing benchmark.
//!
//! Each rank owns tasks of a workload (`titus_workload`): real work over payloads
//! (`titus_workload::task`), calibrated on this machine to the drawn costs. Each epoch
//! (`--epochs`, one by default; the cost pattern moves by `--drift` from one to the next,
//! the tasks and their owners stay) runs under the chosen balancer; then every result of
//! it is recomputed sequentially and compared, and a wrong, missing or duplicated result
//! fails the run naming the epoch and the task.
//!
//! In process: `dlb-bench --ranks 4 --profile quick`. Under a launcher (`titus launch -n 4
//! -- dlb-bench`, srun, mpirun): the launcher sets the ranks; rank 0 prints.
//!
//! Several balancers (`--balancer none,smallworld,master` or `all`), protocols and sweep
//! points (`--sweep ranks=2,4,8`) run one after the other in the same processes, each
//! with a fresh runtime, and are reported side by side; `--plot DIR` draws them.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use titus_fabric::bootstrap::JobEnv;
use titus_fabric::mem::MemOptions;
use titus_plot::plots;
use titus_runtime::{Backend, Runtime, RuntimeConfig, TaskIn};
use titus_workload::dlb::{
    self, BenchArgs, Plan, RankFigures, Report, Run, check_args, decode_f64s, encode_f64s, fail,
    plan, print, print_summary, runs,
};
use titus_workload::task;

/// DLB_Bench: synthetic dynamic load balancing runs.
#[derive(Debug, clap::Parser)]
#[command(name = "dlb-bench", version)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
    /// Write each rank's timeline to DIR (`titus trace DIR` merges them); as
    /// `TITUS_TRACE=DIR`.
    #[arg(long, value_name = "DIR")]
    trace: Option<std::path::PathBuf>,
}

/// Tasks run in this process (the progress bar's count).
static TASKS_RUN: AtomicU64 = AtomicU64::new(0);

/// One rank's run, every epoch of it: returns the reports (one per epoch) on rank 0.
fn rank_main(rt: &Runtime, run: &Run, plan: &Plan) -> Result<Option<Vec<Report>>, String> {
    let rank = rt.rank();
    let base = titus_workload::generate(&plan.spec).map_err(|e| e.to_string())?;
    // Every rank has drawn its workload (megabytes of payload for some profiles) before
    // rank 0 calibrates: a rank still drawing would share its core and slow the measure.
    if run.args.calibration.is_none() {
        rt.all_gather(&[]).map_err(|e| e.to_string())?;
    }
    // Every rank uses rank 0's calibration, so a task is the same work wherever it runs
    // (the others send nothing and measure nothing).
    let mine_cal = match run.args.calibration {
        Some(c) => vec![c],
        None if rank == 0 => vec![calibration(plan.payload)],
        None => Vec::new(),
    };
    let per_round = rt
        .all_gather(&encode_f64s(&mine_cal))
        .map_err(|e| e.to_string())?
        .first()
        .and_then(|b| decode_f64s(b).first().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or("rank 0 sent no calibration")?;
    let mut reports = Vec::new();
    // Who owns which task: the workload's placement, changed only by --repartition.
    let mut owned = base;
    for epoch in 0..plan.epochs {
        let all = titus_workload::epoch_tasks(&owned, epoch, plan.drift);
        if let Some(r) = epoch_main(rt, run, plan, epoch, &all, per_round)? {
            reports.push(r);
        }
        if let Some(k) = run.args.repartition
            && (epoch + 1) % k == 0
            && epoch + 1 < plan.epochs
        {
            owned = repartition(rt, owned, run.args.repartition_plan.plan())?;
        }
    }
    Ok((rank == 0).then_some(reports))
}

/// Applies the runtime's repartition plan, as a solver would hand cells to its
/// neighbours: every rank learns every move (key = the task's global number, in string
/// order within each rank) and rebuilds the same ownership
/// ([`titus_workload::apply_plans`], as `titus sim --repartition` does).
fn repartition(
    rt: &Runtime,
    mut owned: Vec<Vec<titus_workload::TaskSpec>>,
    how: titus_workload::RepartitionPlan,
) -> Result<Vec<Vec<titus_workload::TaskSpec>>, String> {
    let rank = rt.rank() as usize;
    let keys: Vec<u64> = owned[rank].iter().map(|t| t.global).collect();
    let moves = rt.repartition_plan(&keys).map_err(|e| e.to_string())?;
    let blob: Vec<u8> = moves
        .iter()
        .flat_map(|m| m.key.to_le_bytes().into_iter().chain(m.to.to_le_bytes()))
        .collect();
    let all = rt.all_gather(&blob).map_err(|e| e.to_string())?;
    let mut plans = Vec::with_capacity(all.len());
    for (from, b) in all.iter().enumerate() {
        if b.len() % 12 != 0 {
            return Err(format!("rank {from} sent a malformed repartition plan"));
        }
        plans.push(
            b.chunks_exact(12)
                .map(|m| titus_workload::Move {
                    key: u64::from_le_bytes(m[..8].try_into().expect("8 bytes")),
                    to: u32::from_le_bytes(m[8..].try_into().expect("4 bytes")),
                })
                .collect(),
        );
    }
    titus_workload::apply_plans(&mut owned, &plans, how).map_err(|e| e.to_string())?;
    Ok(owned)
}

/// One epoch on one rank: its tasks (`all`, this epoch's workload) run and verified;
/// returns the epoch's report on rank 0.
fn epoch_main(
    rt: &Runtime,
    run: &Run,
    plan: &Plan,
    epoch: u32,
    all: &[Vec<titus_workload::TaskSpec>],
    per_round: f64,
) -> Result<Option<Report>, String> {
    let rank = rt.rank();
    let mine = &all[rank as usize];
    let tasks: Vec<(u16, Vec<u8>)> = mine
        .iter()
        .map(|t| (0, dlb::task_payload(plan, t, per_round)))
        .collect();
    // A task's key is its number in the workload: it follows the task if --repartition
    // hands it to another rank.
    let keyed: Vec<TaskIn> = mine
        .iter()
        .zip(&tasks)
        .map(|(t, (kind, payload))| {
            let (cost_hint_ns, priority) =
                dlb::hint_and_priority(&run.args, t, plan.spec.task_time);
            TaskIn {
                key: t.global,
                kind: *kind,
                payload: payload.clone(),
                priority,
                cost_hint_ns,
            }
        })
        .collect();
    let out = rt
        .run_epoch_keyed(keyed)
        .map_err(|e| format!("rank {rank}, epoch {epoch}: {e}"))?;
    // Every rank's epoch ends before any rank verifies: a rank that recomputed its tasks
    // while others still forwarded the end would hold a core they need where ranks share
    // cores (their sessions then ended milliseconds later, and the report's efficiency
    // counted the harness's work).
    rt.all_gather(&[]).map_err(|e| e.to_string())?;
    // Verification: every result against a sequential recomputation (not timed).
    let mut bad = None;
    if out.results.len() != tasks.len() {
        bad = Some(format!(
            "rank {rank}, epoch {epoch}: {} results for {} tasks",
            out.results.len(),
            tasks.len()
        ));
    }
    for (i, (r, (_, p))) in out.results.iter().zip(&tasks).enumerate() {
        if bad.is_none() && *r != task::run(p) {
            bad = Some(format!(
                "rank {rank}, epoch {epoch}: task {i} (global {}) has a wrong result",
                mine[i].global
            ));
        }
    }
    if let Some(b) = &bad {
        eprintln!("dlb-bench: verification failed: {b}");
    }
    let st = &out.stats;
    // The steal timeline (only drawn with --plot) travels apart from the figures.
    let plot = run.args.plot.is_some();
    let figs = RankFigures::of(st, dlb::digest(&out.results), bad.is_none(), plot);
    let gathered = rt.all_gather(&figs.encode()).map_err(|e| e.to_string())?;
    let c = rt.connections();
    let mine = dlb::RankConnections {
        contacted: c.contacted,
        opened: c.opened,
        connect_s: c.connect.as_secs_f64(),
        lazy: c.lazy,
        bytes_per_connection: c.bytes_per_connection as f64,
    };
    let links = rt.all_gather(&mine.encode()).map_err(|e| e.to_string())?;
    let log: Vec<f64> = figs
        .steal_log
        .iter()
        .flat_map(|&(at_s, victim, tasks)| [at_s, f64::from(victim), f64::from(tasks)])
        .collect();
    let logs = rt
        .all_gather(&encode_f64s(&log))
        .map_err(|e| e.to_string())?;
    // --resources: what each resource completed on each rank.
    let counts = if run.args.resources.is_some() {
        let mine: Vec<(String, u64)> = st
            .resources
            .iter()
            .map(|c| (c.name.clone(), c.completed))
            .collect();
        let blob = serde_json::to_vec(&mine).map_err(|e| e.to_string())?;
        Some(rt.all_gather(&blob).map_err(|e| e.to_string())?)
    } else {
        None
    };
    if rank != 0 {
        return Ok(None);
    }
    let size = rt.size();
    let links = dlb::connection_figures(
        &links
            .iter()
            .map(|b| dlb::RankConnections::decode(b, size))
            .collect::<Vec<_>>(),
    );
    let figs: Vec<RankFigures> = gathered
        .iter()
        .zip(&logs)
        .zip(links)
        .map(|((g, l), links)| RankFigures {
            steal_log: decode_f64s(l)
                .chunks_exact(3)
                .map(|e| (e[0], e[1] as u32, e[2] as u32))
                .collect(),
            links,
            ..RankFigures::decode(g)
        })
        .collect();
    let mut report = dlb::report(run, plan, epoch, all, &figs, per_round);
    for (r, blob) in counts.iter().flatten().enumerate() {
        let theirs: Vec<(String, u64)> =
            serde_json::from_slice(blob).map_err(|e| format!("rank {r}'s resource counts: {e}"))?;
        for (name, n) in theirs {
            *report.resource_tasks.entry(name).or_default() += n;
        }
    }
    if let (Some(_), (Some(described), _)) = (
        &counts,
        dlb::resources(&run.args, report.ranks).unwrap_or_else(|e| e.exit()),
    ) {
        // Nominal work over the heterogeneous ideal's capacity, as `titus sim` counts it.
        let workers = f64::from(report.ranks) * report.workers as f64;
        let capacity = dlb::hetero_capacity(report.ranks, report.workers, &described);
        report.hetero_efficiency = Some(report.nominal_efficiency * workers / capacity);
    }
    if counts.is_some() {
        report.accel_tasks = Some(
            report
                .resource_tasks
                .iter()
                .filter(|(name, _)| name.as_str() != "cpu")
                .map(|(_, n)| n)
                .sum(),
        );
    }
    Ok(Some(report))
}

/// The runtime configuration of `run` at `ranks` ranks: DLB_Bench's core and overlay
/// configuration ([`dlb::config`], the simulator's too) with the run's workers.
/// The runtime's configuration of `run`, its timeline written to `trace` (`--trace`).
fn config(run: &Run, ranks: u32, plan: &Plan, trace: Option<&std::path::Path>) -> RuntimeConfig {
    let c = dlb::config(run, ranks, plan).unwrap_or_else(|e| e.exit());
    RuntimeConfig {
        trace: trace.map(std::path::Path::to_path_buf),
        workers: run.args.workers,
        // (Checked with the other flags before any run.)
        worker_grain: dlb::worker_grain(&run.args).unwrap_or(None),
        core: c.core,
        overlay: c.overlay,
        ..RuntimeConfig::default()
    }
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

/// Whether the command line names `--ranks` (clap's matches know; the parsed flags hold
/// the default 4 either way). `args` parsed this command line already, so parsing it
/// again cannot fail.
fn ranks_given() -> bool {
    use clap::CommandFactory as _;
    Cli::command()
        .try_get_matches()
        .ok()
        .and_then(|m| m.value_source("ranks"))
        == Some(clap::parser::ValueSource::CommandLine)
}

fn main() {
    titus_workload::quiet_broken_pipe();
    let cli = dlb::parse_args::<Cli>();
    let args = cli.bench;
    titus_workload::init_logging().unwrap_or_else(|e| fail(2, &e.to_string()));
    check_args(&args).unwrap_or_else(|e| e.exit());
    let runs = runs(&args).unwrap_or_else(|e| e.exit());
    // Under a launcher (any that JobEnv knows), this process is one rank of the job.
    let env = Some(JobEnv::from_env().unwrap_or_else(|e| fail(2, &e.to_string())))
        .filter(JobEnv::launched);
    // The launcher sets the job's size: a `--ranks` that says otherwise was meant for an
    // in-process run, and ignoring it would report a job of another size than asked.
    if let Some(env) = &env
        && ranks_given()
        && args.ranks != env.size
    {
        fail(
            2,
            &format!(
                "--ranks {}, but the launcher started {} rank{} (drop --ranks under a launcher)",
                args.ranks,
                env.size,
                if env.size == 1 { "" } else { "s" }
            ),
        );
    }
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
        check_args(&run.args).unwrap_or_else(|e| e.exit());
        let report = match &env {
            Some(env) => {
                let plan = plan(&run.args, env.size).unwrap_or_else(|e| e.exit());
                dlb::check_memory(&plan, Some(env.rank)).unwrap_or_else(|e| e.exit());
                // Rank 0 calibrates in `rank_main`, once every rank has started and waits
                // in its first all-gather: while the others were still starting up (the
                // launcher starts them together), they shared its core and the measure
                // read up to 40% slow, so the tasks ran short and nominal efficiency
                // read above 1.
                let job = u16::try_from(k)
                    .map_err(|_| "too many runs for one job".to_string())
                    .and_then(|k| env.session(k).map_err(|e| e.to_string()))
                    .unwrap_or_else(|e| fail(2, &e));
                let rt = Runtime::from_job(
                    config(run, env.size, &plan, cli.trace.as_deref()),
                    Backend::default_fabric(None),
                    job,
                )
                .unwrap_or_else(|e| fail(if e.is_usage() { 2 } else { 1 }, &e.to_string()));
                rt.register(0, counted_task);
                add_resources(&rt, run, env.size);
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
                // Refused before the plan, which holds a count per rank.
                let ranks_max = titus_runtime::LOCAL_THREADS_MAX / 2;
                if u64::from(ranks) > ranks_max {
                    fail(
                        2,
                        &format!(
                            "--ranks {ranks}: at most {ranks_max} in one process (each rank a \
                             worker and a progress thread, {} threads in all); ranks as \
                             processes: titus launch; more: titus sim",
                            titus_runtime::LOCAL_THREADS_MAX
                        ),
                    );
                }
                // Each emulated accelerator is a thread of this process too.
                let accels = titus_workload::dlb::resources(&run.args, ranks)
                    .unwrap_or_else(|e| e.exit())
                    .0
                    .map_or(0, |r| r.iter().map(|l| l.len() as u64).sum::<u64>());
                // Each rank's workers and its progress thread, and every accelerator.
                let workers = run.args.workers as u64;
                let threads = u64::from(ranks) * (workers + 1) + accels;
                if threads > titus_runtime::LOCAL_THREADS_MAX {
                    fail(
                        2,
                        &format!(
                            "--ranks {ranks} × (--workers {workers} + a progress thread) \
                             and {accels} emulated accelerators (a thread each): {threads} \
                             threads, more than {} in one process",
                            titus_runtime::LOCAL_THREADS_MAX
                        ),
                    );
                }
                let plan = plan(&run.args, ranks).unwrap_or_else(|e| e.exit());
                dlb::check_memory(&plan, None).unwrap_or_else(|e| e.exit());
                if run.args.calibration.is_none() {
                    calibration(plan.payload);
                }
                let rts = Runtime::local(
                    ranks,
                    config(run, ranks, &plan, cli.trace.as_deref()),
                    MemOptions::default(),
                )
                .unwrap_or_else(|e| fail(2, &e.to_string()));
                let _bar = Progress::start(
                    !args.no_progress && !args.json && !args.csv,
                    run.label(),
                    Some(plan.spec.tasks),
                );
                let results: Vec<Result<Option<Vec<Report>>, String>> = std::thread::scope(|s| {
                    // Each rank's thread owns its runtime: one that fails drops it on
                    // return, and the others' next all-gather fails naming it.
                    let hs: Vec<_> = rts
                        .into_iter()
                        .map(|rt| {
                            rt.register(0, counted_task);
                            add_resources(&rt, run, ranks);
                            let plan = &plan;
                            s.spawn(move || rank_main(&rt, run, plan))
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
        if let Some(mut run_reports) = report {
            for r in &mut run_reports {
                r.speedup = dlb::speedup(&reports, r);
            }
            print(&run_reports, &args, reports.is_empty());
            reports.extend(run_reports.into_iter().map(|r| (run.label(), r)));
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
            Err(e) => fail(1, &e.to_string()),
        }
    }
    if let Some((l, _)) = reports.iter().find(|(_, r)| !r.verified) {
        fail(
            1,
            &format!("verification failed in run {l} (see the messages above)"),
        );
    }
}

/// `--resources`: this rank's accelerators, each emulated by a thread running the CPU
/// variant (`Runtime::add_emulated`: documented emulation); bad input exits 2.
fn add_resources(rt: &Runtime, run: &Run, ranks: u32) {
    let (described, dispatch) =
        titus_workload::dlb::resources(&run.args, ranks).unwrap_or_else(|e| e.exit());
    let Some(per_rank) = described else { return };
    for spec in per_rank.get(rt.rank() as usize).into_iter().flatten() {
        let speed = spec.speed(0).unwrap_or(1.0);
        rt.add_emulated(&spec.name, spec.capacity, speed, dispatch)
            .unwrap_or_else(|e| fail(if e.is_usage() { 2 } else { 1 }, &e.to_string()));
    }
}
