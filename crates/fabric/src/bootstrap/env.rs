//! The job's environment: what the launcher told this process.
//!
//! Which launcher started this process, and so rank and size, is decided in one place,
//! [`Launcher::detect`], from the variables of [`LAUNCHERS`], first match wins:
//! `TITUS_RANK`/`TITUS_SIZE` (`titus launch`), `SLURM_PROCID`/`SLURM_NTASKS` (srun),
//! `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE` (Open MPI's mpirun), `PMI_RANK`/`PMI_SIZE`
//! (MPICH/Hydra and other PMI launchers); with none, a single rank. Either variable of a
//! pair is enough to name the launcher: a process with only one of them gets an error
//! naming the other, never a silent in-process run. Every program that chooses between
//! in-process ranks and one rank per process (the runtime, the C ABI, the benchmarks,
//! `titus fabric-bench`) asks [`JobEnv::launched`].
//!
//! The same table names where each launcher tells the ranks on this node
//! ([`JobEnv::local_rank`], [`JobEnv::local_size`]): `TITUS_LOCAL_RANK`/`TITUS_LOCAL_SIZE`
//! (`titus launch` starts every rank on this machine), Slurm's `SLURM_LOCALID` and its
//! per-node task counts (`SLURM_STEP_TASKS_PER_NODE` or `SLURM_TASKS_PER_NODE`, lists like
//! `2(x3),1` indexed by `SLURM_NODEID`, else `SLURM_NTASKS_PER_NODE`), Open MPI's
//! `OMPI_COMM_WORLD_LOCAL_RANK`/`OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH/Hydra's
//! `MPI_LOCALRANKID`/`MPI_LOCALNRANKS`. The runtime divides the cores this process may use
//! by the local size to choose its default worker count.

use super::{BootstrapError, SlurmPortError, TaskListError};
use crate::Rank;
use std::time::Duration;

/// Which launcher started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `titus launch`.
    Titus,
    /// Slurm's srun.
    Slurm,
    /// Open MPI's mpirun.
    OpenMpi,
    /// A PMI launcher (MPICH's Hydra, ...).
    Pmi,
    /// None: one rank.
    Single,
}

/// One launcher's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LauncherVars {
    /// The launcher.
    pub launcher: Launcher,
    /// This process's rank in the job.
    pub rank: &'static str,
    /// The job's size.
    pub size: &'static str,
    /// This process's rank among the ranks on its node.
    pub local_rank: &'static str,
    /// The number of ranks on this node. For Slurm, a per-node list (`2(x3),1`) indexed
    /// by `SLURM_NODEID`; see [`slurm_local_size`].
    pub local_size: &'static str,
}

/// Every launcher Titus recognises, with the variables that carry this process's rank, the
/// job's size and the ranks on this node, in the order they are tried.
pub const LAUNCHERS: [LauncherVars; 4] = [
    LauncherVars {
        launcher: Launcher::Titus,
        rank: "TITUS_RANK",
        size: "TITUS_SIZE",
        local_rank: "TITUS_LOCAL_RANK",
        local_size: "TITUS_LOCAL_SIZE",
    },
    LauncherVars {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        local_size: "SLURM_STEP_TASKS_PER_NODE",
    },
    LauncherVars {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_size: "OMPI_COMM_WORLD_LOCAL_SIZE",
    },
    LauncherVars {
        launcher: Launcher::Pmi,
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        local_size: "MPI_LOCALNRANKS",
    },
];

impl Launcher {
    /// Which launcher started this process, reading variables through `get` (the
    /// environment, or a map in tests): the first of [`LAUNCHERS`] with its rank or its
    /// size variable set, [`Launcher::Single`] when none is. Whether the pair is complete
    /// and valid is [`JobEnv::from_vars`]'s to check.
    pub fn detect(get: impl Fn(&str) -> Option<String>) -> Launcher {
        LAUNCHERS
            .iter()
            .find(|v| get(v.rank).is_some() || get(v.size).is_some())
            .map_or(Launcher::Single, |v| v.launcher)
    }

    /// The variables that carry rank and size under this launcher (none for a single
    /// rank).
    pub fn vars(self) -> Option<(&'static str, &'static str)> {
        self.table().map(|v| (v.rank, v.size))
    }

    /// This launcher's row of [`LAUNCHERS`] (none for a single rank).
    pub fn table(self) -> Option<&'static LauncherVars> {
        LAUNCHERS.iter().find(|v| v.launcher == self)
    }
}

/// Which bootstrap the ranks of a job meet through, in the order of choice of
/// [`JobEnv::from_vars`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A single rank: nothing to exchange.
    Alone,
    /// The rendezvous at an explicit `TITUS_BOOTSTRAP` (`titus launch` sets it); always
    /// first, so it also forces the rendezvous where a launcher offers PMIx.
    Explicit,
    /// The launcher's PMIx server (`mpirun`, `srun --mpi=pmix`): no port, no secret.
    Pmix,
    /// Under Slurm without PMIx: the rendezvous on the first node, at the first of the
    /// ports the step reserved (`SLURM_STEP_RESV_PORTS`, `srun --resv-ports`).
    SlurmReserved,
    /// Under Slurm without PMIx or reserved ports: the rendezvous on the first node, at a
    /// port derived from the job and step ([`slurm_port`]), below the kernel's ephemeral
    /// range.
    SlurmDerived,
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Via::Alone => "none (a single rank)",
            Via::Explicit => "the rendezvous at TITUS_BOOTSTRAP",
            Via::Pmix => "PMIx (the launcher's server)",
            Via::SlurmReserved => {
                "the rendezvous at the step's reserved port (SLURM_STEP_RESV_PORTS)"
            }
            Via::SlurmDerived => "the rendezvous at a port derived from the Slurm job and step",
        })
    }
}

/// The variables a PMIx server sets in the environment of the processes it starts, any of
/// which means "started by a PMIx server" ([`pmix_server_var`]).
pub const PMIX_VARS: [&str; 8] = [
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI41",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI",
];

/// The first of [`PMIX_VARS`] set (through `get`): the process was started by a PMIx
/// server, which it can bootstrap through.
pub fn pmix_server_var(get: impl Fn(&str) -> Option<String>) -> Option<&'static str> {
    PMIX_VARS.into_iter().find(|v| get(v).is_some())
}

/// The lowest port of the window [`slurm_port`] derives rendezvous ports from, below
/// Linux's default ephemeral range (32768–60999) and above the ports sites commonly give
/// to Slurm itself (6817–6819) and to `srun --resv-ports` (MpiParams, often 12000–12999).
pub const SLURM_PORT_BASE: u16 = 16_384;
/// The window's size: [`SLURM_PORT_BASE`] up to 32767.
pub const SLURM_PORT_SPAN: u16 = 16_384;
/// Steps of one job that never share a port: step `s` and step `s + 32` of one job, and
/// jobs `j` and `j + 512` at one step, are the only pairs that do.
pub const SLURM_STEPS: u64 = 32;

/// The rendezvous port of Slurm job `job`, step `step`, where no PMIx server and no
/// reserved ports are available: [`SLURM_PORT_BASE`] + (job × [`SLURM_STEPS`] + step mod
/// [`SLURM_STEPS`]) mod [`SLURM_PORT_SPAN`]. Every runtime of a process shares it (one
/// rendezvous per process; the greeting names the runtime), so steps 0..31 of a job and
/// consecutive jobs never meet. `ephemeral` is the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`, [`ephemeral_ports`]): a port inside it is an
/// error (a listener of srun or slurmstepd may hold it), never a silent other choice,
/// since every rank must derive the same port.
pub fn slurm_port(job: u64, step: u64, ephemeral: (u16, u16)) -> Result<u16, SlurmPortError> {
    let slot =
        (job % (u64::from(SLURM_PORT_SPAN) / SLURM_STEPS)) * SLURM_STEPS + step % SLURM_STEPS;
    let port = SLURM_PORT_BASE + (slot % u64::from(SLURM_PORT_SPAN)) as u16;
    let (lo, hi) = ephemeral;
    if (lo..=hi).contains(&port) {
        return Err(SlurmPortError {
            job,
            step,
            port,
            lo,
            hi,
        });
    }
    Ok(port)
}

/// The kernel's ephemeral port range, `/proc/sys/net/ipv4/ip_local_port_range`; Linux's
/// default (32768, 60999) when it cannot be read.
pub fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// The first port of a Slurm reserved-port list (`12000-12003` or `12000,12007`).
pub fn first_reserved_port(list: &str) -> Option<u16> {
    list.trim()
        .split([',', '-'])
        .next()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|&p| p > 0)
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    /// This rank.
    pub rank: Rank,
    /// Number of ranks.
    pub size: u32,
    /// The launcher.
    pub launcher: Launcher,
    /// Which bootstrap the ranks meet through ([`Via`]).
    pub via: Via,
    /// The rendezvous `host:port` (`None` for a single rank and under PMIx).
    pub rendezvous: Option<String>,
    /// Which of the process's runtimes this is (0: the first; [`JobEnv::session`]): the
    /// rendezvous's greeting names it, so one port serves them all.
    pub runtime: u32,
    /// The job secret.
    pub secret: String,
    /// Timeout of every bootstrap wait.
    pub timeout: Duration,
    /// This process's rank among the ranks on its node, if the launcher says (0 for a
    /// single rank).
    pub local_rank: Option<u32>,
    /// The number of ranks on this node, if the launcher says (1 for a single rank).
    pub local_size: Option<u32>,
}

/// Default bootstrap timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most ranks a job may have: the overlay's (`titus_overlay::MAX_RANKS`, which this
/// crate does not depend on; `tests/hostile_inputs.rs` checks that the two agree).
const MAX_JOB_SIZE: u32 = 1 << 30;

/// `titus launch`'s variables that this module reads ([`JobEnv::from_env`] refuses one that
/// is not UTF-8 rather than take it for unset).
const TITUS_VARS: [&str; 7] = [
    "TITUS_RANK",
    "TITUS_SIZE",
    "TITUS_LOCAL_RANK",
    "TITUS_LOCAL_SIZE",
    "TITUS_BOOTSTRAP",
    "TITUS_BOOTSTRAP_TIMEOUT",
    "TITUS_JOB_SECRET",
];

/// The job's size from `var`'s `value`: 1 to [`MAX_JOB_SIZE`].
fn job_size(var: &str, value: String) -> Result<u32, BootstrapError> {
    let bad = |reason: String| BootstrapError::BadVar {
        var: var.into(),
        value: value.clone(),
        reason,
    };
    match value.trim().parse::<u32>() {
        Err(_) => Err(bad("not a non-negative integer".into())),
        Ok(0) => Err(bad("a job has at least one rank".into())),
        Ok(n) if n > MAX_JOB_SIZE => Err(bad(format!(
            "more than the {MAX_JOB_SIZE} ranks a job may have"
        ))),
        Ok(n) => Ok(n),
    }
}

/// Refuses a variable of [`TITUS_VARS`] whose value is not UTF-8: read with
/// `std::env::var(..).ok()` it would count as unset, and the job would silently be
/// another one (a single rank, the default timeout).
fn titus_vars_are_text() -> Result<(), BootstrapError> {
    for var in TITUS_VARS {
        if let Err(std::env::VarError::NotUnicode(raw)) = std::env::var(var) {
            return Err(BootstrapError::BadVar {
                var: var.into(),
                value: raw.to_string_lossy().into_owned(),
                reason: "not valid UTF-8".into(),
            });
        }
    }
    Ok(())
}

impl JobEnv {
    /// The same job for its `session`-th runtime in one process (0: the first). The
    /// rendezvous (one per process, one port) keeps each runtime's ranks apart by this
    /// number, so a runtime never meets the rendezvous rounds of an earlier one whose
    /// threads may still be winding down, and needs no port of its own (a second port,
    /// port + k, was the next Slurm step's). Every rank must use the same session numbers
    /// in the same order. Under PMIx, keys are numbered per process already.
    pub fn session(&self, session: u16) -> Result<Self, BootstrapError> {
        let mut env = self.clone();
        env.runtime = u32::from(session);
        Ok(env)
    }

    /// Whether a launcher started this process: it is one rank of a job whose other ranks
    /// are other processes (even a job of one), so it runs over a multi-process backend,
    /// never in-process ranks.
    pub fn launched(&self) -> bool {
        self.launcher != Launcher::Single || self.via == Via::Pmix
    }

    /// The ranks of this job that share this node: the launcher's figure, or 1 when it
    /// gives none (the rank then counts as alone on its node).
    pub fn ranks_on_node(&self) -> u32 {
        self.local_size.unwrap_or(1)
    }

    /// Reads the process environment; a variable of `titus launch` whose value is not
    /// UTF-8 is an error naming it.
    pub fn from_env() -> Result<Self, BootstrapError> {
        titus_vars_are_text()?;
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a map in tests), with this
    /// build's PMIx client and this node's ephemeral ports.
    ///
    /// Which bootstrap the ranks use ([`Via`]), in order: an explicit `TITUS_BOOTSTRAP`
    /// (the rendezvous); nothing for a single rank; PMIx when a PMIx server started the
    /// process ([`PMIX_VARS`]); under Slurm, the rendezvous on the first node at the
    /// step's first reserved port (`SLURM_STEP_RESV_PORTS`), else at [`slurm_port`]. A
    /// PMIx server in a build without a PMIx client is an error, not a silent fallback.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        Self::from_vars_full(get, titus_pmix_sys::AVAILABLE, ephemeral_ports(), &|| {
            let c = titus_pmix_sys::Client::init()?;
            Ok((c.rank(), c.size()))
        })
    }

    /// [`JobEnv::from_vars`] with whether PMIx is `pmix_available` and the `ephemeral`
    /// port range given (tests play other builds and nodes), no PMIx server to ask.
    pub fn from_vars_with(
        get: impl Fn(&str) -> Option<String>,
        pmix_available: bool,
        ephemeral: (u16, u16),
    ) -> Result<Self, BootstrapError> {
        Self::from_vars_full(get, pmix_available, ephemeral, &|| {
            Err(titus_pmix_sys::Error {
                kind: titus_pmix_sys::ErrorKind::Unavailable,
                status: 0,
                message: "no PMIx server to ask".into(),
            })
        })
    }

    /// [`JobEnv::from_vars_with`] where `pmix_job` asks the PMIx server for this rank and
    /// the job's size: a process that a PMIx server started with none of the launcher
    /// variables Titus knows (a bare `prterun`, another PMIx launcher) takes them from it.
    pub fn from_vars_full(
        get: impl Fn(&str) -> Option<String>,
        pmix_available: bool,
        ephemeral: (u16, u16),
        pmix_job: &dyn Fn() -> Result<(u32, u32), titus_pmix_sys::Error>,
    ) -> Result<Self, BootstrapError> {
        let num = |var: &str, v: String| -> Result<u32, BootstrapError> {
            v.trim().parse::<u32>().map_err(|_| BootstrapError::BadVar {
                var: var.into(),
                value: v.clone(),
                reason: "not a non-negative integer".into(),
            })
        };
        let launcher = Launcher::detect(&get);
        // Started by a PMIx server that set none of the launcher variables: rank and size
        // come from the server (unless the rendezvous is forced).
        let bare_pmix = launcher == Launcher::Single
            && get("TITUS_BOOTSTRAP").is_none()
            && pmix_server_var(&get).is_some();
        let (rank, size) = match launcher.vars() {
            None if bare_pmix => {
                let var = pmix_server_var(&get).unwrap_or("PMIX_RANK");
                if !pmix_available {
                    return Err(BootstrapError::Pmix(format!(
                        "a PMIx server started this process ({var} is set) and no launcher \
                         variable gives its rank and size, but this build of Titus has no \
                         PMIx client (libpmix was not found when it was built): install it \
                         (Debian: apt-get install libpmix-dev pkg-config) and rebuild"
                    )));
                }
                let (rank, size) = pmix_job().map_err(|e| {
                    BootstrapError::Pmix(format!(
                        "a PMIx server started this process ({var} is set), but asking it for \
                         this rank and the job's size failed: {e}"
                    ))
                })?;
                // The server's figures get the bounds the launcher variables get.
                if !(1..=MAX_JOB_SIZE).contains(&size) || rank >= size {
                    return Err(BootstrapError::Pmix(format!(
                        "the server gives rank {rank} of a job of {size} ranks: expected 1..={MAX_JOB_SIZE} \
                         ranks and a rank below their number"
                    )));
                }
                (rank, size)
            }
            None => (0, 1),
            Some((rv, sv)) => {
                let (r, s) = match (get(rv), get(sv)) {
                    (Some(r), Some(s)) => (r, s),
                    (Some(_), None) => {
                        return Err(BootstrapError::Missing(format!(
                            "{rv} is set but {sv} is not"
                        )));
                    }
                    (None, _) => {
                        return Err(BootstrapError::Missing(format!(
                            "{sv} is set but {rv} is not"
                        )));
                    }
                };
                let (rank, size) = (num(rv, r)?, job_size(sv, s)?);
                if rank >= size {
                    return Err(BootstrapError::Missing(format!(
                        "rank {rank} is not below the job size {size}"
                    )));
                }
                (rank, size)
            }
        };
        let (local_rank, local_size) = if bare_pmix {
            // The server knows the node's ranks, the environment does not: unknown.
            (None, None)
        } else {
            local_ranks(launcher, size, &get)?
        };
        let timeout = match get("TITUS_BOOTSTRAP_TIMEOUT") {
            None => DEFAULT_TIMEOUT,
            Some(v) => match v.trim().parse::<f64>() {
                // At most a week: longer is no limit, and Duration cannot hold every f64.
                Ok(s) if s > 0.0 && s <= 7.0 * 86_400.0 => Duration::from_secs_f64(s),
                _ => {
                    return Err(BootstrapError::BadVar {
                        var: "TITUS_BOOTSTRAP_TIMEOUT".into(),
                        value: v,
                        reason: "expected a positive number of seconds, at most 604800 (a week)"
                            .into(),
                    });
                }
            },
        };
        let slurm_id = || {
            Some(format!(
                "{}.{}",
                get("SLURM_JOB_ID")?,
                get("SLURM_STEP_ID").unwrap_or_default()
            ))
        };
        // A host and a port one can connect to: port 0 would ask the kernel for any.
        let explicit = match get("TITUS_BOOTSTRAP") {
            Some(v)
                if v.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
                }) =>
            {
                Some(v)
            }
            Some(v) => {
                return Err(BootstrapError::BadVar {
                    var: "TITUS_BOOTSTRAP".into(),
                    value: v,
                    reason: "expected host:port, a host name or address and a port in 1..=65535"
                        .into(),
                });
            }
            None => None,
        };
        // The order of choice: an explicit rendezvous, a single rank, PMIx, Slurm.
        let (via, rendezvous) = if let Some(addr) = explicit {
            (Via::Explicit, Some(addr))
        } else if size == 1 {
            (Via::Alone, None)
        } else if let Some(var) = pmix_server_var(&get) {
            if !pmix_available {
                return Err(BootstrapError::Pmix(format!(
                    "a PMIx server started this process ({var} is set), but this build of Titus \
                     has no PMIx client (libpmix was not found when it was built): install it \
                     (Debian: apt-get install libpmix-dev pkg-config) and rebuild, or set \
                     TITUS_BOOTSTRAP=host:port to use the rendezvous"
                )));
            }
            (Via::Pmix, None)
        } else if launcher == Launcher::Slurm {
            let nodes = get("SLURM_STEP_NODELIST").or_else(|| get("SLURM_JOB_NODELIST"));
            let host = nodes.as_deref().and_then(first_host);
            match (host, get("SLURM_STEP_RESV_PORTS"), get("SLURM_JOB_ID")) {
                (Some(host), Some(ports), _) => {
                    let port =
                        first_reserved_port(&ports).ok_or_else(|| BootstrapError::BadVar {
                            var: "SLURM_STEP_RESV_PORTS".into(),
                            value: ports.clone(),
                            reason: "expected a port list such as 12000-12003".into(),
                        })?;
                    (Via::SlurmReserved, Some(format!("{host}:{port}")))
                }
                (Some(host), None, Some(job)) => {
                    let job: u64 = job.trim().parse().map_err(|_| BootstrapError::BadVar {
                        var: "SLURM_JOB_ID".into(),
                        value: job.clone(),
                        reason: "not a non-negative integer".into(),
                    })?;
                    // Unset: the job's first step. Set, it must parse: another value
                    // would put this step on another step's port.
                    let step: u64 = match get("SLURM_STEP_ID") {
                        None => 0,
                        Some(s) => s.trim().parse().map_err(|_| BootstrapError::BadVar {
                            var: "SLURM_STEP_ID".into(),
                            value: s.clone(),
                            reason: "not a non-negative integer".into(),
                        })?,
                    };
                    let port = slurm_port(job, step, ephemeral)?;
                    (Via::SlurmDerived, Some(format!("{host}:{port}")))
                }
                _ => (Via::SlurmDerived, None),
            }
        } else {
            (Via::Alone, None)
        };
        if size > 1 && via != Via::Pmix && rendezvous.is_none() {
            return Err(BootstrapError::Missing(
                "TITUS_BOOTSTRAP is not set: give the rendezvous address host:port (rank 0 serves it), \
                 start the job with `titus launch`, or under a launcher that serves PMIx (mpirun, \
                 srun --mpi=pmix)"
                    .into(),
            ));
        }
        let secret = get("TITUS_JOB_SECRET")
            .or_else(|| match launcher {
                Launcher::Slurm => slurm_id().map(|id| format!("slurm-{id}")),
                Launcher::OpenMpi => {
                    get("PMIX_NAMESPACE").or_else(|| get("OMPI_MCA_ess_base_jobid"))
                }
                _ => None,
            })
            .unwrap_or_default();
        if rendezvous.is_some() && size > 1 && secret.is_empty() {
            return Err(BootstrapError::Missing(
                "TITUS_JOB_SECRET is not set and the launcher gives no job id to derive it from: \
                 set it to the same value on every rank"
                    .into(),
            ));
        }
        Ok(Self {
            rank,
            size,
            launcher,
            via,
            rendezvous,
            runtime: 0,
            secret,
            timeout,
            local_rank,
            local_size,
        })
    }
}

/// The ranks of this job on this node, from the launcher's variables alone (read through
/// `get`): no rendezvous is needed, so this also serves ranks joined through an
/// [`Exchange`](super::Exchange). 1 without a launcher, `None` where the launcher does not
/// say; malformed values are errors naming the variable.
pub fn local_size_from_vars(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<u32>, BootstrapError> {
    let launcher = Launcher::detect(&get);
    // The job's size bounds the node's, read and checked as `JobEnv::from_vars` does. A
    // rank joined through an exchange needs no launcher variables, so where they are
    // missing the node's ranks are not bounded by the job's.
    let size = match launcher.vars().map(|(_, sv)| (sv, get(sv))) {
        Some((sv, Some(s))) => job_size(sv, s)?,
        None | Some((_, None)) => u32::MAX,
    };
    Ok(local_ranks(launcher, size, &get)?.1)
}

/// This process's rank on its node and the ranks on its node, from `launcher`'s variables
/// in a job of `size` ranks: (0, 1) for a single rank, `None` where the launcher does not
/// say; malformed values are errors naming the variable.
fn local_ranks(
    launcher: Launcher,
    size: u32,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(Option<u32>, Option<u32>), BootstrapError> {
    let Some(vars) = launcher.table() else {
        // A rank alone reads no placement, but `titus launch`'s own variables, set by
        // hand, must still be usable: a value that is not is refused, not ignored.
        if launcher == Launcher::Single {
            local_ranks(Launcher::Titus, 1, get)?;
        }
        return Ok((Some(0), Some(1)));
    };
    let num = |var: &str| -> Result<Option<u32>, BootstrapError> {
        get(var)
            .map(|v| {
                v.trim().parse::<u32>().map_err(|_| BootstrapError::BadVar {
                    var: var.into(),
                    value: v.clone(),
                    reason: "not a non-negative integer".into(),
                })
            })
            .transpose()
    };
    let local_rank = num(vars.local_rank)?;
    let (local_size, size_var) = if launcher == Launcher::Slurm {
        match slurm_local_size(get)? {
            Some((n, var)) => (Some(n), var),
            None => (None, vars.local_size),
        }
    } else {
        (num(vars.local_size)?, vars.local_size)
    };
    if let Some(n) = local_size {
        let value = get(size_var).unwrap_or_default();
        let bad = |reason: String| BootstrapError::BadVar {
            var: size_var.into(),
            value: value.clone(),
            reason,
        };
        if n == 0 {
            return Err(bad("a node running this rank has at least one rank".into()));
        }
        if n > size {
            return Err(bad(format!(
                "more ranks on this node than the job's {size}"
            )));
        }
        if let Some(r) = local_rank
            && r >= n
        {
            return Err(BootstrapError::BadVar {
                var: vars.local_rank.into(),
                value: r.to_string(),
                reason: format!("not below the {n} ranks on this node ({size_var}='{value}')"),
            });
        }
    }
    Ok((local_rank, local_size))
}

/// The tasks on this node under Slurm, and the variable it came from: the step's per-node
/// list `SLURM_STEP_TASKS_PER_NODE`, else the job's `SLURM_TASKS_PER_NODE` (lists like
/// `2(x3),1`, indexed by `SLURM_NODEID` unless every node has the same count), else
/// `SLURM_NTASKS_PER_NODE`; `None` when none is set.
pub fn slurm_local_size(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<(u32, &'static str)>, BootstrapError> {
    for var in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        let Some(list) = get(var) else { continue };
        let bad = |reason: String| BootstrapError::BadVar {
            var: var.into(),
            value: list.clone(),
            reason,
        };
        let counts = tasks_per_node(&list).map_err(|e| bad(e.to_string()))?;
        let n = match get("SLURM_NODEID") {
            Some(id) => {
                let node: usize = id.trim().parse().map_err(|_| BootstrapError::BadVar {
                    var: "SLURM_NODEID".into(),
                    value: id.clone(),
                    reason: "not a non-negative integer".into(),
                })?;
                *counts.get(node).ok_or_else(|| {
                    bad(format!(
                        "lists {} nodes, but SLURM_NODEID is {node}",
                        counts.len()
                    ))
                })?
            }
            None if counts.iter().all(|&c| c == counts[0]) => counts[0],
            None => {
                return Err(bad(
                    "nodes run different task counts and SLURM_NODEID is not set".into(),
                ));
            }
        };
        return Ok(Some((n, var)));
    }
    let var = "SLURM_NTASKS_PER_NODE";
    match get(var) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) => Ok(Some((n, var))),
            Err(_) => Err(BootstrapError::BadVar {
                var: var.into(),
                value: v,
                reason: "not a non-negative integer".into(),
            }),
        },
    }
}

/// Expands a Slurm per-node task list: `2(x3),1` is `[2, 2, 2, 1]`.
pub fn tasks_per_node(list: &str) -> Result<Vec<u32>, TaskListError> {
    let mut counts = Vec::new();
    for item in list.trim().split(',') {
        let item = item.trim();
        let (count, repeat) = match item.split_once('(') {
            None => (item, 1),
            Some((count, rest)) => {
                let times = rest
                    .strip_suffix(')')
                    .and_then(|r| r.strip_prefix('x'))
                    .ok_or_else(|| TaskListError::Form(item.into()))?;
                let times: usize = times
                    .parse()
                    .map_err(|_| TaskListError::RepeatNotNumber(item.into()))?;
                (count, times)
            }
        };
        let count: u32 = count
            .parse()
            .map_err(|_| TaskListError::NoCount(item.into()))?;
        if repeat == 0 || counts.len() + repeat > 1 << 20 {
            return Err(TaskListError::RepeatOutOfRange(item.into()));
        }
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    Ok(counts)
}

/// The first host of a Slurm host list (`node[03-05,9],gpu1` gives `node03`).
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list
        .find(',')
        .filter(|&c| list.find('[').is_none_or(|b| c < b))
        .unwrap_or(list.len());
    let first = &list[..end];
    match first.find('[') {
        None => (!first.is_empty()).then(|| first.to_string()),
        Some(b) => {
            let inner = &first[b + 1..];
            let token = inner.split([',', ']']).next()?;
            let start = token.split('-').next()?;
            (!start.is_empty()).then(|| format!("{}{}", &first[..b], start))
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
