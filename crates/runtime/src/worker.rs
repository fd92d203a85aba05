//! Worker threads: run tasks; the rank's private set lives in their crossbeam deques
//! (a few tasks each) and in the node's queue behind them.
//!
//! A worker takes a task from its own deque, else steals from a sibling's (inside the
//! process, no fabric involved), else takes a batch from the node, which may start a
//! steal from another rank. Results go back to the node, which routes them. A task's
//! error (or panic, caught) fails the epoch with its message on every rank. Where the
//! fabric's progress must poll (shm), a worker polls it between tasks.

use crate::{RuntimeError, SegMem, Shared};
use crossbeam_deque::{Steal, Stealer, Worker};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use titus_core::Task;

pub(crate) fn spawn(
    sh: &Arc<Shared>,
    n: usize,
    rank: u32,
) -> Result<Vec<JoinHandle<()>>, RuntimeError> {
    let deques: Vec<Worker<Task>> = (0..n).map(|_| Worker::new_lifo()).collect();
    let stealers: Arc<Vec<Stealer<Task>>> = Arc::new(deques.iter().map(Worker::stealer).collect());
    deques
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let (sh, stealers) = (sh.clone(), stealers.clone());
            std::thread::Builder::new()
                .name(format!("titus-worker-{rank}.{i}"))
                .spawn(move || run(&sh, i, w, &stealers))
                .map_err(|e| RuntimeError::Config(format!("cannot start worker {i}: {e}")))
        })
        .collect()
}

fn steal_sibling(me: usize, stealers: &[Stealer<Task>]) -> Option<Task> {
    let n = stealers.len();
    for k in 1..n {
        loop {
            match stealers[(me + k) % n].steal() {
                Steal::Success(t) => return Some(t),
                Steal::Retry => continue,
                Steal::Empty => break,
            }
        }
    }
    None
}

/// Takes a batch from the node; wakes the progress thread if the node now has work for it
/// (a steal to start, a reclaim, results to flush).
fn from_node(sh: &Shared, w: &Worker<Task>) -> Option<Task> {
    if !sh.epoch_running.load(Ordering::Acquire) {
        return None;
    }
    let mem = SegMem(&*sh.fabric);
    let mut node = sh.lock_node();
    let mut tasks = node
        .take_tasks(sh.now(), sh.cfg.worker_batch, &mem)
        .into_iter();
    let first = tasks.next();
    for t in tasks {
        w.push(t);
    }
    let wake = node.has_commands()
        || node
            .poll_timeout()
            .is_some_and(|t| t.0 < sh.driver_deadline.load(Ordering::Acquire));
    drop(node);
    if wake {
        sh.fabric.wake();
    }
    first
}

fn execute(sh: &Shared, task: &Task) -> Result<Vec<u8>, String> {
    let f = {
        let kinds = sh.kinds.read().unwrap_or_else(|p| p.into_inner());
        kinds.get(task.kind as usize).cloned().flatten()
    };
    let Some(f) = f else {
        return Err(format!(
            "no function registered for task kind {}",
            task.kind
        ));
    };
    catch_unwind(AssertUnwindSafe(|| f(&task.payload))).unwrap_or_else(|p| {
        Err(p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the task panicked".into()))
    })
}

/// How often a worker polls a fabric whose progress must poll, between tasks.
const POLL_EVERY: Duration = Duration::from_micros(20);

fn run(sh: &Shared, me: usize, w: Worker<Task>, stealers: &[Stealer<Task>]) {
    let polled = sh.fabric.caps().polled_progress;
    let mut last_poll = Instant::now();
    while !sh.shutdown.load(Ordering::Acquire) {
        let task = w
            .pop()
            .or_else(|| steal_sibling(me, stealers))
            .or_else(|| from_node(sh, &w));
        let Some(task) = task else {
            // Nothing here: sleep until the progress thread brings news (it notifies after
            // every turn), at most a millisecond.
            let node = sh.lock_node();
            sh.idle_workers.fetch_add(1, Ordering::AcqRel);
            let node = sh
                .cv
                .wait_timeout(node, Duration::from_millis(1))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            sh.idle_workers.fetch_sub(1, Ordering::AcqRel);
            drop(node);
            continue;
        };
        let t = Instant::now();
        let result = execute(sh, &task);
        let end = Instant::now();
        // The task's measured cost: it travels home with the result.
        let cost_ns = (end.duration_since(t).as_nanos() as u64).max(1);
        // Polled progress: serve the fabric between tasks, so the progress thread can nap
        // instead of waking on a core this worker needs (on a 2-core node its 10–200 µs
        // naps slowed the tasks by a fifth).
        if polled && end.duration_since(last_poll) >= POLL_EVERY {
            sh.fabric.poll();
            last_poll = end;
        }
        sh.busy_ns.fetch_add(cost_ns, Ordering::Relaxed);
        let mem = SegMem(&*sh.fabric);
        let mut node = sh.lock_node();
        node.task_done(sh.now(), task.owner, task.index, result, cost_ns, &mem);
        let wake = node.has_commands()
            || node
                .poll_timeout()
                .is_some_and(|t| t.0 < sh.driver_deadline.load(Ordering::Acquire));
        let finished = node.is_done();
        drop(node);
        if wake {
            sh.fabric.wake();
        }
        if finished {
            sh.done_cv.notify_all();
        }
    }
}
