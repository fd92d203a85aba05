//! The node backend of [`titus_fabric::Fabric`]: ranks of one node share their segments
//! through shared memory, and every operation is the initiator's CPU working on the
//! target's mapping — loads, stores, `compare_exchange` and `fetch_add` — complete when
//! the call returns, with no target progress (the physical cost of a steal inside a node
//! is a few cache-line transfers).
//!
//! - **Memory.** Each rank creates one object in `/dev/shm` (owner-only, named
//!   `titus-<tag>-<opening>-<rank>`, the tag derived from the job secret or random) holding a
//!   header, its signal ring and its segments, and maps its peers' objects; the names are
//!   unlinked as soon as every rank has mapped them, so nothing remains after a job, and
//!   `titus launch` removes what killed ranks left ([`remove_leftovers`]).
//! - **Trust.** Segment lengths and exposure come from each rank's announcement through
//!   the bootstrap, checked (truncation, counts, ranks) and checked again against the
//!   object's real size and header; every operation is checked at the initiator as in
//!   every backend; a signal naming a rank outside the job is dropped.
//! - **Signals.** A gathered write copies its data, then puts (sender, value) into the
//!   target's ring (a bounded multi-producer queue) and bumps the target's futex word; the
//!   target's progress call sleeps on that futex (no polling, no nap). A full ring makes
//!   the write wait, retried until the operation timeout.
//! - **Dead peers.** The progress call polls each peer's pidfd (at most every 5 ms);
//!   operations read its verdict, and poll themselves only when it is older than 50 ms
//!   (a sleeping progress thread): a process that exited gives `PeerDead` within that.
//! - **Frozen peers.** Each rank's beat thread advances a word in its own object every
//!   100 ms; a peer whose beat stands still is named by the liveness sweeps: within 5 s
//!   (at most the operation timeout) where `/proc` says it is stopped, traced or waiting
//!   in the kernel, within the operation timeout otherwise (`life.rs`).
//!
//! `unsafe` is confined to `shm` (the mapping, the words, the futex word).

mod fabric;
mod layout;
mod life;
mod open;
pub(crate) mod shm;

pub use fabric::NodeFabric;
pub use open::{job_tag, object_prefix, open, open_local, remove_leftovers};

use std::sync::{Arc, Mutex};
use titus_fabric::backend::{AllGather, Opened, Opener};
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{FabricConfig, FabricError, Rank};

/// The node backend, for the runtime's table of backends (`backend=node`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Node;

impl Opener for Node {
    fn name(&self) -> &'static str {
        "node"
    }

    fn available(&self) -> bool {
        cfg!(target_os = "linux")
    }

    /// Every rank on this node and no provider forced.
    fn suits(&self, one_node: bool, forced: Option<&str>) -> bool {
        one_node && forced.is_none()
    }

    fn open(
        &self,
        rank: Rank,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Opened, FabricError> {
        if let Some(p) = provider {
            return Err(FabricError::Unsupported(format!(
                "the node backend has no provider '{p}' (its only transport is shared memory)"
            )));
        }
        let (fabric, exchange) = open(rank, size, exchange, config)?;
        let exchange = Arc::new(Mutex::new(exchange));
        let all_gather: AllGather = Box::new(move |blob| match fabric::lock(&exchange).as_mut() {
            Some(x) => x.all_gather(blob),
            None => Ok(vec![blob.to_vec()]),
        });
        Ok(Opened {
            fabric: Arc::new(fabric),
            all_gather,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;
    use titus_fabric::{Exposure, Fabric, Loc, Progress, SegmentId, SegmentSpec};

    #[test]
    fn objects_are_owner_only() {
        let name = format!("/titus-test-{}-perm", std::process::id());
        let m = shm::Mapping::create(&name, 4096).unwrap();
        let mode = std::fs::metadata(format!("/dev/shm{name}"))
            .unwrap()
            .permissions()
            .mode();
        shm::Mapping::unlink(&name);
        drop(m);
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // A name that exists already is refused (O_EXCL), never shared.
        let m = shm::Mapping::create(&name, 4096).unwrap();
        assert!(shm::Mapping::create(&name, 4096).is_err());
        shm::Mapping::unlink(&name);
        drop(m);
    }

    #[test]
    fn a_lone_rank_opens_works_on_itself_and_leaves_nothing() {
        let config = FabricConfig {
            segments: vec![SegmentSpec {
                name: "s".into(),
                len: 100,
                exposure: Exposure::All,
            }],
            peers: vec![],
            lazy: false,
            op_timeout: Duration::from_secs(1),
        };
        let (f, x) = open(0, 1, None, config.clone()).unwrap();
        assert!(x.is_none());
        let s = Loc::new(SegmentId(0), 8);
        assert_eq!(f.fetch_add_sync(0, s, 5).unwrap(), 0);
        assert_eq!(f.compare_swap_sync(0, s, 5, 9).unwrap(), 5);
        assert_eq!(f.segment(SegmentId(0)).unwrap().load(8).unwrap(), 9);
        assert!(matches!(
            f.read(1, s, s, 8),
            Err(FabricError::NoSuchRank { rank: 1, size: 1 })
        ));
        assert!(matches!(
            f.read(0, Loc::new(SegmentId(0), 100), s, 8),
            Err(FabricError::OutOfBounds { .. })
        ));
        assert!(matches!(
            f.fetch_add(0, Loc::new(SegmentId(0), 4), 1),
            Err(FabricError::Misaligned { offset: 4 })
        ));
        // A signal to self arrives through the ring and wakes a progress call.
        let op = f.write_gather(0, s, &[], Some(77)).unwrap();
        f.wait(op, Duration::from_secs(1)).unwrap();
        let mut got = Vec::new();
        f.progress(Duration::from_secs(1), &mut got).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].from, got[0].value), (0, 77));
        // While workers serve, the progress call naps unannounced: senders do not wake it.
        // A worker's long task asks them to (each of two workers' until both end), without
        // waking it now (`Progress::long_task`).
        assert!(!f.senders_wake());
        f.set_workers_serve(true);
        f.long_task(true);
        assert!(f.senders_wake());
        f.long_task(true);
        f.long_task(false);
        assert!(f.senders_wake(), "the other worker's task still runs");
        f.long_task(false);
        assert!(!f.senders_wake());
        // And a signal meanwhile reaches the napping progress call.
        f.long_task(true);
        let op = f.write_gather(0, s, &[], Some(78)).unwrap();
        f.wait(op, Duration::from_secs(1)).unwrap();
        got.clear();
        f.progress(Duration::from_secs(1), &mut got).unwrap();
        f.long_task(false);
        assert_eq!(got.iter().map(|g| g.value).collect::<Vec<_>>(), [78]);
        // More ranks need a rendezvous.
        assert!(open(0, 2, None, config).is_err());
    }
}
