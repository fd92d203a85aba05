//! A run's report: its figures, JSON and CSV rows, the printed tables and summaries.

use super::*;

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
    /// Costly tasks had priority 1 (`--priorities`).
    pub priorities: bool,
    /// Tasks carried their drawn costs as hints (`--hints`).
    pub hints: bool,
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
    /// The slowest rank's start by the start's phases, s (`titus_core::start::START_PHASES`):
    /// where a slow start waited.
    pub start_phases_s: std::collections::BTreeMap<&'static str, f64>,
    /// The rank with the most start bytes, its bytes by phase: what a heavy start carried.
    pub start_phase_bytes: std::collections::BTreeMap<&'static str, u64>,
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

pub(super) fn speedup_cell(s: Option<f64>) -> String {
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
        hints: run.args.hints == Switch::On,
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
        start_phases_s: start_phases(figs),
        start_phase_bytes: start_phase_bytes(figs),
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

/// The heaviest rank's start bytes by phase: the phases that carried any.
fn start_phase_bytes(figs: &[RankFigures]) -> std::collections::BTreeMap<&'static str, u64> {
    let Some(heaviest) = figs.iter().max_by_key(|f| f.start_bytes) else {
        return Default::default();
    };
    titus_core::start::START_PHASES
        .into_iter()
        .zip(heaviest.start_phase_bytes)
        .filter(|p| p.1 > 0)
        .collect()
}

/// The slowest rank's start by phase, s: the phases it spent any time in.
fn start_phases(figs: &[RankFigures]) -> std::collections::BTreeMap<&'static str, f64> {
    let Some(slowest) = figs.iter().max_by(|a, b| a.start.total_cmp(&b.start)) else {
        return Default::default();
    };
    titus_core::start::phases_named(&slowest.start_phase_ns)
        .map(|(name, ns)| (name, ns as f64 * 1e-9))
        .collect()
}
