//! Refusing what cannot fit: a run estimates the memory it needs before allocating it,
//! and a run that would not fit in what the machine has available stops at once with
//! one line (instead of an allocation failure or a swapping machine much later).

use crate::UsageError;

pub use titus_fabric::mem::available_memory;

/// Fails when `need` bytes (an estimate of `what`) exceed the memory available.
pub fn check_fits(what: &str, need: u64) -> Result<(), UsageError> {
    match available_memory() {
        Some(have) if need > have => Err(UsageError(format!(
            "{what} needs about {:.1} GiB of memory; this process has {:.1} GiB available (free memory within its cgroup's limit)",
            need as f64 / f64::from(1u32 << 30),
            have as f64 / f64::from(1u32 << 30)
        ))),
        _ => Ok(()),
    }
}
