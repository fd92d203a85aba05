//! [`OfiFabric`]: one rank's endpoint, and the [`Fabric`] operations on it. Each operation
//! is checked against the published segments, then posted as one or more parts, each with
//! an operation slot of its own (see the completion module for how parts complete).

use crate::address::Peer;
use crate::completion::State;
use crate::handle::Handle;
use crate::lock;
use crate::watch::{End, SILENT_AFTER};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use titus_fabric::Progress;
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{
    Capabilities, Fabric, FabricError, Loc, OpId, Piece, Rank, Segment, SegmentId, Signal,
};
use titus_ofi_sys as sys;

/// One rank's libfabric endpoint with its registered segments.
#[derive(Debug)]
pub struct OfiFabric {
    // Field order matters for Drop: the handle (and its registrations) goes before the
    // segment memory it registered.
    pub(crate) h: Handle,
    pub(crate) segments: Vec<Segment>,
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) caps: Capabilities,
    pub(crate) op_timeout: Duration,
    pub(crate) iov_limit: usize,
    pub(crate) peers: Vec<Option<Peer>>,
    pub(crate) next_id: AtomicU64,
    pub(crate) state: Mutex<State>,
    pub(crate) cv: Condvar,
    /// Completions notify `cv` only while threads wait on it (the handshake is model
    /// checked in titus-fabric).
    pub(crate) gate: titus_fabric::WakeGate,
    /// `wake` was called: `progress` returns.
    pub(crate) woken: std::sync::atomic::AtomicBool,
    /// Polled progress: the workers collect signals and completions between tasks
    /// ([`Progress::set_workers_serve`]), so a `progress` call returns only when woken or
    /// when its time is up (each arrival woke it onto a core a worker needed).
    pub(crate) workers_serve: std::sync::atomic::AtomicBool,
    /// Whether `State::deferred` may hold signals, so pollers skip the lock otherwise.
    pub(crate) has_deferred: std::sync::atomic::AtomicBool,
    pub(crate) poller: Mutex<()>,
    /// Polled progress (no wait object): the progress thread's current nap — 10 µs
    /// doubling to the cap while nothing comes, for short caps or while this rank's own
    /// operations are in flight; the whole cap otherwise — and the cap, ns.
    pub(crate) nap_ns: AtomicU64,
    pub(crate) max_nap_ns: AtomicU64,
    pub(crate) rendezvous: Mutex<Option<Box<dyn Exchange>>>,
    pub(crate) connect_time: Duration,
    /// Peers connect on their first operation ([`titus_fabric::FabricConfig::lazy`]).
    pub(crate) lazy: bool,
    /// This rank's liveness port, for peers on other nodes ([`crate::watch`]): held open
    /// while the fabric is.
    pub(crate) _liveness: Option<crate::watch::Listener>,
}

impl OfiFabric {
    /// Checks a remote range and returns (fi_addr, remote address, key).
    /// Every initiator-side check of an operation on `len` bytes of `peer`'s `remote`
    /// (rank, peer, segment, exposure, range), without an operation: for a layer that
    /// carries some operations otherwise (the hybrid's atomics).
    pub fn check_remote(&self, peer: Rank, remote: Loc, len: u64) -> Result<(), FabricError> {
        self.remote(peer, remote, len).map(drop)
    }

    pub(crate) fn remote(
        &self,
        peer: Rank,
        remote: Loc,
        len: u64,
    ) -> Result<(u64, u64, u64), FabricError> {
        if peer >= self.size {
            return Err(FabricError::NoSuchRank {
                rank: peer,
                size: self.size,
            });
        }
        let p = self.peers[peer as usize]
            .as_ref()
            .ok_or(FabricError::NotAPeer { peer })?;
        let s = titus_fabric::segment_in(&p.segments, peer, remote.segment)?;
        let name = || {
            self.segments.get(remote.segment.0 as usize).map_or_else(
                || format!("#{}", remote.segment.0),
                |s| s.name().to_string(),
            )
        };
        if !s.exposed_to_me {
            return Err(FabricError::NotExposed {
                peer,
                segment: name(),
                rank: self.rank,
            });
        }
        match remote.offset.checked_add(len) {
            Some(end) if end <= s.len => {}
            _ => {
                return Err(FabricError::OutOfBounds {
                    segment: name(),
                    offset: remote.offset,
                    len,
                    segment_len: s.len,
                });
            }
        }
        Ok((p.fi_addr, s.base + remote.offset, s.key))
    }

    pub(crate) fn post_signal(
        &self,
        id: u64,
        peer: Rank,
        value: u64,
        have_token: bool,
    ) -> Result<(), FabricError> {
        let fi_addr = self.peers[peer as usize]
            .as_ref()
            .ok_or(FabricError::NotAPeer { peer })?
            .fi_addr;
        let from = u64::from(self.rank);
        self.post(id, "fi_send (signal)", have_token, |slot, tag| {
            {
                // SAFETY: the slot is owned by this part until its completion is dispatched.
                unsafe { sys::tofi_signal(self.h.0.as_ptr(), slot, tag, fi_addr, from, value) }
            }
        })
    }

    pub(crate) fn check_local(&self, loc: Loc, len: u64) -> Result<(), FabricError> {
        self.segment(loc.segment)?.check(loc.offset, len)
    }

    /// Checks and posts a 64-bit atomic; `f(slot, tag, fi_addr, raddr, rkey)` posts it.
    pub(crate) fn atomic(
        &self,
        peer: Rank,
        remote: Loc,
        kind: &'static str,
        f: impl Fn(u32, u64, u64, u64, u64) -> i32,
    ) -> Result<OpId, FabricError> {
        let (fi_addr, raddr, rkey) = self.remote(peer, remote, 8)?;
        if !remote.offset.is_multiple_of(8) {
            return Err(FabricError::Misaligned {
                offset: remote.offset,
            });
        }
        let id = self.begin(kind, peer, 1, None);
        if let Err(e) = self.post(id, kind, false, |slot, tag| {
            f(slot, tag, fi_addr, raddr, rkey)
        }) {
            lock(&self.state).inflight.remove(&id);
            return Err(e);
        }
        Ok(OpId(id))
    }
}

impl Fabric for OfiFabric {
    /// How long connecting to the peers took at open (first contacts and the barrier).
    fn connect_time(&self) -> Duration {
        self.connect_time
    }

    fn connects_lazily(&self) -> bool {
        self.lazy
    }

    fn connection_bytes(&self) -> u64 {
        crate::provider::connection_bytes(&self.caps.provider)
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
        titus_fabric::segment_in(&self.segments, self.rank, id)
    }

    fn read(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError> {
        let (fi_addr, raddr, rkey) = self.remote(peer, remote, len)?;
        self.check_local(local, len)?;
        let id = self.begin("read", peer, 1, None);
        let r = self.post(id, "fi_read", false, |slot, tag| {
            {
                // SAFETY: the local range was checked against the registered segment and the
                // remote one against the peer's published length; the slot is ours.
                unsafe {
                    sys::tofi_read(
                        self.h.0.as_ptr(),
                        slot,
                        tag,
                        fi_addr,
                        local.segment.0 as usize,
                        local.offset,
                        len,
                        raddr,
                        rkey,
                    )
                }
            }
        });
        if let Err(e) = r {
            lock(&self.state).inflight.remove(&id);
            return Err(e);
        }
        Ok(OpId(id))
    }

    fn write_gather(
        &self,
        peer: Rank,
        remote: Loc,
        pieces: &[Piece],
        signal: Option<u64>,
    ) -> Result<OpId, FabricError> {
        let total = titus_fabric::gathered_len(remote, pieces)?;
        let (fi_addr, raddr, rkey) = self.remote(peer, remote, total)?;
        for p in pieces {
            self.check_local(p.local, p.len)?;
        }
        // Zero-length pieces carry nothing; providers reject them in an iov.
        let nonempty = pieces.iter().filter(|p| p.len > 0).count();
        let data_parts = nonempty.div_ceil(self.iov_limit) as u32;
        // Where the signal goes: alone, right behind the data (the provider orders sends
        // after writes), or after the data's delivery completion (it does not).
        let (parts, signal_after, signal_now) = match signal {
            None => (data_parts, None, None),
            Some(v) if data_parts == 0 => (1, None, Some(v)),
            Some(v) if self.caps.ordered_signal => (data_parts + 1, None, Some(v)),
            Some(v) => (data_parts, Some(v), None),
        };
        let kind = if signal.is_some() {
            "write-signal"
        } else {
            "write"
        };
        let id = self.begin(kind, peer, parts, signal_after);
        if parts == 0 {
            let mut st = lock(&self.state);
            st.inflight.remove(&id);
            st.done.complete(id, Ok(0));
            return Ok(OpId(id));
        }
        let delivery = i32::from(signal_after.is_some());
        let fail = |posted: u32, e: FabricError| -> Result<OpId, FabricError> {
            if posted == 0 {
                lock(&self.state).inflight.remove(&id);
                Err(e)
            } else {
                self.abort_parts(id, parts - posted, e);
                Ok(OpId(id))
            }
        };
        // One fi_writemsg per iov_limit pieces, its iov built on the stack.
        let mut posted = 0u32;
        let mut at = raddr;
        let mut it = pieces.iter().filter(|p| p.len > 0).peekable();
        while it.peek().is_some() {
            let (mut segs, mut offs, mut lens) = ([0usize; 64], [0u64; 64], [0u64; 64]);
            let mut n = 0;
            while n < self.iov_limit {
                let Some(p) = it.next() else { break };
                segs[n] = p.local.segment.0 as usize;
                offs[n] = p.local.offset;
                lens[n] = p.len;
                n += 1;
            }
            let r = self.post(id, "fi_writemsg", false, |slot, tag| {
                // SAFETY: segs, offs and lens hold n (≤ iov_limit ≤ 64) entries, each a checked
                // range of a registered segment; the remote range at..at+len lies in the
                // checked total; the slot is ours.
                unsafe {
                    sys::tofi_writev(
                        self.h.0.as_ptr(),
                        slot,
                        tag,
                        fi_addr,
                        n,
                        segs.as_ptr(),
                        offs.as_ptr(),
                        lens.as_ptr(),
                        at,
                        rkey,
                        delivery,
                    )
                }
            });
            if let Err(e) = r {
                return fail(posted, e);
            }
            posted += 1;
            at += lens[..n].iter().sum::<u64>();
        }
        if let Some(v) = signal_now
            && let Err(e) = self.post_signal(id, peer, v, false)
        {
            return fail(posted, e);
        }
        Ok(OpId(id))
    }

    fn compare_swap(
        &self,
        peer: Rank,
        remote: Loc,
        expected: u64,
        desired: u64,
    ) -> Result<OpId, FabricError> {
        self.atomic(
            peer,
            remote,
            "compare-swap",
            |slot, tag, fi_addr, raddr, rkey| {
                {
                    // SAFETY: the remote word was bounds-checked and aligned; the slot is ours and
                    // holds the operands and the result until the completion.
                    unsafe {
                        sys::tofi_cas(
                            self.h.0.as_ptr(),
                            slot,
                            tag,
                            fi_addr,
                            raddr,
                            rkey,
                            expected,
                            desired,
                        )
                    }
                }
            },
        )
    }

    fn fetch_add(&self, peer: Rank, remote: Loc, delta: u64) -> Result<OpId, FabricError> {
        self.atomic(
            peer,
            remote,
            "fetch-add",
            |slot, tag, fi_addr, raddr, rkey| {
                {
                    // SAFETY: as for compare_swap.
                    unsafe {
                        sys::tofi_fadd(self.h.0.as_ptr(), slot, tag, fi_addr, raddr, rkey, delta)
                    }
                }
            },
        )
    }

    fn drain_completions(&self, out: &mut Vec<(OpId, Result<u64, FabricError>)>) {
        if let Ok(_t) = self.poller.try_lock() {
            let _ = self.poll_once(0);
        }
        lock(&self.state).done.take_own(out);
    }

    fn peer_host_silent(&self, peer: Rank) -> bool {
        let watch = self
            .peers
            .get(peer as usize)
            .and_then(|p| p.as_ref()?.watch.as_ref());
        watch.is_some_and(|w| w.ended() == Some(End::Silent))
    }

    fn peer_gone(&self, peer: Rank) -> Option<String> {
        let p = self.peers.get(peer as usize)?.as_ref()?;
        if let Some(l) = p.local {
            if l.gone() {
                return Some(format!(
                    "rank {peer}'s process (pid {} on this node) has exited",
                    l.pid
                ));
            }
            // Stopped (a signal, a debugger): named within seconds, not at the operation
            // timeout. A value that stands still only while it stays stopped.
            use titus_fabric::process as proc;
            let (now, state) = (proc::now_ns(), proc::state(l.pid));
            let stopped = proc::is_stopped(state);
            let still = p.stopped.still(now, if stopped { 0 } else { now.max(1) });
            return (stopped && still >= proc::frozen_after(self.op_timeout)).then(|| {
                format!(
                    "rank {peer}'s process (pid {} on this node) has made no progress for {:.1} s: {}",
                    l.pid,
                    still.as_secs_f64(),
                    proc::why_still(state)
                )
            });
        }
        let w = p.watch.as_ref()?;
        let Some(end) = w.ended() else {
            // Alive to its kernel, but its process sends no beat: stopped, held in a
            // debugger or starved, on its host.
            // (Past a silent host's bound: a host cut off stops the beats too, and is
            // named for what it is first.)
            let quiet = w.quiet_for();
            let frozen = titus_fabric::process::frozen_after(self.op_timeout)
                .max(SILENT_AFTER + Duration::from_secs(2));
            return (quiet >= frozen).then(|| {
                format!(
                    "rank {peer}'s process on host {} has sent no sign of life for {:.1} s: it \
                     is stopped, held in a debugger, or starved (its host still answers)",
                    w.host,
                    quiet.as_secs_f64()
                )
            });
        };
        Some(match end {
            End::Closed => format!(
                "rank {peer}'s process on host {} has exited (its liveness connection closed)",
                w.host
            ),
            End::Silent => format!(
                "rank {peer}'s host {} stopped answering (no reply to its liveness probes for \
                 {} s: the host is down or cut off the network)",
                w.host,
                SILENT_AFTER.as_secs()
            ),
        })
    }

    fn test(&self, op: OpId) -> Option<Result<u64, FabricError>> {
        if let Ok(_t) = self.poller.try_lock()
            && let Err(e) = self.poll_once(0)
        {
            return Some(Err(e));
        }
        let mut st = lock(&self.state);
        if let Some(r) = st.done.take(op.0) {
            return Some(r);
        }
        if st.inflight.contains_key(&op.0) {
            None
        } else {
            Some(Err(FabricError::UnknownOp(op)))
        }
    }

    fn wait(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError> {
        self.wait_op(op, timeout)
    }

    fn progress(&self, timeout: Duration, signals: &mut Vec<Signal>) -> Result<(), FabricError> {
        self.progress_for(timeout, signals)
    }
}

impl Progress for OfiFabric {
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        // SAFETY: a live handle; fi_cq_signal is thread-safe on an FI_THREAD_SAFE domain.
        unsafe { sys::tofi_wake(self.h.0.as_ptr()) }
        self.wake_all();
    }

    fn take_signals(&self, signals: &mut Vec<Signal>) -> bool {
        // Signals are posted to the queue by whoever polled (a worker between tasks, the
        // progress thread); a progress call's wake-up stays for it.
        let mut st = lock(&self.state);
        if st.signals.is_empty() {
            return false;
        }
        signals.extend(st.signals.drain(..));
        true
    }

    fn set_workers_serve(&self, on: bool) {
        self.workers_serve.store(on, Ordering::Release);
    }

    fn poll(&self) {
        if self.caps.polled_progress
            && let Ok(_token) = self.poller.try_lock()
        {
            // An error here surfaces in the progress thread's next poll.
            let _ = self.poll_once(0);
        }
    }

    fn set_progress_nap(&self, max: Duration) {
        self.max_nap_ns.store(
            max.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        // SAFETY: a live handle; the shim stores the value atomically.
        unsafe {
            sys::tofi_set_max_nap(
                self.h.0.as_ptr(),
                max.as_nanos().min(u128::from(u64::MAX)) as u64,
            )
        }
    }
}
