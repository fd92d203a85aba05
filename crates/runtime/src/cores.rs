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

/// Most runs of CPUs a rank may announce, and most CPUs in all (a remote blob with more
/// is refused).
const RUNS_MAX: usize = 1 << 16;
const CPUS_MAX: usize = 1 << 18;

/// What a rank tells the others for the default worker count: its node (a 64-bit FNV-1a
/// hash of [`titus_fabric::bootstrap::node_identity`]) and its CPUs as runs (first, count):
/// 8 + 4 + 8 bytes for a contiguous mask, whatever the job's size.
pub(crate) fn placement(node: &str, cpus: &[u32]) -> Vec<u8> {
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &c in cpus {
        match runs.last_mut() {
            Some((first, n)) if first.checked_add(*n) == Some(c) => *n += 1,
            _ => runs.push((c, 1)),
        }
    }
    runs.truncate(RUNS_MAX);
    let mut b = Vec::with_capacity(12 + 8 * runs.len());
    b.extend_from_slice(&hash.to_le_bytes());
    b.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for (first, n) in runs {
        b.extend_from_slice(&first.to_le_bytes());
        b.extend_from_slice(&n.to_le_bytes());
    }
    b
}

/// A rank's [`placement`]: its node's hash and its CPUs (read from another rank: every
/// length checked).
pub(crate) fn decode_placement(b: &[u8]) -> Result<(u64, Vec<u32>), String> {
    let word = |at: usize| -> Result<u32, String> {
        b.get(at..at + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
            .ok_or_else(|| format!("{} bytes, cut at {at}", b.len()))
    };
    let hash = b
        .get(..8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .ok_or_else(|| format!("{} bytes, no node", b.len()))?;
    let runs = word(8)? as usize;
    if runs > RUNS_MAX {
        return Err(format!("{runs} runs of CPUs (at most {RUNS_MAX})"));
    }
    if b.len() != 12 + 8 * runs {
        return Err(format!("{} bytes for {runs} runs of CPUs", b.len()));
    }
    let mut cpus = Vec::new();
    for i in 0..runs {
        let (first, n) = (word(12 + 8 * i)?, word(16 + 8 * i)?);
        if u64::from(first) + u64::from(n) > u64::from(u32::MAX)
            || cpus.len() + n as usize > CPUS_MAX
        {
            return Err(format!("CPUs {first} + {n} out of range"));
        }
        cpus.extend(first..first + n);
    }
    Ok((hash, cpus))
}

/// Rank `me`'s share of its node's cores, from every rank's [`placement`] (`all`, in rank
/// order) and the cores its process may use (`available`: below the mask under a cgroup
/// quota): Σ over its CPUs of 1 / the ranks of its node whose mask holds the CPU, scaled by
/// `available` / its mask; at least 1. `None` where its own mask is unknown (empty).
pub(crate) fn share(me: usize, all: &[(u64, Vec<u32>)], available: usize) -> Option<usize> {
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
        let id = |s: &'static str| s.len() as u64;
        let full: Vec<u32> = (0..16).collect();
        // Nobody bound: 16 cores, 4 ranks on the node (and one on another node).
        let mut all: Vec<(u64, Vec<u32>)> = vec![(id("a"), full.clone()); 4];
        all.push((id("bb"), full.clone()));
        assert_eq!(share(0, &all, 16), Some(4));
        assert_eq!(share(4, &all, 16), Some(16), "alone on its node");
        // Bound to cores of their own: each rank all of its slice.
        let all: Vec<(u64, Vec<u32>)> = (0..4)
            .map(|r| (id("a"), (r * 4..r * 4 + 4).collect()))
            .collect();
        assert_eq!(share(2, &all, 4), Some(4));
        // Bound to sockets of 8 cores, two ranks each: half a socket.
        let all: Vec<(u64, Vec<u32>)> = (0..4)
            .map(|r| (id("a"), ((r / 2) * 8..(r / 2) * 8 + 8).collect()))
            .collect();
        assert_eq!(share(3, &all, 8), Some(4));
        // Two ranks on one core: at least one worker. A quota of 2 cores on a mask of 16.
        let all: Vec<(u64, Vec<u32>)> = vec![(id("a"), vec![0]); 2];
        assert_eq!(share(1, &all, 1), Some(1));
        let all: Vec<(u64, Vec<u32>)> = vec![(id("a"), full.clone()); 1];
        assert_eq!(share(0, &all, 2), Some(2));
        // An unknown mask gives way to the launcher's count.
        let all: Vec<(u64, Vec<u32>)> = vec![(id("a"), Vec::new())];
        assert_eq!(share(0, &all, 2), None);
    }

    #[test]
    fn placements_round_trip_and_bad_ones_are_named() {
        let b = placement("host|boot", &[0, 1, 2, 5, 7, 8]);
        assert_eq!(b.len(), 12 + 8 * 3, "three runs");
        let (node, cpus) = decode_placement(&b).unwrap();
        assert_eq!(cpus, [0, 1, 2, 5, 7, 8]);
        assert_eq!(
            node,
            decode_placement(&placement("host|boot", &[])).unwrap().0
        );
        assert_ne!(
            node,
            decode_placement(&placement("host|boot2", &[])).unwrap().0
        );
        assert!(decode_placement(&b[..b.len() - 1]).is_err());
        assert!(decode_placement(&[]).unwrap_err().contains("no node"));
        let mut long = b.clone();
        long.push(0);
        assert!(
            decode_placement(&long)
                .unwrap_err()
                .contains("bytes for 3 runs")
        );
        let mut huge = placement("h", &[]);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            decode_placement(&huge)
                .unwrap_err()
                .contains("runs of CPUs (at most")
        );
        let mut wide = placement("h", &[0]);
        wide[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            decode_placement(&wide)
                .unwrap_err()
                .contains("out of range")
        );
        let blobs = vec![placement("h", &[0, 1]), b"\x05".to_vec()];
        let e = workers_among(0, &blobs, 1).unwrap_err().to_string();
        assert!(e.contains("rank 1's cores and node"), "{e}");
    }
}
