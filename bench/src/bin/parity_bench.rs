//! parity-bench: the simulator against real processes on this machine, the same DLB_Bench
//! jobs side by side. For each transport, rank count and job it runs `titus launch -n N
//! --provider P -- dlb-bench JOB --json` (real processes), then `titus sim --ranks N
//! --preset MODEL JOB --calibration C --json` with the real run's calibration (the same
//! tasks and costs), and prints both efficiencies and resolution times per balancer and
//! epoch, their differences, and how many rows are within the goal (±0.02 efficiency, ±5%
//! resolution time). `--real-tasks` runs the simulator on DLB_Bench's real tasks, so the
//! results' digests must agree too (small jobs only: what CI runs). `--repeat N` runs each
//! job N times in real processes and compares the simulator with the median run, and says
//! how far the real runs themselves stray from that median (this machine's noise: what
//! bounds any model's agreement), and whether the simulated time falls within ±5% of the
//! real runs' own range.
#![forbid(unsafe_code)]

use clap::Parser;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use titus_workload::dlb::fail;

/// A job of the suite: its name and DLB_Bench flags.
const JOBS: &[(&str, &[&str])] = &[
    ("quick", &["--profile", "quick"]),
    (
        "quick-bimodal",
        &["--profile", "quick", "--cost", "bimodal"],
    ),
    (
        "one-owner-1ms",
        &[
            "--distribution",
            "one",
            "--tasks",
            "10000",
            "--task-time",
            "0.001",
        ],
    ),
    (
        "one-owner-0.1ms",
        &[
            "--distribution",
            "one",
            "--tasks",
            "50000",
            "--task-time",
            "0.0001",
        ],
    ),
    ("chem", &["--profile", "chem"]),
    (
        "tiny",
        &[
            "--tasks",
            "120",
            "--task-time",
            "0.0005",
            "--cost",
            "bimodal",
            "--epochs",
            "2",
            "--drift",
            "0.1",
        ],
    ),
];

#[derive(Parser, Debug)]
#[command(
    name = "parity-bench",
    about = "The simulator against real processes: the same DLB_Bench jobs side by side"
)]
struct Args {
    /// Transports (titus launch --provider): node, "tcp;ofi_rxm", shm.
    #[arg(long, value_delimiter = ',', default_value = "node,tcp;ofi_rxm,shm")]
    providers: Vec<String>,
    /// Process counts (each 1 to 65,536, `titus launch -n`'s bound).
    #[arg(long, value_delimiter = ',', default_value = "2")]
    ranks: Vec<u32>,
    /// Jobs: quick, quick-bimodal, one-owner-1ms, one-owner-0.1ms, chem, tiny.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quick,quick-bimodal,one-owner-1ms,one-owner-0.1ms,chem"
    )]
    jobs: Vec<String>,
    /// Balancers (none runs first in each job: the speed-ups need it).
    #[arg(long, default_value = "none,smallworld,random,master,hierarchical")]
    balancer: String,
    /// Simulate DLB_Bench's real tasks (payloads and checksums): the digests must agree.
    #[arg(long)]
    real_tasks: bool,
    /// One JSON line per compared row instead of the table.
    #[arg(long)]
    json: bool,
    /// The simulator's node model (the preset's cores, `titus sim --node-model`): on, off,
    /// or both side by side against the same real runs.
    #[arg(long, value_delimiter = ',', default_value = "on", value_parser = ["on", "off"])]
    node_model: Vec<String>,
    /// Calibrate every provider on this machine first (`titus sim --calibrate`, ~30 s each),
    /// write the presets into DIR (node.json, tcp-loopback.json, shm.json) and simulate on
    /// them instead of the built-in presets, which were measured on the 2-core development
    /// machine: what a parity run on any other machine needs.
    #[arg(long, value_name = "DIR")]
    calibrate: Option<PathBuf>,
    /// How fast the simulated tasks run: `startup` — at DLB_Bench's start-up calibration
    /// (best of five 10 ms rounds), or `sustained` — each rank's tasks as much slower than
    /// that as its own ran in the real `none` run of the same job (busy / owned work, the
    /// median epoch; `titus sim --slow RANK:FACTOR`; needs `none` among the balancers).
    /// Both (`sustained,startup`): side by side against the same real runs. Measured here,
    /// `sustained` matches the `none` rows and not the balanced ones (docs/results.md).
    #[arg(long, value_delimiter = ',', default_value = "startup", value_parser = ["sustained", "startup"])]
    task_speed: Vec<String>,
    /// Real runs of each job (1–20): the simulator is compared with their median row
    /// (efficiency and resolution time each; the first run's calibration), and each row
    /// says how far the real runs spread around it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
    /// A worker's grain, µs (0 to 1,000,000), for the real runs and the simulator alike
    /// (`dlb-bench --worker-grain-us`, `titus sim --worker-grain-us`; default: the
    /// runtime's rule).
    #[arg(long, value_name = "US")]
    worker_grain_us: Option<f64>,
}

impl Args {
    /// The flags every real and simulated run of a job takes beyond the job's own.
    fn common(&self) -> Vec<String> {
        let mut v = vec!["--balancer".to_string(), self.balancer.clone()];
        if let Some(g) = self.worker_grain_us {
            v.extend(["--worker-grain-us".to_string(), g.to_string()]);
        }
        v
    }
}

/// Each simulated variant of a job: (node model, tasks' speed).
fn variants(args: &Args) -> impl Iterator<Item = (&String, &String)> {
    args.node_model
        .iter()
        .flat_map(|m| args.task_speed.iter().map(move |t| (m, t)))
}

/// The simulator's fabric model for a transport.
fn preset(provider: &str) -> Result<&'static str, String> {
    match provider {
        "node" => Ok("node"),
        "tcp;ofi_rxm" | "tcp" => Ok("tcp-loopback"),
        "shm" => Ok("shm"),
        p => Err(format!(
            "--providers: no simulator preset for '{p}' (node, tcp;ofi_rxm, shm)"
        )),
    }
}

/// A workspace binary next to this one.
fn sibling(name: &str) -> PathBuf {
    let me = std::env::current_exe().expect("current_exe");
    me.with_file_name(name)
}

/// Runs `cmd`; its stdout's JSON rows (a launcher's "[N] " prefix removed), or why not.
fn rows(cmd: &mut Command, what: &str) -> Result<Vec<Value>, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| titus_workload::launched_line(l).map_or(l, |(_, rest)| rest))
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// One compared row.
struct Row {
    provider: String,
    ranks: u32,
    job: String,
    node_model: String,
    task_speed: String,
    run: String,
    epoch: u64,
    real: (f64, f64),
    sim: (f64, f64),
    /// Every real run's (efficiency, resolution time); `real` is their median.
    runs: Vec<(f64, f64)>,
    digests_agree: bool,
    /// The ranks' mean time between tasks (DLB_Bench's `between_tasks_us`, over the
    /// ranks that had any), µs: real (the runs' median, rank by rank), simulated.
    between: (f64, f64),
}

/// The most processes of one row: each row is a `titus launch -n N` on this machine, and
/// this is the launcher's own bound (`RANKS_MAX` in crates/cli/src/launch.rs), checked
/// here so a bad count is refused before any run instead of failing row by row.
const RANKS_MAX: u32 = 65_536;

/// The first of `--balancer`'s comma-separated names that dlb-bench and `titus sim` would
/// refuse (their parser, taken name by name as clap splits the list), with the names they
/// take; None when they take every one.
fn unknown_balancer(list: &str) -> Option<(&str, Vec<String>)> {
    use clap::ValueEnum;
    use titus_workload::dlb::BalancerArg;
    let bad = list
        .split(',')
        .find(|name| BalancerArg::from_str(name, false).is_err())?;
    let names = BalancerArg::value_variants()
        .iter()
        .filter_map(BalancerArg::to_possible_value)
        .map(|v| v.get_name().to_string())
        .collect();
    Some((bad, names))
}

/// The goal's time tolerance: ±5%.
const TIME_TOLERANCE: f64 = 0.05;

/// The goal's tolerance: `b` within ±0.02 efficiency and ±5% time of `a`.
fn close(a: (f64, f64), b: (f64, f64)) -> bool {
    efficiency_close(a, b) && (b.1 / a.1 - 1.0).abs() <= TIME_TOLERANCE
}

/// The goal's efficiency half: `b` within ±0.02 efficiency of `a`.
fn efficiency_close(a: (f64, f64), b: (f64, f64)) -> bool {
    (b.0 - a.0).abs() <= 0.02
}

impl Row {
    fn within(&self) -> bool {
        close(self.real, self.sim)
    }

    /// The efficiency half of the goal alone (on a machine whose own runs' times spread
    /// beyond ±5%, the half that can still be judged).
    fn efficiency_within(&self) -> bool {
        efficiency_close(self.real, self.sim)
    }

    /// Every real run lies within the goal's tolerance of their median.
    fn runs_agree(&self) -> bool {
        self.runs.iter().all(|&r| close(self.real, r))
    }

    /// The simulated time within ±5% of the real runs' own range (from 5% below the
    /// fastest to 5% above the slowest; one run: ±5% of it). Where three runs of one job
    /// spread by more than the goal, the median alone asks the simulator to predict which
    /// of them the machine's drift picked.
    fn time_in_spread(&self) -> bool {
        let times = self.runs.iter().map(|r| r.1);
        let (lo, hi) = if self.runs.is_empty() {
            (self.real.1, self.real.1)
        } else {
            (
                times.clone().fold(f64::INFINITY, f64::min),
                times.fold(f64::NEG_INFINITY, f64::max),
            )
        };
        self.sim.1 >= (1.0 - TIME_TOLERANCE) * lo && self.sim.1 <= (1.0 + TIME_TOLERANCE) * hi
    }

    /// The efficiency half, and the time within the real runs' spread ([`Self::time_in_spread`]).
    fn within_spread(&self) -> bool {
        self.efficiency_within() && self.time_in_spread()
    }
}

/// A job's rows taken together (the chem job's epochs; a one-epoch job's row as it is):
/// resolution times summed, efficiencies weighted by them — the job's busy time over its
/// ranks' time —, on both sides and for each real run, the real side being the median of
/// the real runs' own totals. `rows` come job by job, epoch by epoch (as `compare` gives
/// them). Returns each job's row and its epoch count.
fn jobs(rows: &[Row]) -> Vec<(Row, usize)> {
    let key = |r: &Row| {
        (
            r.provider.clone(),
            r.ranks,
            r.job.clone(),
            r.node_model.clone(),
            r.task_speed.clone(),
            r.run.clone(),
        )
    };
    let total = |pairs: &mut dyn Iterator<Item = (f64, f64)>| {
        let (busy, time) = pairs.fold((0.0, 0.0), |(b, t), (e, s)| (b + e * s, t + s));
        (busy / time, time)
    };
    let mut out: Vec<(Row, usize)> = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let k = key(&rows[start]);
        let end = start + rows[start..].iter().take_while(|r| key(r) == k).count();
        let group = &rows[start..end];
        let n_runs = group.iter().map(|r| r.runs.len()).min().unwrap_or(0);
        let runs: Vec<(f64, f64)> = (0..n_runs)
            .map(|i| total(&mut group.iter().map(|r| r.runs[i])))
            .collect();
        let real = if runs.is_empty() {
            total(&mut group.iter().map(|r| r.real))
        } else {
            (
                median(runs.iter().map(|p| p.0).collect()),
                median(runs.iter().map(|p| p.1).collect()),
            )
        };
        let first = &group[0];
        out.push((
            Row {
                provider: first.provider.clone(),
                ranks: first.ranks,
                job: first.job.clone(),
                node_model: first.node_model.clone(),
                task_speed: first.task_speed.clone(),
                run: first.run.clone(),
                epoch: 0,
                real,
                sim: total(&mut group.iter().map(|r| r.sim)),
                runs,
                digests_agree: group.iter().all(|r| r.digests_agree),
                between: (
                    group.iter().map(|r| r.between.0).sum::<f64>() / group.len() as f64,
                    group.iter().map(|r| r.between.1).sum::<f64>() / group.len() as f64,
                ),
            },
            group.len(),
        ));
        start = end;
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One row's (efficiency, resolution time) in each real run.
type RunPairs = Vec<(f64, f64)>;

/// What a calibration (`file`) saw of the machine's own drift (`speed_windows`), said
/// against the ±5% time goal; None where it has no such figure.
fn drift_line(file: &Path) -> Option<String> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let w = v["node"]["speed_windows"].as_array()?;
    let (least, greatest) = (w.first()?.as_f64()?, w.get(1)?.as_f64()?);
    let within = least >= 0.95 && greatest <= 1.05;
    Some(format!(
        "while it calibrated, every core busy, the cores ran at {least:.2}–{greatest:.2}× their median speed in 50 ms windows{}",
        if within {
            ""
        } else {
            ": the tasks' speed itself moves by more than the ±5% time goal here"
        }
    ))
}

/// The median of several real runs of one job, row by row (efficiency and resolution
/// time, apart: the median row need not be any one run's; the other keys — calibration,
/// results digest — are the first run's: DLB_Bench's tasks compute as many rounds as its
/// start-up calibration says, so each run's results differ), and every run's pair per
/// row. The runs must report the same rows, each with both figures.
fn median_rows(runs: &[Vec<Value>]) -> Result<(Vec<Value>, Vec<RunPairs>), String> {
    let first = runs.first().ok_or("no real run")?;
    let key = |v: &Value| {
        (
            v["balancer"].clone(),
            v["protocol"].clone(),
            v["epoch"].clone(),
        )
    };
    let mut rows = Vec::with_capacity(first.len());
    let mut pairs = Vec::with_capacity(first.len());
    for (i, row) in first.iter().enumerate() {
        let mut each = Vec::with_capacity(runs.len());
        for (k, run) in runs.iter().enumerate() {
            let r = run.get(i).filter(|r| key(r) == key(row)).ok_or_else(|| {
                format!(
                    "real run {} reported other rows than the first ({} against {})",
                    k + 1,
                    run.len(),
                    first.len()
                )
            })?;
            let figure = |key: &str| {
                r[key]
                    .as_f64()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| format!("real run {} reported no {key}", k + 1))
            };
            each.push((figure("efficiency")?, figure("resolution_s")?));
        }
        let mut m = row.clone();
        // Each rank's time between tasks: its median over the runs.
        let ranks = row["between_tasks_us"].as_array().map_or(0, Vec::len);
        m["between_tasks_us"] = (0..ranks)
            .map(|k| {
                median(
                    runs.iter()
                        .filter_map(|run| run[i]["between_tasks_us"].get(k)?.as_f64())
                        .collect(),
                )
            })
            .collect::<Vec<f64>>()
            .into();
        m["efficiency"] = median(each.iter().map(|p| p.0).collect()).into();
        m["resolution_s"] = median(each.iter().map(|p| p.1).collect()).into();
        rows.push(m);
        pairs.push(each);
    }
    if let Some(k) = runs.iter().position(|r| r.len() != first.len()) {
        return Err(format!(
            "real run {} reported {} rows, the first {}",
            k + 1,
            runs[k].len(),
            first.len()
        ));
    }
    Ok((rows, pairs))
}

/// The flags of job `name`.
fn job_flags(name: &str) -> Option<&'static [&'static str]> {
    JOBS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// `job` (validated) in real processes over `provider` and in the simulator on `model`.
fn compare(
    args: &Args,
    provider: &str,
    model: &str,
    ranks: u32,
    job: &str,
) -> Result<Vec<Row>, String> {
    let flags = job_flags(job).expect("jobs are checked before anything runs");
    let what = format!("{provider}, {ranks} ranks, {job}");
    let model_args: Vec<String> = match &args.calibrate {
        Some(dir) => vec![
            "--preset-file".into(),
            dir.join(format!("{model}.json")).display().to_string(),
        ],
        None => vec!["--preset".into(), model.into()],
    };
    let mut runs = Vec::with_capacity(args.repeat as usize);
    for k in 0..args.repeat {
        runs.push(rows(
            Command::new(sibling("titus"))
                .args([
                    "launch",
                    "-n",
                    &ranks.to_string(),
                    "--provider",
                    provider,
                    "--",
                ])
                .arg(sibling("dlb-bench"))
                .args(flags)
                .args(args.common())
                .args(["--json", "--no-progress"]),
            &format!("{what}: real processes (run {})", k + 1),
        )?);
    }
    let (real, spread) = median_rows(&runs).map_err(|e| format!("{what}: {e}"))?;
    let calibration = real
        .first()
        .and_then(|r| r["calibration_s"].as_f64())
        .ok_or_else(|| format!("{what}: the real run reported no calibration"))?;
    let slow = if args.task_speed.iter().any(|t| t == "sustained") {
        let list = sustained(&runs.concat(), ranks).map_err(|e| format!("{what}: {e}"))?;
        eprintln!("parity-bench: {what}: tasks at their sustained speed, --slow {list}");
        list
    } else {
        String::new()
    };
    let mut out = Vec::new();
    for (node_model, speed) in variants(args) {
        let mut sim_cmd = Command::new(sibling("titus"));
        sim_cmd
            .args(["sim", "--ranks", &ranks.to_string()])
            .args(&model_args)
            .args(flags)
            .args(args.common())
            .arg("--json")
            .args(["--calibration", &calibration.to_string()])
            .args(["--node-model", node_model]);
        if node_model == "on" {
            // Every process of the real run shared this machine's cores.
            sim_cmd.args(["--node-ranks", &ranks.to_string()]);
        }
        if args.real_tasks {
            sim_cmd.arg("--real-tasks");
        }
        if speed == "sustained" {
            sim_cmd.args(["--slow", &slow]);
        }
        let sim = rows(&mut sim_cmd, &format!("{what}: simulator"))?;
        let mut paired = pair_rows(
            &what,
            provider,
            ranks,
            job,
            (node_model, speed),
            &real,
            &sim,
        )?;
        for (row, each) in paired.iter_mut().zip(&spread) {
            row.runs.clone_from(each);
        }
        out.extend(paired);
    }
    Ok(out)
}

/// Each rank's sustained task speed in the real `none` rows: its busy time over the
/// calibrated work it owned, the median over the rows (epochs) in which it owned work — one
/// epoch of 0.1 s on a shared machine can run 30% slow —, as `titus sim --slow` takes it; a
/// rank that owned nothing gets the median over every rank's rows.
fn sustained(real: &[Value], ranks: u32) -> Result<String, String> {
    let n = ranks as usize;
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut rows = 0;
    for r in real.iter().filter(|r| r["balancer"] == "none") {
        let get = |k: &str| -> Result<Vec<f64>, String> {
            let v: Option<Vec<f64>> = r[k]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect());
            v.filter(|v| v.len() == n)
                .ok_or_else(|| format!("the real none run reported no {k} for {n} ranks"))
        };
        for (i, (b, o)) in get("busy_s")?.into_iter().zip(get("owned_s")?).enumerate() {
            if o > 0.0 && b > 0.0 {
                ratios[i].push(b / o);
            }
        }
        rows += 1;
    }
    if rows == 0 {
        return Err("--task-speed sustained needs none among the balancers".into());
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let all = median(&ratios.concat()).ok_or("the real none run did no work")?;
    Ok(ratios
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{i}:{:.4}", median(r).unwrap_or(all)))
        .collect::<Vec<_>>()
        .join(","))
}

/// The real and simulated rows of one job, matched (`variant`: the node model, the tasks' speed).
fn pair_rows(
    what: &str,
    provider: &str,
    ranks: u32,
    job: &str,
    variant: (&str, &str),
    real: &[Value],
    sim: &[Value],
) -> Result<Vec<Row>, String> {
    if sim.len() != real.len() {
        return Err(format!(
            "{what}: {} simulated rows for {} real ones",
            sim.len(),
            real.len()
        ));
    }
    let key = |v: &Value| {
        (
            v["balancer"].as_str().unwrap_or("").to_string(),
            v["protocol"].as_str().unwrap_or("").to_string(),
            v["epoch"].as_u64().unwrap_or(0),
        )
    };
    real.iter()
        .zip(sim)
        .map(|(r, s)| {
            if key(r) != key(s) {
                return Err(format!("{what}: rows differ: {:?} / {:?}", key(r), key(s)));
            }
            let pair = |v: &Value| {
                (
                    v["efficiency"].as_f64().unwrap_or(f64::NAN),
                    v["resolution_s"].as_f64().unwrap_or(f64::NAN),
                )
            };
            let (b, p, epoch) = key(r);
            Ok(Row {
                provider: provider.into(),
                ranks,
                job: job.into(),
                node_model: variant.0.into(),
                task_speed: variant.1.into(),
                run: if b == "none" { b } else { format!("{b}/{p}") },
                epoch,
                real: pair(r),
                sim: pair(s),
                runs: Vec::new(), // Each real run's: the caller's.
                digests_agree: r["results_digest"] == s["results_digest"],
                between: (between(r), between(s)),
            })
        })
        .collect()
}

/// A report row's mean `between_tasks_us` over the ranks that had any (NaN: none did).
fn between(v: &Value) -> f64 {
    let b: Vec<f64> = v["between_tasks_us"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_f64)
                .filter(|x| *x > 0.0)
                .collect()
        })
        .unwrap_or_default();
    b.iter().sum::<f64>() / b.len() as f64
}

/// Prints one compared row: an epoch's (`epochs` None) or a job's of several epochs.
fn print_row(args: &Args, r: &Row, epochs: Option<usize>) {
    if args.json {
        let mut v = serde_json::json!({
            "provider": r.provider, "ranks": r.ranks, "job": r.job,
            "node_model": r.node_model, "task_speed": r.task_speed, "run": r.run,
            "efficiency_real": r.real.0, "efficiency_sim": r.sim.0,
            "resolution_real_s": r.real.1, "resolution_sim_s": r.sim.1,
            "within": r.within(), "digests_agree": r.digests_agree,
            "efficiency_real_runs": r.runs.iter().map(|p| p.0).collect::<Vec<_>>(),
            "resolution_real_runs_s": r.runs.iter().map(|p| p.1).collect::<Vec<_>>(),
            "real_runs_agree": r.runs_agree(),
            "time_in_real_spread": r.time_in_spread(),
            "between_real_us": r.between.0, "between_sim_us": r.between.1,
            "worker_grain_us": args.worker_grain_us,
        });
        match epochs {
            None => {
                v["epoch"] = r.epoch.into();
                v["level"] = "epoch".into();
            }
            Some(n) => {
                v["epochs"] = n.into();
                v["level"] = "job".into();
            }
        }
        println!("{v}");
        return;
    }
    let range = |f: fn(&(f64, f64)) -> f64| {
        let v = r.runs.iter().map(f);
        v.clone().fold(f64::MIN, f64::max) - v.fold(f64::MAX, f64::min)
    };
    let spread = if args.repeat > 1 {
        format!(
            "  {:.4}, {:.1}%",
            range(|p| p.0),
            100.0 * range(|p| p.1) / r.real.1
        )
    } else {
        String::new()
    };
    let epoch = match epochs {
        None => r.epoch.to_string(),
        Some(n) => format!("0-{}", n - 1),
    };
    println!(
        "{:<12} {:>5} {:<16} {:<5} {:<9} {:<26} {:>5} {:>9.4} {:>9.4} {:>+7.4} {:>10.4} {:>10.4} {:>+7.1}{spread}",
        r.provider,
        r.ranks,
        r.job,
        r.node_model,
        r.task_speed,
        r.run,
        epoch,
        r.real.0,
        r.sim.0,
        r.sim.0 - r.real.0,
        r.real.1,
        r.sim.1,
        100.0 * (r.sim.1 / r.real.1 - 1.0)
    );
}

fn main() {
    let args = titus_workload::dlb::parse_args_of::<Args>("parity-bench");
    // Bad input before anything runs (exit 2, one line).
    let models: Vec<&str> = args
        .providers
        .iter()
        .map(|p| {
            preset(p).unwrap_or_else(|e| {
                eprintln!("parity-bench: {e}");
                std::process::exit(2)
            })
        })
        .collect();
    if let Some(g) = args.worker_grain_us
        && !(0.0..=1e6).contains(&g)
    {
        eprintln!("parity-bench: --worker-grain-us {g}: expected microseconds in [0, 1000000]");
        std::process::exit(2);
    }
    if let Some(&r) = args.ranks.iter().find(|r| !(1..=RANKS_MAX).contains(*r)) {
        fail(
            2,
            &format!("--ranks {r}: expected 1..={RANKS_MAX} processes (titus launch -n)"),
        );
    }
    if let Some((b, names)) = unknown_balancer(&args.balancer) {
        fail(
            2,
            &format!(
                "--balancer '{b}': unknown balancer (expected {})",
                names.join(", ")
            ),
        );
    }
    if let Some(j) = args.jobs.iter().find(|j| job_flags(j).is_none()) {
        let names: Vec<&str> = JOBS.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "parity-bench: --jobs: unknown job '{j}' (jobs: {})",
            names.join(", ")
        );
        std::process::exit(2);
    }
    if args.task_speed.iter().any(|t| t == "sustained")
        && !args.balancer.split(',').any(|b| b.trim() == "none")
    {
        eprintln!(
            "parity-bench: --task-speed sustained needs none among --balancer (its real run measures the tasks' speed), or --task-speed startup"
        );
        std::process::exit(2);
    }
    if let Some(dir) = &args.calibrate {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!(
                "parity-bench: --calibrate: cannot create '{}': {e}",
                dir.display()
            );
            std::process::exit(2);
        }
        for (provider, model) in args.providers.iter().zip(&models) {
            let file = dir.join(format!("{model}.json"));
            let status = Command::new(sibling("titus"))
                .args(["sim", "--calibrate", provider, "--out"])
                .arg(&file)
                .stdout(std::process::Stdio::null())
                .status();
            match status {
                Ok(s) if s.success() => {
                    eprintln!(
                        "parity-bench: calibrated {provider} into {}",
                        file.display()
                    );
                    if let Some(line) = drift_line(&file) {
                        eprintln!("parity-bench: {line}");
                    }
                }
                Ok(s) => {
                    eprintln!("parity-bench: calibrating {provider} failed ({s})");
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("parity-bench: cannot start titus sim --calibrate: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    let mut all = Vec::new();
    // Each job's rows taken together ([`jobs`]), as they were printed.
    let mut whole: Vec<(Row, usize)> = Vec::new();
    let mut failed = false;
    if !args.json {
        println!(
            "{:<12} {:>5} {:<16} {:<5} {:<9} {:<26} {:>5} {:>9} {:>9} {:>7} {:>10} {:>10} {:>7}{}",
            "provider",
            "ranks",
            "job",
            "node",
            "speed",
            "run",
            "epoch",
            "eff_real",
            "eff_sim",
            "diff",
            "res_real_s",
            "res_sim_s",
            "diff%",
            if args.repeat > 1 {
                "  real runs: eff range, time range%"
            } else {
                ""
            }
        );
    }
    for (provider, model) in args.providers.iter().zip(&models) {
        for &ranks in &args.ranks {
            for job in &args.jobs {
                match compare(&args, provider, model, ranks, job) {
                    Ok(rs) => {
                        for r in &rs {
                            print_row(&args, r, None);
                        }
                        // A job of several epochs, taken together.
                        let js = jobs(&rs);
                        for (j, epochs) in js.iter().filter(|(_, n)| *n > 1) {
                            print_row(&args, j, Some(*epochs));
                        }
                        whole.extend(js);
                        all.extend(rs);
                    }
                    Err(e) => {
                        eprintln!("parity-bench: {e}");
                        failed = true;
                    }
                }
            }
        }
    }
    // One variant's rows; how many of them, and of the balanced ones, pass `test`.
    let variant = |m: &String, t: &String| -> Vec<&Row> {
        all.iter()
            .filter(|r| &r.node_model == m && &r.task_speed == t)
            .collect()
    };
    let tally = |mine: &[&Row], test: fn(&Row) -> bool| {
        let balanced = mine.iter().filter(|r| r.run != "none");
        (
            mine.iter().filter(|r| test(r)).count(),
            balanced.clone().filter(|r| test(r)).count(),
            balanced.count(),
        )
    };
    // The same for whole jobs.
    let job_variant = |m: &String, t: &String| -> Vec<&Row> {
        whole
            .iter()
            .map(|(j, _)| j)
            .filter(|j| &j.node_model == m && &j.task_speed == t)
            .collect()
    };
    for (m, t) in variants(&args) {
        let mine = variant(m, t);
        let (within, b_within, balanced) = tally(&mine, Row::within);
        let job_rows = job_variant(m, t);
        let (j_within, j_b_within, j_balanced) = tally(&job_rows, Row::within);
        let (j_eff, j_b_eff, _) = tally(&job_rows, Row::efficiency_within);
        let (spread, _, _) = tally(&mine, Row::time_in_spread);
        let (j_spread, _, _) = tally(&job_rows, Row::time_in_spread);
        let (j_both, j_b_both, _) = tally(&job_rows, Row::within_spread);
        let eff = median(mine.iter().map(|r| (r.sim.0 - r.real.0).abs()).collect());
        let time = median(
            mine.iter()
                .map(|r| (r.sim.1 / r.real.1 - 1.0).abs())
                .collect(),
        );
        eprintln!(
            "parity-bench: node model {m}, tasks at {t} speed: {within} of {} rows within ±0.02 efficiency and ±5% time \
             ({b_within} of {} balanced ones); median |Δ efficiency| {eff:.4}, |Δ time| {:.1}%; \
             jobs (a job's epochs together): {j_within} of {} within ({j_b_within} of {j_balanced} balanced), \
             {j_eff} within ±0.02 efficiency alone ({j_b_eff} balanced); \
             time within ±5% of the real runs' own range: {spread} of {} rows, {j_spread} of {} jobs, \
             {j_both} jobs with the efficiency half ({j_b_both} balanced){}",
            mine.len(),
            balanced,
            100.0 * time,
            job_rows.len(),
            mine.len(),
            job_rows.len(),
            if args.real_tasks {
                format!(
                    "; results' digests agree in {} of {}",
                    mine.iter().filter(|r| r.digests_agree).count(),
                    mine.len()
                )
            } else {
                String::new()
            }
        );
    }
    // The real runs are the same rows under every variant: the first variant's.
    if args.repeat > 1
        && let Some((m, t)) = variants(&args).next()
    {
        let mine = variant(m, t);
        let (agree, b_agree, balanced) = tally(&mine, Row::runs_agree);
        let job_rows = job_variant(m, t);
        let (j_agree, _, _) = tally(&job_rows, Row::runs_agree);
        eprintln!(
            "parity-bench: the {} real runs of a job: every one within ±0.02 efficiency and ±5% time of their median in {agree} of {} rows ({b_agree} of {} balanced ones), {j_agree} of {} jobs",
            args.repeat,
            mine.len(),
            balanced,
            job_rows.len()
        );
    }
    if failed || (args.real_tasks && all.iter().any(|r| !r.digests_agree)) {
        std::process::exit(1);
    }
}

#[cfg(test)]
#[path = "parity_bench/tests.rs"]
mod tests;
