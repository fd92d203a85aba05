//! The conformance suite every backend passes: the same case bodies run on each rank,
//! whether ranks are threads over [`mem`](crate::mem) or processes over libfabric.
//!
//! A harness opens the fabric with [`config`], starts a progress thread whose signals go
//! to [`Ctx::signals`], and calls [`run`] on every rank at once. Cases synchronise through
//! a barrier built on the fabric itself (a fetch-add on rank 0, then reads until everyone
//! arrived), so they also test the operations they use.

use crate::{
    Exposure, Fabric, FabricConfig, FabricError, Loc, Piece, Rank, SegmentId, SegmentSpec, Signal,
};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The exposed segment every case uses.
pub const CONF: SegmentId = SegmentId(0);
/// A segment exposed to nobody but its owner.
pub const PRIVATE: SegmentId = SegmentId(1);

const BARRIER: u64 = 0;
const COUNTER: u64 = 64;
const LOCK: u64 = 128;
const LOCKED_COUNTER: u64 = 136;
const PROGRESS_WORD: u64 = 192;
const LEFT: u64 = 200;
/// Local scratch words for atomics and barrier reads.
const SCRATCH: u64 = 1024;
/// Local pieces for gathered writes.
const PIECES: u64 = 8192;
/// Where gathered writes land: one slot per (source, message).
const SLOTS: u64 = 65_536;
const SLOT: u64 = 256;
/// Messages each rank sends in the signal case.
const MESSAGES: u64 = 64;
/// Size of [`CONF`].
pub const CONF_LEN: u64 = SLOTS + 64 * MESSAGES * SLOT;

/// The configuration every rank opens the fabric with for the suite (up to 64 ranks).
pub fn config(size: u32, op_timeout: Duration) -> FabricConfig {
    assert!(
        size <= 64,
        "the conformance suite lays out slots for at most 64 ranks"
    );
    FabricConfig {
        segments: vec![
            SegmentSpec {
                name: "conformance".into(),
                len: CONF_LEN,
                exposure: Exposure::All,
            },
            SegmentSpec {
                name: "private".into(),
                len: 4096,
                exposure: Exposure::Peers(Vec::new()),
            },
        ],
        peers: (0..size).collect(),
        lazy: false,
        op_timeout,
    }
}

/// Lets a case stop and restart this rank's progress thread.
pub trait ProgressControl {
    /// Stops the progress thread (this rank then makes no fabric calls of its own).
    fn pause(&self);
    /// Starts it again.
    fn resume(&self);
}

/// What a case gets.
#[allow(missing_debug_implementations)] // closures and trait objects inside
pub struct Ctx<'a> {
    /// This rank's fabric.
    pub fabric: &'a dyn Fabric,
    /// Signals collected by the progress thread.
    pub signals: &'a Receiver<Signal>,
    /// The progress thread.
    pub progress: &'a dyn ProgressControl,
    /// Ends this rank abruptly, as a crash would (the dead-peer case).
    pub die: &'a dyn Fn(),
}

type Case = fn(&Ctx<'_>, &mut Barrier) -> Result<(), String>;

/// The cases, in the order [`run`] runs them.
pub const CASES: &[(&str, Case)] = &[
    ("bounds_are_checked_at_the_initiator", bounds),
    ("concurrent_fetch_add_reaches_the_total", fetch_add_total),
    ("cas_lock_guards_a_remote_counter", cas_lock),
    ("gathered_write_data_precedes_its_signal", gather_signal),
    ("target_without_progress_stalls", progress_needed),
    ("idle_progress_thread_sleeps", idle_is_cheap),
    (
        "a_drain_takes_only_its_own_completions",
        drains_are_per_thread,
    ),
];

/// The name [`run`] gives the dead-peer case, which is not in [`CASES`].
const DEAD_PEER_CASE: &str = "dead_peer_errors_within_the_timeout";

/// The first failure of the suite on a rank, named: which case, or which barrier between
/// them, so that a failing backend says where it broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConformanceFailure {
    /// A case's check failed on this rank.
    #[error("{case} (rank {rank}): {detail}")]
    Case {
        /// The case's name.
        case: &'static str,
        /// This rank.
        rank: Rank,
        /// What the case found.
        detail: String,
    },
    /// The barrier after a case failed.
    #[error("barrier after {case}: {source}")]
    Barrier {
        /// The case before the barrier.
        case: &'static str,
        /// What the fabric said.
        #[source]
        source: FabricError,
    },
    /// The last barrier, where ranks leave the suite together, failed.
    #[error("leaving the suite: {0}")]
    Leaving(#[source] FabricError),
}

/// Runs every case on this rank (all ranks call it together), then, with `dead_peer`,
/// the dead-peer case, which ends rank 1. Returns the first failure, named.
pub fn run(ctx: &Ctx<'_>, dead_peer: bool) -> Result<(), ConformanceFailure> {
    let mut b = Barrier::default();
    // TITUS_CONFORMANCE_ONLY=word runs only the cases whose name contains it.
    let only = crate::env_var::get(crate::env_var::CONFORMANCE_ONLY)
        .ok()
        .flatten();
    for &(name, case) in CASES {
        if only.as_deref().is_some_and(|w| !name.contains(w)) {
            continue;
        }
        case(ctx, &mut b).map_err(|detail| ConformanceFailure::Case {
            case: name,
            rank: ctx.fabric.rank(),
            detail,
        })?;
        b.wait(ctx.fabric)
            .map_err(|source| ConformanceFailure::Barrier { case: name, source })?;
    }
    let mut live = ctx.fabric.size();
    if dead_peer {
        dead_peer_case(ctx, &mut b).map_err(|detail| ConformanceFailure::Case {
            case: DEAD_PEER_CASE,
            rank: ctx.fabric.rank(),
            detail,
        })?;
        if ctx.fabric.rank() == 1 {
            return Ok(()); // This rank is dead.
        }
        live -= u32::from(live > 1);
    }
    b.finish(ctx.fabric, live)
        .map_err(ConformanceFailure::Leaving)
}

/// A barrier on the fabric: fetch-add on rank 0's word, then read it until every rank of
/// this generation arrived (sleeping 1 ms between reads: no spinning).
#[derive(Debug, Default)]
pub struct Barrier {
    generation: u64,
}

impl Barrier {
    /// Waits for every rank.
    pub fn wait(&mut self, f: &dyn Fabric) -> Result<(), FabricError> {
        self.generation += 1;
        let target = self.generation * u64::from(f.size());
        f.fetch_add_sync(0, Loc::new(CONF, BARRIER), 1)?;
        let deadline = Instant::now() + f.op_timeout() * 4;
        loop {
            f.read_sync(0, Loc::new(CONF, BARRIER), Loc::new(CONF, SCRATCH), 8)?;
            if f.segment(CONF)?.load(SCRATCH)? >= target {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(FabricError::Timeout {
                    op: "barrier",
                    peer: 0,
                    timeout: f.op_timeout() * 4,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Barrier {
    /// Leaves the last barrier safely: every rank but 0 says it has left (a fetch-add on
    /// rank 0), and rank 0 keeps serving until the other `live - 1` ranks have — otherwise
    /// rank 0 could stop progressing while others still read its barrier word.
    pub fn finish(&mut self, f: &dyn Fabric, live: u32) -> Result<(), FabricError> {
        if f.rank() != 0 {
            return f.fetch_add_sync(0, Loc::new(CONF, LEFT), 1).map(drop);
        }
        let deadline = Instant::now() + f.op_timeout() * 4;
        loop {
            f.read_sync(0, Loc::new(CONF, LEFT), Loc::new(CONF, SCRATCH), 8)?;
            if f.segment(CONF)?.load(SCRATCH)? + 1 >= u64::from(live) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(FabricError::Timeout {
                    op: "leaving barrier",
                    peer: 0,
                    timeout: f.op_timeout() * 4,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn fail(what: &str) -> impl Fn(FabricError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn bounds(ctx: &Ctx<'_>, _: &mut Barrier) -> Result<(), String> {
    let f = ctx.fabric;
    let me = f.rank();
    let peer = (me + 1) % f.size();
    let local = Loc::new(CONF, SCRATCH);
    let expect =
        |r: Result<crate::OpId, FabricError>, what: &str, ok: fn(&FabricError) -> bool| match r {
            Err(e) if ok(&e) => Ok(()),
            Err(e) => Err(format!("{what}: wrong error {e}")),
            Ok(_) => Err(format!("{what}: accepted")),
        };
    let oob = |e: &FabricError| matches!(e, FabricError::OutOfBounds { .. });
    expect(
        f.read(peer, Loc::new(CONF, CONF_LEN - 4), local, 8),
        "read past the end",
        oob,
    )?;
    expect(
        f.read(peer, Loc::new(CONF, 0), Loc::new(CONF, CONF_LEN - 1), 2),
        "read into past the local end",
        oob,
    )?;
    expect(
        f.write(peer, Loc::new(CONF, u64::MAX - 2), local, 8),
        "write at u64::MAX",
        oob,
    )?;
    expect(
        f.write_gather(
            peer,
            Loc::new(CONF, CONF_LEN - 16),
            &[Piece { local, len: 8 }, Piece { local, len: 9 }],
            Some(1),
        ),
        "gathered write past the end",
        oob,
    )?;
    expect(
        f.fetch_add(peer, Loc::new(CONF, CONF_LEN), 1),
        "atomic past the end",
        oob,
    )?;
    expect(
        f.compare_swap(peer, Loc::new(CONF, COUNTER + 4), 0, 1),
        "unaligned atomic",
        |e| matches!(e, FabricError::Misaligned { .. }),
    )?;
    expect(
        f.read(peer, Loc::new(SegmentId(9), 0), local, 8),
        "unknown segment",
        |e| matches!(e, FabricError::UnknownSegment { .. }),
    )?;
    expect(
        f.read(f.size(), Loc::new(CONF, 0), local, 8),
        "rank outside the job",
        |e| matches!(e, FabricError::NoSuchRank { .. }),
    )?;
    if peer != me {
        expect(
            f.read(peer, Loc::new(PRIVATE, 0), local, 8),
            "a peer's private segment",
            |e| matches!(e, FabricError::NotExposed { .. }),
        )?;
    }
    // Its own private segment is fine.
    f.read_sync(me, Loc::new(PRIVATE, 0), local, 8)
        .map_err(fail("own private segment"))
}

fn fetch_add_total(ctx: &Ctx<'_>, b: &mut Barrier) -> Result<(), String> {
    const PER_RANK: u64 = 200;
    let f = ctx.fabric;
    let at = Loc::new(CONF, COUNTER);
    let mut olds = Vec::new();
    // Half one at a time, half all in flight at once.
    for _ in 0..PER_RANK / 2 {
        olds.push(f.fetch_add_sync(0, at, 1).map_err(fail("fetch-add"))?);
    }
    let ops: Vec<_> = (0..PER_RANK / 2)
        .map(|_| f.fetch_add(0, at, 1))
        .collect::<Result<_, _>>()
        .map_err(fail("submit"))?;
    for op in ops {
        olds.push(f.wait(op, f.op_timeout()).map_err(fail("wait"))?);
    }
    olds.sort_unstable();
    if olds.windows(2).any(|w| w[0] == w[1]) {
        return Err("two fetch-adds returned the same previous value".into());
    }
    b.wait(f).map_err(fail("barrier"))?;
    if f.rank() == 0 {
        let total = f
            .segment(CONF)
            .map_err(fail("segment"))?
            .load(COUNTER)
            .map_err(fail("load"))?;
        let want = PER_RANK * u64::from(f.size());
        if total != want {
            return Err(format!("counter is {total}, expected {want}"));
        }
    }
    Ok(())
}

fn cas_lock(ctx: &Ctx<'_>, b: &mut Barrier) -> Result<(), String> {
    const PER_RANK: u64 = 40;
    let f = ctx.fabric;
    let me = u64::from(f.rank()) + 1;
    let lock = Loc::new(CONF, LOCK);
    let counter = Loc::new(CONF, LOCKED_COUNTER);
    let local = Loc::new(CONF, SCRATCH + 8);
    let seg = f.segment(CONF).map_err(fail("segment"))?;
    for _ in 0..PER_RANK {
        // 1. Take the lock: CAS 0 -> my id; a failure returns the holder, so back off.
        let mut spins = 0u32;
        loop {
            let old = f.compare_swap_sync(0, lock, 0, me).map_err(fail("lock"))?;
            if old == 0 {
                break;
            }
            spins += 1;
            std::thread::sleep(Duration::from_micros(u64::from(spins.min(20)) * 50));
        }
        // 2. Read-modify-write the counter under the lock (plain read and write).
        f.read_sync(0, counter, local, 8)
            .map_err(fail("read counter"))?;
        let v = seg.load(SCRATCH + 8).map_err(fail("load"))?;
        seg.store(SCRATCH + 8, v + 1).map_err(fail("store"))?;
        // 3. The write completes before the release, so the next holder reads it.
        f.write_sync(0, counter, local, 8)
            .map_err(fail("write counter"))?;
        // 4. Release: CAS my id -> 0 must find my id.
        let old = f
            .compare_swap_sync(0, lock, me, 0)
            .map_err(fail("unlock"))?;
        if old != me {
            return Err(format!("lock held by {old} while rank {} owned it", me - 1));
        }
    }
    b.wait(f).map_err(fail("barrier"))?;
    if f.rank() == 0 {
        let total = seg.load(LOCKED_COUNTER).map_err(fail("load"))?;
        let want = PER_RANK * u64::from(f.size());
        if total != want {
            return Err(format!(
                "locked counter is {total}, expected {want}: increments were lost"
            ));
        }
    }
    Ok(())
}

/// The byte `i` of piece `p` of message `k` from rank `from`.
fn pattern(from: Rank, k: u64, p: u64, i: u64) -> u8 {
    (u64::from(from) * 131 + k * 31 + p * 7 + i) as u8
}

const PIECE_LENS: [u64; 3] = [24, 1, 100];

fn gather_signal(ctx: &Ctx<'_>, _: &mut Barrier) -> Result<(), String> {
    let f = ctx.fabric;
    let (me, n) = (f.rank(), f.size());
    let to = (me + 1) % n;
    let from = (me + n - 1) % n;
    let seg = f.segment(CONF).map_err(fail("segment"))?;
    let mut ops = Vec::new();
    for k in 0..MESSAGES {
        // Three local pieces with a pattern unique to (me, k).
        let base = PIECES + (k % 8) * 512;
        let mut pieces = Vec::new();
        let mut at = base;
        for (p, &len) in PIECE_LENS.iter().enumerate() {
            let bytes: Vec<u8> = (0..len).map(|i| pattern(me, k, p as u64, i)).collect();
            seg.write(at, &bytes).map_err(fail("fill"))?;
            pieces.push(Piece {
                local: Loc::new(CONF, at),
                len,
            });
            at += len + 3;
        }
        let slot = Loc::new(CONF, SLOTS + (u64::from(me) * MESSAGES + k) * SLOT);
        ops.push(
            f.write_gather(to, slot, &pieces, Some(k))
                .map_err(fail("gathered write"))?,
        );
        // Local pieces are reused every 8 messages: wait for the write that used them.
        if ops.len() >= 8 {
            let op = ops.remove(0);
            f.wait(op, f.op_timeout()).map_err(fail("wait"))?;
        }
    }
    for op in ops {
        f.wait(op, f.op_timeout()).map_err(fail("wait"))?;
    }
    // Receive: each signal must find its data already in place.
    let mut seen = vec![false; MESSAGES as usize];
    let deadline = Instant::now() + f.op_timeout() * 2;
    let mut got = 0;
    while got < MESSAGES {
        let left = deadline.saturating_duration_since(Instant::now());
        let s = ctx
            .signals
            .recv_timeout(left)
            .map_err(|_| format!("only {got} of {MESSAGES} signals from rank {from} arrived"))?;
        if s.from != from || s.value >= MESSAGES {
            return Err(format!("unexpected signal {s:?}"));
        }
        if std::mem::replace(&mut seen[s.value as usize], true) {
            return Err(format!("signal {} from rank {from} arrived twice", s.value));
        }
        let slot = SLOTS + (u64::from(from) * MESSAGES + s.value) * SLOT;
        let total: u64 = PIECE_LENS.iter().sum();
        let mut buf = vec![0u8; total as usize];
        seg.read(slot, &mut buf).map_err(fail("read slot"))?;
        let mut i = 0usize;
        for (p, &len) in PIECE_LENS.iter().enumerate() {
            for j in 0..len {
                if buf[i] != pattern(from, s.value, p as u64, j) {
                    return Err(format!(
                        "signal {} arrived before its data (piece {p}, byte {j})",
                        s.value
                    ));
                }
                i += 1;
            }
        }
        got += 1;
    }
    Ok(())
}

/// Where the late-read case's pattern sits on the target and lands on the reader.
const LATE_SRC: u64 = SLOTS;
const LATE_DST: u64 = SLOTS + 8192;
const LATE_LEN: u64 = 4096;

/// A target that makes no fabric call stalls remote operations on providers that need its
/// progress; the initiator's wait times out, and the operations complete once the target
/// progresses again. The late read also checks the promise behind every timeout: a buffer
/// handed to the provider stays its own until the operation completes (the read's bytes
/// land whole, after the timeout, and later operations reuse nothing it still held).
fn progress_needed(ctx: &Ctx<'_>, b: &mut Barrier) -> Result<(), String> {
    let f = ctx.fabric;
    if !f.caps().target_progress || f.size() < 2 {
        return Ok(());
    }
    let word = Loc::new(CONF, PROGRESS_WORD);
    let seg = f.segment(CONF).map_err(fail("segment"))?;
    let late = |i: u64| (i.wrapping_mul(31) ^ 0x5a) as u8;
    if f.rank() == 1 {
        let bytes: Vec<u8> = (0..LATE_LEN).map(late).collect();
        seg.write(LATE_SRC, &bytes).map_err(fail("fill"))?;
    }
    b.wait(f).map_err(fail("barrier"))?;
    match f.rank() {
        1 => {
            // Make no fabric call for 2 s: remote operations on this memory must stall.
            ctx.progress.pause();
            std::thread::sleep(Duration::from_millis(2000));
            ctx.progress.resume();
        }
        0 => {
            // Rank 1 may still be polling the barrier (fabric calls progress it): give it
            // time to go quiet before the operations that must stall (generously: on a
            // loaded machine its pause may take a while to be scheduled).
            std::thread::sleep(Duration::from_millis(800));
            seg.write(LATE_DST, &vec![0u8; LATE_LEN as usize])
                .map_err(fail("clear"))?;
            let op = f.compare_swap(1, word, 0, 7).map_err(fail("cas"))?;
            let read = f
                .read(
                    1,
                    Loc::new(CONF, LATE_SRC),
                    Loc::new(CONF, LATE_DST),
                    LATE_LEN,
                )
                .map_err(fail("read"))?;
            match f.wait(op, Duration::from_millis(300)) {
                Err(FabricError::Timeout { .. }) => {}
                Ok(v) => return Err(format!("a target without progress served a CAS (old {v})")),
                Err(e) => return Err(format!("wrong error while the target slept: {e}")),
            }
            // A read may be served without the target (shm copies across processes
            // itself); where it is not, its wait times out like the CAS's.
            let read_late = match f.wait(read, Duration::from_millis(300)) {
                Ok(_) => false,
                Err(FabricError::Timeout { .. }) => true,
                Err(e) => return Err(format!("wrong error while the target slept: {e}")),
            };
            // Once the target progresses again, the same operations complete.
            let old = f
                .wait(op, f.op_timeout())
                .map_err(fail("cas after resume"))?;
            if old != 0 {
                return Err(format!("CAS found {old}, expected 0"));
            }
            if read_late {
                f.wait(read, f.op_timeout())
                    .map_err(fail("read after resume"))?;
            }
            let mut got = vec![0u8; LATE_LEN as usize];
            seg.read(LATE_DST, &mut got).map_err(fail("load"))?;
            if let Some(i) = (0..LATE_LEN).find(|&i| got[i as usize] != late(i)) {
                return Err(format!(
                    "the late read's byte {i} is {}, expected {}",
                    got[i as usize],
                    late(i)
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

fn drains_are_per_thread(ctx: &Ctx<'_>, _: &mut Barrier) -> Result<(), String> {
    let f = ctx.fabric;
    let word = Loc::new(CONF, SCRATCH + 16);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // A driver-like thread: submits its own fetch-adds and drains completions.
        let drainer = s.spawn(|| -> Result<u32, String> {
            let mine: Vec<crate::OpId> = (0..50)
                .map(|_| f.fetch_add(f.rank(), word, 1))
                .collect::<Result<_, _>>()
                .map_err(fail("submit"))?;
            let mut got = Vec::new();
            let mut out = Vec::new();
            let deadline = Instant::now() + f.op_timeout();
            while !stop.load(std::sync::atomic::Ordering::Acquire) || got.len() < mine.len() {
                f.drain_completions(&mut out);
                for (id, r) in out.drain(..) {
                    if !mine.contains(&id) {
                        return Err(format!("the drain took {id:?}, another thread's operation"));
                    }
                    r.map_err(fail("drained op"))?;
                    got.push(id);
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "only {} of {} own completions drained",
                        got.len(),
                        mine.len()
                    ));
                }
                std::thread::yield_now();
            }
            Ok(got.len() as u32)
        });
        // Meanwhile this thread waits for its own operations.
        let mut r = Ok(());
        for _ in 0..200 {
            if let Err(e) = f.fetch_add_sync(f.rank(), word, 1) {
                r = Err(format!("a waiter lost its completion: {e}"));
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
        let drained = drainer
            .join()
            .map_err(|_| "the drainer panicked".to_string())??;
        r?;
        if drained != 50 {
            return Err(format!("{drained} of 50 own completions drained"));
        }
        Ok(())
    })
}

/// CPU seconds this process has used (user + system), from /proc (Linux).
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux ABI Titus targets.
    Some((utime + stime) / 100.0)
}

fn idle_is_cheap(ctx: &Ctx<'_>, b: &mut Barrier) -> Result<(), String> {
    let f = ctx.fabric;
    b.wait(f).map_err(fail("barrier"))?;
    let Some(before) = process_cpu_seconds() else {
        return Ok(()); // Not Linux: nothing to measure.
    };
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let wall = t.elapsed().as_secs_f64();
    let used = process_cpu_seconds().unwrap_or(before) - before;
    // In-process backends run every rank in this process: the budget is per rank.
    let ranks_here = if f.caps().backend == "mem" {
        f.size() as f64
    } else {
        1.0
    };
    if used > 0.10 * wall * ranks_here {
        return Err(format!(
            "idle with a progress thread, this process used {used:.3} s of CPU in {wall:.2} s (over 10% per rank): it spins"
        ));
    }
    Ok(())
}

fn dead_peer_case(ctx: &Ctx<'_>, b: &mut Barrier) -> Result<(), String> {
    let f = ctx.fabric;
    if f.size() < 2 {
        return Ok(());
    }
    b.wait(f).map_err(fail("barrier"))?;
    match f.rank() {
        1 => {
            (ctx.die)();
            Ok(())
        }
        0 => {
            std::thread::sleep(Duration::from_millis(300));
            let timeout = Duration::from_secs(2);
            let t = Instant::now();
            // Some transports accept a few operations to a dead peer before noticing.
            for _ in 0..20 {
                let r = f
                    .read(1, Loc::new(CONF, 0), Loc::new(CONF, SCRATCH), 8)
                    .and_then(|op| f.wait(op, timeout));
                if let Err(e) = r {
                    let took = t.elapsed();
                    if took > timeout * 3 {
                        return Err(format!("the error took {took:?}: {e}"));
                    }
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err("operations on a dead peer kept succeeding".into())
        }
        _ => Ok(()),
    }
}

/// A progress thread that a case can pause and resume; signals go to one channel.
struct Control {
    fabric: std::sync::Arc<dyn Fabric>,
    tx: std::sync::mpsc::Sender<Signal>,
    thread: std::sync::Mutex<Option<crate::ProgressThread>>,
}

impl ProgressControl for Control {
    fn pause(&self) {
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            t.stop();
        }
    }

    fn resume(&self) {
        let mut slot = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            let tx = self.tx.clone();
            *slot = Some(crate::ProgressThread::spawn(
                self.fabric.clone(),
                move |s| {
                    let _ = tx.send(s);
                },
            ));
        }
    }
}

/// The harness for one rank: starts its progress thread, runs the suite, stops the
/// thread. `die` ends this rank abruptly (for the dead-peer case).
pub fn run_rank(
    fabric: std::sync::Arc<dyn Fabric>,
    die: &dyn Fn(),
    dead_peer: bool,
) -> Result<(), ConformanceFailure> {
    let (tx, rx) = std::sync::mpsc::channel();
    let ctl = Control {
        fabric: fabric.clone(),
        tx,
        thread: std::sync::Mutex::new(None),
    };
    ctl.resume();
    let ctx = Ctx {
        fabric: &*fabric,
        signals: &rx,
        progress: &ctl,
        die,
    };
    let result = run(&ctx, dead_peer);
    ctl.pause();
    result
}
