//! DLB_Bench's workloads and runs, shared by its two front ends: `dlb-bench` (the real
//! runtime, `bench/`) and `titus sim` (the simulator, `crates/cli`).
//!
//! - the workload generator (`generate.rs`): who owns which task and what each costs,
//!   and how costs move from one epoch (time step) to the next (`--drift`);
//! - the task (`task`): real work over a payload, calibrated to a duration, whose
//!   result is a checksum;
//! - the runs (`dlb`): the shared flags, the profiles, the list of runs (balancers ×
//!   protocols × sweep points), each run's core and overlay configuration, and the report
//!   with its table, JSON and CSV (a row per run and epoch; efficiency, nominal
//!   efficiency and speed-up over `none`). Plots live in `titus-plot`.
//!
//! No runtime and no simulator here: each front end drives its own and hands this crate
//! the per-rank figures.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dlb;
mod generate;
mod log;
mod pipe;
mod plans_error;
pub mod task;
pub mod uts;
pub mod uts_task;

pub use generate::{
    Cost, Distribution, EpochCosts, GAUSSIAN_SIGMA, Spec, TaskSpec, WorkloadError, ZONE_FACTOR,
    ZONE_FRACTION, apply_plans, counts, drift_shift, epoch_tasks, generate, parse_counts,
};
pub use log::{DEFAULT_FILTER, LogError, init_logging, log_filter};
pub use pipe::quiet_broken_pipe;
pub use plans_error::PlansError;
/// One move of a repartition plan ([`apply_plans`] takes every rank's).
pub use titus_core::repartition::{Move, RepartitionPlan};

/// A line of `titus launch`'s output split into the rank that printed it and the rest.
/// The launcher pads the rank to the widest one ("[0] ", "[ 0] " with 10 ranks or more);
/// a line without the prefix (`--no-prefix`, another launcher) is `None`.
pub fn launched_line(line: &str) -> Option<(u32, &str)> {
    let (rank, rest) = line.strip_prefix('[')?.split_once("] ")?;
    Some((rank.trim_start().parse().ok()?, rest))
}

/// A number as an error message shows it: as typed for ordinary magnitudes, in exponent
/// form beyond (`1e300`, not three hundred digits).
pub fn show_number(x: f64) -> String {
    if x.is_finite() && x != 0.0 && !(1e-4..1e9).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A tuning flag given in milliseconds that is not a number in [0, 60000]
/// ([`check_millis`]): longer waits than a minute would only stall a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag} {} is not a number of milliseconds in [0, 60000]", show_number(*.ms))]
pub struct MillisError {
    /// The flag.
    pub flag: String,
    /// Its value.
    pub ms: f64,
}

/// A tuning flag given in milliseconds (`--backoff-max-ms`, `--flush-delay-ms`): none, or
/// a number in [0, 60000]; the error names the flag and the value.
pub fn check_millis(flag: &str, value: Option<f64>) -> Result<(), MillisError> {
    match value {
        Some(ms) if !(0.0..=60_000.0).contains(&ms) => Err(MillisError {
            flag: flag.into(),
            ms,
        }),
        _ => Ok(()),
    }
}
