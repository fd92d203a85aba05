//! The libfabric backend of [`titus_fabric::Fabric`].
//!
//! Providers: `tcp;ofi_rxm` (the portable default), `shm` (one node), `sockets`
//! (automatic progress; needs `FI_SOCKETS_PE_WAITTIME=0`, which `titus launch` sets, or it
//! answers in milliseconds) and `verbs;ofi_rxm` (soft-RoCE and InfiniBand). `udp;ofi_rxd`
//! crashes on atomics and `net` has none in libfabric 1.17: both are refused by name.
//!
//! Bindings: our own C shim (`titus-ofi-sys`, compiled with `cc` against the headers
//! pkg-config finds) rather than bindgen: the data path is libfabric's static inline
//! functions anyway, the shim keeps every libfabric struct on the C side (so no layout
//! depends on the installed version), and a build needs no libclang. No maintained crate
//! builds against Debian 12's libfabric 1.17; `ofi-libfabric-sys` (≥ 1.20) is the upgrade
//! path once distributions ship it.
//!
//! # Completions and progress
//!
//! One completion queue serves the endpoint. Whoever polls it dispatches every event into
//! a table of results (and a queue of signals) and wakes the waiters. One thread polls at
//! a time (the *poller token*): the progress thread holds it while blocked in the queue;
//! a waiter that finds it free polls itself, spinning briefly (a completion often arrives
//! within microseconds) and then blocking in the queue, never spinning for long.

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{
    Addressing, Capabilities, Exposure, Fabric, FabricConfig, FabricError, KeyMode, Loc, OpId,
    Piece, Rank, Segment, SegmentId, Signal,
};
use titus_ofi_sys as sys;

/// Providers refused by name, with the reason.
const REFUSED: &[(&str, &str)] = &[
    (
        "udp;ofi_rxd",
        "ofi_rxd crashes on atomics in libfabric 1.17",
    ),
    ("ofi_rxd", "ofi_rxd crashes on atomics in libfabric 1.17"),
    ("net", "the net provider has no atomics in libfabric 1.17"),
    ("udp", "udp has no RMA or atomics"),
];

/// Preference order when no provider is named: NICs first, the software fallback last.
const NETWORK_ORDER: &[&str] = &["cxi", "verbs;ofi_rxm", "efa", "tcp;ofi_rxm"];
/// When every rank shares one node, shared memory beats any NIC loopback.
const NODE_ORDER: &[&str] = &["shm", "cxi", "verbs;ofi_rxm", "efa", "tcp;ofi_rxm"];

/// Operation slots: operations in flight at once (slot 0 is the raw benchmark's).
const SLOTS: usize = 4096;
/// Signal receive buffers posted at once.
const RECV_BUFFERS: usize = 256;
/// How long a waiter spins on the completion queue before blocking in it. Loopback
/// operations complete in 2–60 µs and a 1 MiB read in ~250 µs (tcp;ofi_rxm); once blocked,
/// each step of a multi-message transfer costs a wake-up (measured: 1 MiB reads at a
/// quarter of the raw bandwidth with a 50 µs spin). The waiter has nothing else to do, so
/// it spins through that, then blocks rather than burn the core.
const SPIN: Duration = Duration::from_micros(300);
/// Longest single block in the completion queue, so waiters re-check their deadline.
const BLOCK_SLICE_MS: i32 = 10;

/// Whether this build has libfabric.
pub fn available() -> bool {
    sys::AVAILABLE
}

/// Providers of this machine that offer what Titus needs (RDM endpoints, RMA, atomics).
pub fn providers() -> Result<Vec<String>, FabricError> {
    ensure_available()?;
    {
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf is writable for its whole length, which is passed with it; the shim
        // writes a NUL-terminated string within it.
        let ret = unsafe { sys::tofi_providers(buf.as_mut_ptr().cast(), buf.len()) };
        if ret < 0 {
            return Err(transport("fi_getinfo", ret));
        }
        let s = CStr::from_bytes_until_nul(&buf)
            .map_err(|_| FabricError::Unsupported("unterminated provider list".into()))?;
        Ok(s.to_string_lossy()
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect())
    }
}

fn ensure_available() -> Result<(), FabricError> {
    if sys::AVAILABLE {
        Ok(())
    } else {
        Err(FabricError::Unsupported(
            "this build of Titus has no libfabric backend: install libfabric (Debian: \
             apt-get install libfabric-dev pkg-config) and rebuild, or use the mem backend"
                .into(),
        ))
    }
}

fn strerror(code: i32) -> String {
    {
        // SAFETY: tofi_strerror returns a pointer to a static NUL-terminated string.
        unsafe { CStr::from_ptr(sys::tofi_strerror(code)) }
            .to_string_lossy()
            .into_owned()
    }
}

fn transport(call: &'static str, ret: i32) -> FabricError {
    FabricError::Transport {
        call,
        code: ret,
        detail: strerror(ret),
    }
}

/// libfabric errnos that mean the peer is gone.
fn is_peer_gone(err: i32) -> bool {
    // FI_ECONNREFUSED 111, FI_ECONNRESET 104, FI_ECONNABORTED 103, FI_EHOSTUNREACH 113,
    // FI_ENOTCONN 107, FI_EPIPE 32, FI_ESHUTDOWN 108, FI_EIO 5 (shm: process gone).
    matches!(err.abs(), 111 | 104 | 103 | 113 | 107 | 32 | 108 | 5)
}

/// The provider to use: `requested` (or `TITUS_PROVIDER`, or libfabric's `FI_PROVIDER`),
/// else the first of the preference order that every rank offers.
pub fn choose_provider(
    requested: Option<&str>,
    offered_by_all: &[String],
    one_node: bool,
) -> Result<String, FabricError> {
    let requested = requested
        .map(str::to_string)
        .or_else(|| std::env::var("TITUS_PROVIDER").ok())
        .or_else(|| std::env::var("FI_PROVIDER").ok())
        .filter(|p| !p.is_empty());
    if let Some(p) = requested {
        if let Some((_, why)) = REFUSED.iter().find(|(name, _)| *name == p) {
            return Err(FabricError::Unsupported(format!(
                "provider '{p}' is refused: {why}"
            )));
        }
        // A core provider named alone gets the RDM utility layer it needs.
        let p = match p.as_str() {
            "tcp" | "verbs" => format!("{p};ofi_rxm"),
            _ => p,
        };
        if !offered_by_all.contains(&p) {
            return Err(FabricError::Unsupported(format!(
                "provider '{p}' is not offered on every rank with RDM endpoints, RMA and 64-bit atomics \
                 (offered everywhere: {})",
                if offered_by_all.is_empty() {
                    "none".to_string()
                } else {
                    offered_by_all.join(", ")
                }
            )));
        }
        return Ok(p);
    }
    let order = if one_node { NODE_ORDER } else { NETWORK_ORDER };
    order
        .iter()
        .find(|p| offered_by_all.iter().any(|o| o == *p))
        .map(|p| p.to_string())
        .ok_or_else(|| {
            FabricError::Unsupported(format!(
                "no usable libfabric provider on every rank (wanted one of {}; offered everywhere: {})",
                order.join(", "),
                if offered_by_all.is_empty() { "none".to_string() } else { offered_by_all.join(", ") }
            ))
        })
}

/// The owned shim handle.
#[derive(Debug)]
struct Handle(NonNull<sys::tofi>);

// SAFETY: the shim opens the domain with FI_THREAD_SAFE, so libfabric serialises what it
// must internally and any thread may call into the handle; the handle is closed only in
// Drop, when no other reference to it remains.
unsafe impl Send for Handle {}
// SAFETY: as for Send: every shim call through a shared handle is thread-safe.
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful tofi_open and is closed exactly once.
        unsafe { sys::tofi_close(self.0.as_ptr()) }
    }
}

/// A peer's segment as it published it.
#[derive(Debug, Clone)]
struct RemoteSegment {
    key: u64,
    base: u64,
    len: u64,
    exposed_to_me: bool,
}

#[derive(Debug, Clone)]
struct Peer {
    fi_addr: u64,
    segments: Vec<RemoteSegment>,
}

/// Hasher for operation ids: they are distinct counters, so a multiply spreads them well
/// enough, for a fraction of SipHash's cost on the hot path.
#[derive(Debug, Default)]
struct IdHasher(u64);

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

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// An operation in flight: it completes when its last part does.
#[derive(Debug)]
struct Pending {
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
struct State {
    inflight: IdMap<Pending>,
    done: titus_fabric::Completions<BuildHasherDefault<IdHasher>>,
    signals: VecDeque<Signal>,
    /// Signals to post after their data completed: (op, peer, value).
    deferred: Vec<(u64, Rank, u64)>,
    /// Completions so far, so that `progress` can return on a new one.
    completions: u64,
    /// Operation slots not in use (slot 0 is the raw benchmark's). Kept under the state
    /// lock, which every completion takes anyway.
    free: Vec<u32>,
}

/// One rank's libfabric endpoint with its registered segments.
#[derive(Debug)]
pub struct OfiFabric {
    // Field order matters for Drop: the handle (and its registrations) goes before the
    // segment memory it registered.
    h: Handle,
    segments: Vec<Segment>,
    rank: Rank,
    size: u32,
    caps: Capabilities,
    op_timeout: Duration,
    iov_limit: usize,
    peers: Vec<Option<Peer>>,
    next_id: AtomicU64,
    state: Mutex<State>,
    cv: Condvar,
    /// Completions notify `cv` only while threads wait on it (the handshake is model
    /// checked in titus-fabric).
    gate: titus_fabric::WakeGate,
    /// `wake` was called: `progress` returns.
    woken: std::sync::atomic::AtomicBool,
    /// Whether `State::deferred` may hold signals, so pollers skip the lock otherwise.
    has_deferred: std::sync::atomic::AtomicBool,
    poller: Mutex<()>,
    rendezvous: Mutex<Option<Box<dyn Exchange>>>,
    connect_time: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Appends a published record: address, then each segment's key, base, length and
/// exposure (u32::MAX = everyone).
fn encode(addr: &[u8], segs: &[(u64, u64, u64, &Exposure)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(addr.len() as u32).to_le_bytes());
    b.extend_from_slice(addr);
    b.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    for (key, base, len, exp) in segs {
        b.extend_from_slice(&key.to_le_bytes());
        b.extend_from_slice(&base.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        match exp {
            Exposure::All => b.extend_from_slice(&u32::MAX.to_le_bytes()),
            Exposure::Peers(p) => {
                b.extend_from_slice(&(p.len() as u32).to_le_bytes());
                for r in p {
                    b.extend_from_slice(&r.to_le_bytes());
                }
            }
        }
    }
    b
}

/// Parses another rank's record; nothing in it is trusted.
fn decode(rank: Rank, me: Rank, blob: &[u8]) -> Result<(Vec<u8>, Vec<RemoteSegment>), FabricError> {
    let bad = |what: &str| {
        FabricError::Unsupported(format!(
            "rank {rank} published a malformed address record ({what})"
        ))
    };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], FabricError> {
        let s = blob
            .get(at..at.checked_add(n).ok_or_else(|| bad("length overflow"))?)
            .ok_or_else(|| bad("truncated"))?;
        at += n;
        Ok(s)
    };
    let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
    let u64_at = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    let alen = u32_at(take(4)?) as usize;
    if alen > 4096 {
        return Err(bad("address longer than 4 KiB"));
    }
    let addr = take(alen)?.to_vec();
    let nsegs = u32_at(take(4)?) as usize;
    if nsegs > 4096 {
        return Err(bad("more than 4096 segments"));
    }
    let mut segs = Vec::with_capacity(nsegs);
    for _ in 0..nsegs {
        let key = u64_at(take(8)?);
        let base = u64_at(take(8)?);
        let len = u64_at(take(8)?);
        let n = u32_at(take(4)?);
        let exposed_to_me = if n == u32::MAX {
            true
        } else {
            if n as usize > blob.len() / 4 {
                return Err(bad("exposure list longer than the record"));
            }
            let mut hit = rank == me;
            for _ in 0..n {
                hit |= u32_at(take(4)?) == me;
            }
            hit
        };
        segs.push(RemoteSegment {
            key,
            base,
            len,
            exposed_to_me,
        });
    }
    Ok((addr, segs))
}

impl OfiFabric {
    /// Opens this rank's endpoint on `provider` (see [`choose_provider`]), registers the
    /// configured segments, exchanges addresses and keys through `rendezvous` (a
    /// [`titus_fabric::bootstrap::Rendezvous`] or the application's own exchange), and
    /// connects to the configured peers (first contact happens here, not in the first
    /// steal). Collective: every rank calls it.
    pub fn open(
        rank: Rank,
        size: u32,
        mut rendezvous: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Self, FabricError> {
        ensure_available()?;
        if size > 1 && rendezvous.is_none() {
            return Err(FabricError::Unsupported(
                "a job of several ranks needs a rendezvous".into(),
            ));
        }
        if let Some(&p) = config.peers.iter().find(|&&p| p >= size) {
            return Err(FabricError::NoSuchRank { rank: p, size });
        }
        // 1. Agree on a provider: every rank lists what it offers and its host.
        let offered = providers()?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .to_string();
        let (common, one_node) = match rendezvous.as_mut() {
            Some(rv) => {
                let mine = format!("{host}\n{}", offered.join(","));
                let all = rv.all_gather(mine.as_bytes())?;
                let mut common = offered.clone();
                let mut hosts = Vec::new();
                for b in &all {
                    let s = String::from_utf8_lossy(b);
                    let (h, list) = s.split_once('\n').unwrap_or((&s, ""));
                    hosts.push(h.to_string());
                    let theirs: Vec<&str> = list.split(',').collect();
                    common.retain(|p| theirs.contains(&p.as_str()));
                }
                (common, hosts.iter().all(|h| *h == hosts[0]))
            }
            None => (offered.clone(), true),
        };
        let provider = choose_provider(provider, &common, one_node)?;
        if provider == "sockets"
            && std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none()
            && rank == 0
        {
            eprintln!(
                "titus: warning: FI_SOCKETS_PE_WAITTIME is unset: the sockets provider will answer in milliseconds (set it to 0)"
            );
        }
        // 2. Register the segments and open the endpoint.
        let segments: Vec<Segment> = config
            .segments
            .iter()
            .map(|s| Segment::new(s.name.clone(), s.len))
            .collect();
        let h = Self::open_handle(&provider, &segments)?;
        let (caps_bits, iov_limit, prov_name) = {
            // SAFETY: h is a live handle; tofi_provider returns a NUL-terminated string owned
            // by the handle, copied out here.
            unsafe {
                (
                    sys::tofi_caps(h.0.as_ptr()),
                    sys::tofi_iov_limit(h.0.as_ptr()).clamp(1, 64),
                    CStr::from_ptr(sys::tofi_provider(h.0.as_ptr()))
                        .to_string_lossy()
                        .into_owned(),
                )
            }
        };
        if rank == 0 {
            eprintln!("titus: fabric provider {prov_name} ({size} ranks)");
        }
        // 3. Publish this rank's address and segments; learn everyone's.
        let addr = Self::name(&h)?;
        let descs: Vec<(u64, u64, u64, &Exposure)> = (0..segments.len())
            .map(|i| {
                let (key, base) = Self::segment_desc(&h, i);
                (key, base, segments[i].len(), &config.segments[i].exposure)
            })
            .collect();
        let blob = encode(&addr, &descs);
        let all = match rendezvous.as_mut() {
            Some(rv) => rv.all_gather(&blob)?,
            None => vec![blob],
        };
        if all.len() != size as usize {
            return Err(FabricError::Unsupported(format!(
                "{} address records for {size} ranks",
                all.len()
            )));
        }
        // 4. Insert the peers (and this rank) into the address vector.
        let mut peers: Vec<Option<Peer>> = vec![None; size as usize];
        let mut wanted: Vec<Rank> = config.peers.clone();
        wanted.push(rank);
        wanted.sort_unstable();
        wanted.dedup();
        for &p in &wanted {
            let (paddr, segs) = decode(p, rank, &all[p as usize])?;
            let fi_addr = Self::insert(&h, &paddr, p)?;
            peers[p as usize] = Some(Peer {
                fi_addr,
                segments: segs,
            });
        }
        let caps = Capabilities {
            backend: "ofi",
            provider: prov_name,
            coherent_atomics: false,
            target_progress: caps_bits & sys::TOFI_CAP_MANUAL_PROGRESS != 0,
            ordered_signal: caps_bits & sys::TOFI_CAP_ORDERED_SAW != 0,
            addressing: if caps_bits & sys::TOFI_CAP_VIRT_ADDR != 0 {
                Addressing::Virtual
            } else {
                Addressing::Offset
            },
            keys: if caps_bits & sys::TOFI_CAP_PROV_KEY != 0 {
                KeyMode::Provider
            } else {
                KeyMode::Application
            },
        };
        let mut fabric = Self {
            h,
            segments,
            rank,
            size,
            caps,
            op_timeout: config.op_timeout,
            iov_limit,
            peers,
            next_id: AtomicU64::new(1),
            // Slot 0 is reserved for the raw benchmark loop.
            state: Mutex::new(State {
                free: (1..SLOTS as u32).rev().collect(),
                ..State::default()
            }),
            cv: Condvar::new(),
            gate: titus_fabric::WakeGate::new(),
            has_deferred: std::sync::atomic::AtomicBool::new(false),
            woken: std::sync::atomic::AtomicBool::new(false),
            poller: Mutex::new(()),
            rendezvous: Mutex::new(None),
            connect_time: Duration::ZERO,
        };
        // 5. Connect up front: one small read to each peer that exposes something to us.
        //    Peers serve it from their own open(), which polls until the barrier below.
        let t = Instant::now();
        fabric.connect_peers(
            &wanted,
            rendezvous.as_mut().map(|b| b.as_mut() as &mut dyn Exchange),
        )?;
        fabric.connect_time = t.elapsed();
        *lock(&fabric.rendezvous) = rendezvous;
        Ok(fabric)
    }

    fn open_handle(provider: &str, segments: &[Segment]) -> Result<Handle, FabricError> {
        {
            let prov = CString::new(provider)
                .map_err(|_| FabricError::Unsupported("provider name with NUL".into()))?;
            let bases: Vec<*mut std::os::raw::c_void> =
                segments.iter().map(|s| s.as_ptr().cast()).collect();
            let lens: Vec<u64> = segments.iter().map(Segment::len).collect();
            let mut out: *mut sys::tofi = std::ptr::null_mut();
            let mut err = vec![0u8; 512];
            // SAFETY: bases and lens hold segments.len() entries each; every base points to a
            // live segment of that length which outlives the handle (OfiFabric drops the
            // handle first); out and err are valid for writing, err for its whole length.
            let ret = unsafe {
                sys::tofi_open(
                    prov.as_ptr(),
                    segments.len(),
                    bases.as_ptr(),
                    lens.as_ptr(),
                    SLOTS,
                    RECV_BUFFERS,
                    &mut out,
                    err.as_mut_ptr().cast(),
                    err.len(),
                )
            };
            if ret != 0 {
                let msg = CStr::from_bytes_until_nul(&err)
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(FabricError::Transport {
                    call: "open the endpoint",
                    code: ret,
                    detail: format!("provider '{provider}': {msg}"),
                });
            }
            NonNull::new(out).map(Handle).ok_or(FabricError::Closed)
        }
    }

    fn name(h: &Handle) -> Result<Vec<u8>, FabricError> {
        {
            let mut buf = vec![0u8; 1024];
            let mut len = buf.len();
            // SAFETY: buf is writable for len bytes; the shim updates len to the name's size.
            let ret = unsafe { sys::tofi_getname(h.0.as_ptr(), buf.as_mut_ptr().cast(), &mut len) };
            if ret != 0 {
                return Err(transport("fi_getname", ret));
            }
            buf.truncate(len.min(1024));
            Ok(buf)
        }
    }

    fn segment_desc(h: &Handle, seg: usize) -> (u64, u64) {
        let (mut key, mut base) = (0u64, 0u64);
        // SAFETY: seg is below the number of segments registered at open; key and base are
        // valid for writing.
        unsafe { sys::tofi_segment(h.0.as_ptr(), seg, &mut key, &mut base) };
        (key, base)
    }

    fn insert(h: &Handle, addr: &[u8], rank: Rank) -> Result<u64, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::Unsupported(format!(
                "rank {rank} published an empty address"
            )));
        }
        {
            let mut fi_addr = 0u64;
            // SAFETY: addr holds the peer's full fi_getname output (the provider reads its
            // own address format from it); fi_addr is valid for writing.
            let ret =
                unsafe { sys::tofi_av_insert(h.0.as_ptr(), addr.as_ptr().cast(), &mut fi_addr) };
            if ret != 0 {
                return Err(transport("fi_av_insert", ret));
            }
            Ok(fi_addr)
        }
    }

    fn connect_peers(
        &self,
        peers: &[Rank],
        rendezvous: Option<&mut dyn Exchange>,
    ) -> Result<(), FabricError> {
        let Some(scratch) = (0..self.segments.len()).find(|&i| self.segments[i].len() >= 8) else {
            return Ok(());
        };
        let mut ops = Vec::new();
        for &p in peers {
            if p == self.rank {
                continue;
            }
            let peer = self.peers[p as usize].as_ref().expect("inserted");
            if let Some(s) = peer
                .segments
                .iter()
                .position(|s| s.exposed_to_me && s.len >= 8)
            {
                ops.push(self.read(
                    p,
                    Loc::new(SegmentId(s as u16), 0),
                    Loc::new(SegmentId(scratch as u16), 0),
                    8,
                )?);
            }
        }
        // Serve other ranks' first contacts while ours complete (a progress thread does not
        // exist yet): wait() polls the completion queue, which progresses the endpoint.
        for op in ops {
            self.wait(op, self.op_timeout)?;
        }
        if let Some(rv) = rendezvous {
            // Keep serving peers until every rank connected: a background poller until the
            // barrier returns.
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !done.load(Ordering::Acquire) {
                        let mut sink = Vec::new();
                        let _ = self.progress(Duration::from_millis(5), &mut sink);
                        lock(&self.state).signals.extend(sink);
                    }
                });
                let r = rv.barrier();
                done.store(true, Ordering::Release);
                r
            })?;
        }
        Ok(())
    }

    /// How long connecting to the peers took at open (first contacts and the barrier).
    pub fn connect_time(&self) -> Duration {
        self.connect_time
    }

    /// Runs `f` with the rendezvous (for job-wide barriers and all-gathers outside the
    /// fabric).
    pub fn with_rendezvous<T>(&self, f: impl FnOnce(Option<&mut dyn Exchange>) -> T) -> T {
        let mut guard = lock(&self.rendezvous);
        f(guard.as_mut().map(|b| b.as_mut() as &mut dyn Exchange))
    }

    /// Raw libfabric latency of `iters` operations of `kind` (0 CAS, 1 fetch-add, 2 read,
    /// 3 write) of `len` bytes to `peer`'s `remote`, posted and polled by the C shim
    /// directly: the baseline that this layer's overhead is measured against. No progress
    /// thread may poll this rank's queue meanwhile.
    pub fn raw_latency(
        &self,
        kind: i32,
        peer: Rank,
        remote: Loc,
        local: SegmentId,
        len: u64,
        iters: usize,
    ) -> Result<Vec<u64>, FabricError> {
        let (fi_addr, raddr, rkey) = self.remote(peer, remote, len.max(8))?;
        self.segment(local)?.check(0, len)?;
        let mut ns = vec![0u64; iters];
        let _token = lock(&self.poller);
        {
            // SAFETY: slot 0 is reserved for this loop and the poller token keeps other
            // threads off the completion queue; the local range 0..len of segment `local`
            // and the remote range were checked; ns is writable for iters entries.
            let ret = unsafe {
                sys::tofi_raw_latency(
                    self.h.0.as_ptr(),
                    kind,
                    fi_addr,
                    local.0 as usize,
                    len,
                    raddr,
                    rkey,
                    iters,
                    ns.as_mut_ptr(),
                )
            };
            if ret != 0 {
                return Err(transport("raw latency loop", ret));
            }
        }
        Ok(ns)
    }

    /// Checks a remote range and returns (fi_addr, remote address, key).
    fn remote(&self, peer: Rank, remote: Loc, len: u64) -> Result<(u64, u64, u64), FabricError> {
        if peer >= self.size {
            return Err(FabricError::NoSuchRank {
                rank: peer,
                size: self.size,
            });
        }
        let p = self.peers[peer as usize]
            .as_ref()
            .ok_or(FabricError::NotAPeer { peer })?;
        let s = p
            .segments
            .get(remote.segment.0 as usize)
            .ok_or(FabricError::UnknownSegment {
                rank: peer,
                segment: remote.segment.0,
                count: p.segments.len(),
            })?;
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

    fn take_slot(&self) -> Result<u32, FabricError> {
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

    fn free_slot(&self, slot: u32) {
        lock(&self.state).free.push(slot);
    }

    /// Wakes the threads blocked on `cv`, if any (after a state change under the lock).
    fn notify_waiters(&self) {
        self.gate.wake(&self.cv);
    }

    /// Wakes every thread blocked on `cv`, waiters or not.
    fn wake_all(&self) {
        let _st = lock(&self.state);
        self.cv.notify_all();
    }

    /// Blocks on `cv` for at most `timeout` unless `ready` holds (checked under the lock).
    fn sleep_unless(&self, timeout: Duration, ready: impl Fn(&State) -> bool) {
        self.gate
            .sleep_unless(&self.state, &self.cv, timeout, ready);
    }

    /// Posts one part of operation `id` with a fresh slot, retrying while the provider's
    /// queue is full. A full queue drains only when this endpoint progresses, so the retry
    /// polls the completion queue: directly if the caller holds the poller token
    /// (`have_token`), else when the token is free.
    fn post(
        &self,
        id: u64,
        call: &'static str,
        have_token: bool,
        f: impl Fn(u32, u64) -> i32,
    ) -> Result<(), FabricError> {
        let slot = self.take_slot()?;
        let tag = (id << 16) | u64::from(slot);
        let deadline = Instant::now() + self.op_timeout;
        loop {
            let ret = f(slot, tag);
            if ret == 0 {
                return Ok(());
            }
            if ret != -sys::FI_EAGAIN || Instant::now() > deadline {
                self.free_slot(slot);
                return Err(transport(call, ret));
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

    fn begin(&self, kind: &'static str, peer: Rank, parts: u32, signal_after: Option<u64>) -> u64 {
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
    fn abort_parts(&self, id: u64, unposted: u32, e: FabricError) {
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
    fn poll_once(&self, timeout_ms: i32) -> Result<usize, FabricError> {
        let n = self.poll_cq(timeout_ms)?;
        self.post_deferred();
        Ok(n)
    }

    /// Reads the completion queue once and dispatches; the caller holds the poller token.
    fn poll_cq(&self, timeout_ms: i32) -> Result<usize, FabricError> {
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

    fn dispatch(&self, events: &[sys::tofi_event]) {
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
        self.notify_waiters();
    }

    /// Posts the signals whose data was delivered (the caller holds the poller token).
    fn post_deferred(&self) {
        while self.has_deferred.swap(false, Ordering::AcqRel) {
            let deferred = std::mem::take(&mut lock(&self.state).deferred);
            for (id, peer, value) in deferred {
                if let Err(e) = self.post_signal(id, peer, value, true) {
                    self.abort_parts(id, 1, e);
                }
            }
        }
    }

    fn post_signal(
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

    fn check_local(&self, loc: Loc, len: u64) -> Result<(), FabricError> {
        self.segment(loc.segment)?.check(loc.offset, len)
    }

    /// Checks and posts a 64-bit atomic; `f(slot, tag, fi_addr, raddr, rkey)` posts it.
    fn atomic(
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
        self.segments
            .get(id.0 as usize)
            .ok_or(FabricError::UnknownSegment {
                rank: self.rank,
                segment: id.0,
                count: self.segments.len(),
            })
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

    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        // SAFETY: a live handle; fi_cq_signal is thread-safe on an FI_THREAD_SAFE domain.
        unsafe { sys::tofi_wake(self.h.0.as_ptr()) }
        self.wake_all();
    }

    fn drain_completions(&self, out: &mut Vec<(OpId, Result<u64, FabricError>)>) {
        if let Ok(_t) = self.poller.try_lock() {
            let _ = self.poll_once(0);
        }
        lock(&self.state).done.take_own(out);
    }

    fn set_progress_nap(&self, max: Duration) {
        // SAFETY: a live handle; the shim stores the value atomically.
        unsafe {
            sys::tofi_set_max_nap(
                self.h.0.as_ptr(),
                max.as_nanos().min(u128::from(u64::MAX)) as u64,
            )
        }
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

    fn progress(&self, timeout: Duration, signals: &mut Vec<Signal>) -> Result<(), FabricError> {
        let deadline = Instant::now() + timeout;
        let seen = lock(&self.state).completions;
        loop {
            {
                let mut st = lock(&self.state);
                if !st.signals.is_empty()
                    || st.completions != seen
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
            match self.poller.try_lock() {
                Ok(_token) => {
                    self.poll_once(ms)?;
                }
                Err(_) => {
                    // A waiter polls right now; sleep until it dispatches something.
                    self.sleep_unless(left.min(Duration::from_millis(5)), |st| {
                        !st.signals.is_empty()
                            || st.completions != seen
                            || self.woken.load(Ordering::Acquire)
                    });
                }
            }
        }
    }
}
