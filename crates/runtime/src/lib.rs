//! The Titus runtime: one per rank (node, socket or core).
//!
//! ```text
//!  user thread ── run_epoch(tasks) ──┐          ┌── worker 0 ─ deque ─┐
//!                                    ▼          │   worker 1 ─ deque ─┤ steal from
//!                      ┌──────── Node (core) ◄──┤   ...               │ each other
//!                      │  queue, shared set,    │   (take batches, run, report)
//!                      │  results, termination  └──────────────────────┘
//!                      ▼
//!            progress thread: commands → fabric; completions, signals, timers → node
//! ```
//!
//! The protocol is the sans-IO [`titus_core::Node`]; the runtime only drives it. The
//! progress thread serves everything remote — steals from this rank's shared set,
//! results passing through, the termination tree — so none of it waits for a task to
//! end, and it blocks in the fabric while idle. Workers hold a few tasks each in
//! crossbeam deques, steal from each other inside the process first, and take more from
//! the node's queue (the rank's private set) only when the process runs dry.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod config;
mod contacts;
pub mod cores;
mod driver;
mod epoch;
mod error;
mod history;
mod local_gather;
mod node_lock;
mod open;
mod output;
mod report;
pub mod resources;
mod shared;
mod sync;
mod task_clock;
mod task_ctx;
mod thread_cpu;
pub mod trace;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use titus_core::{Config as CoreConfig, Loc, Mapper, Memory, Node, Time};
use titus_fabric::backend::{Opened, Opener};
use titus_fabric::bootstrap::{self, Exchange, JobEnv};
use titus_fabric::mem::{self, MemOptions};
use titus_fabric::{Exposure, Fabric, FabricConfig, FabricError, SegmentSpec};
use titus_overlay::Overlay;

pub use backend::{AUTO, AUTO_NAME, Auto, BACKENDS, Backend, MEM, backend_names};
pub use config::{LOCAL_THREADS_MAX, Mappers, RuntimeConfig, TaskFn};
pub use error::RuntimeError;
pub use local_gather::AllGatherFn;
pub use output::{Connections, EpochOutput, TaskIn};
pub use resources::{Completions, Emulated, Executor, Waker};
pub(crate) use shared::{SegMem, Shared, lock};
pub use task_ctx::TaskCtx;
pub use titus_core::EpochStats;
pub use titus_core::layout::PAYLOAD_MAX;
pub use titus_core::resources::{Dispatch, ResourceCounts, Variants};
pub use titus_core::spawn::{self, ReduceOp, SpawnError, Spawning};
pub use titus_core::{
    Balancing, CoreError, CostHistory, DONE_GRACE, DiffusionPlan, NewTask, Protocol, Routing,
    Sharing, SpawnedResult, Stats as CoreStats, StealOutcome, repartition::RepartitionPlan,
};
pub use titus_overlay::{OverlayParams, SHORTCUTS_MAX, ShortcutDraw};

/// One rank's runtime.
pub struct Runtime {
    shared: Arc<Shared>,
    gather: AllGatherFn,
    /// The last measured cost of each task key (diffusion's predictions).
    history: history::History,
    /// Whether an epoch has run to its end here (a repartition plan needs its costs).
    measured: std::sync::atomic::AtomicBool,
    threads: Vec<JoinHandle<()>>,
    /// The resource thread, once a resource is added.
    res_thread: Mutex<Option<JoinHandle<()>>>,
    rank: u32,
    size: u32,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl Runtime {
    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The fabric's description (backend and provider).
    pub fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.shared.fabric
    }

    /// Every rank contributes `blob`; returns all blobs by rank (collective). For small
    /// job-wide exchanges such as gathering statistics, not for the data path.
    pub fn all_gather(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>, RuntimeError> {
        (self.gather)(blob).map_err(RuntimeError::Barrier)
    }

    /// Ends this rank's runtime collectively, as the C ABI's `titus_finalize` does: a
    /// barrier first, so no rank's process leaves (and its memory goes away) while another
    /// still finishes its last epoch or reads it. Dropping a runtime alone is not
    /// collective: a rank that exits right after its last epoch may be seen gone by a peer
    /// whose end of that epoch is still on its way (the peer waits [`DONE_GRACE`] for it,
    /// whether its liveness sweep or a failed steal found this rank gone; a peer whose
    /// end is delayed longer fails its epoch).
    pub fn finalize(self) -> Result<(), RuntimeError> {
        self.all_gather(&[]).map(drop)
    }

    /// Registers the function of task kind `kind` (every rank registers the same kinds:
    /// a stolen task runs wherever it lands).
    pub fn register<F>(&self, kind: u16, f: F)
    where
        F: Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static,
    {
        self.register_fallible(kind, move |p| Ok(f(p)));
    }

    /// [`Runtime::register`] for a function that can fail: its `Err` fails the epoch on
    /// every rank as [`CoreError::TaskFailed`] with that text, quietly (a panic fails it
    /// too, but the panic hook prints it).
    pub fn register_fallible<F>(&self, kind: u16, f: F)
    where
        F: Fn(&[u8]) -> Result<Vec<u8>, String> + Send + Sync + 'static,
    {
        self.register_spawning(kind, move |_, p| f(p));
    }

    /// [`Runtime::register_fallible`] for a function that may spawn tasks through its
    /// [`TaskCtx`] (a job whose `core.spawning` is set; elsewhere a spawn is refused).
    pub fn register_spawning<F>(&self, kind: u16, f: F)
    where
        F: Fn(&mut TaskCtx<'_>, &[u8]) -> Result<Vec<u8>, String> + Send + Sync + 'static,
    {
        let mut k = self
            .shared
            .kinds
            .fns
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if k.len() <= kind as usize {
            k.resize(kind as usize + 1, None);
        }
        k[kind as usize] = Some(Arc::new(f));
        self.shared.kinds.version.fetch_add(1, Ordering::Release);
    }

    /// Fails the epoch running on this rank, and so on every rank (its ABORT floods the
    /// job), with `why`: for a driver whose user asked to stop (an interrupted Python
    /// map). The epoch's caller gets the error at once; a rank between epochs fails its
    /// next one.
    pub fn abort(&self, why: &str) {
        let sh = &self.shared;
        let mut node = sh.lock_node();
        node.interrupt(why.to_string());
        crate::report::pass_on(sh, node);
        sh.node.wake_everyone();
    }

    /// Gives the combine of the job's custom reduction lanes (`Spawning::lanes` all
    /// [`ReduceOp::Custom`]), between epochs, on every rank: for a driver whose combine
    /// comes after the configuration (libtitus's C callback). A Rust job may instead set
    /// it in its configuration, [`Spawning::combined`].
    pub fn set_combine(&self, combine: spawn::Combine) -> Result<(), RuntimeError> {
        self.shared
            .lock_node()
            .set_combine(combine)
            .map_err(RuntimeError::Core)
    }

    /// Adds a resource beside the CPU workers: `executor` takes up to
    /// `capacity` tasks at once of the kinds `variants` names (with their speeds relative
    /// to a worker); each ready task goes to the capable resource the `dispatch` policy
    /// picks (the policy of the first call holds for all). Between epochs only; the name
    /// appears in errors and in [`EpochStats::resources`]. With per-type work requests
    /// (`cfg.core.resource_types`, the same on every rank) its kind set must be one of the
    /// types; the resource thread then tells the node which types have room, so an idle
    /// executor asks victims for its kinds while the workers are busy. Bad input
    /// (capacity 0, a speed ≤ 0, a kind set that is no type) is a [`RuntimeError::Config`]
    /// naming it.
    pub fn add_resource(
        &self,
        name: &str,
        capacity: u32,
        variants: Variants,
        dispatch: Dispatch,
        mut executor: Box<dyn Executor>,
    ) -> Result<(), RuntimeError> {
        let spec = resources::spec(name, capacity, variants);
        spec.validate()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let sh = &self.shared;
        let types = &sh.cfg.core.resource_types;
        if !types.is_empty() && !types.contains(&None) {
            return Err(RuntimeError::Config(format!(
                "the job's resource types {types:?} (core.resource_types) leave out the CPU workers' (every kind: None)"
            )));
        }
        if !types.is_empty() && !types.contains(&spec.kind_set()) {
            return Err(RuntimeError::Config(format!(
                "resource {name:?} runs kinds {:?}, which is none of the job's resource types {types:?} (core.resource_types)",
                spec.kind_set()
            )));
        }
        if sh.epoch_running.load(Ordering::Acquire) {
            return Err(RuntimeError::Config(format!(
                "resource {name:?} added while an epoch runs"
            )));
        }
        executor.set_waker(resources::waker(sh));
        {
            let mut g = lock(&sh.res.state);
            let st = g.get_or_insert_with(|| {
                resources::State::new(
                    titus_core::resources::Resources::new(
                        vec![titus_core::resources::ResourceSpec::cpu(
                            sh.cfg.workers as u32,
                        )],
                        dispatch,
                    )
                    .expect("the CPU workers are a valid resource"),
                )
            });
            let mut specs = st.table.specs().to_vec();
            specs.push(spec);
            st.table = titus_core::resources::Resources::new(specs, st.table.dispatch())
                .map_err(|e| RuntimeError::Config(e.to_string()))?;
            st.bits = titus_core::resources::type_bits(st.table.specs(), types);
            st.executors.push(executor);
        }
        sh.res.added.store(true, Ordering::Release);
        let mut t = lock(&self.res_thread);
        if t.is_none() {
            let s = sh.clone();
            *t = Some(
                std::thread::Builder::new()
                    .name(format!("titus-resources-{}", self.rank))
                    .spawn(move || resources::run(&s))
                    .map_err(|e| {
                        RuntimeError::Config(format!("cannot start the resource thread: {e}"))
                    })?,
            );
        }
        Ok(())
    }

    /// Adds an emulated accelerator ([`Emulated`]: a thread running the registered CPU
    /// variants, its time scaled to `speed` where it can be — documented emulation, for
    /// trying resources without a device) of `capacity` for every kind.
    pub fn add_emulated(
        &self,
        name: &str,
        capacity: u32,
        speed: f64,
        dispatch: Dispatch,
    ) -> Result<(), RuntimeError> {
        resources::spec(name, capacity, Variants::All(speed))
            .validate()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        // Weak: the executor lives in the shared state.
        let weak = Arc::downgrade(&self.shared);
        let rank = self.rank;
        let f: resources::KindFn = Arc::new(move |kind, payload| {
            let sh = weak
                .upgrade()
                .ok_or_else(|| "the runtime is gone".to_string())?;
            let f = {
                let kinds = sh.kinds.fns.read().unwrap_or_else(|p| p.into_inner());
                kinds.get(kind as usize).cloned().flatten()
            };
            match f {
                // An emulated device runs no task that spawns: the context refuses.
                Some(f) => f(
                    &mut TaskCtx::new(rank, 0, None, &mut Vec::new(), None, None),
                    payload,
                ),
                None => Err(format!("no function registered for task kind {kind}")),
            }
        });
        let e = Emulated::new(name, speed, f).map_err(|e| RuntimeError::Config(e.to_string()))?;
        self.add_resource(name, capacity, Variants::All(speed), dispatch, Box::new(e))
    }

    /// The connections this rank made so far and their price ([`Connections`]).
    pub fn connections(&self) -> Connections {
        let sh = &self.shared;
        // Lazily, opening connected nobody (its time is the closing barrier's wait).
        let connect = if sh.lazy {
            sh.progress.contacts.connect_time()
        } else {
            sh.fabric.connect_time()
        };
        Connections {
            contacted: sh.progress.contacts.peers(),
            opened: if sh.lazy {
                Vec::new()
            } else {
                sh.peers.clone()
            },
            connect,
            lazy: sh.lazy,
            bytes_per_connection: sh.fabric.connection_bytes(),
        }
    }

    /// The configuration this runtime runs with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.cfg
    }

    /// Whether task kind `kind` has a registered function.
    pub fn has_kind(&self, kind: u16) -> bool {
        let k = self
            .shared
            .kinds
            .fns
            .read()
            .unwrap_or_else(|p| p.into_inner());
        k.get(kind as usize).is_some_and(Option::is_some)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared.node.close();
        self.shared.res.cv.notify_all();
        if let Some(t) = lock(&self.res_thread).take() {
            let _ = t.join();
        }
        // The executors end their threads.
        drop(lock(&self.shared.res.state).take());
        // A progress thread inside a provider call that does not return within the
        // operation timeout is left behind (detached): joining it would hang the process.
        let give_up = Instant::now() + self.shared.cfg.op_timeout;
        while self.shared.progress.submitting.load(Ordering::Acquire) != 0
            && Instant::now() < give_up
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stuck = self.shared.progress.submitting.load(Ordering::Acquire) != 0;
        for (i, t) in self.threads.drain(..).enumerate() {
            if i == 0 && stuck {
                tracing::warn!("the progress thread is stuck in the fabric provider: left behind");
                continue;
            }
            let _ = t.join();
        }
    }
}
