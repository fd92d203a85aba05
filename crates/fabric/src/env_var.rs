//! Every environment variable Titus reads outside the launcher's, in one place, each with
//! its default. The launcher's own variables (rank, size, local ranks, the rendezvous,
//! Slurm's, Open MPI's, PMIx's) describe the job rather than tune Titus: they are read
//! together by [`crate::bootstrap::JobEnv`], from its tables
//! ([`crate::bootstrap::LAUNCHERS`]). Test-only variables (`TITUS_SEED`,
//! `TITUS_SOAK_EPOCHS`, `TITUS_BLESS`) stay with their tests.

/// One variable: its name, its default, and what it does.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// The name.
    pub name: &'static str,
    /// What applies while it is unset (or empty, where that counts as unset).
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// `TITUS_PROVIDER`.
pub const PROVIDER: Var = Var {
    name: "TITUS_PROVIDER",
    default: "none: the backend chooses (node on one node, hybrid across nodes)",
    meaning: "a backend (node, hybrid) or a libfabric provider every rank must use",
};
/// `FI_PROVIDER`, libfabric's own.
pub const FI_PROVIDER: Var = Var {
    name: "FI_PROVIDER",
    default: "none",
    meaning: "libfabric's provider, where TITUS_PROVIDER forces none",
};
/// `TITUS_NODE_ID`.
pub const NODE_ID: Var = Var {
    name: "TITUS_NODE_ID",
    default: "the host name, boot id and mount and pid namespaces",
    meaning: "this process's node identity, to play several nodes on one machine",
};
/// `TITUS_JOB_SECRET`.
pub const JOB_SECRET: Var = Var {
    name: "TITUS_JOB_SECRET",
    default: "the rendezvous: derived from the launcher (Slurm's step, Open MPI's namespace); \
              the node backend: a random tag per opening",
    meaning: "the job's secret (titus launch sets it): the rendezvous refuses a process \
              without it, and the node backend names its shared-memory files by it",
};
/// `TITUS_PROGRESS_MAX_SLEEP_US`.
pub const PROGRESS_MAX_SLEEP_US: Var = Var {
    name: "TITUS_PROGRESS_MAX_SLEEP_US",
    default: "1000",
    meaning: "the longest nap of libfabric's idle progress thread, 1..=1000000 µs",
};
/// `TITUS_IFACE`.
pub const IFACE: Var = Var {
    name: "TITUS_IFACE",
    default: "the first interface other hosts can reach",
    meaning: "the network interface (libfabric domain) to open on",
};
/// `TITUS_LOG`.
pub const LOG: Var = Var {
    name: "TITUS_LOG",
    default: "warnings",
    meaning: "a log filter: a level, or Titus targets with levels",
};
/// `TITUS_OPTIONS`.
pub const OPTIONS: Var = Var {
    name: "TITUS_OPTIONS",
    default: "none",
    meaning: "libtitus options applied after the program's own (so they win)",
};
/// `TITUS_TRACE`.
pub const TRACE: Var = Var {
    name: "TITUS_TRACE",
    default: "off",
    meaning: "a directory: each rank writes its timeline there (titus trace DIR merges them)",
};
/// `TITUS_CONFORMANCE_ONLY`.
pub const CONFORMANCE_ONLY: Var = Var {
    name: "TITUS_CONFORMANCE_ONLY",
    default: "every case",
    meaning: "run only the fabric conformance cases whose name contains it",
};

/// Every variable of this module.
pub const VARS: [Var; 10] = [
    PROVIDER,
    FI_PROVIDER,
    NODE_ID,
    JOB_SECRET,
    PROGRESS_MAX_SLEEP_US,
    IFACE,
    LOG,
    OPTIONS,
    TRACE,
    CONFORMANCE_ONLY,
];

/// A variable that is set to something Titus cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// Not UTF-8 (read as unset, it would silently change the job).
    #[error("{0} is not valid UTF-8")]
    NotText(&'static str),
    /// A value outside the variable's range.
    #[error("{name}='{value}': expected {expected}")]
    OutOfRange {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
}

/// `var`'s value, `None` where unset.
pub fn get(var: Var) -> Result<Option<String>, EnvError> {
    match std::env::var(var.name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(EnvError::NotText(var.name)),
    }
}

/// `var`'s value, trimmed, where set and not blank.
pub fn non_blank(var: Var) -> Option<String> {
    std::env::var(var.name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// [`PROGRESS_MAX_SLEEP_US`]: microseconds in 1..=1000000, 1000 where unset.
pub fn progress_max_sleep_us() -> Result<u64, EnvError> {
    match get(PROGRESS_MAX_SLEEP_US)? {
        None => Ok(1_000),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(us) if (1..=1_000_000).contains(&us) => Ok(us),
            _ => Err(EnvError::OutOfRange {
                name: PROGRESS_MAX_SLEEP_US.name,
                value: v,
                expected: "microseconds in 1..=1000000",
            }),
        },
    }
}

/// [`IFACE`]: an interface name of at most 64 bytes, `None` where unset or empty.
pub fn iface() -> Result<Option<String>, EnvError> {
    let bad = |value: String| EnvError::OutOfRange {
        name: IFACE.name,
        value,
        expected: "an interface name (at most 64 bytes of UTF-8)",
    };
    match std::env::var_os(IFACE.name) {
        None => Ok(None),
        Some(v) => {
            let v = v
                .into_string()
                .map_err(|raw| bad(raw.to_string_lossy().into_owned()))?;
            if v.len() > 64 || v.contains('\0') {
                return Err(bad(v));
            }
            Ok(Some(v).filter(|v| !v.is_empty()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_listed_once_and_documented() {
        let mut names: Vec<&str> = VARS.iter().map(|v| v.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VARS.len());
        assert!(
            VARS.iter()
                .all(|v| !v.default.is_empty() && !v.meaning.is_empty())
        );
    }
}
