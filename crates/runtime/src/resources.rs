//! Resources beside the CPU workers: executors that accept submissions and
//! complete them later, dispatched through the core's policy
//! ([`titus_core::resources::Resources`], the same table the simulator drives).
//!
//! The CPU workers are resource 0 (capacity: the workers; unfinished: the workers running
//! a task). A worker that takes a task asks the policy where it goes: to itself, or to an
//! executor with room (submitted, and the worker takes the next task). The *resource
//! thread* (started by the first [`crate::Runtime::add_resource`]) polls the executors —
//! when one wakes it, else every millisecond — reports their completions to the node as
//! a worker reports a task, and refills every executor with room from the node's queue
//! (a task the policy gives the CPU goes to a queue the workers take from first). A
//! failed submission or completion fails the epoch on every rank with the resource's
//! name and its message, as a failed task does.

use crate::{SegMem, Shared, lock};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use titus_core::Task;
use titus_core::resources::{ResourceSpec, Resources};

/// Wakes the resource thread (an executor calls it when a submission completes).
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// Completed submissions: (handle, the task's result or why it failed).
pub type Completions = Vec<(u64, Result<Vec<u8>, String>)>;

/// An executor: accepts task submissions and completes them later (an accelerator's
/// queue; in C a launch and a test callback).
pub trait Executor: Send {
    /// Accepts a task of `kind` with `payload`; its completion comes from
    /// [`Executor::poll`] under the handle returned (unique among those not yet
    /// completed). An `Err` fails the epoch.
    fn submit(&mut self, kind: u16, payload: &[u8]) -> Result<u64, String>;
    /// Appends the submissions completed since the last call, in any order.
    fn poll(&mut self, done: &mut Completions);
    /// Called once, when the resource is added: an executor that calls `wake` when a
    /// submission completes is polled at once (otherwise every millisecond).
    fn set_waker(&mut self, wake: Waker) {
        let _ = wake;
    }
}

/// The CPU variants an emulated accelerator runs: (kind, payload) → result.
pub type KindFn = Arc<dyn Fn(u16, &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// A submission in flight: the task, when it was submitted, in which epoch.
type Inflight = (titus_core::TaskId, Instant, u64);

/// Hashes (resource, handle) keys cheaply and keeps consecutive handles (a GPU's
/// resource numbers its thousands of submissions one after the other) in neighbouring
/// slots: the low bits are the handle's (XOR the resource's mix), where the table picks a
/// slot, and the top seven, which it compares first, mix every bit. SipHash and a
/// multiplicative hash that scattered them cost a cache miss per insert and per removal.
/// Handles are the executor's own (not a remote peer's): no one picks them to collide.
#[derive(Clone, Copy, Default)]
struct BuildHandleHasher;

#[derive(Default)]
struct HandleHasher(u64);

const HASH_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

impl std::hash::BuildHasher for BuildHandleHasher {
    type Hasher = HandleHasher;
    fn build_hasher(&self) -> HandleHasher {
        HandleHasher(0)
    }
}

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        let top = self.0.wrapping_mul(HASH_MUL) & (0x7F << 57);
        (self.0 & !(0x7F << 57)) | top
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.wrapping_mul(HASH_MUL) ^ v;
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A task a worker takes first: given to the CPU by the resource thread (`true`: counted
/// as submitted to it already).
pub(crate) type Ready = (Task, bool);

/// The rank's resources and what they hold.
pub(crate) struct State {
    pub(crate) table: Resources,
    /// Resource i's executor at i − 1 (the CPU workers have none).
    pub(crate) executors: Vec<Box<dyn Executor>>,
    /// (resource, handle) → the task, when it was submitted, and in which epoch.
    inflight: HashMap<(usize, u64), Inflight, BuildHandleHasher>,
    /// Tasks for the workers, before their deques.
    pub(crate) ready: VecDeque<Ready>,
    /// With resource types: each resource's type bit (`type_bits`, set as resources are
    /// added), and the (types, types with room) last stated to the node.
    pub(crate) bits: Vec<u64>,
    stated: (u64, u64),
}

impl State {
    pub(crate) fn new(table: Resources) -> Self {
        Self {
            table,
            executors: Vec::new(),
            inflight: HashMap::default(),
            ready: VecDeque::new(),
            bits: Vec::new(),
            stated: (0, 0),
        }
    }
}

/// Where a task a worker took goes: `Some(task)`: this worker runs it (counted on the
/// CPU); `None`: submitted to an executor (or failed there, reported).
pub(crate) fn dispatch(sh: &Shared, task: Task) -> Option<Task> {
    let mut guard = lock(&sh.res.state);
    let st = guard.as_mut()?;
    let id = st.table.select(task.kind).unwrap_or(0);
    st.table.submit(id);
    if id == 0 {
        return Some(task);
    }
    if let Some((task, why)) = submit(sh, st, id, task) {
        drop(guard);
        crate::report::report_all(sh, [(task.id(), Err(why), 1)]);
    }
    None
}

/// Submits `task` to executor `id` (counted already); on failure gives back the task and
/// why, its resource completed.
fn submit(sh: &Shared, st: &mut State, id: usize, task: Task) -> Option<(Task, String)> {
    let name = st.table.specs()[id].name.clone();
    match st.executors[id - 1].submit(task.kind, &task.payload) {
        Ok(h) if st.inflight.contains_key(&(id, h)) => {
            st.table.complete(id);
            Some((
                task,
                format!(
                    "resource {name:?} gave handle {h} to a new task while an earlier one with it is unfinished"
                ),
            ))
        }
        Ok(h) => {
            let epoch = sh.res.epoch.load(Ordering::Acquire);
            st.inflight
                .insert((id, h), (task.id(), Instant::now(), epoch));
            None
        }
        Err(e) => {
            st.table.complete(id);
            Some((task, format!("resource {name:?} refused the task: {e}")))
        }
    }
}

/// A worker finished a task it ran.
pub(crate) fn cpu_done(sh: &Shared) {
    if let Some(st) = lock(&sh.res.state).as_mut() {
        st.table.complete(0);
    }
}

/// A task the resource thread left for the workers.
pub(crate) fn take_ready(sh: &Shared) -> Option<Ready> {
    lock(&sh.res.state).as_mut()?.ready.pop_front()
}

/// The resource thread: reap completions, refill executors with room, wait.
pub(crate) fn run(sh: &Shared) {
    let mut done = Completions::new();
    while !sh.closing() {
        reap(sh, &mut done);
        fill(sh);
        let g = lock(&sh.res.wake);
        if !*g {
            let (mut g, _) = sh
                .res
                .cv
                .wait_timeout(g, Duration::from_millis(1))
                .unwrap_or_else(|p| p.into_inner());
            *g = false;
        } else {
            drop(g);
            *lock(&sh.res.wake) = false;
        }
    }
}

/// Reports every completion to the node (those of an earlier, failed epoch are dropped).
fn reap(sh: &Shared, done: &mut Completions) {
    let mut reports = Vec::new();
    {
        let mut guard = lock(&sh.res.state);
        let Some(st) = guard.as_mut() else { return };
        let epoch = sh.res.epoch.load(Ordering::Acquire);
        let now = Instant::now();
        for i in 0..st.executors.len() {
            done.clear();
            st.executors[i].poll(done);
            let id = i + 1;
            for (h, r) in done.drain(..) {
                let Some((task, at, e)) = st.inflight.remove(&(id, h)) else {
                    tracing::warn!(
                        "resource {:?} completed handle {h}, which it was not given",
                        st.table.specs()[id].name
                    );
                    continue;
                };
                st.table.complete(id);
                if e != epoch {
                    continue;
                }
                let name = &st.table.specs()[id].name;
                let r = r.map_err(|why| format!("resource {name:?} failed the task: {why}"));
                let cost = now.saturating_duration_since(at).as_nanos() as u64;
                reports.push((task, r, cost.max(1)));
            }
        }
    }
    if !reports.is_empty() {
        crate::report::report_all(sh, reports);
    }
}

/// Most tasks the resource thread takes from the node at once for executors with room
/// (one lock of the node for them all; a GPU that batches is fed thousands per step).
const FILL_CHUNK: u32 = 64;

/// Takes tasks from the node while an executor has room, dispatching each: with resource
/// types, only tasks an executor with room can run, after telling the node which types
/// have room (it asks victims for their work when the queue holds none).
fn fill(sh: &Shared) {
    let typed = !sh.cfg.core.resource_types.is_empty();
    loop {
        if !sh.epoch_running.load(Ordering::Acquire) {
            return;
        }
        // With resource types: what changed in the types with room (stated to the node,
        // which asks victims for their work when the queue holds none) and the kinds the
        // executors with room run.
        let (state, kinds, room) = {
            let mut g = lock(&sh.res.state);
            let Some(st) = g.as_mut() else { return };
            // Up to FILL_CHUNK tasks for the executors' room (none while tasks wait for
            // the workers).
            let room = if st.ready.is_empty() {
                (1..st.table.specs().len())
                    .map(|i| st.table.room(i))
                    .fold(0u32, u32::saturating_add)
                    .min(FILL_CHUNK) as usize
            } else {
                0
            };
            let (mut state, mut kinds) = (None, None);
            if typed {
                let now = (
                    st.bits.iter().fold(0, |a, b| a | b),
                    st.table.room_types(&st.bits, 1),
                );
                if now != st.stated {
                    st.stated = now;
                    state = Some(now);
                }
                kinds = st.table.room_kinds(1);
            }
            (state, kinds, room)
        };
        if let Some((mine, idle)) = state {
            // Not under the resources' lock: workers take it while holding the node's.
            let mem = SegMem(&*sh.fabric);
            let mut node = sh.lock_node();
            node.set_resource_types(sh.now(), mine, idle, &mem);
            let wake = node.has_commands();
            drop(node);
            if wake {
                sh.fabric.wake();
            }
        }
        if room == 0 {
            return;
        }
        let tasks = {
            let mem = SegMem(&*sh.fabric);
            let mut node = sh.lock_node();
            let set = kinds;
            let t = node.take_tasks_for(sh.now(), room, &set, &mem);
            let handed = sh.inline && crate::driver::drive_inline(sh, &mut node);
            let wake = handed || node.has_commands();
            crate::report::release(sh, node, wake);
            t
        };
        if tasks.is_empty() {
            return;
        }
        // Each to where the policy sends it; once one goes to the workers (no executor
        // with room runs it, or the policy picks the CPU), the rest follow it there, each
        // dispatched again by the worker that takes it.
        let (mut to_cpu, mut failed) = (false, Vec::new());
        {
            let mut guard = lock(&sh.res.state);
            let Some(st) = guard.as_mut() else { return };
            for task in tasks {
                if to_cpu {
                    st.ready.push_back((task, false));
                    continue;
                }
                match st.table.select(task.kind) {
                    None => {
                        st.ready.push_back((task, false));
                        to_cpu = true;
                    }
                    Some(0) => {
                        st.table.submit(0);
                        st.ready.push_back((task, true));
                        to_cpu = true;
                    }
                    Some(id) => {
                        st.table.submit(id);
                        failed.extend(submit(sh, st, id, task));
                    }
                }
            }
        }
        if !failed.is_empty() {
            crate::report::report_all(sh, failed.into_iter().map(|(t, why)| (t.id(), Err(why), 1)));
        }
        if to_cpu {
            sh.wake_workers();
            return;
        }
    }
}

/// Wakes the resource thread.
pub(crate) fn waker(sh: &Arc<Shared>) -> Waker {
    let weak = Arc::downgrade(sh);
    Arc::new(move || {
        if let Some(sh) = weak.upgrade() {
            *lock(&sh.res.wake) = true;
            sh.res.cv.notify_one();
        }
    })
}

/// The spec of a resource being added.
pub(crate) fn spec(
    name: &str,
    capacity: u32,
    variants: titus_core::resources::Variants,
) -> ResourceSpec {
    ResourceSpec {
        name: name.into(),
        capacity,
        variants,
    }
}

/// An emulated accelerator — **emulation, not a device**: a thread
/// that runs the kind's CPU variant (for its result) and then sleeps until `cost / speed`
/// has passed since it started, `cost` being the CPU variant's measured time; so a speed
/// below 1 is emulated exactly, and a speed above 1 cannot be (the CPU variant takes its
/// own time): such a task completes after its CPU time. Up to `capacity` submissions
/// wait in its queue; they complete in submission order.
pub struct Emulated {
    tx: Option<mpsc::Sender<(u64, u16, Vec<u8>)>>,
    rx: mpsc::Receiver<(u64, Result<Vec<u8>, String>)>,
    next: u64,
    wake: Arc<std::sync::Mutex<Option<Waker>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// An emulated accelerator whose thread could not be started ([`Emulated::new`]): the
/// system refused a thread, so the resource cannot be added.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the emulated accelerator {name:?}: {source}")]
pub struct EmulatedStartError {
    /// The accelerator's name.
    pub name: String,
    /// What starting its thread gave.
    pub source: std::io::Error,
}

impl Emulated {
    /// An emulated accelerator running `f(kind, payload)` (the CPU variants) at `speed`
    /// times a CPU worker.
    pub fn new(name: &str, speed: f64, f: KindFn) -> Result<Self, EmulatedStartError> {
        let (tx, jobs) = mpsc::channel::<(u64, u16, Vec<u8>)>();
        let (out, rx) = mpsc::channel();
        let wake: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let w = wake.clone();
        let thread = std::thread::Builder::new()
            .name(format!("titus-emulated-{name}"))
            .spawn(move || {
                for (h, kind, payload) in jobs {
                    let t = Instant::now();
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        f(kind, &payload)
                    }))
                    .unwrap_or_else(|_| Err("the task panicked".into()));
                    let want = t.elapsed().div_f64(speed);
                    if let Some(rest) = want.checked_sub(t.elapsed()) {
                        std::thread::sleep(rest);
                    }
                    if out.send((h, r)).is_err() {
                        return;
                    }
                    if let Some(w) = lock(&w).as_ref() {
                        w();
                    }
                }
            })
            .map_err(|source| EmulatedStartError {
                name: name.into(),
                source,
            })?;
        Ok(Self {
            tx: Some(tx),
            rx,
            next: 0,
            wake,
            thread: Some(thread),
        })
    }
}

impl std::fmt::Debug for Emulated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulated")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Executor for Emulated {
    fn submit(&mut self, kind: u16, payload: &[u8]) -> Result<u64, String> {
        let h = self.next;
        self.next += 1;
        self.tx
            .as_ref()
            .and_then(|tx| tx.send((h, kind, payload.to_vec())).ok())
            .ok_or_else(|| "the emulated accelerator's thread ended".to_string())?;
        Ok(h)
    }
    fn poll(&mut self, done: &mut Completions) {
        done.extend(self.rx.try_iter());
    }
    fn set_waker(&mut self, wake: Waker) {
        *lock(&self.wake) = Some(wake);
    }
}

impl Drop for Emulated {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
