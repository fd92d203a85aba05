//! `titus sim --calibrate PROVIDER`: measures this machine for the simulator and writes a
//! preset file (`--preset-file`): the fabric's operation costs (`titus fabric-bench
//! --json` over PROVIDER between two ranks) and the node's cores (the `node` object of
//! [`titus_sim::model::Cpu`]):
//!
//! - `cores`: the cores this process may use;
//! - `busy_slowdown`: DLB_Bench's task kernel on every core at once against one core
//!   alone (best of several ~20 ms tasks each way);
//! - `wake_us`: a condition variable's notification to the sleeping thread running
//!   (median of 2,000 ping-pongs);
//! - `byte_ns`: the core's CPU per byte through a rank's own segments: the shared set's
//!   1,024 slots of 655-byte payloads encoded into a fabric segment and decoded back, as
//!   an owner publishes and a thief or a take-back decodes them, eight such task sets in
//!   turn, allocated among other allocations, in no order (median of 31 rounds);
//! - `core_speeds`, `speed_windows`: not a term of the model but the machine's own drift,
//!   against which a predicted time is judged: the task kernel on every core at once, a
//!   thread pinned to each, in 40 windows of 50 ms; each core's median window and the
//!   slowest and fastest window of any, relative to the median of all;
//! - `task_overhead_us`, `balanced_take_us` and `foreign_task_us`: a worker's time per
//!   take from the node, outside its task (taking it, reporting its result, serving the
//!   node between tasks), what a take adds while the rank balances (the protocol it
//!   drives), and what a task run for another rank adds (its result sent home), from
//!   DLB_Bench's `between_tasks_us` on two ranks, 20,000 tasks of 0.1 ms (a grain of one)
//!   on rank 0 (median of 3 runs each way): the owner's without balancing; and the
//!   owner's and the thief's in the balanced run, less what the simulator with the rest
//!   of the preset already charges there when it simulates that run (above all the
//!   node's byte work where workers serve the node); `between_real_us` keeps the two
//!   real gaps;
//! - `grain_task_us`: what each task of a take beyond its first adds to it, from a run of
//!   20,000 tasks of 5 µs on rank 0 without balancing (grains of 5): its gaps between
//!   tasks less the takes' `task_overhead_us`, over the tasks beyond a take's first
//!   (its `grains` say how many takes; median of 3 runs);
//! - `progress_share`: one rank per core over PROVIDER (`runtime-bench`, one worker
//!   each, every core busy; the median of 3 runs) runs its tasks slower than calibrated
//!   by the shared slowdown times the time-sharing of C workers and C ranks' progress
//!   threads over C cores: `measured / calibrated = busy_slowdown × (C + C s) / C` gives
//!   s, each rank's progress and provider threads' share of a core;
//! - `op_serve_us` and `op_issue_us`: the progress thread's CPU per operation served and
//!   per operation issued, from DLB_Bench's `progress_cpu_s` and `ops` on two ranks,
//!   every task on rank 0, without balancing and with it (median of 3 runs each);
//! - `busy_op_us` and `own_op_us`, from the same balanced runs' `op_latency`: what the
//!   thief's reads, writes and atomics on the busy owner took beyond the fabric's model of
//!   them (its idle figures above), count-weighted; 0 on a polled fabric, whose model
//!   serves a busy target's atomics between its tasks instead. And the two ranks'
//!   operations on their own memory, issue to completion (count-weighted mean).
//!
//! Nothing is tuned by hand: rerun it where the numbers should come from.

use crate::UsageError;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};
use titus_workload::task;

/// Runs the calibration for `provider` and writes the preset to `out` (stdout: `None`).
pub fn run(provider: &str, out: Option<&Path>) -> Result<u8, UsageError> {
    let allowed = ["node", "shm", "tcp;ofi_rxm", "sockets", "verbs;ofi_rxm"];
    if !allowed.contains(&provider) {
        return Err(UsageError(format!(
            "--calibrate '{provider}': expected one of {}",
            allowed.join(", ")
        )));
    }
    if let Some(p) = out {
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(UsageError(format!(
                "--out '{}': no directory '{}'",
                p.display(),
                dir.display()
            )));
        }
    }
    let titus = std::env::current_exe()
        .map_err(|e| UsageError(format!("cannot find this program: {e}")))?;
    let bench = titus.with_file_name("runtime-bench");
    if !bench.is_file() {
        return Err(UsageError(format!(
            "--calibrate needs runtime-bench next to titus ({}): cargo build --release --workspace",
            bench.display()
        )));
    }
    let dlb = titus.with_file_name("dlb-bench");
    if !dlb.is_file() {
        return Err(UsageError(format!(
            "--calibrate needs dlb-bench next to titus ({}): cargo build --release --workspace",
            dlb.display()
        )));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("titus sim --calibrate: {cores} cores; the fabric ({provider}) …");
    let fabric = [titus.clone(), "fabric-bench".into(), "--json".into()];
    let mut preset = match rank0_json(&titus, provider, 2, &fabric) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("titus sim: error: fabric-bench over {provider}: {e}");
            return Ok(1);
        }
    };
    eprintln!("titus sim --calibrate: the cores (task kernel alone and on every core, wake-ups) …");
    let slowdown = busy_slowdown(cores);
    let wake_us = wake_latency_us();
    let byte = byte_ns();
    let speeds = core_speeds();
    eprintln!("titus sim --calibrate: a rank per core over {provider} (runtime-bench, 3 runs) …");
    let mut ratios = Vec::new();
    for _ in 0..3 {
        let args: Vec<PathBuf> = [
            "--tasks",
            "4000",
            "--task-ms",
            "0.5",
            "--protocol",
            "claim",
            "--workers",
            "1",
            "--json",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let run = match rank0_json(
            &titus,
            provider,
            cores.clamp(2, 64),
            &[&[bench.clone()][..], &args].concat(),
        ) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("titus sim: error: runtime-bench over {provider}: {e}");
                return Ok(1);
            }
        };
        match (
            run["efficiency"].as_f64(),
            run["efficiency_calibrated"].as_f64(),
        ) {
            (Some(eff), Some(cal)) if cal > 0.0 => ratios.push(eff / cal),
            _ => {
                eprintln!("titus sim: error: runtime-bench printed no efficiencies: {run}");
                return Ok(1);
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let measured = ratios[1];
    // One one-worker rank per core: measured / calibrated = busy_slowdown × (1 + s).
    let share = (measured / slowdown - 1.0).clamp(0.0, 4.0);
    eprintln!(
        "titus sim --calibrate: the progress thread's CPU per operation (dlb-bench, 2 ranks, 3 runs) …"
    );
    let fabric_model = titus_sim::Model::from_fabric_bench(&preset.to_string(), provider)
        .map_err(UsageError::from)?;
    let (mut serves, mut issues, mut busies, mut owns) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Three runs that can be fitted, of at most six: a run whose two ranks happened to
    // issue alike tells nothing (the steals' order is the machine's).
    let mut unfit = Vec::new();
    while serves.len() < 3 && serves.len() + unfit.len() < 6 {
        match op_cpu_us(&titus, &dlb, provider, &fabric_model) {
            Ok(Ok(f)) => {
                serves.push(f.serve_us);
                issues.push(f.issue_us);
                busies.push(f.busy_op_us);
                owns.push(f.own_op_us);
            }
            Ok(Err(why)) => {
                eprintln!("titus sim --calibrate: a run that cannot be fitted ({why}); another …");
                unfit.push(why);
            }
            Err(e) => {
                eprintln!("titus sim: error: dlb-bench over {provider}: {e}");
                return Ok(1);
            }
        }
    }
    if serves.len() < 3 {
        eprintln!(
            "titus sim: error: dlb-bench over {provider}: {} of 6 runs could not be fitted: {}",
            unfit.len(),
            unfit.join("; ")
        );
        return Ok(1);
    }
    for v in [&mut serves, &mut issues, &mut busies, &mut owns] {
        v.sort_by(f64::total_cmp);
    }
    let (op_serve, op_issue, busy_op, own_op) = (serves[1], issues[1], busies[1], owns[1]);
    eprintln!(
        "titus sim --calibrate: a worker's time between tasks (dlb-bench, 2 ranks, 3 runs each way) …"
    );
    let times = (|| -> Result<_, String> {
        let [overhead, owner, thief] =
            median_of_3(|| between_us(&titus, &dlb, provider).map(|(o, b, f)| [o, b, f]))?;
        let [grain] = median_of_3(|| grain_task_us(&titus, &dlb, provider, overhead).map(|g| [g]))?;
        Ok((overhead, owner, thief, grain))
    })();
    let (overhead_us, owner_us, thief_us, grain_us) = match times {
        Ok(t) => t,
        Err(e) => {
            eprintln!("titus sim: error: dlb-bench over {provider}: {e}");
            return Ok(1);
        }
    };
    let mut node = serde_json::json!({
        "cores": cores,
        "busy_slowdown": slowdown,
        "wake_us": wake_us,
        "progress_share": share,
        "task_overhead_us": overhead_us,
        "foreign_task_us": 0.0,
        "balanced_take_us": 0.0,
        "grain_task_us": grain_us,
        "op_serve_us": op_serve,
        "op_issue_us": op_issue,
        "busy_op_us": busy_op,
        "own_op_us": own_op,
        "byte_ns": byte,
        "task_slowdown_two_ranks": measured,
        "core_speeds": speeds.cores,
        "speed_windows": [speeds.least, speeds.greatest],
        "calibrated_by": format!("titus sim --calibrate '{provider}'"),
    });
    eprintln!(
        "titus sim --calibrate: what the simulator leaves of the balanced run's gaps (4 simulations) …"
    );
    let (balanced_us, foreign_us) = match take_terms(&preset, &node, provider, owner_us, thief_us) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("titus sim: error: simulating the calibration's balanced run: {e}");
            return Ok(1);
        }
    };
    node["balanced_take_us"] = balanced_us.into();
    node["foreign_task_us"] = foreign_us.into();
    node["between_real_us"] = serde_json::json!([owner_us, thief_us]);
    preset["node"] = node;
    let text = serde_json::to_string_pretty(&preset).map_err(|e| UsageError(e.to_string()))?;
    // The preset must read back as one.
    titus_sim::Model::from_fabric_bench(&text, provider).map_err(UsageError::from)?;
    match out {
        Some(p) => std::fs::write(p, text + "\n")
            .map_err(|e| UsageError(format!("cannot write '{}': {e}", p.display())))?,
        None => println!("{text}"),
    }
    eprintln!(
        "titus sim --calibrate: cores {cores}, busy slowdown {slowdown:.3}, wake-up {wake_us:.1} µs, \
         a rank per core: tasks {measured:.3}× calibrated → progress share {share:.3}, \
         {overhead_us:.2} µs a take around its task ({balanced_us:.2} more while balancing, {foreign_us:.2} more for another rank's task, {grain_us:.2} per task of a grain beyond the first), progress CPU {op_serve:.1} µs per operation served, {op_issue:.1} µs per operation issued, \
         {busy_op:.1} µs more on a busy target, {own_op:.1} µs on its own memory, {byte:.2} ns per byte through its segments; \
         every core busy, the cores ran at {:.2}–{:.2}× their median speed in 50 ms windows (each core's median: {})",
        speeds.least,
        speeds.greatest,
        speeds
            .cores
            .iter()
            .map(|c| format!("{c:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(0)
}

/// The progress thread's CPU per operation served and per operation issued, µs:
/// DLB_Bench on two ranks over `provider`, every task on rank 0, without balancing (its
/// progress CPU per second of session, `a`: next to no operations) and with it (rank 1
/// steals: many). In the balanced run each rank's progress CPU is `a · resolution +
/// serve · served + issue · issued`, where a rank serves what the other issued: two
/// ranks, two equations — apart as long as one rank issues more than the other (the
/// thief: about twice the owner's). With [`op_wait_fit`]'s figures from the same run.
/// Err: the run failed; Ok(Err): it ran, but cannot be fitted.
fn op_cpu_us(
    titus: &Path,
    dlb: &Path,
    provider: &str,
    model: &titus_sim::Model,
) -> Result<Result<OpFit, String>, String> {
    let rows = one_owner_rows(titus, dlb, provider, 4000, 1e-4, "none,smallworld")?;
    Ok(op_cpu_fit(&rows).and_then(|(serve_us, issue_us)| {
        let (busy_op_us, own_op_us) = op_wait_fit(&rows, model)?;
        Ok(OpFit {
            serve_us,
            issue_us,
            busy_op_us,
            own_op_us,
        })
    }))
}

/// DLB_Bench on two ranks over `provider` under `titus launch`, `tasks` tasks of
/// `task_s` seconds all on rank 0, under each of `balancers`: rank 0's JSON rows.
fn one_owner_rows(
    titus: &Path,
    dlb: &Path,
    provider: &str,
    tasks: u64,
    task_s: f64,
    balancers: &str,
) -> Result<Vec<Value>, String> {
    let (tasks, task_s) = (tasks.to_string(), task_s.to_string());
    let args = [
        "--distribution",
        "one",
        "--tasks",
        &tasks,
        "--task-time",
        &task_s,
        "--balancer",
        balancers,
        "--json",
    ];
    let program: Vec<PathBuf> = std::iter::once(dlb.to_path_buf())
        .chain(args.map(PathBuf::from))
        .collect();
    Ok(rank0_rows(&launched(titus, provider, 2, &program)?))
}

/// Runs `run` three times: the median of each of its figures, or its first error.
fn median_of_3<const N: usize>(
    mut run: impl FnMut() -> Result<[f64; N], String>,
) -> Result<[f64; N], String> {
    let runs = [run()?, run()?, run()?];
    Ok(std::array::from_fn(|k| {
        let mut v = runs.map(|r| r[k]);
        v.sort_by(f64::total_cmp);
        v[1]
    }))
}

/// What one balanced calibration run tells of operations, µs.
struct OpFit {
    serve_us: f64,
    issue_us: f64,
    busy_op_us: f64,
    own_op_us: f64,
}

/// A worker's time between tasks, µs: DLB_Bench on two ranks over `provider`,
/// [`BETWEEN_TASKS`] tasks of 0.1 ms (a grain of one) on rank 0, without balancing and
/// with it, through [`between_fit`]. Longer than the operations' runs: in runs of 4,000
/// the owner's balanced gaps stood 1.2–2.5 µs above its own, in runs of 20,000 0.5–1.7
/// (the parity suite's job has 50,000).
fn between_us(titus: &Path, dlb: &Path, provider: &str) -> Result<(f64, f64, f64), String> {
    between_fit(&one_owner_rows(
        titus,
        dlb,
        provider,
        BETWEEN_TASKS,
        1e-4,
        "none,smallworld",
    )?)
}

/// The tasks of [`between_us`]'s runs.
const BETWEEN_TASKS: u64 = 20_000;

/// From the two runs' `between_tasks_us` (rank 0's JSON lines, [`rank0_rows`]): the owner's
/// without balancing (its fabric open, no protocol at work: taking each task, reporting
/// it: `task_overhead_us`); the owner's in the balanced run (the protocol each take
/// drives as well: its share kept published, the thief's signals served), at least the
/// first; and the thief's there (every task it runs is the owner's). [`take_terms`]
/// fits the model's terms to the last two.
fn between_fit(rows: &[Value]) -> Result<(f64, f64, f64), String> {
    let between = |r: &Value, rank: usize| -> Option<f64> {
        r["between_tasks_us"]
            .get(rank)?
            .as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    match rows {
        [none, balanced] => {
            let own = between(none, 0).ok_or_else(|| {
                format!("the run without balancing printed no between_tasks_us of rank 0: {none}")
            })?;
            let (owner, thief) =
                between(balanced, 0)
                    .zip(between(balanced, 1))
                    .ok_or_else(|| {
                        format!(
                            "the balanced run printed no between_tasks_us of both ranks: {balanced}"
                        )
                    })?;
            Ok((own, owner.max(own), thief))
        }
        _ => Err(format!("rank 0 printed {} runs, not 2", rows.len())),
    }
}

/// `balanced_take_us` and `foreign_task_us`: what the simulator, with the rest of the
/// preset (`preset` with `node` as its node object; both terms are set here), leaves of the balanced
/// calibration run's gaps — the owner's `owner_us`, the thief's `thief_us` — when it
/// simulates that run (two ranks sharing this machine's cores, `titus sim --node-ranks
/// 2`). Its own gaps already hold what the model charges there (the take's time, the
/// bytes the protocol moves where workers serve the node); each term is the rest, in the
/// model's units ([`residual`]: each simulated with the term at 0 and at 1 µs, the
/// thief's with the owner's term fitted).
fn take_terms(
    preset: &Value,
    node: &Value,
    provider: &str,
    owner_us: f64,
    thief_us: f64,
) -> Result<(f64, f64), String> {
    let tasks = BETWEEN_TASKS.to_string();
    let mut p = preset.clone();
    p["node"] = node.clone();
    let base =
        titus_sim::Model::from_fabric_bench(&p.to_string(), provider).map_err(|e| e.to_string())?;
    let gaps = |balanced_us: f64, foreign_us: f64| -> Result<(f64, f64), String> {
        let mut model = base.clone();
        let c = model
            .cpu
            .as_mut()
            .ok_or("the preset has no node object to simulate")?;
        c.ranks = Some(2);
        c.balanced_take_ns = balanced_us * 1e3;
        c.foreign_task_ns = foreign_us * 1e3;
        let flags = [
            "--ranks",
            "2",
            "--distribution",
            "one",
            "--tasks",
            &tasks,
            "--task-time",
            "0.0001",
            "--balancer",
            "smallworld",
        ];
        let reports = crate::sim_cmd::reports(&flags, &model)?;
        match reports.first().map(|r| &r.between_tasks_us[..]) {
            Some(&[owner, thief, ..]) => Ok((owner, thief)),
            _ => Err("the simulated run reported no time between tasks of two ranks".into()),
        }
    };
    let (owner0, _) = gaps(0.0, 0.0)?;
    let (owner1, _) = gaps(1.0, 0.0)?;
    let balanced = residual(owner_us, owner0, owner1);
    let (_, thief0) = gaps(balanced, 0.0)?;
    let (_, thief1) = gaps(balanced, 1.0)?;
    Ok((balanced, residual(thief_us, thief0, thief1)))
}

/// A term's value, µs, where a simulated gap read `at0` with the term at 0 and `at1` at
/// 1 µs and the real one `real` (a gap grows linearly with the term: it is charged per
/// take, stretched as the take is); at least 0, and 0 where the term moved nothing.
fn residual(real: f64, at0: f64, at1: f64) -> f64 {
    if at1 > at0 {
        ((real - at0) / (at1 - at0)).max(0.0)
    } else {
        0.0
    }
}

/// What each task of a take beyond its first adds to it, µs: DLB_Bench on two ranks over
/// `provider`, [`GRAIN_TASKS`] tasks of [`GRAIN_TASK_S`] on rank 0 without balancing
/// (grains of several), through [`grain_fit`].
fn grain_task_us(
    titus: &Path,
    dlb: &Path,
    provider: &str,
    overhead_us: f64,
) -> Result<f64, String> {
    let rows = one_owner_rows(titus, dlb, provider, GRAIN_TASKS, GRAIN_TASK_S, "none")?;
    grain_fit(&rows, overhead_us)
}

/// The grain run's tasks, and their time (s): a default grain (25 µs) holds 5.
const GRAIN_TASKS: u64 = 20_000;
const GRAIN_TASK_S: f64 = 5e-6;

/// From the grain run (rank 0's JSON line): rank 0 ran `tasks` tasks in `grains` takes,
/// one worker going straight on (`tasks − 1` gaps of mean `between_tasks_us`); every take
/// but the first cost `overhead_us` and its tasks beyond the first `g` each:
/// `between · (tasks − 1) = overhead · (grains − 1) + g · (tasks − grains)`. At least 0.
fn grain_fit(rows: &[Value], overhead_us: f64) -> Result<f64, String> {
    let row = match rows {
        [row] => row,
        _ => return Err(format!("rank 0 printed {} runs, not 1", rows.len())),
    };
    let between = row["between_tasks_us"][0]
        .as_f64()
        .filter(|x| x.is_finite() && *x >= 0.0);
    let grains = row["grains"][0].as_u64();
    let tasks = row["tasks"].as_u64();
    match (between, grains, tasks) {
        (Some(b), Some(g), Some(n)) if g > 0 && g < n => {
            let (g, n) = (g as f64, n as f64);
            Ok(((b * (n - 1.0) - overhead_us * (g - 1.0)) / (n - g)).max(0.0))
        }
        (Some(_), Some(g), Some(n)) => Err(format!(
            "the grain run took {n} tasks in {g} takes: no grain of several"
        )),
        _ => Err(format!(
            "the grain run printed no between_tasks_us, grains and tasks of rank 0: {row}"
        )),
    }
}

/// From the balanced run's `op_latency` (rank 0's last JSON line, [`rank0_rows`]): what the thief's
/// (rank 1's) reads, writes and atomics on the busy owner took beyond `model`'s idle
/// figures for them (a read or write: two latencies; an atomic: two and the atomic's
/// time at the target), count-weighted and at least 0 — 0 where the model's target
/// polls (its busy wait is modelled apart) —, and both ranks' operations on their own
/// memory (count-weighted mean; 0 where none completed).
fn op_wait_fit(rows: &[Value], model: &titus_sim::Model) -> Result<(f64, f64), String> {
    let last = rows.last().ok_or("rank 0 printed no JSON")?;
    let ranks = last["op_latency"]
        .as_array()
        .filter(|a| a.len() == 2)
        .ok_or_else(|| format!("the balanced run printed no op_latency of two ranks: {last}"))?;
    let kind = |r: usize, k: &str| -> (f64, f64) {
        let o = &ranks[r][k];
        match (o["count"].as_f64(), o["mean_us"].as_f64()) {
            (Some(n), Some(m)) if n > 0.0 && m.is_finite() && m >= 0.0 => (n, m),
            _ => (0.0, 0.0),
        }
    };
    let two_way = 2.0 * model.latency_ns * 1e-3;
    let atomic = two_way + model.atomic_ns * 1e-3;
    let (mut n, mut extra) = (0.0, 0.0);
    for (k, idle) in [
        ("read", two_way),
        ("write", two_way),
        ("cas", atomic),
        ("fetch-add", atomic),
    ] {
        let (c, m) = kind(1, k);
        n += c;
        extra += c * (m - idle);
    }
    if n == 0.0 {
        return Err(format!(
            "the thief (rank 1) completed no reads, writes or atomics on the owner: {last}"
        ));
    }
    let busy = if model.polled {
        0.0
    } else {
        (extra / n).max(0.0)
    };
    let ((c0, m0), (c1, m1)) = (kind(0, "own"), kind(1, "own"));
    let own = if c0 + c1 > 0.0 {
        (c0 * m0 + c1 * m1) / (c0 + c1)
    } else {
        0.0
    };
    Ok((busy, own))
}

/// [`op_cpu_us`]'s arithmetic on rank 0's two JSON lines ([`rank0_rows`]), the run
/// without balancing and the balanced one.
fn op_cpu_fit(rows: &[Value]) -> Result<(f64, f64), String> {
    // (resolution s, each rank's progress CPU s, each rank's operations) of each run.
    let figures = |r: &Value| -> Option<(f64, [f64; 2], [f64; 2])> {
        let two = |k: &str| -> Option<[f64; 2]> {
            match r[k].as_array()?.as_slice() {
                [a, b] => Some([a.as_f64()?, b.as_f64()?]),
                _ => None,
            }
        };
        Some((
            r["resolution_s"].as_f64()?,
            two("progress_cpu_s")?,
            two("ops")?,
        ))
    };
    let runs: Option<Vec<_>> = rows.iter().map(figures).collect();
    let [(t0, x0, _), (t1, x, o)] = match runs.as_deref() {
        Some(&[a, b]) => [a, b],
        _ => {
            return Err(format!(
                "rank 0 printed no two runs with progress_cpu_s and ops: {rows:?}"
            ));
        }
    };
    // Without balancing: CPU per second of each rank's session.
    let a = (x0[0] + x0[1]) / (2.0 * t0.max(1e-9));
    let (y0, y1) = (x[0] - a * t1, x[1] - a * t1);
    // Rank r: y_r = serve · o[1 − r] + issue · o[r].
    let det = o[1] * o[1] - o[0] * o[0];
    if det.abs() < 0.1 * o[1].max(o[0]).powi(2) {
        return Err(format!(
            "the two ranks issued {} and {} operations: too close to tell serving from issuing",
            o[0], o[1]
        ));
    }
    let serve = (y0 * o[1] - y1 * o[0]) / det;
    let issue = (y1 * o[1] - y0 * o[0]) / det;
    Ok(((serve * 1e6).max(0.0), (issue * 1e6).max(0.0)))
}

/// Runs `program` on `ranks` ranks over `provider` under `titus launch` and returns its
/// standard output (the launcher's last words where it fails).
fn launched(
    titus: &Path,
    provider: &str,
    ranks: usize,
    program: &[PathBuf],
) -> Result<String, String> {
    let out = Command::new(titus)
        .args(["launch", "-n", &ranks.to_string(), "--provider", provider])
        .args(["--timeout", "300", "--"])
        .args(program)
        .output()
        .map_err(|e| format!("cannot start titus launch: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rfind(|l| !l.starts_with("libfabric"));
        return Err(format!("{} ({})", out.status, last.unwrap_or("no message")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `program` on `ranks` ranks over `provider` under `titus launch` and returns the
/// JSON object rank 0 printed.
fn rank0_json(
    titus: &Path,
    provider: &str,
    ranks: usize,
    program: &[PathBuf],
) -> Result<Value, String> {
    let stdout = launched(titus, provider, ranks, program)?;
    rank0_line(&stdout)
        .ok_or_else(|| "rank 0 printed no JSON".to_string())
        .and_then(|j| serde_json::from_str(j).map_err(|e| format!("rank 0's JSON: {e}")))
}

/// Rank 0's first JSON line in a launcher's output (its prefix padded from 10 ranks on).
fn rank0_line(stdout: &str) -> Option<&str> {
    rank0_lines(stdout).next()
}

/// Rank 0's JSON lines in a launcher's output, parsed, in order.
fn rank0_rows(stdout: &str) -> Vec<Value> {
    rank0_lines(stdout)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Rank 0's JSON lines in a launcher's output, in order.
fn rank0_lines(stdout: &str) -> impl Iterator<Item = &str> {
    stdout
        .lines()
        .filter_map(titus_workload::launched_line)
        .filter_map(|(rank, rest)| (rank == 0 && rest.starts_with('{')).then_some(rest))
}

/// DLB_Bench's task kernel: its time on every core at once over its time alone — the
/// least of three trials (another process's burst only ever inflates it).
fn busy_slowdown(cores: usize) -> f64 {
    (0..3)
        .map(|_| busy_slowdown_once(cores))
        .fold(f64::INFINITY, f64::min)
}

fn busy_slowdown_once(cores: usize) -> f64 {
    const DATA: usize = 4096;
    let per_round = task::seconds_per_round(DATA);
    let p = Arc::new(task::payload(task::rounds_for(0.02, per_round), 11, DATA));
    let time = |p: &[u8]| {
        let t = Instant::now();
        std::hint::black_box(task::run(p));
        t.elapsed().as_secs_f64()
    };
    let alone = (0..5).map(|_| time(&p)).fold(f64::INFINITY, f64::min);
    let start = Arc::new(Barrier::new(cores));
    let mut together: Vec<f64> = (0..cores)
        .map(|_| {
            let (p, start) = (p.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                (0..5).map(|_| time(&p)).fold(f64::INFINITY, f64::min)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap_or(alone))
        .collect();
    together.sort_by(f64::total_cmp);
    (together[together.len() / 2] / alone).max(1.0)
}

/// This machine's own drift: each core's speed at DLB_Bench's task kernel while every
/// core runs it (a thread pinned to each), in [`SPEED_WINDOWS`] windows of 50 ms,
/// relative to the median window of all cores. No model of the machine follows it: a
/// resolution time predicted from a calibration is as good as the speed holds.
#[derive(Debug, Clone, PartialEq)]
struct CoreSpeeds {
    /// Each core's median window.
    cores: Vec<f64>,
    /// The slowest and the fastest window of any core.
    least: f64,
    greatest: f64,
}

/// Windows of [`core_speeds`]: 2 s in all.
const SPEED_WINDOWS: usize = 40;

fn core_speeds() -> CoreSpeeds {
    const WINDOW: Duration = Duration::from_millis(50);
    let cpus = titus_fabric::bootstrap::cpu_affinity()
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec![0]);
    // A task of ~20 µs, so a window holds thousands.
    const DATA: usize = 4096;
    let per_round = task::seconds_per_round(DATA);
    let p = Arc::new(task::payload(task::rounds_for(20e-6, per_round), 13, DATA));
    let start = Arc::new(Barrier::new(cpus.len()));
    let windows: Vec<Vec<f64>> = cpus
        .iter()
        .map(|&cpu| {
            let (p, start) = (p.clone(), start.clone());
            std::thread::spawn(move || {
                // Unpinned where the mask cannot be set: the windows still tell the drift.
                let _ = crate::launch::set_affinity(&[cpu]);
                start.wait();
                let t0 = Instant::now();
                (1..=SPEED_WINDOWS as u32)
                    .map(|w| {
                        let (end, mut runs) = (t0 + WINDOW * w, 0u64);
                        let from = Instant::now();
                        while Instant::now() < end {
                            std::hint::black_box(task::run(&p));
                            runs += 1;
                        }
                        runs as f64 / from.elapsed().as_secs_f64()
                    })
                    .collect()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .filter_map(|h| h.join().ok())
        .collect();
    speeds_of(&windows)
}

/// [`CoreSpeeds`] from each core's runs per second in each window.
fn speeds_of(windows: &[Vec<f64>]) -> CoreSpeeds {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let all: Vec<f64> = windows.iter().flatten().copied().collect();
    let mid = median(all.clone());
    if mid.is_nan() || mid <= 0.0 {
        return CoreSpeeds {
            cores: vec![1.0; windows.len()],
            least: 1.0,
            greatest: 1.0,
        };
    }
    CoreSpeeds {
        cores: windows.iter().map(|w| median(w.clone()) / mid).collect(),
        least: all.iter().copied().fold(f64::INFINITY, f64::min) / mid,
        greatest: all.iter().copied().fold(0.0, f64::max) / mid,
    }
}

/// A segment as the core sees its memory (the runtime's: one segment here, TASKS).
struct OneSegment(titus_fabric::Segment);

impl titus_core::Memory for OneSegment {
    fn read(&self, loc: titus_core::Loc, buf: &mut [u8]) {
        self.0
            .read(loc.offset, buf)
            .expect("the calibration reads inside its segment");
    }
    fn write(&self, loc: titus_core::Loc, data: &[u8]) {
        self.0
            .write(loc.offset, data)
            .expect("the calibration writes inside its segment");
    }
}

/// Tasks of a [`byte_ns`] round, and their payload: the 655-byte payloads (in 696-byte
/// slots) of DLB_Bench's tasks.
const BYTE_ROUND_TASKS: u32 = 1024;
const BYTE_PAYLOAD: usize = 655;
/// Task sets [`byte_ns`] cycles through: 8 × 1,024 payloads, 5.4 MB, more than a core's
/// cache holds, as a queue's tasks are.
const BYTE_SETS: usize = 8;

/// The core's CPU per byte through a rank's own segments, ns: the shared set's slots
/// written as the owner publishes them ([`titus_core::TaskArea::write`], encoding 1,024
/// tasks) and read back as a take-back or a stolen batch decodes them
/// ([`titus_core::TaskArea::read`]), over a fabric segment of this process; the time per
/// byte the core moved through its memory, the median of 31 rounds. The tasks are as a
/// queue holds them: payloads allocated among other allocations, in no order, more of
/// them than a cache holds (seeded: the same layout each time).
fn byte_ns() -> f64 {
    let cfg = titus_core::Config {
        max_payload: 672,
        shared_capacity: BYTE_ROUND_TASKS,
        ..titus_core::Config::default()
    };
    let area = titus_core::TaskArea::new(&cfg, 2);
    let mem = OneSegment(titus_fabric::Segment::new("tasks", area.bytes()));
    let mut rng = titus_overlay::rng::Rng::seeded(0x6279_7465);
    let mut others = Vec::new();
    let mut sets: Vec<Vec<titus_core::Task>> = (0..BYTE_SETS)
        .map(|s| {
            (0..BYTE_ROUND_TASKS)
                .map(|i| {
                    // Something else the process allocated meanwhile.
                    others.push(vec![1u8; 16 + rng.below(2048) as usize]);
                    titus_core::Task {
                        key: 0,
                        owner: 0,
                        index: s as u32 * BYTE_ROUND_TASKS + i,
                        kind: 0,
                        priority: 0,
                        cost_ns: 0,
                        payload: (0..BYTE_PAYLOAD).map(|b| (b as u32 ^ i) as u8).collect(),
                    }
                })
                .collect()
        })
        .collect();
    for set in &mut sets {
        for k in (1..set.len()).rev() {
            set.swap(k, rng.below(k as u64 + 1) as usize);
        }
    }
    // Each round writes a region's slots and reads them back.
    let moved = 2.0 * (area.region(1) - area.region(0)) as f64;
    let mut rounds: Vec<f64> = (0..31)
        .map(|r| {
            let (set, region) = (&sets[r % BYTE_SETS], r % 2);
            let t0 = Instant::now();
            area.write(&mem, region, set);
            let back = area
                .read(&mem, area.region(region), u64::from(BYTE_ROUND_TASKS), 0)
                .expect("the calibration's slots decode");
            std::hint::black_box(back);
            t0.elapsed().as_nanos() as f64 / moved
        })
        .collect();
    std::hint::black_box(others);
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

/// A sleeping thread's wake-up after a condition variable's notification, µs (median).
fn wake_latency_us() -> f64 {
    const ROUNDS: usize = 2000;
    let pair = Arc::new((Mutex::new((0u64, Option::<Instant>::None)), Condvar::new()));
    let waiter = {
        let pair = pair.clone();
        std::thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut lat = Vec::with_capacity(ROUNDS);
            let mut seen = 0;
            let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
            while seen < ROUNDS as u64 {
                while g.0 == seen {
                    g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
                }
                seen = g.0;
                if let Some(t) = g.1 {
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            lat
        })
    };
    let (m, cv) = &*pair;
    for k in 1..=ROUNDS as u64 {
        // Let the waiter fall asleep first.
        std::thread::sleep(Duration::from_micros(200));
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        *g = (k, Some(Instant::now()));
        drop(g);
        cv.notify_one();
    }
    let mut lat = waiter.join().unwrap_or_default();
    if lat.is_empty() {
        return 0.0;
    }
    lat.sort_by(f64::total_cmp);
    lat[lat.len() / 2]
}

#[cfg(test)]
mod tests;
