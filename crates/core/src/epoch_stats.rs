//! One rank's figures of one epoch: the one shape that the runtime measures and the
//! simulator models, and from which the C ABI's `titus_stats` and the benchmarks'
//! per-rank figures are built.

use crate::Stats;
use crate::resources::ResourceCounts;
use crate::start::StartFigures;
use std::time::Duration;

/// Figures of one epoch on one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpochStats {
    /// The protocol's figures (tasks, steals by outcome, bytes, chunks, hops, ...).
    pub core: Stats,
    /// Time workers spent running tasks, summed over workers.
    pub busy: Duration,
    /// Worker time not spent running tasks: session × workers − busy.
    pub idle: Duration,
    /// Of it, the workers' time from a task's end to their next task's start where they
    /// went straight on (reporting the result, taking the next task, serving the node
    /// between tasks), summed, and how many such gaps: the runtime's own time per task.
    pub between: Duration,
    /// Gaps counted in [`EpochStats::between`].
    pub betweens: u64,
    /// Time from the epoch call to this rank's end of the epoch: its start included.
    pub session: Duration,
    /// Time from the epoch call to its tasks' start: the epoch start
    /// ([`crate::start`]), with its bytes, messages and rounds.
    pub start: Duration,
    /// The epoch start's figures.
    pub start_figures: StartFigures,
    /// Time spent in steal attempts (first operation to outcome), summed.
    pub steal: Duration,
    /// CPU time of the rank's progress thread during the epoch: serving the fabric and
    /// driving the protocol. Where every core runs a worker, it comes out of the tasks'
    /// time. The runtime measures it (Linux; zero elsewhere); the simulator's node model
    /// charges its share of a core over the session and the operations it served.
    pub progress_cpu: Duration,
    /// Steal protocol in use.
    pub protocol: &'static str,
    /// Workers.
    pub workers: usize,
    /// Submissions and completions per resource, the CPU workers first (empty without
    /// resources beside them).
    pub resources: Vec<ResourceCounts>,
}

impl EpochStats {
    /// The workers' idle time of a session of `session` with `workers` workers that were
    /// busy for `busy`.
    pub fn idle_of(session: Duration, workers: usize, busy: Duration) -> Duration {
        (session * workers.min(u32::MAX as usize) as u32).saturating_sub(busy)
    }
}
