//! Completions and progress.
//!
//! One completion queue serves the endpoint. Whoever polls it dispatches every event into
//! a table of results (and a queue of signals) and wakes the waiters. One thread polls at
//! a time (the *poller token*): the progress thread holds it while blocked in the queue;
//! a waiter that finds it free polls itself, spinning briefly (a completion often arrives
//! within microseconds) and then blocking in the queue, never spinning for long.

use crate::error::{is_peer_gone, strerror, transport};
use crate::handle::SLOTS;
use crate::{OfiFabric, lock};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use titus_fabric::{FabricError, OpId, Rank, Signal};
use titus_ofi_sys as sys;

/// How long a waiter spins on the completion queue before blocking in it. Loopback
/// operations complete in 2–60 µs and a 1 MiB read in ~250 µs (tcp;ofi_rxm); once blocked,
/// each step of a multi-message transfer costs a wake-up (measured: 1 MiB reads at a
/// quarter of the raw bandwidth with a 50 µs spin). The waiter has nothing else to do, so
/// it spins through that, then blocks rather than burn the core.
const SPIN: Duration = Duration::from_micros(300);
/// Polled progress: nap caps up to this start at 10 µs after each event (ns).
const SHORT_NAP_NS: u64 = 500_000;
/// Longest single block in the completion queue, so waiters re-check their deadline.
const BLOCK_SLICE_MS: i32 = 10;

/// Hasher for operation ids: they are distinct counters, so a multiply spreads them well
/// enough, for a fraction of SipHash's cost on the hot path.
#[derive(Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// An operation in flight: it completes when its last part does.
#[derive(Debug)]
pub(crate) struct Pending {
    kind: &'static str,
    peer: Rank,
    parts_left: u32,
    /// A signal to send once the data parts completed (providers without send-after-write
    /// ordering).
    signal_after: Option<u64>,
    error: Option<FabricError>,
    value: u64,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) inflight: IdMap<Pending>,
    pub(crate) done: titus_fabric::Completions<BuildHasherDefault<IdHasher>>,
    pub(crate) signals: VecDeque<Signal>,
    /// Signals to post after their data completed: (op, peer, value).
    pub(crate) deferred: Vec<(u64, Rank, u64)>,
    /// Completions so far, so that `progress` can return on a new one.
    pub(crate) completions: u64,
    /// Operation slots not in use (slot 0 is the raw benchmark's). Kept under the state
    /// lock, which every completion takes anyway.
    pub(crate) free: Vec<u32>,
}

/// How long a post may retry a full queue before asking whether its peer still exists.
const LIVENESS_AFTER: Duration = Duration::from_millis(250);

impl OfiFabric {
    pub(crate) fn take_slot(&self) -> Result<u32, FabricError> {
        let deadline = Instant::now() + self.op_timeout;
        loop {
            if let Some(slot) = lock(&self.state).free.pop() {
                return Ok(slot);
            }
            // All slots in flight: completions free them (someone is polling, or we poll).
            if Instant::now() > deadline {
                return Err(FabricError::Unsupported(format!(
                    "{SLOTS} operations in flight and none completes"
                )));
            }
            if let Ok(_t) = self.poller.try_lock() {
                self.poll_once(1)?;
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    pub(crate) fn free_slot(&self, slot: u32) {
        lock(&self.state).free.push(slot);
    }

    /// Wakes the threads blocked on `cv`, if any (after a state change under the lock).
    pub(crate) fn notify_waiters(&self) {
        self.gate.wake(&self.cv);
    }

    /// Wakes every thread blocked on `cv`, waiters or not.
    pub(crate) fn wake_all(&self) {
        let _st = lock(&self.state);
        self.cv.notify_all();
    }

    /// Blocks on `cv` for at most `timeout` unless `ready` holds (checked under the lock).
    pub(crate) fn sleep_unless(&self, timeout: Duration, ready: impl Fn(&State) -> bool) {
        self.gate
            .sleep_unless(&self.state, &self.cv, timeout, ready);
    }

    /// Posts one part of operation `id` with a fresh slot, retrying while the provider's
    /// queue is full. A full queue drains only when this endpoint progresses, so the retry
    /// polls the completion queue: directly if the caller holds the poller token
    /// (`have_token`), else when the token is free.
    pub(crate) fn post(
        &self,
        id: u64,
        call: &'static str,
        have_token: bool,
        f: impl Fn(u32, u64) -> i32,
    ) -> Result<(), FabricError> {
        let slot = self.take_slot()?;
        let tag = (id << 16) | u64::from(slot);
        let start = Instant::now();
        let deadline = start + self.op_timeout;
        let mut next_liveness = start + LIVENESS_AFTER;
        loop {
            let ret = f(slot, tag);
            if ret == 0 {
                return Ok(());
            }
            if ret != -sys::FI_EAGAIN || Instant::now() > deadline {
                self.free_slot(slot);
                return Err(transport(call, ret));
            }
            // A queue that stays full may be a connection to a process that is gone (rxm
            // answers EAGAIN while it cannot connect): ask, now and then, instead of
            // retrying for the whole operation timeout.
            if Instant::now() >= next_liveness {
                next_liveness = Instant::now() + LIVENESS_AFTER;
                let peer = lock(&self.state).inflight.get(&id).map(|p| p.peer);
                if let Some(peer) = peer
                    && let Some(detail) = titus_fabric::Fabric::peer_gone(self, peer)
                {
                    self.free_slot(slot);
                    return Err(FabricError::PeerDead { peer, detail });
                }
            }
            // The transmit queue is full: progress it.
            if have_token {
                self.poll_cq(0)?;
            } else if let Ok(_t) = self.poller.try_lock() {
                self.poll_once(0)?;
            } else {
                std::thread::yield_now();
            }
        }
    }

    pub(crate) fn begin(
        &self,
        kind: &'static str,
        peer: Rank,
        parts: u32,
        signal_after: Option<u64>,
    ) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.state);
        st.done.submitted(id);
        st.inflight.insert(
            id,
            Pending {
                kind,
                peer,
                parts_left: parts,
                signal_after,
                error: None,
                value: 0,
            },
        );
        id
    }

    /// Fails operation `id` before all its parts were posted: parts already posted still
    /// complete (and free their slots), the error is reported when they have.
    pub(crate) fn abort_parts(&self, id: u64, unposted: u32, e: FabricError) {
        let mut st = lock(&self.state);
        let finished = match st.inflight.get_mut(&id) {
            Some(p) => {
                p.parts_left -= unposted;
                p.signal_after = None;
                p.error.get_or_insert(e);
                p.parts_left == 0
            }
            None => false,
        };
        if finished {
            let p = st.inflight.remove(&id).expect("present");
            st.done.complete(id, Err(p.error.expect("set")));
            st.completions += 1;
        }
        drop(st);
        self.notify_waiters();
    }

    /// Reads the completion queue once (blocking up to `timeout_ms`), dispatches what it
    /// finds, then posts deferred signals. The caller holds the poller token.
    pub(crate) fn poll_once(&self, timeout_ms: i32) -> Result<usize, FabricError> {
        let n = self.poll_cq(timeout_ms)?;
        self.post_deferred();
        Ok(n)
    }

    /// Reads the completion queue once and dispatches; the caller holds the poller token.
    pub(crate) fn poll_cq(&self, timeout_ms: i32) -> Result<usize, FabricError> {
        {
            let mut ev = [sys::tofi_event::default(); 64];
            // SAFETY: ev is writable for 64 events, the count passed.
            let n =
                unsafe { sys::tofi_poll(self.h.0.as_ptr(), ev.as_mut_ptr(), ev.len(), timeout_ms) };
            if n < 0 {
                return Err(transport("fi_cq_read", n));
            }
            let n = n as usize;
            if n > 0 {
                self.dispatch(&ev[..n]);
            }
            Ok(n)
        }
    }

    pub(crate) fn dispatch(&self, events: &[sys::tofi_event]) {
        let mut st = lock(&self.state);
        for e in events {
            if e.kind == sys::TOFI_SIGNAL {
                // The sender's rank is read from the wire: keep it only if it is a rank.
                if e.from < u64::from(self.size) {
                    st.signals.push_back(Signal {
                        from: e.from as Rank,
                        value: e.value,
                    });
                }
                continue;
            }
            let (id, slot) = (e.opid >> 16, (e.opid & 0xffff) as u32);
            st.free.push(slot);
            let Some(p) = st.inflight.get_mut(&id) else {
                continue;
            };
            if e.kind == sys::TOFI_ERROR {
                let err = if is_peer_gone(e.err) {
                    FabricError::PeerDead {
                        peer: p.peer,
                        detail: strerror(e.err),
                    }
                } else {
                    FabricError::Transport {
                        call: p.kind,
                        code: -e.err,
                        detail: format!("{} (provider errno {})", strerror(e.err), e.value as i64),
                    }
                };
                p.error.get_or_insert(err);
                p.signal_after = None;
            } else {
                p.value = e.value;
            }
            p.parts_left -= 1;
            if p.parts_left == 0 {
                if let Some(v) = p.signal_after.take() {
                    // Data parts done (delivered): now the signal.
                    p.parts_left = 1;
                    let peer = p.peer;
                    st.deferred.push((id, peer, v));
                    self.has_deferred.store(true, Ordering::Release);
                    continue;
                }
                let p = st.inflight.remove(&id).expect("present");
                st.done.complete(id, p.error.map_or(Ok(p.value), Err));
                st.completions += 1;
            }
        }
        drop(st);
        // While the workers serve (polled progress), what they poll is theirs: waking the
        // napping progress thread would take a core from a worker (a `wait` elsewhere
        // re-checks within its slice).
        if !self.quiet() {
            self.notify_waiters();
        }
    }

    /// Polled progress while the workers serve ([`titus_fabric::Progress::set_workers_serve`]):
    /// what they poll is theirs, and a progress call is not woken by it.
    fn quiet(&self) -> bool {
        self.caps.polled_progress && self.workers_serve.load(Ordering::Acquire)
    }

    /// Posts the signals whose data was delivered (the caller holds the poller token).
    pub(crate) fn post_deferred(&self) {
        while self.has_deferred.swap(false, Ordering::AcqRel) {
            let deferred = std::mem::take(&mut lock(&self.state).deferred);
            for (id, peer, value) in deferred {
                if let Err(e) = self.post_signal(id, peer, value, true) {
                    self.abort_parts(id, 1, e);
                }
            }
        }
    }

    /// [`Fabric::wait`]: spins briefly on the queue with the poller token, then blocks in it
    /// a slice at a time; without the token, sleeps until the poller dispatches.
    pub(crate) fn wait_op(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut st = lock(&self.state);
                if let Some(r) = st.done.take(op.0) {
                    return r;
                }
                let Some(p) = st.inflight.get(&op.0) else {
                    return Err(FabricError::UnknownOp(op));
                };
                if Instant::now() >= deadline {
                    return Err(FabricError::Timeout {
                        op: p.kind,
                        peer: p.peer,
                        timeout,
                    });
                }
            }
            match self.poller.try_lock() {
                Ok(_token) => {
                    // Spin briefly, then block in the queue for a slice.
                    let spin_until = Instant::now() + SPIN;
                    // Read the clock every 16 polls: a poll of an empty queue is ~50 ns.
                    while Instant::now() < spin_until {
                        for _ in 0..16 {
                            if self.poll_once(0)? > 0 {
                                let mut st = lock(&self.state);
                                if let Some(r) = st.done.take(op.0) {
                                    return r;
                                }
                            }
                        }
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    let ms = (left.as_millis() as i32).clamp(1, BLOCK_SLICE_MS);
                    self.poll_once(ms)?;
                }
                Err(_) => {
                    // Another thread polls: it wakes us when it dispatches.
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(BLOCK_SLICE_MS as u64));
                    self.sleep_unless(left, |st| st.done.is_done(op.0));
                }
            }
        }
    }

    /// [`Fabric::progress`]: returns on a signal, a new completion or a wake-up.
    pub(crate) fn progress_for(
        &self,
        timeout: Duration,
        signals: &mut Vec<Signal>,
    ) -> Result<(), FabricError> {
        let deadline = Instant::now() + timeout;
        let seen = lock(&self.state).completions;
        // Workers serve between tasks (`quiet`): arrivals are theirs; only a wake-up or
        // the time ends this call.
        loop {
            {
                let mut st = lock(&self.state);
                if (!self.quiet() && (!st.signals.is_empty() || st.completions != seen))
                    || self.woken.swap(false, Ordering::AcqRel)
                {
                    signals.extend(st.signals.drain(..));
                    return Ok(());
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let ms = (left.as_millis() as i32).clamp(1, 1000);
            let ready = |st: &State| {
                (!self.quiet() && (!st.signals.is_empty() || st.completions != seen))
                    || self.woken.load(Ordering::Acquire)
            };
            match self.poller.try_lock() {
                Ok(_token) if !self.caps.polled_progress => {
                    self.poll_once(ms)?;
                }
                Ok(token) => {
                    // No wait object: poll once, then nap without the poller token, so a
                    // worker between tasks can poll (`Progress::poll`) and wake this nap.
                    let got = self.poll_once(0)?;
                    drop(token);
                    if got > 0 {
                        self.nap_ns.store(0, Ordering::Relaxed);
                        continue;
                    }
                    // Short caps (the driver expects news) and this rank's own operations
                    // in flight (unless the workers collect them): 10 µs doubling to the
                    // cap, since a burst's next message comes soon. Long caps (idle, or
                    // the workers poll): the whole cap.
                    let cap = self.max_nap_ns.load(Ordering::Relaxed).max(1_000);
                    let nap = if cap <= SHORT_NAP_NS
                        || (!self.quiet() && !lock(&self.state).inflight.is_empty())
                    {
                        let n = self.nap_ns.load(Ordering::Relaxed);
                        (if n < 10_000 {
                            10_000
                        } else {
                            n.saturating_mul(2)
                        })
                        .min(cap)
                    } else {
                        cap
                    };
                    self.nap_ns.store(nap, Ordering::Relaxed);
                    self.sleep_unless(left.min(Duration::from_nanos(nap)), ready);
                }
                Err(_) => {
                    // A waiter polls right now; sleep until it dispatches something.
                    self.sleep_unless(left.min(Duration::from_millis(5)), ready);
                }
            }
        }
    }
}
