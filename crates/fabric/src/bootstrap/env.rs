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

/// Every launcher Titus recognises, with the variables that carry this process's rank and
/// the job's size, in the order they are tried.
pub const LAUNCHERS: [(Launcher, &str, &str); 4] = [
    (Launcher::Titus, "TITUS_RANK", "TITUS_SIZE"),
    (Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS"),
    (
        Launcher::OpenMpi,
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
    ),
    (Launcher::Pmi, "PMI_RANK", "PMI_SIZE"),
];

impl Launcher {
    /// Which launcher started this process, reading variables through `get` (the
    /// environment, or a map in tests): the first of [`LAUNCHERS`] with its rank or its
    /// size variable set, [`Launcher::Single`] when none is. Whether the pair is complete
    /// and valid is [`JobEnv::from_vars`]'s to check.
    pub fn detect(get: impl Fn(&str) -> Option<String>) -> Launcher {
        LAUNCHERS
            .iter()
            .find(|(_, rank, size)| get(rank).is_some() || get(size).is_some())
            .map_or(Launcher::Single, |&(launcher, _, _)| launcher)
    }

    /// The variables that carry rank and size under this launcher (none for a single
    /// rank).
    pub fn vars(self) -> Option<(&'static str, &'static str)> {
        LAUNCHERS
            .iter()
            .find(|(l, _, _)| *l == self)
            .map(|&(_, rank, size)| (rank, size))
    }
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
    /// The rendezvous `host:port` (`None` for a single rank).
    pub rendezvous: Option<String>,
    /// The job secret.
    pub secret: String,
    /// Timeout of every bootstrap wait.
    pub timeout: Duration,
}

/// Default bootstrap timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl JobEnv {
    /// The same job for its `session`-th runtime in one process (0: the first): the
    /// rendezvous port moves up by `session`, so a runtime never meets the rendezvous of
    /// an earlier one whose threads may still be winding down. Every rank must use the
    /// same session numbers in the same order.
    pub fn session(&self, session: u16) -> Result<Self, BootstrapError> {
        let mut env = self.clone();
        if session == 0 {
            return Ok(env);
        }
        if let Some(addr) = &self.rendezvous {
            let bad = |reason: &str| BootstrapError::BadVar {
                var: "rendezvous address".into(),
                value: addr.clone(),
                reason: reason.into(),
            };
            let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
            let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
            let port = port
                .checked_add(session)
                .ok_or_else(|| bad("no port left for another runtime in this job"))?;
            env.rendezvous = Some(format!("{host}:{port}"));
        }
        Ok(env)
    }

    /// Whether a launcher started this process: it is one rank of a job whose other ranks
    /// are other processes (even a job of one), so it runs over a multi-process backend,
    /// never in-process ranks.
    pub fn launched(&self) -> bool {
        self.launcher != Launcher::Single
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, BootstrapError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a map in tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        let num = |var: &str, v: String| -> Result<u32, BootstrapError> {
            v.trim().parse::<u32>().map_err(|_| BootstrapError::BadVar {
                var: var.into(),
                value: v.clone(),
                reason: "not a non-negative integer".into(),
            })
        };
        let launcher = Launcher::detect(&get);
        let (rank, size) = match launcher.vars() {
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
                let (rank, size) = (num(rv, r)?, num(sv, s.clone())?);
                if size == 0 {
                    return Err(BootstrapError::BadVar {
                        var: sv.into(),
                        value: s,
                        reason: "a job has at least one rank".into(),
                    });
                }
                if rank >= size {
                    return Err(BootstrapError::Missing(format!(
                        "rank {rank} is not below the job size {size}"
                    )));
                }
                (rank, size)
            }
        };
        let timeout = match get("TITUS_BOOTSTRAP_TIMEOUT") {
            None => DEFAULT_TIMEOUT,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
                _ => {
                    return Err(BootstrapError::BadVar {
                        var: "TITUS_BOOTSTRAP_TIMEOUT".into(),
                        value: v,
                        reason: "expected a positive number of seconds".into(),
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
        let rendezvous = match get("TITUS_BOOTSTRAP") {
            Some(v)
                if v.rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok()) =>
            {
                Some(v)
            }
            Some(v) => {
                return Err(BootstrapError::BadVar {
                    var: "TITUS_BOOTSTRAP".into(),
                    value: v,
                    reason: "expected host:port".into(),
                });
            }
            None if launcher == Launcher::Slurm => {
                let nodes = get("SLURM_STEP_NODELIST").or_else(|| get("SLURM_JOB_NODELIST"));
                match (nodes.as_deref().and_then(first_host), get("SLURM_JOB_ID")) {
                    (Some(host), Some(job)) => {
                        let job: u64 = job.trim().parse().unwrap_or(0);
                        let step: u64 = get("SLURM_STEP_ID")
                            .and_then(|s| s.trim().parse().ok())
                            .unwrap_or(0);
                        Some(format!("{host}:{}", 30_000 + (job * 31 + step) % 20_000))
                    }
                    _ => None,
                }
            }
            None => None,
        };
        if size > 1 && rendezvous.is_none() {
            return Err(BootstrapError::Missing(
                "TITUS_BOOTSTRAP is not set: give the rendezvous address host:port (rank 0 serves it), \
                 or start the job with `titus launch`"
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
        if size > 1 && secret.is_empty() {
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
            rendezvous,
            secret,
            timeout,
        })
    }
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
        // Port 30000 + (job × 31 + step) mod 20000.
        assert_eq!(e.rendezvous.as_deref(), Some("cn017:48254"));
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
        for (launcher, rank, size) in LAUNCHERS {
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
    }

    #[test]
    fn host_lists() {
        assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("single").as_deref(), Some("single"));
        assert_eq!(first_host("").as_deref(), None);
    }
}
