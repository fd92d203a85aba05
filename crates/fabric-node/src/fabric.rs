//! [`NodeFabric`]: the operations, done by the initiator's CPU on the target's mapping.

use crate::layout::{self, W_BEAT, W_FUTEX, W_WAITERS};
use crate::life::{Beat, Life};
use crate::shm::Mapping;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use titus_fabric::Progress;
use titus_fabric::process::{frozen_after, is_stopped, why_still};
use titus_fabric::{
    Capabilities, Completions, Exposure, Fabric, FabricError, Loc, OpId, Piece, Rank, Segment,
    SegmentId, SharedWords, Signal,
};

/// Resident memory per mapped peer (see `connection_bytes`).
const NODE_CONNECTION_BYTES: u64 = 35 * 1024;
/// How often (at most) the progress call checks that each peer's process still lives.
const LIFE_CHECK: Duration = Duration::from_millis(5);
/// How old that check may be before an operation to the peer checks it itself: a steal
/// is a handful of operations of ~0.3 µs each and the check a system call of ~2 µs, so
/// operations read the progress call's verdict, and poll only where progress has slept
/// (an idle rank's) for longer than this.
const LIFE_STALE: Duration = Duration::from_millis(50);
/// The longest nap of a progress call that signals do not wake (workers serve them).
const QUIET_NAP: Duration = Duration::from_millis(10);
/// How long a signal waits for room in a full ring before it is retried.
const FULL_RING_NAP: Duration = Duration::from_micros(20);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A rank of the node as this rank sees it: its mapped object, segments and exposure.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) map: Arc<Mapping>,
    pub(crate) segments: Vec<Segment>,
    pub(crate) exposure: Vec<Exposure>,
    /// The peer's process (None for this rank).
    pub(crate) life: Option<Life>,
}

/// A signal waiting for room in its target's ring.
#[derive(Debug)]
struct Pending {
    id: u64,
    peer: Rank,
    value: u64,
    deadline: Instant,
}

#[derive(Debug, Default)]
struct State {
    done: Completions,
    pending: Vec<Pending>,
}

/// One rank of the node backend. Every operation is done by the calling thread on the
/// target's mapping — loads, stores and CPU atomics — and is complete when the call
/// returns; a signal goes into the target's ring and wakes its futex.
#[derive(Debug)]
pub struct NodeFabric {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) caps: Capabilities,
    pub(crate) op_timeout: Duration,
    /// Index by rank: this rank and its declared peers.
    pub(crate) views: Vec<Option<View>>,
    pub(crate) origin: Instant,
    pub(crate) connect_time: Duration,
    /// This rank's segments: name, offset in its object, length.
    pub(crate) own_layout: Vec<(String, u64, u64)>,
    next_id: AtomicU64,
    state: Mutex<State>,
    /// The ring's next ticket to consume.
    head: Mutex<u64>,
    woken: AtomicBool,
    /// Operations completed so far (a progress call returns when it changes).
    completed: AtomicU64,
    /// Workers serve signals now: progress naps without asking senders to wake it.
    quiet: AtomicBool,
    /// This rank's sign of life for its peers (`crate::life`).
    _beat: Beat,
}

impl NodeFabric {
    pub(crate) fn new(
        rank: Rank,
        size: u32,
        caps: Capabilities,
        op_timeout: Duration,
        views: Vec<Option<View>>,
        origin: Instant,
        own_layout: Vec<(String, u64, u64)>,
    ) -> Result<Self, FabricError> {
        // Without a beat, peers would name this rank frozen once the operation timeout
        // passed.
        let map = views[rank as usize]
            .as_ref()
            .expect("a rank sees itself")
            .map
            .clone();
        let beat =
            Beat::start(map, |m: &Arc<crate::shm::Mapping>| &m.words()[W_BEAT]).map_err(|e| {
                FabricError::Transport {
                    call: "starting the beat thread",
                    code: e.raw_os_error().unwrap_or(0),
                    detail: e.to_string(),
                }
            })?;
        Ok(Self {
            rank,
            size,
            caps,
            op_timeout,
            views,
            origin,
            connect_time: origin.elapsed(),
            own_layout,
            next_id: AtomicU64::new(1),
            state: Mutex::new(State::default()),
            head: Mutex::new(0),
            woken: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            quiet: AtomicBool::new(false),
            _beat: beat,
        })
    }

    /// New views of this rank's segments, over the same shared memory — for another
    /// backend to register the very memory the node's ranks use (the hybrid fabric).
    pub fn segment_views(&self) -> Result<Vec<Segment>, FabricError> {
        let mem: Arc<dyn SharedWords> = self.own().map.clone();
        self.own_layout
            .iter()
            .map(|(name, off, len)| Segment::over(name.clone(), mem.clone(), *off, *len))
            .collect()
    }

    /// Whether `peer` is this rank or a declared peer on this node (mapped here).
    pub fn is_local(&self, peer: Rank) -> bool {
        self.views.get(peer as usize).is_some_and(Option::is_some)
    }

    /// `peer`'s segment `id` as this process maps it — for benchmarks that time raw CPU
    /// operations on the same memory next to the fabric's.
    pub fn peer_segment(&self, peer: Rank, id: SegmentId) -> Result<&Segment, FabricError> {
        let view = self
            .views
            .get(peer as usize)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotAPeer { peer })?;
        titus_fabric::segment_in(&view.segments, peer, id)
    }

    fn own(&self) -> &View {
        self.views[self.rank as usize]
            .as_ref()
            .expect("a rank always sees itself")
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// The target's segment for an operation on `remote`, every check of the contract done.
    fn target(&self, peer: Rank, remote: Loc, len: u64) -> Result<(&View, &Segment), FabricError> {
        if peer >= self.size {
            return Err(FabricError::NoSuchRank {
                rank: peer,
                size: self.size,
            });
        }
        let view = self.views[peer as usize]
            .as_ref()
            .ok_or(FabricError::NotAPeer { peer })?;
        let seg = titus_fabric::segment_in(&view.segments, peer, remote.segment)?;
        if !view.exposure[remote.segment.0 as usize].allows(peer, self.rank) {
            return Err(FabricError::NotExposed {
                peer,
                segment: seg.name().to_string(),
                rank: self.rank,
            });
        }
        seg.check(remote.offset, len)?;
        if let Some(life) = &view.life
            && life.gone(self.now_ns(), LIFE_STALE)
        {
            return Err(self.dead(peer, life));
        }
        Ok((view, seg))
    }

    /// The progress call's look at every peer's process (each at most every
    /// [`LIFE_CHECK`]), whose verdict the operations read.
    fn check_lives(&self) {
        let now = self.now_ns();
        for life in self.views.iter().flatten().filter_map(|v| v.life.as_ref()) {
            life.gone(now, LIFE_CHECK);
        }
    }

    fn dead(&self, peer: Rank, life: &Life) -> FabricError {
        FabricError::PeerDead {
            peer,
            detail: format!(
                "rank {peer}'s process (pid {} on this node) has exited",
                life.pid
            ),
        }
    }

    fn atomic_target(&self, peer: Rank, remote: Loc) -> Result<&Segment, FabricError> {
        let (_, seg) = self.target(peer, remote, 8)?;
        if !remote.offset.is_multiple_of(8) {
            return Err(FabricError::Misaligned {
                offset: remote.offset,
            });
        }
        Ok(seg)
    }

    /// Records a completed operation.
    fn finish(&self, result: Result<u64, FabricError>) -> OpId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = lock(&self.state);
            st.done.submitted(id);
            st.done.complete(id, result);
        }
        // The submitting thread has the result already: a sleeping progress call is not
        // woken for it (workers submit inline on every task; each wake-up would cost the
        // progress thread a turn and a core for nothing). A progress call that wakes for
        // anything else still returns when it sees the count moved.
        self.completed.fetch_add(1, Ordering::SeqCst);
        OpId(id)
    }

    /// Bumps `map`'s futex word and wakes its sleepers, if any.
    /// (With `always`, even when none announced itself: a napping progress call.)
    fn nudge(&self, map: &Mapping, always: bool) {
        map.futex(W_FUTEX).fetch_add(1, Ordering::SeqCst);
        if always || map.words()[W_WAITERS].load(Ordering::SeqCst) > 0 {
            let _ = rustix::thread::futex::wake(
                map.futex(W_FUTEX),
                rustix::thread::futex::Flags::empty(),
                u32::MAX,
            );
        }
    }

    /// Puts a signal into `peer`'s ring; false when the ring is full.
    fn push_signal(&self, peer: Rank, value: u64) -> bool {
        let Some(view) = self.views[peer as usize].as_ref() else {
            return false;
        };
        if !layout::push(view.map.words(), self.rank, value) {
            return false;
        }
        self.nudge(&view.map, false);
        true
    }

    /// Retries signals waiting for room; fails those past their deadline.
    fn retry_pending(&self) {
        self.retry_pending_in(&mut lock(&self.state));
    }

    /// [`NodeFabric::retry_pending`] under the state's lock the caller holds.
    fn retry_pending_in(&self, st: &mut State) {
        if st.pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let pending = std::mem::take(&mut st.pending);
        for p in pending {
            let dead = self.views[p.peer as usize]
                .as_ref()
                .and_then(|v| v.life.as_ref())
                .filter(|l| l.gone(self.now_ns(), LIFE_CHECK));
            if let Some(life) = dead {
                st.done.complete(p.id, Err(self.dead(p.peer, life)));
            } else if self.push_signal(p.peer, p.value) {
                st.done.complete(p.id, Ok(0));
            } else if now >= p.deadline {
                st.done.complete(
                    p.id,
                    Err(FabricError::Timeout {
                        op: "signal (the target's ring stayed full)",
                        peer: p.peer,
                        timeout: self.op_timeout,
                    }),
                );
            } else {
                st.pending.push(p);
                continue;
            }
            self.completed.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Moves published signals out of this rank's ring.
    fn collect(&self, signals: &mut Vec<Signal>) -> usize {
        let w = self.own().map.words();
        let mut head = lock(&self.head);
        let mut n = 0;
        while let Some((from, value)) = layout::pop(w, *head) {
            *head = head.wrapping_add(1);
            // A sender outside the job is a corrupt slot: drop it rather than trust it.
            if from < u64::from(self.size) {
                signals.push(Signal {
                    from: from as Rank,
                    value,
                });
                n += 1;
            }
        }
        n
    }

    /// Whether a signal's sender wakes this rank's progress call (some call announced
    /// itself, or a worker runs a long task): what [`NodeFabric::nudge`] reads.
    #[cfg(test)]
    pub(crate) fn senders_wake(&self) -> bool {
        self.own().map.words()[W_WAITERS].load(Ordering::SeqCst) > 0
    }

    fn signal_waits(&self) -> bool {
        layout::ready(self.own().map.words(), *lock(&self.head))
    }

    /// Sleeps on this rank's futex until it changes, at most `left`. Announced to signal
    /// senders (they wake it) unless the workers serve signals (`quiet`): then it naps.
    fn sleep(&self, mut left: Duration, seen_completed: u64) {
        let map = &self.own().map;
        let waiters = &map.words()[W_WAITERS];
        let announce = !self.quiet.load(Ordering::Acquire);
        if announce {
            waiters.fetch_add(1, Ordering::SeqCst);
        } else {
            left = left.min(QUIET_NAP);
        }
        let v = map.futex(W_FUTEX).load(Ordering::SeqCst);
        if !self.signal_waits()
            && !self.woken.load(Ordering::SeqCst)
            && self.completed.load(Ordering::SeqCst) == seen_completed
        {
            let ts = rustix::thread::futex::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let _ = rustix::thread::futex::wait(
                map.futex(W_FUTEX),
                rustix::thread::futex::Flags::empty(),
                v,
                Some(&ts),
            );
        }
        if announce {
            waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Fabric for NodeFabric {
    /// How long opening took (creating, exchanging and mapping every object).
    fn connect_time(&self) -> Duration {
        self.connect_time
    }

    /// A mapped peer: page tables and the mapping's bookkeeping (8 ranks on the
    /// development machine: `titus fabric-bench --connections` under `titus launch -n 8`).
    fn connection_bytes(&self) -> u64 {
        NODE_CONNECTION_BYTES
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    fn segment(&self, id: SegmentId) -> Result<&Segment, FabricError> {
        titus_fabric::segment_in(&self.own().segments, self.rank, id)
    }

    fn read(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError> {
        let (_, src) = self.target(peer, remote, len)?;
        let dst = self.segment(local.segment)?;
        dst.check(local.offset, len)?;
        dst.copy_from(local.offset, src, remote.offset, len)?;
        Ok(self.finish(Ok(0)))
    }

    fn write_gather(
        &self,
        peer: Rank,
        remote: Loc,
        pieces: &[Piece],
        signal: Option<u64>,
    ) -> Result<OpId, FabricError> {
        let total = titus_fabric::gathered_len(remote, pieces)?;
        let (_, dst) = self.target(peer, remote, total)?;
        for p in pieces {
            self.segment(p.local.segment)?
                .check(p.local.offset, p.len)?;
        }
        let mut at = remote.offset;
        for p in pieces {
            dst.copy_from(at, self.segment(p.local.segment)?, p.local.offset, p.len)?;
            at += p.len;
        }
        let Some(value) = signal else {
            return Ok(self.finish(Ok(0)));
        };
        if self.push_signal(peer, value) {
            return Ok(self.finish(Ok(0)));
        }
        // The target's ring is full: the signal waits (the data is in place already).
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.state);
        st.done.submitted(id);
        st.pending.push(Pending {
            id,
            peer,
            value,
            deadline: Instant::now() + self.op_timeout,
        });
        Ok(OpId(id))
    }

    fn compare_swap(
        &self,
        peer: Rank,
        remote: Loc,
        expected: u64,
        desired: u64,
    ) -> Result<OpId, FabricError> {
        let seg = self.atomic_target(peer, remote)?;
        let prev = seg.compare_exchange(remote.offset, expected, desired)?;
        Ok(self.finish(Ok(prev)))
    }

    fn fetch_add(&self, peer: Rank, remote: Loc, delta: u64) -> Result<OpId, FabricError> {
        let seg = self.atomic_target(peer, remote)?;
        let prev = seg.fetch_add(remote.offset, delta)?;
        Ok(self.finish(Ok(prev)))
    }

    fn test(&self, op: OpId) -> Option<Result<u64, FabricError>> {
        // One lock: a test follows every operation a worker submits inline.
        let mut st = lock(&self.state);
        self.retry_pending_in(&mut st);
        if let Some(r) = st.done.take(op.0) {
            return Some(r);
        }
        if st.pending.iter().any(|p| p.id == op.0) {
            None
        } else {
            Some(Err(FabricError::UnknownOp(op)))
        }
    }

    fn wait(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.test(op) {
                return r;
            }
            let now = Instant::now();
            if now >= deadline {
                let peer = lock(&self.state)
                    .pending
                    .iter()
                    .find(|p| p.id == op.0)
                    .map_or(self.rank, |p| p.peer);
                return Err(FabricError::Timeout {
                    op: "signal",
                    peer,
                    timeout,
                });
            }
            std::thread::sleep(FULL_RING_NAP.min(deadline - now));
        }
    }

    fn progress(&self, timeout: Duration, signals: &mut Vec<Signal>) -> Result<(), FabricError> {
        let deadline = Instant::now() + timeout;
        let seen = self.completed.load(Ordering::Acquire);
        loop {
            self.retry_pending();
            self.check_lives();
            let got = self.collect(signals);
            if got > 0
                || self.woken.swap(false, Ordering::SeqCst)
                || self.completed.load(Ordering::Acquire) != seen
            {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            let mut left = deadline - now;
            if !lock(&self.state).pending.is_empty() {
                left = left.min(FULL_RING_NAP);
            }
            self.sleep(left, seen);
        }
    }

    fn drain_completions(&self, out: &mut Vec<(OpId, Result<u64, FabricError>)>) {
        let mut st = lock(&self.state);
        self.retry_pending_in(&mut st);
        st.done.take_own(out);
    }

    fn peer_gone(&self, peer: Rank) -> Option<String> {
        let view = self.views.get(peer as usize)?.as_ref()?;
        let life = view.life.as_ref()?;
        let now = self.now_ns();
        if life.gone(now, LIFE_CHECK) {
            return Some(format!(
                "rank {peer}'s process (pid {} on this node) has exited",
                life.pid
            ));
        }
        // Frozen: a beat standing still, for 5 s where the process is stopped, for the
        // operation timeout where it runs (but not its beat: too loaded to say).
        let beat = view.map.words()[W_BEAT].load(Ordering::Relaxed);
        let still = life.still(now, beat);
        if still < frozen_after(self.op_timeout) {
            return None;
        }
        let state = titus_fabric::process::state(life.pid);
        if !(is_stopped(state) || state == Some('D')) && still < self.op_timeout {
            return None;
        }
        Some(format!(
            "rank {peer}'s process (pid {} on this node) has made no progress for {:.1} s: {}",
            life.pid,
            still.as_secs_f64(),
            why_still(state)
        ))
    }
}

impl Progress for NodeFabric {
    fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        // Unconditionally: a napping progress call is not among the announced waiters.
        self.nudge(&self.own().map, true);
    }

    fn set_workers_serve(&self, on: bool) {
        self.quiet.store(on, Ordering::Release);
    }

    fn long_task(&self, running: bool) {
        // While any worker runs one, signal senders wake this rank's progress even in a
        // nap (unannounced while the workers serve): announced on its behalf, not woken.
        let waiters = &self.own().map.words()[W_WAITERS];
        if running {
            waiters.fetch_add(1, Ordering::SeqCst);
        } else {
            waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn urge(&self, peer: Rank) {
        // The peer's progress sleeps on its futex even while napping unannounced.
        if let Some(view) = self.views.get(peer as usize).and_then(Option::as_ref) {
            self.nudge(&view.map, true);
        }
    }

    fn take_signals(&self, signals: &mut Vec<Signal>) -> bool {
        if !self.signal_waits() {
            return false;
        }
        self.collect(signals) > 0
    }
}
