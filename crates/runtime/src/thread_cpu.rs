//! A thread's CPU time, read from Linux's `/proc` (elsewhere: unknown). The progress
//! thread's is part of each epoch's figures ([`crate::EpochStats::progress_cpu`]): on a
//! node whose cores all run workers, what it takes is taken from the tasks.

use std::path::PathBuf;

/// Where one thread's CPU time can be read.
#[derive(Debug)]
pub(crate) struct ThreadCpu(Option<PathBuf>);

impl ThreadCpu {
    /// The calling thread's.
    pub(crate) fn current() -> Self {
        Self(
            std::fs::read_link("/proc/thread-self")
                .ok()
                .map(|p| PathBuf::from("/proc").join(p).join("schedstat")),
        )
    }

    /// Nanoseconds on a CPU so far (`schedstat`'s first field); `None` where unknown.
    pub(crate) fn ns(&self) -> Option<u64> {
        let s = std::fs::read_to_string(self.0.as_ref()?).ok()?;
        s.split_whitespace().next()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_s_cpu_time_grows() {
        let me = ThreadCpu::current();
        let before = me.ns();
        if !cfg!(target_os = "linux") {
            return;
        }
        let before = before.expect("Linux has /proc/thread-self");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = me.ns().expect("read once, readable again");
        // Spinning 20 ms wall: most of it on a CPU, whatever else the machine runs.
        assert!(after - before >= 2_000_000, "{before} -> {after}");
        // A new thread's time is its own, not this one's (nor the process's).
        let other = std::thread::spawn(|| ThreadCpu::current().ns().unwrap())
            .join()
            .unwrap();
        assert!(other < after - before, "{other} ns in a new thread");
    }
}
