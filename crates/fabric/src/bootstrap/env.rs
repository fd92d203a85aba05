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

use super::BootstrapError;
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
pub fn slurm_port(job: u64, step: u64, ephemeral: (u16, u16)) -> Result<u16, String> {
    let slot =
        (job % (u64::from(SLURM_PORT_SPAN) / SLURM_STEPS)) * SLURM_STEPS + step % SLURM_STEPS;
    let port = SLURM_PORT_BASE + (slot % u64::from(SLURM_PORT_SPAN)) as u16;
    let (lo, hi) = ephemeral;
    if (lo..=hi).contains(&port) {
        return Err(format!(
            "the port derived for Slurm job {job} step {step}, {port}, is in this node's ephemeral \
             range {lo}-{hi} (net.ipv4.ip_local_port_range): set TITUS_BOOTSTRAP=host:port, or \
             reserve ports for the step (srun --resv-ports)"
        ));
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
            let c = titus_pmix_sys::Client::init().map_err(|e| e.to_string())?;
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
            Err("no PMIx server to ask".into())
        })
    }

    /// [`JobEnv::from_vars_with`] where `pmix_job` asks the PMIx server for this rank and
    /// the job's size: a process that a PMIx server started with none of the launcher
    /// variables Titus knows (a bare `prterun`, another PMIx launcher) takes them from it.
    pub fn from_vars_full(
        get: impl Fn(&str) -> Option<String>,
        pmix_available: bool,
        ephemeral: (u16, u16),
        pmix_job: &dyn Fn() -> Result<(u32, u32), String>,
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
                    let port = slurm_port(job, step, ephemeral).map_err(BootstrapError::Missing)?;
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
        let counts = tasks_per_node(&list).map_err(bad)?;
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
pub fn tasks_per_node(list: &str) -> Result<Vec<u32>, String> {
    let mut counts = Vec::new();
    for item in list.trim().split(',') {
        let item = item.trim();
        let (count, repeat) = match item.split_once('(') {
            None => (item, 1),
            Some((count, rest)) => {
                let times = rest
                    .strip_suffix(')')
                    .and_then(|r| r.strip_prefix('x'))
                    .ok_or_else(|| format!("'{item}' is not COUNT or COUNT(xREPEAT)"))?;
                let times: usize = times
                    .parse()
                    .map_err(|_| format!("the repeat in '{item}' is not a number"))?;
                (count, times)
            }
        };
        let count: u32 = count
            .parse()
            .map_err(|_| format!("'{item}' does not start with a task count"))?;
        if repeat == 0 || counts.len() + repeat > 1 << 20 {
            return Err(format!("the repeat in '{item}' is out of range"));
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> Result<JobEnv, BootstrapError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        JobEnv::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn launchers() {
        let e = env(&[]).unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (0, 1, Launcher::Single));
        let e = env(&[
            ("TITUS_RANK", "2"),
            ("TITUS_SIZE", "4"),
            ("TITUS_BOOTSTRAP", "127.0.0.1:9"),
            ("TITUS_JOB_SECRET", "s"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (2, 4, Launcher::Titus));
        let e = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "cn[017-020],gpu3"),
        ])
        .unwrap();
        assert_eq!(e.launcher, Launcher::Slurm);
        // Below the ephemeral range: 16384 + ((job mod 512) × 32 + step mod 32).
        assert_eq!(e.via, Via::SlurmDerived);
        assert_eq!(e.rendezvous.as_deref(), Some("cn017:23104"));
        assert_eq!(e.secret, "slurm-1234.0");
        let e = env(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")]).unwrap();
        assert_eq!(e.launcher, Launcher::OpenMpi);
        let e = env(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "3"),
            ("TITUS_BOOTSTRAP", "h:1"),
            ("TITUS_JOB_SECRET", "x"),
        ])
        .unwrap();
        assert_eq!(e.launcher, Launcher::Pmi);
    }

    /// Every launcher is found from either of its variables, and a process that has one is
    /// never a single in-process rank: an incomplete pair is an error naming the other.
    #[test]
    fn every_launcher_is_detected_from_either_variable() {
        assert_eq!(Launcher::detect(|_| None), Launcher::Single);
        assert_eq!(Launcher::Single.vars(), None);
        for LauncherVars {
            launcher,
            rank,
            size,
            ..
        } in LAUNCHERS
        {
            assert_eq!(launcher.vars(), Some((rank, size)));
            for (set, other) in [(rank, size), (size, rank)] {
                let get = |k: &str| (k == set).then(|| "1".to_string());
                assert_eq!(Launcher::detect(get), launcher, "{set} alone");
                let err = env(&[(set, "1")]).unwrap_err().to_string();
                assert!(
                    err.contains(&format!("{other} is not")),
                    "{set} alone: {err}"
                );
            }
            let e = env(&[(rank, "0"), (size, "1")]).unwrap();
            assert_eq!((e.launcher, e.launched()), (launcher, true), "{rank}");
        }
        assert!(!env(&[]).unwrap().launched());
        // First match wins: titus launch under an allocation that Slurm also describes.
        let get = |k: &str| {
            ["TITUS_SIZE", "SLURM_NTASKS"]
                .contains(&k)
                .then(String::new)
        };
        assert_eq!(Launcher::detect(get), Launcher::Titus);
    }

    /// mpirun (or Hydra) without a rendezvous address: a clear error, not one rank alone.
    #[test]
    fn mpi_launchers_without_a_rendezvous_fail_loudly() {
        for (rank, size) in [
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("PMI_RANK", "PMI_SIZE"),
        ] {
            let err = env(&[(rank, "1"), (size, "4")]).unwrap_err().to_string();
            assert!(err.contains("TITUS_BOOTSTRAP is not set"), "{err}");
        }
        // Open MPI's job id stands in for the secret.
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("TITUS_BOOTSTRAP", "127.0.0.1:9"),
            ("PMIX_NAMESPACE", "prterun-x-1@1"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.launched()), (1, 4, true));
        assert_eq!(e.secret, "prterun-x-1@1");
    }

    #[test]
    fn bad_environments_name_the_variable() {
        let err = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
        assert!(err(&[("TITUS_RANK", "x"), ("TITUS_SIZE", "2")]).contains("TITUS_RANK='x'"));
        assert!(err(&[("TITUS_RANK", "1")]).contains("TITUS_SIZE is not"));
        assert!(err(&[("TITUS_RANK", "3"), ("TITUS_SIZE", "2")]).contains("not below"));
        assert!(err(&[("TITUS_RANK", "0"), ("TITUS_SIZE", "0")]).contains("at least one rank"));
        assert!(
            err(&[("TITUS_RANK", "0"), ("TITUS_SIZE", "2")]).contains("TITUS_BOOTSTRAP is not set")
        );
        assert!(
            err(&[
                ("TITUS_RANK", "0"),
                ("TITUS_SIZE", "2"),
                ("TITUS_BOOTSTRAP", "nohostport")
            ])
            .contains("host:port")
        );
        assert!(
            err(&[
                ("TITUS_RANK", "0"),
                ("TITUS_SIZE", "2"),
                ("TITUS_BOOTSTRAP", "h:1")
            ])
            .contains("TITUS_JOB_SECRET")
        );
        assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "-3")]).contains("positive"));
        assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "1e300")]).contains("a week"));
        assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "NaN")]).contains("positive"));
    }

    /// The job size is bounded where it is read, by every launcher's variable; a step id
    /// and a rendezvous address that do not parse are refused, not replaced.
    #[test]
    fn sizes_steps_and_addresses_are_bounded() {
        let err = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
        for v in &LAUNCHERS {
            let e = err(&[(v.rank, "0"), (v.size, "1073741825")]);
            assert!(
                e.contains(&format!("{}='1073741825'", v.size)) && e.contains("1073741824"),
                "{e}"
            );
        }
        let e = env(&[
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "1073741824"),
            ("TITUS_BOOTSTRAP", "h:1"),
            ("TITUS_JOB_SECRET", "s"),
        ])
        .unwrap();
        assert_eq!(e.size, MAX_JOB_SIZE);
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "batch"),
            ("SLURM_JOB_NODELIST", "n1"),
        ]);
        assert!(e.contains("SLURM_STEP_ID='batch'"), "{e}");
        for bad in ["h:0", ":4000", "h:", "h:65536"] {
            let e = err(&[
                ("TITUS_RANK", "0"),
                ("TITUS_SIZE", "2"),
                ("TITUS_BOOTSTRAP", bad),
                ("TITUS_JOB_SECRET", "s"),
            ]);
            assert!(
                e.contains(&format!("TITUS_BOOTSTRAP='{bad}'")) && e.contains("1..=65535"),
                "{e}"
            );
        }
        let e = JobEnv::from_vars_full(
            |k| (k == "PMIX_RANK").then(|| "0".to_string()),
            true,
            (32_768, 60_999),
            &|| Ok((0, u32::MAX)),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("4294967295 ranks") && e.contains("1073741824"),
            "{e}"
        );
    }

    /// The node's ranks alone (`local_size_from_vars`): a job size that does not parse is
    /// an error naming it, never an unbounded node.
    #[test]
    fn local_sizes_alone_check_the_job_size() {
        let get = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
        };
        let e = local_size_from_vars(get(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "many"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("OMPI_COMM_WORLD_SIZE='many'"), "{e}");
        let e = local_size_from_vars(get(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("job's 2"), "{e}");
        let n = local_size_from_vars(get(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]))
        .unwrap();
        assert_eq!(n, Some(4));
        assert_eq!(local_size_from_vars(get(&[])).unwrap(), Some(1));
    }

    /// Every `TITUS_*` variable this module reads is in `TITUS_VARS`, which `from_env`
    /// checks for values that are not UTF-8.
    #[test]
    fn titus_vars_lists_every_titus_variable_read() {
        let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let set = [
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "2"),
            ("TITUS_LOCAL_RANK", "0"),
            ("TITUS_LOCAL_SIZE", "2"),
            ("TITUS_BOOTSTRAP", "h:1"),
            ("TITUS_BOOTSTRAP_TIMEOUT", "5"),
        ];
        for vars in [
            &set[..],
            &[],
            &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")],
        ] {
            let _ = JobEnv::from_vars_with(
                |k| {
                    asked.borrow_mut().insert(k.to_string());
                    vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
                },
                false,
                (32_768, 60_999),
            );
        }
        let asked = asked.into_inner();
        let titus: Vec<&String> = asked.iter().filter(|k| k.starts_with("TITUS_")).collect();
        assert!(titus.len() >= TITUS_VARS.len(), "{titus:?}");
        for k in titus {
            assert!(
                TITUS_VARS.contains(&k.as_str()),
                "{k} is read but not in TITUS_VARS"
            );
        }
    }

    /// Each launcher's local rank and local size are read from its row of the table.
    #[test]
    fn local_ranks_per_launcher() {
        let base = [("TITUS_BOOTSTRAP", "h:1"), ("TITUS_JOB_SECRET", "s")];
        let with = |vars: &[(&str, &str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(vars);
            env(&v)
        };
        let e = env(&[]).unwrap();
        assert_eq!(
            (e.local_rank, e.local_size, e.ranks_on_node()),
            (Some(0), Some(1), 1)
        );
        for v in LAUNCHERS.iter().filter(|v| v.launcher != Launcher::Slurm) {
            let e = with(&[
                (v.rank, "3"),
                (v.size, "8"),
                (v.local_rank, "1"),
                (v.local_size, "4"),
            ])
            .unwrap();
            assert_eq!(e.launcher, v.launcher);
            assert_eq!(
                (e.local_rank, e.local_size, e.ranks_on_node()),
                (Some(1), Some(4), 4)
            );
            // A launcher that does not say: the rank counts as alone on its node.
            let e = with(&[(v.rank, "3"), (v.size, "8")]).unwrap();
            assert_eq!(
                (e.local_rank, e.local_size, e.ranks_on_node()),
                (None, None, 1)
            );
        }
        // Slurm: the step's per-node list, indexed by the node id.
        let slurm = [
            ("SLURM_PROCID", "6"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_LOCALID", "0"),
        ];
        let s = |vars: &[(&str, &str)]| {
            let mut v = slurm.to_vec();
            v.extend_from_slice(vars);
            with(&v)
        };
        let e = s(&[
            ("SLURM_STEP_TASKS_PER_NODE", "2(x3),1"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
            ("SLURM_NODEID", "3"),
        ])
        .unwrap();
        assert_eq!((e.local_rank, e.local_size), (Some(0), Some(1)));
        let e = s(&[("SLURM_TASKS_PER_NODE", "2(x3),1"), ("SLURM_NODEID", "1")]).unwrap();
        assert_eq!(e.local_size, Some(2));
        // Every node the same: no node id needed.
        let e = s(&[("SLURM_TASKS_PER_NODE", "3(x2)")]).unwrap();
        assert_eq!(e.local_size, Some(3));
        let e = s(&[("SLURM_NTASKS_PER_NODE", "5")]).unwrap();
        assert_eq!(e.local_size, Some(5));
        let e = s(&[]).unwrap();
        assert_eq!((e.local_size, e.ranks_on_node()), (None, 1));
    }

    #[test]
    fn bad_local_ranks_name_the_variable() {
        let err = |vars: &[(&str, &str)]| {
            let mut v = vec![
                ("TITUS_RANK", "0"),
                ("TITUS_SIZE", "4"),
                ("TITUS_BOOTSTRAP", "h:1"),
                ("TITUS_JOB_SECRET", "s"),
            ];
            v.extend_from_slice(vars);
            env(&v).unwrap_err().to_string()
        };
        let e = err(&[("TITUS_LOCAL_SIZE", "two")]);
        assert!(e.contains("TITUS_LOCAL_SIZE='two'"), "{e}");
        let e = err(&[("TITUS_LOCAL_RANK", "-1"), ("TITUS_LOCAL_SIZE", "2")]);
        assert!(e.contains("TITUS_LOCAL_RANK='-1'"), "{e}");
        let e = err(&[("TITUS_LOCAL_SIZE", "0")]);
        assert!(e.contains("TITUS_LOCAL_SIZE='0'"), "{e}");
        let e = err(&[("TITUS_LOCAL_SIZE", "5")]);
        assert!(
            e.contains("TITUS_LOCAL_SIZE='5'") && e.contains("job's 4"),
            "{e}"
        );
        let e = err(&[("TITUS_LOCAL_RANK", "2"), ("TITUS_LOCAL_SIZE", "2")]);
        assert!(
            e.contains("TITUS_LOCAL_RANK='2'") && e.contains("not below"),
            "{e}"
        );
        // A rank alone, without a launcher: set by hand, they are still checked.
        let alone = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
        let e = alone(&[("TITUS_LOCAL_SIZE", "abc")]);
        assert!(e.contains("TITUS_LOCAL_SIZE='abc'"), "{e}");
        let e = alone(&[("TITUS_LOCAL_SIZE", "2")]);
        assert!(
            e.contains("TITUS_LOCAL_SIZE='2'") && e.contains("job's 1"),
            "{e}"
        );
        assert!(env(&[("TITUS_LOCAL_SIZE", "1"), ("TITUS_LOCAL_RANK", "0")]).is_ok());
        let slurm = |vars: &[(&str, &str)]| {
            let mut v = vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("TITUS_BOOTSTRAP", "h:1"),
                ("TITUS_JOB_SECRET", "s"),
            ];
            v.extend_from_slice(vars);
            env(&v).unwrap_err().to_string()
        };
        let e = slurm(&[("SLURM_STEP_TASKS_PER_NODE", "2(3)"), ("SLURM_NODEID", "0")]);
        assert!(e.contains("SLURM_STEP_TASKS_PER_NODE='2(3)'"), "{e}");
        let e = slurm(&[("SLURM_TASKS_PER_NODE", "2,1")]);
        assert!(
            e.contains("SLURM_TASKS_PER_NODE") && e.contains("SLURM_NODEID"),
            "{e}"
        );
        let e = slurm(&[("SLURM_TASKS_PER_NODE", "2,1"), ("SLURM_NODEID", "2")]);
        assert!(e.contains("lists 2 nodes"), "{e}");
        let e = slurm(&[("SLURM_TASKS_PER_NODE", "2,1"), ("SLURM_NODEID", "x")]);
        assert!(e.contains("SLURM_NODEID='x'"), "{e}");
        let e = slurm(&[("SLURM_NTASKS_PER_NODE", "")]);
        assert!(e.contains("SLURM_NTASKS_PER_NODE=''"), "{e}");
    }

    /// The Slurm fallback's port: two concurrent steps of one job, several runtimes each,
    /// never share a port (the runtimes of a process share their rendezvous, told apart
    /// by the greeting), nor do job J step 31 and job J+1 step 0 (the old formula,
    /// 30000 + (job × 31 + step) mod 20000, gave both 30620 for J = 19); every port is
    /// below the ephemeral range, and one inside it is an error naming the way out.
    #[test]
    fn slurm_ports_never_collide_where_they_used_to() {
        let eph = (32_768, 60_999);
        let step_env = |job: &str, step: &str| {
            env(&[
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_ID", job),
                ("SLURM_STEP_ID", step),
                ("SLURM_JOB_NODELIST", "cn[1-2]"),
            ])
            .unwrap()
        };
        for job in [0u64, 19, 1234, 99_999, u64::from(u32::MAX)] {
            let j = job.to_string();
            // Two steps of one job, runtimes 0..4 each: one address per step.
            let addrs = |step: &str| -> Vec<(String, u32)> {
                let e = step_env(&j, step);
                assert_eq!(e.via, Via::SlurmDerived);
                (0..4u16)
                    .map(|k| {
                        let s = e.session(k).unwrap();
                        (s.rendezvous.unwrap(), s.runtime)
                    })
                    .collect()
            };
            let (a, b) = (addrs("0"), addrs("1"));
            for (x, y) in a.iter().zip(&b) {
                assert_ne!(x.0, y.0, "job {job}: steps 0 and 1 share {}", x.0);
            }
            assert!(
                a.iter().all(|x| x.0 == a[0].0),
                "one rendezvous per process: {a:?}"
            );
            assert_eq!(a.iter().map(|x| x.1).collect::<Vec<_>>(), [0, 1, 2, 3]);
            // Job J step 31 against job J+1 step 0; every step of a job apart.
            let p = |job: u64, step: u64| slurm_port(job, step, eph).unwrap();
            assert_ne!(p(job, 31), p(job + 1, 0), "job {job}");
            let steps: std::collections::BTreeSet<u16> =
                (0..SLURM_STEPS).map(|s| p(job, s)).collect();
            assert_eq!(steps.len() as u64, SLURM_STEPS, "job {job}");
            for s in 0..SLURM_STEPS {
                let port = p(job, s);
                assert!((SLURM_PORT_BASE..eph.0).contains(&port), "{port}");
            }
        }
        // Consecutive jobs' steps never meet.
        for job in 0..600u64 {
            for s in 0..SLURM_STEPS {
                assert_ne!(
                    slurm_port(job, s, eph).unwrap(),
                    slurm_port(job + 1, s, eph).unwrap()
                );
            }
        }
        let err = slurm_port(3, 0, (1024, 65_535)).unwrap_err();
        assert!(
            err.contains("ephemeral") && err.contains("TITUS_BOOTSTRAP"),
            "{err}"
        );
        // Reserved ports win over the derived one, from the step's first port.
        let e = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_RESV_PORTS", "12000-12003"),
            ("SLURM_STEP_NODELIST", "gpu[3-4]"),
        ])
        .unwrap();
        assert_eq!(
            (e.via, e.rendezvous.as_deref()),
            (Via::SlurmReserved, Some("gpu3:12000"))
        );
        let err = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_RESV_PORTS", "none"),
            ("SLURM_STEP_NODELIST", "gpu3"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("SLURM_STEP_RESV_PORTS='none'"), "{err}");
    }

    /// The order of choice: an explicit TITUS_BOOTSTRAP, a single rank, PMIx, Slurm; a
    /// PMIx server in a build without the client is an error, never a silent fallback.
    #[test]
    fn the_bootstrap_is_chosen_in_order() {
        let vars = |v: &[(&str, &str)]| {
            let m: HashMap<String, String> = v
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k: &str| m.get(k).cloned()
        };
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "prterun-x-1@1"),
            ("PMIX_RANK", "1"),
        ];
        let e = JobEnv::from_vars_with(vars(&ompi), true, (32_768, 60_999)).unwrap();
        assert_eq!((e.via, e.rendezvous.as_deref()), (Via::Pmix, None));
        let mut forced = ompi.to_vec();
        forced.push(("TITUS_BOOTSTRAP", "10.0.0.1:4000"));
        let e = JobEnv::from_vars_with(vars(&forced), true, (32_768, 60_999)).unwrap();
        assert_eq!(e.via, Via::Explicit);
        let err = JobEnv::from_vars_with(vars(&ompi), false, (32_768, 60_999))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PMIX_NAMESPACE is set")
                && err.contains("libpmix-dev")
                && err.contains("TITUS_BOOTSTRAP"),
            "{err}"
        );
        // srun --mpi=pmix: PMIx before the Slurm fallback; any server variable will do.
        let srun = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("PMIX_SERVER_URI41", "x"),
        ];
        let e = JobEnv::from_vars_with(vars(&srun), true, (32_768, 60_999)).unwrap();
        assert_eq!(e.via, Via::Pmix);
        // One rank under mpirun: nothing to bootstrap.
        let one = [
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "1"),
            ("PMIX_RANK", "0"),
        ];
        let e = JobEnv::from_vars_with(vars(&one), true, (32_768, 60_999)).unwrap();
        assert_eq!((e.via, e.launched()), (Via::Alone, true));
    }

    /// A bare PMIx launcher (no OMPI, Slurm, PMI or Titus variable): rank and size come
    /// from the server; without a PMIx client that is an error, not one rank.
    #[test]
    fn a_bare_pmix_launcher_gives_rank_and_size() {
        let vars = |pairs: &[(&str, &str)]| {
            let m: std::collections::HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k: &str| m.get(k).cloned()
        };
        let bare = [("PMIX_NAMESPACE", "prterun-x-1@1"), ("PMIX_RANK", "2")];
        let e =
            JobEnv::from_vars_full(vars(&bare), true, (32_768, 60_999), &|| Ok((2, 4))).unwrap();
        assert_eq!(
            (e.rank, e.size, e.via, e.launched()),
            (2, 4, Via::Pmix, true)
        );
        assert_eq!(e.ranks_on_node(), 1, "the node's ranks are unknown");
        let err = JobEnv::from_vars_full(vars(&bare), true, (32_768, 60_999), &|| {
            Err("PMIx_Init failed".into())
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("PMIx_Init failed") && err.contains("PMIX_NAMESPACE"),
            "{err}"
        );
        let err = JobEnv::from_vars_with(vars(&bare), false, (32_768, 60_999))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no PMIx client"), "{err}");
        // The rendezvous forced: PMIx is not asked.
        let mut forced = bare.to_vec();
        forced.push(("TITUS_BOOTSTRAP", "10.0.0.1:4000"));
        let e = JobEnv::from_vars_full(vars(&forced), true, (32_768, 60_999), &|| {
            panic!("PMIx asked")
        })
        .unwrap();
        assert_eq!((e.via, e.size), (Via::Explicit, 1));
    }

    #[test]
    fn slurm_task_lists() {
        assert_eq!(tasks_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
        assert_eq!(tasks_per_node("4").unwrap(), vec![4]);
        assert_eq!(tasks_per_node("1,3(x2)").unwrap(), vec![1, 3, 3]);
        for bad in ["", "x", "2(x)", "2(x0)", "2x3", "2(x3", "(x2)", "2(x3),"] {
            assert!(tasks_per_node(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_lists() {
        assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("single").as_deref(), Some("single"));
        assert_eq!(first_host("").as_deref(), None);
    }
}

#[cfg(test)]
mod fuzz;
