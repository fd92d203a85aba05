//! A job's plan: every rank's tasks, their costs and payloads, and the memory it takes.

use super::*;

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

/// The workload of a run, or the flag that makes it impossible.
pub fn plan(args: &BenchArgs, ranks: u32) -> Result<Plan, UsageError> {
    let Some(prof) = profile(&args.profile) else {
        return Err(UsageError(format!(
            "unknown --profile '{}' (expected one of {})",
            args.profile,
            PROFILES.join(", ")
        )));
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
        return Err(UsageError(format!(
            "--task-time {} is not a number of seconds in [0, {TASK_TIME_MAX_S}]",
            crate::show_number(task_time)
        )));
    }
    let payload = args.payload.unwrap_or(sn / per_rank);
    // A task slot holds the payload behind DLB_Bench's task header.
    let payload_max = u64::from(titus_core::layout::PAYLOAD_MAX) - task::HEADER as u64;
    if payload > payload_max {
        return Err(UsageError(format!(
            "--payload {payload} is over the {payload_max} bytes a task slot may hold"
        )));
    }
    if args.counts.is_some() && dist_arg != DistArg::File {
        return Err(UsageError(
            "--counts FILE is read only with --distribution file (add it, or drop --counts)".into(),
        ));
    }
    let distribution = match dist_arg {
        DistArg::Gaussian => Distribution::Gaussian,
        DistArg::Uniform => Distribution::Uniform,
        DistArg::One => Distribution::One,
        DistArg::File => {
            let Some(path) = &args.counts else {
                return Err(UsageError("--distribution file needs --counts FILE".into()));
            };
            let text = std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!("cannot read --counts '{}': {e}", path.display()))
            })?;
            Distribution::File(
                crate::parse_counts(&text, ranks).map_err(|e| UsageError(e.to_string()))?,
            )
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
        return Err(UsageError(format!(
            "{total} tasks: at most {} per job",
            u32::MAX
        )));
    }
    if total as f64 * task_time > JOB_WORK_MAX_S {
        return Err(UsageError(format!(
            "{total} tasks of {task_time} s are {:.3e} s of work, over the {JOB_WORK_MAX_S:e} s a job may hold",
            total as f64 * task_time
        )));
    }
    let cost = match cost_arg {
        CostArg::Constant => Cost::Constant,
        CostArg::Exponential => Cost::Exponential,
        CostArg::Lognormal => Cost::Lognormal,
        CostArg::Bimodal => Cost::Bimodal,
    };
    Ok(Plan {
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
    })
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
pub fn check_memory(plan: &Plan, held: Option<u32>) -> Result<(), UsageError> {
    let total = match &plan.spec.distribution {
        Distribution::File(c) => c.iter().fold(0u64, |a, &x| a.saturating_add(x)),
        _ => plan.spec.tasks,
    };
    // This rank's share needs the draw of every rank's counts (which it makes anyway).
    let mine = match held {
        None => total,
        Some(r) => match crate::counts(&plan.spec) {
            Ok(c) => c.get(r as usize).copied().unwrap_or(0),
            Err(_) => return Ok(()),
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
        return Err(UsageError(format!(
            "{mine} tasks of {} B payload here need about {:.1} GiB of memory; this \
                 process has {:.1} GiB available (free memory within its cgroup's limit; \
                 fewer tasks, smaller --payload, or more \
                 ranks on more nodes)",
            plan.payload,
            gib(need),
            gib(have)
        )));
    }
    Ok(())
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
