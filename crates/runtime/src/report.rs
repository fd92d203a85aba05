//! Results handed back to the node: a worker's held grain, a resource's completions,
//! and passing the node on afterwards (driven inline, or the progress thread woken).

use crate::shared::Tally;
use crate::{SegMem, Shared};
use std::sync::atomic::Ordering;
use titus_core::{HeldResults, Task};

/// A task's identity, its result and its measured cost (ns).
pub(crate) type Done = (titus_core::TaskId, Result<Vec<u8>, String>, u64);

/// Results a worker has not yet reported (its grain's; `RuntimeConfig::worker_grain`),
/// held by the policy's rule ([`titus_core::WorkerPolicy::report_now`]), and its figures
/// not yet added to the rank's: added with every report.
#[derive(Default)]
pub(crate) struct Unreported(pub(crate) HeldResults<Done>, pub(crate) Tally);

impl Unreported {
    /// Hands every held result to the locked `node`, then `last` (the task that just
    /// ended): the node is driven once after them all.
    pub(crate) fn report_into(
        &mut self,
        sh: &Shared,
        node: &mut titus_core::Node,
        now: titus_core::Time,
        last: Done,
        mem: &SegMem<'_>,
    ) {
        self.1.add_to(&sh.figures);
        node.tasks_done(now, self.0.drain().chain(std::iter::once(last)), mem);
    }

    /// Reports every held result under one lock of the node ([`report_all`]).
    pub(crate) fn flush(&mut self, sh: &Shared) {
        self.1.add_to(&sh.figures);
        report_all(sh, self.0.drain());
    }

    /// Reports `task`'s result after the held ones, under one lock of the node.
    pub(crate) fn report(
        &mut self,
        sh: &Shared,
        task: &Task,
        result: Result<Vec<u8>, String>,
        cost_ns: u64,
    ) {
        self.1.add_to(&sh.figures);
        report_all(sh, self.0.drain().chain([(task.id(), result, cost_ns)]));
    }
}

/// Unlocks `node` after a worker drove it: wakes the progress thread where `wake`, and the
/// user thread waiting for the epoch where it is done. Whatever a worker feeds the node
/// (the last termination message among a steal's answers, say) can end the epoch, and the
/// progress thread, whose signal the worker took, would not notice before its next turn
/// (up to 50 ms: a whole chemistry step).
pub(crate) fn release(
    sh: &Shared,
    node: crate::sync::MutexGuard<'_, titus_core::Node>,
    wake: bool,
) {
    sh.node.unlock(node);
    if wake {
        sh.fabric.wake();
        // Where workers serve a polled fabric but leave submitting to the progress
        // thread, give it this core now: woken on a node whose cores all run workers, it
        // waited 0.5–2.5 ms for one.
        if sh.serve && !sh.inline {
            std::thread::yield_now();
        }
    }
}

/// Whether the progress thread must wake for what `node` now wants: commands this worker
/// did not (or could not) submit, or a timer earlier than the progress thread's wait —
/// unless workers drive inline: then this one looks at the timers again after its next
/// task, or wakes the progress thread when it runs out of tasks (a wake-up per task cost
/// the other rank's worker its core thousands of times a second).
pub(crate) fn needs_driver(sh: &Shared, node: &titus_core::Node, handed: bool) -> bool {
    // Where the fabric's progress polls, workers that all run tasks collect what
    // completed and fire the timers after their next task (commands still wake the
    // progress thread); a worker that goes idle wakes it to take over.
    let serving = !sh.inline && sh.workers_serving();
    node.has_commands()
        || (handed && !serving)
        || (!sh.inline
            && !serving
            && node
                .poll_timeout()
                .is_some_and(|t| t.0 < sh.progress.deadline.load(Ordering::Acquire)))
}

/// Reports results (a worker's grain, a resource's completions) under one lock of the
/// node and passes on what the node then wants.
pub(crate) fn report_all(sh: &Shared, done: impl IntoIterator<Item = Done>) {
    let mem = SegMem(&*sh.fabric);
    let mut node = sh.lock_node();
    node.tasks_done(sh.now(), done, &mem);
    pass_on(sh, node);
}

/// Unlocks `node` after a worker's turn with it, passing on what the node then wants:
/// driven inline where the fabric allows, else the progress thread woken if it must be.
pub(crate) fn pass_on(sh: &Shared, mut node: crate::sync::MutexGuard<'_, titus_core::Node>) {
    let handed = sh.serve && crate::driver::drive_inline(sh, &mut node);
    let wake = needs_driver(sh, &node, handed);
    release(sh, node, wake);
}
