//! Worker threads: run tasks; the rank's private set lives in their crossbeam deques
//! (a few tasks each) and in the node's queue behind them.
//!
//! A worker takes a task from its own deque, else steals from a sibling's (inside the
//! process, no fabric involved), else takes a batch from the node, which may start a
//! steal from another rank. Results go back to the node, which routes them; where the
//! fabric completes operations inside their call (the node backend), the worker submits
//! what the node then wants itself (`driver::drive_inline`). A task's error (or panic,
//! caught) fails the epoch with its message on every rank. Where the
//! fabric's progress must poll (shm), a worker polls it between tasks. Who serves the
//! node and when each thread sleeps: `serve_and_idle.md`, beside this file.

use crate::report::{Unreported, pass_on, release};
use crate::{RuntimeError, SegMem, Shared};
use crossbeam_deque::{Steal, Stealer, Worker};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use titus_core::{Task, TaskId};

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
                .spawn(move || run(&sh, i, w, &stealers, rank))
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
    let now = sh.now();
    let first = take_grain(sh, &mut node, now, w, &mem);
    pass_on(sh, node);
    first
}

/// Takes this worker's next grain from the locked `node`: the first task to run, the rest
/// into its deque (where siblings may take them).
fn take_grain(
    sh: &Shared,
    node: &mut titus_core::Node,
    now: titus_core::Time,
    w: &Worker<Task>,
    mem: &SegMem<'_>,
) -> Option<Task> {
    // (A zero grain takes `worker_batch` tasks: the budget admits nothing beyond `min`.)
    let mut tasks = node.take_grain(now, sh.policy.take(), mem).into_iter();
    QUEUED_SEEN.set(node.queued());
    let first = tasks.next();
    for t in tasks {
        w.push(t);
    }
    first
}

thread_local! {
    /// The node's queue length when this worker last held its lock (`TaskCtx::queued`).
    static QUEUED_SEEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A worker's copy of the registered task functions, taken again after a registration.
struct Kinds {
    version: u64,
    fns: Vec<Option<crate::TaskFn>>,
}

impl Kinds {
    fn new() -> Self {
        Self {
            version: u64::MAX,
            fns: Vec::new(),
        }
    }

    /// The function of `kind`, as registered now.
    fn get(&mut self, sh: &Shared, kind: u16) -> Option<&crate::TaskFn> {
        // The version read before the copy: a registration in between copies again next
        // time.
        let now = sh.kinds.version.load(Ordering::Acquire);
        if now != self.version {
            self.fns = sh
                .kinds
                .fns
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            self.version = now;
        }
        self.fns.get(usize::from(kind)).and_then(Option::as_ref)
    }
}

/// Runs `task` on rank `rank`; the children it spawns land in `spawned`. `spare` is a
/// payload buffer the task may take for its result (`TaskCtx::result_buffer`).
fn execute(
    sh: &Shared,
    kinds: &mut Kinds,
    task: &Task,
    rank: u32,
    spawned: &mut Vec<titus_core::NewTask>,
    spare: &mut Vec<u8>,
) -> Result<Vec<u8>, String> {
    let Some(f) = kinds.get(sh, task.kind) else {
        return Err(format!(
            "no function registered for task kind {}",
            task.kind
        ));
    };
    let core = &sh.cfg.core;
    let limit = core.spawning.as_ref().map(|_| core.max_payload);
    let parent = task.id();
    let hand = |tasks: Vec<titus_core::NewTask>| {
        let mut tasks = tasks;
        hand_spawned(sh, parent, &mut tasks);
    };
    let mut ctx = crate::TaskCtx::new(
        rank,
        QUEUED_SEEN.get(),
        limit,
        spawned,
        Some(&hand),
        Some(spare),
    );
    catch_unwind(AssertUnwindSafe(|| f(&mut ctx, &task.payload))).unwrap_or_else(|p| {
        Err(p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the task panicked".into()))
    })
}

/// Largest payload buffer a worker keeps for a result (`TaskCtx::result_buffer`).
const SPARE_MAX: usize = 64 << 10;

/// How long an idle worker of an inline fabric watches for an awaited steal answer.
const ANSWER_SPIN: Duration = Duration::from_micros(50);

/// Watches, up to [`ANSWER_SPIN`], for the answer to this rank's steal and serves it
/// inline; true when the node may have tasks now (or the steal ended).
fn await_answer(sh: &Shared) -> bool {
    if !sh.lock_node().hints().awaits_remote {
        return false;
    }
    let until = Instant::now() + ANSWER_SPIN;
    let mut signals = Vec::new();
    while !sh.fabric.take_signals(&mut signals) {
        if Instant::now() >= until {
            return false;
        }
        std::hint::spin_loop();
    }
    let mem = SegMem(&*sh.fabric);
    let mut node = sh.lock_node();
    crate::driver::feed(&mut node, sh.now(), signals, &mem);
    let handed = crate::driver::drive_inline(sh, &mut node);
    let wake = handed || node.has_commands();
    release(sh, node, wake);
    true
}

fn run(sh: &Shared, me: usize, w: Worker<Task>, stealers: &[Stealer<Task>], rank: u32) {
    let polled = sh.fabric.caps().polled_progress;
    // Times on the node's clock (ns): one reading a task, and integer arithmetic after
    // (three `Instant` subtractions a task cost about as much as the reading).
    let mut last_poll = sh.now().0;
    let mut idle = titus_core::IdleWait::default();
    // A task ran since this worker last went idle (it counts among the busy workers).
    let mut ran = false;
    // When this worker last found nothing to run (debug timings only).
    let mut idle_since: Option<u64> = None;
    // The task taken from the node while reporting the last one (one lock for both).
    let mut carried: Option<Task> = None;
    // Results of this worker's grain not yet reported.
    let mut held = Unreported::default();
    // When the carried task became this worker's: the last task's end, where nothing but
    // taking it from this worker's deque came between (one clock reading per task).
    let mut carried_at: Option<u64> = None;
    // The last task's end while this worker has gone straight on since (the time between
    // tasks, `EpochStats::between`).
    let mut last_end: Option<u64> = None;
    let mut kinds = Kinds::new();
    // Task times through the cycle counter where it keeps time (`crate::task_clock`).
    let mut clock = crate::task_clock::TaskClock::default();
    // The children of the task that runs (handed to the node before its result).
    let mut spawned = Vec::new();
    // The last task's payload buffer, for the next one's result (`TaskCtx::result_buffer`).
    let mut spare = Vec::new();
    while !sh.closing() {
        let res = sh.res.added.load(Ordering::Acquire);
        // With resources: a task the resource thread gave the CPU goes first; every other
        // goes where the policy says (this worker, or an executor: then take the next).
        let (task, counted) = match carried.take() {
            Some(t) => (Some(t), false),
            None => match res.then(|| crate::resources::take_ready(sh)).flatten() {
                Some((t, counted)) => (Some(t), counted),
                None => (
                    w.pop()
                        .or_else(|| steal_sibling(me, stealers))
                        .or_else(|| from_node(sh, &w)),
                    false,
                ),
            },
        };
        let task = match task {
            Some(t) if res && !counted => match crate::resources::dispatch(sh, t) {
                Some(t) => Some(t),
                None => continue,
            },
            t => t,
        };
        let Some(mut task) = task else {
            // Waiting for work is idle time, not time between tasks.
            last_end = None;
            // (Held results come with a task still to run; a switch to resources or an
            // error path may leave some: never go idle on them.)
            if !held.0.is_empty() {
                held.flush(sh);
                continue;
            }
            held.1.add_to(&sh.figures);
            // Inline fabrics: while a steal's answer is awaited, watch for it a little
            // (it comes within microseconds from a victim that serves signals between
            // its tasks) rather than sleep until the progress thread has handled it.
            if sh.inline && await_answer(sh) {
                continue;
            }
            if (sh.figures.timings || sh.trace.is_some()) && idle_since.is_none() {
                idle_since = Some(sh.now().0);
            }
            // Going idle: the progress thread takes over the timers and signals.
            if ran {
                ran = false;
                sh.workers.busy.fetch_sub(1, Ordering::AcqRel);
                if sh.serve {
                    sh.fabric.set_workers_serve(false);
                    sh.fabric.wake();
                }
            }
            // Nothing here: sleep until the progress thread brings news (it notifies after
            // every turn), at most the policy's idle wait (`titus_core::IdleWait`).
            let node = sh.lock_node();
            // What this worker just did may have brought work back (taking from the node
            // drove it inline: `claim` takes back its published tasks when its workers
            // run dry, at once on the node backend): take it now, not after the wait.
            if !res
                && node.queued() > 0
                && node.error().is_none()
                && sh.epoch_running.load(Ordering::Acquire)
            {
                drop(node);
                continue;
            }
            idle.waited(sh.node.wait_for_work(node, idle.next()));
            continue;
        };
        idle.reset();
        if let Some(since) = idle_since.take() {
            let now = sh.now().0;
            let span = (since, now.saturating_sub(since));
            if sh.figures.timings {
                crate::lock(&sh.figures.idle_spans).push(span);
            }
            if let Some(tr) = &sh.trace {
                tr.idle(me, span.0, span.1);
            }
        }
        if !ran {
            ran = true;
            sh.workers.busy.fetch_add(1, Ordering::AcqRel);
        }
        // A task predicted costly keeps this worker from serving signals for long: the
        // progress thread serves them meanwhile (a thief's request would otherwise wait
        // for the task's end — milliseconds in a chemistry front), woken by their
        // senders where the fabric can (`Progress::long_task`), not by this worker: on a
        // shared core that wake-up handed the core away before every costly task.
        // (`titus_core::WorkerPolicy::is_costly`.)
        let costly = sh.inline && sh.policy.is_costly(task.cost_ns);
        if costly {
            sh.workers.busy.fetch_sub(1, Ordering::AcqRel);
            sh.fabric.long_task(true);
        }
        // (Not across a costly task's hand-over to the progress thread.)
        let t = match carried_at.take() {
            Some(at) if !costly => at,
            _ => clock.now(sh),
        };
        if let Some(e) = last_end.take() {
            held.1.between_ns += t.saturating_sub(e);
            held.1.betweens += 1;
        }
        let result = execute(sh, &mut kinds, &task, rank, &mut spawned, &mut spare);
        let end = clock.now(sh);
        if let Some(tr) = &sh.trace {
            tr.task(me, t, end, &task);
        }
        last_end = Some(end);
        if task.payload.capacity() <= SPARE_MAX {
            spare = std::mem::take(&mut task.payload);
        }
        if costly {
            sh.fabric.long_task(false);
            sh.workers.busy.fetch_add(1, Ordering::AcqRel);
        }
        // The task's measured cost: it travels home with the result.
        let cost_ns = end.saturating_sub(t).max(1);
        // Polled progress: serve the fabric between tasks, so the progress thread can nap
        // instead of waking on a core this worker needs (on a 2-core node its 10–200 µs
        // naps slowed the tasks by a fifth).
        let mut served = false;
        if polled && sh.policy.polls_now(end.saturating_sub(last_poll)) {
            sh.fabric.poll();
            last_poll = end;
            served = true;
        }
        held.1.busy_ns += cost_ns;
        if sh.figures.timings {
            sh.figures
                .last_task_end
                .fetch_max(sh.now().0, Ordering::Relaxed);
        }
        if res {
            crate::resources::cpu_done(sh);
            if !spawned.is_empty() {
                hand_spawned(sh, task.id(), &mut spawned);
            }
            held.report(sh, &task, result, cost_ns);
        } else {
            let local;
            (carried, local) = report_and_take(
                sh,
                &task,
                result,
                &mut spawned,
                cost_ns,
                end,
                &mut held,
                me,
                &w,
                stealers,
            );
            if local && !served {
                carried_at = Some(end);
            }
        }
    }
}

/// Hands the children a task spawned to the node, before its result: they must count as
/// created before it counts as done (`titus_core::spawn`). A refusal here means that the
/// epoch failed (the task's own checks came at each spawn): the node has the error.
fn hand_spawned(sh: &Shared, parent: TaskId, spawned: &mut Vec<titus_core::NewTask>) {
    let mem = SegMem(&*sh.fabric);
    let mut node = sh.lock_node();
    sh.hand_over(&mut node, sh.now(), parent, spawned, &mem);
    QUEUED_SEEN.set(node.queued());
    pass_on(sh, node);
}

/// Reports a task's result and returns this worker's next task: its own or a sibling's
/// if there is one (the report alone under the node's lock), else one taken from the
/// node under the same lock as the report — a worker running small tasks one by one
/// otherwise locked the node twice per task, against the progress thread each time.
///
/// With a grain (`RuntimeConfig::worker_grain`) the result waits in `held` while this
/// worker has more of its grain to run: reported with the next take from the node, or
/// before a costly task, or once the oldest held result is a grain old — one lock of the
/// node per grain. Nothing is lost: a worker takes from the node, and so reports,
/// before it can go idle. The flag: the next task came from the deques and nothing was
/// reported (the next task's clock may start at this one's end: one reading per task).
/// The children the task spawned go to the node first, under the report's lock when it
/// takes one (`hand_spawned`).
#[allow(clippy::too_many_arguments)]
fn report_and_take(
    sh: &Shared,
    task: &Task,
    result: Result<Vec<u8>, String>,
    spawned: &mut Vec<titus_core::NewTask>,
    cost_ns: u64,
    ended: u64,
    held: &mut Unreported,
    me: usize,
    w: &Worker<Task>,
    stealers: &[Stealer<Task>],
) -> (Option<Task>, bool) {
    let id = task.id();
    if let Some(next) = w.pop().or_else(|| steal_sibling(me, stealers)) {
        if !spawned.is_empty() {
            hand_spawned(sh, id, spawned);
        }
        // (A zero grain flushes at once: one task, one report.)
        if held
            .0
            .hold((id, result, cost_ns), ended, next.cost_ns, &sh.policy)
        {
            held.flush(sh);
            return (Some(next), false);
        }
        return (Some(next), true);
    }
    let mem = SegMem(&*sh.fabric);
    let mut node = sh.lock_node();
    let now = sh.now();
    sh.hand_over(&mut node, now, id, spawned, &mem);
    held.report_into(sh, &mut node, now, (id, result, cost_ns), &mem);
    let mut next = None;
    if sh.epoch_running.load(Ordering::Acquire) && node.error().is_none() {
        next = take_grain(sh, &mut node, now, w, &mem);
    }
    pass_on(sh, node);
    (next, false)
}
