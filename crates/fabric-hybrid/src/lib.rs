//! The hybrid backend (`backend=hybrid`, the automatic choice for a job across nodes):
//! the node backend's shared memory between the ranks of one node, libfabric between
//! nodes, over one memory — each rank's segments live in its node object, and libfabric
//! registers that same memory.
//!
//! Reads, writes and signals take the node backend to a peer on this node and libfabric
//! to the others. **Every atomic is a CPU atomic on the owner's memory**: a word that
//! some ranks changed with CPU atomics and others with libfabric's software atomics (the
//! target's progress thread doing read-compare-write) could lose an update, so each word
//! has one mechanism. Ranks of this node do theirs on the mapping; a rank elsewhere sends
//! a request that the owner executes and answers (`mailbox`): a round trip through the
//! owner's progress, what libfabric's software atomics cost anyway.
//!
//! Progress: a helper thread blocks in libfabric's progress (it serves remote operations
//! on this rank's memory and the mailbox's requests), queues the other signals it
//! collects and wakes the node backend's futex, on which [`Fabric::progress`] sleeps: one
//! wait for both.
#![forbid(unsafe_code)]

mod mailbox;

use mailbox::{Kind, Outbox, REP_SLOT, REQ_SLOT, Request, Word};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use titus_fabric::Progress;
use titus_fabric::backend::{AllGather, Opened, Opener};
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{
    Capabilities, Completions, Exposure, Fabric, FabricConfig, FabricError, Loc, OpId, Piece, Rank,
    Segment, SegmentId, Signal,
};
use titus_fabric_node::NodeFabric;
use titus_fabric_ofi::OfiFabric;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Longest block of the helper thread in libfabric's progress (its bound on noticing
/// that the fabric is dropped).
const HELPER_WAIT: Duration = Duration::from_millis(50);

/// Operation ids: the inner id shifted left by two, the low bits saying whose it is.
const VIA_NODE: u64 = 0;
const VIA_OFI: u64 = 1;
const VIA_MAILBOX: u64 = 2;

fn node_op(id: OpId) -> OpId {
    OpId(id.0 << 2 | VIA_NODE)
}
fn ofi_op(id: OpId) -> OpId {
    OpId(id.0 << 2 | VIA_OFI)
}
fn mailbox_op(id: u64) -> OpId {
    OpId(id << 2 | VIA_MAILBOX)
}

/// A libfabric write of the mailbox: its id, and the (owner, sequence) of the atomic a
/// request write carries.
type Internal = (OpId, Option<(Rank, u64)>);

/// What the helper thread and the fabric share.
#[derive(Debug)]
struct Inner {
    node: NodeFabric,
    ofi: OfiFabric,
    /// Signals libfabric delivered, not yet collected by a progress call.
    forwarded: Mutex<VecDeque<Signal>>,
    stop: AtomicBool,
    /// The job's own segments (the mailbox's follow them).
    user_segments: usize,
    exposure: Vec<Exposure>,
    outbox: Mutex<Outbox>,
    /// Remote atomics answered, not yet collected.
    done: Mutex<Completions>,
    next_id: AtomicU64,
    /// libfabric writes of the mailbox (requests, replies), reaped by id; a failed
    /// request write fails its atomic.
    internal: Mutex<Vec<Internal>>,
}

impl Inner {
    fn rank(&self) -> Rank {
        self.node.rank()
    }

    fn seg(&self, k: usize) -> SegmentId {
        SegmentId((self.user_segments + k) as u16)
    }

    /// Sends request `seq` to `peer` (its words from this rank's out slot for it).
    fn send(&self, peer: Rank, seq: u64, r: &Request) {
        let out = self.seg(2);
        let at = u64::from(peer) * REQ_SLOT;
        let words = mailbox::encode_request(seq, r);
        let sent = self.node.segment(out).and_then(|s| {
            for (i, w) in words.iter().enumerate() {
                s.store(at + i as u64 * 8, *w)?;
            }
            self.ofi.write_gather(
                peer,
                Loc::new(self.seg(0), u64::from(self.rank()) * REQ_SLOT),
                &[Piece {
                    local: Loc::new(out, at),
                    len: REQ_SLOT,
                }],
                Some(mailbox::request_signal(seq)),
            )
        });
        match sent {
            Ok(op) => lock(&self.internal).push((op, Some((peer, seq)))),
            Err(e) => self.fail(peer, seq, e),
        }
    }

    /// The atomic in flight to `peer` with `seq` failed: complete it, send the next.
    fn fail(&self, peer: Rank, seq: u64, e: FabricError) {
        self.finish(peer, seq, Err(e));
    }

    /// The atomic in flight to `peer` with `seq` ends with `result` (completed while the
    /// outbox is locked, so a test never sees it neither pending nor done); the next
    /// request to `peer` goes out.
    fn finish(&self, peer: Rank, seq: u64, result: Result<u64, FabricError>) {
        let next = {
            let mut o = lock(&self.outbox);
            let Some((r, next)) = o.answered(peer, seq) else {
                return;
            };
            lock(&self.done).complete(r.id, result);
            next
        };
        if let Some((s, n)) = next {
            self.send(peer, s, &n);
        }
    }

    /// Executes `from`'s request `seq` on this rank's memory and answers it.
    fn serve(&self, from: Rank, seq: u64) {
        if from >= self.node.size() {
            return;
        }
        let Ok(req) = self.node.segment(self.seg(0)) else {
            return;
        };
        let at = u64::from(from) * REQ_SLOT;
        let mut w = [0u64; 8];
        for (i, x) in w.iter_mut().enumerate() {
            *x = req.load(at + i as u64 * 8).unwrap_or(0);
        }
        let done = match mailbox::decode_request(&w, self.user_segments) {
            Err(status) => Err(status),
            Ok((s, _, _)) if s != seq => Err(4),
            Ok((_, loc, _)) if !self.exposure[loc.segment.0 as usize].allows(self.rank(), from) => {
                Err(2)
            }
            Ok((_, loc, kind)) => self
                .node
                .segment(loc.segment)
                .and_then(|s| match kind {
                    Kind::Cas { expected, desired } => {
                        s.compare_exchange(loc.offset, expected, desired)
                    }
                    Kind::FetchAdd { delta } => s.fetch_add(loc.offset, delta),
                })
                .map_err(|_| 3),
        };
        let (value, status) = match done {
            Ok(v) => (v, 0),
            Err(s) => (0, s),
        };
        let out = self.seg(2);
        let at = u64::from(self.node.size()) * REQ_SLOT + u64::from(from) * REP_SLOT;
        let sent = self.node.segment(out).and_then(|s| {
            for (i, x) in [seq, value, status, 0].iter().enumerate() {
                s.store(at + i as u64 * 8, *x)?;
            }
            self.ofi.write_gather(
                from,
                Loc::new(self.seg(1), u64::from(self.rank()) * REP_SLOT),
                &[Piece {
                    local: Loc::new(out, at),
                    len: REP_SLOT,
                }],
                Some(mailbox::reply_signal(seq)),
            )
        });
        if let Ok(op) = sent {
            lock(&self.internal).push((op, None));
        }
    }

    /// `from` answered request `seq`.
    fn answer(&self, from: Rank, seq: u64) {
        if from >= self.node.size() {
            return;
        }
        let Ok(rep) = self.node.segment(self.seg(1)) else {
            return;
        };
        let at = u64::from(from) * REP_SLOT;
        let word = |i: u64| rep.load(at + i * 8).unwrap_or(u64::MAX);
        if word(0) != seq {
            return; // Not the reply awaited (stale or corrupt): the timeout decides.
        }
        let (value, status) = (word(1), word(2));
        let result = if status == 0 {
            Ok(value)
        } else {
            Err(mailbox::refusal(from, status))
        };
        self.finish(from, seq, result);
    }

    /// A finished libfabric operation `op` with `result`: Ok when it was one of the
    /// mailbox's writes (settled: a failed request fails its atomic), else the result
    /// back for its caller.
    fn settle(
        &self,
        op: OpId,
        result: Result<u64, FabricError>,
    ) -> Result<(), Result<u64, FabricError>> {
        let mine = {
            let mut l = lock(&self.internal);
            match l.iter().position(|(o, _)| *o == op) {
                Some(i) => l.swap_remove(i).1,
                None => return Err(result),
            }
        };
        if let (Err(e), Some((peer, seq))) = (result, mine) {
            self.fail(peer, seq, e);
        }
        Ok(())
    }

    /// Collects the mailbox's finished libfabric writes; a failed request fails its atomic.
    /// (One that a drain took meanwhile is settled by that drain.)
    fn reap(&self) {
        let failed = {
            let mut l = lock(&self.internal);
            let mut failed = Vec::new();
            l.retain(|(op, of)| match self.ofi.test(*op) {
                None | Some(Err(FabricError::UnknownOp(_))) => true,
                Some(Ok(_)) => false,
                Some(Err(e)) => {
                    if let Some(x) = of {
                        failed.push((*x, e));
                    }
                    false
                }
            });
            failed
        };
        for ((peer, seq), e) in failed {
            self.fail(peer, seq, e);
        }
    }
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
        let user_segments = config.segments.len();
        if user_segments + 3 > usize::from(u16::MAX) {
            return Err(FabricError::Unsupported("too many segments".into()));
        }
        let exposure = config.segments.iter().map(|s| s.exposure.clone()).collect();
        let mut config = config;
        config.segments.extend(mailbox::segments(size));
        let (node, exchange) = titus_fabric_node::open_local(rank, size, exchange, config.clone())?;
        let views = node.segment_views()?;
        let ofi = OfiFabric::open_over(rank, size, exchange, config, provider, views)?;
        let caps = Capabilities {
            backend: "hybrid",
            provider: format!("node+{}", ofi.caps().provider),
            coherent_atomics: true,
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
            user_segments,
            exposure,
            outbox: Mutex::new(Outbox::default()),
            done: Mutex::new(Completions::default()),
            next_id: AtomicU64::new(1),
            internal: Mutex::new(Vec::new()),
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

    fn local(&self, peer: Rank) -> bool {
        self.inner.node.is_local(peer)
    }

    /// The mailbox's segments are not the job's: refused as unknown.
    fn user(&self, rank: Rank, id: SegmentId) -> Result<(), FabricError> {
        if usize::from(id.0) < self.inner.user_segments {
            Ok(())
        } else {
            Err(FabricError::UnknownSegment {
                rank,
                segment: id.0,
                count: self.inner.user_segments,
            })
        }
    }

    /// An atomic: a CPU atomic on the mapping for this node's ranks, the owner's
    /// execution through the mailbox for the others.
    fn atomic(&self, peer: Rank, remote: Loc, kind: Kind) -> Result<OpId, FabricError> {
        self.user(peer, remote.segment)?;
        if self.local(peer) {
            return match kind {
                Kind::Cas { expected, desired } => self
                    .inner
                    .node
                    .compare_swap(peer, remote, expected, desired),
                Kind::FetchAdd { delta } => self.inner.node.fetch_add(peer, remote, delta),
            }
            .map(node_op);
        }
        self.inner.ofi.check_remote(peer, remote, 8)?;
        if !remote.offset.is_multiple_of(8) {
            return Err(FabricError::Misaligned {
                offset: remote.offset,
            });
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.done).submitted(id);
        let r = Request { id, remote, kind };
        let send = lock(&self.inner.outbox).push(peer, r);
        if let Some(seq) = send {
            self.inner.send(peer, seq, &r);
        }
        Ok(mailbox_op(id))
    }
}

/// Whether the atomic `id` waits in `o`.
fn pending(o: &Outbox, id: u64) -> bool {
    o.in_flight.values().any(|(_, r)| r.id == id)
        || o.waiting.values().flatten().any(|r| r.id == id)
}

/// The helper thread: libfabric's progress, its signals handed over through the node's
/// futex.
fn helper(inner: &Inner) {
    let mut signals = Vec::new();
    while !inner.stop.load(Ordering::Acquire) {
        if inner.ofi.progress(HELPER_WAIT, &mut signals).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut forward = Vec::new();
        for s in signals.drain(..) {
            match mailbox::decode(s.value) {
                Some(Word::Request(seq)) => inner.serve(s.from, seq),
                Some(Word::Reply(seq)) => inner.answer(s.from, seq),
                None => forward.push(s),
            }
        }
        inner.reap();
        if !forward.is_empty() {
            lock(&inner.forwarded).extend(forward);
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
    /// How long opening took (both backends).
    fn connect_time(&self) -> Duration {
        self.inner.node.connect_time() + self.inner.ofi.connect_time()
    }

    /// Across nodes, as libfabric connects; inside the node everything is mapped at open.
    fn connects_lazily(&self) -> bool {
        self.inner.ofi.connects_lazily()
    }

    /// Libfabric's figure: what a connection to another node holds.
    fn connection_bytes(&self) -> u64 {
        self.inner.ofi.connection_bytes()
    }

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
        self.user(self.rank(), id)?;
        self.inner.node.segment(id)
    }

    fn read(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError> {
        self.user(peer, remote.segment)?;
        self.user(self.rank(), local.segment)?;
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
        self.user(peer, remote.segment)?;
        for p in pieces {
            self.user(self.rank(), p.local.segment)?;
        }
        if signal.is_some_and(|v| mailbox::decode(v).is_some()) {
            return Err(FabricError::Unsupported(
                "signals with the top four bits set are reserved for the transport".into(),
            ));
        }
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
        self.atomic(peer, remote, Kind::Cas { expected, desired })
    }

    fn fetch_add(&self, peer: Rank, remote: Loc, delta: u64) -> Result<OpId, FabricError> {
        self.atomic(peer, remote, Kind::FetchAdd { delta })
    }

    fn test(&self, op: OpId) -> Option<Result<u64, FabricError>> {
        let inner = OpId(op.0 >> 2);
        let r = match op.0 & 3 {
            VIA_OFI => self.inner.ofi.test(inner),
            VIA_MAILBOX => {
                self.inner.reap();
                // Under the outbox's lock: an atomic is either pending or done.
                let o = lock(&self.inner.outbox);
                if let Some(r) = lock(&self.inner.done).take(inner.0) {
                    return Some(r);
                }
                if pending(&o, inner.0) {
                    return None;
                }
                Some(Err(FabricError::UnknownOp(op)))
            }
            _ => self.inner.node.test(inner),
        };
        r.map(|r| r.map_err(|e| rename(e, op)))
    }

    fn wait(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError> {
        let inner = OpId(op.0 >> 2);
        match op.0 & 3 {
            VIA_OFI => self.inner.ofi.wait(inner, timeout),
            VIA_MAILBOX => {
                let deadline = std::time::Instant::now() + timeout;
                loop {
                    if let Some(r) = self.test(op) {
                        return r;
                    }
                    if std::time::Instant::now() >= deadline {
                        return Err(FabricError::Timeout {
                            op: "remote atomic",
                            peer: self.rank(),
                            timeout,
                        });
                    }
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
            _ => self.inner.node.wait(inner, timeout),
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
        // The mailbox's own writes are not the caller's: settle them here.
        if !lock(&self.inner.internal).is_empty() {
            let tail: Vec<_> = out.drain(mid..).collect();
            for (id, r) in tail {
                let inner = OpId(id.0 >> 2);
                if let Err((id, r)) = self.inner.settle(inner, r).map_err(|r| (id, r)) {
                    out.push((id, r));
                }
            }
        }
        self.inner.reap();
        let end = out.len();
        lock(&self.inner.done).take_own(out);
        for (id, _) in &mut out[end..] {
            *id = mailbox_op(id.0);
        }
    }

    fn peer_gone(&self, peer: Rank) -> Option<String> {
        if self.local(peer) {
            self.inner.node.peer_gone(peer)
        } else {
            self.inner.ofi.peer_gone(peer)
        }
    }

    fn peer_host_silent(&self, peer: Rank) -> bool {
        !self.local(peer) && self.inner.ofi.peer_host_silent(peer)
    }
}

impl Progress for HybridFabric {
    fn wake(&self) {
        self.inner.node.wake();
    }

    fn urge(&self, peer: Rank) {
        // Remote peers' helper threads block in libfabric's progress and wake on arrival.
        self.inner.node.urge(peer);
    }

    fn poll(&self) {
        self.inner.ofi.poll();
    }

    fn set_progress_nap(&self, max: Duration) {
        self.inner.ofi.set_progress_nap(max);
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

    /// A job across nodes, no provider forced.
    fn suits(&self, one_node: bool, forced: Option<&str>) -> bool {
        !one_node && forced.is_none()
    }

    fn open(
        &self,
        rank: Rank,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Opened, FabricError> {
        let fabric = Arc::new(HybridFabric::open(rank, size, exchange, config, provider)?);
        let f2 = fabric.clone();
        let all_gather: AllGather = Box::new(move |blob| f2.all_gather(blob));
        Ok(Opened { fabric, all_gather })
    }
}
