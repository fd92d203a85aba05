//! The runtime's configuration: workers, the core's and the overlay's settings, mappers,
//! and the checks before a rank opens.

use super::*;

/// A task function: payload in (with the running task's context, through which it may
/// spawn), result out, or why the task failed (which fails the epoch on every rank with
/// [`CoreError::TaskFailed`] carrying that text).
pub type TaskFn =
    Arc<dyn Fn(&mut crate::TaskCtx<'_>, &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// Runtime configuration; every rank of a job must agree on `core` and `overlay`.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Worker threads; 0 (the default): this rank's share of the node,
    /// `max(1, cores this process may use / ranks on this node)` ([`cores`]), where the
    /// ranks on this node are the launcher's count for a launched rank and all of them for
    /// [`Runtime::local`].
    pub workers: usize,
    /// Protocol tunables.
    pub core: CoreConfig,
    /// Overlay parameters (`ranks` is set from the job).
    pub overlay: OverlayParams,
    /// Timeout of every remote operation: a peer that does not answer within it fails the
    /// epoch on every rank.
    pub op_timeout: Duration,
    /// An epoch that lasts longer fails (None: no limit).
    pub epoch_timeout: Option<Duration>,
    /// Tasks a worker takes from the node at once (at least).
    pub worker_batch: usize,
    /// A worker's grain: beyond `worker_batch`, it takes more tasks while their estimated
    /// costs sum within this, and reports its results once per grain — one lock of the
    /// node per grain instead of one per task (zero: one task, one report, at a time).
    /// Tasks of unknown cost are taken one at a time beyond `worker_batch`. None: 25 µs
    /// per worker of the rank, at most 200 µs ([`RuntimeConfig::grain`]).
    pub worker_grain: Option<Duration>,
    /// The longest nap of the progress thread on fabrics that must poll (libfabric shm)
    /// while this rank shares work or waits for its operations (1 ms otherwise): it bounds
    /// the latency of remote operations on this rank, and each nap costs CPU that workers
    /// would use (`Progress::set_progress_nap`).
    pub epoch_nap: Duration,
    /// Where each rank writes its timeline, one JSON line per epoch (`titus trace DIR`
    /// merges them); None: `TITUS_TRACE` if set, else no trace.
    pub trace: Option<std::path::PathBuf>,
    /// Each rank's mapper (its stealing policy, [`titus_core::mapper`]); `None`: the
    /// core's default.
    pub mapper: Option<Mappers>,
    /// Connect each fabric peer on first contact (`true`) or all when the fabric opens
    /// (`false`); `None`: on first contact exactly where the overlay is the complete
    /// graph (`random`, `master`, `hierarchical`: every rank a peer, few ever contacted)
    /// of more than [`titus_core::EAGER_RANKS_MAX`] ranks ([`titus_core::connects_lazily`]).
    pub lazy_connect: Option<bool>,
}

/// Makes the mapper of each rank this process runs (one for a launched rank, every rank
/// of [`Runtime::local`]).
#[derive(Clone)]
pub struct Mappers(pub Arc<dyn Fn(u32) -> Box<dyn Mapper> + Send + Sync>);

impl std::fmt::Debug for Mappers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mappers(..)")
    }
}

impl Mappers {
    /// Rank `rank`'s mapper.
    fn make(&self, rank: u32) -> Box<dyn Mapper> {
        (self.0)(rank)
    }
}

/// Gives `node` the configured mapper, if any.
pub(crate) fn with_mapper(mut node: Node, cfg: &RuntimeConfig) -> Node {
    if let Some(m) = &cfg.mapper {
        node.set_mapper(m.make(node.rank()));
    }
    node
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            workers: 0,
            core: CoreConfig::default(),
            overlay: OverlayParams::default(),
            op_timeout: Duration::from_secs(30),
            epoch_timeout: None,
            worker_batch: 1,
            worker_grain: None,
            epoch_nap: Duration::from_micros(200),
            trace: None,
            mapper: None,
            lazy_connect: None,
        }
    }
}

impl RuntimeConfig {
    /// A worker's grain ([`RuntimeConfig::worker_grain`]): by default
    /// [`titus_core::default_worker_grain`] of the rank's workers (the simulator's rule too).
    pub fn grain(&self) -> Duration {
        self.worker_grain
            .unwrap_or_else(|| titus_core::default_worker_grain(self.workers))
    }

    /// Sets the overlay, routing, protocol and sharing that `balancing` needs in a job of
    /// `ranks` ranks ([`Balancing::apply`]); hierarchical groups are balanced over `loads`
    /// (None: every rank the same).
    pub fn balance(
        &mut self,
        balancing: Balancing,
        ranks: u32,
        loads: Option<&[u64]>,
    ) -> Result<(), RuntimeError> {
        balancing.apply(&mut self.core, &mut self.overlay, ranks, loads)?;
        Ok(())
    }
}

/// The trace directory: the configuration's, else `TITUS_TRACE`'s; tracing keeps the
/// core's failed steals too ([`titus_core::Config::timeline`]).
pub(crate) fn resolve_trace(cfg: &mut RuntimeConfig) {
    if cfg.trace.is_none() {
        cfg.trace = titus_fabric::env_var::non_blank(titus_fabric::env_var::TRACE)
            .map(std::path::PathBuf::from);
    }
    cfg.core.timeline |= cfg.trace.is_some();
}

pub(crate) fn validate(cfg: &RuntimeConfig) -> Result<(), RuntimeError> {
    if cfg.worker_batch == 0 {
        return Err(RuntimeError::Config(
            "worker_batch must be at least 1".into(),
        ));
    }
    if let Some(g) = cfg.worker_grain
        && g > Duration::from_secs(1)
    {
        return Err(RuntimeError::Config(format!(
            "worker_grain {g:?} is above 1 s: what a worker holds, no other rank can steal"
        )));
    }
    Ok(())
}

/// Threads [`Runtime::local`] starts at most (every rank's workers and progress thread):
/// past this an in-process job only oversubscribes the machine — thousands of ranks are
/// the simulator's (`titus sim`) or processes' (`titus launch`).
pub const LOCAL_THREADS_MAX: u64 = 4096;
