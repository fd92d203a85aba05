//! The hybrid backend (`backend=hybrid`, the automatic choice for a job across nodes):
//! the node backend's shared memory between the ranks of one node, libfabric between
//! nodes, over one memory — each rank's segments live in its node object, and libfabric
//! registers that same memory.
//!
//! Reads, writes and signals take the node backend to a peer on this node and libfabric
//! to the others. **Every atomic goes through libfabric**, to local peers and to this
//! rank itself too (`coherent_atomics: false`): a word that some ranks changed with CPU
//! atomics and others with libfabric's software atomics (the target's progress thread
//! doing read-compare-write) could lose an update, so each word has one mechanism. The
//! `request` protocol (libtitus's default) steals with writes and signals only, so its
//! steals inside a node are the node backend's; `claim` and `lock` pay libfabric's atomics
//! (see `docs/design.md` for the owner-executed CPU atomics that would lift that).
//!
//! Progress: a helper thread blocks in libfabric's progress (it serves remote operations
//! on this rank's memory, as every libfabric rank's progress thread does), queues the
//! signals it collects and wakes the node backend's futex, on which [`Fabric::progress`]
//! sleeps: one wait for both.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use titus_fabric::backend::{AllGather, Opened, Opener};
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{
    Capabilities, Fabric, FabricConfig, FabricError, Loc, OpId, Piece, Rank, Segment, SegmentId,
    Signal,
};
use titus_fabric_node::NodeFabric;
use titus_fabric_ofi::OfiFabric;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Longest block of the helper thread in libfabric's progress (its bound on noticing
/// that the fabric is dropped).
const HELPER_WAIT: Duration = Duration::from_millis(50);

/// Operation ids: the inner id shifted left, the low bit saying which backend.
const VIA_OFI: u64 = 1;

fn node_op(id: OpId) -> OpId {
    OpId(id.0 << 1)
}
fn ofi_op(id: OpId) -> OpId {
    OpId(id.0 << 1 | VIA_OFI)
}

/// What the helper thread and the fabric share.
#[derive(Debug)]
struct Inner {
    node: NodeFabric,
    ofi: OfiFabric,
    /// Signals libfabric delivered, not yet collected by a progress call.
    forwarded: Mutex<VecDeque<Signal>>,
    stop: AtomicBool,
}

/// One rank of the hybrid backend. See the crate documentation.
#[derive(Debug)]
pub struct HybridFabric {
    inner: Arc<Inner>,
    caps: Capabilities,
    helper: Option<JoinHandle<()>>,
}

impl HybridFabric {
    /// Opens rank `rank` of `size`: the node backend for the peers on this node, then
    /// libfabric (`provider`, or automatic) over the same memory for everyone.
    /// Collective; libfabric keeps the exchange for the job's later all-gathers
    /// ([`HybridFabric::all_gather`]).
    pub fn open(
        rank: Rank,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Self, FabricError> {
        let (node, exchange) = titus_fabric_node::open_local(rank, size, exchange, config.clone())?;
        let views = node.segment_views()?;
        let ofi = OfiFabric::open_over(rank, size, exchange, config, provider, views)?;
        let caps = Capabilities {
            backend: "hybrid",
            provider: format!("node+{}", ofi.caps().provider),
            coherent_atomics: false,
            // The helper thread serves libfabric's remote operations on this memory.
            target_progress: false,
            ordered_signal: ofi.caps().ordered_signal && node.caps().ordered_signal,
            polled_progress: ofi.caps().polled_progress,
            immediate: false,
            addressing: ofi.caps().addressing,
            keys: ofi.caps().keys,
        };
        let inner = Arc::new(Inner {
            node,
            ofi,
            forwarded: Mutex::new(VecDeque::new()),
            stop: AtomicBool::new(false),
        });
        let i2 = inner.clone();
        let helper = std::thread::Builder::new()
            .name(format!("titus-hybrid-{rank}"))
            .spawn(move || helper(&i2))
            .map_err(|e| FabricError::Unsupported(format!("cannot start a thread: {e}")))?;
        Ok(Self {
            inner,
            caps,
            helper: Some(helper),
        })
    }

    /// The job-wide all-gather over the exchange given to [`HybridFabric::open`].
    pub fn all_gather(
        &self,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, titus_fabric::bootstrap::BootstrapError> {
        self.inner.ofi.with_rendezvous(|rv| {
            rv.map_or_else(|| Ok(vec![blob.to_vec()]), |rv| rv.all_gather(blob))
        })
    }

    /// How long opening took (both backends).
    pub fn connect_time(&self) -> Duration {
        self.inner.node.connect_time() + self.inner.ofi.connect_time()
    }

    fn local(&self, peer: Rank) -> bool {
        self.inner.node.is_local(peer)
    }
}

/// The helper thread: libfabric's progress, its signals handed over through the node's
/// futex.
fn helper(inner: &Inner) {
    let mut signals = Vec::new();
    while !inner.stop.load(Ordering::Acquire) {
        if inner.ofi.progress(HELPER_WAIT, &mut signals).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !signals.is_empty() {
            lock(&inner.forwarded).extend(signals.drain(..));
        }
        // A signal, a completion or a timeout: let a sleeping progress call look.
        inner.node.wake();
    }
}

impl Drop for HybridFabric {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.ofi.wake();
        if let Some(h) = self.helper.take() {
            let _ = h.join();
        }
    }
}

impl Fabric for HybridFabric {
    fn rank(&self) -> Rank {
        self.inner.node.rank()
    }

    fn size(&self) -> u32 {
        self.inner.node.size()
    }

    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn op_timeout(&self) -> Duration {
        self.inner.node.op_timeout()
    }

    fn segment(&self, id: SegmentId) -> Result<&Segment, FabricError> {
        self.inner.node.segment(id)
    }

    fn read(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError> {
        if self.local(peer) {
            self.inner.node.read(peer, remote, local, len).map(node_op)
        } else {
            self.inner.ofi.read(peer, remote, local, len).map(ofi_op)
        }
    }

    fn write_gather(
        &self,
        peer: Rank,
        remote: Loc,
        pieces: &[Piece],
        signal: Option<u64>,
    ) -> Result<OpId, FabricError> {
        if self.local(peer) {
            self.inner
                .node
                .write_gather(peer, remote, pieces, signal)
                .map(node_op)
        } else {
            self.inner
                .ofi
                .write_gather(peer, remote, pieces, signal)
                .map(ofi_op)
        }
    }

    fn compare_swap(
        &self,
        peer: Rank,
        remote: Loc,
        expected: u64,
        desired: u64,
    ) -> Result<OpId, FabricError> {
        self.inner
            .ofi
            .compare_swap(peer, remote, expected, desired)
            .map(ofi_op)
    }

    fn fetch_add(&self, peer: Rank, remote: Loc, delta: u64) -> Result<OpId, FabricError> {
        self.inner.ofi.fetch_add(peer, remote, delta).map(ofi_op)
    }

    fn test(&self, op: OpId) -> Option<Result<u64, FabricError>> {
        let inner = OpId(op.0 >> 1);
        let r = if op.0 & VIA_OFI != 0 {
            self.inner.ofi.test(inner)
        } else {
            self.inner.node.test(inner)
        };
        r.map(|r| r.map_err(|e| rename(e, op)))
    }

    fn wait(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError> {
        let inner = OpId(op.0 >> 1);
        if op.0 & VIA_OFI != 0 {
            self.inner.ofi.wait(inner, timeout)
        } else {
            self.inner.node.wait(inner, timeout)
        }
        .map_err(|e| rename(e, op))
    }

    fn progress(&self, timeout: Duration, signals: &mut Vec<Signal>) -> Result<(), FabricError> {
        let before = signals.len();
        signals.extend(lock(&self.inner.forwarded).drain(..));
        if signals.len() > before {
            // Still collect what the node backend has, without blocking.
            return self.inner.node.progress(Duration::ZERO, signals);
        }
        self.inner.node.progress(timeout, signals)?;
        signals.extend(lock(&self.inner.forwarded).drain(..));
        Ok(())
    }

    fn wake(&self) {
        self.inner.node.wake();
    }

    fn drain_completions(&self, out: &mut Vec<(OpId, Result<u64, FabricError>)>) {
        let start = out.len();
        self.inner.node.drain_completions(out);
        for (id, _) in &mut out[start..] {
            *id = node_op(*id);
        }
        let mid = out.len();
        self.inner.ofi.drain_completions(out);
        for (id, _) in &mut out[mid..] {
            *id = ofi_op(*id);
        }
    }

    fn poll(&self) {
        self.inner.ofi.poll();
    }

    fn set_progress_nap(&self, max: Duration) {
        self.inner.ofi.set_progress_nap(max);
    }

    fn peer_gone(&self, peer: Rank) -> Option<String> {
        if self.local(peer) {
            self.inner.node.peer_gone(peer)
        } else {
            self.inner.ofi.peer_gone(peer)
        }
    }
}

/// An inner backend's "unknown operation" names the inner id: name the hybrid's.
fn rename(e: FabricError, op: OpId) -> FabricError {
    match e {
        FabricError::UnknownOp(_) => FabricError::UnknownOp(op),
        e => e,
    }
}

/// The hybrid backend, for the runtime's table of backends (`backend=hybrid`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Hybrid;

impl Opener for Hybrid {
    fn name(&self) -> &'static str {
        "hybrid"
    }

    fn available(&self) -> bool {
        titus_fabric_ofi::available() && cfg!(target_os = "linux")
    }

    /// A job across nodes, no transport forced (`hybrid` forces it).
    fn suits(&self, one_node: bool, forced: Option<&str>) -> bool {
        match forced {
            Some(p) => p == "hybrid",
            None => !one_node,
        }
    }

    fn open(
        &self,
        rank: Rank,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Opened, FabricError> {
        let provider = provider.filter(|p| *p != "hybrid");
        let fabric = Arc::new(HybridFabric::open(rank, size, exchange, config, provider)?);
        let f2 = fabric.clone();
        let all_gather: AllGather = Box::new(move |blob| f2.all_gather(blob));
        Ok(Opened { fabric, all_gather })
    }
}
