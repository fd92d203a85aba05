//! Refusing what cannot fit: a run estimates the memory it needs before allocating it,
//! and a run that would not fit in what the machine has available stops at once with
//! one line (instead of an allocation failure or a swapping machine much later).

use crate::UsageError;

/// Bytes of memory available now (`MemAvailable` in /proc/meminfo), if known.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Fails when `need` bytes (an estimate of `what`) exceed the memory available.
pub fn check_fits(what: &str, need: u64) -> Result<(), UsageError> {
    match available_memory() {
        Some(have) if need > have => Err(UsageError(format!(
            "{what} needs about {:.1} GiB of memory; this machine has {:.1} GiB available",
            need as f64 / f64::from(1u32 << 30),
            have as f64 / f64::from(1u32 << 30)
        ))),
        _ => Ok(()),
    }
}
