//! The job's environment: what the launcher told this process.
//!
//! Rank and size come from the launcher's environment, first match wins:
//! `TITUS_RANK`/`TITUS_SIZE` (`titus launch`), `SLURM_PROCID`/`SLURM_NTASKS` (srun),
//! `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE` (Open MPI's mpirun), `PMI_RANK`/`PMI_SIZE`
//! (MPICH/Hydra and other PMI launchers); with none, a single rank.

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

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, BootstrapError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a map in tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        let pairs = [
            ("TITUS_RANK", "TITUS_SIZE", Launcher::Titus),
            ("SLURM_PROCID", "SLURM_NTASKS", Launcher::Slurm),
            (
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                Launcher::OpenMpi,
            ),
            ("PMI_RANK", "PMI_SIZE", Launcher::Pmi),
        ];
        let num = |var: &str, v: String| -> Result<u32, BootstrapError> {
            v.trim().parse::<u32>().map_err(|_| BootstrapError::BadVar {
                var: var.into(),
                value: v.clone(),
                reason: "not a non-negative integer".into(),
            })
        };
        let mut found = None;
        for (rv, sv, launcher) in pairs {
            match (get(rv), get(sv)) {
                (Some(r), Some(s)) => {
                    found = Some((num(rv, r)?, num(sv, s.clone())?, launcher, sv, s));
                    break;
                }
                (Some(_), None) => {
                    return Err(BootstrapError::Missing(format!(
                        "{rv} is set but {sv} is not"
                    )));
                }
                (None, Some(_)) => {
                    return Err(BootstrapError::Missing(format!(
                        "{sv} is set but {rv} is not"
                    )));
                }
                (None, None) => {}
            }
        }
        let (rank, size, launcher) = match found {
            Some((rank, size, launcher, sv, s)) => {
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
                (rank, size, launcher)
            }
            None => (0, 1, Launcher::Single),
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
