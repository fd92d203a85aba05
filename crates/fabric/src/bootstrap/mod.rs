//! Bootstrap: who am I, how many are we, and everyone's fabric address.
//!
//! Addresses are exchanged through the launcher's PMIx server (see `pmix`) or a
//! rendezvous; [`JobEnv::from_vars`] chooses ([`Via`]) and [`join`] joins it. The
//! rendezvous: rank 0 serves it at `TITUS_BOOTSTRAP`
//! (`host:port`; under Slurm, derived from the job's first node and id when unset), every
//! rank (rank 0 too) connects, proves it belongs to the job with the per-job secret
//! `TITUS_JOB_SECRET`, and takes part in all-gathers. A process without the secret is
//! refused with a clear error and the job goes on. Every wait has a timeout
//! (`TITUS_BOOTSTRAP_TIMEOUT` seconds, default 60) that names the ranks that did not show
//! up. The secret keeps stray processes of other jobs out; it is not a defence against an
//! attacker who can read the job's environment or its traffic.
//!
//! Cost: an all-gather sends all N blobs to each of the N ranks through rank 0, O(N²)
//! bytes: with ~100-byte addresses, 100 MB at 10^3 ranks, 10 GB at 10^4. A tree
//! all-gather, or exchanging only overlay neighbours' addresses, is the upgrade path for
//! larger jobs.
//!
//! Modules: `env` reads the launcher's environment ([`JobEnv`]); `wire` is the framing and
//! message format; `server` is rank 0's rendezvous ([`serve`]); `client` is each rank's
//! connection ([`Rendezvous`]).

mod client;
mod env;
mod pmix;
mod server;
mod slurm_error;
mod wire;

pub use client::Rendezvous;
pub use env::{
    DEFAULT_TIMEOUT, JobEnv, LAUNCHERS, Launcher, LauncherVars, PMIX_VARS, SLURM_PORT_BASE,
    SLURM_PORT_SPAN, SLURM_STEPS, Via, ephemeral_ports, first_host, first_reserved_port,
    local_size_from_vars, pmix_server_var, slurm_local_size, slurm_port, tasks_per_node,
};
pub use pmix::{MAX_BLOB, Pmix};
pub use server::serve;
pub use slurm_error::{SlurmPortError, TaskListError};

/// Joins the job's bootstrap as `env` chose it ([`Via`]): the rendezvous or the PMIx
/// server; `None` for a single rank, which needs none. Says which in the log (`info`).
pub fn join(env: &JobEnv) -> Result<Option<Box<dyn Exchange>>, BootstrapError> {
    let ex: Option<Box<dyn Exchange>> = match env.via {
        Via::Pmix => {
            let p = Pmix::join(env)?;
            tracing::info!(
                "bootstrap: {} — namespace {}, rank {} of {}",
                env.via,
                p.namespace(),
                p.rank(),
                p.size()
            );
            Some(Box::new(p))
        }
        _ => {
            let rv = Rendezvous::join(env)?;
            match &env.rendezvous {
                Some(addr) if rv.is_some() => tracing::info!(
                    "bootstrap: {} — {addr}, rank {} of {}",
                    env.via,
                    env.rank,
                    env.size
                ),
                _ => tracing::info!("bootstrap: {}", env.via),
            }
            rv.map(Rendezvous::into_exchange)
        }
    };
    Ok(ex)
}

use crate::Rank;
use std::time::Duration;

/// Which node this process runs on, equal exactly for processes that can share memory
/// through `/dev/shm` and see each other's process ids: the host name, the kernel's boot
/// id, and the mount and pid namespaces (containers on one host are different nodes).
/// `TITUS_NODE_ID` ([`crate::env_var::NODE_ID`], for tests that play several nodes on one
/// machine), when set and not empty, replaces it.
pub fn node_identity() -> String {
    if let Some(v) = crate::env_var::non_blank(crate::env_var::NODE_ID) {
        return format!("forced:{v}");
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let link = |p: &str| {
        std::fs::read_link(p)
            .map(|l| l.display().to_string())
            .unwrap_or_default()
    };
    format!(
        "{}|{}|{}|{}",
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id"),
        link("/proc/self/ns/mnt"),
        link("/proc/self/ns/pid"),
    )
}

/// The CPUs this process's calling thread may run on (its affinity mask), ascending: what
/// `titus launch` slices among its ranks, and what a rank tells the others of its node
/// for the default worker count.
pub fn cpu_affinity() -> std::io::Result<Vec<u32>> {
    let set = rustix::thread::sched_getaffinity(None)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .map(|c| c as u32)
        .collect())
}

/// Why bootstrap failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    /// An environment variable with a bad value.
    #[error("{var}='{value}': {reason}")]
    BadVar {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable the launcher should have set is missing.
    #[error("{0}")]
    Missing(String),
    /// Could not reach the rendezvous.
    #[error("cannot reach the rendezvous at {addr} within {after:?}: {reason}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Time spent trying.
        after: Duration,
        /// The last error.
        reason: String,
    },
    /// The rendezvous refused this process.
    #[error("the rendezvous refused this process: {0}")]
    Refused(String),
    /// Ranks that never joined.
    #[error("ranks {} did not join the rendezvous within {after:?}", list(.ranks))]
    Absent {
        /// The missing ranks.
        ranks: Vec<Rank>,
        /// The timeout.
        after: Duration,
    },
    /// The rendezvous or a rank failed during an exchange.
    #[error("the rendezvous failed: {0}")]
    Failed(String),
    /// A malformed message.
    #[error("malformed rendezvous message: {0}")]
    Protocol(String),
    /// The PMIx server failed or is unusable (never a silent fallback to another
    /// bootstrap).
    #[error("PMIx bootstrap: {0}")]
    Pmix(String),
    /// Under Slurm, the port derived for the rendezvous is one the node may hand out.
    #[error(transparent)]
    SlurmPort(#[from] SlurmPortError),
}

fn list(ranks: &[Rank]) -> String {
    let mut s: Vec<String> = ranks.iter().take(16).map(Rank::to_string).collect();
    if ranks.len() > 16 {
        s.push(format!("... ({} in all)", ranks.len()));
    }
    s.join(", ")
}

/// A job-wide all-gather among the ranks: how they learn each other's fabric addresses and
/// keys. The [`Rendezvous`] is one; an application that already has a communicator (an MPI
/// solver) brings its own, so Titus needs neither a rendezvous port nor MPI itself.
///
/// Called only from the thread that opens the fabric or runs an epoch (never from a
/// progress or worker thread), collectively: every rank calls it in the same order.
pub trait Exchange: Send + std::fmt::Debug {
    /// This rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// Every rank contributes `blob` (lengths may differ); returns all blobs by rank.
    fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError>;
    /// Waits until every rank reaches the barrier.
    fn barrier(&mut self) -> Result<(), BootstrapError> {
        self.all_gather(&[]).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn free_addr() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    fn job(addr: &str, rank: Rank, size: u32, secret: &str) -> JobEnv {
        JobEnv {
            rank,
            size,
            launcher: Launcher::Titus,
            via: Via::Explicit,
            rendezvous: Some(addr.into()),
            runtime: 0,
            secret: secret.into(),
            timeout: Duration::from_secs(5),
            local_rank: Some(rank),
            local_size: Some(size),
        }
    }

    #[test]
    fn all_gather_and_refusal() {
        let addr = free_addr();
        let size = 4;
        let probed = std::sync::Barrier::new(size as usize + 1);
        let results: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..size)
                .map(|r| {
                    let (addr, probed) = (addr.clone(), &probed);
                    s.spawn(move || {
                        let mut rv = Rendezvous::join(&job(&addr, r, size, "sesame"))
                            .unwrap()
                            .unwrap();
                        probed.wait();
                        let a = rv.all_gather(format!("rank{r}").as_bytes()).unwrap();
                        rv.barrier().unwrap();
                        a
                    })
                })
                .collect();
            // A foreign process: wrong secret, refused with a clear error; the job goes on.
            std::thread::sleep(Duration::from_millis(100));
            let foreign =
                Rendezvous::connect(&addr, 1, size, "guess", Duration::from_secs(5)).unwrap_err();
            assert!(
                foreign.to_string().contains("wrong job secret"),
                "{foreign}"
            );
            probed.wait();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            assert_eq!(
                r,
                (0..size)
                    .map(|i| format!("rank{i}").into_bytes())
                    .collect::<Vec<_>>()
            );
        }
    }

    /// One rendezvous (one port) serves several runtimes of the same processes at once:
    /// the greeting names the runtime, and a rank that greets for a runtime rank 0 has not
    /// opened yet waits for it. Runtime 0 is still in its rounds while runtime 1 starts.
    #[test]
    fn one_port_serves_every_runtime_of_a_process() {
        let addr = free_addr();
        let size = 3;
        let results: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..size)
                .map(|r| {
                    let addr = addr.clone();
                    s.spawn(move || {
                        let e = job(&addr, r, size, "sesame");
                        // Rank 0 comes late to runtime 1: the others queue for it.
                        if r != 0 {
                            let mut rv1 =
                                Rendezvous::join(&e.session(1).unwrap()).unwrap().unwrap();
                            let mut rv0 = Rendezvous::join(&e).unwrap().unwrap();
                            let a = rv0.all_gather(format!("r{r}k0").as_bytes()).unwrap();
                            let b = rv1.all_gather(format!("r{r}k1").as_bytes()).unwrap();
                            [a, b].concat()
                        } else {
                            let mut rv0 = Rendezvous::join(&e).unwrap().unwrap();
                            std::thread::sleep(Duration::from_millis(200));
                            let mut rv1 =
                                Rendezvous::join(&e.session(1).unwrap()).unwrap().unwrap();
                            let a = rv0.all_gather(format!("r{r}k0").as_bytes()).unwrap();
                            let b = rv1.all_gather(format!("r{r}k1").as_bytes()).unwrap();
                            [a, b].concat()
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let want: Vec<Vec<u8>> = (0..2)
            .flat_map(|k| (0..size).map(move |i| format!("r{i}k{k}").into_bytes()))
            .collect();
        for r in results {
            assert_eq!(r, want);
        }
        // A runtime number already open is refused for a second runtime of this process.
        let e = job(&addr, 0, size, "sesame");
        let err = Rendezvous::join(&e.session(7).unwrap())
            .and_then(|_| Rendezvous::join(&e.session(7).unwrap()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("runtime 7 of this process already"), "{err}");
    }

    #[test]
    fn absent_ranks_are_named() {
        let addr = free_addr();
        let mut e = job(&addr, 0, 3, "s");
        e.timeout = Duration::from_millis(2000);
        let t = std::thread::spawn(move || Rendezvous::join(&e).map(|r| r.map(|_| ())));
        let mut r1 = Rendezvous::join(&job(&addr, 1, 3, "s")).unwrap().unwrap();
        // Rank 2 never comes: both joined ranks learn who is missing.
        let err = r1.all_gather(b"x").unwrap_err().to_string();
        assert!(err.contains("ranks 2 did not join"), "{err}");
        let _ = t.join().unwrap();
    }

    /// Strangers at the port: idle connections (more than one address may hold), a client
    /// that trickles its greeting a byte at a time, one announcing a huge frame, and random
    /// bytes. None of them may keep the job's ranks out: the job starts as if they were
    /// not there (each used to hold the single greeter for up to 5 s, so these ~40 made a
    /// job with a 10 s timeout fail, blaming rank 1).
    #[test]
    fn strangers_cannot_stall_the_rendezvous() {
        use std::io::Write;
        let addr = free_addr();
        let size = 2;
        let mut e0 = job(&addr, 0, size, "sesame");
        e0.timeout = Duration::from_secs(10);
        let r0 = std::thread::spawn(move || {
            let mut rv = Rendezvous::join(&e0).unwrap().unwrap();
            rv.all_gather(b"zero").unwrap()
        });
        // Let rank 0 serve, then crowd its port before rank 1 comes.
        let mut strangers = Vec::new();
        let connect = || loop {
            if let Ok(s) = std::net::TcpStream::connect(&addr) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        for _ in 0..40 {
            strangers.push(connect());
        }
        let mut huge = connect();
        huge.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let mut noise = connect();
        noise.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let trickle = std::thread::spawn({
            let mut s = connect();
            move || {
                let _ = s.write_all(&100u32.to_le_bytes());
                for _ in 0..30 {
                    if s.write_all(&[1]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        });
        let mut e1 = job(&addr, 1, size, "sesame");
        e1.timeout = Duration::from_secs(10);
        let mut r1 = Rendezvous::join(&e1).unwrap().unwrap();
        let got = r1.all_gather(b"one").unwrap();
        assert_eq!(got, vec![b"zero".to_vec(), b"one".to_vec()]);
        assert_eq!(r0.join().unwrap(), got);
        drop(strangers);
        trickle.join().unwrap();
    }

    /// A job that times out while strangers were refused says so, not only which rank is
    /// missing.
    #[test]
    fn a_timeout_names_what_was_refused() {
        let addr = free_addr();
        let mut e = job(&addr, 0, 2, "s");
        e.timeout = Duration::from_millis(1500);
        let t = std::thread::spawn(move || {
            let mut rv = Rendezvous::join(&e).unwrap().unwrap();
            rv.all_gather(b"x")
        });
        std::thread::sleep(Duration::from_millis(200));
        let foreign = Rendezvous::connect(&addr, 1, 2, "guess", Duration::from_secs(5));
        assert!(foreign.is_err());
        let err = match t.join().unwrap() {
            Ok(_) => panic!("an all-gather without rank 1 succeeded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("ranks 1 did not join"), "{err}");
        assert!(
            err.contains("refused 1 × wrong job secret") && err.contains("127.0.0.1"),
            "{err}"
        );
    }
}
