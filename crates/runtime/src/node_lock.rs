//! The rank's node behind its one lock, and the two waits on it: idle workers waiting for
//! tasks, and the user thread waiting for the epoch's end.
//!
//! Why no wake-up is lost (`serve_and_idle.md` tells who wakes whom): a waiter checks its
//! condition under the lock and waits in the same hold, the condition variable releasing
//! it; a thread that makes the condition true does so under the lock and wakes after. So
//! the waiter either saw the change or was waiting when the wake came. Idle workers count
//! themselves under the lock, so a waker reading the count skips the system call when
//! none waits.
//!
//! A task's children reach the node before its result ([`NodeLock::hand_over`] before
//! [`Node::task_done`]): they count as created before it counts as done, which the
//! termination waves rest on (`titus_core::termination::waves`). The hand-over wakes idle
//! workers for them itself: on a fabric whose workers do not drive the node, nothing else
//! would until the progress thread's next turn or their wait's end (up to 16 ms).
//!
//! The loom model at the end runs this code over a real node whose tasks spawn tasks.

use crate::sync::{AtomicBool, AtomicUsize, Condvar, Mutex, MutexGuard};
use std::sync::atomic::Ordering;
use std::time::Duration;
use titus_core::{Memory, NewTask, Node, TaskId, Time};

/// The node, its lock and the waits on it.
pub(crate) struct NodeLock {
    node: Mutex<Node>,
    /// Wakes idle workers: tasks may be available.
    work: Condvar,
    /// Workers waiting on `work` (changed under the lock).
    idle: AtomicUsize,
    /// Wakes the user thread: the epoch or a start may be over, or failed.
    end: Condvar,
    /// The runtime is closing: every thread leaves (set under the lock).
    closing: AtomicBool,
}

impl NodeLock {
    pub(crate) fn new(node: Node) -> Self {
        Self {
            node: Mutex::new(node),
            work: Condvar::new(),
            idle: AtomicUsize::new(0),
            end: Condvar::new(),
            closing: AtomicBool::new(false),
        }
    }

    /// Locks the node (a panic under the lock left it in one piece: every change to it is
    /// one call of the node's).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Node> {
        self.node.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Workers waiting for tasks now.
    pub(crate) fn idle_workers(&self) -> usize {
        self.idle.load(Ordering::Acquire)
    }

    /// Whether the runtime is closing.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// An idle worker's wait for news, at most `wait`, with the node released meanwhile;
    /// none once the runtime closes. Whether it timed out.
    pub(crate) fn wait_for_work(&self, node: MutexGuard<'_, Node>, wait: Duration) -> bool {
        if self.closing() {
            return false;
        }
        self.idle.fetch_add(1, Ordering::AcqRel);
        let (node, waited) = self
            .work
            .wait_timeout(node, wait)
            .unwrap_or_else(|p| p.into_inner());
        self.idle.fetch_sub(1, Ordering::AcqRel);
        drop(node);
        waited.timed_out()
    }

    /// Wakes every idle worker (none waiting: no system call).
    pub(crate) fn wake_workers(&self) {
        if self.idle_workers() > 0 {
            self.work.notify_all();
        }
    }

    /// Wakes as many idle workers as `queued` tasks can feed, or all of them where `all`
    /// (resources take tasks their own way): waking all each time had a rank's idle
    /// workers queue for the lock to find nothing, on every task of its busy ones.
    pub(crate) fn wake_workers_for(&self, queued: usize, all: bool) {
        let idle = self.idle_workers();
        if idle == 0 {
            return;
        }
        if queued >= idle || all {
            self.work.notify_all();
        } else {
            for _ in 0..queued {
                self.work.notify_one();
            }
        }
    }

    /// Hands `children`, spawned by the running task `parent`, to the locked `node`, and
    /// wakes idle workers for them (`all`: as [`Self::wake_workers_for`]). Call it before
    /// the parent's result. A refusal means that the epoch failed: the node has the error.
    pub(crate) fn hand_over(
        &self,
        node: &mut Node,
        now: Time,
        parent: TaskId,
        children: &mut Vec<NewTask>,
        mem: &dyn Memory,
        all: bool,
    ) {
        if children.is_empty() {
            return;
        }
        let _ = node.spawned(now, parent, std::mem::take(children), mem);
        self.wake_workers_for(node.queued(), all);
    }

    /// Unlocks `node`, waking the user thread where the epoch is over (or failed): a
    /// worker's report may end it, and the progress thread would not notice before its
    /// next turn.
    pub(crate) fn unlock(&self, node: MutexGuard<'_, Node>) {
        let finished = node.is_done();
        drop(node);
        if finished {
            self.end.notify_all();
        }
    }

    /// The user thread's wait for the end, at most `wait`, with the node released
    /// meanwhile: it checks the node again after.
    pub(crate) fn wait_for_end<'a>(
        &self,
        node: MutexGuard<'a, Node>,
        wait: Duration,
    ) -> MutexGuard<'a, Node> {
        self.end
            .wait_timeout(node, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// Wakes the user thread (call after a change to the node, with the lock released).
    pub(crate) fn notify_end(&self) {
        self.end.notify_all();
    }

    /// Wakes every thread that waits on the node: the epoch failed or is being
    /// interrupted.
    pub(crate) fn wake_everyone(&self) {
        self.work.notify_all();
        self.end.notify_all();
    }

    /// The runtime closes: every thread leaves. Set under the lock, so that a worker
    /// about to wait sees it, or is waiting when the wake comes.
    pub(crate) fn close(&self) {
        let node = self.lock();
        self.closing.store(true, Ordering::Release);
        drop(node);
        self.wake_everyone();
    }
}

/// Model checks (loom, `--cfg runtime_loom`): every interleaving of two workers and the
/// user thread over one rank's real node, whose tasks spawn tasks, one handed over while
/// its parent runs. Waits have no timeout in the model, so a lost wake-up is a deadlock
/// loom reports.
#[cfg(all(test, runtime_loom))]
mod loom_tests {
    use super::*;
    use crate::RuntimeConfig;
    use loom::sync::Arc;
    use titus_core::spawn::{ReduceOp, Spawning};
    use titus_core::{GrainTake, Loc, Op, Task};
    use titus_overlay::Overlay;

    /// The node's segments. A std lock suffices: the node touches them only under its own
    /// lock, so this one is never contended.
    struct Segments(std::sync::Mutex<Vec<Vec<u8>>>);

    impl Memory for Segments {
        fn read(&self, loc: Loc, buf: &mut [u8]) {
            let s = self.0.lock().unwrap();
            let at = loc.offset as usize;
            buf.copy_from_slice(&s[usize::from(loc.segment.0)][at..at + buf.len()]);
        }
        fn write(&self, loc: Loc, data: &[u8]) {
            let mut s = self.0.lock().unwrap();
            let at = loc.offset as usize;
            s[usize::from(loc.segment.0)][at..at + data.len()].copy_from_slice(data);
        }
    }

    impl Segments {
        fn word(&self, at: Loc) -> u64 {
            let mut w = [0; 8];
            self.read(at, &mut w);
            u64::from_le_bytes(w)
        }
        fn copy(&self, from: Loc, to: Loc, len: u64) {
            let mut buf = vec![0; len as usize];
            self.read(from, &mut buf);
            self.write(to, &buf);
        }
    }

    /// One rank: its node, its segments, and whether its fabric's workers drive the node
    /// themselves (the node backend: `drive_inline` wakes idle workers after it) or leave
    /// that to the progress thread (whose turn no hand-over brings: only the hand-over's
    /// own wake reaches idle workers). And the flag the epoch's task waits on.
    struct Rank {
        nl: NodeLock,
        mem: Segments,
        workers_drive: bool,
        joined: Mutex<bool>,
        joined_cv: Condvar,
    }

    /// Submits what the locked node wants and feeds each completion back at once (the
    /// job's one rank is every operation's target); where workers drive, then wakes idle
    /// workers for what the node holds, as `driver::drive_inline` does.
    fn drive(r: &Rank, node: &mut Node) {
        let (now, mem) = (Time(1), &r.mem);
        while let Some(c) = node.poll_command() {
            let mut signal = None;
            let value = match c.op {
                Op::Read {
                    remote, local, len, ..
                } => {
                    mem.copy(remote, local, len);
                    0
                }
                Op::Write {
                    remote,
                    pieces,
                    signal: s,
                    ..
                } => {
                    let mut at = remote;
                    for (local, len) in pieces {
                        mem.copy(local, at, len);
                        at.offset += len;
                    }
                    signal = s;
                    0
                }
                Op::Cas {
                    remote,
                    expected,
                    desired,
                    ..
                } => {
                    let old = mem.word(remote);
                    if old == expected {
                        mem.write(remote, &desired.to_le_bytes());
                    }
                    old
                }
                Op::FetchAdd { remote, delta, .. } => {
                    let old = mem.word(remote);
                    mem.write(remote, &old.wrapping_add(delta).to_le_bytes());
                    old
                }
            };
            node.handle_completion(now, c.token, Ok(value), mem);
            if let Some(v) = signal {
                node.handle_signal(now, 0, v, mem);
            }
        }
        if r.workers_drive {
            r.nl.wake_workers_for(node.queued(), false);
        }
    }

    /// Passes the node on after a thread's turn with it, as `report::pass_on` does.
    fn pass_on(r: &Rank, mut node: MutexGuard<'_, Node>) {
        drive(r, &mut node);
        r.nl.unlock(node);
    }

    /// The epoch's one task spawns 2 children: the first it hands over at once and then
    /// waits until another worker ran it (a task that splits its work and joins); the
    /// second spawns one child of its own. 4 tasks, 3 of them spawned.
    const ROOT_CHILDREN: u8 = 2;
    const SPAWNED: u64 = 3;

    /// One rank of a job whose spawned results are summed, its epoch started.
    fn rank(workers_drive: bool) -> Rank {
        let mut cfg = RuntimeConfig::default();
        cfg.overlay.ranks = 1;
        cfg.core.spawning = Some(Spawning::reduced(vec![ReduceOp::Sum]));
        let overlay = Overlay::new(cfg.overlay.clone()).unwrap();
        let mut node = Node::new(cfg.core, overlay, 0).unwrap();
        let mem = Segments(std::sync::Mutex::new(
            node.segment_sizes()
                .iter()
                .map(|&n| vec![0; n as usize])
                .collect(),
        ));
        node.init_memory(&mem);
        let root = NewTask {
            payload: vec![ROOT_CHILDREN],
            ..NewTask::default()
        };
        node.start_epoch(Time(0), vec![root], &mem).unwrap();
        Rank {
            nl: NodeLock::new(node),
            mem,
            workers_drive,
            joined: Mutex::new(false),
            joined_cv: Condvar::new(),
        }
    }

    /// Runs `task` (payload: how many children; child i spawns i): its first child is
    /// handed over while it runs (`TaskCtx::hand_over`), the rest as it ends, then its
    /// result: the epoch task's a name, a spawned task's the 1 it adds to the sum.
    fn run(r: &Rank, task: &Task) {
        let root = task.index != titus_core::spawn::SPAWNED_INDEX;
        let mut children: Vec<NewTask> = (0..task.payload[0])
            .map(|i| NewTask {
                key: u64::from(i) + if root { 100 } else { 0 },
                payload: vec![i],
                ..NewTask::default()
            })
            .collect();
        let (nl, mem, now) = (&r.nl, &r.mem, Time(1));
        if !children.is_empty() {
            let mut first = vec![children.remove(0)];
            let mut node = nl.lock();
            nl.hand_over(&mut node, now, task.id(), &mut first, mem, false);
            pass_on(r, node);
        }
        if root {
            // Joins its first child: another worker must have been woken for it.
            let mut joined = r.joined.lock().unwrap();
            while !*joined {
                joined = r.joined_cv.wait(joined).unwrap();
            }
        } else if task.key == 100 {
            *r.joined.lock().unwrap() = true;
            r.joined_cv.notify_all();
        }
        let mut node = nl.lock();
        nl.hand_over(&mut node, now, task.id(), &mut children, mem, false);
        let result = if root {
            b"root".to_vec()
        } else {
            1u64.to_le_bytes().to_vec()
        };
        node.task_done(now, task.id(), Ok(result), 1, mem);
        pass_on(r, node);
    }

    /// A worker, as `worker::run` goes: takes one task at a time from the node and passes
    /// the node on (a take that finds nothing may end the epoch); with nothing taken,
    /// waits for work unless tasks came meanwhile; leaves once the runtime closes.
    fn worker(r: &Rank) {
        let one = GrainTake {
            min: 1,
            max: 1,
            budget_ns: 0,
        };
        while !r.nl.closing() {
            let mut node = r.nl.lock();
            let task = node.take_grain(Time(1), one, &r.mem).pop();
            pass_on(r, node);
            match task {
                Some(task) => run(r, &task),
                None => {
                    let node = r.nl.lock();
                    if node.queued() == 0 {
                        r.nl.wait_for_work(node, Duration::from_millis(16));
                    }
                }
            }
        }
    }

    /// The coroutines' stacks: the node's epoch start runs deeper than loom's default.
    const STACK: usize = 8 << 20;

    fn spawn(f: impl FnOnce() + Send + 'static) -> loom::thread::JoinHandle<()> {
        loom::thread::Builder::new()
            .stack_size(STACK)
            .spawn(f)
            .unwrap()
    }

    /// The user thread: starts the epoch on a rank with two workers, waits for its end,
    /// takes its results and closes the runtime.
    fn user(workers_drive: bool) {
        let r = Arc::new(rank(workers_drive));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                spawn(move || worker(&r))
            })
            .collect();
        let mut node = r.nl.lock();
        while !node.is_done() {
            node = r.nl.wait_for_end(node, Duration::from_millis(50));
        }
        let out = node.take_epoch_results().expect("the epoch ends");
        drop(node);
        r.nl.close();
        for w in workers {
            w.join().unwrap();
        }
        // Every spawned task ran once (their 1s sum to their count), and the epoch's own
        // task's result came home: the end came after all of them.
        assert_eq!(out.reduced, vec![SPAWNED], "spawned tasks run once each");
        assert_eq!(out.results, vec![b"root".to_vec()]);
    }

    fn check(workers_drive: bool) {
        // Two preemptions a run unless LOOM_MAX_PREEMPTIONS says (3 passes in 19 s of a
        // release build on 2 cores; CI's debug build runs 2 in about a second).
        let mut model = loom::model::Builder::new();
        model.preemption_bound = model.preemption_bound.or(Some(2));
        model.check(move || spawn(move || user(workers_drive)).join().unwrap());
    }

    #[test]
    fn a_growing_bag_ends_after_its_last_task_and_no_wake_is_lost_where_workers_drive() {
        check(true);
    }

    #[test]
    fn a_growing_bag_ends_after_its_last_task_and_no_wake_is_lost_where_the_progress_thread_drives()
    {
        check(false);
    }
}
