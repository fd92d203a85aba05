//! The default worker count: this rank's share of the cores its process may use.
//!
//! A rank never starts more workers by default than its share. Over a multi-process
//! backend every rank tells the others its node ([`titus_fabric::bootstrap::node_identity`])
//! and the CPUs its process may run on (its affinity mask); a rank's share is then the sum,
//! over its CPUs, of 1 / the number of ranks of its node whose mask holds that CPU (scaled
//! by a cgroup quota below the mask) — the whole node divided by its ranks where nobody
//! bound them, each rank's own cores where a launcher gave it cores of its own (`titus
//! launch`, `mpirun --bind-to core`, `srun --cpu-bind=cores`), a socket divided by its
//! ranks where they were bound to sockets. In one process ([`crate::Runtime::local`])
//! every rank is local: the cores divided by the ranks. Where the masks cannot be read,
//! the ranks on this node as the launcher reports them
//! ([`JobEnv::ranks_on_node`](titus_fabric::bootstrap::JobEnv::ranks_on_node)) divide the
//! cores.

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

/// The default worker count of one of `local_ranks` ranks on this node, without the other
/// ranks' masks: [`workers_for`]`(`[`available_cores`]`(), local_ranks)`.
pub fn default_workers(local_ranks: u32) -> usize {
    workers_for(available_cores(), local_ranks)
}

/// The CPUs this process may run on (its affinity mask), ascending; empty where the
/// platform cannot tell.
pub fn affinity() -> Vec<u32> {
    rustix::thread::sched_getaffinity(None).map_or(Vec::new(), |set| {
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .map(|c| c as u32)
            .collect()
    })
}

/// Most CPUs a rank may announce (a remote blob with more is refused).
const CPUS_MAX: usize = 1 << 16;

/// What a rank tells the others for the default worker count: its node and its CPUs.
pub(crate) fn placement(node: &str, cpus: &[u32]) -> Vec<u8> {
    let id = &node.as_bytes()[..node.len().min(u16::MAX as usize)];
    let cpus = &cpus[..cpus.len().min(CPUS_MAX)];
    let mut b = Vec::with_capacity(6 + id.len() + 4 * cpus.len());
    b.extend_from_slice(&(id.len() as u16).to_le_bytes());
    b.extend_from_slice(id);
    b.extend_from_slice(&(cpus.len() as u32).to_le_bytes());
    for c in cpus {
        b.extend_from_slice(&c.to_le_bytes());
    }
    b
}

/// A rank's [`placement`] (read from another rank: every length checked).
pub(crate) fn decode_placement(b: &[u8]) -> Result<(&[u8], Vec<u32>), String> {
    let take = |at: usize, n: usize| {
        at.checked_add(n)
            .and_then(|end| b.get(at..end))
            .ok_or_else(|| format!("{} bytes, {n} wanted at {at}", b.len()))
    };
    let idlen = u16::from_le_bytes(take(0, 2)?.try_into().expect("2 bytes")) as usize;
    let id = take(2, idlen)?;
    let n = u32::from_le_bytes(take(2 + idlen, 4)?.try_into().expect("4 bytes")) as usize;
    if n > CPUS_MAX {
        return Err(format!("{n} CPUs (at most {CPUS_MAX})"));
    }
    let at = 6 + idlen;
    if b.len() != at + 4 * n {
        return Err(format!("{} bytes for {n} CPUs", b.len()));
    }
    let cpus = take(at, 4 * n)?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok((id, cpus))
}

/// Rank `me`'s share of its node's cores, from every rank's [`placement`] (`all`, in rank
/// order) and the cores its process may use (`available`: below the mask under a cgroup
/// quota): Σ over its CPUs of 1 / the ranks of its node whose mask holds the CPU, scaled by
/// `available` / its mask; at least 1. `None` where its own mask is unknown (empty).
pub(crate) fn share(me: usize, all: &[(&[u8], Vec<u32>)], available: usize) -> Option<usize> {
    let (node, mine) = all.get(me)?;
    if mine.is_empty() {
        return None;
    }
    let mut holders: std::collections::HashMap<u32, u32> = mine.iter().map(|&c| (c, 0)).collect();
    for (_, cpus) in all.iter().filter(|(n, _)| n == node) {
        for c in cpus {
            if let Some(h) = holders.get_mut(c) {
                *h += 1;
            }
        }
    }
    let sum: f64 = holders.values().map(|&h| 1.0 / f64::from(h.max(1))).sum();
    let quota = (available as f64 / mine.len() as f64).min(1.0);
    // (A share of 2.9999 from float sums is 3.)
    Some(((sum * quota + 1e-6).floor() as usize).max(1))
}

/// The default worker count of rank `me` from every rank's [`placement`] blob (`blobs`, in
/// rank order); without its own mask, [`default_workers`]`(local_ranks)`.
pub(crate) fn workers_among(
    me: usize,
    blobs: &[Vec<u8>],
    local_ranks: u32,
) -> Result<usize, crate::RuntimeError> {
    let all = blobs
        .iter()
        .enumerate()
        .map(|(r, b)| {
            decode_placement(b)
                .map_err(|e| crate::RuntimeError::Config(format!("rank {r}'s cores and node: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(share(me, &all, available_cores()).unwrap_or_else(|| default_workers(local_ranks)))
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
    fn a_share_counts_each_cpu_over_the_ranks_whose_mask_holds_it() {
        let id = |s: &'static str| s.as_bytes();
        let full: Vec<u32> = (0..16).collect();
        // Nobody bound: 16 cores, 4 ranks on the node (and one on another node).
        let mut all: Vec<(&[u8], Vec<u32>)> = vec![(id("a"), full.clone()); 4];
        all.push((id("b"), full.clone()));
        assert_eq!(share(0, &all, 16), Some(4));
        assert_eq!(share(4, &all, 16), Some(16), "alone on its node");
        // Bound to cores of their own: each rank all of its slice.
        let all: Vec<(&[u8], Vec<u32>)> = (0..4)
            .map(|r| (id("a"), (r * 4..r * 4 + 4).collect()))
            .collect();
        assert_eq!(share(2, &all, 4), Some(4));
        // Bound to sockets of 8 cores, two ranks each: half a socket.
        let all: Vec<(&[u8], Vec<u32>)> = (0..4)
            .map(|r| (id("a"), ((r / 2) * 8..(r / 2) * 8 + 8).collect()))
            .collect();
        assert_eq!(share(3, &all, 8), Some(4));
        // Two ranks on one core: at least one worker. A quota of 2 cores on a mask of 16.
        let all: Vec<(&[u8], Vec<u32>)> = vec![(id("a"), vec![0]); 2];
        assert_eq!(share(1, &all, 1), Some(1));
        let all: Vec<(&[u8], Vec<u32>)> = vec![(id("a"), full.clone()); 1];
        assert_eq!(share(0, &all, 2), Some(2));
        // An unknown mask gives way to the launcher's count.
        let all: Vec<(&[u8], Vec<u32>)> = vec![(id("a"), Vec::new())];
        assert_eq!(share(0, &all, 2), None);
    }

    #[test]
    fn placements_round_trip_and_bad_ones_are_named() {
        let b = placement("host|boot", &[0, 5, 7]);
        let (id, cpus) = decode_placement(&b).unwrap();
        assert_eq!((id, cpus), (&b"host|boot"[..], vec![0, 5, 7]));
        assert!(decode_placement(&b[..b.len() - 1]).is_err());
        assert!(decode_placement(&[]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(
            decode_placement(&long)
                .unwrap_err()
                .contains("bytes for 3 CPUs")
        );
        let mut huge = placement("h", &[]);
        huge[3..7].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            decode_placement(&huge)
                .unwrap_err()
                .contains("CPUs (at most")
        );
        let blobs = vec![placement("h", &[0, 1]), b"\x05".to_vec()];
        let e = workers_among(0, &blobs, 1).unwrap_err().to_string();
        assert!(e.contains("rank 1's cores and node"), "{e}");
    }
}
