//! The workload profiles: TITUS's paper's weak-scaling cases, `quick` and `chem`.

use super::*;

/// A named workload: its per-rank shape and the defaults of the flags it sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Per-rank work W/n, seconds.
    pub work_s: f64,
    /// Per-rank problem size S/n, bytes.
    pub size_bytes: u64,
    /// Tasks per rank.
    pub tasks_per_rank: u64,
    /// Cost distribution.
    pub cost: CostArg,
    /// Ownership.
    pub distribution: DistArg,
    /// Epochs.
    pub epochs: u32,
    /// Drift per epoch (`--drift`).
    pub drift: f64,
}

/// The names of the profiles.
pub const PROFILES: [&str; 5] = ["quick", "w1-s4k", "w5-s1m", "w10-s21m", "chem"];

/// A profile by name. `chem` is a combustion code's time steps, shaped after
/// examples/chemistry (a 64 × 32 grid in slabs over 2 ranks, ~12 µs per cell on average,
/// cells in the flame front ~100× cold ones, 48-byte cell records): 4,096 tasks of 12 µs
/// mean and 48 B per rank, owned in slabs (uniform), a contiguous front of 10% of the
/// tasks 30× costlier (bimodal), 8 epochs, the front moving 3% of the tasks per epoch.
pub fn profile(name: &str) -> Option<Profile> {
    let titus = |work_s, size_bytes| Profile {
        work_s,
        size_bytes,
        tasks_per_rank: 100,
        cost: CostArg::Constant,
        distribution: DistArg::Gaussian,
        epochs: 1,
        drift: 0.0,
    };
    match name {
        "quick" => Some(titus(0.25, 64 << 10)),
        "w1-s4k" => Some(titus(1.0, 4_000)),
        "w5-s1m" => Some(titus(5.0, 1_000_000)),
        "w10-s21m" => Some(titus(10.0, 21_000_000)),
        "chem" => Some(Profile {
            work_s: 4096.0 * 12e-6,
            size_bytes: 4096 * 48,
            tasks_per_rank: 4096,
            cost: CostArg::Bimodal,
            distribution: DistArg::Uniform,
            epochs: 8,
            drift: 0.03,
        }),
        _ => None,
    }
}

/// A task's cost hint (`--hints on`: its drawn cost, ns, as a caller that knows what it
/// asks for; off: 0, none) and its priority (`--priorities on`: 1 for a task costlier
/// than the mean `task_time` seconds, else 0).
pub fn hint_and_priority(args: &BenchArgs, t: &TaskSpec, task_time: f64) -> (u64, i16) {
    let hint = match args.hints {
        Switch::On => (t.cost * 1e9) as u64,
        Switch::Off => 0,
    };
    let costly = on(&args.priorities) && t.cost > task_time;
    (hint, i16::from(costly))
}

/// Sets the core's diffusion switch (`--diffusion on|off`): with it on, from the second
/// epoch each rank pushes part of its predicted excess to lighter overlay neighbours
/// before stealing starts (`titus_core::Config::diffusion`).
pub fn apply_diffusion(core: &mut Config, on: bool) {
    core.diffusion = on;
}
