//! Opening a rank: in process, from the launcher's environment, from an exchange, and the
//! fabric's segments it registers.

use super::*;
use crate::config::{resolve_trace, validate, with_mapper};
use crate::local_gather::{LocalGather, LocalMember};
use crate::shared::{Figures, ProgressSide, Registered, ResourceSide, WorkerSleep};

/// The fabric configuration for `node`: TASKS and INBOX exposed to every rank this one
/// talks to — its out- and in-neighbours (thieves, result senders and next hops, which
/// also signal back, e.g. an inbox reset), its tree neighbours and (work sharing) its
/// group — the same set it connects to; OUTBOX private.
pub(crate) fn fabric_config(node: &Node, overlay: &Overlay, cfg: &RuntimeConfig) -> FabricConfig {
    let sizes = node.segment_sizes();
    let in_neighbours = overlay.in_neighbours(node.rank());
    let readers = node.peers(&in_neighbours);
    // The epoch start's searches read the records of whichever ranks their data leads
    // to (`titus_core::start`): every rank is addressable. Beyond the eager size every
    // connection is made on first contact.
    let size = overlay.ranks();
    let peers: Vec<u32> = (0..size).filter(|&r| r != node.rank()).collect();
    let spec = |name: &str, len: u64, exposure: Exposure| SegmentSpec {
        name: name.into(),
        len,
        exposure,
    };
    FabricConfig {
        segments: vec![
            spec("tasks", sizes[0], Exposure::Peers(readers.clone())),
            spec("inbox", sizes[1], Exposure::Peers(readers)),
            spec("outbox", sizes[2], Exposure::Peers(Vec::new())),
            spec("start", sizes[3], Exposure::All),
        ],
        peers,
        lazy: cfg.lazy_connect.unwrap_or_else(|| {
            titus_core::connects_lazily(overlay) || size > titus_core::EAGER_RANKS_MAX
        }),
        op_timeout: cfg.op_timeout,
    }
}

/// Refuses a rank whose segments need more memory than the process has: their sizes come
/// from options (a payload's room × the shared slots), and a segment past the memory
/// ends in an allocation abort or, in `/dev/shm`, a SIGBUS once written.
pub(crate) fn segments_fit(fcfg: &FabricConfig) -> Result<(), RuntimeError> {
    titus_fabric::mem::segments_fit(&fcfg.segments).map_err(|(need, have)| {
        let sizes: Vec<String> = fcfg
            .segments
            .iter()
            .map(|s| format!("{} {:.2} GiB", s.name, s.len as f64 / f64::from(1u32 << 30)))
            .collect();
        RuntimeError::Config(format!(
            "this rank's segments need {need:.1} GiB ({}), more than the {have:.1} GiB of \
             memory available (a smaller max_payload or shared_capacity)",
            sizes.join(", ")
        ))
    })
}

impl Runtime {
    /// A job of `ranks` ranks in this process over the in-process fabric (the laptop
    /// default and the test double): one runtime per rank, to be driven from one thread
    /// each (`run_epoch` is collective).
    ///
    /// Fails (a configuration error) past [`LOCAL_THREADS_MAX`] threads, or where the
    /// ranks' segments would not fit in the memory available.
    pub fn local(
        ranks: u32,
        mut cfg: RuntimeConfig,
        options: MemOptions,
    ) -> Result<Vec<Runtime>, RuntimeError> {
        validate(&cfg)?;
        resolve_trace(&mut cfg);
        if cfg.workers == 0 {
            cfg.workers = cores::default_workers(ranks);
        }
        // Each rank runs its workers and a progress thread in this process.
        let threads = u64::from(ranks) * (cfg.workers as u64 + 1);
        if threads > LOCAL_THREADS_MAX {
            return Err(RuntimeError::Config(format!(
                "{ranks} in-process ranks × ({} workers + a progress thread) = {threads} \
                 threads, more than {LOCAL_THREADS_MAX} in one process (fewer ranks or \
                 workers; ranks as processes: titus launch; thousands of ranks: titus sim)",
                cfg.workers
            )));
        }
        cfg.overlay.ranks = ranks;
        let overlay =
            Overlay::new(cfg.overlay.clone()).map_err(|e| RuntimeError::Config(e.to_string()))?;
        let nodes: Vec<Node> = (0..ranks)
            .map(|r| {
                Ok(with_mapper(
                    Node::new(cfg.core.clone(), overlay.clone(), r)?,
                    &cfg,
                ))
            })
            .collect::<Result<_, CoreError>>()?;
        let configs = nodes
            .iter()
            .map(|n| fabric_config(n, &overlay, &cfg))
            .collect();
        let fabrics = mem::world(configs, options)?;
        let gather = Arc::new(LocalGather::new(ranks as usize));
        // Every rank's layout is written before any rank starts (no barrier needed here).
        for (node, fabric) in nodes.iter().zip(&fabrics) {
            node.init_memory(&SegMem(&**fabric));
        }
        nodes
            .into_iter()
            .zip(fabrics)
            .map(|(node, fabric)| {
                let member = LocalMember {
                    gather: gather.clone(),
                    rank: node.rank(),
                };
                let gather: AllGatherFn =
                    Box::new(move |blob| member.gather.gather(member.rank, blob));
                Self::start(fabric, node, cfg.clone(), gather, Vec::new(), false)
            })
            .collect()
    }

    /// This process's rank of a job started by a launcher (any of
    /// [`titus_fabric::bootstrap::LAUNCHERS`]: `titus launch`, srun, mpirun, Hydra), over
    /// the multi-process `backend`; with [`Backend::Mem`], a single rank without a launcher
    /// runs alone over the in-process fabric. Collective: every rank calls it.
    pub fn from_env(cfg: RuntimeConfig, backend: Backend) -> Result<Runtime, RuntimeError> {
        let env = JobEnv::from_env().map_err(FabricError::from)?;
        Self::from_job(cfg, backend, env)
    }

    /// [`Runtime::from_env`] for a job described by `env` (for example
    /// [`JobEnv::session`] for a second runtime in the same processes).
    pub fn from_job(
        mut cfg: RuntimeConfig,
        backend: Backend,
        env: JobEnv,
    ) -> Result<Runtime, RuntimeError> {
        validate(&cfg)?;
        resolve_trace(&mut cfg);
        let local_ranks = env.ranks_on_node();
        cfg.overlay.ranks = env.size;
        let (opener, provider) = match backend {
            Backend::Mem if env.size == 1 => {
                let mut v = Self::local(1, cfg, MemOptions::default())?;
                return Ok(v.remove(0));
            }
            Backend::Mem => {
                return Err(RuntimeError::Config(
                    "the mem backend runs every rank in one process: use Runtime::local, or the ofi backend under a launcher".into(),
                ));
            }
            Backend::Fabric { name, provider } => (backend::opener(&name)?, provider),
        };
        let exchange = bootstrap::join(&env).map_err(FabricError::from)?;
        Self::over_fabric(
            cfg,
            env.rank,
            env.size,
            exchange,
            opener,
            provider.as_deref(),
            local_ranks,
        )
    }

    /// This rank of a job whose ranks exchange addresses through `exchange` (for example
    /// an MPI solver's own communicator), over the multi-process `backend` (for example
    /// [`Backend::ofi`]`(None)`: libfabric, automatic provider); rank and size are the
    /// exchange's. No rendezvous and no launcher variables are needed. Collective: every
    /// rank calls it. The exchange is also the barrier between epochs, called from the
    /// thread that calls [`Runtime::run_epoch`].
    pub fn from_exchange(
        mut cfg: RuntimeConfig,
        backend: Backend,
        exchange: Box<dyn Exchange>,
    ) -> Result<Runtime, RuntimeError> {
        validate(&cfg)?;
        resolve_trace(&mut cfg);
        let local_ranks = cores::ranks_on_node_from_env()?;
        let Backend::Fabric { name, provider } = backend else {
            return Err(RuntimeError::Config(
                "the mem backend runs every rank in one process: an exchange joins ranks of separate processes".into(),
            ));
        };
        let opener = backend::opener(&name)?;
        let (rank, size) = (exchange.rank(), exchange.size());
        if size == 0 || rank >= size {
            return Err(RuntimeError::Config(format!(
                "the exchange says rank {rank} of {size} ranks"
            )));
        }
        cfg.overlay.ranks = size;
        Self::over_fabric(
            cfg,
            rank,
            size,
            Some(exchange),
            opener,
            provider.as_deref(),
            local_ranks,
        )
    }

    /// Opens this rank over a multi-process backend and starts it; `local_ranks`: the
    /// ranks on this node as the launcher says, for the default worker count where the
    /// CPU masks cannot be read ([`cores`]).
    pub(crate) fn over_fabric(
        mut cfg: RuntimeConfig,
        rank: u32,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        opener: &dyn Opener,
        provider: Option<&str>,
        local_ranks: u32,
    ) -> Result<Runtime, RuntimeError> {
        let overlay =
            Overlay::new(cfg.overlay.clone()).map_err(|e| RuntimeError::Config(e.to_string()))?;
        let node = with_mapper(Node::new(cfg.core.clone(), overlay.clone(), rank)?, &cfg);
        let fcfg = fabric_config(&node, &overlay, &cfg);
        segments_fit(&fcfg)?;
        // Whose liveness it watches: the ranks it works with (every rank is addressable
        // for the start's searches, but a sweep of all would cost O(N)).
        let peers = node.peers(&overlay.in_neighbours(rank));
        let lazy = fcfg.lazy;
        let Opened { fabric, all_gather } = opener.open(rank, size, exchange, fcfg, provider)?;
        let gather: AllGatherFn = Box::new(move |blob| all_gather(blob).map_err(|e| e.to_string()));
        node.init_memory(&SegMem(&*fabric));
        // The start-up barrier (every rank wrote its layout before anyone may touch it)
        // carries every rank's node and CPUs, for the default worker count: gathered
        // whether or not this rank needs them (the ranks' options may differ).
        let mine = cores::placement(
            &titus_fabric::bootstrap::node_identity(),
            &titus_fabric::bootstrap::cpu_affinity().unwrap_or_default(),
        );
        let placements = gather(&mine).map_err(RuntimeError::Barrier)?;
        if cfg.workers == 0 {
            cfg.workers = cores::workers_among(rank as usize, &placements, local_ranks)?;
        }
        Self::start(fabric, node, cfg, gather, peers, lazy)
    }

    /// Starts the threads (every rank's layout is written).
    pub(crate) fn start(
        fabric: Arc<dyn Fabric>,
        node: Node,
        cfg: RuntimeConfig,
        gather: AllGatherFn,
        peers: Vec<u32>,
        lazy: bool,
    ) -> Result<Runtime, RuntimeError> {
        let rank = fabric.rank();
        let size = fabric.size();
        let cycles = titus_proc::Cycles::detect();
        let origin = Instant::now();
        let cycle_origin = cycles.map(|c| (c, c.read()));
        let trace = cfg
            .trace
            .as_ref()
            .map(|d| crate::trace::Recorder::open(d, rank, cfg.workers, origin))
            .transpose()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let shared = Arc::new(Shared {
            node: crate::node_lock::NodeLock::new(node),
            origin,
            cycle_origin,
            trace,
            cfg: cfg.clone(),
            policy: titus_core::WorkerPolicy::new(cfg.grain(), cfg.worker_batch),
            inline: fabric.caps().immediate,
            serve: fabric.caps().workers_serve(),
            lazy: lazy && fabric.connects_lazily(),
            peers,
            epoch_running: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            workers: WorkerSleep {
                busy: std::sync::atomic::AtomicUsize::new(0),
            },
            kinds: Registered {
                fns: RwLock::new(Vec::new()),
                version: std::sync::atomic::AtomicU64::new(0),
            },
            progress: ProgressSide {
                deadline: std::sync::atomic::AtomicU64::new(0),
                open: Mutex::new(Default::default()),
                submitting: std::sync::atomic::AtomicU64::new(0),
                submitting_peer: std::sync::atomic::AtomicU32::new(0),
                contacts: contacts::Contacts::new(rank, size),
            },
            res: ResourceSide {
                state: Mutex::new(None),
                added: AtomicBool::new(false),
                cv: Condvar::new(),
                wake: Mutex::new(false),
                epoch: std::sync::atomic::AtomicU64::new(0),
            },
            figures: Figures {
                busy_ns: std::sync::atomic::AtomicU64::new(0),
                between_ns: std::sync::atomic::AtomicU64::new(0),
                betweens: std::sync::atomic::AtomicU64::new(0),
                last_task_end: std::sync::atomic::AtomicU64::new(0),
                idle_spans: Mutex::new(Vec::new()),
                timings: tracing::enabled!(tracing::Level::DEBUG),
                progress_cpu: std::sync::OnceLock::new(),
            },
            fabric,
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("titus-progress-{rank}"))
                .spawn(move || driver::run(&s))
                .map_err(|e| {
                    RuntimeError::Config(format!("cannot start the progress thread: {e}"))
                })?,
        );
        threads.extend(worker::spawn(&shared, cfg.workers, rank)?);
        Ok(Runtime {
            shared,
            gather,
            history: crate::history::History::default(),
            measured: std::sync::atomic::AtomicBool::new(false),
            threads,
            res_thread: Mutex::new(None),
            rank,
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use titus_fabric::{Exposure, SegmentSpec};

    /// Options that size a segment past the memory (`max_payload` × `shared_capacity`)
    /// are refused at open, naming the segments, not left to abort an allocation.
    #[test]
    fn segments_past_the_memory_are_refused_naming_them() {
        let fcfg = |len: u64| FabricConfig {
            segments: vec![SegmentSpec {
                name: "tasks".into(),
                len,
                exposure: Exposure::Peers(Vec::new()),
            }],
            peers: Vec::new(),
            lazy: false,
            op_timeout: Duration::from_secs(1),
        };
        assert!(segments_fit(&fcfg(1 << 20)).is_ok());
        if titus_fabric::mem::available_memory().is_some() {
            let e = segments_fit(&fcfg(1 << 60)).unwrap_err().to_string();
            assert!(e.contains("segments need") && e.contains("tasks"), "{e}");
        }
    }
}
