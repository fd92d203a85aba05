//! Opening one rank's endpoint, collectively: agree on a provider, register the segments,
//! publish and learn addresses, and connect to the configured peers up front.

use crate::address::{Liveness, Peer, Process, decode, encode, encode_refusal, refusal};
use crate::completion::State;
use crate::handle::SLOTS;
use crate::provider::{choose_provider, ensure_available, providers};
use crate::watch::{Listener, WATCH_BUDGET, WATCH_MAX, Watch};
use crate::{OfiFabric, lock};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{
    Addressing, Capabilities, Exposure, Fabric, FabricConfig, FabricError, KeyMode, Loc, Rank,
    Segment, SegmentId,
};
use titus_ofi_sys as sys;

impl OfiFabric {
    /// Opens this rank's endpoint on `provider` (see [`choose_provider`]), registers the
    /// configured segments, exchanges addresses and keys through `rendezvous` (a
    /// [`titus_fabric::bootstrap::Rendezvous`] or the application's own exchange), and
    /// connects to the configured peers (first contact happens here, not in the first
    /// steal). Collective: every rank calls it.
    pub fn open(
        rank: Rank,
        size: u32,
        rendezvous: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Self, FabricError> {
        let segments = config
            .segments
            .iter()
            .map(|s| Segment::new(s.name.clone(), s.len))
            .collect();
        Self::open_over(rank, size, rendezvous, config, provider, segments)
    }

    /// [`OfiFabric::open`] over segments that exist already (another backend's shared
    /// memory, for the hybrid fabric): one per configured segment, at least as long.
    pub fn open_over(
        rank: Rank,
        size: u32,
        mut rendezvous: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
        segments: Vec<Segment>,
    ) -> Result<Self, FabricError> {
        ensure_available()?;
        if segments.len() != config.segments.len()
            || segments
                .iter()
                .zip(&config.segments)
                .any(|(s, c)| s.len() < c.len)
        {
            return Err(FabricError::Unsupported(
                "open_over: the segments given do not match the configuration".into(),
            ));
        }
        if size > 1 && rendezvous.is_none() {
            return Err(FabricError::Unsupported(
                "a job of several ranks needs a rendezvous".into(),
            ));
        }
        if let Some(&p) = config.peers.iter().find(|&&p| p >= size) {
            return Err(FabricError::NoSuchRank { rank: p, size });
        }
        // The idle nap's cap (the shim reads it too); a value it would ignore is an error.
        let max_nap_us = titus_fabric::env_var::progress_max_sleep_us()
            .map_err(|e| FabricError::Unsupported(e.to_string()))?;
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
            tracing::warn!(
                "FI_SOCKETS_PE_WAITTIME is unset: the sockets provider will answer in milliseconds (set it to 0)"
            );
        }
        // 2. Register the segments and open the endpoint.
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
            tracing::info!("fabric provider {prov_name} ({size} ranks)");
        }
        // Ranks on several hosts need addresses the others can reach: a rank that opened
        // on loopback (no other interface up when it started) would be reached by nobody,
        // and its peers' first operations would fail with a bare EINVAL or refusal. It
        // says so in the exchange in place of its record, so every rank fails naming it
        // (rather than waiting for a record that never comes).
        let refused = (!one_node && caps_bits & sys::TOFI_CAP_LOOPBACK != 0).then(|| {
            format!(
                "rank {rank} on host {host}: provider {prov_name} offers only a loopback or \
                 link-local address here, which the job's other hosts cannot reach (is a \
                 network interface up? TITUS_IFACE names the one to use)"
            )
        });
        // 3. Publish this rank's address and segments; learn everyone's.
        let addr = Self::name(&h)?;
        let descs: Vec<(u64, u64, u64, &Exposure)> = (0..segments.len())
            .map(|i| {
                let (key, base) = Self::segment_desc(&h, i);
                (key, base, segments[i].len(), &config.segments[i].exposure)
            })
            .collect();
        let me = Process::me();
        // The liveness port (peers on other nodes watch this process through it).
        let listener = Listener::open(nonce());
        let live = listener
            .as_ref()
            .map_or_else(Liveness::default, |l| Liveness {
                host: crate::watch::host_name(),
                port: l.port,
                nonce: l.nonce,
            });
        let blob = match &refused {
            Some(why) => encode_refusal(why),
            None => encode(&addr, &descs, me, &live),
        };
        let all = match rendezvous.as_mut() {
            Some(rv) => rv.all_gather(&blob)?,
            None => vec![blob],
        };
        if let Some(why) = refused {
            return Err(FabricError::Unsupported(why));
        }
        if let Some((r, why)) = all
            .iter()
            .enumerate()
            .find_map(|(r, b)| refusal(b).map(|w| (r, w)))
        {
            return Err(FabricError::Unsupported(format!(
                "rank {r} cannot join the job: {why}"
            )));
        }
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
        let mut watches = 0;
        let mut resolved = std::collections::HashMap::new();
        let watch_from = Instant::now();
        for &p in &wanted {
            let (paddr, segs, process, plive) = decode(p, rank, &all[p as usize])?;
            let fi_addr = Self::insert(&h, &paddr, p)?;
            // Its pid means something here only on this node, in this pid namespace.
            let local = (me.node != 0 && process.node == me.node && p != rank).then_some(process);
            // Elsewhere: watch it through its liveness port, where that works from here.
            let watch = (local.is_none()
                && p != rank
                && listener.is_some()
                && !plive.host.is_empty()
                && plive.port != 0
                && watches < WATCH_MAX
                && watch_from.elapsed() < WATCH_BUDGET)
                .then(|| Watch::connect(&plive.host, plive.port, plive.nonce, &mut resolved))
                .flatten()
                .map(std::sync::Arc::new);
            watches += usize::from(watch.is_some());
            peers[p as usize] = Some(Peer {
                fi_addr,
                segments: segs,
                local,
                watch,
                stopped: Default::default(),
            });
        }
        let caps = Capabilities {
            backend: "ofi",
            provider: prov_name,
            coherent_atomics: false,
            target_progress: caps_bits & sys::TOFI_CAP_MANUAL_PROGRESS != 0,
            ordered_signal: caps_bits & sys::TOFI_CAP_ORDERED_SAW != 0,
            polled_progress: caps_bits & sys::TOFI_CAP_CQ_WAIT == 0,
            immediate: false,
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
            workers_serve: std::sync::atomic::AtomicBool::new(false),
            poller: Mutex::new(()),
            nap_ns: AtomicU64::new(0),
            max_nap_ns: AtomicU64::new(max_nap_us * 1_000),
            rendezvous: Mutex::new(None),
            connect_time: Duration::ZERO,
            lazy: config.lazy,
            _liveness: listener,
        };
        // 5. Connect up front: one small read to each peer that exposes something to us.
        //    Peers serve it from their own open(), which polls until the barrier below.
        //    Lazily: nothing now; the provider connects on each peer's first operation.
        let t = Instant::now();
        fabric.connect_peers(
            if config.lazy { &[] } else { &wanted },
            rendezvous.as_mut().map(|b| b.as_mut() as &mut dyn Exchange),
        )?;
        fabric.connect_time = t.elapsed();
        *lock(&fabric.rendezvous) = rendezvous;
        Ok(fabric)
    }

    pub(crate) fn connect_peers(
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

    /// Takes the rendezvous out (a program that runs its own all-gathers beside the
    /// fabric); [`OfiFabric::with_rendezvous`] sees none afterwards.
    pub fn take_rendezvous(&self) -> Option<Box<dyn Exchange>> {
        lock(&self.rendezvous).take()
    }

    /// Runs `f` with the rendezvous (for job-wide barriers and all-gathers outside the
    /// fabric).
    pub fn with_rendezvous<T>(&self, f: impl FnOnce(Option<&mut dyn Exchange>) -> T) -> T {
        let mut guard = lock(&self.rendezvous);
        f(guard.as_mut().map(|b| b.as_mut() as &mut dyn Exchange))
    }
}

/// A random 64-bit value (the liveness port's nonce): the kernel's, else the clock's and
/// the pid's.
fn nonce() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}
