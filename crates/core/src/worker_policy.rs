//! The worker and progress policy that the runtime's threads and the simulator's model of
//! them both follow: how much a worker takes at once, when it reports what it holds, and
//! how long the progress thread waits before its next turn. The constants live here, with
//! the decisions that read them, so that the two drivers cannot drift apart; how the
//! threads apply them is narrated in `crates/runtime/src/serve_and_idle.md`.

use std::time::Duration;

/// Most tasks a worker takes from its rank's queue at once (its grain): the runtime's
/// workers and the simulator's alike.
pub const GRAIN_TASKS_MAX: usize = 64;

/// A task predicted to take at least this long (ns) is "costly": a worker reports what it
/// holds before running it, and on the node backend (whose workers serve signals between
/// tasks) the progress thread serves them meanwhile.
pub const COSTLY_TASK_NS: u64 = 200_000;

/// A polling fabric's progress-thread nap while every worker of its rank runs tasks and
/// serves the fabric between them (`polled_progress`): what arrives meanwhile waits for a
/// task's end or this nap's (the runtime's driver; the simulator's model of it), ns.
pub const BUSY_NAP_NS: u64 = 10_000_000;

/// The longest wait of a rank's progress thread while operations of its own are in
/// flight, ns: it then polls its fabric at least this often whatever else it waits for (a
/// completion dispatched just before a wait starts would not end it). The runtime's
/// driver; the simulator serves a polled target's atomics no later.
pub const OPEN_OPS_WAIT_NS: u64 = 1_000_000;

/// Whether a worker that finished a task of its grain and has `next` to run reports the
/// `held` results it holds now (the oldest ended `held_for_ns` ago; `grain_ns` its grain)
/// rather than with its next take from the queue: before a costly task, at
/// [`GRAIN_TASKS_MAX`] results, or once the oldest is a grain old (a zero grain: at once).
/// The runtime's workers and the simulator's follow it.
pub fn report_held_now(next_cost_ns: u64, held: usize, held_for_ns: u64, grain_ns: u64) -> bool {
    next_cost_ns >= COSTLY_TASK_NS || held >= GRAIN_TASKS_MAX || held_for_ns >= grain_ns
}

/// A worker's grain by default with `workers` workers per rank: seconds of estimated work
/// it takes from the rank's queue at once — 25 µs per worker (up to 8), at most 200 µs.
/// The more workers share a rank's queue, the less often each may take it (measured on 16
/// cores: 2 ranks of 8 workers ran the chemistry example's steps ~1.4× faster with 200 µs
/// than without; one worker per rank the same at 50 µs, worse at 200 µs).
pub fn default_worker_grain(workers: usize) -> Duration {
    (Duration::from_micros(25) * workers.min(8) as u32).min(Duration::from_micros(200))
}

/// Longest wait of a rank's progress thread in one turn, ns: the bound on noticing
/// shutdown.
pub const MAX_WAIT_NS: u64 = 50_000_000;

/// How long a rank's progress thread waits before its next turn, ns: until the node's
/// next deadline (`until_deadline_ns`, none: [`MAX_WAIT_NS`]), at most [`BUSY_NAP_NS`]
/// while its workers serve the node between tasks (what arrives waits for a task's end
/// or this), not at all with commands to submit, and at most [`OPEN_OPS_WAIT_NS`] with
/// operations of its own in flight (a completion dispatched just before the wait starts
/// would not end it). The runtime's driver waits so; the simulator serves a busy target
/// no later.
pub fn progress_wait_ns(
    until_deadline_ns: Option<u64>,
    workers_serve: bool,
    has_commands: bool,
    own_ops_in_flight: bool,
) -> u64 {
    let mut wait = until_deadline_ns.unwrap_or(MAX_WAIT_NS).min(MAX_WAIT_NS);
    if workers_serve {
        wait = wait.min(BUSY_NAP_NS);
    }
    if has_commands {
        0
    } else if own_ops_in_flight {
        wait.min(OPEN_OPS_WAIT_NS)
    } else {
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_wait_takes_the_nearest_bound() {
        assert_eq!(progress_wait_ns(None, false, false, false), MAX_WAIT_NS);
        assert_eq!(progress_wait_ns(Some(5), false, false, false), 5);
        assert_eq!(progress_wait_ns(None, true, false, false), BUSY_NAP_NS);
        assert_eq!(progress_wait_ns(None, true, false, true), OPEN_OPS_WAIT_NS);
        assert_eq!(progress_wait_ns(Some(500), true, false, true), 500);
        assert_eq!(progress_wait_ns(Some(500), true, true, true), 0);
        assert_eq!(
            progress_wait_ns(Some(u64::MAX), false, false, false),
            MAX_WAIT_NS
        );
    }
}
