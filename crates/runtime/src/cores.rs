//! The default worker count: this rank's share of the cores this process may use.
//!
//! A rank never starts more workers by default than its share: the cores this process may
//! use ([`std::thread::available_parallelism`], which on Linux honours the affinity mask
//! and cgroup CPU quotas) divided by the ranks of the job on this node, at least one. The
//! ranks on this node come from the launcher ([`JobEnv::ranks_on_node`](titus_fabric::bootstrap::JobEnv::ranks_on_node): `titus launch`,
//! Slurm, Open MPI, MPICH/Hydra); in one process ([`crate::Runtime::local`]) every rank is
//! local.

use titus_fabric::bootstrap::local_size_from_vars;

/// The cores this process may use (1 when the platform cannot tell).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Workers for each of `local_ranks` ranks sharing `cores` cores: `max(1, cores /
/// local_ranks)`, never more than the share.
pub fn workers_for(cores: usize, local_ranks: u32) -> usize {
    (cores / (local_ranks.max(1) as usize)).max(1)
}

/// The default worker count of one of `local_ranks` ranks on this node:
/// [`workers_for`]`(`[`available_cores`]`(), local_ranks)` — or every core this process may
/// use where the launcher bound it to cores of its own (`TITUS_CPU_BIND=core`, which
/// `titus launch` sets when it binds): no other rank shares them.
pub fn default_workers(local_ranks: u32) -> Result<usize, crate::RuntimeError> {
    let own = cores_are_own(std::env::var("TITUS_CPU_BIND").ok().as_deref())?;
    Ok(if own {
        available_cores()
    } else {
        workers_for(available_cores(), local_ranks)
    })
}

/// Whether `TITUS_CPU_BIND` (its value, if set) says this process's cores are its own.
fn cores_are_own(var: Option<&str>) -> Result<bool, crate::RuntimeError> {
    match var {
        None | Some("" | "none") => Ok(false),
        Some("core") => Ok(true),
        Some(v) => Err(crate::RuntimeError::Config(format!(
            "TITUS_CPU_BIND='{v}': expected core (this process's cores are its own) or none"
        ))),
    }
}

/// The ranks on this node that this process's environment reports (1 without a launcher
/// or where the launcher does not say, as [`JobEnv::ranks_on_node`](titus_fabric::bootstrap::JobEnv::ranks_on_node)); malformed variables
/// are errors naming the variable.
pub fn ranks_on_node_from_env() -> Result<u32, crate::RuntimeError> {
    let n =
        local_size_from_vars(|k| std::env::var(k).ok()).map_err(titus_fabric::FabricError::from)?;
    Ok(n.unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_never_exceeds_the_share_of_cores() {
        for cores in 1..=256 {
            for local in 1..=300u32 {
                let w = workers_for(cores, local);
                assert!(w >= 1);
                assert!(
                    w == 1 || w * local as usize <= cores,
                    "{cores} cores, {local} ranks"
                );
                // And it takes the whole share.
                assert!((w + 1) * local as usize > cores || w == cores);
            }
        }
        assert_eq!(workers_for(2, 2), 1);
        assert_eq!(workers_for(2, 1), 2);
        assert_eq!(workers_for(64, 3), 21);
        assert_eq!(workers_for(4, 8), 1);
        assert_eq!(workers_for(8, 0), 8);
    }

    #[test]
    fn the_launchers_binding_is_read_and_checked() {
        assert!(!cores_are_own(None).unwrap());
        assert!(!cores_are_own(Some("none")).unwrap());
        assert!(!cores_are_own(Some("")).unwrap());
        assert!(cores_are_own(Some("core")).unwrap());
        let e = cores_are_own(Some("cores")).unwrap_err().to_string();
        assert!(e.contains("TITUS_CPU_BIND='cores'"), "{e}");
    }
}
