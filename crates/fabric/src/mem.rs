//! The in-process backend: N ranks as threads of one process.
//!
//! It is the laptop default and the test double, so it keeps the whole contract: real
//! atomics on shared memory, every check at the initiator, completions and signals through
//! queues, and timeouts. Two options make it an adversary for protocol tests:
//!
//! - [`DelayModel`]: each operation takes effect after a seeded random delay, so effects
//!   and completions of one initiator are reordered (a network thread applies them when
//!   due).
//! - `software_progress`: an operation on rank t's memory takes effect only when t calls
//!   into the fabric (`test`, `wait` or `progress`), as with libfabric's software
//!   providers; a target without a progress thread stalls its initiators.
//!
//! Without either, operations take effect inside the submitting call (like an RDMA NIC,
//! with no target CPU involved).

use crate::Progress;
use crate::{
    Addressing, Capabilities, Exposure, Fabric, FabricConfig, FabricError, KeyMode, Loc, OpId,
    Piece, Rank, Segment, SegmentId, SegmentSpec, Signal,
};
use rand::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Bytes of memory available now to this process, if known: `MemAvailable` in
/// /proc/meminfo, bounded by the limits of its control groups (a Slurm job's, a
/// container's): limit − working set, the smallest over its groups and their ancestors.
pub fn available_memory() -> Option<u64> {
    crate::avail::available()
}

/// `Err` with the GiB `segments` need and the GiB available, where they do not fit in the
/// memory available to this process (`None` where it is not known: they pass).
pub fn segments_fit<'a>(
    segments: impl IntoIterator<Item = &'a SegmentSpec>,
) -> Result<(), (f64, f64)> {
    let need = segments
        .into_iter()
        .fold(0u64, |a, s| a.saturating_add(s.len));
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    match available_memory() {
        Some(have) if need > have => Err((gib(need), gib(have))),
        _ => Ok(()),
    }
}

/// Seeded delays: each operation takes effect after a uniform delay in `[0, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayModel {
    /// Seed of the delays (print it with a failing test).
    pub seed: u64,
    /// Longest delay.
    pub max: Duration,
}

/// Options of an in-process world.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemOptions {
    /// Delay (and so reorder) operations.
    pub delay: Option<DelayModel>,
    /// Operations on a rank's memory wait for that rank to call into the fabric.
    pub software_progress: bool,
    /// Fault injection: from the `n`-th operation posted to rank `r` on (`Some((r, n))`),
    /// posting to it never returns — a provider spinning on a lock that a dead peer held
    /// (libfabric's shm does). The posting thread sleeps until the process ends.
    pub hang_posts_to: Option<(Rank, u64)>,
}

/// Opens an in-process job of `configs.len()` ranks; rank r gets `configs[r]`.
pub fn world(
    configs: Vec<FabricConfig>,
    options: MemOptions,
) -> Result<Vec<Arc<MemFabric>>, FabricError> {
    let size = configs.len() as u32;
    for c in &configs {
        if let Some(&p) = c.peers.iter().find(|&&p| p >= size) {
            return Err(FabricError::NoSuchRank { rank: p, size });
        }
    }
    // Every rank's segments live in this one process: refuse at once what cannot fit
    // (rather than an allocation failure, or a swapping machine, much later).
    if let Err((need, have)) = segments_fit(configs.iter().flat_map(|c| &c.segments)) {
        return Err(FabricError::Unsupported(format!(
            "{size} in-process ranks' segments need {need:.1} GiB of memory; this process \
             has {have:.1} GiB available (free memory within its cgroup's limit; fewer \
             ranks, or ranks as processes: titus launch)"
        )));
    }
    let network = options.delay.map(|d| {
        Arc::new(Network {
            state: Mutex::new(NetState {
                heap: BinaryHeap::new(),
                ops: HashMap::new(),
                seq: 0,
                rng: SplitMix64::seed_from_u64(d.seed ^ 0x6d65_6d5f_6e65_7477), // "mem_netw"
                stop: false,
            }),
            cv: Condvar::new(),
            max: d.max,
        })
    });
    let shared = Arc::new(Shared {
        size,
        ranks: configs
            .iter()
            .map(|c| {
                let mut peers = vec![false; size as usize];
                for &p in &c.peers {
                    peers[p as usize] = true;
                }
                RankCell {
                    segments: c
                        .segments
                        .iter()
                        .map(|s| Segment::new(s.name.clone(), s.len))
                        .collect(),
                    exposure: c.segments.iter().map(|s| s.exposure.clone()).collect(),
                    peers,
                    alive: AtomicBool::new(true),
                    q: Mutex::new(Queues::default()),
                    cv: Condvar::new(),
                }
            })
            .collect(),
        software_progress: options.software_progress,
        network: network.clone(),
    });
    if let Some(net) = network {
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("titus-mem-network".into())
            .spawn(move || net.run(weak))
            .expect("spawn the mem network thread");
    }
    let posted = Arc::new(AtomicU64::new(0));
    let caps = Capabilities {
        backend: "mem",
        provider: "mem".into(),
        coherent_atomics: true,
        target_progress: options.software_progress,
        ordered_signal: true,
        polled_progress: false,
        immediate: false,
        addressing: Addressing::Offset,
        keys: KeyMode::None,
    };
    Ok(configs
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            Arc::new(MemFabric {
                shared: shared.clone(),
                rank: r as Rank,
                caps: caps.clone(),
                op_timeout: c.op_timeout,
                next_id: AtomicU64::new(1),
                hang: options.hang_posts_to,
                posted: posted.clone(),
            })
        })
        .collect())
}

/// One rank of an in-process world.
#[derive(Debug)]
pub struct MemFabric {
    shared: Arc<Shared>,
    rank: Rank,
    caps: Capabilities,
    op_timeout: Duration,
    next_id: AtomicU64,
    /// [`MemOptions::hang_posts_to`], and operations posted to that rank so far (by any).
    hang: Option<(Rank, u64)>,
    posted: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Shared {
    size: u32,
    ranks: Vec<RankCell>,
    software_progress: bool,
    network: Option<Arc<Network>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(net) = &self.network {
            lock(&net.state).stop = true;
            net.cv.notify_all();
        }
    }
}

#[derive(Debug)]
struct RankCell {
    segments: Vec<Segment>,
    exposure: Vec<Exposure>,
    peers: Vec<bool>,
    alive: AtomicBool,
    q: Mutex<Queues>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct Queues {
    /// Completed operations this rank issued, not yet collected.
    done: crate::Completions,
    /// Operations this rank issued, not yet complete: kind and target.
    inflight: HashMap<u64, (&'static str, Rank)>,
    /// Signals received, not yet collected.
    signals: VecDeque<Signal>,
    /// Operations on this rank's memory waiting for it to progress.
    inbox: VecDeque<Op>,
    /// Completions so far, so that `progress` can return on a new one.
    completions: u64,
    /// `wake` was called: the next or current `progress` returns.
    woken: bool,
}

#[derive(Debug)]
struct Op {
    id: u64,
    from: Rank,
    to: Rank,
    kind: OpKind,
}

#[derive(Debug)]
enum OpKind {
    Read {
        remote: Loc,
        local: Loc,
        len: u64,
    },
    Write {
        remote: Loc,
        pieces: Vec<Piece>,
        signal: Option<u64>,
    },
    Cas {
        remote: Loc,
        expected: u64,
        desired: u64,
    },
    FetchAdd {
        remote: Loc,
        delta: u64,
    },
}

impl OpKind {
    fn name(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::Write { signal: None, .. } => "write",
            Self::Write {
                signal: Some(_), ..
            } => "write-signal",
            Self::Cas { .. } => "compare-swap",
            Self::FetchAdd { .. } => "fetch-add",
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a queue lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn cell(&self, rank: Rank) -> &RankCell {
        &self.ranks[rank as usize]
    }

    /// Hands a submitted operation to the network (delays), the target's inbox (software
    /// progress) or executes it now.
    fn deliver(&self, op: Op) {
        if self.software_progress {
            let cell = self.cell(op.to);
            lock(&cell.q).inbox.push_back(op);
            cell.cv.notify_all();
        } else {
            self.execute(op);
        }
    }

    /// Applies an operation to the target's memory, then signals and completes it.
    fn execute(&self, op: Op) {
        let target = self.cell(op.to);
        let from = self.cell(op.from);
        let result = if !target.alive.load(Ordering::Acquire) {
            Err(FabricError::PeerDead {
                peer: op.to,
                detail: "the rank was stopped".into(),
            })
        } else {
            // Bounds were checked at submission; these calls re-check and cannot fail.
            fn seg(cell: &RankCell, l: Loc) -> &Segment {
                &cell.segments[l.segment.0 as usize]
            }
            match &op.kind {
                OpKind::Read { remote, local, len } => seg(from, *local)
                    .copy_from(local.offset, seg(target, *remote), remote.offset, *len)
                    .map(|()| 0),
                OpKind::Write {
                    remote,
                    pieces,
                    signal,
                } => {
                    let dst = seg(target, *remote);
                    let mut at = remote.offset;
                    let mut r = Ok(0);
                    for p in pieces {
                        if let Err(e) = dst.copy_from(at, seg(from, p.local), p.local.offset, p.len)
                        {
                            r = Err(e);
                            break;
                        }
                        at += p.len;
                    }
                    if let (Ok(_), Some(value)) = (&r, signal) {
                        // The data is in place (the copies above happened-before this lock).
                        lock(&target.q).signals.push_back(Signal {
                            from: op.from,
                            value: *value,
                        });
                        target.cv.notify_all();
                    }
                    r
                }
                OpKind::Cas {
                    remote,
                    expected,
                    desired,
                } => seg(target, *remote).compare_exchange(remote.offset, *expected, *desired),
                OpKind::FetchAdd { remote, delta } => {
                    seg(target, *remote).fetch_add(remote.offset, *delta)
                }
            }
        };
        let mut q = lock(&from.q);
        if q.inflight.remove(&op.id).is_some() {
            q.done.complete(op.id, result);
            q.completions += 1;
        }
        drop(q);
        from.cv.notify_all();
    }

    /// Executes the operations waiting in `rank`'s inbox (software progress).
    fn serve(&self, rank: Rank) {
        if !self.software_progress {
            return;
        }
        loop {
            let op = lock(&self.cell(rank).q).inbox.pop_front();
            match op {
                Some(op) => self.execute(op),
                None => return,
            }
        }
    }
}

#[derive(Debug)]
struct Network {
    state: Mutex<NetState>,
    cv: Condvar,
    max: Duration,
}

#[derive(Debug)]
struct NetState {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    ops: HashMap<u64, Op>,
    seq: u64,
    /// The delays need a seeded stream, nothing more.
    rng: SplitMix64,
    stop: bool,
}

impl Network {
    fn submit(&self, op: Op) {
        let mut st = lock(&self.state);
        let nanos = self.max.as_nanos() as u64;
        let delay = if nanos == 0 {
            0
        } else {
            st.rng.next_u64() % (nanos + 1)
        };
        let due = Instant::now() + Duration::from_nanos(delay);
        st.seq += 1;
        let seq = st.seq;
        st.heap.push(Reverse((due, seq)));
        st.ops.insert(seq, op);
        drop(st);
        self.cv.notify_one();
    }

    fn run(&self, shared: Weak<Shared>) {
        let mut st = lock(&self.state);
        loop {
            if st.stop {
                return;
            }
            let now = Instant::now();
            match st.heap.peek().copied() {
                Some(Reverse((due, seq))) if due <= now => {
                    st.heap.pop();
                    let op = st.ops.remove(&seq).expect("queued op");
                    drop(st);
                    match shared.upgrade() {
                        Some(s) => s.deliver(op),
                        None => return,
                    }
                    st = lock(&self.state);
                }
                Some(Reverse((due, _))) => {
                    st = self
                        .cv
                        .wait_timeout(st, due - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                None => {
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

impl MemFabric {
    /// Queue lengths of every rank (inflight, done, signals, inbox) and the network's
    /// pending operations: for diagnosing a stalled test.
    pub fn debug_state(&self) -> String {
        let mut out = String::new();
        for (r, c) in self.shared.ranks.iter().enumerate() {
            let q = lock(&c.q);
            out += &format!(
                "rank {r}: inflight {:?} done {} signals {} inbox {} completions {}\n",
                q.inflight.values().collect::<Vec<_>>(),
                q.done.len(),
                q.signals.len(),
                q.inbox.len(),
                q.completions
            );
        }
        if let Some(n) = &self.shared.network {
            let st = lock(&n.state);
            out += &format!(
                "network: {} queued, next due in {:?}\n",
                st.heap.len(),
                st.heap
                    .peek()
                    .map(|r| r.0.0.saturating_duration_since(Instant::now()))
            );
        }
        out
    }

    /// Stops this rank as if its process died: operations on its memory fail with
    /// [`FabricError::PeerDead`] from now on.
    pub fn kill(&self) {
        let cell = self.shared.cell(self.rank);
        cell.alive.store(false, Ordering::Release);
        let pending: Vec<Op> = lock(&cell.q).inbox.drain(..).collect();
        for op in pending {
            self.shared.execute(op);
        }
    }

    fn check_remote(&self, peer: Rank, remote: Loc, len: u64) -> Result<(), FabricError> {
        let size = self.shared.size;
        if peer >= size {
            return Err(FabricError::NoSuchRank { rank: peer, size });
        }
        if peer != self.rank && !self.shared.cell(self.rank).peers[peer as usize] {
            return Err(FabricError::NotAPeer { peer });
        }
        let target = self.shared.cell(peer);
        let seg = crate::segment_in(&target.segments, peer, remote.segment)?;
        if !target.exposure[remote.segment.0 as usize].allows(peer, self.rank) {
            return Err(FabricError::NotExposed {
                peer,
                segment: seg.name().to_string(),
                rank: self.rank,
            });
        }
        seg.check(remote.offset, len)
    }

    fn check_atomic(&self, peer: Rank, remote: Loc) -> Result<(), FabricError> {
        self.check_remote(peer, remote, 8)?;
        if !remote.offset.is_multiple_of(8) {
            return Err(FabricError::Misaligned {
                offset: remote.offset,
            });
        }
        Ok(())
    }

    fn submit(&self, to: Rank, kind: OpKind) -> OpId {
        if let Some((r, n)) = self.hang
            && r == to
            && self.posted.fetch_add(1, Ordering::Relaxed) >= n
        {
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut q = lock(&self.shared.cell(self.rank).q);
            q.inflight.insert(id, (kind.name(), to));
            q.done.submitted(id);
        }
        let op = Op {
            id,
            from: self.rank,
            to,
            kind,
        };
        match &self.shared.network {
            Some(net) => net.submit(op),
            None => self.shared.deliver(op),
        }
        OpId(id)
    }
}

impl Fabric for MemFabric {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.shared.size
    }

    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    fn segment(&self, id: SegmentId) -> Result<&Segment, FabricError> {
        crate::segment_in(&self.shared.cell(self.rank).segments, self.rank, id)
    }

    fn read(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError> {
        self.check_remote(peer, remote, len)?;
        self.segment(local.segment)?.check(local.offset, len)?;
        Ok(self.submit(peer, OpKind::Read { remote, local, len }))
    }

    fn write_gather(
        &self,
        peer: Rank,
        remote: Loc,
        pieces: &[Piece],
        signal: Option<u64>,
    ) -> Result<OpId, FabricError> {
        let total = crate::gathered_len(remote, pieces)?;
        self.check_remote(peer, remote, total)?;
        for p in pieces {
            self.segment(p.local.segment)?
                .check(p.local.offset, p.len)?;
        }
        Ok(self.submit(
            peer,
            OpKind::Write {
                remote,
                pieces: pieces.to_vec(),
                signal,
            },
        ))
    }

    fn compare_swap(
        &self,
        peer: Rank,
        remote: Loc,
        expected: u64,
        desired: u64,
    ) -> Result<OpId, FabricError> {
        self.check_atomic(peer, remote)?;
        Ok(self.submit(
            peer,
            OpKind::Cas {
                remote,
                expected,
                desired,
            },
        ))
    }

    fn fetch_add(&self, peer: Rank, remote: Loc, delta: u64) -> Result<OpId, FabricError> {
        self.check_atomic(peer, remote)?;
        Ok(self.submit(peer, OpKind::FetchAdd { remote, delta }))
    }

    fn test(&self, op: OpId) -> Option<Result<u64, FabricError>> {
        self.shared.serve(self.rank);
        let mut q = lock(&self.shared.cell(self.rank).q);
        if let Some(r) = q.done.take(op.0) {
            return Some(r);
        }
        if q.inflight.contains_key(&op.0) {
            None
        } else {
            Some(Err(FabricError::UnknownOp(op)))
        }
    }

    fn wait(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError> {
        let deadline = Instant::now() + timeout;
        let cell = self.shared.cell(self.rank);
        loop {
            self.shared.serve(self.rank);
            let mut q = lock(&cell.q);
            if let Some(r) = q.done.take(op.0) {
                return r;
            }
            let Some(&(kind, peer)) = q.inflight.get(&op.0) else {
                return Err(FabricError::UnknownOp(op));
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(FabricError::Timeout {
                    op: kind,
                    peer,
                    timeout,
                });
            }
            if self.shared.software_progress && !q.inbox.is_empty() {
                continue;
            }
            // Woken by a completion, a signal or work in the inbox.
            drop(
                cell.cv
                    .wait_timeout(q, deadline - now)
                    .unwrap_or_else(|p| p.into_inner()),
            );
        }
    }

    fn drain_completions(&self, out: &mut Vec<(OpId, Result<u64, FabricError>)>) {
        self.shared.serve(self.rank);
        lock(&self.shared.cell(self.rank).q).done.take_own(out);
    }

    fn progress(&self, timeout: Duration, signals: &mut Vec<Signal>) -> Result<(), FabricError> {
        let deadline = Instant::now() + timeout;
        let cell = self.shared.cell(self.rank);
        let seen = lock(&cell.q).completions;
        loop {
            self.shared.serve(self.rank);
            let mut q = lock(&cell.q);
            if !q.signals.is_empty() || q.completions != seen || q.woken {
                q.woken = false;
                signals.extend(q.signals.drain(..));
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            if self.shared.software_progress && !q.inbox.is_empty() {
                continue;
            }
            drop(
                cell.cv
                    .wait_timeout(q, deadline - now)
                    .unwrap_or_else(|p| p.into_inner()),
            );
        }
    }
}

impl Progress for MemFabric {
    fn wake(&self) {
        let cell = self.shared.cell(self.rank);
        lock(&cell.q).woken = true;
        cell.cv.notify_all();
    }
}
